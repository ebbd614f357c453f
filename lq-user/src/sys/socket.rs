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

/// Bytes written to `s` that its peer has not acknowledged (Linux SIOCOUTQ), if known.
pub fn unacknowledged_bytes(s: &TcpStream) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one c_int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
    (r == 0).then(|| u64::try_from(n).unwrap_or(0))
}
