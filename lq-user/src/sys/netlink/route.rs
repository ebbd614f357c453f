//! The rtnetlink route codec the slow plane needs: RTM_NEWROUTE / RTM_DELROUTE decoding
//! (dumps and RTNLGRP_IPV4_ROUTE / RTNLGRP_IPV6_ROUTE notifications), the route dump request
//! and the policy-rule request that makes lq's route table win over the main table.
//!
//! From the kernel UAPI (`rtnetlink.h`, `fib_rules.h`). Decoding never panics: every length
//! is checked, unknown attributes are skipped and malformed input is an error (proptest
//! below and the fuzz target `slow_plane_route`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

use crate::sys::netlink::nexthop::{
    self, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REQUEST, NexthopMsg, RTM_DELNEXTHOP,
    RTM_NEWNEXTHOP, RTPROT_LQ,
};
use crate::sys::netlink::{RTM_DELROUTE, RTM_NEWROUTE};

/// What the route monitor reports: a route or nexthop object that appeared, changed or
/// went, in the kernel's order, for the slow plane's core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteEvent {
    /// A route appeared or was replaced.
    NewRoute(RouteMsg),
    /// A route went.
    DelRoute(RouteMsg),
    /// A nexthop object appeared or changed.
    NewNexthop(NexthopMsg),
    /// A nexthop object went.
    DelNexthop(u32),
    /// Notifications were lost (socket overrun): forget everything; a fresh dump follows.
    Reset,
}

/// RTM_GETROUTE.
pub const RTM_GETROUTE: u16 = 26;
/// RTM_NEWRULE.
pub const RTM_NEWRULE: u16 = 32;
/// RTM_DELRULE.
pub const RTM_DELRULE: u16 = 33;
/// NLM_F_EXCL: a rule that exists already is refused with EEXIST (so lqd adds it once).
pub const NLM_F_EXCL: u16 = 0x200;
/// Multicast groups (rtnetlink.h `enum rtnetlink_groups`).
pub const RTNLGRP_IPV4_ROUTE: u32 = 7;
/// IPv6 routes.
pub const RTNLGRP_IPV6_ROUTE: u32 = 11;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_VIA: u16 = 18;
const RTA_NH_ID: u16 = 30;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FRA_PROTOCOL: u16 = 21;
const FR_ACT_TO_TBL: u8 = 1;
const NLMSG_HDRLEN: usize = 16;
const RTMSG_LEN: usize = 12;
/// RTN_UNICAST.
pub const RTN_UNICAST: u8 = 1;

/// Errors of the route codec.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RouteDecodeError {
    /// A netlink header's length is out of bounds.
    #[error("netlink message length out of bounds")]
    MessageLength,
    /// The payload is shorter than its fixed header.
    #[error("route message truncated")]
    Truncated,
    /// An attribute's length is out of bounds.
    #[error("route attribute {0} has a bad length")]
    AttrLength(u16),
    /// The nexthop codec refused a nexthop message.
    #[error("nexthop message: {0}")]
    Nexthop(String),
}

/// One next hop of a route (RTA_OIF/RTA_GATEWAY or one `rtnexthop` of RTA_MULTIPATH).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hop {
    /// Output interface.
    pub oif: u32,
    /// Gateway (absent: on-link).
    pub gateway: Option<IpAddr>,
}

/// One route: `struct rtmsg` and the attributes the slow plane reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteMsg {
    /// rtm_family.
    pub family: u8,
    /// rtm_dst_len.
    pub dst_len: u8,
    /// Table (RTA_TABLE, else rtm_table).
    pub table: u32,
    /// rtm_protocol (RTPROT_BGP = 186, ...).
    pub protocol: u8,
    /// rtm_type (RTN_UNICAST = 1).
    pub kind: u8,
    /// RTA_PRIORITY (the metric; 0 when absent).
    pub priority: u32,
    /// RTA_DST (absent: the default route).
    pub dst: Option<IpAddr>,
    /// RTA_NH_ID: the route points at a nexthop object.
    pub nhid: Option<u32>,
    /// Next hops carried in the route itself.
    pub hops: Vec<Hop>,
}

/// A decoded message of the monitor socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// RTM_NEWROUTE.
    NewRoute(RouteMsg),
    /// RTM_DELROUTE.
    DelRoute(RouteMsg),
    /// RTM_NEWNEXTHOP.
    NewNexthop(NexthopMsg),
    /// RTM_DELNEXTHOP.
    DelNexthop(NexthopMsg),
    /// NLMSG_DONE of a dump with this sequence number.
    Done(u32),
    /// NLMSG_ERROR with this sequence number and errno (0: ACK).
    Error(u32, i32),
    /// Anything else.
    Other,
}

fn ne_u16(b: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(..2)?.try_into().ok()?))
}
fn ne_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Iterates `rtattr`s: (type without flag bits, payload).
fn attrs(mut buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), RouteDecodeError>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || buf.len() < 4 {
            return None;
        }
        let (len, ty) = (ne_u16(buf)? as usize, ne_u16(&buf[2..])? & 0x3fff);
        if len < 4 || len > buf.len() {
            failed = true;
            return Some(Err(RouteDecodeError::AttrLength(ty)));
        }
        let payload = &buf[4..len];
        buf = buf.get((len + 3) & !3..).unwrap_or(&[]);
        Some(Ok((ty, payload)))
    })
}

fn addr(family: u8, p: &[u8]) -> Option<IpAddr> {
    match (family as i32, p.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(p).ok()?))),
        (libc::AF_INET6, 16) => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(p).ok()?))),
        _ => None,
    }
}

/// RTA_VIA: `struct rtvia { u16 family; u8 addr[] }` (IPv4 routes via IPv6 gateways).
fn via(p: &[u8]) -> Option<IpAddr> {
    let family = ne_u16(p)?;
    addr(u8::try_from(family).ok()?, p.get(2..)?)
}

/// Decodes the payload (after the netlink header) of RTM_NEWROUTE / RTM_DELROUTE.
pub fn decode_route(payload: &[u8]) -> Result<RouteMsg, RouteDecodeError> {
    let h = payload
        .get(..RTMSG_LEN)
        .ok_or(RouteDecodeError::Truncated)?;
    let mut r = RouteMsg {
        family: h[0],
        dst_len: h[1],
        table: u32::from(h[4]),
        protocol: h[5],
        kind: h[7],
        ..Default::default()
    };
    let mut oif = None;
    let mut gateway = None;
    for a in attrs(&payload[RTMSG_LEN..]) {
        let (ty, p) = a?;
        let bad = || RouteDecodeError::AttrLength(ty);
        match ty {
            RTA_DST => r.dst = Some(addr(r.family, p).ok_or_else(bad)?),
            RTA_OIF => oif = Some(ne_u32(p).ok_or_else(bad)?),
            RTA_GATEWAY => gateway = Some(addr(r.family, p).ok_or_else(bad)?),
            RTA_VIA => gateway = Some(via(p).ok_or_else(bad)?),
            RTA_PRIORITY => r.priority = ne_u32(p).ok_or_else(bad)?,
            RTA_TABLE => r.table = ne_u32(p).ok_or_else(bad)?,
            RTA_NH_ID => r.nhid = Some(ne_u32(p).ok_or_else(bad)?),
            RTA_MULTIPATH => r.hops = multipath(r.family, p)?,
            _ => {}
        }
    }
    if r.hops.is_empty()
        && let Some(oif) = oif
    {
        r.hops.push(Hop { oif, gateway });
    }
    Ok(r)
}

/// RTA_MULTIPATH: `struct rtnexthop { u16 len; u8 flags; u8 hops; i32 ifindex; }` and its
/// own attributes (RTA_GATEWAY, RTA_VIA).
fn multipath(family: u8, mut p: &[u8]) -> Result<Vec<Hop>, RouteDecodeError> {
    let mut hops = Vec::new();
    while p.len() >= 8 {
        let len = ne_u16(p).ok_or(RouteDecodeError::AttrLength(RTA_MULTIPATH))? as usize;
        if len < 8 || len > p.len() {
            return Err(RouteDecodeError::AttrLength(RTA_MULTIPATH));
        }
        let oif = ne_u32(&p[4..]).ok_or(RouteDecodeError::AttrLength(RTA_MULTIPATH))?;
        let mut gateway = None;
        for a in attrs(&p[8..len]) {
            let (ty, q) = a?;
            match ty {
                RTA_GATEWAY => gateway = addr(family, q),
                RTA_VIA => gateway = via(q),
                _ => {}
            }
        }
        hops.push(Hop { oif, gateway });
        p = p.get((len + 3) & !3..).unwrap_or(&[]);
    }
    Ok(hops)
}

/// Splits a datagram of the monitor socket into messages. Stops at the first malformed
/// header (the rest of the datagram cannot be framed).
pub fn parse(buf: &[u8]) -> impl Iterator<Item = Result<Message, RouteDecodeError>> + '_ {
    let mut rest = buf;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        let (Some(len), Some(ty), Some(seq)) = (
            ne_u32(rest),
            rest.get(4..).and_then(ne_u16),
            rest.get(8..).and_then(ne_u32),
        ) else {
            failed = true;
            return Some(Err(RouteDecodeError::MessageLength));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            failed = true;
            return Some(Err(RouteDecodeError::MessageLength));
        }
        let payload = &rest[NLMSG_HDRLEN..len];
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
        let nh =
            |p| nexthop::decode_nexthop(p).map_err(|e| RouteDecodeError::Nexthop(e.to_string()));
        Some(match ty {
            RTM_NEWROUTE => decode_route(payload).map(Message::NewRoute),
            RTM_DELROUTE => decode_route(payload).map(Message::DelRoute),
            RTM_NEWNEXTHOP => nh(payload).map(Message::NewNexthop),
            RTM_DELNEXTHOP => nh(payload).map(Message::DelNexthop),
            nexthop::NLMSG_DONE => Ok(Message::Done(seq)),
            nexthop::NLMSG_ERROR => ne_u32(payload)
                .map(|e| Message::Error(seq, e as i32))
                .ok_or(RouteDecodeError::Truncated),
            _ => Ok(Message::Other),
        })
    })
}

fn header(b: &mut Vec<u8>, ty: u16, flags: u16, seq: u32) {
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
}

fn attr(b: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    b.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(payload);
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
}

fn finish(mut b: Vec<u8>) -> Vec<u8> {
    let len = b.len() as u32;
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b
}

/// RTM_GETROUTE dump of every table and family.
pub fn encode_route_dump(seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(28);
    header(&mut b, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq);
    b.extend_from_slice(&[0u8; RTMSG_LEN]);
    finish(b)
}

/// RTM_NEWRULE / RTM_DELRULE: `from all lookup TABLE pref PRIORITY proto lq` for `family`.
/// The rule sends every lookup to lq's table first; a destination lq does not steer finds
/// no route there and falls through to the main table (FRR's routes).
pub fn encode_rule(new: bool, family: u8, table: u32, priority: u32, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    let (ty, flags) = if new {
        (
            RTM_NEWRULE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
    } else {
        (RTM_DELRULE, NLM_F_REQUEST | NLM_F_ACK)
    };
    header(&mut b, ty, flags, seq);
    // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action; flags
    let table8 = if table < 256 { table as u8 } else { 252 };
    b.extend_from_slice(&[family, 0, 0, 0, table8, 0, 0, FR_ACT_TO_TBL]);
    b.extend_from_slice(&0u32.to_ne_bytes());
    attr(&mut b, FRA_TABLE, &table.to_ne_bytes());
    attr(&mut b, FRA_PRIORITY, &priority.to_ne_bytes());
    attr(&mut b, FRA_PROTOCOL, &[RTPROT_LQ]);
    finish(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A route as zebra installs it: `10.98.2.1/32 nhid 8 proto bgp metric 20`.
    fn zebra_route() -> Vec<u8> {
        let mut b = Vec::new();
        header(&mut b, RTM_NEWROUTE, 0, 0);
        b.extend_from_slice(&[2, 32, 0, 0, 254, 186, 0, 1, 0, 0, 0, 0]);
        attr(&mut b, RTA_TABLE, &254u32.to_ne_bytes());
        attr(&mut b, RTA_DST, &[10, 98, 2, 1]);
        attr(&mut b, RTA_PRIORITY, &20u32.to_ne_bytes());
        attr(&mut b, RTA_NH_ID, &8u32.to_ne_bytes());
        attr(&mut b, RTA_OIF, &3u32.to_ne_bytes());
        attr(&mut b, RTA_GATEWAY, &[10, 97, 0, 2]);
        finish(b)
    }

    #[test]
    fn decodes_a_zebra_route() {
        let b = zebra_route();
        let m: Vec<_> = parse(&b).collect();
        let Ok(Message::NewRoute(r)) = &m[0] else {
            panic!("{m:?}")
        };
        assert_eq!(r.protocol, 186);
        assert_eq!(r.priority, 20);
        assert_eq!(r.nhid, Some(8));
        assert_eq!(r.dst, Some("10.98.2.1".parse().unwrap()));
        assert_eq!(
            r.hops,
            vec![Hop {
                oif: 3,
                gateway: Some("10.97.0.2".parse().unwrap())
            }]
        );
    }

    #[test]
    fn decodes_multipath() {
        let mut mp = Vec::new();
        for (oif, gw) in [(3u32, [10, 97, 0, 2]), (4, [10, 97, 0, 6])] {
            mp.extend_from_slice(&16u16.to_ne_bytes());
            mp.extend_from_slice(&[0, 0]);
            mp.extend_from_slice(&oif.to_ne_bytes());
            attr(&mut mp, RTA_GATEWAY, &gw);
        }
        let mut b = Vec::new();
        header(&mut b, RTM_NEWROUTE, 0, 0);
        b.extend_from_slice(&[2, 24, 0, 0, 254, 186, 0, 1, 0, 0, 0, 0]);
        attr(&mut b, RTA_DST, &[10, 1, 0, 0]);
        attr(&mut b, RTA_MULTIPATH, &mp);
        let r = decode_route(&finish(b)[16..]).unwrap();
        assert_eq!(r.hops.len(), 2);
        assert_eq!(r.hops[1].oif, 4);
    }

    #[test]
    fn truncation_is_an_error() {
        let b = zebra_route();
        assert_eq!(decode_route(&b[16..20]), Err(RouteDecodeError::Truncated));
        let mut bad = b.clone();
        bad[28] = 200; // first attribute's length beyond the message
        assert!(decode_route(&bad[16..]).is_err());
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            for m in parse(&b) { let _ = m; }
            let _ = decode_route(&b);
        }
        #[test]
        fn mutated_routes_never_panic(i in 0usize..80, v in any::<u8>()) {
            let mut b = zebra_route();
            if i < b.len() { b[i] = v; }
            for m in parse(&b) { let _ = m; }
        }
    }
}
