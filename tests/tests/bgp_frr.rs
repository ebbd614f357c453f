//! The slow plane with real FRR (seed 003 section 4.1): a small RFC 7938 CLOS, two spines
//! and two leaves each in its own AS, eBGP with multipath; leaf 1 runs lqd with
//! `[slow-plane]` and no `[[destination]]`. Judged by the kernel's own tables (`ip -j`)
//! and by ping over the fabric, FRR's state by vtysh.
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
    frr::{self, Frr, bgpd_conf, ip_json as json},
    netns::{NetNs, veth_pair},
    packet::{entry, header, ip4},
    poll::poll_until,
    require_root,
};
use serde_json::Value;

const ID_BASE: u64 = 0x4c00_0000;
const PREFIX: &str = "10.200.2.0/24";
const REMOTE: u32 = ip4(10, 0, 1, 2);

fn leaf_config() -> String {
    let mut c = String::from(
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"up1\", \"up2\"]\n",
    );
    for k in 1..=2 {
        c.push_str(&format!(
            "\n[[uplink]]\nid = {k}\nspine = \"10.0.0.{k}\"\ninterface = \"up{k}\"\ngateway = \"10.1.{k}.1\"\n"
        ));
    }
    c.push_str("\n[slow-plane]\n\n[[slow-plane.map]]\nprefix = \"10.200.2.0/24\"\nremote-node = \"10.0.1.2\"\n");
    c
}

/// lq's route in its table: (group id, member ids).
fn lq_group(ns: &NetNs) -> Option<(u64, Vec<u64>)> {
    let v = json(ns, &["route", "show", "table", "76", PREFIX]);
    let id = v[0]["nhid"].as_u64()?;
    Some((id, frr::nexthop_members(ns, id)))
}

/// How many next hops BGP's route to [`PREFIX`] has in the main table.
fn bgp_paths(ns: &NetNs) -> usize {
    frr::bgp_paths(ns, PREFIX)
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let limit = Duration::from_secs(secs);
    let every = Duration::from_millis(50);
    poll_until(
        what,
        limit,
        every,
        || f().then_some(()).ok_or(()),
        |()| String::new(),
    )
    .unwrap();
}

/// A datagram from leaf 1 (10.200.1.1) reaches leaf 2 (10.200.2.1) through the fabric.
struct Probe {
    tx: std::net::UdpSocket,
    rx: std::net::UdpSocket,
    n: u32,
}

impl Probe {
    fn new(l1: &NetNs, l2: &NetNs) -> Self {
        let rx = l2
            .run_in(|| std::net::UdpSocket::bind("10.200.2.1:40000").unwrap())
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let tx = l1
            .run_in(|| std::net::UdpSocket::bind("10.200.1.1:0").unwrap())
            .unwrap();
        Self { tx, rx, n: 0 }
    }

    fn delivers(&mut self) -> bool {
        self.n += 1;
        let token = self.n.to_be_bytes();
        if self.tx.send_to(&token, "10.200.2.1:40000").is_err() {
            return false;
        }
        let mut buf = [0u8; 16];
        while let Ok(n) = self.rx.recv(&mut buf) {
            if buf[..n] == token {
                return true;
            }
        }
        false
    }
}

fn uplinks(ids: &[u64]) -> Vec<u64> {
    let mut v: Vec<u64> = ids.iter().map(|i| i - ID_BASE).collect();
    v.sort_unstable();
    v
}

/// Where leaf 1's bgpd finds lqd's BMP station (leaf 1's own loopback).
const BMP_PORT: u16 = 11019;

/// The fabric of both tests: spines in AS 65001/65002, leaves in 65101/65102, FRR on every
/// node, BGP converged, and the spines advertising LQS for leaf 2 (seed 003 section 7) 20 ms
/// apart from threads that run until `stop`. With `qualified`, the advertisements are
/// AS-qualified (section 6.2: the entries carry remote-as 65102) and leaf 1's bgpd streams
/// its routes to a BMP station on 127.0.0.1:BMP_PORT (lqd's `[slow-plane.bmp]`).
struct Fabric {
    s1: NetNs,
    s2: NetNs,
    l1: NetNs,
    l2: NetNs,
    f_l1: Frr,
    f_l2: Frr,
    _f_s: [Frr; 2],
    probe: Probe,
    lqs: Arc<Mutex<[u8; 2]>>,
    stop: Arc<AtomicBool>,
    senders: Vec<std::thread::JoinHandle<()>>,
}

fn fabric(qualified: bool) -> Fabric {
    let s1 = NetNs::new("bs1").unwrap();
    let s2 = NetNs::new("bs2").unwrap();
    let l1 = NetNs::new("bl1").unwrap();
    let l2 = NetNs::new("bl2").unwrap();
    veth_pair(&l1, "up1", "10.1.1.2/24", &s1, "d1", "10.1.1.1/24").unwrap();
    veth_pair(&l1, "up2", "10.1.2.2/24", &s2, "d1", "10.1.2.1/24").unwrap();
    veth_pair(&l2, "up1", "10.2.1.2/24", &s1, "d2", "10.2.1.1/24").unwrap();
    veth_pair(&l2, "up2", "10.2.2.2/24", &s2, "d2", "10.2.2.1/24").unwrap();
    for ns in [&s1, &s2] {
        ns.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
            .unwrap();
    }
    l1.ip(&["addr", "add", "10.200.1.1/24", "dev", "lo"])
        .unwrap();
    l2.ip(&["addr", "add", "10.200.2.1/24", "dev", "lo"])
        .unwrap();
    let f_s1 = Frr::start(
        &s1,
        &bgpd_conf(
            65001,
            "10.0.0.1",
            &[("10.1.1.2", 65101), ("10.2.1.2", 65102)],
            &[],
        ),
    )
    .unwrap();
    let f_s2 = Frr::start(
        &s2,
        &bgpd_conf(
            65002,
            "10.0.0.2",
            &[("10.1.2.2", 65101), ("10.2.2.2", 65102)],
            &[],
        ),
    )
    .unwrap();
    let mut l1_conf = bgpd_conf(
        65101,
        "10.0.1.1",
        &[("10.1.1.1", 65001), ("10.1.2.1", 65002)],
        &["10.200.1.0/24"],
    );
    if qualified {
        l1_conf.push_str(&frr::bmp_target("127.0.0.1", BMP_PORT));
    }
    // L1's zebra with FRR's defaults (the other routers run `frr::ZEBRA_CONF`): its BGP
    // routes point at nexthop groups of its own (`nhid`), which lqd must follow as well as
    // inline next hops; and it re-installs groups lqd deletes, which lqd must never take
    // over.
    let f_l1 = Frr::start_with_zebra(&l1, &l1_conf, "").unwrap();
    let f_l2 = Frr::start(
        &l2,
        &bgpd_conf(
            65102,
            "10.0.1.2",
            &[("10.2.1.1", 65001), ("10.2.2.1", 65002)],
            &["10.200.2.0/24"],
        ),
    )
    .unwrap();
    wait("BGP multipath on leaf 1", 60, || bgp_paths(&l1) == 2);
    let mut probe = Probe::new(&l1, &l2);
    wait("the fabric forwards before lqd runs", 60, || {
        probe.delivers()
    });

    // The spines advertise LQS for the remote leaf (seed 003 section 7), 20 ms apart.
    let lqs = Arc::new(Mutex::new([255u8, 255u8]));
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for (k, ns) in [(0usize, &s1), (1, &s2)] {
        let (lqs, stop) = (lqs.clone(), stop.clone());
        senders.push(
            ns.run_in(move || {
                std::thread::spawn(move || {
                    let a = Ipv4Addr::new(10, 1, k as u8 + 1, 1);
                    let mut tx = Sender::bind(SocketAddr::new(IpAddr::V4(a), 0), 255).unwrap();
                    let to =
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, k as u8 + 1, 2)), 52525);
                    let mut seq = 1u16;
                    while !stop.load(Ordering::Relaxed) {
                        let q = lqs.lock().unwrap()[k];
                        let mut h = header(ip4(10, 0, 0, k as u8 + 1), seq);
                        let mut e = entry(REMOTE, 1, q, if q == 0 { 7 } else { 0 });
                        if qualified {
                            h.as_qualified = true;
                            h.node_as = 65001 + k as u32;
                            e.remote_as = 65102;
                        }
                        let _ = tx.send(to, &h, &[e]);
                        seq = seq.wrapping_add(1);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })
            })
            .unwrap(),
        );
    }

    Fabric {
        s1,
        s2,
        l1,
        l2,
        f_l1,
        f_l2,
        _f_s: [f_s1, f_s2],
        probe,
        lqs,
        stop,
        senders,
    }
}

#[test]
fn lqd_steers_bgp_routes_and_follows_withdrawals() {
    require_root();
    if !frr::available() {
        panic!("FRR is not installed: run `cargo xtask setup` (installs frr)");
    }
    let Fabric {
        s1: _s1,
        s2: _s2,
        l1,
        l2: _l2,
        f_l1,
        f_l2,
        mut probe,
        lqs,
        stop,
        senders,
        _f_s,
    } = fabric(false);

    let mut lqd = Lqd::start(&l1, &leaf_config()).unwrap();
    let log = |lqd: &Lqd| lqd.log_text();
    // 1. lq steers the BGP-learned prefix: its copy in table 76, both spines members.
    wait("lq's steered route", 20, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1, 2])
    });
    let (gid, _) = lq_group(&l1).unwrap();
    assert!(
        gid >= ID_BASE + 0x1_8000,
        "group {gid:#x} in the slow-plane range"
    );
    let got = json(&l1, &["route", "get", "10.200.2.1"]);
    assert_eq!(
        got[0]["table"], "76",
        "lookups reach lq's table first: {got}"
    );
    assert_eq!(bgp_paths(&l1), 2, "BGP's route stays installed beside lq's");
    let zebra = f_l1.vtysh(&["show ip route 10.200.2.0/24 json"]).unwrap();
    let zebra: Value = serde_json::from_str(&zebra).unwrap();
    assert_eq!(
        zebra[PREFIX][0]["installed"], true,
        "zebra still has BGP's route in the FIB: {zebra}"
    );
    assert!(probe.delivers(), "traffic forwards over lq's group");

    // 2. A spine that advertises LQS 0 leaves the group while BGP still has the path.
    lqs.lock().unwrap()[1] = 0;
    wait("spine 2 pruned on LQS 0", 10, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1])
    });
    assert_eq!(bgp_paths(&l1), 2, "BGP keeps both paths");
    lqs.lock().unwrap()[1] = 255;
    wait("spine 2 back", 10, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1, 2])
    });

    // 3. BGP withdraws the path through spine 1 (session shut): spine 1 leaves the group.
    f_l1.vtysh(&[
        "configure terminal",
        "router bgp 65101",
        "neighbor 10.1.1.1 shutdown",
    ])
    .unwrap();
    wait("BGP withdrew spine 1", 20, || bgp_paths(&l1) == 1);
    wait("lq followed the withdrawal", 5, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [2])
    });
    // Even with spine 1 advertising the best LQS, the slow plane does not permit it.
    assert!(probe.delivers());
    f_l1.vtysh(&[
        "configure terminal",
        "router bgp 65101",
        "no neighbor 10.1.1.1 shutdown",
    ])
    .unwrap();
    wait("BGP multipath again", 30, || bgp_paths(&l1) == 2);
    wait("lq follows the new path", 5, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1, 2])
    });

    // 4. lqd stopped: its copies go, forwarding is FRR's own.
    lqd.terminate();
    assert!(lq_group(&l1).is_none(), "lq's route removed on exit");
    assert_eq!(bgp_paths(&l1), 2);
    assert!(probe.delivers(), "FRR's routes forward without lqd");

    // 5. Restarted, then killed: the copy stays; restarted again, lqd adopts it.
    lqd.restart().unwrap();
    wait("lq's route back", 20, || lq_group(&l1).is_some());
    // L1's zebra (FRR's defaults) sent the groups lqd deleted on exit back down as its own
    // (`proto zebra`, same ids): lqd, started again, finds them in its id range, says so
    // with the remedy, and takes none of them over (below: its group is its own).
    wait("lqd reports zebra's copies of its groups", 10, || {
        log(&lqd).contains("written by another program")
    });
    wait("lqd show weights counts them", 10, || {
        lqd.show("weights").unwrap_or_default()["foreign-nexthop-writes"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    });
    let (gid, _) = lq_group(&l1).unwrap();
    assert!(
        l1.ip(&["nexthop", "show", "id", &gid.to_string()])
            .unwrap()
            .contains("proto 76"),
        "lq's group is lq's own object"
    );
    lqd.kill9();
    assert_eq!(
        lq_group(&l1).map(|g| g.0),
        Some(gid),
        "a killed lqd leaves its route"
    );
    assert!(probe.delivers());
    lqd.restart().unwrap();
    wait("adoption", 20, || {
        log(&lqd).contains("adopted lq's existing route and group")
    });
    assert_eq!(lq_group(&l1).map(|g| g.0), Some(gid), "same group adopted");

    // 6. BGP withdraws the prefix: lq's route goes with it.
    f_l2.vtysh(&[
        "configure terminal",
        "router bgp 65102",
        "address-family ipv4 unicast",
        "no network 10.200.2.0/24",
    ])
    .unwrap();
    wait("BGP withdrew the prefix", 20, || bgp_paths(&l1) == 0);
    wait("lq's route gone", 5, || lq_group(&l1).is_none());

    stop.store(true, Ordering::Relaxed);
    for s in senders {
        let _ = s.join();
    }
    drop(lqd);
}

/// Leaf 1 with no `[[slow-plane.map]]`: AS-qualified advertisements and a BMP station.
/// It is the operator's example examples/leaf-frr-bmp.toml, as it is (this test is what
/// keeps the example working).
fn bmp_leaf_config() -> String {
    let c = include_str!("../../examples/leaf-frr-bmp.toml").to_owned();
    assert!(
        c.contains(&format!("listen = \"127.0.0.1:{BMP_PORT}\"")),
        "the example's BMP station is the one FRR is pointed at here"
    );
    c
}

/// The slow plane's entry for PREFIX in `lqd show weights --json`.
fn steered(lqd: &Lqd) -> Value {
    let w = lqd.show("weights").unwrap_or_default();
    w["slow-plane"]["steered"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["prefix"] == PREFIX).cloned())
        .unwrap_or_default()
}

/// Seed 003 section 6.1 learned, not typed (issue 16): a leaf with no `[[slow-plane.map]]`
/// learns from its own bgpd over BMP (RFC 7854) that PREFIX originates in AS 65102 (leaf 2,
/// RFC 7938), takes the AS-qualified LQ entries of that AS as the prefix's remote leaf, and
/// so prunes a spine that advertises LQS 0 for it. Without the mapping the destination has
/// local-only quality and keeps both spines.
#[test]
fn a_leaf_learns_the_nnh_mapping_over_bmp_from_frr() {
    require_root();
    if !frr::available() {
        panic!("FRR is not installed: run `cargo xtask setup` (installs frr)");
    }
    let Fabric {
        s1: _s1,
        s2: _s2,
        l1,
        l2: _l2,
        f_l1,
        f_l2: _f_l2,
        probe: _probe,
        lqs,
        stop,
        senders,
        _f_s,
    } = fabric(true);

    // FRR's own view, the judge of what BMP must carry: the prefix's AS paths end in 65102.
    let bgp: Value = serde_json::from_str(
        &f_l1
            .vtysh(&["show bgp ipv4 unicast 10.200.2.0/24 json"])
            .unwrap(),
    )
    .unwrap();
    let paths = bgp["paths"].as_array().cloned().unwrap_or_default();
    assert_eq!(paths.len(), 2, "{bgp}");
    for p in &paths {
        let path = p["aspath"]["string"].as_str().unwrap_or_default();
        assert!(path.ends_with("65102"), "AS path {path:?}");
    }

    let mut lqd = Lqd::start(&l1, &bmp_leaf_config()).unwrap();
    wait("the mapping learned over BMP", 30, || {
        let d = steered(&lqd);
        d["mapping-source"] == "bmp" && d["origin-as"] == 65102 && d["remote"] == "65102/10.0.1.2"
    });
    wait("lq's steered route with both spines", 20, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1, 2])
    });
    // The group's quality comes from the remote leaf's entries (section 6.3), not local-only.
    wait("remote LQS in the weights", 10, || {
        let w = lqd.show("weights").unwrap_or_default();
        lq_tests::daemon::weights_group(&w, PREFIX).is_some_and(|d| {
            d["members"]
                .as_array()
                .is_some_and(|m| m.len() == 2 && m.iter().all(|m| m["remote-lqs"] == 255))
        })
    });

    // Spine 2 advertises LQS 0 for leaf 2: only the learned mapping makes that count.
    lqs.lock().unwrap()[1] = 0;
    wait("spine 2 pruned through the learned mapping", 10, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1])
    });
    assert_eq!(bgp_paths(&l1), 2, "BGP keeps both paths");
    lqs.lock().unwrap()[1] = 255;
    wait("spine 2 back", 10, || {
        lq_group(&l1).is_some_and(|(_, m)| uplinks(&m) == [1, 2])
    });

    // A crash and a restart: lqd adopts its route and group, and the route names the same
    // group throughout, also while bgpd's BMP session reconnects and the mapping is not
    // known yet (the destination is held in its adopted group instead of joining the
    // local-only one), so no flow moves.
    let (gid, _) = lq_group(&l1).expect("lq's route");
    lqd.kill9();
    lqd.restart().unwrap();
    let mut named = std::collections::BTreeSet::new();
    let start = Instant::now();
    let mut relearned: Option<Instant> = None;
    while relearned.is_none_or(|t| t.elapsed() < Duration::from_millis(500)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no BMP mapping after the restart: {}",
            steered(&lqd)
        );
        if let Some((id, _)) = lq_group(&l1) {
            named.insert(id);
        }
        if relearned.is_none() && steered(&lqd)["mapping-source"] == "bmp" {
            relearned = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        named,
        [gid].into(),
        "the route named only the adopted group across the restart"
    );
    assert_eq!(steered(&lqd)["remote"], "65102/10.0.1.2");

    let w = lqd.show("weights").unwrap();
    let bmp = &w["slow-plane"]["bmp"];
    assert_eq!(bmp["sessions"], 1, "{bmp}");
    assert_eq!(bmp["counters"]["bad-messages"], 0, "{bmp}");
    assert!(
        bmp["counters"]["route-monitoring"].as_u64() >= Some(2),
        "{bmp}"
    );
    assert!(
        bmp["peers"].as_u64() >= Some(2),
        "both spines monitored: {bmp}"
    );

    // bgpd stopped: the BMP session ends, its routes are forgotten (RFC 7854 section 3.3)
    // and the mapping with them; the kernel routes stay while zebra keeps them (graceful
    // or not, that is BGP's business), so only the mapping source is checked.
    drop(f_l1);
    wait("the BMP session ended", 20, || {
        lqd.show("weights").unwrap_or_default()["slow-plane"]["bmp"]["sessions"] == 0
    });

    stop.store(true, Ordering::Relaxed);
    for s in senders {
        let _ = s.join();
    }
    drop(lqd);
}
