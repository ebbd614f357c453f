//! The XDP receiver under BPF_PROG_TEST_RUN, with its maps pinned in a private folder that
//! is removed afterwards.

use std::path::PathBuf;

use anyhow::{Context, Result};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use lq_common::maps::{COUNTER_COUNT, XDP_PROGRAM};
use lq_user::path_table::{ReceiverSettings, TableReader, XdpReceiver};

/// XDP_DROP.
pub const XDP_DROP: u32 = 1;
/// XDP_PASS.
pub const XDP_PASS: u32 = 2;

/// A loaded, unattached receiver for TestRun.
pub struct TestReceiver {
    /// The receiver.
    pub receiver: XdpReceiver,
    /// Its reader.
    pub reader: TableReader,
    pin_dir: PathBuf,
}

impl TestReceiver {
    /// Loads the receiver with `settings` into a fresh pin folder.
    pub fn load(settings: &ReceiverSettings) -> Result<Self> {
        crate::require_root();
        let pin_dir = PathBuf::from("/sys/fs/bpf").join(crate::unique_name("lq-test"));
        let receiver = match XdpReceiver::load(&pin_dir, settings) {
            Ok(r) => r,
            Err(e) => {
                // Load may fail after the pin folder was made: leave nothing behind.
                let _ = std::fs::remove_dir_all(&pin_dir);
                return Err(anyhow::Error::new(e).context("load receiver"));
            }
        };
        let reader = receiver.reader()?;
        Ok(Self {
            receiver,
            reader,
            pin_dir,
        })
    }

    /// Runs one frame; returns the XDP verdict.
    pub fn run(&mut self, frame: &[u8]) -> Result<u32> {
        self.run_repeat(frame, 1).map(|(v, _)| v)
    }

    /// Runs one frame `repeat` times; returns the verdict and the mean duration in ns.
    pub fn run_repeat(&mut self, frame: &[u8], repeat: u32) -> Result<(u32, f64)> {
        let prog: &mut Xdp = self
            .receiver
            .ebpf_mut()
            .program_mut(XDP_PROGRAM)
            .context("program")?
            .try_into()?;
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.repeat = repeat;
        let r = prog.test_run(opts).context("BPF_PROG_TEST_RUN")?;
        Ok((r.return_value, r.duration.as_nanos() as f64))
    }

    /// Counters summed over CPUs.
    pub fn counters(&self) -> Result<[u64; COUNTER_COUNT as usize]> {
        Ok(self.reader.counters()?)
    }
}

impl Drop for TestReceiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// Default test settings: port 52525, unqualified, a one-hour dead interval (so time never
/// resynchronises a neighbor unless a test wants it to).
pub fn settings() -> ReceiverSettings {
    ReceiverSettings {
        udp_port: lq_common::wire::DEFAULT_PORT,
        as_qualified: false,
        as_plan: Vec::new(),
        dead_interval_ns: 3_600_000_000_000,
        pass_through: false,
    }
}
