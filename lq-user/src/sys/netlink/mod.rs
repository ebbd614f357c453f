//! The rtnetlink edge: a NETLINK_ROUTE socket that programs lqd's nexthop objects and the
//! routes that point at them, and reads them back. Messages come from
//! [`crate::sys::netlink::nexthop`] (nexthop objects, our codec) and from
//! `netlink-packet-route`'s `RouteMessage` (routes); the socket, the framing and the
//! attribute walking are the shared layer [`wire`] (docs/netlink.md).
//!
//! Everything lqd creates carries protocol [`RTPROT_LQ`]; lqd never changes or deletes an
//! object or a route with another protocol, so it can run beside FRR.

pub mod dcb;
pub mod link_watch;
pub mod nexthop;
pub mod route;
pub mod route_monitor;
pub mod wire;

use std::{
    io,
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use netlink_packet_route::{
    AddressFamily,
    route::{
        RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
        RouteType,
    },
};

use self::nexthop::{NetlinkMessage, NexthopMsg, RTPROT_LQ};
use self::wire::{NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST, RouteSocket};
use crate::core::controller::path_quality::Prefix;

/// RTM_NEWROUTE.
pub const RTM_NEWROUTE: u16 = libc::RTM_NEWROUTE;
/// RTM_DELROUTE.
pub const RTM_DELROUTE: u16 = libc::RTM_DELROUTE;
/// The main routing table.
pub const RT_TABLE_MAIN: u32 = libc::RT_TABLE_MAIN as u32;
/// RT_TABLE_COMPAT: what rtm_table says when the id needs RTA_TABLE's 32 bits.
const RT_TABLE_COMPAT: u8 = libc::RT_TABLE_COMPAT;

/// Errors of the rtnetlink edge.
#[derive(Debug, thiserror::Error)]
pub enum RtnlError {
    /// A socket call failed.
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    /// The kernel refused a request.
    #[error("the kernel refused {what}: {source}")]
    Refused {
        /// The request.
        what: String,
        /// errno as an io::Error.
        source: io::Error,
    },
    /// A message could not be encoded or decoded.
    #[error("netlink message: {0}")]
    Codec(String),
    /// The interface does not exist.
    #[error("interface {0:?} does not exist")]
    NoInterface(String),
}

/// Encodes RTM_NEWROUTE (create or replace) for `prefix` via nexthop object `nhid`.
pub fn encode_route_replace(prefix: &Prefix, nhid: u32, table: u32, seq: u32) -> Vec<u8> {
    encode_route(
        RTM_NEWROUTE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        prefix,
        Some(nhid),
        table,
        seq,
    )
}

/// Encodes RTM_DELROUTE for `prefix` (only lqd's route: protocol RTPROT_LQ).
pub fn encode_route_delete(prefix: &Prefix, table: u32, seq: u32) -> Vec<u8> {
    encode_route(
        RTM_DELROUTE,
        NLM_F_REQUEST | NLM_F_ACK,
        prefix,
        None,
        table,
        seq,
    )
}

/// A route message of `netlink-packet-route`: lqd's protocol, universe scope, unicast,
/// RTA_DST, RTA_TABLE and (replace) RTA_NH_ID.
// netlink-packet-core's and -route's structs are #[non_exhaustive]: no struct expression, even with
// `..Default::default()`, so the fields are set one by one.
#[allow(clippy::field_reassign_with_default)]
fn encode_route(
    ty: u16,
    flags: u16,
    prefix: &Prefix,
    nhid: Option<u32>,
    table: u32,
    seq: u32,
) -> Vec<u8> {
    let family = match prefix.addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let mut header = RouteHeader::default();
    header.address_family = family;
    header.destination_prefix_length = prefix.len;
    // rtm_table holds only 8 bits; RTA_TABLE carries the full id.
    header.table = u8::try_from(table).unwrap_or(RT_TABLE_COMPAT);
    header.protocol = RouteProtocol::from(RTPROT_LQ);
    header.scope = RouteScope::Universe;
    header.kind = RouteType::Unicast;
    let mut msg = RouteMessage::default();
    msg.header = header;
    msg.attributes = vec![
        RouteAttribute::Destination(RouteAddress::from(prefix.addr)),
        RouteAttribute::Table(table),
    ];
    if let Some(id) = nhid {
        msg.attributes.push(RouteAttribute::NhId(id));
    }
    wire::message(ty, flags, seq, &msg)
}

impl RtnlError {
    /// The same error for another request of one batch (io::Error is not Clone).
    fn duplicate(&self) -> Self {
        match self {
            Self::Io(e) => Self::Io(io::Error::new(e.kind(), e.to_string())),
            other => Self::Codec(other.to_string()),
        }
    }
}

/// The most request bytes [`Rtnl::replace_nexthops`] puts in one datagram: a few dozen
/// 64-member groups.
pub const PIPELINE_BYTES: usize = 32 * 1024;

/// The most requests [`Rtnl::replace_nexthops`] puts in one datagram: the kernel queues one
/// ACK per request before the send returns, and their accounting must stay well inside the
/// default receive buffer (~208 KiB), or ACKs are dropped (ENOBUFS).
pub const PIPELINE_MESSAGES: usize = 64;

/// A NETLINK_ROUTE socket in the calling thread's network namespace.
pub struct Rtnl {
    socket: RouteSocket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// Opens and binds the socket.
    pub fn open() -> Result<Self, RtnlError> {
        let socket = RouteSocket::open()?;
        // Extended ACKs make refusals explain themselves in the kernel log; harmless if absent.
        let _ = socket.socket().set_ext_ack(true);
        Ok(Self {
            socket,
            seq: 1,
            buf: vec![0; 64 * 1024],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&self, msg: &[u8]) -> Result<(), RtnlError> {
        Ok(self.socket.send(msg)?)
    }

    fn recv(&mut self) -> Result<usize, RtnlError> {
        Ok(self.socket.recv(&mut self.buf)?)
    }

    /// Sends one request built with `seq` and returns that `seq` without waiting for a
    /// reply; the caller reads the replies with [`Self::recv_raw`]. For the helper's
    /// counter sampler, which decodes its link, qdisc and class dumps itself.
    pub fn send_request(&mut self, build: impl FnOnce(u32) -> Vec<u8>) -> Result<u32, RtnlError> {
        let seq = self.next_seq();
        self.send(&build(seq))?;
        Ok(seq)
    }

    /// Receives one datagram of replies (one or more netlink messages), valid until the
    /// next receive on this socket.
    pub fn recv_raw(&mut self) -> Result<&[u8], RtnlError> {
        let n = self.recv()?;
        Ok(&self.buf[..n])
    }

    /// Sends one request built with `seq` and waits for its ACK.
    pub fn request(
        &mut self,
        what: &str,
        build: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<(), RtnlError> {
        let seq = self.next_seq();
        let msg = build(seq);
        self.send(&msg)?;
        loop {
            let n = self.recv()?;
            if let Some(result) = ack_in(&self.buf[..n], seq, what) {
                return result;
            }
        }
    }

    /// Creates or replaces a nexthop object.
    pub fn replace_nexthop(&mut self, msg: &NexthopMsg) -> Result<(), RtnlError> {
        let what = format!("nexthop {}", msg.id.unwrap_or(0));
        // Encode once (codec errors reported as such), then stamp the request's sequence
        // number into the netlink header (octets 8-11).
        let mut bytes = nexthop::encode_new(msg, 0).map_err(|e| RtnlError::Codec(e.to_string()))?;
        self.request(&what, move |seq| {
            bytes[8..12].copy_from_slice(&seq.to_ne_bytes());
            bytes
        })
    }

    /// Creates or replaces many nexthop objects, pipelined: the requests go out several
    /// to a datagram (up to [`PIPELINE_BYTES`]) and their ACKs are collected after each
    /// datagram, instead of one send and one wait per object. The kernel still applies them
    /// one by one, in order; a step that changes every group pays the kernel's cost per
    /// replace, not also a round trip per replace (issue 15). One result per message, in
    /// order.
    pub fn replace_nexthops(&mut self, msgs: &[NexthopMsg]) -> Vec<Result<(), RtnlError>> {
        let mut results: Vec<Option<Result<(), RtnlError>>> = Vec::with_capacity(msgs.len());
        results.resize_with(msgs.len(), || None);
        let mut datagram: Vec<u8> = Vec::with_capacity(PIPELINE_BYTES);
        let mut start = 0;
        while start < msgs.len() {
            // One datagram: consecutive messages, sequence numbers first_seq.., up to the
            // size bound (always at least one message).
            datagram.clear();
            let first_seq = self.seq.wrapping_add(1);
            let mut end = start;
            while end < msgs.len() {
                let seq = self.next_seq();
                match nexthop::encode_new(&msgs[end], seq) {
                    Ok(bytes) => {
                        if end > start
                            && (datagram.len() + bytes.len() > PIPELINE_BYTES
                                || end - start >= PIPELINE_MESSAGES)
                        {
                            // Not this datagram's: its sequence number is reused next time.
                            self.seq = self.seq.wrapping_sub(1);
                            break;
                        }
                        datagram.extend_from_slice(&bytes);
                    }
                    Err(e) => results[end] = Some(Err(RtnlError::Codec(e.to_string()))),
                }
                end += 1;
            }
            let in_flight = |seq: u32| {
                let i = seq.wrapping_sub(first_seq) as usize;
                (start + i < end).then_some(start + i)
            };
            if !datagram.is_empty() {
                if let Err(e) = self.send(&datagram) {
                    for r in &mut results[start..end] {
                        if r.is_none() {
                            *r = Some(Err(e.duplicate()));
                        }
                    }
                } else {
                    while results[start..end].iter().any(Option::is_none) {
                        let n = match self.recv() {
                            Ok(n) => n,
                            Err(e) => {
                                for r in &mut results[start..end] {
                                    if r.is_none() {
                                        *r = Some(Err(e.duplicate()));
                                    }
                                }
                                break;
                            }
                        };
                        for m in nexthop::parse_messages(&self.buf[..n]) {
                            let (h, errno) = match m {
                                Ok(NetlinkMessage::Error(h, errno)) => (h, errno),
                                Ok(_) => continue,
                                Err(e) => {
                                    // An answer that cannot be read: the rest of this
                                    // datagram's answers may be lost with it, so stop
                                    // waiting for them rather than block.
                                    for r in &mut results[start..end] {
                                        if r.is_none() {
                                            *r = Some(Err(RtnlError::Codec(e.to_string())));
                                        }
                                    }
                                    break;
                                }
                            };
                            if let Some(i) = in_flight(h.seq) {
                                results[i] = Some(if errno == 0 {
                                    Ok(())
                                } else {
                                    Err(RtnlError::Refused {
                                        what: format!("nexthop {}", msgs[i].id.unwrap_or(0)),
                                        source: errno_error(errno),
                                    })
                                });
                            }
                        }
                    }
                }
            }
            start = end;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(RtnlError::Codec("no answer".into()))))
            .collect()
    }

    /// Deletes a nexthop object.
    pub fn delete_nexthop(&mut self, id: u32) -> Result<(), RtnlError> {
        self.request(&format!("delete nexthop {id}"), |seq| {
            nexthop::encode_del(id, seq)
        })
    }

    /// Routes `prefix` via nexthop object `nhid` in the main table.
    pub fn replace_route(&mut self, prefix: &Prefix, nhid: u32) -> Result<(), RtnlError> {
        let what = format!("route {}/{} nhid {nhid}", prefix.addr, prefix.len);
        self.request(&what, |seq| {
            encode_route_replace(prefix, nhid, RT_TABLE_MAIN, seq)
        })
    }

    /// Deletes lqd's route for `prefix`.
    pub fn delete_route(&mut self, prefix: &Prefix) -> Result<(), RtnlError> {
        let what = format!("delete route {}/{}", prefix.addr, prefix.len);
        self.request(&what, |seq| encode_route_delete(prefix, RT_TABLE_MAIN, seq))
    }

    /// Every route of the namespace (all tables and families), decoded as the slow plane
    /// reads them; messages that do not decode are skipped (a route lqd cannot read is no
    /// route of lqd's).
    pub fn dump_routes(&mut self) -> Result<Vec<route::RouteMsg>, RtnlError> {
        let seq = self.next_seq();
        self.send(&route::encode_route_dump(seq))?;
        let mut out = Vec::new();
        loop {
            let n = self.recv()?;
            for m in route::parse(&self.buf[..n]) {
                match m {
                    Ok(route::Message::NewRoute(r)) => out.push(r),
                    Ok(route::Message::Done(s)) if s == seq => return Ok(out),
                    Ok(route::Message::Error(s, errno)) if s == seq && errno != 0 => {
                        return Err(RtnlError::Refused {
                            what: "route dump".into(),
                            source: errno_error(errno),
                        });
                    }
                    _ => {}
                }
            }
        }
    }

    /// Every nexthop object of the namespace.
    pub fn dump_nexthops(&mut self) -> Result<Vec<NexthopMsg>, RtnlError> {
        let seq = self.next_seq();
        self.send(&nexthop::encode_get_dump(seq))?;
        let mut out = Vec::new();
        loop {
            let n = self.recv()?;
            if nexthop_dump_part(&self.buf[..n], seq, &mut out)? {
                return Ok(out);
            }
        }
    }
}

/// The answer to request `seq` in one receive buffer: `Some(Ok)` for its ACK, `Some(Err)`
/// when the kernel refused it (or the buffer cannot be decoded), `None` when the buffer
/// holds no answer to it. Public for the fuzz target `nexthop_decode`.
pub fn ack_in(buf: &[u8], seq: u32, what: &str) -> Option<Result<(), RtnlError>> {
    for m in nexthop::parse_messages(buf) {
        match m {
            Err(e) => return Some(Err(RtnlError::Codec(e.to_string()))),
            Ok(NetlinkMessage::Error(h, errno)) if h.seq == seq => {
                return Some(if errno == 0 {
                    Ok(())
                } else {
                    Err(RtnlError::Refused {
                        what: what.into(),
                        source: errno_error(errno),
                    })
                });
            }
            Ok(_) => {}
        }
    }
    None
}

/// The error of an NLMSG_ERROR's `error` field (a negative errno). Any other value is the
/// kernel's (or a peer's) mistake and still names itself: i32::MIN has no positive
/// counterpart, so it saturates rather than overflow (found by the fuzz target
/// `nexthop_decode`: `-errno` panicked in debug builds).
fn errno_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno.saturating_neg())
}

/// One receive buffer of the nexthop dump `seq`: appends its nexthops to `out`; `Ok(true)`
/// at NLMSG_DONE. Public for the fuzz target `nexthop_decode`.
pub fn nexthop_dump_part(
    buf: &[u8],
    seq: u32,
    out: &mut Vec<NexthopMsg>,
) -> Result<bool, RtnlError> {
    for m in nexthop::parse_messages(buf) {
        match m.map_err(|e| RtnlError::Codec(e.to_string()))? {
            NetlinkMessage::NewNexthop(h, nh) if h.seq == seq => out.push(nh),
            NetlinkMessage::Done(h) if h.seq == seq => return Ok(true),
            NetlinkMessage::Error(h, errno) if h.seq == seq && errno != 0 => {
                return Err(RtnlError::Refused {
                    what: "nexthop dump".into(),
                    source: errno_error(errno),
                });
            }
            _ => {}
        }
    }
    Ok(false)
}

/// The ifindex of `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> Result<u32, RtnlError> {
    let c = std::ffi::CString::new(name).map_err(|_| RtnlError::NoInterface(name.into()))?;
    // SAFETY: valid C string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(RtnlError::NoInterface(name.into()))
    } else {
        Ok(idx)
    }
}

/// Asks the kernel whether interfaces are up and running (IFF_UP and IFF_RUNNING, i.e.
/// carrier), in the network namespace the probe was opened in (sysfs would show the
/// namespace it was mounted in, which is not ours under `lqd run --netns`). One socket,
/// reused: the control loop asks every step.
pub struct LinkProbe {
    fd: OwnedFd,
}

impl LinkProbe {
    /// Opens the probe's socket in the calling thread's namespace.
    pub fn open() -> io::Result<Self> {
        // SAFETY: a plain datagram socket, owned at once.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: fd is fresh and valid, and owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Whether `name` is up with carrier; false when it does not exist.
    pub fn oper_up(&self, name: &str) -> bool {
        let b = name.as_bytes();
        if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
            return false;
        }
        // SAFETY: ifreq is plain data.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(b) {
            *d = *s as libc::c_char;
        }
        // SAFETY: valid fd and ifreq.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
            return false;
        }
        // SAFETY: SIOCGIFFLAGS fills the flags member of the union.
        let flags = i32::from(unsafe { req.ifr_ifru.ifru_flags });
        flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0
    }
}

/// One-off [`LinkProbe::oper_up`].
pub fn oper_up(name: &str) -> bool {
    LinkProbe::open().is_ok_and(|p| p.oper_up(name))
}

/// Moves the calling thread into the named network namespace (`/run/netns/NAME`, as
/// `ip netns add` makes them). Threads started afterwards inherit it. Unlike
/// `ip netns exec`, this keeps the mount namespace, so /sys/fs/bpf stays the host's bpffs
/// and the pinned maps stay visible to `lqd show` and survive a restart.
pub fn enter_netns(name: &str) -> Result<(), RtnlError> {
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path)
        .map_err(|e| RtnlError::Io(io::Error::new(e.kind(), format!("{path}: {e}"))))?;
    // SAFETY: setns with a valid namespace fd.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(RtnlError::Io(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// An NLMSG_ERROR for `seq` with `errno`, quoting a 16-octet request header.
    fn nlmsg_error(seq: u32, errno: i32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&36u32.to_ne_bytes());
        b.extend_from_slice(&wire::NLMSG_ERROR.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&errno.to_ne_bytes());
        b.extend_from_slice(&[0; 16]);
        b
    }

    #[test]
    fn ack_and_refusal() {
        assert!(matches!(ack_in(&nlmsg_error(9, 0), 9, "x"), Some(Ok(()))));
        assert!(
            ack_in(&nlmsg_error(8, 0), 9, "x").is_none(),
            "another request's ACK"
        );
        let Some(Err(RtnlError::Refused { source, .. })) = ack_in(&nlmsg_error(9, -22), 9, "x")
        else {
            panic!("EINVAL is a refusal");
        };
        assert_eq!(source.raw_os_error(), Some(22));
    }

    /// Fuzz finding (fuzz/regressions/nexthop_decode/nlmsg-error-errno-i32-min.bin): an
    /// NLMSG_ERROR whose error field is i32::MIN made `-errno` overflow (a panic in debug
    /// builds) in the request and dump loops. It is a refusal like any other errno.
    #[test]
    fn errno_i32_min_is_a_refusal_not_a_panic() {
        let msg = nlmsg_error(9, i32::MIN);
        assert!(matches!(
            ack_in(&msg, 9, "x"),
            Some(Err(RtnlError::Refused { .. }))
        ));
        let mut out = Vec::new();
        assert!(matches!(
            nexthop_dump_part(&msg, 9, &mut out),
            Err(RtnlError::Refused { .. })
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn route_replace_bytes() {
        let p = Prefix {
            addr: IpAddr::V4(Ipv4Addr::new(10, 4, 0, 0)),
            len: 24,
        };
        let b = encode_route_replace(&p, 0x4c01_0000, RT_TABLE_MAIN, 7);
        let mut want = Vec::new();
        want.extend_from_slice(&52u32.to_ne_bytes()); // 16 header + 12 rtmsg + 8 + 8 + 8
        want.extend_from_slice(&24u16.to_ne_bytes()); // RTM_NEWROUTE
        want.extend_from_slice(&0x0505u16.to_ne_bytes()); // REQUEST|ACK|REPLACE|CREATE
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[2, 24, 0, 0, 254, 0x4c, 0, 1]); // AF_INET, /24, main, lq, universe, unicast
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes()); // RTA_DST
        want.extend_from_slice(&[10, 4, 0, 0]);
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&15u16.to_ne_bytes()); // RTA_TABLE
        want.extend_from_slice(&254u32.to_ne_bytes());
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&30u16.to_ne_bytes()); // RTA_NH_ID
        want.extend_from_slice(&0x4c01_0000u32.to_ne_bytes());
        assert_eq!(b, want);
    }

    #[test]
    fn route_delete_has_no_nexthop() {
        let p = Prefix {
            addr: "2001:db8::".parse().unwrap(),
            len: 32,
        };
        let b = encode_route_delete(&p, RT_TABLE_MAIN, 1);
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(b.len(), 16 + 12 + 20 + 8);
        assert_eq!(b[16], 10); // AF_INET6
    }
}
