//! The faults of the `chaos` scenario: their kinds, which mechanisms of the pipeline each can
//! make redo work (for attributing duplicates), and the seeded plan of one run. Pure: the
//! scenario (`chaos.rs`) carries the plan out.

use std::time::Duration;

use rand::{Rng, SeedableRng};

/// A service of the chaos topology: what a kill hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Relay,
    /// A dispatcher with `roles = ["events"]`.
    Events,
    /// A dispatcher with `roles = ["retry"]`.
    Retry,
    /// A dispatcher with `roles = ["dlq_sink"]`.
    DlqSink,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Relay, Role::Events, Role::Retry, Role::DlqSink];

    pub fn name(self) -> &'static str {
        match self {
            Role::Relay => "relay",
            Role::Events => "events",
            Role::Retry => "retry",
            Role::DlqSink => "dlq_sink",
        }
    }
}

/// What can strike the pipeline in a chaos run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL of a relay, interleaved with the other kills.
    RelayKill,
    /// SIGKILL of an events-role dispatcher, interleaved.
    EventsKill,
    /// SIGKILL of a retry-role dispatcher, interleaved.
    RetryKill,
    /// SIGKILL of a DLQ-sink dispatcher, interleaved.
    DlqSinkKill,
    /// SIGKILL of an events-role dispatcher with nothing else going on (the 7 s check).
    EventsKillAlone,
    /// A rolling restart of an events-role dispatcher: a new instance joins, then the old one
    /// gets SIGTERM (the 1 s hand-over check).
    EventsSigterm,
    /// `kafka.sh kill9`, then `start`.
    BrokerRestart,
    /// In a cluster of brokers: SIGKILL of the broker leading most of the events topic's
    /// partitions (`kafka.sh kill9 NODE`), then `start NODE`.
    BrokerLeaderKill,
    /// In a cluster: every broker in turn stopped (SIGTERM) and started again, the next one
    /// once every partition of the events topic has all its replicas in sync, as patching does.
    BrokerRollingRestart,
    /// `postgres.sh stop fast`, then `start`.
    PgRestartFast,
    /// `postgres.sh stop immediate` (no checkpoint: crash recovery at start), then `start`.
    PgRestartImmediate,
    /// `postgres.sh stop`, `--db-outage-s`, then `start`.
    DbOutage,
    /// Not planned: a service exited by itself (a crash of the system under test).
    UnplannedExit,
}

/// How a duplicate delivery came about, as the receivers and the events topic show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redo {
    /// The event reached the events topic twice: a relay re-shipped a batch whose commit it
    /// never saw.
    Reship,
    /// An event's first attempt was made twice: the events role redid work whose offset was
    /// not committed.
    EventsRole,
    /// A retry (attempt 2 or later) was made twice: the retry role redid it.
    RetryRole,
}

impl FaultKind {
    /// The report's key.
    pub fn key(self) -> &'static str {
        match self {
            FaultKind::RelayKill => "relay_kill",
            FaultKind::EventsKill => "events_role_kill",
            FaultKind::RetryKill => "retry_role_kill",
            FaultKind::DlqSinkKill => "dlq_sink_kill",
            FaultKind::EventsKillAlone => "events_role_kill_alone",
            FaultKind::EventsSigterm => "events_role_sigterm",
            FaultKind::BrokerRestart => "broker_restart",
            FaultKind::BrokerLeaderKill => "broker_leader_kill",
            FaultKind::BrokerRollingRestart => "broker_rolling_restart",
            FaultKind::PgRestartFast => "pg_restart_fast",
            FaultKind::PgRestartImmediate => "pg_restart_immediate",
            FaultKind::DbOutage => "db_outage",
            FaultKind::UnplannedExit => "unplanned_exit",
        }
    }

    /// Whether the plan lets the pipeline catch up before and after it (not the interleaved
    /// kills).
    pub fn isolated(self) -> bool {
        !matches!(
            self,
            FaultKind::RelayKill
                | FaultKind::EventsKill
                | FaultKind::RetryKill
                | FaultKind::DlqSinkKill
                | FaultKind::UnplannedExit
        )
    }

    /// The service a kill or a SIGTERM hits.
    pub fn role(self) -> Option<Role> {
        match self {
            FaultKind::RelayKill => Some(Role::Relay),
            FaultKind::EventsKill | FaultKind::EventsKillAlone | FaultKind::EventsSigterm => {
                Some(Role::Events)
            }
            FaultKind::RetryKill => Some(Role::Retry),
            FaultKind::DlqSinkKill => Some(Role::DlqSink),
            _ => None,
        }
    }

    /// Whether this kind of fault can make `redo` happen. A relay re-ships a batch when it
    /// dies or loses PostgreSQL or Kafka mid-batch; a consumer redoes uncommitted work when
    /// it dies, hands over, or its group is disrupted by a broker restart. PostgreSQL faults
    /// touch no consumer's offsets; the DLQ sink makes no deliveries.
    pub fn can_cause(self, redo: Redo) -> bool {
        use FaultKind::*;
        if self.is_broker() {
            return true;
        }
        match redo {
            Redo::Reship => matches!(
                self,
                RelayKill | PgRestartFast | PgRestartImmediate | DbOutage | UnplannedExit
            ),
            Redo::EventsRole => matches!(self, EventsKill | EventsKillAlone | EventsSigterm | UnplannedExit),
            Redo::RetryRole => matches!(self, RetryKill | UnplannedExit),
        }
    }

    /// A fault of Kafka's brokers.
    pub fn is_broker(self) -> bool {
        matches!(
            self,
            FaultKind::BrokerRestart | FaultKind::BrokerLeaderKill | FaultKind::BrokerRollingRestart
        )
    }
}

/// When a planned fault may strike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Before {
    /// This long after the previous fault.
    Pause(Duration),
    /// Once the pipeline has caught up after the previous fault (nothing waiting in the
    /// outbox or the events topic), then `SETTLE`.
    CaughtUp,
}

/// How long the pipeline runs undisturbed after catching up, before the next isolated fault.
pub const SETTLE: Duration = Duration::from_secs(5);

/// One fault of the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub kind: FaultKind,
    /// Which instance of its role (kills and SIGTERMs).
    pub instance: usize,
    pub before: Before,
}

/// How many faults of each kind a run plans.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub kills_per_service: usize,
    /// Events-role SIGKILLs alone, and as many rolling restarts.
    pub handovers: usize,
    pub broker_restarts: usize,
    /// In a cluster: SIGKILLs of the broker leading most events partitions, and rolling
    /// restarts of every broker.
    pub broker_leader_kills: usize,
    pub broker_rolling_restarts: usize,
    pub pg_restarts: usize,
    /// 0: no outage.
    pub db_outage_s: u64,
}

/// The plan of a run, one fault after another: the events-role hand-overs alone, then every
/// service killed `kills_per_service` times (the four roles in turn, a random instance each,
/// `every_s` apart), then the broker restarts, the PostgreSQL restarts (fast and immediate in
/// turn) and the outage, each once the pipeline caught up after the one before.
pub fn plan(seed: u64, counts: Counts, every_s: (f64, f64), instances: usize) -> Vec<Planned> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let instances = instances.max(1);
    let alone = |kind, instance| Planned {
        kind,
        instance,
        before: Before::CaughtUp,
    };
    for i in 0..counts.handovers {
        out.push(alone(FaultKind::EventsKillAlone, rng.gen_range(0..instances)));
        out.push(alone(FaultKind::EventsSigterm, i % instances));
    }
    let kill_kinds = [
        FaultKind::RelayKill,
        FaultKind::EventsKill,
        FaultKind::RetryKill,
        FaultKind::DlqSinkKill,
    ];
    for round in 0..counts.kills_per_service {
        for kind in kill_kinds {
            let before = if round == 0 && kind == FaultKind::RelayKill {
                Before::CaughtUp
            } else {
                Before::Pause(Duration::from_secs_f64(rng.gen_range(every_s.0..=every_s.1)))
            };
            out.push(Planned {
                kind,
                instance: rng.gen_range(0..instances),
                before,
            });
        }
    }
    for _ in 0..counts.broker_restarts {
        out.push(alone(FaultKind::BrokerRestart, 0));
    }
    for _ in 0..counts.broker_leader_kills {
        out.push(alone(FaultKind::BrokerLeaderKill, 0));
    }
    for _ in 0..counts.broker_rolling_restarts {
        out.push(alone(FaultKind::BrokerRollingRestart, 0));
    }
    for i in 0..counts.pg_restarts {
        let kind = match i % 2 {
            0 => FaultKind::PgRestartFast,
            _ => FaultKind::PgRestartImmediate,
        };
        out.push(alone(kind, 0));
    }
    if counts.db_outage_s > 0 {
        out.push(alone(FaultKind::DbOutage, 0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> Counts {
        Counts {
            kills_per_service: 3,
            handovers: 2,
            broker_restarts: 1,
            broker_leader_kills: 0,
            broker_rolling_restarts: 0,
            pg_restarts: 3,
            db_outage_s: 5,
        }
    }

    #[test]
    fn the_plan_has_every_fault_asked_for_in_its_order() {
        let p = plan(7, counts(), (1.0, 3.0), 2);
        let kinds: Vec<FaultKind> = p.iter().map(|f| f.kind).collect();
        let count = |k| kinds.iter().filter(|&&x| x == k).count();
        assert_eq!(p.len(), 4 + 12 + 1 + 3 + 1);
        assert_eq!(count(FaultKind::EventsKillAlone), 2);
        assert_eq!(count(FaultKind::EventsSigterm), 2);
        for k in [
            FaultKind::RelayKill,
            FaultKind::EventsKill,
            FaultKind::RetryKill,
            FaultKind::DlqSinkKill,
        ] {
            assert_eq!(count(k), 3, "{k:?}");
        }
        assert_eq!(count(FaultKind::PgRestartFast), 2);
        assert_eq!(count(FaultKind::PgRestartImmediate), 1);
        assert_eq!(kinds.last(), Some(&FaultKind::DbOutage));
        // The kills are interleaved, the four roles in turn, 1–3 s apart.
        assert_eq!(
            &kinds[4..8],
            &[
                FaultKind::RelayKill,
                FaultKind::EventsKill,
                FaultKind::RetryKill,
                FaultKind::DlqSinkKill
            ]
        );
        for f in &p[5..16] {
            match f.before {
                Before::Pause(d) => assert!((1.0..=3.0).contains(&d.as_secs_f64()), "{d:?}"),
                Before::CaughtUp => panic!("an interleaved kill waits for nothing: {f:?}"),
            }
        }
        assert!(p.iter().all(|f| f.instance < 2));
    }

    #[test]
    fn the_cluster_faults_come_after_the_broker_restarts_each_alone() {
        let counts = Counts {
            broker_leader_kills: 3,
            broker_rolling_restarts: 1,
            ..counts()
        };
        let p = plan(7, counts, (1.0, 3.0), 2);
        let cluster: Vec<&Planned> = p.iter().filter(|f| f.kind.is_broker()).collect();
        let kinds: Vec<FaultKind> = cluster.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                FaultKind::BrokerRestart,
                FaultKind::BrokerLeaderKill,
                FaultKind::BrokerLeaderKill,
                FaultKind::BrokerLeaderKill,
                FaultKind::BrokerRollingRestart
            ]
        );
        assert!(cluster
            .iter()
            .all(|f| f.before == Before::CaughtUp && f.kind.isolated()));
        for redo in [Redo::Reship, Redo::EventsRole, Redo::RetryRole] {
            assert!(FaultKind::BrokerLeaderKill.can_cause(redo));
            assert!(FaultKind::BrokerRollingRestart.can_cause(redo));
        }
    }

    #[test]
    fn a_seed_is_one_plan() {
        let a = plan(7, counts(), (1.0, 3.0), 2);
        assert_eq!(a, plan(7, counts(), (1.0, 3.0), 2));
        assert_ne!(a, plan(8, counts(), (1.0, 3.0), 2));
    }

    #[test]
    fn only_the_faults_that_can_redo_a_thing_are_blamed_for_it() {
        assert!(FaultKind::RelayKill.can_cause(Redo::Reship));
        assert!(!FaultKind::RelayKill.can_cause(Redo::EventsRole));
        assert!(FaultKind::EventsKill.can_cause(Redo::EventsRole));
        assert!(!FaultKind::EventsKill.can_cause(Redo::RetryRole));
        assert!(FaultKind::RetryKill.can_cause(Redo::RetryRole));
        for redo in [Redo::Reship, Redo::EventsRole, Redo::RetryRole] {
            assert!(
                !FaultKind::DlqSinkKill.can_cause(redo),
                "the sink delivers nothing"
            );
            assert!(FaultKind::BrokerRestart.can_cause(redo));
        }
        assert!(FaultKind::DbOutage.can_cause(Redo::Reship));
        assert!(!FaultKind::PgRestartFast.can_cause(Redo::EventsRole));
    }
}
