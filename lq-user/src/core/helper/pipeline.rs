//! The per-link congestion detection pipeline of seed 003 Appendix A: counter deltas to raw
//! metrics (A.2), asymmetric EWMA (A.3), LQS (A.4), CL (A.5) and the hysteresis of the
//! advertised CL (A.6), plus available bandwidth (5.4) and the diagnostics block (5.5).
//!
//! Everything is a pure function of the samples fed in: time is the sample's `t_ns`, so the
//! pipeline runs in virtual time under test. No input panics: counters that go backwards,
//! time that does not advance, a zero link speed or buffer size all have a defined outcome.
//!
//! # Behaviour at full utilisation
//!
//! The A.4 formula subtracts U linearly from 1, so a link that is busy but healthy (U near
//! 1, empty queue, no ECN, no PFC, no drops) scores an LQS near 0 (`U_smooth = 0.99` gives
//! `floor(0.01 * 255) = 2`) while its CL stays 1 (MINIMAL). The seed intends this (A.4: "the
//! response of this formula is deliberately steep: sustained utilization above roughly
//! 90% ... drives LQS into the lowest semantic bands"): LQS measures headroom, not loss.
//! Section 6.3 then treats a path with quality 0 as unusable, so a fully utilised link gets
//! no new traffic from leaves even though it drops nothing: the fabric shifts load to links
//! with headroom, which is the point of the signal.

use lq_common::wire::{Decimal64Milli, Diagnostics};

use super::params::{ClThresholds, HelperParams, LqsWeights};

/// Counters and gauges read for one link at one instant (A.1). Counters are free-running
/// (they only grow, or reset to a smaller value); gauges are instantaneous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawSample {
    /// When the counters were read, in nanoseconds on a monotonic clock.
    pub t_ns: u64,
    /// TX octets (counter).
    pub tx_bytes: u64,
    /// Dropped packets (counter).
    pub drops: u64,
    /// ECN-marked packets (counter).
    pub ecn_marked: u64,
    /// ECN-eligible (ECT) packets (counter).
    pub ecn_eligible: u64,
    /// Accumulated time the egress was paused by PFC, in nanoseconds (counter; from a
    /// pause-duration register, or summed pause quanta, A.2).
    pub pause_ns: u64,
    /// Egress queue occupancy in octets (gauge).
    pub queue_depth_bytes: u64,
    /// Buffer available to that queue in octets (gauge).
    pub max_buffer_bytes: u64,
    /// Nominal link rate in bits per second.
    pub link_speed_bps: u64,
    /// Operational state; `false` gives LQS 0 and CL 7 at once.
    pub oper_up: bool,
}

/// The four continuous metrics of A.2, each in [0, 1].
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Metrics {
    /// Utilization U.
    pub u: f64,
    /// ECN marking rate E.
    pub e: f64,
    /// PFC pause fraction F.
    pub f: f64,
    /// Normalized queue depth D.
    pub d: f64,
}

impl Metrics {
    /// Every metric forced into [0, 1]; NaN counts as the worst value, 1, so that a
    /// malformed input can only lower the LQS, never raise it (5.2 monotonicity).
    pub fn sanitized(self) -> Self {
        Self {
            u: unit(self.u),
            e: unit(self.e),
            f: unit(self.f),
            d: unit(self.d),
        }
    }
}

fn unit(x: f64) -> f64 {
    if x.is_nan() { 1.0 } else { x.clamp(0.0, 1.0) }
}

/// The four hysteresis states of A.6, as bands of CL values (the seed names the states but
/// not their CL ranges; this split pairs the levels of Table 2 two by two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Band {
    /// CL 0-1: NONE, MINIMAL.
    Healthy,
    /// CL 2-3: LOW, MODERATE.
    Degraded,
    /// CL 4-5: ELEVATED, HIGH.
    Congested,
    /// CL 6-7: SEVERE, CRITICAL.
    Critical,
}

impl Band {
    /// The band of a CL (values above 7 count as 7).
    pub const fn of(cl: u8) -> Self {
        match cl {
            0..=1 => Self::Healthy,
            2..=3 => Self::Degraded,
            4..=5 => Self::Congested,
            _ => Self::Critical,
        }
    }

    /// Lower-case name for display.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Congested => "congested",
            Self::Critical => "critical",
        }
    }
}

/// A.4: the LQS of smoothed metrics and the raw drop indicator.
///
/// `raw = (1 - U) - w_q * D^2 - w_e * E - w_f * F^2`, times the drop factor when `x`, then
/// `floor(clamp(raw, 0, 1) * 255)`. Two guards keep the 5.2 semantics exact in floating
/// point: 255 is returned only when every indicator is exactly 0 (an f64 `1 - 1e-300` is
/// 1.0, which would otherwise claim "fully available" for a loaded link), and each step is
/// a monotone IEEE operation, so a worse indicator never gives a higher LQS.
pub fn lqs_from(m: &Metrics, x: bool, w: &LqsWeights) -> u8 {
    let m = m.sanitized();
    let mut raw = (1.0 - m.u) - w.queue * m.d * m.d - w.ecn * m.e - w.pfc * m.f * m.f;
    if x {
        raw *= w.drop_factor;
    }
    if raw.is_nan() {
        // Only reachable with unvalidated weights (inf * 0): fail safe.
        return 0;
    }
    // Cannot truncate: the value is in [0, 255] after the clamp.
    let lqs = (raw.clamp(0.0, 1.0) * 255.0).floor() as u8;
    let all_clear = m.u == 0.0 && m.e == 0.0 && m.f == 0.0 && m.d == 0.0 && !x;
    if all_clear { 255 } else { lqs.min(254) }
}

/// A.5: the CL of smoothed metrics and the raw drop indicator, first match from the top.
pub fn cl_from(m: &Metrics, x: bool, th: &ClThresholds) -> u8 {
    let m = m.sanitized();
    if x {
        7
    } else if m.f > th.pfc_heavy {
        6
    } else if m.f > th.pfc_active {
        5
    } else if m.e > th.ecn_heavy {
        4
    } else if m.e > th.ecn_active {
        3
    } else if m.d > th.queue_building {
        2
    } else if m.u > th.utilization_high {
        1
    } else {
        0
    }
}

/// A.3: one asymmetric EWMA step. A rise uses alpha_rise (fast detection), a fall or a
/// hold uses alpha_fall (slow, stable recovery).
///
/// A fall toward an indicator of exactly 0 ends at 0 once the value is below
/// [`EWMA_ZERO_BELOW`]: in f64 it would otherwise stop at the smallest subnormal
/// (`0.9 x 5e-324` rounds back to `5e-324`), and a link that had ever carried traffic
/// would never again score 255 (A.4), which [`lqs_from`] gives only to indicators of
/// exactly 0.
pub fn ewma_step(prev: f64, raw: f64, alpha_rise: f64, alpha_fall: f64) -> f64 {
    let alpha = if raw > prev { alpha_rise } else { alpha_fall };
    let next = alpha * raw + (1.0 - alpha) * prev;
    if raw == 0.0 && next < EWMA_ZERO_BELOW {
        0.0
    } else {
        next
    }
}

/// Where a smoothed indicator falling to 0 becomes 0: 2^-54, the largest `u` for which
/// A.4's `1.0 - u` rounds to 1.0 in f64, i.e. where the seed's formula itself reads 255.
/// At alpha_fall 0.1 an indicator at 1.0 gets there in 356 samples (0.71 s at T_sample
/// 2 ms).
pub const EWMA_ZERO_BELOW: f64 = 1.0 / (1u64 << 54) as f64;

/// 5.4: available bandwidth in Gbps, `capacity x (1 - U_smooth) x (1 - F_smooth)`.
///
/// Why this product: U is the share of the line rate already used by transmitted traffic,
/// so `capacity x (1 - U)` is the unused line rate; while the egress is paused by PFC it
/// cannot transmit at all, so only the unpaused share `(1 - F)` of that headroom can
/// actually be used (5.4: "accounting for utilization and any flow control impact"). The
/// smoothed values are used so that the bandwidth agrees with the LQS and CL advertised next
/// to it. The result is rounded to the 3 fraction digits of `bandwidth-gbps` (rounding, not
/// truncation: 400 x (1 - 0.55) is 179.99999... in binary floating point).
pub fn available_bandwidth(capacity_gbps: f64, m: &Metrics) -> Decimal64Milli {
    let m = m.sanitized();
    gbps_milli(capacity_gbps * (1.0 - m.u) * (1.0 - m.f))
}

/// Gbps to decimal64 milli-units, rounded; NaN and negatives give 0, and the value is
/// capped below the largest binary32 the receiver accepts.
fn gbps_milli(gbps: f64) -> Decimal64Milli {
    // 1e15 Gbps is far above any link and far below the wire limit (about 9.2e15).
    const CAP_MILLI: f64 = 1.0e18;
    let milli = (gbps * 1000.0).round();
    if milli.is_nan() || milli <= 0.0 {
        Decimal64Milli(0)
    } else {
        // Cannot truncate: capped at 1e18 < u64::MAX.
        Decimal64Milli(milli.min(CAP_MILLI) as u64)
    }
}

/// Line rate in Gbps.
fn capacity_gbps(link_speed_bps: u64) -> f64 {
    link_speed_bps as f64 / 1.0e9
}

/// The raw (A.2) metrics of one interval: the four continuous ones and the drop indicator.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct RawMetrics {
    /// U, E, F, D.
    pub m: Metrics,
    /// X: the drop counter advanced during the interval.
    pub x: bool,
}

/// Counter deltas between two samples, or `None` when the interval must be skipped: a
/// counter went backwards (a reset or a wrap of a narrower hardware counter: the true
/// delta is unknown, and a wrapping subtraction would give a huge value) or time did not
/// advance (no interval to divide by).
fn derive(prev: &RawSample, cur: &RawSample) -> Option<RawMetrics> {
    let dt_ns = cur.t_ns.checked_sub(prev.t_ns).filter(|dt| *dt > 0)?;
    let tx = cur.tx_bytes.checked_sub(prev.tx_bytes)?;
    let drops = cur.drops.checked_sub(prev.drops)?;
    let marked = cur.ecn_marked.checked_sub(prev.ecn_marked)?;
    let eligible = cur.ecn_eligible.checked_sub(prev.ecn_eligible)?;
    let paused = cur.pause_ns.checked_sub(prev.pause_ns)?;
    let dt = dt_ns as f64;
    // A.2: U = min(1, tx_delta * 8 / (T_sample * link_speed)), with the real interval as
    // T_sample (a late sample must not read as a burst). A zero line rate has no capacity
    // at all: count it as fully used.
    let u = if cur.link_speed_bps == 0 {
        1.0
    } else {
        (tx as f64 * 8.0 * 1.0e9 / (dt * cur.link_speed_bps as f64)).min(1.0)
    };
    // A.2: E = marked / eligible, 0 without eligible packets. Capped at 1 in case the two
    // counters are not read atomically.
    let e = if eligible == 0 {
        0.0
    } else {
        (marked as f64 / eligible as f64).min(1.0)
    };
    // A.2: F = min(1, pause_duration / T_sample).
    let f = (paused as f64 / dt).min(1.0);
    // A.2: D = queue_depth / max_buffer. An unknown (zero) buffer size reads as full when
    // anything is queued, empty otherwise.
    let d = if cur.max_buffer_bytes == 0 {
        if cur.queue_depth_bytes == 0 { 0.0 } else { 1.0 }
    } else {
        (cur.queue_depth_bytes as f64 / cur.max_buffer_bytes as f64).min(1.0)
    };
    Some(RawMetrics {
        m: Metrics { u, e, f, d },
        x: drops > 0,
    })
}

/// What the pipeline currently says about one link: the values the advertiser sends and,
/// for `lqd show local`, how they were obtained.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkReport {
    /// The sender's ifIndex of the link (the wire's Link ID).
    pub link_id: u32,
    /// Time of the sample this report reflects.
    pub t_ns: u64,
    /// Operational state.
    pub oper_up: bool,
    /// Raw metrics of the last measured interval (all zero while the link is down).
    pub raw: RawMetrics,
    /// Smoothed metrics (A.3).
    pub smooth: Metrics,
    /// LQS to advertise (A.4; 0 while down).
    pub lqs: u8,
    /// CL computed from this sample alone (A.5), before hysteresis.
    pub computed_cl: u8,
    /// CL to advertise, after the A.6 hysteresis.
    pub cl: u8,
    /// A.6 state of the advertised CL.
    pub band: Band,
    /// When a fall of the advertised CL is pending: the time the hold-down started.
    pub hold_down_since_ns: Option<u64>,
    /// Line rate in Gbps (diagnostics link-capacity).
    pub capacity: Decimal64Milli,
    /// 5.4 available bandwidth.
    pub available_bandwidth: Decimal64Milli,
}

impl LinkReport {
    /// The 5.5 diagnostics block as the wire spec codes it: queue `round(D x 255)`, ECN
    /// `round(E x 31)`, PFC `round(F x 31)` from the smoothed metrics (the values the LQS was
    /// computed from, so the block explains the score), and X raw, as A.4 and A.5 use it.
    pub fn diagnostics(&self) -> Diagnostics {
        let m = self.smooth.sanitized();
        // Cannot truncate: each product is in [0, 255] or [0, 31].
        Diagnostics {
            link_capacity: self.capacity.to_f32(),
            queue_depth: (m.d * 255.0).round() as u8,
            ecn_marking_rate: (m.e * 31.0).round() as u8,
            pfc_pause_fraction: (m.f * 31.0).round() as u8,
            drops_active: self.raw.x,
        }
    }
}

/// A.6 hysteresis of the advertised CL.
///
/// The rule as implemented, evaluated once per sample with the CL `c` computed from that
/// sample and the advertised CL `a`:
///
/// * `c > a` (worse): `a = c` at once, and any pending fall is cancelled. A.6: "Upward
///   transitions (toward CRITICAL): immediate".
/// * `c == a`: any pending fall is cancelled (the improvement was not sustained).
/// * `c < a` (better): a hold-down starts at this sample unless one is already running;
///   during it the highest CL computed since it started is remembered. Once `t - start >=
///   T_hold_down`, `a` becomes that highest CL (the level the link has not exceeded for the
///   whole hold-down), and if `c` is still below the new `a` a fresh hold-down starts now.
///   A blip back to `a` or above restarts the hold-down from scratch; a blip that stays
///   below `a` only raises the level the fall may go to. A.6: "Downward transitions
///   (toward HEALTHY): require sustained improvement for T_hold_down".
///
/// Every fall is held, including one inside a band (5 to 4): A.6 names four states, but
/// section 7.2 triggers an advertisement on any CL change, so an unheld in-band fall would
/// let a metric hovering at a threshold trigger an advertisement every other sample. The
/// band reported for display is the band of the advertised CL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Hysteresis {
    advertised: u8,
    hold: Option<Hold>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hold {
    since_ns: u64,
    worst: u8,
}

impl Hysteresis {
    fn step(&mut self, t_ns: u64, computed: u8, hold_down_ns: u64) {
        let c = computed.min(7);
        if c >= self.advertised {
            self.advertised = c;
            self.hold = None;
            return;
        }
        let hold = match self.hold {
            Some(h) => Hold {
                since_ns: h.since_ns,
                worst: h.worst.max(c),
            },
            None => Hold {
                since_ns: t_ns,
                worst: c,
            },
        };
        // saturating: a sample time earlier than the hold start (a clock step) never
        // completes the hold-down early.
        if t_ns.saturating_sub(hold.since_ns) >= hold_down_ns {
            self.advertised = hold.worst;
            self.hold = (c < self.advertised).then_some(Hold {
                since_ns: t_ns,
                worst: c,
            });
        } else {
            self.hold = Some(hold);
        }
    }
}

/// One link's pipeline state.
#[derive(Clone, Debug)]
pub struct LinkPipeline {
    link_id: u32,
    params: HelperParams,
    /// The previous sample, the baseline for the next deltas; `None` before the first and
    /// right after the link went down.
    prev: Option<RawSample>,
    /// Smoothed metrics; `None` until the first interval has been measured (A.3 initialises
    /// them to the first raw sample).
    smooth: Option<Metrics>,
    raw: RawMetrics,
    hysteresis: Hysteresis,
    last: Option<LinkReport>,
}

impl LinkPipeline {
    /// A pipeline for `link_id`. `params` should have passed [`HelperParams::validate`].
    pub fn new(link_id: u32, params: &HelperParams) -> Self {
        Self {
            link_id,
            params: *params,
            prev: None,
            smooth: None,
            raw: RawMetrics::default(),
            hysteresis: Hysteresis::default(),
            last: None,
        }
    }

    /// New parameters (a reload), effective from the next sample: the smoothed metrics,
    /// the advertised CL and its hold-down carry on (A.3, A.6 state is not reset).
    /// `params` should have passed [`HelperParams::validate`].
    pub fn set_params(&mut self, params: &HelperParams) {
        self.params = *params;
    }

    /// The link's ifIndex.
    pub fn link_id(&self) -> u32 {
        self.link_id
    }

    /// The last report, `None` before the first one.
    pub fn report(&self) -> Option<&LinkReport> {
        self.last.as_ref()
    }

    /// Feeds one sample. Returns the updated report, or `None` while nothing has been
    /// measured yet on an up link (the very first sample only sets the counter baseline).
    ///
    /// * Link down: LQS 0, CL 7 at once (a rise, so the hysteresis passes it immediately),
    ///   available bandwidth 0; the smoothing state is discarded, so monitoring starts
    ///   afresh when the link comes back (A.3 initialisation), while the advertised CL
    ///   stays 7 until the improvement has held for T_hold_down (A.6).
    /// * An interval in which a counter went backwards, or time did not advance, is
    ///   skipped: the sample becomes the new baseline and the previous report is kept.
    pub fn on_sample(&mut self, s: &RawSample) -> Option<LinkReport> {
        let hold_down_ns = self.params.t_hold_down_ns();
        if !s.oper_up {
            self.prev = None;
            self.smooth = None;
            self.raw = RawMetrics::default();
            self.hysteresis.step(s.t_ns, 7, hold_down_ns);
            let report = self.make_report(s, None, 0, 7);
            self.last = Some(report);
            return self.last;
        }
        let prev = self.prev.replace(*s);
        let measured = prev.as_ref().and_then(|p| derive(p, s));
        let Some(raw) = measured else {
            return match self.last {
                // The link just came up: still unmeasured, hence still unusable.
                Some(last) if !last.oper_up || self.smooth.is_none() => {
                    self.hysteresis.step(s.t_ns, 7, hold_down_ns);
                    let report = self.make_report(s, None, 0, 7);
                    self.last = Some(report);
                    self.last
                }
                // A skipped interval: keep what was last said.
                other => other,
            };
        };
        self.raw = raw;
        let p = &self.params;
        let smooth = match self.smooth {
            None => raw.m,
            Some(prev) => Metrics {
                u: ewma_step(prev.u, raw.m.u, p.alpha_rise, p.alpha_fall),
                e: ewma_step(prev.e, raw.m.e, p.alpha_rise, p.alpha_fall),
                f: ewma_step(prev.f, raw.m.f, p.alpha_rise, p.alpha_fall),
                d: ewma_step(prev.d, raw.m.d, p.alpha_rise, p.alpha_fall),
            },
        };
        self.smooth = Some(smooth);
        let lqs = lqs_from(&smooth, raw.x, &p.lqs_weights);
        let cl = cl_from(&smooth, raw.x, &p.cl_thresholds);
        self.hysteresis.step(s.t_ns, cl, hold_down_ns);
        let report = self.make_report(s, Some(smooth), lqs, cl);
        self.last = Some(report);
        self.last
    }

    fn make_report(
        &self,
        s: &RawSample,
        smooth: Option<Metrics>,
        lqs: u8,
        computed_cl: u8,
    ) -> LinkReport {
        let capacity = capacity_gbps(s.link_speed_bps);
        let available = match smooth {
            Some(m) if s.oper_up => available_bandwidth(capacity, &m),
            _ => Decimal64Milli(0),
        };
        LinkReport {
            link_id: self.link_id,
            t_ns: s.t_ns,
            oper_up: s.oper_up,
            raw: self.raw,
            smooth: smooth.unwrap_or_default(),
            lqs,
            computed_cl,
            cl: self.hysteresis.advertised,
            band: Band::of(self.hysteresis.advertised),
            hold_down_since_ns: self.hysteresis.hold.map(|h| h.since_ns),
            capacity: gbps_milli(capacity),
            available_bandwidth: available,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    /// 400G, the seed's Appendix B link.
    const SPEED: u64 = 400_000_000_000;
    const BUF: u64 = 1_000_000;

    fn m(u: f64, e: f64, f: f64, d: f64) -> Metrics {
        Metrics { u, e, f, d }
    }

    fn lqs(mm: Metrics, x: bool) -> u8 {
        lqs_from(&mm, x, &LqsWeights::default())
    }

    fn cl(mm: Metrics, x: bool) -> u8 {
        cl_from(&mm, x, &ClThresholds::default())
    }

    /// A sample generator: cumulative counters driven by per-interval fractions.
    struct Gen {
        s: RawSample,
    }

    impl Gen {
        fn new() -> Self {
            Self {
                s: RawSample {
                    t_ns: 1_000 * MS,
                    max_buffer_bytes: BUF,
                    link_speed_bps: SPEED,
                    oper_up: true,
                    ..RawSample::default()
                },
            }
        }

        /// Advance `dt_ms` with utilization `u`, ECN rate `e`, pause fraction `f`, queue
        /// fraction `d` and `drops` drops.
        fn step(&mut self, dt_ms: u64, u: f64, e: f64, f: f64, d: f64, drops: u64) -> RawSample {
            let dt = dt_ms * MS;
            self.s.t_ns += dt;
            self.s.tx_bytes += (u * SPEED as f64 / 8.0 * dt as f64 / 1e9) as u64;
            self.s.ecn_eligible += 1000;
            self.s.ecn_marked += (e * 1000.0) as u64;
            self.s.pause_ns += (f * dt as f64) as u64;
            self.s.queue_depth_bytes = (d * BUF as f64) as u64;
            self.s.drops += drops;
            self.s
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn appendix_b2_example() {
        // B.2: U = 0.55, D = 0.30, E = 0.15, no PFC, no drops: LQS 72, CL 3.
        let mm = m(0.55, 0.15, 0.0, 0.30);
        assert_eq!(lqs(mm, false), 72);
        assert_eq!(cl(mm, false), 3);
        // And through the whole pipeline, with steady inputs so the EWMA holds them.
        let mut p = LinkPipeline::new(7, &HelperParams::default());
        let mut g = Gen::new();
        assert_eq!(
            p.on_sample(&g.s),
            None,
            "the first sample is only a baseline"
        );
        let r = p.on_sample(&g.step(2, 0.55, 0.15, 0.0, 0.30, 0)).unwrap();
        assert!(close(r.smooth.u, 0.55) && close(r.smooth.e, 0.15) && close(r.smooth.d, 0.3));
        assert_eq!((r.lqs, r.cl, r.band), (72, 3, Band::Degraded));
        // 5.4: 400 x 0.45 x 1 = 180 Gbps (the wire spec's test vector value).
        assert_eq!(r.available_bandwidth, Decimal64Milli(180_000));
        assert_eq!(r.capacity, Decimal64Milli(400_000));
        let diag = r.diagnostics();
        assert_eq!(
            (
                diag.queue_depth,
                diag.ecn_marking_rate,
                diag.pfc_pause_fraction,
                diag.drops_active
            ),
            (77, 5, 0, false)
        );
        assert_eq!(diag.link_capacity, 400.0);
    }

    #[test]
    fn full_utilisation_gives_near_zero_lqs_with_an_empty_queue() {
        assert_eq!(lqs(m(0.99, 0.0, 0.0, 0.0), false), 2);
        assert_eq!(lqs(m(1.0, 0.0, 0.0, 0.0), false), 0);
        assert_eq!(cl(m(1.0, 0.0, 0.0, 0.0), false), 1);
    }

    #[test]
    fn derived_metrics_follow_a2_with_the_real_interval() {
        let mut p = LinkPipeline::new(1, &HelperParams::default());
        let mut g = Gen::new();
        p.on_sample(&g.s);
        // 3 ms instead of 2: U is computed over the real 3 ms.
        let r = p.on_sample(&g.step(3, 0.25, 0.5, 0.2, 0.1, 3)).unwrap();
        assert!(close(r.raw.m.u, 0.25), "{}", r.raw.m.u);
        assert!(close(r.raw.m.e, 0.5));
        assert!(close(r.raw.m.f, 0.2));
        assert!(close(r.raw.m.d, 0.1));
        assert!(r.raw.x);
        assert_eq!((r.cl, r.computed_cl), (7, 7));
        // Drops: raw * 0.1 (A.4).
        let expect = ((0.75 - 0.01 - 0.25 - 2.0 * 0.04) * 0.1 * 255.0_f64).floor() as u8;
        assert_eq!(r.lqs, expect);
        // More bytes than the line rate allows and more marks than eligible are capped.
        g.s.tx_bytes += 10 * SPEED;
        g.s.ecn_marked += 5000;
        let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 2.0, 0)).unwrap();
        assert_eq!((r.raw.m.u, r.raw.m.e, r.raw.m.d), (1.0, 1.0, 1.0));
        assert!(!r.raw.x);
    }

    #[test]
    fn counter_reset_skips_the_interval() {
        let mut p = LinkPipeline::new(1, &HelperParams::default());
        let mut g = Gen::new();
        p.on_sample(&g.s);
        let before = p.on_sample(&g.step(2, 0.3, 0.0, 0.0, 0.0, 0)).unwrap();
        // The driver resets every counter: tx goes back to 0.
        g.s = RawSample {
            t_ns: g.s.t_ns + 2 * MS,
            tx_bytes: 10,
            ..g.s
        };
        let skipped = p.on_sample(&g.s).unwrap();
        assert_eq!(skipped, before, "a reset interval changes nothing");
        // The next interval is measured from the new baseline, with sane values.
        let r = p.on_sample(&g.step(2, 0.3, 0.0, 0.0, 0.0, 0)).unwrap();
        assert!(close(r.raw.m.u, 0.3), "{}", r.raw.m.u);
        // A 32-bit counter wrap in the drop counter is a decrease too: skipped, no drops.
        g.s.drops = u64::from(u32::MAX) - 1;
        p.on_sample(&g.step(2, 0.3, 0.0, 0.0, 0.0, 0));
        g.s.drops = 5;
        let r = p.on_sample(&g.step(2, 0.3, 0.0, 0.0, 0.0, 0)).unwrap();
        assert!(r.raw.m.u <= 1.0 && r.lqs > 0);
        // Time that does not advance is skipped as well.
        let same = RawSample {
            tx_bytes: g.s.tx_bytes + 1_000_000,
            ..g.s
        };
        assert_eq!(p.on_sample(&same), Some(r));
        let earlier = RawSample {
            t_ns: g.s.t_ns - MS,
            ..g.s
        };
        assert_eq!(p.on_sample(&earlier), Some(r));
    }

    #[test]
    fn an_idle_link_that_carried_traffic_scores_255_again() {
        // The seed's formula reads 255 once 1.0 - U_smooth rounds to 1.0; the smoothed value
        // must reach exactly 0 by then, not stop at the smallest subnormal.
        const {
            assert!(1.0 - EWMA_ZERO_BELOW == 1.0);
            assert!(1.0 - 2.0 * EWMA_ZERO_BELOW < 1.0);
        }
        let w = LqsWeights::default();
        let mut m = Metrics {
            u: 1.0,
            e: 1.0,
            f: 1.0,
            d: 1.0,
        };
        let mut samples = 0;
        while lqs_from(&m, false, &w) < 255 {
            m = Metrics {
                u: ewma_step(m.u, 0.0, 0.3, 0.1),
                e: ewma_step(m.e, 0.0, 0.3, 0.1),
                f: ewma_step(m.f, 0.0, 0.3, 0.1),
                d: ewma_step(m.d, 0.0, 0.3, 0.1),
            };
            samples += 1;
            assert!(
                samples <= 400,
                "LQS {} after {samples} idle samples: {m:?}",
                lqs_from(&m, false, &w)
            );
        }
        assert_eq!(samples, 356);
        assert_eq!(m, Metrics::default());
        // A rise from 0 and a fall toward a value that is not 0 are unchanged.
        assert_eq!(ewma_step(0.0, 1e-20, 0.3, 0.1), 0.3 * 1e-20);
        assert_eq!(ewma_step(1e-17, 1e-18, 0.3, 0.1), 0.1 * 1e-18 + 0.9 * 1e-17);
    }

    #[test]
    fn ewma_rise_and_fall() {
        let params = HelperParams::default();
        let mut p = LinkPipeline::new(1, &params);
        let mut g = Gen::new();
        p.on_sample(&g.s);
        // Initialised to the first raw sample (A.3).
        let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.0, 0)).unwrap();
        assert_eq!(r.smooth, Metrics::default());
        assert_eq!(r.lqs, 255);
        // Step up to D = 0.8: the smoothed depth follows with alpha_rise = 0.5.
        let mut expect = 0.0;
        for _ in 0..4 {
            let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.8, 0)).unwrap();
            expect = 0.5 * 0.8 + 0.5 * expect;
            assert!(close(r.smooth.d, expect), "{} vs {expect}", r.smooth.d);
        }
        // After two samples it is at 0.6 > 0.5, so CL 2 within about 4 ms (A.3).
        // Settle at the top.
        for _ in 0..40 {
            p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.8, 0));
        }
        let top = p.report().unwrap().smooth.d;
        assert!(close(top, 0.8));
        // Step down to 0: each sample keeps 0.9 of the rest (alpha_fall = 0.1), so the fall
        // reaches 90% after 22 samples (0.9^21 = 0.109, 0.9^22 = 0.098), 44 ms at 2 ms.
        let mut samples = 0;
        loop {
            samples += 1;
            let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.0, 0)).unwrap();
            if r.smooth.d <= 0.1 * top {
                break;
            }
            assert!(samples < 100);
        }
        assert_eq!(samples, 22);
        assert!(close(p.report().unwrap().smooth.d, top * 0.9_f64.powi(22)));
    }

    /// Drives a pipeline to a steady state with the given metrics.
    fn settle(p: &mut LinkPipeline, g: &mut Gen, e: f64, f: f64, n: usize) -> LinkReport {
        let mut last = None;
        for _ in 0..n {
            last = p.on_sample(&g.step(2, 0.1, e, f, 0.0, 0));
        }
        last.unwrap()
    }

    #[test]
    fn hysteresis_rise_is_immediate_fall_waits_hold_down() {
        // alpha_fall at its fastest so the computed CL drops within a few samples.
        let params = HelperParams {
            alpha_fall: 0.2,
            ..HelperParams::default()
        };
        let hold = params.t_hold_down_ns();
        let mut p = LinkPipeline::new(1, &params);
        let mut g = Gen::new();
        p.on_sample(&g.s);
        let r = settle(&mut p, &mut g, 0.0, 0.0, 5);
        assert_eq!((r.cl, r.band), (0, Band::Healthy));
        // PFC 0.9: the first sample gives F_smooth 0.45 (CL 5), the second 0.675 (CL 6), and the
        // advertised CL follows at once.
        let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.9, 0.0, 0)).unwrap();
        assert_eq!((r.computed_cl, r.cl), (5, 5), "rise passes at once");
        let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.9, 0.0, 0)).unwrap();
        assert_eq!((r.computed_cl, r.cl, r.band), (6, 6, Band::Critical));
        // The congestion clears: the computed CL falls to 0 over a few samples, while the
        // advertised CL stays at 6 until the lower level has held for T_hold_down.
        let mut first_below = None;
        let mut fell_at = None;
        for _ in 0..200 {
            let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.0, 0.0, 0)).unwrap();
            if r.computed_cl < 6 && first_below.is_none() {
                first_below = Some(r.t_ns);
                assert_eq!(r.hold_down_since_ns, Some(r.t_ns));
            }
            if r.cl < 6 {
                fell_at = Some((r.t_ns, r.cl));
                break;
            }
        }
        let (start, (fell, to)) = (first_below.unwrap(), fell_at.unwrap());
        assert_eq!(
            fell - start,
            hold,
            "falls exactly one hold-down after the improvement"
        );
        // It falls to the worst level seen during the hold-down (F was still above 0.1 for
        // some samples after it dropped below 0.5), then on to 0 after another hold-down.
        assert_eq!(to, 5);
        let mut fell2 = None;
        for _ in 0..200 {
            let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.0, 0.0, 0)).unwrap();
            if r.cl == 0 {
                fell2 = Some(r.t_ns);
                break;
            }
        }
        assert_eq!(fell2.unwrap() - fell, hold);
    }

    #[test]
    fn hysteresis_blip_restarts_hold_down() {
        let mut h = Hysteresis::default();
        let hold = 100 * MS;
        h.step(0, 4, hold);
        assert_eq!(h.advertised, 4);
        // Improvement at t = 10 ms.
        h.step(10 * MS, 1, hold);
        h.step(60 * MS, 1, hold);
        assert_eq!(h.advertised, 4);
        // A blip back to 4 at 100 ms cancels the hold-down...
        h.step(100 * MS, 4, hold);
        assert_eq!((h.advertised, h.hold), (4, None));
        // ...so 110 ms (100 ms after the first improvement) does not fall,
        h.step(102 * MS, 1, hold);
        h.step(110 * MS, 1, hold);
        assert_eq!(h.advertised, 4);
        // and the fall comes 100 ms after the improvement resumed.
        h.step(201 * MS, 1, hold);
        assert_eq!(h.advertised, 4);
        h.step(202 * MS, 1, hold);
        assert_eq!(h.advertised, 1);
        // A rise is immediate, even from inside a hold-down.
        h.step(203 * MS, 0, hold);
        assert!(h.hold.is_some());
        h.step(204 * MS, 3, hold);
        assert_eq!((h.advertised, h.hold), (3, None));
        // A blip that stays below the advertised level does not restart the hold-down but
        // raises the level the fall goes to.
        h.step(210 * MS, 0, hold);
        h.step(250 * MS, 2, hold);
        h.step(310 * MS, 0, hold);
        assert_eq!(h.advertised, 2);
    }

    #[test]
    fn link_down_is_lqs0_cl7_at_once_and_up_again_waits() {
        let params = HelperParams::default();
        let mut p = LinkPipeline::new(9, &params);
        let mut g = Gen::new();
        p.on_sample(&g.s);
        settle(&mut p, &mut g, 0.0, 0.0, 3);
        g.s.oper_up = false;
        let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.0, 0)).unwrap();
        assert_eq!((r.lqs, r.cl, r.computed_cl, r.oper_up), (0, 7, 7, false));
        assert_eq!(r.available_bandwidth, Decimal64Milli(0));
        // Even the very first sample of a down link reports.
        let mut q = LinkPipeline::new(10, &params);
        let down = RawSample {
            oper_up: false,
            ..RawSample::default()
        };
        assert_eq!(q.on_sample(&down).map(|r| (r.lqs, r.cl)), Some((0, 7)));
        // Back up: the first sample is a baseline, still LQS 0 / CL 7.
        g.s.oper_up = true;
        let up_at = g.s.t_ns + 2 * MS;
        let r = p.on_sample(&g.step(2, 0.0, 0.0, 0.0, 0.0, 0)).unwrap();
        assert_eq!((r.lqs, r.cl), (0, 7));
        // Measured: LQS is good at once, the advertised CL waits the hold-down.
        let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.0, 0.0, 0)).unwrap();
        assert!(r.lqs > 200);
        assert_eq!((r.computed_cl, r.cl), (0, 7));
        loop {
            let r = p.on_sample(&g.step(2, 0.1, 0.0, 0.0, 0.0, 0)).unwrap();
            if r.cl == 0 {
                // The unmeasured sample at up_at already counted as CL 7.
                assert_eq!(r.t_ns - (up_at + 2 * MS), params.t_hold_down_ns());
                break;
            }
        }
    }

    #[test]
    fn zero_speed_and_zero_buffer_do_not_panic() {
        let mut p = LinkPipeline::new(1, &HelperParams::default());
        let s0 = RawSample {
            oper_up: true,
            queue_depth_bytes: 5,
            ..RawSample::default()
        };
        p.on_sample(&s0);
        let r = p
            .on_sample(&RawSample {
                t_ns: 2 * MS,
                tx_bytes: u64::MAX,
                pause_ns: u64::MAX,
                ..s0
            })
            .unwrap();
        assert_eq!((r.raw.m.u, r.raw.m.f, r.raw.m.d), (1.0, 1.0, 1.0));
        assert_eq!((r.lqs, r.available_bandwidth), (0, Decimal64Milli(0)));
    }

    fn metric() -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64]
    }

    fn metrics() -> impl Strategy<Value = Metrics> {
        (metric(), metric(), metric(), metric()).prop_map(|(u, e, f, d)| m(u, e, f, d))
    }

    /// Replace indicator `i` (0 U, 1 E, 2 F, 3 D) with `v`.
    fn with(mm: Metrics, i: usize, v: f64) -> Metrics {
        let mut mm = mm;
        match i {
            0 => mm.u = v,
            1 => mm.e = v,
            2 => mm.f = v,
            _ => mm.d = v,
        }
        mm
    }

    fn get(mm: &Metrics, i: usize) -> f64 {
        [mm.u, mm.e, mm.f, mm.d][i]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// 5.2 and 5.3: worsening any one indicator (including drops), the others held,
        /// never raises LQS and never lowers CL.
        #[test]
        fn monotone_in_each_indicator(mm in metrics(), i in 0usize..4, worse in metric(),
                                      x in any::<bool>()) {
            let better_v = get(&mm, i).min(worse);
            let worse_v = get(&mm, i).max(worse);
            let better = with(mm, i, better_v);
            let worse = with(mm, i, worse_v);
            prop_assert!(lqs(worse, x) <= lqs(better, x));
            prop_assert!(cl(worse, x) >= cl(better, x));
            // Drops are an indicator too.
            prop_assert!(lqs(mm, true) <= lqs(mm, false));
            prop_assert!(cl(mm, true) >= cl(mm, false));
        }

        /// LQS 255 exactly when every indicator is 0.
        #[test]
        fn lqs_255_iff_all_clear(mm in metrics(), x in any::<bool>()) {
            let clear = mm == Metrics::default() && !x;
            prop_assert_eq!(lqs(mm, x) == 255, clear);
        }

        /// LQS 0 when the raw score is <= 0; CL 7 exactly when drops are active.
        #[test]
        fn lqs_zero_and_cl_seven(mm in metrics(), x in any::<bool>()) {
            let raw = (1.0 - mm.u) - mm.d * mm.d - 0.5 * mm.e - 2.0 * mm.f * mm.f;
            if raw <= 0.0 {
                prop_assert_eq!(lqs(mm, x), 0);
            }
            prop_assert_eq!(cl(mm, x) == 7, x);
            if x {
                prop_assert!(lqs(mm, x) <= 25, "A.4 bounds LQS at 25 while drops persist");
            }
        }

        /// The pipeline never panics and stays in range on arbitrary counter sequences;
        /// a down link is LQS 0, CL 7 and only a down link or drops give computed CL 7.
        #[test]
        fn pipeline_total_on_arbitrary_samples(
            samples in prop::collection::vec(
                (0u64..10 * MS, any::<u64>(), 0u64..3, any::<u32>(), any::<u32>(),
                 any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), prop::bool::weighted(0.9)),
                1..40)
        ) {
            let mut p = LinkPipeline::new(1, &HelperParams::default());
            let mut t = 0u64;
            let mut drops = 0u64;
            for (dt, tx, dd, marked, eligible, pause, depth, buf, speed, up) in samples {
                t = t.saturating_add(dt);
                drops = drops.saturating_add(dd);
                let s = RawSample {
                    t_ns: t, tx_bytes: tx, drops, ecn_marked: u64::from(marked),
                    ecn_eligible: u64::from(eligible), pause_ns: pause,
                    queue_depth_bytes: depth, max_buffer_bytes: buf, link_speed_bps: speed,
                    oper_up: up,
                };
                if let Some(r) = p.on_sample(&s) {
                    prop_assert!(r.cl <= 7 && r.computed_cl <= 7);
                    for v in [r.smooth.u, r.smooth.e, r.smooth.f, r.smooth.d,
                              r.raw.m.u, r.raw.m.e, r.raw.m.f, r.raw.m.d] {
                        prop_assert!((0.0..=1.0).contains(&v));
                    }
                    prop_assert!(r.cl >= r.computed_cl);
                    if !up {
                        prop_assert_eq!((r.lqs, r.cl), (0, 7));
                    }
                    let d = r.diagnostics();
                    prop_assert!(d.ecn_marking_rate <= 31 && d.pfc_pause_fraction <= 31);
                }
            }
        }
    }
}
