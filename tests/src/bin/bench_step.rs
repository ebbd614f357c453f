//! `bench_step`: the load balancer's control step's own work at a leaf of a 64 x 512 fabric,
//! in process: the same code lqd runs (`PathMirror::refresh`, `compute_some_groups`,
//! `WeightController::update_reported`, `replace::decide_installed`), fed the churn of
//! `bench_scale` in virtual time, without the kernel, the daemon's loop or another process
//! on the CPU.
//!
//! Why beside `bench_scale`: that benchmark measures the whole leaf (XDP, lqd, the kernel's
//! replaces) and its lqd figure moves by 30 % between windows on a shared 2-core host (issue
//! 41's notes), so a change that saves a tenth of the step cannot be seen there. Here one
//! thread's CPU time is measured per phase, each beside a floor measured in the same round:
//! the memory the phase cannot avoid touching, read in the same order. A ratio to its floor
//! does not move with the host's speed.
//!
//! The churn, per round of T_notify (20 ms, virtual): every entry re-advertised with LQS
//! noise of +-5 around its level (200) and 1 % of the entries a second moving between 200
//! and 150 (as `bench_scale`'s fabric churn, without its spine failure). The table is laid
//! out as the receiver claims slots (each spine's entries together, in its datagrams'
//! order) and read through the position-to-slot map the daemon keeps, so that the refresh
//! reads it with the daemon's stride.
//!
//! The table is written as the receiver writes it: each slot's row, then its stamp word
//! (refresh stamp, LQS, CL); the refresh reads a named spine's rows by their stamp words
//! (lqd's default, `PathMirror::set_qualities_only`), or whole.
//!
//! Each run is done four times, alternated: with the table written by this thread; with it
//! written by a second thread pinned to another CPU (`cross-core`), as lqd reads what the
//! XDP receiver wrote on another core; cross-core again with the rows read whole (as
//! before issue 41's stamp words, and as lqd still reads them when the weights need the
//! available bandwidth); and cross-core with the refresh paced as lqd's loop paces it (a
//! quarter of the spines named at each of four refreshes a round, `PACED_STEPS`; the
//! others name every spine once a round). Cross-core, every row or word the refresh reads, and every one
//! its floor reads (written again, with the same values, between the two), is a line the
//! other core holds modified: what those transfers cost, which the daemon pays and the
//! same-thread figures cannot show.
//!
//! Metrics (medians over `REPEATS` runs of `ROUNDS` rounds; every round counts):
//! - `step_refresh_ns_per_row_64x512` (baseline: the floor, the same stamp words gathered
//!   in the same order into a copy, ns per row);
//! - `step_group_us_64x512` (baseline: the floor, each group's 64 entries read from the
//!   snapshot and summed), with its parts `step_compute_us_64x512` (path quality, 6.3,
//!   and the report kept for the views as lqd keeps it, its replaced members' vectors
//!   reused; since session 46, about 0.2 us more than before it was counted),
//!   `step_update_us_64x512` (targets, damping, quantisation, 6.3-6.4) and
//!   `step_decide_us_64x512` (the replace rule, issue 41);
//! - `step_refresh_cross_core_ns_per_row_64x512` (baseline: its floor, the same gather of
//!   words the other core wrote) and `step_refresh_cross_core_vs_floor_ratio_64x512`: the
//!   refresh with the table written on another CPU (absent on a one-CPU host);
//! - `step_refresh_cross_core_whole_rows_ns_per_row_64x512` (baseline: its floor, the
//!   same gather of whole rows) and `step_refresh_words_vs_whole_rows_ratio_64x512`
//!   (baseline 1): the same refresh reading whole rows, and the stamp words' time over it,
//!   run by run;
//! - `step_refresh_paced_cross_core_ns_per_row_64x512` (baseline: its floor, the same
//!   gather of the words of the spines named) and
//!   `step_refresh_paced_cross_core_vs_floor_ratio_64x512`: the cross-core refresh as lqd's
//!   paced loop does it under the churn, a quarter of the spines named at each of four
//!   refreshes a round (`PACED_STEPS`): the mirror's rows of the other spines lie between
//!   those read, so a row read costs more lines than at one refresh a round (the other
//!   runs), which is what lqd pays;
//! - `step_refresh_vs_floor_ratio_64x512`, `step_group_vs_floor_ratio_64x512`: each run's
//!   phase time over its floor's (median of the runs): the figures to compare across runs,
//!   since the host's speed moves a phase and its floor together (on the shared 2-core
//!   host, within one hour, both moved by up to 1.9x between runs and their ratios by up
//!   to 25 %: a change smaller than that needs several runs of each side, alternated);
//! - `step_cpu_pct_64x512`: what those cost at `bench_scale`'s rates (1.64 M rows and
//!   25 600 group computations a second), % of a core: the part of `leaf_lqd_cpu_pct_64x512`
//!   that is the step's own work (lqd's loop, its system calls and the replaces are not in
//!   it). Goal: issue 41's budget for the leaf (8 % of a core with the kernel's time) less
//!   the XDP receiver's goal (4 %) and the replaces' kernel time (about 0.5 %).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::mpsc;

use anyhow::{Result, ensure};
use lq_common::maps::{PathKey, PathValue, path_stamp_word, path_stamp_word_parts};
use lq_tests::bench::{emit, main_of, median, pin_to_cpu, thread_cpu_ns};
use lq_user::core::controller::config::{ControllerConfig, GroupKind};
use lq_user::core::controller::path_mirror::{PathMirror, RefreshClock, TableRows};
use lq_user::core::controller::path_quality::{
    Capacity, CapacitySource, GroupKey, LocalQuality, MemberQuality, NnhMapping, NodeId,
    PathQualityReport, Uplink, compute_some_groups_reusing, node, remote_order,
};
use lq_user::core::controller::replace::{
    self, GroupShape, Hold, Installed, ReplacePolicy, Verdict,
};
use lq_user::core::controller::weights::WeightController;

const SPINES: u32 = 64;
const REMOTES: u32 = 512;
const T_NOTIFY_NS: u64 = 20_000_000;
/// Rounds of T_notify per run, and runs.
const ROUNDS: u64 = 100;
const REPEATS: usize = 5;
/// The noise on every entry every round, and the real events' share of the entries a
/// second (`bench_scale`'s fabric churn).
const NOISE: u64 = 5;
const EVENT_SHARE_PER_S: f64 = 0.01;
/// Refreshes a round in the paced runs: lqd's loop steps 150-200 times a second under
/// `bench scale`'s churn (its change events paced, its damping steps and its reads of the
/// neighbor table each woken at their own time: 145-195 measured, issue 41), so each
/// step reads the rows of the spines heard from since the last, about a quarter of them at
/// T_notify 20 ms.
const PACED_STEPS: u32 = 4;
/// `bench_scale`'s rates: entries sent and group computations a second.
const ROWS_PER_S: f64 = 1.64e6;
const GROUPS_PER_S: f64 = 25_600.0;

fn main() -> ExitCode {
    main_of("bench_step", run)
}

/// A small deterministic generator (xorshift64*): the same churn in every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Per run, the CPU time of each phase and of its floor, ns.
#[derive(Default)]
struct Run {
    refresh: u64,
    refresh_floor: u64,
    rows: u64,
    compute: u64,
    update: u64,
    decide: u64,
    group_floor: u64,
    groups: u64,
    replaces: u64,
}

/// A table row as the refresh reads it.
type Row = (PathKey, PathValue);

/// What a writer writes, by slot: the rows, and their stamp words.
#[derive(Default)]
struct Table {
    rows: Vec<Row>,
    words: Vec<u32>,
}

/// Which spines a write (and the refresh after it) covers: spine `s` (from 1) is in part
/// `(s - 1) % of` (one part of 1: every spine).
#[derive(Clone, Copy)]
struct Part {
    index: u32,
    of: u32,
}

impl Part {
    fn has(self, spine_rank: u32) -> bool {
        spine_rank % self.of == self.index
    }
}

/// Writes a round's advertisements into the table as the receiver does: every row of the
/// spines in `part`, its LQS from `lqs` (by slot), refreshed at `now`, then its stamp word.
/// Slots are the receiver's, spine by spine (`REMOTES` each).
fn advertise(table: &mut Table, lqs: &[u8], now: u64, part: Part) {
    let rows = table.rows.chunks_mut(REMOTES as usize);
    let words = table.words.chunks_mut(REMOTES as usize);
    let levels = lqs.chunks(REMOTES as usize);
    for (rank, ((rows, words), levels)) in (0..).zip(rows.zip(words).zip(levels)) {
        if !part.has(rank) {
            continue;
        }
        for (((_, v), w), &q) in rows.iter_mut().zip(words).zip(levels) {
            v.lqs = q;
            v.last_update_ns = now;
            *w = path_stamp_word(now, q, v.cl);
        }
    }
}

/// The table as the daemon's reader sees it: a position's row and word are in its slot.
struct SlotRows<'t> {
    table: &'t Table,
    slot_of: &'t [usize],
}

impl TableRows for SlotRows<'_> {
    fn row(&mut self, position: usize) -> Option<Row> {
        self.table.rows.get(*self.slot_of.get(position)?).copied()
    }

    fn stamp(&mut self, position: usize) -> Option<u16> {
        self.stamp_word(position)
            .map(|w| path_stamp_word_parts(w).0)
    }

    fn stamp_word(&mut self, position: usize) -> Option<u32> {
        self.table.words.get(*self.slot_of.get(position)?).copied()
    }
}

/// Where a round's advertisements are written: here, or by a thread pinned to another CPU
/// (the table moves to it and back through channels; only the writes happen there).
enum Writer {
    SameThread,
    OtherCpu {
        jobs: mpsc::SyncSender<(Table, Vec<u8>, u64, Part)>,
        done: mpsc::Receiver<(Table, Vec<u8>)>,
    },
}

impl Writer {
    /// A writer thread pinned to `cpu` (this thread stays where it is).
    fn other_cpu(cpu: usize) -> Self {
        let (jobs, job_rx) = mpsc::sync_channel::<(Table, Vec<u8>, u64, Part)>(0);
        let (done_tx, done) = mpsc::sync_channel(0);
        std::thread::spawn(move || {
            pin_to_cpu(0, cpu);
            while let Ok((mut table, lqs, now, part)) = job_rx.recv() {
                advertise(&mut table, &lqs, now, part);
                if done_tx.send((table, lqs)).is_err() {
                    break;
                }
            }
        });
        Writer::OtherCpu { jobs, done }
    }

    /// Writes the round's advertisements of the spines in `part` into `table` (where this
    /// writer writes) and returns when it is done.
    fn write(&self, table: &mut Table, lqs: &mut Vec<u8>, now: u64, part: Part) -> Result<()> {
        match self {
            Writer::SameThread => advertise(table, lqs, now, part),
            Writer::OtherCpu { jobs, done } => {
                jobs.send((std::mem::take(table), std::mem::take(lqs), now, part))?;
                (*table, *lqs) = done.recv()?;
            }
        }
        Ok(())
    }
}

/// Per group, what the kernel holds (the weights last written) and the replace rule's hold.
type GroupInstalled = (Installed, Option<Hold>);

fn spine(s: u32) -> NodeId {
    node(65_000, 0x0a00_0000 + s)
}

fn remote(r: u32) -> NodeId {
    node(65_100, 0x0a10_0000 + r)
}

fn run() -> Result<()> {
    let cfg = ControllerConfig::default();
    let GroupKind::Resilient { buckets, .. } = cfg.group else {
        anyhow::bail!("lqd's default group is resilient");
    };
    let shape = GroupShape::Resilient {
        buckets,
        max_weight: cfg.weight_resolution.max_weight(),
    };
    let policy = ReplacePolicy::default();
    let mut mapping = NnhMapping::default();
    let mut local = LocalQuality::default();
    for s in 1..=SPINES {
        mapping.uplinks.insert(
            s,
            Uplink {
                spine: spine(s),
                capacity: Capacity::new(400.0, CapacitySource::Link).expect("> 0"),
            },
        );
        local.set_up(s, true);
    }
    let keys: Vec<GroupKey> = (0..REMOTES).map(|r| GroupKey::remote(remote(r))).collect();
    // This thread on CPU 0, the cross-core writer on CPU 1 (none on a one-CPU host).
    let cross_core = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let other = if cross_core {
        pin_to_cpu(0, 0);
        Some(Writer::other_cpu(1))
    } else {
        eprintln!("one CPU: the cross-core refresh is not measured");
        None
    };
    let mut runs = Vec::new();
    let mut cross_runs = Vec::new();
    let mut cross_whole_runs = Vec::new();
    let mut cross_paced_runs = Vec::new();
    for repeat in 0..REPEATS {
        let once = |writer: &Writer, qualities_only: bool, steps: u32| {
            one_run(
                &cfg,
                &mapping,
                &local,
                &keys,
                &policy,
                shape,
                repeat as u64,
                writer,
                qualities_only,
                steps,
            )
        };
        runs.push(once(&Writer::SameThread, true, 1)?);
        if let Some(writer) = &other {
            cross_runs.push(once(writer, true, 1)?);
            cross_whole_runs.push(once(writer, false, 1)?);
            cross_paced_runs.push(once(writer, true, PACED_STEPS)?);
        }
    }
    let per = |f: &dyn Fn(&Run) -> f64| -> (f64, f64, f64) { summary(&runs, f) };
    let row_ns = per(&|r| r.refresh as f64 / r.rows as f64);
    let row_floor = per(&|r| r.refresh_floor as f64 / r.rows as f64);
    let us = |x: u64, r: &Run| x as f64 / r.groups as f64 / 1e3;
    let group_us = per(&|r| us(r.compute + r.update + r.decide, r));
    let compute_us = per(&|r| us(r.compute, r));
    let update_us = per(&|r| us(r.update, r));
    let decide_us = per(&|r| us(r.decide, r));
    let group_floor = per(&|r| us(r.group_floor, r));
    let replaces = per(&|r| r.replaces as f64 / r.groups as f64);
    // Per run, each phase over its floor of the same run: the host's speed moves both.
    let row_ratio = per(&|r| r.refresh as f64 / r.refresh_floor.max(1) as f64);
    // The cross-core runs' figures (`None` on a one-CPU host).
    let per_cross = |runs: &[Run], f: &dyn Fn(&Run) -> f64| -> Option<(f64, f64, f64)> {
        (!runs.is_empty()).then(|| summary(runs, f))
    };
    let ns_a_row = |r: &Run| r.refresh as f64 / r.rows as f64;
    let floor_a_row = |r: &Run| r.refresh_floor as f64 / r.rows as f64;
    let cross_row_ns = per_cross(&cross_runs, &ns_a_row);
    let cross_row_floor = per_cross(&cross_runs, &floor_a_row);
    let cross_row_ratio = per_cross(&cross_runs, &|r| {
        r.refresh as f64 / r.refresh_floor.max(1) as f64
    });
    let cross_whole_ns = per_cross(&cross_whole_runs, &ns_a_row);
    let cross_whole_floor = per_cross(&cross_whole_runs, &floor_a_row);
    let paced_ns = per_cross(&cross_paced_runs, &ns_a_row);
    let paced_floor = per_cross(&cross_paced_runs, &floor_a_row);
    let paced_ratio = per_cross(&cross_paced_runs, &|r| {
        r.refresh as f64 / r.refresh_floor.max(1) as f64
    });
    // Stamp words over whole rows, run by run (alternated: the same host speed).
    let words_vs_whole: Vec<f64> = cross_runs
        .iter()
        .zip(&cross_whole_runs)
        .map(|(w, r)| ns_a_row(w) / ns_a_row(r))
        .collect();
    let group_ratio =
        per(&|r| (r.compute + r.update + r.decide) as f64 / r.group_floor.max(1) as f64);
    let cpu_pct = per(&|r| {
        (ROWS_PER_S * r.refresh as f64 / r.rows as f64
            + GROUPS_PER_S * us(r.compute + r.update + r.decide, r) * 1e3)
            / 1e9
            * 100.0
    });
    eprintln!(
        "control step, {SPINES} x {REMOTES}, {REPEATS} runs of {ROUNDS} rounds (median [min, max]): refresh {:.1} [{:.1}, {:.1}] ns a row (floor {:.1}); a group {:.2} [{:.2}, {:.2}] us (compute {:.2}, update {:.2}, decide {:.2}; floor {:.3}); {:.4} replaces a group computation; over their floors: refresh {:.2} [{:.2}, {:.2}], a group {:.2} [{:.2}, {:.2}]; at bench_scale's rates {:.1} [{:.1}, {:.1}] % of a core",
        row_ns.0,
        row_ns.1,
        row_ns.2,
        row_floor.0,
        group_us.0,
        group_us.1,
        group_us.2,
        compute_us.0,
        update_us.0,
        decide_us.0,
        group_floor.0,
        replaces.0,
        row_ratio.0,
        row_ratio.1,
        row_ratio.2,
        group_ratio.0,
        group_ratio.1,
        group_ratio.2,
        cpu_pct.0,
        cpu_pct.1,
        cpu_pct.2,
    );
    emit(
        "step_refresh_ns_per_row_64x512",
        row_ns.0,
        "ns",
        None,
        Some(row_floor.0),
    );
    emit(
        "step_group_us_64x512",
        group_us.0,
        "us",
        None,
        Some(group_floor.0),
    );
    if let (Some(ns), Some(floor), Some(ratio)) = (cross_row_ns, cross_row_floor, cross_row_ratio) {
        eprintln!(
            "the table written on another CPU: refresh {:.1} [{:.1}, {:.1}] ns a row (floor {:.1} [{:.1}, {:.1}]), over its floor {:.2} [{:.2}, {:.2}]",
            ns.0, ns.1, ns.2, floor.0, floor.1, floor.2, ratio.0, ratio.1, ratio.2
        );
        emit(
            "step_refresh_cross_core_ns_per_row_64x512",
            ns.0,
            "ns",
            None,
            Some(floor.0),
        );
        emit(
            "step_refresh_cross_core_vs_floor_ratio_64x512",
            ratio.0,
            "ratio",
            None,
            None,
        );
    }
    if let (Some(ns), Some(floor)) = (cross_whole_ns, cross_whole_floor) {
        eprintln!(
            "the same, rows read whole: refresh {:.1} [{:.1}, {:.1}] ns a row (floor {:.1} [{:.1}, {:.1}]); stamp words over whole rows, run by run: {words_vs_whole:.2?}",
            ns.0, ns.1, ns.2, floor.0, floor.1, floor.2
        );
        emit(
            "step_refresh_cross_core_whole_rows_ns_per_row_64x512",
            ns.0,
            "ns",
            None,
            Some(floor.0),
        );
        emit(
            "step_refresh_words_vs_whole_rows_ratio_64x512",
            median(&words_vs_whole),
            "ratio",
            None,
            Some(1.0),
        );
    }
    if let (Some(ns), Some(floor), Some(ratio)) = (paced_ns, paced_floor, paced_ratio) {
        eprintln!(
            "the same, a quarter of the spines named at each of {PACED_STEPS} refreshes a round (lqd's paced steps): refresh {:.1} [{:.1}, {:.1}] ns a row (floor {:.1} [{:.1}, {:.1}]), over its floor {:.2} [{:.2}, {:.2}]",
            ns.0, ns.1, ns.2, floor.0, floor.1, floor.2, ratio.0, ratio.1, ratio.2
        );
        emit(
            "step_refresh_paced_cross_core_ns_per_row_64x512",
            ns.0,
            "ns",
            None,
            Some(floor.0),
        );
        emit(
            "step_refresh_paced_cross_core_vs_floor_ratio_64x512",
            ratio.0,
            "ratio",
            None,
            None,
        );
    }
    emit(
        "step_refresh_vs_floor_ratio_64x512",
        row_ratio.0,
        "ratio",
        None,
        None,
    );
    emit(
        "step_group_vs_floor_ratio_64x512",
        group_ratio.0,
        "ratio",
        None,
        None,
    );
    emit("step_compute_us_64x512", compute_us.0, "us", None, None);
    emit("step_update_us_64x512", update_us.0, "us", None, None);
    emit("step_decide_us_64x512", decide_us.0, "us", None, None);
    emit(
        "step_cpu_pct_64x512",
        cpu_pct.0,
        "% of a core",
        Some("<= 3.5"),
        None,
    );
    Ok(())
}

/// A figure's median, minimum and maximum over `runs`.
fn summary(runs: &[Run], f: &dyn Fn(&Run) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = runs.iter().map(f).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (median(&v), lo, hi)
}

/// One run of `ROUNDS` rounds from a fresh start (the first round installs every group),
/// the advertisements written by `writer`, the table refreshed `steps` times a round (each
/// time a `1 / steps` part of the spines named; the groups computed once, after the last).
#[allow(clippy::too_many_arguments)] // the run's fixed inputs, each named at the call
fn one_run(
    cfg: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    keys: &[GroupKey],
    policy: &ReplacePolicy,
    shape: GroupShape,
    seed: u64,
    writer: &Writer,
    qualities_only: bool,
    steps: u32,
) -> Result<Run> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x1000_0000_01b3));
    // Slots as the receiver claims them: spine by spine, each spine's remote nodes in its
    // datagrams' order.
    let mut rows: Vec<Row> = Vec::new();
    let mut level: Vec<u8> = Vec::new();
    for s in 1..=SPINES {
        for r in 0..REMOTES {
            let (sp, rm) = (spine(s), remote(r));
            rows.push((
                PathKey {
                    spine_as: sp.node_as,
                    spine_id: sp.node_id,
                    remote_as: rm.node_as,
                    remote_id: rm.node_id,
                    link_id: 1,
                },
                PathValue {
                    last_update_ns: 0,
                    lqs: 200,
                    ..Default::default()
                },
            ));
            level.push(200);
        }
    }
    // The daemon's position order (remote node, then spine) and each position's slot.
    let mut slot_of: Vec<usize> = (0..rows.len()).collect();
    slot_of.sort_unstable_by_key(|&i| remote_order(&rows[i].0));
    let none = BTreeSet::new();
    let dead = cfg.dead_interval_ns();
    let mut mirror = PathMirror::default();
    mirror.set_qualities_only(qualities_only);
    mirror.rebuild(
        slot_of.iter().map(|&i| rows[i]).collect(),
        0,
        0,
        dead,
        &none,
    );
    // Per part of the spines (`steps` of them), the spines named and the slots of their
    // rows in the mirror's order (what the floor gathers).
    let named: Vec<BTreeSet<NodeId>> = (0..steps)
        .map(|index| {
            let part = Part { index, of: steps };
            (1..=SPINES)
                .filter(|s| part.has(s - 1))
                .map(spine)
                .collect()
        })
        .collect();
    let part_slots: Vec<Vec<usize>> = (0..steps)
        .map(|index| {
            let part = Part { index, of: steps };
            (slot_of.iter())
                .filter(|&&i| part.has(i as u32 / REMOTES))
                .copied()
                .collect()
        })
        .collect();
    let mut weights = WeightController::new(*cfg)?;
    let mut installed: BTreeMap<GroupKey, GroupInstalled> = BTreeMap::new();
    let mut last = PathQualityReport::default();
    let mut spare: Vec<Vec<MemberQuality>> = Vec::new();
    let mut copy = vec![(PathKey::default(), PathValue::default()); rows.len()];
    let mut word_copy = vec![0u32; rows.len()];
    let mut table = Table {
        words: vec![0; rows.len()],
        rows,
    };
    let mut lqs = level.clone();
    let mut out = Run::default();
    let events_per_round =
        (table.rows.len() as f64 * EVENT_SHARE_PER_S * T_NOTIFY_NS as f64 / 1e9).round() as usize;
    for round in 1..=ROUNDS {
        let now = round * T_NOTIFY_NS;
        // The spines' datagrams: every entry again, with noise; a few real events.
        for _ in 0..events_per_round {
            let i = (rng.next() % table.rows.len() as u64) as usize;
            level[i] = if level[i] == 200 { 150 } else { 200 };
        }
        for (q, l) in lqs.iter_mut().zip(&level) {
            let noise = (rng.next() % (2 * NOISE + 1)) as u8;
            *q = l - NOISE as u8 + noise;
        }
        // The refresh, `steps` times a round, each of the spines in one part named (each
        // sent all its entries since the last), and its floor: the same stamp words (or
        // whole rows) gathered in the same order, written again first by the same writer
        // (the same values), so that the floor reads them from where the refresh did.
        let mut changed: Vec<NodeId> = Vec::new();
        for index in 0..steps {
            let part = Part { index, of: steps };
            let at = now - T_NOTIFY_NS + u64::from(index + 1) * T_NOTIFY_NS / u64::from(steps);
            writer.write(&mut table, &mut lqs, at, part)?;
            let t0 = thread_cpu_ns();
            let r = mirror.refresh(
                &named[index as usize],
                &[],
                RefreshClock {
                    not_before_ns: 0,
                    now_ns: at,
                    dead_ns: dead,
                },
                &none,
                &mut SlotRows {
                    table: &table,
                    slot_of: &slot_of,
                },
            );
            let t1 = thread_cpu_ns();
            writer.write(&mut table, &mut lqs, at, part)?;
            let slots = &part_slots[index as usize];
            let t2 = thread_cpu_ns();
            if qualities_only {
                for (c, &i) in word_copy.iter_mut().zip(slots) {
                    *c = table.words[i];
                }
            } else {
                for (c, &i) in copy.iter_mut().zip(slots) {
                    *c = table.rows[i];
                }
            }
            let t3 = thread_cpu_ns();
            std::hint::black_box(&word_copy);
            std::hint::black_box(&copy);
            ensure!(!r.stale, "the mirror went stale");
            out.refresh += t1 - t0;
            out.refresh_floor += t3 - t2;
            out.rows += r.rows_read as u64;
            changed.extend(r.changed_remotes);
        }
        changed.sort_unstable();
        changed.dedup();
        // The groups of the remote nodes that moved (all of them under this churn).
        let todo: Vec<&GroupKey> = keys
            .iter()
            .filter(|k| k.remote.is_some_and(|n| changed.binary_search(&n).is_ok()))
            .collect();
        let t0 = thread_cpu_ns();
        let report = compute_some_groups_reusing(
            cfg,
            mapping,
            local,
            mirror.snapshot(),
            todo.iter().copied(),
            &mut spare,
        );
        let t1 = thread_cpu_ns();
        let apps = weights.update_reported(&report, now);
        let t2 = thread_cpu_ns();
        for (key, app) in &apps {
            let (kernel, hold) = installed.entry(key.clone()).or_default();
            match replace::decide_installed(policy, shape, kernel, app, hold.as_ref(), now) {
                Verdict::Replace { weights, .. } => {
                    *kernel = Installed::new(weights);
                    *hold = None;
                    out.replaces += 1;
                }
                Verdict::Held { hold: h, .. } => *hold = Some(h),
                Verdict::SameForwarding { hold: h } => *hold = h,
            }
        }
        // Each application's vector handed back to the next computation, as lqd does.
        for (_, app) in apps {
            weights.recycle(app);
        }
        // The report kept for the views, as lqd keeps it, the vectors it replaces handed
        // back to the next computation (counted with the path quality computation).
        let t2b = thread_cpu_ns();
        last.replace_groups(report.groups, &mut spare);
        let t3 = thread_cpu_ns();
        // The groups' floor: each group's entries read from the snapshot.
        let snapshot = mirror.snapshot();
        let mut sum = 0u64;
        for k in &todo {
            if let Some(n) = k.remote {
                let entries = snapshot.remote(n);
                // Spines sorted by id: spine s is the (s - 1)-th, as the computation finds
                // it.
                for s in 1..=SPINES {
                    let links = entries.links_near(spine(s), s as usize - 1);
                    sum += links.iter().map(|l| u64::from(l.1)).sum::<u64>();
                }
            }
        }
        let t4 = thread_cpu_ns();
        std::hint::black_box(sum);
        out.compute += (t1 - t0) + (t3 - t2b);
        out.update += t2 - t1;
        out.decide += t2b - t2;
        out.group_floor += t4 - t3;
        out.groups += todo.len() as u64;
    }
    ensure!(
        out.rows > 0 && out.groups > 0,
        "nothing was read or computed"
    );
    Ok(out)
}
