//! The load-balancer role end to end in network namespaces: real spine senders (UDP, TTL
//! 255) on four veth links, `lqd` with the XDP receiver on the leaf, and the weights read
//! back from the kernel with `ip -j nexthop show` (seed 003 sections 6.3-6.5, Appendix B).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use lq_tests::{
    daemon::{Lqd, Sender},
    netns::{NetNs, veth_pair},
    packet::{entry, header, ip4},
    poll::poll_until,
    require_root,
};

const GROUP_ID: u64 = 0x4c00_0000 + 0x1_0000;
const REMOTE: u32 = ip4(10, 0, 1, 4);

fn leaf_config() -> String {
    let mut c = String::from(
        r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["up1", "up2", "up3", "up4"]
"#,
    );
    for k in 1..=4 {
        c.push_str(&format!(
            "\n[[uplink]]\nid = {k}\nspine = \"10.0.0.{k}\"\ninterface = \"up{k}\"\ngateway = \"10.1.{k}.1\"\n"
        ));
    }
    c.push_str("\n[[destination]]\nprefix = \"10.4.0.0/24\"\nremote-node = \"10.0.1.4\"\n");
    c
}

struct Fabric {
    leaf: NetNs,
    spines: NetNs,
}

fn fabric() -> Fabric {
    fabric_of(4)
}

/// A leaf with `uplinks` uplinks `up<k>` (10.1.k.2/24) to `s<k>` (10.1.k.1/24) in one
/// namespace standing for the spines.
fn fabric_of(uplinks: u8) -> Fabric {
    let leaf = NetNs::new("lqt-leaf").unwrap();
    let spines = NetNs::new("lqt-spines").unwrap();
    for k in 1..=uplinks {
        veth_pair(
            &spines,
            &format!("s{k}"),
            &format!("10.1.{k}.1/24"),
            &leaf,
            &format!("up{k}"),
            &format!("10.1.{k}.2/24"),
        )
        .unwrap();
    }
    Fabric { leaf, spines }
}

/// Four spines advertising every 20 ms; `lqs[k] = None` keeps spine k silent.
struct Spines {
    lqs: Arc<Mutex<[Option<u8>; 4]>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spines {
    fn start(ns: &NetNs) -> Self {
        let lqs = Arc::new(Mutex::new([Some(237u8); 4]));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (lqs.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let name = ns.name().to_string();
        let thread = std::thread::spawn(move || {
            lq_tests::netns::enter_netns(&name).unwrap();
            let mut senders = spine_senders();
            tx.send(()).unwrap();
            let mut seq = [100u16, 200, 300, 400];
            while !s.load(Ordering::Relaxed) {
                let now = *l.lock().unwrap();
                for k in 0..4 {
                    if let Some(q) = now[k] {
                        seq[k] = seq[k].wrapping_add(1);
                        let h = header(ip4(10, 0, 0, k as u8 + 1), seq[k]);
                        let to = SocketAddr::new(
                            IpAddr::V4(Ipv4Addr::new(10, 1, k as u8 + 1, 2)),
                            52525,
                        );
                        senders[k]
                            .send(to, &h, &[entry(REMOTE, 1, q, if q < 100 { 3 } else { 0 })])
                            .unwrap();
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        Self {
            lqs,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, k: usize, lqs: Option<u8>) {
        self.lqs.lock().unwrap()[k] = lqs;
    }
}

impl Drop for Spines {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The group's members as (member id - id base, weight), sorted.
fn group_weights(leaf: &NetNs) -> Option<Vec<(u64, u64)>> {
    lq_tests::fabric::group_members(leaf, GROUP_ID)
}

/// Whether the group forwards as `want` would: the same members, each wanting the same
/// buckets. lqd writes a computed change only when it moves a bucket (issue 41), so the
/// kernel's integer weights may differ from `want` within a bucket's share.
fn forwards_as(leaf: &NetNs, want: &[(u64, u64)]) -> bool {
    lq_tests::fabric::forwards_as(leaf, GROUP_ID, want)
}

/// Waits until the group forwards as weights `want` would ([`forwards_as`]); returns how
/// long that took, to 10 ms.
fn wait_for(what: &str, lqd: &Lqd, leaf: &NetNs, want: &[(u64, u64)]) -> Duration {
    let start = Instant::now();
    poll_until(
        what,
        Duration::from_secs(10),
        Duration::from_millis(10),
        || match group_weights(leaf) {
            Some(_) if forwards_as(leaf, want) => Ok(()),
            got => Err(got),
        },
        |got| {
            let log = lqd.log_text();
            format!("group weights {got:?}, want {want:?}\nlqd log:\n{log}")
        },
    )
    .unwrap();
    start.elapsed()
}

/// The four spines' advertisement senders (10.1.k.1, TTL 255), opened on the calling
/// thread, which must have entered the spines' namespace.
fn spine_senders() -> Vec<Sender> {
    (1..=4u8)
        .map(|k| {
            Sender::bind(
                SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, k, 1)), 0),
                255,
            )
            .unwrap()
        })
        .collect()
}

#[test]
fn weights_follow_remote_congestion_and_spine_failure() {
    require_root();
    let f = fabric();
    let spines = Spines::start(&f.spines);
    let lqd = Lqd::start(&f.leaf, &leaf_config()).unwrap();
    let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
    wait_for("steady state: equal weights", &lqd, &f.leaf, &equal);
    // Least privilege: once running, every thread of lqd (the main one included) holds
    // CAP_NET_ADMIN (12) and CAP_BPF (39) only, and everything below still works with
    // just those.
    let threads = lqd.threads();
    assert!(
        threads.len() >= 2 && threads.iter().all(|t| t.cap_eff == 1 << 12 | 1 << 39),
        "{threads:?}\n{}",
        lqd.log_text()
    );
    // The route points at the group: one object, so weight changes are never route churn.
    let route = f.leaf.ip(&["-j", "route", "show", "10.4.0.0/24"]).unwrap();
    assert!(route.contains(&format!("\"nhid\":{GROUP_ID}")), "{route}");

    // Appendix B: S2's link to L4 congested, LQS 72: targets 30.27 % / 9.20 %, reached over
    // damped steps; integer weights 255/77/255/255. The reproduction reads lqd's computed
    // weights (`computed-weight`); the kernel forwards as they do: the same buckets per
    // member, written as the steps moved buckets (issue 41), and the kernel's own buckets
    // (`ip nexthop bucket`) end there.
    spines.set(1, Some(72));
    let appendix_b = [(1, 255), (2, 77), (3, 255), (4, 255)];
    let t = wait_for("S2 congested", &lqd, &f.leaf, &appendix_b);
    eprintln!("S2 congested -> target weights in {t:?}");
    weights_when(&lqd, "the computed weights of Appendix B", |w| {
        w["groups"][0]["members"].as_array().is_some_and(|m| {
            m.iter()
                .map(|m| {
                    (
                        m["uplink"].as_u64().unwrap_or(0),
                        m["computed-weight"].as_u64().unwrap_or(0),
                    )
                })
                .eq(appendix_b)
        })
    });
    // The kernel's own buckets: as few on the wrong member as any counts put for Appendix
    // B's targets (S2 72 / 783 = 9.20 % of 128 buckets, 11.77; the others 38.74 each),
    // where lqd's replace rule settles judging the damped fractions (issue 41): 12 for
    // S2 and 39, 39, 38 for the others in some order. (The integer weights' own rounding,
    // 255/77 of 842, gives S2 11.70 and 11 buckets, a share further from the target.)
    let appendix_b_shares = [(1, 237), (2, 72), (3, 237), (4, 237)];
    poll_until(
        "the kernel's buckets as close to Appendix B's targets as buckets can be",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let b = lq_tests::fabric::group_buckets(&f.leaf, GROUP_ID);
            if b.as_deref()
                .is_some_and(|b| lq_tests::fabric::settled_counts(b, &appendix_b_shares))
            {
                Ok(())
            } else {
                Err(b)
            }
        },
        |b| format!("buckets {b:?}"),
    )
    .unwrap();
    // Clients read the snapshot the loop last published (at most every 5 ms, longer when
    // building it is slow, as in a debug build): wait for one taken after these steps.
    let published = Instant::now();
    let w = loop {
        let w = lqd.show("weights").unwrap();
        let fresh = w["step-timing"]["steps"].as_u64() >= Some(1)
            && w["groups"][0]["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["uplink"] == 2 && m["remote-lqs"] == 72));
        if fresh || published.elapsed() > Duration::from_secs(5) {
            break w;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The replacing steps' own record: lqd's part and the kernel's, both measured.
    let timing = &w["step-timing"];
    assert!(timing["steps"].as_u64().unwrap() >= 1, "{timing}");
    for part in ["work-us", "replace-us"] {
        let p = &timing[part];
        let (p50, max) = (p["p50"].as_f64().unwrap(), p["max"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= max, "{part}: {p}");
    }
    let members = w["groups"][0]["members"].as_array().unwrap();
    assert_eq!(members.len(), 4);
    let s2 = members.iter().find(|m| m["uplink"] == 2).unwrap();
    assert_eq!(s2["remote-lqs"], 72);
    assert!(
        (s2["target"].as_f64().unwrap() - 0.0920).abs() < 0.0005,
        "{s2}"
    );

    // S2 goes silent: after miss_count x T_notify it is failed and leaves the group.
    spines.set(1, None);
    let t = wait_for("S2 silent", &lqd, &f.leaf, &[(1, 255), (3, 255), (4, 255)]);
    eprintln!("S2 silent -> left the group in {t:?}");
    // The views are the loop's latest snapshot, published within a few ms of the step.
    let s2_state = || {
        let n = lqd.show("neighbors").unwrap();
        let s2 = n
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node-id"] == "10.0.0.2")
            .cloned()
            .unwrap();
        (s2["state"] == "failed", n)
    };
    let start = std::time::Instant::now();
    while !s2_state().0 && start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (failed, n) = s2_state();
    assert!(failed, "S2 failed in the view within 1 s: {n}");
    // The operator's questions about it (issue 43): the filters keep S2 alone, and the
    // explanation of 10.4.0.9's weights names S2 failed and the healthy ones' inputs.
    let text = |args: &[&str]| {
        let o = std::process::Command::new(lq_tests::daemon::lqd_bin().unwrap())
            .args(args)
            .args(["--instance", &lqd.instance])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let only_s2: serde_json::Value =
        serde_json::from_str(&text(&["show", "paths", "--json", "--spine", "10.0.0.2"])).unwrap();
    assert!(
        !only_s2.as_array().unwrap().is_empty()
            && only_s2
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["spine-node-id"] == "10.0.0.2"),
        "{only_s2}"
    );
    let group: serde_json::Value = serde_json::from_str(&text(&[
        "show", "weights", "--json", "--prefix", "10.4.0.9", "--spine", "10.0.0.3",
    ]))
    .unwrap();
    assert_eq!(group["groups"].as_array().unwrap().len(), 1, "{group}");
    assert_eq!(
        group["groups"][0]["members"].as_array().unwrap().len(),
        1,
        "{group}"
    );
    // S3 is "stale" for a moment when one of its advertisements comes late (the test's
    // sender on a loaded machine): the explanation is read once S3 is active again, within
    // 3 s; the assertions below are unchanged.
    let explain = || -> serde_json::Value {
        serde_json::from_str(&text(&[
            "show",
            "weights",
            "--json",
            "--explain",
            "10.4.0.9",
        ]))
        .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut explained = explain();
    while Instant::now() < deadline
        && explained["members"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["spine"] == "10.0.0.3"))
            .is_some_and(|m| m["neighbor-state"] != "active")
    {
        std::thread::sleep(Duration::from_millis(20));
        explained = explain();
    }
    let members = explained["members"].as_array().unwrap();
    let s2 = members
        .iter()
        .find(|m| m["spine"] == "10.0.0.2")
        .expect("S2 explained");
    assert_eq!(s2["neighbor-state"], "failed", "{explained}");
    assert_eq!(s2["entry"]["state"], "neighbor-failed", "{explained}");
    assert_eq!(s2["kernel-weight"], 0, "{explained}");
    let s3 = members
        .iter()
        .find(|m| m["spine"] == "10.0.0.3")
        .expect("S3 explained");
    assert_eq!(s3["neighbor-state"], "active", "{explained}");
    assert_eq!(s3["entry"]["lqs"], 237, "{explained}");
    assert!(
        s3["why"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("path quality 237 = min(local quality 255, remote LQS 237)")),
        "{explained}"
    );
    let prose = text(&["show", "weights", "--explain", "10.4.0.9"]);
    assert!(prose.contains("via spine 10.0.0.3"), "{prose}");
    // It left by the deletion of its member nexthop: one kernel operation for every group
    // (issue 15), not one replace per group.
    let w = lqd.show("weights").unwrap();
    assert_eq!(w["member-deletes"], 1, "{w}");
    let member2 = (GROUP_ID - 0x1_0000 + 2).to_string();
    assert!(
        f.leaf
            .ip(&["-j", "nexthop", "show", "id", &member2])
            .is_err(),
        "S2's member nexthop is deleted"
    );

    // S2 speaks again (healthy): it rejoins (its member nexthop re-created), damped back
    // to equal weights.
    spines.set(1, Some(237));
    wait_for("S2 back", &lqd, &f.leaf, &equal);
    assert!(
        f.leaf
            .ip(&["-j", "nexthop", "show", "id", &member2])
            .is_ok()
    );

    let paths = lqd.show("paths").unwrap();
    assert_eq!(paths.as_array().unwrap().len(), 4, "{paths}");
    // bpftool, an independent reader, lists and dumps the pinned path table (BTF maps).
    let pinned = lqd.pin_dir().join("LQ_PATHS");
    let dump = lq_tests::netns::run(
        "bpftool",
        &["-j", "map", "dump", "pinned", pinned.to_str().unwrap()],
    )
    .unwrap();
    let dump: serde_json::Value = serde_json::from_str(&dump).unwrap();
    // The table is an array of slots (key, used, value); the used ones are the entries.
    let used: Vec<&serde_json::Value> = dump
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["formatted"]["value"]["used"] == 1)
        .collect();
    assert_eq!(used.len(), 4, "{used:?}");
    assert!(
        used[0]["formatted"]["value"]["value"]["lqs"].is_u64()
            && used[0]["formatted"]["value"]["key"]["spine_id"].is_u64(),
        "bpftool shows the BTF field names: {used:?}"
    );
    let c = lqd.show("counters").unwrap();
    assert!(c["accepted"].as_u64().unwrap() > 20, "{c}");
    assert_eq!(c["bad_ttl"], 0);
    drop(spines);
}

#[test]
fn gtsm_and_replay_are_refused_on_the_wire() {
    require_root();
    let f = fabric();
    let lqd = Lqd::start(&f.leaf, &leaf_config()).unwrap();
    let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)), 52525);
    let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)), 0);
    f.spines
        .run_in(move || {
            let mut far = Sender::bind(from, 254).unwrap();
            far.send(
                to,
                &header(ip4(10, 0, 0, 1), 5),
                &[entry(REMOTE, 1, 200, 0)],
            )
            .unwrap();
            let mut near = Sender::bind(SocketAddr::new(from.ip(), 0), 255).unwrap();
            for seq in [10u16, 11, 11, 9] {
                near.send(
                    to,
                    &header(ip4(10, 0, 0, 1), seq),
                    &[entry(REMOTE, 1, 100 + seq as u8, 0)],
                )
                .unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .unwrap();
    show_when(
        &lqd,
        "counters",
        "2 accepted, 1 bad TTL and 2 stale datagrams",
        Duration::from_secs(5),
        |c| c["accepted"] == 2 && c["bad_ttl"] == 1 && c["stale_seq"] == 2,
    );
    let paths = lqd.show("paths").unwrap();
    let p = &paths.as_array().unwrap()[0];
    assert_eq!(
        (p["lqs"].as_u64(), p["sequence-number"].as_u64()),
        (Some(111), Some(11)),
        "{p}"
    );
    // The sequence numbers count loss too (seed 003 `sequence-number`): 12, 13 and 14
    // never arrive; the refused duplicate and older datagram are not loss.
    f.spines
        .run_in(move || {
            let mut near = Sender::bind(SocketAddr::new(from.ip(), 0), 255).unwrap();
            near.send(
                to,
                &header(ip4(10, 0, 0, 1), 15),
                &[entry(REMOTE, 1, 115, 0)],
            )
            .unwrap();
        })
        .unwrap();
    let missed = |n: &serde_json::Value| n[0]["missed-datagrams"].as_u64();
    let n = show_when(
        &lqd,
        "neighbors",
        "15 accepted after 11",
        Duration::from_secs(5),
        |n| n[0]["last-sequence"] == 15 && missed(n).is_some(),
    );
    assert_eq!(missed(&n), Some(3), "{n}");
    let text = std::process::Command::new(lq_tests::daemon::lqd_bin().unwrap())
        .args(["show", "neighbors", "--instance", &lqd.instance])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(5) == Some("3")),
        "{text}"
    );
}

/// Seed 003 section 12 / robustness: `kill -9` of the leaf's lqd while traffic is steered.
/// Forwarding stays (groups and routes are kernel objects), the path table stays in its
/// pinned maps (`lqd show paths` works with no daemon), and the restarted daemon adopts its
/// groups: the kernel weights never jump back to equal.
#[test]
fn a_crash_leaves_forwarding_in_place_and_a_restart_adopts_it() {
    require_root();
    let f = fabric();
    let spines = Spines::start(&f.spines);
    let mut lqd = Lqd::start(&f.leaf, &leaf_config()).unwrap();
    let congested = [(1, 255), (2, 77), (3, 255), (4, 255)];
    spines.set(1, Some(72));
    wait_for("S2 congested", &lqd, &f.leaf, &congested);
    // What the kernel holds: the congested forwarding (its integer weights within a
    // bucket's share of `congested`, issue 41).
    let installed = group_weights(&f.leaf).unwrap();

    lqd.kill9();
    assert_eq!(
        group_weights(&f.leaf),
        Some(installed.clone()),
        "forwarding after the crash"
    );
    let route = f.leaf.ip(&["-j", "route", "show", "10.4.0.0/24"]).unwrap();
    assert!(route.contains(&format!("\"nhid\":{GROUP_ID}")), "{route}");
    let paths = lqd.show("paths").unwrap();
    assert_eq!(
        paths.as_array().unwrap().len(),
        4,
        "the pinned path table without a daemon: {paths}"
    );
    let accepted_before = lqd.show("counters").unwrap()["accepted"].as_u64().unwrap();

    lqd.restart().unwrap();
    // From the restart on, every observation of the group is the congested weighting.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        assert!(
            forwards_as(&f.leaf, &congested),
            "forwarding jump after restart: {:?}\n{}",
            group_weights(&f.leaf),
            lqd.log_text()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        lqd.log_text().contains("adopted existing nexthop group"),
        "{}",
        lqd.log_text()
    );
    // The counters survived the restart (pinned) and keep counting.
    let accepted_after = lqd.show("counters").unwrap()["accepted"].as_u64().unwrap();
    assert!(
        accepted_after > accepted_before,
        "{accepted_before} -> {accepted_after}"
    );

    // SIGHUP: a reloaded configuration with another gain keeps forwarding as it is.
    let text = std::fs::read_to_string(lqd.config_path()).unwrap() + "\n[damping]\ngain = 1.0\n";
    lqd.reload(&text, "configuration reloaded").unwrap();
    assert!(
        forwards_as(&f.leaf, &congested),
        "{:?}",
        group_weights(&f.leaf)
    );
    // A broken file is refused with the reason in the log, and lqd keeps running.
    lqd.reload(
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\nmiss-count = 99\n",
        "reload refused",
    )
    .unwrap();
    assert!(
        lqd.log_text().contains("allowed 2..=10"),
        "{}",
        lqd.log_text()
    );
    spines.set(1, Some(237));
    wait_for(
        "S2 back after reload",
        &lqd,
        &f.leaf,
        &[(1, 255), (2, 255), (3, 255), (4, 255)],
    );

    // SIGTERM leaves forwarding in place (no flush-on-exit).
    assert!(lqd.terminate().is_some_and(|s| s.success()));
    assert!(
        group_weights(&f.leaf).is_some(),
        "the group must survive a clean stop"
    );
}

/// Faults (issue 9): a local uplink that goes down leaves the group at once and returns
/// when it comes back; a spine that stops advertising one link but not the others has only
/// that entry aged out (the wire spec's per-entry ageing), not the whole spine.
///
/// Layout (seed 003 section 6.1, issue 15): the destinations behind one remote node share
/// one group, in the order they first appear; a group of lq's left by an older layout is
/// deleted once no route of lqd's names it.
#[test]
fn link_flaps_and_per_entry_ageing() {
    require_root();
    let f = fabric();
    let config = leaf_config()
        + "\n[[destination]]\nprefix = \"10.3.0.0/24\"\nremote-node = \"10.0.1.3\"\n"
        + "\n[[destination]]\nprefix = \"10.4.1.0/24\"\nremote-node = \"10.0.1.4\"\n"
        + "\n[[destination]]\nprefix = \"10.3.1.0/24\"\nremote-node = \"10.0.1.3\"\n";
    // A previous lqd's group in lq's range that this layout does not use.
    let leftover = GROUP_ID + 7;
    f.leaf
        .ip(&[
            "nexthop",
            "add",
            "id",
            &(GROUP_ID - 0x1_0000 + 1).to_string(),
            "via",
            "10.1.1.1",
            "dev",
            "up1",
        ])
        .unwrap();
    f.leaf
        .ip(&[
            "nexthop",
            "add",
            "id",
            &leftover.to_string(),
            "group",
            &(GROUP_ID - 0x1_0000 + 1).to_string(),
            "proto",
            "76",
        ])
        .unwrap();
    let lqd = Lqd::start(&f.leaf, &config).unwrap();
    // Spines advertise entries for remote leaves L3 and L4; `drop_l4[k]` omits L4's entry.
    let drop_l4 = Arc::new(Mutex::new([false; 4]));
    let stop = Arc::new(AtomicBool::new(false));
    let (d, s) = (drop_l4.clone(), stop.clone());
    let name = f.spines.name().to_string();
    let sender = std::thread::spawn(move || {
        lq_tests::netns::enter_netns(&name).unwrap();
        let mut senders = spine_senders();
        let mut seq = 1000u16;
        while !s.load(Ordering::Relaxed) {
            seq = seq.wrapping_add(1);
            let drop = *d.lock().unwrap();
            for k in 0..4 {
                let mut entries = vec![entry(ip4(10, 0, 1, 3), 1, 237, 0)];
                if !drop[k] {
                    entries.push(entry(REMOTE, 2, 237, 0));
                }
                let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, k as u8 + 1, 2)), 52525);
                let _ = senders[k].send(to, &header(ip4(10, 0, 0, k as u8 + 1), seq), &entries);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
    wait_for("steady", &lqd, &f.leaf, &equal);
    // One group per remote node: L4's first (its destination comes first), then L3's.
    let group = |p: &str| lq_tests::fabric::route_group(&f.leaf, p);
    let t0 = std::time::Instant::now();
    while group("10.3.1.0/24").is_none() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(group("10.4.0.0/24"), Some(GROUP_ID));
    assert_eq!(group("10.4.1.0/24"), Some(GROUP_ID));
    assert_eq!(group("10.3.0.0/24"), Some(GROUP_ID + 1));
    assert_eq!(group("10.3.1.0/24"), Some(GROUP_ID + 1));
    let groups = f
        .leaf
        .ip(&["-j", "nexthop", "show", "protocol", "76"])
        .unwrap();
    let ids: Vec<u64> = serde_json::from_str::<serde_json::Value>(&groups)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["group"].is_array())
        .filter_map(|n| n["id"].as_u64())
        .collect();
    assert_eq!(
        ids,
        [GROUP_ID, GROUP_ID + 1],
        "the leftover group is gone: {groups}"
    );
    let w = lqd.show("weights").unwrap();
    assert_eq!(w["groups"].as_array().unwrap().len(), 2, "{w}");
    assert_eq!(
        lq_tests::daemon::weights_group(&w, "10.4.1.0/24").unwrap()["prefixes"],
        serde_json::json!(["10.4.0.0/24", "10.4.1.0/24"])
    );

    // Link flap on the leaf: up3 down -> member 3 leaves at once; up -> it returns.
    f.leaf.ip(&["link", "set", "up3", "down"]).unwrap();
    let t = wait_for("up3 down", &lqd, &f.leaf, &[(1, 255), (2, 255), (4, 255)]);
    eprintln!("local uplink down -> member left in {t:?}");
    f.leaf.ip(&["link", "set", "up3", "up"]).unwrap();
    wait_for("up3 up", &lqd, &f.leaf, &equal);

    // S2 stops advertising its link to L4 but keeps the one to L3: only L4's group loses S2.
    drop_l4.lock().unwrap()[1] = true;
    let t = wait_for(
        "S2's L4 entry aged out",
        &lqd,
        &f.leaf,
        &[(1, 255), (3, 255), (4, 255)],
    );
    eprintln!("one entry silent -> aged out of its destination in {t:?}");
    // Both of L4's destinations are in that group; L3's keep every spine: in the kernel,
    // and in `show weights` once the loop has published a snapshot taken after the flap
    // (clients read the latest published one: at most 100 builds' time old, which in a
    // debug build under load reached past this wait's 55 ms, and up3 was still down in
    // the snapshot read).
    assert_eq!(group("10.4.1.0/24"), Some(GROUP_ID));
    let all_four = [(1, 255), (2, 255), (3, 255), (4, 255)];
    assert!(
        lq_tests::fabric::forwards_as(&f.leaf, GROUP_ID + 1, &all_four),
        "{:?}",
        lq_tests::fabric::group_members(&f.leaf, GROUP_ID + 1)
    );
    let t = Instant::now();
    let l3_whole = |w: &serde_json::Value| {
        lq_tests::daemon::weights_group(w, "10.3.1.0/24").is_some_and(|l3| {
            l3["members"]
                .as_array()
                .is_some_and(|m| m.len() == 4 && m.iter().all(|m| m["computed-weight"] == 255))
        })
    };
    show_when(
        &lqd,
        "weights",
        "L3's group with all 4 members at kernel weight 255",
        Duration::from_secs(2),
        l3_whole,
    );
    eprintln!(
        "show weights agreed with the kernel after {:?}",
        t.elapsed()
    );
    // S2 itself stays active: one entry's silence is not the spine's. Polled: a stall of
    // this test's own sender thread (a CI run saw all four spines "stale", last seen
    // 37.7 ms ago) shows every spine stale for a moment, which is display only (6.5 fails
    // a spine after miss-count x T_notify; S2 keeps sending its L3 entry, so it is heard).
    show_when(
        &lqd,
        "neighbors",
        "S2 itself stays active (every spine active)",
        Duration::from_secs(1),
        |n| {
            n.as_array()
                .is_some_and(|a| a.iter().all(|x| x["state"] == "active"))
        },
    );
    drop_l4.lock().unwrap()[1] = false;
    wait_for("S2's L4 entry back", &lqd, &f.leaf, &equal);
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
}

/// Seed 003 section 4.1: a path is eligible only if confirmed healthy by the fast plane. A
/// spine that is alive but has not (yet) advertised the destination's remote node gets no
/// weight while the others have advertised it (it used to get local-only quality 255, more
/// than the confirmed spines). Section 6.5: once a spine has failed, `show paths` (pins) and
/// `show state` (YANG, validated by yanglint) show its entries as LQS 0 / CL 7, and `show
/// paths` keeps the last received values beside them.
#[test]
fn an_unconfirmed_spine_gets_no_weight_and_a_failed_spine_shows_lqs_0_cl_7() {
    require_root();
    let f = fabric();
    let lqd = Lqd::start(&f.leaf, &leaf_config()).unwrap();
    // Per spine: (advertises REMOTE, silent).
    let plan = Arc::new(Mutex::new([
        (true, false),
        (true, false),
        (true, false),
        (false, false),
    ]));
    let stop = Arc::new(AtomicBool::new(false));
    let (p, s) = (plan.clone(), stop.clone());
    let name = f.spines.name().to_string();
    let sender = std::thread::spawn(move || {
        lq_tests::netns::enter_netns(&name).unwrap();
        let mut senders = spine_senders();
        let mut seq = 2000u16;
        while !s.load(Ordering::Relaxed) {
            seq = seq.wrapping_add(1);
            let now = *p.lock().unwrap();
            for (k, &(advertise, silent)) in now.iter().enumerate() {
                if silent {
                    continue;
                }
                // Every spine is alive: it always advertises some other remote leaf.
                let mut entries = vec![entry(ip4(10, 0, 1, 3), 1, 250, 0)];
                if advertise {
                    entries.push(entry(REMOTE, 2, 200, 1));
                }
                let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, k as u8 + 1, 2)), 52525);
                let _ = senders[k].send(to, &header(ip4(10, 0, 0, k as u8 + 1), seq), &entries);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    // Spine 4 is alive but has not advertised 10.0.1.4: not a member.
    wait_for(
        "spine 4 unconfirmed",
        &lqd,
        &f.leaf,
        &[(1, 255), (2, 255), (3, 255)],
    );
    // It stays out (not a transient of the first steps).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        forwards_as(&f.leaf, &[(1, 255), (2, 255), (3, 255)]),
        "{:?}",
        group_weights(&f.leaf)
    );
    let w = lqd.show("weights").unwrap();
    let s4 = &w["groups"][0]["members"][3];
    assert_eq!(
        (s4["uplink"].as_u64(), s4["path-quality"].as_u64()),
        (Some(4), Some(0)),
        "{w}"
    );
    // Once it advertises 10.0.1.4 it is confirmed and joins on equal terms.
    plan.lock().unwrap()[3].0 = true;
    let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
    wait_for("spine 4 confirmed", &lqd, &f.leaf, &equal);

    // Spine 2 falls silent: after miss_count x T_notify it is failed.
    plan.lock().unwrap()[1].1 = true;
    wait_for(
        "spine 2 failed",
        &lqd,
        &f.leaf,
        &[(1, 255), (3, 255), (4, 255)],
    );
    let s2_entries = poll_until(
        "S2's 2 entries, none of them fresh",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let paths = lqd.show("paths").unwrap();
            let s2: Vec<serde_json::Value> = paths
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["spine-node-id"] == "10.0.0.2")
                .cloned()
                .collect();
            if s2.len() == 2 && s2.iter().all(|e| e["entry-state"] != "fresh") {
                Ok(s2)
            } else {
                Err(paths)
            }
        },
        |paths| format!("paths {paths}"),
    )
    .unwrap();
    for e in &s2_entries {
        assert_eq!(
            (e["lqs"].as_u64(), e["cl"].as_u64()),
            (Some(0), Some(7)),
            "{e}"
        );
        assert_eq!(e["entry-state"], "neighbor-failed", "{e}");
    }
    let to_r4 = s2_entries
        .iter()
        .find(|e| e["remote-node-id"] == "10.0.1.4")
        .unwrap();
    assert_eq!(
        (
            to_r4["received-lqs"].as_u64(),
            to_r4["received-cl"].as_u64()
        ),
        (Some(200), Some(1)),
        "{to_r4}"
    );
    // The healthy spines' entries are shown as received.
    let paths = lqd.show("paths").unwrap();
    let s1 = paths
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["spine-node-id"] == "10.0.0.1" && e["remote-node-id"] == "10.0.1.4")
        .unwrap();
    assert_eq!(
        (s1["lqs"].as_u64(), s1["cl"].as_u64()),
        (Some(200), Some(1)),
        "{s1}"
    );
    assert_eq!(s1["entry-state"], "fresh");
    // The human table flags them.
    let out = std::process::Command::new(lq_tests::daemon::lqd_bin().unwrap())
        .args(["show", "paths", "--pin-dir"])
        .arg(lqd.pin_dir())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(table.matches("neighbor-failed").count(), 2, "{table}");

    // The YANG view agrees, and is still valid ietf-lq-telemetry data.
    let state = lqd.show("state").unwrap();
    lq_tests::yanglint_data(&state).unwrap();
    let neighbors = state["ietf-lq-telemetry:lq-telemetry"]["neighbors"]["neighbor"]
        .as_array()
        .unwrap();
    let n2 = neighbors
        .iter()
        .find(|n| n["node-id"] == "10.0.0.2")
        .unwrap();
    assert_eq!(n2["state"], "failed", "{n2}");
    for e in n2["link-quality"].as_array().unwrap() {
        assert_eq!(
            (e["lqs"].as_u64(), e["cl"].as_u64()),
            (Some(0), Some(7)),
            "{n2}"
        );
    }
    let n1 = neighbors
        .iter()
        .find(|n| n["node-id"] == "10.0.0.1")
        .unwrap();
    assert!(
        n1["link-quality"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["lqs"] == 200 && e["cl"] == 1),
        "{n1}"
    );
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
}

/// `lqd show SHOW` once it satisfies `ok`, for at most `limit` (clients read the last
/// published snapshot, which may be a few steps old).
fn show_when(
    lqd: &Lqd,
    show: &str,
    what: &str,
    limit: Duration,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    poll_until(
        what,
        limit,
        Duration::from_millis(10),
        || {
            let v = lqd.show(show).unwrap();
            if ok(&v) { Ok(v) } else { Err(v) }
        },
        |v| format!("{show} {v}\nlqd log:\n{}", lqd.log_text()),
    )
    .unwrap()
}

/// `show weights` once it satisfies `ok`, for at most 5 s.
fn weights_when(
    lqd: &Lqd,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    show_when(lqd, "weights", what, Duration::from_secs(5), ok)
}

/// A resilient group of 8 buckets, 2 per member: S2's LQS from 237 to 220 changes its
/// computed weight but no member's bucket count. By default (`replace =
/// "forwarding-change"`, issue 41) lqd does not write it: the kernel keeps equal weights,
/// to the same buckets, and the change is counted as not written. With `replace =
/// "every-step"` (reloaded) the same kind of change is written and counted as moving no
/// bucket; a change that moves buckets is written either way, and the buckets it moved are
/// counted.
#[test]
fn a_change_that_moves_no_bucket_is_not_written_by_default() {
    require_root();
    let f = fabric();
    let spines = Spines::start(&f.spines);
    let cfg = leaf_config() + "\n[damping]\ngain = 1.0\n\n[nexthop-group]\nbuckets = 8\n";
    let lqd = Lqd::start(&f.leaf, &cfg).unwrap();
    let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
    wait_for("steady state", &lqd, &f.leaf, &equal);
    assert!(
        lqd.log_text()
            .contains("few resilient buckets for the members"),
        "{}",
        lqd.log_text()
    );
    let per_member = || lq_tests::fabric::group_buckets(&f.leaf, GROUP_ID);
    let two_each = [(1, 2), (2, 2), (3, 2), (4, 2)];
    // The kernel's weights as installed: 255 each when the first computation saw all four
    // spines, the buckets' weights (254 each) when lqd started before some of them were
    // heard and a later step moved buckets to them.
    let installed = group_weights(&f.leaf).unwrap();

    spines.set(1, Some(220));
    let w = weights_when(&lqd, "S2's lower weight computed and not written", |w| {
        w["bucket-neutral-skipped"].as_u64() >= Some(1)
            && w["groups"][0]["members"][1]["computed-weight"].as_u64() < Some(255)
    });
    let s2 = &w["groups"][0]["members"][1];
    assert_eq!(s2["kernel-weight"].as_u64(), Some(installed[1].1), "{w}");
    assert_eq!(w["bucket-neutral-replaces"], 0, "{w}");
    assert_eq!(group_weights(&f.leaf), Some(installed));
    // The kernel's buckets (the forwarding itself): two per member, as both weightings give.
    assert_eq!(per_member().as_deref(), Some(&two_each[..]));

    // Every step written: the way back (to 237, equal weights) is replaced, moving nothing.
    spines.set(1, Some(237));
    weights_when(&lqd, "back to equal", |w| {
        w["groups"][0]["members"][1]["computed-weight"] == 255
    });
    let text = std::fs::read_to_string(lqd.config_path()).unwrap() + "replace = \"every-step\"\n";
    lqd.reload(&text, "configuration reloaded").unwrap();
    spines.set(1, Some(220));
    let lowered = poll_until(
        "S2's weight below 255 written",
        Duration::from_secs(5),
        Duration::from_millis(10),
        || {
            let g = group_weights(&f.leaf).unwrap_or_default();
            // Below the others' (which may be the buckets' 254 until this write).
            if g.len() == 4 && g[1].1 < g[0].1 {
                Ok(g)
            } else {
                Err(g)
            }
        },
        |g| format!("group weights {g:?}"),
    )
    .unwrap();
    assert_eq!(
        [lowered[0], lowered[2], lowered[3]],
        [(1, 255), (3, 255), (4, 255)]
    );
    weights_when(&lqd, "a replace counted as moving no bucket", |w| {
        w["bucket-neutral-replaces"].as_u64() >= Some(1)
    });
    assert_eq!(per_member().as_deref(), Some(&two_each[..]));

    // S2 at LQS 30 moves buckets: written, and its buckets counted as moved.
    let text = std::fs::read_to_string(lqd.config_path())
        .unwrap()
        .replace("replace = \"every-step\"\n", "");
    lqd.reload(&text, "configuration reloaded").unwrap();
    spines.set(1, Some(30));
    wait_for(
        "congested",
        &lqd,
        &f.leaf,
        &[(1, 255), (2, 32), (3, 255), (4, 255)],
    );
    weights_when(&lqd, "the moved buckets counted", |w| {
        w["buckets-moved"].as_u64() >= Some(1)
    });
    // Every acknowledged replace has one cause, and only acknowledged ones count.
    let w = weights_when(&lqd, "the counters", |_| true);
    let causes: u64 = ["install", "members", "moves", "hold-expired", "every-step"]
        .iter()
        .map(|c| w["replace-causes"][*c].as_u64().unwrap())
        .sum();
    assert_eq!(Some(causes), w["group-replaces"].as_u64(), "{w}");
}

/// `[local-quality] source = "measured"` (seed 003 section 6.3: local_quality(S) from the
/// leaf's own uplinks): the leaf's uplink up1, shaped to 100 Mbit/s by tbf, is overloaded
/// by traffic the leaf itself sends; its Appendix A pipeline's LQS falls and the local-only
/// destination's group moves its weight to up2, then back once the load stops. With the
/// default source the same load changes nothing (local quality is link state only).
#[test]
fn a_congested_uplink_loses_weight_with_measured_local_quality() {
    require_root();
    const PREFIX: &str = "172.30.0.0/24";
    let run = |source: &str| -> (
        Vec<(u64, u64)>,
        serde_json::Value,
        serde_json::Value,
        String,
    ) {
        // The spines' namespace only terminates the links (and the load).
        let Fabric {
            leaf,
            spines: _spines,
        } = fabric_of(2);
        leaf.ip(&["link", "set", "up1", "txqueuelen", "1000"])
            .unwrap();
        leaf.exec(
            "tc",
            &[
                "qdisc", "add", "dev", "up1", "root", "tbf", "rate", "100mbit", "burst", "32kb",
                "latency", "20ms",
            ],
        )
        .unwrap();
        let mut cfg = String::from(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"up1\", \"up2\"]\n",
        );
        for k in 1..=2 {
            cfg.push_str(&format!(
                "\n[[uplink]]\nid = {k}\nspine = \"10.0.0.{k}\"\ninterface = \"up{k}\"\ngateway = \"10.1.{k}.1\"\n"
            ));
        }
        cfg.push_str(&format!(
            "\n[[destination]]\nprefix = \"{PREFIX}\"\n\n[local-quality]\nsource = \"{source}\"\n"
        ));
        let lqd = Lqd::start(&leaf, &cfg).unwrap();
        let group = poll_until(
            "the local-only group's route",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || lq_tests::fabric::route_group(&leaf, PREFIX).ok_or(()),
            |_| lqd.log_text(),
        )
        .unwrap();
        let weights = || lq_tests::fabric::group_members(&leaf, group);
        let idle = poll_until(
            "equal weights on idle uplinks",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || match weights() {
                Some(w) if w.len() == 2 && w[0].1 == w[1].1 => Ok(w),
                w => Err(w),
            },
            |w| format!("{w:?}\n{}", lqd.log_text()),
        )
        .unwrap();
        assert_eq!(idle.iter().map(|m| m.0).collect::<Vec<_>>(), [1, 2]);
        // Overload up1 from the leaf: eight sockets' send buffers exceed the tbf limit, so
        // its queue fills and tbf drops (U -> 1, D high, drops: Appendix A LQS near 0).
        let load = lq_tests::netns::UdpOverload::start(
            &leaf,
            "10.1.1.2:0".parse().unwrap(),
            "10.1.1.1:9".parse().unwrap(),
        );
        let loaded = if source == "measured" {
            poll_until(
                "up1's weight to fall below up2's",
                Duration::from_secs(10),
                Duration::from_millis(20),
                || match weights() {
                    Some(w) if w.len() == 2 && w[0].1 * 4 <= w[1].1 => Ok(w),
                    Some(w) if w.len() == 1 && w[0].0 == 2 => Ok(w),
                    w => Err(w),
                },
                |w| format!("{w:?}\n{:?}\n{}", lqd.show("weights").ok(), lqd.log_text()),
            )
            .unwrap()
        } else {
            // Long enough for a measured quality to have moved (it does within 100 ms).
            std::thread::sleep(Duration::from_secs(1));
            weights().unwrap()
        };
        // `show` answers from the last published snapshot, which may be one publish
        // interval behind the kernel (up to 100 x a snapshot's build time, milliseconds in
        // a debug build): under the load, read until it shows up1's measured quality.
        let (shown, uplinks) = poll_until(
            "show weights and show uplinks to catch up with the kernel",
            Duration::from_secs(5),
            Duration::from_millis(20),
            || {
                let views = (lqd.show("weights").unwrap(), lqd.show("uplinks").unwrap());
                let up1 = views.0["groups"][0]["members"]
                    .as_array()
                    .and_then(|m| m.iter().find(|m| m["uplink"] == 1))
                    .and_then(|m| m["local-quality"].as_u64());
                if source != "measured" || up1.is_none_or(|q| q <= 100) {
                    Ok(views)
                } else {
                    Err(format!("{views:?}"))
                }
            },
            |v| format!("{v}\n{}", lqd.log_text()),
        )
        .unwrap();
        load.stop().unwrap();
        if source == "measured" {
            // Recovery: the smoothed metrics decay back (alpha_fall) and the weights with
            // them, to within a unit (an LQS of 254 until the decayed metrics reach 0).
            poll_until(
                "equal weights again after the load",
                Duration::from_secs(10),
                Duration::from_millis(20),
                || match weights() {
                    Some(w) if w.len() == 2 && w[0].1.abs_diff(w[1].1) <= 2 => Ok(()),
                    w => Err(w),
                },
                |w| format!("{w:?}\n{}", lqd.log_text()),
            )
            .unwrap();
        }
        (loaded, shown, uplinks, lqd.log_text())
    };

    let (loaded, shown, uplinks, log) = run("measured");
    let members = shown["groups"][0]["members"].as_array().unwrap();
    let local = |id: u64| {
        members
            .iter()
            .find(|m| m["uplink"] == id)
            .and_then(|m| m["local-quality"].as_u64())
    };
    assert!(local(1).is_none_or(|q| q <= 100), "{shown}");
    assert!(local(2).is_some_and(|q| q >= 240), "{shown}");
    assert!(
        log.contains("local quality measured on the uplinks"),
        "{log}"
    );
    // `show uplinks`: what the weights use beside the pipeline it comes from.
    assert_eq!(uplinks["source"], "measured", "{uplinks}");
    let up = |id: u64| {
        uplinks["uplinks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["id"] == id)
            .unwrap_or_else(|| panic!("uplink {id} in {uplinks}"))
    };
    assert!(
        up(1)["oper-up"] == true && up(2)["oper-up"] == true,
        "{uplinks}"
    );
    assert!(
        up(1)["measured"]["raw"]["u"]
            .as_f64()
            .is_some_and(|u| u > 0.5),
        "{uplinks}"
    );
    assert!(
        up(1)["measured"]["lqs"].as_u64().is_some_and(|q| q <= 100),
        "{uplinks}"
    );
    assert!(
        up(2)["measured"]["lqs"].as_u64().is_some_and(|q| q >= 240),
        "{uplinks}"
    );
    for id in [1, 2] {
        assert_eq!(
            up(id)["local-quality"],
            up(id)["applied-quality"],
            "{uplinks}"
        );
    }
    eprintln!("measured: weights under load {loaded:?}");

    let (loaded, shown, uplinks, _) = run("link-state");
    assert!(
        loaded.len() == 2 && loaded[0].1 == loaded[1].1,
        "link state only: the load must not move the weights: {loaded:?} {shown}"
    );
    let members = shown["groups"][0]["members"].as_array().unwrap();
    assert!(members.iter().all(|m| m["local-quality"] == 255), "{shown}");
    assert_eq!(uplinks["source"], "link-state", "{uplinks}");
    assert!(
        uplinks["uplinks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["local-quality"] == 255
                && u.get("measured").is_none()
                && u.get("applied-quality").is_none()),
        "{uplinks}"
    );
}

/// The four spines advertising every 20 ms from a thread in `ns`, paced on absolute
/// deadlines (a late round does not delay the next) until `stop`: round `seq` sends spine
/// `k` (0..4) what `make(k, seq)` gives, to its leaf address 10.1.(k+1).2; `staggered`
/// spreads a round's four sends 5 ms apart (each spine's datagram a change event of its
/// own), otherwise they go together.
fn paced_spines(
    ns: &NetNs,
    stop: Arc<AtomicBool>,
    staggered: bool,
    make: impl Fn(u8, u16) -> (lq_common::wire::Header, lq_common::wire::Entry) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let name = ns.name().to_string();
    std::thread::spawn(move || {
        lq_tests::netns::enter_netns(&name).unwrap();
        let mut senders = spine_senders();
        let mut seq = 1u16;
        let mut next = Instant::now();
        let period = Duration::from_millis(20);
        while !stop.load(Ordering::Relaxed) {
            seq = seq.wrapping_add(1);
            for k in 0..4u8 {
                let (h, e) = make(k, seq);
                let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, k + 1, 2)), 52525);
                senders[usize::from(k)].send(to, &h, &[e]).unwrap();
                if staggered {
                    next += period / 4;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            }
            if !staggered {
                next += period;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        }
    })
}

/// Issue 37 item 2, seed 003 section 5.5 ("Receivers MUST NOT use them for forwarding
/// decisions"): spines whose advertisements carry absurd diagnostics (link capacity
/// 1 Mbit/s, a full queue, 100 % ECN and PFC, drops) change no weight, with either weight
/// function; the path capacities come from the slow plane (`[[path-capacity]]`, section 4.1)
/// and `lqd show weights` names their source. The table does hold the diagnostics (`show
/// paths`), so the test would see a receiver that read them.
#[test]
fn absurd_diagnostics_change_no_weight_and_capacity_comes_from_the_slow_plane() {
    require_root();
    for function in ["seed", "integral"] {
        let f = fabric();
        let diagnostics = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let d = diagnostics.clone();
            paced_spines(&f.spines, stop.clone(), false, move |k, seq| {
                let absurd = d.load(Ordering::Relaxed);
                let mut h = header(ip4(10, 0, 0, k + 1), seq);
                let mut e = entry(REMOTE, 1, 237, 0);
                // The big paths are the ones absurd diagnostics would sink.
                if absurd && k != 1 {
                    h.diagnostics = true;
                    e.diagnostics = Some(lq_common::wire::Diagnostics {
                        link_capacity: 0.001,
                        queue_depth: 255,
                        ecn_marking_rate: 31,
                        pfc_pause_fraction: 31,
                        drops_active: true,
                    });
                }
                (h, e)
            })
        };
        let mut config = leaf_config();
        config = config.replacen(
            "[receiver]",
            &format!("[damping]\nweight-function = \"{function}\"\n\n[receiver]"),
            1,
        );
        // Below the veths' 10 Gbit/s, which bounds every path (section 4.1's min).
        for (k, gbps) in [(1, 0.1), (2, 0.025), (3, 0.1), (4, 0.1)] {
            config.push_str(&format!(
                "\n[[path-capacity]]\nspine = \"10.0.0.{k}\"\nremote-node = \"10.0.1.4\"\ncapacity-gbps = {gbps}\n"
            ));
        }
        let lqd = Lqd::start(&f.leaf, &config).unwrap();
        // Section 4.1: capacity x quality, equal qualities: the capacity shares.
        let shares = [(1, 255), (2, 63), (3, 255), (4, 255)];
        wait_for(
            &format!("{function}: capacity shares"),
            &lqd,
            &f.leaf,
            &shares,
        );
        let w = lqd.show("weights").unwrap();
        let m = &w["groups"][0]["members"];
        for (k, gbps) in [(0, 0.1), (1, 0.025)] {
            assert_eq!(m[k]["capacity-source"], "config", "{w:#}");
            assert_eq!(m[k]["capacity-gbps"].as_f64(), Some(gbps), "{w:#}");
        }
        // The YANG state carries them in lq's augment, and yanglint accepts it.
        let state = lqd.show("state").unwrap();
        lq_tests::yanglint_data(&state).unwrap();
        let members = &state["ietf-lq-telemetry:lq-telemetry"]["lq-weighted-ecmp:weighted-ecmp"]["group"]
            [0]["member"];
        for (k, gbps) in [(0, "0.1"), (1, "0.025")] {
            assert_eq!(members[k]["capacity-source"], "config", "{state:#}");
            assert_eq!(members[k]["capacity"], gbps, "{state:#}");
        }
        diagnostics.store(true, Ordering::Relaxed);
        poll_until(
            "the table holds the absurd diagnostics",
            Duration::from_secs(5),
            Duration::from_millis(20),
            || {
                let p = lqd.show("paths").unwrap();
                let held = p.as_array().into_iter().flatten().any(|e| {
                    e["spine-node-id"] == "10.0.0.1"
                        && e["diagnostics"]["link-capacity"] == "0.001"
                        && e["diagnostics"]["queue-depth"] == 255
                });
                if held { Ok(()) } else { Err(p) }
            },
            |p| format!("paths: {p:#}"),
        )
        .unwrap();
        // Two seconds (100 advertisements per spine, many integral steps): not one move.
        // The kernel holds what forwards as `shares` (issue 41: not necessarily those
        // integers), and keeps it. A window in which lqd declared a spine failed is not
        // evidence either way (the test's sender thread stalled past 3 x T_notify on a
        // loaded machine, section 6.5 did its job): it is run again, at most 4 times.
        for attempt in 1.. {
            wait_for(&format!("{function}: shares again"), &lqd, &f.leaf, &shares);
            let failed_before = lqd.log_text().matches("LQ neighbor failed").count();
            let installed = group_weights(&f.leaf);
            let until = Instant::now() + Duration::from_secs(2);
            let mut moved = None;
            while moved.is_none() && Instant::now() < until {
                let now = group_weights(&f.leaf);
                if now != installed {
                    moved = Some(now);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let Some(now) = moved else { break };
            let log = lqd.log_text();
            let stalled = log.matches("LQ neighbor failed").count() > failed_before;
            assert!(
                stalled && attempt < 4,
                "{function}: diagnostics moved a weight: {installed:?} -> {now:?}\n{log}"
            );
            eprintln!("{function}: a spine was declared failed in window {attempt}; again");
        }
        stop.store(true, Ordering::Relaxed);
        sender.join().unwrap();
    }
}

/// `[damping] gray-failure-prune` (an opt-in departure from seed 003 section 6.3,
/// docs/weights.md "Gray failures"): S2 reports loss (CL 7) on its link to the remote node
/// while 99 of its 100 Gbit/s are available (LQS 25, Appendix A.4 with X = 1), S3 reports
/// loss at 99 % utilisation (LQS 2). With the prune the failing S2 leaves the group and the
/// congested S3 stays; without it (lqd's default, 6.3 as written) both stay. The views say
/// why, the YANG state carries it (yanglint), and S2 is back once its loss ends.
#[test]
fn a_lossy_idle_path_is_pruned_only_with_the_gray_failure_prune() {
    require_root();
    for prune in [false, true] {
        let f = fabric();
        // Per spine: (LQS, CL, available Gbit/s).
        let healthy = (237u8, 0u8, 90.0f32);
        let spines = Arc::new(Mutex::new([healthy; 4]));
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let st = spines.clone();
            paced_spines(&f.spines, stop.clone(), false, move |k, seq| {
                let (lqs, cl, available) = st.lock().unwrap()[usize::from(k)];
                let mut e = entry(REMOTE, 1, lqs, cl);
                e.available_bandwidth = available;
                (header(ip4(10, 0, 0, k + 1), seq), e)
            })
        };
        let mut config = leaf_config();
        if prune {
            config = config.replacen(
                "[receiver]",
                "[damping]\ngray-failure-prune = true\n\n[receiver]",
                1,
            );
        }
        // The slow plane's capacity of every path: 100 Gbit/s (below the veths' speed).
        for k in 1..=4 {
            config.push_str(&format!(
                "\n[[path-capacity]]\nspine = \"10.0.0.{k}\"\nremote-node = \"10.0.1.4\"\ncapacity-gbps = 100\n"
            ));
        }
        let lqd = Lqd::start(&f.leaf, &config).unwrap();
        let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
        wait_for(&format!("prune {prune}: equal"), &lqd, &f.leaf, &equal);
        {
            let mut s = spines.lock().unwrap();
            s[1] = (25, 7, 99.0);
            s[2] = (2, 7, 1.0);
        }
        if prune {
            // S2 out at once (6.4: a transition to 0), S3 kept at its small share.
            poll_until(
                "S2 leaves the group, S3 stays",
                Duration::from_secs(5),
                Duration::from_millis(10),
                || match group_weights(&f.leaf) {
                    Some(w) if w.iter().all(|&(m, _)| m != 2) && w.iter().any(|&(m, _)| m == 3) => {
                        Ok(())
                    }
                    got => Err(got),
                },
                |got| format!("group {got:?}\n{}", lqd.log_text()),
            )
            .unwrap();
            let w = lqd.show("weights").unwrap();
            let m = &w["groups"][0]["members"];
            assert_eq!(m[1]["gray-failure"], true, "{w:#}");
            assert_eq!(m[1]["path-quality"], 0, "{w:#}");
            assert_eq!(m[1]["remote-lqs"], 25, "{w:#}");
            assert_eq!(m[2]["gray-failure"], false, "{w:#}");
            assert_eq!(m[2]["path-quality"], 2, "{w:#}");
            assert!(w["gray-failure-prunes"].as_u64() >= Some(1), "{w:#}");
            let log = lqd.log_text();
            assert!(
                log.contains("gray failure: pruned uplink 2 (spine 10.0.0.2)"),
                "{log}"
            );
            let state = lqd.show("state").unwrap();
            lq_tests::yanglint_data(&state).unwrap();
            let members = &state["ietf-lq-telemetry:lq-telemetry"]["lq-weighted-ecmp:weighted-ecmp"]
                ["group"][0]["member"];
            assert_eq!(members[1]["gray-failure"], true, "{state:#}");
            assert_eq!(members[2].get("gray-failure"), None, "{state:#}");
            // The explanation names the departure.
            let out = std::process::Command::new(lq_tests::daemon::lqd_bin().unwrap())
                .args([
                    "show",
                    "weights",
                    "--instance",
                    &lqd.instance,
                    "--explain",
                    "10.4.0.9",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("gray failure"), "{text}");
            // The loss ends: S2 is back.
            spines.lock().unwrap()[1] = healthy;
            poll_until(
                "S2 back in the group",
                Duration::from_secs(5),
                Duration::from_millis(10),
                || match group_weights(&f.leaf) {
                    Some(w) if w.iter().any(|&(m, _)| m == 2) => Ok(()),
                    got => Err(got),
                },
                |got| format!("group {got:?}\n{}", lqd.log_text()),
            )
            .unwrap();
            assert!(lqd.log_text().contains("gray failure over: uplink 2"));
        } else {
            // 6.3 as written: S2 and S3 both keep members (targets 25 and 2 of 762 x 100
            // Gbit/s): after two seconds, every member is still in the group.
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                let w = group_weights(&f.leaf).unwrap_or_default();
                assert!(
                    [1, 2, 3, 4].iter().all(|k| w.iter().any(|&(m, _)| m == *k)),
                    "without the prune a member left: {w:?}\n{}",
                    lqd.log_text()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let w = lqd.show("weights").unwrap();
            assert_eq!(w["groups"][0]["members"][1]["path-quality"], 25, "{w:#}");
            assert_eq!(w["groups"][0]["members"][1]["gray-failure"], false, "{w:#}");
            assert_eq!(w["gray-failure-prunes"], 0, "{w:#}");
        }
        stop.store(true, Ordering::Relaxed);
        sender.join().unwrap();
    }
}

/// Issue 41: a group whose entries move with every advertisement is computed when its
/// target can be applied, once per T_reweight (seed 003 section 6.4), not at every step
/// the advertisements wake; a path quality going to 0 is applied at once all the same
/// (6.4's exception). The spines advertise 5 ms apart (lqd's least interval between steps
/// woken by change events), each with a new LQS every round.
#[test]
fn a_group_is_computed_once_per_t_reweight_and_a_path_to_0_at_once() {
    require_root();
    let f = fabric();
    let s2_zero = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let s2_zero = s2_zero.clone();
        paced_spines(&f.spines, stop.clone(), true, move |k, seq| {
            // Noise of +-5 around 200, new every round: below CHANGE_THRESHOLD, yet every
            // entry changes.
            let noise = (i32::from(seq) * 7 + i32::from(k) * 3) % 11 - 5;
            let lqs = if k == 1 && s2_zero.load(Ordering::Relaxed) {
                0
            } else {
                (200 + noise) as u8
            };
            (header(ip4(10, 0, 0, k + 1), seq), entry(REMOTE, 1, lqs, 0))
        })
    };
    let lqd = Lqd::start(&f.leaf, &leaf_config()).unwrap();
    poll_until(
        "the group with its four members",
        Duration::from_secs(10),
        Duration::from_millis(10),
        || match group_weights(&f.leaf) {
            Some(m) if m.len() == 4 => Ok(()),
            got => Err(got),
        },
        |got| format!("group {got:?}\nlqd log:\n{}", lqd.log_text()),
    )
    .unwrap();
    let counts = || {
        let w = lqd.show("weights").unwrap();
        let n = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("{k} in {w}"));
        (
            n("group-computations"),
            n("group-computations-deferred"),
            w["groups"].as_array().map_or(0, Vec::len) as u64,
        )
    };
    let (c0, d0, groups) = counts();
    assert_eq!(groups, 1);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let (c1, d1, _) = counts();
    let secs = t0.elapsed().as_secs_f64();
    let computed_per_s = (c1 - c0) as f64 / secs;
    let waited_per_s = (d1 - d0) as f64 / secs;
    eprintln!("{computed_per_s:.1} computations a second, {waited_per_s:.1} waits a second");
    // One per T_reweight (50 a second) and the full update once a second; a computation at
    // every step would be about 200 a second (a step per spine's advertisement).
    assert!(
        computed_per_s <= 70.0 && waited_per_s > 0.0,
        "{computed_per_s:.1} computations and {waited_per_s:.1} waits a second\nlqd log:\n{}",
        lqd.log_text()
    );
    // S2's path to 0: out of the group at once, not at a later boundary.
    s2_zero.store(true, Ordering::Relaxed);
    let start = Instant::now();
    poll_until(
        "S2 out of the group",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || match group_weights(&f.leaf) {
            Some(m) if m.len() == 3 && m.iter().all(|(u, _)| *u != 2) => Ok(()),
            got => Err(got),
        },
        |got| format!("group {got:?}\nlqd log:\n{}", lqd.log_text()),
    )
    .unwrap();
    eprintln!("S2 to LQS 0 -> out of the group in {:?}", start.elapsed());
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
}
