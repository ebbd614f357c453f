//! Timers and readiness of kernel descriptors for the event loop: a timerfd with
//! nanosecond deadlines, and the registration of descriptors with tokio.

use std::{cell::Cell, io, os::fd::OwnedFd};

use tokio::io::{Interest, unix::AsyncFd};

/// A descriptor-owning value that may be registered with tokio: it keeps its descriptor
/// open and unchanged for as long as it lives (tokio's `AsyncFd` requires that of its
/// inner value, which is why its constructor is `unsafe`).
pub trait OwnsFd: std::os::fd::AsRawFd {}

impl OwnsFd for OwnedFd {}
impl OwnsFd for aya::maps::RingBuf<aya::maps::MapData> {}
impl OwnsFd for crate::sys::netlink::route_monitor::RouteMonitor {}

/// Registers `inner` with the running tokio reactor for `interest`.
pub fn register<T: OwnsFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `OwnsFd` is implemented only for types that own their descriptor, and the
    // descriptor lives inside the AsyncFd, so it stays open and the same while registered.
    unsafe { AsyncFd::register_with_interest(inner, interest) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// A one-shot timerfd armed at absolute deadlines: its precision is the kernel's hrtimer,
/// not tokio's 1 ms wheel, and moving its deadline is one system call. (Each
/// `tokio::time::sleep` the event loop created anew woke tokio's driver through its eventfd
/// to re-register the timer: a write and an extra `epoll_wait` per loop iteration, a tenth
/// of a still 64 x 512 leaf's CPU, issue 15.)
pub struct DeadlineTimer {
    fd: AsyncFd<OwnedFd>,
    armed_at: Cell<Option<u64>>,
}

impl DeadlineTimer {
    /// On CLOCK_BOOTTIME, the advertiser's clock (the periodic advertisement, seed 003
    /// section 7.2).
    pub fn boottime() -> std::io::Result<Self> {
        Self::new(rustix::time::TimerfdClockId::Boottime)
    }

    /// On CLOCK_MONOTONIC, the clock of the BPF maps and of the load balancer's steps.
    pub fn monotonic() -> std::io::Result<Self> {
        Self::new(rustix::time::TimerfdClockId::Monotonic)
    }

    fn new(clock: rustix::time::TimerfdClockId) -> std::io::Result<Self> {
        use rustix::time::{TimerfdFlags, timerfd_create};
        let fd = timerfd_create(clock, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        let fd = register(fd, Interest::READABLE)?;
        Ok(Self {
            fd,
            armed_at: Cell::new(None),
        })
    }

    /// Arms the timer at `at_ns` (of its clock), or disarms it; a no-op when already armed
    /// there.
    pub fn arm(&self, at_ns: Option<u64>) -> std::io::Result<()> {
        use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
        if at_ns == self.armed_at.get() {
            return Ok(());
        }
        let ts = |ns: u64| Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        };
        // An it_value of zero disarms; an absolute deadline of 0 ns would too, so a
        // deadline is at least 1 ns.
        let value = at_ns.map_or(ts(0), |ns| ts(ns.max(1)));
        timerfd_settime(
            self.fd.get_ref(),
            TimerfdTimerFlags::ABSTIME,
            &Itimerspec {
                it_interval: ts(0),
                it_value: value,
            },
        )?;
        self.armed_at.set(at_ns);
        Ok(())
    }

    /// Resolves when the armed deadline has passed.
    pub async fn expired(&self) -> std::io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut buf = [0u8; 8];
            match guard
                .try_io(|fd| rustix::io::read(fd.get_ref(), &mut buf).map_err(std::io::Error::from))
            {
                Ok(r) => {
                    // Expired: armed again at the owner's next deadline.
                    self.armed_at.set(None);
                    return r.map(|_| ());
                }
                Err(_would_block) => continue,
            }
        }
    }
}
