//! Network namespaces that delete themselves (aya's `NetNsGuard` idea): every test builds
//! its own topology inside namespaces it created, and dropping the guard removes them and
//! every veth inside, even when the test panics.

use std::{
    fs::File,
    os::fd::AsRawFd,
    process::{Command, Output},
};

use anyhow::{Context, Result, bail};

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates a namespace named `<prefix>-<pid>-<n>` with its loopback up.
    pub fn new(prefix: &str) -> Result<Self> {
        let name = crate::unique_name(prefix);
        run("ip", &["netns", "add", &name])?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <ns> ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs a command inside the namespace (`ip netns exec`).
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut full = vec!["netns", "exec", &self.name, program];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `f` on a thread that has entered this namespace (sockets created there live in
    /// it). The calling thread's namespace is never changed.
    pub fn run_in<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let name = self.name.clone();
        let handle = std::thread::spawn(move || -> Result<T> {
            enter_netns(&name)?;
            Ok(f())
        });
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("thread in {} panicked", self.name))?
    }
}

impl NetNs {
    /// Starts tshark writing what `iface` receives and sends, as the capture filter
    /// `filter` selects, to the file `pcap`, and returns once it captures: dumpcap writes
    /// the file's header only after it has opened the interface, so the header's presence
    /// says the capture runs (a fixed wait was too short on a loaded machine, and a capture
    /// that starts late misses the first datagrams). Kill the child to stop it.
    pub fn capture(
        &self,
        iface: &str,
        filter: &str,
        pcap: &std::path::Path,
    ) -> Result<std::process::Child> {
        self.capture_with(iface, filter, pcap, &[])
    }

    /// [`Self::capture`] that stops by itself once `count` packets are written: wait for the
    /// child. A capture stopped by a signal to tshark can end without the packets its
    /// dumpcap had not written yet (a CI run read a capture of seconds of datagrams that
    /// held none); one that reaches its count closes the file itself.
    pub fn capture_packets(
        &self,
        iface: &str,
        filter: &str,
        pcap: &std::path::Path,
        count: u32,
    ) -> Result<std::process::Child> {
        self.capture_with(iface, filter, pcap, &["-c", &count.to_string()])
    }

    fn capture_with(
        &self,
        iface: &str,
        filter: &str,
        pcap: &std::path::Path,
        extra: &[&str],
    ) -> Result<std::process::Child> {
        let mut child = self
            .command("tshark")
            .args(["-q", "-i", iface, "-f", filter])
            .args(extra)
            .arg("-w")
            .arg(pcap)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("start tshark (installed by `cargo xtask setup`)")?;
        // A pcapng section header block and an interface description block: >= 48 octets.
        const HEADER_LEN: u64 = 48;
        let start = std::time::Instant::now();
        loop {
            if std::fs::metadata(pcap).is_ok_and(|m| m.len() >= HEADER_LEN) {
                break;
            }
            if let Some(status) = child.try_wait()? {
                anyhow::bail!("tshark on {iface} in {} exited: {status}", self.name);
            }
            if start.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!(
                    "tshark on {iface} in {} wrote no capture header in 20 s",
                    self.name
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The header is written just after the interface opened: a margin for the filter.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Ok(child)
    }

    /// Overloads a link from inside this namespace until `stop` is set: eight non-blocking
    /// UDP sockets bound to `from` send 1 400-octet datagrams to `to` as fast as they can,
    /// so their send buffers together exceed a shaping qdisc's limit, its queue fills and
    /// it drops (Appendix A: U -> 1, D -> 1, X active).
    pub fn udp_flood(
        &self,
        from: std::net::Ipv4Addr,
        to: std::net::SocketAddr,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<Result<()>> {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = File::open(&path).with_context(|| format!("open {path}"))?;
            // SAFETY: setns on a valid namespace fd affects only this new thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                bail!("setns {path}: {}", std::io::Error::last_os_error());
            }
            let socks = (0..8)
                .map(|_| {
                    let s = std::net::UdpSocket::bind((from, 0))?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                })
                .collect::<std::io::Result<Vec<_>>>()
                .context("bind the flood sockets")?;
            let buf = [0u8; 1400];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &socks {
                    // A full send buffer (EAGAIN) is the point: keep offering.
                    let _ = s.send_to(&buf, to);
                }
            }
            Ok(())
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Kill anything still running inside, then delete the namespace (its veths go too).
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Moves the calling thread (only it: setns acts per thread) into the named network
/// namespace, so that the sockets it opens live there. Call it on a thread of its own.
pub fn enter_netns(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).with_context(|| format!("open {path}"))?;
    // SAFETY: setns on a valid namespace descriptor affects only the calling thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {path}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// UDP datagrams of 1 400 octets sent as fast as eight non-blocking sockets take them, from
/// `from` to `to` inside a namespace, until dropped: their send buffers together exceed a
/// tbf qdisc's limit, so its queue fills and it drops (Appendix A: U -> 1, D high, drops).
pub struct UdpOverload {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl UdpOverload {
    /// Starts the load in `ns` (a thread of its own enters it).
    pub fn start(ns: &NetNs, from: std::net::SocketAddr, to: std::net::SocketAddr) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (name, st) = (ns.name().to_string(), stop.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            enter_netns(&name)?;
            let socks = (0..8)
                .map(|_| {
                    let s = std::net::UdpSocket::bind(from)?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                })
                .collect::<Result<Vec<_>>>()?;
            let buf = [0u8; 1400];
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &socks {
                    let _ = s.send_to(&buf, to);
                }
            }
            Ok(())
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the load and waits for its thread; its set-up error, if it had one.
    pub fn stop(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the load thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for UdpOverload {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Creates a veth pair with one end in each namespace, addresses them and brings them up.
pub fn veth_pair(
    a: &NetNs,
    a_if: &str,
    a_addr: &str,
    b: &NetNs,
    b_if: &str,
    b_addr: &str,
) -> Result<()> {
    a.ip(&[
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ])?;
    a.ip(&["addr", "add", a_addr, "dev", a_if])?;
    b.ip(&["addr", "add", b_addr, "dev", b_if])?;
    a.ip(&["link", "set", a_if, "up"])?;
    b.ip(&["link", "set", b_if, "up"])?;
    Ok(())
}

/// The one-leaf layout of the load-balancer benchmarks and tests: four veth links, `s1` ..
/// `s4` (10.1.k.1/24) in `spines` to `up1` .. `up4` (10.1.k.2/24) in `leaf`.
pub fn four_uplinks(spines: &NetNs, leaf: &NetNs) -> Result<()> {
    for k in 1..=4 {
        veth_pair(
            spines,
            &format!("s{k}"),
            &format!("10.1.{k}.1/24"),
            leaf,
            &format!("up{k}"),
            &format!("10.1.{k}.2/24"),
        )?;
    }
    Ok(())
}

/// Runs a command and returns its stdout; a non-zero exit is an error with stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out: Output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("spawn {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
