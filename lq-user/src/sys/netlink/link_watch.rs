//! Link state from RTNLGRP_LINK notifications (issue 15 item 2): the load-balancer's
//! control step asks every step whether each uplink is up, and with 64 uplinks an ioctl
//! per uplink per step was 64 system calls where nothing had changed. Here the kernel says
//! when something changes: one non-blocking receive per step, usually empty.
//!
//! Subscribing before the first probe leaves no gap: a change during the probe arrives as
//! a notification afterwards. A notification overrun (ENOBUFS: the socket lost some)
//! answers with a fresh probe of every watched link. "Up" is what
//! [`super::LinkProbe::oper_up`] reads with SIOCGIFFLAGS: IFF_UP and IFF_RUNNING, the same
//! `dev_get_flags` bits a notification's `ifi_flags` carries.

use std::{collections::HashMap, io};

use tracing::warn;

use super::LinkProbe;
use super::wire::RouteSocket;
use crate::sys::sampler::{decode_link, messages};

/// RTNLGRP_LINK.
const RTNLGRP_LINK: u32 = libc::RTNLGRP_LINK;

/// Followed link state of a fixed set of interfaces.
pub struct LinkWatch {
    socket: RouteSocket,
    probe: LinkProbe,
    buf: Vec<u8>,
    states: LinkStates,
    /// Overruns answered with a probe of every link.
    pub resyncs: u64,
}

/// The state the notifications update (no I/O: fed the received octets).
#[derive(Debug, Default)]
struct LinkStates {
    /// Watched name -> up.
    up: HashMap<String, bool>,
    /// ifindex -> the name it last had (a rename away from a watched name is a loss).
    names: HashMap<u32, String>,
    /// Notifications that could not be decoded and were skipped.
    decode_errors: u64,
}

impl LinkWatch {
    /// Subscribes (in the calling thread's namespace), then probes each of `names`.
    pub fn open(names: &[String]) -> io::Result<Self> {
        let socket = RouteSocket::notifications(&[RTNLGRP_LINK])?;
        let mut me = Self {
            socket,
            probe: LinkProbe::open()?,
            buf: vec![0; 64 * 1024],
            states: LinkStates {
                up: names.iter().map(|n| (n.clone(), false)).collect(),
                ..LinkStates::default()
            },
            resyncs: 0,
        };
        me.probe_all();
        Ok(me)
    }

    fn probe_all(&mut self) {
        for (name, up) in &mut self.states.up {
            *up = self.probe.oper_up(name);
        }
    }

    /// Whether `name` is up with carrier (false for a name not watched).
    pub fn is_up(&self, name: &str) -> bool {
        self.states.up.get(name).copied().unwrap_or(false)
    }

    /// Notifications that could not be decoded and were skipped.
    pub fn decode_errors(&self) -> u64 {
        self.states.decode_errors
    }

    /// Applies every notification queued now; returns whether a watched link changed.
    pub fn poll(&mut self) -> io::Result<bool> {
        let mut changed = false;
        loop {
            let n = match self.socket.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(changed),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.resyncs += 1;
                    let before = self.states.up.clone();
                    self.probe_all();
                    changed |= before != self.states.up;
                    continue;
                }
                Err(e) => return Err(e),
            };
            changed |= self.states.apply(&self.buf[..n]);
        }
    }
}

impl LinkStates {
    /// Applies the notifications in `buf`; returns whether a watched link changed.
    fn apply(&mut self, buf: &[u8]) -> bool {
        let mut changed = false;
        for m in messages(buf) {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    self.decode_errors += 1;
                    warn!(error = %e, "undecodable link notification skipped");
                    break;
                }
            };
            let new = m.ty == libc::RTM_NEWLINK;
            // ifi_family: AF_UNSPEC for the device itself; AF_BRIDGE messages (a port
            // joining or leaving a bridge, RTM_DELLINK although the device stays) are not
            // about its state.
            if (!new && m.ty != libc::RTM_DELLINK)
                || m.payload
                    .first()
                    .is_some_and(|f| i32::from(*f) != libc::AF_UNSPEC)
            {
                continue;
            }
            let l = match decode_link(m.payload) {
                Ok(l) => l,
                Err(e) => {
                    self.decode_errors += 1;
                    warn!(error = %e, "undecodable link notification skipped");
                    continue;
                }
            };
            let name = l.name.clone();
            let previous = self.names.remove(&l.ifindex);
            if new && let Some(n) = &name {
                self.names.insert(l.ifindex, n.clone());
            }
            // A name this link no longer has (renamed away, or the link deleted) is down.
            let renamed = previous.filter(|p| !new || Some(p) != name.as_ref());
            let deleted = if new { None } else { name.clone() };
            for gone in [renamed, deleted].into_iter().flatten() {
                if let Some(up) = self.up.get_mut(&gone) {
                    changed |= std::mem::replace(up, false);
                }
            }
            if new
                && let Some(n) = &name
                && let Some(up) = self.up.get_mut(n)
            {
                let now =
                    l.flags & libc::IFF_UP as u32 != 0 && l.flags & libc::IFF_RUNNING as u32 != 0;
                changed |= std::mem::replace(up, now) != now;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One RTM_NEWLINK / RTM_DELLINK as the kernel sends it: nlmsghdr, ifinfomsg, IFLA_IFNAME.
    fn link_msg(ty: u16, ifindex: u32, flags: u32, name: &str) -> Vec<u8> {
        let mut name_attr = Vec::new();
        let nz = name.len() + 1;
        name_attr.extend_from_slice(&((4 + nz) as u16).to_ne_bytes());
        name_attr.extend_from_slice(&3u16.to_ne_bytes()); // IFLA_IFNAME
        name_attr.extend_from_slice(name.as_bytes());
        name_attr.push(0);
        while name_attr.len() % 4 != 0 {
            name_attr.push(0);
        }
        let mut body = vec![0u8, 0, 1, 0]; // AF_UNSPEC, pad, ARPHRD_ETHER
        body.extend_from_slice(&ifindex.to_ne_bytes());
        body.extend_from_slice(&flags.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&name_attr);
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&body);
        m
    }

    const UP: u32 = (libc::IFF_UP | libc::IFF_RUNNING) as u32;

    fn watching(names: &[&str]) -> LinkStates {
        LinkStates {
            up: names.iter().map(|n| (n.to_string(), true)).collect(),
            ..LinkStates::default()
        }
    }

    #[test]
    fn carrier_loss_deletion_and_rename_take_a_link_down() {
        let mut s = watching(&["up1", "up2"]);
        // Still up: no change.
        assert!(!s.apply(&link_msg(libc::RTM_NEWLINK, 5, UP, "up1")));
        // Carrier lost (IFF_RUNNING cleared), then back.
        assert!(s.apply(&link_msg(libc::RTM_NEWLINK, 5, libc::IFF_UP as u32, "up1")));
        assert!(!s.up["up1"]);
        assert!(s.apply(&link_msg(libc::RTM_NEWLINK, 5, UP, "up1")));
        assert!(s.up["up1"]);
        // Renamed away: the watched name is gone.
        assert!(s.apply(&link_msg(libc::RTM_NEWLINK, 5, UP, "old1")));
        assert!(!s.up["up1"]);
        // Deleted, never seen in a notification before (the start-up probe found it).
        assert!(s.apply(&link_msg(libc::RTM_DELLINK, 6, UP, "up2")));
        assert!(!s.up["up2"]);
        // A bridge port leaving its bridge (AF_BRIDGE RTM_DELLINK) is no deletion.
        let mut bridge = link_msg(libc::RTM_DELLINK, 7, UP, "up2");
        bridge[16] = libc::AF_BRIDGE as u8;
        s.up.insert("up2".into(), true);
        assert!(!s.apply(&bridge));
        assert!(s.up["up2"]);
        s.up.insert("up2".into(), false);
        // Links not watched change nothing; two messages in one datagram both apply.
        let mut two = link_msg(libc::RTM_NEWLINK, 9, UP, "eth0");
        two.extend(link_msg(libc::RTM_NEWLINK, 7, UP, "up2"));
        assert!(s.apply(&two));
        assert!(s.up["up2"] && !s.up.contains_key("eth0"));
    }

    #[test]
    fn a_broken_notification_is_counted_not_fatal() {
        let mut s = watching(&["up1"]);
        let mut m = link_msg(libc::RTM_NEWLINK, 5, 0, "up1");
        m.truncate(20); // a header that claims more than there is
        assert!(!s.apply(&m));
        assert_eq!(s.decode_errors, 1);
        assert!(s.up["up1"]);
    }
}
