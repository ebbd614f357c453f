//! `lqd ipfix collect` over UDP on loopback, as a process (issue 14):
//!
//! * the 42-octet datagram that spun the old collector at 100 % CPU forever (an Options
//!   Template whose only field has length 0, then a Data Set for it) is answered by a
//!   refused-template line, promptly;
//! * two exporters (two sockets, two source ports) with the same Observation Domain,
//!   observation point, interface, priority and counter epoch: every interval count is
//!   computed from the exporter's own previous reading, never the other's.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    io::{BufRead, BufReader},
    net::{SocketAddr, UdpSocket},
    process::{Child, ChildStdout, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use lq_user::{
    ipfix::{Direction, ElementIds, ExporterConfig, PfcRecord, encode::Encoder},
    sys::clock::unix_seconds,
};
use serde_json::{Value, json};

/// A running `lqd ipfix collect` and its output lines, read by a thread.
struct Collector {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::Receiver<(Instant, Value)>,
    /// The socket that probed for readiness: its late answers are not test output.
    probe: String,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start() -> Self {
        // A free port: bound, released, then given to the collector (loopback only).
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lqd"))
            .args(["ipfix", "collect", "--listen", &addr.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { return };
                let v: Value = serde_json::from_str(&l).expect("every line is JSON");
                if tx.send((Instant::now(), v)).is_err() {
                    return;
                }
            }
        });
        // Probe with a truncated message until the collector answers (it is bound then).
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = Self {
            child,
            addr,
            lines,
            probe: probe.local_addr().unwrap().to_string(),
        };
        let start = Instant::now();
        loop {
            probe.send_to(&[0, 10], c.addr).unwrap();
            if let Ok((_, v)) = c.lines.recv_timeout(Duration::from_millis(100)) {
                assert_eq!(v["error"], "truncated message", "{v}");
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "collector silent"
            );
        }
        c
    }

    /// The next output line, within `timeout` (answers to late probes skipped).
    fn next(&self, timeout: Duration) -> Option<(Instant, Value)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, v) = self.lines.recv_timeout(left).ok()?;
            if v["exporter"] != self.probe.as_str() {
                return Some((at, v));
            }
        }
    }
}

#[test]
fn a_zero_length_field_template_is_refused_promptly_not_spun_on() {
    let c = Collector::start();
    // Header (42 octets, domain 1); Options Template 256 with one field,
    // observationPointId of length 0; a Data Set of 8 octets for template 256.
    let datagram = hex::decode(concat!(
        "000a002a",
        "00000000",
        "00000000",
        "00000001",
        "0003000e",
        "0100",
        "0001",
        "0001",
        "008a0000",
        "0100000c",
        "0102030405060708",
    ))
    .unwrap();
    assert_eq!(datagram.len(), 42);
    let exporter = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent = Instant::now();
    exporter.send_to(&datagram, c.addr).unwrap();
    // The old collector never answered (it looped on the record of 0 octets). The issue
    // asks for an answer within 10 ms; on a loaded 2-core machine the bound here is
    // generous: what it checks is that the collector answers at all, and goes on.
    let (at, refused) = c
        .next(Duration::from_secs(5))
        .expect("no answer: the collector hangs on a zero-length field");
    eprintln!(
        "42-octet datagram answered after {:?}",
        at.duration_since(sent)
    );
    assert_eq!(refused["template-refused"], 256, "{refused}");
    assert_eq!(
        refused["exporter"],
        exporter.local_addr().unwrap().to_string()
    );
    assert!(
        refused["reason"].as_str().unwrap().contains("length 0"),
        "{refused}"
    );
    let (_, unknown) = c.next(Duration::from_secs(5)).unwrap();
    assert_eq!(unknown["unknown-sets"], 1, "{unknown}");
    // Still serving: the next datagram is answered too.
    exporter.send_to(&[0, 10], c.addr).unwrap();
    let (_, v) = c.next(Duration::from_secs(5)).expect("collector stopped");
    assert_eq!(v["error"], "truncated message");
}

fn reading(total: u64, ms: u64) -> PfcRecord {
    PfcRecord {
        direction: Direction::Received,
        interface: 7,
        priority: 3,
        observed_ms: 1_700_000_000_000 + ms,
        total,
        epoch: 5,
    }
}

#[test]
fn two_exporters_with_the_same_scope_and_epoch_never_mix() {
    let c = Collector::start();
    // The collector's default element IDs: PEN 32473, 1, 2, epoch 3.
    let config = ExporterConfig {
        observation_domain_id: 9,
        observation_point_id: 4,
        elements: ElementIds::enterprise(32473, 1, 2, Some(3)),
        ..ExporterConfig::default()
    };
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (name_a, name_b) = (
        a.local_addr().unwrap().to_string(),
        b.local_addr().unwrap().to_string(),
    );
    let mut enc_a = Encoder::new(config.clone()).unwrap();
    let mut enc_b = Encoder::new(config).unwrap();
    let now = unix_seconds();
    for m in enc_a.template_messages(now) {
        a.send_to(&m, c.addr).unwrap();
    }
    for m in enc_b.template_messages(now) {
        b.send_to(&m, c.addr).unwrap();
    }
    // A reads 100, B 1000, A 150, B 1001, A 150: the sequence, and beyond. One
    // datagram at a time, each answered before the next (UDP keeps the order per socket,
    // not across two sockets).
    let sends = [
        (&a, true, 100, 0),
        (&b, false, 1000, 10),
        (&a, true, 150, 20),
        (&b, false, 1001, 30),
        (&a, true, 150, 40),
    ];
    let mut got = Vec::new();
    for (sock, is_a, total, ms) in sends {
        let enc = if is_a { &mut enc_a } else { &mut enc_b };
        for m in enc.data_messages(&[reading(total, ms)], now) {
            sock.send_to(&m, c.addr).unwrap();
        }
        loop {
            let (_, v) = c
                .next(Duration::from_secs(5))
                .expect("the collector answered nothing");
            if v.get("pfc-priority").is_some() {
                assert_eq!(v["pfc-control-frame-total-count"], total, "{v}");
                assert_eq!(v["problems"], json!([]), "{v}");
                got.push((v["exporter"].clone(), v["interval-count"].clone()));
                break;
            }
        }
    }
    // The old collector printed 900 for B's first reading (1000 - A's 100) and
    // 18446744073709550766 for A's 150 (150 - B's 1000, modulo 2^64).
    assert_eq!(
        got,
        [
            (json!(name_a), json!("unknown")),
            (json!(name_b), json!("unknown")),
            (json!(name_a), json!(50)),
            (json!(name_b), json!(1)),
            (json!(name_a), json!(0)),
        ]
    );
}
