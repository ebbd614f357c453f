//! Helper (spine) parameters: the detection pipeline of seed 003 Appendix A (T_sample,
//! alpha_rise, alpha_fall, the A.4 weights, the A.5 thresholds, T_hold_down) and the wire
//! parameters of section 10 (T_notify, CHANGE_THRESHOLD), with the seed's defaults.
//!
//! Every value is validated once, in [`HelperParams::validate`], so that the pipeline and the
//! advertiser can rely on the ranges (for example a non-zero T_sample, alphas in (0, 1),
//! non-negative weights that keep the LQS map monotone) without checking them again.

use std::ops::RangeInclusive;
use std::time::Duration;

use thiserror::Error;

/// Default T_sample (A.1: SHOULD be 2 ms).
pub const T_SAMPLE_DEFAULT: Duration = Duration::from_millis(2);
/// T_sample range (A.1: implementations MAY use 1-5 ms).
pub const T_SAMPLE_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_millis(5);
/// Default alpha_rise (A.3: RECOMMENDED 0.5).
pub const ALPHA_RISE_DEFAULT: f64 = 0.5;
/// alpha_rise range (A.3: 0.3 to 0.8).
pub const ALPHA_RISE_RANGE: RangeInclusive<f64> = 0.3..=0.8;
/// Default alpha_fall (A.3: RECOMMENDED 0.1).
pub const ALPHA_FALL_DEFAULT: f64 = 0.1;
/// alpha_fall range (A.3: 0.05 to 0.2).
pub const ALPHA_FALL_RANGE: RangeInclusive<f64> = 0.05..=0.2;
/// Default T_hold_down (A.6: RECOMMENDED 100 ms).
pub const T_HOLD_DOWN_DEFAULT: Duration = Duration::from_millis(100);
/// T_hold_down range (A.6: SHOULD be 50-200 ms).
pub const T_HOLD_DOWN_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(50)..=Duration::from_millis(200);
/// Default T_notify (section 10: 20 ms).
pub const T_NOTIFY_DEFAULT: Duration = Duration::from_millis(20);
/// T_notify range (section 10: 10-100 ms).
pub const T_NOTIFY_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_millis(100);
/// Default CHANGE_THRESHOLD (section 10: 25).
pub const CHANGE_THRESHOLD_DEFAULT: u8 = 25;
/// CHANGE_THRESHOLD range (section 10: 10-50).
pub const CHANGE_THRESHOLD_RANGE: RangeInclusive<u8> = 10..=50;

/// The A.5 thresholds on smoothed metrics. Each is "strictly greater than" (`F_smooth >
/// 0.50` gives CL 6). Because A.5 is evaluated top to bottom and every condition is upward
/// closed in its own indicator, any thresholds keep the per-indicator monotonicity of
/// section 5.3; validation additionally requires the "heavy" threshold of PFC and of ECN
/// to lie above the "active" one, or CL 5 / CL 3 could never be reached and the levels
/// would stop meaning "worse than the one below" (A.5: "higher CL values always indicate
/// worse conditions than lower CL values").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClThresholds {
    /// CL 6 (SEVERE): F_smooth above this (A.5: 0.50).
    pub pfc_heavy: f64,
    /// CL 5 (HIGH): F_smooth above this (A.5: 0.10).
    pub pfc_active: f64,
    /// CL 4 (ELEVATED): E_smooth above this (A.5: 0.50).
    pub ecn_heavy: f64,
    /// CL 3 (MODERATE): E_smooth above this (A.5: 0.10).
    pub ecn_active: f64,
    /// CL 2 (LOW): D_smooth above this (A.5: 0.50).
    pub queue_building: f64,
    /// CL 1 (MINIMAL): U_smooth above this (A.5: 0.80).
    pub utilization_high: f64,
}

impl Default for ClThresholds {
    fn default() -> Self {
        Self {
            pfc_heavy: 0.50,
            pfc_active: 0.10,
            ecn_heavy: 0.50,
            ecn_active: 0.10,
            queue_building: 0.50,
            utilization_high: 0.80,
        }
    }
}

/// The A.4 coefficients: `raw = (1 - U) - queue * D^2 - ecn * E - pfc * F^2`, then
/// `raw *= drop_factor` when drops are active. Utilization keeps its fixed 1:1 weight (A.4:
/// "Utilization has linear impact (1:1 with available capacity)").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LqsWeights {
    /// Weight of the squared normalized queue depth (A.4: 1.0).
    pub queue: f64,
    /// Weight of the ECN marking rate (A.4: 0.5).
    pub ecn: f64,
    /// Weight of the squared PFC pause fraction (A.4: 2.0).
    pub pfc: f64,
    /// Factor applied to raw while drops are active (A.4: 0.1, bounding LQS at 25).
    pub drop_factor: f64,
}

impl Default for LqsWeights {
    fn default() -> Self {
        Self {
            queue: 1.0,
            ecn: 0.5,
            pfc: 2.0,
            drop_factor: 0.1,
        }
    }
}

/// Why a parameter set was refused.
#[derive(Debug, Error, PartialEq)]
pub enum ParamsError {
    /// A.1: T_sample is 1-5 ms.
    #[error("t_sample {0:?} is outside 1..=5 ms (seed 003 Appendix A.1)")]
    TSample(Duration),
    /// A.3: alpha_rise is 0.3-0.8.
    #[error("alpha_rise {0} is outside 0.3..=0.8 (seed 003 Appendix A.3)")]
    AlphaRise(f64),
    /// A.3: alpha_fall is 0.05-0.2.
    #[error("alpha_fall {0} is outside 0.05..=0.2 (seed 003 Appendix A.3)")]
    AlphaFall(f64),
    /// A.6: T_hold_down is 50-200 ms.
    #[error("t_hold_down {0:?} is outside 50..=200 ms (seed 003 Appendix A.6)")]
    THoldDown(Duration),
    /// Section 10: T_notify is 10-100 ms.
    #[error("t_notify {0:?} is outside 10..=100 ms (seed 003 section 10)")]
    TNotify(Duration),
    /// Section 10: CHANGE_THRESHOLD is 10-50.
    #[error("change_threshold {0} is outside 10..=50 (seed 003 section 10)")]
    ChangeThreshold(u8),
    /// A.5: a threshold is not a number in [0, 1].
    #[error("CL threshold {name} = {value} is not in [0, 1] (seed 003 Appendix A.5)")]
    ThresholdRange {
        /// Which threshold.
        name: &'static str,
        /// The refused value.
        value: f64,
    },
    /// A.5: the "heavy" threshold must lie above the "active" one of the same indicator.
    #[error(
        "CL thresholds are not monotone: {heavy} ({heavy_value}) must be above {active} \
         ({active_value}) (seed 003 Appendix A.5)"
    )]
    ThresholdOrder {
        /// Name of the heavy threshold.
        heavy: &'static str,
        /// Its value.
        heavy_value: f64,
        /// Name of the active threshold.
        active: &'static str,
        /// Its value.
        active_value: f64,
    },
    /// A.4 / 5.2: a negative or non-finite weight would make the LQS rise as an indicator
    /// worsens.
    #[error("LQS weight {name} = {value} must be finite and >= 0 (seed 003 5.2, A.4)")]
    Weight {
        /// Which weight.
        name: &'static str,
        /// The refused value.
        value: f64,
    },
    /// A.4: the drop factor must lie in [0, 1), or drops would not lower the LQS.
    #[error("drop factor {0} is outside [0, 1) (seed 003 Appendix A.4)")]
    DropFactor(f64),
}

/// The helper's parameters. `Default` gives the seed's RECOMMENDED values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HelperParams {
    /// T_sample: counter sampling period (A.1). The I/O shell samples at this rate; the
    /// pipeline itself uses the real time between samples.
    pub t_sample: Duration,
    /// EWMA gain when a metric rises (A.3).
    pub alpha_rise: f64,
    /// EWMA gain when a metric falls or holds (A.3).
    pub alpha_fall: f64,
    /// A.6 hold-down before the advertised CL may fall.
    pub t_hold_down: Duration,
    /// A.5 thresholds.
    pub cl_thresholds: ClThresholds,
    /// A.4 weights.
    pub lqs_weights: LqsWeights,
    /// T_notify: nominal period of periodic advertisements (7.2, section 10).
    pub t_notify: Duration,
    /// CHANGE_THRESHOLD: an LQS move larger than this triggers an advertisement (7.2).
    pub change_threshold: u8,
    /// Send the Tier 3 diagnostics block (5.5; the wire's D flag).
    pub diagnostics: bool,
}

impl Default for HelperParams {
    fn default() -> Self {
        Self {
            t_sample: T_SAMPLE_DEFAULT,
            alpha_rise: ALPHA_RISE_DEFAULT,
            alpha_fall: ALPHA_FALL_DEFAULT,
            t_hold_down: T_HOLD_DOWN_DEFAULT,
            cl_thresholds: ClThresholds::default(),
            lqs_weights: LqsWeights::default(),
            t_notify: T_NOTIFY_DEFAULT,
            change_threshold: CHANGE_THRESHOLD_DEFAULT,
            diagnostics: false,
        }
    }
}

impl HelperParams {
    /// Check every parameter against the seed's ranges. `RangeInclusive::contains` is false
    /// for NaN, so NaN is refused everywhere.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if !T_SAMPLE_RANGE.contains(&self.t_sample) {
            return Err(ParamsError::TSample(self.t_sample));
        }
        if !ALPHA_RISE_RANGE.contains(&self.alpha_rise) {
            return Err(ParamsError::AlphaRise(self.alpha_rise));
        }
        if !ALPHA_FALL_RANGE.contains(&self.alpha_fall) {
            return Err(ParamsError::AlphaFall(self.alpha_fall));
        }
        if !T_HOLD_DOWN_RANGE.contains(&self.t_hold_down) {
            return Err(ParamsError::THoldDown(self.t_hold_down));
        }
        if !T_NOTIFY_RANGE.contains(&self.t_notify) {
            return Err(ParamsError::TNotify(self.t_notify));
        }
        if !CHANGE_THRESHOLD_RANGE.contains(&self.change_threshold) {
            return Err(ParamsError::ChangeThreshold(self.change_threshold));
        }
        let th = &self.cl_thresholds;
        for (name, value) in [
            ("pfc_heavy", th.pfc_heavy),
            ("pfc_active", th.pfc_active),
            ("ecn_heavy", th.ecn_heavy),
            ("ecn_active", th.ecn_active),
            ("queue_building", th.queue_building),
            ("utilization_high", th.utilization_high),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ParamsError::ThresholdRange { name, value });
            }
        }
        for (heavy, heavy_value, active, active_value) in [
            ("pfc_heavy", th.pfc_heavy, "pfc_active", th.pfc_active),
            ("ecn_heavy", th.ecn_heavy, "ecn_active", th.ecn_active),
        ] {
            if heavy_value <= active_value {
                return Err(ParamsError::ThresholdOrder {
                    heavy,
                    heavy_value,
                    active,
                    active_value,
                });
            }
        }
        let w = &self.lqs_weights;
        for (name, value) in [("queue", w.queue), ("ecn", w.ecn), ("pfc", w.pfc)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ParamsError::Weight { name, value });
            }
        }
        if !(0.0..1.0).contains(&w.drop_factor) {
            return Err(ParamsError::DropFactor(w.drop_factor));
        }
        Ok(())
    }

    /// T_sample in nanoseconds.
    pub fn t_sample_ns(&self) -> u64 {
        duration_ns(self.t_sample)
    }

    /// T_hold_down in nanoseconds.
    pub fn t_hold_down_ns(&self) -> u64 {
        duration_ns(self.t_hold_down)
    }

    /// T_notify in nanoseconds.
    pub fn t_notify_ns(&self) -> u64 {
        duration_ns(self.t_notify)
    }
}

/// A duration in nanoseconds, saturating (validated durations are at most 200 ms).
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seed_values_and_valid() {
        let p = HelperParams::default();
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.t_sample_ns(), 2_000_000);
        assert_eq!(p.t_hold_down_ns(), 100_000_000);
        assert_eq!(p.t_notify_ns(), 20_000_000);
        assert_eq!(p.change_threshold, 25);
        assert_eq!((p.alpha_rise, p.alpha_fall), (0.5, 0.1));
    }

    #[test]
    fn out_of_range_values_are_refused_with_their_own_error() {
        let d = HelperParams::default;
        let ms = Duration::from_millis;
        let cases: Vec<(HelperParams, ParamsError)> = vec![
            (
                HelperParams {
                    t_sample: ms(6),
                    ..d()
                },
                ParamsError::TSample(ms(6)),
            ),
            (
                HelperParams {
                    t_sample: Duration::from_micros(500),
                    ..d()
                },
                ParamsError::TSample(Duration::from_micros(500)),
            ),
            (
                HelperParams {
                    alpha_rise: 0.9,
                    ..d()
                },
                ParamsError::AlphaRise(0.9),
            ),
            (
                HelperParams {
                    alpha_fall: 0.3,
                    ..d()
                },
                ParamsError::AlphaFall(0.3),
            ),
            (
                HelperParams {
                    t_hold_down: ms(40),
                    ..d()
                },
                ParamsError::THoldDown(ms(40)),
            ),
            (
                HelperParams {
                    t_notify: ms(101),
                    ..d()
                },
                ParamsError::TNotify(ms(101)),
            ),
            (
                HelperParams {
                    change_threshold: 9,
                    ..d()
                },
                ParamsError::ChangeThreshold(9),
            ),
            (
                HelperParams {
                    lqs_weights: LqsWeights {
                        ecn: -0.5,
                        ..LqsWeights::default()
                    },
                    ..d()
                },
                ParamsError::Weight {
                    name: "ecn",
                    value: -0.5,
                },
            ),
            (
                HelperParams {
                    lqs_weights: LqsWeights {
                        drop_factor: 1.0,
                        ..LqsWeights::default()
                    },
                    ..d()
                },
                ParamsError::DropFactor(1.0),
            ),
            (
                HelperParams {
                    cl_thresholds: ClThresholds {
                        pfc_heavy: 0.05,
                        ..ClThresholds::default()
                    },
                    ..d()
                },
                ParamsError::ThresholdOrder {
                    heavy: "pfc_heavy",
                    heavy_value: 0.05,
                    active: "pfc_active",
                    active_value: 0.10,
                },
            ),
            (
                HelperParams {
                    cl_thresholds: ClThresholds {
                        queue_building: 1.5,
                        ..ClThresholds::default()
                    },
                    ..d()
                },
                ParamsError::ThresholdRange {
                    name: "queue_building",
                    value: 1.5,
                },
            ),
        ];
        for (p, e) in cases {
            assert_eq!(p.validate(), Err(e));
        }
        // NaN is refused, not silently accepted.
        let nan = HelperParams {
            alpha_rise: f64::NAN,
            ..d()
        };
        assert!(matches!(nan.validate(), Err(ParamsError::AlphaRise(_))));
        // The range ends are accepted.
        let ends = HelperParams {
            t_sample: ms(1),
            alpha_rise: 0.8,
            alpha_fall: 0.05,
            t_hold_down: ms(200),
            t_notify: ms(10),
            change_threshold: 50,
            diagnostics: true,
            ..d()
        };
        assert_eq!(ends.validate(), Ok(()));
    }
}
