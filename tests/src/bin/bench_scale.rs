//! `cargo xtask bench scale`: one leaf of a 64-spine x 512-leaf fabric (issue 15 item 6).
//!
//! A leaf namespace with 64 uplinks (veth) runs `lqd` (load-balancer, info logs, pinned to
//! CPU 0) with 512 `[[destination]]`s, one per remote leaf: 512 resilient groups of 64
//! members. A sender thread of ours (pinned to CPU 1, in a spines namespace) plays the 64
//! spines: every 20 ms (T_notify) each spine advertises all 512 remote leaves (6 datagrams
//! of up to 91 entries): 19 200 datagrams a second, all 32 768 entries every 20 ms (1.6 M
//! a second), 16 random entries changing LQS per period (the fabric is never quite still).
//!
//! Measured over three 10 s windows after the 512 groups are programmed, each figure the
//! median of the windows with their spread shown:
//! - `leaf_cpu_pct_64x512`: the leaf's CPU as a share of one core: the XDP receiver's run
//!   time (the kernel's BPF statistics, `BPF_ENABLE_STATS` held for the run) plus lqd's
//!   CPU time (every thread's `schedstat`). The veth driver's own cost is the virtual
//!   link's, not the leaf's, and is not counted; the whole machine's busy share is printed
//!   beside it.
//! - `leaf_replace_kernel_pct_64x512`: the kernel's share of that: lqd's group replaces a
//!   second (printed per window) times the kernel's system time of one replace of the same
//!   kind (lqd's members and buckets, one member's weight moving by 10 %), measured after
//!   the windows with `ip -batch` on 64 copies (512 replaces, the child's system time):
//!   a floor no user-space change moves at this churn.
//! - `leaf_replaces_per_s_64x512` and `leaf_bucket_neutral_replace_fraction_64x512`: the
//!   replaces a second and the share of them that moved no bucket (128 buckets for 64
//!   members: 2 each); then one more window after a restart with `skip-bucket-neutral`
//!   (`leaf_cpu_pct_64x512_skip_bucket_neutral`, `leaf_replaces_per_s_64x512_skip_bucket_neutral`).
//! - `leaf_cpu_pct_64x512_still` (and its lqd and XDP parts): one more window of the same
//!   lqd with no entry changing (the spines still advertise every entry every period): the
//!   cost of receiving the fabric alone, with no replace and so no kernel floor under it.
//!   Printed beside it: the receiver's share were each datagram at `xdp_lq_90_ns`'s goal.
//! - `lqd_rss_mib_64x512`: lqd's resident set (VmRSS, the mapped path table included).
//! - `bpf_map_bytes_64x512`: the memory the kernel charges for the maps of lqd's receiver
//!   program (`bytes_memlock` of each, read with bpftool, the independent judge).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    process::{Command, ExitCode},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use lq_tests::{
    bench::{ProcStat, emit, main_of, median, pin_to_cpu, spread},
    daemon::{Lqd, Sender},
    netns::{NetNs, veth_pair},
    packet::{entry, header, ip4},
    poll::poll_until,
    require_root,
};
use rand::{Rng as _, SeedableRng as _, rngs::SmallRng};
use serde_json::Value;

const SPINES: usize = 64;
const REMOTES: usize = 512;
const PERIOD: Duration = Duration::from_millis(20);
/// Entries that change LQS per period.
const CHURN: usize = 16;
/// The receiver's goal per datagram of 90 entries (`xdp_lq_90_ns`, bench_xdp).
const XDP_LQ_90_GOAL_NS: f64 = 3_000.0;
const WINDOWS: usize = 3;
const WINDOW: Duration = Duration::from_secs(10);
const MAX_ENTRIES: usize = 91;
const PORT: u16 = 52525;

fn main() -> ExitCode {
    main_of("bench_scale", run)
}

fn spine_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 64, k as u8, 1)
}

fn remote_id(r: usize) -> u32 {
    ip4(10, 1, (r / 256) as u8, (r % 256) as u8)
}

/// The leaf's configuration (defaults, but `skip-bucket-neutral` as given).
fn leaf_config(skip_bucket_neutral: bool) -> String {
    let ifaces: Vec<String> = (1..=SPINES).map(|k| format!("\"up{k}\"")).collect();
    let mut c = format!(
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [{}]\n\n[nexthop-group]\nskip-bucket-neutral = {skip_bucket_neutral}\n",
        ifaces.join(", ")
    );
    for k in 1..=SPINES {
        c.push_str(&format!(
            "\n[[uplink]]\nid = {k}\nspine = \"10.0.0.{k}\"\ninterface = \"up{k}\"\ngateway = \"{}\"\n",
            spine_addr(k)
        ));
    }
    for r in 0..REMOTES {
        let (hi, lo) = (r / 256, r % 256);
        c.push_str(&format!(
            "\n[[destination]]\nprefix = \"172.{}.{lo}.0/24\"\nremote-node = \"10.1.{hi}.{lo}\"\n",
            16 + hi
        ));
    }
    c
}

/// The 64 spines' advertisements, every PERIOD, until `stop`, `churn` entries changing
/// per period; `sent` counts datagrams.
fn senders(
    ns: &NetNs,
    stop: Arc<AtomicBool>,
    churn: Arc<AtomicUsize>,
    sent: Arc<AtomicU64>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    ns.run_in(move || {
        std::thread::spawn(move || -> Result<()> {
            pin_to_cpu(0, 1);
            let mut socks = (1..=SPINES)
                .map(|k| Sender::bind(SocketAddr::new(IpAddr::V4(spine_addr(k)), 0), 255))
                .collect::<Result<Vec<_>>>()?;
            let mut lqs = [[200u8; REMOTES]; SPINES];
            let mut seq = [1u16; SPINES];
            let mut rng = SmallRng::seed_from_u64(64);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..churn.load(Ordering::Relaxed) {
                    let (s, r) = (rng.random_range(0..SPINES), rng.random_range(0..REMOTES));
                    lqs[s][r] = if lqs[s][r] == 200 { 180 } else { 200 };
                }
                for (s, sock) in socks.iter_mut().enumerate() {
                    let to =
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 64, (s + 1) as u8, 2)), PORT);
                    for chunk in (0..REMOTES).collect::<Vec<_>>().chunks(MAX_ENTRIES) {
                        let entries: Vec<_> = chunk
                            .iter()
                            .map(|&r| entry(remote_id(r), 1, lqs[s][r], 0))
                            .collect();
                        let h = header(ip4(10, 0, 0, (s + 1) as u8), seq[s]);
                        seq[s] = seq[s].wrapping_add(1);
                        sock.send(to, &h, &entries)?;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                next += PERIOD;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            Ok(())
        })
    })
}

/// CPU time of every thread of `pid`, in ns (schedstat's first field).
fn process_cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let t = t?.path();
        if let Ok(s) = std::fs::read_to_string(t.join("schedstat")) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// Pins every thread of `pid` to one CPU.
fn pin_process(pid: u32, cpu: usize) -> Result<()> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(tid) = t?.file_name().to_str().and_then(|s| s.parse().ok()) {
            pin_to_cpu(tid, cpu);
        }
    }
    Ok(())
}

fn status_kib(pid: u32, field: &str) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// Ids of the loaded XDP receiver programs.
fn receiver_programs() -> Result<BTreeSet<u32>> {
    let mut ids = BTreeSet::new();
    for p in aya::programs::loaded_programs() {
        let p = p?;
        if p.name_as_str() == Some(lq_common::maps::XDP_PROGRAM) {
            ids.insert(p.id());
        }
    }
    Ok(ids)
}

/// (run time, run count) of program `id`.
fn program_stats(id: u32) -> Result<(Duration, u64)> {
    for p in aya::programs::loaded_programs() {
        let p = p?;
        if p.id() == id {
            return Ok((p.run_time(), p.run_count()));
        }
    }
    bail!("program {id} is gone")
}

fn bpftool(args: &[&str]) -> Result<Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .context("bpftool (cargo xtask setup installs it)")?;
    ensure!(
        out.status.success(),
        "bpftool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The kernel's system time, in ms, of one replace of a group like lqd's (resilient, with
/// lqd's members and bucket count): `ip -batch` creates 64 copies and replaces each 8
/// times, one member's weight moving by 10 % as in lqd's replaces here; the child's system
/// time (getrusage) over the 512 replaces.
/// The copies are deleted after.
fn replace_kernel_ms(ns: &NetNs) -> Result<f64> {
    let all: Value = serde_json::from_str(&ns.ip(&["-j", "nexthop", "show"])?)?;
    let all = all.as_array().context("nexthop show")?;
    let members: Vec<u64> = all
        .iter()
        // lqd's per-uplink members (nothing else creates nexthops in the leaf namespace).
        .filter(|n| n["gateway"].is_string())
        .filter_map(|n| n["id"].as_u64())
        .collect();
    let buckets = all
        .iter()
        .find_map(|n| n["resilient"]["buckets"].as_u64())
        .unwrap_or(128);
    ensure!(
        members.len() == SPINES,
        "expected {SPINES} member nexthops of lqd's, found {}",
        members.len()
    );
    const COPIES: u64 = 64;
    const ROUNDS: u64 = 8;
    const BASE: u64 = 900_000;
    // Like lqd's replaces here (one entry's LQS moving 200 <-> 180): one member's weight
    // differs from the others' in every other round.
    let group = |copy: u64, round: u64| -> String {
        let m: Vec<String> = (members.iter().enumerate())
            .map(|(i, id)| {
                let low = round % 2 == 1 && i as u64 == (copy + round) % SPINES as u64;
                format!("{id},{}", if low { 90 } else { 100 })
            })
            .collect();
        m.join("/")
    };
    let res = format!("type resilient buckets {buckets} idle_timer 120 unbalanced_timer 0");
    let dir = std::env::temp_dir().join(lq_tests::unique_name("bench-scale-floor"));
    std::fs::create_dir_all(&dir)?;
    let run_batch = |name: &str, text: String| -> Result<f64> {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        let sys0 = children_sys_ms();
        let out = Command::new("ip")
            .args(["-n", ns.name(), "-batch"])
            .arg(&path)
            .output()?;
        ensure!(
            out.status.success(),
            "ip -batch {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(children_sys_ms() - sys0)
    };
    let result = (|| -> Result<f64> {
        let create: String = (0..COPIES)
            .map(|c| format!("nexthop add id {} group {} {res}\n", BASE + c, group(c, 0)))
            .collect();
        run_batch("create", create)?;
        let mut replace = String::new();
        for round in 1..=ROUNDS {
            for c in 0..COPIES {
                replace.push_str(&format!(
                    "nexthop replace id {} group {} {res}\n",
                    BASE + c,
                    group(c, round)
                ));
            }
        }
        Ok(run_batch("replace", replace)? / (COPIES * ROUNDS) as f64)
    })();
    let delete: String = (0..COPIES)
        .map(|c| format!("nexthop del id {}\n", BASE + c))
        .collect();
    let _ = run_batch("delete", delete);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The system time of this process's waited-for children, in ms.
fn children_sys_ms() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    u.ru_stime.tv_sec as f64 * 1e3 + u.ru_stime.tv_usec as f64 / 1e3
}

/// lqd's group replaces done, those of them that moved no bucket, and those skipped as
/// moving none (0s when it does not answer).
fn replace_counts(lqd: &Lqd) -> (u64, u64, u64) {
    let w = lqd.show("weights").unwrap_or_default();
    let n = |k: &str| w[k].as_u64().unwrap_or(0);
    (
        n("group-replaces"),
        n("bucket-neutral-replaces"),
        n("bucket-neutral-skipped"),
    )
}

/// One measurement window's figures.
struct Window {
    /// lqd's CPU (every thread), % of a core.
    lqd_pct: f64,
    /// The XDP receiver's run time, % of a core.
    xdp_pct: f64,
    sent_rate: f64,
    replace_rate: f64,
    /// Of the replaces done, those that moved no resilient bucket.
    neutral_fraction: f64,
}

/// Measures one WINDOW of lqd `pid` and receiver program `prog`, printed under `label`.
fn window(lqd: &Lqd, pid: u32, prog: u32, sent: &AtomicU64, label: &str) -> Result<Window> {
    let (cpu0, (rt0, _), m0, s0, g0, wall0) = (
        process_cpu_ns(pid)?,
        program_stats(prog)?,
        ProcStat::read()?.machine,
        sent.load(Ordering::Relaxed),
        replace_counts(lqd),
        Instant::now(),
    );
    std::thread::sleep(WINDOW);
    let (cpu1, (rt1, _), m1, s1, g1) = (
        process_cpu_ns(pid)?,
        program_stats(prog)?,
        ProcStat::read()?.machine,
        sent.load(Ordering::Relaxed),
        replace_counts(lqd),
    );
    let wall = wall0.elapsed().as_nanos() as f64;
    let secs = wall / 1e9;
    let lqd_pct = (cpu1 - cpu0) as f64 / wall * 100.0;
    let xdp_pct = (rt1 - rt0).as_nanos() as f64 / wall * 100.0;
    let sent_rate = (s1 - s0) as f64 / secs;
    let replaces = g1.0.saturating_sub(g0.0);
    let neutral = g1.1.saturating_sub(g0.1);
    let skipped = g1.2.saturating_sub(g0.2);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine =
        (m1.busy() - m0.busy()) as f64 / (m1.total() - m0.total()).max(1) as f64 * cpus * 100.0;
    eprintln!(
        "{label}: lqd {lqd_pct:.2} % + XDP {xdp_pct:.2} % of a core ({sent_rate:.0} datagrams/s sent; {:.0} group replaces/s, {:.0} of them moving no bucket, {:.0} skipped as moving none); machine busy {machine:.0} % of one core",
        replaces as f64 / secs,
        neutral as f64 / secs,
        skipped as f64 / secs,
    );
    Ok(Window {
        lqd_pct,
        xdp_pct,
        sent_rate,
        replace_rate: replaces as f64 / secs,
        neutral_fraction: neutral as f64 / replaces.max(1) as f64,
    })
}

/// Groups lqd has programmed with all 64 members.
fn full_groups(lqd: &Lqd) -> usize {
    lqd.show("weights").ok().map_or(0, |w| {
        w["groups"].as_array().map_or(0, |g| {
            g.iter()
                .filter(|g| g["members"].as_array().is_some_and(|m| m.len() == SPINES))
                .count()
        })
    })
}

fn run() -> Result<()> {
    require_root();
    let leaf = NetNs::new("lqb-leaf64")?;
    let spines = NetNs::new("lqb-sp64")?;
    for k in 1..=SPINES {
        veth_pair(
            &spines,
            &format!("s{k}"),
            &format!("{}/24", spine_addr(k)),
            &leaf,
            &format!("up{k}"),
            &format!("10.64.{k}.2/24"),
        )?;
    }
    leaf.exec("sysctl", &["-qw", "net.ipv4.nexthop_compat_mode=0"])?;
    // Held for the run: the kernel counts each BPF program's run time (BPF_ENABLE_STATS;
    // released when the descriptor closes, no sysctl changed).
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("BPF_ENABLE_STATS (kernel 5.8)")?;
    let before = receiver_programs()?;
    let lqd = Lqd::start_logging(&leaf, &leaf_config(false), "info")?;
    let pid = lqd.pid().context("lqd has no pid")?;
    pin_process(pid, 0)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let churn = Arc::new(AtomicUsize::new(CHURN));
    let sender = senders(&spines, stop.clone(), churn.clone(), sent.clone())?;
    let result = measure(&leaf, &lqd, pid, &before, &sent, &churn);
    let counters = lqd.show("counters").ok();
    eprintln!(
        "lqd counters: {}",
        counters
            .as_ref()
            .map_or_else(|| "?".into(), |c| c.to_string())
    );
    drop(lqd);
    // The same fabric under `skip-bucket-neutral` (a restart that adopts the groups).
    let skipping = match result {
        Ok(()) => measure_skipping(&leaf, &sent),
        Err(_) => Ok(()),
    };
    stop.store(true, Ordering::Relaxed);
    let sent_ok = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender thread panicked"))?;
    result?;
    skipping?;
    // A figure from a receiver that refused entries would be of a smaller fabric.
    let refused = counters
        .as_ref()
        .and_then(|c| {
            c.pointer("/receiver/table_full")
                .or_else(|| find_key(c, "table_full"))
        })
        .and_then(Value::as_u64);
    ensure!(
        refused == Some(0),
        "the receiver refused entries (table_full {refused:?}): the figures are not of a 64 x 512 table"
    );
    sent_ok
}

/// The first value under `key` anywhere in `v`.
fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// Waits until lqd has programmed all 512 groups of 64; returns its receiver program's id.
fn ready(lqd: &Lqd, before: &BTreeSet<u32>) -> Result<u32> {
    let t0 = Instant::now();
    poll_until(
        &format!("lqd to program {REMOTES} groups of {SPINES}"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let n = full_groups(lqd);
            if n == REMOTES { Ok(()) } else { Err(n) }
        },
        |n| format!("{n} of {REMOTES} programmed; log:\n{}", lqd.log_text()),
    )?;
    eprintln!(
        "512 groups of 64 programmed {:.1} s after start",
        t0.elapsed().as_secs_f64()
    );
    let ours: Vec<u32> = receiver_programs()?.difference(before).copied().collect();
    let [prog] = ours[..] else {
        bail!(
            "expected one new {} program, found {ours:?}",
            lq_common::maps::XDP_PROGRAM
        );
    };
    Ok(prog)
}

/// One window of a leaf whose lqd skips the replaces that would move no bucket
/// (`[nexthop-group] skip-bucket-neutral`), beside the default's windows.
fn measure_skipping(ns: &NetNs, sent: &AtomicU64) -> Result<()> {
    let before = receiver_programs()?;
    let lqd = Lqd::start_logging(ns, &leaf_config(true), "info")?;
    let pid = lqd.pid().context("lqd has no pid")?;
    pin_process(pid, 0)?;
    let prog = ready(&lqd, &before)?;
    std::thread::sleep(Duration::from_secs(2));
    let m = window(&lqd, pid, prog, sent, "skip-bucket-neutral")?;
    emit(
        "leaf_cpu_pct_64x512_skip_bucket_neutral",
        m.lqd_pct + m.xdp_pct,
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_replaces_per_s_64x512_skip_bucket_neutral",
        m.replace_rate,
        "replaces/s",
        None,
        None,
    );
    Ok(())
}

fn measure(
    ns: &NetNs,
    lqd: &Lqd,
    pid: u32,
    before: &BTreeSet<u32>,
    sent: &AtomicU64,
    churn: &AtomicUsize,
) -> Result<()> {
    let prog = ready(lqd, before)?;
    std::thread::sleep(Duration::from_secs(2));
    let (mut leaf, mut lqd_pct, mut xdp_pct, mut rate, mut rss) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut replace_rate, mut neutral) = (vec![], vec![]);
    for w in 0..WINDOWS {
        let m = window(lqd, pid, prog, sent, &format!("window {}", w + 1))?;
        leaf.push(m.lqd_pct + m.xdp_pct);
        lqd_pct.push(m.lqd_pct);
        xdp_pct.push(m.xdp_pct);
        rate.push(m.sent_rate);
        replace_rate.push(m.replace_rate);
        neutral.push(m.neutral_fraction);
        rss.push(status_kib(pid, "VmRSS:")? / 1024.0);
    }
    eprintln!(
        "leaf CPU % of a core: {}; lqd {}; XDP {}",
        spread(&leaf),
        spread(&lqd_pct),
        spread(&xdp_pct)
    );
    let still = still_window(lqd, pid, prog, sent, churn)?;
    // The maps the receiver program uses, as the kernel charges them.
    let info = bpftool(&["prog", "show", "id", &prog.to_string()])?;
    let mut map_bytes = 0u64;
    for id in info["map_ids"].as_array().into_iter().flatten() {
        let id = id.as_u64().context("map id")?;
        let m = bpftool(&["map", "show", "id", &id.to_string()])?;
        let b = m["bytes_memlock"].as_u64().unwrap_or(0);
        eprintln!(
            "map {} ({}): {} octets",
            m["name"].as_str().unwrap_or("?"),
            m["type"].as_str().unwrap_or("?"),
            b
        );
        map_bytes += b;
    }
    let peak = status_kib(pid, "VmHWM:")? / 1024.0;
    // Where the resident set is: heap and stacks (anonymous), the mapped path table and
    // other files or shared mappings.
    if let Ok(r) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
        let keep: Vec<&str> = r
            .lines()
            .filter(|l| {
                ["Rss:", "Anonymous:", "Shared_", "Private_"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .collect();
        eprintln!("lqd smaps_rollup: {}", keep.join("; "));
    }
    eprintln!(
        "lqd threads: {}",
        std::fs::read_dir(format!("/proc/{pid}/task"))?.count()
    );
    // The kernel's share: lqd's group replaces a second times the kernel's system time of
    // one replace of the same kind of group, measured here on copies.
    let per_replace_ms = replace_kernel_ms(ns)?;
    let floor = median(&replace_rate) * per_replace_ms / 1e3 * 100.0;
    eprintln!(
        "kernel floor of the group replaces: {:.0} replaces/s x {:.1} us of kernel time each = {floor:.2} % of a core",
        median(&replace_rate),
        per_replace_ms * 1e3
    );
    // Its baseline is that floor: what the kernel alone spends on the replaces lqd's
    // damped weights call for at this churn, below any change in lqd.
    emit(
        "leaf_cpu_pct_64x512",
        median(&leaf),
        "% of a core",
        Some("<= 5"),
        Some(floor),
    );
    emit(
        "leaf_lqd_cpu_pct_64x512",
        median(&lqd_pct),
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_xdp_cpu_pct_64x512",
        median(&xdp_pct),
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_datagrams_per_s_64x512",
        median(&rate),
        "datagrams/s",
        None,
        None,
    );
    emit(
        "leaf_replace_kernel_pct_64x512",
        floor,
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_replaces_per_s_64x512",
        median(&replace_rate),
        "replaces/s",
        None,
        None,
    );
    // With the default 128 buckets a member of 64 has 2: most reweights move none.
    emit(
        "leaf_bucket_neutral_replace_fraction_64x512",
        median(&neutral),
        "ratio",
        None,
        None,
    );
    emit(
        "lqd_rss_mib_64x512",
        median(&rss),
        "MiB",
        Some("<= 64"),
        Some(peak),
    );
    emit(
        "bpf_map_bytes_64x512",
        map_bytes as f64 / (1024.0 * 1024.0),
        "MiB",
        None,
        None,
    );
    // The same leaf with nothing changing: what receiving the fabric's advertisements costs
    // before any weight moves (no replaces, so no kernel floor under it).
    emit(
        "leaf_cpu_pct_64x512_still",
        still.lqd_pct + still.xdp_pct,
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_lqd_cpu_pct_64x512_still",
        still.lqd_pct,
        "% of a core",
        None,
        None,
    );
    emit(
        "leaf_xdp_cpu_pct_64x512_still",
        still.xdp_pct,
        "% of a core",
        None,
        None,
    );
    Ok(())
}

/// One window of the same leaf while no entry changes (the spines still advertise every
/// entry every period): the receiving's own cost. The churn resumes afterwards.
fn still_window(
    lqd: &Lqd,
    pid: u32,
    prog: u32,
    sent: &AtomicU64,
    churn: &AtomicUsize,
) -> Result<Window> {
    churn.store(0, Ordering::Relaxed);
    // Damped steps end within a few T_reweight of the last change.
    std::thread::sleep(Duration::from_secs(2));
    let m = window(lqd, pid, prog, sent, "still fabric (no entry changing)");
    churn.store(CHURN, Ordering::Relaxed);
    let m = m?;
    // Our own per-datagram goal, at this datagram rate, is a floor of the receiver's share.
    eprintln!(
        "the receiver at xdp_lq_90_ns's goal ({XDP_LQ_90_GOAL_NS:.0} ns a datagram of 90 entries) x {:.0} datagrams/s = {:.2} % of a core",
        m.sent_rate,
        m.sent_rate * XDP_LQ_90_GOAL_NS / 1e9 * 100.0
    );
    Ok(m)
}
