//! The control step's copy of the path table (seed 003 section 6.2), refreshed only where
//! something may have changed (issue 15).
//!
//! A leaf of a 64 x 512 fabric holds 32 768 entries and its spines rewrite every one of them
//! every T_notify; reading them all and rebuilding the [`PathSnapshot`] at every step made
//! a step O(table) and, at a step every few milliseconds, most of a core. Here a step reads
//! only the rows of the spines that can have moved:
//!
//! * the rows named by the receiver's change events (an accepted datagram that changed an
//!   entry's LQS or CL names up to `EVENT_SLOTS` of them by slot), or every row of the
//!   sender when the event names none (more changes than it has room for);
//! * spines whose oldest live entry reaches the end of its dead interval (section 6.5:
//!   an entry not refreshed by then counts as LQS 0 / CL 7; a refresh that changes nothing
//!   sends no event, so the row is read to see whether it was refreshed);
//! * the expired entries themselves, alone, at every step (a refresh that revives one
//!   sends no event either);
//! * spines that failed or recovered by heartbeat since the last step.
//!
//! The snapshot is updated in place, and the remote nodes whose effective entries changed
//! are returned: only their groups are recomputed. What changes without an event (an
//! entry's available bandwidth, its diagnostics) is read with the spine's next ageing
//! read, within a dead interval; the integral weight function, which reads those, has the
//! caller name every spine heard from since the last step. The set of keys changes only when the
//! receiver claims a slot; the caller then [`PathMirror::rebuild`]s from a full read.
//!
//! Pure: rows are read through a closure, time is an input.

use std::collections::{BTreeMap, BTreeSet};

use lq_common::maps::{PathKey, PathValue};

use super::heartbeat::entry_expired;
use super::path_quality::{NodeId, PathSnapshot, effective_entry, node, remote_order};

/// The rows of one spine and when they must be read again.
#[derive(Clone, Debug, Default)]
struct SpineRows {
    /// Positions of its entries in [`PathMirror::entries`].
    positions: Vec<u32>,
    due: Due,
}

/// When a spine's rows must be read again, besides a change event.
#[derive(Clone, Debug, Default)]
struct Due {
    /// The oldest refresh time among its live entries (as last read): once that entry's
    /// dead interval has passed, the rows are read again.
    oldest_live_ns: Option<u64>,
    /// Positions of the entries that had expired at the last read (their spine not
    /// failed): read again, alone, at every step; a refresh that changes nothing sends no
    /// event. (A spine that stopped advertising a remote node keeps its slot for ever:
    /// that row, not the spine's 512, is read at every step.)
    expired: Vec<u32>,
}

/// What a [`PathMirror::refresh`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    /// Rows read.
    pub rows_read: usize,
    /// Remote nodes with an entry whose effective values changed.
    pub changed_remotes: BTreeSet<NodeId>,
    /// A row no longer held the key it held at the last rebuild (or could not be read):
    /// the caller must rebuild from a full read.
    pub stale: bool,
}

/// The path table as the control step sees it; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct PathMirror {
    /// Every entry, sorted by [`remote_order`]; a position is also the entry's position in
    /// `snapshot`.
    entries: Vec<(PathKey, PathValue)>,
    snapshot: PathSnapshot,
    spines: BTreeMap<NodeId, SpineRows>,
    /// The failed spines the snapshot was last computed with.
    failed: BTreeSet<NodeId>,
}

impl PathMirror {
    /// Every entry, sorted by [`remote_order`], refresh times raised to `not_before_ns` as of
    /// the last read.
    pub fn entries(&self) -> &[(PathKey, PathValue)] {
        &self.entries
    }

    /// The effective table (ageing and failures applied as of the last rebuild or refresh).
    pub fn snapshot(&self) -> &PathSnapshot {
        &self.snapshot
    }

    /// Rebuilds from a full read of the table. `not_before_ns`: refresh times older than
    /// this are raised to it (lqd's start: no receiver refreshed the table while lqd was
    /// not running, section 6.5).
    pub fn rebuild(
        &mut self,
        mut entries: Vec<(PathKey, PathValue)>,
        not_before_ns: u64,
        now_ns: u64,
        dead_interval_ns: u64,
        failed: &BTreeSet<NodeId>,
    ) {
        entries.sort_unstable_by_key(|e| remote_order(&e.0));
        for (_, v) in &mut entries {
            v.last_update_ns = v.last_update_ns.max(not_before_ns);
        }
        self.snapshot =
            PathSnapshot::from_entries(entries.iter().copied(), now_ns, dead_interval_ns, failed);
        self.spines.clear();
        for (i, (k, v)) in entries.iter().enumerate() {
            let spine = node(k.spine_as, k.spine_id);
            let rows = self.spines.entry(spine).or_default();
            rows.positions.push(i as u32);
            note_entry(
                &mut rows.due,
                i as u32,
                v,
                failed.contains(&spine),
                now_ns,
                dead_interval_ns,
            );
        }
        self.entries = entries;
        self.failed = failed.clone();
    }

    /// Reads again the rows that can have moved (module documentation) through `read`
    /// (position -> the entry now in that row) and updates the snapshot in place: every row
    /// of the spines in `named`, the rows at the positions in `named_rows`.
    #[allow(clippy::too_many_arguments)] // the step's inputs, each a different kind
    pub fn refresh(
        &mut self,
        named: &BTreeSet<NodeId>,
        named_rows: &[u32],
        not_before_ns: u64,
        now_ns: u64,
        dead_interval_ns: u64,
        failed: &BTreeSet<NodeId>,
        mut read: impl FnMut(usize) -> Option<(PathKey, PathValue)>,
    ) -> Refresh {
        let mut due: BTreeSet<NodeId> = named
            .iter()
            .filter(|s| self.spines.contains_key(s))
            .copied()
            .collect();
        due.extend(failed.symmetric_difference(&self.failed).copied());
        let mut expired_only: Vec<NodeId> = Vec::new();
        for (spine, rows) in &self.spines {
            let aged = rows
                .due
                .oldest_live_ns
                .is_some_and(|t| entry_expired(t, now_ns, dead_interval_ns));
            if aged {
                due.insert(*spine);
            } else if !rows.due.expired.is_empty() && !due.contains(spine) {
                expired_only.push(*spine);
            }
        }
        self.failed = failed.clone();
        let mut out = Refresh::default();
        let clock = Clock {
            not_before_ns,
            now_ns,
            dead_ns: dead_interval_ns,
        };
        // The named rows of the spines not read in full below, first (a row read in full
        // later in this step would only be read twice).
        for &p32 in named_rows {
            let p = p32 as usize;
            let Some((key, _)) = self.entries.get(p) else {
                out.stale = true;
                continue;
            };
            let spine = node(key.spine_as, key.spine_id);
            if due.contains(&spine) {
                continue;
            }
            let spine_failed = failed.contains(&spine);
            let Some(v) = reread(
                &mut self.entries,
                &mut self.snapshot,
                &mut out,
                p,
                spine_failed,
                &clock,
                &mut read,
            ) else {
                continue;
            };
            // Its spine's schedule stays: the row's refresh is newer than the oldest one
            // it knew. An expired row (not expected right after a change) joins the rows
            // read at every step.
            if !spine_failed
                && entry_expired(v.last_update_ns, now_ns, dead_interval_ns)
                && let Some(rows) = self.spines.get_mut(&spine)
                && !rows.due.expired.contains(&p32)
            {
                rows.due.expired.push(p32);
            }
        }
        // All rows of the spines due; only the expired rows of the others.
        let work = due
            .into_iter()
            .map(|s| (s, true))
            .chain(expired_only.into_iter().map(|s| (s, false)));
        for (spine, all) in work {
            let Some(rows) = self.spines.get_mut(&spine) else {
                continue;
            };
            let spine_failed = failed.contains(&spine);
            let (positions, mut due) = if all {
                (rows.positions.clone(), Due::default())
            } else {
                // The live rows keep their schedule; the expired ones are read again.
                let expired = std::mem::take(&mut rows.due.expired);
                (
                    expired,
                    Due {
                        oldest_live_ns: rows.due.oldest_live_ns,
                        expired: Vec::new(),
                    },
                )
            };
            for p32 in positions {
                if let Some(v) = reread(
                    &mut self.entries,
                    &mut self.snapshot,
                    &mut out,
                    p32 as usize,
                    spine_failed,
                    &clock,
                    &mut read,
                ) {
                    note_entry(&mut due, p32, &v, spine_failed, now_ns, dead_interval_ns);
                }
            }
            rows.due = due;
        }
        out
    }
}

/// The times a refresh judges rows by.
struct Clock {
    /// Refresh times older than this are raised to it (lqd's start).
    not_before_ns: u64,
    now_ns: u64,
    dead_ns: u64,
}

/// Reads the row at `p` again through `read` into `entries` and the snapshot, naming its
/// remote node in `out` when its effective values moved. `None` (and `out.stale`) when
/// the row no longer holds the key it held at the last rebuild.
fn reread(
    entries: &mut [(PathKey, PathValue)],
    snapshot: &mut PathSnapshot,
    out: &mut Refresh,
    p: usize,
    spine_failed: bool,
    clock: &Clock,
    read: &mut impl FnMut(usize) -> Option<(PathKey, PathValue)>,
) -> Option<PathValue> {
    let Some(entry) = entries.get_mut(p) else {
        out.stale = true;
        return None;
    };
    match read(p) {
        Some((k, mut v)) if k == entry.0 => {
            v.last_update_ns = v.last_update_ns.max(clock.not_before_ns);
            entry.1 = v;
        }
        _ => {
            out.stale = true;
            return None;
        }
    }
    out.rows_read += 1;
    let (k, v) = *entry;
    let (lqs, signal) = effective_entry(&v, spine_failed, clock.now_ns, clock.dead_ns);
    if snapshot.update_at(p, lqs, signal) {
        out.changed_remotes.insert(node(k.remote_as, k.remote_id));
    }
    Some(v)
}

/// Folds the entry at `position` into its spine's read schedule.
fn note_entry(
    due: &mut Due,
    position: u32,
    v: &PathValue,
    spine_failed: bool,
    now_ns: u64,
    dead: u64,
) {
    if spine_failed {
        // Its entries come back with the spine (a heartbeat recovery reads them).
        return;
    }
    if entry_expired(v.last_update_ns, now_ns, dead) {
        due.expired.push(position);
    } else {
        due.oldest_live_ns = Some(
            due.oldest_live_ns
                .map_or(v.last_update_ns, |t| t.min(v.last_update_ns)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::tests::{key, value};

    const MS: u64 = 1_000_000;
    const DEAD: u64 = 60 * MS;

    /// A table of `spines` x `remotes`, entry LQS `lqs(spine, remote)`, refreshed at `at`,
    /// in [`remote_order`] (the order of the kernel's known rows, so a row's position is
    /// the mirror's).
    fn table(
        spines: u32,
        remotes: u32,
        at: u64,
        lqs: impl Fn(u32, u32) -> u8,
    ) -> Vec<(PathKey, PathValue)> {
        let mut t = Vec::new();
        for s in 1..=spines {
            for r in 100..100 + remotes {
                t.push((key(s, r, 7), value(lqs(s, r), at)));
            }
        }
        t.sort_unstable_by_key(|e| remote_order(&e.0));
        t
    }

    /// The mirror after any sequence of refreshes equals a rebuild from the same table.
    fn assert_same_as_rebuild(m: &PathMirror, now: u64, failed: &BTreeSet<NodeId>) {
        let mut fresh = PathMirror::default();
        fresh.rebuild(m.entries.clone(), 0, now, DEAD, failed);
        assert_eq!(m.snapshot(), fresh.snapshot());
    }

    #[test]
    fn reads_only_the_named_spines_and_reports_changed_remotes() {
        let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Spine 2's entry for remote 103 changes; its refresh names spine 2.
        for (k, v) in &mut kernel {
            if k.spine_id == 2 {
                v.last_update_ns = 20 * MS;
                if k.remote_id == 103 {
                    v.lqs = 50;
                }
            }
        }
        let r = m.refresh(&[node(0, 2)].into(), &[], 0, 20 * MS, DEAD, &none, |p| {
            kernel.get(p).copied()
        });
        assert_eq!(r.rows_read, 8, "one spine's rows");
        assert_eq!(r.changed_remotes, [node(0, 103)].into());
        assert!(!r.stale);
        assert_eq!(m.snapshot().links(node(0, 2), node(0, 103)), &[(7, 50)]);
        assert_same_as_rebuild(&m, 20 * MS, &none);
        // Nothing named, nothing due: no read at all.
        let r = m.refresh(&BTreeSet::new(), &[], 0, 30 * MS, DEAD, &none, |_| {
            panic!("no row is due")
        });
        assert_eq!(r, Refresh::default());
    }

    #[test]
    fn reads_only_the_named_rows() {
        let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Two entries change (spines 2 and 3); their events name their rows.
        let mut rows = Vec::new();
        for (p, (k, v)) in kernel.iter_mut().enumerate() {
            if (k.spine_id, k.remote_id) == (2, 103) || (k.spine_id, k.remote_id) == (3, 105) {
                v.lqs = 40 + k.spine_id as u8;
                v.last_update_ns = 20 * MS;
                rows.push(p as u32);
            }
        }
        let mut read = Vec::new();
        let r = m.refresh(&BTreeSet::new(), &rows, 0, 20 * MS, DEAD, &none, |p| {
            read.push(p);
            kernel.get(p).copied()
        });
        assert_eq!(r.rows_read, 2, "the named rows alone");
        assert_eq!(read.len(), 2);
        assert_eq!(r.changed_remotes, [node(0, 103), node(0, 105)].into());
        assert_eq!(m.snapshot().links(node(0, 2), node(0, 103)), &[(7, 42)]);
        assert_same_as_rebuild(&m, 20 * MS, &none);
        // A named row of a spine read in full is read once.
        let r = m.refresh(&[node(0, 2)].into(), &rows, 0, 20 * MS, DEAD, &none, |p| {
            kernel.get(p).copied()
        });
        assert_eq!(
            r.rows_read,
            8 + 1,
            "spine 2's eight rows and spine 3's named one"
        );
        // A named position past the table: the caller must rebuild.
        let r = m.refresh(&BTreeSet::new(), &[999], 0, 20 * MS, DEAD, &none, |p| {
            kernel.get(p).copied()
        });
        assert!(r.stale);
    }

    #[test]
    fn an_unrefreshed_entry_expires_without_an_event_and_comes_back() {
        let mut kernel = table(2, 2, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Spine 1 keeps refreshing remote 100 (no change, so no event), not remote 101.
        let refresh = |kernel: &mut Vec<(PathKey, PathValue)>, at: u64| {
            for (k, v) in kernel.iter_mut() {
                if k.spine_id == 2 || k.remote_id == 100 {
                    v.last_update_ns = at;
                }
            }
        };
        let mut expired_at = None;
        for t in (20..=120).step_by(10) {
            refresh(&mut kernel, t * MS);
            let r = m.refresh(&BTreeSet::new(), &[], 0, t * MS, DEAD, &none, |p| {
                kernel.get(p).copied()
            });
            if r.changed_remotes.contains(&node(0, 101)) && expired_at.is_none() {
                expired_at = Some(t);
            }
            assert_same_as_rebuild(&m, t * MS, &none);
        }
        // Refreshed at 10 ms, dead after 70 ms: seen at the first step after.
        assert_eq!(expired_at, Some(80));
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 101)), &[(7, 0)]);
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 100)), &[(7, 200)]);
        // Refreshed again without a change (no event): live at the next step.
        for (k, v) in &mut kernel {
            if k.spine_id == 1 {
                v.last_update_ns = 125 * MS;
            }
        }
        let r = m.refresh(&BTreeSet::new(), &[], 0, 130 * MS, DEAD, &none, |p| {
            kernel.get(p).copied()
        });
        assert_eq!(r.changed_remotes, [node(0, 101)].into());
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 101)), &[(7, 200)]);
    }

    #[test]
    fn only_the_expired_row_is_read_at_every_step() {
        let mut kernel = table(2, 4, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Spine 1 stops advertising remote 103 (its slot stays); everything else is
        // refreshed every 20 ms without a change (no events).
        let mut reads = Vec::new();
        for t in (30..=250).step_by(10) {
            if t % 20 == 10 {
                for (k, v) in &mut kernel {
                    if !(k.spine_id == 1 && k.remote_id == 103) {
                        v.last_update_ns = t * MS;
                    }
                }
            }
            let r = m.refresh(&BTreeSet::new(), &[], 0, t * MS, DEAD, &none, |p| {
                kernel.get(p).copied()
            });
            assert!(!r.stale);
            reads.push((t, r.rows_read));
            assert_same_as_rebuild(&m, t * MS, &none);
        }
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 103)), &[(7, 0)]);
        // Once expired (after 70 ms), the row is read alone at each step; each spine's
        // other rows only when their ageing read is due (every 40-60 ms), never every step.
        let steps_with_only_that_row = reads.iter().filter(|(t, n)| *t > 80 && *n == 1).count();
        assert!(steps_with_only_that_row >= 8, "{reads:?}");
        assert!(reads.iter().all(|(_, n)| *n <= 8), "{reads:?}");
    }

    #[test]
    fn failure_and_recovery_by_heartbeat_reread_the_spine() {
        let kernel = table(3, 4, 10 * MS, |s, r| (s * 10 + r % 10) as u8);
        let mut m = PathMirror::default();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &BTreeSet::new());
        let failed: BTreeSet<NodeId> = [node(0, 3)].into();
        let r = m.refresh(&BTreeSet::new(), &[], 0, 20 * MS, DEAD, &failed, |p| {
            kernel.get(p).copied()
        });
        assert_eq!(r.rows_read, 4);
        assert_eq!(r.changed_remotes.len(), 4);
        assert_same_as_rebuild(&m, 20 * MS, &failed);
        let r = m.refresh(
            &BTreeSet::new(),
            &[],
            0,
            30 * MS,
            DEAD,
            &BTreeSet::new(),
            |p| kernel.get(p).copied(),
        );
        assert_eq!(r.changed_remotes.len(), 4);
        assert_same_as_rebuild(&m, 30 * MS, &BTreeSet::new());
    }

    #[test]
    fn a_moved_key_asks_for_a_rebuild() {
        let kernel = table(1, 2, 10 * MS, |_, _| 9);
        let mut m = PathMirror::default();
        m.rebuild(kernel, 0, 10 * MS, DEAD, &BTreeSet::new());
        let r = m.refresh(
            &[node(0, 1)].into(),
            &[],
            0,
            20 * MS,
            DEAD,
            &BTreeSet::new(),
            |_| Some((key(1, 999, 7), value(1, 20 * MS))),
        );
        assert!(r.stale);
        let r = m.refresh(
            &[node(0, 1)].into(),
            &[],
            0,
            20 * MS,
            DEAD,
            &BTreeSet::new(),
            |_| None,
        );
        assert!(r.stale);
    }

    #[test]
    fn not_before_raises_old_refresh_times() {
        let kernel = table(1, 1, 5 * MS, |_, _| 77);
        let mut m = PathMirror::default();
        // Started at 100 ms: the 5 ms entry is live until 160 ms.
        m.rebuild(kernel.clone(), 100 * MS, 150 * MS, DEAD, &BTreeSet::new());
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 100)), &[(7, 77)]);
        let r = m.refresh(
            &BTreeSet::new(),
            &[],
            100 * MS,
            161 * MS,
            DEAD,
            &BTreeSet::new(),
            |p| kernel.get(p).copied(),
        );
        assert_eq!(r.changed_remotes, [node(0, 100)].into());
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 100)), &[(7, 0)]);
    }
}
