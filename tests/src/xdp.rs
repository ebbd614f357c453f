//! The XDP receiver under BPF_PROG_TEST_RUN, with its maps pinned in a private folder that
//! is removed afterwards.

use std::path::PathBuf;

use anyhow::{Context, Result};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use lq_common::maps::{
    COUNTER_COUNT, PATH_SLOT_PROBES, PATH_TABLE_CAPACITY, PathKey, PathSlot, PathValue,
    XDP_PROGRAM, path_slot_index,
};
use lq_user::sys::bpf::path_table::{ReceiverSettings, TableReader, XdpReceiver};

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

/// The reference model of the XDP receiver's path table (`LQ_PATHS`): the same array of
/// slots, the same slot function and probing (`lq_common::maps::path_slot_index`), so its
/// contents, placement and `table_full` refusals are the kernel's exactly.
pub struct SlotTable {
    /// The slots, indexed like the kernel's array.
    pub slots: Vec<PathSlot>,
    /// Slots in use.
    pub used: usize,
}

impl Default for SlotTable {
    fn default() -> Self {
        Self {
            slots: vec![PathSlot::default(); PATH_TABLE_CAPACITY as usize],
            used: 0,
        }
    }
}

/// Where a key is or would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotLookup {
    /// The key is in this slot.
    Found(usize),
    /// The key is absent; this is the first free slot of its probe sequence.
    Free(usize),
    /// The key is absent and every slot of its probe sequence is used.
    Full,
}

impl SlotTable {
    /// The receiver's probe: the first slot holding `key`, else the first free one.
    pub fn lookup(&self, key: &PathKey) -> SlotLookup {
        for probe in 0..PATH_SLOT_PROBES {
            let i = path_slot_index(key, probe) as usize;
            let s = &self.slots[i];
            if s.used == 0 {
                return SlotLookup::Free(i);
            }
            if s.key == *key {
                return SlotLookup::Found(i);
            }
        }
        SlotLookup::Full
    }

    /// The value of `key`.
    pub fn get(&self, key: &PathKey) -> Option<PathValue> {
        match self.lookup(key) {
            SlotLookup::Found(i) => Some(self.slots[i].value),
            _ => None,
        }
    }

    /// Writes `key` as the receiver does: the slot it went to, or `None` (table full).
    pub fn set(&mut self, key: PathKey, value: PathValue) -> Option<usize> {
        let i = match self.lookup(&key) {
            SlotLookup::Found(i) => i,
            SlotLookup::Free(i) => {
                self.used += 1;
                i
            }
            SlotLookup::Full => return None,
        };
        self.slots[i] = PathSlot {
            key,
            used: 1,
            value,
        };
        Some(i)
    }

    /// Every entry, sorted by key.
    pub fn entries(&self) -> std::collections::BTreeMap<PathKey, PathValue> {
        self.slots
            .iter()
            .filter(|s| s.used != 0)
            .map(|s| (s.key, s.value))
            .collect()
    }
}
