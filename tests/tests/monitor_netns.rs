//! `lqd monitor` end to end: a helper lqd measures a tbf-shaped veth link; while real traffic
//! overloads the link and then stops, `lqd monitor` (a separate process on the control
//! socket) prints the `lq-threshold-crossed` notifications of seed 003 section 5.6 as JSON
//! lines: the CL rising, then falling after the hold-down. Every line is a valid
//! notification for yanglint, and the monitor ends when the daemon goes away. A gNMI
//! subscriber (pygnmi, STREAM ON_CHANGE on `/ietf-lq-telemetry:lq-threshold-crossed`,
//! issue 40) gets the same notifications, each valid for yanglint too.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    io::{BufRead as _, BufReader},
    net::{Ipv4Addr, SocketAddr},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use lq_tests::{
    daemon::{Lqd, lqd_bin},
    gnmi::PyGnmi,
    netns::{NetNs, veth_pair},
    poll::poll_until,
    require_root,
};

const SPINE: &str = r#"
[lq-telemetry]
enabled = true
role = "helper"
router-id = "10.0.0.2"

[[link]]
interface = "s1"
remote-node = ["10.0.1.1"]

[gnmi]
listen = "127.0.0.1:9339"
plaintext = true

# The notification tells the CL changes of the local links: granted with /local.
[[gnmi.client]]
name = "*"
read = ["/lq-telemetry/local"]
"#;

/// The notification body of one monitor line, after checking its member name.
fn body(line: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let b = v["ietf-lq-telemetry:lq-threshold-crossed"].clone();
    assert!(
        b.is_object(),
        "not an lq-threshold-crossed notification: {line}"
    );
    b
}

/// Waits for a monitor line whose body satisfies `f`; returns it.
fn wait_for(
    what: &str,
    lines: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    spine: &Lqd,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                let b = body(&line);
                if f(&b) {
                    return b;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{what}: lqd monitor ended early; seen {seen:?}")
            }
        }
    }
    panic!(
        "{what}: no such notification in 15 s; seen {seen:?}\nspine local: {:?}\nlog:\n{}",
        spine.show("local").ok(),
        spine.log_text()
    );
}

#[test]
fn monitor_prints_valid_threshold_crossings_of_a_loaded_link() {
    require_root();
    let s = NetNs::new("lqt-ms").unwrap();
    let l = NetNs::new("lqt-ml").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    s.exec(
        "tc",
        &[
            "qdisc", "add", "dev", "s1", "root", "tbf", "rate", "100mbit", "burst", "32kb",
            "latency", "20ms",
        ],
    )
    .unwrap();
    let mut spine = Lqd::start(&s, SPINE).unwrap();

    let mut monitor = Command::new(lqd_bin().unwrap())
        .args(["monitor", "--instance", &spine.instance])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = monitor.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let gnmi_client = PyGnmi {
        ns: &s,
        target: "127.0.0.1:9339".into(),
        server_name: String::new(),
        ca: None,
        identity: None,
    };
    let mut gnmi = gnmi_client
        .spawn(&[
            "stream",
            "/ietf-lq-telemetry:lq-threshold-crossed",
            "on_change",
            "0",
            "60",
        ])
        .unwrap();
    // Let the subscriptions reach the daemon before the first crossing.
    std::thread::sleep(Duration::from_millis(1000));

    let stop = Arc::new(AtomicBool::new(false));
    let flood = s.udp_flood(
        Ipv4Addr::new(10, 9, 0, 1),
        SocketAddr::from(([10, 9, 0, 2], 9)),
        stop.clone(),
    );
    let mut seen = Vec::new();
    let rise = wait_for("CL rising", &lines, &mut seen, &spine, |b| {
        b["new-cl"].as_u64() >= Some(4) && b["new-cl"].as_u64() > b["old-cl"].as_u64()
    });
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap().unwrap();
    // The load is gone: the advertised CL falls again, after the A.6 hold-down.
    let fall = wait_for("CL falling", &lines, &mut seen, &spine, |b| {
        b["new-cl"].as_u64() <= Some(1) && b["new-cl"].as_u64() < b["old-cl"].as_u64()
    });
    for b in [&rise, &fall] {
        assert_eq!(b["node-id"], "10.0.0.2", "{b}");
        assert_eq!(b["remote-node-id"], "10.0.1.1", "{b}");
        assert!(b["link-id"].as_u64().is_some_and(|id| id > 0), "{b}");
    }
    // Every line printed is a valid ietf-lq-telemetry notification (independent judge).
    for line in &seen {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        lq_tests::yanglint_notification(&v).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    // The gNMI subscriber got the same notifications, in the same order.
    std::thread::sleep(Duration::from_millis(500));
    let _ = gnmi.kill();
    let out = gnmi.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let over_gnmi = PyGnmi::streamed_values(&stdout);
    // From the rise on (a notification raised while pygnmi was still connecting reaches
    // `lqd monitor` alone).
    let monitored: Vec<serde_json::Value> = seen.iter().map(|l| body(l)).collect();
    let from = |v: &[serde_json::Value]| v.iter().position(|b| *b == rise);
    let same = match (from(&monitored), from(&over_gnmi)) {
        (Some(m), Some(g)) => {
            let n = monitored.len() - m;
            over_gnmi.len() >= g + n && over_gnmi[g..g + n] == monitored[m..]
        }
        _ => false,
    };
    assert!(
        same,
        "lqd monitor: {monitored:?}\ngNMI: {over_gnmi:?}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for v in &over_gnmi {
        let n = serde_json::json!({ "ietf-lq-telemetry:lq-threshold-crossed": v });
        lq_tests::yanglint_notification(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
    }
    println!(
        "  ok: {} notifications over gNMI, the {} of lqd monitor first",
        over_gnmi.len(),
        monitored.len()
    );

    // The monitor follows the daemon: it ends when the daemon goes away.
    spine.terminate();
    let status = poll_until(
        "lqd monitor to end after the daemon stopped",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || monitor.try_wait().unwrap().ok_or(()),
        |()| String::new(),
    )
    .unwrap_or_else(|e| {
        let _ = monitor.kill();
        panic!("{e}");
    });
    reader.join().unwrap();
    assert!(status.success(), "lqd monitor exited with {status}");
}
