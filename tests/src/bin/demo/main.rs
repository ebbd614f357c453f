//! The fabric demo (`cargo xtask demo` builds and runs this as root): a 3-stage CLOS of 4
//! spines and 4 leaves with a host behind each leaf, every link a veth shaped by tbf, lqd on
//! every node; a job and a dynamic load from H1 to H4 under plain ECMP, static capacity
//! weights and lq, with the same source ports; `report.json` and `plot.svg` in `--out`.
//!
//! `--bgp` runs the same fabric with FRR (zebra + bgpd) on every router, eBGP per RFC 7938:
//! the leaves' lqd has no `[[destination]]`, it steers the routes BGP installs and learns
//! each prefix's remote leaf over BMP (issue 16); ECMP is then FRR's own multipath route,
//! and a last phase per draw withdraws a path in BGP under load and measures how long L1
//! still sends on it after its kernel's BGP route dropped it (seed 003 section 4.1).
//!
//! `--draws N` repeats every scenario over N hash draws: draw k pins
//! `net.ipv4.fib_multipath_hash_seed` to `seed-base + k` in every router namespace, so the
//! flows land on other paths, and the report gives each metric per draw and its median,
//! minimum and maximum over the draws (issue 12: one draw is an anecdote).
//!
//! Everything runs inside `lqf-*` network namespaces that are deleted on exit, Ctrl-C
//! included.
#![allow(unused_crate_dependencies)]
// a test or binary root: the package's dependency list is shared by all its targets
// The report's definitions are one `json!` literal, deeper than the default limit.
#![recursion_limit = "256"]

mod metrics;
mod plot;
mod remote_fault;
mod traffic;
mod withdraw;

use std::{
    net::Ipv4Addr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use std::os::unix::process::CommandExt as _;

use anyhow::{Context, Result, bail};
use lq_tests::{
    fabric::{
        Clos3, Daemon, LQ_TABLE, LbOptions, Routing, Shaping, flow_egress, group_members,
        recreate_group_in, remove_lq_route, route_group_in, set_group,
    },
    poll::poll_until,
};
use metrics::WeightSample;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use remote_fault::{RemoteFaultResult, run_remote_fault};
use serde_json::{Value, json};
use traffic::{FlowSpec, Receiver, Registry, now_ns, spawn_flow};
use withdraw::{WithdrawResult, run_withdraw};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// [`poll_until`] that Ctrl-C ends at once: each look first asks [`interrupted`], and its
/// error ends the wait as it is.
fn poll_interruptible<T, S>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, S>,
    context: impl FnOnce(S) -> String,
) -> Result<T> {
    poll_until(
        what,
        limit,
        every,
        || match interrupted() {
            Err(e) => Ok(Err(e)),
            Ok(()) => probe().map(Ok),
        },
        context,
    )?
}

/// Sleeps, waking early on Ctrl-C.
/// The scenario a phase belongs to (the plot's rows), from the phase names [`Ctx::mark`]
/// gives; `None` for the warm-up and the pauses between runs.
fn scenario_of(phase: &str) -> Option<&'static str> {
    if phase.starts_with("job ") {
        Some("capacity cut, job")
    } else if phase.starts_with("cross ") {
        Some("cross traffic")
    } else if phase.starts_with("dynamic ") {
        Some("capacity cut, dynamic load")
    } else if phase.starts_with("remote fault") {
        Some("remote fault")
    } else if phase.starts_with("bgp withdraw") {
        Some("BGP withdrawal")
    } else {
        None
    }
}

/// Who learns of a change of S2->L4's capacity in plain mode (with `--bgp` the spines'
/// Link Bandwidth tells lqd and FRR's UCMP alike).
#[derive(Clone, Copy)]
enum Follower<'a> {
    /// L1's lqd: its `[[path-capacity]]` rewritten and reloaded (SIGHUP).
    Lq(&'a Daemon),
    /// Static capacity weights: the group's weights replaced by the capacity shares.
    Static,
    /// ECMP: nothing changes.
    Nobody,
}

/// Static capacity weights with S2->L4 at `mbit` (of 100): 255 for a full path.
fn static_weights(mbit: u32) -> Vec<(u64, u64)> {
    let s2 = (255 * u64::from(mbit)).div_ceil(100).clamp(1, 255);
    vec![(1, 255), (2, s2), (3, 255), (4, 255)]
}

fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        interrupted()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    Ok(())
}

/// Seconds since the demo's epoch.
fn now_s() -> f64 {
    now_ns() as f64 / 1e9
}

const USAGE: &str = "usage: demo --lqd PATH [--out DIR] [--quick] [--draws N] [--seed-base S] [--weight-function NAME] [--gray-failure-prune] [--replace MODE] [--diagnostics] [--miss-count N] [--bgp] [--job-flows N] [--job-mib N] [--dynamic-secs S]";

/// lqd's own miss-count (seed 003 section 6.5 and 10: default 3).
const MISS_COUNT_DEFAULT: u8 = 3;

struct Args {
    lqd: PathBuf,
    out: PathBuf,
    quick: bool,
    job_flows: u32,
    job_mib: u64,
    dyn_secs: f64,
    /// Hash draws: every scenario runs once per draw.
    draws: u32,
    /// Draw k pins fib_multipath_hash_seed = seed_base + k (0 would be the kernel's
    /// random key, which is what made one run's ratios anecdotes).
    seed_base: u32,
    /// The leaves' `weight-function`: lqd's default (`seed`, sections 6.3/6.4 with the
    /// slow plane's capacity of 4.1) unless given; `--weight-function integral` runs the
    /// opt-in function of docs/weights.md.
    weight_function: Option<String>,
    /// The leaves' `[nexthop-group] replace`: lqd's default (`forwarding-change`, issue 41)
    /// unless given; `--replace every-step` writes every computed weight change.
    replace: Option<String>,
    /// The leaves prune a path whose spine reports loss (CL 7) with most of its capacity
    /// available (`[damping] gray-failure-prune`, an opt-in departure from section 6.3;
    /// docs/weights.md "Gray failures").
    gray_failure_prune: bool,
    /// The spines send the diagnostics block (seed 003 section 5.5; `--diagnostics`). No
    /// weight function reads it (5.5: receivers MUST NOT use it for forwarding): the
    /// leaves' path capacities come from `[[path-capacity]]`, the slow plane.
    diagnostics: bool,
    /// The leaves' `miss-count` (seed 003 section 6.5): lqd's default, 3.
    miss_count: u8,
    /// FRR on every router: lq steers BGP's routes (`[slow-plane]`, mapping over BMP).
    bgp: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        lqd: PathBuf::new(),
        out: PathBuf::from("target/demo"),
        quick: false,
        job_flows: 64,
        job_mib: 8,
        dyn_secs: 30.0,
        draws: 1,
        seed_base: 1,
        weight_function: None,
        replace: None,
        gray_failure_prune: false,
        diagnostics: false,
        miss_count: MISS_COUNT_DEFAULT,
        bgp: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .with_context(|| format!("{k} needs a value; {USAGE}"))
        };
        match k.as_str() {
            "--lqd" => a.lqd = v()?.into(),
            "--out" => a.out = v()?.into(),
            "--quick" => {
                a.quick = true;
                a.job_flows = 32;
                a.job_mib = 2;
                a.dyn_secs = 14.0;
            }
            "--draws" => a.draws = v()?.parse().context("--draws")?,
            "--seed-base" => a.seed_base = v()?.parse().context("--seed-base")?,
            "--weight-function" => a.weight_function = Some(v()?),
            "--replace" => a.replace = Some(v()?),
            "--gray-failure-prune" => a.gray_failure_prune = true,
            "--no-diagnostics" => a.diagnostics = false,
            "--diagnostics" => a.diagnostics = true,
            "--miss-count" => a.miss_count = v()?.parse().context("--miss-count")?,
            "--bgp" => a.bgp = true,
            "--job-flows" => a.job_flows = v()?.parse().context("--job-flows")?,
            "--job-mib" => a.job_mib = v()?.parse().context("--job-mib")?,
            "--dynamic-secs" => a.dyn_secs = v()?.parse().context("--dynamic-secs")?,
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    if a.lqd.as_os_str().is_empty() {
        bail!("--lqd PATH is required; {USAGE}");
    }
    if a.draws == 0 {
        bail!("--draws must be at least 1");
    }
    if a.seed_base == 0 || a.seed_base.checked_add(a.draws - 1).is_none() {
        bail!(
            "--seed-base must be at least 1 (0 is the kernel's random seed) and leave room for the draws"
        );
    }
    Ok(a)
}

/// One monitor sample (every 0.5 s).
#[derive(Clone, Debug)]
pub struct Sample {
    t_s: f64,
    draw: u32,
    phase: String,
    /// L1's group weights towards L4 per spine (0: not a member), the latest 100 ms sample.
    weights: [u64; 4],
    /// LQS and CL of Si's link to L4 (None: not measured).
    lqs_to_l4: [Option<u8>; 4],
    cl_to_l4: [Option<u8>; 4],
    /// Goodput at H4 since the previous sample.
    goodput_mbit: f64,
    /// L1's tx rate per uplink since the previous sample.
    uplink_mbit: [f64; 4],
    /// L1's group towards L4: the member nexthop of each bucket (`None`: no group).
    buckets: Option<Vec<u32>>,
}

struct Shared {
    phase: Mutex<String>,
    /// The hash draw under way.
    draw: AtomicU32,
    samples: Mutex<Vec<Sample>>,
    /// L1's group every 100 ms.
    weights: Mutex<Vec<WeightSample>>,
    /// Why the 100 ms weight sampler stopped early, if it did.
    sampler_error: Mutex<Option<String>>,
    stop: AtomicBool,
    /// Flows done / started in the current run, for the live line.
    progress: Mutex<(u32, u32)>,
}

/// A phase mark: (seconds since the epoch, phase, draw).
type Mark = (f64, String, u32);

/// A child killed on drop (the IPFIX collector).
struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    // SAFETY: installing a handler that only stores an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    lq_tests::require_root();
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("demo: {e:#}");
            if INTERRUPTED.load(Ordering::SeqCst) {
                130
            } else {
                1
            }
        }
    };
    // Every guard has been dropped by now: namespaces, daemons and programs are gone.
    println!("==> demo: namespaces and processes removed");
    std::process::exit(code);
}

const DEGRADED_MBIT: u32 = 25;
/// Goodput of the degraded fabric: 3 x 100 + 25 Mbit/s of tbf rate, less headers.
const DEGRADED_GOODPUT_MBIT: f64 = 310.8;
/// Job flows use source ports from here (flow k: JOB_SPORT + k).
const JOB_SPORT: u16 = 20000;

/// 1-, 5- and 15-minute load averages (CPU contention skews every timing here).
fn loadavg() -> Option<[f64; 3]> {
    let t = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = t.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// What every draw needs.
struct Ctx<'a> {
    a: &'a Args,
    fab: &'a Clos3,
    opts: LbOptions,
    group: u64,
    dst_prefix: String,
    /// The table of lq's route: the main table (`None`), or lq's own with `--bgp`.
    table: Option<u32>,
    /// FRR of every router (spines, then leaves) with `--bgp`.
    frr: &'a [lq_tests::frr::Frr],
    reg: &'a Arc<Registry>,
    shared: &'a Arc<Shared>,
    marks: &'a Mutex<Vec<Mark>>,
    logs: PathBuf,
    pid: u32,
    /// S2->L4's rate now (Mbit/s): what L1's `[[path-capacity]]` says of it.
    s2_l4_mbit: AtomicU32,
}

impl Ctx<'_> {
    /// Sets S2->L4's rate and tells the slow plane: with `--bgp` S2's BGP Link Bandwidth
    /// of L4's prefix; else L1's lqd (when `l1` runs) through its `[[path-capacity]]`.
    fn set_s2_l4(&self, mbit: u32, follower: Follower<'_>) -> Result<()> {
        self.fab.set_spine_rate(2, 4, mbit)?;
        self.s2_l4_mbit.store(mbit, Ordering::Relaxed);
        if self.a.bgp {
            // The slow plane says it: S2's routes to L4's prefix carry the new Link
            // Bandwidth (BGP's own delay), which L1's lqd reads over BMP and FRR's UCMP
            // weights by.
            return self.fab.set_link_bandwidth(self.frr, 2, 4, mbit);
        }
        match follower {
            Follower::Lq(d) => d.reload(&leaf_config(
                self.fab,
                1,
                &self.opts,
                self.a.miss_count,
                mbit,
            ))?,
            // The operator's push of the new capacity: the same group, its weights replaced
            // (a resilient group moves only the buckets the new weights need).
            Follower::Static => {
                set_group(self.l1(), self.group, &static_weights(mbit), &self.opts)?
            }
            Follower::Nobody => {}
        }
        Ok(())
    }

    fn mark(&self, p: &str) {
        *self.shared.phase.lock().unwrap() = p.to_string();
        self.marks.lock().unwrap().push((
            now_s(),
            p.to_string(),
            self.shared.draw.load(Ordering::Relaxed),
        ));
    }

    fn l1(&self) -> &lq_tests::netns::NetNs {
        &self.fab.leaves[0]
    }

    /// Starts L1's load-balancer (a fresh instance name each time). With `--bgp`, returns
    /// once lqd knows the remote leaf of L4's prefix again (bgpd's BMP session reconnects
    /// after its retry interval, up to a second): a run must measure lq, not lq still
    /// waiting for its mapping after the restart the demo needs between scenarios.
    fn start_l1(&self, tag: &str) -> Result<Daemon> {
        let d = Daemon::start(
            &self.a.lqd,
            self.l1(),
            &format!("lqf-l1{tag}-{}", self.pid),
            &leaf_config(
                self.fab,
                1,
                &self.opts,
                self.a.miss_count,
                self.s2_l4_mbit.load(Ordering::Relaxed),
            ),
            &self.logs,
        )?;
        if self.a.bgp {
            let deadline = Instant::now() + Duration::from_secs(15);
            let mapped = || {
                d.query("weights").ok().is_some_and(|w| {
                    w["slow-plane"]["steered"].as_array().is_some_and(|a| {
                        a.iter().any(|x| {
                            x["prefix"] == self.dst_prefix.as_str() && x["mapping-source"] == "bmp"
                        })
                    })
                })
            };
            while !mapped() {
                interrupted()?;
                if Instant::now() > deadline {
                    println!(
                        "    warning: L1's lqd has no BMP mapping for {} 15 s after its start",
                        self.dst_prefix
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(d)
    }

    /// Re-creates L1's group with `weights` (lqd stopped on L1).
    fn fresh_group(&self, weights: &[(u64, u64)]) -> Result<()> {
        recreate_group_in(
            self.l1(),
            self.group,
            &self.dst_prefix,
            self.table,
            weights,
            &self.opts,
        )
    }

    /// L1 forwards by plain ECMP (lqd stopped on L1): a fresh group of equal weights, made
    /// as lq's and the static weights' are (with `--bgp` in lq's table 76: FRR's own route
    /// is weighted by the Link Bandwidth, i.e. the static baseline there).
    fn ecmp(&self) -> Result<()> {
        self.fresh_group(&[(1, 255), (2, 255), (3, 255), (4, 255)])
    }

    /// L1 forwards by static capacity weights (lqd stopped on L1): a fresh group of
    /// `weights`, or with `--bgp` FRR's own UCMP (no route of lq's, so FRR's route, which
    /// zebra weights by the spines' Link Bandwidth, forwards): the alternative an operator
    /// of FRR would pick.
    fn static_weights(&self, weights: &[(u64, u64)]) -> Result<()> {
        if self.a.bgp {
            remove_lq_route(self.l1(), self.group, &self.dst_prefix, self.table);
            Ok(())
        } else {
            self.fresh_group(weights)
        }
    }

    /// How many job flows the kernel of L1 sends through each spine right now.
    fn job_paths(&self) -> Result<[u32; 4]> {
        self.job_paths_of(self.a.job_flows)
    }

    /// [`Self::job_paths`] for a job of `flows` flows.
    fn job_paths_of(&self, flows: u32) -> Result<[u32; 4]> {
        let sports: Vec<u16> = (0..flows as u16).map(|k| JOB_SPORT + k).collect();
        let devs = flow_egress(
            self.l1(),
            "h0",
            Clos3::host_addr(1),
            Clos3::host_addr(4),
            traffic::PORT,
            &sports,
        )?;
        let mut n = [0u32; 4];
        for d in devs.iter().flatten() {
            if let Some(i) = d
                .strip_prefix('s')
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| (1..=4).contains(i))
            {
                n[i - 1] += 1;
            }
        }
        Ok(n)
    }
}

/// Everything one hash draw measured.
struct DrawResult {
    draw: u32,
    seed: u32,
    start_s: f64,
    end_s: f64,
    job_ecmp: JobResult,
    job_static: JobResult,
    job_lq: JobResult,
    paths_ecmp: [u32; 4],
    paths_static: [u32; 4],
    paths_lq: [u32; 4],
    dyn_lq: DynResult,
    dyn_ecmp: DynResult,
    dyn_static: DynResult,
    remote_fault: RemoteFaultResult,
    /// The same fault under static capacity weights (the same kind of group, no lqd).
    remote_fault_static: RemoteFaultResult,
    /// Congestion only the fast plane sees (issue 38 item 3a).
    cross: CrossResult,
    /// Member nexthops L1's lqd deleted on a spine failure over its runs of the draw: no
    /// spine fails in these scenarios, so each is a false failure (seed 003 section 6.5).
    false_spine_failures: u64,
    /// Spine failures L2, L3 and L4 logged during the draw ("LQ neighbor failed", seed
    /// 003 section 6.5): their lqd runs through every scenario. L4's failures of S3 during
    /// the remote fault are not counted here (`remote_fault_detected_by_l4`).
    other_leaves_spine_failures: u64,
    /// L4's failures of S3 while S3->L4 forwarded nothing (both remote fault runs): S3's
    /// advertisements to L4 cross the dead link, so L4's heartbeat detects it (6.5).
    remote_fault_detected_by_l4: u64,
    /// With `--bgp`: a path withdrawn by BGP under load.
    withdraw: Option<WithdrawResult>,
}

/// Spine i's helper configuration (T_sample 2 ms, PFC export), with the diagnostics block
/// when asked (`diagnostics-enabled` belongs to `[lq-telemetry]`, the first section).
fn spine_config(fab: &Clos3, i: usize, diagnostics: bool) -> String {
    let c = fab.spine_config(i, 2, true);
    if diagnostics {
        c.replacen(
            "[lq-telemetry]\n",
            "[lq-telemetry]\ndiagnostics-enabled = true\n",
            1,
        )
    } else {
        c
    }
}

/// Leaf j's load-balancer configuration: `miss-count` only when it is not lqd's default,
/// and, on L1 in the plain (not `--bgp`) demo, the slow plane's capacity of each path to L4
/// (`[[path-capacity]]`, seed 003 section 4.1: what BGP's Link Bandwidth would carry):
/// 100 Mbit/s, S2's `s2_l4_mbit`.
fn leaf_config(fab: &Clos3, j: usize, o: &LbOptions, miss_count: u8, s2_l4_mbit: u32) -> String {
    let mut c = fab.leaf_config(j, o, true);
    if miss_count != MISS_COUNT_DEFAULT {
        c = c.replacen(
            "[lq-telemetry]\n",
            &format!("[lq-telemetry]\nmiss-count = {miss_count}\n"),
            1,
        );
    }
    if j == 1 && fab.routing != lq_tests::fabric::Routing::Bgp {
        for i in 1..=4 {
            let mbit = if i == 2 { s2_l4_mbit } else { 100 };
            c.push_str(&format!(
                "\n[[path-capacity]]\nspine = \"{}\"\nremote-node = \"{}\"\ncapacity-gbps = {}\n",
                Clos3::spine_id(i),
                Clos3::leaf_id(4),
                f64::from(mbit) / 1000.0
            ));
        }
    }
    c
}

fn run() -> Result<()> {
    let a = args()?;
    let t0 = Instant::now();
    let load_start = loadavg();
    traffic::epoch();
    std::fs::create_dir_all(&a.out)?;
    let logs = a.out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let stale = lq_tests::fabric::remove_stale_namespaces();
    if !stale.is_empty() {
        println!(
            "==> demo: removed {} namespaces of an earlier killed run",
            stale.len()
        );
    }
    // lqd's own group settings (`[nexthop-group]` defaults: 128 buckets, idle timer 1 s,
    // unbalanced timer 0 = never force), for lq's group and the baselines' alike.
    let opts = LbOptions {
        buckets: 128,
        idle_timer_ms: 1000,
        unbalanced_timer_ms: 0,
        gain: 0.5,
        weight_function: a.weight_function.clone(),
        replace: a.replace.clone(),
        gray_failure_prune: a.gray_failure_prune,
    };
    let defaults_differ: Vec<String> = [
        a.weight_function
            .as_ref()
            .map(|w| format!("weight-function = \"{w}\" (lqd: \"seed\")")),
        a.replace
            .as_ref()
            .map(|r| format!("replace = \"{r}\" (lqd: \"forwarding-change\")")),
        a.gray_failure_prune.then(|| {
            "gray-failure-prune = true (lqd: off; an opt-in departure from seed 003 section 6.3)"
                .to_string()
        }),
        (a.miss_count != MISS_COUNT_DEFAULT)
            .then(|| format!("miss-count = {} (lqd: {MISS_COUNT_DEFAULT})", a.miss_count)),
        a.diagnostics.then(|| {
            "spines send diagnostics (lqd: diagnostics-enabled = false; no weight reads them)"
                .to_string()
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if defaults_differ.is_empty() {
        println!(
            "==> demo: every node runs lqd's default configuration (the leaves: seed 003 sections 6.3/6.4 with the slow plane's capacity, 4.1; miss-count 3)"
        );
    } else {
        println!(
            "==> demo: settings that differ from lqd's defaults: {}",
            defaults_differ.join("; ")
        );
    }

    println!(
        "==> demo: building the fabric (4 spines, 4 leaves, 4 hosts, collector; tbf 100 Mbit/s)"
    );
    let routing = if a.bgp { Routing::Bgp } else { Routing::Static };
    let fab = Clos3::build_routed(4, 4, Shaping::at(100), true, routing)?;
    interrupted()?;
    println!("    hash clearing (lq_clear_hash, tcx ingress) on every leaf's host port");
    // Declared after the fabric: dropped (daemons stopped) before its namespaces go.
    let frr = if a.bgp {
        if !lq_tests::frr::available() {
            bail!(
                "--bgp needs FRR: `cargo xtask setup` installs it (apt-get install -y --no-install-recommends frr)"
            );
        }
        println!(
            "==> demo: FRR (zebra + bgpd) on every router: eBGP per RFC 7938, spines AS 65001..65004, leaves AS 65101..65104, multipath; each leaf's bgpd a BMP client of its lqd; zebra.conf `{}` (else zebra sends lq's groups back down as its own: docs/operator-guide.md)",
            lq_tests::frr::ZEBRA_CONF.trim()
        );
        let f = fab.start_bgp(3)?;
        println!("    BGP converged: every leaf has a 4-path route to every other leaf's hosts");
        f
    } else {
        Vec::new()
    };
    let table = a.bgp.then_some(LQ_TABLE);

    let pid = std::process::id();
    let collector = KillOnDrop(
        fab.collector
            .command(a.lqd.to_str().context("--lqd is not UTF-8")?)
            .args([
                "ipfix",
                "collect",
                "--listen",
                &format!("{}:4739", Clos3::COLLECTOR),
            ])
            .stdout(std::fs::File::create(a.out.join("ipfix-collector.log"))?)
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("lqd ipfix collect")?,
    );

    // Spines: the real helper role; the demo has no stand-in (lq without a helper would
    // equal ECMP by construction, and its numbers would mean nothing).
    let mut spines = Vec::new();
    for i in 1..=4 {
        spines.push(
            Daemon::start(
                &a.lqd,
                &fab.spines[i - 1],
                &format!("lqf-s{i}-{pid}"),
                &spine_config(&fab, i, a.diagnostics),
                &logs,
            )
            .with_context(|| format!("the lqd helper role did not start on S{i}"))?,
        );
    }
    println!(
        "==> demo: lqd helper role running on S1..S4 (LQS/CL of every link{})",
        if a.diagnostics {
            ", diagnostics with the link capacity"
        } else {
            ""
        }
    );

    let mut leaves: Vec<Option<Daemon>> = Vec::new();
    for j in 1..=4 {
        leaves.push(Some(Daemon::start(
            &a.lqd,
            &fab.leaves[j - 1],
            &format!("lqf-l{j}-{pid}"),
            &leaf_config(&fab, j, &opts, a.miss_count, 100),
            &logs,
        )?));
    }
    println!(
        "==> demo: lqd load-balancer role running on L1..L4 (PFC/IPFIX export to the collector){}",
        a.weight_function
            .as_deref()
            .map(|w| format!(", weight-function {w}"))
            .unwrap_or_default()
    );
    let l1 = &fab.leaves[0];
    let dst_prefix = Clos3::host_prefix(4);
    let group = poll_interruptible(
        &format!("a 4-member group for {dst_prefix} on L1"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match route_group_in(l1, &dst_prefix, table) {
            Some(g) if group_members(l1, g).is_some_and(|m| m.len() == 4) => Ok(g),
            _ => Err(()),
        },
        |()| {
            format!(
                "log:\n{}",
                leaves[0]
                    .as_ref()
                    .map(|d| d.log_tail(20))
                    .unwrap_or_default()
            )
        },
    )?;
    println!(
        "    L1 routes {dst_prefix} through nexthop group {group:#x}{}: {:?}",
        if a.bgp {
            " (lq's copy of BGP's route, table 76; remote leaf learned over BMP)"
        } else {
            ""
        },
        group_members(l1, group)
    );

    let reg = Arc::new(Registry::default());
    let _rx = Receiver::start(fab.hosts[3].name(), Clos3::host_addr(4), reg.clone())?;

    // The monitors: L1's group every 100 ms (netlink, its own thread in L1's namespace),
    // and every 0.5 s the LQS/CL, goodput and uplink rates for the live line.
    let shared = Arc::new(Shared {
        phase: Mutex::new("warm-up".into()),
        draw: AtomicU32::new(0),
        samples: Mutex::new(Vec::new()),
        weights: Mutex::new(Vec::new()),
        sampler_error: Mutex::new(None),
        stop: AtomicBool::new(false),
        progress: Mutex::new((0, 0)),
    });
    let spine_sockets: Vec<PathBuf> = spines.iter().map(Daemon::socket).collect();
    // Opened before any monitor thread starts, so that an error here leaves none running.
    let helpers_l4 =
        std::fs::File::create(a.out.join("helpers-l4.jsonl")).context("create helpers-l4.jsonl")?;
    let weight_sampler = {
        let sh = shared.clone();
        let l1 = l1.name().to_string();
        let prefix = parse_prefix(&dst_prefix)?;
        let table = table.unwrap_or(254);
        std::thread::spawn(move || weight_sampler(&sh, &l1, prefix, table))
    };
    let monitor = {
        let sh = shared.clone();
        let reg = reg.clone();
        let l1 = l1.name().to_string();
        let sockets = spine_sockets.clone();
        std::thread::spawn(move || monitor(&sh, &reg, &l1, &sockets, group))
    };
    // Every 50 ms, each spine's pipeline for its link to L4 (smoothed and raw U, D, the
    // drop flag, LQS, CL) into helpers-l4.jsonl: the distributions `lqd sim`'s elastic
    // model is calibrated against (docs/sim.md).
    let helper_poller = {
        let sh = shared.clone();
        std::thread::spawn(move || helper_poller(&sh, &spine_sockets, helpers_l4))
    };
    let _stop_monitor = StopOnDrop(shared.clone());

    let marks = Mutex::new(Vec::<Mark>::new());
    let ctx = Ctx {
        a: &a,
        fab: &fab,
        opts: opts.clone(),
        group,
        dst_prefix: dst_prefix.clone(),
        table,
        frr: &frr,
        reg: &reg,
        shared: &shared,
        marks: &marks,
        logs: logs.clone(),
        pid,
        s2_l4_mbit: AtomicU32::new(100),
    };
    let plan = DynPlan::new(&a);
    let cross_plan = DynPlan::cross(&a);
    let mut draws = Vec::new();
    for d in 0..a.draws {
        draws.push(run_draw(&ctx, &mut leaves, &plan, &cross_plan, d)?);
    }
    ctx.mark("end");
    sleep(Duration::from_millis(600))?;
    shared.stop.store(true, Ordering::Relaxed);
    let _ = monitor.join();
    let _ = helper_poller.join();
    let _ = weight_sampler.join();

    // ---- Report.
    let samples = shared.samples.lock().unwrap().clone();
    let wsamples = shared.weights.lock().unwrap().clone();
    let marks = marks.lock().unwrap().clone();
    let ipfix_lines = std::fs::read_to_string(a.out.join("ipfix-collector.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    drop(collector);
    let fluid_bound_s =
        f64::from(a.job_flows) * a.job_mib as f64 * 8.388608 / DEGRADED_GOODPUT_MBIT;
    // Convergence allowance at the start of the job: lq learns of the cut only once the
    // job's traffic queues at S2->L4.
    let settle_s = (0.25 * fluid_bound_s).min(2.0);
    let job_limit_s = job_limit(&a).as_secs_f64();
    let per_draw: Vec<(Value, Value)> = draws
        .iter()
        .map(|r| draw_report(r, &samples, &wsamples, &marks, settle_s, job_limit_s))
        .collect();
    let metric_names: Vec<&str> = metrics::GOALS.iter().map(|g| g.metric).collect();
    let mut summary = serde_json::Map::new();
    let mut goals = serde_json::Map::new();
    let bgp_names: &[&str] = if a.bgp {
        &[
            "withdrawn_path_traffic_ms",
            "bgp_convergence_ms",
            "lq_follow_after_bgp_ms",
        ]
    } else {
        &[]
    };
    for name in metric_names
        .iter()
        .copied()
        .chain(bgp_names.iter().copied())
        .chain([
            "delivered_fraction_ecmp",
            "jct_lq_s",
            "jct_ecmp_s",
            "jct_static_s",
            "false_spine_failures_l1",
            "false_spine_failures_other_leaves",
            "jct_lq_cross_s",
            "jct_static_cross_s",
            "delivered_fraction_static_cross",
            "p99_fct_lq_cross_s",
            "p99_fct_static_cross_s",
            "p99_fct_vs_static_cross_job",
            "weight_swing_cross_whole",
            "weight_swing_cross_dynamic",
            "degraded_share_cross_dynamic",
            "p99_fct_lq_dynamic_s",
            "p99_fct_static_dynamic_s",
            "p99_fct_ecmp_dynamic_s",
            "delivered_fraction_static",
            "degraded_share_job_whole",
            "degraded_share_cut_whole",
            "remote_fault_share_lq",
            "remote_fault_share_static",
            "remote_fault_share_vs_static",
        ])
    {
        let values: Vec<Option<f64>> = per_draw.iter().map(|(m, _)| m[name].as_f64()).collect();
        summary.insert(name.into(), metrics::summarize(&values));
    }
    let bgp_goals: &[metrics::Goal] = if a.bgp { &metrics::BGP_GOALS } else { &[] };
    for g in metrics::GOALS.iter().chain(bgp_goals) {
        goals.insert(g.metric.into(), metrics::check(g, &summary[g.metric]));
    }
    let runtime_s = t0.elapsed().as_secs_f64();
    if a.draws == 1 {
        // The README's promise for the one-draw demo.
        goals.insert(
            "runtime_s".into(),
            json!({"goal": "< 300 (one draw)", "median": runtime_s, "min": runtime_s, "max": runtime_s, "met": runtime_s < 300.0}),
        );
    }
    let med = |k: &str| summary[k]["median"].clone();
    let zero_total: u64 = per_draw
        .iter()
        .map(|(m, _)| {
            m["flows_on_dead_or_zero_weight_paths"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    let report = json!({
        "topology": {
            "stages": 3, "spines": 4, "leaves": 4, "hosts": 4,
            "link_rate_mbit": 100, "degraded_link": "S2->L4", "degraded_rate_mbit": DEGRADED_MBIT,
            "shaping": "tbf rate R burst 32 KiB latency 20 ms on both ends of every spine-leaf veth",
            "routing": if a.bgp {
                "eBGP per RFC 7938 (FRR zebra + bgpd on every router, spines AS 65001..65004, leaves AS 65101..65104, maximum-paths 64, multipath-relax, timers 3/9 s; zebra without kernel nexthop objects: `no zebra nexthop kernel enable`); leaves' lqd steers BGP's routes ([slow-plane], lq's copy in table 76) with the remote leaf learned over BMP from AS-qualified advertisements; ECMP is FRR's own route"
            } else {
                "static; leaves' inter-leaf routes are lqd's resilient nexthop groups"
            },
            "frr_version": a.bgp.then(frr_version),
            "group": {"type": "resilient", "buckets": opts.buckets, "idle_timer_ms": opts.idle_timer_ms, "unbalanced_timer_ms": opts.unbalanced_timer_ms},
            "hash": "fib_multipath_hash_policy=1 in every namespace, fib_multipath_hash_seed pinned per draw; lq_clear_hash clears the veth-carried socket hash on each leaf's host port",
            "tcp": "cubic (namespace default)",
        },
        "helper": {"real": true, "diagnostics": a.diagnostics, "note": "lqd helper role on S1..S4 (kernel counters); with --diagnostics the spines send the diagnostics block (link capacity = tbf rate), which no weight function reads (seed 003 section 5.5)"},
        "weight_function": a.weight_function.as_deref().unwrap_or("seed (lqd's default)"),
        "replace": a.replace.as_deref().unwrap_or("forwarding-change (lqd's default)"),
        "gray_failure_prune": a.gray_failure_prune,
        "leaf_miss_count": a.miss_count,
        "settings_differing_from_lqd_defaults": defaults_differ,
        "l1_config_at_start": std::fs::read_to_string(logs.join(format!("lqf-l1-{pid}.toml"))).ok(),
        "draws": a.draws,
        "seeds": draws.iter().map(|r| r.seed).collect::<Vec<_>>(),
        "job": {
            "flows": a.job_flows, "flow_mib": a.job_mib,
            "scaled_down": a.job_flows != 64 || a.job_mib != 8,
            "fluid_bound_s": fluid_bound_s,
        },
        "dynamic": {
            "flows": plan.arrivals.len(), "flow_kib": plan.size / 1024,
            "pacing_mbit": plan.pacing_bps / 1_000_000, "arrival_rate_per_s": plan.rate_per_s,
            "offered_mbit": plan.offered_mbit(), "offered_fraction_of_degraded_capacity": plan.offered_mbit() / DEGRADED_GOODPUT_MBIT,
            "duration_s": plan.duration, "degrade_at_s": plan.degrade_at, "restore_at_s": plan.restore_at, "drain_s": plan.drain,
        },
        "definitions": {
            "weight_swing": "mean over consecutive 100 ms samples of L1's group towards L4 of half the sum of absolute changes of the member shares (weight / sum of weights)",
            "degraded_share": "mean share of S2 (the path through S2->L4) over the same samples",
            "job_window": format!("lq job, from {settle_s:.2} s after its start until a quarter of its flows have completed"),
            "dynamic_window": "dynamic lq run, from 1 s after S2->L4 is cut until it is restored",
            "jct_ratio_vs_ecmp": "ECMP job completion time / lq's, same draw; an ECMP job still running at the time limit counts as the limit (the ratio is then a lower bound); none when lq's job hit the limit",
            "jct_vs_static_weights": "lq job completion time / static capacity weights' (255/64/255/255; with --bgp FRR's own UCMP route, weighted by the spines' Link Bandwidth), same draw; a static job at the time limit counts as the limit (an upper bound)",
            "jct_vs_static_cross": "cross traffic (H2 and H3 to H4 through S2): lq's job completion time / static capacity weights' (every capacity equal: the same equal-weight group as ECMP), same draw",
            "p99_fct_vs_static_cross": "cross traffic, dynamic load (the capacity cut's flows, pacing and offered load over a 12 s window, no cut; the cross traffic running through it): lq's p99 flow completion time / static capacity weights' (= ECMP's), same draw; a flow still running at the end of the drain counts as the time it ran",
            "delivered_fraction_cross": "cross traffic, dynamic load: lq's delivered fraction of the offered load",
            "p99_fct_vs_static_cross_job": "cross traffic, job: p99 (nearest rank) of lq's job flow completion times / static capacity weights', same draw; a flow that did not finish counts as the time limit",
            "weight_swing_cross_whole": "weight_swing from the start of lq's cross-traffic job to the end of its cross-traffic dynamic load",
            "weight_swing_cross_dynamic": "weight_swing over lq's cross-traffic dynamic load",
            "degraded_share_cross_dynamic": "mean share of S2 (the path through the congested S2->L4) over lq's cross-traffic dynamic load",
            "p99_fct_vs_static_dynamic": "dynamic load: lq's p99 flow completion time / static capacity weights' (told of the cut as lqd is: plain mode the group's weights replaced at the cut and the restore, --bgp FRR's UCMP following the Link Bandwidth), same draw",
            "buckets_moved_per_run": "per draw, per run (a cut or restore inside it included): buckets of L1's resilient group towards L4 whose member changed between consecutive 0.5 s samples (`ip -j nexthop bucket`), a lower bound; null where no group of lq's forwards (FRR's UCMP route with --bgp)",
            "remote_fault_detection_ms": "S3->L4 shaped to 1 Mbit/s with a 2 000-octet bucket and a 1 ms queue (nearly every packet offered dropped at once) while its link, BGP session and capacity stay, under 24 flows paced at 2 Mbit/s: from just before the qdisc change to the first 1 ms poll of L1's group without S3",
            "remote_fault_share_lq": "the same fault: the share of L1's octets on its four spine links sent towards S3 from the fault to its end (/proc/net/dev in L1's namespace, the 1 ms polls), with lq",
            "remote_fault_share_static": "the same, run beside it under static capacity weights (every capacity equal here: ECMP's group, created the same way with lqd's timers, no lqd): the flows hashed to S3 stay there for the whole fault, and TCP's losses there hold what they send far below their pacing, so this share is below their count's (about 4 of 24)",
            "remote_fault_share_vs_static": "remote_fault_share_lq / remote_fault_share_static: how much of what static weights send into the broken path lq still sends (seed 003 section 6.3 gives a path with drops, LQS <= 25 by Appendix A.4, a weight in proportion; only LQS 0 is pruned)",
            "remote_fault_traffic_after_detection_ms": "the same fault: from lq's prune of S3 (its earliest) to the end of the last poll interval in which L1 still sent > 1 000 octets towards S3 (over the whole fault: S3 readmitted while it lasts, as an idle broken link reads healthy, counts against lq)",
            "weight_swing_job_whole": "weight_swing over the whole lq job (its start to its last flow's end, or the time limit)",
            "weight_swing_cut_whole": "weight_swing over the whole cut of the dynamic lq run (S2->L4 cut to restored)",
            "degraded_share_job_whole": "degraded_share over the whole lq job",
            "degraded_share_cut_whole": "degraded_share over the whole cut of the dynamic lq run",
            "false_spine_failures": "every leaf's spine failures during the draw (seed 003 section 6.5; no spine fails in these scenarios): member nexthops L1's lqd deleted on a failure over its runs (show weights member-deletes; `_l1`) plus the failures L2, L3 and L4 logged (`LQ neighbor failed`; `_other_leaves`)",
            "p99_fct_ratio_vs_ecmp": "ECMP p99 flow completion time / lq's in the dynamic load, same draw",
            "withdrawn_path_traffic_ms": "--bgp: S3 shuts its BGP session to L4 during a light load (24 flows paced at 2 Mbit/s); how long after L1's kernel BGP route lost S3 L1 still sent data (> 1 000 octets in a poll interval) on its link to S3; polled every ~1 ms in L1's namespace (routes, nexthops, /proc/net/dev), an interval counted at its end; goal: BGP's own convergence + 10 ms",
            "bgp_convergence_ms": "--bgp: from the vtysh `neighbor shutdown` on S3 to L1's kernel BGP route without S3 (BGP's own convergence)",
            "lq_follow_after_bgp_ms": "--bgp: from L1's kernel BGP route without S3 to lq's route in table 76 without S3",
            "flows_on_dead_or_zero_weight_paths": "0.5 s intervals where a spine was out of L1's group (weight 0) in every 100 ms sample covering the interval and L1 still sent > 0.5 Mbit/s to it",
            "summary": "median, min and max over the draws; goals on the median (min or max where stated)",
        },
        "summary": summary,
        "goals": goals,
        // The medians at the top level, as before there were draws.
        "jct_ratio_vs_ecmp": med("jct_ratio_vs_ecmp"),
        "jct_vs_static_weights": med("jct_vs_static_weights"),
        "p99_fct_ratio_vs_ecmp": med("p99_fct_ratio_vs_ecmp"),
        "delivered_fraction": med("delivered_fraction"),
        "delivered_fraction_ecmp": med("delivered_fraction_ecmp"),
        "weight_swing_job": med("weight_swing_job"),
        "weight_swing_dynamic": med("weight_swing_dynamic"),
        "degraded_share_job": med("degraded_share_job"),
        "degraded_share_dynamic": med("degraded_share_dynamic"),
        "flows_on_dead_or_zero_weight_paths": zero_total,
        "ipfix_collector_lines": ipfix_lines,
        "weight_sampler_error": *shared.sampler_error.lock().unwrap(),
        "load_average": {"start": load_start, "end": loadavg()},
        "runtime_s": runtime_s,
        "per_draw": per_draw.iter().map(|(m, d)| {
            let mut d = d.clone();
            d["metrics"] = m.clone();
            d
        }).collect::<Vec<_>>(),
    });
    let path = a.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    // One row of panels per scenario and draw (issue 38 item 4), each over its own phases.
    let mut plots: Vec<plot::DrawPlot> = Vec::new();
    for r in &draws {
        let bands: Vec<plot::Band> = marks
            .windows(2)
            .filter(|w| w[0].2 == r.draw && w[0].1 != "settle")
            .map(|w| (w[0].0, w[1].0.min(r.end_s), w[0].1.clone()))
            .chain(
                marks
                    .last()
                    .filter(|m| m.2 == r.draw && m.1 != "settle")
                    .map(|m| (m.0, r.end_s, m.1.clone())),
            )
            .collect();
        for (scenario, detail) in [
            (
                "capacity cut, job",
                format!(
                    "job flows per path S1..S4 at the start: ECMP {:?}, static {:?}, lq {:?}",
                    r.paths_ecmp, r.paths_static, r.paths_lq
                ),
            ),
            (
                "cross traffic",
                format!(
                    "job flows per path at the start: static (= ECMP) {:?}, lq {:?}",
                    r.cross.paths_ecmp, r.cross.paths_lq
                ),
            ),
            ("capacity cut, dynamic load", String::new()),
            (
                "remote fault",
                format!(
                    "{}; {}",
                    r.remote_fault.line(),
                    r.remote_fault_static.line()
                ),
            ),
            (
                "BGP withdrawal",
                r.withdraw
                    .as_ref()
                    .map(WithdrawResult::line)
                    .unwrap_or_default(),
            ),
        ] {
            let mine: Vec<plot::Band> = bands
                .iter()
                .filter(|b| scenario_of(&b.2) == Some(scenario))
                .cloned()
                .collect();
            let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
                continue;
            };
            let (t0, t1) = (first.0, last.1);
            plots.push(plot::DrawPlot {
                title: format!(
                    "draw {} (fib_multipath_hash_seed {}), {scenario}{}{detail}",
                    r.draw + 1,
                    r.seed,
                    if detail.is_empty() { "" } else { ": " },
                ),
                row: scenario.to_string(),
                t0,
                t1,
                samples: samples
                    .iter()
                    .filter(|s| s.draw == r.draw && (t0..=t1).contains(&s.t_s))
                    .cloned()
                    .collect(),
                weights: wsamples
                    .iter()
                    .filter(|s| s.draw == r.draw && (t0..=t1).contains(&s.t_s))
                    .cloned()
                    .collect(),
                bands: mine,
            });
        }
    }
    let title = format!(
        "lq demo: 4x4 CLOS{}, S2->L4 {DEGRADED_MBIT} Mbit/s, {} draw(s){}",
        if a.bgp { " with FRR (eBGP)" } else { "" },
        a.draws,
        a.weight_function
            .as_deref()
            .map(|w| format!(", weight-function {w}"))
            .unwrap_or_default()
    );
    std::fs::write(a.out.join("plot.svg"), plot::svg(&plots, &title))?;
    println!(
        "==> demo: results ({runtime_s:.0} s, {} draw(s), seeds {}, load average {} -> {})",
        a.draws, report["seeds"], report["load_average"]["start"], report["load_average"]["end"]
    );
    for (name, g) in &goals {
        let f = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "    {name:36} median {:>8} [min {:>8}, max {:>8}]  goal {:28} {}",
            f(&g["median"]),
            f(&g["min"]),
            f(&g["max"]),
            g["goal"].as_str().unwrap_or_default(),
            match g["met"].as_bool() {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            }
        );
    }
    println!(
        "    {} and {}",
        path.display(),
        a.out.join("plot.svg").display()
    );
    drop(leaves);
    drop(spines);
    drop(frr);
    drop(fab);
    Ok(())
}

/// `a.b.c.d/len` as the weight sampler matches it.
fn parse_prefix(p: &str) -> Result<(Ipv4Addr, u8)> {
    let (a, l) = p.split_once('/').context("prefix without a length")?;
    Ok((a.parse()?, l.parse()?))
}

/// bgpd's version line (`show version`), for the report.
fn frr_version() -> String {
    Command::new("/usr/lib/frr/bgpd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn job_limit(a: &Args) -> Duration {
    Duration::from_secs(if a.quick { 40 } else { 80 })
}

/// One hash draw: every scenario with `fib_multipath_hash_seed = seed_base + d`.
fn run_draw(
    c: &Ctx,
    leaves: &mut [Option<Daemon>],
    plan: &DynPlan,
    cross_plan: &DynPlan,
    d: u32,
) -> Result<DrawResult> {
    let a = c.a;
    let seed = a.seed_base + d;
    c.shared.draw.store(d, Ordering::Relaxed);
    c.fab.set_multipath_hash_seed(seed)?;
    let start_s = now_s();
    println!(
        "==> demo: draw {}/{}: fib_multipath_hash_seed = {seed} in every router namespace",
        d + 1,
        a.draws
    );
    c.mark("warm-up");
    sleep(Duration::from_secs(if d == 0 { 2 } else { 1 }))?;

    let equal: Vec<(u64, u64)> = (1..=4).map(|k| (k, 255)).collect();
    let capacity = static_weights(DEGRADED_MBIT);
    let h1 = c.fab.hosts[0].name().to_string();
    let (src, dst) = (Clos3::host_addr(1), Clos3::host_addr(4));
    let limit = job_limit(a);
    let run_id = |k: u32| d * 10 + k;
    let l1 = c.l1();

    // ---- The job: S2->L4 degraded before it starts (L1's lqd is restarted for lq's run
    // and reads the capacity then).
    c.set_s2_l4(DEGRADED_MBIT, Follower::Nobody)?;
    println!("==> demo: S2->L4 cut to {DEGRADED_MBIT} Mbit/s");
    println!(
        "==> demo: job: {} flows x {} MiB from H1 to H4, started together",
        a.job_flows, a.job_mib
    );
    // ECMP: L1's lqd stopped, the same group with equal weights (with --bgp: FRR's route).
    stop_daemon(&mut leaves[0]);
    c.ecmp()?;
    let paths_ecmp = c.job_paths()?;
    println!("    job flows per path S1..S4 under equal weights: {paths_ecmp:?}");
    c.mark("job ecmp");
    let job_ecmp = run_job(a, run_id(1), &h1, src, dst, c.reg, c.shared, limit)?;
    println!("    ECMP: {}", job_line(&job_ecmp));
    c.mark("settle");
    sleep(Duration::from_secs(2))?;
    c.static_weights(&capacity)?;
    let paths_static = c.job_paths()?;
    c.mark("job static");
    let job_static = run_job(a, run_id(2), &h1, src, dst, c.reg, c.shared, limit)?;
    println!(
        "    static capacity weights ({}; flows per path {paths_static:?}): {}",
        if a.bgp {
            "FRR's UCMP from the spines' Link Bandwidth"
        } else {
            "255/64/255/255"
        },
        job_line(&job_static)
    );
    c.mark("settle");
    c.fresh_group(&equal)?;
    sleep(Duration::from_secs(2))?;
    leaves[0] = Some(c.start_l1(&format!("b{d}"))?);
    sleep(Duration::from_millis(500))?;
    println!(
        "    L1's lqd restarted from equal weights: {:?}",
        group_members(l1, c.group)
    );
    let paths_lq = c.job_paths()?;
    c.mark("job lq");
    let job_lq = run_job(a, run_id(3), &h1, src, dst, c.reg, c.shared, limit)?;
    println!("    lq: {}", job_line(&job_lq));
    let mut false_spine_failures = member_deletes(leaves[0].as_ref());

    // ---- The dynamic load.
    c.mark("settle");
    c.set_s2_l4(
        100,
        leaves[0].as_ref().map_or(Follower::Nobody, Follower::Lq),
    )?;
    println!("==> demo: S2->L4 restored to 100 Mbit/s");
    let cross = run_cross(c, leaves, d, &h1, src, dst, limit, cross_plan)?;
    false_spine_failures += cross.member_deletes;
    sleep(Duration::from_secs(2))?;
    println!(
        "==> demo: dynamic load: {} flows of {} KiB paced at {} Mbit/s, Poisson at {:.1}/s ({:.0} Mbit/s offered, {:.0}% of the degraded fabric); S2->L4 cut at {:.0} s, restored at {:.0} s",
        plan.arrivals.len(),
        plan.size / 1024,
        plan.pacing_bps / 1_000_000,
        plan.rate_per_s,
        plan.offered_mbit(),
        plan.offered_mbit() / DEGRADED_GOODPUT_MBIT * 100.0,
        plan.degrade_at,
        plan.restore_at
    );
    // The dynamic runs start from a fresh group too (lq: lqd restarted on it).
    stop_daemon(&mut leaves[0]);
    c.fresh_group(&equal)?;
    leaves[0] = Some(c.start_l1(&format!("c{d}"))?);
    sleep(Duration::from_millis(500))?;
    let dyn_lq = run_dynamic(
        plan,
        run_id(4),
        "dynamic lq",
        &h1,
        src,
        dst,
        c,
        leaves[0].as_ref().map_or(Follower::Nobody, Follower::Lq),
    )?;
    println!("    lq: {}", dyn_line(&dyn_lq));
    false_spine_failures += member_deletes(leaves[0].as_ref());
    c.mark("settle");
    stop_daemon(&mut leaves[0]);
    c.ecmp()?;
    sleep(Duration::from_secs(2))?;
    let dyn_ecmp = run_dynamic(
        plan,
        run_id(5),
        "dynamic ecmp",
        &h1,
        src,
        dst,
        c,
        Follower::Nobody,
    )?;
    println!("    ECMP: {}", dyn_line(&dyn_ecmp));
    c.mark("settle");
    // Static capacity weights, told of the cut as lqd is (plain mode: the group's weights
    // replaced at the cut and the restore; `--bgp`: FRR's UCMP follows the Link Bandwidth).
    c.static_weights(&static_weights(100))?;
    sleep(Duration::from_secs(2))?;
    let dyn_static = run_dynamic(
        plan,
        run_id(7),
        "dynamic static",
        &h1,
        src,
        dst,
        c,
        Follower::Static,
    )?;
    println!("    static capacity weights: {}", dyn_line(&dyn_static));
    c.mark("settle");
    let remote_fault_static = run_remote_fault(c, leaves, d, run_id(9), false)?;
    println!("    {}", remote_fault_static.line());
    c.mark("settle");
    let remote_fault = run_remote_fault(c, leaves, d, run_id(8), true)?;
    println!("    {}", remote_fault.line());
    c.mark("settle");
    // The failures L2-L4 logged during the draw. L4 losing S3 while S3->L4 forwards
    // nothing is no false failure: S3's advertisements to L4 cross that link, and L4's
    // heartbeat (6.5) detects the dead link, as it should.
    let other = {
        let windows = [&remote_fault_static, &remote_fault].map(|r| r.window());
        let s3 = u32::from(std::net::Ipv4Addr::new(
            10,
            0,
            0,
            remote_fault::FAULTY_SPINE as u8,
        ));
        let (mut expected, mut false_failures) = (0, 0);
        // The logs' times are UTC; the demo's clock (`now_s`) counts from its start.
        let epoch_offset_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
            - now_s();
        for (t, leaf, node) in failures_logged(&leaves[1..]) {
            let t = t - epoch_offset_s;
            if t < start_s {
                continue;
            }
            // leaves[1..][2] is L4.
            if leaf + 2 == remote_fault::FAULTY_LINK_LEAF
                && node == s3
                && windows.iter().any(|(a, b)| (*a..=*b).contains(&t))
            {
                expected += 1;
            } else {
                false_failures += 1;
            }
        }
        OtherLeavesFailures {
            expected,
            false_failures,
        }
    };
    let withdraw = if a.bgp {
        let w = run_withdraw(c, leaves, d, run_id(6))?;
        println!("    {}", w.line());
        c.mark("settle");
        Some(w)
    } else {
        None
    };
    Ok(DrawResult {
        draw: d,
        seed,
        start_s,
        end_s: now_s(),
        job_ecmp,
        job_static,
        job_lq,
        paths_ecmp,
        paths_static,
        paths_lq,
        dyn_lq,
        dyn_ecmp,
        dyn_static,
        remote_fault,
        remote_fault_static,
        cross,
        false_spine_failures,
        other_leaves_spine_failures: other.false_failures,
        remote_fault_detected_by_l4: other.expected,
        withdraw,
    })
}

/// Spine failures the running leaves' lqd have logged so far (seed 003 section 6.5's
/// "LQ neighbor failed" warning in each log file).
fn failures_logged(leaves: &[Option<Daemon>]) -> Vec<(f64, usize, u32)> {
    let mut out = Vec::new();
    for (i, d) in leaves.iter().enumerate() {
        let Some(d) = d else { continue };
        let Ok(text) = std::fs::read_to_string(&d.log) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains("LQ neighbor failed")) {
            let t = line.split_whitespace().next().and_then(rfc3339_utc_s);
            let node = line
                .split("node_id: ")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u32>().ok());
            // A line that does not parse still counts (as a failure at the draw's time).
            out.push((t.unwrap_or(f64::MAX), i, node.unwrap_or(0)));
        }
    }
    out
}

/// The failures L2-L4 logged during a draw, split.
struct OtherLeavesFailures {
    /// L4's failures of S3 while S3->L4 forwarded nothing (the remote fault): true ones.
    expected: u64,
    /// Every other: no spine fails in the demo, so each is false.
    false_failures: u64,
}

/// `2026-12-05T20:42:37.716078Z` (tracing's UTC timestamp) as seconds since the epoch.
fn rfc3339_utc_s(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.parse::<f64>().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

/// `member-deletes` of a running lqd (0 when it is not running or does not answer).
fn member_deletes(d: Option<&Daemon>) -> u64 {
    d.and_then(|d| d.query("weights").ok())
        .and_then(|w| w["member-deletes"].as_u64())
        .unwrap_or(0)
}

/// Cross traffic: hosts behind L2 and L3 send to H4 through S2 only.
struct CrossResult {
    /// ECMP's job (which is also static capacity weights': every capacity is 100 Mbit/s,
    /// so the capacity shares are the equal weights, the same group made the same way).
    job_ecmp: JobResult,
    job_lq: JobResult,
    paths_ecmp: [u32; 4],
    paths_lq: [u32; 4],
    /// The dynamic load under the cross traffic: ECMP (= static capacity weights) and lq.
    dyn_ecmp: DynResult,
    dyn_lq: DynResult,
    /// Cross flows per source host.
    cross_flows: u32,
    /// lqd's member deletes during lq's run.
    member_deletes: u64,
}

impl CrossResult {
    fn json(&self) -> Value {
        let paths = |p: &[u32; 4]| json!({"S1": p[0], "S2": p[1], "S3": p[2], "S4": p[3]});
        json!({
            "ecmp_and_static_weights": self.job_ecmp.json(), "lq": self.job_lq.json(),
            "flows_per_path_at_job_start": {"ecmp_and_static_weights": paths(&self.paths_ecmp), "lq": paths(&self.paths_lq)},
            "dynamic": {
                "ecmp_and_static_weights": self.dyn_ecmp.json(), "lq": self.dyn_lq.json(),
                "window_s": {
                    "ecmp_and_static_weights": [self.dyn_ecmp.start_s, self.dyn_ecmp.end_s],
                    "lq": [self.dyn_lq.start_s, self.dyn_lq.end_s],
                },
            },
            "cross_flows_per_host": self.cross_flows,
        })
    }
}

/// Issue 38 item 3a, congestion only the fast plane sees: H2 and H3 send long TCP flows
/// to H4 pinned through S2 (a /32 route on L2 and L3), so S2->L4 is congested while its
/// capacity, BGP and L1's own links stay as they are. Then, under ECMP (= static capacity
/// weights here: every capacity is equal) and under lq, each from a fresh equal-weight
/// group made the same way: L1's job (half the job's flows), and L1's dynamic load (the
/// capacity cut's flows and offered load over `cross_plan`'s window), each with the cross
/// traffic started 2 s before it and running through it.
#[allow(clippy::too_many_arguments)]
fn run_cross(
    c: &Ctx,
    leaves: &mut [Option<Daemon>],
    d: u32,
    h1: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    limit: Duration,
    cross_plan: &DynPlan,
) -> Result<CrossResult> {
    let a = c.a;
    let cross_flows = if a.quick { 4 } else { 6 };
    let job = Args {
        job_flows: (a.job_flows / 2).max(1),
        lqd: a.lqd.clone(),
        out: a.out.clone(),
        weight_function: a.weight_function.clone(),
        replace: a.replace.clone(),
        ..*a
    };
    println!(
        "==> demo: cross traffic: {cross_flows} TCP flows each from H2 and H3 to H4, pinned through S2 (S2->L4 congested; its capacity, BGP and L1's links unchanged); job of {} flows x {} MiB from H1",
        job.job_flows, job.job_mib
    );
    let h4 = Clos3::host_addr(4);
    // In the table the leaves forward from: with `--bgp`, lq's table 76, whose rule comes
    // before the main table (a pin in main would be passed over and the cross traffic
    // would spread over every spine).
    let table = c.table.unwrap_or(254).to_string();
    for j in [2, 3] {
        c.fab.leaves[j - 1].ip(&[
            "route",
            "replace",
            &format!("{h4}/32"),
            "via",
            &Clos3::spine_addr(2, j).to_string(),
            "table",
            &table,
        ])?;
    }
    // Run ids apart from the draw's others (`d * 10 + k`).
    let run_id = |k: u32| 1_000_000 + d * 10 + k;
    let start_cross = |run: u32| -> Vec<std::thread::JoinHandle<()>> {
        let mut v = Vec::new();
        for (k, j) in [2usize, 3].iter().enumerate() {
            for f in 0..cross_flows {
                let spec = FlowSpec {
                    run,
                    flow: k as u32 * 100 + f,
                    sport: 40000 + (k as u16) * 100 + f as u16,
                    size: 1 << 34,
                    pacing_bps: None,
                };
                v.push(spawn_flow(
                    c.fab.hosts[j - 1].name(),
                    Clos3::host_addr(*j),
                    h4,
                    spec,
                    c.reg,
                ));
            }
        }
        v
    };
    let stop_cross = |handles: Vec<std::thread::JoinHandle<()>>| {
        c.reg.abort_all();
        for h in handles {
            let _ = h.join();
        }
    };
    // One variant's run: the cross traffic's warm-up, the flows per path at the job's start,
    // the job with the cross traffic running through it, the cross traffic stopped; then
    // the same for the dynamic load (the cross traffic restarted: a job that hits its time
    // limit aborts every flow).
    let run_variant = |name: &str, k: u32| -> Result<(JobResult, [u32; 4], DynResult)> {
        c.mark(&format!("cross {name} (warm-up)"));
        let cross = start_cross(run_id(k));
        let paths = sleep(Duration::from_secs(2)).and_then(|()| c.job_paths_of(job.job_flows));
        c.mark(&format!("cross job {name}"));
        let run = paths.and_then(|paths| {
            run_job(&job, run_id(k + 1), h1, src, dst, c.reg, c.shared, limit)
                .map(|outcome| (outcome, paths))
        });
        stop_cross(cross);
        let (outcome, paths) = run?;
        c.mark(&format!("cross {name} (warm-up)"));
        let cross = start_cross(run_id(k + 5));
        let dynamic = sleep(Duration::from_secs(2)).and_then(|()| {
            run_dynamic(
                cross_plan,
                run_id(k + 6),
                &format!("cross dynamic {name}"),
                h1,
                src,
                dst,
                c,
                Follower::Nobody,
            )
        });
        stop_cross(cross);
        Ok((outcome, paths, dynamic?))
    };
    // Static capacity weights, which are ECMP here (every capacity is equal): lqd stopped
    // on L1, a fresh equal group; with `--bgp` FRR's UCMP route, as in the capacity cut.
    stop_daemon(&mut leaves[0]);
    c.static_weights(&[(1, 255), (2, 255), (3, 255), (4, 255)])?;
    let (job_ecmp, paths_ecmp, dyn_ecmp) = run_variant("ecmp", 1)?;
    println!(
        "    ECMP = static capacity weights{} (flows per path {paths_ecmp:?}): {}; dynamic load: {}",
        if a.bgp { " (FRR's UCMP)" } else { "" },
        job_line(&job_ecmp),
        dyn_line(&dyn_ecmp)
    );
    c.mark("settle");
    sleep(Duration::from_secs(1))?;
    // lq: a fresh equal group, lqd started on it, the same warm-up.
    c.fresh_group(&[(1, 255), (2, 255), (3, 255), (4, 255)])?;
    leaves[0] = Some(c.start_l1(&format!("x{d}"))?);
    let (job_lq, paths_lq, dyn_lq) = run_variant("lq", 3)?;
    let member_deletes = member_deletes(leaves[0].as_ref());
    println!(
        "    lq (flows per path {paths_lq:?}): {}; dynamic load: {}",
        job_line(&job_lq),
        dyn_line(&dyn_lq)
    );
    c.mark("settle");
    for j in [2, 3] {
        let _ = c.fab.leaves[j - 1].ip(&["route", "del", &format!("{h4}/32"), "table", &table]);
    }
    Ok(CrossResult {
        job_ecmp,
        job_lq,
        paths_ecmp,
        paths_lq,
        dyn_ecmp,
        dyn_lq,
        cross_flows,
        member_deletes,
    })
}

/// One draw's metrics (the keys of [`metrics::GOALS`] and a few more) and its detail.
fn draw_report(
    r: &DrawResult,
    samples: &[Sample],
    wsamples: &[WeightSample],
    marks: &[Mark],
    settle_s: f64,
    job_limit_s: f64,
) -> (Value, Value) {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let job_window = metrics::job_steady_window(
        r.job_lq.start_s,
        settle_s,
        r.job_lq.flows,
        &r.job_lq.fcts,
        job_limit_s,
    );
    let dyn_window = (r.dyn_lq.cut_s + 1.0, r.dyn_lq.restore_s);
    // The whole job (start to its last flow, or the limit) and the whole cut.
    let job_whole = (
        r.job_lq.start_s,
        r.job_lq.start_s + r.job_lq.jct_s.unwrap_or(job_limit_s),
    );
    let cut_whole = (r.dyn_lq.cut_s, r.dyn_lq.restore_s);
    let d = r.draw;
    let mine: Vec<Sample> = samples.iter().filter(|s| s.draw == d).cloned().collect();
    let (zero_intervals, zero_violations) = zero_weight_check(&mine, wsamples, d);
    let m = json!({
        // A baseline job that hit the time limit counts as the limit (a lower bound of its
        // completion time, so the ratio is a lower bound of lq's advantage); lq's own job
        // at the limit leaves the ratio unmeasured (the limit would flatter it).
        "jct_ratio_vs_ecmp": ratio(r.job_ecmp.jct_s.or(Some(job_limit_s)), r.job_lq.jct_s),
        "jct_vs_static_weights": ratio(r.job_lq.jct_s, r.job_static.jct_s.or(Some(job_limit_s))),
        "p99_fct_ratio_vs_ecmp": ratio(Some(r.dyn_ecmp.p99_fct_s), Some(r.dyn_lq.p99_fct_s)),
        "delivered_fraction": r.dyn_lq.delivered_fraction,
        "delivered_fraction_ecmp": r.dyn_ecmp.delivered_fraction,
        "weight_swing_job": metrics::weight_swing(wsamples, d, job_window.0, job_window.1),
        "weight_swing_dynamic": metrics::weight_swing(wsamples, d, dyn_window.0, dyn_window.1),
        "degraded_share_job": metrics::mean_share(wsamples, d, 1, job_window.0, job_window.1),
        "degraded_share_dynamic": metrics::mean_share(wsamples, d, 1, dyn_window.0, dyn_window.1),
        "flows_on_dead_or_zero_weight_paths": zero_violations,
        "jct_lq_s": r.job_lq.jct_s,
        "jct_ecmp_s": r.job_ecmp.jct_s,
        "jct_static_s": r.job_static.jct_s,
        "jct_vs_static_cross": ratio(r.cross.job_lq.jct_s, r.cross.job_ecmp.jct_s.or(Some(job_limit_s))),
        // The dynamic load under the cross traffic (a flow still running at the end of the
        // drain counts as the time it ran: every trial counts).
        "p99_fct_vs_static_cross": ratio(Some(r.cross.dyn_lq.p99_fct_s), Some(r.cross.dyn_ecmp.p99_fct_s)),
        "delivered_fraction_cross": r.cross.dyn_lq.delivered_fraction,
        "delivered_fraction_static_cross": r.cross.dyn_ecmp.delivered_fraction,
        "p99_fct_lq_cross_s": r.cross.dyn_lq.p99_fct_s,
        "p99_fct_static_cross_s": r.cross.dyn_ecmp.p99_fct_s,
        // The job's flows under the cross traffic (those that did not finish count as the
        // limit).
        "p99_fct_vs_static_cross_job": ratio(r.cross.job_lq.p99_fct_s(job_limit_s), r.cross.job_ecmp.p99_fct_s(job_limit_s)),
        "weight_swing_cross_whole": metrics::weight_swing(wsamples, d, r.cross.job_lq.start_s, r.cross.dyn_lq.end_s),
        "weight_swing_cross_dynamic": metrics::weight_swing(wsamples, d, r.cross.dyn_lq.start_s, r.cross.dyn_lq.end_s),
        "degraded_share_cross_dynamic": metrics::mean_share(wsamples, d, 1, r.cross.dyn_lq.start_s, r.cross.dyn_lq.end_s),
        "p99_fct_vs_static_dynamic": ratio(Some(r.dyn_lq.p99_fct_s), Some(r.dyn_static.p99_fct_s)),
        "p99_fct_lq_dynamic_s": r.dyn_lq.p99_fct_s,
        "p99_fct_static_dynamic_s": r.dyn_static.p99_fct_s,
        "p99_fct_ecmp_dynamic_s": r.dyn_ecmp.p99_fct_s,
        "delivered_fraction_static": r.dyn_static.delivered_fraction,
        "remote_fault_detection_ms": r.remote_fault.detection_ms(),
        "remote_fault_traffic_after_detection_ms": r.remote_fault.traffic_after_detection_ms(),
        "remote_fault_share_lq": r.remote_fault.share_during_fault(),
        "remote_fault_share_static": r.remote_fault_static.share_during_fault(),
        "remote_fault_share_vs_static": ratio(r.remote_fault.share_during_fault(), r.remote_fault_static.share_during_fault()),
        "weight_swing_job_whole": metrics::weight_swing(wsamples, d, job_whole.0, job_whole.1),
        "weight_swing_cut_whole": metrics::weight_swing(wsamples, d, cut_whole.0, cut_whole.1),
        "degraded_share_job_whole": metrics::mean_share(wsamples, d, 1, job_whole.0, job_whole.1),
        "degraded_share_cut_whole": metrics::mean_share(wsamples, d, 1, cut_whole.0, cut_whole.1),
        // Every leaf's: L1's member deletes and the failures L2-L4 logged.
        "false_spine_failures": r.false_spine_failures + r.other_leaves_spine_failures,
        "false_spine_failures_l1": r.false_spine_failures,
        "false_spine_failures_other_leaves": r.other_leaves_spine_failures,
        "remote_fault_s3_failed_on_l4": r.remote_fault_detected_by_l4,
        "jct_lq_cross_s": r.cross.job_lq.jct_s,
        "jct_static_cross_s": r.cross.job_ecmp.jct_s,
    });
    let mut m = m;
    if let Some(w) = &r.withdraw {
        m["withdrawn_path_traffic_ms"] = json!(w.withdrawn_path_traffic_ms());
        m["bgp_convergence_ms"] = json!(w.bgp_convergence_ms());
        m["lq_follow_after_bgp_ms"] = json!(w.lq_follow_ms());
    }
    // Issue 38 item 2: every variant's bucket moves (null where no resilient group of lq's
    // forwards: FRR's UCMP route with --bgp).
    let buckets_moved_per_run = {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.draw == d).collect();
        let mut phases: Vec<&str> = mine.iter().map(|s| run_of(&s.phase)).collect();
        phases.dedup();
        let mut o = serde_json::Map::new();
        for p in phases.into_iter().filter(|p| scenario_of(p).is_some()) {
            o.insert(p.to_string(), json!(buckets_moved(&mine, p)));
        }
        Value::Object(o)
    };
    let paths = |p: &[u32; 4]| json!({"S1": p[0], "S2": p[1], "S3": p[2], "S4": p[3]});
    let detail = json!({
        "draw": d,
        "fib_multipath_hash_seed": r.seed,
        "start_s": r.start_s, "end_s": r.end_s,
        "job": {
            "ecmp": r.job_ecmp.json(), "static_weights": r.job_static.json(), "lq": r.job_lq.json(),
            "flows_per_path_at_job_start": {
                "ecmp": paths(&r.paths_ecmp), "static_weights": paths(&r.paths_static), "lq": paths(&r.paths_lq),
            },
        },
        "dynamic": {
            "lq": r.dyn_lq.json(), "ecmp": r.dyn_ecmp.json(), "static_weights": r.dyn_static.json(),
        },
        "cross": r.cross.json(),
        "remote_fault": r.remote_fault.json(),
        "remote_fault_static": r.remote_fault_static.json(),
        "buckets_moved_per_run": buckets_moved_per_run,
        "windows_s": {
            "job": [job_window.0, job_window.1], "dynamic": [dyn_window.0, dyn_window.1],
            "job_whole": [job_whole.0, job_whole.1], "cut_whole": [cut_whole.0, cut_whole.1],
        },
        "bgp_withdraw": r.withdraw.as_ref().map(WithdrawResult::json),
        "zero_weight_check": {
            "intervals_with_a_member_out": zero_intervals,
            "intervals_with_traffic_on_it": zero_violations,
        },
        "phases": marks.iter().filter(|m| m.2 == d).map(|(t, p, _)| json!({"t_s": t, "phase": p})).collect::<Vec<_>>(),
        "timeline": mine.iter().map(Sample::json).collect::<Vec<_>>(),
        // [t_s, [w_S1, w_S2, w_S3, w_S4]] every 100 ms; null while the group is absent.
        "l1_weights_100ms": wsamples.iter().filter(|s| s.draw == d).map(|s| json!([s.t_s, s.weights])).collect::<Vec<_>>(),
    });
    (m, detail)
}

struct StopOnDrop(Arc<Shared>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }
}

fn stop_daemon(d: &mut Option<Daemon>) {
    if let Some(mut d) = d.take() {
        d.stop();
    }
}

// ------------------------------------------------------------------ job

struct JobResult {
    /// When its flows started (seconds since the epoch).
    start_s: f64,
    jct_s: Option<f64>,
    done: u32,
    flows: u32,
    fcts: Vec<f64>,
}

impl JobResult {
    /// The 99th percentile (nearest rank) of the flows' completion times, a flow that did
    /// not finish counted as `limit_s`; `None` without flows.
    fn p99_fct_s(&self, limit_s: f64) -> Option<f64> {
        let mut f = self.fcts.clone();
        f.resize(self.flows.max(self.fcts.len() as u32) as usize, limit_s);
        f.sort_by(f64::total_cmp);
        let rank = ((f.len() as f64 * 0.99).ceil() as usize).max(1);
        f.get(rank - 1).copied()
    }

    fn json(&self) -> Value {
        let mut f = self.fcts.clone();
        f.sort_by(f64::total_cmp);
        json!({
            "jct_s": self.jct_s, "flows_done": self.done, "flows": self.flows,
            "fct_median_s": f.get(f.len() / 2), "fct_min_s": f.first(),
        })
    }
}

fn job_line(r: &JobResult) -> String {
    match r.jct_s {
        Some(j) => format!("JCT {j:.1} s ({} flows)", r.flows),
        None => format!(
            "INCOMPLETE: {}/{} flows done at the time limit",
            r.done, r.flows
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_job(
    a: &Args,
    run: u32,
    h1: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    reg: &Arc<Registry>,
    sh: &Shared,
    limit: Duration,
) -> Result<JobResult> {
    let size = a.job_mib << 20;
    let start = now_ns();
    let stats: Vec<_> = (0..a.job_flows)
        .map(|k| {
            let f = FlowSpec {
                run,
                flow: k,
                sport: JOB_SPORT + k as u16,
                size,
                pacing_bps: None,
            };
            let h = spawn_flow(h1, src, dst, f, reg);
            (h, k)
        })
        .collect();
    let t0 = Instant::now();
    let done = |reg: &Registry| -> (u32, u64) {
        let mut n = 0;
        let mut last = 0;
        for k in 0..a.job_flows {
            if let Some(s) = reg_get(reg, run, k) {
                let e = s.end_ns.load(Ordering::Relaxed);
                if e > 0 {
                    n += 1;
                    last = last.max(e);
                }
            }
        }
        (n, last)
    };
    loop {
        let (n, _) = done(reg);
        *sh.progress.lock().unwrap() = (n, a.job_flows);
        if n == a.job_flows || t0.elapsed() > limit || INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (n, last) = done(reg);
    if n < a.job_flows {
        reg.abort_all();
    }
    for (h, _) in stats {
        let _ = h.join();
    }
    interrupted()?;
    let fcts = (0..a.job_flows)
        .filter_map(|k| reg_get(reg, run, k))
        .filter_map(|s| {
            let e = s.end_ns.load(Ordering::Relaxed);
            (e > 0).then(|| (e - start) as f64 / 1e9)
        })
        .collect();
    Ok(JobResult {
        start_s: start as f64 / 1e9,
        jct_s: (n == a.job_flows).then(|| (last - start) as f64 / 1e9),
        done: n,
        flows: a.job_flows,
        fcts,
    })
}

fn reg_get(reg: &Registry, run: u32, flow: u32) -> Option<Arc<traffic::FlowStat>> {
    reg.lookup(run, flow)
}

// ------------------------------------------------------------------ dynamic load

struct DynPlan {
    arrivals: Vec<f64>,
    size: u64,
    pacing_bps: u64,
    rate_per_s: f64,
    duration: f64,
    degrade_at: f64,
    restore_at: f64,
    drain: f64,
}

impl DynPlan {
    /// The capacity cut's dynamic load: `--dynamic-secs` of arrivals, S2->L4 cut at a fifth
    /// of it and restored at 70 %.
    fn new(a: &Args) -> Self {
        Self::build(a, a.dyn_secs, 7, true)
    }

    /// The dynamic load under cross traffic (issue 38 item 3a): the same flows and offered
    /// load, a shorter window (12 s, `--quick` 8 s), no cut (S2->L4 keeps its capacity; the
    /// cross traffic congests it).
    fn cross(a: &Args) -> Self {
        Self::build(a, if a.quick { 8.0 } else { 12.0 }, 11, false)
    }

    fn build(a: &Args, duration: f64, seed: u64, cut: bool) -> Self {
        let size: u64 = 2 << 20;
        let pacing_bps = 25_000_000;
        // About 65 % of the degraded fabric's goodput (310.8 Mbit/s).
        let offered = 0.65 * 310.8e6;
        let rate_per_s = offered / (size as f64 * 8.0);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut t = 0.0;
        let mut arrivals = Vec::new();
        loop {
            let u: f64 = rng.random_range(1e-9..1.0);
            t += -u.ln() / rate_per_s;
            if t >= duration {
                break;
            }
            arrivals.push(t);
        }
        Self {
            arrivals,
            size,
            pacing_bps,
            rate_per_s,
            duration,
            degrade_at: if cut {
                (duration * 0.2).round()
            } else {
                f64::INFINITY
            },
            restore_at: if cut {
                (duration * 0.7).round()
            } else {
                f64::INFINITY
            },
            drain: if a.quick { 5.0 } else { 6.0 },
        }
    }

    fn offered_mbit(&self) -> f64 {
        self.arrivals.len() as f64 * self.size as f64 * 8.0 / self.duration / 1e6
    }
}

struct DynResult {
    /// The run's first arrival and the end of its drain (seconds since the epoch).
    start_s: f64,
    end_s: f64,
    /// When S2->L4 was cut and restored (seconds since the epoch; NaN in a run without a
    /// cut).
    cut_s: f64,
    restore_s: f64,
    delivered_fraction: f64,
    p99_fct_s: f64,
    p50_fct_s: f64,
    completed: usize,
    flows: usize,
}

impl DynResult {
    fn json(&self) -> Value {
        json!({
            "delivered_fraction": self.delivered_fraction, "p99_fct_s": self.p99_fct_s,
            "p50_fct_s": self.p50_fct_s, "flows_completed": self.completed, "flows": self.flows,
            "cut_at_s": self.cut_s, "restored_at_s": self.restore_s,
        })
    }
}

fn dyn_line(r: &DynResult) -> String {
    format!(
        "delivered {:.4} of the offered load, FCT p50 {:.2} s p99 {:.2} s, {}/{} flows complete",
        r.delivered_fraction, r.p50_fct_s, r.p99_fct_s, r.completed, r.flows
    )
}

#[allow(clippy::too_many_arguments)]
fn run_dynamic(
    p: &DynPlan,
    run: u32,
    name: &str,
    h1: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    c: &Ctx,
    follower: Follower<'_>,
) -> Result<DynResult> {
    let (reg, sh) = (c.reg, c.shared);
    c.mark(name);
    let (mut cut_s, mut restore_s) = (f64::NAN, f64::NAN);
    let t0 = Instant::now();
    let start_s = now_s();
    let mut handles = Vec::new();
    let mut degraded = false;
    let mut restored = false;
    for (k, &at) in p.arrivals.iter().enumerate() {
        loop {
            interrupted()?;
            let now = t0.elapsed().as_secs_f64();
            if !degraded && now >= p.degrade_at {
                c.set_s2_l4(DEGRADED_MBIT, follower)?;
                degraded = true;
                cut_s = now_s();
                c.mark(&format!("{name} (S2->L4 cut)"));
            }
            if !restored && now >= p.restore_at {
                c.set_s2_l4(100, follower)?;
                restored = true;
                restore_s = now_s();
                c.mark(&format!("{name} (restored)"));
            }
            if now >= at {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64((at - now).min(0.02)));
        }
        let f = FlowSpec {
            run,
            flow: k as u32,
            sport: 30000 + k as u16,
            size: p.size,
            pacing_bps: Some(p.pacing_bps),
        };
        handles.push(spawn_flow(h1, src, dst, f, reg));
        let done = (0..=k)
            .filter(|&i| {
                reg_get(reg, run, i as u32).is_some_and(|s| s.end_ns.load(Ordering::Relaxed) > 0)
            })
            .count();
        *sh.progress.lock().unwrap() = (done as u32, (k + 1) as u32);
    }
    if degraded && !restored {
        c.set_s2_l4(100, follower)?;
        restore_s = now_s();
    }
    // Drain: flows still running at the end of the window count what they delivered.
    let end = Duration::from_secs_f64(p.duration + p.drain);
    while t0.elapsed() < end {
        interrupted()?;
        let done = (0..p.arrivals.len())
            .filter(|&i| {
                reg_get(reg, run, i as u32).is_some_and(|s| s.end_ns.load(Ordering::Relaxed) > 0)
            })
            .count();
        *sh.progress.lock().unwrap() = (done as u32, p.arrivals.len() as u32);
        if done == p.arrivals.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let window_end = now_ns();
    let stats: Vec<_> = (0..p.arrivals.len())
        .filter_map(|i| reg_get(reg, run, i as u32))
        .collect();
    let delivered: u64 = stats
        .iter()
        .map(|s| s.received.load(Ordering::Relaxed).min(s.size))
        .sum();
    let offered = p.size * p.arrivals.len() as u64;
    let mut fcts: Vec<f64> = stats
        .iter()
        .map(|s| {
            let st = s.start_ns.load(Ordering::Relaxed);
            let e = s.end_ns.load(Ordering::Relaxed);
            let e = if e > 0 { e } else { window_end };
            e.saturating_sub(st) as f64 / 1e9
        })
        .collect();
    let completed = stats
        .iter()
        .filter(|s| s.end_ns.load(Ordering::Relaxed) > 0)
        .count();
    reg.abort_all();
    for h in handles {
        let _ = h.join();
    }
    fcts.sort_by(f64::total_cmp);
    let q = |x: f64| {
        fcts.get(
            ((fcts.len() as f64 * x).ceil() as usize)
                .saturating_sub(1)
                .min(fcts.len().saturating_sub(1)),
        )
        .copied()
        .unwrap_or(0.0)
    };
    Ok(DynResult {
        start_s,
        end_s: window_end as f64 / 1e9,
        cut_s,
        restore_s,
        delivered_fraction: delivered as f64 / offered.max(1) as f64,
        p99_fct_s: q(0.99),
        p50_fct_s: q(0.5),
        completed,
        flows: p.arrivals.len(),
    })
}

// ------------------------------------------------------------------ monitor

/// L1's group every 100 ms, read over netlink from a thread inside L1's namespace (no
/// process spawned per sample, so the run is not disturbed), until `sh.stop`. The group is
/// the one lq's route to `prefix` in `table` names at that moment (lqd may allocate another
/// id after a restart; with `--bgp` the route is absent while FRR's own route forwards).
fn weight_sampler(sh: &Shared, l1: &str, prefix: (Ipv4Addr, u8), table: u32) {
    let fail = |e: String| {
        *sh.sampler_error.lock().unwrap() = Some(e);
    };
    if let Err(e) = lq_tests::fabric::enter_netns(l1) {
        return fail(format!("{e:#}"));
    }
    let mut rtnl = match lq_user::sys::netlink::Rtnl::open() {
        Ok(r) => r,
        Err(e) => return fail(format!("netlink socket in {l1}: {e}")),
    };
    let period = Duration::from_millis(100);
    let mut next = Instant::now();
    while !sh.stop.load(Ordering::Relaxed) {
        let weights = match lq_group(&mut rtnl, prefix, table) {
            Ok(g) => g.map(|members| {
                let mut w = [0u64; 4];
                for m in &members {
                    let k = u64::from(m.id).saturating_sub(lq_tests::fabric::ID_BASE);
                    if (1..=4).contains(&k) {
                        w[k as usize - 1] = u64::from(m.weight);
                    }
                }
                w
            }),
            Err(e) => return fail(format!("route or nexthop dump in {l1}: {e}")),
        };
        sh.weights.lock().unwrap().push(WeightSample {
            t_s: now_s(),
            draw: sh.draw.load(Ordering::Relaxed),
            weights,
        });
        // A fixed schedule: a slow dump delays one sample, not every later one.
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

/// The members of the group lq's route (protocol 76) to `prefix` in `table` names; `None`
/// without such a route or group.
fn lq_group(
    rtnl: &mut lq_user::sys::netlink::Rtnl,
    prefix: (Ipv4Addr, u8),
    table: u32,
) -> Result<
    Option<Vec<lq_user::sys::netlink::nexthop::GroupMember>>,
    lq_user::sys::netlink::RtnlError,
> {
    let routes = rtnl.dump_routes()?;
    let Some(nhid) = routes
        .iter()
        .find(|r| {
            r.table == table
                && r.protocol == 76
                && r.dst_len == prefix.1
                && r.dst == Some(std::net::IpAddr::V4(prefix.0))
        })
        .and_then(|r| r.nhid)
    else {
        return Ok(None);
    };
    Ok(rtnl
        .dump_nexthops()?
        .into_iter()
        .find(|n| n.id == Some(nhid))
        .map(|g| g.group))
}

/// The member nexthop of every bucket of resilient group `group` in namespace `ns` (`ip -j
/// nexthop bucket`); `None` when the group is absent (FRR's own route forwards) or the
/// read failed.
fn group_buckets(ns: &str, group: u64) -> Option<Vec<u32>> {
    let out = std::process::Command::new("ip")
        .args([
            "-n",
            ns,
            "-j",
            "nexthop",
            "bucket",
            "show",
            "id",
            &group.to_string(),
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut table: Vec<(u64, u32)> = v
        .as_array()?
        .iter()
        .filter_map(|b| {
            let b = &b["bucket"];
            Some((
                b["index"].as_u64()?,
                u32::try_from(b["nhid"].as_u64()?).ok()?,
            ))
        })
        .collect();
    table.sort_unstable();
    (!table.is_empty()).then(|| table.into_iter().map(|(_, nh)| nh).collect())
}

/// The run a phase belongs to: its name without a parenthesised stage (`dynamic static (S2->L4
/// cut)` is the run `dynamic static`).
fn run_of(phase: &str) -> &str {
    phase.split(" (").next().unwrap_or(phase)
}

/// Buckets that changed member between consecutive samples of `samples` (one draw's, in
/// time order) of run `run` ([`run_of`]; a cut or restore inside the run included): a lower
/// bound of the group's bucket moves in that run (a bucket moved and moved back between two
/// samples is not seen); `None` when no two consecutive samples of the run both saw the
/// group.
fn buckets_moved(samples: &[&Sample], run: &str) -> Option<u64> {
    let mut seen = false;
    let mut moved = 0u64;
    for w in samples.windows(2) {
        if run_of(&w[1].phase) != run || run_of(&w[0].phase) != run {
            continue;
        }
        if let (Some(a), Some(b)) = (&w[0].buckets, &w[1].buckets)
            && a.len() == b.len()
        {
            seen = true;
            moved += a.iter().zip(b).filter(|(x, y)| x != y).count() as u64;
        }
    }
    seen.then_some(moved)
}

fn monitor(sh: &Shared, reg: &Registry, l1: &str, spines: &[PathBuf], group: u64) {
    let l1ns = NsName(l1.to_string());
    let mut last_delivered = reg.delivered.load(Ordering::Relaxed);
    let mut last_tx: Option<[u64; 4]> = None;
    let mut last_t = Instant::now();
    let mut tick = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let dt = last_t.elapsed().as_secs_f64();
        last_t = Instant::now();
        // The 100 ms sampler's latest view of L1's group (all 0 while it is absent).
        let weights = sh
            .weights
            .lock()
            .unwrap()
            .last()
            .and_then(|w| w.weights)
            .unwrap_or([0; 4]);
        let mut lqs = [None; 4];
        let mut cl = [None; 4];
        for (i, sock) in spines.iter().enumerate() {
            if let Ok(v) = lq_user::daemon::query(sock, "local") {
                for l in v["links"].as_array().into_iter().flatten() {
                    if l["interface"] == "l4" {
                        lqs[i] = l["lqs"].as_u64().map(|x| x as u8);
                        cl[i] = l["cl"].as_u64().map(|x| x as u8);
                    }
                }
            }
        }
        let d = reg.delivered.load(Ordering::Relaxed);
        let goodput = (d - last_delivered) as f64 * 8.0 / dt / 1e6;
        last_delivered = d;
        let bytes = l1ns.bytes();
        let tx: [u64; 4] =
            std::array::from_fn(|i| bytes.get(&format!("s{}", i + 1)).map_or(0, |b| b.0));
        let uplink_mbit: [f64; 4] = match last_tx {
            Some(p) => std::array::from_fn(|i| tx[i].saturating_sub(p[i]) as f64 * 8.0 / dt / 1e6),
            None => [0.0; 4],
        };
        last_tx = Some(tx);
        let phase = sh.phase.lock().unwrap().clone();
        let buckets = group_buckets(l1, group);
        let s = Sample {
            buckets,
            t_s: now_s(),
            draw: sh.draw.load(Ordering::Relaxed),
            phase: phase.clone(),
            weights,
            lqs_to_l4: lqs,
            cl_to_l4: cl,
            goodput_mbit: goodput,
            uplink_mbit,
        };
        tick += 1;
        if tick.is_multiple_of(2) {
            let (done, n) = *sh.progress.lock().unwrap();
            let f = |x: Option<u8>| x.map_or("-".to_string(), |v| v.to_string());
            println!(
                "[{:6.1}s {:24}] L1 w {:>3} {:>3} {:>3} {:>3} | Si->L4 LQS/CL {}/{} {}/{} {}/{} {}/{} | {:5.0} Mb/s up {:3.0} {:3.0} {:3.0} {:3.0} | flows {done}/{n}",
                s.t_s,
                phase,
                weights[0],
                weights[1],
                weights[2],
                weights[3],
                f(lqs[0]),
                f(cl[0]),
                f(lqs[1]),
                f(cl[1]),
                f(lqs[2]),
                f(cl[2]),
                f(lqs[3]),
                f(cl[3]),
                goodput,
                uplink_mbit[0],
                uplink_mbit[1],
                uplink_mbit[2],
                uplink_mbit[3],
            );
        }
        sh.samples.lock().unwrap().push(s);
    }
}

/// `lqd show local` of one spine with a 200 ms limit: a spine that does not answer costs
/// the poller one sample, not a stalled round.
fn query_local(sock: &std::path::Path) -> Option<Value> {
    use std::io::{BufRead as _, Write as _};
    let mut s = std::os::unix::net::UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(b"local\n").ok()?;
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

/// Every 50 ms until `sh.stop`: one JSON line per spine with its pipeline's view of the link
/// to L4 (`lqd show local`), tagged with the phase and draw; flushed every round, so an
/// interrupted demo keeps what it measured.
fn helper_poller(sh: &Shared, spines: &[PathBuf], out: std::fs::File) {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(out);
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        let phase = sh.phase.lock().unwrap().clone();
        let draw = sh.draw.load(Ordering::Relaxed);
        for (i, sock) in spines.iter().enumerate() {
            let Some(v) = query_local(sock) else {
                continue;
            };
            for l in v["links"].as_array().into_iter().flatten() {
                if l["interface"] != "l4" || l.get("raw").is_none() {
                    continue;
                }
                let line = serde_json::json!({
                    "t_s": now_s(), "draw": draw, "phase": phase, "spine": i + 1,
                    "lqs": l["lqs"], "cl": l["cl"], "smoothed": l["smoothed"], "raw": l["raw"],
                });
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

/// Namespace operations by name (the monitor thread has no `NetNs`).
struct NsName(String);
impl NsName {
    fn ip(&self, args: &[&str]) -> Option<String> {
        let o = Command::new("ip")
            .arg("-n")
            .arg(&self.0)
            .args(args)
            .output()
            .ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }
    fn bytes(&self) -> std::collections::BTreeMap<String, (u64, u64)> {
        let mut m = std::collections::BTreeMap::new();
        if let Some(out) = self.ip(&["-j", "-s", "link", "show"])
            && let Ok(v) = serde_json::from_str::<Value>(&out)
        {
            for l in v.as_array().into_iter().flatten() {
                m.insert(
                    l["ifname"].as_str().unwrap_or_default().to_string(),
                    (
                        l["stats64"]["tx"]["bytes"].as_u64().unwrap_or(0),
                        l["stats64"]["rx"]["bytes"].as_u64().unwrap_or(0),
                    ),
                );
            }
        }
        m
    }
}

/// 0.5 s intervals (between two monitor samples) where a spine was out of L1's group in
/// every 100 ms sample of the group covering the interval, and those of them where L1
/// still sent more than 0.5 Mbit/s to that spine. (The two 0.5 s end points alone are not
/// enough: a member out at both ends may have been back in between, carrying traffic
/// legitimately.)
fn zero_weight_check(samples: &[Sample], wsamples: &[WeightSample], draw: u32) -> (u32, u32) {
    let (mut n, mut bad) = (0, 0);
    for w in samples.windows(2) {
        // The interval's traffic was routed by the group from just before its start.
        let (from, to) = (w[0].t_s - 0.1, w[1].t_s);
        for i in 0..4 {
            if metrics::out_throughout(wsamples, draw, i, from, to) {
                n += 1;
                if w[1].uplink_mbit[i] > 0.5 {
                    bad += 1;
                }
            }
        }
    }
    (n, bad)
}

impl Sample {
    fn json(&self) -> Value {
        json!({
            "t_s": self.t_s, "draw": self.draw, "phase": self.phase, "l1_weights": self.weights,
            "lqs_to_l4": self.lqs_to_l4, "cl_to_l4": self.cl_to_l4,
            "goodput_mbit": self.goodput_mbit, "l1_uplink_mbit": self.uplink_mbit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_timestamps_are_read_as_utc_seconds() {
        // Python: datetime(2026, 12, 5, 20, 42, 37, 500000, tzinfo=utc).timestamp().
        assert_eq!(
            rfc3339_utc_s("2026-12-05T20:42:37.500000Z"),
            Some(1_796_503_357.5)
        );
        assert_eq!(rfc3339_utc_s("2000-02-29T00:00:00Z"), Some(951_782_400.0));
        assert_eq!(rfc3339_utc_s("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(rfc3339_utc_s("2026-12-05 20:42:37"), None);
        assert_eq!(rfc3339_utc_s("garbage"), None);
    }

    fn sample(phase: &str, buckets: Option<Vec<u32>>) -> Sample {
        Sample {
            t_s: 0.0,
            draw: 0,
            phase: phase.into(),
            weights: [0; 4],
            lqs_to_l4: [None; 4],
            cl_to_l4: [None; 4],
            goodput_mbit: 0.0,
            uplink_mbit: [0.0; 4],
            buckets,
        }
    }

    /// Moves are counted between consecutive samples of the same phase only, a bucket
    /// moved there and back counts twice, and a phase without the group is not measured.
    #[test]
    fn bucket_moves_per_phase() {
        let s = [
            sample("job static", Some(vec![1, 2, 3, 4])),
            sample("job lq", Some(vec![1, 2, 3, 4])),
            sample("job lq", Some(vec![1, 1, 3, 4])),
            sample("job lq", Some(vec![1, 2, 3, 3])),
            sample("job ecmp", None),
            sample("job ecmp", None),
            sample("dynamic static", Some(vec![1, 2, 3, 4])),
            sample("dynamic static (S2->L4 cut)", Some(vec![1, 1, 3, 4])),
        ];
        let refs: Vec<&Sample> = s.iter().collect();
        assert_eq!(buckets_moved(&refs, "job lq"), Some(3));
        // The cut inside a run is part of it.
        assert_eq!(buckets_moved(&refs, "dynamic static"), Some(1));
        assert_eq!(buckets_moved(&refs, "job static"), None);
        assert_eq!(buckets_moved(&refs, "job ecmp"), None);
        assert_eq!(scenario_of("cross job lq"), Some("cross traffic"));
        assert_eq!(scenario_of("settle"), None);
    }
}
