//! The remote nodes whose groups wait for their next T_reweight boundary (seed 003 section
//! 6.4; issue 41).
//!
//! Section 6.4 applies a target at most once per T_reweight per destination, so a group
//! whose remote node's entries moved between two boundaries is computed at the next one,
//! from the table as it is then: a target computed at every step between two boundaries
//! was overwritten before it was applied. A move that can take a path quality to or from
//! 0 is computed at once (6.4's exception).
//!
//! Flat, index for index with the groups by remote node (sorted): under a fabric's churn
//! every remote node of a 64 x 512 leaf moves at every control step (about 200 a second)
//! and is deferred and taken every T_reweight (25 600 a second). A tree of the waiting
//! remote nodes, searched twice for each moved one and walked at every boundary, was a
//! twentieth of lqd's time; a tree by boundary, with an insert and a removal per deferral,
//! cost more still (`perf` of `bench scale`, issue 41).
//!
//! Pure: time and the groups' boundaries are inputs.

use super::path_quality::{GroupKey, NodeId};

/// See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct BoundaryWait {
    /// The groups of each remote node, sorted by remote node (adopted groups are left out
    /// by the caller: they are not recomputed).
    by_remote: Vec<(NodeId, Vec<GroupKey>)>,
    /// Index for index with `by_remote`: the boundary a waiting remote node's groups are
    /// computed at (the earliest of its groups' as of when it was deferred).
    boundary: Vec<Option<u64>>,
    /// The earliest boundary among the waiting ones; at most early (a remote node computed
    /// before its boundary leaves it in place until the next walk).
    due_ns: Option<u64>,
    /// How many groups the waiting remote nodes have.
    waiting_groups: u64,
}

impl BoundaryWait {
    /// Indexes `keys` (sorted, as a `BTreeMap`'s: a key's remote node comes first, so a
    /// remote node's groups are adjacent); no remote node waits after it (the caller
    /// computes every group whose inputs moved, [`Self::waiting_remotes`] first).
    pub fn index<'k>(&mut self, keys: impl IntoIterator<Item = &'k GroupKey>) {
        self.by_remote.clear();
        for key in keys {
            let Some(r) = key.remote else {
                continue;
            };
            match self.by_remote.last_mut() {
                Some((last, group_keys)) if *last == r => group_keys.push(key.clone()),
                _ => self.by_remote.push((r, vec![key.clone()])),
            }
        }
        debug_assert!(self.by_remote.is_sorted_by_key(|e| e.0));
        self.boundary.clear();
        self.boundary.resize(self.by_remote.len(), None);
        self.due_ns = None;
        self.waiting_groups = 0;
    }

    /// No remote node waits any more (the caller computes their groups now).
    pub fn clear(&mut self) {
        self.boundary.iter_mut().for_each(|b| *b = None);
        self.due_ns = None;
        self.waiting_groups = 0;
    }

    /// The remote nodes waiting, sorted.
    pub fn waiting_remotes(&self) -> Vec<NodeId> {
        (self.by_remote.iter().zip(&self.boundary))
            .filter(|(_, b)| b.is_some())
            .map(|(e, _)| e.0)
            .collect()
    }

    /// The earliest boundary a remote node waits for (the loop wakes for it).
    pub fn due_ns(&self) -> Option<u64> {
        self.due_ns
    }

    /// How many groups wait.
    pub fn waiting_groups(&self) -> u64 {
        self.waiting_groups
    }

    /// The remote nodes whose entries moved (`moved`, sorted): each waits for its boundary
    /// (`boundary_of` its groups, asked in ascending order of the groups' keys) when
    /// `defer(remote)`, unless it waits already; the others have their groups added to
    /// `keys` now and no longer wait. A remote node without groups is passed over.
    pub fn moved(
        &mut self,
        moved: &[NodeId],
        defer: impl Fn(&NodeId) -> bool,
        mut boundary_of: impl FnMut(&[GroupKey]) -> u64,
        keys: &mut Vec<GroupKey>,
    ) {
        // Both sorted: a merge step per moved remote node, not a search.
        let mut at = 0;
        for r in moved {
            while self.by_remote.get(at).is_some_and(|e| e.0 < *r) {
                at += 1;
            }
            let Some((_, group_keys)) = self.by_remote.get(at).filter(|e| e.0 == *r) else {
                continue;
            };
            let waits = &mut self.boundary[at];
            if defer(r) {
                if waits.is_none() {
                    let boundary = boundary_of(group_keys);
                    *waits = Some(boundary);
                    self.waiting_groups += group_keys.len() as u64;
                    self.due_ns = Some(self.due_ns.map_or(boundary, |d| d.min(boundary)));
                }
            } else {
                if waits.take().is_some() {
                    let groups = group_keys.len() as u64;
                    self.waiting_groups = self.waiting_groups.saturating_sub(groups);
                }
                keys.extend(group_keys.iter().cloned());
            }
        }
    }

    /// Adds to `keys` the groups of the remote nodes whose boundary has come at `now_ns`;
    /// the others wait on. One pass over the flat array (512 remote nodes, 8 KiB), only
    /// when the earliest boundary has come.
    pub fn take_due(&mut self, now_ns: u64, keys: &mut Vec<GroupKey>) {
        if self.due_ns.is_none_or(|due| due > now_ns) {
            return;
        }
        let mut next: Option<u64> = None;
        let mut waiting = 0u64;
        for (b, (_, group_keys)) in self.boundary.iter_mut().zip(&self.by_remote) {
            match *b {
                Some(boundary) if boundary <= now_ns => {
                    keys.extend(group_keys.iter().cloned());
                    *b = None;
                }
                Some(boundary) => {
                    next = Some(next.map_or(boundary, |n| n.min(boundary)));
                    waiting += group_keys.len() as u64;
                }
                None => {}
            }
        }
        self.due_ns = next;
        self.waiting_groups = waiting;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::controller::path_quality::node;
    use std::collections::BTreeSet;

    fn remote(r: u32) -> NodeId {
        node(65_100, r)
    }

    /// Groups: remote nodes 1..=n, remote node r with r % 3 + 1 groups (its eligible
    /// members differ), and one group without a remote node.
    fn keys(n: u32) -> BTreeSet<GroupKey> {
        let mut keys: BTreeSet<GroupKey> = BTreeSet::new();
        keys.insert(GroupKey::default());
        for r in 1..=n {
            for g in 0..=r % 3 {
                keys.insert(GroupKey {
                    eligible: (g > 0).then(|| vec![g]),
                    ..GroupKey::remote(remote(r))
                });
            }
        }
        keys
    }

    /// The reference: the waiting remote nodes in a tree, walked whole (lqd before).
    #[derive(Default)]
    struct Reference {
        waiting: BTreeMap<NodeId, u64>,
    }

    impl Reference {
        fn moved(
            &mut self,
            groups: &BTreeMap<NodeId, Vec<GroupKey>>,
            moved: &[NodeId],
            defer: impl Fn(&NodeId) -> bool,
            boundary_of: impl Fn(&[GroupKey]) -> u64,
            keys: &mut Vec<GroupKey>,
        ) {
            for r in moved {
                let Some(group_keys) = groups.get(r) else {
                    continue;
                };
                if defer(r) {
                    self.waiting
                        .entry(*r)
                        .or_insert_with(|| boundary_of(group_keys));
                } else {
                    self.waiting.remove(r);
                    keys.extend(group_keys.iter().cloned());
                }
            }
        }

        fn take_due(
            &mut self,
            groups: &BTreeMap<NodeId, Vec<GroupKey>>,
            now: u64,
            keys: &mut Vec<GroupKey>,
        ) {
            self.waiting.retain(|r, b| {
                if *b <= now {
                    keys.extend(groups[r].iter().cloned());
                    false
                } else {
                    true
                }
            });
        }
    }

    #[test]
    fn a_moved_remote_waits_for_its_boundary_and_a_zero_crossing_one_does_not() {
        let keys_all = keys(4);
        let mut w = BoundaryWait::default();
        w.index(&keys_all);
        let mut keys = Vec::new();
        // Remote 2 (3 groups) waits for 20 ms; remote 3 (1 group) crosses 0: now.
        w.moved(
            &[remote(2), remote(3)],
            |r| *r != remote(3),
            |_| 20,
            &mut keys,
        );
        assert_eq!(keys, vec![GroupKey::remote(remote(3))]);
        assert_eq!(w.waiting_remotes(), vec![remote(2)]);
        assert_eq!((w.due_ns(), w.waiting_groups()), (Some(20), 3));
        // Before the boundary nothing is taken; moving again keeps the first boundary.
        keys.clear();
        w.take_due(19, &mut keys);
        w.moved(&[remote(2)], |_| true, |_| 40, &mut keys);
        assert!(keys.is_empty());
        assert_eq!(w.due_ns(), Some(20));
        // At the boundary: its three groups, once.
        w.take_due(20, &mut keys);
        assert_eq!(keys.len(), 3);
        assert!(keys.iter().all(|k| k.remote == Some(remote(2))));
        assert!(w.waiting_remotes().is_empty());
        assert_eq!((w.due_ns(), w.waiting_groups()), (None, 0));
        // A waiting remote node that crosses 0 is computed now and waits no more.
        keys.clear();
        w.moved(&[remote(4)], |_| true, |_| 60, &mut keys);
        w.moved(&[remote(4)], |_| false, |_| 60, &mut keys);
        assert_eq!(keys.len(), 2);
        assert!(w.waiting_remotes().is_empty());
        keys.clear();
        w.take_due(60, &mut keys);
        assert!(keys.is_empty(), "not taken twice: {keys:?}");
        // Indexing again: nothing waits.
        w.moved(&[remote(1)], |_| true, |_| 80, &mut keys);
        assert_eq!(w.waiting_remotes(), vec![remote(1)]);
        w.index(&keys_all);
        assert!(w.waiting_remotes().is_empty());
        assert_eq!(w.due_ns(), None);
    }

    /// Over random sequences of moves (some crossing 0), boundaries and steps, the flat
    /// array gives every step the groups the tree did, in the same order, and waits for the
    /// same remote nodes.
    #[test]
    fn the_flat_array_computes_what_the_tree_did() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for run in 0..50 {
            let n = 1 + (next() % 40) as u32;
            let keys_all = keys(n);
            let groups: BTreeMap<NodeId, Vec<GroupKey>> =
                keys_all.iter().fold(BTreeMap::new(), |mut m, k| {
                    if let Some(r) = k.remote {
                        m.entry(r).or_default().push(k.clone());
                    }
                    m
                });
            let mut w = BoundaryWait::default();
            w.index(&keys_all);
            let mut reference = Reference::default();
            let mut now = 0u64;
            for step in 0..200 {
                now += next() % 8;
                // Some remote nodes move (a few not among the groups), some cross 0.
                let moved: Vec<NodeId> = (0..next() % 12)
                    .map(|_| remote(1 + (next() % u64::from(n + 2)) as u32))
                    .collect::<BTreeSet<NodeId>>()
                    .into_iter()
                    .collect();
                let crossing: BTreeSet<NodeId> =
                    moved.iter().filter(|_| next() % 9 == 0).copied().collect();
                let offset = next() % 30;
                let boundary_of = |g: &[GroupKey]| now + offset + g.len() as u64;
                let (mut got, mut want) = (Vec::new(), Vec::new());
                // The groups' boundaries are asked in ascending key order (the caller
                // finds them by a merge, `SortedLookup`).
                let mut asked: Vec<GroupKey> = Vec::new();
                let asking = |g: &[GroupKey]| {
                    asked.extend_from_slice(g);
                    boundary_of(g)
                };
                w.moved(&moved, |r| !crossing.contains(r), asking, &mut got);
                assert!(asked.is_sorted(), "run {run} step {step}: {asked:?}");
                reference.moved(
                    &groups,
                    &moved,
                    |r| !crossing.contains(r),
                    boundary_of,
                    &mut want,
                );
                w.take_due(now, &mut got);
                reference.take_due(&groups, now, &mut want);
                assert_eq!(got, want, "run {run} step {step}");
                let waiting: Vec<NodeId> = reference.waiting.keys().copied().collect();
                assert_eq!(w.waiting_remotes(), waiting, "run {run} step {step}");
                let groups_waiting: u64 = waiting.iter().map(|r| groups[r].len() as u64).sum();
                assert_eq!(w.waiting_groups(), groups_waiting, "run {run} step {step}");
                // The earliest boundary is never later than a waiting one's.
                if let Some(b) = reference.waiting.values().min() {
                    assert!(w.due_ns().is_some_and(|d| d <= *b), "run {run} step {step}");
                }
            }
        }
    }
}
