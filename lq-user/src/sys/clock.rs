//! The clocks lqd reads, in one place. The core never reads a clock: the daemon reads one
//! here and passes the time in.
//!
//! * CLOCK_MONOTONIC: the controller's and the loop's time base (heartbeats, damping,
//!   timers), and the XDP receiver's (`bpf_ktime_get_ns` is the same clock).
//! * CLOCK_BOOTTIME: the helper's wire timestamp, "milliseconds since the sender booted"
//!   (`spec/lq-udp-wire.md`), which must keep counting through a suspend.
//! * The real-time clock: IPFIX export times (RFC 7011 section 3.1, seconds since the
//!   UNIX epoch).
//! * The calling thread's CPU-time clock: what a piece of the loop's work costs, without
//!   the time the thread was preempted.

use rustix::time::{ClockId, clock_gettime};

fn ns(id: ClockId) -> u64 {
    let ts = clock_gettime(id);
    // Both fields are non-negative for these clocks (the kernel's timespec64 normalised).
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    ns(ClockId::Monotonic)
}

/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID) in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    ns(ClockId::ThreadCPUTime)
}

/// CLOCK_BOOTTIME in nanoseconds.
pub fn boottime_ns() -> u64 {
    ns(ClockId::Boottime)
}

/// Milliseconds since the UNIX epoch (0 if the clock is before it).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Seconds since the UNIX epoch (0 if the clock is before it): the time key lifetimes are
/// judged at (RFC 8177 key chains, issue 39).
pub fn unix_s_now() -> i64 {
    (unix_ms_now() / 1000) as i64
}

/// Nanoseconds since the UNIX epoch (0 if the clock is before it).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Seconds since the UNIX epoch, as an IPFIX Export Time (RFC 7011 section 3.1: 32 bits,
/// wrapping in 2106).
pub fn unix_seconds() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// 64 random bits from the kernel (getrandom), for seeding the helper's jitter (seed 003
/// section 7.2); the boot time mixed with the process id if getrandom fails.
pub fn os_random_u64() -> u64 {
    let mut b = [0u8; 8];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => boottime_ns() ^ u64::from(std::process::id()) << 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward_and_boottime_is_not_behind_monotonic() {
        let m0 = monotonic_ns();
        let b0 = boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_ns() >= m0 + 2_000_000);
        assert!(boottime_ns() >= b0 + 2_000_000);
        // BOOTTIME = MONOTONIC + time suspended.
        assert!(boottime_ns() + 1_000_000 >= monotonic_ns());
        assert!(unix_ms_now() > 1_700_000_000_000);
        assert_ne!(os_random_u64(), os_random_u64());
    }
}
