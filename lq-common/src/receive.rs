//! The whole receive procedure of `spec/lq-udp-wire.md` (checks 1-11) over an abstract
//! path table. This is the reference that the XDP program is differentially tested against
//! and the receiver a daemon without XDP would run: same checks, same order, same counters,
//! same table contents.

use crate::{
    frame::{FrameClass, classify},
    maps::{
        AS_QUALIFIED_YES, COUNTER_COUNT, Counter, EVENT_FLAG_ZERO_TRANSITION, EVENT_SLOTS, NO_SLOT,
        NeighborKey, NeighborValue, PATH_FLAG_DIAGNOSTICS, PATH_FLAG_DROPS, PATH_FLAG_PFC_FABRIC,
        PathEvent, PathKey, PathValue, ReceiverConfig,
    },
    wire::{AsQualification, DecodeError, DecodePolicy, as_plan_contains, decode, serial_gt},
};

/// The table could not take a new key (the kernel's hash map returns E2BIG / ENOMEM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

/// The state the receiver reads and writes: in the kernel, the BPF maps.
pub trait ReceiveTables {
    /// Looks up a neighbor.
    fn neighbor(&self, key: &NeighborKey) -> Option<NeighborValue>;
    /// Inserts or replaces a neighbor.
    fn set_neighbor(&mut self, key: NeighborKey, value: NeighborValue) -> Result<(), TableFull>;
    /// Looks up a path entry.
    fn path(&self, key: &PathKey) -> Option<PathValue>;
    /// Inserts or replaces a path entry.
    fn set_path(&mut self, key: PathKey, value: PathValue) -> Result<(), TableFull>;
}

/// Why a datagram was discarded (checks 4-10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    /// Check 4.
    BadTtl,
    /// Checks 5-9.
    Decode(DecodeError),
    /// Check 10.
    StaleSeq,
}

impl Discard {
    /// The counter this discard increments.
    pub const fn counter(self) -> Counter {
        match self {
            Self::BadTtl => Counter::BadTtl,
            Self::StaleSeq => Counter::StaleSeq,
            Self::Decode(e) => match e {
                DecodeError::Truncated => Counter::Truncated,
                DecodeError::BadVersion => Counter::BadVersion,
                DecodeError::BadMode => Counter::BadMode,
                DecodeError::BadLength => Counter::BadLength,
                DecodeError::AsMismatch => Counter::AsMismatch,
                DecodeError::BadValue => Counter::BadValue,
            },
        }
    }

    /// The spec's name of the reason.
    pub const fn name(self) -> &'static str {
        self.counter().name()
    }
}

/// What the receiver did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not an LQ datagram (or no configuration yet): passed untouched.
    NotOurs,
    /// Discarded and counted.
    Discard(Discard),
    /// Accepted; `event` is set when an entry's LQS or CL changed or an entry was new.
    Accept {
        /// The change event, if any.
        event: Option<PathEvent>,
    },
}

/// Per-counter increments made while processing.
pub type Counters = [u64; COUNTER_COUNT as usize];

/// Whether a neighbor last seen at `last_seen_ns` is failed at `now_ns` (seed 003 section
/// 6.5: no datagram for miss_count x T_notify).
#[inline(always)]
pub const fn neighbor_failed(last_seen_ns: u64, now_ns: u64, dead_interval_ns: u64) -> bool {
    now_ns.saturating_sub(last_seen_ns) > dead_interval_ns
}

/// Processes one Ethernet frame exactly as the XDP program does.
pub fn process_frame<T: ReceiveTables>(
    frame: &[u8],
    cfg: &ReceiverConfig,
    now_ns: u64,
    tables: &mut T,
    counters: &mut Counters,
) -> Verdict {
    let payload = match classify(frame, cfg.udp_port) {
        FrameClass::NotOurs => {
            counters[Counter::NotOurs as usize] += 1;
            return Verdict::NotOurs;
        }
        FrameClass::BadTtl => return discard(Discard::BadTtl, counters),
        FrameClass::Truncated => return discard(Discard::Decode(DecodeError::Truncated), counters),
        FrameClass::Payload(p) => p,
    };
    process_payload(payload, cfg, now_ns, tables, counters)
}

fn discard(d: Discard, counters: &mut Counters) -> Verdict {
    counters[d.counter() as usize] += 1;
    Verdict::Discard(d)
}

/// Checks 5-11 on a UDP payload that passed checks 1-4.
pub fn process_payload<T: ReceiveTables>(
    payload: &[u8],
    cfg: &ReceiverConfig,
    now_ns: u64,
    tables: &mut T,
    counters: &mut Counters,
) -> Verdict {
    let policy = DecodePolicy {
        as_qualification: AsQualification::Required(cfg.as_qualified == AS_QUALIFIED_YES),
        as_plan: cfg.as_plan(),
    };
    let adv = match decode(payload, &policy) {
        Ok(a) => a,
        Err(e) => return discard(Discard::Decode(e), counters),
    };
    let h = adv.header;
    // Check 10.
    let nkey = NeighborKey {
        node_as: h.node_as,
        node_id: h.node_id,
    };
    let previous = tables.neighbor(&nkey);
    if let Some(n) = previous {
        if neighbor_failed(n.last_seen_ns, now_ns, cfg.dead_interval_ns) {
            counters[Counter::Resync as usize] += 1;
        } else if !serial_gt(h.sequence, n.last_sequence) {
            return discard(Discard::StaleSeq, counters);
        }
    }
    // Check 11.
    let check_remote_as = h.effectively_qualified() && cfg.as_plan_len != 0;
    let flags_common = if h.pfc_fabric {
        PATH_FLAG_PFC_FABRIC
    } else {
        0
    };
    let mut changed: u16 = 0;
    let mut zero_transition = false;
    for e in adv.entries() {
        if check_remote_as && !as_plan_contains(cfg.as_plan(), e.remote_as) {
            counters[Counter::AsMismatchEntry as usize] += 1;
            continue;
        }
        let key = PathKey {
            spine_as: h.node_as,
            spine_id: h.node_id,
            remote_as: e.remote_as,
            remote_id: e.remote_node_id,
            link_id: e.link_id,
        };
        let mut value = PathValue {
            last_update_ns: now_ns,
            available_bandwidth_bits: e.available_bandwidth.to_bits(),
            sequence: h.sequence,
            lqs: e.lqs,
            cl: e.cl,
            flags: flags_common,
            ..PathValue::default()
        };
        if let Some(d) = e.diagnostics {
            value.flags |= PATH_FLAG_DIAGNOSTICS | if d.drops_active { PATH_FLAG_DROPS } else { 0 };
            value.link_capacity_bits = d.link_capacity.to_bits();
            value.queue_depth = d.queue_depth;
            value.ecn_marking_rate = d.ecn_marking_rate;
            value.pfc_pause_fraction = d.pfc_pause_fraction;
        }
        let old = tables.path(&key);
        let is_change = match old {
            Some(old) => old.lqs != value.lqs || old.cl != value.cl,
            None => true,
        };
        // `EVENT_FLAG_ZERO_TRANSITION`: a change that may take a path quality to or from 0.
        let crosses_zero = match old {
            Some(old) => {
                is_change && ((old.lqs == 0) != (value.lqs == 0) || old.cl == 7 || value.cl == 7)
            }
            None => true,
        };
        match tables.set_path(key, value) {
            Ok(()) => {
                counters[Counter::EntriesStored as usize] += 1;
                counters[Counter::SlotsClaimed as usize] += u64::from(old.is_none());
                if is_change {
                    changed += 1;
                }
                zero_transition |= crosses_zero;
            }
            Err(TableFull) => counters[Counter::TableFull as usize] += 1,
        }
    }
    let accepted = previous.map_or(0, |n| n.accepted) + 1;
    let neighbor = NeighborValue {
        last_seen_ns: now_ns,
        accepted,
        last_sequence: h.sequence,
        // Cannot truncate: at most MAX_ENTRIES.
        last_entry_count: adv.entry_count() as u16,
        last_mode: h.mode.to_wire(),
        _pad: [0; 3],
    };
    if tables.set_neighbor(nkey, neighbor).is_err() {
        counters[Counter::TableFull as usize] += 1;
    }
    counters[Counter::Accepted as usize] += 1;
    let event = (changed > 0).then_some(PathEvent {
        time_ns: now_ns,
        node_as: h.node_as,
        node_id: h.node_id,
        sequence: h.sequence,
        changed,
        entries: adv.entry_count() as u16,
        mode: h.mode.to_wire(),
        flags: if zero_transition {
            EVENT_FLAG_ZERO_TRANSITION
        } else {
            0
        },
        // The reference has no slots: the event names the sender.
        changed_slots: [NO_SLOT; EVENT_SLOTS],
    });
    Verdict::Accept { event }
}
