//! `weight-function = "integral"`: weight = capacity x m, an integral controller on the
//! congestion signal that the LQS loses (issue 12, docs/weights.md). An opt-in departure
//! from section 6.3's `target = quality / sum(quality)` and 6.4's damped step; lqd's
//! default is the seed's function.
//!
//! Why not the seed's `target = quality / sum(quality)` (6.3): with elastic (TCP) load
//! every loaded link runs at U ~ 1, so Appendix A.4's LQS clamps to about 0 on all of them
//! and carries no information, while a path that is idle for a moment reads 255 and takes
//! nearly all new weight: a bang-bang loop that g = 0.5 does not calm. Here:
//!
//! * eligibility: a member is used only while its local uplink is up and its path is not
//!   failed (heartbeat or entry ageing, 6.5), so failures stay immediate; and, once some
//!   spine has advertised the destination's remote node, only through a spine that has
//!   (4.1: confirmed by the fast plane; 6.1's local-only fallback applies only while no
//!   spine has). Not `quality > 0`: with elastic load every loaded path reads LQS ~0
//!   although it forwards (docs/weights.md names this departure);
//! * base share: the path capacity of section 4.1 (`f(FARE capacity, LQ quality)`), the
//!   member's [`Capacity`]: `min(local uplink, slow plane's remote capacity)` when the slow
//!   plane (BGP Link Bandwidth, configuration) provisions it, else the smaller of the
//!   uplink's and the peak-held available bandwidth (5.4: an idle link advertises its whole
//!   capacity). Never the diagnostics link capacity (5.5: receivers MUST NOT use it);
//! * modulation: `m` in `[floor, ceiling]` (`floor` when the capacity is provisioned,
//!   `floor_estimated`, lower, when it is only estimated: a capacity cut under load is
//!   seen only as congestion then) falls by a factor `1 - decrease` every T_reweight while
//!   the member's signal `CL / 7` exceeds the group's traffic-weighted mean by more than
//!   `deadband`; rises by `increase` up to `ceiling` while its spare capacity (advertised
//!   available bandwidth over capacity, 5.4) exceeds the group's traffic-weighted mean by
//!   more than `deadband` and it is not more congested than the mean (a drained path takes
//!   the flows of the busiest); and returns to 1 by `increase` otherwise. CL (A.5) does not
//!   clamp like the LQS: an all-loaded fabric reads CL 1 everywhere and keeps its capacity
//!   shares, a link that queues or drops reads CL 2..7;
//! * hysteresis: the kernel group is reprogrammed only when a fraction moved by at least
//!   `hysteresis` since the last application.

use super::config::IntegralParams;
use super::path_quality::{Capacity, MemberSignal};

/// Per-member controller state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemberState {
    /// The congestion multiplier, `floor..=1`.
    pub m: f64,
    /// Peak-held available bandwidth (Gbps) and when it was last updated.
    pub peak_available: Option<(f64, u64)>,
}

impl Default for MemberState {
    fn default() -> Self {
        Self {
            m: 1.0,
            peak_available: None,
        }
    }
}

impl MemberState {
    /// Folds a new available-bandwidth observation into the peak estimate: the held value
    /// decays with the configured half-life so that a link whose capacity fell is learnt
    /// eventually, and any larger observation replaces it at once.
    pub fn observe(&mut self, p: &IntegralParams, available_gbps: Option<f64>, now_ns: u64) {
        let Some(a) = available_gbps.filter(|a| a.is_finite() && *a >= 0.0) else {
            return;
        };
        let held = self.peak_available.map_or(0.0, |(v, t)| {
            let dt = now_ns.saturating_sub(t) as f64 / 1e9;
            v * 0.5f64.powf(dt / p.capacity_half_life.as_secs_f64())
        });
        self.peak_available = Some((held.max(a), now_ns));
    }
}

/// The congestion signal of a member, 0..=1: the CL scaled to 1 (A.5 orders the causes
/// by severity: utilisation, queue, ECN, PFC, drops). No entry: 0 (absence of data is not
/// congestion, as in 6.3).
pub fn congestion(s: &MemberSignal) -> f64 {
    f64::from(s.cl.unwrap_or(0).min(7)) / 7.0
}

/// The remote capacity the function works with (Gbps): the slow plane's (provisioned) path
/// capacity, else the peak-held available bandwidth; `None` when neither is known.
fn remote_capacity(c: Capacity, st: &MemberState) -> Option<f64> {
    if c.source.is_provisioned() {
        return Some(c.gbps);
    }
    st.peak_available.map(|x| x.0).filter(|c| *c > 0.0)
}

/// Path capacity (Gbps) of a member: its [`Capacity`] when the slow plane provisions it
/// (already the smaller of uplink and remote, [`Capacity::path`]), else the smaller of the
/// uplink's and the peak-held available bandwidth, else the uplink's (1 when unknown, so
/// that a leaf that knows nothing degrades to equal shares).
pub fn path_capacity(c: Capacity, st: &MemberState) -> f64 {
    match remote_capacity(c, st) {
        Some(r) if !c.source.is_provisioned() => r.min(c.gbps),
        _ => c.gbps,
    }
}

/// Spare capacity of a member's remote link, 0..=1: the advertised available bandwidth
/// (5.4, `capacity x (1 - U) x (1 - F)`) over the remote capacity (the slow plane's, else
/// the peak-held estimate). Unknown: 0 (no evidence of spare capacity).
pub fn headroom(s: &MemberSignal, c: Capacity, st: &MemberState) -> f64 {
    match (s.available_gbps, remote_capacity(c, st)) {
        (Some(a), Some(c)) if a.is_finite() && a >= 0.0 => (a / c).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

/// The mean of `x` over the eligible members, weighted by the fractions in force (what the
/// group's traffic experiences on average); before any weighting exists (all 0), the plain
/// mean.
fn traffic_mean(eligible: &[bool], current: &[f64], x: &[f64]) -> f64 {
    let n = eligible.len();
    let total: f64 = (0..n).filter(|&i| eligible[i]).map(|i| current[i]).sum();
    let count = eligible.iter().filter(|e| **e).count().max(1);
    if total > 0.0 {
        (0..n)
            .filter(|&i| eligible[i])
            .map(|i| current[i] * x[i])
            .sum::<f64>()
            / total
    } else {
        (0..n).filter(|&i| eligible[i]).map(|i| x[i]).sum::<f64>() / count as f64
    }
}

/// One controller step over the eligible members: updates every `m` and returns the
/// targets (fractions summing to 1 over the eligible members, 0 elsewhere), or `None` when
/// no member is eligible. `current` are the fractions in force (the traffic weighting of
/// the group means); `headroom` the members' spare capacity ([`headroom`]); `changed`
/// reports whether any `m` moved.
///
/// Per member: more congested than the mean by more than the deadband: `m` falls by
/// `decrease` (to `floor`); else with more spare capacity than the mean by more than the
/// deadband: `m` rises by `increase` up to `ceiling` (a drained path takes over the flows
/// of the busiest once the kernel moves their buckets); else `m` returns to 1 by `increase`
/// per step (the capacity share).
#[allow(clippy::too_many_arguments)]
pub fn step(
    p: &IntegralParams,
    floors: &[f64],
    eligible: &[bool],
    capacity: &[f64],
    signals: &[f64],
    headroom: &[f64],
    current: &[f64],
    state: &mut [MemberState],
    changed: &mut bool,
) -> Option<Vec<f64>> {
    let n = eligible.len();
    if !eligible.iter().any(|e| *e) {
        return None;
    }
    let mean = traffic_mean(eligible, current, signals);
    let mean_headroom = traffic_mean(eligible, current, headroom);
    *changed = false;
    for i in 0..n {
        if !eligible[i] {
            continue;
        }
        let old = state[i].m;
        let spare = headroom.get(i).copied().unwrap_or(0.0);
        let new = if signals[i] > mean + p.deadband {
            (old * (1.0 - p.decrease)).max(floors[i])
        } else if spare > mean_headroom + p.deadband && signals[i] <= mean {
            (old + p.increase).min(p.ceiling.max(1.0))
        } else if old > 1.0 {
            (old - p.increase).max(1.0)
        } else {
            (old + p.increase).min(1.0)
        };
        if new != old {
            state[i].m = new;
            *changed = true;
        }
    }
    // A path far slower than the largest still gets a small share, so that a capacity
    // estimate taken while it was saturated can recover (its available bandwidth shows).
    let cmax = capacity.iter().copied().fold(0.0f64, f64::max);
    let mut t: Vec<f64> = (0..n)
        .map(|i| {
            if eligible[i] {
                capacity[i].max(cmax * 0.01) * state[i].m
            } else {
                0.0
            }
        })
        .collect();
    let s: f64 = t.iter().sum();
    if !(s > 0.0 && s.is_finite()) {
        return None;
    }
    t.iter_mut().for_each(|x| *x /= s);
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::CapacitySource;

    fn sig(cl: u8) -> MemberSignal {
        MemberSignal {
            cl: Some(cl),
            ..MemberSignal::default()
        }
    }

    /// Runs `steps` controller steps over four eligible members (floors at `p.floor`),
    /// feeding each step's fractions back as the fractions in force and to `each`.
    #[allow(clippy::too_many_arguments)]
    fn run4(
        p: &IntegralParams,
        cap: &[f64],
        signals: &[f64],
        headroom: &[f64],
        cur: &mut Vec<f64>,
        st: &mut [MemberState],
        changed: &mut bool,
        steps: usize,
        mut each: impl FnMut(&[f64]),
    ) {
        for _ in 0..steps {
            *cur = step(
                p,
                &[p.floor; 4],
                &[true; 4],
                cap,
                signals,
                headroom,
                cur,
                st,
                changed,
            )
            .unwrap();
            each(cur);
        }
    }

    #[test]
    fn all_loaded_keeps_capacity_shares() {
        // Every path at U ~ 1 (CL 1), LQS 0 would give no information: capacity decides.
        let p = IntegralParams::default();
        let mut st = vec![MemberState::default(); 4];
        let cap = [100.0, 25.0, 100.0, 100.0];
        let s: Vec<f64> = (0..4).map(|_| congestion(&sig(1))).collect();
        let mut changed = false;
        let mut cur = vec![0.25; 4];
        run4(
            &p,
            &cap,
            &s,
            &[0.0; 4],
            &mut cur,
            &mut st,
            &mut changed,
            100,
            |_| {},
        );
        assert!((cur[1] - 25.0 / 325.0).abs() < 1e-12, "{cur:?}");
        assert!(!changed);
    }

    #[test]
    fn a_congested_path_is_throttled_to_the_floor_and_recovers() {
        let p = IntegralParams {
            floor: 0.5,
            ..IntegralParams::default()
        };
        let mut st = vec![MemberState::default(); 4];
        let cap = [100.0; 4];
        let hot = [sig(1), sig(7), sig(1), sig(1)].map(|x| congestion(&x));
        let mut changed = false;
        let mut cur = vec![0.25; 4];
        let mut prev = cur[1];
        run4(
            &p,
            &cap,
            &hot,
            &[0.0; 4],
            &mut cur,
            &mut st,
            &mut changed,
            200,
            |c| {
                // Monotone, no oscillation.
                assert!(c[1] <= prev + 1e-12);
                prev = c[1];
            },
        );
        assert_eq!(st[1].m, p.floor);
        assert!((cur[1] - 0.5 / 3.5).abs() < 1e-12);
        let calm = [sig(1); 4].map(|x| congestion(&x));
        run4(
            &p,
            &cap,
            &calm,
            &[0.0; 4],
            &mut cur,
            &mut st,
            &mut changed,
            200,
            |_| {},
        );
        assert_eq!(st[1].m, 1.0);
        assert!((cur[1] - 0.25).abs() < 1e-12);
    }

    #[test]
    fn a_drained_path_takes_more_up_to_the_ceiling_then_returns() {
        // The tail of a job: S1 and S3 drained (headroom 0.9), S4 still full, S2 (a
        // quarter of the capacity) full. S1 and S3 rise to the ceiling; once every path is
        // full again, everything returns to the capacity shares.
        let p = IntegralParams::default();
        let mut st = vec![MemberState::default(); 4];
        let cap = [100.0, 25.0, 100.0, 100.0];
        let cl = [0.0, 1.0 / 7.0, 0.0, 1.0 / 7.0];
        let tail = [0.9, 0.0, 0.9, 0.0];
        let mut changed = false;
        let mut cur = vec![100.0 / 325.0, 25.0 / 325.0, 100.0 / 325.0, 100.0 / 325.0];
        let base = cur.clone();
        run4(
            &p,
            &cap,
            &cl,
            &tail,
            &mut cur,
            &mut st,
            &mut changed,
            300,
            |_| {},
        );
        assert_eq!(st[0].m, p.ceiling);
        assert_eq!(st[2].m, p.ceiling);
        assert_eq!(st[3].m, 1.0);
        // 200 / (200 + 25 + 200 + 100).
        assert!((cur[0] - 200.0 / 525.0).abs() < 1e-9, "{cur:?}");
        let full = [0.0; 4];
        let calm = [1.0 / 7.0; 4];
        run4(
            &p,
            &cap,
            &calm,
            &full,
            &mut cur,
            &mut st,
            &mut changed,
            300,
            |_| {},
        );
        assert!(!changed);
        for (c, b) in cur.iter().zip(&base) {
            assert!((c - b).abs() < 1e-9, "{cur:?}");
        }
        // A more congested member never rises, whatever its headroom.
        let mut st = vec![MemberState::default(); 2];
        let c = step(
            &p,
            &[p.floor; 2],
            &[true; 2],
            &[100.0; 2],
            &[1.0, 0.0],
            &[1.0, 0.0],
            &[0.5, 0.5],
            &mut st,
            &mut changed,
        )
        .unwrap();
        assert!(st[0].m < 1.0 && c[0] < 0.5, "{c:?}");
    }

    fn cap(gbps: f64, source: CapacitySource) -> Capacity {
        Capacity::new(gbps, source).unwrap()
    }

    #[test]
    fn headroom_is_available_over_capacity() {
        let mut s = MemberSignal {
            available_gbps: Some(20.0),
            ..MemberSignal::default()
        };
        let st = MemberState::default();
        let bgp = cap(100.0, CapacitySource::Bgp);
        assert!((headroom(&s, bgp, &st) - 0.2).abs() < 1e-12);
        assert_eq!(
            headroom(&s, cap(100.0, CapacitySource::Link), &st),
            0.0,
            "no remote capacity known (the uplink's speed is not the remote link's): no evidence of headroom"
        );
        s.available_gbps = Some(f64::NAN);
        assert_eq!(headroom(&s, bgp, &st), 0.0);
    }

    #[test]
    fn ineligible_members_get_nothing() {
        let p = IntegralParams::default();
        let mut st = vec![MemberState::default(); 3];
        let mut changed = false;
        let t = step(
            &p,
            &[p.floor; 3],
            &[true, false, true],
            &[10.0, 10.0, 30.0],
            &[0.0; 3],
            &[0.0; 3],
            &[0.0; 3],
            &mut st,
            &mut changed,
        )
        .unwrap();
        assert_eq!(t, vec![0.25, 0.0, 0.75]);
        assert!(
            step(
                &p,
                &[p.floor; 3],
                &[false; 3],
                &[1.0; 3],
                &[0.0; 3],
                &[0.0; 3],
                &[0.0; 3],
                &mut st,
                &mut changed
            )
            .is_none()
        );
    }

    #[test]
    fn capacity_prefers_the_slow_plane_then_peak_available() {
        let p = IntegralParams::default();
        let mut st = MemberState::default();
        let link = cap(400.0, CapacitySource::Link);
        assert_eq!(path_capacity(link, &st), 400.0);
        st.observe(&p, Some(100.0), 0);
        st.observe(&p, Some(3.0), 1_000_000);
        assert!((path_capacity(link, &st) - 100.0).abs() < 0.01);
        assert!((path_capacity(cap(10.0, CapacitySource::Link), &st) - 10.0).abs() < 1e-12);
        // The slow plane's capacity wins over the estimate, in both directions.
        assert_eq!(path_capacity(cap(25.0, CapacitySource::Bgp), &st), 25.0);
        assert_eq!(
            path_capacity(cap(400.0, CapacitySource::Config), &st),
            400.0
        );
        // One half-life later the held value has halved.
        st.observe(&p, Some(0.0), 30_001_000_000);
        let v = st.peak_available.unwrap().0;
        assert!((v - 50.0).abs() < 0.01, "{v}");
    }
}
