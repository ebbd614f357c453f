//! Replays every input of `fuzz/corpus/TARGET/` and `fuzz/regressions/TARGET/` through the
//! fuzz targets' own entry points (`fuzz/src/lib.rs`, included by path), on the stable
//! toolchain and without libFuzzer: a finding of `cargo xtask fuzz` (a panic, a hang or an
//! unbounded allocation) that was fixed stays fixed.
//!
//! Each input runs on its own thread with a time bound. The bound only tells a hang (a
//! decoder that never returns) from a slow machine: a decoder takes microseconds on these
//! inputs, so the bound is minutes' worth of margin, not a speed goal.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    fs,
    path::{Path, PathBuf},
    sync::mpsc,
    thread,
    time::Duration,
};

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod targets;

/// Far above any decoder's time on a small input, even on a loaded 2-core machine.
const HANG_BOUND: Duration = Duration::from_secs(30);

/// Findings whose fix has not landed yet, as `TARGET/FILE` (none today: the IPFIX
/// collector's endless loop on a template whose only field has length 0 is fixed, and its
/// inputs are ordinary regressions). They are replayed with a short bound and reported
/// while they still hang; once one passes, this test fails until it is removed from the
/// list, so the list cannot outlive the fix.
const AWAITING_FIX: &[&str] = &[];

/// The bound for [`AWAITING_FIX`] inputs, which are known to hang.
const AWAITING_BOUND: Duration = Duration::from_secs(3);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `fuzz/KIND/TARGET/` for every target (a missing folder has none).
fn inputs(kind: &str) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for (name, _) in targets::TARGETS {
        let dir = fuzz_dir().join(kind).join(name);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|p| (*name, p)));
    }
    out
}

/// Runs `target`'s entry point on the file's bytes; the failure, if any.
fn replay(target: &'static str, path: &Path) -> Option<String> {
    replay_within(target, path, HANG_BOUND)
}

fn replay_within(target: &'static str, path: &Path, bound: Duration) -> Option<String> {
    let entry = targets::entry(target).expect("listed targets have an entry point");
    let data = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let (tx, rx) = mpsc::channel();
    let worker = thread::Builder::new()
        .name(format!("replay-{target}"))
        .spawn(move || {
            let outcome = std::panic::catch_unwind(|| entry(&data));
            let _ = tx.send(outcome.is_ok());
        })
        .expect("spawning a replay thread");
    match rx.recv_timeout(bound) {
        Ok(true) => {
            let _ = worker.join();
            None
        }
        Ok(false) => Some(format!("{target}: {} panics", path.display())),
        // The thread is left running: a test cannot stop it, and the process ends soon.
        Err(_) => Some(format!(
            "{target}: {} did not finish within {bound:?} (hang)",
            path.display()
        )),
    }
}

fn awaiting_fix(target: &str, path: &Path) -> bool {
    let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
    AWAITING_FIX.contains(&format!("{target}/{file}").as_str())
}

fn replay_all(kind: &str) -> usize {
    let all = inputs(kind);
    let mut failures = Vec::new();
    for (t, p) in &all {
        if kind == "regressions" && awaiting_fix(t, p) {
            match replay_within(t, p, AWAITING_BOUND) {
                Some(f) => eprintln!("awaiting the fix on another branch: {f}"),
                None => failures.push(format!(
                    "{t}: {} passes now: remove it from AWAITING_FIX",
                    p.display()
                )),
            }
            continue;
        }
        failures.extend(replay(t, p));
    }
    assert!(
        failures.is_empty(),
        "{} of {} {kind} input(s) fail:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    all.len()
}

/// Every finding of the fuzzers, fixed: no panic, no hang.
#[test]
fn regression_inputs_pass() {
    let n = replay_all("regressions");
    assert!(
        n > 0,
        "fuzz/regressions/ holds the findings; none were found"
    );
}

/// The seed corpora pass too (and show that the entry points run on valid inputs).
#[test]
fn seed_corpora_pass() {
    let n = replay_all("corpus");
    assert!(n > 0, "no seed inputs under fuzz/corpus/");
}

/// Every target file in `fuzz/fuzz_targets/` is listed in `TARGETS` (and so replayed).
#[test]
fn every_target_is_replayed() {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    files.sort();
    let listed: Vec<String> = targets::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(files, listed);
}
