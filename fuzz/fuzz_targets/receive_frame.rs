//! Feeds arbitrary bytes as an Ethernet frame to `receive::process_frame`, twice in a row
//! against the same capacity-limited tables, under an unqualified and an AS-qualified
//! configuration. Checks: no panic, the tables never exceed their capacity, the second
//! copy of an accepted datagram is `stale_seq`, and a discarded or foreign frame gets the
//! same verdict again without touching the tables.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use lq_common::{
    maps::{
        AS_PLAN_MAX, AS_QUALIFIED_NO, AS_QUALIFIED_YES, COUNTER_COUNT, NeighborKey, NeighborValue,
        PathKey, PathValue, ReceiverConfig,
    },
    receive::{Counters, Discard, ReceiveTables, TableFull, Verdict, process_frame},
    wire::{AsRange, DEFAULT_PORT},
};

/// Small capacities so that a 91-entry datagram fills the path table.
const PATH_CAPACITY: usize = 64;
const NEIGHBOR_CAPACITY: usize = 4;
const DEAD_INTERVAL_NS: u64 = 3_000_000_000;
const NOW_NS: u64 = 10_000_000_000;

/// A `ReceiveTables` over BTreeMaps that refuses new keys beyond a capacity, like the
/// kernel's hash maps.
#[derive(Default, PartialEq)]
struct Tables {
    neighbors: BTreeMap<NeighborKey, NeighborValue>,
    paths: BTreeMap<PathKey, PathValue>,
}

fn insert<K: Ord, V>(map: &mut BTreeMap<K, V>, cap: usize, k: K, v: V) -> Result<(), TableFull> {
    if map.len() >= cap && !map.contains_key(&k) {
        return Err(TableFull);
    }
    map.insert(k, v);
    Ok(())
}

impl ReceiveTables for Tables {
    fn neighbor(&self, key: &NeighborKey) -> Option<NeighborValue> {
        self.neighbors.get(key).copied()
    }
    fn set_neighbor(&mut self, key: NeighborKey, value: NeighborValue) -> Result<(), TableFull> {
        insert(&mut self.neighbors, NEIGHBOR_CAPACITY, key, value)
    }
    fn path(&self, key: &PathKey) -> Option<PathValue> {
        self.paths.get(key).copied()
    }
    fn set_path(&mut self, key: PathKey, value: PathValue) -> Result<(), TableFull> {
        insert(&mut self.paths, PATH_CAPACITY, key, value)
    }
}

fn config(as_qualified: bool) -> ReceiverConfig {
    let mut as_plan = [AsRange::default(); AS_PLAN_MAX];
    as_plan[0] = AsRange {
        first: 64_512,
        last: 65_534,
    };
    as_plan[1] = AsRange::single(4_200_000_001);
    ReceiverConfig {
        dead_interval_ns: DEAD_INTERVAL_NS,
        udp_port: DEFAULT_PORT,
        as_qualified: if as_qualified {
            AS_QUALIFIED_YES
        } else {
            AS_QUALIFIED_NO
        },
        pass_through: 0,
        as_plan_len: if as_qualified { 2 } else { 0 },
        as_plan,
    }
}

fuzz_target!(|frame: &[u8]| {
    for as_qualified in [false, true] {
        twice(frame, &config(as_qualified));
    }
});

fn twice(frame: &[u8], cfg: &ReceiverConfig) {
    let mut tables = Tables::default();
    let mut counters: Counters = [0; COUNTER_COUNT as usize];
    let first = process_frame(frame, cfg, NOW_NS, &mut tables, &mut counters);
    check_capacity(&tables);
    let after_first = (tables.neighbors.clone(), tables.paths.clone());
    let second = process_frame(frame, cfg, NOW_NS + 1, &mut tables, &mut counters);
    check_capacity(&tables);
    match first {
        Verdict::Accept { .. } => {
            assert_eq!(
                second,
                Verdict::Discard(Discard::StaleSeq),
                "replay accepted"
            );
        }
        Verdict::Discard(d) => {
            assert_ne!(d, Discard::StaleSeq, "stale_seq against empty tables");
            assert_eq!(second, first, "a discard is not deterministic");
        }
        Verdict::NotOurs => assert_eq!(second, first),
    }
    // Only an accepted datagram writes; the replay is refused, so nothing changed.
    assert!(
        after_first == (tables.neighbors.clone(), tables.paths.clone()),
        "the second copy changed the tables"
    );
    let total: u64 = counters.iter().sum();
    assert!(total >= 2, "every frame is counted somewhere");
}

fn check_capacity(t: &Tables) {
    assert!(t.paths.len() <= PATH_CAPACITY);
    assert!(t.neighbors.len() <= NEIGHBOR_CAPACITY);
}
