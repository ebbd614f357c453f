//! Differential test of the XDP receiver (`lq_receiver`, through BPF_PROG_TEST_RUN) against
//! the user-space reference `lq_common::receive::process_frame`: the same frames through
//! both, which must make the same decision for every one of them (verdict, every counter's
//! delta, the change event) and end with the same path and neighbor tables (timestamps
//! aside: the kernel clock there, the `now` we pass here).
//!
//! The frames are a seeded random mix of (a) valid advertisements from a small set of
//! senders, (b) the same with one to three mutations (byte flips, truncation, UDP length,
//! TTL, port, VLAN tags, IPv6, IPv4 options and fragments, bad bandwidths, bad version,
//! mode, entry length, count, flags, payload length, AS numbers, ...) and (c) garbage.
//! Phase 1 runs the unqualified receiver of `settings()`, phase 2 (smaller) an AS-qualified
//! receiver with an AS plan.
//!
//! A second test runs the same corpus through the socket path of `[receiver]
//! authentication` (issue 39): every frame the kernel would deliver to lqd's socket,
//! rebuilt as lqd hands it back to the program, against the wire frame.
//!
//! Environment: `LQ_DIFF_SEED` (u64) fixes the seed (printed either way), `LQ_DIFF_FRAMES`
//! the total frame count (default 100 000; phase 2 gets a fifth of them).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    time::{Duration, Instant},
};

use aya::maps::{Array as BpfArray, HashMap as BpfHashMap, Map, MapData, RingBuf};
use lq_common::{
    maps::{
        COUNTER_COUNT, Counter, EVENT_SLOTS, NEIGHBOR_CAPACITY, NEIGHBOR_MAP, NO_SLOT, NeighborKey,
        NeighborValue, PATH_STAMP_MAP, PATH_TABLE_CAPACITY, PATH_TABLE_MAP, PathEvent, PathKey,
        PathSlot, PathStampLine, PathValue, ReceiverConfig, path_stamp_at, path_stamp_word,
    },
    receive::{Counters, ReceiveTables, TableFull, Verdict, process_frame},
    wire::{
        self, AsRange, BANDWIDTH_MAX_BITS, FLAG_D, FLAG_P, FLAG_Q, MAX_PAYLOAD_LEN, VERSION,
        entry_len, header_len, serial_gt,
    },
};
use lq_tests::{
    packet::{FrameSpec, Ip},
    xdp::{SlotTable, TestReceiver, XDP_DROP, XDP_PASS, ring_events, settings},
};
use lq_user::sys::bpf::path_table::ReceiverSettings;
use rand::{Rng, SeedableRng, rngs::SmallRng};

const DEFAULT_FRAMES: usize = 100_000;
/// Compare the whole tables every this many frames (and at the end of each phase).
const CHECKPOINT_EVERY: usize = 10_000;
/// BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header.
const MIN_FRAME: usize = 14;
const MAX_FRAME: usize = 3000;
const NCOUNTERS: usize = COUNTER_COUNT as usize;

// ---------------------------------------------------------------------------------------
// The reference's tables: BTreeMaps with the kernel maps' capacities.

#[derive(Default)]
struct RefTables {
    /// The path table modelled slot by slot, as the kernel's array.
    paths: SlotTable,
    neighbors: BTreeMap<NeighborKey, NeighborValue>,
    /// Path keys written while processing the current frame.
    touched_paths: Vec<(PathKey, usize)>,
    /// Neighbor keys written while processing the current frame.
    touched_neighbors: Vec<NeighborKey>,
}

impl ReceiveTables for RefTables {
    fn neighbor(&self, key: &NeighborKey) -> Option<NeighborValue> {
        self.neighbors.get(key).copied()
    }

    fn set_neighbor(&mut self, key: NeighborKey, value: NeighborValue) -> Result<(), TableFull> {
        if !self.neighbors.contains_key(&key) && self.neighbors.len() >= NEIGHBOR_CAPACITY as usize
        {
            return Err(TableFull);
        }
        self.neighbors.insert(key, value);
        self.touched_neighbors.push(key);
        Ok(())
    }

    fn path(&self, key: &PathKey) -> Option<PathValue> {
        self.paths.get(key)
    }

    fn set_path(&mut self, key: PathKey, value: PathValue) -> Result<(), TableFull> {
        let slot = self.paths.set(key, value).ok_or(TableFull)?;
        self.touched_paths.push((key, slot));
        Ok(())
    }
}

fn strip_path(mut v: PathValue) -> PathValue {
    v.last_update_ns = 0;
    v
}

fn strip_neighbor(mut v: NeighborValue) -> NeighborValue {
    v.last_seen_ns = 0;
    v
}

/// The fields both receivers fill: the reference has no slots (checked on their own,
/// [`check_event_slots`]).
fn strip_event(mut e: PathEvent) -> PathEvent {
    e.time_ns = 0;
    e.changed_slots = [NO_SLOT; EVENT_SLOTS];
    e
}

/// The slots an XDP event names: one per changed entry while they fit (all [`NO_SLOT`]
/// beyond), each one the reference wrote for this datagram (`touched`) and holding an
/// entry of the event's sender (a datagram that repeats a key names its slot as often as
/// it changed it); `Err` says what is wrong.
fn check_event_slots(
    e: &PathEvent,
    touched: &[(PathKey, usize)],
    slot_key: impl Fn(u32) -> Option<PathKey>,
) -> Result<(), String> {
    let n = usize::from(e.changed);
    let Some(named) = e.named_slots() else {
        if n <= EVENT_SLOTS {
            return Err(format!(
                "{n} changes but not all named: {:?}",
                e.changed_slots
            ));
        }
        return if e.changed_slots.iter().all(|&s| s != NO_SLOT) {
            Ok(())
        } else {
            Err(format!(
                "{n} changes, slots not all filled: {:?}",
                e.changed_slots
            ))
        };
    };
    if e.changed_slots[n..].iter().any(|&s| s != NO_SLOT) {
        return Err(format!(
            "slots beyond the {n} changes: {:?}",
            e.changed_slots
        ));
    }
    for &s in named {
        if !touched.iter().any(|t| t.1 == s as usize) {
            return Err(format!(
                "slot {s} was not written for this datagram: {touched:?}"
            ));
        }
        match slot_key(s) {
            Some(k) if (k.spine_as, k.spine_id) == (e.node_as, e.node_id) => {}
            other => return Err(format!("slot {s} holds {other:?}, not the sender's entry")),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Frame generation.

#[derive(Clone, Copy, Debug)]
struct Sender {
    node_id: u32,
    q: bool,
    node_as: u32,
    /// The highest sequence number this sender has used.
    seq: u16,
}

/// The small world one phase draws from, so the tables never fill.
struct Universe {
    senders: Vec<Sender>,
    remote_ids: Vec<u32>,
    link_ids: Vec<u32>,
    /// Remote AS numbers for Q = 1 entries.
    remote_as: Vec<u32>,
    /// AS numbers a mutation may write (edges of the plan, 0, extremes).
    edge_as: Vec<u32>,
}

const fn ip4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

fn make_senders(rng: &mut SmallRng, kinds: &[(bool, u32)]) -> Vec<Sender> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, &(q, node_as))| Sender {
            node_id: ip4(10, 0, 0, 1 + i as u8),
            q,
            node_as,
            // Some start just below the wrap.
            seq: if i % 4 == 0 {
                0xfff0 + rng.random_range(0..16)
            } else {
                rng.random()
            },
        })
        .collect()
}

const AS_EDGES: [u32; 17] = [
    0,
    1,
    99,
    100,
    101,
    64_999,
    65_000,
    65_001,
    65_010,
    65_011,
    70_000,
    82_345,
    82_346,
    4_200_000_000,
    4_200_000_100,
    4_200_000_101,
    u32::MAX,
];

/// Phase 1: 16 senders for an unqualified receiver: 12 with Q = 0, 2 with Q = 1 and AS 0
/// (unqualified, accepted), 2 AS-qualified ones (as_mismatch).
fn universe_unqualified(rng: &mut SmallRng) -> Universe {
    let mut kinds = vec![(false, 0); 12];
    kinds.extend([(true, 0), (true, 0), (true, 65_001), (true, 4_200_000_001)]);
    Universe {
        senders: make_senders(rng, &kinds),
        remote_ids: (1..=6).map(|i| ip4(10, 0, 1, i)).collect(),
        link_ids: (1..=6).collect(),
        remote_as: AS_EDGES.to_vec(),
        edge_as: AS_EDGES.to_vec(),
    }
}

/// The AS plan of phase 2: single values, small ranges, one that needs many prefixes.
fn as_plan() -> Vec<AsRange> {
    vec![
        AsRange {
            first: 65_000,
            last: 65_010,
        },
        AsRange::single(100),
        AsRange {
            first: 70_000,
            last: 82_345,
        },
        AsRange {
            first: 4_200_000_000,
            last: 4_200_000_100,
        },
    ]
}

/// Phase 2: 16 senders for an AS-qualified receiver with [`as_plan`]: 10 inside the plan,
/// 2 outside it, 2 with Q = 1 and AS 0, 2 with Q = 0 (the last six: as_mismatch).
fn universe_qualified(rng: &mut SmallRng) -> Universe {
    let kinds = [
        (true, 65_000),
        (true, 65_001),
        (true, 65_010),
        (true, 100),
        (true, 70_000),
        (true, 82_345),
        (true, 75_000),
        (true, 4_200_000_000),
        (true, 4_200_000_001),
        (true, 4_200_000_100),
        (true, 64_999),
        (true, 4_200_000_101),
        (true, 0),
        (true, 0),
        (false, 0),
        (false, 0),
    ];
    Universe {
        senders: make_senders(rng, &kinds),
        remote_ids: (1..=6).map(|i| ip4(10, 0, 1, i)).collect(),
        link_ids: (1..=6).collect(),
        remote_as: vec![
            65_000,
            65_005,
            65_010,
            100,
            70_000,
            82_345,
            4_200_000_050,
            // Outside the plan: as_mismatch_entry.
            64_999,
            65_011,
            99,
            82_346,
            0,
        ],
        edge_as: AS_EDGES.to_vec(),
    }
}

/// The next sequence number of a sender: mostly increasing, sometimes replayed, older,
/// exactly 2^15 ahead (undefined), far ahead or random.
fn next_seq(rng: &mut SmallRng, s: &mut Sender) -> u16 {
    let seq = match rng.random_range(0..100) {
        0..70 => s.seq.wrapping_add(rng.random_range(1..=3)),
        70..80 => s.seq,
        80..88 => s.seq.wrapping_sub(rng.random_range(1..=300)),
        88..91 => s.seq.wrapping_add(0x8000),
        91..95 => s.seq.wrapping_add(rng.random_range(0x7000..=0x7fff)),
        _ => rng.random(),
    };
    if serial_gt(seq, s.seq) {
        s.seq = seq;
    }
    seq
}

/// A bandwidth the receiver accepts (binary32 bits).
fn valid_bandwidth(rng: &mut SmallRng) -> u32 {
    match rng.random_range(0..10) {
        0 => 0,
        1 => 0x8000_0000, // -0.0
        2 => BANDWIDTH_MAX_BITS,
        3 => rng.random_range(1..0x0080_0000), // subnormal
        4 => rng.random_range(0..=BANDWIDTH_MAX_BITS),
        _ => rng.random_range(0.0f32..800.0).to_bits(),
    }
}

/// A bandwidth the receiver refuses (binary32 bits).
fn invalid_bandwidth(rng: &mut SmallRng) -> u32 {
    match rng.random_range(0..9) {
        0 => f32::NAN.to_bits(),
        1 => rng.random_range(0x7f80_0001..=0x7fff_ffff), // NaN payloads
        2 => f32::INFINITY.to_bits(),
        3 => f32::NEG_INFINITY.to_bits(),
        4 => (-rng.random_range(0.001f32..1000.0)).to_bits(),
        5 => 0x8000_0001, // negative subnormal
        6 => BANDWIDTH_MAX_BITS + 1,
        7 => 1e16f32.to_bits(),
        _ => loop {
            let b: u32 = rng.random();
            if !wire::bandwidth_bits_valid(b) {
                break b;
            }
        },
    }
}

fn pick<T: Copy>(rng: &mut SmallRng, v: &[T]) -> T {
    v[rng.random_range(0..v.len())]
}

/// A valid UDP payload from sender `si` (raw, with random reserved bits, V bits without D,
/// invalid capacities behind V = 0: everything the receiver must ignore).
fn valid_payload(rng: &mut SmallRng, u: &mut Universe, si: usize) -> Vec<u8> {
    let seq = next_seq(rng, &mut u.senders[si]);
    let s = u.senders[si];
    let q = s.q;
    let d = rng.random_bool(0.4);
    let count = match rng.random_range(0..10) {
        0 => 0,
        1..=6 => rng.random_range(1..=8),
        7 | 8 => rng.random_range(9..=40),
        _ => rng.random_range(41..=91),
    };
    let hlen = header_len(q);
    let elen = entry_len(q, d);
    let mut b = vec![0u8; hlen + count * elen];
    b[0] = VERSION << 4
        | if q { FLAG_Q } else { 0 }
        | if d { FLAG_D } else { 0 }
        | if rng.random_bool(0.3) { FLAG_P } else { 0 };
    b[1] = rng.random_range(0..=1);
    b[2..4].copy_from_slice(&seq.to_be_bytes());
    b[4..8].copy_from_slice(&s.node_id.to_be_bytes());
    b[8..12].copy_from_slice(&rng.random::<u32>().to_be_bytes());
    b[12..14].copy_from_slice(&(count as u16).to_be_bytes());
    b[14] = elen as u8;
    if rng.random_bool(0.1) {
        b[15] = rng.random();
    }
    if q {
        b[16..20].copy_from_slice(&s.node_as.to_be_bytes());
    }
    for i in 0..count {
        let e = &mut b[hlen + i * elen..hlen + (i + 1) * elen];
        e[0..4].copy_from_slice(&pick(rng, &u.remote_ids).to_be_bytes());
        e[4..8].copy_from_slice(&pick(rng, &u.link_ids).to_be_bytes());
        e[8..12].copy_from_slice(&valid_bandwidth(rng).to_be_bytes());
        e[12] = rng.random();
        let v = rng.random_bool(0.6);
        e[13] = rng.random_range(0..8u8) << 5 | if v { wire::ENTRY_FLAG_V } else { 0 };
        if rng.random_bool(0.1) {
            e[13] |= rng.random_range(0..16u8);
            e[14] = rng.random();
            e[15] = rng.random();
        }
        let mut at = 16;
        if q {
            e[at..at + 4].copy_from_slice(&pick(rng, &u.remote_as).to_be_bytes());
            at += 4;
        }
        if d {
            let cap = if v || rng.random_bool(0.5) {
                valid_bandwidth(rng)
            } else {
                invalid_bandwidth(rng) // ignored: V = 0
            };
            e[at..at + 4].copy_from_slice(&cap.to_be_bytes());
            e[at + 4] = rng.random();
            e[at + 5] = rng.random_range(0..32u8) << 3;
            e[at + 6] = rng.random_range(0..32u8) << 3
                | if rng.random_bool(0.3) {
                    wire::DIAG_FLAG_X
                } else {
                    0
                };
            if rng.random_bool(0.1) {
                e[at + 5] |= rng.random_range(0..8u8);
                e[at + 6] |= rng.random_range(0..4u8);
                e[at + 7] = rng.random();
            }
        }
    }
    // An authentication trailer (A flag, issue 39) on some: framed by check 7, its MAC
    // not checked by either receiver.
    if rng.random_bool(0.2) {
        let mac_len = pick(rng, &[32usize, 48, 64, 0, 12]);
        let alg = match mac_len {
            32 => 1,
            48 => 2,
            64 => 3,
            _ => rng.random_range(4..=255u8),
        };
        b[0] |= lq_common::auth::FLAG_A;
        b.push(lq_common::auth::TRAILER_TYPE_MAC);
        b.push(alg);
        b.extend_from_slice(&((16 + mac_len) as u16).to_be_bytes());
        b.extend((0..12 + mac_len).map(|_| rng.random::<u8>()));
    }
    b
}

/// A valid framing: IPv4 (sometimes with options or DF) or IPv6, with up to one tag.
fn valid_spec(rng: &mut SmallRng, payload: Vec<u8>) -> FrameSpec {
    let mut spec = FrameSpec::lq(payload);
    if rng.random_bool(0.25) {
        spec.ip = Ip::V6_GTSM;
    } else if rng.random_bool(0.3) {
        spec.ip = Ip::V4 {
            ttl: 255,
            frag: if rng.random_bool(0.5) { 0x4000 } else { 0 },
            options: rng.random_range(0..=10),
        };
    }
    if rng.random_bool(0.3) {
        let tpid = if rng.random_bool(0.5) { 0x8100 } else { 0x88a8 };
        spec.vlans = vec![(tpid, rng.random())];
    }
    spec
}

/// Every mutation, with whether it applies to the built frame (true) or before building.
const MUTATIONS: [(&str, bool); 23] = [
    ("byte_flip", true),
    ("bit_flip", true),
    ("truncate", true),
    ("ethertype", true),
    ("ihl", true),
    ("udp_len", false),
    ("ttl", false),
    ("port", false),
    ("vlan", false),
    ("ipv6", false),
    ("ipv4_options", false),
    ("fragment", false),
    ("protocol", false),
    ("bandwidth", false),
    ("capacity", false),
    ("version", false),
    ("mode", false),
    ("entry_len", false),
    ("count", false),
    ("flag_flip", false),
    ("payload_len", false),
    ("as_number", false),
    ("trailer", false),
];

/// Offsets of the (possibly mutated) payload's entries, as its own flags describe them.
fn entry_slots(p: &[u8]) -> (usize, usize, bool, bool, usize) {
    let q = p.first().is_some_and(|b| b & FLAG_Q != 0);
    let d = p.first().is_some_and(|b| b & FLAG_D != 0);
    let hlen = header_len(q);
    let elen = entry_len(q, d);
    let n = p.len().saturating_sub(hlen) / elen;
    (hlen, elen, q, d, n)
}

fn mutate_spec(rng: &mut SmallRng, u: &Universe, name: &str, spec: &mut FrameSpec) {
    let p = &mut spec.payload;
    match name {
        "udp_len" => {
            let real = 8 + p.len() as i32;
            spec.udp_len = Some(match rng.random_range(0..6) {
                0 => rng.random_range(0..8),
                1 => (real + rng.random_range(-8..=8)).clamp(0, 65535) as u16,
                2 => (real - rng.random_range(1..=40)).max(0) as u16,
                3 => (real + rng.random_range(1..=100)) as u16,
                4 => rng.random_range(8..24),
                _ => rng.random(),
            });
        }
        "ttl" => {
            let t = if rng.random_bool(0.5) {
                pick(rng, &[0, 1, 64, 128, 254])
            } else {
                rng.random()
            };
            spec.ip = match spec.ip {
                Ip::V4 { frag, options, .. } => Ip::V4 {
                    ttl: t,
                    frag,
                    options,
                },
                Ip::V6 { .. } => Ip::V6 { hop_limit: t },
            };
        }
        "port" => {
            spec.dst_port = match rng.random_range(0..3) {
                0 => wire::DEFAULT_PORT.wrapping_add(1),
                1 => wire::DEFAULT_PORT.wrapping_sub(1),
                _ => rng.random(),
            };
        }
        "vlan" => {
            let tpids = [0x8100, 0x88a8, 0x9100, 0x0800, 0x86dd];
            let n = rng.random_range(1..=2);
            spec.vlans = (0..n).map(|_| (pick(rng, &tpids), rng.random())).collect();
        }
        "ipv6" => {
            spec.ip = Ip::V6 {
                hop_limit: if rng.random_bool(0.8) {
                    255
                } else {
                    rng.random()
                },
            };
        }
        "ipv4_options" => {
            spec.ip = Ip::V4 {
                ttl: 255,
                frag: 0,
                options: rng.random_range(1..=10),
            };
        }
        "fragment" => {
            let frag = pick(
                rng,
                &[
                    0x2000, 0x0001, 0x1fff, 0x3fff, 0x2001, 0x8000, 0x4000, 0xc000,
                ],
            );
            let options = rng.random_range(0..=3);
            spec.ip = Ip::V4 {
                ttl: 255,
                frag,
                options,
            };
        }
        "protocol" => {
            spec.protocol = pick(rng, &[0, 1, 6, 16, 18, 58, 136, 255]);
        }
        "bandwidth" => {
            let (hlen, elen, _, _, n) = entry_slots(p);
            if n > 0 {
                for _ in 0..rng.random_range(1..=2) {
                    let e = hlen + rng.random_range(0..n) * elen;
                    p[e + 8..e + 12].copy_from_slice(&invalid_bandwidth(rng).to_be_bytes());
                }
            } else {
                p.push(rng.random()); // nothing to spoil: make it bad_length instead
            }
        }
        "capacity" => {
            let (hlen, elen, q, d, n) = entry_slots(p);
            if n > 0 && d {
                let e = hlen + rng.random_range(0..n) * elen;
                let at = e + 16 + if q { 4 } else { 0 };
                let v = rng.random_bool(0.7);
                p[e + 13] =
                    p[e + 13] & !wire::ENTRY_FLAG_V | if v { wire::ENTRY_FLAG_V } else { 0 };
                let bits = if rng.random_bool(0.8) {
                    invalid_bandwidth(rng)
                } else {
                    valid_bandwidth(rng)
                };
                p[at..at + 4].copy_from_slice(&bits.to_be_bytes());
            } else if n > 0 {
                // No diagnostics block: a V bit alone is ignored.
                let e = hlen + rng.random_range(0..n) * elen;
                p[e + 13] |= wire::ENTRY_FLAG_V;
            }
        }
        "version" => {
            let v = loop {
                let v: u8 = rng.random_range(0..16);
                if v != VERSION || rng.random_bool(0.05) {
                    break v;
                }
            };
            if let Some(b) = p.first_mut() {
                *b = *b & 0x0f | v << 4;
            }
        }
        "mode" => {
            if p.len() > 1 {
                p[1] = if rng.random_bool(0.5) {
                    rng.random_range(2..=4)
                } else {
                    rng.random()
                };
            }
        }
        "entry_len" => {
            if p.len() > 14 {
                p[14] = if rng.random_bool(0.6) {
                    pick(rng, &[0, 16, 20, 24, 28, 32, 12])
                } else {
                    rng.random()
                };
            }
        }
        "count" => {
            if p.len() > 13 {
                let c = u16::from_be_bytes([p[12], p[13]]);
                let c = match rng.random_range(0..5) {
                    0 => c.wrapping_add(1),
                    1 => c.wrapping_sub(1),
                    2 => rng.random_range(92..=200),
                    3 => rng.random(),
                    _ => rng.random_range(0..=91),
                };
                p[12..14].copy_from_slice(&c.to_be_bytes());
            }
        }
        "trailer" => {
            // The A flag and a trailer that is not quite one: its type, its length field,
            // the octets after it, or no trailer at all.
            let (hlen, elen, ..) = entry_slots(p);
            let count = p
                .get(12..14)
                .map_or(0, |c| usize::from(u16::from_be_bytes([c[0], c[1]])));
            let body = (hlen + count * elen).min(p.len());
            if let Some(b) = p.first_mut() {
                *b |= lq_common::auth::FLAG_A;
            }
            if p.len() == body {
                let n = pick(rng, &[0usize, 3, 15, 16, 48, 80, 81]);
                p.extend((0..n).map(|_| rng.random::<u8>()));
                if n >= 4 {
                    p[body] = if rng.random_bool(0.7) {
                        1
                    } else {
                        rng.random()
                    };
                    let len = if rng.random_bool(0.6) {
                        n as u16
                    } else {
                        rng.random()
                    };
                    p[body + 2..body + 4].copy_from_slice(&len.to_be_bytes());
                }
            } else if p.len() >= body + 4 {
                match rng.random_range(0..4) {
                    0 => p[body] = rng.random(),
                    1 => {
                        let len: u16 = rng.random();
                        p[body + 2..body + 4].copy_from_slice(&len.to_be_bytes());
                    }
                    2 => p.push(rng.random()),
                    _ => {
                        p.pop();
                    }
                }
            }
        }
        "flag_flip" => {
            if let Some(b) = p.first_mut() {
                *b ^= pick(rng, &[FLAG_Q, FLAG_D, FLAG_Q | FLAG_D, FLAG_P, 0x01]);
            }
        }
        "payload_len" => match rng.random_range(0..5) {
            0 => {
                let n = rng.random_range(1..=40);
                p.extend((0..n).map(|_| rng.random::<u8>()));
            }
            1 => {
                let n = rng.random_range(1..=40).min(p.len());
                p.truncate(p.len() - n);
            }
            2 => p.truncate(rng.random_range(0..16)),
            3 => {
                // Longer than any valid datagram (the XDP program copies only the header).
                let n = rng.random_range(MAX_PAYLOAD_LEN + 1..=MAX_PAYLOAD_LEN + 300);
                p.resize(n, 0);
            }
            _ => {
                // One whole entry more or less, count unchanged.
                let (_, elen, ..) = entry_slots(p);
                if rng.random_bool(0.5) {
                    p.extend((0..elen).map(|_| rng.random::<u8>()));
                } else {
                    p.truncate(p.len().saturating_sub(elen));
                }
            }
        },
        "as_number" => {
            let (hlen, elen, q, _, n) = entry_slots(p);
            if q && p.len() >= 20 {
                if n == 0 || rng.random_bool(0.5) {
                    p[16..20].copy_from_slice(&pick(rng, &u.edge_as).to_be_bytes());
                } else {
                    let e = hlen + rng.random_range(0..n) * elen;
                    p[e + 16..e + 20].copy_from_slice(&pick(rng, &u.edge_as).to_be_bytes());
                }
            } else if let Some(b) = p.first_mut() {
                *b |= FLAG_Q; // an unqualified datagram claims Q: layout shifts
            }
        }
        _ => unreachable!("{name}"),
    }
}

fn mutate_frame(rng: &mut SmallRng, name: &str, f: &mut Vec<u8>, l3: usize) {
    match name {
        "byte_flip" => {
            for _ in 0..rng.random_range(1..=4) {
                let i = rng.random_range(0..f.len());
                f[i] = rng.random();
            }
        }
        "bit_flip" => {
            for _ in 0..rng.random_range(1..=3) {
                let i = rng.random_range(0..f.len());
                f[i] ^= 1 << rng.random_range(0..8);
            }
        }
        "truncate" => {
            let n = rng.random_range(MIN_FRAME..f.len().max(MIN_FRAME + 1));
            f.truncate(n);
        }
        "ethertype" => {
            let t: u16 = pick(
                rng,
                &[0x0806, 0x8100, 0x88a8, 0x86dd, 0x0800, 0x88cc, 0xffff],
            );
            let at = if rng.random_bool(0.5) { 12 } else { l3 - 2 };
            if let Some(w) = f.get_mut(at..at + 2) {
                w.copy_from_slice(&t.to_be_bytes());
            }
        }
        "ihl" => {
            if let Some(b) = f.get_mut(l3) {
                *b = if rng.random_bool(0.7) {
                    *b & 0xf0 | rng.random_range(0..16u8)
                } else {
                    rng.random()
                };
            }
        }
        _ => unreachable!("{name}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Valid,
    Mutated,
    Garbage,
}

struct Generated {
    kind: Kind,
    what: String,
    frame: Vec<u8>,
}

fn generate(rng: &mut SmallRng, u: &mut Universe) -> Generated {
    let roll = rng.random_range(0..100);
    if roll < 10 {
        return garbage(rng);
    }
    let si = rng.random_range(0..u.senders.len());
    let payload = valid_payload(rng, u, si);
    let mut spec = valid_spec(rng, payload);
    if roll < 55 {
        let frame = spec.build();
        return Generated {
            kind: Kind::Valid,
            what: format!("valid, sender {si}"),
            frame,
        };
    }
    let n = match rng.random_range(0..20) {
        0..14 => 1,
        14..19 => 2,
        _ => 3,
    };
    let chosen: Vec<(&str, bool)> = (0..n).map(|_| pick(rng, &MUTATIONS)).collect();
    for &(name, post) in &chosen {
        if !post {
            mutate_spec(rng, u, name, &mut spec);
        }
    }
    let mut frame = spec.build();
    let l3 = 14 + 4 * spec.vlans.len();
    for &(name, post) in &chosen {
        if post {
            mutate_frame(rng, name, &mut frame, l3);
        }
    }
    frame.truncate(MAX_FRAME);
    let names: Vec<&str> = chosen.iter().map(|(n, _)| *n).collect();
    Generated {
        kind: Kind::Mutated,
        what: format!("sender {si}, mutations {}", names.join("+")),
        frame,
    }
}

fn garbage(rng: &mut SmallRng) -> Generated {
    if rng.random_bool(0.5) {
        let n = rng.random_range(MIN_FRAME..=1600);
        return Generated {
            kind: Kind::Garbage,
            what: "random octets".into(),
            frame: (0..n).map(|_| rng.random()).collect(),
        };
    }
    // Plausible headers around a random payload, often with version 1.
    let n = if rng.random_bool(0.9) {
        rng.random_range(0..=200)
    } else {
        rng.random_range(0..=1500)
    };
    let mut payload: Vec<u8> = (0..n).map(|_| rng.random()).collect();
    if rng.random_bool(0.5)
        && let Some(b) = payload.first_mut()
    {
        *b = *b & 0x0f | VERSION << 4;
        if rng.random_bool(0.5)
            && let Some(m) = payload.get_mut(1)
        {
            *m &= 1;
        }
    }
    let mut spec = valid_spec(rng, payload);
    spec.pad_to = if rng.random_bool(0.5) { 60 } else { 0 };
    let mut frame = spec.build();
    frame.truncate(MAX_FRAME);
    if frame.len() < MIN_FRAME {
        frame.resize(MIN_FRAME, 0);
    }
    Generated {
        kind: Kind::Garbage,
        what: "random payload in LQ headers".into(),
        frame,
    }
}

// ---------------------------------------------------------------------------------------
// Running and comparing.

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn counters_str(c: &Counters) -> String {
    let parts: Vec<String> = Counter::ALL
        .iter()
        .filter(|k| c[**k as usize] != 0)
        .map(|k| format!("{}={}", k.name(), c[*k as usize]))
        .collect();
    if parts.is_empty() {
        "(none)".into()
    } else {
        parts.join(" ")
    }
}

fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::NotOurs => "not_ours",
        Verdict::Discard(d) => d.name(),
        Verdict::Accept { .. } => "accepted",
    }
}

fn xdp_name(v: u32) -> String {
    match v {
        XDP_DROP => "XDP_DROP".into(),
        XDP_PASS => "XDP_PASS".into(),
        0 => "XDP_ABORTED".into(),
        other => format!("XDP action {other}"),
    }
}

/// Tallies for the final report.
#[derive(Default)]
struct Stats {
    /// Frames by the reference's verdict (reason name).
    by_verdict: BTreeMap<&'static str, u64>,
    /// Frames by kind and verdict.
    by_kind: BTreeMap<(Kind, &'static str), u64>,
    /// Frames by mutation and verdict.
    by_mutation: BTreeMap<&'static str, BTreeMap<&'static str, u64>>,
    /// Frames with at least one as_mismatch_entry.
    frames_with_as_mismatch_entry: u64,
    /// Counter totals over every frame.
    totals: Counters,
    frames: u64,
    events: u64,
    /// Change events of the XDP program that named their changed entries' slots.
    events_with_slots: u64,
    /// Change events with `EVENT_FLAG_ZERO_TRANSITION`.
    zero_transition_events: u64,
    /// Of them, those of a datagram that stored no new entry.
    zero_transitions_of_known_entries: u64,
}

struct Phase<'a> {
    name: &'a str,
    settings: ReceiverSettings,
    frames: usize,
    universe: Universe,
}

/// The kernel maps, opened from their pins, for per-key lookups.
struct KernelMaps {
    paths: BpfArray<MapData, PathSlot>,
    stamps: BpfArray<MapData, PathStampLine>,
    neighbors: BpfHashMap<MapData, NeighborKey, NeighborValue>,
}

impl KernelMaps {
    fn open(rx: &TestReceiver) -> Self {
        let dir = rx.receiver.pin_dir();
        let open = |name: &str| MapData::from_pin(dir.join(name)).expect("open pinned map");
        Self {
            paths: BpfArray::try_from(Map::Array(open(PATH_TABLE_MAP))).unwrap(),
            stamps: BpfArray::try_from(Map::Array(open(PATH_STAMP_MAP))).unwrap(),
            neighbors: BpfHashMap::try_from(Map::HashMap(open(NEIGHBOR_MAP))).unwrap(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn mismatch(
    phase: &str,
    seed: u64,
    index: usize,
    g: &Generated,
    why: &str,
    ref_verdict: &Verdict,
    xdp_verdict: u32,
    ref_delta: &Counters,
    xdp_delta: &Counters,
) -> ! {
    panic!(
        "\nDIFFERENTIAL MISMATCH ({why}) in {phase}, frame #{index} (seed {seed}), {:?}: {}\n\
         frame ({} octets): {}\n\
         reference: verdict {ref_verdict:?} (expected {}), counters {}\n\
         XDP:       verdict {}, counters {}\n",
        g.kind,
        g.what,
        g.frame.len(),
        hex(&g.frame),
        xdp_name(if *ref_verdict == Verdict::NotOurs {
            XDP_PASS
        } else {
            XDP_DROP
        }),
        counters_str(ref_delta),
        xdp_name(xdp_verdict),
        counters_str(xdp_delta),
    )
}

/// Compares the whole tables, timestamps aside.
/// A receiver's path and neighbor tables, timestamps aside.
#[allow(clippy::type_complexity)]
fn kernel_tables(
    rx: &TestReceiver,
) -> (
    BTreeMap<PathKey, PathValue>,
    BTreeMap<NeighborKey, NeighborValue>,
) {
    let p = rx
        .reader
        .paths()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, strip_path(v)))
        .collect();
    let n = rx
        .reader
        .neighbors()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, strip_neighbor(v)))
        .collect();
    (p, n)
}

fn compare_tables(rx: &TestReceiver, r: &RefTables, phase: &str, at: usize, seed: u64) {
    let (kp, kn) = kernel_tables(rx);
    let rp: BTreeMap<_, _> = r
        .paths
        .entries()
        .into_iter()
        .map(|(k, v)| (k, strip_path(v)))
        .collect();
    let rn: BTreeMap<_, _> = r
        .neighbors
        .iter()
        .map(|(k, v)| (*k, strip_neighbor(*v)))
        .collect();
    let mut report = String::new();
    diff_maps(&mut report, "path", &kp, &rp);
    diff_maps(&mut report, "neighbor", &kn, &rn);
    assert!(
        report.is_empty(),
        "\nTABLE MISMATCH in {phase} after {at} frames (seed {seed}): kernel {} paths / {} \
         neighbors, reference {} / {}\n{report}",
        kp.len(),
        kn.len(),
        rp.len(),
        rn.len()
    );
}

fn diff_maps<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    out: &mut String,
    what: &str,
    kernel: &BTreeMap<K, V>,
    reference: &BTreeMap<K, V>,
) {
    let mut shown = 0;
    for (k, v) in kernel {
        match reference.get(k) {
            None => {
                let _ = writeln!(out, "{what} only in kernel: {k:?} -> {v:?}");
                shown += 1;
            }
            Some(rv) if rv != v => {
                let _ = writeln!(
                    out,
                    "{what} differs: {k:?}\n  kernel    {v:?}\n  reference {rv:?}"
                );
                shown += 1;
            }
            _ => {}
        }
        if shown >= 10 {
            return;
        }
    }
    for (k, v) in reference {
        if !kernel.contains_key(k) {
            let _ = writeln!(out, "{what} only in reference: {k:?} -> {v:?}");
            shown += 1;
            if shown >= 10 {
                return;
            }
        }
    }
}

fn run_phase(p: &mut Phase<'_>, rng: &mut SmallRng, seed: u64, stats: &mut Stats) -> Duration {
    let started = Instant::now();
    let mut rx = TestReceiver::load(&p.settings).expect("load the XDP receiver");
    let cfg: ReceiverConfig = p.settings.to_config().expect("config");
    let mut events: RingBuf<MapData> = rx.receiver.take_events().expect("event ring buffer");
    let mut zero_events: RingBuf<MapData> =
        (rx.receiver.take_zero_events()).expect("event ring buffer (zero transitions)");
    let kmaps = KernelMaps::open(&rx);
    let mut tables = RefTables::default();
    let mut before = rx.counters().unwrap();
    assert_eq!(
        before, [0; NCOUNTERS],
        "a fresh receiver starts with zero counters"
    );
    for i in 0..p.frames {
        let g = generate(rng, &mut p.universe);
        assert!((MIN_FRAME..=MAX_FRAME).contains(&g.frame.len()));
        // The reference. `now` advances 1 us per frame: far below the one-hour dead
        // interval, as is the kernel clock over the run.
        let mut ref_delta = [0u64; NCOUNTERS];
        tables.touched_paths.clear();
        tables.touched_neighbors.clear();
        let now = 1_000_000 + i as u64 * 1000;
        let ref_verdict = process_frame(&g.frame, &cfg, now, &mut tables, &mut ref_delta);
        // The XDP program.
        let xdp_verdict = rx.run(&g.frame).expect("BPF_PROG_TEST_RUN");
        let after = rx.counters().unwrap();
        let mut xdp_delta = [0u64; NCOUNTERS];
        for c in 0..NCOUNTERS {
            xdp_delta[c] = after[c].wrapping_sub(before[c]);
        }
        before = after;
        let mut xdp_events = Vec::new();
        let mut raw_events = Vec::new();
        // Each ring holds only its kind: a zero transition's event on its own ring.
        for (ring, zero) in [(&mut zero_events, true), (&mut events, false)] {
            for ev in ring_events(ring) {
                raw_events.push((ev, zero));
                xdp_events.push(strip_event(ev));
            }
        }

        let expected = if ref_verdict == Verdict::NotOurs {
            XDP_PASS
        } else {
            XDP_DROP
        };
        let fail = |why: &str| -> ! {
            mismatch(
                p.name,
                seed,
                i,
                &g,
                why,
                &ref_verdict,
                xdp_verdict,
                &ref_delta,
                &xdp_delta,
            )
        };
        if xdp_verdict != expected {
            fail("verdict");
        }
        if xdp_delta != ref_delta {
            fail("counter deltas");
        }
        let ref_events: Vec<PathEvent> = match ref_verdict {
            Verdict::Accept { event } => event.into_iter().map(strip_event).collect(),
            _ => Vec::new(),
        };
        if xdp_events != ref_events {
            fail(&format!(
                "change event: reference {ref_events:?}, XDP {xdp_events:?}"
            ));
        }
        for (e, on_zero_ring) in &raw_events {
            if e.zero_transition() != *on_zero_ring {
                fail(&format!(
                    "change event {e:?} on the {} ring",
                    if *on_zero_ring {
                        "zero transitions'"
                    } else {
                        "paced"
                    }
                ));
            }
            stats.zero_transition_events += u64::from(e.zero_transition());
            // Not from a new entry: from an LQS to or from 0, or a move at CL 7.
            stats.zero_transitions_of_known_entries +=
                u64::from(e.zero_transition() && ref_delta[Counter::SlotsClaimed as usize] == 0);
            let slot_key = |s: u32| {
                kmaps
                    .paths
                    .get(&s, 0)
                    .ok()
                    .filter(|x| x.used != 0)
                    .map(|x| x.key)
            };
            if let Err(why) = check_event_slots(e, &tables.touched_paths, slot_key) {
                fail(&format!("change event slots: {why}"));
            }
            stats.events_with_slots += u64::from(e.named_slots().is_some());
        }
        // What the reference just wrote must be in the kernel's maps too.
        for k in &tables.touched_neighbors {
            let kv = kmaps.neighbors.get(k, 0).ok().map(strip_neighbor);
            let rv = tables.neighbors.get(k).copied().map(strip_neighbor);
            if kv != rv {
                fail(&format!("neighbor {k:?}: reference {rv:?}, kernel {kv:?}"));
            }
        }
        // Slot by slot: the same key in the same slot with the same value, and the slot's
        // stamp word from the time the kernel wrote into it and the LQS and CL it wrote.
        for (k, slot) in &tables.touched_paths {
            let ks = kmaps
                .paths
                .get(&(*slot as u32), 0)
                .ok()
                .filter(|s| s.used != 0 && s.key == *k);
            if let Some(ks) = ks {
                let (line, at) = path_stamp_at(*slot as u32);
                let word = kmaps.stamps.get(&line, 0).ok().map(|l| l.words[at]);
                let want = path_stamp_word(ks.value.last_update_ns, ks.value.lqs, ks.value.cl);
                if word != Some(want) {
                    fail(&format!(
                        "path {k:?} in slot {slot}: stamp word {word:x?}, want {want:#x} (written at {} ns, LQS {}, CL {})",
                        ks.value.last_update_ns, ks.value.lqs, ks.value.cl
                    ));
                }
            }
            let kv = ks.map(|s| strip_path(s.value));
            let rv = tables.paths.get(k).map(strip_path);
            if kv != rv {
                fail(&format!(
                    "path {k:?} in slot {slot}: reference {rv:?}, kernel {kv:?}"
                ));
            }
        }

        // Tallies.
        let name = verdict_name(&ref_verdict);
        *stats.by_verdict.entry(name).or_default() += 1;
        *stats.by_kind.entry((g.kind, name)).or_default() += 1;
        if g.kind == Kind::Mutated {
            for m in g
                .what
                .rsplit("mutations ")
                .next()
                .unwrap_or_default()
                .split('+')
            {
                let m = MUTATIONS.iter().find(|(n, _)| *n == m).unwrap().0;
                *stats
                    .by_mutation
                    .entry(m)
                    .or_default()
                    .entry(name)
                    .or_default() += 1;
            }
        }
        if ref_delta[Counter::AsMismatchEntry as usize] > 0 {
            stats.frames_with_as_mismatch_entry += 1;
        }
        for (total, d) in stats.totals.iter_mut().zip(ref_delta) {
            *total += d;
        }
        stats.frames += 1;
        stats.events += ref_events.len() as u64;

        if (i + 1) % CHECKPOINT_EVERY == 0 || i + 1 == p.frames {
            compare_tables(&rx, &tables, p.name, i + 1, seed);
            println!(
                "  {}: {} frames, tables equal ({} paths, {} neighbors), {:.1} s",
                p.name,
                i + 1,
                tables.paths.used,
                tables.neighbors.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    // The tables must not have filled: a full table is a separate matter.
    assert!(tables.paths.used < PATH_TABLE_CAPACITY as usize / 2);
    assert!(tables.neighbors.len() < NEIGHBOR_CAPACITY as usize / 2);
    started.elapsed()
}

/// The seed (`LQ_DIFF_SEED`, else the clock) and the frame count (`LQ_DIFF_FRAMES`, else
/// [`DEFAULT_FRAMES`]) both tests draw from.
fn seed_and_frames() -> (u64, usize) {
    let seed = match std::env::var("LQ_DIFF_SEED") {
        Ok(s) => s.trim().parse().expect("LQ_DIFF_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    let total = match std::env::var("LQ_DIFF_FRAMES") {
        Ok(s) => s.trim().parse().expect("LQ_DIFF_FRAMES must be a count"),
        Err(_) => DEFAULT_FRAMES,
    };
    (seed, total)
}

#[test]
fn xdp_and_reference_decide_every_frame_alike() {
    lq_tests::require_root();
    let (seed, total) = seed_and_frames();
    println!(
        "xdp_differential: seed {seed} (LQ_DIFF_SEED={seed} reproduces it), {total} frames \
         (LQ_DIFF_FRAMES)"
    );
    let mut rng = SmallRng::seed_from_u64(seed);
    let phase2_frames = total / 5;
    let mut qualified = settings();
    qualified.as_qualified = true;
    qualified.as_plan = as_plan();
    let mut phases = [
        Phase {
            name: "phase 1 (unqualified)",
            settings: settings(),
            frames: total - phase2_frames,
            universe: universe_unqualified(&mut rng),
        },
        Phase {
            name: "phase 2 (AS-qualified, AS plan)",
            settings: qualified,
            frames: phase2_frames,
            universe: universe_qualified(&mut rng),
        },
    ];
    let mut stats = Stats::default();
    let started = Instant::now();
    for p in &mut phases {
        let t = run_phase(p, &mut rng, seed, &mut stats);
        println!(
            "{}: {} frames in {:.1} s ({:.0} frames/s)",
            p.name,
            p.frames,
            t.as_secs_f64(),
            p.frames as f64 / t.as_secs_f64().max(1e-9)
        );
    }
    let elapsed = started.elapsed();

    println!("\nframes by verdict (identical in XDP and the reference):");
    for (name, n) in &stats.by_verdict {
        println!("  {name:<18} {n:>8}");
    }
    println!("frames by kind and verdict:");
    for ((kind, name), n) in &stats.by_kind {
        println!("  {:<8} {name:<18} {n:>8}", format!("{kind:?}"));
    }
    println!("mutations (a frame may carry several) by verdict:");
    for (m, by) in &stats.by_mutation {
        let parts: Vec<String> = by.iter().map(|(v, n)| format!("{v}={n}")).collect();
        println!("  {m:<13} {}", parts.join(" "));
    }
    println!("counter totals: {}", counters_str(&stats.totals));
    println!(
        "frames with as_mismatch_entry: {}, change events: {} ({} naming their slots, {} zero transitions of which {} without a new entry)",
        stats.frames_with_as_mismatch_entry,
        stats.events,
        stats.events_with_slots,
        stats.zero_transition_events,
        stats.zero_transitions_of_known_entries
    );
    println!(
        "total: {} frames in {:.1} s ({:.0} frames/s)",
        stats.frames,
        elapsed.as_secs_f64(),
        stats.frames as f64 / elapsed.as_secs_f64().max(1e-9)
    );

    // The mix must really exercise every reason (scaled when LQ_DIFF_FRAMES is lowered).
    let min = (100 * total / DEFAULT_FRAMES).max(1) as u64;
    for reason in [
        "bad_ttl",
        "truncated",
        "bad_version",
        "bad_mode",
        "bad_length",
        "as_mismatch",
        "bad_value",
        "stale_seq",
        "accepted",
        "not_ours",
    ] {
        let n = stats.by_verdict.get(reason).copied().unwrap_or(0);
        assert!(
            n >= min,
            "only {n} frames with verdict {reason} (want >= {min})"
        );
    }
    assert!(
        stats.frames_with_as_mismatch_entry >= min,
        "only {} frames with as_mismatch_entry (want >= {min})",
        stats.frames_with_as_mismatch_entry
    );
    // Both kinds of change event: slots named, and the sender alone (more changes).
    assert!(
        stats.events_with_slots >= min && stats.events - stats.events_with_slots >= min,
        "change events: {} naming slots, {} naming the sender only (want >= {min} each)",
        stats.events_with_slots,
        stats.events - stats.events_with_slots
    );
    // Both rings: zero transitions (of entries known before too) and the others.
    assert!(
        stats.zero_transitions_of_known_entries >= min
            && stats.events - stats.zero_transition_events >= min,
        "change events: {} zero transitions ({} without a new entry), {} others (want >= {min} each)",
        stats.zero_transition_events,
        stats.zero_transitions_of_known_entries,
        stats.events - stats.zero_transition_events
    );
}

/// What the kernel would deliver to lqd's authentication socket from `frame`: an IPv4
/// datagram without options or fragmentation, or an IPv6 one without extension headers,
/// untagged, UDP to the LQ port, its lengths consistent with the frame (checksums aside:
/// the frame builder writes none, the kernel would check them before the socket, and the
/// XDP program does not read them). The source, the destination, the TTL / Hop Limit and
/// the payload, as the socket reports them.
fn deliverable(
    frame: &[u8],
    port: u16,
) -> Option<(std::net::SocketAddr, std::net::IpAddr, u8, &[u8])> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let be16 = |b: &[u8], at: usize| Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]));
    let (src, dst, ttl, udp) = match be16(frame, 12)? {
        0x0800 => {
            let ip = frame.get(14..34)?;
            let total = usize::from(be16(ip, 2)?);
            let fragmented = be16(ip, 6)? & 0x3fff != 0;
            if ip[0] != 0x45 || fragmented || ip[9] != 17 || total != frame.len() - 14 {
                return None;
            }
            let s = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let d = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(s), IpAddr::V4(d), ip[8], &frame[34..])
        }
        0x86dd => {
            let ip = frame.get(14..54)?;
            let payload_len = usize::from(be16(ip, 4)?);
            if ip[0] >> 4 != 6 || ip[6] != 17 || payload_len != frame.len() - 54 {
                return None;
            }
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                ip[7],
                &frame[54..],
            )
        }
        _ => return None,
    };
    let (sport, dport, len) = (be16(udp, 0)?, be16(udp, 2)?, usize::from(be16(udp, 4)?));
    if dport != port || len != udp.len() || len < 8 {
        return None;
    }
    Some((SocketAddr::new(src, sport), dst, ttl, &udp[8..]))
}

/// The socket path of `[receiver] authentication` (issue 39) against the wire: lqd reads
/// a datagram from its socket, verifies it, and hands it back to the same XDP program
/// rebuilt (`lq_user::core::auth::rebuild_frame`: the addresses, ports and TTL the socket
/// reported, and the payload). Every frame of the corpus the kernel would deliver to that
/// socket goes through both paths, the wire frame to one receiver and the rebuilt one to
/// another: the verdict, every counter's delta and, at the end, the path and neighbor
/// tables must be the same.
#[test]
fn the_socket_path_decides_every_deliverable_frame_as_the_wire_does() {
    lq_tests::require_root();
    let (seed, total) = seed_and_frames();
    println!("socket path: seed {seed} (LQ_DIFF_SEED={seed} reproduces it), {total} frames");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut universe = universe_unqualified(&mut rng);
    let s = settings();
    let mut wire = TestReceiver::load(&s).unwrap();
    let mut socket = TestReceiver::load(&s).unwrap();
    let mut rebuilt = Vec::new();
    let (mut compared, mut accepted) = (0usize, 0u64);
    for i in 0..total {
        let g = generate(&mut rng, &mut universe);
        let Some((source, destination, ttl, payload)) = deliverable(&g.frame, s.udp_port) else {
            continue;
        };
        lq_user::core::auth::rebuild_frame(
            source,
            destination,
            s.udp_port,
            ttl,
            payload,
            &mut rebuilt,
        );
        let (w0, s0) = (wire.counters().unwrap(), socket.counters().unwrap());
        let vw = wire.run(&g.frame).unwrap();
        let vs = socket.run(&rebuilt).unwrap();
        let (w1, s1) = (wire.counters().unwrap(), socket.counters().unwrap());
        let dw: Vec<u64> = w1.iter().zip(w0).map(|(a, b)| a - b).collect();
        let ds: Vec<u64> = s1.iter().zip(s0).map(|(a, b)| a - b).collect();
        assert!(
            vw == vs && dw == ds,
            "\nSOCKET PATH MISMATCH, frame #{i} (seed {seed}), {:?}: {}\nwire ({} octets): {}\n\
             rebuilt ({} octets): {}\nwire: verdict {}, counter deltas {dw:?}\n\
             socket: verdict {}, counter deltas {ds:?}\n",
            g.kind,
            g.what,
            g.frame.len(),
            hex(&g.frame),
            rebuilt.len(),
            hex(&rebuilt),
            xdp_name(vw),
            xdp_name(vs),
        );
        accepted += dw[Counter::Accepted as usize];
        compared += 1;
    }
    let (wp, wn) = kernel_tables(&wire);
    let (sp, sn) = kernel_tables(&socket);
    let mut report = String::new();
    diff_maps(&mut report, "path", &wp, &sp);
    diff_maps(&mut report, "neighbor", &wn, &sn);
    assert!(report.is_empty(), "TABLE MISMATCH (seed {seed}):\n{report}");
    println!(
        "socket path: {compared} of {total} frames deliverable to the socket, every one decided alike ({accepted} accepted), {} paths and {} neighbors alike (seed {seed})",
        wp.len(),
        wn.len()
    );
    assert!(compared > total / 4, "only {compared} deliverable frames");
    assert!(!wp.is_empty());
}
