//! The path table as forwarding sees it (seed 003 section 6.5): a failed neighbor's
//! entries, and entries not refreshed for more than the dead interval, count as LQS 0 /
//! CL 7. The views show these effective values next to the received ones.

use std::collections::BTreeMap;

use lq_common::maps::{NeighborKey, PathKey, PathValue};

/// Why an entry's effective values differ from the received ones (or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Refreshed within miss_count x T_notify, from a live neighbor: as received.
    Fresh,
    /// Not refreshed for more than miss_count x T_notify (wire spec, "entry ageing").
    Aged,
    /// Its neighbor (the spine) failed (seed 003 section 6.5).
    NeighborFailed,
}

impl EntryState {
    /// The name shown by `lqd show paths`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Aged => "aged",
            Self::NeighborFailed => "neighbor-failed",
        }
    }
}

/// CL of an entry that counts as failed (section 6.5: LQS 0 / CL 7).
pub const FAILED_CL: u8 = 7;

/// An entry as forwarding sees it, next to what was last received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveEntry {
    /// The received value with LQS 0 / CL 7 when the entry is aged or its neighbor failed.
    pub effective: PathValue,
    /// The last received value, unchanged.
    pub received: PathValue,
    /// Which of the two cases applies.
    pub state: EntryState,
}

impl EffectiveEntry {
    /// Section 6.5: a failed neighbor's entries, and an entry not refreshed for more than
    /// `dead_interval_ns`, count as LQS 0 / CL 7. The views show these effective values
    /// (what forwarding uses), not the last received ones. Uses the same "for more than"
    /// comparison as the controller and the XDP receiver.
    pub fn new(
        received: &PathValue,
        spine_failed: bool,
        now_ns: u64,
        dead_interval_ns: u64,
    ) -> Self {
        let state = if spine_failed {
            EntryState::NeighborFailed
        } else if super::heartbeat::entry_expired(received.last_update_ns, now_ns, dead_interval_ns)
        {
            EntryState::Aged
        } else {
            EntryState::Fresh
        };
        let mut effective = *received;
        if state != EntryState::Fresh {
            effective.lqs = 0;
            effective.cl = FAILED_CL;
        }
        Self {
            effective,
            received: *received,
            state,
        }
    }

    /// Adds what only `lqd show paths` shows to an entry rendered from
    /// [`EffectiveEntry::effective`]: the last received LQS and CL (not YANG leaves, so
    /// never in `show state`) and the entry state.
    pub fn annotate(&self, o: &mut serde_json::Value) {
        o["received-lqs"] = self.received.lqs.into();
        o["received-cl"] = self.received.cl.into();
        o["entry-state"] = self.state.as_str().into();
    }
}

/// The effective values of every entry, given which spines failed (section 6.5).
pub fn effective_paths(
    paths: &BTreeMap<PathKey, PathValue>,
    spine_failed: impl Fn(&NeighborKey) -> bool,
    now_ns: u64,
    dead_interval_ns: u64,
) -> BTreeMap<PathKey, EffectiveEntry> {
    paths
        .iter()
        .map(|(k, v)| {
            let spine = NeighborKey {
                node_as: k.spine_as,
                node_id: k.spine_id,
            };
            (
                *k,
                EffectiveEntry::new(v, spine_failed(&spine), now_ns, dead_interval_ns),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEAD: u64 = 60_000_000;

    fn value(lqs: u8, cl: u8, t: u64) -> PathValue {
        PathValue {
            last_update_ns: t,
            lqs,
            cl,
            ..Default::default()
        }
    }

    fn key(spine: u32, link: u32) -> PathKey {
        PathKey {
            spine_as: 0,
            spine_id: spine,
            remote_as: 0,
            remote_id: 104,
            link_id: link,
        }
    }

    /// Section 6.5: a failed neighbor's entries and aged entries are shown as LQS 0 /
    /// CL 7, with the received values kept apart; at exactly the dead interval an entry is
    /// still fresh ("for more than").
    #[test]
    fn failed_neighbors_and_aged_entries_show_lqs_0_cl_7() {
        let mut t = BTreeMap::new();
        t.insert(key(1, 7), value(200, 1, 1_000));
        t.insert(key(2, 7), value(180, 2, 1_000 + DEAD));
        t.insert(key(3, 7), value(150, 3, 0));
        let failed = NeighborKey {
            node_as: 0,
            node_id: 2,
        };
        let now = 1_000 + DEAD;
        let e = effective_paths(&t, |s| *s == failed, now, DEAD);
        let shown: Vec<(u8, u8, EntryState)> = e
            .values()
            .map(|x| (x.effective.lqs, x.effective.cl, x.state))
            .collect();
        assert_eq!(
            shown,
            [
                (200, 1, EntryState::Fresh),
                (0, 7, EntryState::NeighborFailed),
                (0, 7, EntryState::Aged),
            ]
        );
        let f = &e[&key(2, 7)];
        assert_eq!((f.received.lqs, f.received.cl), (180, 2));
        assert_eq!(f.effective.last_update_ns, f.received.last_update_ns);
        let mut o = serde_json::json!({"lqs": f.effective.lqs, "cl": f.effective.cl});
        f.annotate(&mut o);
        assert_eq!(o["lqs"], 0);
        assert_eq!(o["cl"], 7);
        assert_eq!(o["received-lqs"], 180);
        assert_eq!(o["received-cl"], 2);
        assert_eq!(o["entry-state"], "neighbor-failed");
        // One nanosecond later the first entry has not been refreshed for more than the
        // dead interval.
        let e = effective_paths(&t, |_| false, now + 1, DEAD);
        assert_eq!(e[&key(1, 7)].state, EntryState::Aged);
        assert_eq!(e[&key(2, 7)].state, EntryState::Fresh);
    }
}
