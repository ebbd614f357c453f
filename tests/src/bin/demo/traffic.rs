//! TCP flows between host namespaces with fixed source ports (so that ECMP and lq runs
//! hash alike), timed at the receiver.
//!
//! A flow sends a 16-octet header (run, flow id, size) and `size` octets; the receiver
//! reads exactly that much, records the time and closes with a reset (SO_LINGER 0), so no
//! 4-tuple is left in TIME_WAIT and the next run can reuse the same source ports.

use std::{
    collections::HashMap,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream},
    os::fd::{AsRawFd, FromRawFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use lq_tests::fabric::enter_netns;

/// Port of the receiver.
pub const PORT: u16 = 5201;

/// One flow's progress, shared by its sender and the receiver.
#[derive(Debug)]
pub struct FlowStat {
    /// Octets of payload received.
    pub received: AtomicU64,
    /// When the last octet arrived (ns since the epoch of the run), 0 before.
    pub end_ns: AtomicU64,
    /// When the sender started connecting (ns since the epoch).
    pub start_ns: AtomicU64,
    /// Payload size.
    pub size: u64,
}

/// Flows of the whole demo, by (run, flow id).
#[derive(Default)]
pub struct Registry {
    flows: Mutex<HashMap<(u32, u32), Arc<FlowStat>>>,
    fds: Mutex<Vec<i32>>,
    /// Payload octets received in total (the progress curve).
    pub delivered: AtomicU64,
}

/// The demo's clock origin.
pub fn epoch() -> Instant {
    static E: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// ns since [`epoch`].
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

impl Registry {
    /// Registers a flow before it starts.
    pub fn add(&self, run: u32, flow: u32, size: u64) -> Arc<FlowStat> {
        let s = Arc::new(FlowStat {
            received: AtomicU64::new(0),
            end_ns: AtomicU64::new(0),
            start_ns: AtomicU64::new(0),
            size,
        });
        self.flows.lock().unwrap().insert((run, flow), s.clone());
        s
    }

    /// A registered flow.
    pub fn lookup(&self, run: u32, flow: u32) -> Option<Arc<FlowStat>> {
        self.flows.lock().unwrap().get(&(run, flow)).cloned()
    }

    fn track(&self, fd: i32) {
        self.fds.lock().unwrap().push(fd);
    }

    fn untrack(&self, fd: i32) {
        self.fds.lock().unwrap().retain(|&f| f != fd);
    }

    /// Shuts every open flow socket down (a run's time limit, Ctrl-C): their threads end.
    pub fn abort_all(&self) {
        for &fd in self.fds.lock().unwrap().iter() {
            // SAFETY: shutdown on a socket fd still owned by a flow thread.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

/// The receiver: a listener in the destination host's namespace, a thread per connection.
pub struct Receiver {
    stop: Arc<AtomicBool>,
    addr: SocketAddrV4,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    /// Listens on `addr:PORT` inside `ns`.
    pub fn start(ns: &str, addr: Ipv4Addr, reg: Arc<Registry>) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let s = stop.clone();
        let ns = ns.to_string();
        let sa = SocketAddrV4::new(addr, PORT);
        let thread = std::thread::spawn(move || {
            if let Err(e) = enter_netns(&ns) {
                let _ = tx.send(Err(e));
                return;
            }
            let l = match TcpListener::bind(sa) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            for c in l.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(c) = c else { continue };
                let reg = reg.clone();
                std::thread::spawn(move || serve(c, &reg));
            }
        });
        rx.recv_timeout(Duration::from_secs(5))??;
        Ok(Self {
            stop,
            addr: sa,
            thread: Some(thread),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The accept loop ends at its next connection or with the process; the
        // namespace's deletion does not wait for it.
        let _ = (self.addr, self.thread.take());
    }
}

fn serve(mut c: TcpStream, reg: &Registry) {
    let fd = c.as_raw_fd();
    reg.track(fd);
    let mut head = [0u8; 16];
    if c.read_exact(&mut head).is_ok() {
        let run = u32::from_be_bytes(head[0..4].try_into().unwrap());
        let flow = u32::from_be_bytes(head[4..8].try_into().unwrap());
        let size = u64::from_be_bytes(head[8..16].try_into().unwrap());
        let stat = reg.lookup(run, flow);
        let mut buf = vec![0u8; 128 * 1024];
        let mut got = 0u64;
        while got < size {
            let want = ((size - got) as usize).min(buf.len());
            match c.read(&mut buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    got += n as u64;
                    reg.delivered.fetch_add(n as u64, Ordering::Relaxed);
                    if let Some(s) = &stat {
                        s.received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
        }
        if got == size
            && let Some(s) = &stat
        {
            s.end_ns.store(now_ns().max(1), Ordering::Relaxed);
        }
    }
    reg.untrack(fd);
    // Reset instead of FIN: no TIME_WAIT for the 4-tuple.
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid fd and option.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            size_of::<libc::linger>() as u32,
        )
    };
}

/// A connected TCP socket from `src` (fixed port) to `dst`, optionally paced.
fn connect(src: SocketAddrV4, dst: SocketAddrV4, pacing_bps: Option<u64>) -> Result<TcpStream> {
    // SAFETY: plain socket calls on a fresh fd, checked; the fd is owned by the TcpStream
    // (or closed) before returning.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            4,
        );
        if let Some(bps) = pacing_bps {
            let rate: u64 = bps / 8;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_MAX_PACING_RATE,
                (&raw const rate).cast(),
                8,
            );
        }
        let sa = |a: SocketAddrV4| libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let s = sa(src);
        if libc::bind(
            fd,
            (&raw const s).cast(),
            size_of::<libc::sockaddr_in>() as u32,
        ) != 0
        {
            bail!("bind {src}: {}", std::io::Error::last_os_error());
        }
        let d = sa(dst);
        if libc::connect(
            fd,
            (&raw const d).cast(),
            size_of::<libc::sockaddr_in>() as u32,
        ) != 0
        {
            bail!(
                "connect {src} -> {dst}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(stream)
    }
}

/// One flow to start.
#[derive(Clone, Copy, Debug)]
pub struct FlowSpec {
    /// Run number (part of the header).
    pub run: u32,
    /// Flow id.
    pub flow: u32,
    /// Source port.
    pub sport: u16,
    /// Payload octets.
    pub size: u64,
    /// Pacing rate (bit/s), none for unpaced.
    pub pacing_bps: Option<u64>,
}

/// Starts a sender thread in namespace `ns`; the flow's stat is registered first.
pub fn spawn_flow(
    ns: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    f: FlowSpec,
    reg: &Arc<Registry>,
) -> std::thread::JoinHandle<()> {
    let stat = reg.add(f.run, f.flow, f.size);
    let reg = reg.clone();
    let ns = ns.to_string();
    std::thread::spawn(move || {
        if enter_netns(&ns).is_err() {
            return;
        }
        stat.start_ns.store(now_ns().max(1), Ordering::Relaxed);
        let mut tries = 0;
        let mut s = loop {
            match connect(
                SocketAddrV4::new(src, f.sport),
                SocketAddrV4::new(dst, PORT),
                f.pacing_bps,
            ) {
                Ok(s) => break s,
                Err(_) if tries < 20 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => return,
            }
        };
        let fd = s.as_raw_fd();
        reg.track(fd);
        let mut head = [0u8; 16];
        head[0..4].copy_from_slice(&f.run.to_be_bytes());
        head[4..8].copy_from_slice(&f.flow.to_be_bytes());
        head[8..16].copy_from_slice(&f.size.to_be_bytes());
        let chunk = vec![0x5au8; 64 * 1024];
        let mut ok = s.write_all(&head).is_ok();
        let mut left = f.size;
        while ok && left > 0 {
            let n = (left as usize).min(chunk.len());
            ok = s.write_all(&chunk[..n]).is_ok();
            left -= n as u64;
        }
        // Wait for the receiver's reset (or EOF): the flow is over.
        let mut b = [0u8; 64];
        if ok {
            while let Ok(n) = s.read(&mut b) {
                if n == 0 {
                    break;
                }
            }
        }
        reg.untrack(fd);
    })
}
