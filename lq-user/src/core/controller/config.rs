//! Receiver (load-balancer) parameters, seed 003 section 10 (Table 3) and sections 4.1,
//! 6.3, 6.4, 6.5, plus the kernel-side choices of how weights are programmed.
//!
//! Every value is validated once, in [`ControllerConfig::validate`], so that the rest of the
//! controller can rely on the ranges (for example `miss_count >= 2`, `t_reweight > 0`)
//! without re-checking them.

use std::time::Duration;

use thiserror::Error;

/// Default T_notify (seed section 10: 20 ms).
pub const T_NOTIFY_DEFAULT: Duration = Duration::from_millis(20);
/// Smallest T_notify the seed permits (section 10: 10-100 ms).
pub const T_NOTIFY_MIN: Duration = Duration::from_millis(10);
/// Largest T_notify the seed permits.
pub const T_NOTIFY_MAX: Duration = Duration::from_millis(100);
/// Default miss_count (section 10: 3).
pub const MISS_COUNT_DEFAULT: u8 = 3;
/// miss_count range (section 10: 2-10).
pub const MISS_COUNT_RANGE: std::ops::RangeInclusive<u8> = 2..=10;
/// Default damping gain g (section 6.4: RECOMMENDED 0.5).
pub const GAIN_DEFAULT: f64 = 0.5;
/// Permitted gain range (section 6.4: 0.25 to 1.0; 1.0 disables damping).
pub const GAIN_MIN: f64 = 0.25;
/// Upper end of the gain range.
pub const GAIN_MAX: f64 = 1.0;
/// Default number of buckets of a resilient nexthop group (the kernel's own default).
pub const RESILIENT_BUCKETS_DEFAULT: u16 = 128;
/// Default idle timer of a resilient group (the kernel's own default, 120 s).
pub const RESILIENT_IDLE_TIMER_DEFAULT: Duration = Duration::from_secs(120);
/// The kernel takes the resilient timers as `clock_t` (USER_HZ = 100) in a `u32`.
pub const CLOCK_T_MAX: Duration = Duration::from_millis(u32::MAX as u64 * 10);

/// How the qualities of parallel spine -> remote links are folded into one value per
/// member (seed section 6.3 lets the receiver use "the minimum or weighted average").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ParallelLinkAggregation {
    /// The worst parallel link decides: conservative, never overloads a congested member
    /// link of a bundle that the spine hashes onto per flow.
    #[default]
    Minimum,
    /// Mean of the link LQSs weighted by provisioned link capacity (slow-plane data from the
    /// NNH mapping, never the diagnostics Link Capacity: section 5.5 forbids using it).
    CapacityWeightedMean,
}

/// Kind of kernel nexthop group the weights are programmed into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    /// `type resilient`: buckets keep flows in place when weights change, so frequent
    /// reweighting (every T_reweight) moves only the minimum share of flows.
    Resilient {
        /// Number of hash buckets (the kernel needs at least 1).
        buckets: u16,
        /// A bucket idle for this long may be migrated to an underweight member.
        idle_timer: Duration,
        /// After this long unbalanced, buckets migrate even if busy; 0 disables it.
        unbalanced_timer: Duration,
    },
    /// `type mpath`: hash-threshold; any weight change may remap many flows.
    HashThreshold,
}

impl Default for GroupKind {
    fn default() -> Self {
        Self::Resilient {
            buckets: RESILIENT_BUCKETS_DEFAULT,
            idle_timer: RESILIENT_IDLE_TIMER_DEFAULT,
            unbalanced_timer: Duration::ZERO,
        }
    }
}

/// How member weights are computed from the path signals (issue 12; docs/weights.md).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum WeightFunction {
    /// Seed 003 sections 6.3/6.4: `target = quality / sum(quality)`, damped by
    /// `w += g (target - w)` every T_reweight. Appendix B is reproduced exactly.
    #[default]
    Seed,
    /// `weight = capacity x m`, `m` an integral controller on the CL relative to the group,
    /// with a deadband and quantisation hysteresis; eligibility by liveness, not
    /// `LQS > 0` (an opt-in departure from 4.1 and 6.3, docs/weights.md).
    Integral(IntegralParams),
}

/// An opt-in departure from section 6.3 (docs/weights.md "Gray failures"): a member whose
/// spine reports data loss on its link to the remote node (CL 7, section 5.3: "Data loss
/// occurring or link unusable") while that link advertises at least `min_available` of the
/// path's capacity as available (section 5.4) counts as `path_quality` 0: pruned at once
/// (6.4's exception for a transition to 0) and back as soon as either condition ends.
///
/// Why: Appendix A.4 bounds the LQS of a dropping link at 25 ("multiplication by 0.1")
/// only in a sample with a drop (X is per sample), and 6.3 prunes only at LQS 0, so a link
/// that loses what it is offered while nearly idle (a gray failure: a bad optic, a
/// corrupting ASIC port) reads 25 in some samples and up to 255 in the others, never 0: it
/// keeps between 3 % (25 / (25 + 3 x 255)) and a full share of a four-spine group, and a
/// resilient group keeps every busy flow already on it. Section 5.2's monotonicity keeps a helper from scoring such a
/// link below a congested one (more utilisation must not raise the LQS), so only the
/// receiver can tell the two apart: a congested link that drops has little available
/// bandwidth, a failing one has most of it. Only interoperability fields are read (CL and
/// available bandwidth, Tier 1 and 2); never the diagnostics (5.5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrayFailurePrune {
    /// The smallest fraction of the path's capacity the lossy link must still advertise as
    /// available, in [[`GRAY_FAILURE_MIN_AVAILABLE_RANGE`]].
    pub min_available: f64,
}

/// Default [`GrayFailurePrune::min_available`]: a link that drops while at most a tenth
/// utilised (`U_smooth <= 0.1` with Appendix A's available bandwidth). A congested link
/// whose traffic has just left (the load-balancers moved it, its CL still held at 7 by
/// A.6's T_hold_down) reaches that after ~44 ms without traffic (A.3's alpha_fall 0.1 per
/// 2 ms sample), at 0.5 after ~13 ms: both inside the 100 ms hold, so the prune also keeps
/// such a just-vacated path out until the hold ends (the netns demo's capacity cut: 22-27
/// times per job at 0.9, 27-35 at 0.5). 0.9 detects a dead link in 26-57 ms there, 0.5 in
/// 14-23 ms (docs/weights.md "Gray failures").
pub const GRAY_FAILURE_MIN_AVAILABLE_DEFAULT: f64 = 0.9;
/// Permitted [`GrayFailurePrune::min_available`]: below 0.1 a congested link's transient
/// drops at 90 % utilisation would prune it; 1.0 prunes only a link with no traffic at all.
pub const GRAY_FAILURE_MIN_AVAILABLE_RANGE: std::ops::RangeInclusive<f64> = 0.1..=1.0;

impl Default for GrayFailurePrune {
    fn default() -> Self {
        Self {
            min_available: GRAY_FAILURE_MIN_AVAILABLE_DEFAULT,
        }
    }
}

impl GrayFailurePrune {
    /// Whether a member with the spine's worst CL `cl`, its summed available bandwidth
    /// `available_gbps` and the capacity `capacity_gbps` to compare it with is a gray
    /// failure. `false` without an entry or without a known capacity.
    pub fn applies(
        &self,
        cl: Option<u8>,
        available_gbps: Option<f64>,
        capacity_gbps: Option<f64>,
    ) -> bool {
        match (cl, available_gbps, capacity_gbps) {
            (Some(7), Some(a), Some(c)) if c > 0.0 && c.is_finite() => a >= self.min_available * c,
            _ => false,
        }
    }
}

/// Parameters of [`WeightFunction::Integral`] (see `controller::integral`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntegralParams {
    /// A member whose congestion signal (0..1: CL / 7, or the queue depth if worse)
    /// exceeds the group's traffic-weighted mean by more than this is throttled.
    pub deadband: f64,
    /// Multiplicative decrease of `m` per T_reweight while throttled.
    pub decrease: f64,
    /// Additive recovery of `m` per T_reweight otherwise.
    pub increase: f64,
    /// Smallest `m` of a member whose path capacity the slow plane provisions (BGP Link
    /// Bandwidth or configuration): how far congestion alone may push it below its
    /// capacity share.
    /// Under elastic (TCP) load the capacity share is what minimises job time (TCP fills
    /// every path), and the smallest link reads drops (CL 7) even at its capacity share,
    /// so a measured capacity keeps at least 3/4 of its share (docs/weights.md).
    pub floor: f64,
    /// Largest `m`: a member whose path has spare capacity (its advertised available
    /// bandwidth over its capacity exceeds the group's mean by more than `deadband`) while
    /// it is not more congested than the mean may take up to this multiple of its capacity
    /// share (the tail of a job: drained paths take the flows of the busiest). 1: never
    /// above the capacity share.
    pub ceiling: f64,
    /// Smallest `m` of a member whose remote capacity is only estimated (peak-held
    /// available bandwidth, which misses a capacity cut under load) or unknown.
    pub floor_estimated: f64,
    /// Programme new kernel weights only when a member's fraction moved by at least this
    /// much since the last application (eligibility changes are applied at once).
    pub hysteresis: f64,
    /// Half-life of the peak-held available bandwidth that estimates a remote link's
    /// capacity when the helper sends no diagnostics link capacity.
    pub capacity_half_life: Duration,
}

impl Default for IntegralParams {
    fn default() -> Self {
        Self {
            deadband: 0.15,
            decrease: 0.05,
            increase: 0.01,
            floor: 0.75,
            ceiling: 2.0,
            floor_estimated: 0.25,
            hysteresis: 0.02,
            capacity_half_life: Duration::from_secs(30),
        }
    }
}

impl IntegralParams {
    /// Range checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        let ok = unit(self.deadband)
            && (0.0..1.0).contains(&self.decrease)
            && unit(self.increase)
            && self.floor > 0.0
            && self.floor <= 1.0
            && self.ceiling.is_finite()
            && (1.0..=16.0).contains(&self.ceiling)
            && self.floor_estimated > 0.0
            && self.floor_estimated <= 1.0
            && (0.0..0.5).contains(&self.hysteresis)
            && !self.capacity_half_life.is_zero();
        if ok {
            Ok(())
        } else {
            Err(ConfigError::Integral(*self))
        }
    }
}

/// Largest integer weight the kernel accepts for one group member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightResolution {
    /// 8-bit weights 1..=255: every kernel with nexthop objects (>= 5.3).
    #[default]
    Bits8,
    /// 16-bit weights 1..=65535 (`weight_high`, kernel >= 6.12).
    Bits16,
}

impl WeightResolution {
    /// The largest kernel weight.
    pub const fn max_weight(self) -> u32 {
        match self {
            Self::Bits8 => 255,
            Self::Bits16 => 65_535,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    /// Section 10: T_notify is 10-100 ms.
    #[error("t_notify {0:?} is outside 10..=100 ms (seed 003 section 10)")]
    TNotify(Duration),
    /// Section 10: miss_count is 2-10.
    #[error("miss_count {0} is outside 2..=10 (seed 003 section 10)")]
    MissCount(u8),
    /// Section 10: T_reweight >= T_notify.
    #[error(
        "t_reweight {t_reweight:?} is shorter than t_notify {t_notify:?} (seed 003 section 10)"
    )]
    TReweight {
        /// The refused value.
        t_reweight: Duration,
        /// The configured T_notify.
        t_notify: Duration,
    },
    /// Section 6.4: g is 0.25-1.0.
    #[error("damping gain {0} is outside 0.25..=1.0 (seed 003 section 6.4)")]
    Gain(f64),
    /// A resilient group needs at least one bucket.
    #[error("a resilient group needs at least 1 bucket")]
    Buckets,
    /// Integral weight function parameters out of range.
    #[error(
        "integral weight function parameters out of range: deadband, increase and floor in \
         (0, 1], decrease in [0, 1), hysteresis in [0, 0.5), capacity half-life > 0 ({0:?})"
    )]
    Integral(IntegralParams),
    /// The gray-failure prune's threshold out of range.
    #[error("gray-failure-min-available {0} is outside 0.1..=1.0")]
    GrayFailureMinAvailable(f64),
    /// The gray-failure prune sets a path quality, which only the seed's function reads.
    #[error(
        "gray-failure-prune needs weight-function = \"seed\": the integral function does not \
         prune by path quality"
    )]
    GrayFailureWithIntegral,
    /// The kernel carries the resilient timers as u32 clock_t (centiseconds).
    #[error("resilient group timer {0:?} does not fit a u32 of centiseconds")]
    Timer(Duration),
}

/// The controller's parameters. `Default` gives the seed's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerConfig {
    /// T_notify: the fabric-wide advertisement period (section 10: one value fabric-wide).
    pub t_notify: Duration,
    /// miss_count: a neighbor silent for miss_count x T_notify is failed (section 6.5).
    pub miss_count: u8,
    /// T_reweight: at most one weight application per destination per interval (6.4).
    pub t_reweight: Duration,
    /// Damping gain g (6.4).
    pub gain: f64,
    /// Parallel spine -> remote link aggregation (6.3).
    pub parallel_links: ParallelLinkAggregation,
    /// Scale targets by member path capacity: section 4.1's `weight(path_i) =
    /// f(FARE_capacity(i), LQ_quality(i))`, with 6.3's quality. On by default; with equal
    /// capacities, or none known, it is 6.3 exactly.
    pub capacity_weighting: bool,
    /// Kernel group kind.
    pub group: GroupKind,
    /// Kernel weight range.
    pub weight_resolution: WeightResolution,
    /// The weight function.
    pub weight_function: WeightFunction,
    /// The gray-failure prune, an opt-in departure from 6.3 ([`GrayFailurePrune`]); off
    /// (`None`) by default.
    pub gray_failure: Option<GrayFailurePrune>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            t_notify: T_NOTIFY_DEFAULT,
            miss_count: MISS_COUNT_DEFAULT,
            // Section 6.4: T_reweight is RECOMMENDED to equal T_notify.
            t_reweight: T_NOTIFY_DEFAULT,
            gain: GAIN_DEFAULT,
            parallel_links: ParallelLinkAggregation::default(),
            capacity_weighting: true,
            group: GroupKind::default(),
            weight_resolution: WeightResolution::default(),
            weight_function: WeightFunction::default(),
            gray_failure: None,
        }
    }
}

impl ControllerConfig {
    /// The weights read the entries' available bandwidth (the integral weight function,
    /// the gray-failure prune); without them an entry's LQS, CL and liveness are all its
    /// weight reads (6.3, 6.5), which the receiver's stamp words carry
    /// (`PathMirror::set_qualities_only`).
    pub fn reads_available_bandwidth(&self) -> bool {
        matches!(self.weight_function, WeightFunction::Integral(_)) || self.gray_failure.is_some()
    }

    /// The defaults with another T_notify, and T_reweight following it (6.4 recommends
    /// T_reweight = T_notify).
    pub fn with_t_notify(t_notify: Duration) -> Self {
        Self {
            t_notify,
            t_reweight: t_notify,
            ..Self::default()
        }
    }

    /// Check every parameter against the seed's ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(T_NOTIFY_MIN..=T_NOTIFY_MAX).contains(&self.t_notify) {
            return Err(ConfigError::TNotify(self.t_notify));
        }
        if !MISS_COUNT_RANGE.contains(&self.miss_count) {
            return Err(ConfigError::MissCount(self.miss_count));
        }
        if self.t_reweight < self.t_notify {
            return Err(ConfigError::TReweight {
                t_reweight: self.t_reweight,
                t_notify: self.t_notify,
            });
        }
        // `contains` is false for NaN, so NaN is refused too.
        if !(GAIN_MIN..=GAIN_MAX).contains(&self.gain) {
            return Err(ConfigError::Gain(self.gain));
        }
        if let WeightFunction::Integral(p) = &self.weight_function {
            p.validate()?;
        }
        if let Some(g) = self.gray_failure {
            if !GRAY_FAILURE_MIN_AVAILABLE_RANGE.contains(&g.min_available) {
                return Err(ConfigError::GrayFailureMinAvailable(g.min_available));
            }
            if matches!(self.weight_function, WeightFunction::Integral(_)) {
                return Err(ConfigError::GrayFailureWithIntegral);
            }
        }
        if let GroupKind::Resilient {
            buckets,
            idle_timer,
            unbalanced_timer,
        } = self.group
        {
            if buckets == 0 {
                return Err(ConfigError::Buckets);
            }
            for t in [idle_timer, unbalanced_timer] {
                if t > CLOCK_T_MAX {
                    return Err(ConfigError::Timer(t));
                }
            }
        }
        Ok(())
    }

    /// T_notify in nanoseconds.
    pub fn t_notify_ns(&self) -> u64 {
        duration_ns(self.t_notify)
    }

    /// T_reweight in nanoseconds.
    pub fn t_reweight_ns(&self) -> u64 {
        duration_ns(self.t_reweight)
    }

    /// miss_count x T_notify: the failure-detection (and entry-ageing) time, section 6.5.
    pub fn dead_interval_ns(&self) -> u64 {
        self.t_notify_ns()
            .saturating_mul(u64::from(self.miss_count))
    }

    /// 1.1 x T_notify: after this a neighbor is shown as stale (the largest jittered
    /// periodic interval, section 7.2, has passed without a datagram).
    pub fn stale_after_ns(&self) -> u64 {
        self.t_notify_ns().saturating_mul(11) / 10
    }
}

/// A `Duration` in nanoseconds, saturating (a `Duration` can exceed `u64` ns).
pub fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = ControllerConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.t_notify, Duration::from_millis(20));
        assert_eq!(c.t_reweight, c.t_notify);
        assert_eq!(c.miss_count, 3);
        assert_eq!(c.gain, 0.5);
        assert_eq!(c.parallel_links, ParallelLinkAggregation::Minimum);
        assert!(c.capacity_weighting);
        assert_eq!(
            c.group,
            GroupKind::Resilient {
                buckets: 128,
                idle_timer: Duration::from_secs(120),
                unbalanced_timer: Duration::ZERO
            }
        );
        assert_eq!(c.weight_resolution.max_weight(), 255);
        assert_eq!(c.dead_interval_ns(), 60_000_000);
        assert_eq!(c.stale_after_ns(), 22_000_000);
        // The gray-failure prune departs from 6.3: never on unless asked for.
        assert_eq!(c.gray_failure, None);
    }

    #[test]
    fn gray_failure_prune_is_checked_and_judges_loss_with_spare_capacity() {
        let on = |min_available| ControllerConfig {
            gray_failure: Some(GrayFailurePrune { min_available }),
            ..ControllerConfig::default()
        };
        assert_eq!(on(0.5).validate(), Ok(()));
        assert_eq!(on(0.1).validate(), Ok(()));
        assert_eq!(on(1.0).validate(), Ok(()));
        for bad in [0.09, 1.01, f64::NAN, -1.0] {
            assert!(matches!(
                on(bad).validate(),
                Err(ConfigError::GrayFailureMinAvailable(_))
            ));
        }
        let integral = ControllerConfig {
            weight_function: WeightFunction::Integral(IntegralParams::default()),
            ..on(0.5)
        };
        assert_eq!(
            integral.validate(),
            Err(ConfigError::GrayFailureWithIntegral)
        );
        let g = GrayFailurePrune::default();
        assert_eq!(g.min_available, 0.9);
        // Loss on a link with 99 of its 100 Mbit/s available: a failing link.
        assert!(g.applies(Some(7), Some(0.099), Some(0.1)));
        // At the threshold it counts; below it does not (a congested link drops).
        assert!(g.applies(Some(7), Some(0.0901), Some(0.1)));
        assert!(!g.applies(Some(7), Some(0.0899), Some(0.1)));
        let half = GrayFailurePrune { min_available: 0.5 };
        assert!(half.applies(Some(7), Some(0.05), Some(0.1)));
        assert!(!half.applies(Some(7), Some(0.049), Some(0.1)));
        // No loss, no entry, no capacity known: never.
        assert!(!g.applies(Some(6), Some(0.1), Some(0.1)));
        assert!(!g.applies(None, Some(0.1), Some(0.1)));
        assert!(!g.applies(Some(7), None, Some(0.1)));
        assert!(!g.applies(Some(7), Some(0.1), None));
        assert!(!g.applies(Some(7), Some(0.1), Some(0.0)));
    }

    #[test]
    fn range_ends_are_accepted_and_outside_refused() {
        for ms in [10, 100] {
            let c = ControllerConfig::with_t_notify(Duration::from_millis(ms));
            assert_eq!(c.validate(), Ok(()), "{ms}");
        }
        for ms in [9, 101, 0] {
            let c = ControllerConfig::with_t_notify(Duration::from_millis(ms));
            assert!(matches!(c.validate(), Err(ConfigError::TNotify(_))), "{ms}");
        }
        for m in [2, 10] {
            let c = ControllerConfig {
                miss_count: m,
                ..Default::default()
            };
            assert_eq!(c.validate(), Ok(()));
        }
        for m in [0, 1, 11] {
            let c = ControllerConfig {
                miss_count: m,
                ..Default::default()
            };
            assert_eq!(c.validate(), Err(ConfigError::MissCount(m)));
        }
        for g in [0.25, 1.0] {
            let c = ControllerConfig {
                gain: g,
                ..Default::default()
            };
            assert_eq!(c.validate(), Ok(()));
        }
        for g in [0.2, 1.01, f64::NAN, f64::INFINITY] {
            let c = ControllerConfig {
                gain: g,
                ..Default::default()
            };
            assert!(matches!(c.validate(), Err(ConfigError::Gain(_))));
        }
    }

    #[test]
    fn t_reweight_must_not_be_shorter_than_t_notify() {
        let c = ControllerConfig {
            t_reweight: Duration::from_millis(19),
            ..Default::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::TReweight { .. })));
        let c = ControllerConfig {
            t_reweight: Duration::from_millis(40),
            ..Default::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn resilient_parameters_are_checked() {
        let c = ControllerConfig {
            group: GroupKind::Resilient {
                buckets: 0,
                idle_timer: Duration::ZERO,
                unbalanced_timer: Duration::ZERO,
            },
            ..Default::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::Buckets));
        let c = ControllerConfig {
            group: GroupKind::Resilient {
                buckets: 8,
                idle_timer: CLOCK_T_MAX + Duration::from_millis(10),
                unbalanced_timer: Duration::ZERO,
            },
            ..Default::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::Timer(_))));
        let c = ControllerConfig {
            group: GroupKind::HashThreshold,
            weight_resolution: WeightResolution::Bits16,
            ..Default::default()
        };
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.weight_resolution.max_weight(), 65_535);
    }
}
