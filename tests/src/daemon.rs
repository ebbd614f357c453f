//! Running the real `lqd` binary inside a test namespace, and a real UDP advertisement
//! sender (TTL 255) for it.

use std::{
    net::{SocketAddr, UdpSocket},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use lq_common::wire::{Entry, Header};

use crate::{netns::NetNs, poll::poll_until};

/// The `lqd` binary next to the test executable (target/debug/lqd), brought up to date once
/// per test process (`cargo test -p lq-tests` builds lq-user's library but not its binary,
/// and a test must never run a stale daemon against new test code), or the one
/// `LQ_TEST_LQD` names (to run a test against another build, e.g. an older commit's, and
/// check that it fails there).
pub fn lqd_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LQ_TEST_LQD") {
        return Ok(PathBuf::from(p));
    }
    static BUILT: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
        std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| build_lqd().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_lqd() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // Test executables live in target/<profile>/deps, binaries (benchmarks) in
    // target/<profile>.
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.file_name().is_some_and(|n| n == "deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .context("target dir")?;
    let bin = dir.join("lqd");
    let profile = dir.file_name().and_then(|s| s.to_str()).unwrap_or("debug");
    // Cargo's own freshness check: a no-op when lqd is current.
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "-q", "-p", "lq-user", "--bin", "lqd"]);
    if profile == "release" {
        c.arg("--release");
    }
    let st = c.status().context("cargo build lqd")?;
    if !st.success() {
        bail!("building lqd failed");
    }
    Ok(bin)
}

/// A running `lqd` in a namespace; SIGTERM and wait on drop, its pins removed.
pub struct Lqd {
    child: Option<Child>,
    /// Instance name.
    pub instance: String,
    /// Its log file.
    pub log: PathBuf,
    netns: String,
    dir: PathBuf,
    /// `--log-level`.
    log_level: &'static str,
}

impl Lqd {
    /// Starts `lqd run --config CONFIG --instance NAME` inside `ns`, with debug logs to a
    /// file, and waits until its control socket answers.
    pub fn start(ns: &NetNs, config_text: &str) -> Result<Self> {
        Self::start_logging(ns, config_text, "lq_user=debug,info")
    }

    /// [`Self::start`] with `--log-level LEVEL` (a benchmark measures lqd at the
    /// operator's default, `info`, not with debug logs).
    pub fn start_logging(ns: &NetNs, config_text: &str, log_level: &'static str) -> Result<Self> {
        let instance = crate::unique_name("lqt");
        let dir = std::env::temp_dir().join(&instance);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("lqd.toml"), config_text)?;
        let mut me = Self {
            child: None,
            instance,
            log: dir.join("lqd.log"),
            netns: ns.name().to_string(),
            dir,
            log_level,
        };
        me.spawn()?;
        Ok(me)
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(format!("/run/lq/{}.sock", self.instance))
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("lqd.toml")
    }

    fn spawn(&mut self) -> Result<()> {
        let socket = PathBuf::from(format!("/run/lq/{}.sock", self.instance));
        let _ = std::fs::remove_file(&socket);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(lqd_bin()?)
            .args(["--log-level", self.log_level, "run", "--config"])
            .arg(self.config_path())
            .args(["--instance", &self.instance, "--netns", &self.netns])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawn lqd")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("lqd exited ({st}):\n{}", self.log_text());
            }
            if Instant::now() > deadline {
                bail!("lqd did not open its control socket:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts the same instance again (same config, pins and name) after a stop or crash.
    pub fn restart(&mut self) -> Result<()> {
        self.terminate();
        self.spawn()
    }

    /// Sends a signal (e.g. SIGHUP).
    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill on our own child's pid.
            unsafe { libc::kill(pid as i32, sig) };
        }
    }

    /// Writes `config_text` to the config file, sends SIGHUP and waits (up to 5 s) until
    /// the log says `outcome` ("configuration reloaded", "reload refused") more often than
    /// before.
    pub fn reload(&self, config_text: &str, outcome: &str) -> Result<()> {
        let before = self.log_text().matches(outcome).count();
        std::fs::write(self.config_path(), config_text)?;
        self.signal(libc::SIGHUP);
        poll_until(
            &format!("another {outcome:?} in the log after SIGHUP"),
            Duration::from_secs(5),
            Duration::from_millis(10),
            || {
                let log = self.log_text();
                if log.matches(outcome).count() > before {
                    Ok(())
                } else {
                    Err(log)
                }
            },
            |log| format!("\n{log}"),
        )
    }

    /// The daemon's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Every thread of the daemon, the main one included: its name, effective
    /// capabilities (`CapEff`) and scheduling policy (field 41 of its `stat`: 0 normal, 2
    /// SCHED_RR), from `/proc`.
    pub fn threads(&self) -> Vec<ThreadState> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| {
                let dir = t.path();
                let status = std::fs::read_to_string(dir.join("status")).ok()?;
                let field = |k: &str| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix(k))
                        .map(|v| v.trim().to_string())
                };
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // Fields after the parenthesised name, which may hold spaces: state is 3.
                let after = &stat[stat.rfind(')')? + 2..];
                let policy = after.split(' ').nth(41 - 3)?.parse().ok()?;
                Some(ThreadState {
                    name: field("Name:")?,
                    cap_eff: u64::from_str_radix(&field("CapEff:")?, 16).ok()?,
                    policy,
                })
            })
            .collect()
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `lqd show WHAT --json --instance NAME` and parses the output.
    pub fn show(&self, what: &str) -> Result<serde_json::Value> {
        let out = Command::new(lqd_bin()?)
            .args(["show", what, "--json", "--instance", &self.instance])
            .output()?;
        if !out.status.success() {
            bail!("lqd show {what}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// The pin folder.
    pub fn pin_dir(&self) -> PathBuf {
        PathBuf::from("/sys/fs/bpf/lq").join(&self.instance)
    }

    /// Sends SIGKILL (a crash) and waits.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Removes an instance's pinned maps (its receiver's and its PFC counter's folders) and the
/// pin root when that leaves it empty: lqd keeps its pins on exit on purpose (a restart
/// keeps the path table; the PFC maps are for other readers), a test must not leave them
/// behind.
pub fn remove_pins(instance: &str) {
    let root = std::path::Path::new("/sys/fs/bpf/lq");
    let _ = std::fs::remove_dir_all(root.join(instance));
    let _ = std::fs::remove_dir_all(root.join(format!("{instance}-pfc")));
    // Fails while another instance's folder is there, which is what we want.
    let _ = std::fs::remove_dir(root);
}

impl Drop for Lqd {
    fn drop(&mut self) {
        self.terminate();
        remove_pins(&self.instance);
        let _ = std::fs::remove_file(format!("/run/lq/{}.sock", self.instance));
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A UDP socket that sends LQ advertisements with TTL 255 from `local` (inside the
/// namespace whose thread created it).
pub struct Sender {
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl Sender {
    /// Binds to `local` and sets TTL 255 (GTSM, seed 003 section 7.3).
    pub fn bind(local: SocketAddr, ttl: u32) -> Result<Self> {
        let socket = UdpSocket::bind(local).with_context(|| format!("bind {local}"))?;
        socket.set_ttl(ttl)?;
        Ok(Self {
            socket,
            buf: vec![0; lq_common::wire::MAX_PAYLOAD_LEN],
        })
    }

    /// Sends one advertisement to `to`.
    pub fn send(&mut self, to: SocketAddr, header: &Header, entries: &[Entry]) -> Result<()> {
        let n = lq_common::wire::encode(header, entries, &mut self.buf)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        self.socket.send_to(&self.buf[..n], to)?;
        Ok(())
    }

    /// Sends one advertisement to `to` with the authentication trailer (docs/wire.md),
    /// signed with `key` and the trailer's 64-bit `sequence`, as a helper with `[helper]
    /// key-chain` sends it.
    pub fn send_signed(
        &mut self,
        to: SocketAddr,
        header: &Header,
        entries: &[Entry],
        key: &lq_user::core::auth::Key,
        sequence: u64,
    ) -> Result<()> {
        if self.buf.len() < lq_common::auth::MAX_DATAGRAM_LEN {
            self.buf.resize(lq_common::auth::MAX_DATAGRAM_LEN, 0);
        }
        let body = lq_common::wire::encode(header, entries, &mut self.buf)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let endpoints = lq_user::core::auth::Endpoints {
            source: self.socket.local_addr()?,
            destination: to,
        };
        let n = lq_user::core::auth::sign(&mut self.buf, body, key, sequence, &endpoints)?;
        self.socket.send_to(&self.buf[..n], to)?;
        Ok(())
    }
}

/// A key for [`Sender::send_signed`] and the key-chain file (mode 0600, in `dir`) that
/// gives lqd the same key: key id 1, HMAC-SHA-256, valid always.
pub fn test_key(
    dir: &std::path::Path,
    secret: &str,
) -> Result<(lq_user::core::auth::Key, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("key-chain.toml");
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        &path,
        format!(
            "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"{secret}\"\n"
        ),
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let key = lq_user::core::auth::Key {
        id: 1,
        algorithm: lq_common::auth::Algorithm::HmacSha256,
        secret: lq_user::core::auth::Secret::new(secret.as_bytes().to_vec()),
        send: lq_user::core::auth::Lifetime::ALWAYS,
        accept: lq_user::core::auth::Lifetime::ALWAYS,
    };
    Ok((key, path))
}

/// The group of `prefix` in `lqd show weights --json` (one group per remote node, seed 003
/// section 6.1; each lists its destinations under `prefixes`).
pub fn weights_group<'a>(
    weights: &'a serde_json::Value,
    prefix: &str,
) -> Option<&'a serde_json::Value> {
    weights["groups"].as_array()?.iter().find(|g| {
        g["prefixes"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p == prefix))
    })
}

/// Turns on SO_TIMESTAMPNS for [`recv_stamped`].
pub fn enable_receive_timestamps(sock: &UdpSocket) -> Result<()> {
    nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
        .context("SO_TIMESTAMPNS")
}

/// Receives one datagram into `buf` with the kernel's receive timestamp (SO_TIMESTAMPNS,
/// see [`enable_receive_timestamps`]: when the stack took the datagram in, before any
/// thread woke; CLOCK_REALTIME ns). `None` on a timeout, an error or no timestamp.
pub fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> Option<(usize, u64)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::AsRawFd as _;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .ok()?;
    let stamp = msg.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmTimestampns(t) => u64::try_from(t.tv_sec())
            .ok()?
            .checked_mul(1_000_000_000)?
            .checked_add(u64::try_from(t.tv_nsec()).ok()?),
        _ => None,
    })?;
    Some((msg.bytes, stamp))
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC in ns, read back to back: converts the receive
/// timestamps of [`recv_stamped`] to the monotonic clock the benchmarks use.
pub fn real_minus_mono_ns() -> i128 {
    let read = |c| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime fills the timespec it is given.
        unsafe { libc::clock_gettime(c, &mut t) };
        i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
    };
    let m0 = read(libc::CLOCK_MONOTONIC);
    let r = read(libc::CLOCK_REALTIME);
    let m1 = read(libc::CLOCK_MONOTONIC);
    r - (m0 + m1) / 2
}

/// One thread of a running daemon ([`Lqd::threads`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadState {
    /// Its name (`comm`, at most 15 octets).
    pub name: String,
    /// Its effective capabilities.
    pub cap_eff: u64,
    /// Its scheduling policy (`SCHED_*`).
    pub policy: u32,
}
