//! `bench_sampler`: what the helper's counter sampler costs (seed 003 Appendix A: A.1
//! recommends T_sample = 2 ms, so the sampler runs 500 times a second per helper).
//!
//! Metric (one `LQ-METRIC` line, see `xtask/src/bench.rs`):
//!
//! * `sampler_cpu_64_links_pct`: CPU time of the sampling thread (CLOCK_THREAD_CPUTIME_ID,
//!   user + system, so the kernel's work building the dumps counts) / wall time, in percent
//!   of one core, while sampling 64 veth interfaces (32 pairs in one namespace, a tbf
//!   qdisc on each) every 2 ms for 5 s, the way the helper role samples
//!   (`Sampler::follow_link_notifications`: TX counters from a stats64-only RTM_GETSTATS
//!   dump, the root qdiscs from an RTM_GETQDISC dump, the full RTM_GETLINK dump only on a
//!   link notification and once a second). Goal: at most 5 % of a core. Baseline: the same
//!   with the full RTM_GETLINK dump every sample (`sampler_cpu_64_links_full_dump_pct`),
//!   what the helper did before (most of that cost is the kernel filling IFLA_AF_SPEC and
//!   the other attributes of every link, which the sampler does not need every 2 ms).
//!
//! Three rounds, the two ways interleaved, medians reported (one 5 s run moved by up to
//! 1.5x between runs on the shared 2-core machine). Per-sample latency goes to stderr as
//! min / median / max. The namespace is created here and deleted on exit; the root
//! namespace is not touched.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    io::Write as _,
    time::{Duration, Instant},
};

use anyhow::{Result, ensure};
use lq_tests::{
    netns::{NetNs, run},
    require_root,
};
use lq_user::sys::sampler::{LinkConfig, Sampler, SpeedSource};
use serde_json::json;

const PAIRS: usize = 32;
const T_SAMPLE: Duration = Duration::from_millis(2);
const DURATION: Duration = Duration::from_secs(5);

/// Runs an `ip -batch` or `tc -batch` file of `lines` inside `ns`.
fn batch(ns: &NetNs, program: &str, lines: &[String]) -> Result<()> {
    let path =
        std::env::temp_dir().join(lq_tests::unique_name(&format!("bench-sampler-{program}")));
    let mut f = std::fs::File::create(&path)?;
    f.write_all(lines.join("\n").as_bytes())?;
    f.write_all(b"\n")?;
    drop(f);
    let p = path.to_string_lossy().into_owned();
    let r = run(program, &["-n", ns.name(), "-batch", &p]);
    let _ = std::fs::remove_file(&path);
    r.map(|_| ())
}

struct Measured {
    cpu_ns: u64,
    wall_ns: u64,
    latencies_ns: Vec<u64>,
    links: usize,
    tbf_links: usize,
}

/// How the sampler finds link state.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// Link notifications, full dump on a notification and once a second (the helper's).
    Notifications,
    /// The full RTM_GETLINK dump every sample.
    FullDump,
}

/// Samples `names` every T_SAMPLE for DURATION on the calling thread (already in the
/// namespace).
fn measure(names: &[String], way: Way) -> Result<Measured> {
    let cfg = names
        .iter()
        .map(|n| LinkConfig {
            name: n.clone(),
            rate_bps: None,
        })
        .collect();
    let mut s = Sampler::new(cfg)?;
    match way {
        Way::Notifications => s.follow_link_notifications()?,
        Way::FullDump => s.set_link_dump_every(1),
    }
    // One warm-up sample (first ethtool reads, allocations), then the measured run.
    let first = s.sample()?;
    let tbf_links = first
        .iter()
        .filter(|l| l.speed_source == SpeedSource::Qdisc && l.raw.link_speed_bps == 1_000_000_000)
        .count();
    let mut latencies_ns = Vec::with_capacity(3000);
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let mut next = start;
    while start.elapsed() < DURATION {
        let t = Instant::now();
        let out = s.sample()?;
        latencies_ns.push(t.elapsed().as_nanos() as u64);
        std::hint::black_box(out);
        next += T_SAMPLE;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let wall_ns = start.elapsed().as_nanos() as u64;
    let cpu_ns = thread_cpu_ns() - cpu0;
    Ok(Measured {
        cpu_ns,
        wall_ns,
        latencies_ns,
        links: first.len(),
        tbf_links,
    })
}

use lq_tests::bench::thread_cpu_ns;

fn main() -> Result<()> {
    require_root();
    let ns = NetNs::new("lqbs")?;
    let mut ip = Vec::new();
    let mut tc = Vec::new();
    let mut names = Vec::new();
    for i in 0..PAIRS {
        let (a, b) = (format!("sa{i}"), format!("sb{i}"));
        ip.push(format!("link add {a} type veth peer name {b}"));
        ip.push(format!("link set {a} up"));
        ip.push(format!("link set {b} up"));
        for n in [&a, &b] {
            tc.push(format!(
                "qdisc add dev {n} root tbf rate 1gbit burst 32kb latency 10ms"
            ));
        }
        names.push(a);
        names.push(b);
    }
    batch(&ns, "ip", &ip)?;
    batch(&ns, "tc", &tc)?;

    const ROUNDS: usize = 3;
    let mut pct: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for (k, way) in [Way::Notifications, Way::FullDump].into_iter().enumerate() {
            let names = names.clone();
            let m = ns.run_in(move || measure(&names, way))??;
            ensure!(
                m.links == 2 * PAIRS && m.tbf_links == 2 * PAIRS,
                "expected {} tbf-shaped links, sampled {} ({} with the tbf rate)",
                2 * PAIRS,
                m.links,
                m.tbf_links
            );
            let p = m.cpu_ns as f64 / m.wall_ns as f64 * 100.0;
            pct[k].push(p);
            let mut l = m.latencies_ns.clone();
            l.sort_unstable();
            let us = |ns: u64| ns as f64 / 1000.0;
            eprintln!(
                "bench_sampler round {round}, {way:?}: {} links, {} samples in {:.2} s (every {} \
                 ms), thread CPU {:.1} ms = {p:.2} % of a core",
                m.links,
                l.len(),
                m.wall_ns as f64 / 1e9,
                T_SAMPLE.as_millis(),
                m.cpu_ns as f64 / 1e6
            );
            if let (Some(min), Some(max)) = (l.first(), l.last()) {
                eprintln!(
                    "  per-sample latency: min {:.1} us, median {:.1} us, max {:.1} us",
                    us(*min),
                    us(l[l.len() / 2]),
                    us(*max)
                );
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, full) = (median(&mut pct[0]), median(&mut pct[1]));
    eprintln!(
        "bench_sampler medians over {ROUNDS} rounds: notifications {ours:.2} %, full dump every sample {full:.2} % of a core"
    );
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    for (name, value, goal, baseline) in [
        (
            "sampler_cpu_64_links_pct",
            ours,
            Some("<= 5"),
            Some(round3(full)),
        ),
        ("sampler_cpu_64_links_full_dump_pct", full, None, None),
    ] {
        let line = json!({
            "name": name,
            "value": round3(value),
            "unit": "%",
            "goal": goal,
            "baseline": baseline,
        });
        println!("LQ-METRIC {line}");
    }
    Ok(())
}
