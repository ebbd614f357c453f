//! PFC telemetry in `lqd`: the tc PFC counter's loader and reader ([`PfcCounter`],
//! [`PfcReader`]), the counter model that turns raw sources into exportable totals
//! ([`crate::core::pfc::counter`]), and the transmit-side sources that confirm emission
//! ([`crate::sys::ethtool`]).
//!
//! Received counts come from `lq_pfc_ingress` (tc ingress, tcx; clsact on kernels before
//! 6.6), whose maps are pinned under the instance folder so that other readers (`lqd show
//! pfc`, the helper's pause time, a veth peer's transmit side) find them. The program's
//! tcx links are pinned there too ([`super::tc_pinned`]), so counting goes on while lqd is
//! stopped or restarted, and a start adopts program, links and maps: the totals then
//! include the frames of the gap, in the same counter epoch. An interface's counters
//! start again at zero in a new epoch only when counting really stopped there (seed 000
//! section 6: the source counts every qualifying frame, and a reset starts a new epoch at
//! zero): no link counted on it (first start, the interface was recreated, the link was
//! detached, `lqd cleanup`), or the clsact fallback (no tcx), which detaches at exit. The
//! epoch is kept per interface in its [`PfcIfConfig`].
//! Transmitted counts come only from sources that confirm the frame left on the link:
//! NIC ethtool counters mapped by configuration, or, for a veth, the peer's receive count.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{HashMap, Map, MapData, PerCpuArray, PerCpuHashMap, PerCpuValues},
    programs::{SchedClassifier, TcAttachType},
};
use lq_common::maps::COUNTER_META_MAP;
use lq_common::pfc::{
    PFC_IF_CONFIG_MAP, PFC_IF_CONFIGURED, PFC_PAUSE_MAP, PFC_PRIORITIES, PFC_PROGRAM,
    PFC_REJECT_COUNT, PFC_REJECT_MAP, PFC_RX_COUNTER_MAP, PfcIfConfig, PfcKey, PfcPause, PfcReject,
};

use crate::sys::lag;
pub use crate::sys::netdev::{InterfaceInfo, driver_name, interface_info};

/// The counter's own maps, pinned under its instance folder for readers in other
/// processes and for the next start of lqd.
pub const COUNTER_MAPS: [&str; 4] = [
    PFC_RX_COUNTER_MAP,
    PFC_PAUSE_MAP,
    PFC_IF_CONFIG_MAP,
    PFC_REJECT_MAP,
];

/// Every map pinned in the folder: the counter's and its layout version.
pub const PINNED_MAPS: [&str; 5] = [
    PFC_RX_COUNTER_MAP,
    PFC_PAUSE_MAP,
    PFC_IF_CONFIG_MAP,
    PFC_REJECT_MAP,
    COUNTER_META_MAP,
];

/// Default bpffs folder of the PFC counter of one `lqd` instance.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/lq/pfc";

/// Errors of the PFC edge.
#[derive(Debug, thiserror::Error)]
pub enum PfcError {
    /// The object, its pin folder or its maps could not be set up.
    #[error(transparent)]
    Pinned(#[from] crate::sys::bpf::path_table::LoadPinnedError),
    /// A program operation failed.
    #[error(transparent)]
    Program(#[from] super::ProgramOpError),
    /// A map operation failed.
    #[error(transparent)]
    Map(#[from] super::MapOpError),
    /// The program or a map is missing from the object.
    #[error("{0} not found in the eBPF object")]
    Missing(&'static str),
    /// No pinned maps under the folder.
    #[error(
        "no pinned PFC counters at {0}: is lqd running with PFC telemetry and this pin folder?"
    )]
    NotPinned(PathBuf),
    /// An interface query failed.
    #[error("interface {iface}")]
    Interface {
        /// The interface.
        iface: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The interface delivers frames with FCS errors (`rx-all`): the counter cannot tell
    /// valid from invalid frames there, so it must not be used (seed 000 section 5).
    #[error(
        "interface {0} has rx-all on: frames with FCS errors would be counted; turn it off (`ethtool -K {0} rx-all off`)"
    )]
    RxAll(String),
    /// A bond or team device: its counter mixes the member links (seed 000).
    #[error(transparent)]
    Aggregate(#[from] lag::Aggregate),
    /// The pinned links or maps of a previous run could not be adopted.
    #[error(transparent)]
    Pins(#[from] super::tc_pinned::TcPinError),
    /// A hardware interface: its NIC consumes PFC frames before any tc hook, so the tc
    /// counter would not see every qualifying frame (seed 000 section 6: the source MUST
    /// count every one).
    #[error(
        "interface {0} is a hardware device, whose NIC consumes PFC frames before any tc hook sees them: count them with its driver's per-priority counters ([[pfc.ethtool]]), or set [pfc] tc-on-hardware = true if this NIC passes PFC frames to the kernel"
    )]
    Hardware(String),
}

pub use super::TcMode;

/// One attached interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// The interface name.
    pub iface: String,
    /// What was written to the configuration map (ifindex, MAC, speed).
    pub info: InterfaceInfo,
    /// How the program is attached.
    pub mode: TcMode,
    /// Whether counting went on from a previous run, or started here.
    pub how: super::tc_pinned::Attachment,
    /// The interface's counter epoch.
    pub epoch: u32,
}

/// The loaded tc PFC counter with its maps pinned under `pin_dir`.
pub struct PfcCounter {
    ebpf: Ebpf,
    pin_dir: PathBuf,
    attached: Vec<Attached>,
    /// Attach to hardware interfaces too ([`PfcCounter::set_tc_on_hardware`]).
    tc_on_hardware: bool,
}

impl PfcCounter {
    /// Loads the counter with the maps pinned under `pin_dir`: those a previous run left
    /// when they have this build's layout (adopted, their counts go on), new ones at zero
    /// otherwise (see the module). Does not attach.
    pub fn load(pin_dir: &Path) -> Result<Self, PfcError> {
        use super::tc_pinned::{Layout, check_layout, write_layout};
        match check_layout(pin_dir, &COUNTER_MAPS)? {
            Layout::RemovedStopped => {
                tracing::info!(pin_dir = %pin_dir.display(), "PFC counters of an earlier lqd, which stopped counting when it exited, removed: counting starts again at zero in a new counter epoch")
            }
            Layout::Same => {
                tracing::info!(pin_dir = %pin_dir.display(), "PFC counters of a previous run adopted")
            }
            Layout::Empty => {}
        }
        let mut ebpf = crate::sys::bpf::path_table::load_pinned(pin_dir, &PINNED_MAPS)?;
        write_layout(&mut ebpf)?;
        let mut this = Self {
            ebpf,
            pin_dir: pin_dir.into(),
            attached: Vec::new(),
            tc_on_hardware: false,
        };
        this.program()?
            .load()
            .map_err(super::program_err::<PfcError>("tc", "load (verifier)"))?;
        Ok(this)
    }

    /// Whether [`PfcCounter::attach`] accepts hardware interfaces (`[pfc] tc-on-hardware`:
    /// the operator knows the NIC passes PFC frames to the kernel). Off by default.
    pub fn set_tc_on_hardware(&mut self, yes: bool) {
        self.tc_on_hardware = yes;
    }

    fn program(&mut self) -> Result<&mut SchedClassifier, PfcError> {
        self.ebpf
            .program_mut(PFC_PROGRAM)
            .ok_or(PfcError::Missing(PFC_PROGRAM))?
            .try_into()
            .map_err(super::program_err::<PfcError>("tc", "type"))
    }

    /// Attaches at ingress of `iface` (in the calling thread's network namespace), or
    /// adopts the pinned link of a previous run that still counts there, and writes the
    /// interface's configuration (ifindex, MAC, link speed; `speed_mbps` overrides the
    /// speed the driver reports). Where counting did not go on without a gap, the
    /// interface's eight counters start at zero in a new epoch.
    pub fn attach(&mut self, iface: &str, speed_mbps: Option<u32>) -> Result<Attached, PfcError> {
        // Seed 000: never an aggregate LAG counter; the members are what to attach to.
        lag::refuse_aggregate(iface)?;
        let mut info = interface_info(iface).map_err(|source| PfcError::Interface {
            iface: iface.into(),
            source,
        })?;
        if crate::sys::netdev::rx_all(iface) == Some(true) {
            return Err(PfcError::RxAll(iface.into()));
        }
        if !self.tc_on_hardware && crate::sys::netdev::is_hardware(iface) == Some(true) {
            return Err(PfcError::Hardware(iface.into()));
        }
        if let Some(s) = speed_mbps {
            info.speed_mbps = s;
        }
        let previous = self.if_config(info.ifindex)?;
        let pin = super::tc_pinned::link_pin(&self.pin_dir, TcAttachType::Ingress, iface);
        let how =
            super::tc_pinned::attach_or_adopt(self.program()?, iface, TcAttachType::Ingress, &pin)?;
        let epoch = match previous {
            Some(p) if how.continued() => p.epoch,
            _ => {
                let epoch = crate::core::pfc::counter::new_epoch(
                    crate::sys::clock::unix_ms_now(),
                    previous.map(|p| p.epoch),
                );
                self.zero_counters(info.ifindex)?;
                epoch
            }
        };
        self.configure_with_epoch(&info, epoch)?;
        let mode = match how {
            super::tc_pinned::Attachment::Clsact => TcMode::Clsact,
            _ => TcMode::Tcx,
        };
        let a = Attached {
            iface: iface.into(),
            info,
            mode,
            how,
            epoch,
        };
        self.attached.push(a.clone());
        Ok(a)
    }

    /// Detaches the counter from the interfaces pinned in the folder that are not in
    /// `keep` (no longer configured), and returns them.
    pub fn release_others(&self, keep: &[&str]) -> Vec<String> {
        super::tc_pinned::release_others(&self.pin_dir, TcAttachType::Ingress, keep)
    }

    /// Removes the configuration and counters of every interface this instance has not
    /// attached (one a previous run counted on and this one no longer does), so that
    /// nothing exports them.
    pub fn forget_others(&mut self) -> Result<(), PfcError> {
        let ours: Vec<u32> = self.attached.iter().map(|a| a.info.ifindex).collect();
        let stale: Vec<u32> = self
            .if_configs()?
            .keys()
            .filter_map(Result::ok)
            .filter(|i| !ours.contains(i))
            .collect();
        for ifindex in stale {
            let _ = self.if_configs()?.remove(&ifindex);
            let mut counters = self.rx_counters()?;
            for priority in 0..PFC_PRIORITIES {
                let _ = counters.remove(&PfcKey { ifindex, priority });
            }
        }
        Ok(())
    }

    /// The per-interface configuration map of the loaded object.
    fn if_configs(&mut self) -> Result<HashMap<&mut MapData, u32, PfcIfConfig>, PfcError> {
        let map = self
            .ebpf
            .map_mut(PFC_IF_CONFIG_MAP)
            .ok_or(PfcError::Missing(PFC_IF_CONFIG_MAP))?;
        HashMap::try_from(map).map_err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP))
    }

    /// The received-frame counters of the loaded object.
    fn rx_counters(&mut self) -> Result<PerCpuHashMap<&mut MapData, PfcKey, u64>, PfcError> {
        let map = self
            .ebpf
            .map_mut(PFC_RX_COUNTER_MAP)
            .ok_or(PfcError::Missing(PFC_RX_COUNTER_MAP))?;
        PerCpuHashMap::try_from(map).map_err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP))
    }

    fn if_config(&mut self, ifindex: u32) -> Result<Option<PfcIfConfig>, PfcError> {
        match self.if_configs()?.get(&ifindex, 0) {
            Ok(c) if c.flags & PFC_IF_CONFIGURED != 0 => Ok(Some(c)),
            Ok(_) | Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP)(e)),
        }
    }

    /// Sets the eight counters of `ifindex` to zero.
    fn zero_counters(&mut self, ifindex: u32) -> Result<(), PfcError> {
        self.write_counters(ifindex, 0)
    }

    /// Writes the eight counters of `ifindex` with `flags` (0: overwrite, BPF_NOEXIST:
    /// create only where missing), at zero.
    fn write_counters(&mut self, ifindex: u32, flags: u64) -> Result<(), PfcError> {
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| PfcError::Interface {
            iface: "possible cpus".into(),
            source: e,
        })?;
        let mut counters = self.rx_counters()?;
        for priority in 0..PFC_PRIORITIES {
            let key = PfcKey { ifindex, priority };
            let zeros =
                PerCpuValues::try_from(vec![0u64; cpus]).map_err(|e| PfcError::Interface {
                    iface: "per-cpu values".into(),
                    source: e,
                })?;
            match counters.insert(key, zeros, flags) {
                Ok(()) => {}
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP)(e)),
            }
        }
        Ok(())
    }

    /// Writes one interface's configuration and creates its counters at zero (keeping
    /// existing ones: configuring an interface twice must not reset them), in the epoch the
    /// interface has (a new one if it has none).
    pub fn configure(&mut self, info: &InterfaceInfo) -> Result<(), PfcError> {
        let epoch = match self.if_config(info.ifindex)? {
            Some(c) => c.epoch,
            None => crate::core::pfc::counter::new_epoch(crate::sys::clock::unix_ms_now(), None),
        };
        self.configure_with_epoch(info, epoch)
    }

    fn configure_with_epoch(&mut self, info: &InterfaceInfo, epoch: u32) -> Result<(), PfcError> {
        self.write_counters(info.ifindex, u64::from(aya_noexist()))?;
        self.if_configs()?
            .insert(
                info.ifindex,
                PfcIfConfig {
                    mac: info.mac,
                    _pad: [0; 2],
                    speed_mbps: info.speed_mbps,
                    flags: PFC_IF_CONFIGURED,
                    epoch,
                },
                0,
            )
            .map_err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP))
    }

    /// The interfaces attached by this instance.
    pub fn attached(&self) -> &[Attached] {
        &self.attached
    }

    /// The pin folder.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// A reader over this counter's pinned maps.
    pub fn reader(&self) -> Result<PfcReader, PfcError> {
        PfcReader::open(&self.pin_dir)
    }

    /// The loaded object, for tests (TestRun).
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }
}

const fn aya_noexist() -> u32 {
    1 // BPF_NOEXIST
}

/// One received-count reading of one (interface, priority).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxReading {
    /// The key.
    pub key: PfcKey,
    /// Frames with this priority's bit set, summed over CPUs, since the map was created.
    pub count: u64,
}

/// Reads the pinned maps of one PFC counter instance (works without the daemon).
pub struct PfcReader {
    counters: PerCpuHashMap<MapData, PfcKey, u64>,
    pause: HashMap<MapData, PfcKey, PfcPause>,
    config: HashMap<MapData, u32, PfcIfConfig>,
    rejects: PerCpuArray<MapData, u64>,
    instance: u32,
}

impl PfcReader {
    /// Opens the maps pinned under `pin_dir`.
    pub fn open(pin_dir: &Path) -> Result<Self, PfcError> {
        let open = |name: &'static str| -> Result<MapData, PfcError> {
            let path = pin_dir.join(name);
            if !path.exists() {
                return Err(PfcError::NotPinned(pin_dir.into()));
            }
            MapData::from_pin(&path).map_err(super::map_err::<PfcError>(name))
        };
        let counters = open(PFC_RX_COUNTER_MAP)?;
        let instance = counters
            .info()
            .map_err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP))?
            .id();
        Ok(Self {
            counters: PerCpuHashMap::try_from(Map::PerCpuHashMap(counters))
                .map_err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP))?,
            pause: HashMap::try_from(Map::HashMap(open(PFC_PAUSE_MAP)?))
                .map_err(super::map_err::<PfcError>(PFC_PAUSE_MAP))?,
            config: HashMap::try_from(Map::HashMap(open(PFC_IF_CONFIG_MAP)?))
                .map_err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP))?,
            rejects: PerCpuArray::try_from(Map::PerCpuArray(open(PFC_REJECT_MAP)?))
                .map_err(super::map_err::<PfcError>(PFC_REJECT_MAP))?,
            instance,
        })
    }

    /// The kernel's id of the counter map: it changes only when the map is recreated (the
    /// pins were removed), i.e. when the counters were reset. Feed it to
    /// [`crate::core::pfc::counter::CounterTracker`] as the source instance.
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// Every received count, summed over CPUs, sorted by (ifindex, priority).
    pub fn rx_counts(&self) -> Result<BTreeMap<PfcKey, u64>, PfcError> {
        self.counters
            .iter()
            .map(|r| r.map(|(k, v)| (k, v.iter().sum())))
            .collect::<Result<_, _>>()
            .map_err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP))
    }

    /// One received count; `None` when the counter does not exist (never configured): a
    /// missing reading, not zero.
    pub fn rx_count(&self, ifindex: u32, priority: u8) -> Result<Option<u64>, PfcError> {
        let key = PfcKey {
            ifindex,
            priority: u32::from(priority),
        };
        match self.counters.get(&key, 0) {
            Ok(v) => Ok(Some(v.iter().sum())),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(super::map_err::<PfcError>(PFC_RX_COUNTER_MAP)(e)),
        }
    }

    /// The eight counts of one interface in priority order; `None` for a missing one.
    pub fn rx_priorities(&self, ifindex: u32) -> Result<[Option<u64>; 8], PfcError> {
        let mut out = [None; 8];
        for (n, slot) in out.iter_mut().enumerate() {
            *slot = self.rx_count(ifindex, n as u8)?;
        }
        Ok(out)
    }

    /// The pause state of one (interface, priority); `None` before its first frame.
    pub fn pause(&self, ifindex: u32, priority: u8) -> Result<Option<PfcPause>, PfcError> {
        let key = PfcKey {
            ifindex,
            priority: u32::from(priority),
        };
        match self.pause.get(&key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(super::map_err::<PfcError>(PFC_PAUSE_MAP)(e)),
        }
    }

    /// Total paused nanoseconds of one (interface, priority) up to `now` (CLOCK_MONOTONIC,
    /// [`crate::sys::clock::monotonic_ns`]): 0 before its first frame. F over an interval is the difference
    /// of two readings divided by the interval, capped at 1.
    pub fn paused_ns(&self, ifindex: u32, priority: u8, now: u64) -> Result<u64, PfcError> {
        Ok(self
            .pause(ifindex, priority)?
            .map_or(0, |p| p.paused_until(now)))
    }

    /// The counter epoch of `ifindex`'s counters; `None` when it is not configured.
    pub fn epoch(&self, ifindex: u32) -> Result<Option<u32>, PfcError> {
        match self.config.get(&ifindex, 0) {
            Ok(c) if c.flags & PFC_IF_CONFIGURED != 0 => Ok(Some(c.epoch)),
            Ok(_) | Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP)(e)),
        }
    }

    /// The configuration of every interface.
    pub fn interfaces(&self) -> Result<BTreeMap<u32, PfcIfConfig>, PfcError> {
        self.config
            .iter()
            .collect::<Result<_, _>>()
            .map_err(super::map_err::<PfcError>(PFC_IF_CONFIG_MAP))
    }

    /// Frames not counted, by reason, summed over CPUs.
    pub fn rejects(&self) -> Result<[(PfcReject, u64); PFC_REJECT_COUNT as usize], PfcError> {
        let mut out = PfcReject::ALL.map(|r| (r, 0));
        for (r, n) in out.iter_mut() {
            *n = self
                .rejects
                .get(&(*r as u32), 0)
                .map_err(super::map_err::<PfcError>(PFC_REJECT_MAP))?
                .iter()
                .sum();
        }
        Ok(out)
    }
}
