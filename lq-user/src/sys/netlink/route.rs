//! The rtnetlink route codec the slow plane needs: RTM_NEWROUTE / RTM_DELROUTE decoding
//! (dumps and RTNLGRP_IPV4_ROUTE / RTNLGRP_IPV6_ROUTE notifications), the route dump request
//! and the policy-rule request that makes lq's route table win over the main table.
//!
//! The messages are `netlink-packet-route`'s ([`RouteMessage`], [`RuleMessage`]), framed by
//! the shared layer ([`super::wire`]); nexthop messages on the same socket go to our
//! nexthop codec. Decoding never panics: every length is checked, unknown attributes are
//! skipped and malformed input is an error (proptest below and the fuzz target
//! `slow_plane_route`).

use std::net::IpAddr;

use netlink_packet_core::Parseable;
use netlink_packet_route::{
    AddressFamily,
    route::{RouteAddress, RouteAttribute, RouteMessage, RouteNextHop, RouteProtocol, RouteVia},
    rule::{RuleAction, RuleAttribute, RuleMessage},
};
use thiserror::Error;

use super::wire::{self, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST};
use crate::sys::netlink::nexthop::{self, NexthopMsg, RTM_DELNEXTHOP, RTM_NEWNEXTHOP, RTPROT_LQ};
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
pub const RTM_GETROUTE: u16 = libc::RTM_GETROUTE;
/// RTM_NEWRULE.
pub const RTM_NEWRULE: u16 = libc::RTM_NEWRULE;
/// RTM_DELRULE.
pub const RTM_DELRULE: u16 = libc::RTM_DELRULE;
/// Multicast groups (rtnetlink.h `enum rtnetlink_groups`).
pub const RTNLGRP_IPV4_ROUTE: u32 = libc::RTNLGRP_IPV4_ROUTE;
/// IPv6 routes.
pub const RTNLGRP_IPV6_ROUTE: u32 = libc::RTNLGRP_IPV6_ROUTE;
/// RTN_UNICAST.
pub const RTN_UNICAST: u8 = libc::RTN_UNICAST;
/// sizeof(struct rtmsg).
const RTMSG_LEN: usize = 12;

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
    /// `netlink-packet-route` refused the attributes (a length or a size out of bounds).
    #[error("route attributes: {0}")]
    Attributes(String),
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

fn addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// RTA_VIA: IPv4 routes via IPv6 gateways.
fn via(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(a) => Some(IpAddr::V4(*a)),
        RouteVia::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// Decodes the payload (after the netlink header) of RTM_NEWROUTE / RTM_DELROUTE with
/// `netlink-packet-route`'s [`RouteMessage`].
pub fn decode_route(payload: &[u8]) -> Result<RouteMsg, RouteDecodeError> {
    if payload.len() < RTMSG_LEN {
        return Err(RouteDecodeError::Truncated);
    }
    let m =
        RouteMessage::parse(payload).map_err(|e| RouteDecodeError::Attributes(e.to_string()))?;
    let h = &m.header;
    let mut r = RouteMsg {
        family: u8::from(h.address_family),
        dst_len: h.destination_prefix_length,
        table: u32::from(h.table),
        protocol: u8::from(h.protocol),
        kind: u8::from(h.kind),
        ..Default::default()
    };
    let mut oif = None;
    let mut gateway = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => {
                r.dst = Some(addr(d).ok_or(RouteDecodeError::AttrLength(libc::RTA_DST))?)
            }
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(g) => {
                gateway = Some(addr(g).ok_or(RouteDecodeError::AttrLength(libc::RTA_GATEWAY))?)
            }
            RouteAttribute::Via(v) => {
                gateway = Some(via(v).ok_or(RouteDecodeError::AttrLength(libc::RTA_VIA))?)
            }
            RouteAttribute::Priority(p) => r.priority = *p,
            RouteAttribute::Table(t) => r.table = *t,
            RouteAttribute::NhId(id) => r.nhid = Some(*id),
            RouteAttribute::MultiPath(hops) => r.hops = hops.iter().map(hop).collect(),
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

/// One `struct rtnexthop` of RTA_MULTIPATH with its own RTA_GATEWAY / RTA_VIA.
fn hop(nh: &RouteNextHop) -> Hop {
    let mut gateway = None;
    for a in &nh.attributes {
        match a {
            RouteAttribute::Gateway(g) => gateway = addr(g),
            RouteAttribute::Via(v) => gateway = via(v),
            _ => {}
        }
    }
    Hop {
        oif: nh.interface_index,
        gateway,
    }
}

/// Splits a datagram of the monitor socket into messages. Stops at the first malformed
/// header (the rest of the datagram cannot be framed).
pub fn parse(buf: &[u8]) -> impl Iterator<Item = Result<Message, RouteDecodeError>> + '_ {
    wire::frames(buf).map(|f| {
        let f = f.map_err(|_| RouteDecodeError::MessageLength)?;
        let nh =
            |p| nexthop::decode_nexthop(p).map_err(|e| RouteDecodeError::Nexthop(e.to_string()));
        match f.ty {
            RTM_NEWROUTE => decode_route(f.payload).map(Message::NewRoute),
            RTM_DELROUTE => decode_route(f.payload).map(Message::DelRoute),
            RTM_NEWNEXTHOP => nh(f.payload).map(Message::NewNexthop),
            RTM_DELNEXTHOP => nh(f.payload).map(Message::DelNexthop),
            wire::NLMSG_DONE => Ok(Message::Done(f.seq)),
            wire::NLMSG_ERROR => f
                .error_code()
                .map(|e| Message::Error(f.seq, e))
                .ok_or(RouteDecodeError::Truncated),
            _ => Ok(Message::Other),
        }
    })
}

/// RTM_GETROUTE dump of every table and family (an all-zero `struct rtmsg`).
pub fn encode_route_dump(seq: u32) -> Vec<u8> {
    wire::message(
        RTM_GETROUTE,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        &RouteMessage::default(),
    )
}

/// RTM_NEWROUTE (create or replace, ACK asked) of `dst/dst_len` in `table` with `protocol`
/// and metric `priority`, its next hops carried in the route (RTA_OIF and RTA_GATEWAY for
/// one, RTA_MULTIPATH for more), as a routing daemon without nexthop objects installs it:
/// the slow plane's benchmark plays zebra with it.
// netlink-packet-core's and -route's structs are #[non_exhaustive]: no struct expression, even with
// `..Default::default()`, so the fields are set one by one.
#[allow(clippy::field_reassign_with_default)]
pub fn encode_route_with_hops(
    (dst, dst_len): (IpAddr, u8),
    table: u32,
    protocol: u8,
    priority: u32,
    hops: &[Hop],
    seq: u32,
) -> Vec<u8> {
    use netlink_packet_route::route::{RouteHeader, RouteScope, RouteType};
    let mut msg = RouteMessage::default();
    msg.header = RouteHeader::default();
    msg.header.address_family = match dst {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.destination_prefix_length = dst_len;
    msg.header.table = u8::try_from(table).unwrap_or(libc::RT_TABLE_COMPAT);
    msg.header.protocol = RouteProtocol::from(protocol);
    msg.header.scope = RouteScope::Universe;
    msg.header.kind = RouteType::Unicast;
    msg.attributes = vec![
        RouteAttribute::Table(table),
        RouteAttribute::Destination(RouteAddress::from(dst)),
        RouteAttribute::Priority(priority),
    ];
    let gateway = |h: &Hop| {
        h.gateway
            .map(|g| RouteAttribute::Gateway(RouteAddress::from(g)))
    };
    if let [h] = hops {
        msg.attributes.push(RouteAttribute::Oif(h.oif));
        msg.attributes.extend(gateway(h));
    } else {
        let next_hops = hops
            .iter()
            .map(|h| {
                let mut n = RouteNextHop::default();
                n.interface_index = h.oif;
                n.attributes = gateway(h).into_iter().collect();
                n
            })
            .collect();
        msg.attributes.push(RouteAttribute::MultiPath(next_hops));
    }
    wire::message(
        RTM_NEWROUTE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | wire::NLM_F_REPLACE,
        seq,
        &msg,
    )
}

/// RTM_NEWRULE / RTM_DELRULE: `from all lookup TABLE pref PRIORITY proto lq` for `family`.
/// The rule sends every lookup to lq's table first; a destination lq does not steer finds
/// no route there and falls through to the main table (FRR's routes).
// netlink-packet-core's and -route's structs are #[non_exhaustive]: no struct expression, even with
// `..Default::default()`, so the fields are set one by one.
#[allow(clippy::field_reassign_with_default)]
pub fn encode_rule(new: bool, family: u8, table: u32, priority: u32, seq: u32) -> Vec<u8> {
    let (ty, flags) = if new {
        (
            RTM_NEWRULE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
    } else {
        (RTM_DELRULE, NLM_F_REQUEST | NLM_F_ACK)
    };
    let mut rule = RuleMessage::default();
    rule.header.family = AddressFamily::from(family);
    // The header's table holds 8 bits; FRA_TABLE carries the full id.
    rule.header.table = u8::try_from(table).unwrap_or(libc::RT_TABLE_COMPAT);
    rule.header.action = RuleAction::ToTable;
    rule.attributes = vec![
        RuleAttribute::Table(table),
        RuleAttribute::Priority(priority),
        RuleAttribute::Protocol(RouteProtocol::from(RTPROT_LQ)),
    ];
    wire::message(ty, flags, seq, &rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RTA_DST: u16 = libc::RTA_DST;
    const RTA_OIF: u16 = libc::RTA_OIF;
    const RTA_GATEWAY: u16 = libc::RTA_GATEWAY;
    const RTA_PRIORITY: u16 = libc::RTA_PRIORITY;
    const RTA_MULTIPATH: u16 = libc::RTA_MULTIPATH;
    const RTA_TABLE: u16 = libc::RTA_TABLE;
    /// RTA_NH_ID (kernel 5.3): not in libc.
    const RTA_NH_ID: u16 = 30;

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
    fn a_route_with_hops_decodes_to_what_was_encoded() {
        let g = |d| Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 1, d, 1)));
        let two = [
            Hop {
                oif: 3,
                gateway: g(1),
            },
            Hop {
                oif: 4,
                gateway: g(2),
            },
        ];
        for hops in [&two[..1], &two[..]] {
            let dst = IpAddr::V4(std::net::Ipv4Addr::new(10, 50, 0, 0));
            let b = encode_route_with_hops((dst, 24), 254, 186, 20, hops, 9);
            let r = decode_route(&b[16..]).unwrap();
            assert_eq!(
                (r.dst, r.dst_len, r.table, r.protocol, r.priority, r.kind),
                (Some(dst), 24, 254, 186, 20, 1)
            );
            assert_eq!(r.hops, hops);
            assert_eq!(r.nhid, None);
        }
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
