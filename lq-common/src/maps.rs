//! Map names, keys, values and counters shared by the XDP receiver and `lqd`.
//!
//! Every struct is `#[repr(C)]` with explicit padding fields and an asserted size, so the
//! kernel and user views cannot drift apart and BTF shows no hidden holes.

use crate::wire::AsRange;

/// The path quality table (seed 003 section 6.2): an array of [`PathSlot`]s (rows), each
/// claimed by one [`PathKey`] in arrival order and found through [`PATH_INDEX_MAP`] (see
/// [`path_index_at`] for the layout and why it is not a BPF hash map).
pub const PATH_TABLE_MAP: &str = "LQ_PATHS";
/// The path table's key index: an open-addressed hash table of `u64` cells, each 0 (free)
/// or a row of [`PATH_TABLE_MAP`] plus one, probed from [`path_index_at`].
pub const PATH_INDEX_MAP: &str = "LQ_PATH_INDEX";
/// One `u64` at index 0: how many rows of [`PATH_TABLE_MAP`] CPUs have reserved, in blocks
/// of [`PATH_CLAIM_BLOCK`] (the next free row while below [`PATH_TABLE_CAPACITY`]; it may
/// pass it by a block per CPU once the table is full), advanced atomically by the receiver.
pub const PATH_ROWS_MAP: &str = "LQ_PATH_ROWS";
/// Per CPU, one [`PathClaimBlock`]: the rows this CPU reserved and has not claimed yet.
pub const PATH_BLOCK_MAP: &str = "LQ_PATH_BLOCK";
/// Rows a CPU reserves at once. A CPU claims the rows of its block one after the other,
/// so the new entries of one datagram (one CPU receives it) take adjacent rows even while
/// other CPUs claim rows for other spines' datagrams (claims from one shared count would
/// interleave them, and the receiver's guess of the next row would then miss for good).
/// At most this many rows per CPU are reserved and unused.
pub const PATH_CLAIM_BLOCK: u32 = 64;
/// The path table's refresh stamps: an array of [`PathStampLine`]s, one `u32` word per slot
/// of [`PATH_TABLE_MAP`], its refresh stamp with its LQS and CL ([`path_stamp_at`],
/// [`path_stamp_word`]).
pub const PATH_STAMP_MAP: &str = "LQ_PATH_STAMPS";
/// Per-neighbor receive state: [`NeighborKey`] -> [`NeighborValue`].
pub const NEIGHBOR_MAP: &str = "LQ_NEIGHBORS";
/// Per-CPU `u64` counters indexed by [`Counter`].
pub const COUNTER_MAP: &str = "LQ_COUNTERS";
/// One [`ReceiverConfig`] at index 0, written by `lqd` before attaching.
pub const CONFIG_MAP: &str = "LQ_CONFIG";
/// Longest-prefix-match trie of the AS plan: key (prefix length, AS number big-endian),
/// value 1. `lqd` fills it from [`ReceiverConfig::as_plan`] with [`as_range_prefixes`].
pub const AS_PLAN_MAP: &str = "LQ_AS_PLAN";
/// Ring buffer of the [`PathEvent`]s without [`EVENT_FLAG_ZERO_TRANSITION`]: `lqd` reads it
/// at its paced steps.
pub const EVENT_MAP: &str = "LQ_EVENTS";
/// Ring buffer of the [`PathEvent`]s with [`EVENT_FLAG_ZERO_TRANSITION`]: `lqd` listens to
/// it while the other waits for its paced step, and steps within a millisecond of its
/// last step (seed 003 section 6.4: at once), whatever the pace of the other.
pub const ZERO_EVENT_MAP: &str = "LQ_ZERO_EVENTS";
/// The XDP program's name in the object.
pub const XDP_PROGRAM: &str = "lq_receiver";
/// An empty XDP_PASS program in the same object: the benchmarks' baseline.
pub const XDP_BASELINE_PROGRAM: &str = "lq_baseline_pass";

/// Per-CPU ECN-eligible packet counts by ifindex (helper role, Appendix A.1).
pub const ECN_ELIGIBLE_MAP: &str = "LQ_ECN_ELIGIBLE";
/// The tc egress program that counts them.
pub const ECN_PROGRAM: &str = "lq_ecn_egress";
/// How many interfaces the ECN counter tracks.
pub const ECN_IF_CAPACITY: u32 = 256;

/// One `u32` at index 0: the layout version ([`COUNTER_PIN_LAYOUT`]) of the tc counters'
/// maps pinned beside it (the PFC counter's, the ECN counter's). `lqd` writes it when it
/// creates the pins and checks it before it adopts pins a previous run left, with their
/// links still counting: maps of another layout are never read or written as this one.
pub const COUNTER_META_MAP: &str = "LQ_COUNTER_META";
/// The layout of the pinned tc counter maps. 1: the pins of lqd before the counters
/// outlived it (no [`COUNTER_META_MAP`], a 16-octet `PfcIfConfig`); 2: links pinned beside
/// the maps, a 20-octet `PfcIfConfig` with the interface's counter epoch. Raise it with any
/// change of a pinned counter map's key, value or meaning.
pub const COUNTER_PIN_LAYOUT: u32 = 2;

/// Rows of the path table: two per entry of a 64-spine x 512-leaf fabric (32 768 entries,
/// one link each). Rows are claimed in arrival order and never freed (a key keeps its row),
/// so the table holds at most this many distinct keys (fewer by the rows reserved by CPUs
/// and not yet claimed, and by the rows of lost claim races); 65 536 x 48 octets = 3 MiB.
/// A multiple of [`PATH_STAMPS_PER_LINE`] and of [`PATH_CLAIM_BLOCK`].
pub const PATH_TABLE_CAPACITY: u32 = 65_536;
const _: () = assert!(PATH_TABLE_CAPACITY.is_multiple_of(PATH_CLAIM_BLOCK));
/// Cells of the key index ([`PATH_INDEX_MAP`]): twice the rows, so that a full table fills
/// half the cells and a key is almost always found at its first cell. A power of two (the
/// cell is the top bits of a 32-bit hash); 131 072 x 8 octets = 1 MiB.
pub const PATH_INDEX_CAPACITY: u32 = 131_072;
/// log2 of [`PATH_INDEX_CAPACITY`].
pub const PATH_INDEX_BITS: u32 = 17;
const _: () = assert!(1 << PATH_INDEX_BITS == PATH_INDEX_CAPACITY);
const _: () = assert!(PATH_INDEX_CAPACITY >= 2 * PATH_TABLE_CAPACITY);
/// Index cells probed for a key (linear probing from [`path_index_at`]) before the entry
/// is refused as `table_full`. With the hash's final mix, the longest probe run measured
/// for 32 768 keys of a 64 x 512 fabric (25 % of the cells) is 8, for a full table of
/// 65 536 sequential or random keys (50 %) 24-25; 64 leaves room for a key set that
/// clusters worse. A probe beyond the first costs one array access and one key compare,
/// only a colliding key pays it, and the verifier checks the probe once (a bpf_loop
/// callback) whatever the count.
pub const PATH_SLOT_PROBES: u32 = 64;
/// Capacity of the neighbor table.
pub const NEIGHBOR_CAPACITY: u32 = 1024;
/// Ring buffer size in bytes (a power of two, a multiple of the page size).
pub const EVENT_RING_BYTES: u32 = 512 * 1024;
/// [`ZERO_EVENT_MAP`]'s size in bytes (a power of two, a multiple of the page size): 2 048
/// events. Zero transitions are rare but for a receiver's first T_notify (every entry
/// new); a lost event costs a full read of the table at the next step, not a lost change.
pub const ZERO_EVENT_RING_BYTES: u32 = 128 * 1024;
/// How many AS ranges the AS plan can hold.
pub const AS_PLAN_MAX: usize = 8;
/// Capacity of the AS plan trie: 8 ranges need at most 8 x 62 prefixes.
pub const AS_PLAN_PREFIX_CAPACITY: u32 = 512;

/// Cuts an inclusive AS range into the aligned prefixes (prefix length, first AS) that
/// cover exactly it: at most 62 for a 32-bit range. An empty range (first > last) gives
/// none.
pub fn as_range_prefixes(range: AsRange) -> impl Iterator<Item = (u32, u32)> {
    let mut next = u64::from(range.first);
    let last = u64::from(range.last);
    core::iter::from_fn(move || {
        if next > last {
            return None;
        }
        // The largest aligned block starting at `next` that does not pass `last`.
        let mut bits = if next == 0 {
            32
        } else {
            next.trailing_zeros().min(32)
        };
        while bits > 0 && next + (1u64 << bits) - 1 > last {
            bits -= 1;
        }
        let item = (32 - bits, next as u32);
        next += 1u64 << bits;
        Some(item)
    })
}

/// Key of the path quality table: (spine_as, spine_node_id, remote_leaf_as,
/// remote_leaf_id, link_id), seed 003 section 6.2. Router-IDs are host-order integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(C)]
pub struct PathKey {
    /// The advertising node's AS (0 when unqualified).
    pub spine_as: u32,
    /// The advertising node's Router-ID.
    pub spine_id: u32,
    /// The remote node's AS (0 when unqualified).
    pub remote_as: u32,
    /// The remote node's Router-ID.
    pub remote_id: u32,
    /// The advertising node's ifIndex of the link.
    pub link_id: u32,
}
const _: () = assert!(core::mem::size_of::<PathKey>() == 20);

/// One slot of the path table: a key, whether the slot holds an entry, the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PathSlot {
    /// The entry's key; meaningful when `used` is 1.
    pub key: PathKey,
    /// 1: the slot holds an entry; 0: free, or a row whose claim lost its index cell to
    /// another CPU's claim (the key may then be set: readers go by `used`). A row is never
    /// freed once used.
    pub used: u32,
    /// The entry's value; meaningful when `used` is 1.
    pub value: PathValue,
}
const _: () = assert!(core::mem::size_of::<PathSlot>() == 48);

/// A CPU's reserved rows ([`PATH_BLOCK_MAP`]): `next` up to, not including, `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PathClaimBlock {
    /// The next row to claim.
    pub next: u32,
    /// The end of the block.
    pub end: u32,
}
const _: () = assert!(core::mem::size_of::<PathClaimBlock>() == 8);

/// Cell `probe` (0-based) of `key` in the key index ([`PATH_INDEX_MAP`]).
///
/// The layout, and why: the XDP receiver writes up to 91 entries per datagram (spec
/// `lq-udp-wire.md`, "MUST process 91 entries"), 1.6 million a second at a 64 x 512
/// fabric's leaf. A BPF hash map lookup (jhash over the 20-octet key, bucket walk, key
/// compare through a helper call) was most of the 90-entry cost, and an open-addressed
/// table whose rows sit where the key hashes scatters one datagram's entries over the whole
/// table: a cache miss per entry, most of the receiver's time at that scale (issue 15).
/// So rows are claimed in arrival order (one datagram's new entries take adjacent rows)
/// and this index, a hash of our own with linear probing over `u64` cells, finds a key's
/// row. The receiver first tries the row after the previous entry's row (a helper
/// advertises its entries in the same order every time), and asks the index only when that
/// row holds another key: once per datagram in the steady state. The hash: a multiply-xor
/// mix of the five key words, then MurmurHash3's 32-bit finaliser, top bits taken (without
/// the finaliser, keys with consecutive remote Router-IDs fell into clusters: 23 of 40 950
/// such keys found no free cell in 32 probes at 31 % load; with it, none, longest run 15).
/// The reference model of the table (the differential test's) uses this same function, so
/// placement and `table_full` are identical on one CPU.
#[inline(always)]
pub const fn path_index_at(key: &PathKey, probe: u32) -> u32 {
    let mut h = key.spine_id.wrapping_mul(0x9e37_79b1);
    h = (h ^ key.spine_as).wrapping_mul(0x85eb_ca77);
    h = (h ^ key.remote_id).wrapping_mul(0xc2b2_ae3d);
    h = (h ^ key.remote_as).wrapping_mul(0x27d4_eb2f);
    h = (h ^ key.link_id).wrapping_mul(0x1656_67b1);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    ((h >> (32 - PATH_INDEX_BITS)).wrapping_add(probe)) & (PATH_INDEX_CAPACITY - 1)
}

/// `PathValue::flags`: the entry carried valid diagnostics.
pub const PATH_FLAG_DIAGNOSTICS: u8 = 0x01;
/// `PathValue::flags`: diagnostics say drops are active.
pub const PATH_FLAG_DROPS: u8 = 0x02;
/// `PathValue::flags`: the advertisement had the P (pfc-fabric) flag.
pub const PATH_FLAG_PFC_FABRIC: u8 = 0x04;

/// Value of the path quality table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PathValue {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the entry was last written.
    pub last_update_ns: u64,
    /// Available bandwidth, Gbps, binary32 bit pattern as on the wire.
    pub available_bandwidth_bits: u32,
    /// Link capacity, binary32 bits; meaningful when `PATH_FLAG_DIAGNOSTICS`.
    pub link_capacity_bits: u32,
    /// Sequence number of the datagram that wrote the entry.
    pub sequence: u16,
    /// LQS 0..=255.
    pub lqs: u8,
    /// CL 0..=7.
    pub cl: u8,
    /// `PATH_FLAG_*`.
    pub flags: u8,
    /// Diagnostics: normalized queue depth 0..=255.
    pub queue_depth: u8,
    /// Diagnostics: ECN marking rate code 0..=31.
    pub ecn_marking_rate: u8,
    /// Diagnostics: PFC pause fraction code 0..=31.
    pub pfc_pause_fraction: u8,
}
const _: () = assert!(core::mem::size_of::<PathValue>() == 24);

/// Slots per [`PathStampLine`]: one 64-octet cache line of `u32` stamp words.
pub const PATH_STAMPS_PER_LINE: usize = 16;
/// Lines of the stamp array: one stamp per path table slot.
pub const PATH_STAMP_LINES: u32 = PATH_TABLE_CAPACITY / PATH_STAMPS_PER_LINE as u32;
const _: () = assert!(PATH_STAMPS_PER_LINE.is_power_of_two());
const _: () = assert!(PATH_STAMP_LINES * PATH_STAMPS_PER_LINE as u32 == PATH_TABLE_CAPACITY);
/// A stamp counts units of 2^20 ns (1.05 ms) of `bpf_ktime_get_ns()`, modulo 2^16 (68.7 s).
pub const PATH_STAMP_SHIFT: u32 = 20;

/// One line of the path table's refresh stamps ([`PATH_STAMP_MAP`]).
///
/// Why a second array: the receiver rewrites every entry each T_notify, and the control
/// loop must notice an entry that stopped being refreshed (seed 003 section 6.5). Reading
/// the rows for that (48 octets each, then scattered over 6 MiB, each last written by the
/// other CPU) was most of lqd's work at 64 x 512 (issue 15). The XDP program also writes
/// each row's stamp here, 16 to a cache line (256 KiB for the whole table, which stays in
/// cache), so lqd sweeps the stamps instead of reading 32 768 rows, and reads a row only
/// when its stamp has not moved for a dead interval. A stamp is a hint: an entry is aged
/// only after its row says so.
///
/// Each stamp carries the LQS and CL the write stored ([`path_stamp_word`]), 16 slots to a
/// line (256 KiB for the whole table): at a 64 x 512 leaf every entry moves every T_notify
/// (noise), and a control step that read each changed entry's 48-octet row, last written
/// by the other CPU, spent about 30 ns a row on its copies of it, against about 2 ns for
/// 2 octets of LQS and CL read in slot order (issue 41, `bench step`'s compact floor).
/// One 32-bit store: a word's stamp, LQS and CL are always of the same write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct PathStampLine {
    /// [`path_stamp_word`] of the slots' last writes.
    pub words: [u32; PATH_STAMPS_PER_LINE],
}
const _: () = assert!(core::mem::size_of::<PathStampLine>() == 64);

/// The stamp of a write at `ns` (`bpf_ktime_get_ns()`).
#[inline(always)]
pub const fn path_stamp(ns: u64) -> u16 {
    (ns >> PATH_STAMP_SHIFT) as u16
}

/// The stamp word of a write at `ns` of an entry with `lqs` and `cl`: the stamp
/// ([`path_stamp`]) in bits 0-15, the LQS in bits 16-23, the CL (3 bits) in bits 24-26.
#[inline(always)]
pub const fn path_stamp_word(ns: u64, lqs: u8, cl: u8) -> u32 {
    path_stamp(ns) as u32 | (lqs as u32) << 16 | ((cl & 7) as u32) << 24
}

/// A stamp word's parts: (stamp, LQS, CL).
#[inline(always)]
pub const fn path_stamp_word_parts(word: u32) -> (u16, u8, u8) {
    (word as u16, (word >> 16) as u8, (word >> 24) as u8 & 7)
}

/// Where slot `slot`'s stamp lives: (line, index in the line).
#[inline(always)]
pub const fn path_stamp_at(slot: u32) -> (u32, usize) {
    (
        slot / PATH_STAMPS_PER_LINE as u32,
        slot as usize & (PATH_STAMPS_PER_LINE - 1),
    )
}

/// The earliest time a write stamped `stamp` can have happened, taking the latest such
/// time at or before `now_ns` (a stamp wraps every 68.7 s): a lower bound of the write's
/// time, never later than it for a write less than 68.7 s old.
#[inline(always)]
pub const fn path_stamp_time_ns(stamp: u16, now_ns: u64) -> u64 {
    let units = now_ns >> PATH_STAMP_SHIFT;
    let back = (units as u16).wrapping_sub(stamp) as u64;
    units.saturating_sub(back) << PATH_STAMP_SHIFT
}

/// Key of the neighbor table: (node-as, node-id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(C)]
pub struct NeighborKey {
    /// Node AS (0 when unqualified).
    pub node_as: u32,
    /// Router-ID, host order.
    pub node_id: u32,
}
const _: () = assert!(core::mem::size_of::<NeighborKey>() == 8);

/// Receive state of one neighbor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct NeighborValue {
    /// When the last datagram was accepted (CLOCK_MONOTONIC ns).
    pub last_seen_ns: u64,
    /// Datagrams accepted from this neighbor.
    pub accepted: u64,
    /// Last accepted sequence number.
    pub last_sequence: u16,
    /// Entry count of the last accepted datagram.
    pub last_entry_count: u16,
    /// Mode of the last accepted datagram (0 periodic, 1 triggered).
    pub last_mode: u8,
    /// Padding, always 0.
    pub _pad: [u8; 3],
}
const _: () = assert!(core::mem::size_of::<NeighborValue>() == 24);

/// How many changed entries a [`PathEvent`] names by their path-table slot.
pub const EVENT_SLOTS: usize = 8;
/// An unused element of [`PathEvent::changed_slots`] (no slot has this index).
pub const NO_SLOT: u32 = u32::MAX;

/// [`PathEvent::flags`]: a changed entry of the datagram may take a path quality to or from 0,
/// which seed 003 section 6.4 applies at once ("a transition of any path_quality to or from
/// 0 ... SHOULD be applied immediately"): its LQS moved to or from 0, it moved at CL 7
/// before or after (the opt-in gray-failure prune reads an entry at CL 7), or it is new (a
/// path without an entry gets one). The receiver's other changes may only move weights at
/// their T_reweight boundary, and `lqd` reads them at a slower pace. Such an event goes to
/// [`ZERO_EVENT_MAP`], the others to [`EVENT_MAP`].
pub const EVENT_FLAG_ZERO_TRANSITION: u8 = 1;

/// Event sent on a ring buffer for every accepted datagram that changed an entry's LQS or
/// CL (or created an entry), so the controller reacts without polling: on [`ZERO_EVENT_MAP`]
/// with [`EVENT_FLAG_ZERO_TRANSITION`], else on [`EVENT_MAP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct PathEvent {
    /// When the datagram was processed (CLOCK_MONOTONIC ns).
    pub time_ns: u64,
    /// Sender AS.
    pub node_as: u32,
    /// Sender Router-ID.
    pub node_id: u32,
    /// Sequence number.
    pub sequence: u16,
    /// How many entries changed LQS or CL, or were new.
    pub changed: u16,
    /// Entries in the datagram.
    pub entries: u16,
    /// Mode (0 periodic, 1 triggered).
    pub mode: u8,
    /// `EVENT_FLAG_*`.
    pub flags: u8,
    /// The path-table slots of the changed entries, in datagram order, when there are at
    /// most [`EVENT_SLOTS`] of them (`changed <= EVENT_SLOTS`); the rest [`NO_SLOT`]. With
    /// them the controller reads those rows alone instead of every row of the sender
    /// (issue 15: a fabric where one entry in a thousand changes per T_notify). With more
    /// changes (the slots then hold the first [`EVENT_SLOTS`]) or from a receiver without
    /// slots (the reference in `receive`: all [`NO_SLOT`]) the event names the sender:
    /// [`PathEvent::named_slots`] is `None`.
    pub changed_slots: [u32; EVENT_SLOTS],
}
const _: () = assert!(core::mem::size_of::<PathEvent>() == 56);

impl Default for PathEvent {
    fn default() -> Self {
        Self {
            time_ns: 0,
            node_as: 0,
            node_id: 0,
            sequence: 0,
            changed: 0,
            entries: 0,
            mode: 0,
            flags: 0,
            changed_slots: [NO_SLOT; EVENT_SLOTS],
        }
    }
}

impl PathEvent {
    /// The event carries [`EVENT_FLAG_ZERO_TRANSITION`].
    pub fn zero_transition(&self) -> bool {
        self.flags & EVENT_FLAG_ZERO_TRANSITION != 0
    }

    /// The slots of the changed entries, when the event names them all; `None`: read every
    /// row of the sender.
    pub fn named_slots(&self) -> Option<&[u32]> {
        let slots = self.changed_slots.get(..usize::from(self.changed))?;
        slots.iter().all(|&s| s != NO_SLOT).then_some(slots)
    }
}

/// `ReceiverConfig::as_qualified`: accept only Q = 0 (or Q = 1 with AS 0).
pub const AS_QUALIFIED_NO: u8 = 0;
/// `ReceiverConfig::as_qualified`: accept only AS-qualified datagrams.
pub const AS_QUALIFIED_YES: u8 = 1;

/// The interfaces whose LQ datagrams go to lqd's socket receiver for authentication
/// (issue 39): ifindex -> 1, at most this many.
pub const AUTH_PASS_MAP: &str = "LQ_AUTH_PASS";
/// Capacity of [`AUTH_PASS_MAP`].
pub const AUTH_PASS_CAPACITY: u32 = 64;

/// Load-time configuration of the receiver, written by `lqd` to [`CONFIG_MAP`] index 0.
/// Until it is written the program passes every frame and counts `config_missing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct ReceiverConfig {
    /// A neighbor silent for longer than this is failed: any sequence number resynchronises
    /// it (miss_count x T_notify, seed 003 section 6.5).
    pub dead_interval_ns: u64,
    /// UDP destination port.
    pub udp_port: u16,
    /// `AS_QUALIFIED_NO` or `AS_QUALIFIED_YES`: the local `as-qualified` setting.
    pub as_qualified: u8,
    /// 1: pass consumed LQ datagrams on to the stack (`XDP_PASS`) instead of dropping them.
    pub pass_through: u8,
    /// Number of valid ranges in `as_plan`; 0 means no AS plan is configured.
    pub as_plan_len: u32,
    /// The AS plan.
    pub as_plan: [AsRange; AS_PLAN_MAX],
}
const _: () = assert!(core::mem::size_of::<ReceiverConfig>() == 16 + 8 * AS_PLAN_MAX);

impl ReceiverConfig {
    /// The configured AS plan as a slice.
    pub fn as_plan(&self) -> &[AsRange] {
        let n = (self.as_plan_len as usize).min(AS_PLAN_MAX);
        &self.as_plan[..n]
    }
}

/// Index of every counter of [`COUNTER_MAP`]. Each discard reason of the spec has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Counter {
    /// Datagrams accepted (check 11).
    Accepted = 0,
    /// Check 4.
    BadTtl = 1,
    /// Check 5.
    Truncated = 2,
    /// Check 5.
    BadVersion = 3,
    /// Check 6.
    BadMode = 4,
    /// Check 7.
    BadLength = 5,
    /// Check 8.
    AsMismatch = 6,
    /// Check 9.
    BadValue = 7,
    /// Check 10.
    StaleSeq = 8,
    /// Check 11: entries not stored because their Remote AS is outside the AS plan.
    AsMismatchEntry = 9,
    /// Entries written to the path table.
    EntriesStored = 10,
    /// Entries that could not be written because the path table is full.
    TableFull = 11,
    /// Change events lost because the ring buffer was full.
    EventsLost = 12,
    /// Frames that are not LQ datagrams (passed untouched).
    NotOurs = 13,
    /// Frames seen before `lqd` wrote the configuration (passed untouched).
    ConfigMissing = 14,
    /// Neighbors resynchronised (unknown or failed neighbor, any sequence accepted).
    Resync = 15,
    /// Path table slots claimed by new entries (a slot, once claimed, keeps its key): `lqd`
    /// scans the whole table only when this count moves.
    SlotsClaimed = 16,
}

/// Number of counters.
pub const COUNTER_COUNT: u32 = 17;

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; COUNTER_COUNT as usize] = [
        Self::Accepted,
        Self::BadTtl,
        Self::Truncated,
        Self::BadVersion,
        Self::BadMode,
        Self::BadLength,
        Self::AsMismatch,
        Self::BadValue,
        Self::StaleSeq,
        Self::AsMismatchEntry,
        Self::EntriesStored,
        Self::TableFull,
        Self::EventsLost,
        Self::NotOurs,
        Self::ConfigMissing,
        Self::Resync,
        Self::SlotsClaimed,
    ];

    /// The counter's name (the spec's discard reason names where it has one).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::BadTtl => "bad_ttl",
            Self::Truncated => "truncated",
            Self::BadVersion => "bad_version",
            Self::BadMode => "bad_mode",
            Self::BadLength => "bad_length",
            Self::AsMismatch => "as_mismatch",
            Self::BadValue => "bad_value",
            Self::StaleSeq => "stale_seq",
            Self::AsMismatchEntry => "as_mismatch_entry",
            Self::EntriesStored => "entries_stored",
            Self::TableFull => "table_full",
            Self::EventsLost => "events_lost",
            Self::NotOurs => "not_ours",
            Self::ConfigMissing => "config_missing",
            Self::Resync => "resync",
            Self::SlotsClaimed => "slots_claimed",
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] plain integers with explicit padding fields and
    // asserted sizes: every bit pattern is valid and there are no implicit holes.
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PathKey {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PathValue {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PathSlot {}
    // SAFETY: #[repr(C)] plain integers, no padding (size asserted).
    unsafe impl aya::Pod for super::PathClaimBlock {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::NeighborKey {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::NeighborValue {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PathEvent {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::PathStampLine {}
    // SAFETY: #[repr(C)] plain data with explicit padding (sizes asserted); every bit pattern is a value.
    unsafe impl aya::Pod for super::ReceiverConfig {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    #[test]
    fn a_stamps_time_is_a_lower_bound_within_one_unit() {
        let unit = 1u64 << PATH_STAMP_SHIFT;
        for write in [
            0u64,
            5,
            unit - 1,
            unit,
            3 * unit + 7,
            70_000_000_000,
            1 << 40,
        ] {
            let s = path_stamp(write);
            // Read back at the write and up to one wrap (68.7 s) later.
            for later in [0, 1, unit, 40_000_000, 68_000_000_000] {
                let t = path_stamp_time_ns(s, write + later);
                assert!(t <= write && write - t < unit, "{write} + {later}: {t}");
            }
        }
        // A stamp from the future (a torn read) maps to the past, never past `now`.
        assert!(path_stamp_time_ns(path_stamp(10 * unit), 9 * unit) < 9 * unit);
        assert_eq!(path_stamp_at(0), (0, 0));
        assert_eq!(path_stamp_at(17), (1, 1));
        assert_eq!(
            path_stamp_at(PATH_TABLE_CAPACITY - 1),
            (PATH_STAMP_LINES - 1, PATH_STAMPS_PER_LINE - 1)
        );
    }

    #[test]
    fn a_stamp_word_carries_the_writes_stamp_lqs_and_cl() {
        let unit = 1u64 << PATH_STAMP_SHIFT;
        for (ns, lqs, cl) in [(0, 0, 0), (5 * unit + 3, 255, 7), (u64::MAX, 72, 1)] {
            let w = path_stamp_word(ns, lqs, cl);
            assert_eq!(path_stamp_word_parts(w), (path_stamp(ns), lqs, cl));
        }
        // A CL beyond 3 bits keeps its low bits, as the wire's 3-bit field.
        assert_eq!(path_stamp_word_parts(path_stamp_word(0, 1, 9)).2, 1);
        assert_eq!(path_stamp_word(0, 0, 7) >> 27, 0, "bits 27-31 stay 0");
    }

    fn covered(range: AsRange, asn: u32) -> bool {
        as_range_prefixes(range).any(|(len, first)| {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            asn & mask == first
        })
    }

    #[test]
    fn whole_space_and_single_values() {
        let all: Vec<_> = as_range_prefixes(AsRange {
            first: 0,
            last: u32::MAX,
        })
        .collect();
        assert_eq!(all, [(0, 0)]);
        let one: Vec<_> = as_range_prefixes(AsRange::single(65001)).collect();
        assert_eq!(one, [(32, 65001)]);
        assert_eq!(as_range_prefixes(AsRange { first: 2, last: 1 }).count(), 0);
        assert!(
            as_range_prefixes(AsRange {
                first: 1,
                last: u32::MAX - 1
            })
            .count()
                <= 62
        );
    }

    proptest! {
        #[test]
        fn prefixes_cover_exactly_the_range(a in any::<u32>(), b in any::<u32>(), probe in any::<u32>()) {
            let range = AsRange { first: a.min(b), last: a.max(b) };
            prop_assert!(as_range_prefixes(range).count() <= 62);
            for asn in [probe, range.first, range.last, range.first.wrapping_sub(1), range.last.wrapping_add(1)] {
                prop_assert_eq!(covered(range, asn), range.contains(asn), "asn {}", asn);
            }
        }
    }
}
