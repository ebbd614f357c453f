//! Measured local quality: `local_quality(S)` of seed 003 section 6.3 from the leaf's own
//! uplinks.
//!
//! `path_quality(S) = min(local_quality(S), remote_lqs(S, R, L))`, where local_quality is
//! "the quality of the leaf's uplink to spine S from the local DLB mechanism", and a
//! destination without an NNH mapping falls back to that local quality alone (6.1). A
//! switch ASIC has a DLB port-quality measure; a Linux leaf has none, so with
//! `[local-quality] source = "measured"` lqd measures each uplink's egress with the same
//! Appendix A pipeline a helper runs on its links (utilisation, queue depth, ECN marking,
//! PFC pause; smoothing; LQS), and takes that LQS as the uplink's local quality. Without
//! it (`"link-state"`, the default) local quality is 255 for an up uplink and 0 for a down
//! one.
//!
//! The pipeline's LQS moves at every T_sample; the weights need not follow every step.
//! A measured quality is applied the way a helper advertises one (7.2): at once when it
//! moves by more than CHANGE_THRESHOLD from the one applied or reaches or leaves 0, and
//! otherwise at most once per T_notify (its "periodic" refresh). The weights' own damping
//! (6.4) then applies to the change as to a remote one.

use crate::core::helper::{
    params::HelperParams,
    pipeline::{LinkPipeline, LinkReport, RawSample},
};

use super::path_quality::UplinkId;

/// One measured uplink.
#[derive(Clone, Debug)]
struct MeteredUplink {
    uplink: UplinkId,
    pipeline: LinkPipeline,
    /// The quality applied to the weights, and when.
    applied: Option<(u8, u64)>,
}

/// What [`LocalQualityMeter::view`] shows of one uplink (`lqd show uplinks`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeteredView {
    /// The uplink.
    pub uplink: UplinkId,
    /// The pipeline's last report (`None` before the first measured interval).
    pub report: Option<LinkReport>,
    /// The quality the weights use (`None`: not measured yet; link state applies).
    pub applied: Option<u8>,
}

/// The Appendix A pipelines of the uplinks and the rule that applies their LQS.
#[derive(Clone, Debug)]
pub struct LocalQualityMeter {
    uplinks: Vec<MeteredUplink>,
    change_threshold: u8,
    refresh_ns: u64,
}

impl LocalQualityMeter {
    /// Pipelines for `uplinks` (uplink id, the interface's ifindex as the link id), in the
    /// order their samples will come; `params` as the helper's (validated).
    pub fn new(uplinks: &[(UplinkId, u32)], params: &HelperParams) -> Self {
        Self {
            uplinks: uplinks
                .iter()
                .map(|&(uplink, link_id)| MeteredUplink {
                    uplink,
                    pipeline: LinkPipeline::new(link_id, params),
                    applied: None,
                })
                .collect(),
            change_threshold: params.change_threshold,
            refresh_ns: params.t_notify.as_nanos().try_into().unwrap_or(u64::MAX),
        }
    }

    /// Feeds one sample per uplink (in the order of [`LocalQualityMeter::new`]) taken at
    /// `now_ns`; returns the uplinks whose applied quality changed, with the new value.
    pub fn on_samples(&mut self, samples: &[RawSample], now_ns: u64) -> Vec<(UplinkId, u8)> {
        let mut changed = Vec::new();
        for (u, s) in self.uplinks.iter_mut().zip(samples) {
            let Some(report) = u.pipeline.on_sample(s) else {
                continue;
            };
            let lqs = report.lqs;
            let apply = match u.applied {
                None => true,
                Some((was, at)) => {
                    (was == 0) != (lqs == 0)
                        || was.abs_diff(lqs) > self.change_threshold
                        || (was != lqs && now_ns.saturating_sub(at) >= self.refresh_ns)
                }
            };
            if apply {
                if u.applied.map(|(q, _)| q) != Some(lqs) {
                    changed.push((u.uplink, lqs));
                }
                u.applied = Some((lqs, now_ns));
            }
        }
        changed
    }

    /// The applied quality of `uplink`, `None` until measured.
    pub fn quality(&self, uplink: UplinkId) -> Option<u8> {
        self.uplinks
            .iter()
            .find(|u| u.uplink == uplink)
            .and_then(|u| u.applied.map(|(q, _)| q))
    }

    /// Every uplink's pipeline report and applied quality.
    pub fn view(&self) -> Vec<MeteredView> {
        self.uplinks
            .iter()
            .map(|u| MeteredView {
                uplink: u.uplink,
                report: u.pipeline.report().copied(),
                applied: u.applied.map(|(q, _)| q),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const GBIT: u64 = 1_000_000_000;

    /// A 10 Gb/s uplink that sent `tx_bytes` so far with `queue` octets queued of 1 MB.
    fn sample(t_ms: u64, tx_bytes: u64, queue: u64) -> RawSample {
        RawSample {
            t_ns: t_ms * MS,
            tx_bytes,
            queue_depth_bytes: queue,
            max_buffer_bytes: 1_000_000,
            link_speed_bps: 10 * GBIT,
            oper_up: true,
            ..Default::default()
        }
    }

    fn meter() -> LocalQualityMeter {
        LocalQualityMeter::new(&[(1, 11), (2, 12)], &HelperParams::default())
    }

    /// Feeds both uplinks every 2 ms for `ms`: uplink 1 at `load1` of its line rate with
    /// `queue1` queued, uplink 2 idle. Returns every change applied, with its time.
    fn run(
        m: &mut LocalQualityMeter,
        from_ms: u64,
        ms: u64,
        load1: f64,
        queue1: u64,
        sent: &mut u64,
    ) -> Vec<(u64, UplinkId, u8)> {
        let mut out = Vec::new();
        for t in (from_ms..from_ms + ms).step_by(2) {
            // 10 Gb/s x 2 ms = 2.5 MB at full rate.
            *sent += (2_500_000.0 * load1) as u64;
            let s = [sample(t, *sent, queue1), sample(t, 0, 0)];
            out.extend(m.on_samples(&s, t * MS).into_iter().map(|(u, q)| (t, u, q)));
        }
        out
    }

    #[test]
    fn an_idle_uplink_is_applied_once_and_a_congested_one_falls_at_once() {
        let mut m = meter();
        let mut sent = 0;
        // The first sample is only the counters' baseline; the second is measured.
        let idle = run(&mut m, 0, 40, 0.0, 0, &mut sent);
        assert_eq!(idle, [(2, 1, 255), (2, 2, 255)], "{idle:?}");
        assert_eq!((m.quality(1), m.quality(2)), (Some(255), Some(255)));
        // Uplink 1 saturated with a deep queue: its LQS falls fast (alpha_rise 0.5); the
        // first move past CHANGE_THRESHOLD (25) is applied at the sample that makes it.
        let busy = run(&mut m, 40, 40, 1.0, 800_000, &mut sent);
        let (t, u, q) = busy[0];
        assert_eq!(u, 1);
        assert!(t <= 42 && q < 255 - 25, "{busy:?}");
        assert!(
            busy.iter().all(|c| c.1 == 1),
            "the idle uplink never moves: {busy:?}"
        );
        // Between threshold crossings the quality is refreshed at most once per T_notify.
        for w in busy.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(
                a.2.abs_diff(b.2) > 25 || b.0 - a.0 >= 20 || (a.2 == 0) != (b.2 == 0),
                "applied too often: {busy:?}"
            );
        }
        let low = m.quality(1).unwrap();
        assert!(low < 100, "saturated with 80 % of its buffer queued: {low}");
        assert_eq!(m.quality(2), Some(255));
    }

    #[test]
    fn a_link_down_is_zero_at_once_and_unmeasured_until_it_is_measured_again() {
        let mut m = meter();
        let mut sent = 0;
        run(&mut m, 0, 10, 0.0, 0, &mut sent);
        let down = RawSample {
            oper_up: false,
            ..sample(10, sent, 0)
        };
        let changed = m.on_samples(&[down, sample(10, 0, 0)], 10 * MS);
        assert_eq!(changed, [(1, 0)]);
        // Back up: the first sample only sets the baseline, and the link stays at 0 until
        // an interval has been measured (a quality from no measurement would be a guess).
        assert_eq!(
            m.on_samples(&[sample(12, sent, 0), sample(12, 0, 0)], 12 * MS),
            []
        );
        assert_eq!(m.quality(1), Some(0));
        let back = m.on_samples(&[sample(14, sent, 0), sample(14, 0, 0)], 14 * MS);
        assert_eq!(back, [(1, 255)]);
    }

    #[test]
    fn small_moves_wait_for_the_refresh() {
        let mut m = meter();
        let mut sent = 0;
        run(&mut m, 0, 4, 0.0, 0, &mut sent);
        // 5 % load, no queue: LQS a little below idle (1 - U), never 25 away from it.
        let moves = run(&mut m, 4, 200, 0.05, 0, &mut sent);
        assert!(
            !moves.is_empty(),
            "a lasting small move is applied eventually"
        );
        for w in moves.windows(2) {
            assert!(w[1].0 - w[0].0 >= 20, "{moves:?}");
        }
        let q = m.quality(1).unwrap();
        assert!((230..255).contains(&q), "{q}");
    }
}
