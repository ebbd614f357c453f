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
//! The decoders ([`messages`], [`decode_link`], [`decode_qdisc`], [`decode_class`]) are pure
//! functions over the kernel's bytes (native endian, as netlink is), never panic, and are
//! tested with hand-built messages: this kernel has no marking qdisc to test against.

use std::{
    collections::HashMap,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use crate::core::helper::pipeline::RawSample;
use crate::sys::netlink::{Rtnl, RtnlError};

// ------------------------------------------------------------------ kernel constants

// Kernel constants come from `libc` and the netlink crates where they have them; the
// rest (the if_stats_msg filter, the qdiscs' option and xstats attributes, which neither
// exports) are ours, from the UAPI headers named beside them.
use crate::sys::netlink::wire::{self, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR};
use netlink_packet_route::{
    link::LinkMessage,
    stats::{StatsFilterMask, StatsMessage},
    tc::TcMessage,
};

/// RTM_NEWLINK: one link of an RTM_GETLINK dump.
pub const RTM_NEWLINK: u16 = libc::RTM_NEWLINK;
const RTM_GETLINK: u16 = libc::RTM_GETLINK;
/// RTM_NEWQDISC: one qdisc of an RTM_GETQDISC dump.
pub const RTM_NEWQDISC: u16 = libc::RTM_NEWQDISC;
const RTM_GETQDISC: u16 = libc::RTM_GETQDISC;
/// RTM_NEWTCLASS: one class of an RTM_GETTCLASS dump.
pub const RTM_NEWTCLASS: u16 = libc::RTM_NEWTCLASS;
const RTM_GETTCLASS: u16 = libc::RTM_GETTCLASS;
/// RTM_NEWSTATS: one link of an RTM_GETSTATS dump.
pub const RTM_NEWSTATS: u16 = libc::RTM_NEWSTATS;
const RTM_GETSTATS: u16 = libc::RTM_GETSTATS;
/// sizeof(struct if_stats_msg).
const IF_STATS_MSG_LEN: usize = 12;
/// IFLA_STATS_LINK_64: struct rtnl_link_stats64 (also the filter bit 1 << (1 - 1)).
const IFLA_STATS_LINK_64: u16 = 1;

/// sizeof(struct ifinfomsg).
const IFINFOMSG_LEN: usize = 16;
/// sizeof(struct tcmsg).
const TCMSG_LEN: usize = 20;

const IFLA_IFNAME: u16 = libc::IFLA_IFNAME;
const IFLA_MTU: u16 = libc::IFLA_MTU;
const IFLA_TXQLEN: u16 = libc::IFLA_TXQLEN;
const IFLA_OPERSTATE: u16 = libc::IFLA_OPERSTATE;
const IFLA_STATS64: u16 = libc::IFLA_STATS64;
const IFLA_CARRIER: u16 = libc::IFLA_CARRIER;
/// RFC 2863 operStatus values of IFLA_OPERSTATE.
const IF_OPER_UNKNOWN: u8 = libc::IF_OPER_UNKNOWN as u8;
const IF_OPER_UP: u8 = libc::IF_OPER_UP as u8;
const IFF_UP: u32 = libc::IFF_UP as u32;
const IFF_LOWER_UP: u32 = libc::IFF_LOWER_UP as u32;

/// The parent of an egress root qdisc (and of an htb root class in class dumps).
pub const TC_H_ROOT: u32 = 0xFFFF_FFFF;

const TCA_KIND: u16 = libc::TCA_KIND;
const TCA_OPTIONS: u16 = libc::TCA_OPTIONS;
const TCA_XSTATS: u16 = libc::TCA_XSTATS;
const TCA_STATS2: u16 = libc::TCA_STATS2;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_STATS_APP: u16 = 4;

const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_RATE64: u16 = 6;
const TCA_FQ_CODEL_LIMIT: u16 = 2;
const TCA_FQ_CODEL_ECN: u16 = 4;
const TCA_FQ_CODEL_CE_THRESHOLD: u16 = 7;
const TCA_FQ_CODEL_MEMORY_LIMIT: u16 = 9;
const TCA_FQ_CODEL_XSTATS_QDISC: u32 = 0;
const TCA_RED_PARMS: u16 = 1;
const TCA_RED_FLAGS: u16 = 4;
const TC_RED_ECN: u32 = 1;
const TCA_PIE_LIMIT: u16 = 2;
const TCA_PIE_ECN: u16 = 6;
const TCA_FQ_PLIMIT: u16 = 1;
const TCA_CAKE_BASE_RATE64: u16 = 2;
const TCA_CAKE_STATS_MEMORY_LIMIT: u16 = 3;
const TCA_CAKE_STATS_TIN_STATS: u16 = 10;
const TCA_CAKE_TIN_STATS_ECN_MARKED_PACKETS: u16 = 8;

/// SIOCETHTOOL commands (linux/ethtool.h).
const ETHTOOL_GSET: u32 = 0x1;
const ETHTOOL_GLINKSETTINGS: u32 = 0x4c;
const SIOCETHTOOL: libc::c_ulong = libc::SIOCETHTOOL;

/// How long the ethtool speed and an htb root class rate are reused before being read
/// again (they change only when an operator reconfigures or the link renegotiates; an
/// oper-state change refreshes the ethtool speed at once).
pub const SLOW_REFRESH_NS: u64 = 1_000_000_000;

// ------------------------------------------------------------------ decoding

/// A reply that the decoders cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A netlink message's length is below the header or beyond the buffer.
    #[error("netlink message length out of bounds")]
    MessageLength,
    /// An attribute's length is below its header or beyond its container.
    #[error("netlink attribute length out of bounds")]
    AttrLength,
    /// A fixed header (ifinfomsg, tcmsg) is cut short.
    #[error("{0} truncated")]
    Truncated(&'static str),
    /// An attribute's payload is too short for its type.
    #[error("{what}: attribute {ty} has {len} bytes, too short")]
    AttrSize {
        /// The structure being decoded.
        what: &'static str,
        /// Its attribute type.
        ty: u16,
        /// Its payload length.
        len: usize,
    },
}

/// One netlink message of a receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NlMsg<'a> {
    /// nlmsg_type.
    pub ty: u16,
    /// nlmsg_flags.
    pub flags: u16,
    /// nlmsg_seq.
    pub seq: u32,
    /// Everything after the 16-octet header.
    pub payload: &'a [u8],
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn ne_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The netlink messages of one receive buffer (the shared framing). Stops after the first
/// framing error.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Result<NlMsg<'_>, DecodeError>> + '_ {
    wire::frames(buf).map(|f| {
        f.map(|f| NlMsg {
            ty: f.ty,
            flags: f.flags,
            seq: f.seq,
            payload: f.payload,
        })
        .map_err(|_| DecodeError::MessageLength)
    })
}

/// The attributes of `buf` (the shared iterator): `(type without the nested/byte-order
/// flags, payload)`.
fn attrs(buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    wire::attrs(buf).map(|a| a.map_err(|_| DecodeError::AttrLength))
}

fn u8_attr(what: &'static str, ty: u16, p: &[u8]) -> Result<u8, DecodeError> {
    p.first().copied().ok_or(DecodeError::AttrSize {
        what,
        ty,
        len: p.len(),
    })
}
fn u32_attr(what: &'static str, ty: u16, p: &[u8]) -> Result<u32, DecodeError> {
    ne_u32(p, 0).ok_or(DecodeError::AttrSize {
        what,
        ty,
        len: p.len(),
    })
}
fn u64_attr(what: &'static str, ty: u16, p: &[u8]) -> Result<u64, DecodeError> {
    ne_u64(p, 0).ok_or(DecodeError::AttrSize {
        what,
        ty,
        len: p.len(),
    })
}
/// A NUL-terminated string attribute (IFLA_IFNAME, TCA_KIND), up to the first NUL.
fn str_attr(p: &[u8]) -> String {
    let end = p.iter().position(|b| *b == 0).unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

/// A qdisc or class kind (TCA_KIND), kept inline: the kernel's names are at most 15 octets
/// (IFNAMSIZ with its NUL), and the sampler reads 64 of them every 2 ms (a `String` each
/// was an allocation per link per sample, issue 15). A longer or non-UTF-8 name reads as
/// its first 15 octets, lossily.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QdiscKind {
    len: u8,
    bytes: [u8; Self::MAX],
}

impl QdiscKind {
    /// The longest kind name kept.
    pub const MAX: usize = 15;

    /// The kind named by a TCA_KIND attribute's payload (NUL-terminated or not).
    pub fn new(p: &[u8]) -> Self {
        let end = p.iter().position(|b| *b == 0).unwrap_or(p.len());
        let mut name = &p[..end.min(Self::MAX)];
        // A cut inside a multi-octet character: keep the valid prefix.
        if let Err(e) = std::str::from_utf8(name) {
            name = &name[..e.valid_up_to()];
        }
        let mut k = Self {
            len: name.len() as u8,
            ..Self::default()
        };
        k.bytes[..name.len()].copy_from_slice(name);
        k
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::ops::Deref for QdiscKind {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<&str> for QdiscKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Debug for QdiscKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for QdiscKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for QdiscKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The TX counters of `struct rtnl_link_stats64` that the sampler uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LinkStats {
    /// tx_packets.
    pub tx_packets: u64,
    /// tx_bytes (A.1 TX byte counter).
    pub tx_bytes: u64,
    /// tx_dropped: packets the driver dropped on transmit (part of A.1's drop counter).
    pub tx_dropped: u64,
}

/// One RTM_NEWLINK message of an RTM_GETLINK dump.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LinkInfo {
    /// ifi_index.
    pub ifindex: u32,
    /// ifi_flags (IFF_*).
    pub flags: u32,
    /// IFLA_IFNAME.
    pub name: Option<String>,
    /// IFLA_MTU.
    pub mtu: Option<u32>,
    /// IFLA_TXQLEN (packets).
    pub txqlen: Option<u32>,
    /// IFLA_OPERSTATE (RFC 2863 IF_OPER_*).
    pub operstate: Option<u8>,
    /// IFLA_CARRIER.
    pub carrier: Option<bool>,
    /// IFLA_STATS64.
    pub stats: Option<LinkStats>,
}

impl LinkInfo {
    /// Operationally up: IF_OPER_UP, or IF_OPER_UNKNOWN (drivers without operstate
    /// support, such as loopback or some virtual links) with the link administratively up
    /// and a carrier.
    pub fn oper_up(&self) -> bool {
        let carrier = self.carrier.unwrap_or(self.flags & IFF_LOWER_UP != 0);
        match self.operstate {
            Some(IF_OPER_UP) => true,
            Some(IF_OPER_UNKNOWN) => self.flags & IFF_UP != 0 && carrier,
            _ => false,
        }
    }
}

/// Decodes the payload of an RTM_NEWLINK message: `struct ifinfomsg` and its attributes.
pub fn decode_link(payload: &[u8]) -> Result<LinkInfo, DecodeError> {
    // struct ifinfomsg: u8 family, u8 pad, u16 type, i32 index, u32 flags, u32 change.
    let (Some(ifindex), Some(flags)) = (ne_u32(payload, 4), ne_u32(payload, 8)) else {
        return Err(DecodeError::Truncated("ifinfomsg"));
    };
    let mut l = LinkInfo {
        ifindex,
        flags,
        ..LinkInfo::default()
    };
    for a in attrs(payload.get(IFINFOMSG_LEN..).unwrap_or(&[])) {
        let (ty, p) = a?;
        match ty {
            IFLA_IFNAME => l.name = Some(str_attr(p)),
            IFLA_MTU => l.mtu = Some(u32_attr("link", ty, p)?),
            IFLA_TXQLEN => l.txqlen = Some(u32_attr("link", ty, p)?),
            IFLA_OPERSTATE => l.operstate = Some(u8_attr("link", ty, p)?),
            IFLA_CARRIER => l.carrier = Some(u8_attr("link", ty, p)? != 0),
            IFLA_STATS64 => l.stats = Some(stats64(ty, p)?),
            _ => {}
        }
    }
    Ok(l)
}

/// Decodes the payload of an RTM_NEWSTATS message (struct if_stats_msg { u8 family, pad1;
/// u16 pad2; u32 ifindex; u32 filter_mask; } and IFLA_STATS_LINK_64): the ifindex and
/// its TX counters.
pub fn decode_stats(payload: &[u8]) -> Result<(u32, Option<LinkStats>), DecodeError> {
    let Some(ifindex) = ne_u32(payload, 4).filter(|_| payload.len() >= IF_STATS_MSG_LEN) else {
        return Err(DecodeError::Truncated("if_stats_msg"));
    };
    let mut stats = None;
    for a in attrs(&payload[IF_STATS_MSG_LEN..]) {
        let (ty, p) = a?;
        if ty == IFLA_STATS_LINK_64 {
            stats = Some(stats64(ty, p)?);
        }
    }
    Ok((ifindex, stats))
}

/// The TX counters of a `struct rtnl_link_stats64`: rx_packets, tx_packets, rx_bytes,
/// tx_bytes, rx_errors, tx_errors, rx_dropped, tx_dropped (u64 each) come first; the
/// kernel appends more fields over time, so only a minimum length is checked.
fn stats64(ty: u16, p: &[u8]) -> Result<LinkStats, DecodeError> {
    match (ne_u64(p, 8), ne_u64(p, 24), ne_u64(p, 56)) {
        (Some(tx_packets), Some(tx_bytes), Some(tx_dropped)) => Ok(LinkStats {
            tx_packets,
            tx_bytes,
            tx_dropped,
        }),
        _ => Err(DecodeError::AttrSize {
            what: "stats64",
            ty,
            len: p.len(),
        }),
    }
}

/// `struct gnet_stats_basic`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BasicStats {
    /// Octets dequeued.
    pub bytes: u64,
    /// Packets dequeued.
    pub packets: u32,
}

/// `struct gnet_stats_queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Packets queued.
    pub qlen: u32,
    /// Octets queued (A.1 egress queue depth).
    pub backlog: u32,
    /// Packets dropped (a 32-bit counter: the sampler extends it to 64 bits).
    pub drops: u32,
    /// Requeues.
    pub requeues: u32,
    /// Overlimits (a shaper throttled).
    pub overlimits: u32,
}

/// The configured size of a qdisc's queue, in the unit(s) the qdisc states it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QueueLimit {
    /// Limit in octets (tbf, bfifo, red; fq_codel's and cake's memory limit).
    pub bytes: Option<u64>,
    /// Limit in packets (pfifo, pfifo_head_drop, fq_codel, pie, fq).
    pub packets: Option<u64>,
}

/// Whether a qdisc marks ECN (A.1's ECN-marked counter) and its count so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EcnMarking {
    /// The qdisc kind never marks (tbf, fifos, htb, noqueue, ...) or this decoder does not
    /// know it: the ECN-marked counter stays where it is.
    #[default]
    CannotMark,
    /// A marking qdisc with ECN switched off (fq_codel `noecn` without ce_threshold, red
    /// or pie without `ecn`): it drops instead.
    Disabled,
    /// The qdisc marks, but the dump carried no (readable) xstats.
    StatsMissing,
    /// The qdisc marks; CE marks so far, modulo 2^32 (the kernel's counters are u32).
    Marks(u32),
}

impl EcnMarking {
    /// Whether the qdisc can set CE at all.
    pub fn can_mark(self) -> bool {
        matches!(self, Self::Marks(_) | Self::StatsMissing)
    }
}

/// One RTM_NEWQDISC message of an RTM_GETQDISC dump.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct QdiscInfo {
    /// tcm_ifindex.
    pub ifindex: u32,
    /// tcm_handle (major:minor, as `tc` prints it `major:`).
    pub handle: u32,
    /// tcm_parent: [`TC_H_ROOT`] for the egress root qdisc.
    pub parent: u32,
    /// TCA_KIND.
    pub kind: QdiscKind,
    /// TCA_STATS2 / TCA_STATS_BASIC.
    pub basic: Option<BasicStats>,
    /// TCA_STATS2 / TCA_STATS_QUEUE.
    pub queue: Option<QueueStats>,
    /// The shaping rate the qdisc itself states, in bits/s (tbf, cake with a bandwidth).
    /// `None` for htb: its rates live on the classes (see [`decode_class`]).
    pub rate_bps: Option<u64>,
    /// The configured queue size.
    pub limit: QueueLimit,
    /// ECN marking capability and count.
    pub ecn: EcnMarking,
}

impl QdiscInfo {
    /// The egress root qdisc of its device.
    pub fn is_root(&self) -> bool {
        self.parent == TC_H_ROOT
    }
}

/// `tcm_ifindex`, `tcm_handle`, `tcm_parent` of a `struct tcmsg` (u8 family, u8 + u16
/// padding, i32 ifindex, u32 handle, u32 parent, u32 info).
fn tcmsg(payload: &[u8]) -> Result<(u32, u32, u32), DecodeError> {
    match (
        ne_u32(payload, 4),
        ne_u32(payload, 8),
        ne_u32(payload, 12),
        payload.len() >= TCMSG_LEN,
    ) {
        (Some(i), Some(h), Some(p), true) => Ok((i, h, p)),
        _ => Err(DecodeError::Truncated("tcmsg")),
    }
}

/// The ifindex and parent of an RTM_NEWQDISC payload, for skipping qdiscs that are not
/// of interest without decoding them.
pub fn peek_qdisc(payload: &[u8]) -> Result<(u32, u32), DecodeError> {
    tcmsg(payload).map(|(i, _, p)| (i, p))
}

/// The kind, options, stats and xstats attributes of a tcmsg payload.
struct TcAttrs<'a> {
    kind: QdiscKind,
    options: Option<&'a [u8]>,
    xstats: Option<&'a [u8]>,
    basic: Option<BasicStats>,
    queue: Option<QueueStats>,
}

fn tc_attrs(payload: &[u8]) -> Result<TcAttrs<'_>, DecodeError> {
    let mut t = TcAttrs {
        kind: QdiscKind::default(),
        options: None,
        xstats: None,
        basic: None,
        queue: None,
    };
    let mut app = None;
    for a in attrs(payload.get(TCMSG_LEN..).unwrap_or(&[])) {
        let (ty, p) = a?;
        match ty {
            TCA_KIND => t.kind = QdiscKind::new(p),
            TCA_OPTIONS => t.options = Some(p),
            // The legacy copy of the xstats; TCA_STATS_APP below carries the same bytes.
            TCA_XSTATS => t.xstats = Some(p),
            TCA_STATS2 => {
                for a in attrs(p) {
                    let (ty, q) = a?;
                    let short = DecodeError::AttrSize {
                        what: "TCA_STATS2",
                        ty,
                        len: q.len(),
                    };
                    match ty {
                        // struct gnet_stats_basic { u64 bytes; u32 packets; } (16 with padding).
                        TCA_STATS_BASIC => {
                            let (Some(bytes), Some(packets)) = (ne_u64(q, 0), ne_u32(q, 8)) else {
                                return Err(short);
                            };
                            t.basic = Some(BasicStats { bytes, packets });
                        }
                        // struct gnet_stats_queue { u32 qlen, backlog, drops, requeues,
                        // overlimits; }.
                        TCA_STATS_QUEUE => {
                            let (
                                Some(qlen),
                                Some(backlog),
                                Some(drops),
                                Some(requeues),
                                Some(over),
                            ) = (
                                ne_u32(q, 0),
                                ne_u32(q, 4),
                                ne_u32(q, 8),
                                ne_u32(q, 12),
                                ne_u32(q, 16),
                            )
                            else {
                                return Err(short);
                            };
                            t.queue = Some(QueueStats {
                                qlen,
                                backlog,
                                drops,
                                requeues,
                                overlimits: over,
                            });
                        }
                        TCA_STATS_APP => app = Some(q),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if app.is_some() {
        t.xstats = app;
    }
    Ok(t)
}

/// `rate` (bytes/s, u32) of the `struct tc_ratespec` at `at`: u8 cell_log, u8 linklayer,
/// u16 overhead, s16 cell_align, u16 mpu, u32 rate.
fn ratespec_rate(p: &[u8], at: usize) -> Option<u32> {
    ne_u32(p, at + 8)
}

/// Bytes/s to bits/s; 0 means "no rate".
fn bps(bytes_per_s: u64) -> Option<u64> {
    (bytes_per_s != 0).then(|| bytes_per_s.saturating_mul(8))
}

/// Decodes the payload of an RTM_NEWQDISC message.
pub fn decode_qdisc(payload: &[u8]) -> Result<QdiscInfo, DecodeError> {
    let (ifindex, handle, parent) = tcmsg(payload)?;
    let t = tc_attrs(payload)?;
    let mut q = QdiscInfo {
        ifindex,
        handle,
        parent,
        basic: t.basic,
        queue: t.queue,
        ..QdiscInfo::default()
    };
    let opts = t.options.unwrap_or(&[]);
    let xstats = t.xstats;
    match t.kind.as_str() {
        "tbf" => {
            let mut rate32 = None;
            let mut rate64 = None;
            for a in attrs(opts) {
                let (ty, p) = a?;
                match ty {
                    // struct tc_tbf_qopt { tc_ratespec rate; tc_ratespec peakrate;
                    // u32 limit (bytes); u32 buffer; u32 mtu; }.
                    TCA_TBF_PARMS => {
                        let (Some(rate), Some(limit)) = (ratespec_rate(p, 0), ne_u32(p, 24)) else {
                            return Err(DecodeError::AttrSize {
                                what: "tbf",
                                ty,
                                len: p.len(),
                            });
                        };
                        rate32 = Some(rate);
                        q.limit.bytes = Some(u64::from(limit));
                    }
                    // Rates of 2^32 bytes/s and more: the ratespec then holds ~0.
                    TCA_TBF_RATE64 => rate64 = Some(u64_attr("tbf", ty, p)?),
                    _ => {}
                }
            }
            q.rate_bps = rate64.or(rate32.map(u64::from)).and_then(bps);
        }
        // struct tc_fifo_qopt { u32 limit; }: octets for bfifo, packets for the others.
        "bfifo" => q.limit.bytes = ne_u32(opts, 0).map(u64::from),
        "pfifo" | "pfifo_head_drop" => q.limit.packets = ne_u32(opts, 0).map(u64::from),
        "fq_codel" => {
            let mut ecn = false;
            let mut ce_threshold = false;
            for a in attrs(opts) {
                let (ty, p) = a?;
                match ty {
                    TCA_FQ_CODEL_LIMIT => {
                        q.limit.packets = Some(u64::from(u32_attr("fq_codel", ty, p)?))
                    }
                    TCA_FQ_CODEL_MEMORY_LIMIT => {
                        q.limit.bytes = Some(u64::from(u32_attr("fq_codel", ty, p)?))
                    }
                    TCA_FQ_CODEL_ECN => ecn = u32_attr("fq_codel", ty, p)? != 0,
                    // Dumped only when set: CE marks above the threshold, even without `ecn`.
                    TCA_FQ_CODEL_CE_THRESHOLD => ce_threshold = true,
                    _ => {}
                }
            }
            q.ecn = if !(ecn || ce_threshold) {
                EcnMarking::Disabled
            } else {
                // struct tc_fq_codel_xstats { u32 type; struct tc_fq_codel_qd_stats {
                // u32 maxpacket, drop_overlimit, ecn_mark, new_flow_count, new_flows_len,
                // old_flows_len, ce_mark, ...} }: ecn_mark at 12, ce_mark at 28. Both are
                // CE marks (CoDel's and the ce_threshold's), so both count.
                match xstats.map(|x| (ne_u32(x, 0), ne_u32(x, 12), ne_u32(x, 28))) {
                    Some((Some(TCA_FQ_CODEL_XSTATS_QDISC), Some(ecn_mark), Some(ce_mark))) => {
                        EcnMarking::Marks(ecn_mark.wrapping_add(ce_mark))
                    }
                    _ => EcnMarking::StatsMissing,
                }
            };
        }
        "red" => {
            let mut ecn = false;
            for a in attrs(opts) {
                let (ty, p) = a?;
                match ty {
                    // struct tc_red_qopt { u32 limit (bytes); u32 qth_min; u32 qth_max;
                    // u8 Wlog, Plog, Scell_log, flags; }.
                    TCA_RED_PARMS => {
                        let (Some(limit), Some(flags)) = (ne_u32(p, 0), p.get(15)) else {
                            return Err(DecodeError::AttrSize {
                                what: "red",
                                ty,
                                len: p.len(),
                            });
                        };
                        q.limit.bytes = Some(u64::from(limit));
                        ecn |= u32::from(*flags) & TC_RED_ECN != 0;
                    }
                    // struct nla_bitfield32 { u32 value; u32 selector; }.
                    TCA_RED_FLAGS => ecn |= u32_attr("red", ty, p)? & TC_RED_ECN != 0,
                    _ => {}
                }
            }
            q.ecn = if !ecn {
                EcnMarking::Disabled
            } else {
                // struct tc_red_xstats { u32 early, pdrop, other, marked; }.
                match xstats.and_then(|x| ne_u32(x, 12)) {
                    Some(m) => EcnMarking::Marks(m),
                    None => EcnMarking::StatsMissing,
                }
            };
        }
        "pie" => {
            let mut ecn = false;
            for a in attrs(opts) {
                let (ty, p) = a?;
                match ty {
                    TCA_PIE_LIMIT => q.limit.packets = Some(u64::from(u32_attr("pie", ty, p)?)),
                    TCA_PIE_ECN => ecn = u32_attr("pie", ty, p)? != 0,
                    _ => {}
                }
            }
            q.ecn = if !ecn {
                EcnMarking::Disabled
            } else {
                // struct tc_pie_xstats since 5.6: u64 prob; u32 delay, avg_dq_rate,
                // dq_rate_estimating, packets_in, dropped, overlimit, maxq, ecn_mark
                // (40 bytes): ecn_mark at 36. Before: all u32, prob first and without
                // dq_rate_estimating (32 bytes): ecn_mark at 28.
                let mark = xstats.and_then(|x| match x.len() {
                    40.. => ne_u32(x, 36),
                    32.. => ne_u32(x, 28),
                    _ => None,
                });
                mark.map_or(EcnMarking::StatsMissing, EcnMarking::Marks)
            };
        }
        "fq" => {
            for a in attrs(opts) {
                let (ty, p) = a?;
                if ty == TCA_FQ_PLIMIT {
                    q.limit.packets = Some(u64::from(u32_attr("fq", ty, p)?));
                }
            }
        }
        "cake" => {
            for a in attrs(opts) {
                let (ty, p) = a?;
                if ty == TCA_CAKE_BASE_RATE64 {
                    // Bytes/s; 0 is "unlimited" (no shaping).
                    q.rate_bps = bps(u64_attr("cake", ty, p)?);
                }
            }
            // Cake always marks ECT packets (it has no ECN switch). Its xstats are
            // attributes: TCA_CAKE_STATS_MEMORY_LIMIT (the effective buffer in bytes) and
            // TCA_CAKE_STATS_TIN_STATS { tin 1 { ..., ECN_MARKED_PACKETS u32, ... }, ... }.
            q.ecn = EcnMarking::StatsMissing;
            if let Some(x) = xstats {
                let mut marks: Option<u32> = None;
                for a in attrs(x) {
                    let (ty, p) = a?;
                    match ty {
                        TCA_CAKE_STATS_MEMORY_LIMIT => {
                            q.limit.bytes = Some(u64::from(u32_attr("cake", ty, p)?))
                        }
                        TCA_CAKE_STATS_TIN_STATS => {
                            for tin in attrs(p) {
                                let (_, tp) = tin?;
                                for a in attrs(tp) {
                                    let (ty, v) = a?;
                                    if ty == TCA_CAKE_TIN_STATS_ECN_MARKED_PACKETS {
                                        let m = u32_attr("cake tin", ty, v)?;
                                        // Modulo 2^32 like each tin's counter, so the sum
                                        // extends correctly (see Extend32).
                                        marks = Some(marks.unwrap_or(0).wrapping_add(m));
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(m) = marks {
                    q.ecn = EcnMarking::Marks(m);
                }
            }
        }
        // htb: the qdisc carries only TCA_HTB_INIT (defcls, rate2quantum, ...): no rate;
        // the shaping rates are on its classes (decode_class).
        _ => {}
    }
    q.kind = t.kind;
    Ok(q)
}

/// One RTM_NEWTCLASS message of an RTM_GETTCLASS dump.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClassInfo {
    /// tcm_ifindex.
    pub ifindex: u32,
    /// tcm_handle: the classid.
    pub classid: u32,
    /// tcm_parent: [`TC_H_ROOT`] for an htb root class.
    pub parent: u32,
    /// TCA_KIND.
    pub kind: QdiscKind,
    /// The class rate in bits/s (htb: TCA_HTB_PARMS rate, TCA_HTB_RATE64 when present).
    pub rate_bps: Option<u64>,
}

/// Decodes the payload of an RTM_NEWTCLASS message (htb rates; other kinds give no rate).
pub fn decode_class(payload: &[u8]) -> Result<ClassInfo, DecodeError> {
    let (ifindex, classid, parent) = tcmsg(payload)?;
    let t = tc_attrs(payload)?;
    let mut c = ClassInfo {
        ifindex,
        classid,
        parent,
        ..ClassInfo::default()
    };
    if t.kind == "htb" {
        let mut rate32 = None;
        let mut rate64 = None;
        for a in attrs(t.options.unwrap_or(&[])) {
            let (ty, p) = a?;
            match ty {
                // struct tc_htb_opt { tc_ratespec rate; tc_ratespec ceil; u32 buffer,
                // cbuffer, quantum, level, prio; }.
                TCA_HTB_PARMS => {
                    rate32 = Some(ratespec_rate(p, 0).ok_or(DecodeError::AttrSize {
                        what: "htb class",
                        ty,
                        len: p.len(),
                    })?)
                }
                TCA_HTB_RATE64 => rate64 = Some(u64_attr("htb class", ty, p)?),
                _ => {}
            }
        }
        c.rate_bps = rate64.or(rate32.map(u64::from)).and_then(bps);
    }
    c.kind = t.kind;
    Ok(c)
}

/// The rate of an htb tree when it is simple: exactly one root class, with a rate. A
/// root class cannot borrow, so its rate is the most the link sends; several root classes
/// (or none) leave no single answer, and the caller falls back to ethtool.
pub fn htb_root_rate(classes: &[ClassInfo]) -> Option<u64> {
    let mut roots = classes
        .iter()
        .filter(|c| c.kind == "htb" && c.parent == TC_H_ROOT);
    match (roots.next(), roots.next()) {
        (Some(c), None) => c.rate_bps,
        _ => None,
    }
}

// ------------------------------------------------------------------ requests

/// A dump request: netlink header, then `netlink-packet-route`'s message (its family
/// header, no attributes).
fn dump_request(ty: u16, seq: u32, msg: &impl wire::Emitable) -> Vec<u8> {
    wire::message(ty, NLM_F_REQUEST | NLM_F_DUMP, seq, msg)
}

/// RTM_GETLINK dump of every link (ifinfomsg all zero: AF_UNSPEC, any index).
pub fn encode_getlink_dump(seq: u32) -> Vec<u8> {
    dump_request(RTM_GETLINK, seq, &LinkMessage::default())
}

/// RTM_GETSTATS dump of every link's stats64 only (if_stats_msg with filter_mask
/// IFLA_STATS_LINK_64): far cheaper for the kernel than an RTM_GETLINK dump.
// netlink-packet-core's and -route's structs are #[non_exhaustive]: no struct expression, even with
// `..Default::default()`, so the fields are set one by one.
#[allow(clippy::field_reassign_with_default)]
pub fn encode_getstats_dump(seq: u32) -> Vec<u8> {
    let mut m = StatsMessage::default();
    m.header.filter_mask = StatsFilterMask::Link64;
    dump_request(RTM_GETSTATS, seq, &m)
}

/// RTM_GETQDISC dump of every qdisc (tcmsg all zero).
pub fn encode_getqdisc_dump(seq: u32) -> Vec<u8> {
    dump_request(RTM_GETQDISC, seq, &TcMessage::default())
}

/// RTM_GETTCLASS dump of the classes of one device (the kernel requires tcm_ifindex).
pub fn encode_gettclass_dump(ifindex: u32, seq: u32) -> Vec<u8> {
    // tcm_ifindex is an int; ifindexes are positive, so the bits are the same.
    dump_request(RTM_GETTCLASS, seq, &TcMessage::with_index(ifindex as i32))
}

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
    use proptest::prelude::*;

    /// Bytes from a hex string (whitespace allowed).
    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// One netlink attribute: u16 nla_len (4 + payload), u16 nla_type, payload, padding to 4.
    fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(payload);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    /// struct tcmsg: u8 family 0, u8 pad, u16 pad, i32 ifindex, u32 handle, u32 parent,
    /// u32 info, then the attributes.
    fn tcmsg_payload(ifindex: u32, handle: u32, parent: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&handle.to_ne_bytes());
        b.extend_from_slice(&parent.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes());
        for a in attrs {
            b.extend_from_slice(a);
        }
        b
    }

    fn u32s(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    /// TCA_STATS2 { TCA_STATS_BASIC {bytes, packets}, TCA_STATS_QUEUE {qlen, backlog,
    /// drops, requeues, overlimits} [, TCA_STATS_APP xstats] }.
    fn stats2(queue: [u32; 5], app: Option<&[u8]>) -> Vec<u8> {
        let mut basic = 5000u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&u32s(&[4, 0])); // packets, padding
        let mut inner = nla(TCA_STATS_BASIC, &basic);
        inner.extend(nla(TCA_STATS_QUEUE, &u32s(&queue)));
        if let Some(x) = app {
            inner.extend(nla(TCA_STATS_APP, x));
        }
        nla(TCA_STATS2, &inner)
    }

    fn kind(k: &str) -> Vec<u8> {
        let mut s = k.as_bytes().to_vec();
        s.push(0);
        nla(TCA_KIND, &s)
    }

    /// A complete RTM_NEWLINK as a veth in a namespace sends it (abridged: the kernel adds
    /// many more attributes, which the decoder skips).
    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_newlink() {
        let msg = unhex(concat!(
            // struct nlmsghdr
            "90000000", // nlmsg_len 144
            "1000",     // nlmsg_type RTM_NEWLINK 16
            "0200",     // nlmsg_flags NLM_F_MULTI
            "07000000", // nlmsg_seq 7
            "00000000", // nlmsg_pid 0
            // struct ifinfomsg
            "00",       // ifi_family AF_UNSPEC
            "00",       // pad
            "0100",     // ifi_type ARPHRD_ETHER
            "05000000", // ifi_index 5
            "43100100", // ifi_flags UP|BROADCAST|RUNNING|MULTICAST|LOWER_UP
            "00000000", // ifi_change
            // IFLA_IFNAME "veth0\0": len 10, type 3, padded to 12
            "0a00",
            "0300",
            "7665746830",
            "00",
            "0000",
            // IFLA_MTU 1500
            "0800",
            "0400",
            "dc050000",
            // IFLA_TXQLEN 1000
            "0800",
            "0d00",
            "e8030000",
            // IFLA_OPERSTATE IF_OPER_UP (6): u8, padded
            "0500",
            "1000",
            "06",
            "000000",
            // IFLA_CARRIER 1: u8, padded
            "0500",
            "2100",
            "01",
            "000000",
            // IFLA_STATS64: len 68, type 23, the first 8 u64 of rtnl_link_stats64
            "4400",
            "1700",
            "0a00000000000000", // rx_packets 10
            "1400000000000000", // tx_packets 20
            "e803000000000000", // rx_bytes 1000
            "15cd5b0700000000", // tx_bytes 123456789
            "0000000000000000", // rx_errors
            "0000000000000000", // tx_errors
            "0000000000000000", // rx_dropped
            "0300000000000000", // tx_dropped 3
        ));
        let m: Vec<_> = messages(&msg).collect::<Result<_, _>>().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].ty, m[0].flags, m[0].seq), (RTM_NEWLINK, 2, 7));
        let l = decode_link(m[0].payload).unwrap();
        assert_eq!(l.ifindex, 5);
        assert_eq!(l.name.as_deref(), Some("veth0"));
        assert_eq!((l.mtu, l.txqlen), (Some(1500), Some(1000)));
        assert_eq!((l.operstate, l.carrier), (Some(IF_OPER_UP), Some(true)));
        assert_eq!(
            l.stats,
            Some(LinkStats {
                tx_packets: 20,
                tx_bytes: 123_456_789,
                tx_dropped: 3
            })
        );
        assert!(l.oper_up());
    }

    /// An RTM_NEWSTATS message of an RTM_GETSTATS dump with filter IFLA_STATS_LINK_64.
    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_newstats() {
        let msg = unhex(concat!(
            // struct nlmsghdr
            "60000000", // nlmsg_len 96
            "5c00",     // RTM_NEWSTATS 92
            "0200",     // NLM_F_MULTI
            "08000000", // seq 8
            "00000000", // pid
            // struct if_stats_msg
            "00",
            "00",
            "0000",     // family AF_UNSPEC, pad1, pad2
            "07000000", // ifindex 7
            "01000000", // filter_mask IFLA_STATS_LINK_64
            // IFLA_STATS_LINK_64: len 68, type 1, the first 8 u64 of rtnl_link_stats64
            "4400",
            "0100",
            "0000000000000000", // rx_packets
            "0200000000000000", // tx_packets 2
            "0000000000000000", // rx_bytes
            "8405000000000000", // tx_bytes 1412
            "0000000000000000", // rx_errors
            "0000000000000000", // tx_errors
            "0000000000000000", // rx_dropped
            "0100000000000000", // tx_dropped 1
        ));
        let m: Vec<_> = messages(&msg).collect::<Result<_, _>>().unwrap();
        assert_eq!((m.len(), m[0].ty), (1, RTM_NEWSTATS));
        assert_eq!(
            decode_stats(m[0].payload),
            Ok((
                7,
                Some(LinkStats {
                    tx_packets: 2,
                    tx_bytes: 1412,
                    tx_dropped: 1
                })
            ))
        );
        assert_eq!(
            decode_stats(&m[0].payload[..11]),
            Err(DecodeError::Truncated("if_stats_msg"))
        );
        let g = encode_getstats_dump(1);
        assert_eq!((g.len(), g[4], g[24]), (28, RTM_GETSTATS as u8, 1));
    }

    #[test]
    fn oper_state_rules() {
        let base = LinkInfo {
            flags: IFF_UP | IFF_LOWER_UP,
            ..LinkInfo::default()
        };
        let with = |operstate, carrier, flags| LinkInfo {
            operstate,
            carrier,
            flags,
            ..base.clone()
        };
        assert!(with(Some(IF_OPER_UP), None, 0).oper_up());
        // Loopback-style UNKNOWN: up with a carrier counts, without does not.
        assert!(with(Some(IF_OPER_UNKNOWN), Some(true), IFF_UP).oper_up());
        assert!(with(Some(IF_OPER_UNKNOWN), None, IFF_UP | IFF_LOWER_UP).oper_up());
        assert!(!with(Some(IF_OPER_UNKNOWN), Some(false), IFF_UP).oper_up());
        assert!(!with(Some(IF_OPER_UNKNOWN), Some(true), 0).oper_up());
        // DOWN (2), LOWERLAYERDOWN (5), DORMANT (5) and a missing attribute are down.
        for s in [Some(2), Some(5), None] {
            assert!(!with(s, Some(true), IFF_UP).oper_up());
        }
    }

    /// A complete RTM_NEWQDISC for `tc qdisc add dev veth0 root tbf rate 100mbit ...`.
    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_tbf_root() {
        let msg = unhex(concat!(
            // struct nlmsghdr
            "88000000", // nlmsg_len 136
            "2400",     // RTM_NEWQDISC 36
            "0200",     // NLM_F_MULTI
            "09000000", // seq 9
            "00000000", // pid
            // struct tcmsg
            "00",
            "00",
            "0000",     // tcm_family AF_UNSPEC, padding
            "05000000", // tcm_ifindex 5
            "00000180", // tcm_handle 0x80010000 (8001:)
            "ffffffff", // tcm_parent TC_H_ROOT
            "02000000", // tcm_info (refcount)
            // TCA_KIND "tbf\0"
            "0800",
            "0100",
            "74626600",
            // TCA_OPTIONS: len 44, type 2
            "2c00",
            "0200",
            //   TCA_TBF_PARMS: len 40, type 1, struct tc_tbf_qopt
            "2800",
            "0100",
            //     rate: cell_log 0, linklayer 1 (ethernet), overhead 0, cell_align -1,
            //     mpu 0, rate 12500000 bytes/s (100 Mbit/s)
            "00",
            "01",
            "0000",
            "ffff",
            "0000",
            "20bcbe00",
            //     peakrate: all zero (none)
            "000000000000000000000000",
            "00000a00", // limit 655360 bytes
            "00900100", // buffer (ticks)
            "00000000", // mtu
            // TCA_STATS2: len 48, type 7 | NLA_F_NESTED (0x8000, to exercise the mask)
            "3000",
            "0780",
            //   TCA_STATS_BASIC: len 20, type 1: u64 bytes 1000000, u32 packets 700, pad
            "1400",
            "0100",
            "40420f0000000000",
            "bc020000",
            "00000000",
            //   TCA_STATS_QUEUE: len 24, type 3: qlen 10, backlog 14420, drops 42,
            //   requeues 0, overlimits 99
            "1800",
            "0300",
            "0a000000",
            "54380000",
            "2a000000",
            "00000000",
            "63000000",
        ));
        let m: Vec<_> = messages(&msg).collect::<Result<_, _>>().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].ty, RTM_NEWQDISC);
        assert_eq!(peek_qdisc(m[0].payload), Ok((5, TC_H_ROOT)));
        let q = decode_qdisc(m[0].payload).unwrap();
        assert!(q.is_root());
        assert_eq!(
            (q.ifindex, q.handle, q.kind.as_str()),
            (5, 0x8001_0000, "tbf")
        );
        assert_eq!(q.rate_bps, Some(100_000_000));
        assert_eq!(q.limit.bytes, Some(655_360));
        assert_eq!(q.limit.packets, None);
        assert_eq!(
            q.basic,
            Some(BasicStats {
                bytes: 1_000_000,
                packets: 700
            })
        );
        assert_eq!(
            q.queue,
            Some(QueueStats {
                qlen: 10,
                backlog: 14420,
                drops: 42,
                requeues: 0,
                overlimits: 99
            })
        );
        assert_eq!(q.ecn, EcnMarking::CannotMark);
        assert!(!q.ecn.can_mark());
    }

    /// tc_tbf_qopt: ratespec rate (12), peakrate (12), limit, buffer, mtu.
    fn tbf_parms(rate: u32, limit: u32) -> Vec<u8> {
        let mut p = vec![0, 1, 0, 0, 0xff, 0xff, 0, 0];
        p.extend(u32s(&[rate]));
        p.extend([0; 12]);
        p.extend(u32s(&[limit, 0, 0]));
        nla(TCA_TBF_PARMS, &p)
    }

    #[test]
    fn tbf_rate64_overrides_saturated_ratespec() {
        // 40 Gbit/s = 5e9 bytes/s does not fit the ratespec: it holds ~0 and
        // TCA_TBF_RATE64 the real rate.
        let mut opts = tbf_parms(u32::MAX, 1 << 20);
        opts.extend(nla(TCA_TBF_RATE64, &5_000_000_000u64.to_ne_bytes()));
        let p = tcmsg_payload(
            3,
            0x1_0000,
            TC_H_ROOT,
            &[kind("tbf"), nla(TCA_OPTIONS, &opts), stats2([0; 5], None)],
        );
        let q = decode_qdisc(&p).unwrap();
        assert_eq!(q.rate_bps, Some(40_000_000_000));
        assert_eq!(q.limit.bytes, Some(1 << 20));
    }

    #[test]
    fn fifo_limits() {
        // struct tc_fifo_qopt { u32 limit; }: bfifo in bytes, pfifo in packets.
        let b = decode_qdisc(&tcmsg_payload(
            2,
            0x1_0000,
            TC_H_ROOT,
            &[kind("bfifo"), nla(TCA_OPTIONS, &u32s(&[30_000]))],
        ))
        .unwrap();
        assert_eq!(
            b.limit,
            QueueLimit {
                bytes: Some(30_000),
                packets: None
            }
        );
        assert_eq!(b.rate_bps, None);
        let p = decode_qdisc(&tcmsg_payload(
            2,
            0x1_0000,
            TC_H_ROOT,
            &[kind("pfifo"), nla(TCA_OPTIONS, &u32s(&[100]))],
        ))
        .unwrap();
        assert_eq!(
            p.limit,
            QueueLimit {
                bytes: None,
                packets: Some(100)
            }
        );
        // A truncated fifo option reads as "no limit", not as an error.
        let t = decode_qdisc(&tcmsg_payload(
            2,
            0,
            TC_H_ROOT,
            &[kind("pfifo"), nla(TCA_OPTIONS, &[1, 2])],
        ))
        .unwrap();
        assert_eq!(t.limit, QueueLimit::default());
    }

    #[test]
    fn htb_qdisc_has_no_rate_but_its_root_class_does() {
        // The qdisc: TCA_OPTIONS { TCA_HTB_INIT struct tc_htb_glob { version 3,
        // rate2quantum 10, defcls 0x10, debug 0, direct_pkts 0 } }: no rate.
        let q = decode_qdisc(&tcmsg_payload(
            4,
            0x1_0000,
            TC_H_ROOT,
            &[
                kind("htb"),
                nla(TCA_OPTIONS, &nla(2, &u32s(&[3, 10, 0x10, 0, 0]))),
                stats2([0, 0, 0, 0, 0], None),
            ],
        ))
        .unwrap();
        assert_eq!((q.kind.as_str(), q.rate_bps), ("htb", None));
        // A root class 1:1: TCA_HTB_PARMS struct tc_htb_opt { rate {.., rate 6250000
        // bytes/s = 50 Mbit/s}, ceil {.., same}, buffer, cbuffer, quantum, level, prio }.
        let spec = |bytes: u32| {
            let mut r = vec![0, 1, 0, 0, 0xff, 0xff, 0, 0];
            r.extend(u32s(&[bytes]));
            r
        };
        let mut opt = spec(6_250_000);
        opt.extend(spec(6_250_000));
        opt.extend(u32s(&[0, 0, 0, 0, 0]));
        let class = |classid, parent, extra: Option<Vec<u8>>| {
            let mut o = nla(TCA_HTB_PARMS, &opt);
            if let Some(e) = extra {
                o.extend(e);
            }
            tcmsg_payload(4, classid, parent, &[kind("htb"), nla(TCA_OPTIONS, &o)])
        };
        let root = decode_class(&class(0x1_0001, TC_H_ROOT, None)).unwrap();
        assert_eq!((root.classid, root.parent), (0x1_0001, TC_H_ROOT));
        assert_eq!(root.rate_bps, Some(50_000_000));
        let leaf = decode_class(&class(0x1_0010, 0x1_0001, None)).unwrap();
        assert_eq!(
            htb_root_rate(&[root.clone(), leaf.clone()]),
            Some(50_000_000)
        );
        // Two root classes: no single answer.
        let root2 = ClassInfo {
            classid: 0x1_0002,
            ..root.clone()
        };
        assert_eq!(htb_root_rate(&[root.clone(), root2]), None);
        assert_eq!(htb_root_rate(&[leaf]), None);
        // TCA_HTB_RATE64 overrides the 32-bit ratespec.
        let big = decode_class(&class(
            0x1_0001,
            TC_H_ROOT,
            Some(nla(TCA_HTB_RATE64, &12_500_000_000u64.to_ne_bytes())),
        ))
        .unwrap();
        assert_eq!(big.rate_bps, Some(100_000_000_000));
    }

    /// fq_codel options and xstats: struct tc_fq_codel_xstats { u32 type = QDISC (0);
    /// maxpacket, drop_overlimit, ecn_mark, new_flow_count, new_flows_len, old_flows_len,
    /// ce_mark, memory_usage, drop_overmemory }.
    fn fq_codel(ecn: u32, ce_threshold: bool, xstats: Option<Vec<u8>>, legacy: bool) -> Vec<u8> {
        let mut o = nla(TCA_FQ_CODEL_LIMIT, &u32s(&[10240]));
        o.extend(nla(TCA_FQ_CODEL_ECN, &u32s(&[ecn])));
        if ce_threshold {
            o.extend(nla(TCA_FQ_CODEL_CE_THRESHOLD, &u32s(&[1000])));
        }
        o.extend(nla(TCA_FQ_CODEL_MEMORY_LIMIT, &u32s(&[32 << 20])));
        let mut a = vec![kind("fq_codel"), nla(TCA_OPTIONS, &o)];
        match (xstats, legacy) {
            (Some(x), true) => {
                a.push(stats2([3, 4500, 7, 0, 0], None));
                a.push(nla(TCA_XSTATS, &x));
            }
            (x, _) => a.push(stats2([3, 4500, 7, 0, 0], x.as_deref())),
        }
        tcmsg_payload(6, 0x8002_0000, TC_H_ROOT, &a)
    }

    fn fq_codel_xstats(ecn_mark: u32, ce_mark: u32) -> Vec<u8> {
        u32s(&[
            TCA_FQ_CODEL_XSTATS_QDISC,
            1514,
            0,
            ecn_mark,
            5,
            0,
            1,
            ce_mark,
            9000,
            0,
        ])
    }

    #[test]
    fn fq_codel_marks() {
        let q = decode_qdisc(&fq_codel(1, false, Some(fq_codel_xstats(77, 0)), false)).unwrap();
        assert_eq!(q.ecn, EcnMarking::Marks(77));
        assert!(q.ecn.can_mark());
        assert_eq!(
            q.limit,
            QueueLimit {
                bytes: Some(32 << 20),
                packets: Some(10240)
            }
        );
        assert_eq!(q.queue.map(|s| (s.backlog, s.drops)), Some((4500, 7)));
        // ce_threshold marks count too, and the legacy TCA_XSTATS copy is read alike.
        let q = decode_qdisc(&fq_codel(1, true, Some(fq_codel_xstats(5, 6)), true)).unwrap();
        assert_eq!(q.ecn, EcnMarking::Marks(11));
        // `noecn` without ce_threshold cannot mark; with ce_threshold it can.
        let q = decode_qdisc(&fq_codel(0, false, Some(fq_codel_xstats(0, 0)), false)).unwrap();
        assert_eq!(q.ecn, EcnMarking::Disabled);
        let q = decode_qdisc(&fq_codel(0, true, Some(fq_codel_xstats(0, 3)), false)).unwrap();
        assert_eq!(q.ecn, EcnMarking::Marks(3));
        // Class xstats (type 1) or none at all: capability known, count not.
        let mut class = fq_codel_xstats(1, 1);
        class[0] = 1;
        let q = decode_qdisc(&fq_codel(1, false, Some(class), false)).unwrap();
        assert_eq!(q.ecn, EcnMarking::StatsMissing);
        let q = decode_qdisc(&fq_codel(1, false, None, false)).unwrap();
        assert_eq!(q.ecn, EcnMarking::StatsMissing);
    }

    /// red: TCA_RED_PARMS struct tc_red_qopt { u32 limit, qth_min, qth_max; u8 Wlog,
    /// Plog, Scell_log, flags }; xstats struct tc_red_xstats { early, pdrop, other, marked }.
    fn red(flags: u8, red_flags: Option<u32>) -> Vec<u8> {
        let mut parms = u32s(&[400_000, 30_000, 90_000]);
        parms.extend([9, 21, 0, flags]);
        let mut o = nla(TCA_RED_PARMS, &parms);
        if let Some(f) = red_flags {
            // struct nla_bitfield32 { value, selector }
            o.extend(nla(TCA_RED_FLAGS, &u32s(&[f, 0xf])));
        }
        let xstats = u32s(&[12, 3, 0, 88]);
        tcmsg_payload(
            7,
            0x1_0000,
            TC_H_ROOT,
            &[
                kind("red"),
                nla(TCA_OPTIONS, &o),
                stats2([1, 1500, 15, 0, 0], Some(&xstats)),
            ],
        )
    }

    #[test]
    fn red_marks_only_with_ecn() {
        let q = decode_qdisc(&red(TC_RED_ECN as u8, None)).unwrap();
        assert_eq!(q.ecn, EcnMarking::Marks(88));
        assert_eq!(q.limit.bytes, Some(400_000));
        let q = decode_qdisc(&red(0, Some(TC_RED_ECN))).unwrap();
        assert_eq!(q.ecn, EcnMarking::Marks(88));
        let q = decode_qdisc(&red(2 /* harddrop */, Some(8 /* nodrop */))).unwrap();
        assert_eq!(q.ecn, EcnMarking::Disabled);
    }

    #[test]
    fn pie_marks_both_layouts() {
        let opts = |ecn: u32| {
            let mut o = nla(TCA_PIE_LIMIT, &u32s(&[1000]));
            o.extend(nla(TCA_PIE_ECN, &u32s(&[ecn])));
            nla(TCA_OPTIONS, &o)
        };
        // Since 5.6: u64 prob; delay, avg_dq_rate, dq_rate_estimating, packets_in, dropped,
        // overlimit, maxq, ecn_mark (40 bytes).
        let mut new = 123u64.to_ne_bytes().to_vec();
        new.extend(u32s(&[1, 2, 0, 500, 4, 0, 30, 21]));
        // Before: prob, delay, avg_dq_rate, packets_in, dropped, overlimit, maxq, ecn_mark.
        let old = u32s(&[123, 1, 2, 500, 4, 0, 30, 22]);
        for (x, want) in [(new, 21), (old, 22)] {
            let p = tcmsg_payload(
                8,
                0x1_0000,
                TC_H_ROOT,
                &[kind("pie"), opts(1), stats2([0; 5], Some(&x))],
            );
            let q = decode_qdisc(&p).unwrap();
            assert_eq!(q.ecn, EcnMarking::Marks(want));
            assert_eq!(q.limit.packets, Some(1000));
        }
        let p = tcmsg_payload(8, 0x1_0000, TC_H_ROOT, &[kind("pie"), opts(0)]);
        assert_eq!(decode_qdisc(&p).unwrap().ecn, EcnMarking::Disabled);
    }

    #[test]
    fn cake_sums_tin_marks_and_has_a_rate() {
        let opts = nla(
            TCA_OPTIONS,
            &nla(TCA_CAKE_BASE_RATE64, &12_500_000u64.to_ne_bytes()),
        );
        // xstats: TCA_CAKE_STATS_MEMORY_LIMIT 4 MiB, TCA_CAKE_STATS_TIN_STATS { tin 1 {
        // SENT_PACKETS 10, ECN_MARKED_PACKETS 4 }, tin 2 { ECN_MARKED_PACKETS 5 } }.
        let mut tin1 = nla(2, &u32s(&[10]));
        tin1.extend(nla(TCA_CAKE_TIN_STATS_ECN_MARKED_PACKETS, &u32s(&[4])));
        let tin2 = nla(TCA_CAKE_TIN_STATS_ECN_MARKED_PACKETS, &u32s(&[5]));
        let mut tins = nla(1, &tin1);
        tins.extend(nla(2, &tin2));
        let mut x = nla(TCA_CAKE_STATS_MEMORY_LIMIT, &u32s(&[4 << 20]));
        x.extend(nla(TCA_CAKE_STATS_TIN_STATS, &tins));
        let p = tcmsg_payload(
            9,
            0x8003_0000,
            TC_H_ROOT,
            &[kind("cake"), opts, stats2([0; 5], Some(&x))],
        );
        let q = decode_qdisc(&p).unwrap();
        assert_eq!(q.rate_bps, Some(100_000_000));
        assert_eq!(q.ecn, EcnMarking::Marks(9));
        assert_eq!(q.limit.bytes, Some(4 << 20));
    }

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
    fn noqueue_and_unknown_kinds_cannot_mark() {
        for k in ["noqueue", "pfifo_fast", "mq", "sfq", "prio"] {
            let p = tcmsg_payload(1, 0, TC_H_ROOT, &[kind(k), stats2([0; 5], None)]);
            let q = decode_qdisc(&p).unwrap();
            assert_eq!(q.kind, k);
            assert_eq!(q.ecn, EcnMarking::CannotMark);
            assert_eq!((q.rate_bps, q.limit), (None, QueueLimit::default()));
        }
        // A child qdisc is decoded but not the root.
        let p = tcmsg_payload(1, 0x10_0000, 0x1_0001, &[kind("pfifo")]);
        assert!(!decode_qdisc(&p).unwrap().is_root());
    }

    #[test]
    fn dump_framing_and_requests() {
        // Two messages of one recv buffer, the second NLMSG_DONE (payload: int 0).
        let link = {
            let mut body = vec![0u8; IFINFOMSG_LEN];
            body[4..8].copy_from_slice(&9u32.to_ne_bytes());
            body.extend(nla(IFLA_IFNAME, b"eth9\0"));
            body
        };
        let mut buf = Vec::new();
        for (ty, body) in [(RTM_NEWLINK, link), (NLMSG_DONE, vec![0; 4])] {
            buf.extend(((16 + body.len()) as u32).to_ne_bytes());
            buf.extend(ty.to_ne_bytes());
            buf.extend(2u16.to_ne_bytes());
            buf.extend(5u32.to_ne_bytes());
            buf.extend(0u32.to_ne_bytes());
            buf.extend(body);
        }
        let m: Vec<_> = messages(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            decode_link(m[0].payload).unwrap().name.as_deref(),
            Some("eth9")
        );
        assert_eq!((m[1].ty, m[1].seq), (NLMSG_DONE, 5));
        // A length beyond the buffer stops the iteration with one error.
        let mut bad = buf.clone();
        bad[0] = 0xff;
        let r: Vec<_> = messages(&bad).collect();
        assert_eq!(r, vec![Err(DecodeError::MessageLength)]);
        // Requests: header + zeroed family header; the class dump names its device.
        let g = encode_getlink_dump(3);
        assert_eq!(g.len(), 32);
        assert_eq!(&g[0..12], &[32, 0, 0, 0, 18, 0, 0x01, 0x03, 3, 0, 0, 0][..]);
        let q = encode_getqdisc_dump(4);
        assert_eq!((q.len(), q[4]), (36, RTM_GETQDISC as u8));
        let c = encode_gettclass_dump(77, 5);
        assert_eq!(
            (c[4], &c[20..24]),
            (RTM_GETTCLASS as u8, &77u32.to_ne_bytes()[..])
        );
        // if_stats_msg: family 0, pads, ifindex 0 (every link), filter_mask LINK_64 only.
        let st = encode_getstats_dump(6);
        assert_eq!(st.len(), 16 + IF_STATS_MSG_LEN);
        assert_eq!(&st[4..6], &RTM_GETSTATS.to_ne_bytes()[..]);
        assert_eq!(&st[16..24], &[0; 8][..]);
        assert_eq!(&st[24..28], &1u32.to_ne_bytes()[..]);
        // Truncated fixed headers are errors, not panics.
        assert_eq!(
            decode_link(&[0; 7]),
            Err(DecodeError::Truncated("ifinfomsg"))
        );
        assert_eq!(decode_qdisc(&[0; 19]), Err(DecodeError::Truncated("tcmsg")));
        // A truncated stats64 is an error.
        let mut l = vec![0u8; IFINFOMSG_LEN];
        l.extend(nla(IFLA_STATS64, &[0; 40]));
        assert!(matches!(
            decode_link(&l),
            Err(DecodeError::AttrSize {
                ty: IFLA_STATS64,
                ..
            })
        ));
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

    /// Random attributes with valid framing: the decoders see every kind with arbitrary
    /// option, stats and xstats payloads.
    fn arb_attr() -> impl Strategy<Value = Vec<u8>> {
        let leaf =
            (0u16..12, proptest::collection::vec(any::<u8>(), 0..48)).prop_map(|(t, p)| nla(t, &p));
        leaf.prop_recursive(3, 32, 4, |inner| {
            (0u16..12, proptest::collection::vec(inner, 0..4))
                .prop_map(|(t, v)| nla(t, &v.concat()))
        })
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            for m in messages(&b).flatten() {
                let _ = decode_link(m.payload);
                let _ = decode_qdisc(m.payload);
                let _ = decode_class(m.payload);
                let _ = decode_stats(m.payload);
            }
            let _ = decode_link(&b);
            let _ = decode_qdisc(&b);
            let _ = decode_class(&b);
            let _ = peek_qdisc(&b);
        }

        #[test]
        fn random_attributes_never_panic(
            k in prop::sample::select(vec![
                "tbf", "bfifo", "pfifo", "fq_codel", "red", "pie", "cake", "htb", "fq", "x",
            ]),
            a in proptest::collection::vec(arb_attr(), 0..6),
            link in proptest::collection::vec(arb_attr(), 0..6),
        ) {
            let mut attrs = vec![kind(k)];
            attrs.extend(a.iter().enumerate().map(|(i, x)| {
                // Wrap some in the attributes the decoder descends into.
                match i % 3 {
                    0 => nla(TCA_OPTIONS, x),
                    1 => nla(TCA_STATS2, x),
                    _ => nla(TCA_XSTATS, x),
                }
            }));
            let p = tcmsg_payload(1, 0, TC_H_ROOT, &attrs);
            let _ = decode_qdisc(&p);
            let _ = decode_class(&p);
            let mut l = vec![0u8; IFINFOMSG_LEN];
            l.extend(link.concat());
            let _ = decode_link(&l);
        }
    }
}
