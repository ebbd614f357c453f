//! Membership tests against a sorted sequence, asked in ascending order: a merge, one or two
//! comparisons per question instead of a tree search. A leaf of 512 groups asks "is this
//! group still there / in this step's report?" of every group at every control step, in
//! the groups' own order (issue 15).

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
        while let Some(k) = self.keys.peek() {
            match (*k).cmp(key) {
                std::cmp::Ordering::Less => {
                    self.keys.next();
                }
                std::cmp::Ordering::Equal => return true,
                std::cmp::Ordering::Greater => return false,
            }
        }
        false
    }
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
}
