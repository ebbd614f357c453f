//! Membership tests and lookups against a sorted sequence, asked in ascending order: a
//! merge, one or two comparisons per question instead of a tree search. A leaf of 512
//! groups asks "is this group still there / in this step's report?" of every group at every
//! control step, in the groups' own order (issue 15), and a 64 x 512 leaf under a fabric's
//! churn asks the weights' state of 23 000 groups a second for their T_reweight boundary,
//! in the same order (issue 41).

use std::iter::Peekable;

/// Answers [`Self::contains`] for keys asked in ascending order.
pub struct SortedProbe<'a, K: Ord + 'a, I: Iterator<Item = &'a K>> {
    keys: Peekable<I>,
}

impl<'a, K: Ord + 'a, I: Iterator<Item = &'a K>> SortedProbe<'a, K, I> {
    /// Over `keys`, which must be in ascending order (a `BTreeMap`'s or `BTreeSet`'s).
    pub fn new(keys: I) -> Self {
        Self {
            keys: keys.peekable(),
        }
    }

    /// Whether `key` is among the keys. Each call's key must not be smaller than the last
    /// one's (a smaller key is answered `false`).
    pub fn contains(&mut self, key: &K) -> bool {
        seek(&mut self.keys, key, |k| k).is_some()
    }
}

/// Answers [`Self::get`] for keys asked in ascending order, over a sorted map's entries.
pub struct SortedLookup<'a, K: Ord + 'a, V: 'a, I: Iterator<Item = (&'a K, &'a V)>> {
    entries: Peekable<I>,
}

impl<'a, K: Ord + 'a, V: 'a, I: Iterator<Item = (&'a K, &'a V)>> SortedLookup<'a, K, V, I> {
    /// Over `entries`, which must be in ascending order of key (a `BTreeMap`'s).
    pub fn new(entries: I) -> Self {
        Self {
            entries: entries.peekable(),
        }
    }

    /// The value of `key`, if among the entries. Each call's key must not be smaller than
    /// the last one's (a smaller key is answered `None`).
    pub fn get(&mut self, key: &K) -> Option<&'a V> {
        seek(&mut self.entries, key, |(k, _)| k).map(|(_, v)| v)
    }
}

/// The merge both answer with: `items` advanced past those whose key (`key_of`) is below
/// `key`; the one whose key is `key`, left in place for a repeated question.
#[inline]
fn seek<'a, K: Ord + 'a, T: Copy>(
    items: &mut Peekable<impl Iterator<Item = T>>,
    key: &K,
    key_of: impl Fn(T) -> &'a K,
) -> Option<T> {
    while let Some(&item) = items.peek() {
        match key_of(item).cmp(key) {
            std::cmp::Ordering::Less => {
                items.next();
            }
            std::cmp::Ordering::Equal => return Some(item),
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn agrees_with_a_tree_search_for_ascending_questions() {
        let set: BTreeSet<u32> = [2, 3, 5, 8, 13, 21].into();
        let mut probe = SortedProbe::new(set.iter());
        for q in 0..30 {
            assert_eq!(probe.contains(&q), set.contains(&q), "{q}");
        }
        // Repeated questions keep their answer.
        let mut probe = SortedProbe::new(set.iter());
        assert!(probe.contains(&5) && probe.contains(&5));
        assert!(!probe.contains(&6) && !probe.contains(&6));
    }

    #[test]
    fn lookups_agree_with_a_tree_search_for_ascending_questions() {
        let map: std::collections::BTreeMap<u32, char> =
            [(2, 'a'), (3, 'b'), (5, 'c'), (8, 'd'), (13, 'e')].into();
        let mut lookup = SortedLookup::new(map.iter());
        for q in 0..20 {
            assert_eq!(lookup.get(&q), map.get(&q), "{q}");
        }
        // Repeated questions keep their answer.
        let mut lookup = SortedLookup::new(map.iter());
        assert!(lookup.get(&5) == Some(&'c') && lookup.get(&5) == Some(&'c'));
        assert!(lookup.get(&6).is_none() && lookup.get(&6).is_none());
        assert_eq!(lookup.get(&8), Some(&'d'));
    }
}
