//! PFC counting and IPFIX export run by the daemon: PFC frames injected on a veth peer,
//! `lqd show pfc` counts them per priority, and `lqd ipfix collect` (in the same
//! namespace, on loopback) receives the same totals with a counter epoch, so it can state
//! the count over an interval.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::Duration,
};

use lq_common::pfc::{PFC_MULTICAST, build_frame};
use lq_tests::{
    daemon::{Lqd, lqd_bin},
    netns::{NetNs, veth_pair},
    pfc::send_frames,
    poll::poll_until,
    require_root,
};

const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x42];

fn config(port: u16) -> String {
    format!(
        r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["a0"]

[pfc]
interfaces = ["a0"]
speed-mbps = 10000

[ipfix]
collector = "127.0.0.1:{port}"
interval-ms = 200
epoch-element-id = 3

# A NIC-counter source, exercised on a veth: only "priority 0" exists under this name
# (rx_queue_0_...), so priorities 1-7 are missing and must never be exported as zero.
[[pfc.ethtool]]
interface = "a0"
direction = "transmitted"
template = "rx_queue_{{n}}_xdp_packets"

[metrics]
listen = "127.0.0.1:9464"
"#
    )
}

/// The records `lqd ipfix collect` has written to `out` so far, one JSON object a line. The
/// collector may be writing a line right now: only complete lines count.
fn collected(out: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    text[..text.rfind('\n').map_or(0, |i| i + 1)]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `lqd ipfix collect` over UDP on `ns`'s loopback port `port`, its JSON lines written to
/// `out`.
fn udp_collector(ns: &NetNs, port: u16, out: &std::path::Path) -> std::process::Child {
    ns.command(lqd_bin().unwrap().to_str().unwrap())
        .args(["ipfix", "collect", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn daemon_counts_pfc_and_exports_ipfix_records() {
    require_root();
    let a = NetNs::new("lqt-pfca").unwrap();
    let b = NetNs::new("lqt-pfcb").unwrap();
    veth_pair(&a, "a0", "10.7.0.1/24", &b, "b0", "10.7.0.2/24").unwrap();
    let port = 4739;
    let out = std::env::temp_dir().join(lq_tests::unique_name("lq-collect"));
    let mut collector = udp_collector(&a, port, &out);
    let mut lqd = Lqd::start(&a, &config(port)).unwrap();
    // Priority 3 five times, then 0, 3 and 7 three times with zero quanta (counted too).
    let mut frames = vec![build_frame(PFC_MULTICAST, SRC, 1 << 3, [100; 8]).to_vec(); 5];
    frames.extend(vec![
        build_frame(
            PFC_MULTICAST,
            SRC,
            1 | 1 << 3 | 1 << 7,
            [0; 8]
        )
        .to_vec();
        3
    ]);
    send_frames(&b, "b0", frames).unwrap();
    let want: BTreeMap<u64, u64> = [
        (0, 3),
        (1, 0),
        (2, 0),
        (3, 8),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 3),
    ]
    .into();

    let pin = format!("/sys/fs/bpf/lq/{}-pfc", lqd.instance);
    let show = || -> BTreeMap<u64, u64> {
        let o = Command::new(lqd_bin().unwrap())
            .args(["show", "pfc", "--json", "--instance", &lqd.instance])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["interfaces"][0]["priorities"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["priority"].as_u64().unwrap(),
                    p["rx-frames"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect()
    };
    poll_until(
        "show pfc to count the frames sent per priority",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let got = show();
            if got == want { Ok(()) } else { Err(got) }
        },
        |got| format!("show pfc {got:?}, want {want:?}\n{}", lqd.log_text()),
    )
    .unwrap();

    // The collector's view: the newest record per priority carries the same totals, and
    // once two records share an epoch the interval count is known (0: nothing new).
    poll_until(
        "the collector to see the same totals, interval count 0 and a transmitted record",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let mut latest: BTreeMap<u64, serde_json::Value> = BTreeMap::new();
            let mut transmitted = 0;
            for v in collected(&out) {
                if v["direction"] == "transmitted" {
                    assert_eq!(v["pfc-priority"], 0, "a missing counter was exported: {v}");
                    transmitted += 1;
                    continue;
                }
                if let Some(p) = v["pfc-priority"].as_u64() {
                    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
                    assert_eq!(v["direction"], "received");
                    latest.insert(p, v);
                }
            }
            let totals: BTreeMap<u64, u64> = latest
                .iter()
                .map(|(p, v)| (*p, v["pfc-control-frame-total-count"].as_u64().unwrap()))
                .collect();
            if totals == want && latest[&3]["interval-count"] == 0 && transmitted > 0 {
                Ok(())
            } else {
                Err((totals, text))
            }
        },
        |(totals, text)| format!("collector saw {totals:?}\n{text}\n{}", lqd.log_text()),
    )
    .unwrap();
    // The Prometheus endpoint, parsed by the reference Python client's parser.
    let script = r#"
import json, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode()
out = {}
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        out.setdefault(s.name, []).append([s.labels, s.value])
print(json.dumps(out))
"#;
    // Polled: the endpoint serves the counters of the daemon's last PFC read, which may
    // come after the export the collector saw above.
    let m = poll_until(
        "8 priority-3 frames at the Prometheus endpoint",
        Duration::from_secs(5),
        Duration::from_millis(100),
        || {
            let parsed = a.exec("/usr/bin/python3", &["-c", script]).unwrap();
            let m: serde_json::Value = serde_json::from_str(&parsed).unwrap();
            let pfc3 = m["lq_pfc_rx_frames_total"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s[0]["priority"] == "3")
                .unwrap()[1]
                .as_f64();
            if pfc3 == Some(8.0) {
                Ok(m)
            } else {
                Err((pfc3, m))
            }
        },
        |(pfc3, m)| format!("{pfc3:?}: {m}"),
    )
    .unwrap();
    assert!(
        m["lq_ipfix_messages_total"][0][1].as_f64().unwrap() > 0.0,
        "{m}"
    );
    assert!(
        m["lq_receiver_events_total"].as_array().unwrap().len() >= 16,
        "{m}"
    );
    assert_eq!(m["lq_up"][0][1].as_f64(), Some(1.0));

    // kill -9 and a restart under a steady stream of PFC frames (issue 42): the tc
    // program's link is pinned, so it counts on while no lqd runs, and the restarted lqd
    // adopts it: the collector's final total is every frame sent, in the same epoch, and a
    // record of the new exporter (another Transport Session) carries it.
    let received = || -> Vec<serde_json::Value> {
        collected(&out)
            .into_iter()
            .filter(|v| v["direction"] == "received" && v["pfc-priority"] == 3)
            .collect()
    };
    let before = received();
    let epoch = before.last().unwrap()["counter-epoch"].clone();
    let first_exporter = before.last().unwrap()["exporter"].clone();
    let stream = 300u64;
    std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            for _ in 0..stream {
                send_frames(
                    &b,
                    "b0",
                    vec![build_frame(PFC_MULTICAST, SRC, 1 << 3, [100; 8]).to_vec()],
                )
                .unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        lqd.kill9();
        std::thread::sleep(Duration::from_millis(500));
        lqd.restart().unwrap();
        sender.join().unwrap();
    });
    let want_total = 8 + stream;
    let last = poll_until(
        "the restarted daemon's collector total to reach every frame sent",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let r = received();
            match r.last() {
                Some(v)
                    if v["exporter"] != first_exporter
                        && v["pfc-control-frame-total-count"] == want_total =>
                {
                    Ok(v.clone())
                }
                _ => Err(std::fs::read_to_string(&out).unwrap_or_default()),
            }
        },
        |text| format!("want {want_total}\n{text}\n{}", lqd.log_text()),
    )
    .unwrap();
    assert_eq!(last["counter-epoch"], epoch, "the same epoch: {last}");
    // `show pfc` reads the same epoch from the pins.
    let o = Command::new(lqd_bin().unwrap())
        .args(["show", "pfc", "--json", "--instance", &lqd.instance])
        .output()
        .unwrap();
    let pfc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pfc["interfaces"][0]["counter-epoch"], epoch, "{pfc}");
    // Every record of the new exporter is in that epoch, and its totals never go back.
    let mut previous = 0;
    for v in received()
        .iter()
        .filter(|v| v["exporter"] != first_exporter)
    {
        assert_eq!(v["counter-epoch"], epoch, "{v}");
        let total = v["pfc-control-frame-total-count"].as_u64().unwrap();
        assert!(total >= previous && total >= 8, "{v}");
        previous = total;
    }
    assert!(
        lqd.log_text().contains("PFC counter adopted"),
        "{}",
        lqd.log_text()
    );
    // `lqd cleanup` refuses while the instance runs, and once it is stopped detaches the
    // counter: the next start begins at zero in a new epoch.
    let instance = lqd.instance.clone();
    let cleanup = |extra: &[&str]| {
        Command::new(lqd_bin().unwrap())
            .args(["cleanup", "--instance", &instance, "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = cleanup(&[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is running"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    lqd.terminate();
    let done = cleanup(&[]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        removed.iter().any(|p| p.ends_with("-pfc/tcx-ingress-a0")),
        "the link pin: {v}"
    );
    assert!(!std::path::Path::new(&pin).exists(), "{v}");
    let n = received().len();
    lqd.restart().unwrap();
    let fresh = poll_until(
        "a record after cleanup and a start",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            received()
                .get(n..)
                .and_then(|r| r.last().cloned())
                .ok_or_else(|| std::fs::read_to_string(&out).unwrap_or_default())
        },
        |text| format!("{text}\n{}", lqd.log_text()),
    )
    .unwrap();
    assert_eq!(fresh["pfc-control-frame-total-count"], 0, "{fresh}");
    assert_ne!(fresh["counter-epoch"], epoch, "{fresh}");
    let _ = collector.kill();
    let _ = collector.wait();
    let _ = std::fs::remove_file(&out);
    drop(lqd);
    let _ = std::fs::remove_dir_all(pin);
}

/// The daemon exporting over TCP (issue 6): the collector sees the same totals; when the
/// collector goes away and comes back, lqd reconnects, resends the templates and goes on
/// exporting (counting never stopped).
#[test]
fn daemon_exports_over_tcp_and_reconnects_after_a_collector_restart() {
    require_root();
    let a = NetNs::new("lqt-tcpa").unwrap();
    let b = NetNs::new("lqt-tcpb").unwrap();
    veth_pair(&a, "a0", "10.7.0.1/24", &b, "b0", "10.7.0.2/24").unwrap();
    let out = std::env::temp_dir().join(lq_tests::unique_name("lq-collect-tcp"));
    let start_collector = |out: &std::path::Path| {
        a.command(lqd_bin().unwrap().to_str().unwrap())
            .args(["ipfix", "collect", "--tcp", "--listen", "127.0.0.1:4739"])
            .stdout(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(out)
                    .unwrap(),
            )
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut collector = start_collector(&out);
    std::thread::sleep(Duration::from_millis(300));
    let cfg = config(4739)
        .replace(
            "epoch-element-id = 3",
            "epoch-element-id = 3\ntransport = \"tcp\"",
        )
        .replace("[metrics]\nlisten = \"127.0.0.1:9464\"\n", "");
    let lqd = Lqd::start(&a, &cfg).unwrap();
    send_frames(
        &b,
        "b0",
        vec![build_frame(PFC_MULTICAST, SRC, 1 << 5, [7; 8]).to_vec(); 4],
    )
    .unwrap();
    let total_for = |text: &str, prio: u64| -> Option<u64> {
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["pfc-priority"].as_u64() == Some(prio))
            .filter_map(|v| v["pfc-control-frame-total-count"].as_u64())
            .next()
    };
    let wait_total = |want: u64, what: &str| {
        poll_until(
            &format!("a priority-5 total of {want} at the collector ({what})"),
            Duration::from_secs(15),
            Duration::from_millis(100),
            || {
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                if total_for(&text, 5) == Some(want) {
                    Ok(text)
                } else {
                    Err(text)
                }
            },
            |text| format!("{text}\n{}", lqd.log_text()),
        )
        .unwrap()
    };
    wait_total(4, "first session");
    // The collector goes away; frames keep being counted meanwhile.
    let _ = collector.kill();
    let _ = collector.wait();
    let before = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .count();
    send_frames(
        &b,
        "b0",
        vec![build_frame(PFC_MULTICAST, SRC, 1 << 5, [7; 8]).to_vec(); 3],
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let mut collector = start_collector(&out);
    let text = wait_total(7, "after the collector restart");
    let new: Vec<&str> = text.lines().skip(before).collect();
    assert!(
        new.iter().any(|l| l.contains("\"templates\"")),
        "templates resent on the new session: {new:?}"
    );
    let _ = collector.kill();
    let _ = collector.wait();
    let _ = std::fs::remove_file(&out);
}

/// Issue 14 item 4: a NIC counter narrower than 64 bits is exported only while its wraps
/// are provable. On a veth (10 000 Mb/s) read every 200 ms, up to 2.98 million PFC frames
/// could pass between two reads: a 16-bit counter could wrap 45 times unseen, so after the
/// first reading nothing of it is exported (and the daemon says why); a 32-bit counter
/// cannot wrap in 200 ms, so it is exported every interval in one epoch.
#[test]
fn narrow_counters_are_exported_only_while_their_wraps_are_provable() {
    require_root();
    let run = |width: u32| -> (Vec<serde_json::Value>, usize, String) {
        let a = NetNs::new("lqt-nara").unwrap();
        let b = NetNs::new("lqt-narb").unwrap();
        veth_pair(&a, "a0", "10.7.0.1/24", &b, "b0", "10.7.0.2/24").unwrap();
        let out = std::env::temp_dir().join(lq_tests::unique_name("lq-collect-narrow"));
        let mut collector = udp_collector(&a, 4739, &out);
        std::thread::sleep(Duration::from_millis(300));
        let cfg = config(4739)
            .replace(
                "template = \"rx_queue_{n}_xdp_packets\"",
                &format!("template = \"rx_queue_{{n}}_xdp_packets\"\nwidth-bits = {width}"),
            )
            .replace("[metrics]\nlisten = \"127.0.0.1:9464\"\n", "");
        let lqd = Lqd::start(&a, &cfg).unwrap();
        // Wait for at least six received-frame exports (the exporter runs).
        let lines = poll_until(
            "six received-frame exports of priority 0",
            Duration::from_secs(15),
            Duration::from_millis(100),
            || {
                let lines = collected(&out);
                let received = lines
                    .iter()
                    .filter(|v| v["direction"] == "received" && v["pfc-priority"] == 0)
                    .count();
                if received >= 6 {
                    Ok(lines)
                } else {
                    Err(std::fs::read_to_string(&out).unwrap_or_default())
                }
            },
            |text| format!("{text}\n{}", lqd.log_text()),
        )
        .unwrap();
        let _ = collector.kill();
        let _ = collector.wait();
        let _ = std::fs::remove_file(&out);
        let log = lqd.log_text();
        let transmitted: Vec<serde_json::Value> = lines
            .into_iter()
            .filter(|v| v["direction"] == "transmitted")
            .collect();
        let n = transmitted.len();
        (transmitted, n, log)
    };
    let (tx, n, log) = run(16);
    assert!(
        n <= 1,
        "a 16-bit counter read every 200 ms at 10 Gb/s was exported {n} times: {tx:?}"
    );
    assert!(log.contains("wraps unprovable"), "{log}");
    let (tx, n, log) = run(32);
    assert!(n >= 3, "32-bit counter exported {n} times\n{log}");
    assert!(
        tx.iter()
            .all(|v| v["counter-epoch"] == tx[0]["counter-epoch"]),
        "{tx:?}"
    );
    // The counter (XDP packets received on a0) moves with whatever the peer sends, IPv6
    // neighbour discovery included, so the test does not predict its value: it checks that
    // every interval after the first is exactly the difference of two successive totals
    // in the one epoch, which is what provable wraps buy.
    assert_eq!(tx[0]["interval-count"], "unknown", "{tx:?}");
    for pair in tx.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let delta = after["pfc-control-frame-total-count"].as_u64().unwrap()
            - before["pfc-control-frame-total-count"].as_u64().unwrap();
        assert_eq!(after["interval-count"].as_u64(), Some(delta), "{tx:?}");
    }
    assert!(!log.contains("wraps unprovable"), "{log}");
}

/// `[[pfc.veth-peer]]`: the PFC frames a0 sent are confirmed by the counter on its peer b0,
/// which a second lqd in namespace b runs, and a's daemon exports them as transmitted on
/// a0 (egressPhysicalInterface, template 257; seed 000 section 5: only frames confirmed
/// emitted count).
#[test]
fn a_veths_transmitted_frames_are_its_peers_received_ones() {
    require_root();
    let a = NetNs::new("lqt-pfta").unwrap();
    let b = NetNs::new("lqt-pftb").unwrap();
    veth_pair(&a, "a0", "10.7.1.1/24", &b, "b0", "10.7.1.2/24").unwrap();
    let port = 4740;
    let out = std::env::temp_dir().join(lq_tests::unique_name("lq-collect-tx"));
    let mut collector = udp_collector(&a, port, &out);
    let peer = Lqd::start(
        &b,
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\
         [receiver]\ninterfaces = [\"b0\"]\n\
         [pfc]\ninterfaces = [\"b0\"]\nspeed-mbps = 10000\n",
    )
    .unwrap();
    let peer_pins = format!("/sys/fs/bpf/lq/{}-pfc", peer.instance);
    let lqd = Lqd::start(
        &a,
        &format!(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\
             [receiver]\ninterfaces = [\"a0\"]\n\
             [[pfc.veth-peer]]\ninterface = \"a0\"\npeer-pin-dir = \"{peer_pins}\"\n\
             [ipfix]\ncollector = \"127.0.0.1:{port}\"\ninterval-ms = 200\nepoch-element-id = 3\n"
        ),
    )
    .unwrap();
    // Priority 2 four times, then 2 and 5 twice with zero quanta, all sent by a0.
    let mut frames = vec![build_frame(PFC_MULTICAST, SRC, 1 << 2, [100; 8]).to_vec(); 4];
    frames.extend(vec![
        build_frame(PFC_MULTICAST, SRC, 1 << 2 | 1 << 5, [0; 8])
            .to_vec();
        2
    ]);
    send_frames(&a, "a0", frames).unwrap();
    let want: BTreeMap<u64, u64> = [
        (0, 0),
        (1, 0),
        (2, 6),
        (3, 0),
        (4, 0),
        (5, 2),
        (6, 0),
        (7, 0),
    ]
    .into();
    let links: serde_json::Value =
        serde_json::from_str(&a.exec("ip", &["-j", "link", "show", "a0"]).unwrap()).unwrap();
    let a0 = links[0]["ifindex"].as_u64().unwrap();

    poll_until(
        "the collector to see a0's transmitted totals per priority",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let mut latest: BTreeMap<u64, u64> = BTreeMap::new();
            let mut received = 0;
            for v in collected(&out) {
                if v["direction"] == "received" {
                    received += 1;
                }
                if v["direction"] != "transmitted" {
                    continue;
                }
                assert_eq!(
                    v["interface"], a0,
                    "a transmitted record of another interface: {v}"
                );
                assert_eq!(v["problems"], serde_json::json!([]), "{v}");
                if let (Some(p), Some(t)) = (
                    v["pfc-priority"].as_u64(),
                    v["pfc-control-frame-total-count"].as_u64(),
                ) {
                    latest.insert(p, t);
                }
            }
            // Daemon a counts nothing itself: no received record.
            assert_eq!(
                received,
                0,
                "{}",
                std::fs::read_to_string(&out).unwrap_or_default()
            );
            if latest == want { Ok(()) } else { Err(latest) }
        },
        |latest| {
            format!(
                "collector saw {latest:?}, want {want:?}\n{}\n{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                lqd.log_text()
            )
        },
    )
    .unwrap();
    let _ = collector.kill();
    let _ = collector.wait();
    let _ = std::fs::remove_file(&out);
    let own_pins = format!("/sys/fs/bpf/lq/{}-pfc", lqd.instance);
    drop(lqd);
    drop(peer);
    let _ = std::fs::remove_dir_all(own_pins);
    let _ = std::fs::remove_dir_all(peer_pins);
}
