//! The helper's I/O edge: reads the kernel counters of every monitored egress link once per
//! T_sample and turns them into [`RawSample`]s for [`crate::core::helper::pipeline`] (seed 003 Appendix A,
//! A.1 "Hardware Signals" and A.2 "Derived Metrics").
//!
//! A Linux host has no ASIC registers; A.1's signals map onto what the kernel exposes:
//!
//! | A.1 signal             | source here                                                  |
//! |------------------------|--------------------------------------------------------------|
//! | TX byte counter        | `IFLA_STATS64.tx_bytes` of the link (RTM_GETLINK dump)       |
//! | packet drop counter    | root qdisc `drops` (TCA_STATS_QUEUE) + link `tx_dropped`     |
//! | egress queue depth     | root qdisc `backlog` in bytes (TCA_STATS_QUEUE)              |
//! | buffer size            | root qdisc limit in bytes (pfifo-style limits: packets x MTU)|
//! | ECN-marked counter     | the marking qdisc's xstats (fq_codel, red, pie, cake)        |
//! | ECN-eligible counter   | a hook ([`CounterSource`]); a tc egress eBPF counter later   |
//! | PFC pause duration     | a hook ([`CounterSource`]); the PFC module later             |
//! | link speed (A.2)       | configured, else the root qdisc's shaping rate, else ethtool |
//!
//! Per sample, [`Sampler::sample`] does one RTM_GETQDISC dump and either an RTM_GETSTATS
//! dump (stats64 only: the TX counters) or the full RTM_GETLINK dump (names, MTU, oper
//! state, counters) on its own NETLINK_ROUTE socket (opened in the calling thread's network
//! namespace). The helper role follows RTNLGRP_LINK notifications
//! ([`Sampler::follow_link_notifications`]): the full dump runs when a link notification
//! arrived and once a second, not every 2 ms (issue 15: the full dump every sample was most
//! of the sampler's cost, 16.7 % of a core at 64 links against 6.9 %).
//! Slow-changing facts (the ethtool speed, an htb root class rate) are cached for
//! [`SLOW_REFRESH_NS`] so that the 2 ms loop stays cheap.
//!
//! The decoders ([`messages`], [`decode_link`], [`decode_stats`], [`decode_qdisc`],
//! [`decode_class`]) and the dump requests live in `decode.rs` and are re-exported here:
//! pure functions over the kernel's bytes (native endian, as netlink is), never panic, and
//! are tested with hand-built messages: this kernel has no marking qdisc to test against.

mod decode;

use std::{
    collections::HashMap,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use crate::core::helper::pipeline::RawSample;
use crate::sys::netlink::wire::{self, NLMSG_DONE, NLMSG_ERROR};
use crate::sys::netlink::{Rtnl, RtnlError};

pub use decode::{
    BasicStats, ClassInfo, DecodeError, EcnMarking, LinkInfo, LinkStats, NlMsg, QdiscInfo,
    QdiscKind, QueueLimit, QueueStats, RTM_NEWLINK, RTM_NEWQDISC, RTM_NEWSTATS, RTM_NEWTCLASS,
    TC_H_ROOT, decode_class, decode_link, decode_qdisc, decode_stats, encode_getlink_dump,
    encode_getqdisc_dump, encode_getstats_dump, encode_gettclass_dump, htb_root_rate, messages,
    peek_qdisc,
};
use decode::{ne_u16, ne_u32};

// ------------------------------------------------------------------ kernel constants

// The ioctl side's (SIOCETHTOOL); the netlink constants are in `decode.rs`.

/// SIOCETHTOOL commands (linux/ethtool.h).
const ETHTOOL_GSET: u32 = 0x1;
const ETHTOOL_GLINKSETTINGS: u32 = 0x4c;
const SIOCETHTOOL: libc::c_ulong = libc::SIOCETHTOOL;

/// How long the ethtool speed and an htb root class rate are reused before being read
/// again (they change only when an operator reconfigures or the link renegotiates; an
/// oper-state change refreshes the ethtool speed at once).
pub const SLOW_REFRESH_NS: u64 = 1_000_000_000;

// ------------------------------------------------------------------ sampler

/// Errors of the sampler.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The netlink socket failed or the kernel refused a dump.
    #[error(transparent)]
    Rtnl(#[from] RtnlError),
    /// A dump could not be framed.
    #[error("{what} dump: {source}")]
    Decode {
        /// The dump.
        what: &'static str,
        /// The framing error.
        source: DecodeError,
    },
    /// The ioctl socket for ethtool could not be opened.
    #[error("ethtool socket: {0}")]
    Socket(io::Error),
}

/// One monitored egress link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Interface name in the sampler's namespace.
    pub name: String,
    /// Configured nominal rate in bits/s, overriding qdisc and ethtool.
    pub rate_bps: Option<u64>,
}

/// Where a link's A.2 `link_speed` came from (shown by `lqd show local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpeedSource {
    /// [`LinkConfig::rate_bps`].
    Configured,
    /// The egress root qdisc's shaping rate (tbf, cake, or the single htb root class).
    Qdisc,
    /// SIOCETHTOOL (ETHTOOL_GLINKSETTINGS, else ETHTOOL_GSET).
    Ethtool,
    /// None of the above: speed 0, which the pipeline reads as fully utilised.
    Unknown,
}

impl SpeedSource {
    /// The name `lqd show local` prints.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Qdisc => "qdisc",
            Self::Ethtool => "ethtool",
            Self::Unknown => "unknown",
        }
    }
}

/// A counter the kernel dumps do not provide, read per link per sample: the ECN-eligible
/// packet counter (a tc egress eBPF counter will provide it) and the PFC pause duration in
/// nanoseconds (the PFC module will provide it). Return `None` when the counter is not
/// available for this link; the sampler then repeats its last value (so the counter never
/// goes backwards).
pub trait CounterSource: Send {
    /// Called once per sample before the links are read: a source that reads all links
    /// at once does it here.
    fn begin_sample(&mut self) {}

    /// The free-running counter of link `ifindex` / `name`.
    fn read(&mut self, ifindex: u32, name: &str) -> Option<u64>;
}

impl<F: FnMut(u32, &str) -> Option<u64> + Send> CounterSource for F {
    fn read(&mut self, ifindex: u32, name: &str) -> Option<u64> {
        self(ifindex, name)
    }
}

/// The explanations of one link's reading ([`note`]'s constants), kept inline: a `Vec`
/// was an allocation per link per sample (issue 15). At most [`Notes::MAX`]; a reading
/// gathers at most seven.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Notes {
    len: u8,
    items: [&'static str; Notes::MAX],
}

impl Notes {
    /// How many a reading keeps.
    pub const MAX: usize = 10;

    /// Adds `note` (ignored past [`Self::MAX`]).
    pub fn push(&mut self, note: &'static str) {
        if let Some(slot) = self.items.get_mut(usize::from(self.len)) {
            *slot = note;
            self.len += 1;
        }
    }

    /// The notes, in the order they were added.
    pub fn as_slice(&self) -> &[&'static str] {
        &self.items[..usize::from(self.len)]
    }
}

impl std::ops::Deref for Notes {
    type Target = [&'static str];
    fn deref(&self) -> &[&'static str] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Notes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl serde::Serialize for Notes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

/// How a reading was obtained, for `lqd show local`.
pub mod note {
    /// The interface is not in the namespace: reported down.
    pub const NO_INTERFACE: &str = "interface not found: reported down";
    /// No stats64 in the link message.
    pub const NO_STATS: &str = "no IFLA_STATS64: tx_bytes 0";
    /// No root qdisc in the dump.
    pub const NO_QDISC: &str = "no egress root qdisc: queue depth 0, qdisc drops 0";
    /// noqueue: nothing queues.
    pub const NOQUEUE: &str = "noqueue: no queue, D = 0";
    /// pfifo-style limit.
    pub const LIMIT_PACKETS: &str = "qdisc limit is in packets: max_buffer = limit x MTU";
    /// No limit stated by the qdisc.
    pub const LIMIT_TXQLEN: &str = "qdisc states no limit: max_buffer = txqueuelen x MTU";
    /// htb without a single root class.
    pub const HTB_NOT_SIMPLE: &str =
        "htb has no rate on the qdisc and not exactly one root class: speed not from qdisc";
    /// htb with a single root class.
    pub const HTB_ROOT_CLASS: &str = "htb has no rate on the qdisc: root class rate used";
    /// The qdisc cannot mark.
    pub const CANNOT_MARK: &str = "qdisc cannot mark: ECN-marked counter does not advance";
    /// The qdisc could mark but ECN is off.
    pub const ECN_DISABLED: &str =
        "qdisc marking disabled (no ecn): ECN-marked counter does not advance";
    /// The xstats were missing.
    pub const ECN_NO_XSTATS: &str =
        "marking qdisc without readable xstats: ECN-marked counter held";
    /// No ECN-eligible source.
    pub const NO_ECN_ELIGIBLE: &str = "no ECN-eligible counter yet: E defined as 0 (A.2)";
    /// No PFC source.
    pub const NO_PAUSE: &str = "no PFC pause source: F = 0";
    /// No speed.
    pub const NO_SPEED: &str = "link speed unknown: U reads as 1";
}

/// One link's reading: the pipeline input and how it was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSample {
    /// The monitored interface name (shared with the sampler's configuration: no copy per
    /// sample).
    pub name: std::sync::Arc<str>,
    /// Its ifindex (the wire's Link ID), `None` when the interface is missing.
    pub ifindex: Option<u32>,
    /// The pipeline input.
    pub raw: RawSample,
    /// Where `raw.link_speed_bps` came from.
    pub speed_source: SpeedSource,
    /// The egress root qdisc's kind.
    pub qdisc: Option<QdiscKind>,
    /// Its marking capability (A.1 ECN-marked counter).
    pub ecn: EcnMarking,
    /// Explanations (constants of [`note`]).
    pub notes: Notes,
    /// IFLA_MTU of the last full link dump: the advertiser splits its datagrams for the
    /// smallest link MTU (wire spec). `None` when the interface is missing.
    pub mtu: Option<u32>,
}

/// A kernel u32 counter extended to a free-running u64 (A.2 works on deltas of
/// free-running counters; a wrap would otherwise read as a reset and lose an interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extend32 {
    prev: Option<u32>,
    acc: u64,
}

impl Extend32 {
    /// Feeds the current value; `same_source` is false when the counter's owner changed
    /// (a new qdisc), so the new counter is counted from 0. Within one source an advance
    /// of less than 2^31 is a step (across a wrap too); a larger one can only be a reset,
    /// counted from 0 as well.
    pub fn update(&mut self, v: u32, same_source: bool) -> u64 {
        let step = match self.prev {
            Some(p) if same_source => {
                let d = v.wrapping_sub(p);
                if d < 1 << 31 { d } else { v }
            }
            _ => v,
        };
        self.acc = self.acc.wrapping_add(u64::from(step));
        self.prev = Some(v);
        self.acc
    }

    /// The owner disappeared: the next value starts afresh.
    pub fn detach(&mut self) {
        self.prev = None;
    }

    /// The extended value.
    pub fn value(&self) -> u64 {
        self.acc
    }
}

/// Per-link state across samples.
struct LinkState {
    cfg: LinkConfig,
    /// `cfg.name`, shared with every sample of the link.
    name: std::sync::Arc<str>,
    /// (tcm_handle, kind) of the last root qdisc, to tell a replaced qdisc from a wrap.
    qdisc_id: Option<(u32, QdiscKind)>,
    drops: Extend32,
    marks: Extend32,
    /// (ifindex, speed, read at, oper_up then).
    ethtool: Option<(u32, Option<u64>, u64, bool)>,
    /// (ifindex, qdisc handle, rate, read at).
    htb: Option<(u32, u32, Option<u64>, u64)>,
    ecn_eligible: u64,
    pause_ns: u64,
    /// This sample's decoded link and root qdisc.
    link: Option<LinkInfo>,
    qdisc: Option<QdiscInfo>,
}

/// Reads the counters of the monitored links (see the module documentation).
pub struct Sampler {
    rtnl: Rtnl,
    ioctl: OwnedFd,
    links: Vec<LinkState>,
    by_name: HashMap<String, usize>,
    ecn_eligible: Option<Box<dyn CounterSource>>,
    pause: Option<Box<dyn CounterSource>>,
    skipped: u64,
    /// (ifindex, position in `links`) of the links found, sorted: a qdisc's link by binary
    /// search (rebuilt every sample in place, no allocation).
    by_ifindex: Vec<(u32, usize)>,
    link_dump_every: u32,
    round: u32,
    /// RTNLGRP_LINK notifications (non-blocking): a link's state, speed or name changed,
    /// so the next sample does the full RTM_GETLINK dump (item 3 of issue 15).
    link_events: Option<crate::sys::netlink::wire::RouteSocket>,
    link_events_buf: Vec<u8>,
    /// Full dumps asked for by a link notification (or a notification overrun).
    pub notified_dumps: u64,
}

/// With link notifications, the full RTM_GETLINK dump runs when one arrives and otherwise
/// once per this many samples (1 s at T_sample 2 ms): a backstop for a lost notification.
pub const LINK_DUMP_BACKSTOP: u32 = 500;

impl Sampler {
    /// Opens the netlink and ioctl sockets in the calling thread's network namespace.
    pub fn new(links: Vec<LinkConfig>) -> Result<Self, SamplerError> {
        let rtnl = Rtnl::open()?;
        // SAFETY: plain socket syscall; the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(SamplerError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: fd is fresh and valid.
        let ioctl = unsafe { OwnedFd::from_raw_fd(fd) };
        let by_name = links
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name.clone(), i))
            .collect();
        let links = links
            .into_iter()
            .map(|cfg| LinkState {
                name: cfg.name.as_str().into(),
                cfg,
                qdisc_id: None,
                drops: Extend32::default(),
                marks: Extend32::default(),
                ethtool: None,
                htb: None,
                ecn_eligible: 0,
                pause_ns: 0,
                link: None,
                qdisc: None,
            })
            .collect();
        Ok(Self {
            rtnl,
            ioctl,
            links,
            by_name,
            ecn_eligible: None,
            pause: None,
            skipped: 0,
            by_ifindex: Vec::new(),
            link_dump_every: 1,
            round: 0,
            link_events: None,
            link_events_buf: Vec::new(),
            notified_dumps: 0,
        })
    }

    /// Follows RTNLGRP_LINK notifications (subscribed in the calling thread's namespace):
    /// the full RTM_GETLINK dump then runs only when a link notification arrived (a link
    /// went up or down, was renamed, added or deleted, changed its MTU), at the first
    /// sample, when a monitored link is missing from a stats dump, and every
    /// [`LINK_DUMP_BACKSTOP`] samples; the TX counters of every other sample come from the
    /// RTM_GETSTATS dump (stats64 only). The helper role samples this way; without it a
    /// full dump runs every [`Self::set_link_dump_every`] samples.
    pub fn follow_link_notifications(&mut self) -> Result<(), SamplerError> {
        let socket = crate::sys::netlink::wire::RouteSocket::notifications(&[libc::RTNLGRP_LINK])
            .map_err(RtnlError::Io)?;
        self.link_events = Some(socket);
        self.link_events_buf = vec![0; 64 * 1024];
        self.link_dump_every = LINK_DUMP_BACKSTOP;
        Ok(())
    }

    /// Drains the queued link notifications; whether any arrived (or some were lost).
    fn link_notified(&mut self) -> Result<bool, SamplerError> {
        let Some(socket) = &self.link_events else {
            return Ok(false);
        };
        let mut any = false;
        loop {
            match socket.recv(&mut self.link_events_buf) {
                Ok(n) => {
                    any |= messages(&self.link_events_buf[..n]).any(|m| {
                        m.is_err()
                            || m.is_ok_and(|m| {
                                m.ty == libc::RTM_NEWLINK || m.ty == libc::RTM_DELLINK
                            })
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                // Overrun: some notifications were lost; a full dump finds out.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => any = true,
                Err(e) => return Err(RtnlError::Io(e).into()),
            }
        }
    }

    /// The hook for the ECN-eligible packet counter (A.1). Until one is set, the counter
    /// stays 0, so E is "defined as 0 when ecn_eligible_delta is 0" (A.2).
    pub fn set_ecn_eligible_source(&mut self, source: Box<dyn CounterSource>) {
        self.ecn_eligible = Some(source);
    }

    /// The hook for the PFC pause duration in nanoseconds (A.1, A.2 F). Until one is set,
    /// the counter stays 0 and F is 0.
    pub fn set_pause_source(&mut self, source: Box<dyn CounterSource>) {
        self.pause = Some(source);
    }

    /// Does the full RTM_GETLINK dump only every `n` samples (1, the default: every
    /// sample) and reads the TX counters with a cheap RTM_GETSTATS (stats64 only) dump in
    /// between; names, MTU and oper state then come from the last full dump, so an oper
    /// state change is seen up to `n - 1` samples late. A monitored link missing from a
    /// stats dump forces a full dump at once.
    pub fn set_link_dump_every(&mut self, n: u32) {
        self.link_dump_every = n.max(1);
    }

    /// Dump messages that could not be decoded and were skipped, so far.
    pub fn skipped_messages(&self) -> u64 {
        self.skipped
    }

    /// One sample of every monitored link, in configuration order, timestamped with
    /// CLOCK_MONOTONIC.
    pub fn sample(&mut self) -> Result<Vec<LinkSample>, SamplerError> {
        for l in &mut self.links {
            l.qdisc = None;
        }
        let notified = self.link_notified()?;
        self.notified_dumps += u64::from(notified);
        let full = notified
            || self.round.is_multiple_of(self.link_dump_every)
            || self.links.iter().any(|l| l.link.is_none());
        self.round = self.round.wrapping_add(1);
        // The counters are read while the dump runs; its midpoint is the sample time (A.2
        // divides by the real interval, so a stable reference point matters more than the
        // dump's length).
        let mut t_ns = if full { None } else { self.stats_dump()? };
        if t_ns.is_none() {
            t_ns = Some(self.link_dump()?);
        }
        let t_ns = t_ns.unwrap_or_default();
        self.by_ifindex.clear();
        self.by_ifindex.extend(
            (self.links.iter().enumerate())
                .filter_map(|(i, l)| l.link.as_ref().map(|k| (k.ifindex, i))),
        );
        self.by_ifindex.sort_unstable();
        {
            let (links, skipped, by_ifindex) =
                (&mut self.links, &mut self.skipped, &self.by_ifindex);
            dump(&mut self.rtnl, "qdisc", encode_getqdisc_dump, |ty, p| {
                if ty != RTM_NEWQDISC {
                    return;
                }
                let Ok((ifindex, parent)) = peek_qdisc(p) else {
                    *skipped += 1;
                    return;
                };
                if parent != TC_H_ROOT {
                    return;
                }
                let Ok(at) = by_ifindex.binary_search_by_key(&ifindex, |e| e.0) else {
                    return;
                };
                let l = &mut links[by_ifindex[at].1];
                match decode_qdisc(p) {
                    Ok(q) => l.qdisc = Some(q),
                    Err(_) => *skipped += 1,
                }
            })?;
        }
        for source in [self.ecn_eligible.as_mut(), self.pause.as_mut()]
            .into_iter()
            .flatten()
        {
            source.begin_sample();
        }
        let mut out = Vec::with_capacity(self.links.len());
        for i in 0..self.links.len() {
            out.push(self.finish_link(i, t_ns)?);
        }
        Ok(out)
    }

    /// The full RTM_GETLINK dump; returns the sample time.
    fn link_dump(&mut self) -> Result<u64, SamplerError> {
        for l in &mut self.links {
            l.link = None;
        }
        let t0 = crate::sys::clock::monotonic_ns();
        let (links, by_name, skipped) = (&mut self.links, &self.by_name, &mut self.skipped);
        dump(&mut self.rtnl, "link", encode_getlink_dump, |ty, p| {
            if ty != RTM_NEWLINK {
                return;
            }
            match decode_link(p) {
                Ok(l) => {
                    let slot = l.name.as_deref().and_then(|n| by_name.get(n));
                    if let Some(&i) = slot {
                        links[i].link = Some(l);
                    }
                }
                Err(_) => *skipped += 1,
            }
        })?;
        let t1 = crate::sys::clock::monotonic_ns();
        Ok(t0 + t1.saturating_sub(t0) / 2)
    }

    /// The RTM_GETSTATS dump updating the cached links' counters; the sample time, or
    /// `None` when a monitored link was missing (a full dump must find out why).
    fn stats_dump(&mut self) -> Result<Option<u64>, SamplerError> {
        let t0 = crate::sys::clock::monotonic_ns();
        let mut seen = 0usize;
        let (links, skipped) = (&mut self.links, &mut self.skipped);
        dump(&mut self.rtnl, "stats", encode_getstats_dump, |ty, p| {
            if ty != RTM_NEWSTATS {
                return;
            }
            match decode_stats(p) {
                Ok((ifindex, stats)) => {
                    if let Some(k) = links
                        .iter_mut()
                        .filter_map(|l| l.link.as_mut())
                        .find(|k| k.ifindex == ifindex)
                    {
                        k.stats = stats;
                        seen += 1;
                    }
                }
                Err(_) => *skipped += 1,
            }
        })?;
        let t1 = crate::sys::clock::monotonic_ns();
        Ok((seen == self.links.len()).then(|| t0 + t1.saturating_sub(t0) / 2))
    }

    /// Builds one link's sample from this round's link and qdisc messages.
    fn finish_link(&mut self, i: usize, t_ns: u64) -> Result<LinkSample, SamplerError> {
        let mut notes = Notes::default();
        let l = &mut self.links[i];
        let name = l.name.clone();
        // The link's counters and state, without its name (no allocation per sample).
        let Some(link) = l.link.as_ref().map(|k| LinkInfo { name: None, ..*k }) else {
            notes.push(note::NO_INTERFACE);
            l.qdisc_id = None;
            l.drops.detach();
            l.marks.detach();
            return Ok(LinkSample {
                name,
                ifindex: None,
                raw: RawSample {
                    t_ns,
                    ..RawSample::default()
                },
                speed_source: SpeedSource::Unknown,
                qdisc: None,
                ecn: EcnMarking::CannotMark,
                notes,
                mtu: None,
            });
        };
        let qdisc = l.qdisc.take();
        let oper_up = link.oper_up();
        let mtu = u64::from(link.mtu.unwrap_or(0));
        let stats = link.stats.unwrap_or_else(|| {
            notes.push(note::NO_STATS);
            LinkStats::default()
        });

        // Qdisc counters: a new (handle, kind) is a new counter owner.
        let id = qdisc.as_ref().map(|q| (q.handle, q.kind));
        let same = id.is_some() && id == l.qdisc_id;
        l.qdisc_id = id;
        let (mut depth, mut max_buffer, mut ecn) = (0, 0, EcnMarking::CannotMark);
        match &qdisc {
            None => {
                notes.push(note::NO_QDISC);
                l.drops.detach();
                l.marks.detach();
            }
            Some(q) => {
                let qs = q.queue.unwrap_or_default();
                l.drops.update(qs.drops, same);
                depth = u64::from(qs.backlog);
                ecn = q.ecn;
                match q.ecn {
                    EcnMarking::Marks(m) => {
                        l.marks.update(m, same);
                    }
                    EcnMarking::CannotMark => notes.push(note::CANNOT_MARK),
                    EcnMarking::Disabled => notes.push(note::ECN_DISABLED),
                    EcnMarking::StatsMissing => notes.push(note::ECN_NO_XSTATS),
                }
                // A.2 D = queue_depth / max_buffer: the smaller of the stated limits.
                let from_packets = q.limit.packets.map(|p| p.saturating_mul(mtu));
                max_buffer = match (q.limit.bytes, from_packets) {
                    (Some(b), Some(p)) => b.min(p),
                    (Some(b), None) => b,
                    (None, Some(p)) => {
                        notes.push(note::LIMIT_PACKETS);
                        p
                    }
                    (None, None) if q.kind == "noqueue" => {
                        notes.push(note::NOQUEUE);
                        0
                    }
                    (None, None) => {
                        notes.push(note::LIMIT_TXQLEN);
                        u64::from(link.txqlen.unwrap_or(0)).saturating_mul(mtu)
                    }
                };
            }
        }

        // Link speed: configured, else the qdisc's shaping rate, else ethtool.
        let ifindex = link.ifindex;
        let mut speed = l.cfg.rate_bps.map(|r| (r, SpeedSource::Configured));
        if speed.is_none()
            && let Some(q) = &qdisc
        {
            let rate = if q.kind == "htb" {
                let r = self.htb_rate(i, ifindex, q.handle, t_ns)?;
                notes.push(if r.is_some() {
                    note::HTB_ROOT_CLASS
                } else {
                    note::HTB_NOT_SIMPLE
                });
                r
            } else {
                q.rate_bps
            };
            speed = rate.map(|r| (r, SpeedSource::Qdisc));
        }
        if speed.is_none() {
            speed = self
                .ethtool_speed(i, ifindex, oper_up, t_ns)
                .map(|r| (r, SpeedSource::Ethtool));
        }
        let (link_speed_bps, speed_source) = speed.unwrap_or_else(|| {
            notes.push(note::NO_SPEED);
            (0, SpeedSource::Unknown)
        });

        let l = &mut self.links[i];
        match self.ecn_eligible.as_mut() {
            Some(s) => l.ecn_eligible = s.read(ifindex, &name).unwrap_or(l.ecn_eligible),
            None => notes.push(note::NO_ECN_ELIGIBLE),
        }
        match self.pause.as_mut() {
            Some(s) => l.pause_ns = s.read(ifindex, &name).unwrap_or(l.pause_ns),
            None => notes.push(note::NO_PAUSE),
        }
        Ok(LinkSample {
            name,
            ifindex: Some(ifindex),
            raw: RawSample {
                t_ns,
                tx_bytes: stats.tx_bytes,
                // A.1 packet drop counter: the qdisc's drops plus the driver's.
                drops: l.drops.value().wrapping_add(stats.tx_dropped),
                ecn_marked: l.marks.value(),
                ecn_eligible: l.ecn_eligible,
                pause_ns: l.pause_ns,
                queue_depth_bytes: depth,
                max_buffer_bytes: max_buffer,
                link_speed_bps,
                oper_up,
            },
            speed_source,
            qdisc: qdisc.map(|q| q.kind),
            ecn,
            notes,
            mtu: link.mtu,
        })
    }

    /// The single htb root class's rate, cached for [`SLOW_REFRESH_NS`] per qdisc.
    fn htb_rate(
        &mut self,
        i: usize,
        ifindex: u32,
        handle: u32,
        t_ns: u64,
    ) -> Result<Option<u64>, SamplerError> {
        if let Some((idx, h, rate, at)) = self.links[i].htb
            && idx == ifindex
            && h == handle
            && t_ns.saturating_sub(at) < SLOW_REFRESH_NS
        {
            return Ok(rate);
        }
        let mut classes = Vec::new();
        let skipped = &mut self.skipped;
        dump(
            &mut self.rtnl,
            "class",
            |seq| encode_gettclass_dump(ifindex, seq),
            |ty, p| {
                if ty != RTM_NEWTCLASS {
                    return;
                }
                match decode_class(p) {
                    Ok(c) if c.ifindex == ifindex => classes.push(c),
                    Ok(_) => {}
                    Err(_) => *skipped += 1,
                }
            },
        )?;
        let rate = htb_root_rate(&classes);
        self.links[i].htb = Some((ifindex, handle, rate, t_ns));
        Ok(rate)
    }

    /// The ethtool speed, cached for [`SLOW_REFRESH_NS`] and re-read when the oper state
    /// changes (a renegotiation comes with a carrier change).
    fn ethtool_speed(&mut self, i: usize, ifindex: u32, oper_up: bool, t_ns: u64) -> Option<u64> {
        let l = &mut self.links[i];
        if let Some((idx, speed, at, up)) = l.ethtool
            && idx == ifindex
            && up == oper_up
            && t_ns.saturating_sub(at) < SLOW_REFRESH_NS
        {
            return speed;
        }
        let speed = ethtool_speed_bps(&self.ioctl, &l.cfg.name);
        l.ethtool = Some((ifindex, speed, t_ns, oper_up));
        speed
    }
}

/// Runs one dump on `rtnl` and hands each reply of it (type, payload) to `each`.
fn dump(
    rtnl: &mut Rtnl,
    what: &'static str,
    build: impl FnOnce(u32) -> Vec<u8>,
    mut each: impl FnMut(u16, &[u8]),
) -> Result<(), SamplerError> {
    let seq = rtnl.send_request(build)?;
    loop {
        if dump_part(rtnl.recv_raw()?, seq, what, &mut each)? {
            return Ok(());
        }
    }
}

/// One receive buffer of the dump `seq`: hands each of its replies (type, payload) to
/// `each`; `Ok(true)` when the dump ended (NLMSG_DONE, or an NLMSG_ERROR ACK), an error
/// when the buffer cannot be framed or the kernel refused the dump. Messages of other
/// requests are skipped. Public for the fuzz target `netlink_sampler`.
pub fn dump_part(
    buf: &[u8],
    seq: u32,
    what: &'static str,
    mut each: impl FnMut(u16, &[u8]),
) -> Result<bool, SamplerError> {
    for m in messages(buf) {
        let m = m.map_err(|source| SamplerError::Decode { what, source })?;
        if m.seq != seq {
            continue;
        }
        match m.ty {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = wire::error_code(m.payload).unwrap_or(0);
                if errno != 0 {
                    return Err(RtnlError::Refused {
                        what: format!("{what} dump"),
                        source: io::Error::from_raw_os_error(errno.saturating_neg()),
                    }
                    .into());
                }
                return Ok(true);
            }
            // NLM_F_DUMP_INTR (the set changed during the dump) is ignored: every
            // message still carries a consistent snapshot of its own object.
            ty => each(ty, m.payload),
        }
    }
    Ok(false)
}

/// The speed of `name` in bits/s from SIOCETHTOOL: ETHTOOL_GLINKSETTINGS, else the
/// deprecated ETHTOOL_GSET. `None` when the driver has no ethtool speed or reports
/// SPEED_UNKNOWN (e.g. a link that is down).
pub fn ethtool_speed_bps(sock: &OwnedFd, name: &str) -> Option<u64> {
    /// struct ethtool_link_settings (48 bytes) followed by 3 bitmaps of at most 127 u32.
    #[repr(C, align(8))]
    struct LinkSettings([u8; 48 + 3 * 127 * 4]);
    #[repr(C, align(8))]
    struct Cmd([u8; 44]);

    let ioctl = |data: *mut u8| -> bool {
        let Ok(c) = std::ffi::CString::new(name) else {
            return false;
        };
        if c.as_bytes().len() >= libc::IFNAMSIZ {
            return false;
        }
        // SAFETY: ifreq is plain data.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(c.as_bytes()) {
            *d = *s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = data.cast();
        // SAFETY: valid fd; ifr_data points at a live buffer large enough for the command.
        unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) == 0 }
    };
    let known = |mbit: u32| (mbit != 0 && mbit != u32::MAX).then(|| u64::from(mbit) * 1_000_000);

    // ETHTOOL_GLINKSETTINGS handshake: with link_mode_masks_nwords 0 the kernel answers
    // with -(its nwords); the second call with that count fills the settings.
    let mut s = LinkSettings([0; 48 + 3 * 127 * 4]);
    s.0[0..4].copy_from_slice(&ETHTOOL_GLINKSETTINGS.to_ne_bytes());
    if ioctl(s.0.as_mut_ptr()) {
        let nwords = s.0[15] as i8;
        if nwords < 0 {
            s.0 = [0; 48 + 3 * 127 * 4];
            s.0[0..4].copy_from_slice(&ETHTOOL_GLINKSETTINGS.to_ne_bytes());
            s.0[15] = nwords.unsigned_abs();
            if ioctl(s.0.as_mut_ptr()) {
                return ne_u32(&s.0, 4).and_then(known);
            }
        }
    }
    // struct ethtool_cmd: u32 cmd, supported, advertising; u16 speed (@12); ...;
    // u16 speed_hi (@28).
    let mut c = Cmd([0; 44]);
    c.0[0..4].copy_from_slice(&ETHTOOL_GSET.to_ne_bytes());
    if !ioctl(c.0.as_mut_ptr()) {
        return None;
    }
    let (lo, hi) = (ne_u16(&c.0, 12)?, ne_u16(&c.0, 28)?);
    known(u32::from(lo) | (u32::from(hi) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_notes_are_kept_inline() {
        assert_eq!(QdiscKind::new(b"tbf\0"), "tbf");
        assert_eq!(QdiscKind::new(b"fq_codel"), "fq_codel");
        // Longer than the kernel allows: the first 15 octets; a cut character dropped.
        assert_eq!(QdiscKind::new(b"abcdefghijklmnopq"), "abcdefghijklmno");
        assert_eq!(
            QdiscKind::new("abcdefghijklmn\u{e9}".as_bytes()),
            "abcdefghijklmn"
        );
        assert_eq!(QdiscKind::new(b"\xff\xfe"), "");
        assert_eq!(
            serde_json::to_string(&QdiscKind::new(b"htb")).unwrap(),
            "\"htb\""
        );
        let mut n = Notes::default();
        for _ in 0..Notes::MAX + 3 {
            n.push(note::NO_PAUSE);
        }
        assert_eq!(n.len(), Notes::MAX);
        let mut n = Notes::default();
        n.push(note::NO_STATS);
        n.push(note::NOQUEUE);
        assert!(n.contains(&note::NOQUEUE));
        assert_eq!(
            serde_json::to_value(n).unwrap(),
            serde_json::json!([note::NO_STATS, note::NOQUEUE])
        );
    }

    #[test]
    fn extend32_wraps_resets_and_source_changes() {
        let mut e = Extend32::default();
        assert_eq!(e.update(100, false), 100);
        assert_eq!(e.update(150, true), 150);
        // A wrap of the kernel's u32 keeps counting.
        let mut w = Extend32::default();
        w.update(u32::MAX - 9, false);
        assert_eq!(w.update(5, true), u64::from(u32::MAX - 9) + 15);
        // A reset (a large step back) counts the new counter from 0.
        assert_eq!(e.update(20, true), 170);
        // A new qdisc: its whole count is new.
        assert_eq!(e.update(30, false), 200);
        e.detach();
        assert_eq!(e.update(7, true), 207);
        assert_eq!(e.value(), 207);
    }

    #[test]
    fn speed_source_names() {
        let names: Vec<_> = [
            SpeedSource::Configured,
            SpeedSource::Qdisc,
            SpeedSource::Ethtool,
            SpeedSource::Unknown,
        ]
        .iter()
        .map(|s| s.as_str())
        .collect();
        assert_eq!(names, ["configured", "qdisc", "ethtool", "unknown"]);
    }
}
