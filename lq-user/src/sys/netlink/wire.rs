//! The one netlink layer every lqd module speaks through (docs/netlink.md): the socket
//! (`netlink-sys`), the message framing (`struct nlmsghdr`, NLMSG_DONE / NLMSG_ERROR) and
//! the attribute iterator (`netlink-packet-core`'s [`NlasIterator`]). The codecs above it,
//! `netlink-packet-route`'s messages and our own nexthop, dcbnl and qdisc codecs, take
//! frames and attributes from here and emit their bodies through [`Emitable`].
//!
//! Decoding never panics: `netlink-packet-core` checks every length before it reads
//! ([`NetlinkBuffer::new_checked`], [`netlink_packet_core::NlaBuffer::new_checked`]), and iteration stops after
//! the first framing error.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
};

pub use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NLA_F_NESTED, NLA_HEADER_SIZE, NLM_F_ACK, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, Nla,
    NlasIterator,
};
use netlink_packet_core::{ErrorBuffer, NLMSG_ALIGNTO, NetlinkBuffer, NetlinkHeader};

/// sizeof(struct nlmsghdr) (netlink.h; `netlink-packet-core` keeps its copy private).
pub const NLMSG_HDRLEN: usize = 16;

/// One netlink message of a receive buffer: its header and everything after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// nlmsg_type.
    pub ty: u16,
    /// nlmsg_flags.
    pub flags: u16,
    /// nlmsg_seq.
    pub seq: u32,
    /// nlmsg_pid.
    pub pid: u32,
    /// nlmsg_len.
    pub len: u32,
    /// Everything after the 16-octet header, up to nlmsg_len.
    pub payload: &'a [u8],
}

impl Frame<'_> {
    /// The `error` field of an NLMSG_ERROR (0: an ACK, else a negative errno); `None` when
    /// the payload is too short to hold it.
    pub fn error_code(&self) -> Option<i32> {
        error_code(self.payload)
    }
}

/// The `error` field of an NLMSG_ERROR payload (0: an ACK, else a negative errno); `None`
/// when the payload is too short to hold it.
pub fn error_code(payload: &[u8]) -> Option<i32> {
    ErrorBuffer::new_checked(payload)
        .ok()
        .map(|e| e.code().map_or(0, i32::from))
}

/// The netlink messages of one receive buffer (a dump part, an ACK, a notification).
/// Stops after the first framing error: a message whose length is below the header or
/// beyond the buffer.
pub fn frames(buf: &[u8]) -> impl Iterator<Item = Result<Frame<'_>, DecodeError>> + '_ {
    let mut rest = buf;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        match NetlinkBuffer::new_checked(rest) {
            Ok(nl) => {
                let len = nl.length();
                let frame = Frame {
                    ty: nl.message_type(),
                    flags: nl.flags(),
                    seq: nl.sequence_number(),
                    pid: nl.port_number(),
                    len,
                    payload: nl.payload(),
                };
                let next = (len as usize).next_multiple_of(usize::from(NLMSG_ALIGNTO));
                rest = rest.get(next..).unwrap_or(&[]);
                Some(Ok(frame))
            }
            Err(e) => {
                failed = true;
                Some(Err(e))
            }
        }
    })
}

/// The attributes of `buf` as `(type without NLA_F_NESTED / NLA_F_NET_BYTEORDER,
/// payload)`, over [`NlasIterator`]. Stops after the first attribute whose length is
/// below its header or beyond its container (that one is an error).
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> + '_ {
    NlasIterator::new(buf).map(|nla| {
        nla.map(|nla| {
            let kind = nla.kind();
            let len = usize::from(nla.length());
            // new_checked (inside the iterator) proved NLA_HEADER_SIZE <= len <= buffer.
            let whole: &[u8] = nla.into_inner();
            (kind, whole.get(NLA_HEADER_SIZE..len).unwrap_or(&[]))
        })
    })
}

/// A message body: a fixed family header (`struct nhmsg`, `ifinfomsg`, `tcmsg`, ...)
/// followed by attributes.
pub struct Body<'a, A: Nla> {
    /// The family header, emitted as is (the kernel's structs hold no padding of ours).
    pub fixed: &'a [u8],
    /// The attributes, each emitted by its [`Nla`] impl with its padding.
    pub attrs: &'a [A],
}

impl<A: Nla> Emitable for Body<'_, A> {
    fn buffer_len(&self) -> usize {
        self.fixed.len() + self.attrs.buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        let (fixed, attrs) = buffer.split_at_mut(self.fixed.len());
        fixed.copy_from_slice(self.fixed);
        self.attrs.emit(attrs);
    }
}

/// A body of only a family header (dump requests).
pub fn fixed_only(fixed: &[u8]) -> Body<'_, DefaultNla> {
    Body { fixed, attrs: &[] }
}

/// One message: the netlink header (pid 0: the kernel fills in ours), then `body`.
// netlink-packet-core's and -route's structs are #[non_exhaustive]: no struct expression, even with
// `..Default::default()`, so the fields are set one by one.
#[allow(clippy::field_reassign_with_default)]
pub fn message(ty: u16, flags: u16, seq: u32, body: &impl Emitable) -> Vec<u8> {
    let len = NLMSG_HDRLEN + body.buffer_len();
    let mut header = NetlinkHeader::default();
    // Bodies are a few hundred octets at most (the nexthop codec checks its own).
    header.length = u32::try_from(len).unwrap_or(u32::MAX);
    header.message_type = ty;
    header.flags = flags;
    header.sequence_number = seq;
    // port_number 0: the kernel fills in ours.
    let mut buf = vec![0; len];
    let (head, rest) = buf.split_at_mut(NLMSG_HDRLEN);
    header.emit(head);
    body.emit(rest);
    buf
}

/// A NETLINK_ROUTE socket in the calling thread's network namespace, close-on-exec and
/// bound (the kernel picks the port id): the one way lqd opens an rtnetlink socket, for
/// requests, dumps and notifications.
pub struct RouteSocket {
    socket: netlink_sys::Socket,
}

impl RouteSocket {
    /// Opens and binds the socket.
    pub fn open() -> io::Result<Self> {
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)?;
        socket.bind_auto()?;
        Ok(Self { socket })
    }

    /// Opens a non-blocking socket joined to the multicast `groups` (RTNLGRP_*): the
    /// kernel's notifications, read with [`Self::recv`] until it would block.
    pub fn notifications(groups: &[u32]) -> io::Result<Self> {
        let socket = Self::open()?;
        for group in groups {
            socket.socket.add_membership(*group)?;
        }
        socket.socket.set_non_blocking(true)?;
        Ok(socket)
    }

    /// The socket, for its options (extended ACK, multicast groups, non-blocking mode).
    pub fn socket(&self) -> &netlink_sys::Socket {
        &self.socket
    }

    /// Sends one datagram to the kernel.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        self.socket.send(msg, 0).map(drop)
    }

    /// Receives one datagram into `buf`, retrying after a signal; a would-block (on a
    /// non-blocking socket) or a timeout is the caller's to handle.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut b = &mut *buf;
            match self.socket.recv(&mut b, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

impl AsRawFd for RouteSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for RouteSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        a.extend(ty.to_ne_bytes());
        a.extend(payload);
        a.resize(a.len().next_multiple_of(4), 0);
        a
    }

    #[test]
    fn frames_and_attributes_round_trip() {
        let attrs_in = [
            DefaultNla::new(3, b"eth1\0".to_vec()),
            DefaultNla::new(4, 1500u32.to_ne_bytes().to_vec()),
        ];
        let m = message(
            18,
            NLM_F_REQUEST | NLM_F_DUMP,
            7,
            &Body {
                fixed: &[0; 16],
                attrs: &attrs_in,
            },
        );
        let mut want = ((16 + 16 + 12 + 8) as u32).to_ne_bytes().to_vec();
        want.extend(18u16.to_ne_bytes());
        want.extend(0x301u16.to_ne_bytes());
        want.extend(7u32.to_ne_bytes());
        want.extend(0u32.to_ne_bytes());
        want.extend([0; 16]);
        want.extend(nla(3, b"eth1\0"));
        want.extend(nla(4, &1500u32.to_ne_bytes()));
        assert_eq!(m, want);
        let two: Vec<u8> = [m.clone(), m].concat();
        let fs: Vec<_> = frames(&two).collect::<Result<_, _>>().unwrap();
        assert_eq!(fs.len(), 2);
        assert_eq!((fs[1].ty, fs[1].seq, fs[1].payload.len()), (18, 7, 36));
        let a: Vec<_> = attrs(&fs[0].payload[16..])
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(a, [(3, &b"eth1\0"[..]), (4, &1500u32.to_ne_bytes()[..])]);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let m = message(3, 0, 1, &fixed_only(&0i32.to_ne_bytes()));
        assert_eq!(frames(&m).next().unwrap().unwrap().error_code(), Some(0));
        for cut in 1..m.len() {
            assert!(frames(&m[..cut]).next().unwrap().is_err(), "{cut}");
        }
        assert!(attrs(&[200, 0, 3, 0]).next().unwrap().is_err());
        assert!(attrs(&[2, 0, 3, 0]).next().unwrap().is_err());
        assert_eq!(attrs(&[]).count(), 0);
    }
}
