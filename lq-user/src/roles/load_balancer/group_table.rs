//! The load-balancer's groups by key, with a generation that moves whenever the set of
//! keys does.
//!
//! A control step recomputes only the groups whose inputs moved (issue 15); what it keeps
//! per group beside the table (the groups computed once, the last report, the weight
//! controller's destinations, the groups of each remote node) has to follow the table's
//! keys. Those are pruned and re-indexed only when the generation moved: at a leaf of a
//! 64 x 512 fabric, walking all 512 keys at every step cost more than the step's own
//! work. The generation moves on every insert and remove: no other way to change the set
//! of keys is exposed (reads go through `Deref`, values are mutable in place).

use std::collections::BTreeMap;
use std::ops::Deref;

use crate::core::controller::path_quality::GroupKey;

/// Groups by key; see the module documentation.
#[derive(Clone, Debug)]
pub(super) struct GroupTable<V> {
    map: BTreeMap<GroupKey, V>,
    generation: u64,
}

impl<V> Default for GroupTable<V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            generation: 0,
        }
    }
}

impl<V> GroupTable<V> {
    /// Moves whenever a key is added or removed.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    pub(super) fn insert(&mut self, key: GroupKey, value: V) -> Option<V> {
        self.generation += 1;
        self.map.insert(key, value)
    }

    pub(super) fn remove(&mut self, key: &GroupKey) -> Option<V> {
        let removed = self.map.remove(key);
        if removed.is_some() {
            self.generation += 1;
        }
        removed
    }

    pub(super) fn get_mut(&mut self, key: &GroupKey) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    pub(super) fn values_mut(&mut self) -> std::collections::btree_map::ValuesMut<'_, GroupKey, V> {
        self.map.values_mut()
    }
}

impl<V> Deref for GroupTable<V> {
    type Target = BTreeMap<GroupKey, V>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<'a, V> IntoIterator for &'a GroupTable<V> {
    type Item = (&'a GroupKey, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, GroupKey, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl<'a, V> IntoIterator for &'a mut GroupTable<V> {
    type Item = (&'a GroupKey, &'a mut V);
    type IntoIter = std::collections::btree_map::IterMut<'a, GroupKey, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::node;

    #[test]
    fn the_generation_moves_with_the_keys_and_only_with_them() {
        let mut t: GroupTable<u32> = GroupTable::default();
        let a = GroupKey::remote(node(1, 1));
        let b = GroupKey::remote(node(1, 2));
        let g0 = t.generation();
        t.insert(a.clone(), 1);
        let g1 = t.generation();
        assert_ne!(g0, g1, "an insert moves it");
        *t.get_mut(&a).unwrap() = 2;
        for v in t.values_mut() {
            *v += 1;
        }
        for (_, v) in &mut t {
            *v += 1;
        }
        assert_eq!(t.generation(), g1, "values changed in place do not");
        assert_eq!(t.remove(&b), None);
        assert_eq!(t.generation(), g1, "removing an absent key does not");
        assert_eq!(t.remove(&a), Some(4));
        assert_ne!(t.generation(), g1, "a remove does");
        assert!(t.is_empty());
    }
}
