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

use crate::netns::NetNs;

/// The `lqd` binary next to the test executable (target/debug/lqd), built on demand.
pub fn lqd_bin() -> Result<PathBuf> {
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
    if !bin.exists() {
        let profile = dir.file_name().and_then(|s| s.to_str()).unwrap_or("debug");
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "lq-user", "--bin", "lqd"]);
        if profile == "release" {
            c.arg("--release");
        }
        let st = c.status().context("cargo build lqd")?;
        if !st.success() {
            bail!("building lqd failed");
        }
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
}

impl Lqd {
    /// Starts `lqd run --config CONFIG --instance NAME` inside `ns`, with debug logs to a
    /// file, and waits until its control socket answers.
    pub fn start(ns: &NetNs, config_text: &str) -> Result<Self> {
        let instance = crate::unique_name("lqt");
        let dir = std::env::temp_dir().join(&instance);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("lqd.toml");
        std::fs::write(&config, config_text)?;
        let log = dir.join("lqd.log");
        let child = Command::new(lqd_bin()?)
            .args(["--log-level", "lq_user=debug,info", "run", "--config"])
            .arg(&config)
            .args(["--instance", &instance, "--netns", ns.name()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("spawn lqd")?;
        let mut me = Self {
            child: Some(child),
            instance,
            log,
        };
        let socket = PathBuf::from(format!("/run/lq/{}.sock", me.instance));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if let Some(st) = me.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("lqd exited ({st}):\n{}", me.log_text());
            }
            if Instant::now() > deadline {
                bail!("lqd did not open its control socket:\n{}", me.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
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

impl Drop for Lqd {
    fn drop(&mut self) {
        self.terminate();
        let _ = std::fs::remove_dir_all(self.pin_dir());
        let _ = std::fs::remove_file(format!("/run/lq/{}.sock", self.instance));
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
}
