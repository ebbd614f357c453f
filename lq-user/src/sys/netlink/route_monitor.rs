//! The slow plane's I/O edge: a NETLINK_ROUTE socket subscribed to RTNLGRP_IPV4_ROUTE,
//! RTNLGRP_IPV6_ROUTE and RTNLGRP_NEXTHOP, a dump of nexthop objects and routes at start,
//! and the typed [`RouteEvent`]s for the core. Subscribing before dumping leaves no gap;
//! a notification overrun (ENOBUFS) is answered with [`RouteEvent::Reset`] and a fresh
//! dump. Undecodable messages are counted and skipped, never fatal.

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
};

use tracing::warn;

use super::route::RouteEvent;
use super::route::{self as route_msg, Message, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE};
use super::wire::RouteSocket;
use crate::sys::netlink::nexthop::{self, RTNLGRP_NEXTHOP};

/// The monitor socket.
pub struct RouteMonitor {
    socket: RouteSocket,
    buf: Vec<u8>,
    seq: u32,
    /// Messages that could not be decoded.
    pub decode_errors: u64,
}

impl AsRawFd for RouteMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl RouteMonitor {
    /// Opens the socket in the calling thread's namespace and subscribes.
    pub fn open() -> io::Result<Self> {
        let socket = RouteSocket::open()?;
        // A 512-leaf fabric's full table arrives as one burst at start: a large buffer
        // (beyond rmem_max when privileged) keeps it from overrunning. netlink-sys sets
        // only SO_RCVBUF, which rmem_max caps; SO_RCVBUFFORCE is tried first.
        let size: libc::c_int = 8 << 20;
        // SAFETY: valid fd and option value of the size given.
        let forced = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if !forced {
            let _ = socket.socket().set_rx_buf_sz(size);
        }
        for group in [RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, RTNLGRP_NEXTHOP] {
            socket.socket().add_membership(group)?;
        }
        Ok(Self {
            socket,
            buf: vec![0; 256 * 1024],
            seq: 0,
            decode_errors: 0,
        })
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket.socket().set_non_blocking(on)
    }

    fn recv(&mut self) -> io::Result<Option<usize>> {
        match self.socket.recv(&mut self.buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn decode(&mut self, n: usize, out: &mut Vec<RouteEvent>, done: &mut Option<u32>) {
        for m in route_msg::parse(&self.buf[..n]) {
            match m {
                Ok(Message::NewRoute(r)) => out.push(RouteEvent::NewRoute(r)),
                Ok(Message::DelRoute(r)) => out.push(RouteEvent::DelRoute(r)),
                Ok(Message::NewNexthop(nh)) => out.push(RouteEvent::NewNexthop(nh)),
                Ok(Message::DelNexthop(nh)) => {
                    if let Some(id) = nh.id {
                        out.push(RouteEvent::DelNexthop(id));
                    }
                }
                Ok(Message::Done(seq)) | Ok(Message::Error(seq, _)) => *done = Some(seq),
                Ok(Message::Other) => {}
                Err(e) => {
                    self.decode_errors += 1;
                    warn!(error = %e, "undecodable route notification skipped");
                }
            }
        }
    }

    /// A full dump (nexthop objects first, so routes resolve at once), blocking, with the
    /// notifications that arrive meanwhile.
    pub fn dump(&mut self) -> io::Result<Vec<RouteEvent>> {
        self.set_nonblocking(false)?;
        let mut out = vec![RouteEvent::Reset];
        let requests: [fn(u32) -> Vec<u8>; 2] =
            [nexthop::encode_get_dump, route_msg::encode_route_dump];
        for build in requests {
            self.seq = self.seq.wrapping_add(1);
            let seq = self.seq;
            let msg = build(seq);
            self.socket.send(&msg)?;
            loop {
                let n = match self.recv() {
                    Ok(Some(n)) => n,
                    Ok(None) => continue,
                    // Overrun during the dump: the dump itself still completes.
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                    Err(e) => return Err(e),
                };
                let mut done = None;
                self.decode(n, &mut out, &mut done);
                if done == Some(seq) {
                    break;
                }
            }
        }
        self.set_nonblocking(true)?;
        Ok(out)
    }

    /// Every notification queued now (non-blocking). On an overrun, a reset and a dump.
    pub fn drain(&mut self) -> io::Result<Vec<RouteEvent>> {
        let mut out = Vec::new();
        loop {
            match self.recv() {
                Ok(Some(n)) => {
                    let mut done = None;
                    self.decode(n, &mut out, &mut done);
                }
                Ok(None) => return Ok(out),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    warn!("route notifications overran the socket: dumping the kernel state again");
                    return self.dump();
                }
                Err(e) => return Err(e),
            }
        }
    }
}
