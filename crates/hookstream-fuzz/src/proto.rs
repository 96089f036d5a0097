//! `proto`: every protobuf record decoder of the Kafka topics.
//!
//! Input: one byte picks the message type, the rest is the record. A record that decodes
//! re-encodes to bytes that decode to the same message (unknown fields are dropped by both).

use std::fmt::Debug;

use hookstream_proto::{AttemptBatch, AttemptRecord, DeadLetter, DeliveryTask, EventEnvelope, Message};

pub fn proto(data: &[u8]) {
    let (kind, record) = data.split_first().map_or((0, data), |(k, rest)| (*k, rest));
    match kind % 5 {
        0 => round_trip::<EventEnvelope>(record),
        1 => round_trip::<DeliveryTask>(record),
        2 => round_trip::<DeadLetter>(record),
        3 => round_trip::<AttemptRecord>(record),
        _ => round_trip::<AttemptBatch>(record),
    }
}

fn round_trip<M: Message + Default + PartialEq + Debug>(record: &[u8]) {
    let Ok(message) = M::decode(record) else {
        return;
    };
    let encoded = message.encode_to_vec();
    assert_eq!(encoded.len(), message.encoded_len(), "encoded_len is exact");
    let again = M::decode(encoded.as_slice()).expect("our own encoding decodes");
    assert_eq!(again, message, "encode then decode gives the same message");
}
