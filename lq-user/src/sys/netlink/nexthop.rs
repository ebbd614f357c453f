//! The rtnetlink nexthop-object codec (RTM_NEWNEXTHOP / RTM_DELNEXTHOP / RTM_GETNEXTHOP).
//!
//! The `netlink-packet-route` (0.34) and `rtnetlink` crates have no nexthop messages, so
//! this module encodes and decodes them from the kernel UAPI (`include/uapi/linux/nexthop.h`,
//! `rtnetlink.h`), written against `netlink-packet-core`'s traits like the crate's own
//! messages: the attributes implement [`Nla`] and are emitted as an [`Emitable`] body, and
//! decoding walks frames and attributes with the shared layer ([`super::wire`]). Netlink is
//! host byte order; the byte fixtures in the tests are for little-endian hosts.
//!
//! Every object `lqd` creates carries [`RTPROT_LQ`] as its protocol, so the daemon can tell
//! its own objects from everyone else's in a dump or a multicast notification and never
//! touches objects it did not create ([`NexthopMsg::is_ours`]).
//!
//! Decoding never panics: every length is checked, unknown attributes are skipped and
//! listed, and malformed input is an error (proptest below).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

use super::wire::{self, Body, Emitable, NLA_HEADER_SIZE, Nla};
use crate::core::controller::config::{GroupKind, duration_ns};

// The nexthop message types and attributes are in neither `libc` nor
// `netlink-packet-route` (0.34): they are defined here, from nexthop.h and rtnetlink.h.
// Everything else comes from the crates.
pub use super::wire::{
    NLA_F_NESTED, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLM_F_REQUEST, NLMSG_DONE,
    NLMSG_ERROR,
};
pub use netlink_packet_core::NLA_TYPE_MASK;

/// RTM_NEWNEXTHOP (rtnetlink.h).
pub const RTM_NEWNEXTHOP: u16 = 104;
/// RTM_DELNEXTHOP.
pub const RTM_DELNEXTHOP: u16 = 105;
/// RTM_GETNEXTHOP.
pub const RTM_GETNEXTHOP: u16 = 106;
/// Multicast group of nexthop notifications (RTNLGRP_NEXTHOP).
pub const RTNLGRP_NEXTHOP: u32 = libc::RTNLGRP_NEXTHOP;
/// NLM_F_MULTI: part of a multipart (dump) reply.
pub const NLM_F_MULTI: u16 = netlink_packet_core::NLM_F_MULTIPART;

/// Protocol of `lqd`'s nexthop objects: 0x4c, 'L'. Free in rtnetlink.h (RTPROT_* uses 0-4,
/// 8-18, 42, 99, 186-189, 192) and in iproute2's rt_protos.
pub const RTPROT_LQ: u8 = 0x4c;

/// NHA_ID (nexthop.h): u32.
pub const NHA_ID: u16 = 1;
/// NHA_GROUP: array of `struct nexthop_grp`.
pub const NHA_GROUP: u16 = 2;
/// NHA_GROUP_TYPE: u16.
pub const NHA_GROUP_TYPE: u16 = 3;
/// NHA_BLACKHOLE: flag.
pub const NHA_BLACKHOLE: u16 = 4;
/// NHA_OIF: u32.
pub const NHA_OIF: u16 = 5;
/// NHA_GATEWAY: 4 or 16 bytes.
pub const NHA_GATEWAY: u16 = 6;
/// NHA_FDB: flag.
pub const NHA_FDB: u16 = 11;
/// NHA_RES_GROUP: nested.
pub const NHA_RES_GROUP: u16 = 12;
/// NHA_RES_GROUP_BUCKETS: u16.
pub const NHA_RES_GROUP_BUCKETS: u16 = 1;
/// NHA_RES_GROUP_IDLE_TIMER: u32 clock_t.
pub const NHA_RES_GROUP_IDLE_TIMER: u16 = 2;
/// NHA_RES_GROUP_UNBALANCED_TIMER: u32 clock_t.
pub const NHA_RES_GROUP_UNBALANCED_TIMER: u16 = 3;
/// NHA_RES_GROUP_UNBALANCED_TIME: u64 clock_t (kernel -> user only).
pub const NHA_RES_GROUP_UNBALANCED_TIME: u16 = 4;
/// NEXTHOP_GRP_TYPE_MPATH: hash-threshold.
pub const NEXTHOP_GRP_TYPE_MPATH: u16 = 0;
/// NEXTHOP_GRP_TYPE_RES: resilient.
pub const NEXTHOP_GRP_TYPE_RES: u16 = 1;

/// AF_UNSPEC: the family of a group.
pub const AF_UNSPEC: u8 = libc::AF_UNSPEC as u8;
/// AF_INET.
pub const AF_INET: u8 = libc::AF_INET as u8;
/// AF_INET6.
pub const AF_INET6: u8 = libc::AF_INET6 as u8;

/// Largest kernel weight of a group member: 8 bits of `weight` plus 8 of `weight_high`
/// (weight - 1 is carried). Values above 256 need a kernel >= 6.12.
pub const MAX_KERNEL_WEIGHT: u32 = 65_536;

const NHMSG_LEN: usize = 8;
const NH_GRP_LEN: usize = 8;

/// A member of a nexthop group with its kernel weight (1..=65536).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupMember {
    /// Nexthop object id.
    pub id: u32,
    /// Kernel weight (the wire carries weight - 1).
    pub weight: u32,
}

/// Resilient group parameters (NHA_RES_GROUP). Timers in clock_t (USER_HZ = 100, so
/// centiseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResilientParams {
    /// NHA_RES_GROUP_BUCKETS.
    pub buckets: Option<u16>,
    /// NHA_RES_GROUP_IDLE_TIMER.
    pub idle_timer: Option<u32>,
    /// NHA_RES_GROUP_UNBALANCED_TIMER.
    pub unbalanced_timer: Option<u32>,
    /// NHA_RES_GROUP_UNBALANCED_TIME (reported by the kernel, never sent).
    pub unbalanced_time: Option<u64>,
}

/// One nexthop object: `struct nhmsg` and its attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NexthopMsg {
    /// nh_family: AF_INET/AF_INET6 for a gateway nexthop, AF_UNSPEC for a group.
    pub family: u8,
    /// nh_scope.
    pub scope: u8,
    /// nh_protocol ([`RTPROT_LQ`] for ours).
    pub protocol: u8,
    /// nh_flags (RTNH_F_*).
    pub flags: u32,
    /// NHA_ID.
    pub id: Option<u32>,
    /// NHA_GROUP members (empty: not a group).
    pub group: Vec<GroupMember>,
    /// NHA_GROUP_TYPE.
    pub group_type: Option<u16>,
    /// NHA_BLACKHOLE.
    pub blackhole: bool,
    /// NHA_OIF.
    pub oif: Option<u32>,
    /// NHA_GATEWAY.
    pub gateway: Option<IpAddr>,
    /// NHA_FDB.
    pub fdb: bool,
    /// NHA_RES_GROUP.
    pub resilient: Option<ResilientParams>,
    /// Types of the attributes that were skipped on decode.
    pub unknown_attrs: Vec<u16>,
}

#[cfg(test)]
impl NexthopMsg {
    /// Test fixtures: the group object `id` of `protocol` with `members`, weight 1 each.
    pub(crate) fn test_group(id: u32, protocol: u8, members: &[u32]) -> Self {
        Self {
            id: Some(id),
            protocol,
            group: members
                .iter()
                .map(|&id| GroupMember { id, weight: 1 })
                .collect(),
            ..Default::default()
        }
    }
}

impl NexthopMsg {
    /// A gateway nexthop `id via gateway dev oif`, owned by `lqd`.
    pub fn gateway(id: u32, oif: u32, gateway: IpAddr) -> Self {
        Self {
            family: if gateway.is_ipv4() { AF_INET } else { AF_INET6 },
            protocol: RTPROT_LQ,
            id: Some(id),
            oif: Some(oif),
            gateway: Some(gateway),
            ..Default::default()
        }
    }

    /// A group of the configured kind, owned by `lqd`.
    pub fn group(id: u32, members: Vec<GroupMember>, kind: &GroupKind) -> Self {
        let (group_type, resilient) = match *kind {
            GroupKind::Resilient {
                buckets,
                idle_timer,
                unbalanced_timer,
            } => (
                NEXTHOP_GRP_TYPE_RES,
                Some(ResilientParams {
                    buckets: Some(buckets),
                    idle_timer: Some(clock_t(idle_timer)),
                    unbalanced_timer: Some(clock_t(unbalanced_timer)),
                    unbalanced_time: None,
                }),
            ),
            GroupKind::HashThreshold => (NEXTHOP_GRP_TYPE_MPATH, None),
        };
        Self {
            family: AF_UNSPEC,
            protocol: RTPROT_LQ,
            id: Some(id),
            group: members,
            group_type: Some(group_type),
            resilient,
            ..Default::default()
        }
    }

    /// [`Self::group`] from `(member, weight)` pairs, each member's nexthop id being
    /// `base + member` (lqd's member nexthops are `id-base + uplink id`).
    pub fn weighted_group(id: u32, base: u32, weights: &[(u32, u32)], kind: &GroupKind) -> Self {
        let members = weights
            .iter()
            .map(|&(m, weight)| GroupMember {
                id: base + m,
                weight,
            })
            .collect();
        Self::group(id, members, kind)
    }

    /// Was this object created by `lqd`?
    pub fn is_ours(&self) -> bool {
        self.protocol == RTPROT_LQ
    }
}

/// A duration in clock_t (USER_HZ = 100: centiseconds), saturating at `u32::MAX`.
pub fn clock_t(d: std::time::Duration) -> u32 {
    u32::try_from(duration_ns(d) / 10_000_000).unwrap_or(u32::MAX)
}

/// Why a message could not be encoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EncodeError {
    /// Every object needs NHA_ID (the daemon never lets the kernel pick ids).
    #[error("nexthop without an id")]
    NoId,
    /// The kernel refuses id 0 as a member.
    #[error("group member with id 0")]
    ZeroMemberId,
    /// Kernel weights are 1..=65536.
    #[error("group member {id}: weight {weight} is outside 1..=65536")]
    Weight {
        /// The member.
        id: u32,
        /// The refused weight.
        weight: u32,
    },
    /// The kernel refuses a member listed twice.
    #[error("group member {0} listed twice")]
    DuplicateMember(u32),
    /// The message would exceed a u16 attribute length or u32 message length.
    #[error("message too large")]
    TooLarge,
}

/// Why bytes could not be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// A netlink header is cut short or its length is out of range.
    #[error("bad netlink message length")]
    MessageLength,
    /// The payload is shorter than `struct nhmsg`.
    #[error("nexthop message shorter than struct nhmsg")]
    Truncated,
    /// An attribute header is cut short or its length is out of range.
    #[error("bad attribute length")]
    AttrLength,
    /// A known attribute has the wrong size.
    #[error("attribute {0} has the wrong size")]
    AttrSize(u16),
}

/// `struct nlmsghdr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NlHeader {
    /// nlmsg_len.
    pub len: u32,
    /// nlmsg_type.
    pub ty: u16,
    /// nlmsg_flags.
    pub flags: u16,
    /// nlmsg_seq.
    pub seq: u32,
    /// nlmsg_pid.
    pub pid: u32,
}

/// A decoded netlink message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetlinkMessage {
    /// RTM_NEWNEXTHOP (dump entry or notification).
    NewNexthop(NlHeader, NexthopMsg),
    /// RTM_DELNEXTHOP notification.
    DelNexthop(NlHeader, NexthopMsg),
    /// NLMSG_ERROR: `errno` 0 is an ACK, otherwise a negative errno.
    Error(NlHeader, i32),
    /// NLMSG_DONE.
    Done(NlHeader),
    /// Anything else (skipped).
    Other(NlHeader),
}

// ---------------------------------------------------------------- encoding

/// One attribute of `struct nhmsg`, emitted through `netlink-packet-core`'s [`Nla`].
enum NhAttr {
    /// NHA_ID.
    Id(u32),
    /// NHA_GROUP: `struct nexthop_grp { u32 id; u8 weight; u8 weight_high; u16 resvd2; }`
    /// per member, weights already checked to be 1..=65536 (the wire carries weight - 1).
    Group(Vec<GroupMember>),
    /// NHA_GROUP_TYPE.
    GroupType(u16),
    /// NHA_BLACKHOLE.
    Blackhole,
    /// NHA_OIF.
    Oif(u32),
    /// NHA_GATEWAY: 4 or 16 octets.
    Gateway(IpAddr),
    /// NHA_FDB.
    Fdb,
    /// NHA_RES_GROUP, nested (the kernel's strict parser wants NLA_F_NESTED).
    ResGroup(Vec<ResAttr>),
}

/// One attribute inside NHA_RES_GROUP.
enum ResAttr {
    /// NHA_RES_GROUP_BUCKETS.
    Buckets(u16),
    /// NHA_RES_GROUP_IDLE_TIMER.
    IdleTimer(u32),
    /// NHA_RES_GROUP_UNBALANCED_TIMER.
    UnbalancedTimer(u32),
}

impl Nla for NhAttr {
    fn value_len(&self) -> usize {
        match self {
            Self::Id(_) | Self::Oif(_) => 4,
            Self::Group(m) => m.len() * NH_GRP_LEN,
            Self::GroupType(_) => 2,
            Self::Blackhole | Self::Fdb => 0,
            Self::Gateway(IpAddr::V4(_)) => 4,
            Self::Gateway(IpAddr::V6(_)) => 16,
            Self::ResGroup(inner) => inner.as_slice().buffer_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Id(_) => NHA_ID,
            Self::Group(_) => NHA_GROUP,
            Self::GroupType(_) => NHA_GROUP_TYPE,
            Self::Blackhole => NHA_BLACKHOLE,
            Self::Oif(_) => NHA_OIF,
            Self::Gateway(_) => NHA_GATEWAY,
            Self::Fdb => NHA_FDB,
            Self::ResGroup(_) => NHA_RES_GROUP | NLA_F_NESTED,
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Id(v) | Self::Oif(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::Group(members) => {
                for (m, out) in members.iter().zip(buf.chunks_exact_mut(NH_GRP_LEN)) {
                    let w = m.weight - 1;
                    out[..4].copy_from_slice(&m.id.to_ne_bytes());
                    out[4..].copy_from_slice(&[(w & 0xff) as u8, (w >> 8) as u8, 0, 0]);
                }
            }
            Self::GroupType(t) => buf.copy_from_slice(&t.to_ne_bytes()),
            Self::Blackhole | Self::Fdb => {}
            Self::Gateway(IpAddr::V4(a)) => buf.copy_from_slice(&a.octets()),
            Self::Gateway(IpAddr::V6(a)) => buf.copy_from_slice(&a.octets()),
            Self::ResGroup(inner) => inner.as_slice().emit(buf),
        }
    }
}

impl Nla for ResAttr {
    fn value_len(&self) -> usize {
        match self {
            Self::Buckets(_) => 2,
            Self::IdleTimer(_) | Self::UnbalancedTimer(_) => 4,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Buckets(_) => NHA_RES_GROUP_BUCKETS,
            Self::IdleTimer(_) => NHA_RES_GROUP_IDLE_TIMER,
            Self::UnbalancedTimer(_) => NHA_RES_GROUP_UNBALANCED_TIMER,
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Buckets(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::IdleTimer(v) | Self::UnbalancedTimer(v) => buf.copy_from_slice(&v.to_ne_bytes()),
        }
    }
}

/// `struct nhmsg { u8 nh_family; u8 nh_scope; u8 nh_protocol; u8 resvd; u32 nh_flags; }`.
fn nhmsg(family: u8, scope: u8, protocol: u8, flags: u32) -> [u8; NHMSG_LEN] {
    let f = flags.to_ne_bytes();
    [family, scope, protocol, 0, f[0], f[1], f[2], f[3]]
}

/// RTM_NEWNEXTHOP with NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE: create
/// the object, or replace it in place (a group's weights change without a new id).
pub fn encode_new(msg: &NexthopMsg, seq: u32) -> Result<Vec<u8>, EncodeError> {
    let id = msg.id.ok_or(EncodeError::NoId)?;
    let mut attrs = vec![NhAttr::Id(id)];
    if !msg.group.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        for m in &msg.group {
            if m.id == 0 {
                return Err(EncodeError::ZeroMemberId);
            }
            if !seen.insert(m.id) {
                return Err(EncodeError::DuplicateMember(m.id));
            }
            if !(1..=MAX_KERNEL_WEIGHT).contains(&m.weight) {
                return Err(EncodeError::Weight {
                    id: m.id,
                    weight: m.weight,
                });
            }
        }
        attrs.push(NhAttr::Group(msg.group.clone()));
    }
    if let Some(t) = msg.group_type {
        attrs.push(NhAttr::GroupType(t));
    }
    if msg.blackhole {
        attrs.push(NhAttr::Blackhole);
    }
    if let Some(oif) = msg.oif {
        attrs.push(NhAttr::Oif(oif));
    }
    if let Some(gw) = msg.gateway {
        attrs.push(NhAttr::Gateway(gw));
    }
    if msg.fdb {
        attrs.push(NhAttr::Fdb);
    }
    if let Some(r) = &msg.resilient {
        let inner = [
            r.buckets.map(ResAttr::Buckets),
            r.idle_timer.map(ResAttr::IdleTimer),
            r.unbalanced_timer.map(ResAttr::UnbalancedTimer),
        ];
        attrs.push(NhAttr::ResGroup(inner.into_iter().flatten().collect()));
    }
    // An attribute's length is a u16 (Nla::emit would truncate it): only a group of
    // more than 8190 members gets there.
    if attrs
        .iter()
        .any(|a| NLA_HEADER_SIZE + a.value_len() > usize::from(u16::MAX))
    {
        return Err(EncodeError::TooLarge);
    }
    let fixed = nhmsg(msg.family, msg.scope, msg.protocol, msg.flags);
    Ok(wire::message(
        RTM_NEWNEXTHOP,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        seq,
        &Body {
            fixed: &fixed,
            attrs: &attrs,
        },
    ))
}

/// RTM_DELNEXTHOP of one id, NLM_F_REQUEST | NLM_F_ACK. The kernel wants every `nhmsg`
/// field 0 in a delete request.
pub fn encode_del(id: u32, seq: u32) -> Vec<u8> {
    wire::message(
        RTM_DELNEXTHOP,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &Body {
            fixed: &nhmsg(0, 0, 0, 0),
            attrs: &[NhAttr::Id(id)],
        },
    )
}

/// RTM_GETNEXTHOP dump of every object, NLM_F_REQUEST | NLM_F_DUMP (the kernel has no
/// protocol filter: callers keep the objects for which [`NexthopMsg::is_ours`]).
pub fn encode_get_dump(seq: u32) -> Vec<u8> {
    wire::message(
        RTM_GETNEXTHOP,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        &wire::fixed_only(&nhmsg(0, 0, 0, 0)),
    )
}

// ---------------------------------------------------------------- decoding

/// The attributes of `buf` (the shared iterator); a malformed one is [`DecodeError::AttrLength`].
fn attrs(buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    wire::attrs(buf).map(|a| a.map_err(|_| DecodeError::AttrLength))
}

fn fixed<const N: usize>(ty: u16, p: &[u8]) -> Result<[u8; N], DecodeError> {
    p.try_into().map_err(|_| DecodeError::AttrSize(ty))
}

/// A native-endian integer of exactly its size, or the attribute's size error.
fn ne_u16(ty: u16, p: &[u8]) -> Result<u16, DecodeError> {
    Ok(u16::from_ne_bytes(fixed(ty, p)?))
}
fn ne_u32(ty: u16, p: &[u8]) -> Result<u32, DecodeError> {
    Ok(u32::from_ne_bytes(fixed(ty, p)?))
}

/// The leading native-endian integer of an attribute that may carry more (the kernel
/// pads NHA_RES_GROUP_BUCKETS, and older code read it so).
fn lead_u16(ty: u16, p: &[u8]) -> Result<u16, DecodeError> {
    p.get(..2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or(DecodeError::AttrSize(ty))
}
fn lead_u64(ty: u16, p: &[u8]) -> Result<u64, DecodeError> {
    p.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .ok_or(DecodeError::AttrSize(ty))
}

/// Decode the payload of an RTM_NEWNEXTHOP / RTM_DELNEXTHOP message (after the netlink
/// header): `struct nhmsg` and its attributes.
pub fn decode_nexthop(payload: &[u8]) -> Result<NexthopMsg, DecodeError> {
    let hdr: &[u8; NHMSG_LEN] = payload
        .get(..NHMSG_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(DecodeError::Truncated)?;
    let mut m = NexthopMsg {
        family: hdr[0],
        scope: hdr[1],
        protocol: hdr[2],
        flags: u32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
        ..Default::default()
    };
    for a in attrs(&payload[NHMSG_LEN..]) {
        let (ty, p) = a?;
        match ty {
            NHA_ID => m.id = Some(ne_u32(ty, p)?),
            NHA_GROUP => {
                if !p.len().is_multiple_of(NH_GRP_LEN) {
                    return Err(DecodeError::AttrSize(ty));
                }
                m.group = p
                    .chunks_exact(NH_GRP_LEN)
                    .map(|c| GroupMember {
                        id: u32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
                        // weight_high is 0 (was resvd1) on kernels before 6.12.
                        weight: (u32::from(c[4]) | (u32::from(c[5]) << 8)) + 1,
                    })
                    .collect();
            }
            NHA_GROUP_TYPE => m.group_type = Some(ne_u16(ty, p)?),
            NHA_BLACKHOLE => m.blackhole = true,
            NHA_OIF => m.oif = Some(ne_u32(ty, p)?),
            NHA_GATEWAY => {
                m.gateway = Some(match p.len() {
                    4 => IpAddr::V4(Ipv4Addr::from(fixed::<4>(ty, p)?)),
                    16 => IpAddr::V6(Ipv6Addr::from(fixed::<16>(ty, p)?)),
                    _ => return Err(DecodeError::AttrSize(ty)),
                })
            }
            NHA_FDB => m.fdb = true,
            NHA_RES_GROUP => {
                let mut r = ResilientParams::default();
                for a in attrs(p) {
                    let (t, q) = a?;
                    match t {
                        NHA_RES_GROUP_BUCKETS => r.buckets = Some(lead_u16(t, q)?),
                        NHA_RES_GROUP_IDLE_TIMER => r.idle_timer = Some(ne_u32(t, q)?),
                        NHA_RES_GROUP_UNBALANCED_TIMER => r.unbalanced_timer = Some(ne_u32(t, q)?),
                        NHA_RES_GROUP_UNBALANCED_TIME => r.unbalanced_time = Some(lead_u64(t, q)?),
                        // NHA_RES_GROUP_PAD (alignment of the u64) and future attributes.
                        _ => {}
                    }
                }
                m.resilient = Some(r);
            }
            _ => m.unknown_attrs.push(ty),
        }
    }
    Ok(m)
}

/// Iterate over the netlink messages in one `recv` buffer (a dump part, an ACK, or a
/// multicast notification), framed by the shared layer. Stops after the first framing
/// error.
pub fn parse_messages(
    buf: &[u8],
) -> impl Iterator<Item = Result<NetlinkMessage, DecodeError>> + '_ {
    wire::frames(buf).map(|f| {
        let f = f.map_err(|_| DecodeError::MessageLength)?;
        let h = NlHeader {
            len: f.len,
            ty: f.ty,
            flags: f.flags,
            seq: f.seq,
            pid: f.pid,
        };
        match h.ty {
            RTM_NEWNEXTHOP => decode_nexthop(f.payload).map(|m| NetlinkMessage::NewNexthop(h, m)),
            RTM_DELNEXTHOP => decode_nexthop(f.payload).map(|m| NetlinkMessage::DelNexthop(h, m)),
            NLMSG_ERROR => f
                .error_code()
                .map(|e| NetlinkMessage::Error(h, e))
                .ok_or(DecodeError::Truncated),
            NLMSG_DONE => Ok(NetlinkMessage::Done(h)),
            _ => Ok(NetlinkMessage::Other(h)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_gateway_nexthop() {
        let m = NexthopMsg::gateway(101, 2, v4(10, 0, 0, 2));
        let got = encode_new(&m, 1).unwrap();
        let want = concat!(
            "30000000", // nlmsg_len 48
            "6800",     // RTM_NEWNEXTHOP 104
            "0505",     // REQUEST 0x1 | ACK 0x4 | REPLACE 0x100 | CREATE 0x400
            "01000000", // seq 1
            "00000000", // pid 0
            "02",       // nh_family AF_INET
            "00",       // nh_scope RT_SCOPE_UNIVERSE
            "4c",       // nh_protocol RTPROT_LQ
            "00",       // resvd
            "00000000", // nh_flags
            "0800", "0100", "65000000", // NHA_ID 101
            "0800", "0500", "02000000", // NHA_OIF 2
            "0800", "0600", "0a000002", // NHA_GATEWAY 10.0.0.2
        );
        assert_eq!(hex(&got), want);
        let v6 = NexthopMsg::gateway(102, 3, "fe80::1".parse().unwrap());
        let got = encode_new(&v6, 2).unwrap();
        assert_eq!(got.len(), 16 + 8 + 8 + 8 + 20);
        assert_eq!(got[16], AF_INET6);
        assert_eq!(hex(&got[40..]), "14000600fe800000000000000000000000000001");
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_resilient_group() {
        let kind = GroupKind::default();
        let m = NexthopMsg::group(
            200,
            vec![
                GroupMember {
                    id: 101,
                    weight: 255,
                },
                GroupMember {
                    id: 102,
                    weight: 77,
                },
            ],
            &kind,
        );
        let got = encode_new(&m, 2).unwrap();
        let want = concat!(
            "58000000", "6800", "0505", "02000000", "00000000", // len 88, NEW, flags, seq 2
            "00", "00", "4c", "00", "00000000", // AF_UNSPEC, scope 0, RTPROT_LQ
            "0800", "0100", "c8000000", // NHA_ID 200
            "1400", "0200", // NHA_GROUP, 4 + 2 x 8
            "65000000", "fe", "00", "0000", // id 101, weight 255 - 1, weight_high 0, resvd2
            "66000000", "4c", "00", "0000", // id 102, weight 77 - 1
            "0600", "0300", "0100", "0000", // NHA_GROUP_TYPE resilient (1), 2 bytes padding
            "1c00", "0c80", // NHA_RES_GROUP | NLA_F_NESTED, 4 + 24
            "0600", "0100", "8000", "0000", // BUCKETS 128 + padding
            "0800", "0200", "e02e0000", // IDLE_TIMER 12000 cs = 120 s
            "0800", "0300", "00000000", // UNBALANCED_TIMER 0 (off)
        );
        assert_eq!(hex(&got), want);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_mpath_group_with_16_bit_weight() {
        let m = NexthopMsg::group(
            300,
            vec![
                GroupMember { id: 101, weight: 1 },
                GroupMember {
                    id: 102,
                    weight: 300,
                },
            ],
            &GroupKind::HashThreshold,
        );
        let got = encode_new(&m, 3).unwrap();
        let want = concat!(
            "3c000000",
            "6800",
            "0505",
            "03000000",
            "00000000", // len 60
            "00004c0000000000",
            "0800",
            "0100",
            "2c010000", // NHA_ID 300
            "1400",
            "0200",
            "65000000",
            "00",
            "00",
            "0000", // id 101, weight 1 -> 0
            "66000000",
            "2b",
            "01",
            "0000", // id 102, weight 300 -> 299 = 0x012b
            "0600",
            "0300",
            "0000",
            "0000", // NHA_GROUP_TYPE mpath (0)
        );
        assert_eq!(hex(&got), want);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn fixture_del_and_dump() {
        assert_eq!(
            hex(&encode_del(200, 4)),
            concat!(
                "20000000",
                "6900",
                "0500",
                "04000000",
                "00000000",         // len 32, DEL 105, REQUEST|ACK
                "0000000000000000", // nhmsg all 0 (the kernel requires it)
                "0800",
                "0100",
                "c8000000", // NHA_ID 200
            )
        );
        assert_eq!(
            hex(&encode_get_dump(5)),
            concat!(
                "18000000",
                "6a00",
                "0103",
                "05000000",
                "00000000", // len 24, GET 106, REQUEST|DUMP
                "0000000000000000",
            )
        );
    }

    #[test]
    fn encode_errors() {
        let mut m = NexthopMsg::group(
            1,
            vec![GroupMember { id: 2, weight: 0 }],
            &GroupKind::HashThreshold,
        );
        assert_eq!(
            encode_new(&m, 0),
            Err(EncodeError::Weight { id: 2, weight: 0 })
        );
        m.group[0].weight = 65_537;
        assert!(matches!(encode_new(&m, 0), Err(EncodeError::Weight { .. })));
        m.group = vec![
            GroupMember { id: 2, weight: 1 },
            GroupMember { id: 2, weight: 1 },
        ];
        assert_eq!(encode_new(&m, 0), Err(EncodeError::DuplicateMember(2)));
        m.group = vec![GroupMember { id: 0, weight: 1 }];
        assert_eq!(encode_new(&m, 0), Err(EncodeError::ZeroMemberId));
        m.id = None;
        assert_eq!(encode_new(&m, 0), Err(EncodeError::NoId));
        assert_eq!(clock_t(Duration::from_secs(120)), 12_000);
        assert_eq!(clock_t(Duration::from_secs(u64::MAX)), u32::MAX);
    }

    #[test]
    fn decode_a_kernel_style_dump() {
        // What the kernel sends for a dump: NEWNEXTHOP | NLM_F_MULTI with attributes we do
        // not know (NHA_GROUP_STATS 15, a future 99), a resilient group with the PAD and
        // UNBALANCED_TIME attributes, someone else's object, then NLMSG_DONE.
        let group = NexthopMsg::group(
            200,
            vec![
                GroupMember {
                    id: 101,
                    weight: 256,
                },
                GroupMember {
                    id: 102,
                    weight: 65_536,
                },
            ],
            &GroupKind::default(),
        );
        let mut g = encode_new(&group, 7).unwrap();
        g[6..8].copy_from_slice(&NLM_F_MULTI.to_ne_bytes());
        // Append unknown attributes and patch the length.
        g.extend_from_slice(&[8, 0, 15, 0, 1, 2, 3, 4, 5, 0, 99, 0, 9, 0, 0, 0]);
        let l = g.len() as u32;
        g[..4].copy_from_slice(&l.to_ne_bytes());
        let mut buf = g.clone();
        let mut other = encode_new(&NexthopMsg::gateway(7, 1, v4(192, 0, 2, 1)), 7).unwrap();
        other[18] = 4; // RTPROT_STATIC: not ours
        buf.extend_from_slice(&other);
        // NLMSG_DONE with its int payload.
        buf.extend_from_slice(&[20, 0, 0, 0, 3, 0, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let msgs: Vec<_> = parse_messages(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 3);
        let NetlinkMessage::NewNexthop(h, m) = &msgs[0] else {
            panic!("{:?}", msgs[0])
        };
        assert_eq!(h.flags, NLM_F_MULTI);
        assert!(m.is_ours());
        assert_eq!(m.id, Some(200));
        assert_eq!(
            m.group,
            [
                GroupMember {
                    id: 101,
                    weight: 256
                },
                GroupMember {
                    id: 102,
                    weight: 65_536
                }
            ]
        );
        assert_eq!(m.group_type, Some(NEXTHOP_GRP_TYPE_RES));
        assert_eq!(m.resilient.and_then(|r| r.buckets), Some(128));
        assert_eq!(m.unknown_attrs, [15, 99]);
        let NetlinkMessage::NewNexthop(_, o) = &msgs[1] else {
            panic!()
        };
        assert!(!o.is_ours());
        assert_eq!(o.gateway, Some(v4(192, 0, 2, 1)));
        assert!(matches!(msgs[2], NetlinkMessage::Done(_)));

        // The kernel's resilient nest with a PAD and UNBALANCED_TIME (u64).
        let mut p = vec![0u8, 0, RTPROT_LQ, 0, 0, 0, 0, 0];
        p.extend_from_slice(&[32, 0, 12, 0x80]);
        p.extend_from_slice(&[6, 0, 1, 0, 64, 0, 0, 0]); // buckets 64
        p.extend_from_slice(&[4, 0, 0, 0]); // PAD
        p.extend_from_slice(&[12, 0, 4, 0]);
        p.extend_from_slice(&42u64.to_ne_bytes()); // unbalanced time
        p.extend_from_slice(&[4, 0, 0, 0]); // another PAD
        let m = decode_nexthop(&p).unwrap();
        assert_eq!(
            m.resilient,
            Some(ResilientParams {
                buckets: Some(64),
                unbalanced_time: Some(42),
                ..Default::default()
            })
        );
    }

    #[test]
    fn decode_ack_and_errors() {
        let mut ack = vec![36, 0, 0, 0, 2, 0, 0, 1, 9, 0, 0, 0, 0, 0, 0, 0];
        ack.extend_from_slice(&(-17i32).to_ne_bytes()); // -EEXIST
        ack.extend_from_slice(&[0; 16]);
        let v: Vec<_> = parse_messages(&ack).collect();
        assert!(matches!(v[..], [Ok(NetlinkMessage::Error(h, -17))] if h.seq == 9));
        assert_eq!(
            parse_messages(&[1, 2, 3]).collect::<Vec<_>>(),
            [Err(DecodeError::MessageLength)]
        );
        assert_eq!(decode_nexthop(&[0; 7]), Err(DecodeError::Truncated));
        let mut bad = vec![0u8; 8];
        bad.extend_from_slice(&[6, 0, NHA_ID as u8, 0, 1, 2, 0, 0]);
        assert_eq!(decode_nexthop(&bad), Err(DecodeError::AttrSize(NHA_ID)));
        let mut bad = vec![0u8; 8];
        // An attribute length beyond the end of the message.
        bad.extend_from_slice(&[13, 0, NHA_GROUP as u8, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decode_nexthop(&bad), Err(DecodeError::AttrLength));
        // NHA_GROUP not a multiple of struct nexthop_grp.
        let mut bad = vec![0u8; 8];
        bad.extend_from_slice(&[10, 0, NHA_GROUP as u8, 0, 1, 2, 3, 4, 5, 6, 0, 0]);
        assert_eq!(decode_nexthop(&bad), Err(DecodeError::AttrSize(NHA_GROUP)));
    }

    /// Real kernel check in a throwaway network namespace. Needs root (CAP_SYS_ADMIN for
    /// `ip netns add` and `setns`), so it is ignored by default and run by the privileged
    /// test layer. It never touches the root namespace: the netlink socket is opened in a
    /// thread that has entered the namespace, and the namespace is always deleted.
    #[test]
    #[ignore = "needs root: creates a network namespace"]
    fn real_kernel_round_trip_in_a_netns() {
        use std::os::fd::AsRawFd;
        use std::process::Command;

        struct Netns(String);
        impl Drop for Netns {
            fn drop(&mut self) {
                let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
            }
        }
        fn ip(args: &[&str]) -> String {
            let out = Command::new("ip").args(args).output().expect("run ip");
            assert!(out.status.success(), "ip {args:?}: {:?}", out);
            String::from_utf8_lossy(&out.stdout).into_owned()
        }

        let name = format!("lqtest-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        let n = ns.0.as_str();
        // veth rather than dummy: some test kernels lack the dummy module.
        ip(&[
            "-n", n, "link", "add", "lqd0", "type", "veth", "peer", "name", "lqd1",
        ]);
        ip(&["-n", n, "link", "set", "lqd1", "up"]);
        ip(&["-n", n, "link", "set", "lqd0", "up"]);
        ip(&["-n", n, "addr", "add", "10.0.0.1/24", "dev", "lqd0"]);
        let links: serde_json::Value =
            serde_json::from_str(&ip(&["-j", "-n", n, "link", "show", "lqd0"])).unwrap();
        let oif = links[0]["ifindex"].as_u64().unwrap() as u32;

        let path = format!("/run/netns/{n}");
        let requests = vec![
            encode_new(&NexthopMsg::gateway(101, oif, v4(10, 0, 0, 2)), 1).unwrap(),
            encode_new(&NexthopMsg::gateway(102, oif, v4(10, 0, 0, 3)), 2).unwrap(),
            encode_new(
                &NexthopMsg::group(
                    200,
                    vec![
                        GroupMember { id: 101, weight: 3 },
                        GroupMember { id: 102, weight: 1 },
                    ],
                    &GroupKind::Resilient {
                        buckets: 8,
                        idle_timer: Duration::from_secs(1),
                        unbalanced_timer: Duration::ZERO,
                    },
                ),
                3,
            )
            .unwrap(),
            // 16-bit weights (weight_high) need a kernel >= 6.12.
            encode_new(
                &NexthopMsg::group(
                    201,
                    vec![
                        GroupMember {
                            id: 101,
                            weight: 300,
                        },
                        GroupMember { id: 102, weight: 1 },
                    ],
                    &GroupKind::HashThreshold,
                ),
                4,
            )
            .unwrap(),
            encode_get_dump(5),
            encode_del(201, 6),
        ];
        let replies = std::thread::spawn(move || -> Vec<NetlinkMessage> {
            let f = std::fs::File::open(&path).unwrap();
            // SAFETY: plain syscalls on valid descriptors; setns affects this thread only.
            unsafe {
                assert_eq!(libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET), 0);
                let fd = libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_ROUTE,
                );
                assert!(fd >= 0);
                let mut addr: libc::sockaddr_nl = std::mem::zeroed();
                addr.nl_family = libc::AF_NETLINK as u16;
                let mut out = Vec::new();
                for r in &requests {
                    let sent = libc::sendto(
                        fd,
                        r.as_ptr().cast(),
                        r.len(),
                        0,
                        (&addr as *const libc::sockaddr_nl).cast(),
                        std::mem::size_of::<libc::sockaddr_nl>() as u32,
                    );
                    assert_eq!(sent, r.len() as isize);
                    // Read until the ACK (error 0) or NLMSG_DONE of this request.
                    'reply: loop {
                        let mut buf = vec![0u8; 65536];
                        let got = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
                        assert!(got > 0);
                        for m in parse_messages(&buf[..got as usize]) {
                            let m = m.unwrap();
                            let end =
                                matches!(m, NetlinkMessage::Error(..) | NetlinkMessage::Done(_));
                            out.push(m);
                            if end {
                                break 'reply;
                            }
                        }
                    }
                }
                libc::close(fd);
                out
            }
        })
        .join()
        .unwrap();

        let acks: Vec<i32> = replies
            .iter()
            .filter_map(|m| match m {
                NetlinkMessage::Error(_, e) => Some(*e),
                _ => None,
            })
            .collect();
        assert_eq!(acks, [0, 0, 0, 0, 0]);
        let dumped: Vec<&NexthopMsg> = replies
            .iter()
            .filter_map(|m| match m {
                NetlinkMessage::NewNexthop(_, m) if m.is_ours() => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(dumped.len(), 4, "{replies:?}");
        let wide = dumped.iter().find(|m| m.id == Some(201)).unwrap();
        assert_eq!(
            wide.group[0],
            GroupMember {
                id: 101,
                weight: 300
            }
        );
        assert_eq!(wide.group_type, Some(NEXTHOP_GRP_TYPE_MPATH));
        let g = dumped.iter().find(|m| m.id == Some(200)).unwrap();
        assert_eq!(
            g.group,
            [
                GroupMember { id: 101, weight: 3 },
                GroupMember { id: 102, weight: 1 }
            ]
        );
        assert_eq!(g.group_type, Some(NEXTHOP_GRP_TYPE_RES));
        assert_eq!(g.resilient.and_then(|r| r.buckets), Some(8));
        assert_eq!(g.resilient.and_then(|r| r.idle_timer), Some(100));
        let gw = dumped.iter().find(|m| m.id == Some(101)).unwrap();
        assert_eq!(gw.gateway, Some(v4(10, 0, 0, 2)));
        assert_eq!(gw.oif, Some(oif));

        // And what iproute2 sees.
        let shown: serde_json::Value =
            serde_json::from_str(&ip(&["-j", "-n", n, "nexthop", "show", "id", "200"])).unwrap();
        let grp = &shown[0]["group"];
        assert_eq!(grp[0]["id"], 101);
        assert_eq!(grp[0]["weight"], 3);
        assert_eq!(grp[1]["id"], 102);
        assert!(grp[1]["weight"].is_null() || grp[1]["weight"] == 1);
        assert_eq!(shown[0]["type"], "resilient");
        assert_eq!(shown[0]["resilient_args"]["buckets"], 8);
        // The delete took effect.
        let all = ip(&["-j", "-n", n, "nexthop", "show"]);
        let all: serde_json::Value = serde_json::from_str(&all).unwrap();
        assert!(all.as_array().unwrap().iter().all(|o| o["id"] != 201));
    }

    fn arb_msg() -> impl Strategy<Value = NexthopMsg> {
        let gw = (
            any::<u32>(),
            1u32..,
            prop_oneof![
                any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
                any::<[u8; 16]>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
            ],
        )
            .prop_map(|(id, oif, g)| NexthopMsg::gateway(id, oif, g));
        let grp = (
            any::<u32>(),
            proptest::collection::btree_map(1u32.., 1u32..=MAX_KERNEL_WEIGHT, 1..32),
            any::<bool>(),
            any::<u16>(),
            any::<u32>(),
        )
            .prop_map(|(id, members, res, buckets, idle)| {
                let kind = if res {
                    GroupKind::Resilient {
                        buckets,
                        idle_timer: Duration::from_millis(u64::from(idle) * 10),
                        unbalanced_timer: Duration::ZERO,
                    }
                } else {
                    GroupKind::HashThreshold
                };
                let members = members
                    .into_iter()
                    .map(|(id, weight)| GroupMember { id, weight })
                    .collect();
                NexthopMsg::group(id, members, &kind)
            });
        prop_oneof![gw, grp]
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(m in arb_msg(), seq in any::<u32>()) {
            let bytes = encode_new(&m, seq).unwrap();
            let v: Vec<_> = parse_messages(&bytes).collect();
            prop_assert_eq!(v.len(), 1);
            match &v[0] {
                Ok(NetlinkMessage::NewNexthop(h, d)) => {
                    prop_assert_eq!(h.seq, seq);
                    prop_assert_eq!(d, &m);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_messages(&bytes).count();
            let _ = decode_nexthop(&bytes);
        }

        #[test]
        fn decode_never_panics_on_mutated_messages(
            m in arb_msg(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let mut bytes = encode_new(&m, 1).unwrap();
            for (i, b) in flips {
                let i = i.index(bytes.len());
                bytes[i] = b;
            }
            let _ = parse_messages(&bytes).count();
        }
    }
}
