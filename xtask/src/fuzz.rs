//! `cargo xtask fuzz [--runs N] [--max-time S] [TARGET...]`: runs the cargo-fuzz targets of
//! `fuzz/`, one after the other, each to a budget, and fails on any finding.
//!
//! Each target runs `cargo +nightly fuzz run --debug-assertions TARGET <scratch>
//! fuzz/corpus/TARGET -- -runs=N -timeout=T -rss_limit_mb=M -malloc_limit_mb=M ...`
//! (AddressSanitizer, cargo-fuzz's default, and debug assertions, so an arithmetic overflow
//! is a crash). The committed seed corpus `fuzz/corpus/TARGET` (written by xtask where it
//! is generated: the spec's test vectors and capture files of them) is read but not
//! written: new inputs libFuzzer finds go to the first directory, the scratch corpus
//! `target/fuzz/corpus/TARGET`, which persists between runs.
//!
//! Budgets: `--runs` executions per target (default 10,000,000, issue 14's level) and,
//! optionally, `--max-time` seconds per target; a target stops at whichever comes first and
//! the summary says which budget it reached. Limits per input: `--timeout` seconds (a
//! decoder that loops forever is a finding, not a stall) and `--rss-limit-mb` (also
//! libFuzzer's malloc limit: one allocation beyond it is an out-of-memory finding).
//!
//! Findings: libFuzzer stops at the first crash (panic, sanitizer report), timeout or
//! out-of-memory, exits non-zero and writes the input to `fuzz/artifacts/TARGET/`
//! (`crash-*`, `timeout-*`, `oom-*`, `leak-*`). A target fails when libFuzzer's exit status
//! is not 0 or a new artifact appeared; the command then exits 1. A finding's input belongs
//! in `fuzz/regressions/TARGET/` once fixed: `lq-user/tests/fuzz_regressions.rs` replays it
//! (see docs/fuzzing.md).

use std::{
    collections::BTreeSet,
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

/// Issue 14's budget: at least this many executions per target.
pub const DEFAULT_RUNS: u64 = 10_000_000;

/// Targets whose inputs are sequences (an IPFIX stream of messages, a capture file of
/// frames) get room for several units; the others keep libFuzzer's default (4096 octets).
const LONG_INPUTS: &[(&str, usize)] = &[("ipfix_session", 16_384), ("pcap_decode", 16_384)];

#[derive(Args)]
pub struct FuzzArgs {
    /// Executions per target (libFuzzer -runs).
    #[arg(long, default_value_t = DEFAULT_RUNS)]
    pub runs: u64,
    /// Time budget per target in seconds (libFuzzer -max_total_time); a target stops at
    /// whichever budget it reaches first. Default: none (the runs budget alone).
    #[arg(long, value_name = "SECONDS")]
    pub max_time: Option<u64>,
    /// Per-input time limit in seconds (libFuzzer -timeout): an input that runs longer is
    /// a timeout finding.
    #[arg(long, value_name = "SECONDS", default_value_t = 2)]
    pub timeout: u64,
    /// Memory limit in MB (libFuzzer -rss_limit_mb and -malloc_limit_mb): more resident
    /// memory, or one allocation larger than this, is an out-of-memory finding.
    #[arg(long, value_name = "MB", default_value_t = 1024)]
    pub rss_limit_mb: u64,
    /// Targets to run (default: every file in fuzz/fuzz_targets).
    #[arg(value_name = "TARGET")]
    pub targets: Vec<String>,
}

#[derive(Default)]
struct Report {
    executions: Option<u64>,
    /// New artifacts (file names) libFuzzer wrote to fuzz/artifacts/TARGET/.
    findings: Vec<String>,
    /// libFuzzer's own summary of a finding ("deadly signal", "timeout after 2 seconds").
    reason: Option<String>,
    exit_ok: bool,
    secs: f64,
}

impl Report {
    fn ok(&self) -> bool {
        self.exit_ok && self.findings.is_empty()
    }
}

/// Runs the targets; returns the exit code (1 when a target had a finding or failed).
pub fn fuzz(args: &FuzzArgs) -> Result<i32> {
    step("fuzz", "cargo-fuzz", ensure_cargo_fuzz)?;
    let fuzz_dir = util::workspace_root().join("fuzz");
    let targets = select(&list_targets(&fuzz_dir)?, &args.targets)?;
    step("fuzz", "seed corpora", || ensure_seeds(&fuzz_dir))?;
    let mut reports = Vec::new();
    for t in &targets {
        let r = run_target(&fuzz_dir, t, args)?;
        reports.push((t.clone(), r));
    }
    print_summary(&reports, args);
    Ok(i32::from(reports.iter().any(|(_, r)| !r.ok())))
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
    let f1 = ipv4_frame(&v1);
    let f2 = vlan_ipv6_frame(&v2);
    let frames = [f1.clone(), f2.clone()];
    let seeds: [(&str, &str, Vec<u8>); 7] = [
        ("wire_decode", "spec-vector-1.bin", v1.clone()),
        ("wire_decode", "spec-vector-2.bin", v2.clone()),
        ("receive_frame", "spec-vector-1-ipv4.bin", f1),
        ("receive_frame", "spec-vector-2-vlan-ipv6.bin", f2),
        (
            "pcap_decode",
            "spec-vectors-le-micros.pcap",
            pcap(false, &frames),
        ),
        (
            "pcap_decode",
            "spec-vectors-be-nanos.pcap",
            pcap(true, &frames),
        ),
        ("pcap_decode", "spec-vectors.pcapng", pcapng(&frames)),
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

/// A classic pcap file of Ethernet frames: little endian with microseconds, or big endian
/// with nanoseconds.
fn pcap(big_endian: bool, frames: &[Vec<u8>]) -> Vec<u8> {
    let w32 = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let magic: u32 = if big_endian { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    let mut b = Vec::new();
    b.extend(w32(magic));
    b.extend(w16(2));
    b.extend(w16(4));
    b.extend(w32(0));
    b.extend(w32(0));
    b.extend(w32(65_535));
    b.extend(w32(1)); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        b.extend(w32(1_700_000_000 + i as u32));
        b.extend(w32(0));
        b.extend(w32(f.len() as u32));
        b.extend(w32(f.len() as u32));
        b.extend(f);
    }
    b
}

/// A little-endian pcapng file: a Section Header, one Ethernet Interface Description, the
/// first frame as an Enhanced Packet Block and the others as Simple Packet Blocks.
fn pcapng(frames: &[Vec<u8>]) -> Vec<u8> {
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let total = (12 + body.len()) as u32;
        let mut b = Vec::new();
        b.extend(kind.to_le_bytes());
        b.extend(total.to_le_bytes());
        b.extend(body);
        b.extend(total.to_le_bytes());
        b
    }
    let mut shb = Vec::new();
    shb.extend(0x1a2b_3c4du32.to_le_bytes());
    shb.extend(1u16.to_le_bytes());
    shb.extend(0u16.to_le_bytes());
    shb.extend(u64::MAX.to_le_bytes()); // section length unknown
    let mut idb = Vec::new();
    idb.extend(1u16.to_le_bytes()); // LINKTYPE_ETHERNET
    idb.extend(0u16.to_le_bytes());
    idb.extend(0u32.to_le_bytes()); // no snap length
    let mut b = block(0x0a0d_0d0a, &shb);
    b.extend(block(1, &idb));
    for (i, f) in frames.iter().enumerate() {
        let mut body = Vec::new();
        if i == 0 {
            body.extend(0u32.to_le_bytes()); // interface 0
            body.extend(0u32.to_le_bytes());
            body.extend(0u32.to_le_bytes());
            body.extend((f.len() as u32).to_le_bytes());
            body.extend((f.len() as u32).to_le_bytes());
            body.extend(f);
            b.extend(block(6, &body));
        } else {
            body.extend((f.len() as u32).to_le_bytes());
            body.extend(f);
            b.extend(block(3, &body));
        }
    }
    b
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

/// The artifact files of a target (file names), to tell this run's findings from old ones.
fn artifacts(fuzz_dir: &Path, target: &str) -> BTreeSet<String> {
    let dir = fuzz_dir.join("artifacts").join(target);
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The executions of a libFuzzer status line: `#12345\tpulse ...` or `#12345\tDONE ...`.
fn status_executions(line: &str) -> Option<u64> {
    let rest = line.strip_prefix('#')?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

fn run_target(fuzz_dir: &Path, target: &str, args: &FuzzArgs) -> Result<Report> {
    let root = util::workspace_root();
    let scratch: PathBuf = root.join("target").join("fuzz").join("corpus").join(target);
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let before = artifacts(fuzz_dir, target);
    util::break_line();
    println!("==> fuzz: {target} ({})", budget_text(args));
    // Built first, so that the time reported is the fuzzing alone.
    let mut build = util::cargo_cmd(Some("nightly"));
    // The lq-user targets need no eBPF object: skip its build (an empty object is embedded).
    build.env("AYA_BUILD_SKIP", "1");
    build.args(["fuzz", "build", "--debug-assertions", target]);
    if !util::status(&mut build)?.success() {
        println!("==> fuzz: {target} ... build FAILED (see above)");
        return Ok(Report::default());
    }
    let mut cmd = util::cargo_cmd(Some("nightly"));
    cmd.env("AYA_BUILD_SKIP", "1");
    cmd.args(["fuzz", "run", "--debug-assertions", target])
        .arg(&scratch)
        .arg(format!("fuzz/corpus/{target}"))
        .arg("--")
        .arg(format!("-runs={}", args.runs))
        .arg(format!("-timeout={}", args.timeout))
        .arg(format!("-rss_limit_mb={}", args.rss_limit_mb))
        .arg(format!("-malloc_limit_mb={}", args.rss_limit_mb))
        .arg("-print_final_stats=1");
    if let Some(s) = args.max_time {
        cmd.arg(format!("-max_total_time={s}"));
    }
    if let Some((_, n)) = LONG_INPUTS.iter().find(|(t, _)| *t == target) {
        cmd.arg(format!("-max_len={n}"));
    }
    let start = Instant::now();
    let mut r = Report::default();
    let mut last_status = None;
    let st = util::run_streaming(&mut cmd, util::Pipe::Stderr, |line| {
        if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
            r.executions = n.trim().parse().ok();
        }
        if let Some(n) = status_executions(line) {
            last_status = Some(n);
        }
        // "==123== ERROR: libFuzzer: timeout after 2 seconds", "... out-of-memory (...)",
        // "... deadly signal"; a Rust panic shows as a deadly signal after its message.
        if let Some(i) = line.find("ERROR: libFuzzer: ") {
            r.reason = Some(line[i + "ERROR: libFuzzer: ".len()..].trim().to_string());
        }
    })?;
    r.secs = start.elapsed().as_secs_f64();
    // After a finding libFuzzer prints no final stats: the last status line is the count.
    if r.executions.is_none() {
        r.executions = last_status;
    }
    r.exit_ok = st.success();
    r.findings = artifacts(fuzz_dir, target)
        .difference(&before)
        .cloned()
        .collect();
    let execs = r
        .executions
        .map_or_else(|| "unknown".to_string(), |n| n.to_string());
    println!(
        "==> fuzz: {target} ... {execs} executions in {:.1} s, {} finding(s): {}",
        r.secs,
        r.findings.len(),
        if r.ok() { "ok" } else { "FAILED" }
    );
    for f in &r.findings {
        println!("    fuzz/artifacts/{target}/{f}");
    }
    if let Some(reason) = &r.reason {
        println!("    libFuzzer: {reason}");
    }
    if !r.exit_ok && r.findings.is_empty() {
        println!(
            "    {} exited with {st} (build failure? see above)",
            util::describe(&cmd)
        );
    }
    Ok(r)
}

fn budget_text(args: &FuzzArgs) -> String {
    let mut s = format!("budget {} runs", args.runs);
    if let Some(t) = args.max_time {
        s.push_str(&format!(" or {t} s"));
    }
    s.push_str(&format!(
        ", limits {} s per input, {} MB",
        args.timeout, args.rss_limit_mb
    ));
    s
}

/// Which budget a clean run reached: the runs, or the time (with how far it got).
fn budget_reached(r: &Report, args: &FuzzArgs) -> String {
    match r.executions {
        Some(n) if n >= args.runs => "runs".into(),
        Some(n) if args.max_time.is_some() => {
            format!("time ({:.0}% of runs)", 100.0 * n as f64 / args.runs as f64)
        }
        _ => "-".into(),
    }
}

fn print_summary(reports: &[(String, Report)], args: &FuzzArgs) {
    println!();
    println!("fuzz: {}", budget_text(args));
    println!(
        "{:<16} {:>12} {:>9} {:>8} {:>9} {:>18} {:>7}",
        "target", "executions", "time", "exec/s", "findings", "budget reached", "result"
    );
    for (t, r) in reports {
        let execs = r.executions.map_or("?".to_string(), |n| n.to_string());
        let rate = r.executions.map_or("?".to_string(), |n| {
            format!("{:.0}", n as f64 / r.secs.max(0.001))
        });
        let res = if r.ok() { "ok" } else { "FAILED" };
        let reached = if r.ok() {
            budget_reached(r, args)
        } else {
            "-".into()
        };
        println!(
            "{t:<16} {execs:>12} {:>7.1} s {rate:>8} {:>9} {reached:>18} {res:>7}",
            r.secs,
            r.findings.len(),
        );
    }
    if reports.iter().any(|(_, r)| !r.findings.is_empty()) {
        println!(
            "finding inputs are in fuzz/artifacts/<target>/; reproduce with `cargo +nightly fuzz run <target> <file>`; once fixed, move the file to fuzz/regressions/<target>/"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_from_libfuzzer_status_lines() {
        assert_eq!(
            status_executions("#1048576\tpulse  cov: 812 ft: 2960 corp: 301/9Kb exec/s: 52428"),
            Some(1_048_576)
        );
        assert_eq!(
            status_executions("#10000000\tDONE   cov: 812"),
            Some(10_000_000)
        );
        assert_eq!(status_executions("INFO: Seed: 1234"), None);
        assert_eq!(status_executions("#"), None);
    }

    #[test]
    fn pcap_seeds_have_their_magic_and_every_frame() {
        let frames = [ipv4_frame(&hex(VECTOR_1)), vlan_ipv6_frame(&hex(VECTOR_2))];
        let le = pcap(false, &frames);
        assert_eq!(&le[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(le.len(), 24 + 2 * 16 + frames[0].len() + frames[1].len());
        let be = pcap(true, &frames);
        assert_eq!(&be[..4], &[0xa1, 0xb2, 0x3c, 0x4d]);
        let ng = pcapng(&frames);
        assert_eq!(&ng[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
        // Every block is a multiple of 4 and ends with its own length.
        let mut at = 0;
        let mut blocks = 0;
        while at < ng.len() {
            let len = u32::from_le_bytes(ng[at + 4..at + 8].try_into().unwrap()) as usize;
            assert_eq!(len % 4, 0);
            assert_eq!(&ng[at + len - 4..at + len], &ng[at + 4..at + 8]);
            at += len;
            blocks += 1;
        }
        assert_eq!(at, ng.len());
        assert_eq!(blocks, 4, "SHB, IDB, EPB, SPB");
    }

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
