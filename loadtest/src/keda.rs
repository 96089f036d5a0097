//! KEDA's Kafka scaler and the Kubernetes HPA it drives, emulated: from a consumer group's
//! offsets to a replica count, by the rules the Helm chart's ScaledObject configures. Pure
//! (no I/O; the time is passed in), so the rules are unit-tested here; `autoscale.rs` reads
//! the offsets from outside the group and starts and stops real dispatchers.
//!
//! What is emulated, and how the originals behave:
//!
//! - **The scaler** (KEDA `pkg/scalers/kafka_scaler.go`). A partition's lag is its high
//!   watermark minus the group's committed offset. A partition without a committed offset
//!   counts its whole high watermark with `offsetResetPolicy: earliest` (the chart's; KEDA
//!   assumes the log starts at 0, which on a topic retention has not trimmed is high − low)
//!   and 1 with `latest`. The total is the sum over the topic's partitions. With
//!   `allowIdleConsumers: false` (the chart's), when total ÷ `lagThreshold` (integer
//!   division) exceeds the partition count the total is cut to partitions × `lagThreshold`,
//!   so the HPA never asks for more consumers than there are partitions. The trigger is
//!   active while the total exceeds `activationLagThreshold`.
//! - **KEDA's own loop**, every `pollingInterval`: only with `minReplicaCount: 0` does KEDA
//!   scale by itself, 0 → 1 when the trigger is active and to 0 once it has been inactive for
//!   `cooldownPeriod`; everything between 1 and the maximum is the HPA's.
//! - **The HPA** (`pkg/controller/podautoscaler`) on KEDA's external metric with an
//!   `AverageValue` target of `lagThreshold`: usage ratio = metric ÷ (`lagThreshold` ×
//!   current replicas); within the controller's tolerance (0.1) the count is kept, otherwise
//!   desired = ceil(metric ÷ `lagThreshold`). Then `behavior`: stabilization over the
//!   recommendations of each direction's window (scaling up takes their minimum, scaling down
//!   their maximum; the first recommendation is the count the HPA found), then the rate
//!   policies (replicas added and removed within a policy's period count against it;
//!   `selectPolicy: Max` takes the policy allowing the larger change, `Min` the smaller,
//!   `Disabled` none), clamped to [max(min, 1), max].
//! - **Timing**: the HPA asks KEDA's metrics server every sync period (15 s by default) and
//!   KEDA reads the lag on each request; KEDA's activation loop runs every `pollingInterval`
//!   (15 s in the chart). Both are emulated as one loop every `pollingInterval`.

/// Where a group without a committed offset starts (`offsetResetPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    // KEDA's other policy; the chart sets `earliest`, so only the tests use it.
    #[cfg_attr(not(test), allow(dead_code))]
    Latest,
}

/// One partition of the topic, as read from outside the group.
pub use hookstream_kafka::PartitionOffsets;

/// The Kafka trigger's metadata.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trigger {
    pub lag_threshold: i64,
    pub activation_lag_threshold: i64,
    pub offset_reset: OffsetReset,
    pub allow_idle_consumers: bool,
}

/// What the scaler reports at one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Total lag over the partitions.
    pub total_lag: i64,
    /// The metric handed to the HPA (the total, cut at partitions × threshold).
    pub metric: i64,
    pub active: bool,
}

impl Trigger {
    /// KEDA's lag of one partition.
    pub fn partition_lag(&self, p: &PartitionOffsets) -> i64 {
        match (p.committed, self.offset_reset) {
            (Some(c), _) => p.high - c,
            (None, OffsetReset::Earliest) => p.high,
            (None, OffsetReset::Latest) => 1,
        }
    }

    pub fn read(&self, partitions: &[PartitionOffsets]) -> Reading {
        let total_lag: i64 = partitions.iter().map(|p| self.partition_lag(p)).sum();
        let mut metric = total_lag;
        let count = partitions.len() as i64;
        if !self.allow_idle_consumers && total_lag / self.lag_threshold.max(1) > count {
            metric = count * self.lag_threshold;
        }
        Reading {
            total_lag,
            metric,
            active: total_lag > self.activation_lag_threshold,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Pods,
    // The chart's policies are all `Pods`; the tests cover the HPA's other kind.
    #[cfg_attr(not(test), allow(dead_code))]
    Percent,
}

/// One HPA scaling policy: at most `value` pods (or percent) per `period_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub kind: PolicyKind,
    pub value: u32,
    pub period_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Max,
    Min,
    #[cfg_attr(not(test), allow(dead_code))]
    Disabled,
}

/// The HPA `behavior` of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub stabilization_s: f64,
    pub policies: Vec<Policy>,
    pub select: Select,
}

/// A ScaledObject with its HPA behaviour: what the chart renders.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledObject {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub polling_s: f64,
    pub cooldown_s: f64,
    pub trigger: Trigger,
    pub scale_up: Rules,
    pub scale_down: Rules,
}

impl ScaledObject {
    /// The chart's defaults (`helm/hookstream/values.yaml`, `dispatcher.autoscaling`).
    pub fn chart_defaults() -> Self {
        Self {
            min_replicas: 2,
            max_replicas: 6,
            polling_s: 15.0,
            cooldown_s: 300.0,
            trigger: Trigger {
                lag_threshold: 10_000,
                activation_lag_threshold: 0,
                offset_reset: OffsetReset::Earliest,
                allow_idle_consumers: false,
            },
            scale_up: Rules {
                stabilization_s: 0.0,
                policies: vec![Policy {
                    kind: PolicyKind::Pods,
                    value: 2,
                    period_s: 60.0,
                }],
                select: Select::Max,
            },
            scale_down: Rules {
                stabilization_s: 600.0,
                policies: vec![Policy {
                    kind: PolicyKind::Pods,
                    value: 1,
                    period_s: 300.0,
                }],
                select: Select::Min,
            },
        }
    }

    /// The same object with every time constant divided by `factor` (a run `factor` times
    /// shorter than in a cluster).
    pub fn time_scaled(&self, factor: f64) -> Self {
        let rules = |r: &Rules| Rules {
            stabilization_s: r.stabilization_s / factor,
            policies: r
                .policies
                .iter()
                .map(|p| Policy {
                    period_s: p.period_s / factor,
                    ..*p
                })
                .collect(),
            select: r.select,
        };
        Self {
            polling_s: self.polling_s / factor,
            cooldown_s: self.cooldown_s / factor,
            scale_up: rules(&self.scale_up),
            scale_down: rules(&self.scale_down),
            ..self.clone()
        }
    }
}

/// The HPA controller's tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const TOLERANCE: f64 = 0.1;

/// One poll: what was read and what was decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub t_s: f64,
    pub reading: Reading,
    /// Replicas before the poll.
    pub current: u32,
    /// The metric's count (after the tolerance), before behaviour and bounds.
    pub desired: u32,
    /// Replicas after the poll.
    pub replicas: u32,
}

/// KEDA and the HPA over time: the recommendations and scale events their windows read.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    so: ScaledObject,
    /// (time, unstabilized recommendation).
    recommendations: Vec<(f64, u32)>,
    /// (time, replicas added) and (time, replicas removed).
    ups: Vec<(f64, u32)>,
    downs: Vec<(f64, u32)>,
    last_active_s: f64,
}

impl Autoscaler {
    /// Created at `now_s` with `current` replicas (the HPA's first recommendation).
    pub fn new(so: ScaledObject, now_s: f64, current: u32) -> Self {
        Self {
            so,
            recommendations: vec![(now_s, current)],
            ups: Vec::new(),
            downs: Vec::new(),
            last_active_s: now_s,
        }
    }

    pub fn scaled_object(&self) -> &ScaledObject {
        &self.so
    }

    /// One poll at `now_s` with `current` replicas and the scaler's `reading`.
    pub fn poll(&mut self, now_s: f64, current: u32, reading: Reading) -> Decision {
        if reading.active {
            self.last_active_s = now_s;
        }
        let desired = self.metric_replicas(current, reading.metric);
        let replicas = if self.so.min_replicas == 0 && current == 0 {
            // KEDA's activation: the HPA does not run at zero.
            u32::from(reading.active)
        } else if self.so.min_replicas == 0
            && !reading.active
            && now_s - self.last_active_s >= self.so.cooldown_s
        {
            0
        } else {
            self.hpa(now_s, current, desired)
        };
        if replicas > current {
            self.ups.push((now_s, replicas - current));
        } else if replicas < current && replicas > 0 {
            self.downs.push((now_s, current - replicas));
        }
        Decision {
            t_s: now_s,
            reading,
            current,
            desired,
            replicas,
        }
    }

    /// The external metric's replica count with an `AverageValue` target.
    fn metric_replicas(&self, current: u32, metric: i64) -> u32 {
        let target = self.so.trigger.lag_threshold.max(1) as f64;
        let ceil = (metric.max(0) as f64 / target).ceil() as u32;
        if current == 0 {
            return ceil;
        }
        let ratio = metric as f64 / (target * f64::from(current));
        if (1.0 - ratio).abs() <= TOLERANCE {
            current
        } else {
            ceil
        }
    }

    /// Stabilization, then the rate policies and the bounds (the HPA's
    /// `normalizeDesiredReplicasWithBehaviors`).
    fn hpa(&mut self, now_s: f64, current: u32, desired: u32) -> u32 {
        let up_cutoff = now_s - self.so.scale_up.stabilization_s;
        let down_cutoff = now_s - self.so.scale_down.stabilization_s;
        let (mut up, mut down) = (desired, desired);
        for &(t, r) in &self.recommendations {
            if t > up_cutoff {
                up = up.min(r);
            }
            if t > down_cutoff {
                down = down.max(r);
            }
        }
        let oldest = up_cutoff.min(down_cutoff);
        self.recommendations.retain(|&(t, _)| t > oldest);
        self.recommendations.push((now_s, desired));
        let stabilized = current.max(up).min(down);

        let min = self.so.min_replicas.max(1);
        let max = self.so.max_replicas;
        if stabilized > current {
            let limit = self.limit(now_s, current, &self.so.scale_up, true).max(current);
            stabilized.min(max.min(limit))
        } else if stabilized < current {
            let limit = self
                .limit(now_s, current, &self.so.scale_down, false)
                .min(current);
            stabilized.max(min.max(limit))
        } else {
            stabilized
        }
    }

    /// How far the policies let the count go in one direction from `current`.
    fn limit(&self, now_s: f64, current: u32, rules: &Rules, up: bool) -> u32 {
        let changed = |events: &[(f64, u32)], period: f64| -> i64 {
            events
                .iter()
                .filter(|(t, _)| *t > now_s - period)
                .map(|(_, n)| i64::from(*n))
                .sum()
        };
        let current_i = i64::from(current);
        let proposals = rules.policies.iter().map(|p| {
            let start = current_i - changed(&self.ups, p.period_s) + changed(&self.downs, p.period_s);
            let v = i64::from(p.value);
            match (p.kind, up) {
                (PolicyKind::Pods, true) => start + v,
                (PolicyKind::Pods, false) => start - v,
                (PolicyKind::Percent, true) => (start as f64 * (1.0 + v as f64 / 100.0)).ceil() as i64,
                (PolicyKind::Percent, false) => (start as f64 * (1.0 - v as f64 / 100.0)) as i64,
            }
        });
        // Max picks the largest change: the highest limit up, the lowest down.
        let limit = match (rules.select, up) {
            (Select::Disabled, _) => current_i,
            (Select::Max, true) | (Select::Min, false) => proposals.max().unwrap_or(current_i),
            (Select::Min, true) | (Select::Max, false) => proposals.min().unwrap_or(current_i),
        };
        limit.clamp(0, i64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(committed: Option<i64>, high: i64) -> PartitionOffsets {
        PartitionOffsets {
            committed,
            low: 0,
            high,
        }
    }

    fn trigger(threshold: i64) -> Trigger {
        Trigger {
            lag_threshold: threshold,
            activation_lag_threshold: 0,
            offset_reset: OffsetReset::Earliest,
            allow_idle_consumers: false,
        }
    }

    /// The chart's object with a threshold of 100 and a minimum of 1.
    fn object() -> ScaledObject {
        let mut so = ScaledObject::chart_defaults();
        so.trigger.lag_threshold = 100;
        so.min_replicas = 1;
        so
    }

    /// A reading of `lag` on six partitions (all of it on the first), threshold 100.
    fn reading(lag: i64) -> Reading {
        let mut parts = vec![offsets(Some(0), 0); 6];
        parts[0].high = lag;
        trigger(100).read(&parts)
    }

    #[test]
    fn lag_is_high_minus_committed_and_a_partition_without_commits_counts_per_reset_policy() {
        let t = trigger(100);
        assert_eq!(t.partition_lag(&offsets(Some(40), 100)), 60);
        let fresh = PartitionOffsets {
            committed: None,
            low: 30,
            high: 100,
        };
        assert_eq!(t.partition_lag(&fresh), 100, "KEDA counts from 0, not from low");
        assert_eq!(fresh.lag(), 70, "the consumers' own view starts at low");
        let latest = Trigger {
            offset_reset: OffsetReset::Latest,
            ..t
        };
        assert_eq!(latest.partition_lag(&fresh), 1);
    }

    #[test]
    fn the_metric_is_cut_at_the_partition_count_unless_idle_consumers_are_allowed() {
        let parts = vec![offsets(Some(0), 1_000); 6];
        let r = trigger(100).read(&parts);
        assert_eq!((r.total_lag, r.metric), (6_000, 600));
        let idle = Trigger {
            allow_idle_consumers: true,
            ..trigger(100)
        };
        assert_eq!(idle.read(&parts).metric, 6_000);
        // One partition: 699 / 100 = 6 > 1, cut at 1 × 100.
        let r = trigger(100).read(&[offsets(Some(0), 699)]);
        assert_eq!(r.metric, 100);
        // Integer division: 696 / 100 = 6, not above 6 partitions, so not cut.
        let r = trigger(100).read(&[offsets(Some(0), 116); 6]);
        assert_eq!(r.metric, 696);
    }

    #[test]
    fn desired_is_the_ceiling_of_lag_over_threshold_within_the_bounds() {
        let mut so = object();
        so.scale_up.policies[0].value = 10; // no rate limit for this test
        let mut a = Autoscaler::new(so, 0.0, 1);
        let d = a.poll(15.0, 1, reading(250));
        assert_eq!((d.desired, d.replicas), (3, 3));
        // 10 × the threshold on 6 partitions: cut at 6, and max 6.
        let d = a.poll(30.0, 3, reading(1_000));
        assert_eq!((d.reading.metric, d.desired, d.replicas), (600, 6, 6));
    }

    #[test]
    fn within_the_tolerance_the_count_is_kept() {
        let mut a = Autoscaler::new(object(), 0.0, 3);
        // 310 / (100 × 3) = 1.03: within 10 %, stays 3 although ceil would say 4.
        assert_eq!(a.poll(15.0, 3, reading(310)).replicas, 3);
        // 350: 1.17, outside: 4.
        assert_eq!(a.poll(30.0, 3, reading(350)).replicas, 4);
    }

    #[test]
    fn scale_up_adds_at_most_two_pods_per_period() {
        let mut a = Autoscaler::new(object(), 0.0, 1);
        assert_eq!(a.poll(15.0, 1, reading(600)).replicas, 3);
        // Still 600 (6 wanted) but 2 were added within the last 60 s.
        assert_eq!(a.poll(30.0, 3, reading(600)).replicas, 3);
        assert_eq!(a.poll(74.0, 3, reading(600)).replicas, 3);
        assert_eq!(a.poll(75.5, 3, reading(600)).replicas, 5);
        assert_eq!(a.poll(136.0, 5, reading(600)).replicas, 6);
    }

    #[test]
    fn scale_down_waits_for_the_stabilization_window_then_removes_one_pod_per_period() {
        let so = object().time_scaled(10.0); // window 60 s, 1 pod per 30 s
        let mut a = Autoscaler::new(so, 0.0, 1);
        a.poll(1.5, 1, reading(500));
        assert_eq!(a.poll(3.0, 3, reading(500)).replicas, 3);
        assert_eq!(a.poll(9.0, 3, reading(500)).replicas, 5);
        // The lag is gone at 12 s; the window remembers 5 until 69 s.
        let mut t = 12.0;
        while t < 69.0 {
            assert_eq!(a.poll(t, 5, reading(0)).replicas, 5, "at {t}");
            t += 1.5;
        }
        assert_eq!(a.poll(69.5, 5, reading(0)).replicas, 4);
        assert_eq!(a.poll(90.0, 4, reading(0)).replicas, 4, "one pod per 30 s");
        assert_eq!(a.poll(99.6, 4, reading(0)).replicas, 3);
    }

    #[test]
    fn the_scale_down_window_starts_with_the_count_found() {
        // The HPA remembers the replicas it found as a recommendation: no scale-in within the
        // window after it is created, even with no lag at all.
        let mut a = Autoscaler::new(object(), 0.0, 4);
        assert_eq!(a.poll(15.0, 4, reading(0)).replicas, 4);
        assert_eq!(a.poll(601.0, 4, reading(0)).replicas, 3);
    }

    #[test]
    fn activation_scales_from_and_to_zero_only_with_a_minimum_of_zero() {
        let mut so = object();
        so.min_replicas = 0;
        so.trigger.activation_lag_threshold = 50;
        // Readings by this object's trigger (activation above 50).
        let trigger = so.trigger;
        let reading = |lag: i64| trigger.read(&[offsets(Some(0), lag)]);
        let mut a = Autoscaler::new(so, 0.0, 0);
        assert_eq!(
            a.poll(15.0, 0, reading(40)).replicas,
            0,
            "not above the activation threshold"
        );
        let d = a.poll(30.0, 0, reading(60));
        assert!(d.reading.active);
        assert_eq!(d.replicas, 1, "activation goes to 1, not to ceil(60 / 100)");
        assert_eq!(a.poll(45.0, 1, reading(0)).replicas, 1);
        assert_eq!(
            a.poll(329.0, 1, reading(0)).replicas,
            1,
            "cooldown 300 s after 30 s"
        );
        assert_eq!(a.poll(330.0, 1, reading(0)).replicas, 0);
        // With a minimum of 1, inactivity never scales to zero.
        let mut a = Autoscaler::new(object(), 0.0, 1);
        assert_eq!(a.poll(1_000.0, 1, reading(0)).replicas, 1);
    }

    #[test]
    fn percent_policies_round_up_and_a_disabled_direction_never_moves() {
        let mut so = object();
        so.scale_up.policies = vec![Policy {
            kind: PolicyKind::Percent,
            value: 100,
            period_s: 60.0,
        }];
        so.scale_down.select = Select::Disabled;
        let mut a = Autoscaler::new(so, 0.0, 1);
        assert_eq!(a.poll(15.0, 1, reading(600)).replicas, 2, "100 % of 1");
        assert_eq!(a.poll(80.0, 2, reading(600)).replicas, 4);
        assert_eq!(a.poll(2_000.0, 4, reading(0)).replicas, 4, "scale-down disabled");
    }

    #[test]
    fn time_scaling_divides_every_time_constant() {
        let so = ScaledObject::chart_defaults().time_scaled(5.0);
        assert_eq!(so.polling_s, 3.0);
        assert_eq!(so.cooldown_s, 60.0);
        assert_eq!(so.scale_up.policies[0].period_s, 12.0);
        assert_eq!(so.scale_down.stabilization_s, 120.0);
        assert_eq!(so.scale_down.policies[0].period_s, 60.0);
        assert_eq!(so.trigger.lag_threshold, 10_000);
    }
}
