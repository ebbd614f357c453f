//! `--bgp`, the last phase of a draw: a path withdrawn by BGP under load (issue 16; seed
//! 003 section 4.1: a path is eligible only while the slow plane permits it). S3 shuts its
//! BGP session to L4, so BGP withdraws S3's path to L4's hosts from L1; the LQ telemetry
//! of S3 still calls that path healthy (its link to L4 is up), so only the slow plane can
//! take S3 out of L1's group. A thread in L1's namespace polls, every ~1 ms, the kernel's
//! BGP route (main table), lq's route (table 76) and the octets L1 sends on its link to S3;
//! the goal is no data on that link later than 10 ms after L1's kernel BGP route lost S3.
//!
//! The load is light (24 flows paced at 2 Mbit/s, 48 Mbit/s in all) so that the tbf queue
//! on L1's uplink stays short and an octet counted at transmit was forwarded at most a
//! packet time earlier.

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use lq_tests::fabric::{Clos3, Daemon, flow_egress};
use lq_user::sys::netlink::{Rtnl, RtnlError, route::RouteMsg};
use serde_json::{Value, json};

use super::{
    Ctx, FlowSpec, lq_group, now_s, parse_prefix, poll_interruptible, sleep, spawn_flow,
    stop_daemon,
};

/// The spine whose path is withdrawn (1-based) and the leaf it stops reaching.
pub(super) const SPINE: usize = 3;
pub(super) const LEAF: usize = 4;
/// The light load.
pub(super) const FLOWS: u16 = 24;
pub(super) const PACING_BPS: u64 = 2_000_000;
const SPORT: u16 = 40000;
/// Octets in one poll interval that count as data (BGP keepalives are ~85 octets).
pub(super) const DATA_OCTETS: u64 = 1000;

/// What one withdrawal measured.
pub struct WithdrawResult {
    /// Flows of the load and how many of them the kernel sent via S3 before the withdrawal.
    flows: u16,
    flows_via_spine: u32,
    /// When the `neighbor shutdown` was issued (seconds since the demo's epoch).
    shut_s: f64,
    /// When L1's kernel BGP route lost S3: after the last read that still had it (`.0`,
    /// the earliest it can have happened) and no later than the first that did not (`.1`).
    bgp_s: Option<(f64, f64)>,
    /// The same for lq's route.
    lq_s: Option<(f64, f64)>,
    /// End of the last poll interval after the shutdown with data on L1's link to S3.
    last_data_s: Option<f64>,
    /// Polls and the largest gap between two of them (the measurement's resolution).
    polls: usize,
    max_gap_ms: f64,
    /// Whether BGP had all four paths again afterwards.
    restored: bool,
    /// Every poll after the shutdown where a route gained or lost S3, or data went out on
    /// its link: (ms since the shutdown, BGP's route has S3, lq's has S3, octets since the
    /// previous poll).
    events: Vec<(f64, bool, bool, u64)>,
}

impl WithdrawResult {
    /// Data on the withdrawn path after L1's kernel BGP route dropped it (0 when none).
    /// Both ends are taken against us: the data's interval counts at its end, BGP's
    /// change at the earliest it can have happened.
    pub fn withdrawn_path_traffic_ms(&self) -> Option<f64> {
        let (bgp, _) = self.bgp_s?;
        Some(self.last_data_s.map_or(0.0, |t| ((t - bgp) * 1e3).max(0.0)))
    }

    /// BGP's own convergence, from the shutdown to L1's kernel route without S3 (at most).
    pub fn bgp_convergence_ms(&self) -> Option<f64> {
        Some((self.bgp_s?.1 - self.shut_s) * 1e3)
    }

    /// lq's route without S3 after BGP's (at most: lq's latest against BGP's earliest).
    pub fn lq_follow_ms(&self) -> Option<f64> {
        Some((self.lq_s?.1 - self.bgp_s?.0) * 1e3)
    }

    pub fn json(&self) -> Value {
        json!({
            "withdrawn": format!("S{SPINE}'s path to L{LEAF}'s hosts (S{SPINE}: neighbor {} shutdown)", Clos3::leaf_addr(SPINE, LEAF)),
            "flows": self.flows, "flows_via_withdrawn_spine": self.flows_via_spine,
            "pacing_mbit": PACING_BPS / 1_000_000,
            "shutdown_at_s": self.shut_s,
            "bgp_route_without_spine_between_s": self.bgp_s.map(|(a, b)| [a, b]),
            "lq_route_without_spine_between_s": self.lq_s.map(|(a, b)| [a, b]),
            "last_data_on_spine_at_s": self.last_data_s,
            "bgp_convergence_ms": self.bgp_convergence_ms(),
            "lq_follow_after_bgp_ms": self.lq_follow_ms(),
            "withdrawn_path_traffic_ms": self.withdrawn_path_traffic_ms(),
            "polls": self.polls, "max_poll_gap_ms": self.max_gap_ms,
            "events_ms_bgp_lq_octets": self.events,
            "bgp_restored": self.restored,
        })
    }

    pub fn line(&self) -> String {
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
        format!(
            "BGP withdraws S{SPINE} ({} of {} flows on it): BGP converged in {}, lq followed {} later, data on the withdrawn path {} after BGP's route dropped it (poll gap max {:.1} ms)",
            self.flows_via_spine,
            self.flows,
            f(self.bgp_convergence_ms()),
            f(self.lq_follow_ms()),
            f(self.withdrawn_path_traffic_ms()),
            self.max_gap_ms
        )
    }
}

/// One poll: whether each route has a next hop out of `oif`, and `oif`'s transmitted
/// octets, each with the time it was read.
pub(super) struct Poll {
    pub(super) t_bgp: f64,
    pub(super) bgp: bool,
    pub(super) t_lq: f64,
    pub(super) lq: bool,
    pub(super) t_tx: f64,
    /// Octets L1 sent on its link to S`SPINE`.
    pub(super) tx: u64,
    /// Octets L1 sent on all its spine links (the same read).
    pub(super) tx_all: u64,
}

/// When a route lost S3 according to the polls (`read` gives a poll's read time and state):
/// (the last read with S3 before the first without, the first without), after `from`.
pub(super) fn change(
    polls: &[Poll],
    from: f64,
    read: impl Fn(&Poll) -> (f64, bool),
) -> Option<(f64, f64)> {
    polls.windows(2).find_map(|w| {
        let ((t0, had), (t1, has)) = (read(&w[0]), read(&w[1]));
        (t1 >= from && had && !has).then_some((t0.max(from), t1))
    })
}

/// Runs the phase: lqd started on L1 (steering BGP's route), the load, the withdrawal, the
/// restoration; lqd stopped again at the end.
pub fn run_withdraw(
    c: &Ctx,
    leaves: &mut [Option<Daemon>],
    draw: u32,
    run: u32,
) -> Result<WithdrawResult> {
    let l1 = c.l1();
    let spine_frr = c
        .frr
        .get(SPINE - 1)
        .context("no FRR on the withdrawing spine")?;
    leaves[0] = Some(c.start_l1(&format!("w{draw}"))?);
    poll_interruptible(
        &format!("L1's lqd to steer {} over 4 spines", c.dst_prefix),
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let members = lq_tests::fabric::route_group_in(l1, &c.dst_prefix, c.table)
                .and_then(|g| lq_tests::fabric::group_members(l1, g))
                .map(|m| m.len());
            if members == Some(4) {
                Ok(())
            } else {
                Err(members)
            }
        },
        |members| match members {
            Some(n) => format!("its group has {n} members"),
            None => "no route of lq's with a group".to_string(),
        },
    )?;
    c.mark("bgp withdraw");
    println!(
        "==> demo: BGP withdrawal: {FLOWS} flows paced at {} Mbit/s from H1 to H4, then S{SPINE} shuts its session to L{LEAF}",
        PACING_BPS / 1_000_000
    );
    let result = WatchedLoad::start(c, run, SPORT, true).and_then(|mut load| {
        let r = measure(spine_frr, &mut load);
        load.stop(c);
        r
    });
    // Restore the session and stop L1's lqd whatever happened.
    let restored = restore(c, spine_frr);
    stop_daemon(&mut leaves[0]);
    let mut r = result?;
    r.restored = restored?;
    Ok(r)
}

/// Undoes the shutdown; whether BGP had all four paths again within 30 s.
fn restore(c: &Ctx, spine_frr: &lq_tests::frr::Frr) -> Result<bool> {
    let asn = Clos3::spine_as(SPINE).to_string();
    let peer = Clos3::leaf_addr(SPINE, LEAF).to_string();
    spine_frr.vtysh(&[
        "configure terminal",
        &format!("router bgp {asn}"),
        &format!("no neighbor {peer} shutdown"),
    ])?;
    poll_interruptible(
        &format!("BGP to restore S{SPINE}'s path to L{LEAF}"),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let paths = lq_tests::frr::bgp_paths(c.l1(), &c.dst_prefix);
            if paths == 4 { Ok(()) } else { Err(paths) }
        },
        |paths| format!("L1 has {paths} of 4 BGP paths to {}", c.dst_prefix),
    )?;
    Ok(true)
}

/// The load is running: counts its flows on S3, polls, shuts the session, polls on.
/// The light load of this phase and of the remote fault (`FLOWS` flows paced at
/// `PACING_BPS` from H1 to H`LEAF`), settled, its flows through S`SPINE` counted, and a
/// [`poll`]er in L1's namespace watching S`SPINE`.
pub(super) struct WatchedLoad {
    flows: Vec<std::thread::JoinHandle<()>>,
    /// The load's flows the kernel sent via S`SPINE` once it settled.
    pub(super) flows_via_spine: u32,
    stop: Arc<AtomicBool>,
    /// `None` once [`Self::polls`] took its polls.
    poller: Option<std::thread::JoinHandle<Result<Vec<Poll>>>>,
}

impl WatchedLoad {
    /// Starts the load (source ports from `sport`), lets it settle 2 s, then the poller
    /// (reading BGP's route too when `bgp`), and gives it 0.5 s of polls before returning.
    pub(super) fn start(c: &Ctx, run: u32, sport: u16, bgp: bool) -> Result<Self> {
        let (src, dst) = (Clos3::host_addr(1), Clos3::host_addr(LEAF));
        let h1 = c.fab.hosts[0].name().to_string();
        let flows: Vec<_> = (0..FLOWS)
            .map(|k| {
                let f = FlowSpec {
                    run,
                    flow: u32::from(k),
                    sport: sport + k,
                    size: 16 << 20,
                    pacing_bps: Some(PACING_BPS),
                };
                spawn_flow(&h1, src, dst, f, c.reg)
            })
            .collect();
        let watched = (|| {
            sleep(Duration::from_secs(2))?;
            let sports: Vec<u16> = (0..FLOWS).map(|k| sport + k).collect();
            let devs = flow_egress(c.l1(), "h0", src, dst, super::traffic::PORT, &sports)?;
            let via = format!("s{SPINE}");
            let flows_via_spine = devs
                .iter()
                .filter(|d| d.as_deref() == Some(via.as_str()))
                .count() as u32;
            let stop = Arc::new(AtomicBool::new(false));
            let prefix = parse_prefix(&c.dst_prefix)?;
            let poller = {
                let (stop, ns) = (stop.clone(), c.l1().name().to_string());
                let table = c.table.unwrap_or(254);
                std::thread::spawn(move || poll(&ns, &via, prefix, table, bgp, &stop))
            };
            let settled = sleep(Duration::from_millis(500));
            Ok((flows_via_spine, stop, poller, settled))
        })();
        match watched {
            Ok((flows_via_spine, stop, poller, settled)) => {
                let load = Self {
                    flows,
                    flows_via_spine,
                    stop,
                    poller: Some(poller),
                };
                if let Err(e) = settled {
                    load.stop(c);
                    return Err(e);
                }
                Ok(load)
            }
            Err(e) => {
                c.reg.abort_all();
                for h in flows {
                    let _ = h.join();
                }
                Err(e)
            }
        }
    }

    /// Stops the poller and returns its polls (the load keeps running).
    pub(super) fn polls(&mut self) -> Result<Vec<Poll>> {
        self.stop.store(true, Ordering::Relaxed);
        self.poller
            .take()
            .context("the polls were already taken")?
            .join()
            .map_err(|_| anyhow::anyhow!("the poller panicked"))?
    }

    /// Stops the poller, if it still runs, and the load.
    pub(super) fn stop(mut self, c: &Ctx) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
        c.reg.abort_all();
        for h in self.flows {
            let _ = h.join();
        }
    }
}

fn measure(spine_frr: &lq_tests::frr::Frr, load: &mut WatchedLoad) -> Result<WithdrawResult> {
    let shut_s = now_s();
    let shut = spine_frr.vtysh(&[
        "configure terminal",
        &format!("router bgp {}", Clos3::spine_as(SPINE)),
        &format!("neighbor {} shutdown", Clos3::leaf_addr(SPINE, LEAF)),
    ]);
    let slept = sleep(Duration::from_millis(2500));
    let polls = load.polls()?;
    shut?;
    slept?;
    let flows_via_spine = load.flows_via_spine;
    let bgp_s = change(&polls, shut_s, |p| (p.t_bgp, p.bgp));
    let lq_s = change(&polls, shut_s, |p| (p.t_lq, p.lq));
    let last_data_s = polls
        .windows(2)
        .rev()
        .find(|w| w[1].t_tx >= shut_s && w[1].tx.saturating_sub(w[0].tx) >= DATA_OCTETS)
        .map(|w| w[1].t_tx);
    let events = polls
        .windows(2)
        .filter(|w| {
            w[1].t_tx >= shut_s && (w[1].bgp != w[0].bgp || w[1].lq != w[0].lq || w[1].tx > w[0].tx)
        })
        .map(|w| {
            (
                (w[1].t_tx - shut_s) * 1e3,
                w[1].bgp,
                w[1].lq,
                w[1].tx - w[0].tx,
            )
        })
        .collect();
    let max_gap_ms = polls
        .windows(2)
        .map(|w| (w[1].t_bgp - w[0].t_bgp) * 1e3)
        .fold(0.0, f64::max);
    Ok(WithdrawResult {
        flows: FLOWS,
        flows_via_spine,
        shut_s,
        bgp_s,
        lq_s,
        last_data_s,
        polls: polls.len(),
        max_gap_ms,
        restored: false,
        events,
    })
}

/// Polls from a thread inside namespace `ns` until `stop`: BGP's route (when `bgp`; else
/// never read, `false`), lq's group and `oif_name`'s transmitted octets.
pub(super) fn poll(
    ns: &str,
    oif_name: &str,
    prefix: (Ipv4Addr, u8),
    table: u32,
    bgp: bool,
    stop: &AtomicBool,
) -> Result<Vec<Poll>> {
    lq_tests::fabric::enter_netns(ns)?;
    // Real-time for the few seconds of the phase: on the loaded 2-core machine a normal
    // thread waits up to ~10 ms for a CPU between polls, and the poll gap is this
    // measurement's resolution. The thread sleeps 0.5 ms per poll, so it cannot starve
    // the rest. Best effort: without it the gaps are only wider (reported).
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: the calling thread (0) and a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    let oif = lq_user::sys::netlink::ifindex(oif_name)?;
    let mut rtnl = Rtnl::open()?;
    let mut out = Vec::with_capacity(8192);
    while !stop.load(Ordering::Relaxed) {
        let t_bgp = now_s();
        let bgp = bgp && bgp_route_uses(&mut rtnl, prefix, oif)?;
        let t_lq = now_s();
        let lq = lq_group(&mut rtnl, prefix, table)?.is_some_and(|members| {
            members
                .iter()
                .any(|m| u64::from(m.id) == lq_tests::fabric::ID_BASE + SPINE as u64)
        });
        let t_tx = now_s();
        let (tx, tx_all) = tx_octets(oif_name)?;
        out.push(Poll {
            t_bgp,
            bgp,
            t_lq,
            lq,
            t_tx,
            tx,
            tx_all,
        });
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(out)
}

/// Whether the kernel's BGP route (protocol 186, main table) to `prefix` has a next hop out
/// of `oif`, inline or through the nexthop group zebra made for it.
fn bgp_route_uses(rtnl: &mut Rtnl, prefix: (Ipv4Addr, u8), oif: u32) -> Result<bool, RtnlError> {
    let routes = rtnl.dump_routes()?;
    let Some(r): Option<&RouteMsg> = routes.iter().find(|r| {
        r.table == 254
            && r.protocol == 186
            && r.dst_len == prefix.1
            && r.dst == Some(IpAddr::V4(prefix.0))
    }) else {
        return Ok(false);
    };
    if r.hops.iter().any(|h| h.oif == oif) {
        return Ok(true);
    }
    let Some(nhid) = r.nhid else {
        return Ok(false);
    };
    let nhs = rtnl.dump_nexthops()?;
    let by_id = |id: u32| nhs.iter().find(|n| n.id == Some(id));
    Ok(by_id(nhid).is_some_and(|n| {
        if n.group.is_empty() {
            n.oif == Some(oif)
        } else {
            n.group
                .iter()
                .any(|m| by_id(m.id).is_some_and(|x| x.oif == Some(oif)))
        }
    }))
}

/// Octets transmitted on `ifname` (this thread's namespace: /proc/thread-self/net/dev).
/// The octets this namespace's `ifname` transmitted, and those of all its spine links
/// (a leaf names them `s1`, `s2`, ...: `ifname` among them), from one read of
/// /proc/net/dev.
fn tx_octets(ifname: &str) -> Result<(u64, u64)> {
    let t = std::fs::read_to_string("/proc/thread-self/net/dev")?;
    let (mut one, mut all) = (None, 0);
    for line in t.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let spine_link = name
            .strip_prefix('s')
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
        if name != ifname && !spine_link {
            continue;
        }
        // rx: octets packets errs drop fifo frame compressed multicast; tx: octets ...
        let tx: u64 = rest
            .split_whitespace()
            .nth(8)
            .context("short /proc/net/dev line")?
            .parse()
            .context("tx octets")?;
        if name == ifname {
            one = Some(tx);
        }
        if spine_link {
            all += tx;
        }
    }
    Ok((
        one.with_context(|| format!("{ifname} is not in /proc/thread-self/net/dev"))?,
        all,
    ))
}
