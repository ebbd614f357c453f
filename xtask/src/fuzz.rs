//! `cargo xtask fuzz [--runs N] [TARGET...]`: runs the cargo-fuzz targets of `fuzz/`.
//!
//! Each target runs `cargo +nightly fuzz run --debug-assertions TARGET <scratch>
//! fuzz/corpus/TARGET -- -runs=N`. The committed seed corpus `fuzz/corpus/TARGET` (the
//! spec's test vectors; written by xtask if missing) is read but not written: new inputs
//! libFuzzer finds go to the first directory, the scratch corpus
//! `target/fuzz/corpus/TARGET`, which persists between runs. Crashes land in
//! `fuzz/artifacts/TARGET/`.
//!
//! The default of 1,000,000 executions per target is a quick run (seconds); issue-level
//! runs use `--runs 10000000`.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use crate::util::{self, step};

/// The spec's test vector 1 (Q 0, D 1, P 1, triggered, two entries), UDP payload.
const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
/// The spec's test vector 2 (Q 1, D 0, periodic, one entry), UDP payload.
const VECTOR_2: &str =
    "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";
/// Default UDP port of the LQ protocol (`lq_common::wire::DEFAULT_PORT`).
const LQ_PORT: u16 = 52525;

#[derive(Args)]
pub struct FuzzArgs {
    /// Executions per target (libFuzzer -runs); issue-level runs use 10000000.
    #[arg(long, default_value_t = 1_000_000)]
    pub runs: u64,
    /// Targets to run (default: every file in fuzz/fuzz_targets).
    #[arg(value_name = "TARGET")]
    pub targets: Vec<String>,
}

#[derive(Default)]
struct Report {
    executions: Option<u64>,
    crashes: u64,
    ok: bool,
    secs: f64,
}

/// Runs the targets; returns the exit code (1 when a target crashed or failed).
pub fn fuzz(args: &FuzzArgs) -> Result<i32> {
    step("fuzz", "cargo-fuzz", ensure_cargo_fuzz)?;
    let fuzz_dir = util::workspace_root().join("fuzz");
    let targets = select(&list_targets(&fuzz_dir)?, &args.targets)?;
    step("fuzz", "seed corpora", || ensure_seeds(&fuzz_dir))?;
    let mut reports = Vec::new();
    for t in &targets {
        let r = run_target(t, args.runs)?;
        reports.push((t.clone(), r));
    }
    print_summary(&reports);
    Ok(i32::from(reports.iter().any(|(_, r)| !r.ok)))
}

fn ensure_cargo_fuzz() -> Result<((), String)> {
    let version = || util::output(util::cargo_cmd(None).args(["fuzz", "--version"]));
    if let Some(v) = version() {
        return Ok(((), format!("{} present, skipped", v.trim())));
    }
    let install = |locked: bool| {
        let mut cmd = util::cargo_cmd(None);
        cmd.args(["install", "cargo-fuzz"]);
        if locked {
            cmd.arg("--locked");
        }
        util::status(&mut cmd)
    };
    if !install(true)?.success() && !install(false)?.success() {
        bail!("`cargo install cargo-fuzz` failed (see above): check access to crates.io");
    }
    let v = version().context(
        "cargo-fuzz was installed but `cargo fuzz --version` fails: is ~/.cargo/bin on PATH?",
    )?;
    Ok(((), format!("{} installed", v.trim())))
}

/// File stems of `fuzz/fuzz_targets/*.rs`, sorted.
fn list_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}: is the fuzz/ crate there?", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    names.sort();
    Ok(names)
}

fn select(all: &[String], wanted: &[String]) -> Result<Vec<String>> {
    if let Some(w) = wanted.iter().find(|w| !all.contains(w)) {
        bail!("no fuzz target {w:?}; targets: {}", all.join(", "));
    }
    Ok(if wanted.is_empty() {
        all.to_vec()
    } else {
        wanted.to_vec()
    })
}

/// Writes the seed inputs that are missing; returns how many it wrote.
fn ensure_seeds(fuzz_dir: &Path) -> Result<((), String)> {
    let v1 = hex(VECTOR_1);
    let v2 = hex(VECTOR_2);
    let seeds: [(&str, &str, Vec<u8>); 4] = [
        ("wire_decode", "spec-vector-1.bin", v1.clone()),
        ("wire_decode", "spec-vector-2.bin", v2.clone()),
        ("receive_frame", "spec-vector-1-ipv4.bin", ipv4_frame(&v1)),
        (
            "receive_frame",
            "spec-vector-2-vlan-ipv6.bin",
            vlan_ipv6_frame(&v2),
        ),
    ];
    let mut written = 0;
    for (target, file, bytes) in seeds {
        let dir = fuzz_dir.join("corpus").join(target);
        let path = dir.join(file);
        if path.exists() {
            continue;
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        written += 1;
    }
    Ok(if written == 0 {
        ((), "present, skipped".into())
    } else {
        ((), format!("wrote {written} seed(s)"))
    })
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("valid hex constant"))
        .collect()
}

/// UDP header with the LQ port as source and destination, checksum 0.
fn udp(payload: &[u8]) -> Vec<u8> {
    let len = (8 + payload.len()) as u16;
    let mut u = Vec::new();
    u.extend(LQ_PORT.to_be_bytes());
    u.extend(LQ_PORT.to_be_bytes());
    u.extend(len.to_be_bytes());
    u.extend([0, 0]);
    u.extend(payload);
    u
}

fn ethernet(ethertype: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    f.extend(ethertype);
    f
}

/// Ethernet / IPv4 (TTL 255, DF) / UDP to the LQ port, from 10.0.0.2 to 10.0.0.1.
fn ipv4_frame(payload: &[u8]) -> Vec<u8> {
    let udp = udp(payload);
    let total = (20 + udp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend(total.to_be_bytes());
    ip.extend([0, 0, 0x40, 0, 255, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut f = ethernet(&[0x08, 0x00]);
    f.extend(ip);
    f.extend(udp);
    f
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet / 802.1Q VLAN 100 / IPv6 (hop limit 255) fe80::2 -> fe80::1 / UDP.
fn vlan_ipv6_frame(payload: &[u8]) -> Vec<u8> {
    let udp = udp(payload);
    let mut f = ethernet(&[0x81, 0x00, 0x00, 100, 0x86, 0xdd]);
    f.extend([0x60, 0, 0, 0]);
    f.extend((udp.len() as u16).to_be_bytes());
    f.extend([17, 255]);
    for last in [2u8, 1] {
        let mut a = [0u8; 16];
        a[0] = 0xfe;
        a[1] = 0x80;
        a[15] = last;
        f.extend(a);
    }
    f.extend(udp);
    f
}

fn run_target(target: &str, runs: u64) -> Result<Report> {
    let root = util::workspace_root();
    let scratch: PathBuf = root.join("target").join("fuzz").join("corpus").join(target);
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    util::break_line();
    println!("==> fuzz: {target} ({runs} runs)");
    let mut cmd = util::cargo_cmd(Some("nightly"));
    // The lq-user targets need no eBPF object: skip its build (an empty object is embedded).
    cmd.env("AYA_BUILD_SKIP", "1");
    cmd.args(["fuzz", "run", "--debug-assertions", target])
        .arg(&scratch)
        .arg(format!("fuzz/corpus/{target}"))
        .args(["--", &format!("-runs={runs}"), "-print_final_stats=1"]);
    let start = Instant::now();
    let mut r = Report::default();
    let st = util::run_streaming(&mut cmd, util::Pipe::Stderr, |line| {
        if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
            r.executions = n.trim().parse().ok();
        }
        if line.contains("Test unit written to") {
            r.crashes += 1;
        }
    })?;
    r.secs = start.elapsed().as_secs_f64();
    r.ok = st.success() && r.crashes == 0;
    let execs = r
        .executions
        .map_or_else(|| "unknown".to_string(), |n| n.to_string());
    println!(
        "==> fuzz: {target} ... {execs} executions, {} crash(es), {} in {:.1} s",
        r.crashes,
        if r.ok { "ok" } else { "FAILED" },
        r.secs
    );
    if !r.ok && r.crashes == 0 {
        println!(
            "    {} exited with {st} (build failure? see above)",
            util::describe(&cmd)
        );
    }
    Ok(r)
}

fn print_summary(reports: &[(String, Report)]) {
    println!();
    println!(
        "{:<16} {:>12} {:>8} {:>9} {:>7}",
        "target", "executions", "crashes", "time", "result"
    );
    for (t, r) in reports {
        let execs = r.executions.map_or("?".to_string(), |n| n.to_string());
        let res = if r.ok { "ok" } else { "FAILED" };
        println!(
            "{t:<16} {execs:>12} {:>8} {:>7.1} s {res:>7}",
            r.crashes, r.secs
        );
    }
    if reports.iter().any(|(_, r)| r.crashes > 0) {
        println!(
            "crash inputs are in fuzz/artifacts/<target>/; reproduce with `cargo +nightly fuzz run <target> <file>`"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_seed_frame_is_well_formed() {
        let f = ipv4_frame(&hex(VECTOR_2));
        assert_eq!(f.len(), 14 + 20 + 8 + 40);
        assert_eq!(
            ipv4_checksum(&f[14..34]),
            0,
            "checksum over a valid header is 0"
        );
        assert_eq!(f[14 + 8], 255);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), LQ_PORT);
    }

    #[test]
    fn ipv6_seed_frame_is_well_formed() {
        let f = vlan_ipv6_frame(&hex(VECTOR_1));
        assert_eq!(f.len(), 18 + 40 + 8 + 64);
        assert_eq!(&f[12..14], &[0x81, 0x00]);
        assert_eq!(f[18 + 7], 255);
    }
}
