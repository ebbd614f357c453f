//! The fabric builder's BGP variant end to end (what `cargo xtask demo --bgp` runs), short
//! enough for CI: a 3-stage CLOS of 2 spines and 2 leaves with hosts, FRR (zebra + bgpd)
//! on every router with eBGP per RFC 7938, the real `lqd` helper role on the spines
//! (AS-qualified advertisements) and load-balancers on the leaves with `[slow-plane]` and a
//! BMP station, and no `[[destination]]` anywhere (issue 16).
//!
//! Judged by the kernel (`ip -j route`, `ip -j nexthop`), FRR (vtysh) and UDP between the
//! hosts: L1 steers BGP's route to H2's prefix in table 76 with the remote leaf learned
//! over BMP; when S2 stops announcing that prefix (its session to L2 shut), lq's group
//! loses S2 with BGP's route; restored, both come back; lqd stopped, FRR's route forwards.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    net::{SocketAddr, UdpSocket},
    time::{Duration, Instant},
};

use lq_tests::{
    daemon::lqd_bin,
    fabric::{
        Clos3, Daemon, LQ_TABLE, LbOptions, Routing, Shaping, group_members, log_tails,
        route_group_in,
    },
    frr,
    poll::poll_until,
    require_root,
};

fn wait(what: &str, limit: Duration, mut ok: impl FnMut() -> bool, context: impl Fn() -> String) {
    let every = Duration::from_millis(50);
    let context = |()| format!("\n{}", context());
    poll_until(what, limit, every, || ok().then_some(()).ok_or(()), context).unwrap();
}

/// Members (uplink ids) of lq's group for `prefix` on L1, from the kernel.
fn lq_members(fab: &Clos3, prefix: &str) -> Option<Vec<u64>> {
    let l1 = &fab.leaves[0];
    let g = route_group_in(l1, prefix, Some(LQ_TABLE))?;
    Some(group_members(l1, g)?.into_iter().map(|m| m.0).collect())
}

/// A datagram from H1 reaches H2 through the fabric (up to three tries: the first may
/// wait for neighbour resolution).
struct Probe {
    tx: UdpSocket,
    rx: UdpSocket,
    n: u32,
}

impl Probe {
    fn new(fab: &Clos3) -> Self {
        let to = SocketAddr::new(Clos3::host_addr(2).into(), 40000);
        let rx = fab.hosts[1]
            .run_in(move || UdpSocket::bind(to).unwrap())
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let tx = fab.hosts[0]
            .run_in(|| UdpSocket::bind((Clos3::host_addr(1), 0)).unwrap())
            .unwrap();
        tx.connect(to).unwrap();
        Self { tx, rx, n: 0 }
    }

    fn delivers(&mut self) -> bool {
        for _ in 0..3 {
            self.n += 1;
            let token = self.n.to_be_bytes();
            let _ = self.tx.send(&token);
            let mut buf = [0u8; 16];
            while let Ok(n) = self.rx.recv(&mut buf) {
                if buf[..n] == token {
                    return true;
                }
            }
        }
        false
    }
}

#[test]
fn leaves_steer_bgp_routes_learned_over_bmp_with_real_helpers() {
    require_root();
    assert!(
        frr::available(),
        "FRR is not installed: run `cargo xtask setup` (installs frr)"
    );
    let fab = Clos3::build_routed(2, 3, Shaping::at(100), false, Routing::Bgp).unwrap();
    let bgp = fab.start_bgp(1).unwrap();
    let lqd = lqd_bin().unwrap();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lqf-test"));
    let o = LbOptions::default();
    let c = fab.leaf_config(1, &o, false);
    assert!(
        !c.contains("[[destination]]") && c.contains("[slow-plane.bmp]"),
        "{c}"
    );
    let (helpers, mut leaves) = fab
        .start_lqd(&lqd, "lqfb", &o, &dir)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let logs = |leaves: &[Daemon]| log_tails(helpers.iter().chain(leaves), 8);
    let prefix = Clos3::host_prefix(2);

    // lq's copy of BGP's route, over both spines, with L2 learned as the remote leaf from
    // the prefix's origin AS (BMP) and the AS-qualified entries of the real helpers.
    wait(
        "lq's 2-member group for H2's prefix in table 76",
        Duration::from_secs(20),
        || lq_members(&fab, &prefix) == Some(vec![1, 2]),
        || logs(&leaves),
    );
    let steered = || {
        leaves[0].query("weights").ok().and_then(|w| {
            w["slow-plane"]["steered"]
                .as_array()?
                .iter()
                .find(|d| d["prefix"] == prefix.as_str())
                .cloned()
        })
    };
    wait(
        "the NNH mapping of H2's prefix over BMP",
        Duration::from_secs(20),
        || steered().is_some_and(|d| d["mapping-source"] == "bmp"),
        || format!("{:?}\n{}", steered(), logs(&leaves)),
    );
    let d = steered().unwrap();
    assert_eq!(d["origin-as"], Clos3::leaf_as(2), "{d}");
    assert_eq!(
        d["remote"],
        format!("{}/{}", Clos3::leaf_as(2), Clos3::leaf_id(2)),
        "{d}"
    );
    let mut probe = Probe::new(&fab);
    if !probe.delivers() {
        let dump = |n: &lq_tests::netns::NetNs| {
            format!(
                "{}: {:?}\n{:?}\n{:?}",
                n.name(),
                n.ip(&["route", "show", "table", "all"]),
                n.ip(&["rule"]),
                n.ip(&["nexthop"])
            )
        };
        panic!(
            "H1's datagrams do not reach H2 through lq's group\n{}\n{}\n{}\n{}",
            dump(&fab.leaves[0]),
            dump(&fab.leaves[1]),
            dump(&fab.spines[0]),
            dump(&fab.hosts[0])
        );
    }
    let get = fab.leaves[0]
        .ip(&["route", "get", &Clos3::host_addr(2).to_string()])
        .unwrap();
    assert!(get.contains("table 76"), "L1 forwards by lq's copy: {get}");

    // S2 stops announcing H2's prefix: BGP's route on L1 and lq's group lose S2.
    let s2 = &bgp[1];
    let shut = |no: &str| {
        s2.vtysh(&[
            "configure terminal",
            &format!("router bgp {}", Clos3::spine_as(2)),
            &format!("{no}neighbor {} shutdown", Clos3::leaf_addr(2, 2)),
        ])
        .unwrap();
    };
    shut("");
    wait(
        "BGP's route on L1 without S2",
        Duration::from_secs(15),
        || frr::bgp_paths(&fab.leaves[0], &prefix) == 1,
        || logs(&leaves),
    );
    wait(
        "lq's group without S2",
        Duration::from_secs(2),
        || lq_members(&fab, &prefix) == Some(vec![1]),
        || format!("{:?}\n{}", lq_members(&fab, &prefix), logs(&leaves)),
    );
    assert!(probe.delivers(), "H1 reaches H2 over S1 alone");
    shut("no ");
    wait(
        "BGP's route on L1 over both spines again",
        Duration::from_secs(30),
        || frr::bgp_paths(&fab.leaves[0], &prefix) == 2,
        || logs(&leaves),
    );
    wait(
        "lq's group over both spines again",
        Duration::from_secs(5),
        || lq_members(&fab, &prefix) == Some(vec![1, 2]),
        || logs(&leaves),
    );

    // A crash and a restart with two remote leaves (two groups): the routes keep naming
    // their groups throughout, also while the BMP session is not back and the mapping not
    // known (each prefix held in its adopted group, not merged into one local-only group).
    let h3 = Clos3::host_prefix(3);
    wait(
        "lq's group for H3's prefix",
        Duration::from_secs(10),
        || lq_members(&fab, &h3) == Some(vec![1, 2]),
        || logs(&leaves),
    );
    let before: Vec<Option<u64>> = [&prefix, &h3]
        .iter()
        .map(|p| route_group_in(&fab.leaves[0], p, Some(LQ_TABLE)))
        .collect();
    assert!(before[0].is_some() && before[0] != before[1], "{before:?}");
    leaves[0].kill9();
    let mut restarted = Daemon::start(
        &lqd,
        &fab.leaves[0],
        &format!("{}r", leaves[0].instance),
        &fab.leaf_config(1, &o, false),
        &dir,
    )
    .unwrap();
    let mapped = |d: &Daemon| {
        d.query("weights").ok().is_some_and(|w| {
            w["slow-plane"]["steered"]
                .as_array()
                .is_some_and(|a| a.iter().filter(|x| x["mapping-source"] == "bmp").count() == 2)
        })
    };
    let start = Instant::now();
    let mut relearned: Option<Instant> = None;
    while relearned.is_none_or(|t| t.elapsed() < Duration::from_millis(500)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no BMP mapping after the restart\n{}",
            restarted.log_tail(20)
        );
        for (p, g) in [&prefix, &h3].iter().zip(&before) {
            let now = route_group_in(&fab.leaves[0], p, Some(LQ_TABLE));
            assert_eq!(
                now,
                *g,
                "{p}: the route named another group across the restart\n{}",
                restarted.log_tail(30)
            );
        }
        if relearned.is_none() && mapped(&restarted) {
            relearned = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    // lqd stopped: its copies go, FRR's own route forwards.
    restarted.stop();
    assert_eq!(
        route_group_in(&fab.leaves[0], &prefix, Some(LQ_TABLE)),
        None,
        "lq's copy removed on SIGTERM"
    );
    assert_eq!(frr::bgp_paths(&fab.leaves[0], &prefix), 2);
    assert!(probe.delivers(), "H1 reaches H2 by FRR's route");
    drop(leaves);
    drop(helpers);
    drop(bgp);
    let _ = std::fs::remove_dir_all(&dir);
}
