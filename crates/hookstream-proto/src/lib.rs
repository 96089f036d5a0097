//! Protobuf messages that travel on Hookstream's Kafka topics (compiled from `proto/`).
//!
//! `EventEnvelope` is what the outbox-relay produces to `hookstream.events`; `DeliveryTask`
//! is what the retry tiers carry; `DeadLetter` goes to `hookstream.dlq`; `AttemptRecord` (one
//! per record; the attempt sink also reads an `AttemptBatch`) to `hookstream.attempts`.

pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/hookstream.v1.rs"));
}

pub use prost::Message;
pub use v1::*;

/// The header that marks a record of `hookstream.attempts` as an `AttemptBatch`, and its value.
/// A record without it is one `AttemptRecord`.
pub const BATCH_HEADER: &str = "hookstream-batch";
/// The value of [`BATCH_HEADER`] on an `AttemptBatch`.
pub const BATCH_OF_ATTEMPTS: &str = "attempts";

/// The field number of `AttemptBatch.records`.
const BATCH_RECORDS_FIELD: u32 = 4;

/// Appends `record` to the encoded `AttemptBatch` in `buf` (an empty `buf` is an empty batch):
/// a batch is built as records finish, without holding them decoded.
pub fn append_attempt(record: &AttemptRecord, buf: &mut Vec<u8>) {
    prost::encoding::message::encode(BATCH_RECORDS_FIELD, record, buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(attempt: u32) -> AttemptRecord {
        AttemptRecord {
            event_id: format!("event-{attempt}"),
            attempt,
            status: 200,
            response: prost::bytes::Bytes::from_static(b"ok"),
            ..Default::default()
        }
    }

    #[test]
    fn appended_records_decode_as_one_batch_in_order() {
        let mut buf = Vec::new();
        for n in 1..=3 {
            append_attempt(&record(n), &mut buf);
        }
        let batch = AttemptBatch::decode(buf.as_slice()).unwrap();
        assert_eq!(batch.records, vec![record(1), record(2), record(3)]);
        assert_eq!(
            buf,
            AttemptBatch {
                records: batch.records
            }
            .encode_to_vec()
        );
    }

    #[test]
    fn a_reader_of_single_records_refuses_a_batch() {
        let mut buf = Vec::new();
        append_attempt(&record(1), &mut buf);
        let err = AttemptRecord::decode(buf.as_slice()).unwrap_err();
        assert!(err.to_string().contains("wire type"), "{err}");
    }
}
