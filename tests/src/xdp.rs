//! The XDP receiver under BPF_PROG_TEST_RUN, with its maps pinned in a private folder that
//! is removed afterwards.

use std::path::PathBuf;

use anyhow::{Context, Result};
use aya::programs::{TestRun, TestRunOptions, Xdp};
use lq_common::maps::{
    COUNTER_COUNT, PATH_INDEX_CAPACITY, PATH_SLOT_PROBES, PATH_TABLE_CAPACITY, PathKey, PathSlot,
    PathValue, XDP_BASELINE_PROGRAM, XDP_PROGRAM, path_index_at,
};
use lq_user::sys::bpf::path_table::{ReceiverSettings, TableReader, XdpReceiver, change_event};

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
    /// Whether dropping this removes the pin folder (not for [`Self::another_instance`]).
    owns_pins: bool,
}

/// The most instructions the kernel's verifier may walk to load the receiver: a quarter of
/// its 1 000 000, so that a change approaching the limit, or a kernel's drift (a third
/// between two 6.18 builds), fails long before the kernel would. `verifier_budget.rs`
/// asserts it and `bench xdp` states it as `xdp_verified_instructions`'s goal.
pub const VERIFIED_INSTRUCTIONS_BUDGET: u32 = 250_000;

impl TestReceiver {
    /// Loads the receiver with `settings` into a fresh pin folder.
    pub fn load(settings: &ReceiverSettings) -> Result<Self> {
        crate::require_root();
        // BPF_PROG_TEST_RUN runs the program on the calling thread's CPU, and the receiver
        // claims rows from a block per CPU: held on one CPU, the rows follow one another
        // as in the reference model ([`SlotTable`]).
        // SAFETY: no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        crate::bench::pin_to_cpu(0, usize::try_from(cpu).unwrap_or(0));
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
            owns_pins: true,
        })
    }

    /// `lq_baseline_pass`, the empty XDP program of the receiver's object (the loader
    /// loads only the receiver), loaded on first use: the baseline of the benchmarks.
    pub fn baseline(&mut self) -> Result<&mut Xdp> {
        let prog: &mut Xdp = self
            .receiver
            .ebpf_mut()
            .program_mut(XDP_BASELINE_PROGRAM)
            .context("baseline program missing from the object")?
            .try_into()?;
        if prog.fd().is_err() {
            prog.load().context("load lq_baseline_pass")?;
        }
        Ok(prog)
    }

    /// The instructions the kernel's verifier walked to load the receiver (its budget is
    /// 1 000 000; `verifier_budget.rs` fails at [`VERIFIED_INSTRUCTIONS_BUDGET`]) and the
    /// program's size as translated, in octets.
    pub fn verifier_cost(&mut self) -> Result<(u32, u32)> {
        let prog: &mut Xdp = self
            .receiver
            .ebpf_mut()
            .program_mut(XDP_PROGRAM)
            .context("receiver program missing from the object")?
            .try_into()?;
        let info = prog.info().context("read the receiver's program info")?;
        Ok((
            info.verified_instruction_count()
                .context("the kernel reports no verified instruction count")?,
            info.size_translated().unwrap_or(0),
        ))
    }

    /// A second instance of the receiver on the same pinned maps (one path table), to run
    /// on another CPU at the same time (BPF_PROG_TEST_RUN runs the program on the calling
    /// thread's CPU). It leaves the pin folder to `self`.
    pub fn another_instance(&self, settings: &ReceiverSettings) -> Result<Self> {
        let receiver = XdpReceiver::load(&self.pin_dir, settings).context("load receiver")?;
        let reader = receiver.reader()?;
        Ok(Self {
            receiver,
            reader,
            pin_dir: self.pin_dir.clone(),
            owns_pins: false,
        })
    }

    /// Loads the receiver again on the same pin folder, as a restarted lqd does: the
    /// pinned maps it finds compatible are kept.
    pub fn reload(&mut self, settings: &ReceiverSettings) -> Result<()> {
        self.receiver = XdpReceiver::load(&self.pin_dir, settings).context("reload receiver")?;
        self.reader = self.receiver.reader()?;
        Ok(())
    }

    /// The pin folder.
    pub fn pin_dir(&self) -> &std::path::Path {
        &self.pin_dir
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
        if self.owns_pins {
            let _ = std::fs::remove_dir_all(&self.pin_dir);
        }
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

/// The reference model of the XDP receiver's path table (`LQ_PATHS` and its key index
/// `LQ_PATH_INDEX`): the same rows claimed in the same order, the same index function and
/// probing (`lq_common::maps::path_index_at`), so its contents, placement and
/// `table_full` refusals are the kernel's exactly on one CPU (whose blocks of reserved rows
/// follow one another; the receiver's guess of the next row only finds faster what the
/// index finds).
pub struct SlotTable {
    /// The rows, indexed like the kernel's array.
    pub slots: Vec<PathSlot>,
    /// The key index: row + 1, 0 when free.
    pub index: Vec<u64>,
    /// Rows in use (claimed).
    pub used: usize,
}

impl Default for SlotTable {
    fn default() -> Self {
        Self {
            slots: vec![PathSlot::default(); PATH_TABLE_CAPACITY as usize],
            index: vec![0; PATH_INDEX_CAPACITY as usize],
            used: 0,
        }
    }
}

/// Where a key is or would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotLookup {
    /// The key is in this row.
    Found(usize),
    /// The key is absent; this is the first free cell of its probe sequence in the index.
    Free(usize),
    /// The key is absent and every cell of its probe sequence leads to another key.
    Full,
}

impl SlotTable {
    /// The receiver's probe of the index: the row holding `key`, else its first free cell.
    pub fn lookup(&self, key: &PathKey) -> SlotLookup {
        for probe in 0..PATH_SLOT_PROBES {
            let cell = path_index_at(key, probe) as usize;
            let held = self.index[cell];
            if held == 0 {
                return SlotLookup::Free(cell);
            }
            let row = (held - 1) as usize;
            if self.slots[row].key == *key {
                return SlotLookup::Found(row);
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

    /// Writes `key` as the receiver does: the row it went to, or `None` (table full: the
    /// probe run leads to other keys only, or no row is left).
    pub fn set(&mut self, key: PathKey, value: PathValue) -> Option<usize> {
        let i = match self.lookup(&key) {
            SlotLookup::Found(i) => i,
            SlotLookup::Free(cell) => {
                if self.used >= self.slots.len() {
                    return None;
                }
                let row = self.used;
                self.used += 1;
                self.index[cell] = row as u64 + 1;
                row
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

/// Every event a ring holds, read as lqd reads them ([`change_event`]: a record of any
/// other size is a failure here, where lqd would count it lost).
pub fn ring_events(
    ring: &mut aya::maps::RingBuf<aya::maps::MapData>,
) -> Vec<lq_common::maps::PathEvent> {
    let mut got = Vec::new();
    while let Some(item) = ring.next() {
        let record: &[u8] = &item;
        got.push(change_event(record).unwrap_or_else(|| {
            panic!(
                "a ring record of {} octets, not one PathEvent ({})",
                record.len(),
                size_of::<lq_common::maps::PathEvent>()
            )
        }));
    }
    got
}
