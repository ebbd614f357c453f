//! The fabric demo (`cargo xtask demo` builds and runs this as root): a 3-stage CLOS of 4
//! spines and 4 leaves with a host behind each leaf, every link a veth shaped by tbf, lqd on
//! every node; a job and a dynamic load from H1 to H4 under plain ECMP, static capacity
//! weights and lq, with the same source ports; `report.json` and `plot.svg` in `--out`.
//!
//! Everything runs inside `lqf-*` network namespaces that are deleted on exit, Ctrl-C
//! included.

mod plot;
mod traffic;

use std::{
    net::Ipv4Addr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use std::os::unix::process::CommandExt as _;

use anyhow::{Context, Result, bail};
use lq_tests::fabric::{
    Clos3, Daemon, LbOptions, Shaping, group_members, recreate_group, route_group,
};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use traffic::{FlowSpec, Receiver, Registry, now_ns, spawn_flow};

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

/// Sleeps, waking early on Ctrl-C.
fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        interrupted()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    Ok(())
}

struct Args {
    lqd: PathBuf,
    out: PathBuf,
    quick: bool,
    job_flows: u32,
    job_mib: u64,
    dyn_secs: f64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        lqd: PathBuf::new(),
        out: PathBuf::from("target/demo"),
        quick: false,
        job_flows: 64,
        job_mib: 8,
        dyn_secs: 30.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().context("missing value");
        match k.as_str() {
            "--lqd" => a.lqd = v()?.into(),
            "--out" => a.out = v()?.into(),
            "--quick" => {
                a.quick = true;
                a.job_flows = 32;
                a.job_mib = 2;
                a.dyn_secs = 14.0;
            }
            "--job-flows" => a.job_flows = v()?.parse()?,
            "--job-mib" => a.job_mib = v()?.parse()?,
            "--dynamic-secs" => a.dyn_secs = v()?.parse()?,
            other => bail!(
                "unknown argument {other}; usage: demo --lqd PATH [--out DIR] [--quick] [--job-flows N] [--job-mib N] [--dynamic-secs S]"
            ),
        }
    }
    if a.lqd.as_os_str().is_empty() {
        bail!("--lqd PATH is required");
    }
    Ok(a)
}

/// One monitor sample.
#[derive(Clone, Debug)]
pub struct Sample {
    t_s: f64,
    phase: String,
    /// L1's group weights towards L4 per spine (0: not a member).
    weights: [u64; 4],
    /// LQS and CL of Si's link to L4 (None: not measured / no helper).
    lqs_to_l4: [Option<u8>; 4],
    cl_to_l4: [Option<u8>; 4],
    /// Goodput at H4 since the previous sample.
    goodput_mbit: f64,
    /// L1's tx rate per uplink since the previous sample.
    uplink_mbit: [f64; 4],
}

struct Shared {
    phase: Mutex<String>,
    samples: Mutex<Vec<Sample>>,
    stop: AtomicBool,
    /// Flows done / started in the current run, for the live line.
    progress: Mutex<(u32, u32)>,
}

/// The spine side: the real helper role in lqd, or (when it cannot start) fixed
/// advertisers that keep every link at LQS 237 so that the leaves still have a group.
enum Spines {
    Helper(Vec<Daemon>),
    Fixed(#[allow(dead_code)] FixedAdvertisers),
}

struct FixedAdvertisers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl FixedAdvertisers {
    fn start(fab: &Clos3) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let leaves = fab.leaves.len();
        let mut threads = Vec::new();
        for (i, s) in fab.spines.iter().enumerate() {
            let i = i + 1;
            let ns = s.name().to_string();
            let st = stop.clone();
            threads.push(std::thread::spawn(move || {
                if lq_tests::fabric::enter_netns(&ns).is_err() {
                    return;
                }
                let mut senders: Vec<_> = (1..=leaves)
                    .filter_map(|j| {
                        lq_tests::daemon::Sender::bind(
                            std::net::SocketAddr::new(Clos3::spine_addr(i, j).into(), 0),
                            255,
                        )
                        .ok()
                    })
                    .collect();
                let mut seq = 1000u16;
                let entries: Vec<_> = (1..=leaves)
                    .map(|j| {
                        lq_tests::packet::entry(u32::from(Clos3::leaf_id(j)), j as u32, 237, 0)
                    })
                    .collect();
                while !st.load(Ordering::Relaxed) {
                    seq = seq.wrapping_add(1);
                    let h = lq_tests::packet::header(u32::from(Clos3::spine_id(i)), seq);
                    for (j, snd) in senders.iter_mut().enumerate() {
                        let to =
                            std::net::SocketAddr::new(Clos3::leaf_addr(i, j + 1).into(), 52525);
                        let _ = snd.send(to, &h, &entries);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        Self { stop, threads }
    }
}

impl Drop for FixedAdvertisers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

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

fn run() -> Result<()> {
    let a = args()?;
    let t0 = Instant::now();
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
    let opts = LbOptions::default();

    println!(
        "==> demo: building the fabric (4 spines, 4 leaves, 4 hosts, collector; tbf 100 Mbit/s)"
    );
    let fab = Clos3::build(4, 4, Shaping::at(100), true)?;
    interrupted()?;
    println!("    hash clearing (lq_clear_hash, tcx ingress) on every leaf's host port");

    let pid = std::process::id();
    let collector = KillOnDrop(
        fab.collector
            .command(a.lqd.to_str().unwrap())
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

    // Spines: the real helper role if it starts, else fixed advertisers.
    let mut helper_note = String::new();
    let mut spine_daemons = Vec::new();
    for i in 1..=4 {
        match Daemon::start(
            &a.lqd,
            &fab.spines[i - 1],
            &format!("lqf-s{i}-{pid}"),
            &fab.spine_config(i, 2, true),
            &logs,
        ) {
            Ok(d) => spine_daemons.push(d),
            Err(e) => {
                helper_note = format!("{e:#}");
                break;
            }
        }
    }
    let spines = if spine_daemons.len() == 4 {
        println!("==> demo: lqd helper role running on S1..S4 (LQS/CL of every link)");
        Spines::Helper(spine_daemons)
    } else {
        drop(spine_daemons);
        let first = helper_note.lines().last().unwrap_or_default().to_string();
        println!("==> demo: WARNING: the helper role does not run on the spines: {first}");
        println!("    spines send FIXED advertisements (LQS 237 on every link) instead;");
        println!("    lq cannot discover congestion: its results below equal ECMP by design.");
        Spines::Fixed(FixedAdvertisers::start(&fab))
    };
    let helper_real = matches!(spines, Spines::Helper(_));

    let mut leaves: Vec<Option<Daemon>> = Vec::new();
    for j in 1..=4 {
        leaves.push(Some(Daemon::start(
            &a.lqd,
            &fab.leaves[j - 1],
            &format!("lqf-l{j}-{pid}"),
            &fab.leaf_config(j, &opts, true),
            &logs,
        )?));
    }
    println!(
        "==> demo: lqd load-balancer role running on L1..L4 (PFC/IPFIX export to the collector)"
    );
    let l1 = &fab.leaves[0];
    let dst_prefix = Clos3::host_prefix(4);
    let deadline = Instant::now() + Duration::from_secs(10);
    let group = loop {
        interrupted()?;
        if let Some(g) = route_group(l1, &dst_prefix)
            && group_members(l1, g).is_some_and(|m| m.len() == 4)
        {
            break g;
        }
        if Instant::now() > deadline {
            bail!(
                "L1 has no 4-member group for {dst_prefix}; log:\n{}",
                leaves[0].as_ref().unwrap().log_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!(
        "    L1 routes {dst_prefix} through nexthop group {group:#x}: {:?}",
        group_members(l1, group)
    );

    let reg = Arc::new(Registry::default());
    let _rx = Receiver::start(fab.hosts[3].name(), Clos3::host_addr(4), reg.clone())?;

    // The monitor.
    let shared = Arc::new(Shared {
        phase: Mutex::new("warm-up".into()),
        samples: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        progress: Mutex::new((0, 0)),
    });
    let spine_sockets: Vec<Option<PathBuf>> = match &spines {
        Spines::Helper(d) => d.iter().map(|d| Some(d.socket())).collect(),
        Spines::Fixed(_) => vec![None; 4],
    };
    let monitor = {
        let sh = shared.clone();
        let reg = reg.clone();
        let l1 = l1.name().to_string();
        std::thread::spawn(move || monitor(&sh, &reg, &l1, group, &spine_sockets))
    };
    let _stop_monitor = StopOnDrop(shared.clone());

    let set_phase = |p: &str| *shared.phase.lock().unwrap() = p.to_string();
    let phase_marks = Arc::new(Mutex::new(Vec::<(f64, String)>::new()));
    let mark = |p: &str| {
        set_phase(p);
        phase_marks
            .lock()
            .unwrap()
            .push((now_ns() as f64 / 1e9, p.to_string()));
    };
    mark("warm-up");
    sleep(Duration::from_secs(2))?;

    let equal: Vec<(u64, u64)> = (1..=4).map(|k| (k, 255)).collect();
    let capacity: Vec<(u64, u64)> = vec![(1, 255), (2, 64), (3, 255), (4, 255)];
    let h1 = fab.hosts[0].name().to_string();
    let (src, dst) = (Clos3::host_addr(1), Clos3::host_addr(4));
    let job_limit = Duration::from_secs(if a.quick { 40 } else { 80 });

    // ---- The job: S2->L4 degraded before it starts.
    fab.set_spine_rate(2, 4, DEGRADED_MBIT)?;
    println!("==> demo: S2->L4 cut to {DEGRADED_MBIT} Mbit/s");
    println!(
        "==> demo: job: {} flows x {} MiB from H1 to H4, started together",
        a.job_flows, a.job_mib
    );
    // ECMP: L1's lqd stopped, the same group with equal weights.
    stop_daemon(&mut leaves[0]);
    recreate_group(l1, group, &dst_prefix, &equal, &opts)?;
    mark("job ecmp");
    let job_ecmp = run_job(&a, 1, &h1, src, dst, &reg, &shared, job_limit)?;
    println!("    ECMP: {}", job_line(&job_ecmp));
    mark("settle");
    sleep(Duration::from_secs(2))?;
    recreate_group(l1, group, &dst_prefix, &capacity, &opts)?;
    mark("job static");
    let job_static = run_job(&a, 2, &h1, src, dst, &reg, &shared, job_limit)?;
    println!(
        "    static capacity weights 255/64/255/255: {}",
        job_line(&job_static)
    );
    mark("settle");
    recreate_group(l1, group, &dst_prefix, &equal, &opts)?;
    sleep(Duration::from_secs(2))?;
    leaves[0] = Some(Daemon::start(
        &a.lqd,
        l1,
        &format!("lqf-l1b-{pid}"),
        &fab.leaf_config(1, &opts, true),
        &logs,
    )?);
    sleep(Duration::from_millis(500))?;
    println!(
        "    L1's lqd restarted from equal weights: {:?}",
        group_members(l1, group)
    );
    mark("job lq");
    let job_lq = run_job(&a, 3, &h1, src, dst, &reg, &shared, job_limit)?;
    println!("    lq: {}", job_line(&job_lq));

    // ---- The dynamic load.
    mark("settle");
    fab.set_spine_rate(2, 4, 100)?;
    println!("==> demo: S2->L4 restored to 100 Mbit/s");
    sleep(Duration::from_secs(2))?;
    let plan = DynPlan::new(&a);
    println!(
        "==> demo: dynamic load: {} flows of {} KiB paced at {} Mbit/s, Poisson at {:.1}/s ({:.0} Mbit/s offered, {:.0}% of the degraded fabric); S2->L4 cut at {:.0} s, restored at {:.0} s",
        plan.arrivals.len(),
        plan.size / 1024,
        plan.pacing_bps / 1_000_000,
        plan.rate_per_s,
        plan.offered_mbit(),
        plan.offered_mbit() / 310.8 * 100.0,
        plan.degrade_at,
        plan.restore_at
    );
    // The dynamic runs start from a fresh group too (lq: lqd restarted on it).
    stop_daemon(&mut leaves[0]);
    recreate_group(l1, group, &dst_prefix, &equal, &opts)?;
    leaves[0] = Some(Daemon::start(
        &a.lqd,
        l1,
        &format!("lqf-l1c-{pid}"),
        &fab.leaf_config(1, &opts, true),
        &logs,
    )?);
    sleep(Duration::from_millis(500))?;
    let dyn_lq = run_dynamic(
        &plan,
        4,
        "dynamic lq",
        &h1,
        src,
        dst,
        &reg,
        &shared,
        &fab,
        &mark,
    )?;
    println!("    lq: {}", dyn_line(&dyn_lq));
    mark("settle");
    stop_daemon(&mut leaves[0]);
    recreate_group(l1, group, &dst_prefix, &equal, &opts)?;
    sleep(Duration::from_secs(2))?;
    let dyn_ecmp = run_dynamic(
        &plan,
        5,
        "dynamic ecmp",
        &h1,
        src,
        dst,
        &reg,
        &shared,
        &fab,
        &mark,
    )?;
    println!("    ECMP: {}", dyn_line(&dyn_ecmp));
    mark("end");
    sleep(Duration::from_millis(600))?;
    shared.stop.store(true, Ordering::Relaxed);
    let _ = monitor.join();

    // ---- Report.
    let samples = shared.samples.lock().unwrap().clone();
    let marks = phase_marks.lock().unwrap().clone();
    let (zero_intervals, zero_violations) = zero_weight_check(&samples);
    let jct = |r: &JobResult| r.jct_s;
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let jct_ratio = ratio(jct(&job_ecmp), jct(&job_lq));
    let jct_vs_static = ratio(jct(&job_lq), jct(&job_static));
    let p99_ratio = ratio(Some(dyn_ecmp.p99_fct_s), Some(dyn_lq.p99_fct_s));
    let ipfix_lines = std::fs::read_to_string(a.out.join("ipfix-collector.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    drop(collector);
    let met = |v: Option<f64>, ok: fn(f64) -> bool| v.map(ok);
    let report = json!({
        "topology": {
            "stages": 3, "spines": 4, "leaves": 4, "hosts": 4,
            "link_rate_mbit": 100, "degraded_link": "S2->L4", "degraded_rate_mbit": DEGRADED_MBIT,
            "shaping": "tbf rate R burst 32 KiB latency 20 ms on both ends of every spine-leaf veth",
            "routing": "static; leaves' inter-leaf routes are lqd's resilient nexthop groups",
            "group": {"type": "resilient", "buckets": opts.buckets, "idle_timer_ms": opts.idle_timer_ms, "unbalanced_timer_ms": opts.unbalanced_timer_ms},
            "hash": "fib_multipath_hash_policy=1 in every namespace; lq_clear_hash clears the veth-carried socket hash on each leaf's host port",
            "tcp": "cubic (namespace default)",
        },
        "helper": {
            "real": helper_real,
            "note": if helper_real { "lqd helper role on S1..S4 (kernel counters)".to_string() } else { format!("helper role unavailable ({}); spines sent fixed LQS 237, so lq had nothing to react to", helper_note.lines().last().unwrap_or_default()) },
        },
        "job": {
            "flows": a.job_flows, "flow_mib": a.job_mib,
            "scaled_down": a.job_flows != 64 || a.job_mib != 8,
            "fluid_bound_s": f64::from(a.job_flows) * a.job_mib as f64 * 8.388608 / 310.8,
            "ecmp": job_ecmp.json(), "static_weights": job_static.json(), "lq": job_lq.json(),
        },
        "jct_ratio_vs_ecmp": jct_ratio,
        "jct_vs_static_weights": jct_vs_static,
        "dynamic": {
            "flows": plan.arrivals.len(), "flow_kib": plan.size / 1024,
            "pacing_mbit": plan.pacing_bps / 1_000_000, "arrival_rate_per_s": plan.rate_per_s,
            "offered_mbit": plan.offered_mbit(), "offered_fraction_of_degraded_capacity": plan.offered_mbit() / 310.8,
            "duration_s": plan.duration, "degrade_at_s": plan.degrade_at, "restore_at_s": plan.restore_at, "drain_s": plan.drain,
            "lq": dyn_lq.json(), "ecmp": dyn_ecmp.json(),
        },
        "p99_fct_ratio_vs_ecmp": p99_ratio,
        "delivered_fraction": dyn_lq.delivered_fraction,
        "delivered_fraction_ecmp": dyn_ecmp.delivered_fraction,
        "zero_weight_check": {
            "intervals_with_a_member_out": zero_intervals,
            "intervals_with_traffic_on_it": zero_violations,
            "rule": "while a spine is out of L1's group (weight 0) for two samples in a row, L1's uplink to it carries < 0.5 Mbit/s",
        },
        "flows_on_dead_or_zero_weight_paths": zero_violations,
        "ipfix_collector_lines": ipfix_lines,
        "goals": {
            "jct_ratio_vs_ecmp >= 2.0": met(jct_ratio, |v| v >= 2.0),
            "jct_vs_static_weights <= 1.1": met(jct_vs_static, |v| v <= 1.1),
            "p99_fct_ratio_vs_ecmp >= 1.5": met(p99_ratio, |v| v >= 1.5),
            "delivered_fraction >= 0.99": dyn_lq.delivered_fraction >= 0.99,
            "no flow on a dead or weight-0 path": zero_violations == 0,
            "under 5 minutes": t0.elapsed() < Duration::from_secs(300),
        },
        "runtime_s": t0.elapsed().as_secs_f64(),
        "phases": marks.iter().map(|(t, p)| json!({"t_s": t, "phase": p})).collect::<Vec<_>>(),
        "timeline": samples.iter().map(Sample::json).collect::<Vec<_>>(),
    });
    let path = a.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    let bands: Vec<plot::Band> = marks
        .windows(2)
        .filter(|w| w[0].1 != "settle")
        .map(|w| (w[0].0, w[1].0, w[0].1.clone()))
        .collect();
    let title = format!(
        "lq demo: 4x4 CLOS, S2->L4 {DEGRADED_MBIT} Mbit/s{}",
        if helper_real {
            ""
        } else {
            " (NO helper: fixed advertisements)"
        }
    );
    std::fs::write(a.out.join("plot.svg"), plot::svg(&samples, &bands, &title))?;
    println!("==> demo: results ({:.0} s)", t0.elapsed().as_secs_f64());
    for k in [
        "jct_ratio_vs_ecmp",
        "jct_vs_static_weights",
        "p99_fct_ratio_vs_ecmp",
        "delivered_fraction",
        "delivered_fraction_ecmp",
        "flows_on_dead_or_zero_weight_paths",
    ] {
        println!("    {k:36} {}", report[k]);
    }
    for (g, v) in report["goals"].as_object().unwrap() {
        println!(
            "    goal {g:40} {}",
            match v.as_bool() {
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
    drop(fab);
    Ok(())
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
    jct_s: Option<f64>,
    done: u32,
    flows: u32,
    fcts: Vec<f64>,
}

impl JobResult {
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
                sport: 20000 + k as u16,
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
    fn new(a: &Args) -> Self {
        let size: u64 = 2 << 20;
        let pacing_bps = 25_000_000;
        // About 65 % of the degraded fabric's goodput (310.8 Mbit/s).
        let offered = 0.65 * 310.8e6;
        let rate_per_s = offered / (size as f64 * 8.0);
        let duration = a.dyn_secs;
        let mut rng = SmallRng::seed_from_u64(7);
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
            degrade_at: (duration * 0.2).round(),
            restore_at: (duration * 0.7).round(),
            drain: if a.quick { 5.0 } else { 6.0 },
        }
    }

    fn offered_mbit(&self) -> f64 {
        self.arrivals.len() as f64 * self.size as f64 * 8.0 / self.duration / 1e6
    }
}

struct DynResult {
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
    reg: &Arc<Registry>,
    sh: &Shared,
    fab: &Clos3,
    mark: &dyn Fn(&str),
) -> Result<DynResult> {
    mark(name);
    let t0 = Instant::now();
    let mut handles = Vec::new();
    let mut degraded = false;
    let mut restored = false;
    for (k, &at) in p.arrivals.iter().enumerate() {
        loop {
            interrupted()?;
            let now = t0.elapsed().as_secs_f64();
            if !degraded && now >= p.degrade_at {
                fab.set_spine_rate(2, 4, DEGRADED_MBIT)?;
                degraded = true;
                mark(&format!("{name} (S2->L4 cut)"));
            }
            if !restored && now >= p.restore_at {
                fab.set_spine_rate(2, 4, 100)?;
                restored = true;
                mark(&format!("{name} (restored)"));
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
    if !restored {
        fab.set_spine_rate(2, 4, 100)?;
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
        delivered_fraction: delivered as f64 / offered.max(1) as f64,
        p99_fct_s: q(0.99),
        p50_fct_s: q(0.5),
        completed,
        flows: p.arrivals.len(),
    })
}

// ------------------------------------------------------------------ monitor

fn monitor(sh: &Shared, reg: &Registry, l1: &str, group: u64, spines: &[Option<PathBuf>]) {
    let l1ns = NsName(l1.to_string());
    let mut last_delivered = reg.delivered.load(Ordering::Relaxed);
    let mut last_tx: Option<[u64; 4]> = None;
    let mut last_t = Instant::now();
    let mut tick = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let dt = last_t.elapsed().as_secs_f64();
        last_t = Instant::now();
        let mut weights = [0u64; 4];
        if let Some(m) = l1ns.group(group) {
            for (id, w) in m {
                if (1..=4).contains(&id) {
                    weights[id as usize - 1] = w;
                }
            }
        }
        let mut lqs = [None; 4];
        let mut cl = [None; 4];
        for (i, s) in spines.iter().enumerate() {
            let Some(sock) = s else { continue };
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
        let s = Sample {
            t_s: now_ns() as f64 / 1e9,
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
    fn group(&self, g: u64) -> Option<Vec<(u64, u64)>> {
        let v: Value =
            serde_json::from_str(&self.ip(&["-j", "nexthop", "show", "id", &g.to_string()])?)
                .ok()?;
        Some(
            v.as_array()?.first()?["group"]
                .as_array()?
                .iter()
                .map(|m| {
                    (
                        m["id"]
                            .as_u64()
                            .unwrap_or(0)
                            .saturating_sub(lq_tests::fabric::ID_BASE),
                        m["weight"].as_u64().unwrap_or(1),
                    )
                })
                .collect(),
        )
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

/// Intervals where a spine was out of L1's group in this and the previous sample, and those
/// of them where L1 still sent more than 0.5 Mbit/s to that spine.
fn zero_weight_check(samples: &[Sample]) -> (u32, u32) {
    let (mut n, mut bad) = (0, 0);
    for w in samples.windows(2) {
        if w[1].weights.iter().all(|&x| x == 0) {
            continue;
        }
        for i in 0..4 {
            if w[0].weights[i] == 0 && w[1].weights[i] == 0 {
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
            "t_s": self.t_s, "phase": self.phase, "l1_weights": self.weights,
            "lqs_to_l4": self.lqs_to_l4, "cl_to_l4": self.cl_to_l4,
            "goodput_mbit": self.goodput_mbit, "l1_uplink_mbit": self.uplink_mbit,
        })
    }
}
