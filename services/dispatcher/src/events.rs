//! The events role: consumes `hookstream.events` in the dispatchers' consumer group and
//! delivers each event to its endpoints. Undecodable records are dead-lettered with their
//! bytes and a reason; the partition moves on (invariant 5).

use std::sync::Arc;

use bytes::Bytes;
use hookstream_kafka::{Done, Fatal, Handler, Record, Start};
use hookstream_proto::{DeadLetter, EventEnvelope, Message as _, SourcePosition};

use crate::context::Context;
use crate::fanout::{self, Reroute};
use crate::handoff;
use crate::work::{done, now_ms, Finished, Read};

pub(crate) struct EventsRole {
    pub(crate) ctx: Arc<Context>,
}

pub(crate) struct EventWork {
    payload: Bytes,
    origin: SourcePosition,
}

impl Handler for EventsRole {
    type Work = EventWork;

    fn prepare(&self, record: Record) -> Start<EventWork> {
        Start::Now(EventWork {
            origin: SourcePosition {
                topic: record.topic,
                partition: record.partition,
                offset: record.offset,
            },
            payload: record.payload,
        })
    }

    async fn run(self: Arc<Self>, work: EventWork) -> Result<Done, Fatal> {
        self.ctx.metrics.in_flight.inc();
        let result = process(&self.ctx, work).await;
        self.ctx.metrics.in_flight.dec();
        done(result)
    }
}

async fn process(ctx: &Context, work: EventWork) -> Finished {
    let event = match EventEnvelope::decode(work.payload.clone()) {
        Ok(e) => e,
        Err(e) => {
            ctx.metrics.events.with_label_values(&["undecodable"]).inc();
            let letter = DeadLetter {
                reason: format!("undecodable event record: {e}"),
                error_class: "decode".into(),
                raw: work.payload,
                origin: Some(work.origin.clone()),
                handled: Some(work.origin),
                dead_at_ms: now_ms(),
                ..Default::default()
            };
            return handoff::dead_letter(ctx, letter, "").await;
        }
    };
    fanout::route_and_deliver(ctx, event, Read::first(work.origin), Reroute::default()).await
}
