//! The event loop's claims on the machine: real-time scheduling, locked memory, enough
//! file descriptors. Each logs what it got, and what the loop risks without it.

use tracing::{info, warn};

/// Raises the soft open-file limit to the hard limit: every client connection is a file
/// descriptor, and running out of them would refuse `lqd show` along with the siege.
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let (Some(soft), Some(hard)) = (lim.current, lim.maximum) else {
        return;
    };
    if soft >= hard {
        return;
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        },
    ) {
        Ok(()) => info!(
            from = soft,
            to = hard,
            "raised the open-file soft limit to the hard limit"
        ),
        Err(e) => warn!(soft, hard, error = %e, "could not raise the open-file soft limit"),
    }
}

/// Puts the calling thread (the event loop) under SCHED_RR priority 1. Threads it starts
/// later get the normal policy back (SCHED_RESET_ON_FORK). The loop only waits on timers
/// and non-blocking I/O, and the kernel's real-time throttling bounds it if it ever spun.
pub fn set_realtime() {
    set_realtime_thread("event loop", "its timers may fire late");
}

/// Puts the calling thread, `what`, under SCHED_RR priority 1 (SCHED_RESET_ON_FORK: the
/// threads it starts get the normal policy); `risk` says what happens without it.
pub fn set_realtime_thread(what: &str, risk: &str) {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc =
        unsafe { libc::sched_setscheduler(0, libc::SCHED_RR | libc::SCHED_RESET_ON_FORK, &param) };
    if rc == 0 {
        info!("{what} scheduled SCHED_RR priority 1");
    } else {
        warn!(
            error = %std::io::Error::last_os_error(),
            "could not schedule the {what} SCHED_RR (needs CAP_SYS_NICE); under CPU load {risk}"
        );
    }
}

/// Locks the pages mapped now (the binary's code, libraries, the heap so far) in memory:
/// under memory pressure the kernel evicts file-backed pages, and a major fault on the
/// loop's code stalls it for a disk read, real-time policy or not. Only the current
/// mappings: later allocations are anonymous memory (kept unless swapped), and locking
/// them too could fail allocations once capabilities are dropped.
pub fn lock_memory() {
    use rustix::mm::{MlockAllFlags, mlockall};
    match mlockall(MlockAllFlags::CURRENT) {
        Ok(()) => info!("memory locked (mlockall MCL_CURRENT)"),
        Err(e) => warn!(
            error = %e,
            "could not lock memory (needs CAP_IPC_LOCK); under memory pressure the loop may stall on page faults"
        ),
    }
}
