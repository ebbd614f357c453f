//! Socket options and socket ioctls that std and socket2 do not offer safely, and the
//! sockets lqd opens with them.

use std::{
    io,
    mem::size_of,
    net::{Ipv4Addr, TcpStream},
    os::fd::{AsFd, AsRawFd},
};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// Sets the DSCP (IP_TOS / IPV6_TCLASS) and the SO_PRIORITY of a socket, where given, so
/// that export and advertisement traffic can be classed apart from what it reports on. A
/// failure (IPV6_TCLASS on an IPv4 socket, a priority above 6 without CAP_NET_ADMIN)
/// only leaves the default class.
pub fn set_traffic_class(socket: &impl AsFd, dscp: Option<u8>, priority: Option<u32>) {
    let s = SockRef::from(socket);
    if let Some(d) = dscp {
        let tos = u32::from(d) << 2;
        let _ = s.set_tos_v4(tos);
        let _ = s.set_tclass_v6(tos);
    }
    if let Some(p) = priority {
        let _ = s.set_priority(p);
    }
}

/// The current MTU of `iface` (SIOCGIFMTU on the link's socket).
pub fn link_mtu(socket: &Socket, iface: &str) -> io::Result<u32> {
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    for (d, c) in req.ifr_name.iter_mut().zip(name) {
        *d = *c as libc::c_char;
    }
    // SAFETY: valid fd and a NUL-terminated name in a valid ifreq.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(socket),
            libc::SIOCGIFMTU,
            &raw mut req,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU fills ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::other(format!("negative MTU {mtu}")))
}

/// A UDP socket bound to `iface` with TTL / Hop Limit 255 (GTSM, seed 003 section 7.3),
/// unicast and multicast alike, multicast sent out of this interface.
pub fn open_advertisement_socket(iface: &str, ifindex: u32, ipv6: bool) -> io::Result<Socket> {
    let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.bind_device(Some(iface.as_bytes()))?;
    if ipv6 {
        s.set_unicast_hops_v6(255)?;
        s.set_multicast_hops_v6(255)?;
        s.set_multicast_if_v6(ifindex)?;
        s.set_multicast_loop_v6(false)?;
    } else {
        s.set_ttl_v4(255)?;
        s.set_multicast_ttl_v4(255)?;
        s.set_multicast_if_v4(&Ipv4Addr::UNSPECIFIED).ok();
        // IP_MULTICAST_IF by index (struct ip_mreqn) so the group goes out of this link.
        let mreqn = libc::ip_mreqn {
            imr_multiaddr: libc::in_addr { s_addr: 0 },
            imr_address: libc::in_addr { s_addr: 0 },
            imr_ifindex: ifindex as i32,
        };
        // SAFETY: valid fd and option struct.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_IF,
                (&raw const mreqn).cast(),
                size_of::<libc::ip_mreqn>() as u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        s.set_multicast_loop_v4(false)?;
    }
    // Network control (DSCP CS6, priority 6): where the egress qdisc has priorities, an
    // advertisement about congestion must not wait behind the congestion it reports.
    if ipv6 {
        s.set_tclass_v6(0xc0)?;
    } else {
        s.set_tos_v4(0xc0)?;
    }
    s.set_priority(6)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// The source address and port datagrams from `s` (an advertisement socket bound to
/// `iface`) to `to` carry: what an authentication trailer's pseudo-header names (issue 39).
/// `s` is bound to an ephemeral port first if it has none, so that the port stays the
/// same for every datagram; the address is the one the kernel picks for `to` out of
/// `iface` (a connected throwaway socket's local address).
pub fn advertisement_source(
    s: &Socket,
    iface: &str,
    to: &socket2::SockAddr,
) -> io::Result<std::net::SocketAddr> {
    let local = s.local_addr()?.as_socket();
    let port = match local {
        Some(a) if a.port() != 0 => a.port(),
        _ => {
            let any: std::net::SocketAddr = if to.is_ipv6() {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            } else {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            };
            s.bind(&any.into())?;
            s.local_addr()?
                .as_socket()
                .map(|a| a.port())
                .ok_or_else(|| io::Error::other("the socket has no address"))?
        }
    };
    let domain = if to.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let probe = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    probe.bind_device(Some(iface.as_bytes()))?;
    probe.connect(to)?;
    let ip = probe
        .local_addr()?
        .as_socket()
        .map(|a| a.ip())
        .ok_or_else(|| io::Error::other("no source address"))?;
    if ip.is_unspecified() {
        return Err(io::Error::other(format!(
            "{iface} has no address to send from"
        )));
    }
    Ok(std::net::SocketAddr::new(ip, port))
}

/// The authentication socket's receive buffer, octets (the kernel doubles it for its
/// bookkeeping, and charges each datagram its buffer's true size, a few KiB): some
/// thousands of full advertisements, a 64-spine fabric's 384 datagrams of 20 ms many times
/// over. `cargo xtask bench scale` counts the overflows of a leaf under fabric churn.
pub const AUTH_RECEIVE_BUFFER: libc::c_int = 8 << 20;

/// The socket lqd's authenticating receiver reads LQ datagrams from (issue 39): UDP on
/// `port` of every address of one family, with each datagram's TTL / Hop Limit and its
/// destination address and ingress interface (IP_PKTINFO / IPV6_PKTINFO) delivered beside
/// it. The XDP program passes up only the datagrams of the interfaces that require
/// authentication; the receiver ignores the others by their ingress interface.
pub fn open_auth_socket(port: u16, ipv6: bool) -> io::Result<Socket> {
    let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    // No SO_REUSEADDR: no other process may share the port and take datagrams.
    let on: libc::c_int = 1;
    let set = |level: libc::c_int, name: libc::c_int| -> io::Result<()> {
        // SAFETY: valid fd and an int option.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                level,
                name,
                (&raw const on).cast(),
                size_of::<libc::c_int>() as u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    let any: std::net::SocketAddr = if ipv6 {
        s.set_only_v6(true)?;
        set(libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT)?;
        set(libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)?;
        (std::net::Ipv6Addr::UNSPECIFIED, port).into()
    } else {
        set(libc::IPPROTO_IP, libc::IP_RECVTTL)?;
        set(libc::IPPROTO_IP, libc::IP_PKTINFO)?;
        (Ipv4Addr::UNSPECIFIED, port).into()
    };
    // The datagrams a socket drops when its queue is full are counted (SO_RXQ_OVFL, read
    // by `recv_with_info`), and the queue holds a 64-spine fabric's period many times
    // over: 64 x 6 datagrams every 20 ms wait here whenever the loop is busy elsewhere.
    set(libc::SOL_SOCKET, libc::SO_RXQ_OVFL)?;
    let size: libc::c_int = AUTH_RECEIVE_BUFFER;
    // SAFETY: valid fd and an int option. SO_RCVBUFFORCE passes rmem_max when privileged;
    // otherwise SO_RCVBUF (capped by rmem_max) is the best there is.
    let forced = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const size).cast(),
            size_of::<libc::c_int>() as u32,
        )
    } == 0;
    if !forced {
        s.set_recv_buffer_size(size as usize)?;
    }
    s.bind(&any.into())?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// One datagram read by [`recv_with_info`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceivedInfo {
    /// Its length in the buffer (a longer one is truncated: `truncated`).
    pub len: usize,
    /// Whether it did not fit the buffer.
    pub truncated: bool,
    /// Source address and port.
    pub source: std::net::SocketAddr,
    /// Destination address (IP_PKTINFO / IPV6_PKTINFO).
    pub destination: std::net::IpAddr,
    /// The interface it arrived on.
    pub ifindex: u32,
    /// Its TTL / Hop Limit.
    pub ttl: u8,
    /// The datagrams the socket has dropped for a full queue since it opened
    /// (SO_RXQ_OVFL's running count, present once it is not zero).
    pub dropped: Option<u32>,
}

/// Reads one datagram from `s` (an [`open_auth_socket`] socket) with its TTL, destination
/// and ingress interface; `Ok(None)` when none is waiting. A datagram without those
/// control messages (which the socket options guarantee) is an error.
pub fn recv_with_info(s: &Socket, buf: &mut [u8]) -> io::Result<Option<ReceivedInfo>> {
    // SAFETY: zeroed sockaddr_storage and msghdr are valid; the iovec and the control
    // buffer outlive the call; the kernel writes at most their lengths.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&raw mut from).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    // SAFETY: `msg` points at live buffers (above).
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let source = match i32::from(from.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET).
            let a: libc::sockaddr_in = unsafe { *(&raw const from).cast() };
            std::net::SocketAddr::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)).into(),
                u16::from_be(a.sin_port),
            )
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (family AF_INET6).
            let a: libc::sockaddr_in6 = unsafe { *(&raw const from).cast() };
            std::net::SocketAddr::new(
                std::net::Ipv6Addr::from(a.sin6_addr.s6_addr).into(),
                u16::from_be(a.sin6_port),
            )
        }
        f => return Err(io::Error::other(format!("address family {f}"))),
    };
    let (mut ttl, mut destination, mut ifindex, mut dropped) = (None, None, 0u32, None);
    // SAFETY: CMSG_* walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_TTL) => {
                    ttl = Some(data.cast::<libc::c_int>().read_unaligned() as u8);
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let p = data.cast::<libc::in_pktinfo>().read_unaligned();
                    destination = Some(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr)).into());
                    ifindex = p.ipi_ifindex as u32;
                }
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                    dropped = Some(data.cast::<u32>().read_unaligned());
                }
                (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                    ttl = Some(data.cast::<libc::c_int>().read_unaligned() as u8);
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let p = data.cast::<libc::in6_pktinfo>().read_unaligned();
                    destination = Some(std::net::Ipv6Addr::from(p.ipi6_addr.s6_addr).into());
                    ifindex = p.ipi6_ifindex;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    match (ttl, destination) {
        (Some(ttl), Some(destination)) => Ok(Some(ReceivedInfo {
            len: (n as usize).min(buf.len()),
            truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
            source,
            destination,
            ifindex,
            ttl,
            dropped,
        })),
        _ => Err(io::Error::other(
            "a datagram without its TTL or destination",
        )),
    }
}

/// A socket that owns its descriptor, for [`crate::sys::timer::register`].
pub struct AuthSocket(pub Socket);

impl std::os::fd::AsRawFd for AuthSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

impl crate::sys::timer::OwnsFd for AuthSocket {}

/// Bytes written to `s` that its peer has not acknowledged (Linux SIOCOUTQ), if known.
pub fn unacknowledged_bytes(s: &TcpStream) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one c_int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
    (r == 0).then(|| u64::try_from(n).unwrap_or(0))
}
