//! A listener of the kernel's nexthop notifications (RTNLGRP_NEXTHOP) in a namespace, each
//! stamped with CLOCK_MONOTONIC when received: when a group change reached the kernel, for
//! the benchmarks that measure what follows from it.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Result, anyhow, bail, ensure};
use lq_user::sys::netlink::nexthop::{NetlinkMessage, RTNLGRP_NEXTHOP, parse_messages};

use lq_user::sys::clock::monotonic_ns;

use crate::netns::NetNs;

/// A nexthop notification: CLOCK_MONOTONIC right after `recv`, the object, its members
/// (`None`: deleted).
#[derive(Debug)]
pub struct NhEvent {
    /// CLOCK_MONOTONIC right after `recv`, ns.
    pub t_ns: u64,
    /// The nexthop object.
    pub id: u32,
    /// Its group's (member, weight) pairs; `None`: deleted.
    pub members: Option<Vec<(u32, u32)>>,
}

/// A NETLINK_ROUTE socket subscribed to RTNLGRP_NEXTHOP, in the calling thread's namespace.
fn nexthop_listener_socket() -> Result<OwnedFd> {
    // SAFETY: plain socket syscall; the fd is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    ensure!(fd >= 0, "netlink socket: {}", io::Error::last_os_error());
    // SAFETY: fresh, valid descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: valid fd and address.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sa).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    ensure!(rc == 0, "bind: {}", io::Error::last_os_error());
    let group = RTNLGRP_NEXTHOP as libc::c_int;
    setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_ADD_MEMBERSHIP, group)?;
    setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20)?;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: valid fd and timeval.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as u32,
        )
    };
    ensure!(rc == 0, "SO_RCVTIMEO: {}", io::Error::last_os_error());
    Ok(fd)
}

fn setsockopt(fd: &OwnedFd, level: i32, opt: i32, v: libc::c_int) -> Result<()> {
    // SAFETY: valid fd and int option.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, (&raw const v).cast(), 4) };
    ensure!(
        rc == 0,
        "setsockopt {level}/{opt}: {}",
        io::Error::last_os_error()
    );
    Ok(())
}

/// A thread in the leaf namespace that timestamps every nexthop notification.
pub struct Listener {
    rx: mpsc::Receiver<NhEvent>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Listener {
    /// Starts the listener's thread in `ns`.
    pub fn start(ns: &NetNs) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let name = ns.name().to_string();
        let thread = std::thread::spawn(move || -> Result<()> {
            crate::netns::enter_netns(&name)?;
            let fd = nexthop_listener_socket()?;
            ready_tx.send(()).ok();
            let mut buf = vec![0u8; 256 * 1024];
            while !s.load(Ordering::Relaxed) {
                // SAFETY: valid fd and buffer.
                let n =
                    unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                let t_ns = monotonic_ns();
                if n < 0 {
                    let e = io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EAGAIN | libc::EINTR) => continue,
                        Some(libc::ENOBUFS) => {
                            eprintln!("listener: ENOBUFS (notifications lost)");
                            continue;
                        }
                        _ => bail!("recv: {e}"),
                    }
                }
                for m in parse_messages(&buf[..n as usize]) {
                    let ev = match m {
                        Ok(NetlinkMessage::NewNexthop(_, nh)) => NhEvent {
                            t_ns,
                            id: nh.id.unwrap_or(0),
                            members: Some(nh.group.iter().map(|g| (g.id, g.weight)).collect()),
                        },
                        Ok(NetlinkMessage::DelNexthop(_, nh)) => NhEvent {
                            t_ns,
                            id: nh.id.unwrap_or(0),
                            members: None,
                        },
                        _ => continue,
                    };
                    if tx.send(ev).is_err() {
                        return Ok(());
                    }
                }
            }
            Ok(())
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| anyhow!("listener did not start"))?;
        Ok(Self {
            rx,
            stop,
            thread: Some(thread),
        })
    }

    /// Forgets the notifications received so far.
    pub fn drain(&self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// The first notification for `id` whose members satisfy `pred`, within `timeout`.
    pub fn wait(
        &self,
        id: u32,
        timeout: Duration,
        pred: impl Fn(&[(u32, u32)]) -> bool,
    ) -> Option<NhEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let ev = self.rx.recv_timeout(left).ok()?;
            if ev.id == id && ev.members.as_deref().is_some_and(&pred) {
                return Some(ev);
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Err(e)) => eprintln!("listener: {e:#}"),
                Err(_) => eprintln!("listener panicked"),
                Ok(Ok(())) => {}
            }
        }
    }
}
