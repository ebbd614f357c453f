//! The leaf's path quality table (seed 003 section 6.2) as the XDP receiver keeps it in
//! pinned BPF maps: loading and attaching the receiver, writing its configuration, and
//! reading the table, the neighbors and the counters (from a running daemon or from the
//! pins alone, so `lqd show` works without a daemon and a restart keeps the table).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{
        Array, Map, MapData, RingBuf,
        lpm_trie::{Key, LpmTrie},
    },
    programs::{TestRun, Xdp, XdpMode},
};
/// The loopback's ifindex in every network namespace: the ingress of the datagrams the
/// socket receiver hands back to the XDP program.
const LOOPBACK_IFINDEX: u32 = 1;

use lq_common::maps::{
    AS_PLAN_MAP, AS_PLAN_MAX, AUTH_PASS_MAP, CONFIG_MAP, COUNTER_COUNT, COUNTER_MAP, Counter,
    EVENT_MAP, NEIGHBOR_CAPACITY, NEIGHBOR_MAP, NeighborKey, NeighborValue, PATH_BLOCK_MAP,
    PATH_INDEX_MAP, PATH_ROWS_MAP, PATH_STAMP_LINES, PATH_STAMP_MAP, PATH_TABLE_CAPACITY,
    PATH_TABLE_MAP, PathEvent, PathKey, PathSlot, PathStampLine, PathValue, ReceiverConfig,
    XDP_PROGRAM, ZERO_EVENT_MAP, path_stamp_at, path_stamp_word_parts,
};
use lq_common::{maps::as_range_prefixes, wire::AsRange};

pub use crate::core::controller::effective::{EffectiveEntry, effective_paths};

/// The eBPF object built by `build.rs` (crate `lq-ebpf`), embedded so `lqd` is one file.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lq"));

/// Maps the receiver pins under its instance folder, so a daemon restart keeps them.
pub const PINNED_MAPS: [&str; 9] = [
    PATH_TABLE_MAP,
    PATH_INDEX_MAP,
    PATH_ROWS_MAP,
    PATH_BLOCK_MAP,
    PATH_STAMP_MAP,
    NEIGHBOR_MAP,
    COUNTER_MAP,
    CONFIG_MAP,
    AS_PLAN_MAP,
];

/// The maps that together hold the path table: rows, their key index, the count of rows
/// reserved, the CPUs' reserved blocks, the rows' stamps. Kept or created anew together: a
/// new index over old rows would claim rows that hold other keys, a new count would
/// reserve them again, old stamps would be read as new refreshes. The blocks are pinned
/// too, so that a restart does not leave every CPU's unclaimed rows unused.
const PATH_TABLE_PARTS: [&str; 5] = [
    PATH_TABLE_MAP,
    PATH_INDEX_MAP,
    PATH_ROWS_MAP,
    PATH_BLOCK_MAP,
    PATH_STAMP_MAP,
];

/// Default bpffs folder of one `lqd` instance.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/lq";

/// Errors of the path table edge.
#[derive(Debug, thiserror::Error)]
pub enum PathTableError {
    /// The object, its pin folder or its maps could not be set up.
    #[error(transparent)]
    Pinned(#[from] LoadPinnedError),
    /// A program operation failed.
    #[error(transparent)]
    Program(#[from] super::ProgramOpError),
    /// A map operation failed.
    #[error(transparent)]
    Map(#[from] super::MapOpError),
    /// Reading a map with BPF_MAP_LOOKUP_BATCH failed.
    #[error("map {map}: batched read")]
    BatchRead {
        /// The map name.
        map: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The map is missing from the object (a build mismatch).
    #[error("map {0} not found in the eBPF object")]
    MissingMap(&'static str),
    /// The number of possible CPUs (a per-CPU value's size) is unknown.
    #[error("reading the possible CPUs ({0})")]
    Cpus(&'static str, #[source] std::io::Error),
    /// Too many AS ranges.
    #[error("the AS plan has {0} ranges; the receiver holds at most {AS_PLAN_MAX}")]
    AsPlanTooLarge(usize),
    /// The pin folder is not on a bpffs.
    #[error(
        "{0} is not on a bpf filesystem: mount one (`mount -t bpf bpf /sys/fs/bpf`); under `ip netns exec`, /sys is remounted without it: use `lqd run --netns NAME` instead"
    )]
    NotBpffs(PathBuf),
    /// No pinned maps: no receiver has run with this pin folder.
    #[error("no pinned path table at {0}: is lqd running as a load-balancer with this --pin-dir?")]
    NotPinned(PathBuf),
}

/// Why [`load_pinned`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadPinnedError {
    /// lqd was built with AYA_BUILD_SKIP=1: it has no eBPF object.
    #[error(
        "this lqd was built without its eBPF object (AYA_BUILD_SKIP=1); build it with `cargo xtask build`"
    )]
    NoObject,
    /// bpffs is not mounted or the folder cannot be created.
    #[error(
        "cannot create the pin folder {path}: {source} (is bpffs mounted on /sys/fs/bpf? `mount -t bpf bpf /sys/fs/bpf`)"
    )]
    PinFolder {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The object did not load (verifier, permissions, kernel too old).
    #[error(
        "loading the eBPF object failed: {0} (lqd needs root or CAP_BPF + CAP_NET_ADMIN, and a kernel with BTF)"
    )]
    Load(#[from] aya::EbpfError),
}

/// Loads a fresh instance of the embedded object with the maps named in `maps` pinned
/// under `pin_dir`: an existing pin is reused (so a restart keeps tables and counters), a
/// missing one is created. Every service that owns pinned maps (the receiver, the PFC
/// counter) loads its instance this way.
pub fn load_pinned(pin_dir: &Path, maps: &[&'static str]) -> Result<Ebpf, LoadPinnedError> {
    if EBPF_OBJECT.is_empty() {
        return Err(LoadPinnedError::NoObject);
    }
    create_pin_dir(pin_dir)?;
    remove_incompatible_pins(pin_dir, maps);
    let paths: Vec<PathBuf> = maps.iter().map(|m| pin_dir.join(m)).collect();
    let mut loader = EbpfLoader::new();
    for (name, path) in maps.iter().zip(&paths) {
        loader.map_pin_path(name, path.as_path());
    }
    Ok(loader.load(EBPF_OBJECT)?)
}

/// Removes, with a warning, the pins whose map differs from this object's definition of it
/// (key or value size, capacity): pins made by an older lqd whose table has since been
/// resized or laid out anew (the path table went from 32 768 to 131 072 slots, then to
/// 65 536 rows found through a key index; the counters grew by one). aya reuses a pin as it
/// is, and the program would then index past its end or misread the rows. The parts of
/// the path table go together ([`PATH_TABLE_PARTS`]): when one is removed or missing, the
/// others are removed too. The table is refilled by the next advertisements (one
/// T_notify); forwarding state (groups, routes) is not in these maps.
fn remove_incompatible_pins(pin_dir: &Path, maps: &[&'static str]) {
    let Ok(obj) = aya_obj::Object::parse(EBPF_OBJECT) else {
        return;
    };
    let mut table_kept = true;
    for name in maps {
        let path = pin_dir.join(name);
        let Ok(have) = aya::maps::MapInfo::from_pin(&path) else {
            table_kept &= !PATH_TABLE_PARTS.contains(name);
            continue;
        };
        let Some(want) = obj.maps.get(*name) else {
            continue;
        };
        let (want_def, have_def) = (
            (want.key_size(), want.value_size(), want.max_entries()),
            (have.key_size(), have.value_size(), have.max_entries()),
        );
        // A ring buffer's size and a per-CPU map's entries are what the object asks for;
        // any difference means another layout.
        if want_def != have_def {
            tracing::warn!(
                pin = %path.display(),
                pinned = ?have_def,
                expected = ?want_def,
                "a pinned map of an older layout (key, value size, entries): removed, created anew"
            );
            let _ = std::fs::remove_file(&path);
            table_kept &= !PATH_TABLE_PARTS.contains(name);
        }
    }
    if table_kept {
        return;
    }
    for name in maps.iter().filter(|m| PATH_TABLE_PARTS.contains(m)) {
        let path = pin_dir.join(name);
        if path.exists() {
            tracing::warn!(
                pin = %path.display(),
                "a part of the path table without the others: removed, the table is created anew"
            );
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Creates `pin_dir` and its parents. Retried on NotFound: another process that removes an
/// empty pin root (a test harness cleaning up, an operator) between the creation of the
/// parent and of the child must not fail a start.
fn create_pin_dir(pin_dir: &Path) -> Result<(), LoadPinnedError> {
    let mut attempt = 0;
    loop {
        match std::fs::create_dir_all(pin_dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 3 => attempt += 1,
            Err(source) => {
                return Err(LoadPinnedError::PinFolder {
                    path: pin_dir.into(),
                    source,
                });
            }
        }
    }
}

/// BPF_FS_MAGIC from statfs(2).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Checks that `pin_dir` (or its nearest existing ancestor) lies on a bpffs, with an error
/// that says what to do. `ip netns exec` mounts a fresh /sys without /sys/fs/bpf.
pub fn check_bpffs(pin_dir: &Path) -> Result<(), PathTableError> {
    let mut p = pin_dir;
    while !p.exists() {
        match p.parent() {
            Some(parent) => p = parent,
            None => break,
        }
    }
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| PathTableError::NotBpffs(p.into()))?;
    // SAFETY: statfs is plain data; valid path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and output struct.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 || st.f_type as i64 != BPF_FS_MAGIC {
        return Err(PathTableError::NotBpffs(p.into()));
    }
    Ok(())
}

/// Receiver settings the daemon writes into the program's configuration map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverSettings {
    /// UDP destination port.
    pub udp_port: u16,
    /// The local `as-qualified` setting.
    pub as_qualified: bool,
    /// The AS plan (empty: none).
    pub as_plan: Vec<AsRange>,
    /// miss_count x T_notify, in nanoseconds.
    pub dead_interval_ns: u64,
    /// Pass consumed LQ datagrams to the stack instead of dropping them.
    pub pass_through: bool,
}

impl ReceiverSettings {
    /// The kernel-side configuration struct.
    pub fn to_config(&self) -> Result<ReceiverConfig, PathTableError> {
        if self.as_plan.len() > AS_PLAN_MAX {
            return Err(PathTableError::AsPlanTooLarge(self.as_plan.len()));
        }
        let mut cfg = ReceiverConfig {
            dead_interval_ns: self.dead_interval_ns,
            udp_port: self.udp_port,
            as_qualified: u8::from(self.as_qualified),
            pass_through: u8::from(self.pass_through),
            as_plan_len: self.as_plan.len() as u32,
            ..ReceiverConfig::default()
        };
        cfg.as_plan[..self.as_plan.len()].copy_from_slice(&self.as_plan);
        Ok(cfg)
    }
}

/// A loaded XDP receiver with its maps pinned under `pin_dir`.
pub struct XdpReceiver {
    ebpf: Ebpf,
    pin_dir: PathBuf,
    /// Interfaces attached; the links live in the program and detach when it is dropped.
    attached: Vec<String>,
}

/// How the program ended up attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (veth and most physical NICs).
    Native,
    /// Generic XDP in the stack: works everywhere, slower.
    Generic,
}

impl XdpReceiver {
    /// Loads the receiver, reusing maps already pinned under `pin_dir` (a restart keeps the
    /// table and the counters), and writes `settings`. Does not attach.
    pub fn load(pin_dir: &Path, settings: &ReceiverSettings) -> Result<Self, PathTableError> {
        let ebpf = load_pinned(pin_dir, &PINNED_MAPS)?;
        let mut this = Self {
            ebpf,
            pin_dir: pin_dir.into(),
            attached: Vec::new(),
        };
        this.configure(settings)?;
        let prog: &mut Xdp = this.program()?;
        prog.load().map_err(super::program_err::<PathTableError>(
            "XDP",
            "load (verifier)",
        ))?;
        Ok(this)
    }

    fn program(&mut self) -> Result<&mut Xdp, PathTableError> {
        self.ebpf
            .program_mut(XDP_PROGRAM)
            .ok_or(PathTableError::MissingMap(XDP_PROGRAM))?
            .try_into()
            .map_err(super::program_err::<PathTableError>("XDP", "type"))
    }

    /// Rewrites the configuration (SIGHUP reload): takes effect for the next frame.
    pub fn configure(&mut self, settings: &ReceiverSettings) -> Result<(), PathTableError> {
        let cfg = settings.to_config()?;
        // The AS plan trie first, so the plan is complete before the config says it exists.
        let map = self
            .ebpf
            .map_mut(AS_PLAN_MAP)
            .ok_or(PathTableError::MissingMap(AS_PLAN_MAP))?;
        let mut trie: LpmTrie<&mut MapData, [u8; 4], u8> =
            LpmTrie::try_from(map).map_err(super::map_err::<PathTableError>(AS_PLAN_MAP))?;
        let wanted: Vec<(u32, [u8; 4])> = cfg
            .as_plan()
            .iter()
            .flat_map(|r| as_range_prefixes(*r))
            .map(|(len, first)| (len, first.to_be_bytes()))
            .collect();
        for (len, data) in &wanted {
            trie.insert(&Key::new(*len, *data), 1, 0)
                .map_err(super::map_err::<PathTableError>(AS_PLAN_MAP))?;
        }
        let stale: Vec<Key<[u8; 4]>> = trie
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !wanted.contains(&(k.prefix_len(), k.data())))
            .collect();
        for key in &stale {
            trie.remove(key)
                .map_err(super::map_err::<PathTableError>(AS_PLAN_MAP))?;
        }
        let map = self
            .ebpf
            .map_mut(CONFIG_MAP)
            .ok_or(PathTableError::MissingMap(CONFIG_MAP))?;
        let mut array: Array<&mut MapData, ReceiverConfig> =
            Array::try_from(map).map_err(super::map_err::<PathTableError>(CONFIG_MAP))?;
        array
            .set(0, cfg, 0)
            .map_err(super::map_err::<PathTableError>(CONFIG_MAP))
    }

    /// Attaches to `iface`: native mode first, generic as a fallback (with a warning).
    pub fn attach(&mut self, iface: &str) -> Result<AttachMode, PathTableError> {
        let prog = self.program()?;
        match prog.attach(iface, XdpMode::Driver) {
            Ok(_) => {
                self.attached.push(iface.into());
                Ok(AttachMode::Native)
            }
            Err(native) => {
                tracing::warn!(%iface, error = %native, "native XDP attach failed; falling back to generic XDP (slower)");
                prog.attach(iface, XdpMode::Skb)
                    .map_err(super::program_err::<PathTableError>(
                        "XDP",
                        format!("attach to {iface}"),
                    ))?;
                self.attached.push(iface.into());
                Ok(AttachMode::Generic)
            }
        }
    }

    /// The interfaces the program is attached to.
    pub fn attached(&self) -> impl Iterator<Item = &str> {
        self.attached.iter().map(String::as_str)
    }

    /// The pin folder.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// The interfaces whose LQ datagrams go up to the socket receiver for authentication
    /// (issue 39): replaces the set (at most `AUTH_PASS_CAPACITY`).
    pub fn set_authenticated_interfaces(
        &mut self,
        ifindexes: &[u32],
    ) -> Result<(), PathTableError> {
        let map = self
            .ebpf
            .map_mut(AUTH_PASS_MAP)
            .ok_or(PathTableError::MissingMap(AUTH_PASS_MAP))?;
        let mut set: aya::maps::HashMap<&mut MapData, u32, u32> = aya::maps::HashMap::try_from(map)
            .map_err(super::map_err::<PathTableError>(AUTH_PASS_MAP))?;
        let stale: Vec<u32> = set
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !ifindexes.contains(k))
            .collect();
        for k in stale {
            set.remove(&k)
                .map_err(super::map_err::<PathTableError>(AUTH_PASS_MAP))?;
        }
        for i in ifindexes {
            set.insert(i, 1, 0)
                .map_err(super::map_err::<PathTableError>(AUTH_PASS_MAP))?;
        }
        Ok(())
    }

    /// Runs the receiver program on `frame`, an authenticated datagram the socket
    /// receiver rebuilt, as if it had arrived on the loopback (which is never in the
    /// authentication set): checks 1-11 and the path table exactly as for a datagram on
    /// the wire (BPF_PROG_TEST_RUN, on the calling thread's CPU). Returns the verdict and
    /// the program's run time as the kernel measured it.
    pub fn receive_verified(
        &mut self,
        frame: &[u8],
    ) -> Result<(u32, std::time::Duration), PathTableError> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex; the kernel wants data 0 and data_end the frame's length.
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&len.to_ne_bytes());
        ctx[12..16].copy_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
        let prog = self.program()?;
        let mut opts = aya::programs::TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.ctx_in = Some(&ctx);
        let r = prog
            .test_run(opts)
            .map_err(super::program_err::<PathTableError>(
                "XDP",
                "test run (authenticated datagram)",
            ))?;
        Ok((r.return_value, r.duration))
    }

    /// The loaded object, for tests (TestRun) and benchmarks.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// The change-event ring buffer of the events without a zero transition (not pinned:
    /// events are only for the running daemon).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, PathTableError> {
        self.take_ring(EVENT_MAP)
    }

    /// The change-event ring buffer of the events with a zero transition
    /// (`EVENT_FLAG_ZERO_TRANSITION`), which lqd reads at once.
    pub fn take_zero_events(&mut self) -> Result<RingBuf<MapData>, PathTableError> {
        self.take_ring(ZERO_EVENT_MAP)
    }

    fn take_ring(&mut self, name: &'static str) -> Result<RingBuf<MapData>, PathTableError> {
        let map = self
            .ebpf
            .take_map(name)
            .ok_or(PathTableError::MissingMap(name))?;
        RingBuf::try_from(map).map_err(super::map_err::<PathTableError>(name))
    }

    /// A reader over this receiver's maps.
    pub fn reader(&self) -> Result<TableReader, PathTableError> {
        TableReader::open(&self.pin_dir)
    }
}

/// Every element of an array map of `len` elements of type `V`, in index order, with as few
/// BPF_MAP_LOOKUP_BATCH calls as the kernel allows (usually one): the path table has 65 536
/// rows, and one lookup syscall per row would cost the reader tens of milliseconds.
fn read_array_batched<V: aya::Pod + Default + Clone>(
    fd: std::os::fd::BorrowedFd<'_>,
    len: usize,
) -> Result<Vec<V>, std::io::Error> {
    let mut keys = vec![0u32; len];
    let mut values = vec![V::default(); len];
    let n = super::lookup_batch_into(fd, &mut keys, &mut values)?;
    values.truncate(n);
    Ok(values)
}

/// The first `len` elements of an array map created with `BPF_F_MMAPABLE`, mapped
/// read-only into lqd's memory: the path table's slots and their refresh stamps. A control
/// step reads them in place, without a system call and without copying 3 MiB of mostly
/// empty rows (issue 15: that copy was most of a step).
struct MappedArray<T> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
    bytes: usize,
}

// SAFETY: the mapping is read-only shared memory owned by this value; reading it from
// another thread is as sound as from this one.
unsafe impl<T: aya::Pod> Send for MappedArray<T> {}

impl<T: aya::Pod> MappedArray<T> {
    /// Maps the first `len` elements of the array map `fd`; fails when the map was created
    /// without `BPF_F_MMAPABLE` (pins of an older lqd), and the caller reads by batch.
    /// `T`'s size must be the map's value size, a multiple of 8 (the kernel's element
    /// stride).
    fn new(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        const { assert!(size_of::<T>().is_multiple_of(8)) };
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let bytes = (len * size_of::<T>()).div_ceil(page) * page;
        // SAFETY: a fresh read-only shared mapping of the map's value area; the kernel
        // checks the fd, the length and the map's flags.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<T>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null mapping"))?;
        Ok(Self { ptr, len, bytes })
    }

    /// A pointer to element `i`, `None` past the end. Read it with volatile reads: the XDP
    /// program writes the elements concurrently.
    fn at(&self, i: usize) -> Option<*const T> {
        // SAFETY: i < len, within the mapping (page-aligned base, elements of T's size and
        // alignment, T plain data: any bytes are a valid value).
        (i < self.len).then(|| unsafe { self.ptr.as_ptr().add(i) }.cast_const())
    }
}

impl<T> Drop for MappedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

/// The path table's slots, mapped.
type SlotMap = MappedArray<PathSlot>;

impl SlotMap {
    /// Slot `i`'s entry when the slot is used. Volatile reads: the XDP program writes the
    /// slots concurrently (a slot read while it is written may mix two updates of one
    /// entry, as a batch copy could).
    fn entry(&self, i: usize) -> Option<(PathKey, PathValue)> {
        let slot = self.at(i)?;
        // SAFETY: a pointer into the mapping (`at`); `used` alone first, the whole slot
        // only when used.
        let used = unsafe { std::ptr::read_volatile(&raw const (*slot).used) };
        if used == 0 {
            return None;
        }
        // The receiver writes a row's key before it marks the row used: the key is read
        // after `used` (a no-op on x86; on arm64 the loads could otherwise pass each other).
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: as above.
        let s = unsafe { std::ptr::read_volatile(slot) };
        Some((s.key, s.value))
    }

    /// Every used slot's entry, with its index.
    fn used(&self) -> impl Iterator<Item = (usize, (PathKey, PathValue))> + '_ {
        (0..self.len).filter_map(move |i| self.entry(i).map(|e| (i, e)))
    }
}

/// The slots' refresh stamps, mapped.
type StampMap = MappedArray<PathStampLine>;

impl StampMap {
    /// Slot `slot`'s stamp word ([`lq_common::maps::path_stamp_word`]; a volatile read: the
    /// XDP program writes it).
    fn word(&self, slot: u32) -> Option<u32> {
        let (line, i) = path_stamp_at(slot);
        let line = self.at(line as usize)?;
        // SAFETY: a pointer into the mapping (`at`); `i` < PATH_STAMPS_PER_LINE.
        Some(unsafe { std::ptr::read_volatile(&raw const (*line).words[i]) })
    }

    /// Slot `slot`'s refresh stamp.
    fn stamp(&self, slot: u32) -> Option<u16> {
        self.word(slot).map(|w| path_stamp_word_parts(w).0)
    }
}

pub use crate::core::controller::path_quality::remote_order;

/// A change event as the ring buffer holds it; `None` for a record of another size (a
/// receiver of another layout, e.g. the pinned program of an older lqd), which the caller
/// must treat as "anything may have changed".
pub fn change_event(record: &[u8]) -> Option<PathEvent> {
    if record.len() != size_of::<PathEvent>() {
        return None;
    }
    // SAFETY: `record` holds exactly size_of::<PathEvent>() octets (checked above), read
    // unaligned; PathEvent is plain old data (integers only, every bit pattern valid).
    Some(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<PathEvent>()) })
}

/// The sender of a [`PathEvent`].
pub fn event_sender(e: &PathEvent) -> NeighborKey {
    NeighborKey {
        node_as: e.node_as,
        node_id: e.node_id,
    }
}

/// Reads the pinned maps of one receiver instance.
pub struct TableReader {
    /// The path table's slots (an array map of [`PathSlot`]), read in place through
    /// `slots`, or in one batched syscall when the map cannot be mapped.
    paths: MapData,
    slots: Option<SlotMap>,
    /// The slots' refresh stamps, mapped; `None` with the pins of an older lqd.
    stamps: Option<StampMap>,
    /// The used slots of the last full scan ([`Self::paths_known`]).
    known: Vec<u32>,
    /// `known` inverted: (slot, position), sorted by slot ([`Self::position_of`]).
    slot_positions: Vec<(u32, u32)>,
    /// The neighbor table (a hash map), read in one batched lookup.
    neighbors: MapData,
    /// Key and value buffers of the neighbors' batched lookup.
    neighbor_buf: std::cell::RefCell<(Vec<NeighborKey>, Vec<NeighborValue>)>,
    /// The per-CPU counters (`u64` per CPU), read in one batched lookup.
    counters: MapData,
    /// The possible CPUs (a per-CPU value's count).
    cpus: usize,
    /// The counters' batch buffer: COUNTER_COUNT x cpus values.
    counter_buf: std::cell::RefCell<Vec<u64>>,
    config: Array<MapData, ReceiverConfig>,
}

impl TableReader {
    /// Opens the maps pinned under `pin_dir`.
    pub fn open(pin_dir: &Path) -> Result<Self, PathTableError> {
        let open = |name: &'static str| -> Result<MapData, PathTableError> {
            let path = pin_dir.join(name);
            if !path.exists() {
                return Err(PathTableError::NotPinned(pin_dir.into()));
            }
            MapData::from_pin(&path).map_err(super::map_err::<PathTableError>(name))
        };
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| PathTableError::Cpus(what, e))?;
        let paths = open(PATH_TABLE_MAP)?;
        let slots = {
            use std::os::fd::AsFd;
            SlotMap::new(paths.fd().as_fd(), PATH_TABLE_CAPACITY as usize).ok()
        };
        let stamps = open(PATH_STAMP_MAP).ok().and_then(|m| {
            use std::os::fd::AsFd;
            StampMap::new(m.fd().as_fd(), PATH_STAMP_LINES as usize).ok()
        });
        Ok(Self {
            paths,
            slots,
            stamps,
            known: Vec::new(),
            slot_positions: Vec::new(),
            neighbors: open(NEIGHBOR_MAP)?,
            neighbor_buf: Default::default(),
            counters: open(COUNTER_MAP)?,
            cpus,
            counter_buf: std::cell::RefCell::new(vec![0; COUNTER_COUNT as usize * cpus]),
            config: Array::try_from(Map::Array(open(CONFIG_MAP)?)).map_err(super::map_err::<
                PathTableError,
            >(
                CONFIG_MAP
            ))?,
        })
    }

    /// Every path entry, sorted by key, reading only the slots known to be used unless
    /// `full`. Slots are never freed and a key never moves, so the slots a full scan found
    /// used hold the same keys at every later read; only a slot claimed since (a new
    /// `(spine, remote, link)`) is missed until the next full scan. The control loop scans
    /// in full when the receiver's `slots_claimed` count moves (and on a backstop timer);
    /// in between, a step reads single known rows ([`Self::known_entry`], the rows its
    /// `PathMirror` names). The mapping holds 65 536 rows, the table of a small fabric a
    /// few dozen entries. Without the mapping (pins of an older lqd), every read is a full
    /// batch read.
    ///
    /// Sorted by [`remote_order`] (remote node, spine, link), the order of the control
    /// step's snapshot: the known slots are kept in that order, and a row's position in it
    /// is the position the mirror asks [`Self::known_entry`] for.
    pub fn paths_known(&mut self, full: bool) -> Result<Vec<(PathKey, PathValue)>, PathTableError> {
        let Some(slots) = &self.slots else {
            let mut all: Vec<(PathKey, PathValue)> = self.paths()?.into_iter().collect();
            all.sort_unstable_by_key(|e| remote_order(&e.0));
            return Ok(all);
        };
        if full {
            let mut used: Vec<(PathKey, u32, PathValue)> =
                slots.used().map(|(i, (k, v))| (k, i as u32, v)).collect();
            used.sort_unstable_by_key(|e| remote_order(&e.0));
            self.known = used.iter().map(|e| e.1).collect();
            self.slot_positions = (0..).zip(&self.known).map(|(p, &s)| (s, p)).collect();
            self.slot_positions.sort_unstable();
            return Ok(used.into_iter().map(|(k, _, v)| (k, v)).collect());
        }
        Ok(self
            .known
            .iter()
            .filter_map(|i| slots.entry(*i as usize))
            .collect())
    }

    /// The entry in the `position`-th slot of the last full read (its order: sorted by
    /// [`remote_order`]), read in place; `None` without the mapping or beyond the slots
    /// that read found.
    pub fn known_entry(&self, position: usize) -> Option<(PathKey, PathValue)> {
        let slot = *self.known.get(position)?;
        self.slots.as_ref()?.entry(slot as usize)
    }

    /// The position (in the last full read's order) of the row in `slot`; `None` for a slot
    /// that read did not find used.
    pub fn position_of(&self, slot: u32) -> Option<usize> {
        let i = self
            .slot_positions
            .binary_search_by_key(&slot, |e| e.0)
            .ok()?;
        Some(self.slot_positions[i].1 as usize)
    }

    /// The refresh stamp of the row at `position` (the last full read's order); `None`
    /// without the stamp mapping or beyond the rows that read found.
    pub fn stamp_of(&self, position: usize) -> Option<u16> {
        self.stamps.as_ref()?.stamp(*self.known.get(position)?)
    }

    /// The stamp word of the row at `position` (its refresh stamp, LQS and CL as last
    /// written, [`lq_common::maps::path_stamp_word`]); `None` as for [`Self::stamp_of`].
    pub fn stamp_word_of(&self, position: usize) -> Option<u32> {
        self.stamps.as_ref()?.word(*self.known.get(position)?)
    }

    /// Calls `f(position, stamp)` with the refresh stamp of every row the last full read
    /// found, in position order (the caller's per-row state is then read in memory order;
    /// the 256 KiB of stamps stay in cache between sweeps); `false`, without calling it,
    /// when the stamps are not mapped (pins of an older lqd).
    pub fn for_each_stamp(&self, mut f: impl FnMut(usize, u16)) -> bool {
        let Some(stamps) = &self.stamps else {
            return false;
        };
        for (position, &slot) in self.known.iter().enumerate() {
            if let Some(s) = stamps.stamp(slot) {
                f(position, s);
            }
        }
        true
    }

    /// Every row the last full read found, read again in place now; `None` without the
    /// mapping.
    pub fn known_entries(&self) -> Option<impl Iterator<Item = (PathKey, PathValue)> + '_> {
        let slots = self.slots.as_ref()?;
        Some(self.known.iter().filter_map(|i| slots.entry(*i as usize)))
    }

    /// The table is mapped, so that [`Self::known_entry`] reads a row without a system call.
    pub fn mapped(&self) -> bool {
        self.slots.is_some()
    }

    /// One receiver counter summed over CPUs.
    pub fn counter(&self, c: Counter) -> Result<u64, PathTableError> {
        Ok(self.counters()?[c as usize])
    }

    /// Every path entry, sorted by key.
    pub fn paths(&self) -> Result<BTreeMap<PathKey, PathValue>, PathTableError> {
        use std::os::fd::AsFd;
        if let Some(slots) = &self.slots {
            return Ok(slots.used().map(|(_, e)| e).collect());
        }
        let slots =
            read_array_batched::<PathSlot>(self.paths.fd().as_fd(), PATH_TABLE_CAPACITY as usize)
                .map_err(|source| PathTableError::BatchRead {
                map: PATH_TABLE_MAP,
                source,
            })?;
        Ok(slots
            .into_iter()
            .filter(|s| s.used != 0)
            .map(|s| (s.key, s.value))
            .collect())
    }

    /// Every neighbor, sorted by key.
    pub fn neighbors(&self) -> Result<BTreeMap<NeighborKey, NeighborValue>, PathTableError> {
        use std::os::fd::AsFd;
        // One batched lookup (the control step reads the neighbors every step: aya's
        // iterator costs two system calls per neighbor, 128 at 64 spines), into buffers
        // kept between calls.
        let mut buf = self.neighbor_buf.borrow_mut();
        let (keys, values) = &mut *buf;
        if keys.is_empty() {
            keys.resize(NEIGHBOR_CAPACITY as usize, NeighborKey::default());
            values.resize(NEIGHBOR_CAPACITY as usize, NeighborValue::default());
        }
        let n = super::lookup_batch_into(self.neighbors.fd().as_fd(), keys, values).map_err(
            |source| PathTableError::BatchRead {
                map: NEIGHBOR_MAP,
                source,
            },
        )?;
        Ok(keys[..n]
            .iter()
            .copied()
            .zip(values[..n].iter().copied())
            .collect())
    }

    /// Counters summed over CPUs, indexed by [`Counter`]: one batched lookup (a lookup
    /// per counter was 17 system calls per control step and snapshot).
    pub fn counters(&self) -> Result<[u64; COUNTER_COUNT as usize], PathTableError> {
        use std::os::fd::AsFd;
        const N: usize = COUNTER_COUNT as usize;
        let mut keys = [0u32; N];
        let mut sums = [0u64; N];
        let mut per_cpu = self.counter_buf.borrow_mut();
        let n = super::lookup_batch_per_cpu_sums(
            self.counters.fd().as_fd(),
            &mut keys,
            self.cpus,
            &mut per_cpu,
            &mut sums,
        )
        .map_err(|source| PathTableError::BatchRead {
            map: COUNTER_MAP,
            source,
        })?;
        // An array's batch returns its elements in index order, all of them.
        let mut out = [0u64; N];
        for (k, v) in keys.iter().zip(sums).take(n) {
            if let Some(o) = out.get_mut(*k as usize) {
                *o = v;
            }
        }
        Ok(out)
    }

    /// The configuration the daemon wrote.
    pub fn config(&self) -> Result<ReceiverConfig, PathTableError> {
        self.config
            .get(&0, 0)
            .map_err(super::map_err::<PathTableError>(CONFIG_MAP))
    }

    /// Every path entry with its effective values at `now_ns`, from the pins alone (no
    /// daemon needed): a spine is failed when silent for more than the configured dead
    /// interval, the rule the XDP receiver applies (`lq_common::receive::neighbor_failed`).
    pub fn effective_paths(
        &self,
        now_ns: u64,
    ) -> Result<BTreeMap<PathKey, EffectiveEntry>, PathTableError> {
        let dead = self.config()?.dead_interval_ns;
        let neighbors = self.neighbors()?;
        let paths = self.paths()?;
        Ok(effective_paths(
            &paths,
            |spine| {
                neighbors.get(spine).is_some_and(|n| {
                    crate::core::controller::heartbeat::silent_for_more_than(
                        n.last_seen_ns,
                        now_ns,
                        dead,
                    )
                })
            },
            now_ns,
            dead,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_event_reads_the_receiver_layout() {
        let mut slots = [lq_common::maps::NO_SLOT; lq_common::maps::EVENT_SLOTS];
        slots[0] = 17;
        slots[1] = 131_071;
        let e = PathEvent {
            time_ns: 1,
            node_as: 65001,
            node_id: 0x0a00_0001,
            sequence: 7,
            changed: 2,
            entries: 3,
            mode: 1,
            flags: lq_common::maps::EVENT_FLAG_ZERO_TRANSITION,
            changed_slots: slots,
        };
        // The record as the kernel's ring buffer holds it: the fields in order, native
        // endian, no padding.
        let mut record = Vec::new();
        record.extend_from_slice(&e.time_ns.to_ne_bytes());
        record.extend_from_slice(&e.node_as.to_ne_bytes());
        record.extend_from_slice(&e.node_id.to_ne_bytes());
        record.extend_from_slice(&e.sequence.to_ne_bytes());
        record.extend_from_slice(&e.changed.to_ne_bytes());
        record.extend_from_slice(&e.entries.to_ne_bytes());
        record.extend_from_slice(&[e.mode, e.flags]);
        for s in slots {
            record.extend_from_slice(&s.to_ne_bytes());
        }
        let read = change_event(&record).unwrap();
        assert_eq!(read, e);
        assert_eq!(
            event_sender(&read),
            NeighborKey {
                node_as: 65001,
                node_id: 0x0a00_0001
            }
        );
        assert_eq!(read.named_slots(), Some(&[17, 131_071][..]));
        assert!(read.zero_transition());
        // More changes than slots, or a receiver without slots: the sender only.
        let many = PathEvent { changed: 9, ..read };
        assert_eq!(many.named_slots(), None);
        let reference = PathEvent {
            changed: 2,
            ..PathEvent::default()
        };
        assert_eq!(reference.named_slots(), None);
        // A record of an older layout (24 octets): unreadable.
        assert_eq!(change_event(&record[..24]), None);
    }
}
