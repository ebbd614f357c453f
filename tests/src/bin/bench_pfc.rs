//! `bench_pfc`: what the PFC telemetry costs, side by side with what it is compared against.
//!
//! Metrics (one `LQ-METRIC` line each, see `xtask/src/bench.rs`):
//!
//! 1. `tc_non_pfc_ratio`: ns per non-PFC frame through `lq_pfc_ingress` / ns per the same
//!    frame through `lq_tc_baseline` (an empty classifier returning `TC_ACT_OK`), both under
//!    BPF_PROG_TEST_RUN (repeat 1 000 000), timed by the calling thread's CPU clock (sub-ns;
//!    the kernel's whole-ns averages beside it), the two programs interleaved over 15 rounds
//!    and the median of the per-round ratios taken, so drift cancels. The mix: UDP over
//!    IPv4 and IPv6, untagged, 802.1Q- and 802.1ad-tagged, and an ARP request; the worst
//!    frame's ratio is reported.
//! 2. `tc_pfc_ns`: ns per valid PFC frame (class-enable 0x0009, non-zero quanta, to
//!    01-80-C2-00-00-01, 64 octets) through `lq_pfc_ingress`, every run verified by the
//!    counters: priorities 0 and 3 grow by exactly `repeat`, the others not at all. The
//!    interface the test run presents (the loopback of this namespace) is configured in
//!    `PFC_IF_CONFIG` with a link speed, so the whole counted path (counter, pause timer in
//!    time units) runs.
//! 3. `ipfix_export_cpu_pct`: the daemon's export path, whole: `PfcService::tick` (what
//!    `lqd run` does every `interval-ms`) over 64 veths x 8 priorities x 2 directions (the
//!    received side from the tc counter's pinned maps, the transmitted side from each veth's
//!    eight per-queue ethtool counters standing in for a NIC's PFC statistics), each
//!    reading through the counter model, encoded and sent over UDP to a collector socket;
//!    median thread CPU time of 20 exports as a percentage of one core at one export per
//!    second. `ipfix_encode_cpu_pct` (context, no goal): the encoder and socket alone on
//!    1024 synthetic records, as this metric was measured before.
//!
//! Everything it creates (a pin folder under /sys/fs/bpf, the sockets) is removed on drop,
//! so errors and panics clean up too.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use lq_tests::bench::{emit, median, spread};
use std::{
    net::UdpSocket,
    os::fd::AsRawFd,
    path::PathBuf,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, ensure};
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use lq_common::pfc::{
    PFC_MULTICAST, PFC_PRIORITIES, PFC_PROGRAM, TC_BASELINE_PROGRAM, build_frame,
};
use lq_tests::{
    packet::{Ip, udp53_frame},
    poll::poll_until,
};
use lq_user::{
    ipfix::{Direction, ExporterConfig, PfcRecord, encode::Encoder},
    sys::{
        bpf::pfc::{PfcCounter, PfcReader},
        netdev::interface_info,
    },
};

/// BPF_PROG_TEST_RUN repeat.
const REPEAT: u32 = 1_000_000;
/// Interleaved rounds for the non-PFC comparison.
const NON_PFC_ROUNDS: usize = 15;
/// Rounds for the PFC frame.
const PFC_ROUNDS: usize = 5;
/// `TC_ACT_OK` as BPF_PROG_TEST_RUN reports it.
const TC_ACT_OK: u32 = 0;
/// The PFC frame's class-enable vector: priorities 0 and 3.
const PFC_ENABLE: u16 = 0x0009;
/// Interfaces, priorities and directions of one IPFIX export.
const EXPORT_INTERFACES: u32 = 64;
/// Exports measured back to back.
const EXPORT_ITERATIONS: usize = 30;
/// Encode-only iterations (for the ns per record).
const ENCODE_ITERATIONS: usize = 200;
/// The export interval the CPU percentage refers to.
const EXPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Link speed written to the configuration of the test-run interface (100 Gb/s).
const SPEED_MBPS: u32 = 100_000;
/// Source address of the crafted frames.
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

use lq_tests::bench::thread_cpu_ns;

fn main() -> ExitCode {
    lq_tests::bench::main_of("bench_pfc", run)
}

fn run() -> Result<()> {
    lq_tests::require_root();
    eprintln!("bench_pfc: pid {}", std::process::id());
    let mut summary = Vec::new();

    let mut bench = TcBench::load()?;
    let non_pfc = bench.non_pfc()?;
    emit(
        "tc_non_pfc_ratio",
        non_pfc.ratio,
        "ratio",
        Some("<= 1.3"),
        Some(non_pfc.baseline_ns),
    );
    summary.push(format!(
        "non-PFC frames: lq_pfc_ingress {:.2} ns vs lq_tc_baseline {:.2} ns per frame: ratio {:.3} (worst frame, {})",
        non_pfc.pfc_ns, non_pfc.baseline_ns, non_pfc.ratio, non_pfc.frame
    ));

    let pfc = bench.pfc()?;
    emit("tc_pfc_ns", pfc.pfc_ns, "ns", None, Some(pfc.baseline_ns));
    summary.push(format!(
        "valid PFC frame (2 priorities): lq_pfc_ingress {:.2} ns (baseline {:.2} ns); counters verified: +{} on priorities 0 and 3 per run of {REPEAT}, ifindex {}",
        pfc.pfc_ns, pfc.baseline_ns, REPEAT, bench.ifindex
    ));
    drop(bench);

    let daemon = bench_export_daemon()?;
    emit(
        "ipfix_export_cpu_pct",
        daemon.cpu_pct,
        "%",
        Some("<= 1"),
        None,
    );
    summary.push(format!(
        "IPFIX export on the daemon's path (PfcService::tick: pinned counters + ethtool -> counter model -> encoder -> UDP), {} interfaces x 8 priorities x 2 directions = {} records per export: {:.3} ms thread CPU per export = {:.3} % of a core at 1/s",
        EXPORT_INTERFACES,
        daemon.records_per_export,
        daemon.cpu_ns_per_export / 1e6,
        daemon.cpu_pct,
    ));
    let export = bench_export()?;
    emit("ipfix_encode_cpu_pct", export.cpu_pct, "%", None, None);
    summary.push(format!(
        "context: encoder + socket only, {} synthetic records: {:.3} ms thread CPU per export ({} messages, {} octets) = {:.3} % of a core at 1/s; encode only {:.1} ns per record",
        export.records,
        export.cpu_ns_per_export / 1e6,
        export.messages,
        export.octets,
        export.cpu_pct,
        export.encode_ns_per_record
    ));

    eprintln!("\nbench_pfc summary:");
    for s in &summary {
        eprintln!("  {s}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 1 and 2. The tc programs under BPF_PROG_TEST_RUN.

/// The PFC counter loaded into a private pin folder (removed on drop), with the baseline
/// classifier loaded from the same object.
struct TcBench {
    counter: Option<PfcCounter>,
    reader: PfcReader,
    pin_dir: PathBuf,
    /// The ifindex the test runs present (this namespace's loopback).
    ifindex: u32,
}

impl Drop for TcBench {
    fn drop(&mut self) {
        self.counter = None;
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// One program's per-run cost: (verdict, kernel's mean ns per run).
type Run = (u32, f64);

struct NonPfc {
    ratio: f64,
    pfc_ns: f64,
    baseline_ns: f64,
    frame: &'static str,
}

struct Pfc {
    pfc_ns: f64,
    baseline_ns: f64,
}

impl TcBench {
    fn load() -> Result<Self> {
        let pin_dir = PathBuf::from("/sys/fs/bpf").join(lq_tests::unique_name("lq-pfc-bench"));
        let counter = match PfcCounter::load(&pin_dir) {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&pin_dir);
                return Err(e).context("load the PFC counter");
            }
        };
        let reader = match counter.reader() {
            Ok(r) => r,
            Err(e) => {
                drop(counter);
                let _ = std::fs::remove_dir_all(&pin_dir);
                return Err(e).context("open the pinned maps");
            }
        };
        // From here on the guard removes the pin folder.
        let mut this = Self {
            counter: Some(counter),
            reader,
            pin_dir,
            ifindex: 0,
        };
        // BPF_PROG_TEST_RUN for tc hands the program an skb on this namespace's loopback:
        // configure it like an attached interface so the counted path is the real one.
        let mut info = interface_info("lo").context("loopback interface")?;
        info.speed_mbps = SPEED_MBPS;
        this.ifindex = info.ifindex;
        let counter = this.counter.as_mut().context("counter")?;
        counter.configure(&info).context("configure loopback")?;
        let base: &mut SchedClassifier = counter
            .ebpf_mut()
            .program_mut(TC_BASELINE_PROGRAM)
            .context("lq_tc_baseline missing from the object")?
            .try_into()?;
        base.load().context("load lq_tc_baseline")?;
        Ok(this)
    }

    fn run(&mut self, program: &'static str, frame: &[u8], repeat: u32) -> Result<Run> {
        let prog: &mut SchedClassifier = self
            .counter
            .as_mut()
            .context("counter")?
            .ebpf_mut()
            .program_mut(program)
            .with_context(|| format!("{program} missing"))?
            .try_into()?;
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.repeat = repeat;
        let r = prog
            .test_run(opts)
            .with_context(|| format!("BPF_PROG_TEST_RUN ({program})"))?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }

    /// Counts of this interface's eight priorities (0 for a missing counter).
    fn counts(&self) -> Result<[u64; PFC_PRIORITIES as usize]> {
        Ok(self
            .reader
            .rx_priorities(self.ifindex)?
            .map(|c| c.unwrap_or(0)))
    }

    fn rejects(&self) -> Result<u64> {
        Ok(self.reader.rejects()?.iter().map(|(_, n)| n).sum())
    }

    /// Runs `frame` through both programs in alternating order for `rounds` rounds:
    /// (lq_pfc_ingress ns, baseline ns, median of the per-round ratios). Each run is timed by
    /// the calling thread's CPU clock divided by the repeat count (sub-ns resolution, where
    /// the kernel's TestRun average is whole ns: 10 +- 1 ns is a 10% error; CPU time, so
    /// preemption by other tenants is not counted; the syscall itself is < 0.1% of 10^6
    /// repeats). The kernel's averages are printed beside it.
    fn interleave(
        &mut self,
        name: &str,
        frame: &[u8],
        rounds: usize,
        mut after_pfc: impl FnMut(&Self) -> Result<()>,
    ) -> Result<(f64, f64, f64)> {
        let (mut pfc, mut base, mut paired) = (Vec::new(), Vec::new(), Vec::new());
        let (mut pfc_kernel, mut base_kernel) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (mut p, mut b) = (0.0, 0.0);
            // Alternate which program goes first, so neither always runs on a warmer cache.
            for first in [round % 2 == 0, round % 2 != 0] {
                let t = thread_cpu_ns();
                if first {
                    let (v, ns) = self.run(PFC_PROGRAM, frame, REPEAT)?;
                    p = (thread_cpu_ns() - t) as f64 / f64::from(REPEAT);
                    ensure!(v == TC_ACT_OK, "lq_pfc_ingress returned {v} for {name}");
                    pfc_kernel.push(ns);
                    after_pfc(self)?;
                } else {
                    let (v, ns) = self.run(TC_BASELINE_PROGRAM, frame, REPEAT)?;
                    b = (thread_cpu_ns() - t) as f64 / f64::from(REPEAT);
                    ensure!(v == TC_ACT_OK, "lq_tc_baseline returned {v} for {name}");
                    base_kernel.push(ns);
                }
            }
            pfc.push(p);
            base.push(b);
            paired.push(p / b);
        }
        let ratio = median(&paired);
        eprintln!(
            "{name}: thread CPU ns per run: lq_pfc_ingress {}; lq_tc_baseline {}; paired ratios {}: median {ratio:.3}",
            spread(&pfc),
            spread(&base),
            spread(&paired),
        );
        eprintln!(
            "{name} (context, kernel whole-ns averages): lq_pfc_ingress {}; lq_tc_baseline {}; ratio of medians {:.3}",
            spread(&pfc_kernel),
            spread(&base_kernel),
            median(&pfc_kernel) / median(&base_kernel)
        );
        Ok((median(&pfc), median(&base), ratio))
    }

    fn non_pfc(&mut self) -> Result<NonPfc> {
        // The non-PFC mix: what an interface carries besides PFC frames, in every layout
        // (untagged, 802.1Q, 802.1ad; IPv4, IPv6; ARP), 64 octets each untagged over IPv4
        // (IPv6: 84, its headers and the 22-octet payload; each tag adds 4).
        let v6 = Ip::V6 { hop_limit: 64 };
        let mixes: Vec<(&'static str, Vec<u8>)> = vec![
            ("udp/ipv4", udp53_frame(Ip::V4_GTSM, vec![])),
            ("arp", arp_frame()),
            (
                "vlan udp/ipv4",
                udp53_frame(Ip::V4_GTSM, vec![(0x8100, 100)]),
            ),
            (
                "qinq udp/ipv4",
                udp53_frame(Ip::V4_GTSM, vec![(0x88a8, 100), (0x8100, 7)]),
            ),
            ("udp/ipv6", udp53_frame(v6, vec![])),
            ("vlan udp/ipv6", udp53_frame(v6, vec![(0x8100, 100)])),
        ];
        ensure!(
            mixes.iter().all(|(_, f)| f.len() >= 64),
            "frames shorter than 64 octets"
        );
        ensure!(
            mixes[0].1[12..14] == [0x08, 0x00]
                && mixes[1].1[12..14] == [0x08, 0x06]
                && mixes[2].1[12..14] == [0x81, 0x00]
                && mixes[4].1[12..14] == [0x86, 0xdd],
            "unexpected EtherTypes"
        );
        let frames: Vec<(&'static str, &[u8])> =
            mixes.iter().map(|(n, f)| (*n, f.as_slice())).collect();

        // Warm-up, and a check that non-PFC frames touch no counter.
        let (counts, rejects) = (self.counts()?, self.rejects()?);
        for (_, f) in &frames {
            self.run(PFC_PROGRAM, f, 10_000)?;
            self.run(TC_BASELINE_PROGRAM, f, 10_000)?;
        }
        let mut worst: Option<NonPfc> = None;
        for (name, f) in frames {
            let (p, b, ratio) =
                self.interleave(&format!("non-PFC {name}"), f, NON_PFC_ROUNDS, |_| Ok(()))?;
            if worst.as_ref().is_none_or(|w| ratio > w.ratio) {
                worst = Some(NonPfc {
                    ratio,
                    pfc_ns: p,
                    baseline_ns: b,
                    frame: name,
                });
            }
        }
        ensure!(
            self.counts()? == counts && self.rejects()? == rejects,
            "non-PFC frames changed the PFC counters or rejects"
        );
        eprintln!("non-PFC frames: PFC counters and rejects unchanged (checked)");
        worst.context("no frames")
    }

    fn pfc(&mut self) -> Result<Pfc> {
        let mut frame = build_frame(
            PFC_MULTICAST,
            SRC_MAC,
            PFC_ENABLE,
            [0xffff, 7, 0, 0x1234, 0, 0, 0, 0],
        )
        .to_vec();
        frame.resize(64, 0);
        let expected = |before: &[u64; 8], after: &[u64; 8], n: u64| -> Result<()> {
            for p in 0..PFC_PRIORITIES as usize {
                let want = if PFC_ENABLE & (1 << p) != 0 { n } else { 0 };
                ensure!(
                    after[p] - before[p] == want,
                    "priority {p}: +{} after {n} PFC frames, expected +{want} (counts before {before:?}, after {after:?})",
                    after[p] - before[p]
                );
            }
            Ok(())
        };
        // Warm-up (creates the pause entries) and a first check.
        let (before, rejects) = (self.counts()?, self.rejects()?);
        self.run(PFC_PROGRAM, &frame, 10_000)?;
        expected(&before, &self.counts()?, 10_000)?;
        let mut last = self.counts()?;
        let mut checked = 0usize;
        let (p, b, _) = self.interleave("PFC 0x0009", &frame, PFC_ROUNDS, |s| {
            let now = s.counts()?;
            expected(&last, &now, u64::from(REPEAT))?;
            last = now;
            checked += 1;
            Ok(())
        })?;
        ensure!(checked == PFC_ROUNDS, "checked {checked} runs");
        ensure!(self.rejects()? == rejects, "PFC frames were rejected");
        let pause = self
            .reader
            .pause(self.ifindex, 3)?
            .context("no pause state for priority 3")?;
        ensure!(
            pause.end_ns > pause.start_ns && pause.unknown_speed_frames == 0,
            "the pause timer did not run in time units: {pause:?}"
        );
        eprintln!(
            "PFC frames: every run of {REPEAT} added exactly {REPEAT} to priorities 0 and 3 of ifindex {} and nothing elsewhere (checked {checked} runs); totals {:?}; pause timer running (priority 3 ends {} ns after its start)",
            self.ifindex,
            last,
            pause.end_ns - pause.start_ns
        );
        Ok(Pfc {
            pfc_ns: p,
            baseline_ns: b,
        })
    }
}

/// An ARP request, padded to 64 octets.
fn arp_frame() -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&[0x08, 0x06]); // ARP
    f.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]); // Ethernet/IPv4, request
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 0, 0, 2]);
    f.resize(64, 0);
    f
}

// ---------------------------------------------------------------------------------------
// 3. The IPFIX export.

struct DaemonExport {
    records_per_export: u64,
    cpu_ns_per_export: f64,
    cpu_pct: f64,
}

/// Exports timed on the daemon's path.
const DAEMON_EXPORTS: usize = 20;

/// The daemon's export path, whole: `PfcService` (what `lqd run` starts for `[pfc]` and
/// `[ipfix]`) on 64 veths in a namespace of its own, each with the tc counter attached
/// (received direction: pinned per-CPU counters, one PFC frame per priority injected from
/// the peer so every counter exists) and an ethtool source (transmitted direction: the
/// veth's eight per-queue counters through the ethtool ioctl, standing in for a NIC's
/// per-priority PFC statistics), every reading through the counter model, encoded and sent
/// over UDP to a socket on the namespace's loopback. Thread CPU time of `tick()` per export.
fn bench_export_daemon() -> Result<DaemonExport> {
    use lq_tests::netns::NetNs;
    let a = NetNs::new("lqb-pfxa")?;
    let b = NetNs::new("lqb-pfxb")?;
    let mut ifaces = Vec::new();
    for i in 0..EXPORT_INTERFACES {
        let (ai, bi) = (format!("x{i}"), format!("y{i}"));
        // Eight queues: the ethtool template below reads one counter per queue.
        a.ip(&[
            "link",
            "add",
            &ai,
            "numtxqueues",
            "8",
            "numrxqueues",
            "8",
            "type",
            "veth",
            "peer",
            "name",
            &bi,
            "numtxqueues",
            "8",
            "numrxqueues",
            "8",
            "netns",
            b.name(),
        ])?;
        a.ip(&["link", "set", &ai, "up"])?;
        b.ip(&["link", "set", &bi, "up"])?;
        ifaces.push((ai, bi));
    }
    a.ip(&["link", "set", "lo", "up"])?;
    let names: Vec<String> = ifaces.iter().map(|(ai, _)| format!("\"{ai}\"")).collect();
    let instance = lq_tests::unique_name("lqb-pfx");
    let pin_dir = PathBuf::from("/sys/fs/bpf").join(&instance);
    let _pins = PinDirGuard(pin_dir.clone());
    let mut text = format!(
        r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["x0"]

[pfc]
interfaces = [{}]
speed-mbps = {SPEED_MBPS}
pin-dir = "{}"

[ipfix]
collector = "127.0.0.1:4739"
interval-ms = 1000
"#,
        names.join(", "),
        pin_dir.display()
    );
    for (ai, _) in &ifaces {
        text.push_str(&format!(
            "\n[[pfc.ethtool]]\ninterface = \"{ai}\"\ndirection = \"transmitted\"\ntemplate = \"rx_queue_{{n}}_xdp_packets\"\n"
        ));
    }
    let cfg = lq_user::config::Config::parse(&text, std::path::Path::new("bench_pfc.toml"))
        .context("bench config")?;

    // The PFC frames come from the peers' side: an AF_PACKET socket made in namespace b
    // (a socket stays in the namespace it was made in, whichever thread uses it).
    let peers: Vec<String> = ifaces.iter().map(|(_, bi)| bi.clone()).collect();
    let (tx_fd, peer_ifindex) =
        b.run_in(move || -> Result<(std::os::fd::OwnedFd, Vec<i32>)> {
            use std::os::fd::FromRawFd;
            // SAFETY: plain socket call; protocol 0: send only.
            let fd =
                unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
            ensure!(
                fd >= 0,
                "AF_PACKET socket: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: fd is a fresh socket owned by nobody else.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let mut idx = Vec::new();
            for p in &peers {
                let c = std::ffi::CString::new(p.as_str())?;
                // SAFETY: a valid C string.
                let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
                ensure!(i != 0, "no interface {p}");
                idx.push(i as i32);
            }
            Ok((fd, idx))
        })??;
    // Every priority enabled, non-zero quanta: each frame counts once on all eight.
    let mut frame = build_frame(PFC_MULTICAST, SRC_MAC, 0x00ff, [1; 8]).to_vec();
    frame.resize(64, 0);

    let r = a.run_in(move || -> Result<DaemonExport> {
        let collector = UdpSocket::bind("127.0.0.1:4739").context("bind the collector")?;
        collector.set_read_timeout(Some(Duration::from_millis(100)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let drain = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let (mut n, mut octets) = (0u64, 0u64);
                loop {
                    match collector.recv(&mut buf) {
                        Ok(len) => {
                            n += 1;
                            octets += len as u64;
                        }
                        Err(_) if stop.load(Ordering::Relaxed) => break,
                        Err(_) => {}
                    }
                }
                (n, octets)
            })
        };
        let mut service = lq_user::roles::pfc::PfcService::start(&cfg, &instance)
            .context("start the PFC service")?;
        for ifindex in &peer_ifindex {
            send_on(&tx_fd, *ifindex, &frame)?;
        }
        // Until the counters show every frame (the tc program runs in the peer's softirq).
        let want = u64::from(EXPORT_INTERFACES) * u64::from(PFC_PRIORITIES);
        // A read that fails ends the wait at once (`Ok(Err)`: the second `?`); a count short
        // of `want` looks again.
        poll_until(
            "every PFC counter to appear",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || match service.rx_counts() {
                Err(e) => Ok(Err(e)),
                Ok(counts) => {
                    let n = counts.values().filter(|&&c| c > 0).count() as u64;
                    if n >= want { Ok(Ok(())) } else { Err(n) }
                }
            },
            |n| format!("only {n} of {want} PFC counters appeared"),
        )??;
        // Warm-up export (templates, trackers), then the timed ones. `tick` exports when
        // due; the time it is given only schedules the next export.
        let interval = EXPORT_INTERVAL.as_nanos() as u64;
        let mut now = interval;
        service.tick(now);
        let mut per_export = Vec::with_capacity(DAEMON_EXPORTS);
        for _ in 0..DAEMON_EXPORTS {
            now += interval;
            let c = thread_cpu_ns();
            service.tick(now);
            per_export.push((thread_cpu_ns() - c) as f64);
        }
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let (messages, octets) = drain
            .join()
            .map_err(|_| anyhow::anyhow!("collector panicked"))?;
        // What one export carried, from the collector's side (the templates aside).
        let per = (octets as f64 / (DAEMON_EXPORTS + 1) as f64) as u64;
        eprintln!(
            "IPFIX daemon path: {} exports (+1 warm-up): thread CPU per export ns {}; collector received {messages} messages, {octets} octets (~{per} per export)",
            DAEMON_EXPORTS,
            spread(&per_export)
        );
        ensure!(messages > DAEMON_EXPORTS as u64, "the collector got {messages} messages");
        let cpu_ns_per_export = median(&per_export);
        Ok(DaemonExport {
            records_per_export: want * 2,
            cpu_ns_per_export,
            cpu_pct: cpu_ns_per_export / interval as f64 * 100.0,
        })
    })??;
    drop((a, b));
    Ok(r)
}

/// Sends one frame out of `ifindex` on the AF_PACKET socket `fd`.
fn send_on(fd: &std::os::fd::OwnedFd, ifindex: i32, frame: &[u8]) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: sockaddr_ll is plain data.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex;
    addr.sll_halen = 6;
    // SAFETY: sends frame.len() octets from frame to a valid sockaddr_ll.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    ensure!(
        n == frame.len() as isize,
        "send a PFC frame on ifindex {ifindex}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// Removes a pin folder on drop.
struct PinDirGuard(PathBuf);

impl Drop for PinDirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Export {
    records: usize,
    messages: usize,
    octets: usize,
    cpu_ns_per_export: f64,
    cpu_pct: f64,
    encode_ns_per_record: f64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The records of one export: every (interface, priority), received then transmitted.
fn build_records(iteration: u64) -> Vec<PfcRecord> {
    let observed_ms = unix_ms();
    let mut out = Vec::with_capacity((EXPORT_INTERFACES * PFC_PRIORITIES * 2) as usize);
    for direction in [Direction::Received, Direction::Transmitted] {
        for interface in 1..=EXPORT_INTERFACES {
            for priority in 0..PFC_PRIORITIES as u8 {
                out.push(PfcRecord {
                    direction,
                    interface,
                    priority,
                    observed_ms,
                    total: iteration * 1000 + u64::from(interface) * 8 + u64::from(priority),
                    epoch: 1,
                });
            }
        }
    }
    out
}

fn bench_export() -> Result<Export> {
    let receiver = UdpSocket::bind("127.0.0.1:0").context("bind the receiver")?;
    let rcvbuf: libc::c_int = 16 << 20;
    // SAFETY: valid fd and option value.
    unsafe {
        libc::setsockopt(
            receiver.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const rcvbuf).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    receiver.set_read_timeout(Some(Duration::from_millis(100)))?;
    let addr = receiver.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let drain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            let (mut n, mut octets) = (0u64, 0u64);
            loop {
                match receiver.recv(&mut buf) {
                    Ok(len) => {
                        n += 1;
                        octets += len as u64;
                    }
                    Err(_) if stop.load(Ordering::Relaxed) => break,
                    Err(_) => {}
                }
            }
            (n, octets)
        })
    };

    let sender = UdpSocket::bind("127.0.0.1:0").context("bind the sender")?;
    sender.connect(addr)?;
    let mut encoder = Encoder::new(ExporterConfig::default())?;
    let t0 = lq_user::sys::clock::unix_seconds();
    let mut sent = 0u64;
    for m in encoder.template_messages(t0) {
        sender.send(&m)?;
        sent += 1;
    }

    // Warm-up export (not counted).
    for m in encoder.data_messages(&build_records(0), t0) {
        sender.send(&m)?;
        sent += 1;
    }

    let (mut messages, mut octets, mut records) = (0, 0, 0);
    let mut per_export = Vec::with_capacity(EXPORT_ITERATIONS);
    let cpu_start = thread_cpu_ns();
    for i in 0..EXPORT_ITERATIONS {
        let c = thread_cpu_ns();
        let recs = build_records(i as u64 + 1);
        let msgs = encoder.data_messages(&recs, lq_user::sys::clock::unix_seconds());
        for m in &msgs {
            sender.send(m)?;
        }
        per_export.push((thread_cpu_ns() - c) as f64);
        records = recs.len();
        messages = msgs.len();
        octets = msgs.iter().map(Vec::len).sum();
        sent += msgs.len() as u64;
    }
    let cpu_total = (thread_cpu_ns() - cpu_start) as f64;
    ensure!(
        records == (EXPORT_INTERFACES * PFC_PRIORITIES * 2) as usize,
        "built {records} records"
    );

    // Encode only: the same records each time, wall clock of data_messages.
    let recs = build_records(1);
    let mut encode = Vec::with_capacity(ENCODE_ITERATIONS);
    let mut sink = 0usize;
    for _ in 0..ENCODE_ITERATIONS {
        let t = Instant::now();
        let msgs = encoder.data_messages(&recs, t0);
        encode.push(t.elapsed().as_nanos() as f64 / recs.len() as f64);
        sink += msgs.len();
    }
    std::hint::black_box(sink);

    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (received, received_octets) = drain
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))?;

    let cpu_ns_per_export = cpu_total / EXPORT_ITERATIONS as f64;
    let cpu_pct = cpu_ns_per_export / EXPORT_INTERVAL.as_nanos() as f64 * 100.0;
    eprintln!(
        "IPFIX export: {records} records -> {messages} messages, {octets} octets per export; thread CPU per export {} ns (mean {cpu_ns_per_export:.0} ns over {EXPORT_ITERATIONS} exports) -> {cpu_pct:.4} % of one core at one export per {EXPORT_INTERVAL:?}",
        spread(&per_export)
    );
    eprintln!(
        "IPFIX export: receiver drained {received} of {sent} messages sent ({received_octets} octets)"
    );
    eprintln!(
        "IPFIX encode only (data_messages, {ENCODE_ITERATIONS} x {} records): ns per record {}",
        recs.len(),
        spread(&encode)
    );
    ensure!(received > 0, "the receiver got nothing");
    Ok(Export {
        records,
        messages,
        octets,
        cpu_ns_per_export,
        cpu_pct,
        encode_ns_per_record: median(&encode),
    })
}
