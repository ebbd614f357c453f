//! `bench_slow_plane`: how fast lqd's slow plane follows a BGP route change (seed 003
//! section 4.1; issue 16 item 5).
//!
//! Metric (one `LQ-METRIC` line, see `xtask/src/bench.rs`): `slow_plane_follow_ms`, p99
//! over 200 changes. A real `lqd` with `[slow-plane]` runs in a namespace with two uplinks
//! (veth pairs). The program plays zebra: it replaces a `proto bgp` route of one prefix
//! over rtnetlink, alternating between two next hops (both uplinks) and one (uplink 1).
//! Latency: CLOCK_MONOTONIC just before sending the route replace to CLOCK_MONOTONIC just
//! after receiving the RTM_NEWNEXTHOP notification of lq's group with exactly the new
//! members, on a socket in the namespace subscribed to the route and nexthop groups; it must
//! be the group lq's route already names (one replace in place, no route churn). A change
//! not reflected within 1 s counts as 1 s (every trial counts).
//!
//! Second metric, `capacity_follow_ms` (issue 37: the slow plane's capacity, seed 003
//! section 4.1), p99 over 60 changes: the program also plays bgpd's BMP client
//! (`[slow-plane.bmp]`): route monitoring of the same prefix from both next hops, each with
//! a BGP Link Bandwidth community (RFC 10005), uplink 1's at 100 Mbit/s, uplink 2's
//! alternating between 100 and 25 Mbit/s. Latency: just before the BMP message is written
//! to just after the RTM_NEWNEXTHOP of lq's group whose uplink-2 weight moved the way the
//! new capacity says (the first damped step, 6.4); 1 s counts as 1 s.
//!
//! Everything runs inside a namespace this program creates; `NetNs` deletes it on drop and
//! `Lqd` stops the daemon and removes its pins.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr},
    os::fd::AsRawFd,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use lq_tests::{bench::Trials, daemon::Lqd, netns::NetNs, require_root};
use lq_user::{
    roles::load_balancer::slow_plane::RouteEvent,
    sys::netlink::{
        Rtnl, ifindex,
        route::{Hop, encode_route_with_hops},
        route_monitor::RouteMonitor,
    },
};

const ID_BASE: u32 = 0x4c00_0000;
const TRIALS: usize = 200;
const TIMEOUT_MS: f64 = 1000.0;

const CONFIG: &str = r#"
[lq-telemetry]
enabled = true
role = "load-balancer"
# [slow-plane.bmp] matches origin ASes against AS-qualified entries (seed 003 section 6.2).
as-qualified = true
local-as = 65100

[receiver]
interfaces = ["up1", "up2"]

[[uplink]]
id = 1
spine = "10.0.0.1"
spine-as = 65001
interface = "up1"
gateway = "10.1.1.1"

[[uplink]]
id = 2
spine = "10.0.0.2"
spine-as = 65002
interface = "up2"
gateway = "10.1.2.1"

[slow-plane]

# The prefix's remote node (6.1): the Link Bandwidth of its routes is that path's capacity.
[[slow-plane.map]]
prefix = "10.50.0.0/16"
remote-node = "10.0.1.9"
remote-as = 65109

[slow-plane.bmp]
listen = "127.0.0.1:11019"
"#;

const CAPACITY_TRIALS: usize = 60;

fn main() -> ExitCode {
    require_root();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_slow_plane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// RTM_NEWROUTE replace of `10.50.0.0/24 proto bgp metric 20` over `hops`, as zebra would
/// install it without nexthop objects.
fn bgp_route(hops: &[Hop], seq: u32) -> Vec<u8> {
    encode_route_with_hops(
        (IpAddr::V4(Ipv4Addr::new(10, 50, 0, 0)), 24),
        254,
        186,
        20,
        hops,
        seq,
    )
}

fn hop(oif: u32, gateway: [u8; 4]) -> Hop {
    Hop {
        oif,
        gateway: Some(IpAddr::V4(Ipv4Addr::from(gateway))),
    }
}

/// Reads notifications until lq's group (proto lq, in the slow-plane range; `id` when
/// given) has exactly `want` as uplinks; returns its id, `None` after `timeout`.
fn wait_group(
    mon: &mut RouteMonitor,
    id: Option<u32>,
    want: &BTreeSet<u32>,
    timeout: Duration,
) -> Result<Option<u32>> {
    let deadline = Instant::now() + timeout;
    loop {
        for e in mon.drain()? {
            if let RouteEvent::NewNexthop(nh) = e
                && nh.protocol == 76
                && nh
                    .id
                    .is_some_and(|i| i >= ID_BASE + 0x1_8000 && id.is_none_or(|id| i == id))
                && !nh.group.is_empty()
            {
                let got: BTreeSet<u32> = nh.group.iter().map(|m| m.id - ID_BASE).collect();
                if &got == want {
                    return Ok(nh.id);
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let mut pfd = libc::pollfd {
            fd: mon.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
    }
}

fn run() -> Result<()> {
    let ns = NetNs::new("bsp")?;
    for k in 1..=2 {
        let (up, peer) = (format!("up{k}"), format!("p{k}"));
        ns.ip(&["link", "add", &up, "type", "veth", "peer", "name", &peer])?;
        ns.ip(&["addr", "add", &format!("10.1.{k}.2/24"), "dev", &up])?;
        ns.ip(&["addr", "add", &format!("10.1.{k}.1/24"), "dev", &peer])?;
        ns.ip(&["link", "set", &up, "up"])?;
        ns.ip(&["link", "set", &peer, "up"])?;
    }
    let (oif1, oif2) =
        ns.run_in(|| Ok::<_, anyhow::Error>((ifindex("up1")?, ifindex("up2")?)))??;
    let two = [hop(oif1, [10, 1, 1, 1]), hop(oif2, [10, 1, 2, 1])];
    let one = [hop(oif1, [10, 1, 1, 1])];
    let mut rtnl = ns.run_in(Rtnl::open)??;
    let mut mon = ns.run_in(RouteMonitor::open)??;
    mon.dump()?;
    rtnl.request("bgp route", |seq| bgp_route(&two, seq))?;
    let _lqd = Lqd::start(&ns, CONFIG)?;
    // The prefix's group: every change below must reach this same group (its members
    // replaced in place, lq's route untouched), not a new group and a route change.
    let Some(group) = wait_group(&mut mon, None, &[1, 2].into(), Duration::from_secs(10))? else {
        bail!("lqd never steered the route");
    };
    let mut trials = Trials::default();
    // Per direction too (a path withdrawn, a path back), on stderr only.
    let mut by_direction = [Trials::default(), Trials::default()];
    for i in 0..TRIALS {
        let (hops, want): (&[Hop], BTreeSet<u32>) = if i % 2 == 0 {
            (&one, [1].into())
        } else {
            (&two, [1, 2].into())
        };
        // Let lqd settle (damping steps of the last change) so each trial is one change.
        std::thread::sleep(Duration::from_millis(30));
        let _ = mon.drain()?;
        let t0 = Instant::now();
        rtnl.request("bgp route", |seq| bgp_route(hops, seq))
            .context("route replace")?;
        if wait_group(
            &mut mon,
            Some(group),
            &want,
            Duration::from_millis(TIMEOUT_MS as u64),
        )?
        .is_some()
        {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            trials.done(ms);
            by_direction[i % 2].done(ms);
        } else {
            trials.timed_out(TIMEOUT_MS);
            by_direction[i % 2].timed_out(TIMEOUT_MS);
        }
    }
    eprintln!("slow_plane_follow_ms: {}", trials.summary());
    eprintln!("  path withdrawn: {}", by_direction[0].summary());
    eprintln!("  path back:      {}", by_direction[1].summary());
    lq_tests::bench::emit(
        "slow_plane_follow_ms",
        trials.percentile(99.0),
        "ms",
        Some("<= 10"),
        None,
    );
    capacity_follow(&ns, &mut mon, group)
}

/// The group's kernel weight of uplink 2, from a notification of group `id`.
fn uplink2_weight(e: &RouteEvent, id: u32) -> Option<u32> {
    match e {
        RouteEvent::NewNexthop(nh) if nh.id == Some(id) && nh.protocol == 76 => nh
            .group
            .iter()
            .find(|m| m.id == ID_BASE + 2)
            .map(|m| m.weight),
        _ => None,
    }
}

/// `capacity_follow_ms` (see the module documentation); the route has both next hops.
fn capacity_follow(ns: &NetNs, mon: &mut RouteMonitor, group: u32) -> Result<()> {
    use lq_user::core::bmp::fixtures::{
        bmp, ext_communities, initiation, link_bandwidth_community, update_with,
    };
    use std::io::Write as _;
    let announce = |peer: [u8; 4], peer_as: u32, mbit: f32| {
        let lb = link_bandwidth_community(true, peer_as as u16, mbit * 125_000.0);
        bmp(
            0,
            peer,
            peer_as,
            &update_with(
                &[peer_as, 65109],
                peer,
                &[([10, 50, 0, 0], 24)],
                &[],
                &ext_communities(&[lb]),
            ),
        )
    };
    // lqd's station may take a moment to listen after the start.
    let mut bmp_client = None;
    for _ in 0..100 {
        match ns.run_in(|| std::net::TcpStream::connect("127.0.0.1:11019"))? {
            Ok(c) => {
                bmp_client = Some(c);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let mut c = bmp_client.context("lqd's BMP station did not accept a connection")?;
    c.set_nodelay(true)?;
    c.write_all(&initiation("bench"))?;
    c.write_all(&announce([10, 1, 1, 1], 65001, 100.0))?;
    c.write_all(&announce([10, 1, 2, 1], 65002, 100.0))?;
    let mut weight2: Option<u32> = None;
    let settle = |mon: &mut RouteMonitor, w: &mut Option<u32>| -> Result<()> {
        // Damping's steps of the last change (g = 0.5 every 20 ms) are over in 300 ms.
        std::thread::sleep(Duration::from_millis(300));
        for e in mon.drain()? {
            if let Some(x) = uplink2_weight(&e, group) {
                *w = Some(x);
            }
        }
        Ok(())
    };
    settle(mon, &mut weight2)?;
    let mut trials = Trials::default();
    for i in 0..CAPACITY_TRIALS {
        let cut = i % 2 == 0;
        settle(mon, &mut weight2)?;
        let before = weight2.unwrap_or(255);
        let msg = announce([10, 1, 2, 1], 65002, if cut { 25.0 } else { 100.0 });
        let t0 = Instant::now();
        c.write_all(&msg)?;
        let deadline = t0 + Duration::from_millis(TIMEOUT_MS as u64);
        let mut seen = None;
        while seen.is_none() && Instant::now() < deadline {
            for e in mon.drain()? {
                if let Some(w) = uplink2_weight(&e, group) {
                    weight2 = Some(w);
                    if seen.is_none() && (if cut { w < before } else { w > before }) {
                        seen = Some(t0.elapsed());
                    }
                }
            }
            if seen.is_none() {
                let mut pfd = libc::pollfd {
                    fd: mon.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let left = deadline.saturating_duration_since(Instant::now());
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
            }
        }
        match seen {
            Some(d) => trials.done(d.as_secs_f64() * 1e3),
            None => trials.timed_out(TIMEOUT_MS),
        }
    }
    eprintln!("capacity_follow_ms: {}", trials.summary());
    lq_tests::bench::emit(
        "capacity_follow_ms",
        trials.percentile(99.0),
        "ms",
        Some("<= 50"),
        None,
    );
    Ok(())
}
