//! The helper role end to end: a spine lqd measures a tbf-shaped veth link loaded by real
//! traffic with the Appendix A pipeline and advertises it; the leaf's lqd (XDP receiver)
//! sees the LQS fall and recover, and a capture decoded by `lqd decode --pcap` shows the
//! triggered datagram with TTL 255 (seed 003 sections 7.2, 7.3, Appendix A).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    net::UdpSocket,
    process::Command,
    time::{Duration, Instant},
};

use lq_tests::{
    daemon::{Lqd, lqd_bin},
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
"#;

const LEAF: &str = r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["l1"]
# XDP runs before packet taps: pass consumed datagrams on so the capture sees them.
pass-through = true
"#;

/// Runs a Python script (scapy, hmac) in `ns` with `args`; its stdout, or a panic with its
/// stderr.
fn python(ns: &NetNs, script: &str, args: &[&str]) -> String {
    let out = ns
        .command("/usr/bin/python3")
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes a key chain file that only its owner may read (lqd refuses any other).
fn write_key_chain(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn lqs_of(lqd: &Lqd) -> Option<(u64, u64)> {
    let p = lqd.show("paths").ok()?;
    let e = p.as_array()?.first()?;
    Some((e["lqs"].as_u64()?, e["cl"].as_u64()?))
}

/// Waits until the leaf's (LQS, CL) satisfies `f`; returns how long that took, to 5 ms.
fn wait_until(what: &str, lqd: &Lqd, spine: &Lqd, f: impl Fn((u64, u64)) -> bool) -> Duration {
    let start = Instant::now();
    poll_until(
        what,
        Duration::from_secs(15),
        Duration::from_millis(5),
        || match lqs_of(lqd) {
            Some(v) if f(v) => Ok(()),
            seen => Err(seen),
        },
        |seen| {
            format!(
                "leaf sees {seen:?}\nspine local: {:?}\nspine log:\n{}",
                spine.show("local").ok(),
                spine.log_text()
            )
        },
    )
    .unwrap();
    start.elapsed()
}

/// Waits (at most 5 s) until the spine's `show local` satisfies `ok`.
fn local_when(spine: &Lqd, what: &str, ok: impl Fn(&serde_json::Value) -> bool) {
    poll_until(
        what,
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let local = spine.show("local").unwrap();
            if ok(&local) { Ok(()) } else { Err(local) }
        },
        |local| format!("spine local {local}"),
    )
    .unwrap();
}

#[test]
fn a_loaded_link_is_advertised_triggered_and_recovers_slowly() {
    require_root();
    let s = NetNs::new("lqt-hs").unwrap();
    let l = NetNs::new("lqt-hl").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    s.ip(&["link", "set", "s1", "txqueuelen", "1000"]).unwrap();
    s.exec(
        "tc",
        &[
            "qdisc", "add", "dev", "s1", "root", "tbf", "rate", "100mbit", "burst", "32kb",
            "latency", "20ms",
        ],
    )
    .unwrap();
    let pcap = std::env::temp_dir().join(format!("{}.pcap", lq_tests::unique_name("lq-helper")));
    let mut dump = l.capture("l1", "udp port 52525", &pcap).unwrap();
    let leaf = Lqd::start(&l, LEAF).unwrap();
    let spine = Lqd::start(&s, SPINE).unwrap();

    // Idle link: LQS near 255, CL 0.
    wait_until("idle link", &leaf, &spine, |(q, c)| q >= 240 && c == 0);
    // The sampler thread keeps T_sample under CPU load like the loop (SCHED_RR), and
    // every thread, the sampler's too, holds CAP_NET_ADMIN (12) and CAP_BPF (39) only.
    let threads = spine.threads();
    let sampler = threads.iter().find(|t| t.name == "lqd-sampler");
    assert_eq!(
        sampler.map(|t| t.policy),
        Some(libc::SCHED_RR as u32),
        "{threads:?}"
    );
    assert!(
        threads.len() >= 3 && threads.iter().all(|t| t.cap_eff == 1 << 12 | 1 << 39),
        "{threads:?}\n{}",
        spine.log_text()
    );
    let local = spine.show("local").unwrap();
    assert_eq!(
        local["links"][0]["source"]["speed-source"], "qdisc",
        "{local}"
    );
    assert_eq!(
        local["links"][0]["source"]["link-speed-bps"], 100_000_000u64,
        "{local}"
    );

    // Overload the 100 Mbit/s tbf from inside the spine namespace: U -> 1, the queue
    // fills and tbf drops. Appendix A: LQS falls to the floor (1 - U = 0, and x 0.1 with
    // drops), CL 7 (drops active).
    let load = lq_tests::netns::UdpOverload::start(
        &s,
        "10.9.0.1:0".parse().unwrap(),
        "10.9.0.2:9".parse().unwrap(),
    );
    let t = wait_until("congested link", &leaf, &spine, |(q, c)| q <= 25 && c == 7);
    eprintln!("congestion visible at the leaf after {t:?}");
    let local = spine.show("local").unwrap();
    assert!(local["triggered"].as_u64().unwrap() >= 1, "{local}");
    // Each triggered advertisement's timing (seed 7.2, "within one sampling interval";
    // `cargo xtask bench helper` measures it): its sample, the loop taking it, the send,
    // in that order, one record per triggered advertisement (at most the last 16).
    let triggers = local["recent-triggers"].as_array().unwrap();
    assert!(!triggers.is_empty() && triggers.len() <= 16, "{local}");
    assert!(triggers.len() as u64 <= local["triggered"].as_u64().unwrap());
    for t in triggers {
        let at = |f: &str| t[f].as_u64().unwrap();
        assert!(at("sample-ns") <= at("decided-ns"), "{t}");
        assert!(at("decided-ns") <= at("sent-ns"), "{t}");
    }
    // The helper's YANG state (`local`: what it advertises) is valid ietf-lq-telemetry data.
    let state = spine.show("state").unwrap();
    lq_tests::yanglint_data(&state).unwrap();
    let adv = &state["ietf-lq-telemetry:lq-telemetry"]["local"]["link-quality"][0];
    assert_eq!(adv["remote-node-id"], "10.0.1.1", "{state}");
    assert!(adv["lqs"].as_u64().unwrap() <= 25, "{state}");

    // Recovery is slow (alpha_fall 0.1: smoothed metrics fall 90 % in ~22 samples) and the
    // CL waits for the hold-down (100 ms) before it falls.
    load.stop().unwrap();
    let stopped = Instant::now();
    let lqs_back = wait_until("LQS recovered", &leaf, &spine, |(q, _)| q >= 200);
    let cl_back = wait_until("CL recovered", &leaf, &spine, |(_, c)| c <= 1) + lqs_back;
    eprintln!(
        "after the load stopped: LQS >= 200 in {lqs_back:?}, CL <= 1 in {:?}",
        stopped.elapsed()
    );
    // The smoothed utilisation falls by alpha_fall = 0.1 per 2 ms sample: LQS >= 200 needs
    // U <= 0.22, about 14 samples, so not before ~25 ms; the CL falls only after the
    // 100 ms hold-down (A.6).
    assert!(
        lqs_back >= Duration::from_millis(20),
        "LQS recovered too fast: {lqs_back:?}"
    );
    assert!(
        cl_back >= Duration::from_millis(100),
        "CL fell before the hold-down: {cl_back:?}"
    );

    // Every captured advertisement is valid (TTL 255, checks 1-9), and one is triggered.
    // dumpcap hands frames to its file in blocks, on a block timeout (seen: the first two
    // of 21 in the file when the capture was stopped right away; all of them 2 s later),
    // so the file is read until it holds what is looked for, while the spine still
    // advertises, and only then is the capture stopped.
    let decode = || -> Result<(Vec<serde_json::Value>, String), String> {
        let out = Command::new(lqd_bin().unwrap())
            .args(["decode", "--json-lines", "--pcap"])
            .arg(&pcap)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("decode: {stderr}\n{text}"));
        }
        let advs = text
            .lines()
            .map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l}")))
            .collect::<Result<_, _>>()?;
        Ok((advs, stderr))
    };
    let modes = |advs: &[serde_json::Value]| -> Vec<String> {
        advs.iter()
            .map(|a| {
                a["ietf-lq-telemetry:lq-advertisement"]["signaling-mode"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    };
    // Advertisements share the congested tbf queue with the load (a classless qdisc has no
    // priority for them), so some are delayed or dropped during the overload.
    poll_until(
        "five captured advertisements, one triggered and one periodic",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || match decode() {
            Ok((advs, _)) => {
                let m = modes(&advs);
                if advs.len() >= 5
                    && m.iter().any(|m| m == "triggered")
                    && m.iter().any(|m| m == "periodic")
                {
                    Ok(())
                } else {
                    Err(format!("{} captured, modes {m:?}", advs.len()))
                }
            }
            Err(e) => Err(e),
        },
        |e| {
            format!(
                "{e}\nleaf's receiver counters: {:?}",
                leaf.show("counters").ok()
            )
        },
    )
    .unwrap();
    let _ = Command::new("kill")
        .args(["-INT", &dump.id().to_string()])
        .status();
    let _ = dump.wait();
    drop(spine);
    // The whole file, once dumpcap has closed it: every frame in it decodes.
    let (advs, stderr) = decode().unwrap();
    assert!(advs.len() >= 5, "{stderr}");
    let _ = std::fs::remove_file(&pcap);
}

/// PFC pause time drives F (Appendix A.2, with IEEE pause-timer accounting) and ECN-capable
/// packets are counted as eligible at the link's egress: a leaf pauses the spine's priority
/// 3 with real PFC frames, the spine's advertised CL becomes 6 (F > 0.5) and its LQS 0.
#[test]
fn pfc_pause_raises_the_congestion_level_and_ecn_capable_packets_are_counted() {
    require_root();
    let s = NetNs::new("lqt-ps").unwrap();
    let l = NetNs::new("lqt-pl").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let spine_cfg =
        format!("{SPINE}pfc-priorities = [3]\n[pfc]\ninterfaces = [\"s1\"]\nspeed-mbps = 100\n")
            .replace("role = \"helper\"", "role = \"helper\"\npfc-fabric = true");
    let leaf = Lqd::start(&l, LEAF).unwrap();
    let mut spine = Lqd::start(&s, &spine_cfg).unwrap();
    wait_until("idle link", &leaf, &spine, |(q, c)| q >= 240 && c == 0);

    // ECN-capable (ECT(0)) packets leaving s1 are counted by the tc egress program.
    s.run_in(|| {
        let sock = UdpSocket::bind("10.9.0.1:0").unwrap();
        sock2_tos(&sock, 0x02);
        for _ in 0..100 {
            sock.send_to(&[0u8; 100], "10.9.0.2:9").unwrap();
        }
    })
    .unwrap();
    local_when(&spine, "100 ECN-eligible packets counted on s1", |local| {
        local["links"][0]["source"]["ecn-eligible-packets"]
            .as_u64()
            .unwrap_or(0)
            >= 100
    });

    // Pause priority 3 of s1 from the leaf: 65535 quanta at 100 Mbit/s = 335 ms per frame,
    // refreshed every 50 ms, so the link is paused all the time: F -> 1.
    let pause = lq_common::pfc::build_frame(
        lq_common::pfc::PFC_MULTICAST,
        [2, 0, 0, 0, 0, 9],
        1 << 3,
        [0xffff; 8],
    );
    let start = Instant::now();
    // Each look refreshes the pause first, so the link stays paused while the test waits.
    poll_until(
        "the leaf to see LQS 0, CL 6",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            lq_tests::pfc::send_frames(&l, "l1", vec![pause.to_vec()]).unwrap();
            match lqs_of(&leaf) {
                Some((0, 6)) => Ok(()),
                seen => Err(seen),
            }
        },
        |seen| {
            format!(
                "leaf sees {seen:?}; spine local {:?}",
                spine.show("local").ok()
            )
        },
    )
    .unwrap();
    eprintln!(
        "PFC pause visible at the leaf as CL 6 after {:?}",
        start.elapsed()
    );
    let local = spine.show("local").unwrap();
    assert!(
        local["links"][0]["smoothed"]["f"].as_f64().unwrap() > 0.5,
        "{local}"
    );
    // The last pause runs out after 335 ms; then F decays and the CL falls after the hold-down.
    wait_until("pause over", &leaf, &spine, |(q, c)| q >= 200 && c <= 1);

    // The ECN-eligible counter outlives lqd (issue 42): its tcx link is pinned, so the
    // packets that leave s1 while the spine's lqd is killed are counted, and the restarted
    // lqd adopts the counter with them.
    let eligible = |local: &serde_json::Value| {
        local["links"][0]["source"]["ecn-eligible-packets"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = eligible(&spine.show("local").unwrap());
    spine.kill9();
    s.run_in(|| {
        let sock = UdpSocket::bind("10.9.0.1:0").unwrap();
        sock2_tos(&sock, 0x02);
        for _ in 0..50 {
            sock.send_to(&[0u8; 100], "10.9.0.2:9").unwrap();
        }
    })
    .unwrap();
    spine.restart().unwrap();
    assert!(
        spine.log_text().contains("PFC counter adopted"),
        "{}",
        spine.log_text()
    );
    local_when(
        &spine,
        "the restarted spine to count the 50 packets sent while it was down",
        |local| eligible(local) >= before + 50,
    );
}

fn sock2_tos(sock: &UdpSocket, tos: i32) {
    // SAFETY: valid fd and option value.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(sock),
            libc::IPPROTO_IP,
            libc::IP_TOS,
            (&raw const tos).cast(),
            4,
        )
    };
    assert_eq!(rc, 0);
}

/// A helper restart (issue 9): the restarted spine starts from a new random sequence
/// number; the leaf sees it as a resynchronisation of a failed neighbor, not as replays,
/// and keeps taking its advertisements.
#[test]
fn a_helper_restart_is_a_resynchronisation_not_a_replay() {
    require_root();
    let s = NetNs::new("lqt-rs").unwrap();
    let l = NetNs::new("lqt-rl").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let leaf = Lqd::start(&l, LEAF).unwrap();
    let mut spine = Lqd::start(&s, SPINE).unwrap();
    wait_until("first contact", &leaf, &spine, |(q, _)| q >= 240);
    let before = leaf.show("counters").unwrap();
    spine.restart().unwrap();
    let since =
        |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    let c = poll_until(
        "a resynchronisation and more than 10 accepted datagrams at the leaf",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let c = leaf.show("counters").unwrap();
            let accepted = since(&c, "accepted");
            if c["resync"].as_u64().unwrap() > before["resync"].as_u64().unwrap() && accepted > 10 {
                Ok(c)
            } else {
                Err(c)
            }
        },
        |c| format!("leaf counters {c}\n{}", spine.log_text()),
    )
    .unwrap();
    eprintln!("after the restart: {c}");
    // At most the datagrams sent within one detection time may be stale.
    let stale = since(&c, "stale_seq");
    assert!(stale <= 4, "{stale} stale datagrams");
}

/// The wire spec: at most 91 entries per datagram, "and fewer when the link's MTU requires
/// it". The same datagrams go out of every link, so the helper splits them for its
/// smallest real link MTU (IFLA_MTU), not a configured 1500, and follows an MTU change at
/// run time. 41 entries (40 leaves on a shared 576-octet link, one on a 9000-octet link):
/// (576 - 20 - 8 - 16) / 16 = 33 entries per datagram, so 2 datagrams of 572 and 172
/// octets; after the link goes to 1280, one datagram of 700. tshark judges the sizes and
/// that nothing was fragmented; the leaf accepts every datagram captured.
#[test]
fn advertisements_are_split_for_the_smallest_real_link_mtu() {
    require_root();
    let s = NetNs::new("lqt-ms").unwrap();
    let l = NetNs::new("lqt-ml").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    veth_pair(&s, "s2", "10.9.1.1/24", &l, "l2", "10.9.1.2/24").unwrap();
    for (ns, dev, mtu) in [
        (&s, "s1", "576"),
        (&l, "l1", "576"),
        (&s, "s2", "9000"),
        (&l, "l2", "9000"),
    ] {
        ns.ip(&["link", "set", dev, "mtu", mtu]).unwrap();
    }
    let remotes: Vec<String> = (1..=40).map(|i| format!("\"10.0.1.{i}\"")).collect();
    let spine_cfg = format!(
        "[lq-telemetry]\nenabled = true\nrole = \"helper\"\nrouter-id = \"10.0.0.2\"\n\n\
         [[link]]\ninterface = \"s1\"\nremote-node = [{}]\n\n\
         [[link]]\ninterface = \"s2\"\nremote-node = [\"10.0.2.1\"]\n",
        remotes.join(", ")
    );
    let pcap = std::env::temp_dir().join(format!("{}.pcap", lq_tests::unique_name("lq-mtu")));
    // Every UDP packet, fragments included (a port filter would miss the later fragments).
    let mut dump = l.capture("l1", "ip proto 17", &pcap).unwrap();
    let leaf = Lqd::start(&l, LEAF).unwrap();
    let mut spine = Lqd::start(&s, &spine_cfg).unwrap();

    let wait_for_entries = |what: &str| {
        poll_until(
            &format!("41 entries at the leaf over the {what}"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                let paths = leaf.show("paths").ok();
                match paths.and_then(|p| p.as_array().map(Vec::len)).unwrap_or(0) {
                    41 => Ok(()),
                    n => Err(n),
                }
            },
            |n| {
                format!(
                    "the leaf has {n} entries\nspine local: {:?}\nspine log:\n{}",
                    spine.show("local").ok(),
                    spine.log_text()
                )
            },
        )
        .unwrap();
    };
    wait_for_entries("576-octet link");
    let local = spine.show("local").unwrap();
    assert_eq!(
        (
            local["path-mtu"].as_u64(),
            local["entries-per-datagram"].as_u64()
        ),
        (Some(576), Some(33)),
        "{local}"
    );
    std::thread::sleep(Duration::from_millis(200));

    // The operator raises the link's MTU (the receiving end first): the helper follows.
    l.ip(&["link", "set", "l1", "mtu", "1280"]).unwrap();
    s.ip(&["link", "set", "s1", "mtu", "1280"]).unwrap();
    local_when(
        &spine,
        "the helper to split for a 1280-octet MTU",
        |local| local["path-mtu"] == 1280 && local["entries-per-datagram"] == 77,
    );
    std::thread::sleep(Duration::from_millis(200));
    wait_for_entries("1280-octet link");

    // Stop the spine, let the last datagrams land, then compare with the capture.
    assert!(spine.terminate().is_some_and(|st| st.success()));
    std::thread::sleep(Duration::from_millis(300));
    let counters = leaf.show("counters").unwrap();
    let _ = Command::new("kill")
        .args(["-INT", &dump.id().to_string()])
        .status();
    let _ = dump.wait();
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args([
            "-T",
            "fields",
            "-e",
            "ip.len",
            "-e",
            "ip.flags.mf",
            "-e",
            "ip.frag_offset",
            "-e",
            "udp.dstport",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut sizes = std::collections::BTreeMap::<u64, u64>::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (len, mf, off, port) = (f[0], f.get(1), f.get(2), f.get(3));
        let fragment = mf.is_some_and(|m| *m == "1" || *m == "True")
            || off.is_some_and(|o| !o.is_empty() && *o != "0");
        assert!(!fragment, "a fragment was sent: {line}\n{text}");
        if port != Some(&"52525") {
            continue;
        }
        *sizes.entry(len.parse().unwrap()).or_default() += 1;
    }
    eprintln!("captured LQ datagrams by IP length: {sizes:?}; leaf counters {counters}");
    // 33 + 8 entries at MTU 576, then all 41 in one at MTU 1280.
    assert!(
        sizes.keys().all(|k| [572, 172, 700].contains(k)),
        "{sizes:?}"
    );
    assert!(sizes.get(&572).copied().unwrap_or(0) >= 2, "{sizes:?}");
    assert_eq!(sizes.get(&572), sizes.get(&172), "{sizes:?}");
    assert!(sizes.get(&700).copied().unwrap_or(0) >= 2, "{sizes:?}");
    let captured: u64 = sizes.values().sum();
    assert_eq!(counters["accepted"].as_u64(), Some(captured), "{counters}");
    for bad in [
        "truncated",
        "bad_version",
        "bad_mode",
        "bad_length",
        "bad_value",
        "stale_seq",
        "bad_ttl",
    ] {
        assert_eq!(counters[bad], 0, "{bad}: {counters}");
    }
    let _ = std::fs::remove_file(&pcap);
}

/// A reload that reloads (issue 43): SIGHUP with a new notify-interval-ms changes the
/// spine's measured advertisement period within one period; `lqd reload` reports the
/// outcome and exits non-zero when the file changes what needs a restart, naming it, and
/// then nothing of the file is applied (`show state` and `show status` show the
/// configuration in force).
#[test]
fn a_reload_changes_the_helpers_period_or_is_refused_as_a_whole() {
    require_root();
    let s = NetNs::new("lqt-rh").unwrap();
    let l = NetNs::new("lqt-rl").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let leaf_cfg = LEAF.replace(
        "role = \"load-balancer\"\n",
        "role = \"load-balancer\"\nmiss-count = 5\n",
    );
    let leaf = Lqd::start(&l, &leaf_cfg).unwrap();
    let spine = Lqd::start(&s, SPINE).unwrap();
    let observed =
        || -> Option<f64> { leaf.show("neighbors").ok()?[0]["observed-interval-ms"].as_f64() };
    let period_near = |ms: f64| {
        poll_until(
            &format!("the leaf to observe a {ms} ms advertisement period"),
            Duration::from_secs(5),
            Duration::from_millis(20),
            || match observed() {
                Some(p) if (p - ms).abs() < ms * 0.25 => Ok(p),
                p => Err(p),
            },
            |p| format!("observed {p:?}\n{}", spine.log_text()),
        )
        .unwrap()
    };
    period_near(20.0);
    // SIGHUP with T_notify 40 ms (the leaf's dead interval, 5 x 20 ms, covers it). The
    // spine's datagrams are captured at the leaf with the kernel's receive timestamps:
    // every period that starts one old period (20 ms, + 10 % jitter, + slack) after the
    // SIGHUP is the new one, [0.9, 1.1] x 40 ms.
    let socket = l
        .run_in(|| UdpSocket::bind(("0.0.0.0", lq_common::wire::DEFAULT_PORT)))
        .unwrap()
        .unwrap();
    lq_tests::daemon::enable_receive_timestamps(&socket).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let capture = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut stamps = Vec::new();
            let mut buf = [0u8; 2048];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some((_, ts)) = lq_tests::daemon::recv_stamped(&socket, &mut buf) {
                    stamps.push(ts);
                }
            }
            stamps
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let slower = SPINE.replace("router-id", "notify-interval-ms = 40\nrouter-id");
    std::fs::write(spine.config_path(), &slower).unwrap();
    let hup_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    spine.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(1200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stamps = capture.join().unwrap();
    let gaps: Vec<(u64, f64)> = stamps
        .windows(2)
        .map(|w| (w[0], (w[1] - w[0]) as f64 / 1e6))
        .collect();
    let before: Vec<f64> = gaps
        .iter()
        .filter(|(t, g)| *t + (*g * 1e6) as u64 <= hup_ns)
        .map(|g| g.1)
        .collect();
    let after: Vec<f64> = gaps
        .iter()
        .filter(|(t, _)| *t >= hup_ns + 25_000_000)
        .map(|g| g.1)
        .collect();
    eprintln!("periods before SIGHUP {before:?}\nafter {after:?}");
    assert!(before.len() >= 30 && after.len() >= 20, "{stamps:?}");
    // The periods are judged by their median and by the share inside the jittered band,
    // not one by one: on two loaded cores a send or its receive can be scheduled late by
    // 10 ms (CI saw a 29 ms gap followed by an 11 ms one, and two late sends in a row).
    // An old period (20 ms) past the SIGHUP's first one would still show: it lies outside
    // the new band, and more than a fifth of them fail the share or move the median out of it.
    let judge = |gaps: &[f64], band: std::ops::RangeInclusive<f64>, what: &str| {
        let mut sorted = gaps.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let inside = gaps.iter().filter(|g| band.contains(g)).count();
        assert!(
            band.contains(&median) && inside * 5 >= gaps.len() * 4,
            "{what}: median {median} ms, {inside} of {} periods inside {band:?}: {gaps:?}",
            gaps.len()
        );
    };
    judge(
        &before,
        15.0..=27.0,
        "the period before the SIGHUP is not T_notify 20 ms",
    );
    judge(
        &after,
        33.0..=48.0,
        "the periods after the first one past the SIGHUP are not the new T_notify 40 ms",
    );
    assert!(spine.log_text().contains("helper parameters reloaded"));
    period_near(40.0);
    let status = spine.show("status").unwrap();
    assert_eq!(status["reloads"], 1, "{status}");
    assert_eq!(status["last-reload"]["applied"], true, "{status}");
    assert_eq!(
        spine.show("state").unwrap()["ietf-lq-telemetry:lq-telemetry"]["notify-interval-ms"],
        40,
        "show state shows the configuration in force"
    );

    // `lqd reload`: a new UDP port needs new sockets: refused as a whole, the period kept.
    let reload = |text: &str| {
        std::fs::write(spine.config_path(), text).unwrap();
        Command::new(lqd_bin().unwrap())
            .args(["reload", "--instance", &spine.instance])
            .output()
            .unwrap()
    };
    let refused = reload(&format!(
        "{}\n[udp]\nport = 6800\n",
        slower.replace("notify-interval-ms = 40", "notify-interval-ms = 20")
    ));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(err.contains("[udp]") && err.contains("restart"), "{err}");
    let status = spine.show("status").unwrap();
    assert_eq!(status["reloads"], 2, "{status}");
    assert_eq!(status["last-reload"]["applied"], false, "{status}");
    assert_eq!(
        status["last-reload"]["restart-needed"],
        serde_json::json!(["[udp]"]),
        "{status}"
    );
    assert_eq!(
        spine.show("state").unwrap()["ietf-lq-telemetry:lq-telemetry"]["notify-interval-ms"],
        40
    );
    period_near(40.0);
    // Back to 20 ms through `lqd reload`: applied, exit 0.
    let applied = reload(SPINE);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(String::from_utf8_lossy(&applied.stdout).contains("applied"));
    period_near(20.0);
}

/// Authenticated advertisements (seed 003 section 12.1, issue 39), sending side: a helper
/// with `[helper] key-chain` signs every datagram with its newest active send key, here
/// rolling over across three keys with overlapping lifetimes: HMAC-SHA-256, then
/// HMAC-SHA-512 2 s into the run, then HMAC-SHA-384 5 s into it. The leaf, which requires
/// authentication with the same chain, loses no advertisement; `lqd decode --pcap
/// --key-chain` verifies every captured one; and scapy with Python's `hmac` recomputes
/// every MAC from the captured frames, the independent judge. A key chain others may read
/// keeps lqd from starting, with the reason.
#[test]
fn signed_advertisements_verify_independently_and_roll_over_keys() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-keys"));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let rfc3339 = |t: u64| -> String {
        let out = Command::new("date")
            .args(["-u", "-d", &format!("@{t}"), "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    // Key 1 until 4 s from now, key 2 from 2 s to 7 s from now, key 3 from 5 s from now:
    // two rollovers during the run (written again just before the helper starts).
    let chain = |now: u64| {
        format!(
            "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"spine key one\"\n\
             send-lifetime = {{ start-date-time = \"{}\", end-date-time = \"{}\" }}\n\n\
             [[key]]\nkey-id = 2\ncrypto-algorithm = \"hmac-sha-512\"\nkey-string = \"spine key two\"\n\
             send-lifetime = {{ start-date-time = \"{}\", end-date-time = \"{}\" }}\n\n\
             [[key]]\nkey-id = 3\ncrypto-algorithm = \"hmac-sha-384\"\nkey-string = \"spine key three\"\n\
             send-lifetime = {{ start-date-time = \"{}\" }}\n",
            rfc3339(now - 100),
            rfc3339(now + 4),
            rfc3339(now + 2),
            rfc3339(now + 7),
            rfc3339(now + 5),
        )
    };
    std::fs::write(&keys, chain(now())).unwrap();
    let s = NetNs::new("lqt-as").unwrap();
    let l = NetNs::new("lqt-al").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let spine_cfg = format!("{SPINE}\n[helper]\nkey-chain = \"{}\"\n", keys.display());

    // Others may read it: refused, and lqd says why.
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = Lqd::start(&s, &spine_cfg);
    let err = format!(
        "{:?}",
        refused.err().expect("a world-readable key chain refused")
    );
    assert!(err.contains("accessible to others"), "{err}");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();

    let pcap = std::env::temp_dir().join(format!("{}.pcap", lq_tests::unique_name("lq-auth")));
    let mut dump = l.capture("l1", "udp port 52525", &pcap).unwrap();
    // The leaf requires authentication with the same keys: the rollover must lose nothing.
    let leaf = Lqd::start(
        &l,
        &format!(
            "{LEAF}authentication = \"required\"\nkey-chain = \"{}\"\n",
            keys.display()
        ),
    )
    .unwrap();
    std::fs::write(&keys, chain(now())).unwrap();
    let mut spine = Lqd::start(&s, &spine_cfg).unwrap();
    local_when(&spine, "room kept for an 80-octet trailer", |local| {
        local["entries-per-datagram"] == 86 && local["authentication"]["signed"].as_u64() > Some(0)
    });
    wait_until(
        "the leaf to accept the signed datagrams",
        &leaf,
        &spine,
        |(q, _)| q >= 240,
    );
    // Past both rollovers (key 2 from now + 2 s, key 3 from now + 5 s).
    local_when(&spine, "the rollover to key 2", |local| {
        local["authentication"]["send-key-id"] == 2
    });
    local_when(&spine, "the rollover to key 3", |local| {
        local["authentication"]["send-key-id"] == 3
    });
    std::thread::sleep(Duration::from_millis(500));
    let local = spine.show("local").unwrap();
    let auth = &local["authentication"];
    assert_eq!(auth["keys"], serde_json::json!([1, 2, 3]), "{local}");
    assert_eq!(auth["algorithm"], "hmac-sha-384", "{local}");
    assert_eq!(auth["no-send-key"], 0, "{local}");
    assert!(
        !local.to_string().contains("spine key"),
        "a secret shown: {local}"
    );
    // While the spine ran (its stop is a failure, below), no failure: the rollover lost
    // no advertisement the leaf needed.
    let log_before_stop = leaf.log_text();
    assert!(spine.terminate().is_some_and(|st| st.success()));
    std::thread::sleep(Duration::from_millis(200));
    let counters = leaf.show("counters").unwrap();
    let _ = Command::new("kill")
        .args(["-INT", &dump.id().to_string()])
        .status();
    let _ = dump.wait();
    for bad in [
        "bad_length",
        "truncated",
        "bad_value",
        "stale_seq",
        "auth_missing_trailer",
        "auth_unknown_key_id",
        "auth_key_not_accepted",
        "auth_bad_mac",
        "auth_replayed_sequence",
        "auth_socket_overflows",
    ] {
        assert_eq!(counters[bad], 0, "{bad}: {counters}");
    }
    assert!(
        !log_before_stop.contains("LQ neighbor failed"),
        "a spine failure during the rollover: {counters}\n{log_before_stop}"
    );

    // lqd's own check of the capture.
    let out = Command::new(lqd_bin().unwrap())
        .args(["decode", "--json-lines", "--key-chain"])
        .arg(&keys)
        .arg("--pcap")
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(records.len() >= 10, "{} datagrams captured", records.len());
    assert!(
        records
            .iter()
            .all(|r| r["authentication"]["verified"] == true)
    );
    // Every datagram the capture saw, the leaf accepted (the capture may miss one at
    // either end of its run).
    let accepted = counters["accepted"].as_u64().unwrap();
    assert!(
        accepted >= records.len() as u64 && accepted - records.len() as u64 <= 2,
        "accepted {accepted}, captured {}: {counters}",
        records.len()
    );

    // The independent judge: scapy reads the frames, Python's hmac recomputes each MAC.
    let script = r#"
import hashlib, hmac, socket, struct, sys
from scapy.all import rdpcap, IP, UDP
keys = {1: (b"spine key one", hashlib.sha256), 2: (b"spine key two", hashlib.sha512),
        3: (b"spine key three", hashlib.sha384)}
ok = bad = 0
ids = set()
for p in rdpcap(sys.argv[1]):
    if UDP not in p or p[UDP].dport != 52525:
        continue
    d = bytes(p[UDP].payload)
    hlen = 16 + (4 if d[0] & 0x08 else 0)
    body = hlen + int.from_bytes(d[12:14], "big") * d[14]
    t = d[body:]
    kid = int.from_bytes(t[4:6], "big")
    key, h = keys[kid]
    pseudo = socket.inet_aton(p[IP].src) + socket.inet_aton(p[IP].dst) + struct.pack(">HH", p[UDP].sport, p[UDP].dport)
    mac = hmac.new(key, pseudo + d[:body + 16], h).digest()
    if d[0] & 0x01 and t[0] == 1 and hmac.compare_digest(mac, t[16:]):
        ok += 1
        ids.add(kid)
    else:
        bad += 1
print(ok, bad, ",".join(str(i) for i in sorted(ids)))
"#;
    // Debian's python3-scapy, installed by `cargo xtask setup`, is for /usr/bin/python3.
    let out = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(&pcap)
        .output()
        .unwrap();
    let judged = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        judged,
        format!("{} 0 1,2,3", records.len()),
        "scapy/hmac: ok bad key-ids"
    );
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Authenticated advertisements, receiving side (issue 39 item 3): a leaf with
/// `[receiver] authentication = "required"` takes the signing spine's advertisements
/// through its socket path (the XDP program passes them up; lqd checks the MAC and the
/// 64-bit sequence and hands each back to the program), and drops everything a forger on
/// the link sends with TTL 255 (scapy, with Python's `hmac` where a MAC is computed): no
/// trailer, a wrong key, an unknown key id, a key outside its accept-lifetime, one flipped
/// bit of a genuine datagram, a replayed genuine datagram, and a truncated trailer (which
/// the XDP program itself refuses as `bad_length`). Each is counted under its reason and
/// the forged LQS 0 never reaches the path table.
#[test]
fn a_leaf_that_requires_authentication_drops_forgeries_by_reason() {
    require_root();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-rkeys"));
    std::fs::create_dir_all(&dir).unwrap();
    let spine_keys = dir.join("spine.toml");
    let leaf_keys = dir.join("leaf.toml");
    write_key_chain(
        &spine_keys,
        "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"fabric key\"\n",
    );
    // The leaf accepts key 1, and knows key 3 only for a lifetime that ended in 2020.
    write_key_chain(
        &leaf_keys,
        "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"fabric key\"\n\n\
         [[key]]\nkey-id = 3\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"old key\"\n\
         accept-lifetime = { start-date-time = \"2019-01-01T00:00:00Z\", end-date-time = \"2020-01-01T00:00:00Z\" }\n",
    );
    let s = NetNs::new("lqt-ras").unwrap();
    let l = NetNs::new("lqt-ral").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let leaf_cfg = format!(
        "{LEAF}authentication = \"required\"\nkey-chain = \"{}\"\n",
        leaf_keys.display()
    );
    let spine_cfg = format!(
        "{SPINE}\n[helper]\nkey-chain = \"{}\"\n",
        spine_keys.display()
    );
    let pcap = std::env::temp_dir().join(format!("{}.pcap", lq_tests::unique_name("lq-rauth")));
    // Five genuine datagrams (100 ms of them), and the capture ends by itself.
    let mut dump = l.capture_packets("l1", "udp port 52525", &pcap, 5).unwrap();
    let leaf = Lqd::start(&l, &leaf_cfg).unwrap();
    let spine = Lqd::start(&s, &spine_cfg).unwrap();
    wait_until(
        "the leaf to accept the signed datagrams",
        &leaf,
        &spine,
        |(q, _)| q >= 240,
    );
    let count = |name: &str| leaf.show("counters").unwrap()[name].as_u64().unwrap();
    poll_until(
        "verified datagrams handed back to the XDP receiver",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let c = leaf.show("counters").unwrap();
            if c["auth_verified"].as_u64() > Some(10) && c["auth_handed_back"].as_u64() > Some(10) {
                Ok(())
            } else {
                Err(c)
            }
        },
        |c| format!("leaf counters {c}\n{}", leaf.log_text()),
    )
    .unwrap();
    // A genuine datagram to flip and to replay: the capture has ended by itself after its
    // five (the spine has been signing for seconds by now).
    poll_until(
        "the capture of five genuine datagrams to end",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || match dump.try_wait() {
            Ok(Some(status)) => Ok(status),
            other => Err(format!("{other:?}")),
        },
        |e| e,
    )
    .unwrap_or_else(|e| {
        let _ = dump.kill();
        let _ = dump.wait();
        panic!("{e}")
    });
    let paths = leaf.show("paths").unwrap();
    let link_id = paths[0]["link-id"].as_u64().unwrap();

    let script = r#"
import hashlib, hmac, socket, struct, sys
from scapy.all import Ether, IP, UDP, Raw, rdpcap, sendp
pcap, link_id = sys.argv[1], int(sys.argv[2])
SRC, DST, SPORT, DPORT = "10.9.0.1", "224.0.0.1", 40999, 52525
def advertisement(seq, a_flag):
    h = struct.pack(">BBHIIHBB", 0x10 | a_flag, 0, seq, 0x0A000002, 1, 1, 16, 0)
    e = struct.pack(">IIfBBH", 0x0A000101, link_id, 100.0, 0, 7 << 5, 0)
    return h + e
def trailer(body, key_id, key, seq64, sport=SPORT):
    t = struct.pack(">BBHHHQ", 1, 1, 48, key_id, 0, seq64)
    pseudo = socket.inet_aton(SRC) + socket.inet_aton(DST) + struct.pack(">HH", sport, DPORT)
    return t + hmac.new(key, pseudo + body + t, hashlib.sha256).digest()
def send(payload, sport=SPORT):
    p = Ether(dst="01:00:5e:00:00:01") / IP(src=SRC, dst=DST, ttl=255) / UDP(sport=sport, dport=DPORT) / Raw(payload)
    sendp(p, iface="s1", verbose=False)
seq = 60000
big = (2**32 - 1) << 32
body = advertisement(seq, 0)
send(body)                                                   # missing-trailer
body = advertisement(seq + 1, 1)
send(body + trailer(body, 1, b"not the fabric key", big))    # bad-mac (wrong key)
body = advertisement(seq + 2, 1)
send(body + trailer(body, 9, b"fabric key", big))            # unknown-key-id
body = advertisement(seq + 3, 1)
send(body + trailer(body, 3, b"old key", big))               # key-not-accepted
body = advertisement(seq + 4, 1)
send((body + trailer(body, 1, b"fabric key", big))[:-5])     # truncated: bad_length
genuine = [bytes(p[UDP].payload) for p in rdpcap(pcap) if UDP in p and p[UDP].dport == DPORT]
g = genuine[-1]
sport = [p[UDP].sport for p in rdpcap(pcap) if UDP in p and p[UDP].dport == DPORT][-1]
flipped = bytearray(g); flipped[16 + 12] ^= 0xFF             # the first entry's LQS
send(bytes(flipped), sport)                                  # bad-mac (one flipped field)
send(g, sport)                                               # replayed-sequence
print(len(genuine))
"#;
    python(&s, script, &[pcap.to_str().unwrap(), &link_id.to_string()]);
    let c = poll_until(
        "every forgery counted under its reason",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let c = leaf.show("counters").unwrap();
            let want = [
                ("auth_missing_trailer", 1),
                ("auth_bad_mac", 2),
                ("auth_unknown_key_id", 1),
                ("auth_key_not_accepted", 1),
                ("auth_replayed_sequence", 1),
            ];
            if want.iter().all(|(k, n)| c[*k].as_u64() == Some(*n))
                && c["bad_length"].as_u64() == Some(1)
            {
                Ok(c)
            } else {
                Err(c)
            }
        },
        |c| format!("leaf counters {c}\n{}", leaf.log_text()),
    )
    .unwrap();
    eprintln!("leaf counters after the forgeries: {c}");
    // Nothing forged reached the table: the spine's genuine LQS stands, and more genuine
    // datagrams keep arriving.
    let verified = count("auth_verified");
    std::thread::sleep(Duration::from_millis(300));
    let (lqs, cl) = lqs_of(&leaf).unwrap();
    assert!(lqs >= 240 && cl == 0, "LQS {lqs} CL {cl}");
    assert!(count("auth_verified") > verified);
    assert_eq!(count("stale_seq"), 0);
    let log = leaf.log_text();
    assert!(log.contains("not authentic"), "{log}");
    assert!(!log.contains("fabric key"), "a secret in the log");
    // The same counters in the YANG state (lq's augment lq-authentication), valid for
    // yanglint, the independent judge.
    let state = leaf.show("state").unwrap();
    lq_tests::yanglint_data(&state).unwrap_or_else(|e| panic!("{e}\n{state:#}"));
    let a = &state["ietf-lq-telemetry:lq-telemetry"]["lq-authentication:authentication"];
    assert_eq!(a["mode"], "required", "{state:#}");
    assert_eq!(a["counters"]["bad-mac"], "2", "{state:#}");
    assert_eq!(a["counters"]["replayed-sequence"], "1", "{state:#}");
    assert!(
        !state.to_string().contains("fabric key"),
        "a secret in the state"
    );
    drop(leaf);

    // Migration (`accept-unauthenticated`): signed datagrams are still verified, an
    // unsigned one is accepted and counted: the forged LQS 0 then reaches the table.
    let leaf = Lqd::start(
        &l,
        &leaf_cfg.replace("\"required\"", "\"accept-unauthenticated\""),
    )
    .unwrap();
    wait_until(
        "the migrating leaf to accept the signed datagrams",
        &leaf,
        &spine,
        |(q, _)| q >= 240,
    );
    let unsigned = r#"
import struct, sys
from scapy.all import Ether, IP, UDP, Raw, sendp
link_id = int(sys.argv[1])
h = struct.pack(">BBHIIHBB", 0x10, 0, 0, 0x0A000002, 1, 1, 16, 0)
e = struct.pack(">IIfBBH", 0x0A000101, link_id, 100.0, 0, 7 << 5, 0)
for _ in range(3):
    sendp(Ether(dst="01:00:5e:00:00:01") / IP(src="10.9.0.1", dst="224.0.0.1", ttl=255) / UDP(sport=40998, dport=52525) / Raw(h + e), iface="s1", verbose=False)
"#;
    python(&s, unsigned, &[&link_id.to_string()]);
    poll_until(
        "the unsigned datagram accepted and counted",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let c = leaf.show("counters").unwrap();
            if c["auth_unauthenticated_accepted"].as_u64() >= Some(1)
                && c["auth_verified"].as_u64() > Some(0)
                && c["auth_missing_trailer"] == 0
            {
                Ok(())
            } else {
                Err(c)
            }
        },
        |c| format!("leaf counters {c}\n{}", leaf.log_text()),
    )
    .unwrap();
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A mode per uplink (`[receiver.interface-authentication]`, issue 39 item 3): a leaf with
/// three uplinks, `required` by default, one migrating (`accept-unauthenticated`) and one
/// left on the XDP path (`none`). scapy sends the same unsigned advertisement on each,
/// from three spines: the `required` uplink drops and counts it (missing trailer), the
/// migrating one accepts and counts it, the `none` one reads it in XDP without the socket
/// seeing it. The path table holds exactly the two accepted spines, and the YANG state
/// (yanglint) names each interface's mode.
#[test]
fn each_uplink_authenticates_in_its_own_mode() {
    require_root();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-pkeys"));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("leaf.toml");
    write_key_chain(
        &keys,
        "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"fabric key\"\n",
    );
    let s = NetNs::new("lqt-rps").unwrap();
    let l = NetNs::new("lqt-rpl").unwrap();
    for i in 1..=3 {
        veth_pair(
            &s,
            &format!("s{i}"),
            &format!("10.9.{i}.1/24"),
            &l,
            &format!("l{i}"),
            &format!("10.9.{i}.2/24"),
        )
        .unwrap();
    }
    let leaf_cfg = format!(
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n\
         [receiver]\ninterfaces = [\"l1\", \"l2\", \"l3\"]\n\
         authentication = \"required\"\nkey-chain = \"{}\"\n\n\
         [receiver.interface-authentication]\nl2 = \"accept-unauthenticated\"\nl3 = \"none\"\n\n\
         [gnmi]\nlisten = \"127.0.0.1:9339\"\nplaintext = true\n\n\
         [[gnmi.client]]\nname = \"*\"\nread = [\"/lq-telemetry/neighbors\"]\n",
        keys.display()
    );
    let leaf = Lqd::start(&l, &leaf_cfg).unwrap();
    // The drop is also a notification: `lqd monitor` prints it, a gNMI subscriber
    // granted /neighbors streams it.
    let monitor = Command::new(lqd_bin().unwrap())
        .args(["monitor", "--instance", &leaf.instance])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let gnmi = lq_tests::gnmi::PyGnmi {
        ns: &l,
        target: "127.0.0.1:9339".into(),
        server_name: String::new(),
        ca: None,
        identity: None,
    }
    .spawn(&[
        "stream",
        "/lq-authentication:lq-authentication-failure",
        "on_change",
        "0",
        "30",
    ])
    .unwrap();
    // Both subscriptions reach the daemon first (each logs it as it subscribes; pygnmi
    // takes a second or more to start on a loaded machine).
    poll_until(
        "lqd monitor and the gNMI subscription to follow the notifications",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let log = leaf.log_text();
            if log.contains("a client follows the notifications")
                && log.contains("notifications=1")
                && log.contains("gNMI subscription")
            {
                Ok(())
            } else {
                Err(())
            }
        },
        |()| leaf.log_text(),
    )
    .unwrap();
    // The stream task subscribes just after the log line.
    std::thread::sleep(Duration::from_millis(300));
    // Spine 10.0.0.<i> on uplink i, each advertising its link to remote 10.0.1.1.
    let script = r#"
import struct
from scapy.all import Ether, IP, UDP, Raw, sendp
for i in (1, 2, 3):
    h = struct.pack(">BBHIIHBB", 0x10, 0, 1, 0x0A000000 + i, 1, 1, 16, 0)
    e = struct.pack(">IIfBBH", 0x0A000101, 100 + i, 100.0, 200, 0, 0)
    p = Ether(dst="01:00:5e:00:00:01") / IP(src="10.9.%d.1" % i, dst="224.0.0.1", ttl=255) / UDP(sport=40000, dport=52525) / Raw(h + e)
    sendp(p, iface="s%d" % i, verbose=False)
"#;
    python(&s, script, &[]);
    let (c, spines) = poll_until(
        "the required uplink's datagram refused, the others accepted",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let c = leaf.show("counters").unwrap();
            let paths = leaf.show("paths").unwrap();
            let mut spines: Vec<String> = paths
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["spine-node-id"].as_str().unwrap_or("?").to_string())
                .collect();
            spines.sort();
            if c["auth_missing_trailer"].as_u64() == Some(1)
                && c["auth_unauthenticated_accepted"].as_u64() == Some(1)
                && spines.len() == 2
            {
                Ok((c, spines))
            } else {
                Err((c, spines))
            }
        },
        |(c, spines)| {
            format!(
                "leaf counters {c}\npath table spines {spines:?}\n{}",
                leaf.log_text()
            )
        },
    )
    .unwrap();
    assert_eq!(spines, ["10.0.0.2", "10.0.0.3"], "{c}");
    // The `none` uplink's datagram never went to the socket: two received there.
    assert_eq!(c["auth_received"].as_u64(), Some(2), "{c}");
    assert_eq!(c["auth_other_interface"].as_u64(), Some(0), "{c}");
    let state = leaf.show("state").unwrap();
    lq_tests::yanglint_data(&state).unwrap_or_else(|e| panic!("{e}\n{state:#}"));
    let a = &state["ietf-lq-telemetry:lq-telemetry"]["lq-authentication:authentication"];
    assert_eq!(a["mode"], "required", "{state:#}");
    assert_eq!(
        a["interface"],
        serde_json::json!([
            {"name": "l1", "mode": "required"},
            {"name": "l2", "mode": "accept-unauthenticated"},
            {"name": "l3", "mode": "none"},
        ]),
        "{state:#}"
    );
    assert_eq!(a["counters"]["missing-trailer"], "1", "{state:#}");
    // The notification, once, as lqd monitor printed it and gNMI streamed it; valid for
    // yanglint against lq's augment module.
    std::thread::sleep(Duration::from_millis(300));
    let mut gnmi = gnmi;
    let _ = gnmi.kill();
    let streamed = gnmi.wait_with_output().unwrap();
    drop(leaf);
    let out = monitor.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(lines.len(), 1, "lqd monitor printed {lines:?}");
    lq_tests::yanglint_notification(&lines[0]).unwrap_or_else(|e| panic!("{}: {e}", lines[0]));
    let body = &lines[0]["lq-authentication:lq-authentication-failure"];
    assert_eq!(
        *body,
        serde_json::json!({"interface": "l1", "neighbor-node-as": 0,
                           "neighbor-node-id": "10.0.0.1", "source-address": "10.9.1.1",
                           "reason": "missing-trailer"})
    );
    let stdout = String::from_utf8_lossy(&streamed.stdout);
    let over_gnmi = lq_tests::gnmi::PyGnmi::streamed_values(&stdout);
    assert_eq!(
        over_gnmi,
        std::slice::from_ref(body),
        "gNMI: {stdout}\n{}",
        String::from_utf8_lossy(&streamed.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
