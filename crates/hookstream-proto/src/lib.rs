//! Protobuf messages that travel on Hookstream's Kafka topics (compiled from `proto/`).
//!
//! `EventEnvelope` is what the outbox-relay produces to `hookstream.events`; `DeliveryTask`
//! is what the retry tiers carry; `DeadLetter` goes to `hookstream.dlq`; `AttemptRecord`
//! to `hookstream.attempts`.

pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/hookstream.v1.rs"));
}

pub use prost::Message;
pub use v1::*;
