//! The XDP LQ receiver.
//!
//! `lq_receiver` (XDP): the leaf's fast plane. It applies receive checks 1-11 of
//! `spec/lq-udp-wire.md` in the spec's order, exactly as `lq_common::receive` does (the two
//! are differentially tested), writes every accepted entry into the path quality table of
//! seed 003 section 6.2, counts every discard under its own reason, and signals changes on a
//! ring buffer. Frames that are not LQ datagrams get `XDP_PASS` untouched.

use core::ffi::c_void;

use crate::atomic::{compare_exchange_u64, fetch_add_u64};
use aya_ebpf::{
    bindings::{BPF_NOEXIST, xdp_action},
    btf_maps::{Array, HashMap, LpmTrie, PerCpuArray, RingBuf},
    helpers::{bpf_ktime_get_ns, bpf_loop, bpf_xdp_load_bytes},
    macros::{btf_map, xdp},
    maps::lpm_trie::Key,
    programs::XdpContext,
};
use lq_common::{
    auth::{FLAG_A, MAX_DATAGRAM_LEN, MAX_TRAILER_LEN, TRAILER_HEADER_LEN, TRAILER_TYPE_MAC},
    frame::{
        ETH_HLEN, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, GTSM_TTL, IPPROTO_UDP,
        IPV6_HLEN, UDP_HLEN, VLAN_HLEN,
    },
    maps::{
        AS_PLAN_PREFIX_CAPACITY, AS_QUALIFIED_YES, AUTH_PASS_CAPACITY, COUNTER_COUNT, Counter,
        EVENT_FLAG_ZERO_TRANSITION, EVENT_RING_BYTES, EVENT_SLOTS, NEIGHBOR_CAPACITY, NO_SLOT,
        NeighborKey, NeighborValue, PATH_CLAIM_BLOCK, PATH_FLAG_DIAGNOSTICS, PATH_FLAG_DROPS,
        PATH_FLAG_PFC_FABRIC, PATH_INDEX_CAPACITY, PATH_SLOT_PROBES, PATH_STAMP_LINES,
        PATH_TABLE_CAPACITY, PathClaimBlock, PathEvent, PathKey, PathSlot, PathStampLine,
        PathValue, ReceiverConfig, ZERO_EVENT_RING_BYTES, path_index_at, path_stamp_at,
        path_stamp_word,
    },
    receive::neighbor_failed,
    wire::{
        AS_LEN, DIAG_FLAG_X, DIAGNOSTICS_LEN, ENTRY_BASE_LEN, ENTRY_FLAG_V, FLAG_D, FLAG_P, FLAG_Q,
        HEADER_LEN, MAX_ENTRIES, VERSION, bandwidth_bits_valid, serial_gt,
    },
};

/// The path table: rows claimed in arrival order, found through [`LQ_PATH_INDEX`]
/// (`lq_common::maps::path_index_at` says why). Memory-mappable (`BPF_F_MMAPABLE`), so
/// that lqd reads the rows in place at every control step instead of copying the whole
/// array through a system call (issue 15).
#[btf_map]
static LQ_PATHS: Array<
    PathSlot,
    { PATH_TABLE_CAPACITY as usize },
    { aya_ebpf::bindings::BPF_F_MMAPABLE as usize },
> = Array::new();

/// Every slot's refresh stamp with its LQS and CL, 16 to a cache line
/// (`lq_common::maps::PathStampLine` says why): written after the slot, memory-mappable
/// like the table.
#[btf_map]
static LQ_PATH_STAMPS: Array<
    PathStampLine,
    { PATH_STAMP_LINES as usize },
    { aya_ebpf::bindings::BPF_F_MMAPABLE as usize },
> = Array::new();

/// The key index: cell -> row + 1 (0: free), open addressing from `path_index_at`.
#[btf_map]
static LQ_PATH_INDEX: Array<u64, { PATH_INDEX_CAPACITY as usize }> = Array::new();

/// Rows of `LQ_PATHS` reserved so far, in blocks, at index 0
/// (`lq_common::maps::PATH_ROWS_MAP`).
#[btf_map]
static LQ_PATH_ROWS: Array<u64, 1> = Array::new();

/// This CPU's reserved rows not claimed yet (`lq_common::maps::PATH_CLAIM_BLOCK` says why).
#[btf_map]
static LQ_PATH_BLOCK: PerCpuArray<PathClaimBlock, 1> = PerCpuArray::new();

#[btf_map]
static LQ_NEIGHBORS: HashMap<NeighborKey, NeighborValue, { NEIGHBOR_CAPACITY as usize }> =
    HashMap::new();

#[btf_map]
static LQ_COUNTERS: PerCpuArray<u64, { COUNTER_COUNT as usize }> = PerCpuArray::new();

#[btf_map]
static LQ_CONFIG: Array<ReceiverConfig, 1> = Array::new();

/// The interfaces whose LQ datagrams must be authenticated (issue 39; `[receiver]
/// authentication`): ifindex -> 1. Their datagrams go up to lqd's socket receiver, which
/// checks the MAC and hands each authentic one back to this program through
/// BPF_PROG_TEST_RUN with the loopback as its ingress (never in this map). Not pinned:
/// written by every start.
#[btf_map]
static LQ_AUTH_PASS: HashMap<u32, u32, { AUTH_PASS_CAPACITY as usize }> = HashMap::new();

#[btf_map]
static LQ_AS_PLAN: LpmTrie<[u8; 4], u8, { AS_PLAN_PREFIX_CAPACITY as usize }> = LpmTrie::new();

/// The change events lqd reads at its paced steps.
#[btf_map]
static LQ_EVENTS: RingBuf<PathEvent, { EVENT_RING_BYTES as usize }> = RingBuf::new();

/// The change events with `EVENT_FLAG_ZERO_TRANSITION`, which lqd reads at once (seed 003
/// section 6.4): a ring of their own, so that the loop can wait out its pace on the other
/// while it listens to this one.
#[btf_map]
static LQ_ZERO_EVENTS: RingBuf<PathEvent, { ZERO_EVENT_RING_BYTES as usize }> = RingBuf::new();

/// Check 11's state in the current datagram, per CPU ([`StoreState`]).
#[btf_map]
static LQ_STORE_STATE: PerCpuArray<StoreState, 1> = PerCpuArray::new();

/// What check 11's callbacks carry from one entry to the next, in a map rather than in
/// [`EntryLoop`] on the stack. The verifier tracks a stack slot's value: it knew the
/// changed count as a constant (0, 1, 2, ...) bounding an index, and the row after a row
/// as one more than a row it had looked up, a new state at every call of the callback,
/// so it walked the fast path once per value (past its million instructions). A value
/// loaded from a map is a scalar it does not track. The changed entries' slots are here
/// too: the stack has no room left for them (the verifier's 512 octets are the whole call
/// chain's).
#[repr(C)]
struct StoreState {
    /// The row after the last entry's row: where the next entry most likely is (a helper
    /// advertises its entries in the same order every time, and new ones take adjacent
    /// rows). [`NO_SLOT`] before the first entry.
    next_row: u32,
    /// Entries stored (`entries_stored`).
    stored: u32,
    /// Rows this datagram's new entries claimed (`slots_claimed`).
    claimed: u32,
    /// Entries stored that were new or whose LQS or CL changed.
    changed: u32,
    /// 1: one of them may take a path quality to or from 0 (`EVENT_FLAG_ZERO_TRANSITION`).
    zero_transition: u32,
    /// The next entry to store. Here, not in [`EntryLoop`]: it bounds the entry offsets,
    /// and a precise value on the stack with a new range at every call kept the verifier
    /// from seeing that the calls converge.
    cursor: u32,
    /// The slots of the first [`EVENT_SLOTS`] of them; the second half is spare
    /// ([`StoreState::note`]).
    slots: [u32; 2 * EVENT_SLOTS],
}

impl StoreState {
    /// Notes an entry written to row `slot` (`changed`: [`Placed::changed`]); a changed one
    /// is named by the event while there is room. Without branches, each of which would
    /// double the states the verifier walks per entry of the fast path: the slot is
    /// written at the changed count whether the entry changed or not (a later changed
    /// entry overwrites it; the event reads the first `changed` only), and past
    /// [`EVENT_SLOTS`] into the spare half.
    #[inline(always)]
    fn note(&mut self, changed: u32, slot: u32) {
        self.stored += 1;
        self.next_row = slot.wrapping_add(1);
        let i = self.changed as usize;
        // All ones when `i` >= EVENT_SLOTS: then a spare element (EVENT_SLOTS | i).
        let spare = ((EVENT_SLOTS as isize - 1 - i as isize) >> (isize::BITS - 1)) as usize;
        self.slots[(i | (spare & EVENT_SLOTS)) & (2 * EVENT_SLOTS - 1)] = slot;
        self.changed += changed & CHANGED;
        self.zero_transition |= changed >> ZERO_TRANSITION_SHIFT;
    }
}
const _: () = assert!(EVENT_SLOTS.is_power_of_two());

/// This CPU's check 11 state.
#[inline(always)]
fn store_state() -> Option<&'static mut StoreState> {
    this_cpu(&LQ_STORE_STATE)
}

/// The XDP entry point: thin, everything happens in [`try_receive`].
#[xdp]
pub fn lq_receiver(ctx: XdpContext) -> u32 {
    try_receive(&ctx)
}

/// An empty XDP program that passes everything: the baseline the benchmarks measure the
/// receiver's cost for non-LQ traffic against (`xdp_non_lq_ratio`, `veth_pps_ratio`).
#[xdp]
pub fn lq_baseline_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// What to do with the frame once it has been counted.
enum Outcome {
    /// Not ours: pass untouched.
    Pass,
    /// An LQ datagram (accepted or discarded): consumed.
    Consumed,
    /// An LQ datagram on an interface that requires authentication: to the stack, for
    /// lqd's socket receiver.
    Authenticate,
}

#[inline(always)]
fn count(counter: Counter) {
    count_n(counter, 1);
}

#[inline(always)]
fn count_n(counter: Counter, n: u64) {
    if let Some(p) = LQ_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot of this CPU; XDP runs with preemption disabled.
        unsafe { *p += n };
    }
}

/// The one bounds-checked packet accessor: a pointer to `N` octets at `offset`, or `None`
/// when the frame is shorter.
#[inline(always)]
fn bytes_at<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<[u8; N]> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + N > end {
        return None;
    }
    // SAFETY: the range [start + offset, start + offset + N) lies inside the packet, just
    // checked against data_end; [u8; N] has alignment 1.
    Some(unsafe { *((start + offset) as *const [u8; N]) })
}

/// A pointer to the `N` octets at `offset`, or `None` when the frame is shorter: for
/// headers of which only some octets are read (one bounds check, no copy).
#[inline(always)]
fn header_at<const N: usize>(ctx: &XdpContext, offset: usize) -> Option<*const u8> {
    let start = ctx.data();
    if start + offset + N > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *const u8)
}

#[inline(always)]
fn be16_at(ctx: &XdpContext, offset: usize) -> Option<u16> {
    bytes_at::<2>(ctx, offset).map(u16::from_be_bytes)
}

fn try_receive(ctx: &XdpContext) -> u32 {
    let Some(cfg) = LQ_CONFIG.get(0) else {
        count(Counter::ConfigMissing);
        return xdp_action::XDP_PASS;
    };
    if cfg.udp_port == 0 {
        count(Counter::ConfigMissing);
        return xdp_action::XDP_PASS;
    }
    match classify_and_receive(ctx, cfg) {
        Outcome::Pass => {
            count(Counter::NotOurs);
            xdp_action::XDP_PASS
        }
        Outcome::Consumed if cfg.pass_through != 0 => xdp_action::XDP_PASS,
        Outcome::Consumed => xdp_action::XDP_DROP,
        Outcome::Authenticate => xdp_action::XDP_PASS,
    }
}

/// Checks 1-4: find the UDP payload of an LQ datagram.
#[inline(always)]
fn classify_and_receive(ctx: &XdpContext, cfg: &ReceiverConfig) -> Outcome {
    // Check 1: Ethernet II with at most one 802.1Q / 802.1ad tag.
    let Some(mut ethertype) = be16_at(ctx, 12) else {
        return Outcome::Pass;
    };
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let Some(inner) = be16_at(ctx, 16) else {
            return Outcome::Pass;
        };
        ethertype = inner;
        l3 = ETH_HLEN + VLAN_HLEN;
    }
    // Check 2. Most frames that are not ours stop at the protocol, so it is read first and
    // alone; the rest of the header only for UDP (every failed check is the same Pass, so
    // the order does not change a verdict). One bounds check covers the fixed header, and
    // only the octets checked are loaded (a copy of the 20 octets was most of the cost of a
    // frame that is not ours).
    let (l4, ttl) = if ethertype == ETH_P_IP {
        let Some(ip) = header_at::<20>(ctx, l3) else {
            return Outcome::Pass;
        };
        // SAFETY: `ip` points to 20 octets inside the frame (header_at).
        let (ver_ihl, frag_hi, frag_lo, ttl, proto) =
            unsafe { (*ip, *ip.add(6), *ip.add(7), *ip.add(8), *ip.add(9)) };
        if proto != IPPROTO_UDP {
            return Outcome::Pass;
        }
        let ihl = usize::from(ver_ihl & 0x0f) * 4;
        if ver_ihl >> 4 != 4 || ihl < 20 || (frag_hi & 0x3f) | frag_lo != 0 {
            return Outcome::Pass;
        }
        (l3 + ihl, ttl)
    } else if ethertype == ETH_P_IPV6 {
        // The fixed header must be complete for the UDP header to follow it.
        let Some(ip) = header_at::<IPV6_HLEN>(ctx, l3) else {
            return Outcome::Pass;
        };
        // SAFETY: `ip` points to IPV6_HLEN octets inside the frame (header_at).
        let (ver, next, hop_limit) = unsafe { (*ip >> 4, *ip.add(6), *ip.add(7)) };
        if next != IPPROTO_UDP || ver != 6 {
            return Outcome::Pass;
        }
        (l3 + IPV6_HLEN, hop_limit)
    } else {
        return Outcome::Pass;
    };
    // Check 3.
    let Some(udp) = header_at::<UDP_HLEN>(ctx, l4) else {
        return Outcome::Pass;
    };
    // SAFETY: `udp` points to UDP_HLEN octets inside the frame (header_at).
    let (dport, ulen) = unsafe {
        (
            u16::from_be_bytes([*udp.add(2), *udp.add(3)]),
            u16::from_be_bytes([*udp.add(4), *udp.add(5)]),
        )
    };
    if dport != cfg.udp_port {
        return Outcome::Pass;
    }
    // An uplink that requires authentication: up to lqd's socket receiver, untouched.
    // SAFETY: `ctx.ctx` is the program's context; `ingress_ifindex` is a plain field.
    let ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    // SAFETY: the value is only tested for presence.
    if unsafe { LQ_AUTH_PASS.get(ifindex) }.is_some() {
        return Outcome::Authenticate;
    }
    // Check 4.
    if ttl != GTSM_TTL {
        count(Counter::BadTtl);
        return Outcome::Consumed;
    }
    let udp_len = usize::from(ulen);
    let frame_len = ctx.data_end() - ctx.data();
    if udp_len < UDP_HLEN || l4 + udp_len > frame_len {
        count(Counter::Truncated);
        return Outcome::Consumed;
    }
    if let Err(counter) = receive_payload(ctx, cfg, l4 + UDP_HLEN, udp_len - UDP_HLEN) {
        count(counter);
    }
    Outcome::Consumed
}

/// Whether `asn` lies inside the configured AS plan: one longest-prefix-match lookup in the
/// trie `lqd` fills with the plan's ranges cut into prefixes. A lookup costs the verifier
/// two paths, where range comparisons cost it one path per combination of outcomes.
#[inline(always)]
fn in_as_plan(asn: u32) -> bool {
    LQ_AS_PLAN.get(&Key::new(32, asn.to_be_bytes())).is_some()
}

/// Room for the largest payload this receiver accepts, rounded up.
const SCRATCH_LEN: usize = 2688;
const _: () = assert!(SCRATCH_LEN >= MAX_DATAGRAM_LEN + 4);
/// One payload-sized buffer per CPU. The payload is copied here with one
/// `bpf_xdp_load_bytes` call and parsed from map memory: the entry loops then do not depend
/// on the frame's layout (VLAN tag, IPv4 options, IPv6), so the verifier checks them once
/// instead of once per layout, and the program stays far below the verifier's limits.
#[btf_map]
static LQ_SCRATCH: PerCpuArray<[u8; SCRATCH_LEN], 1> = PerCpuArray::new();

/// Check 7's rest: the `excess` octets after the entries at packet offset `at`
/// (`excess_and_a >> 1`) are none without the A flag (`excess_and_a & 1`) and exactly one
/// trailer with it; 1 when that holds, else 0. Inlined: as a subprogram of its own
/// (a BPF-to-BPF call between the header checks and the entry loops) the program
/// exceeded the verifier's million instructions; inlined on the opaque value it costs
/// about 250 more (`verifier_budget`).
#[inline(always)]
fn trailer_ok(ctx: &XdpContext, at: usize, excess_and_a: u32) -> u32 {
    let excess = excess_and_a >> 1;
    if excess_and_a & 1 == 0 {
        return u32::from(excess == 0);
    }
    match trailer_len_in_packet(ctx, at) {
        Some(t) => u32::from(excess as usize == t),
        None => 0,
    }
}

/// The Trailer Length of the authentication trailer at packet offset `at`, when its Type
/// is a MAC's and the length is one a trailer may have; `None` otherwise, or when the
/// packet ends first (check 7). Read from the packet with a helper rather than from the
/// scratch copy: an offset into the scratch buffer that depends on the entry count would
/// make the verifier track the count precisely, one state per count (the program then
/// exceeded the verifier's million instructions).
#[inline(always)]
fn trailer_len_in_packet(ctx: &XdpContext, at: usize) -> Option<usize> {
    let mut h = [0u8; 4];
    // SAFETY: the helper checks `at + 4` against the packet and writes at most 4 octets
    // into `h`.
    let rc = unsafe { bpf_xdp_load_bytes(ctx.ctx, at as u32, h.as_mut_ptr().cast(), 4) };
    if rc != 0 || h[0] != TRAILER_TYPE_MAC {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    (TRAILER_HEADER_LEN..=MAX_TRAILER_LEN)
        .contains(&len)
        .then_some(len)
}

/// Big-endian u32 at `at` of the scratch buffer; `None` past its end.
#[inline(always)]
fn scratch_be32(buf: &[u8; SCRATCH_LEN], at: usize) -> Option<u32> {
    if at + 4 > SCRATCH_LEN {
        return None;
    }
    Some(u32::from_be_bytes([
        buf[at],
        buf[at + 1],
        buf[at + 2],
        buf[at + 3],
    ]))
}

/// What the per-entry callbacks of `bpf_loop` need to know about the datagram.
///
/// The entries are walked with `bpf_loop` rather than a bounded loop: the verifier checks a
/// callback body once, with the index unknown, instead of once per iteration and per path,
/// which kept a 91-iteration loop at hundreds of thousands of verified instructions.
/// Everything the callbacks read from here is re-bounded (masks, checks), since the
/// verifier knows nothing about values loaded from the stack of another frame.
#[repr(C)]
struct EntryLoop {
    hlen: u64,
    elen: u64,
    q: u64,
    d: u64,
    now: u64,
    node_as: u32,
    node_id: u32,
    sequence: u16,
    flags_common: u8,
    check_remote_as: u8,
    error: u32,
    /// The datagram's entry count.
    count: u64,
}

/// This CPU's element of a one-element per-CPU map: the scratch buffer and the state the
/// bpf_loop callbacks share.
///
/// A caller must not hold the reference across a `bpf_loop` whose callback takes its own
/// from the same map: it takes it anew afterwards.
// The element is per-CPU memory the kernel hands out, not part of the map handle: the
// handle is shared, the element this CPU's alone (the rule above).
#[allow(clippy::mut_from_ref)]
#[inline(always)]
fn this_cpu<T>(map: &'static PerCpuArray<T, 1>) -> Option<&'static mut T> {
    // SAFETY: this CPU's element; XDP runs with preemption disabled, so no other program
    // run uses it until this one returns (and the rule above keeps one reference at a time
    // within this run).
    map.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// The scratch buffer of this CPU.
#[inline(always)]
fn scratch() -> Option<&'static mut [u8; SCRATCH_LEN]> {
    this_cpu(&LQ_SCRATCH)
}

/// Offset of entry `index`, or `None` when it would leave the scratch buffer. Always a
/// multiple of 4: header and entry lengths are (16 or 20, 16 to 28), and the mask makes it
/// so for the verifier too, so [`word`] reads whole aligned words.
#[inline(always)]
fn entry_offset(lp: &EntryLoop, index: u64) -> Option<usize> {
    if index >= MAX_ENTRIES as u64 {
        return None;
    }
    let e = ((lp.hlen & 31) as usize + index as usize * (lp.elen & 31) as usize) & !3;
    if e + ENTRY_BASE_LEN + AS_LEN + DIAGNOSTICS_LEN > SCRATCH_LEN {
        return None;
    }
    Some(e)
}

/// The big-endian word at `at` of the scratch buffer: one aligned load where four byte loads
/// with a bounds check each were most of an entry's parsing cost (per-entry cost counts 91
/// times per datagram).
///
/// `at` must be a multiple of 4 with `at + 4 <= SCRATCH_LEN`: an entry offset from
/// [`entry_offset`] plus a multiple of 4 below `ENTRY_BASE_LEN + AS_LEN + DIAGNOSTICS_LEN`.
#[inline(always)]
fn word(buf: &[u8; SCRATCH_LEN], at: usize) -> u32 {
    // SAFETY: in bounds per the contract above; the scratch buffer is a map value (8-octet
    // aligned) and `at` a multiple of 4, so the u32 load is aligned.
    u32::from_be(unsafe { buf.as_ptr().add(at).cast::<u32>().read() })
}

/// How many entries one call of [`check_entry_values`] checks: at least [`MAX_ENTRIES`],
/// so a datagram's check 9 is one call. Each call is a BPF-to-BPF call and return; on
/// kernels that route every return through a mitigation thunk (AMD's SRSO "safe RET",
/// retbleed) a call costs several nanoseconds, and check 9's body is small enough to
/// repeat without growing the verifier's walk much. Measured side by side (`bench_xdp`, 90
/// entries, AMD EPYC guest, kernel 6.18.44, issue 41): 1 273-1 280 ns with one call a
/// datagram against 1 481-1 537 ns with four entries a call (23 calls); verified
/// instructions 147 789 against 79 653. Not exactly `MAX_ENTRIES`: with a bound of 91 the
/// verifier walked 317 017 instructions (92: 153 060; 128: 184 385).
const CHECKS_PER_CALL: u64 = 96;
const _: () = assert!(CHECKS_PER_CALL >= MAX_ENTRIES as u64);

/// bpf_loop callback of check 9: checks entries `CHECKS_PER_CALL * call` onwards (at most
/// that many); 1 (stop) with `error` set at the first invalid value.
#[inline(never)]
extern "C" fn check_entry_values(call: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the EntryLoop passed to bpf_loop by receive_payload.
    let lp = unsafe { &mut *ctx.cast::<EntryLoop>() };
    for k in 0..CHECKS_PER_CALL {
        let index = call * CHECKS_PER_CALL + k;
        if index >= lp.count {
            break;
        }
        if check_one(lp, index) != 0 {
            return 1;
        }
    }
    0
}

/// Check 9 for entry `index`: 1 with `error` set when a value is invalid.
#[inline(always)]
fn check_one(lp: &mut EntryLoop, index: u64) -> i64 {
    let (Some(buf), Some(e)) = (scratch(), entry_offset(lp, index)) else {
        lp.error = 1;
        return 1;
    };
    let mut valid = bandwidth_bits_valid(word(buf, e + 8));
    let lqs_flags = word(buf, e + 12);
    if lp.d != 0 && (lqs_flags >> 16) as u8 & ENTRY_FLAG_V != 0 {
        let g = e + ENTRY_BASE_LEN + (lp.q & 1) as usize * AS_LEN;
        valid &= bandwidth_bits_valid(word(buf, g));
    }
    if valid {
        0
    } else {
        lp.error = 1;
        1
    }
}

/// bpf_loop callback of check 11: stores the entries from the cursor
/// ([`StoreState::cursor`]) on by the fast path while each is in the row after the last
/// one's (a nested bpf_loop of [`store_entries_fast`]), then the entry it stopped at
/// wherever its key is, and returns; 1 (stop) once every entry is taken. Every call takes
/// at least one entry, so `count` calls are enough. In the steady state the first
/// call stores the first entry (no row before it to try) and the second all the others;
/// rows claimed by several CPUs at once leave a gap between blocks, where the fast path
/// stops for one entry and goes on.
///
/// The fast path runs first and the key index's probes last: no path of the verifier's
/// walk goes on after the probes, which would walk the entries after them once per
/// outcome of the probes (118 000 to 245 000 instructions with both in one body;
/// docs/architecture.md, "The XDP receiver and the verifier").
#[inline(never)]
extern "C" fn store_entries(_call: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the EntryLoop passed to bpf_loop by receive_payload; shared, since
    // the fast path reads it through the same pointer meanwhile.
    let lp = unsafe { &*ctx.cast::<EntryLoop>() };
    let Some((cursor, next_row)) = store_state().map(|st| (u64::from(st.cursor), st.next_row))
    else {
        return 1;
    };
    if cursor >= lp.count {
        return 1;
    }
    // With an AS plan every entry takes the path below, which has the plan's lookup.
    if lp.check_remote_as == 0 && next_row != NO_SLOT {
        // SAFETY: bpf_loop calls the callback at most 12 times with a pointer to `lp`,
        // which outlives the call.
        unsafe {
            bpf_loop(
                (lp.count - cursor).div_ceil(STORES_PER_CALL) as u32,
                store_entries_fast as *mut c_void,
                ctx,
                0,
            )
        };
    }
    // Taken after the fast path, which took its own.
    let Some(state) = store_state() else {
        return 1;
    };
    let index = state.cursor;
    if u64::from(index) >= lp.count {
        return 1;
    }
    state.cursor = index + 1;
    let (Some(buf), Some(probe), Some(e)) =
        (scratch(), probe_state(), entry_offset(lp, u64::from(index)))
    else {
        return 1;
    };
    // Built in the probes' state, not on this frame's stack: the call chain's stacks
    // together have 512 octets.
    (probe.key, probe.value) = entry_key_value(lp, buf, e);
    if lp.check_remote_as != 0 && !in_as_plan(probe.key.remote_as) {
        count(Counter::AsMismatchEntry);
        return 0;
    }
    // Usually the row after the previous entry's holds this key: one array access and one
    // key compare, on the cache line next to the last (issue 15: scattered rows cost a
    // cache miss per entry at a 64 x 512 fabric). Else the key index, probed in a bpf_loop
    // callback, which the verifier checks once instead of once per probe and per path of
    // this function (inline probes made it walk 140 000 instructions); in the steady
    // state that is once per datagram. A reader copying a row at the same moment may see
    // a mix of old and new fields of this one entry; the next read (at most one T_notify
    // later) is whole.
    let placed = match update_row(state.next_row, &probe.key, &probe.value, true) {
        Some(placed) => placed,
        None => {
            probe.outcome = PROBE_NEXT;
            // SAFETY: bpf_loop calls the callback at most PATH_SLOT_PROBES times; it takes
            // its state from LQ_PROBE_STATE, not from a context.
            unsafe {
                bpf_loop(
                    PATH_SLOT_PROBES,
                    probe_cell as *mut c_void,
                    core::ptr::null_mut(),
                    0,
                )
            };
            // Taken after the probes, which took their own.
            let Some(probe) = probe_state() else {
                return 1;
            };
            if probe.outcome != PROBE_PLACED {
                count(Counter::TableFull);
                return 0;
            }
            Placed {
                changed: probe.changed,
                claimed: probe.claimed,
                slot: probe.slot,
            }
        }
    };
    state.claimed += placed.claimed;
    state.note(placed.changed, placed.slot);
    0
}

/// How many entries one call of [`store_entries_fast`] stores at most. As for check 9
/// ([`CHECKS_PER_CALL`]), each call is a BPF-to-BPF call and a thunked return; a datagram
/// of 91 entries in the steady state takes 12 calls instead of 91. Measured side by side
/// (`bench_xdp`, 90 entries, three runs each): 2 229-2 329 ns with 8, 2 478-3 529 with
/// 4, 2 934-3 272 with one entry a call; the verifier's walk: 34 000 instructions with 8,
/// 20 000 with 4. More is faster still but the verifier walks every entry of the fast
/// loop on its own, about 10 000 instructions each (issue 41, with one check call a
/// datagram, kernel 6.18.44): 16 a call took 1 200-1 227 ns for 233 549 verified
/// instructions against 1 273-1 280 ns and 147 789 with 8; 96 a call (one call) 1 145-1 167 ns
/// for 947 089, at the kernel's limit. Kept at 8: `verifier_budget.rs` fails above a
/// quarter of the limit, which a kernel's drift (a third between two 6.18 builds) must
/// not reach.
const STORES_PER_CALL: u64 = 8;

/// bpf_loop callback of [`store_entries`], the fast path: stores up to `STORES_PER_CALL`
/// entries from the cursor on while each is in the row after the previous entry's row,
/// the steady state's one array access and one key compare; 1 (stop) after the last entry
/// or at the first entry not in that row, the cursor left at it. It never probes the key
/// index (see [`store_entries`]).
#[inline(never)]
extern "C" fn store_entries_fast(_call: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the EntryLoop passed to bpf_loop by receive_payload.
    let lp = unsafe { &*ctx.cast::<EntryLoop>() };
    let (Some(buf), Some(state)) = (scratch(), store_state()) else {
        return 1;
    };
    for _ in 0..STORES_PER_CALL {
        let index = state.cursor;
        if u64::from(index) >= lp.count {
            return 1;
        }
        let placed = match entry_offset(lp, u64::from(index)) {
            Some(e) => {
                let (key, value) = entry_key_value(lp, buf, e);
                update_row(state.next_row, &key, &value, true)
            }
            None => None,
        };
        let Some(placed) = placed else {
            return 1;
        };
        state.note(placed.changed, placed.slot);
        state.cursor = index + 1;
    }
    0
}

/// The path table's key and value of the entry at offset `e` (from [`entry_offset`]).
///
/// Without branches: the AS and diagnostics words are read whatever the flags say
/// ([`entry_offset`] keeps them inside the buffer) and masked to 0 without them. A branch
/// here gives every path after it its own verifier state (a value with a constant 0 and
/// one with an unknown capacity are not the same state), so the callbacks after it, the
/// key index's probes, were walked once per combination.
#[inline(always)]
fn entry_key_value(lp: &EntryLoop, buf: &[u8; SCRATCH_LEN], e: usize) -> (PathKey, PathValue) {
    let q = (lp.q & 1) as u32;
    let key = PathKey {
        spine_as: lp.node_as,
        spine_id: lp.node_id,
        remote_as: word(buf, e + 16) & 0u32.wrapping_sub(q),
        remote_id: word(buf, e),
        link_id: word(buf, e + 4),
    };
    // Octets 12-15 of the entry: LQS, CL (3 bits) + flags, reserved.
    let lqs_flags = word(buf, e + 12);
    let cl_flags = (lqs_flags >> 16) as u8;
    // Diagnostics (D = 1 and V set): capacity, then queue depth, ECN rate << 3, PFC
    // fraction << 3 | X.
    let has_diag = (lp.d & 1) as u32 & u32::from(cl_flags >> ENTRY_FLAG_V.trailing_zeros()) & 1;
    let mask = 0u32.wrapping_sub(has_diag);
    let g = e + ENTRY_BASE_LEN + q as usize * AS_LEN;
    let diag = word(buf, g + 4) & mask;
    let pfc_x = (diag >> 8) as u8;
    let drops = (pfc_x >> DIAG_FLAG_X.trailing_zeros()) & 1;
    let value = PathValue {
        last_update_ns: lp.now,
        available_bandwidth_bits: word(buf, e + 8),
        link_capacity_bits: word(buf, g) & mask,
        sequence: lp.sequence,
        lqs: (lqs_flags >> 24) as u8,
        cl: cl_flags >> 5,
        flags: lp.flags_common | (PATH_FLAG_DIAGNOSTICS & mask as u8) | (PATH_FLAG_DROPS * drops),
        queue_depth: (diag >> 24) as u8,
        ecn_marking_rate: (diag >> 16) as u8 >> 3,
        pfc_pause_fraction: pfc_x >> 3,
    };
    (key, value)
}

/// [`Placed::changed`]: the entry is new, or its LQS or CL changed.
const CHANGED: u32 = 1;
/// [`Placed::changed`]'s bit saying that the change may take a path quality to or from 0
/// (`EVENT_FLAG_ZERO_TRANSITION`).
const ZERO_TRANSITION_SHIFT: u32 = 31;

/// Where an entry went ([`update_row`], [`place_by_index`]).
struct Placed {
    /// [`CHANGED`], with the bit at [`ZERO_TRANSITION_SHIFT`] when the change may take a
    /// path quality to or from 0; 0: unchanged.
    changed: u32,
    /// 1: it claimed a free row.
    claimed: u32,
    /// The row's index.
    slot: u32,
}

/// What one cell of the key index did with an entry.
enum Probe {
    /// Written to its row.
    Placed(Placed),
    /// The cell holds another key: probe the next.
    Next,
    /// The key is new and no row is left.
    Full,
}

/// Whether two keys are equal, with one branch instead of one per field (each branch of
/// an entry's path multiplies the states the verifier walks).
#[inline(always)]
fn same_key(a: &PathKey, b: &PathKey) -> bool {
    (a.spine_as ^ b.spine_as)
        | (a.spine_id ^ b.spine_id)
        | (a.remote_as ^ b.remote_as)
        | (a.remote_id ^ b.remote_id)
        | (a.link_id ^ b.link_id)
        == 0
}

/// Writes `key`'s entry into row `row` if the row holds that key (and, with
/// `published_only`, is in use: a row that lost a claim race holds its key unused, and
/// only the index may lead to a row not yet in use); `None` otherwise or past the table.
#[inline(always)]
fn update_row(row: u32, key: &PathKey, value: &PathValue, published_only: bool) -> Option<Placed> {
    let slot = LQ_PATHS.get_ptr_mut(row)?;
    // SAFETY: an element of the array map, alive as long as the map.
    let slot = unsafe { &mut *slot };
    if !same_key(&slot.key, key) || (published_only && slot.used == 0) {
        return None;
    }
    // Computed without branches, for the same reason as `same_key`: each comparison with a
    // constant is `(x - 1) >> 31`, 1 when x is 0 (x is an octet).
    let new = slot.used ^ 1;
    let moved = new | u32::from(slot.value.lqs ^ value.lqs) | u32::from(slot.value.cl ^ value.cl);
    let changed = (moved | moved.wrapping_neg()) >> 31;
    let is_zero = |x: u8| u32::from(x).wrapping_sub(1) >> 31;
    // Seed 003 section 6.4's exception: LQS to or from 0, any move at CL 7, a new entry.
    let crosses = new
        | is_zero(slot.value.lqs) ^ is_zero(value.lqs)
        | is_zero(slot.value.cl ^ 7)
        | is_zero(value.cl ^ 7);
    let changed = changed | (crosses & changed) << ZERO_TRANSITION_SHIFT;
    slot.value = *value;
    slot.used = 1;
    stamp(row, value);
    Some(Placed {
        changed,
        claimed: 0,
        slot: row,
    })
}

/// Probes cell `probe` of `key` in the key index: updates the row the cell leads to if it
/// holds the key; claims the next free row for the key if the cell is free.
///
/// A claim takes the next row of this CPU's block ([`claim_row`]), writes the row's key,
/// then publishes the row in the cell with a compare-and-exchange, then writes the value
/// and marks the row used: another CPU that reaches the cell meanwhile finds the key and
/// writes the same row. When another CPU published the cell first (for this key or a
/// colliding one), the claimed row stays unused (a hole, never read) and the entry goes
/// where the cell leads, or to the next cell.
#[inline(always)]
fn place_by_index(key: &PathKey, value: &PathValue, probe: u32) -> Probe {
    let Some(cell) = LQ_PATH_INDEX.get_ptr_mut(path_index_at(key, probe)) else {
        return Probe::Next;
    };
    // SAFETY: an element of the array map, 8-aligned, alive as long as the map; another
    // CPU may publish it concurrently (hence the volatile read).
    let mut held = unsafe { core::ptr::read_volatile(cell) };
    if held == 0 {
        let Some(row) = claim_row() else {
            // No row left here; another CPU may have published this key meanwhile.
            // SAFETY: as above.
            held = unsafe { core::ptr::read_volatile(cell) };
            if held == 0 {
                return Probe::Full;
            }
            return follow_cell(held, key, value);
        };
        let Some(slot) = LQ_PATHS.get_ptr_mut(row) else {
            return Probe::Full;
        };
        // SAFETY: an element of the array map, alive as long as the map; the row is this
        // CPU's alone until published below.
        let slot = unsafe { &mut *slot };
        slot.key = *key;
        // The compare-and-exchange is an `asm!` block without `nomem`: the compiler keeps
        // the key's store before it and the value's after it.
        // SAFETY: as for the read of `cell` above.
        held = unsafe { compare_exchange_u64(cell, 0, u64::from(row) + 1) };
        if held == 0 {
            slot.value = *value;
            slot.used = 1;
            stamp(row, value);
            return Probe::Placed(Placed {
                changed: CHANGED | 1 << ZERO_TRANSITION_SHIFT,
                claimed: 1,
                slot: row,
            });
        }
    }
    follow_cell(held, key, value)
}

/// The entry written to the row an index cell holding `held` (row + 1) leads to, if that
/// row holds the key; else the next cell.
#[inline(always)]
fn follow_cell(held: u64, key: &PathKey, value: &PathValue) -> Probe {
    match update_row((held - 1) as u32, key, value, false) {
        Some(placed) => Probe::Placed(placed),
        None => Probe::Next,
    }
}

/// The next row of this CPU's block, reserving a new block of `PATH_CLAIM_BLOCK` rows from
/// the shared count when it is used up; `None` when the table has no row left. A full
/// table is seen with a plain read, without an atomic operation on the shared count for
/// every new key.
#[inline(always)]
fn claim_row() -> Option<u32> {
    let block = LQ_PATH_BLOCK.get_ptr_mut(0)?;
    // SAFETY: this CPU's element of the per-CPU array; XDP runs with preemption disabled.
    let block = unsafe { &mut *block };
    if block.next < block.end {
        let row = block.next;
        block.next += 1;
        return Some(row);
    }
    let rows = LQ_PATH_ROWS.get_ptr_mut(0)?;
    // SAFETY: element 0 of the array map, 8-aligned, alive as long as the map; other CPUs
    // advance it concurrently (only atomically).
    if unsafe { core::ptr::read_volatile(rows) } >= u64::from(PATH_TABLE_CAPACITY) {
        return None;
    }
    // SAFETY: as above.
    let base = unsafe { fetch_add_u64(rows, u64::from(PATH_CLAIM_BLOCK)) };
    if base >= u64::from(PATH_TABLE_CAPACITY) {
        return None;
    }
    // The capacity is a multiple of the block: the whole block lies in the table.
    let base = base as u32;
    block.next = base + 1;
    block.end = base + PATH_CLAIM_BLOCK;
    Some(base)
}

/// Writes slot `index`'s stamp word (refresh stamp, LQS, CL of `value`), after its row: one
/// 32-bit store, so a reader never sees one write's stamp with another's LQS.
#[inline(always)]
fn stamp(index: u32, value: &PathValue) {
    let (line, i) = path_stamp_at(index);
    if let Some(p) = LQ_PATH_STAMPS.get_ptr_mut(line) {
        // SAFETY: an element of the array map, alive as long as the map; `i` is below
        // PATH_STAMPS_PER_LINE by construction (a mask).
        unsafe { (*p).words[i] = path_stamp_word(value.last_update_ns, value.lqs, value.cl) };
    }
}

/// Writes a sender's neighbor value: in place into its element if it has one, else as a
/// new element; false when the table is full.
///
/// In place, every datagram saves the hash map's update (bucket lock, a free-list element,
/// the copy, the old element's release) for a second lookup: 100 ns of a one-entry
/// datagram's 350 (`bench xdp`, `xdp_lq_1_ns`). It is safe because no element is ever
/// released: lqd only reads the map, this program never deletes, and it inserts only
/// absent keys (BPF_NOEXIST: a sender's first datagrams on two CPUs at once do not replace
/// one another's element), so a pointer to an element keeps pointing at that key's value.
#[inline(always)]
fn write_neighbor(key: &NeighborKey, value: &NeighborValue) -> bool {
    let slot = match LQ_NEIGHBORS.get_ptr_mut(key) {
        Some(p) => Some(p),
        None => match LQ_NEIGHBORS.insert(key, value, u64::from(BPF_NOEXIST)) {
            Ok(()) => return true,
            // Inserted by another CPU meanwhile (or the table is full).
            Err(_) => LQ_NEIGHBORS.get_ptr_mut(key),
        },
    };
    match slot {
        Some(p) => {
            // SAFETY: an element of the hash map that stays this key's (see above).
            unsafe { p.write(*value) };
            true
        }
        None => false,
    }
}

/// [`ProbeLoop::outcome`]: probing on.
const PROBE_NEXT: u32 = 0;
/// [`ProbeLoop::outcome`]: the entry is written.
const PROBE_PLACED: u32 = 1;
/// [`ProbeLoop::outcome`]: no row left for a new key.
const PROBE_FULL: u32 = 2;

/// The state of one key's collision probes, per CPU: the entry's key and value are built
/// here by [`store_entries`] (its frame's stack would take the call chain past the
/// verifier's 512 octets), and [`probe_cell`] reports here.
#[btf_map]
static LQ_PROBE_STATE: PerCpuArray<ProbeLoop, 1> = PerCpuArray::new();

/// This CPU's probe state.
#[inline(always)]
fn probe_state() -> Option<&'static mut ProbeLoop> {
    this_cpu(&LQ_PROBE_STATE)
}

/// One key's collision probes ([`LQ_PROBE_STATE`]).
#[repr(C)]
struct ProbeLoop {
    key: PathKey,
    value: PathValue,
    /// [`PROBE_NEXT`], [`PROBE_PLACED`] or [`PROBE_FULL`].
    outcome: u32,
    changed: u32,
    claimed: u32,
    slot: u32,
}

/// bpf_loop callback: cell `index` of the key; 1 (stop) once the entry is written or the
/// table is full.
#[inline(never)]
extern "C" fn probe_cell(index: u64, _ctx: *mut c_void) -> i64 {
    let Some(p) = probe_state() else {
        return 1;
    };
    match place_by_index(&p.key, &p.value, index as u32) {
        Probe::Placed(placed) => {
            p.outcome = PROBE_PLACED;
            p.changed = placed.changed;
            p.claimed = placed.claimed;
            p.slot = placed.slot;
            1
        }
        Probe::Full => {
            p.outcome = PROBE_FULL;
            1
        }
        Probe::Next => 0,
    }
}

/// Checks 5-11 on the UDP payload at `p` of `len` octets (already inside the frame). An
/// `Err` is the discard counter to increment.
#[inline(never)]
fn receive_payload(
    ctx: &XdpContext,
    cfg: &ReceiverConfig,
    p: usize,
    len: usize,
) -> Result<(), Counter> {
    // Check 5.
    if len < HEADER_LEN {
        return Err(Counter::Truncated);
    }
    let scratch = LQ_SCRATCH.get_ptr_mut(0).ok_or(Counter::Truncated)?;
    // SAFETY: this CPU's scratch slot; XDP runs with preemption disabled, so nothing else
    // uses it until this program returns.
    let buf: &mut [u8; SCRATCH_LEN] = unsafe { &mut *scratch };
    // A payload longer than any valid datagram still gets checks 5 and 6 from its header
    // before check 7 refuses it, as in the reference.
    let copy = if len > MAX_DATAGRAM_LEN {
        HEADER_LEN
    } else {
        len
    };
    // SAFETY: the helper copies `copy` (<= SCRATCH_LEN) octets from the packet at offset
    // `p`, which the caller checked lie inside the frame.
    let copied =
        unsafe { bpf_xdp_load_bytes(ctx.ctx, p as u32, buf.as_mut_ptr().cast(), copy as u32) };
    if copied != 0 {
        return Err(Counter::Truncated);
    }
    if buf[0] >> 4 != VERSION {
        return Err(Counter::BadVersion);
    }
    // Lengths are computed without branching on Q and D, so one verifier state covers all
    // four flag combinations.
    let q_bit = usize::from((buf[0] & FLAG_Q) >> 3);
    let d_bit = usize::from((buf[0] & FLAG_D) >> 2);
    let q = q_bit != 0;
    // Check 6.
    let mode = buf[1];
    if mode > 1 {
        return Err(Counter::BadMode);
    }
    // Check 7. With the A flag the octets after the entries are exactly one authentication
    // trailer (`lq_common::auth::frame_trailer`): stepped over here; its MAC is checked
    // on the socket path of an uplink that requires it.
    if len > MAX_DATAGRAM_LEN {
        return Err(Counter::BadLength);
    }
    let entry_count = usize::from(u16::from_be_bytes([buf[12], buf[13]]));
    let elen = ENTRY_BASE_LEN + q_bit * AS_LEN + d_bit * DIAGNOSTICS_LEN;
    let hlen = HEADER_LEN + q_bit * AS_LEN;
    if usize::from(buf[14]) != elen || entry_count > MAX_ENTRIES {
        return Err(Counter::BadLength);
    }
    let body_len = hlen + entry_count * elen;
    if len < body_len {
        return Err(Counter::BadLength);
    }
    // The octets after the entries and the A flag go through map memory (volatile: not
    // forwarded by the compiler), so the verifier holds them as an unknown value tied to
    // no register it tracks: each trailer path then ends in the same state, where
    // branching on the flag octet or on `len` directly would refine registers the entry
    // loops use (the flags, the lengths) differently per path.
    let opaque_at = SCRATCH_LEN - 4;
    // SAFETY: the last 4 octets of this CPU's scratch slot, beyond any copied payload
    // (SCRATCH_LEN >= MAX_DATAGRAM_LEN + 4, asserted).
    let excess_and_a = unsafe {
        let at = buf.as_mut_ptr().add(opaque_at).cast::<u32>();
        core::ptr::write_volatile(
            at,
            ((len - body_len) as u32) << 1 | u32::from(buf[0] & FLAG_A != 0),
        );
        core::ptr::read_volatile(at)
    };
    if trailer_ok(ctx, p + body_len, excess_and_a) == 0 {
        return Err(Counter::BadLength);
    }
    let sequence = u16::from_be_bytes([buf[2], buf[3]]);
    let node_id = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let node_as = if q {
        scratch_be32(buf, HEADER_LEN).ok_or(Counter::BadLength)?
    } else {
        0
    };
    // Check 8. A Q = 1 datagram with AS 0 is unqualified.
    let qualified = q && node_as != 0;
    if qualified != (cfg.as_qualified == AS_QUALIFIED_YES)
        || (qualified && cfg.as_plan_len != 0 && !in_as_plan(node_as))
    {
        return Err(Counter::AsMismatch);
    }
    // Check 9: every value before anything is stored.
    let mut lp = EntryLoop {
        hlen: hlen as u64,
        elen: elen as u64,
        q: q_bit as u64,
        d: d_bit as u64,
        node_as,
        node_id,
        now: 0,
        sequence,
        flags_common: if buf[0] & FLAG_P != 0 {
            PATH_FLAG_PFC_FABRIC
        } else {
            0
        },
        check_remote_as: 0,
        error: 0,
        count: entry_count as u64,
    };
    // SAFETY: bpf_loop calls the callback once (CHECKS_PER_CALL >= MAX_ENTRIES) with a
    // pointer to `lp`, which outlives the call.
    unsafe {
        bpf_loop(
            (entry_count as u64).div_ceil(CHECKS_PER_CALL) as u32,
            check_entry_values as *mut c_void,
            (&raw mut lp).cast(),
            0,
        )
    };
    if lp.error != 0 {
        return Err(Counter::BadValue);
    }
    // Check 10.
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let nkey = NeighborKey { node_as, node_id };
    // SAFETY: the value is copied out at once; a concurrent update for the same sender on
    // another CPU can at worst give a torn read, which the next datagram repairs. (Copied,
    // not kept as a pointer: one held across the entry loops doubled the states the
    // verifier walks after check 10, from 41 000 to 75 000 instructions.)
    let previous: Option<NeighborValue> = unsafe { LQ_NEIGHBORS.get(nkey) }.copied();
    if let Some(n) = &previous {
        if neighbor_failed(n.last_seen_ns, now, cfg.dead_interval_ns) {
            count(Counter::Resync);
        } else if !serial_gt(sequence, n.last_sequence) {
            return Err(Counter::StaleSeq);
        }
    }
    // Check 11.
    lp.now = now;
    lp.check_remote_as = u8::from(qualified && cfg.as_plan_len != 0);
    let state = store_state().ok_or(Counter::Truncated)?;
    state.next_row = NO_SLOT;
    state.stored = 0;
    state.claimed = 0;
    state.changed = 0;
    state.zero_transition = 0;
    state.cursor = 0;
    // SAFETY: as above (at most 91 calls).
    unsafe {
        bpf_loop(
            entry_count as u32,
            store_entries as *mut c_void,
            (&raw mut lp).cast(),
            0,
        )
    };
    // Read back through the map: the callbacks wrote it.
    let (stored, claimed, changed, zero_transition) = store_state().map_or((0, 0, 0, 0), |state| {
        (
            state.stored,
            state.claimed,
            state.changed as u16,
            state.zero_transition,
        )
    });
    count_n(Counter::EntriesStored, u64::from(stored));
    // After the slots are written: a reader that sees the count move finds them.
    if claimed != 0 {
        count_n(Counter::SlotsClaimed, u64::from(claimed));
    }
    let neighbor = NeighborValue {
        last_seen_ns: now,
        accepted: match &previous {
            Some(n) => n.accepted + 1,
            None => 1,
        },
        last_sequence: sequence,
        last_entry_count: entry_count as u16,
        last_mode: mode,
        _pad: [0; 3],
    };
    if !write_neighbor(&nkey, &neighbor) {
        count(Counter::TableFull);
    }
    count(Counter::Accepted);
    if changed > 0 {
        // Written in place in the ring buffer: a 56-octet event on the stack would take
        // the call chain past the verifier's 512 octets. A zero transition on its own ring,
        // which lqd reads at once (`EVENT_FLAG_ZERO_TRANSITION`).
        let reserved = if zero_transition != 0 {
            LQ_ZERO_EVENTS.reserve(0)
        } else {
            LQ_EVENTS.reserve(0)
        };
        let Some(mut entry) = reserved else {
            count(Counter::EventsLost);
            return Ok(());
        };
        let e = entry.as_mut_ptr();
        let named = store_state();
        let n = usize::from(changed);
        // SAFETY: `e` points to the reserved record, PathEvent-sized and 8-aligned; every
        // field is written (plain integers) before the record is submitted.
        unsafe {
            (*e).time_ns = now;
            (*e).node_as = node_as;
            (*e).node_id = node_id;
            (*e).sequence = sequence;
            (*e).changed = changed;
            (*e).entries = entry_count as u16;
            (*e).mode = mode;
            (*e).flags = if zero_transition != 0 {
                EVENT_FLAG_ZERO_TRANSITION
            } else {
                0
            };
            for i in 0..EVENT_SLOTS {
                (*e).changed_slots[i] = match named {
                    Some(ref state) if i < n => state.slots[i],
                    _ => NO_SLOT,
                };
            }
        }
        entry.submit(0);
    }
    Ok(())
}
