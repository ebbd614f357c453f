//! `cargo xtask bench fabric`: the fabric demo (tests/src/bin/demo) over 5 hash draws, its
//! report's medians, minima and maxima as `LQ-METRIC` lines (issue 12's goals attached).
//!
//! Builds `lqd` and the demo (release) if needed, runs the demo as a child with
//! `--draws 5 --out target/bench/fabric`, then reads `target/bench/fabric/report.json`.
//! More demo arguments come from this program's arguments or, through `cargo xtask bench`,
//! from `LQ_BENCH_FABRIC_ARGS` (whitespace-separated), e.g.
//! `LQ_BENCH_FABRIC_ARGS="--weight-function integral" cargo xtask bench fabric` (the
//! demo's default is lqd's, `seed`); a
//! `--draws N` there replaces the 5, and `--report PATH` re-reads an earlier report
//! instead of running the demo. About 4 minutes per draw on 2 cores; the plot of
//! every draw is `target/bench/fabric/plot.svg`.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use lq_tests::bench::emit;
use serde_json::Value;

/// The unit of a report metric, from its name: `_s` seconds, `_ms` milliseconds, counts of
/// failures, flows or intervals, fractions of swing, share and delivery, and the ratios.
fn unit_of(metric: &str) -> &'static str {
    if metric.contains("_vs_") {
        // A ratio, whatever it compares (`remote_fault_share_vs_static`).
        "x"
    } else if metric.ends_with("_ms") {
        "ms"
    } else if metric.ends_with("_s") {
        "s"
    } else if metric.contains("failures") || metric.contains("paths") {
        "count"
    } else if ["swing", "share", "fraction"]
        .iter()
        .any(|k| metric.contains(k))
    {
        "fraction"
    } else {
        "x"
    }
}

/// The comparison a goal text puts on one statistic: `"median >= 2, min >= 1.5"` and
/// `"min"` give `">= 1.5"`; a range `"median in [0.04, 0.12]"` keeps its comma.
fn goal_of(text: &str, stat: &str) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for p in text.split(", ") {
        let starts = ["median ", "min ", "max "].iter().any(|s| p.starts_with(s));
        match parts.last_mut() {
            Some(last) if !starts => {
                last.push_str(", ");
                last.push_str(p);
            }
            _ => parts.push(p.to_string()),
        }
    }
    parts
        .iter()
        .find_map(|p| p.strip_prefix(stat)?.strip_prefix(' '))
        .map(str::to_string)
}

fn main() {
    lq_tests::require_root();
    if let Err(e) = run() {
        eprintln!("bench_fabric: {e:#}");
        std::process::exit(1);
    }
}

/// The release directory this program runs from (`target/release`).
fn release_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe.parent().context("own directory")?.to_path_buf())
}

fn run() -> Result<()> {
    let dir = release_dir()?;
    let root = dir
        .parent()
        .and_then(Path::parent)
        .context("workspace root")?
        .to_path_buf();
    let mut extra: Vec<String> = std::env::args().skip(1).collect();
    if let Ok(more) = std::env::var("LQ_BENCH_FABRIC_ARGS") {
        extra.extend(more.split_whitespace().map(str::to_string));
    }
    // `--report PATH`: the metrics of an earlier run's report, without running the demo.
    if let Some(k) = extra.iter().position(|a| a == "--report") {
        let path = PathBuf::from(extra.get(k + 1).context("--report needs a path")?);
        return emit_report(&path);
    }
    // The demo and lqd as of this checkout: cargo is a no-op when they are fresh.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "-p",
            "lq-user",
            "--bin",
            "lqd",
            "-p",
            "lq-tests",
            "--bin",
            "demo",
        ])
        .current_dir(&root)
        .status()
        .context("cargo build lqd and demo")?;
    if !st.success() {
        bail!("building lqd and the demo failed ({st})");
    }
    let out = root.join("target/bench/fabric");
    if !extra.iter().any(|a| a == "--draws") {
        extra.extend(["--draws".into(), "5".into()]);
    }
    let _ = std::fs::remove_file(out.join("report.json"));
    let st = Command::new(dir.join("demo"))
        .arg("--lqd")
        .arg(dir.join("lqd"))
        .arg("--out")
        .arg(&out)
        .args(&extra)
        .current_dir(&root)
        .status()
        .context("run the demo")?;
    if !st.success() {
        bail!("the demo failed ({st})");
    }
    emit_report(&out.join("report.json"))
}

/// Prints the LQ-METRIC lines of a demo report.
fn emit_report(path: &Path) -> Result<()> {
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?,
    )
    .with_context(|| format!("parse {}", path.display()))?;
    let draws = report["draws"].as_u64().unwrap_or(0);
    println!(
        "==> bench_fabric: {draws} draw(s), seeds {}, weight-function {}, load average {} -> {}",
        report["seeds"],
        report["weight_function"],
        report["load_average"]["start"],
        report["load_average"]["end"]
    );
    let goals = &report["goals"];
    // Every metric of the report, the BGP ones included; one that a draw could not measure
    // is not measured here either (its median over the other draws could read as met).
    let summary = report["summary"].as_object().cloned().unwrap_or_default();
    for (name, s) in &summary {
        let unit = unit_of(name);
        let missing = s["missing"].as_u64().unwrap_or(0);
        if missing > 0 {
            println!(
                "    fabric_{name}: not measured: missing in {missing} of {draws} draw(s) ({s})"
            );
            continue;
        }
        let goal_text = goals[name]["goal"].as_str().unwrap_or_default();
        let goal_of = |stat: &str| goal_of(goal_text, stat);
        for (stat, suffix) in [("median", ""), ("min", "_min"), ("max", "_max")] {
            match s[stat].as_f64() {
                Some(v) => emit(
                    &format!("fabric_{name}{suffix}"),
                    v,
                    unit,
                    goal_of(stat).as_deref(),
                    None,
                ),
                None => println!("    fabric_{name}{suffix}: not measured ({s})"),
            }
        }
    }
    if let Some(l) = report["load_average"]["start"][0].as_f64() {
        emit("fabric_load_average_1min_at_start", l, "load", None, None);
    }
    emit(
        "fabric_runtime",
        report["runtime_s"].as_f64().unwrap_or(0.0),
        "s",
        None,
        None,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{goal_of, unit_of};

    #[test]
    fn units_from_names() {
        assert_eq!(unit_of("jct_lq_s"), "s");
        assert_eq!(unit_of("withdrawn_path_traffic_ms"), "ms");
        assert_eq!(unit_of("false_spine_failures"), "count");
        assert_eq!(unit_of("weight_swing_job_whole"), "fraction");
        assert_eq!(unit_of("jct_vs_static_cross"), "x");
        assert_eq!(unit_of("remote_fault_share_vs_static"), "x");
        assert_eq!(unit_of("remote_fault_share_lq"), "fraction");
    }

    #[test]
    fn goals_per_statistic() {
        let t = "median >= 2, min >= 1.5";
        assert_eq!(goal_of(t, "median").as_deref(), Some(">= 2"));
        assert_eq!(goal_of(t, "min").as_deref(), Some(">= 1.5"));
        assert_eq!(goal_of(t, "max"), None);
        let r = "median in [0.04, 0.12]";
        assert_eq!(goal_of(r, "median").as_deref(), Some("in [0.04, 0.12]"));
        assert_eq!(goal_of("max <= 0", "max").as_deref(), Some("<= 0"));
    }
}
