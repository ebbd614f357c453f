//! Issue 38 item 3b, a remote fault BGP does not see: S3's link to L4 stops forwarding
//! (`Clos3::stop_spine_forwarding`: its egress queue drops every packet offered, at the
//! link's unchanged rate) while the link stays up, the L4-S3 BGP session and S3's route
//! stay, and the slow plane's capacity (configuration or Link Bandwidth) is unchanged: a
//! gray failure. Static weights keep sending a quarter of L1's traffic into it; only S3's
//! LQ telemetry tells L1: drops while idle give CL 7 (held by Appendix A.6's hysteresis),
//! and an LQS of 25 in a 2 ms sample with a drop but up to 255 in one without (A.4's drop
//! indicator X is per sample, and an idle link's U and D are 0). Section 6.3 prunes only at
//! LQS 0, so lqd's default never takes S3 out and mostly sees it healthy; the opt-in
//! gray-failure prune (`--gray-failure-prune`) takes it out at once.
//!
//! Until session 33 the fault was a 1 Mbit/s tbf on S3->L4: the helper reads a root tbf's
//! rate as the link's speed (A.2's `link_speed`), so it saw a capacity cut to 1 Mbit/s
//! (U ~ 1, a full queue, LQS 0), not a failing link of unchanged capacity.
//!
//! A light load (24 flows paced at 2 Mbit/s) runs from H1 to H4 under L1's lqd; a thread
//! in L1's namespace polls lq's group and the octets L1 sends on its link to S3 every
//! ~1 ms ([`super::withdraw::poll`]). Measured: detection (the fault to lq's group without
//! S3) and how long after it L1 still sent data towards S3 (goal 10 ms), over the whole
//! fault: a path back in the group while the fault lasts (LQS above 0 again: an idle
//! broken link reads healthy, nothing is offered to it, so nothing is dropped) is counted,
//! and data it draws count against lq.

use std::time::Duration;

use anyhow::Result;
use lq_tests::fabric::Daemon;
use serde_json::{Value, json};

use super::{
    Ctx, now_s, sleep, stop_daemon,
    withdraw::{DATA_OCTETS, FLOWS, LEAF, PACING_BPS, Poll, SPINE, WatchedLoad, change},
};

/// Source ports of the load (the withdrawal's start at 40000).
const SPORT: u16 = 41000;
/// How long the fault lasts.
const FAULT: Duration = Duration::from_millis(2500);

/// What one fault measured.
pub struct RemoteFaultResult {
    flows: u16,
    flows_via_spine: u32,
    /// When the fault began: just before the qdisc change (seconds since the epoch).
    fault_s: f64,
    /// When lq's group lost S3 (last read with it, first without).
    pruned_s: Option<(f64, f64)>,
    /// When it first had S3 again while the fault lasted (last read without, first with).
    readmitted_s: Option<(f64, f64)>,
    /// Times lq's group regained S3 during the fault.
    readmissions: usize,
    /// End of the last poll interval with data towards S3 after the prune, while the fault
    /// lasted (readmissions included).
    last_data_s: Option<f64>,
    /// Octets L1 sent towards S3 from the fault to the prune.
    octets_before_prune: u64,
    polls: usize,
    max_gap_ms: f64,
    /// Whether lqd ran (lq) or the group stayed as created (static capacity weights: here
    /// every capacity is equal, so static is ECMP's group).
    with_lq: bool,
    /// The share of L1's octets on its spine links sent towards S`SPINE` from the fault to
    /// its end, and from lq's prune to the fault's end.
    share_fault: Option<f64>,
    share_after_prune: Option<f64>,
}

/// The spine whose link fails.
pub const FAULTY_SPINE: usize = SPINE;
/// The leaf at the far end of the failing link.
pub const FAULTY_LINK_LEAF: usize = LEAF;

impl RemoteFaultResult {
    /// From the fault to a second after its repair (seconds since the epoch): when L4 may
    /// rightly declare S3 failed (its advertisements cross the dead link) and recover it.
    pub fn window(&self) -> (f64, f64) {
        (self.fault_s, self.fault_s + FAULT.as_secs_f64() + 1.0)
    }

    /// The share of L1's octets on its spine links that went towards S`SPINE` from the
    /// fault to its end.
    pub fn share_during_fault(&self) -> Option<f64> {
        self.share_fault
    }

    /// From the fault to lq's group without S3 (at most: the first read without it).
    pub fn detection_ms(&self) -> Option<f64> {
        Some((self.pruned_s?.1 - self.fault_s) * 1e3)
    }

    /// Data towards S3 after lq's prune (at its earliest) while the fault lasted; 0 when
    /// none.
    pub fn traffic_after_detection_ms(&self) -> Option<f64> {
        let (pruned, _) = self.pruned_s?;
        Some(
            self.last_data_s
                .map_or(0.0, |t| ((t - pruned) * 1e3).max(0.0)),
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "variant": if self.with_lq { "lq" } else { "static" },
            "share_towards_spine_during_fault": self.share_fault,
            "share_towards_spine_after_prune": self.share_after_prune,
            "fault": format!("S{SPINE}->L{LEAF} stops forwarding for {} ms: its root tbf keeps its rate (the link speed the helper reads), its queue is a pfifo of limit 0 that drops every packet; link, BGP session and capacity unchanged", FAULT.as_millis()),
            "flows": self.flows, "flows_via_faulty_spine": self.flows_via_spine,
            "pacing_mbit": PACING_BPS / 1_000_000,
            "fault_at_s": self.fault_s,
            "lq_route_without_spine_between_s": self.pruned_s.map(|(a, b)| [a, b]),
            "lq_route_with_spine_again_between_s": self.readmitted_s.map(|(a, b)| [a, b]),
            "readmissions_during_fault": self.readmissions,
            "octets_towards_spine_before_prune": self.octets_before_prune,
            "detection_ms": self.detection_ms(),
            "traffic_after_detection_ms": self.traffic_after_detection_ms(),
            "last_data_towards_spine_at_s": self.last_data_s,
            "polls": self.polls, "max_poll_gap_ms": self.max_gap_ms,
        })
    }

    pub fn line(&self) -> String {
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
        let share = self
            .share_fault
            .map_or("-".into(), |v| format!("{:.1} %", v * 100.0));
        if !self.with_lq {
            return format!(
                "static capacity weights: S{SPINE}->L{LEAF} stops forwarding ({} of {} flows on S{SPINE}): {share} of L1's octets sent towards S{SPINE} while it lasted",
                self.flows_via_spine, self.flows
            );
        }
        if self.pruned_s.is_none() {
            return format!(
                "S{SPINE}->L{LEAF} stops forwarding ({} of {} flows on S{SPINE}): lq never took S{SPINE} out of the group (section 6.3 prunes at LQS 0 only; Appendix A.4 scores the idle dropping link 25 in a 2 ms sample with a drop, up to 255 in one without), {share} of L1's octets sent towards S{SPINE} while it lasted (poll gap max {:.1} ms)",
                self.flows_via_spine, self.flows, self.max_gap_ms
            );
        }
        format!(
            "S{SPINE}->L{LEAF} stops forwarding ({} of {} flows on S{SPINE}): lq pruned S{SPINE} after {}, data towards S{SPINE} {} after that, {} readmission(s) while the fault lasted, {share} of L1's octets sent towards S{SPINE} while it lasted (poll gap max {:.1} ms)",
            self.flows_via_spine,
            self.flows,
            f(self.detection_ms()),
            f(self.traffic_after_detection_ms()),
            self.readmissions,
            self.max_gap_ms
        )
    }
}

/// Runs the phase: on a fresh group of equal weights (every capacity is the same), lqd
/// started on L1 (`with_lq`) or not (static capacity weights, created the same way, the
/// same timers), the load, the fault, the repair; lqd stopped at the end.
pub fn run_remote_fault(
    c: &Ctx,
    leaves: &mut [Option<Daemon>],
    draw: u32,
    run: u32,
    with_lq: bool,
) -> Result<RemoteFaultResult> {
    stop_daemon(&mut leaves[0]);
    c.fresh_group(&[(1, 255), (2, 255), (3, 255), (4, 255)])?;
    if with_lq {
        leaves[0] = Some(c.start_l1(&format!("f{draw}"))?);
    }
    c.mark(if with_lq {
        "remote fault"
    } else {
        "remote fault static"
    });
    println!(
        "==> demo: remote fault ({}): {FLOWS} flows paced at {} Mbit/s from H1 to H4, then S{SPINE}->L{LEAF} stops forwarding (drops every packet) while its link, its rate, BGP and capacity stay",
        if with_lq {
            "lq"
        } else {
            "static capacity weights"
        },
        PACING_BPS / 1_000_000
    );
    let result = WatchedLoad::start(c, run, SPORT, false).and_then(|mut load| {
        let fault_s = now_s();
        let faulted = c.fab.stop_spine_forwarding(SPINE, LEAF);
        let slept = sleep(FAULT);
        let polls = load.polls();
        // Repair whatever happened, then stop the load.
        let repaired = c.fab.set_spine_rate(SPINE, LEAF, 100);
        let flows_via_spine = load.flows_via_spine;
        load.stop(c);
        let polls = polls?;
        faulted?;
        slept?;
        repaired?;
        Ok(judge(&polls, fault_s, FLOWS, flows_via_spine, with_lq))
    });
    stop_daemon(&mut leaves[0]);
    result
}

/// The measurements from the polls (pure, for the unit test).
fn judge(
    polls: &[Poll],
    fault_s: f64,
    flows: u16,
    flows_via_spine: u32,
    with_lq: bool,
) -> RemoteFaultResult {
    let pruned_s = change(polls, fault_s, |p| (p.t_lq, p.lq));
    let after_prune: Vec<&[Poll]> = match pruned_s {
        Some((at, _)) => polls.windows(2).filter(|w| w[0].t_lq >= at).collect(),
        None => Vec::new(),
    };
    let readmit_windows: Vec<&&[Poll]> =
        after_prune.iter().filter(|w| !w[0].lq && w[1].lq).collect();
    let readmitted_s = readmit_windows.first().map(|w| (w[0].t_lq, w[1].t_lq));
    let last_data_s = after_prune
        .iter()
        .filter(|w| w[1].tx.saturating_sub(w[0].tx) >= DATA_OCTETS)
        .map(|w| w[1].t_tx)
        .reduce(f64::max);
    let before = |t: f64| polls.iter().rev().find(|p| p.t_tx <= t).map(|p| p.tx);
    let octets_before_prune = match (before(fault_s), pruned_s.and_then(|(_, b)| before(b))) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let max_gap_ms = polls
        .windows(2)
        .map(|w| (w[1].t_lq - w[0].t_lq) * 1e3)
        .fold(0.0, f64::max);
    RemoteFaultResult {
        flows,
        flows_via_spine,
        fault_s,
        pruned_s,
        readmitted_s,
        readmissions: readmit_windows.len(),
        last_data_s,
        octets_before_prune,
        polls: polls.len(),
        max_gap_ms,
        with_lq,
        share_fault: share_towards_spine(polls, fault_s),
        share_after_prune: pruned_s.and_then(|(at, _)| share_towards_spine(polls, at)),
    }
}

/// The share of L1's octets on its spine links sent towards S`SPINE` from the last poll
/// at or before `from` to the last poll; `None` without such polls or without octets.
fn share_towards_spine(polls: &[Poll], from: f64) -> Option<f64> {
    let start = polls.iter().rev().find(|p| p.t_tx <= from)?;
    let end = polls.last()?;
    let all = end.tx_all.checked_sub(start.tx_all)?;
    (all > 0).then(|| end.tx.saturating_sub(start.tx) as f64 / all as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: f64, lq: bool, tx: u64) -> Poll {
        Poll {
            t_bgp: t,
            bgp: false,
            t_lq: t,
            lq,
            t_tx: t,
            tx,
            // The other three spine links carry three times as much.
            tx_all: 4 * tx,
        }
    }

    /// Detection runs from the fault to the first read without S3; data after the prune
    /// count to the fault's end, a readmission's included.
    #[test]
    fn detection_and_data_after_it() {
        let polls = [
            p(10.000, true, 0),
            p(10.010, true, 5_000),
            p(10.020, true, 9_000),
            p(10.030, false, 12_000), // pruned between 10.020 and 10.030
            p(10.035, false, 14_000), // 2 000 octets: still draining
            p(10.040, false, 14_100), // 100: not data
            p(10.300, true, 14_100),  // readmitted
            p(10.310, true, 20_000),  // data after the readmission: charged
            p(10.320, false, 20_000),
        ];
        let r = judge(&polls, 10.005, 24, 5, true);
        assert!((r.detection_ms().unwrap() - 25.0).abs() < 1e-6);
        assert!((r.share_during_fault().unwrap() - 0.25).abs() < 1e-9);
        assert!((r.traffic_after_detection_ms().unwrap() - 290.0).abs() < 1e-6);
        // Without the readmission's data: the drain right after the prune.
        let mut quiet = polls;
        quiet[7].tx = 14_100;
        quiet[8].tx = 14_100;
        let r = judge(&quiet, 10.005, 24, 5, true);
        assert!((r.traffic_after_detection_ms().unwrap() - 15.0).abs() < 1e-6);
        assert_eq!(r.readmissions, 1);
        assert_eq!(r.octets_before_prune, 12_000);
        // Never pruned: nothing measured.
        let never = [p(10.0, true, 0), p(10.1, true, 9_000)];
        let r = judge(&never, 10.0, 24, 5, true);
        assert_eq!(r.detection_ms(), None);
        assert_eq!(r.traffic_after_detection_ms(), None);
    }
}
