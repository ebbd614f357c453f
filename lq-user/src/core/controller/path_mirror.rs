//! The control step's copy of the path table (seed 003 section 6.2), refreshed only where
//! something may have changed (issue 15).
//!
//! A leaf of a 64 x 512 fabric holds 32 768 entries and its spines rewrite every one of them
//! every T_notify; reading them all and rebuilding the [`PathSnapshot`] at every step made
//! a step O(table) and, at a step every few milliseconds, most of a core. Here a step reads
//! only the rows that can have moved:
//!
//! * the rows named by the receiver's change events (an accepted datagram that changed an
//!   entry's LQS or CL names up to `EVENT_SLOTS` of them by slot), or every row of the
//!   sender when the event names none (more changes than it has room for);
//! * rows that may have aged (section 6.5: an entry not refreshed for a dead interval
//!   counts as LQS 0 / CL 7; a refresh that changes nothing sends no event). The receiver
//!   stamps every slot it writes in a compact array ([`lq_common::maps::PathStampLine`]);
//!   once the oldest live entry reaches the end of its dead interval, a sweep reads every
//!   row's stamp (4 octets each with its LQS and CL, 128 KiB for the 32 768 rows of a
//!   64 x 512 leaf, in the rows' order) and
//!   reads a row only when its stamp has not moved since its refresh time as known. A
//!   moved stamp raises the known refresh time to the stamp's (a lower bound, at most
//!   1.05 ms early); an entry is aged only after its row says so. A row's known stamp is
//!   always one read from the stamp array (the first sweep after a rebuild only records
//!   them). Without stamps (pins of an older lqd) the sweep reads every row whose known
//!   refresh time has reached its dead interval. A sweep due when every row it would
//!   judge (neither expired nor of a failed spine) has been read and found fresh since the
//!   last one (under a fabric's churn, every row by its stamp word every T_notify) is not
//!   done: no row can have aged, and the oldest refresh time noted since is the next
//!   sweep's;
//! * the expired entries themselves, alone, at every step (a refresh that revives one
//!   sends no event either);
//! * spines that failed or recovered by heartbeat since the last step.
//!
//! A row is read by its stamp word alone (its refresh stamp, LQS and CL, 4 octets the
//! receiver writes after the 48-octet row) when the weights read nothing else of an entry
//! ([`PathMirror::set_qualities_only`]).
//!
//! The snapshot is updated in place, and the remote nodes whose effective entries changed
//! are returned: only their groups are recomputed. What changes without an event (an
//! entry's available bandwidth, its diagnostics) is read when its spine is named or at the
//! next full read; the integral weight function, which reads those, has the caller name
//! every spine heard from since the last step. The set of keys changes only when the
//! receiver claims a slot; the caller then [`PathMirror::rebuild`]s from a full read.
//!
//! Pure: rows and stamps are read through [`TableRows`], time is an input.

use std::collections::{BTreeMap, BTreeSet};

use lq_common::maps::{PathKey, PathValue, path_stamp, path_stamp_time_ns, path_stamp_word_parts};

use super::heartbeat::entry_expired;
use super::path_quality::{EntryMove, NodeId, PathSnapshot, effective_entry, node, remote_order};

/// Where a refresh reads the table.
pub trait TableRows {
    /// The entry now in the row at `position` (the mirror's order); `None` when it cannot
    /// be read.
    fn row(&mut self, position: usize) -> Option<(PathKey, PathValue)>;

    /// The refresh stamp of the row at `position`; `None` when the table keeps no stamps.
    fn stamp(&mut self, position: usize) -> Option<u16> {
        let _ = position;
        None
    }

    /// The stamp word of the row at `position` ([`lq_common::maps::path_stamp_word`]: its
    /// refresh stamp, LQS and CL as last written); `None` when the table keeps none.
    fn stamp_word(&mut self, position: usize) -> Option<u32> {
        let _ = position;
        None
    }

    /// Calls `f(position, stamp)` with every row's refresh stamp
    /// ([`lq_common::maps::path_stamp`] of its last write), in the order cheapest to read;
    /// `false`, without calling it, when the table keeps no stamps.
    fn stamps(&mut self, f: impl FnMut(usize, u16)) -> bool {
        let _ = f;
        false
    }
}

/// Rows read by a closure; no stamps.
impl<F: FnMut(usize) -> Option<(PathKey, PathValue)>> TableRows for F {
    fn row(&mut self, position: usize) -> Option<(PathKey, PathValue)> {
        self(position)
    }
}

/// What a [`PathMirror::refresh`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    /// Rows read (whole, or their stamp words).
    pub rows_read: usize,
    /// Of those, the rows read by their stamp words alone
    /// ([`PathMirror::set_qualities_only`]).
    pub words_read: usize,
    /// Stamps read by an ageing sweep (0 when none was due).
    pub stamps_read: usize,
    /// Remote nodes with an entry whose effective values changed, sorted, each once (a
    /// sorted vector, not a set: under a fabric's churn every step names all 512 of a
    /// 64 x 512 leaf, and building a tree of them was 1.8 % of lqd's samples, issue 41).
    pub changed_remotes: Vec<NodeId>,
    /// Of those, the ones with an entry whose move can take a path quality to or from 0
    /// ([`EntryMove::CrossesZero`]): section 6.4 applies such a transition at once.
    pub zero_crossing_remotes: BTreeSet<NodeId>,
    /// A row no longer held the key it held at the last rebuild (or could not be read):
    /// the caller must rebuild from a full read.
    pub stale: bool,
}

/// Per row (by position) what the ageing sweep needs, kept beside `entries` so that a
/// sweep touches no key.
#[derive(Clone, Copy, Debug, Default)]
struct RowState {
    /// Its spine's index in [`PathMirror::spines`].
    spine: u32,
    /// Its remote node's index among the snapshot's ([`PathSnapshot::remote_at`]).
    remote: u32,
    /// The stamp of its refresh time as known (from the row or the last sweep).
    stamp: u16,
    /// In [`PathMirror::expired`].
    expired: bool,
    /// `stamp` was read from the stamp array (by a row's read or a sweep) since the last
    /// rebuild: a stamp word that differs from it is a later write.
    stamp_known: bool,
    /// The refresh that last read the row ([`PathMirror::refreshes`]).
    read_in: u32,
    /// The ageing epoch in which it was last noted live ([`PathMirror::epoch`]).
    noted_in: u32,
}

/// One spine's rows and whether it has failed by heartbeat.
#[derive(Clone, Debug, Default)]
struct SpineRows {
    node: NodeId,
    /// Positions of its entries in [`PathMirror::entries`].
    positions: Vec<u32>,
    failed: bool,
}

/// The path table as the control step sees it; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct PathMirror {
    /// Every entry, sorted by [`remote_order`]; a position is also the entry's position in
    /// `snapshot`. A refresh time is exact after a row read, a lower bound after a sweep.
    entries: Vec<(PathKey, PathValue)>,
    rows: Vec<RowState>,
    snapshot: PathSnapshot,
    spines: Vec<SpineRows>,
    spine_index: BTreeMap<NodeId, u32>,
    /// Per remote node (by its index among the snapshot's), the refresh that last named it
    /// changed ([`Self::refreshes`]).
    remote_named_in: Vec<u32>,
    /// The remote nodes (their indexes) this refresh named changed, each once: put
    /// in `Refresh::changed_remotes` at its end, sorted, in one build. (A tree insert per
    /// remote node named, and one per row where rows do not come in remote order, was
    /// most of what naming cost: under a fabric's churn every step names all 512 remote
    /// nodes of a 64 x 512 leaf, issue 41.)
    named_remotes: Vec<u32>,
    /// Positions of the entries of live spines that had expired at their last read: read
    /// again, alone, at every step. (A spine that stopped advertising a remote node keeps
    /// its slot for ever: that row, not the spine's 512, is read at every step.)
    expired: Vec<u32>,
    /// The oldest known refresh time among the live entries of live spines: the next
    /// ageing sweep is due once its dead interval has passed.
    oldest_live_ns: Option<u64>,
    /// Refreshes done, from 1 (wrapping back to 1, never 0, a row's mark before any read):
    /// which rows a refresh has read already.
    refreshes: u32,
    /// The rows' stamps have been read since the last rebuild: a stamp that differs from
    /// the one known is a refresh. (The first sweep after a rebuild only records them: a
    /// row's stamp is taken from the stamp array, never derived from the row, so that a
    /// stamp array younger than the table, after an upgrade, is not read as refreshes.)
    stamps_known: bool,
    /// Per spine, read in full by this refresh: kept so that a refresh allocates nothing.
    in_full: Vec<bool>,
    /// Read a row by its stamp word where that suffices ([`Self::set_qualities_only`]).
    qualities_only: bool,
    /// The ageing epoch: since the last sweep (or the last sweep found unnecessary), from 1
    /// (wrapping back to 1, never 0, a row's mark before any note).
    epoch: u32,
    /// Rows noted live in this epoch, each once ([`RowState::noted_in`]).
    epoch_rows: usize,
    /// The oldest refresh time noted live in this epoch.
    epoch_oldest_ns: Option<u64>,
    /// Ageing sweeps done, and found unnecessary ([`Self::sweeps`]).
    sweeps: u64,
    sweeps_skipped: u64,
    /// Tests: sweep whenever one is due, as before the epochs (the reference the test
    /// `a_sweep_found_unnecessary_changes_nothing` holds the skipping mirror to).
    #[cfg(test)]
    sweep_always: bool,
}

/// A refresh reads the spines it reads in full in the table's order once their rows are
/// at least 1 / `SCAN_IN_ORDER_FROM` of the table (a pass that skips the other rows costs
/// far less than reading those rows out of order).
const SCAN_IN_ORDER_FROM: usize = 8;

impl PathMirror {
    /// Every entry, sorted by [`remote_order`], refresh times raised to `not_before_ns` as of
    /// the last read (a sweep's lower bound for rows it did not read).
    pub fn entries(&self) -> &[(PathKey, PathValue)] {
        &self.entries
    }

    /// The effective table (ageing and failures applied as of the last rebuild or refresh).
    pub fn snapshot(&self) -> &PathSnapshot {
        &self.snapshot
    }

    /// Whether a refresh may read a row by its stamp word alone (its refresh stamp, LQS and
    /// CL, 4 octets the receiver writes after the row) rather than the whole row (48):
    /// when the weights read nothing else of an entry (no available bandwidth:
    /// [`super::config::ControllerConfig::reads_available_bandwidth`]). A row is still
    /// read whole when its stamp is not known yet (after a rebuild), when the word's time
    /// says it may have aged (6.5: an entry is aged only after its row says so), and for
    /// the expired rows and the ageing sweep. What a word does not carry (available
    /// bandwidth, diagnostics) is then read at the next whole read of the row: the full
    /// read every 5 s at the latest (`lqd show paths` reads the table itself).
    pub fn set_qualities_only(&mut self, on: bool) {
        self.qualities_only = on;
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
        self.rows.clear();
        for (_, v) in &mut entries {
            self.rows.push(RowState::default());
            v.last_update_ns = v.last_update_ns.max(not_before_ns);
        }
        self.snapshot =
            PathSnapshot::from_entries(entries.iter().copied(), now_ns, dead_interval_ns, failed);
        self.spines.clear();
        self.spine_index.clear();
        // The entries are sorted by remote node, as the snapshot's remote nodes are: a row's
        // remote node is the snapshot's at the count of distinct ones before it.
        let mut last_remote: Option<NodeId> = None;
        let mut remote_index = 0u32;
        for (i, (k, _)) in entries.iter().enumerate() {
            let remote = node(k.remote_as, k.remote_id);
            if last_remote.is_some_and(|r| r != remote) {
                remote_index += 1;
            }
            last_remote = Some(remote);
            debug_assert_eq!(self.snapshot.remote_at(remote_index as usize), Some(remote));
            self.rows[i].remote = remote_index;
            let spine = node(k.spine_as, k.spine_id);
            let index = *self.spine_index.entry(spine).or_insert_with(|| {
                self.spines.push(SpineRows {
                    node: spine,
                    positions: Vec::new(),
                    failed: failed.contains(&spine),
                });
                self.spines.len() as u32 - 1
            });
            self.spines[index as usize].positions.push(i as u32);
            self.rows[i].spine = index;
        }
        self.remote_named_in.clear();
        self.remote_named_in.resize(self.snapshot.remote_count(), 0);
        self.entries = entries;
        self.expired.clear();
        self.oldest_live_ns = None;
        self.stamps_known = false;
        self.next_epoch();
        for p in 0..self.entries.len() {
            self.note(p, now_ns, dead_interval_ns);
        }
    }

    /// Reads again the rows that can have moved (module documentation) from `table` and
    /// updates the snapshot in place: every row of the spines in `named`, the rows at the
    /// positions in `named_rows`, the expired rows, and the rows an ageing sweep finds
    /// unrefreshed.
    pub fn refresh(
        &mut self,
        named: &BTreeSet<NodeId>,
        named_rows: &[u32],
        clock: RefreshClock,
        failed: &BTreeSet<NodeId>,
        table: &mut impl TableRows,
    ) -> Refresh {
        let mut out = Refresh::default();
        self.refreshes = self.refreshes.wrapping_add(1);
        if self.refreshes == 0 {
            // Wrapped (after 2^32 refreshes, 200 days at 250 a second): no row's mark may
            // equal a refresh to come, or that refresh would skip the row.
            self.refreshes = 1;
            self.rows.iter_mut().for_each(|r| r.read_in = 0);
            self.remote_named_in.iter_mut().for_each(|r| *r = 0);
        }
        self.named_remotes.clear();
        // The expired rows: taken out of the list first; every row read below is noted
        // again (back on the list while still expired).
        let expired = std::mem::take(&mut self.expired);
        for &p in &expired {
            self.rows[p as usize].expired = false;
        }
        // Spines read in full: named ones, and those that failed or recovered.
        let mut full: BTreeSet<u32> = named
            .iter()
            .filter_map(|s| self.spine_index.get(s).copied())
            .collect();
        for (i, spine) in self.spines.iter_mut().enumerate() {
            let now_failed = failed.contains(&spine.node);
            if now_failed != spine.failed {
                spine.failed = now_failed;
                full.insert(i as u32);
                if now_failed {
                    // Its rows leave the sweeps: those noted in this epoch are no longer
                    // counted among the rows a sweep would judge.
                    for &p in &spine.positions {
                        unnote(&mut self.rows[p as usize], self.epoch, &mut self.epoch_rows);
                    }
                }
            }
        }
        // The named rows of the spines not read in full below (a row read in full later in
        // this step would only be read twice).
        for &p32 in named_rows {
            let p = p32 as usize;
            let Some(row) = self.rows.get(p) else {
                out.stale = true;
                continue;
            };
            if full.contains(&row.spine) || row.read_in == self.refreshes {
                continue;
            }
            if !self.read_word(p, &clock, table, &mut out) {
                self.read_row(p, &clock, table, &mut out);
            }
        }
        let full_rows: usize = full
            .iter()
            .map(|s| self.spines[*s as usize].positions.len())
            .sum();
        if full_rows.saturating_mul(SCAN_IN_ORDER_FROM) >= self.entries.len() {
            // Many spines (every one, when each moved): the rows in the table's order. A
            // spine's rows lie one remote node's run apart; read spine by spine, each row
            // missed the cache and named a remote node other than the row before
            // (issue 15: 32 768 rows took 1 ms, a third of the step).
            let mut in_full = std::mem::take(&mut self.in_full);
            in_full.clear();
            in_full.resize(self.spines.len(), false);
            for s in &full {
                in_full[*s as usize] = true;
            }
            let mut batch = RowBatch::new();
            for p in 0..self.rows.len() {
                if in_full[self.rows[p].spine as usize]
                    && !self.read_word(p, &clock, table, &mut out)
                    && batch.push(p, table)
                {
                    self.apply_batch(&mut batch, &clock, &mut out);
                }
            }
            self.apply_batch(&mut batch, &clock, &mut out);
            self.in_full = in_full;
        } else {
            let mut batch = RowBatch::new();
            for s in &full {
                let positions = std::mem::take(&mut self.spines[*s as usize].positions);
                for &p in &positions {
                    if !self.read_word(p as usize, &clock, table, &mut out)
                        && batch.push(p as usize, table)
                    {
                        self.apply_batch(&mut batch, &clock, &mut out);
                    }
                }
                self.spines[*s as usize].positions = positions;
            }
            self.apply_batch(&mut batch, &clock, &mut out);
        }
        // The expired rows not read above, alone; a failed spine's come back with the
        // spine (its recovery reads them all).
        for &p in &expired {
            let row = self.rows[p as usize];
            if row.read_in != self.refreshes && !self.spines[row.spine as usize].failed {
                self.read_row(p as usize, &clock, table, &mut out);
            }
        }
        // The ageing sweep, once the oldest live entry may have aged.
        if self
            .oldest_live_ns
            .is_some_and(|t| entry_expired(t, clock.now_ns, clock.dead_ns))
        {
            if self.every_row_noted_since_sweep(&clock) {
                self.oldest_live_ns = self.epoch_oldest_ns;
                self.sweeps_skipped += 1;
                self.next_epoch();
            } else {
                self.sweep(&clock, table, &mut out);
            }
        }
        self.named_remotes.sort_unstable();
        let snapshot = &self.snapshot;
        out.changed_remotes = (self.named_remotes.iter())
            .filter_map(|&r| snapshot.remote_at(r as usize))
            .collect();
        out
    }

    /// Ageing sweeps done, and found unnecessary (every row read and found fresh since the
    /// last sweep: no row can have aged), since the mirror was made.
    pub fn sweeps(&self) -> (u64, u64) {
        (self.sweeps, self.sweeps_skipped)
    }

    /// Whether a sweep due now would find nothing: every row a sweep judges (not expired,
    /// not of a failed spine: [`Self::swept_rows`]) has been noted live (read, whole or by
    /// its word, and found fresh) since the last sweep, and the oldest time noted has not
    /// reached its dead interval. Every row's known refresh time is then at
    /// least that oldest one (a row's time is noted whenever it is set, and only rises
    /// between rebuilds), so no row may have aged, and the next sweep is due when that
    /// time's dead interval ends. Under a fabric's churn every row is read by its word
    /// every T_notify (issue 41), and the sweep read its 32 768 stamps again every 40 ms at
    /// a leaf of 64 x 512: lines the receiver's core had written, a twentieth of lqd's CPU.
    /// Rows of failed spines and expired rows are never noted live, and a row noted before
    /// it expired or its spine failed is no longer counted ([`unnote`]): while a spine is
    /// failed (the churn's spine silent 500 ms every 10 s, issue 41) or a remote node's
    /// entry stays expired, sweeps are skipped too. The epoch's count only ever holds rows
    /// that are judged now, so it equals their number only when each was noted.
    fn every_row_noted_since_sweep(&self, clock: &RefreshClock) -> bool {
        #[cfg(test)]
        if self.sweep_always {
            return false;
        }
        self.stamps_known
            && self.epoch_rows == self.swept_rows()
            && self
                .epoch_oldest_ns
                .is_some_and(|t| !entry_expired(t, clock.now_ns, clock.dead_ns))
    }

    /// The rows a sweep judges: those neither expired (read alone at every step) nor of a
    /// failed spine (read again when it recovers). The two sets are disjoint after a
    /// refresh (a failed spine's rows are never noted, so never expired).
    fn swept_rows(&self) -> usize {
        let failed: usize = (self.spines.iter())
            .filter(|s| s.failed)
            .map(|s| s.positions.len())
            .sum();
        self.rows.len().saturating_sub(self.expired.len() + failed)
    }

    /// Starts an ageing epoch: no row noted in it yet.
    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Wrapped (2^32 sweeps, years): no row's mark may equal an epoch to come.
            self.epoch = 1;
            self.rows.iter_mut().for_each(|r| r.noted_in = 0);
        }
        self.epoch_rows = 0;
        self.epoch_oldest_ns = None;
    }

    /// The ageing sweep (module documentation): raises known refresh times from the
    /// stamps, reads the rows that may have aged, and sets the next sweep's time.
    fn sweep(&mut self, clock: &RefreshClock, table: &mut impl TableRows, out: &mut Refresh) {
        let mut may_have_aged: Vec<u32> = Vec::new();
        let (entries, rows, spines) = (&mut self.entries, &mut self.rows, &self.spines);
        let mut oldest: Option<u64> = None;
        let mut stamps_read = 0;
        let n = entries.len();
        let stamps_known = self.stamps_known;
        let mut judge = |p: usize, stamp: Option<u16>| {
            let (Some(row), Some(entry)) = (rows.get_mut(p), entries.get_mut(p)) else {
                return;
            };
            if row.expired || spines[row.spine as usize].failed {
                return;
            }
            let v = &mut entry.1;
            row.stamp_known |= stamp.is_some();
            if let Some(s) = stamp
                && s != row.stamp
            {
                row.stamp = s;
                if stamps_known {
                    v.last_update_ns = v
                        .last_update_ns
                        .max(path_stamp_time_ns(s, clock.now_ns))
                        .max(clock.not_before_ns);
                }
            }
            if entry_expired(v.last_update_ns, clock.now_ns, clock.dead_ns) {
                may_have_aged.push(p as u32);
            } else {
                oldest = Some(oldest.map_or(v.last_update_ns, |t| t.min(v.last_update_ns)));
            }
        };
        let stamped = table.stamps(|p, s| {
            stamps_read += 1;
            judge(p, Some(s));
        });
        if !stamped {
            for p in 0..n {
                judge(p, None);
            }
        }
        out.stamps_read += stamps_read;
        self.stamps_known = stamped;
        self.oldest_live_ns = oldest;
        self.sweeps += 1;
        self.next_epoch();
        for p in may_have_aged {
            self.read_row(p as usize, clock, table, out);
        }
    }

    /// Reads the row at `p` again into `entries` and the snapshot, naming its remote node
    /// in `out` when its effective values moved, and notes it for ageing; `out.stale` when
    /// the row no longer holds the key it held at the last rebuild.
    fn read_row(
        &mut self,
        p: usize,
        clock: &RefreshClock,
        table: &mut impl TableRows,
        out: &mut Refresh,
    ) {
        let (stamp, row) = RowBatch::fetch(p, table);
        self.apply_row(p, stamp, row, clock, out);
    }

    /// Applies the rows `batch` gathered ([`Self::read_row`] for each), and empties it.
    fn apply_batch(&mut self, batch: &mut RowBatch, clock: &RefreshClock, out: &mut Refresh) {
        for &(p, stamp, row) in &batch.rows[..batch.len] {
            self.apply_row(p as usize, stamp, row, clock, out);
        }
        batch.len = 0;
    }

    /// [`Self::read_row`] of a row already read (`stamp`, then `row`).
    fn apply_row(
        &mut self,
        p: usize,
        stamp: Option<u16>,
        row_read: Option<(PathKey, PathValue)>,
        clock: &RefreshClock,
        out: &mut Refresh,
    ) {
        let (Some(entry), Some(row)) = (self.entries.get_mut(p), self.rows.get_mut(p)) else {
            out.stale = true;
            return;
        };
        match row_read {
            Some((k, mut v)) if k == entry.0 => {
                row.stamp = stamp.unwrap_or_else(|| path_stamp(v.last_update_ns));
                row.stamp_known = stamp.is_some();
                row.read_in = self.refreshes;
                v.last_update_ns = v.last_update_ns.max(clock.not_before_ns);
                entry.1 = v;
            }
            _ => {
                out.stale = true;
                return;
            }
        }
        self.applied(p, clock, out);
    }

    /// Reads the row at `p` by its stamp word alone when [`Self::set_qualities_only`]
    /// allows it and the word suffices (as that method says); `false`,
    /// having changed nothing, when the row must be read whole.
    fn read_word(
        &mut self,
        p: usize,
        clock: &RefreshClock,
        table: &mut impl TableRows,
        out: &mut Refresh,
    ) -> bool {
        if !self.qualities_only {
            return false;
        }
        let Some((entry, row)) = self.entries.get_mut(p).zip(self.rows.get_mut(p)) else {
            return false;
        };
        if !row.stamp_known {
            return false;
        }
        let Some(word) = table.stamp_word(p) else {
            return false;
        };
        let (stamp, lqs, cl) = path_stamp_word_parts(word);
        if stamp != row.stamp {
            // A later write than the one known: its time is at least the stamp's (at most
            // 1.05 ms early), as the ageing sweep takes it. An early time can only make
            // the entry look aged, and then the row is read whole below.
            let written = path_stamp_time_ns(stamp, clock.now_ns).max(clock.not_before_ns);
            if entry_expired(
                written.max(entry.1.last_update_ns),
                clock.now_ns,
                clock.dead_ns,
            ) {
                return false;
            }
            entry.1.last_update_ns = entry.1.last_update_ns.max(written);
            row.stamp = stamp;
        } else if entry_expired(entry.1.last_update_ns, clock.now_ns, clock.dead_ns) {
            return false;
        }
        // The same write's LQS and CL (one 32-bit store).
        entry.1.lqs = lqs;
        entry.1.cl = cl;
        row.read_in = self.refreshes;
        out.words_read += 1;
        out.rows_read += 1;
        // What `applied` does, for an entry found fresh just above: a word is read for
        // nearly every row of the table at every T_notify (1.6 M a second at a leaf of a
        // 64 x 512 fabric, issue 41), and `applied` looked the row, the entry and the
        // spine up again and judged the entry's age twice more.
        let (spine, remote) = (row.spine as usize, row.remote);
        let v = entry.1;
        let spine_failed = self.spines[spine].failed;
        let (lqs, signal) = effective_entry(&v, spine_failed, clock.now_ns, clock.dead_ns);
        let moved = self.snapshot.update_at(p, lqs, signal);
        self.name_moved(remote, moved, out);
        // `note` of a fresh entry; a failed spine's come back with the spine.
        if !spine_failed {
            self.note_live(p, v.last_update_ns);
        }
        true
    }

    /// Names the remote node at index `remote` ([`PathSnapshot::remote_at`]) changed when
    /// one of its entries moved (`moved`), and among the zero-crossing ones in `out` when
    /// the move may take a path quality to or from 0 (rare: put in at once).
    #[inline]
    fn name_moved(&mut self, remote: u32, moved: EntryMove, out: &mut Refresh) {
        if moved == EntryMove::Unchanged {
            return;
        }
        if let Some(named_in) = self.remote_named_in.get_mut(remote as usize)
            && *named_in != self.refreshes
        {
            *named_in = self.refreshes;
            self.named_remotes.push(remote);
        }
        if moved == EntryMove::CrossesZero {
            out.zero_crossing_remotes
                .extend(self.snapshot.remote_at(remote as usize));
        }
    }

    /// The entry at `p` was read again whole: updates the snapshot, names its remote node in
    /// `out` when its effective values moved, and notes it for ageing. ([`Self::read_word`]
    /// does the same for the entry whose word it read.)
    fn applied(&mut self, p: usize, clock: &RefreshClock, out: &mut Refresh) {
        out.rows_read += 1;
        let Some(row) = self.rows.get(p).copied() else {
            return;
        };
        let v = self.entries[p].1;
        let spine_failed = self.spines[row.spine as usize].failed;
        let (lqs, signal) = effective_entry(&v, spine_failed, clock.now_ns, clock.dead_ns);
        let moved = self.snapshot.update_at(p, lqs, signal);
        self.name_moved(row.remote, moved, out);
        self.note(p, clock.now_ns, clock.dead_ns);
    }

    /// Folds the entry at `p` into the ageing schedule: an expired one joins the rows read
    /// at every step, a live one may be the oldest. A failed spine's entries come back
    /// with the spine (its recovery reads them).
    fn note(&mut self, p: usize, now_ns: u64, dead_ns: u64) {
        let row = &mut self.rows[p];
        if self.spines[row.spine as usize].failed {
            return;
        }
        let t = self.entries[p].1.last_update_ns;
        if entry_expired(t, now_ns, dead_ns) {
            if !row.expired {
                row.expired = true;
                self.expired.push(p as u32);
            }
            // Read alone at every step, not by sweeps: not a row a sweep would judge.
            unnote(row, self.epoch, &mut self.epoch_rows);
        } else {
            self.note_live(p, t);
        }
    }

    /// The live entry at `p`, refreshed at `t`, may be the oldest one (the next ageing
    /// sweep's time); it is noted in this ageing epoch.
    #[inline]
    fn note_live(&mut self, p: usize, t: u64) {
        self.oldest_live_ns = Some(self.oldest_live_ns.map_or(t, |o| o.min(t)));
        self.epoch_oldest_ns = Some(self.epoch_oldest_ns.map_or(t, |o| o.min(t)));
        if let Some(row) = self.rows.get_mut(p)
            && row.noted_in != self.epoch
        {
            row.noted_in = self.epoch;
            self.epoch_rows += 1;
        }
    }
}

/// A row noted live in `epoch` that a sweep no longer judges (it expired, or its spine
/// failed) is no longer counted in `epoch_rows`: the count stays that of the rows a sweep
/// would judge and that have been noted ([`PathMirror::every_row_noted_since_sweep`]).
fn unnote(row: &mut RowState, epoch: u32, epoch_rows: &mut usize) {
    if row.noted_in == epoch {
        row.noted_in = 0;
        *epoch_rows = epoch_rows.saturating_sub(1);
    }
}

/// A row as read for [`PathMirror::apply_row`]: its position, its stamp, the row.
type FetchedRow = (u32, Option<u16>, Option<(PathKey, PathValue)>);

/// Rows read from the table before they are applied, [`RowBatch::CAPACITY`] at a time.
///
/// Read one at a time, each row's load from the table (a different cache line per row,
/// in the receiver's slot order rather than the mirror's) waited for the row before it to
/// be applied: in `perf annotate` most of a row's time was that load, against a plain
/// gather of the same rows four to five times faster (issue 41, `bench_step`). Gathered
/// in a tight loop the loads overlap: 8 % less time a row in process, where the table is
/// in cache; in the daemon the rows were last written by the receiver on another core.
struct RowBatch {
    rows: [FetchedRow; Self::CAPACITY],
    len: usize,
}

impl RowBatch {
    const CAPACITY: usize = 32;

    fn new() -> Self {
        Self {
            rows: [(0, None, None); Self::CAPACITY],
            len: 0,
        }
    }

    /// The stamp, then the row, at `p`. The stamp first: the receiver writes the row
    /// first, so a row read after its stamp is at least as new (a newer row with an older
    /// stamp only makes the next sweep see a move it already knows).
    fn fetch(p: usize, table: &mut impl TableRows) -> (Option<u16>, Option<(PathKey, PathValue)>) {
        let stamp = table.stamp(p);
        (stamp, table.row(p))
    }

    /// Reads the row at `p` into the batch; `true` when the batch is full.
    fn push(&mut self, p: usize, table: &mut impl TableRows) -> bool {
        let (stamp, row) = Self::fetch(p, table);
        self.rows[self.len] = (p as u32, stamp, row);
        self.len += 1;
        self.len == Self::CAPACITY
    }
}

/// The times a refresh judges rows by.
#[derive(Clone, Copy, Debug)]
pub struct RefreshClock {
    /// Refresh times older than this are raised to it (lqd's start).
    pub not_before_ns: u64,
    pub now_ns: u64,
    /// miss_count x T_notify (6.5).
    pub dead_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::tests::{key, value};

    const MS: u64 = 1_000_000;
    const DEAD: u64 = 60 * MS;

    /// A refresh with nothing named or failed, rows read from `kernel` (no stamps).
    fn unnamed(m: &mut PathMirror, kernel: &[(PathKey, PathValue)], now_ns: u64) -> Refresh {
        m.refresh(
            &BTreeSet::new(),
            &[],
            clock(0, now_ns),
            &BTreeSet::new(),
            &mut |p: usize| kernel.get(p).copied(),
        )
    }

    fn clock(not_before_ns: u64, now_ns: u64) -> RefreshClock {
        RefreshClock {
            not_before_ns,
            now_ns,
            dead_ns: DEAD,
        }
    }

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
    fn a_move_to_or_from_0_or_cl_7_names_its_remote_as_zero_crossing() {
        let mut kernel = table(2, 4, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        let refresh = |kernel: &mut Vec<(PathKey, PathValue)>,
                       m: &mut PathMirror,
                       t: u64,
                       change: &dyn Fn(&PathKey, &mut PathValue)| {
            for (k, v) in kernel.iter_mut() {
                if k.spine_id == 1 {
                    v.last_update_ns = t;
                    change(k, v);
                }
            }
            let kernel = kernel.clone();
            m.refresh(
                &[node(0, 1)].into(),
                &[],
                clock(0, t),
                &none,
                &mut |p: usize| kernel.get(p).copied(),
            )
        };
        // Noise on every entry (200 -> 195), remote 101 to 0: only 101 crosses 0.
        let r = refresh(&mut kernel, &mut m, 20 * MS, &|k, v| {
            v.lqs = if k.remote_id == 101 { 0 } else { 195 };
        });
        assert_eq!(r.changed_remotes.len(), 4, "{r:?}");
        assert_eq!(r.zero_crossing_remotes, [node(0, 101)].into());
        // 101 back from 0, 102's CL to 7 (the gray-failure prune reads it), 103's CL to 3.
        let r = refresh(&mut kernel, &mut m, 30 * MS, &|k, v| {
            v.lqs = 195;
            v.cl = match k.remote_id {
                102 => 7,
                103 => 3,
                _ => v.cl,
            };
        });
        assert_eq!(
            r.changed_remotes,
            vec![node(0, 101), node(0, 102), node(0, 103)]
        );
        assert_eq!(r.zero_crossing_remotes, [node(0, 101), node(0, 102)].into());
        // Only noise: nothing crosses 0, but a move of an entry at CL 7 may (its available
        // bandwidth decides the gray-failure prune).
        let r = refresh(&mut kernel, &mut m, 40 * MS, &|_, v| v.lqs = 190);
        assert_eq!(r.changed_remotes.len(), 4);
        assert_eq!(r.zero_crossing_remotes, [node(0, 102)].into());
        // 102 leaves CL 7 (crossing), then noise alone crosses nothing.
        let r = refresh(&mut kernel, &mut m, 50 * MS, &|_, v| v.cl = 1);
        assert_eq!(r.zero_crossing_remotes, [node(0, 102)].into());
        let r = refresh(&mut kernel, &mut m, 60 * MS, &|_, v| v.lqs = 185);
        assert_eq!(r.changed_remotes.len(), 4);
        assert!(r.zero_crossing_remotes.is_empty(), "{r:?}");
        assert_same_as_rebuild(&m, 60 * MS, &none);
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
        let r = m.refresh(
            &[node(0, 2)].into(),
            &[],
            clock(0, 20 * MS),
            &none,
            &mut |p: usize| kernel.get(p).copied(),
        );
        assert_eq!(r.rows_read, 8, "one spine's rows");
        assert_eq!(r.changed_remotes, vec![node(0, 103)]);
        assert!(!r.stale);
        assert_eq!(m.snapshot().links(node(0, 2), node(0, 103)), &[(7, 50)]);
        assert_same_as_rebuild(&m, 20 * MS, &none);
        // Nothing named, nothing due: no read at all.
        let r = m.refresh(
            &BTreeSet::new(),
            &[],
            clock(0, 30 * MS),
            &none,
            &mut |_: usize| panic!("no row is due"),
        );
        assert_eq!(r, Refresh::default());
    }

    #[test]
    fn many_named_spines_are_read_in_the_tables_order_few_spine_by_spine() {
        let mut kernel = table(32, 8, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Two spines (16 of 256 rows), then twelve (96): the same rows either way, those of
        // the named spines, each once; the second in the table's order, the first not.
        for (round, named) in [vec![5u32, 9], (1..=12).collect()].into_iter().enumerate() {
            let now = (20 + 10 * round as u64) * MS;
            for (k, v) in &mut kernel {
                if named.contains(&k.spine_id) {
                    v.last_update_ns = now;
                    v.lqs = 60 + k.spine_id as u8 + k.remote_id as u8;
                }
            }
            let mut read = Vec::new();
            let r = m.refresh(
                &named.iter().map(|s| node(0, *s)).collect(),
                &[],
                clock(0, now),
                &none,
                &mut |p: usize| {
                    read.push(p);
                    kernel.get(p).copied()
                },
            );
            let want: Vec<usize> = (0..kernel.len())
                .filter(|p| named.contains(&kernel[*p].0.spine_id))
                .collect();
            let mut sorted = read.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted, want,
                "round {round}: the named spines' rows, once each"
            );
            assert_eq!(r.rows_read, want.len());
            assert_eq!(read == want, round == 1, "round {round}: the read order");
            assert_eq!(r.changed_remotes.len(), 8, "every remote node moved");
            assert_same_as_rebuild(&m, now, &none);
        }
    }

    #[test]
    fn a_wrapped_refresh_count_still_reads_and_names_every_moved_row() {
        let mut kernel = table(4, 4, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // The next refresh is the 2^32nd: its count wraps, while every row's mark is still
        // the rebuild's (no refresh has read it).
        m.refreshes = u32::MAX;
        let p = kernel
            .iter()
            .position(|(k, _)| (k.spine_id, k.remote_id) == (2, 103))
            .unwrap();
        kernel[p].1.lqs = 50;
        kernel[p].1.last_update_ns = 20 * MS;
        let r = m.refresh(
            &BTreeSet::new(),
            &[p as u32],
            clock(0, 20 * MS),
            &none,
            &mut |p: usize| kernel.get(p).copied(),
        );
        assert_eq!(r.rows_read, 1, "the named row is read: {r:?}");
        assert_eq!(r.changed_remotes, vec![node(0, 103)]);
        for round in 1..=2u64 {
            let now = (20 + 10 * round) * MS;
            for (_, v) in &mut kernel {
                v.last_update_ns = now;
                v.lqs = 200 - round as u8;
            }
            let r = m.refresh(
                &(1..=4).map(|s| node(0, s)).collect(),
                &[],
                clock(0, now),
                &none,
                &mut |p: usize| kernel.get(p).copied(),
            );
            assert_eq!(r.rows_read, 16, "round {round}");
            assert_eq!(r.changed_remotes.len(), 4, "round {round}");
            assert_same_as_rebuild(&m, now, &none);
        }
        assert_eq!(m.refreshes, 3, "past 0 to 1, then 2 and 3");
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
        let r = m.refresh(
            &BTreeSet::new(),
            &rows,
            clock(0, 20 * MS),
            &none,
            &mut |p: usize| {
                read.push(p);
                kernel.get(p).copied()
            },
        );
        assert_eq!(r.rows_read, 2, "the named rows alone");
        assert_eq!(read.len(), 2);
        assert_eq!(r.changed_remotes, vec![node(0, 103), node(0, 105)]);
        assert_eq!(m.snapshot().links(node(0, 2), node(0, 103)), &[(7, 42)]);
        assert_same_as_rebuild(&m, 20 * MS, &none);
        // A named row of a spine read in full is read once.
        let r = m.refresh(
            &[node(0, 2)].into(),
            &rows,
            clock(0, 20 * MS),
            &none,
            &mut |p: usize| kernel.get(p).copied(),
        );
        assert_eq!(
            r.rows_read,
            8 + 1,
            "spine 2's eight rows and spine 3's named one"
        );
        // A named position past the table: the caller must rebuild.
        let r = m.refresh(
            &BTreeSet::new(),
            &[999],
            clock(0, 20 * MS),
            &none,
            &mut |p: usize| kernel.get(p).copied(),
        );
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
            let r = unnamed(&mut m, &kernel, t * MS);
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
        let r = unnamed(&mut m, &kernel, 130 * MS);
        assert_eq!(r.changed_remotes, vec![node(0, 101)]);
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
            let r = unnamed(&mut m, &kernel, t * MS);
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

    /// A table with the receiver's refresh stamps, counting the rows read.
    struct Stamped<'k> {
        kernel: &'k [(PathKey, PathValue)],
        rows_read: usize,
    }

    impl TableRows for Stamped<'_> {
        fn row(&mut self, p: usize) -> Option<(PathKey, PathValue)> {
            self.rows_read += 1;
            self.kernel.get(p).copied()
        }

        fn stamp(&mut self, p: usize) -> Option<u16> {
            self.kernel
                .get(p)
                .map(|(_, v)| path_stamp(v.last_update_ns))
        }

        fn stamps(&mut self, mut f: impl FnMut(usize, u16)) -> bool {
            for (p, (_, v)) in self.kernel.iter().enumerate() {
                f(p, path_stamp(v.last_update_ns));
            }
            true
        }

        fn stamp_word(&mut self, p: usize) -> Option<u32> {
            let v = self.kernel.get(p)?.1;
            Some(lq_common::maps::path_stamp_word(
                v.last_update_ns,
                v.lqs,
                v.cl,
            ))
        }
    }

    /// The snapshot equals one rebuilt from the table as the kernel holds it.
    fn assert_same_as_table(m: &PathMirror, kernel: &[(PathKey, PathValue)], now: u64) {
        let mut fresh = PathMirror::default();
        fresh.rebuild(kernel.to_vec(), 0, now, DEAD, &BTreeSet::new());
        assert_eq!(m.snapshot(), fresh.snapshot(), "at {now}");
    }

    #[test]
    fn with_qualities_only_named_spines_are_read_by_their_stamp_words() {
        let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        m.set_qualities_only(true);
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        let all: BTreeSet<NodeId> = (1..=4).map(|s| node(0, s)).collect();
        // Every entry re-advertised every 20 ms with noise on its LQS and a CL that moves;
        // spine 1 stops advertising remote 103 after the first round (its slot stays).
        for round in 1..=8u64 {
            let now = (10 + 20 * round) * MS;
            for (k, v) in &mut kernel {
                if round > 1 && (k.spine_id, k.remote_id) == (1, 103) {
                    continue;
                }
                v.last_update_ns = now;
                v.lqs = 190 + ((k.remote_id + k.spine_id) as u8 + round as u8) % 10;
                v.cl = (round % 3) as u8;
            }
            let mut t = Stamped {
                kernel: &kernel,
                rows_read: 0,
            };
            let r = m.refresh(&all, &[], clock(0, now), &none, &mut t);
            assert!(!r.stale);
            assert_eq!(r.rows_read, 32, "round {round}: every row once");
            match round {
                // After the rebuild no stamp is known yet: the rows are read whole.
                1 => assert_eq!((t.rows_read, r.words_read), (32, 0)),
                // Then the words alone, but for the silent entry, whose word's time says
                // it may have aged once its dead interval has passed (60 ms after 30 ms):
                // read whole, aged.
                2..=4 => assert_eq!((t.rows_read, r.words_read), (0, 32), "round {round}"),
                _ => assert_eq!((t.rows_read, r.words_read), (1, 31), "round {round}"),
            }
            assert_same_as_table(&m, &kernel, now);
        }
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 103)), &[(7, 0)]);
        // Without the setting (the weights read the available bandwidth) every row whole.
        m.set_qualities_only(false);
        let now = 190 * MS;
        for (_, v) in &mut kernel {
            v.last_update_ns = now;
        }
        let mut t = Stamped {
            kernel: &kernel,
            rows_read: 0,
        };
        let r = m.refresh(&all, &[], clock(0, now), &none, &mut t);
        assert_eq!((t.rows_read, r.words_read), (32, 0));
        assert_same_as_table(&m, &kernel, now);
    }

    #[test]
    fn with_stamps_a_refreshed_table_ages_without_row_reads() {
        let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        // Every entry refreshed every 20 ms without a change (no events), spines 7 ms
        // apart, 9 steps a refresh period: sweeps find every stamp moved and read no row.
        let (mut sweeps, mut rows) = (0, 0);
        for step in 1..=90u64 {
            let t = 10 * MS + step * 20 * MS / 9;
            for (k, v) in &mut kernel {
                let phase = u64::from(k.spine_id) * 7 * MS;
                if t > phase {
                    v.last_update_ns = t - (t - phase) % (20 * MS);
                }
            }
            let mut table = Stamped {
                kernel: &kernel,
                rows_read: 0,
            };
            let r = m.refresh(&BTreeSet::new(), &[], clock(0, t), &none, &mut table);
            assert!(!r.stale && r.changed_remotes.is_empty(), "{t}: {r:?}");
            // The first sweep after the rebuild records the stamps and reads the rows due
            // (their stamps are not trusted yet); after it, none.
            if sweeps > 0 {
                rows += table.rows_read;
            }
            sweeps += usize::from(r.stamps_read > 0);
            assert_same_as_rebuild(&m, t, &none);
        }
        assert_eq!(rows, 0, "no row read for ageing after the first sweep");
        // 200 ms: a sweep every 40-60 ms (the oldest entry's dead interval), not per step.
        assert!((3..=5).contains(&sweeps), "{sweeps} sweeps");
    }

    /// The sweeps a mirror finds unnecessary (every row noted live since the last one)
    /// change nothing: beside a mirror that sweeps whenever one is due, fed the same
    /// random fabric (spines advertising every 17-23 ms with LQS noise, most steps naming
    /// the spines heard from and some only the rows of one, entries that fall silent for a
    /// while, spines failing by heartbeat and coming back, steps 0.5-4 ms apart), it holds
    /// the same snapshot and names the same remote nodes at every step; in the runs with
    /// no entry silent and no spine failed it skips most of its sweeps.
    #[test]
    fn a_sweep_found_unnecessary_changes_nothing() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(29);
        let (mut skipped, mut done) = (0, 0);
        // Runs with a spine silent and failed for a long time and an entry silent for
        // good: sweeps judge neither, so they are skipped there too.
        let (mut skipped_failed, mut done_failed) = (0, 0);
        for run in 0..40 {
            let calm = run % 8 >= 4;
            let long_failure = run % 8 == 3;
            let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
            let (mut skipping, mut sweeping) = (PathMirror::default(), PathMirror::default());
            sweeping.sweep_always = true;
            let none = BTreeSet::new();
            for m in [&mut skipping, &mut sweeping] {
                m.set_qualities_only(run % 4 != 0);
                m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
            }
            let mut next_send: Vec<u64> = (1..=4).map(|s| 10 * MS + s * 5 * MS).collect();
            // Per entry: silent until this time.
            let mut silent_until = vec![0u64; kernel.len()];
            let mut failed: BTreeSet<NodeId> = BTreeSet::new();
            let mut now = 10 * MS;
            while now < 600 * MS {
                now += rng.random_range(500_000..4_000_000);
                if long_failure {
                    // The entry at position 0 silent for good; spine 2 silent from 100 ms
                    // and failed by heartbeat 170-450 ms.
                    silent_until[0] = u64::MAX;
                    if now >= 100 * MS {
                        for (p, (k, _)) in kernel.iter().enumerate() {
                            if k.spine_id == 2 {
                                silent_until[p] = silent_until[p].max(450 * MS);
                            }
                        }
                    }
                    if (170 * MS..450 * MS).contains(&now) {
                        failed.insert(node(0, 2));
                    } else {
                        failed.remove(&node(0, 2));
                    }
                } else if !calm && rng.random_bool(0.01) {
                    let p = rng.random_range(0..kernel.len());
                    silent_until[p] = now + rng.random_range(20..150) * MS;
                }
                if !calm && !long_failure && rng.random_bool(0.005) {
                    let s = node(0, rng.random_range(1..=4));
                    if !failed.remove(&s) {
                        failed.insert(s);
                    }
                }
                let mut named = BTreeSet::new();
                let mut named_rows = Vec::new();
                for s in 1..=4u32 {
                    if now < next_send[s as usize - 1] {
                        continue;
                    }
                    next_send[s as usize - 1] = now + rng.random_range(17..=23) * MS;
                    for (p, (k, v)) in kernel.iter_mut().enumerate() {
                        if k.spine_id == s && now >= silent_until[p] {
                            v.last_update_ns = now;
                            v.lqs = rng.random_range(195..=205);
                            if run % 2 == 0 {
                                named_rows.push(p as u32);
                            }
                        }
                    }
                    if run % 2 == 1 {
                        named.insert(node(0, s));
                    }
                }
                let mut outs = Vec::new();
                for m in [&mut skipping, &mut sweeping] {
                    let mut t = Stamped {
                        kernel: &kernel,
                        rows_read: 0,
                    };
                    let r = m.refresh(&named, &named_rows, clock(0, now), &failed, &mut t);
                    assert!(!r.stale);
                    outs.push((r.changed_remotes, r.zero_crossing_remotes));
                }
                assert_eq!(outs[0], outs[1], "run {run} at {now}");
                assert_eq!(
                    skipping.snapshot(),
                    sweeping.snapshot(),
                    "run {run} at {now}"
                );
            }
            let (d, s) = skipping.sweeps();
            if calm {
                (done, skipped) = (done + d, skipped + s);
            } else if long_failure {
                (done_failed, skipped_failed) = (done_failed + d, skipped_failed + s);
            }
            assert_eq!(sweeping.sweeps().1, 0);
        }
        assert!(
            skipped > 3 * done,
            "calm runs: {skipped} sweeps skipped, {done} done"
        );
        assert!(
            skipped_failed > done_failed,
            "runs with a long failure: {skipped_failed} sweeps skipped, {done_failed} done"
        );
    }

    /// A spine that fails after its rows were noted in an epoch takes them out of the
    /// count: a silent spine's rows, not noted in that epoch, are still found aged by the
    /// sweep that falls due. Spines 1, 2 and 4 send at 10 + 20 k ms, spine 3 at another
    /// phase; spine 4 is silent after 90 ms (its entries dead from 151 ms); spine 3 fails
    /// (still sending) at each time of 100-180 ms in turn. A mirror that always sweeps
    /// holds the same snapshot at every step.
    #[test]
    fn rows_noted_before_their_spine_failed_do_not_stand_for_rows_not_noted() {
        let none = BTreeSet::new();
        let mut skipped = 0;
        for phase in 0..20 {
            for fail_at in (100..180).step_by(2) {
                let mut kernel = table(4, 8, 10 * MS, |_, _| 200);
                let (mut skipping, mut sweeping) = (PathMirror::default(), PathMirror::default());
                sweeping.sweep_always = true;
                for m in [&mut skipping, &mut sweeping] {
                    m.set_qualities_only(true);
                    m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
                }
                let mut expired_at = None;
                for t in 11..=200u64 {
                    let mut named_rows = Vec::new();
                    for (p, (k, v)) in kernel.iter_mut().enumerate() {
                        let sends = match k.spine_id {
                            3 => t % 20 == phase,
                            4 => t % 20 == 10 && t <= 90,
                            _ => t % 20 == 10,
                        };
                        if sends {
                            v.last_update_ns = t * MS;
                            named_rows.push(p as u32);
                        }
                    }
                    let failed: BTreeSet<NodeId> = if t >= fail_at {
                        [node(0, 3)].into()
                    } else {
                        BTreeSet::new()
                    };
                    let mut outs = Vec::new();
                    for m in [&mut skipping, &mut sweeping] {
                        let mut rows = Stamped {
                            kernel: &kernel,
                            rows_read: 0,
                        };
                        let r = m.refresh(&none, &named_rows, clock(0, t * MS), &failed, &mut rows);
                        outs.push(r.changed_remotes);
                    }
                    let at = (phase, fail_at, t);
                    assert_eq!(outs[0], outs[1], "{at:?}");
                    assert_eq!(skipping.snapshot(), sweeping.snapshot(), "{at:?}");
                    if skipping.snapshot().links(node(0, 4), node(0, 100)) == [(7, 0)] {
                        expired_at.get_or_insert(t);
                    }
                }
                assert_eq!(expired_at, Some(151), "{phase} {fail_at}");
                skipped += skipping.sweeps().1;
            }
        }
        assert!(skipped > 0);
    }

    #[test]
    fn with_stamps_an_unrefreshed_entry_ages_once_its_row_says_so() {
        // Every entry is refreshed every 20 ms at 10.9 ms + 20 k ms (not on a stamp unit);
        // spine 1's entry for remote 103 stops after 90.9 ms: dead after 150.9 ms. Its
        // stamp's lower bound (90.18 ms) makes a sweep read its row from 150.18 ms on;
        // the row says live until 150.9.
        let mut kernel = table(2, 4, 10_900_000, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 11 * MS, DEAD, &none);
        let (mut expired_at, mut last_refresh) = (None, 10_900_000);
        let mut reads = Vec::new();
        let mut sweeps = 0;
        for t in (11 * MS..=200 * MS).step_by(250_000) {
            if t >= last_refresh + 20 * MS {
                last_refresh += 20 * MS;
                for (k, v) in &mut kernel {
                    if !(k.spine_id == 1 && k.remote_id == 103 && last_refresh > 91 * MS) {
                        v.last_update_ns = last_refresh;
                    }
                }
            }
            let mut table = Stamped {
                kernel: &kernel,
                rows_read: 0,
            };
            let r = m.refresh(&BTreeSet::new(), &[], clock(0, t), &none, &mut table);
            // After the first sweep (which records the stamps and reads the rows due).
            if sweeps > 0 && table.rows_read > 0 {
                reads.push((t, table.rows_read));
            }
            sweeps += usize::from(r.stamps_read > 0);
            if r.changed_remotes.contains(&node(0, 103)) {
                expired_at.get_or_insert(t);
            }
            assert_same_as_rebuild(&m, t, &none);
        }
        // Aged at the first step after 150.9 ms, no earlier.
        assert_eq!(expired_at, Some(151 * MS));
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 103)), &[(7, 0)]);
        // Only that row is ever read after the first sweep: from the stamp's bound on,
        // at every step (live until 150.9, then expired).
        assert!(reads.iter().all(|(_, n)| *n == 1), "{reads:?}");
        assert_eq!(reads.first().map(|r| r.0), Some(150_250_000), "{reads:?}");
    }

    #[test]
    fn an_expired_row_read_with_its_spine_stays_watched_and_comes_back() {
        let mut kernel = table(2, 2, 10 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &none);
        let step = |m: &mut PathMirror, kernel: &[(PathKey, PathValue)], named: &[u32], t| {
            let named: BTreeSet<NodeId> = named.iter().map(|s| node(0, *s)).collect();
            let mut table = Stamped {
                kernel,
                rows_read: 0,
            };
            m.refresh(&named, &[], clock(0, t), &none, &mut table)
        };
        // Spine 1's entry for remote 101 stops; the rest are refreshed every 20 ms.
        let refresh_all_but = |kernel: &mut Vec<(PathKey, PathValue)>, t: u64, skip: bool| {
            for (k, v) in kernel.iter_mut() {
                if !(skip && k.spine_id == 1 && k.remote_id == 101) {
                    v.last_update_ns = t;
                }
            }
        };
        for t in (20..=100).step_by(10) {
            if t % 20 == 10 {
                refresh_all_but(&mut kernel, t * MS, true);
            }
            step(&mut m, &kernel, &[], t * MS);
        }
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 101)), &[(7, 0)]);
        // Spine 1 is named (another entry of it changed) while the row is still expired:
        // the row is read with the spine and stays watched.
        step(&mut m, &kernel, &[1], 105 * MS);
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 101)), &[(7, 0)]);
        // Then refreshed with its old LQS (no event): live again at the next step.
        refresh_all_but(&mut kernel, 108 * MS, false);
        let r = step(&mut m, &kernel, &[], 110 * MS);
        assert_eq!(r.changed_remotes, vec![node(0, 101)]);
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 101)), &[(7, 200)]);
        assert_same_as_rebuild(&m, 110 * MS, &none);
    }

    #[test]
    fn a_stamp_array_younger_than_the_table_is_not_read_as_refreshes() {
        // After an upgrade the table keeps its rows while the stamps start at 0: the first
        // sweep records them, and a row nobody refreshes still ages.
        struct Zeroed<'k>(&'k [(PathKey, PathValue)]);
        impl TableRows for Zeroed<'_> {
            fn row(&mut self, p: usize) -> Option<(PathKey, PathValue)> {
                self.0.get(p).copied()
            }
            fn stamp(&mut self, _: usize) -> Option<u16> {
                Some(0)
            }
            fn stamps(&mut self, mut f: impl FnMut(usize, u16)) -> bool {
                (0..self.0.len()).for_each(|p| f(p, 0));
                true
            }
        }
        let kernel = table(1, 1, 500 * MS, |_, _| 200);
        let mut m = PathMirror::default();
        let none = BTreeSet::new();
        m.rebuild(kernel.clone(), 0, 500 * MS, DEAD, &none);
        for t in (510..=600).step_by(10) {
            m.refresh(
                &BTreeSet::new(),
                &[],
                clock(0, t * MS),
                &none,
                &mut Zeroed(&kernel),
            );
        }
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 100)), &[(7, 0)]);
    }

    #[test]
    fn failure_and_recovery_by_heartbeat_reread_the_spine() {
        let kernel = table(3, 4, 10 * MS, |s, r| (s * 10 + r % 10) as u8);
        let mut m = PathMirror::default();
        m.rebuild(kernel.clone(), 0, 10 * MS, DEAD, &BTreeSet::new());
        let failed: BTreeSet<NodeId> = [node(0, 3)].into();
        let r = m.refresh(
            &BTreeSet::new(),
            &[],
            clock(0, 20 * MS),
            &failed,
            &mut |p: usize| kernel.get(p).copied(),
        );
        assert_eq!(r.rows_read, 4);
        assert_eq!(r.changed_remotes.len(), 4);
        assert_same_as_rebuild(&m, 20 * MS, &failed);
        let r = m.refresh(
            &BTreeSet::new(),
            &[],
            clock(0, 30 * MS),
            &BTreeSet::new(),
            &mut |p: usize| kernel.get(p).copied(),
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
            clock(0, 20 * MS),
            &BTreeSet::new(),
            &mut |_: usize| Some((key(1, 999, 7), value(1, 20 * MS))),
        );
        assert!(r.stale);
        let r = m.refresh(
            &[node(0, 1)].into(),
            &[],
            clock(0, 20 * MS),
            &BTreeSet::new(),
            &mut |_: usize| None,
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
            clock(100 * MS, 161 * MS),
            &BTreeSet::new(),
            &mut |p: usize| kernel.get(p).copied(),
        );
        assert_eq!(r.changed_remotes, vec![node(0, 100)]);
        assert_eq!(m.snapshot().links(node(0, 1), node(0, 100)), &[(7, 0)]);
    }
}
