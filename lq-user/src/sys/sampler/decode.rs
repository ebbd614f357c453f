//! The sampler's pure half: the kernel constants of its dumps, the decoders of the link,
//! stats, qdisc and class replies, and the encoders of the dump requests. Everything here
//! is a pure function over bytes (native endian, as netlink is), with no system calls: the
//! sockets and the per-link state are in the parent module ([`super::Sampler`]), which
//! re-exports these items. The decoders never panic, and are tested with hand-built
//! messages: this kernel has no marking qdisc to test against.

// ------------------------------------------------------------------ kernel constants

// Kernel constants come from `libc` and the netlink crates where they have them; the
// rest (the if_stats_msg filter, the qdiscs' option and xstats attributes, which neither
// exports) are ours, from the UAPI headers named beside them.
use crate::sys::netlink::wire::{self, NLM_F_DUMP, NLM_F_REQUEST};
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

pub(super) fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
pub(super) fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::wire::NLMSG_DONE;
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
