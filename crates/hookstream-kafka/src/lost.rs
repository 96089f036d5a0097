//! A topic lost while a service runs: deleted, or its ACLs revoked. At start
//! `topics::check_exist` refuses a missing topic; afterwards the only symptoms are records
//! Kafka never acknowledges and consumer errors, which a broker restarting also causes. So
//! after such a failure `TopicLoss` asks the broker about the topic itself (its metadata, at
//! most once per `CHECK_EVERY` per topic, through one long-lived client).
//!
//! A topic is **lost** when two answers at least `CONFIRM_FOR` apart called it missing (or
//! refused to this client), with only such answers between them, none more than `RUN_GAP`
//! after the one before. Any other answer — found, or no answer (an outage) — starts the
//! count again. So one stale answer from a broker that has just restarted, followed by hours
//! of success and then an outage, is not a loss. The caller then fails its task, which makes
//! the service unhealthy and exit; restarted, it stops at the start-up check naming the topic
//! until an operator acts. Before, a hand-off to a deleted topic was retried for ever behind a
//! green `/healthz`, its partition stuck.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookstream_config::KafkaConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tokio::time::Instant;

use crate::topics::{exists, TopicError};

/// How long the broker must keep saying a topic is gone before it is called lost: longer
/// than a topic's deletion and re-creation by hand, shorter than anyone waits for an alert.
pub const CONFIRM_FOR: Duration = Duration::from_secs(20);

/// At most one metadata request per topic this often, however many tasks report failures.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// Missing answers further apart than this are not one run. Longer than a hand-off's wait
/// between two failures (a produce times out after 30 s), so that a lost topic's answers,
/// which come only as failures do, still make a run.
const RUN_GAP: Duration = Duration::from_secs(60);

/// A metadata request's longest wait.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// How a topic is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    Missing,
    Unauthorized,
}

impl Gone {
    fn error(self, topic: &str) -> TopicError {
        match self {
            Gone::Missing => TopicError::Missing(topic.to_string()),
            Gone::Unauthorized => TopicError::Unauthorized(topic.to_string()),
        }
    }
}

/// What one metadata request said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Found,
    Gone(Gone),
    /// No answer (the broker unreachable, a timeout) or another error.
    Unsure,
}

/// What is known of a topic after the checks so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The last check found it.
    Present,
    /// Not found by the last check, or not checked yet: it may be passing through.
    Unsure,
}

/// The checks of one topic.
#[derive(Debug, Default)]
struct Seen {
    checked: Option<Instant>,
    last: Option<Answer>,
    /// The current run of gone answers: the first's and the last's time, and how.
    run: Option<(Instant, Instant, Gone)>,
}

impl Seen {
    fn fresh(&self, now: Instant) -> bool {
        self.checked
            .is_some_and(|at| now.duration_since(at) < CHECK_EVERY)
    }

    fn record(&mut self, answer: Answer, now: Instant) {
        self.checked = Some(now);
        self.last = Some(answer);
        self.run = match (answer, self.run) {
            (Answer::Gone(gone), Some((first, last, _))) if now.duration_since(last) <= RUN_GAP => {
                Some((first, now, gone))
            }
            (Answer::Gone(gone), _) => Some((now, now, gone)),
            (Answer::Found | Answer::Unsure, _) => None,
        };
    }

    /// `Err` once lost (see the module docs).
    fn standing(&self, topic: &str) -> Result<Standing, TopicError> {
        match (self.last, self.run) {
            (Some(Answer::Gone(_)), Some((first, last, gone)))
                if last.duration_since(first) >= CONFIRM_FOR =>
            {
                Err(gone.error(topic))
            }
            (Some(Answer::Found), _) => Ok(Standing::Present),
            _ => Ok(Standing::Unsure),
        }
    }
}

/// Tells a lost topic from a passing failure; one per client, shared by its tasks.
pub struct TopicLoss {
    kafka: KafkaConfig,
    /// Created at the first check, then kept (a client per check would connect, and
    /// authenticate, every time).
    client: Mutex<Option<Arc<BaseConsumer>>>,
    /// Per topic, so that one topic's slow check does not hold up another's.
    topics: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Seen>>>>,
}

impl TopicLoss {
    pub fn new(kafka: &KafkaConfig) -> Self {
        Self {
            kafka: kafka.clone(),
            client: Mutex::new(None),
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// Called after using `topic` failed: asks the broker unless someone did within
    /// `CHECK_EVERY`. `Err` (the topic missing or refused, naming it) once the topic is lost.
    pub async fn after_failure(&self, topic: &str) -> Result<Standing, TopicError> {
        let seen = self
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(topic.to_string())
            .or_default()
            .clone();
        // Held across the request: tasks failing on one topic together wait for one answer.
        let mut seen = seen.lock().await;
        if !seen.fresh(Instant::now()) {
            let answer = self.ask(topic).await;
            if let Answer::Gone(gone) = answer {
                if seen.run.is_none() {
                    tracing::warn!(topic, error = %gone.error(topic),
                        "the broker says this topic is gone; stopping unless it is back within {CONFIRM_FOR:?}");
                }
            }
            seen.record(answer, Instant::now());
        }
        seen.standing(topic)
    }

    async fn ask(&self, topic: &str) -> Answer {
        let client = {
            let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
            if client.is_none() {
                match crate::client_config(&self.kafka).create::<BaseConsumer>() {
                    Ok(c) => *client = Some(Arc::new(c)),
                    Err(e) => tracing::debug!(error = %e, "cannot make a client to check topics"),
                }
            }
            client.clone()
        };
        let Some(client) = client else {
            return Answer::Unsure;
        };
        let name = topic.to_string();
        let answer = tokio::task::spawn_blocking(move || exists(&client, &name, METADATA_TIMEOUT)).await;
        match answer {
            Ok(Ok(())) => Answer::Found,
            Ok(Err(TopicError::Missing(_))) => Answer::Gone(Gone::Missing),
            Ok(Err(TopicError::Unauthorized(_))) => Answer::Gone(Gone::Unauthorized),
            Ok(Err(e)) => {
                tracing::debug!(topic, error = %e, "cannot tell whether the topic still exists");
                Answer::Unsure
            }
            Err(e) => {
                tracing::debug!(topic, error = %e, "topic check did not finish");
                Answer::Unsure
            }
        }
    }

    /// Checks `topics` every `CHECK_EVERY` until the broker has found each of them (`Ok`) or
    /// one is lost (`Err`). For a consumer: librdkafka reports an unknown subscribed topic
    /// once, not on every poll, so its one error must start checks that go on by themselves.
    pub async fn watch(&self, topics: &[String]) -> Result<(), TopicError> {
        loop {
            let mut all_found = true;
            for topic in topics {
                all_found &= self.after_failure(topic).await? == Standing::Present;
            }
            if all_found {
                return Ok(());
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }
}

/// Whether a consumer error may mean one of its topics is gone (the consumer's error does not
/// say which).
pub fn may_be_lost(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::TopicAuthorizationFailed
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MISSING: Answer = Answer::Gone(Gone::Missing);

    /// Records `answers` at the given seconds; the standing after the last.
    fn after(answers: &[(u64, Answer)]) -> Result<Standing, TopicError> {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        for (s, a) in answers {
            seen.record(*a, t0 + Duration::from_secs(*s));
        }
        seen.standing("t")
    }

    #[test]
    fn gone_answers_spanning_the_confirmation_make_a_loss() {
        assert!(matches!(
            after(&[(0, MISSING), (10, MISSING), (20, MISSING)]),
            Err(TopicError::Missing(t)) if t == "t"
        ));
        // Two answers far enough apart, as a hand-off's failures (30 s each) bring them.
        assert!(after(&[(0, MISSING), (31, MISSING)]).is_err());
        assert!(matches!(
            after(&[
                (0, Answer::Gone(Gone::Unauthorized)),
                (25, Answer::Gone(Gone::Unauthorized))
            ]),
            Err(TopicError::Unauthorized(_))
        ));
    }

    #[test]
    fn one_gone_answer_or_a_short_run_is_not_a_loss() {
        assert_eq!(after(&[(0, MISSING)]).unwrap(), Standing::Unsure);
        assert_eq!(after(&[(0, MISSING), (19, MISSING)]).unwrap(), Standing::Unsure);
    }

    #[test]
    fn any_other_answer_starts_the_count_again() {
        // Found in between.
        assert_eq!(
            after(&[(0, MISSING), (10, Answer::Found), (25, MISSING)]).unwrap(),
            Standing::Unsure
        );
        // No answer in between (an outage) is not taken for a confirmation.
        assert_eq!(
            after(&[(0, MISSING), (10, Answer::Unsure), (25, MISSING)]).unwrap(),
            Standing::Unsure
        );
        // A stale gone answer, then a long silence (the topic used without failures), then one
        // more: not one run.
        assert_eq!(
            after(&[(0, MISSING), (3_600, MISSING)]).unwrap(),
            Standing::Unsure
        );
        assert!(after(&[(0, MISSING), (3_600, MISSING), (3_630, MISSING)]).is_err());
        // The last answer decides: found after a long run is present.
        assert_eq!(
            after(&[(0, MISSING), (30, MISSING), (40, Answer::Found)]).unwrap(),
            Standing::Present
        );
        assert_eq!(after(&[(0, Answer::Unsure)]).unwrap(), Standing::Unsure);
    }

    #[test]
    fn a_recent_check_is_reused() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        assert!(!seen.fresh(t0));
        seen.record(Answer::Found, t0);
        assert!(seen.fresh(t0 + Duration::from_secs(4)));
        assert!(!seen.fresh(t0 + CHECK_EVERY));
    }
}
