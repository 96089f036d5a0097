//! Properties over generated values (proptest), the structured counterpart of the fuzz
//! targets: the fuzzer explores bytes, these explore the shapes of valid values.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hookstream_delivery::parse_retry_after;
use hookstream_delivery::ssrf::is_forbidden;
use hookstream_proto::{DeliveryTask, EventEnvelope, Message as _, SourcePosition};
use hookstream_signing::{signature_header, verify, Secret, VerifyError};
use hookstream_store::filter::EventFilter;
use proptest::prelude::*;

fn secret() -> impl Strategy<Value = Secret> {
    prop::collection::vec(any::<u8>(), 24..=64)
        .prop_map(|key| Secret::parse(&format!("whsec_{}", B64.encode(key))).unwrap())
}

fn segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,8}"
}

fn event_type() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 1..4).prop_map(|s| s.join("."))
}

fn envelope() -> impl Strategy<Value = EventEnvelope> {
    (
        (".*", ".*", ".*", ".*", ".*"),
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::hash_map(".{0,8}", ".{0,8}", 0..4),
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()),
    )
        .prop_map(
            |(
                (event_id, tenant_id, event_type, aggregate_type, aggregate_id),
                payload,
                headers,
                (c, o, v, r),
            )| {
                EventEnvelope {
                    event_id,
                    tenant_id,
                    event_type,
                    aggregate_type,
                    aggregate_id,
                    payload: payload.into(),
                    headers,
                    created_at_ms: c,
                    outbox_id: o,
                    subscription_version: v,
                    relayed_at_ms: r,
                    ..Default::default()
                }
            },
        )
}

proptest! {
    #[test]
    fn what_we_sign_verifies_within_the_tolerance(
        s in secret(),
        id in ".{1,40}",
        ts in any::<i64>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
        skew in -300i64..=300,
    ) {
        let header = signature_header([&s], &id, ts, &body);
        let now = ts.saturating_add(skew);
        prop_assert_eq!(verify(&s, &id, &ts.to_string(), &header, &body, now, 300), Ok(()));
    }

    #[test]
    fn any_timestamp_is_an_answer_not_a_panic(ts in any::<i64>(), now in any::<i64>(), tol in any::<i64>()) {
        let s = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let header = signature_header([&s], "id", ts, b"{}");
        let got = verify(&s, "id", &ts.to_string(), &header, b"{}", now, tol);
        let within = tol >= 0 && now.abs_diff(ts) <= tol.unsigned_abs();
        prop_assert_eq!(got, if within { Ok(()) } else { Err(VerifyError::StaleTimestamp) });
    }

    #[test]
    fn envelopes_and_tasks_round_trip(
        event in envelope(),
        endpoint_id in ".*",
        numbers in (any::<u32>(), any::<i64>(), any::<i64>(), any::<i32>(), any::<i64>()),
    ) {
        let bytes = event.encode_to_vec();
        prop_assert_eq!(EventEnvelope::decode(bytes.as_slice()).unwrap(), event.clone());
        let (attempt, due_at_ms, first_attempt_at_ms, partition, offset) = numbers;
        let task = DeliveryTask {
            event: Some(event),
            endpoint_id,
            attempt,
            due_at_ms,
            first_attempt_at_ms,
            origin: Some(SourcePosition { topic: "t".into(), partition, offset }),
            ..Default::default()
        };
        let bytes = task.encode_to_vec();
        prop_assert_eq!(DeliveryTask::decode(bytes.as_slice()).unwrap(), task);
    }

    #[test]
    fn filters_match_themselves_and_what_is_under_them(p in event_type(), rest in event_type()) {
        prop_assert!(EventFilter::new(&[&p]).unwrap().matches(&p));
        let wildcard = EventFilter::new(&[format!("{p}.*")]).unwrap();
        let under = format!("{p}.{rest}");
        let beside = format!("{p}x.{rest}");
        prop_assert!(wildcard.matches(&under));
        prop_assert!(!wildcard.matches(&p));
        prop_assert!(!wildcard.matches(&beside));
    }

    #[test]
    fn an_embedded_ipv4_address_is_judged_as_itself(v4 in any::<u32>().prop_map(Ipv4Addr::from)) {
        let forbidden = is_forbidden(IpAddr::V4(v4));
        prop_assert_eq!(is_forbidden(IpAddr::V6(v4.to_ipv6_mapped())), forbidden);
        let [a, b, c, d] = v4.octets();
        let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
        prop_assert_eq!(is_forbidden(IpAddr::V6(nat64)), forbidden);
        prop_assert!(is_forbidden(IpAddr::V6(v4.to_ipv6_compatible())));
    }

    #[test]
    fn retry_after_seconds_and_dates(secs in any::<u64>(), now in 0i64..200_000_000_000, ahead in 0u32..10_000_000) {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(now as u64);
        let cap = hookstream_delivery::MAX_RETRY_AFTER;
        prop_assert_eq!(parse_retry_after(&secs.to_string(), base), Some(Duration::from_secs(secs).min(cap)));
        let date = chrono::DateTime::from_timestamp(now + i64::from(ahead), 0).unwrap();
        let text = date.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        prop_assert_eq!(parse_retry_after(&text, base), Some(Duration::from_secs(u64::from(ahead)).min(cap)));
    }
}
