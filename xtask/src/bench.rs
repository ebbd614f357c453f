//! `cargo xtask bench [NAME...]`: runs the benchmark programs and collects their metrics.
//!
//! # Convention
//!
//! A benchmark is a binary target of the `lq-tests` crate named `bench_<name>`, in
//! `tests/src/bin/bench_<name>.rs`. xtask finds them with `cargo metadata --no-deps` and
//! runs each with `cargo run --release -p lq-tests --bin bench_<name>` (as root, like the
//! privileged tests; `NAME` arguments keep only the benchmarks whose `<name>` is listed).
//!
//! A benchmark reports by printing zero or more lines on stdout of the form
//!
//! ```text
//! LQ-METRIC {"name":"xdp_rx_mpps","value":9.8,"unit":"Mpps","goal":">= 8","baseline":null}
//! ```
//!
//! `name` (string), `value` (number) and `unit` (string) are required; `goal` and
//! `baseline` may be null, a number, or a string: `goal` is a comparison such as
//! `"<= 1.3"`, `">= 8"`, `"< 5"`, `"> 0"`, `"== 0"` or a closed range `"in [0.04, 0.12]"`
//! against which `value` is checked.
//! Everything else a benchmark prints is shown but ignored. xtask writes all metrics to
//! `target/bench/results.json` (`{"metrics": [...], "host": {...}}`) and a Markdown table
//! to `target/bench/results.md`, and prints the table. A benchmark that exits non-zero
//! makes `cargo xtask bench` exit non-zero after collecting the others.
//!
//! xtask adds two metrics of the host per benchmark: `host_steal_pct_<name>` (the
//! hypervisor's steal time while it ran, from /proc/stat) and `host_speed_ref_ns_<name>`
//! (the CPU time of a `getpid` system call just before it): figures of two runs are
//! comparable only when these agree.
//!
//! Long benchmarks ([`LONG_BENCHES`]) run only when named: `cargo xtask bench fabric` runs
//! the fabric demo over 5 hash draws (about 20 minutes on 2 cores, `bench_fabric.rs`).

use std::{fs, path::Path, time::Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::util;

/// The prefix of a metric line.
const METRIC_PREFIX: &str = "LQ-METRIC ";
/// The package holding the benchmarks.
const BENCH_PACKAGE: &str = "lq-tests";
/// The binary-name prefix of a benchmark.
const BENCH_PREFIX: &str = "bench_";
/// Benchmarks left out unless named: they take many minutes.
const LONG_BENCHES: &[&str] = &["fabric"];

#[derive(Args)]
pub struct BenchArgs {
    /// Run only these benchmarks (the `<name>` of `bench_<name>`); long ones (fabric: the
    /// demo over 5 hash draws) run only when named.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs the benchmarks and writes the results.
pub fn bench(args: &BenchArgs) -> Result<()> {
    let all = discover()?;
    let selected = select(&all, &args.names)?;
    if all.is_empty() {
        println!(
            "==> bench: no bench_* binaries in {BENCH_PACKAGE} yet (tests/src/bin/bench_<name>.rs)"
        );
    }
    let mut metrics = Vec::new();
    let mut failed = Vec::new();
    for name in &selected {
        match run_one(name) {
            Ok(m) => metrics.extend(m),
            Err(e) => {
                println!("    {e:#}");
                failed.push(name.clone());
            }
        }
    }
    write_results(&metrics)?;
    if !failed.is_empty() {
        bail!(
            "benchmarks failed: {} (see their output above)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Names (`<name>` of `bench_<name>`) of the benchmark binaries, sorted.
fn discover() -> Result<Vec<String>> {
    let mut cmd = util::cargo_cmd(None);
    cmd.args(["metadata", "--no-deps", "--format-version", "1"]);
    let out = util::output(&mut cmd)
        .context("`cargo metadata --no-deps` failed: does the workspace's Cargo.toml parse?")?;
    let meta: Value = serde_json::from_str(&out).context("cargo metadata printed invalid JSON")?;
    Ok(bench_names(&meta))
}

fn bench_names(meta: &Value) -> Vec<String> {
    let empty = Vec::new();
    let packages = meta["packages"].as_array().unwrap_or(&empty);
    let mut names: Vec<String> = packages
        .iter()
        .filter(|p| p["name"] == BENCH_PACKAGE)
        .flat_map(|p| p["targets"].as_array().unwrap_or(&empty).iter())
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter_map(|t| t["name"].as_str()?.strip_prefix(BENCH_PREFIX))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

fn select(all: &[String], wanted: &[String]) -> Result<Vec<String>> {
    if wanted.is_empty() {
        let (long, short): (Vec<&String>, Vec<&String>) =
            all.iter().partition(|a| LONG_BENCHES.contains(&a.as_str()));
        if !long.is_empty() {
            println!(
                "==> bench: not running the long benchmark(s) {long:?}; name them to run them (cargo xtask bench fabric)"
            );
        }
        return Ok(short.into_iter().cloned().collect());
    }
    let unknown: Vec<&String> = wanted.iter().filter(|w| !all.contains(w)).collect();
    if !unknown.is_empty() {
        bail!(
            "no benchmark named {unknown:?}; known: {all:?} (binaries bench_<name> of {BENCH_PACKAGE})"
        );
    }
    Ok(all.iter().filter(|a| wanted.contains(a)).cloned().collect())
}

/// Runs one benchmark and returns its metrics.
fn run_one(name: &str) -> Result<Vec<Value>> {
    let bin = format!("{BENCH_PREFIX}{name}");
    util::break_line();
    println!("==> bench: {bin}");
    let start = Instant::now();
    let mut cmd = util::cargo_cmd(None);
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        BENCH_PACKAGE,
        "--bin",
        &bin,
    ]);
    let mut metrics = Vec::new();
    let mut bad = Vec::new();
    let speed_ref = host_speed_ref_ns();
    let times_before = machine_cpu_times();
    let st = util::run_streaming(&mut cmd, util::Pipe::Stdout, |line| {
        match parse_metric(line) {
            Some(Ok(m)) => metrics.push(m),
            Some(Err(e)) => bad.push(format!("{e:#}")),
            None => {}
        }
    })?;
    println!(
        "==> bench: {bin} ... {} metric(s) in {}",
        metrics.len(),
        util::secs(start.elapsed())
    );
    for b in &bad {
        println!("    ignored a malformed metric line: {b}");
    }
    // The hypervisor's share while it ran: on a shared VM other tenants slow the same code
    // by up to 2x between runs, and a figure measured while they did is not comparable
    // with one measured without them (the metric says which runs to repeat).
    if let (Some(before), Some(after)) = (times_before, machine_cpu_times())
        && let Some(steal) = after.steal_pct_since(&before)
    {
        println!("==> bench: {bin}: steal time {steal:.1} % of the machine's CPU time");
        metrics.push(host_metric(
            format!("host_steal_pct_{name}"),
            (steal * 100.0).round() / 100.0,
            "% of the machine's CPU time",
        ));
    }
    if let Some(speed_ref) = speed_ref {
        println!("==> bench: {bin}: host speed reference {speed_ref:.3} ns per getpid before it");
        metrics.push(host_metric(
            format!("host_speed_ref_ns_{name}"),
            (speed_ref * 1000.0).round() / 1000.0,
            "ns per getpid",
        ));
    }
    if !st.success() {
        bail!("{bin} exited with {st}");
    }
    Ok(metrics)
}

/// A metric of the host a benchmark ran on (no goal, no baseline).
fn host_metric(name: String, value: f64, unit: &str) -> Value {
    json!({ "name": name, "value": value, "unit": unit, "goal": null, "baseline": null })
}

/// System calls of [`host_speed_ref_ns`] per sample.
const SPEED_REF_CALLS: u64 = 200_000;

/// The same code's speed on this host, now: this thread's CPU nanoseconds per `getpid`
/// system call (median of 5 samples), taken before each benchmark
/// (`host_speed_ref_ns_<name>`). Most of what the benchmarks time is kernel code (XDP and tc
/// programs, netlink, the nexthop replaces), and on a shared VM the same benchmark's figures
/// moved by up to 2x between days (the empty XDP program's test run took 10 ns on one day
/// and 18 ns on another) while the steal time stayed a few percent: the host's CPU, its
/// mitigations and a busy sibling hyperthread slow every kernel entry without taking the CPU
/// away. This figure is meant to follow them (a chain of integer operations did not: it
/// took 3.000 ns a step on the slow day too), but it is context, not a normaliser: within
/// one run on that VM it read 120-179 ns from one benchmark to the next. Two runs' figures
/// are compared only when their references agree.
fn host_speed_ref_ns() -> Option<f64> {
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let start = thread_cpu_ns()?;
            for _ in 0..SPEED_REF_CALLS {
                // glibc does not cache the pid (2.25+): each call enters the kernel.
                std::hint::black_box(std::process::id());
            }
            Some(thread_cpu_ns()?.saturating_sub(start) as f64 / SPEED_REF_CALLS as f64)
        })
        .collect::<Option<_>>()?;
    samples.sort_by(f64::total_cmp);
    Some(samples[samples.len() / 2])
}

/// This thread's CPU time in nanoseconds, the first field of /proc/thread-self/schedstat
/// (the scheduler's runtime: time the hypervisor took away is not counted, a slow
/// instruction is).
fn thread_cpu_ns() -> Option<u64> {
    fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The machine's CPU time counters (the `cpu` line of /proc/stat, in clock ticks).
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuTimes {
    /// The first eight fields summed (guest time is counted inside user and nice).
    total: u64,
    /// The eighth field: time the hypervisor ran something else while this VM wanted to run.
    steal: u64,
}

impl CpuTimes {
    /// Parses /proc/stat's aggregate `cpu` line; `None` when it is missing or malformed.
    fn parse(proc_stat: &str) -> Option<Self> {
        let fields: Vec<u64> = proc_stat
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // guest and guest_nice (fields 9 and 10) are already counted in user and nice.
        let counted = fields.get(..8)?;
        Some(Self {
            total: counted.iter().sum(),
            steal: counted[7],
        })
    }

    /// Steal time since `earlier`, in percent of all the machine's CPU time then.
    fn steal_pct_since(&self, earlier: &Self) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        (total > 0).then(|| 100.0 * steal as f64 / total as f64)
    }
}

fn machine_cpu_times() -> Option<CpuTimes> {
    CpuTimes::parse(&fs::read_to_string("/proc/stat").ok()?)
}

/// `Some(metric)` for an `LQ-METRIC {...}` line, `None` for any other line.
fn parse_metric(line: &str) -> Option<Result<Value>> {
    let json = line.trim_end().strip_prefix(METRIC_PREFIX)?;
    Some(validate_metric(json))
}

fn validate_metric(json: &str) -> Result<Value> {
    let v: Value = serde_json::from_str(json).with_context(|| format!("not JSON: {json}"))?;
    if !v["name"].is_string() || !v["value"].is_number() || !v["unit"].is_string() {
        bail!("needs string name, number value and string unit: {json}");
    }
    let mut m = serde_json::Map::new();
    for key in ["name", "value", "unit", "goal", "baseline"] {
        m.insert(key.into(), v.get(key).cloned().unwrap_or(Value::Null));
    }
    Ok(Value::Object(m))
}

/// A goal's comparison: `value OP target`.
type Cmp = fn(f64, f64) -> bool;

/// Whether `value` meets `goal`: `Some(true/false)`, `None` when there is no goal or it
/// cannot be read.
fn goal_met(value: f64, goal: &Value) -> Option<bool> {
    if let Some(g) = goal.as_f64() {
        return Some(value >= g);
    }
    let g = goal.as_str()?.trim();
    if let Some(range) = g.strip_prefix("in") {
        let (lo, hi) = range
            .trim()
            .strip_prefix('[')?
            .strip_suffix(']')?
            .split_once(',')?;
        let (lo, hi): (f64, f64) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
        return Some((lo..=hi).contains(&value));
    }
    let ops: [(&str, Cmp); 6] = [
        ("<=", |v, t| v <= t),
        (">=", |v, t| v >= t),
        ("==", |v, t| v == t),
        ("<", |v, t| v < t),
        (">", |v, t| v > t),
        ("=", |v, t| v == t),
    ];
    let (op, rest) = ops
        .iter()
        .find_map(|(p, f)| g.strip_prefix(p).map(|r| (f, r)))?;
    let target: f64 = rest.trim().parse().ok()?;
    Some(op(value, target))
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn markdown(metrics: &[Value]) -> String {
    let mut md = String::from("| name | value | unit | goal | baseline | met? |\n");
    md.push_str("|---|---:|---|---|---|---|\n");
    for m in metrics {
        let met = match (m["value"].as_f64(), &m["goal"]) {
            (_, Value::Null) => "-",
            (Some(v), g) => match goal_met(v, g) {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "?",
            },
            (None, _) => "?",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {met} |\n",
            cell(&m["name"]),
            cell(&m["value"]),
            cell(&m["unit"]),
            cell(&m["goal"]),
            cell(&m["baseline"]),
        ));
    }
    md
}

fn write_results(metrics: &[Value]) -> Result<()> {
    let dir = util::workspace_root().join("target").join("bench");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let doc = json!({ "metrics": metrics, "host": host_info() });
    let json_path = dir.join("results.json");
    write(&json_path, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    let md = markdown(metrics);
    write(&dir.join("results.md"), &md)?;
    println!();
    print!("{md}");
    println!();
    println!(
        "==> bench: {} metric(s) written to {}",
        metrics.len(),
        json_path.display()
    );
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn host_info() -> Value {
    let uname =
        util::output(std::process::Command::new("uname").arg("-a")).map(|s| s.trim().to_string());
    let cpu = fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
    });
    let cpus = std::thread::available_parallelism().map(|n| n.get()).ok();
    json!({ "uname": uname, "cpu_model": cpu, "cpus": cpus, "date": utc_now() })
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Days since 1970-01-01 to (year, month, day); H. Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lines() {
        let l = r#"LQ-METRIC {"name":"rx","value":9.5,"unit":"Mpps","goal":">= 8"}"#;
        let m = parse_metric(l).unwrap().unwrap();
        assert_eq!(m["baseline"], Value::Null);
        assert_eq!(goal_met(9.5, &m["goal"]), Some(true));
        assert!(parse_metric("hello").is_none());
        assert!(parse_metric("LQ-METRIC {").unwrap().is_err());
        assert!(
            parse_metric(r#"LQ-METRIC {"name":"x","value":"1","unit":"s"}"#)
                .unwrap()
                .is_err()
        );
    }

    #[test]
    fn goals() {
        assert_eq!(goal_met(1.2, &json!("<= 1.3")), Some(true));
        assert_eq!(goal_met(1.4, &json!("<= 1.3")), Some(false));
        assert_eq!(goal_met(0.0, &json!("== 0")), Some(true));
        assert_eq!(goal_met(5.0, &json!("> 5")), Some(false));
        assert_eq!(goal_met(5.0, &json!("fast")), None);
        assert_eq!(goal_met(5.0, &Value::Null), None);
        assert_eq!(goal_met(0.08, &json!("in [0.04, 0.12]")), Some(true));
        assert_eq!(goal_met(0.12, &json!("in [0.04, 0.12]")), Some(true));
        assert_eq!(goal_met(0.2, &json!("in [0.04, 0.12]")), Some(false));
        assert_eq!(goal_met(0.03, &json!("in[0.04,0.12]")), Some(false));
        assert_eq!(goal_met(0.1, &json!("in [0.04]")), None);
    }

    #[test]
    fn bench_targets_are_found_in_metadata() {
        let meta = json!({"packages": [
            {"name": "lq-tests", "targets": [
                {"name": "lq_tests", "kind": ["lib"]},
                {"name": "bench_rx", "kind": ["bin"]},
                {"name": "helper", "kind": ["bin"]}]},
            {"name": "lq-user", "targets": [{"name": "bench_no", "kind": ["bin"]}]}]});
        assert_eq!(bench_names(&meta), vec!["rx".to_string()]);
        let all = vec!["fabric".to_string(), "rx".to_string()];
        assert_eq!(select(&all, &[]).unwrap(), vec!["rx".to_string()]);
        assert_eq!(
            select(&all, &["fabric".into()]).unwrap(),
            vec!["fabric".to_string()]
        );
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn steal_time_from_proc_stat() {
        let before = CpuTimes::parse(
            "cpu  720942 0 42630 6287618 1875 0 9599 43483 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n",
        )
        .unwrap();
        assert_eq!(before.steal, 43_483);
        assert_eq!(
            before.total,
            720_942 + 42_630 + 6_287_618 + 1_875 + 9_599 + 43_483
        );
        let after = CpuTimes {
            total: before.total + 2_000,
            steal: before.steal + 100,
        };
        assert_eq!(after.steal_pct_since(&before), Some(5.0));
        assert_eq!(before.steal_pct_since(&before), None);
        assert_eq!(before.steal_pct_since(&after), None);
        assert_eq!(CpuTimes::parse("cpu0 1 2 3\n"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 3\n"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 x 4 5 6 7 8 9 10\n"), None);
    }
}
