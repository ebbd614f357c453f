//! Heartbeat-based failure detection (seed 003 section 6.5), entry ageing
//! (`spec/lq-udp-wire.md`) and a T_notify mismatch detector (section 10).
//!
//! Every advertisement, periodic or triggered, is a heartbeat of its sender. Per neighbor
//! (spine) the state is:
//! * `Active`: heard from within 1.1 x T_notify (the longest jittered periodic interval,
//!   section 7.2);
//! * `Stale`: silent for more than that. Display only: one late or lost datagram must
//!   not move traffic, so forwarding ignores it;
//! * `Failed`: silent for more than miss_count x T_notify. All of its entries count as
//!   LQS 0 / CL 7.
//!
//! "For more than" is the YANG module's wording for both states (`neighbor/state`), so
//! every comparison is strict: [`silent_for_more_than`] is the one test used here, for
//! entry ageing, and (as `lq_common::receive::neighbor_failed`) by the XDP receiver's
//! resynchronisation and by `lqd show`.
//!
//! Time is an input (`u64` nanoseconds of the same clock as the BPF maps, CLOCK_MONOTONIC),
//! so the module is deterministic and testable in virtual time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use lq_common::maps::{NeighborKey, NeighborValue};
use lq_common::wire::Mode;
use tracing::{info, warn};

use super::config::ControllerConfig;
// The node identity of section 6.2 (path_quality::NodeId), named here without importing
// path_quality, which imports this module.
use lq_common::maps::NeighborKey as NodeId;

/// Arrivals closer together than this belong to one transmission: a sender splits a large
/// advertisement into several back-to-back datagrams (wire spec), which must not be taken
/// for short periodic intervals. 2 ms is well below the shortest jittered period
/// (0.9 x 10 ms).
pub const BURST_GAP_NS: u64 = 2_000_000;
/// Interval samples kept per neighbor for the mismatch detector.
pub const INTERVAL_WINDOW: usize = 16;
/// Samples needed before the detector decides anything.
pub const INTERVAL_MIN_SAMPLES: usize = 8;
/// The median periodic interval must differ from ours by more than this factor (either
/// way) to be reported. Jitter is uniform in [0.9, 1.1] x T_notify (section 7.2), so the
/// median of 8 or more samples stays well inside 1.2, while the nearest other settings a
/// fabric would plausibly mix up (20 vs 25 ms, 10 vs 20 ms) are outside it.
pub const MISMATCH_FACTOR: f64 = 1.2;
/// A reported mismatch clears once the median is back within this factor (hysteresis, so a
/// borderline neighbor does not flap the warning).
pub const MATCH_FACTOR: f64 = 1.1;

/// Whether something last heard of at `last_ns` has been silent "for more than"
/// `interval_ns` at `now_ns` (the YANG `stale` / `failed` wording: strictly more). The
/// same function the XDP receiver uses to resynchronise a failed neighbor, so the daemon,
/// the receiver and the views never disagree at the boundary. A timestamp in the future
/// (clock skew between map writer and reader) counts as just heard.
pub const fn silent_for_more_than(last_ns: u64, now_ns: u64, interval_ns: u64) -> bool {
    lq_common::receive::neighbor_failed(last_ns, now_ns, interval_ns)
}

/// An entry not refreshed for more than `dead_interval_ns` (miss_count x T_notify) is
/// treated as failed, LQS 0 / CL 7 (wire spec, "entry ageing"; section 6.5).
pub fn entry_expired(last_update_ns: u64, now_ns: u64, dead_interval_ns: u64) -> bool {
    silent_for_more_than(last_update_ns, now_ns, dead_interval_ns)
}

/// Receive state of a neighbor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeighborState {
    /// Heard from recently.
    Active,
    /// Late, display only.
    Stale,
    /// Silent for miss_count x T_notify: its entries count as LQS 0 / CL 7.
    Failed,
}

/// A state transition or a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatEvent {
    /// First datagram from a neighbor.
    NeighborDiscovered {
        /// The neighbor.
        neighbor: NodeId,
    },
    /// Active -> Stale (display only).
    NeighborStale {
        /// The neighbor.
        neighbor: NodeId,
    },
    /// Stale -> Active.
    NeighborActive {
        /// The neighbor.
        neighbor: NodeId,
    },
    /// Active or Stale -> Failed: weights must be recomputed.
    NeighborFailed {
        /// The neighbor.
        neighbor: NodeId,
        /// How long it had been silent.
        silent_ns: u64,
    },
    /// Failed -> Active: weights must be recomputed.
    NeighborRecovered {
        /// The neighbor.
        neighbor: NodeId,
    },
    /// The neighbor's periodic interval clearly differs from our T_notify (section 10
    /// requires one T_notify fabric-wide).
    NotifyIntervalMismatch {
        /// The neighbor.
        neighbor: NodeId,
        /// Median observed periodic interval.
        observed_ns: u64,
        /// Our T_notify.
        configured_ns: u64,
    },
    /// A previously reported mismatch is gone.
    NotifyIntervalMatch {
        /// The neighbor.
        neighbor: NodeId,
        /// Median observed periodic interval.
        observed_ns: u64,
    },
}

impl HeartbeatEvent {
    /// Does this event change forwarding (the set of failed neighbors)?
    pub fn affects_forwarding(&self) -> bool {
        matches!(
            self,
            Self::NeighborFailed { .. } | Self::NeighborRecovered { .. }
        )
    }
}

#[derive(Clone, Debug)]
struct Track {
    state: NeighborState,
    last_seen_ns: u64,
    /// Start of the last transmission (burst), for interval samples.
    last_arrival_ns: u64,
    samples: VecDeque<u64>,
    mismatch: bool,
    /// `NeighborValue::accepted` at the last [`Heartbeat::observe`].
    last_accepted: Option<u64>,
    /// `NeighborValue::last_sequence` at the last [`Heartbeat::observe`].
    last_sequence: Option<u16>,
    /// Datagrams the neighbor sent that were never accepted, by its sequence numbers
    /// ([`missed_between`]).
    missed: u64,
}

/// The widest sequence advance read as loss: wider (or backwards, or less than the
/// datagrams accepted) is a sender that restarted its sequence, not a count. 4 096
/// datagrams are 80 s of one-datagram advertisements at the default T_notify and 14 s of a
/// 512-node spine's six.
pub const MAX_SEQUENCE_ADVANCE: u16 = 4096;

/// How many datagrams a neighbor sent between two reads of its receive state that were not
/// accepted (lost on the way, dropped as reordered, or refused): its sequence advanced by
/// `sequence_advance` (serial arithmetic, seed 003's `sequence-number`: "Used for loss,
/// reordering, and replay detection") while `accepted` of them arrived. `None` when the
/// two do not fit one sender's count ([`MAX_SEQUENCE_ADVANCE`]).
pub fn missed_between(sequence_advance: u16, accepted: u64) -> Option<u64> {
    let advance = u64::from(sequence_advance);
    (accepted > 0 && advance >= accepted && sequence_advance <= MAX_SEQUENCE_ADVANCE)
        .then(|| advance - accepted)
}

/// Per-neighbor heartbeat state.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    t_notify_ns: u64,
    stale_ns: u64,
    dead_ns: u64,
    neighbors: BTreeMap<NodeId, Track>,
}

impl Heartbeat {
    /// A detector for a (validated) configuration.
    pub fn new(config: &ControllerConfig) -> Self {
        Self {
            t_notify_ns: config.t_notify_ns(),
            stale_ns: config.stale_after_ns(),
            dead_ns: config.dead_interval_ns(),
            neighbors: BTreeMap::new(),
        }
    }

    /// A datagram from `neighbor` was accepted at `at_ns`.
    pub fn on_datagram(&mut self, neighbor: NodeId, mode: Mode, at_ns: u64) -> Vec<HeartbeatEvent> {
        self.arrival(neighbor, Some(mode), at_ns, None)
    }

    /// Feed a poll of the BPF neighbor table. `accepted` tells how many datagrams arrived
    /// since the last poll: only when exactly one did is its arrival time usable as an
    /// interval sample, so poll faster than T_notify for the mismatch detector to work.
    /// Call [`Heartbeat::tick`] after a batch of observations.
    pub fn observe(
        &mut self,
        key: NeighborKey,
        value: &NeighborValue,
        _now_ns: u64,
    ) -> Vec<HeartbeatEvent> {
        let (last, last_sequence) = self
            .neighbors
            .get(&key)
            .map_or((None, None), |t| (t.last_accepted, t.last_sequence));
        let missed = last.zip(last_sequence).and_then(|(a, s)| {
            missed_between(
                value.last_sequence.wrapping_sub(s),
                value.accepted.wrapping_sub(a),
            )
        });
        let events = match last {
            Some(a) if a == value.accepted => Vec::new(),
            Some(a) if value.accepted.wrapping_sub(a) == 1 => self.arrival(
                key,
                Mode::from_wire(value.last_mode),
                value.last_seen_ns,
                missed,
            ),
            // First sight, several arrivals between polls, or a reset counter: the time of
            // the latest arrival is known but not the interval.
            _ => self.arrival(key, None, value.last_seen_ns, missed),
        };
        if let Some(t) = self.neighbors.get_mut(&key) {
            t.last_accepted = Some(value.accepted);
            t.last_sequence = Some(value.last_sequence);
            t.missed += missed.unwrap_or(0);
        }
        events
    }

    /// `mode == None`: an arrival whose interval to the previous one is unknown. `missed`:
    /// the neighbor's datagrams not accepted since the last arrival seen, when known
    /// ([`missed_between`]), told when it ends a failure: lost datagrams (a path that
    /// drops them) or none (a sender that sent nothing, or datagrams delayed on the way).
    fn arrival(
        &mut self,
        neighbor: NodeId,
        mode: Option<Mode>,
        at_ns: u64,
        missed: Option<u64>,
    ) -> Vec<HeartbeatEvent> {
        let mut events = Vec::new();
        let t_notify = self.t_notify_ns;
        let track = match self.neighbors.get_mut(&neighbor) {
            Some(t) => t,
            None => {
                info!(?neighbor, "LQ neighbor discovered");
                events.push(HeartbeatEvent::NeighborDiscovered { neighbor });
                self.neighbors.entry(neighbor).or_insert(Track {
                    state: NeighborState::Active,
                    last_seen_ns: at_ns,
                    last_arrival_ns: at_ns,
                    samples: VecDeque::new(),
                    mismatch: false,
                    last_accepted: None,
                    last_sequence: None,
                    missed: 0,
                })
            }
        };
        if at_ns < track.last_seen_ns {
            // Reordered report of an older arrival: nothing new.
            return events;
        }
        let was = track.state;
        let silent_ns = at_ns - track.last_seen_ns;
        track.last_seen_ns = at_ns;
        track.state = NeighborState::Active;
        match was {
            NeighborState::Failed => {
                info!(
                    ?neighbor,
                    silent_ns,
                    missed_datagrams = ?missed,
                    "LQ neighbor recovered"
                );
                events.push(HeartbeatEvent::NeighborRecovered { neighbor });
            }
            NeighborState::Stale => events.push(HeartbeatEvent::NeighborActive { neighbor }),
            NeighborState::Active => {}
        }

        let gap = at_ns - track.last_arrival_ns;
        if gap > 0 && gap < BURST_GAP_NS {
            // Another datagram of the same transmission.
            return events;
        }
        // A gap spanning a failure, or of unknown composition, is no interval sample. A
        // triggered datagram restarts the sender's periodic timer (section 7.2), so it
        // starts a new interval but is not the end of a periodic one.
        if was != NeighborState::Failed && mode == Some(Mode::Periodic) && gap > 0 {
            if track.samples.len() == INTERVAL_WINDOW {
                track.samples.pop_front();
            }
            track.samples.push_back(gap);
            if let Some(ev) = check_interval(neighbor, track, t_notify) {
                events.push(ev);
            }
        }
        track.last_arrival_ns = at_ns;
        events
    }

    /// Advance time: report neighbors that became stale or failed.
    pub fn tick(&mut self, now_ns: u64) -> Vec<HeartbeatEvent> {
        self.tick_as_of(now_ns, now_ns)
    }

    /// [`Self::tick`], with staleness judged as of `stale_as_of_ns` (at most `now_ns`):
    /// the time of the caller's last copy of the arrivals (lqd reads the receiver's
    /// neighbor table again once its copy is 0.8 x T_notify old, sooner only when a
    /// failure may be due or an event names a spine not active). Failure is judged at `now_ns`, against a copy the caller read again when
    /// [`Self::next_failure_deadline`] passed. Staleness is display only; judged at `now_ns`
    /// against an older copy, a neighbor that had sent since would read Stale for a moment,
    /// and reading the table again at every stale deadline (64 spines: one every few
    /// milliseconds) was most of lqd's neighbor reads (issue 41).
    pub fn tick_as_of(&mut self, now_ns: u64, stale_as_of_ns: u64) -> Vec<HeartbeatEvent> {
        let stale_as_of_ns = stale_as_of_ns.min(now_ns);
        let mut events = Vec::new();
        for (&neighbor, t) in &mut self.neighbors {
            let silent = now_ns.saturating_sub(t.last_seen_ns);
            let new = if silent_for_more_than(t.last_seen_ns, now_ns, self.dead_ns) {
                NeighborState::Failed
            } else if silent_for_more_than(t.last_seen_ns, stale_as_of_ns, self.stale_ns) {
                NeighborState::Stale
            } else {
                NeighborState::Active
            };
            // Only datagrams bring a neighbor back (Failed/Stale -> Active).
            match (t.state, new) {
                (NeighborState::Active, NeighborState::Stale) => {
                    t.state = new;
                    events.push(HeartbeatEvent::NeighborStale { neighbor });
                }
                (NeighborState::Active | NeighborState::Stale, NeighborState::Failed) => {
                    t.state = new;
                    warn!(?neighbor, silent_ns = silent, "LQ neighbor failed (6.5)");
                    events.push(HeartbeatEvent::NeighborFailed {
                        neighbor,
                        silent_ns: silent,
                    });
                }
                _ => {}
            }
        }
        events
    }

    /// The state of a neighbor.
    pub fn state(&self, neighbor: NodeId) -> Option<NeighborState> {
        self.neighbors.get(&neighbor).map(|t| t.state)
    }

    /// Every failed neighbor: their entries count as LQS 0 / CL 7.
    pub fn failed_neighbors(&self) -> BTreeSet<NodeId> {
        self.neighbors
            .iter()
            .filter(|(_, t)| t.state == NeighborState::Failed)
            .map(|(n, _)| *n)
            .collect()
    }

    /// When a neighbor silent from now on fails ([`Heartbeat::tick`] reports it), if ever.
    pub fn next_failure_deadline(&self) -> Option<u64> {
        self.neighbors
            .values()
            .filter_map(|t| match t.state {
                NeighborState::Active | NeighborState::Stale => {
                    Some(t.last_seen_ns.saturating_add(self.dead_ns + 1))
                }
                NeighborState::Failed => None,
            })
            .min()
    }

    /// When [`Heartbeat::tick`] next has something to report, if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        self.neighbors
            .values()
            .filter_map(|t| match t.state {
                NeighborState::Active => Some(t.last_seen_ns.saturating_add(self.stale_ns + 1)),
                NeighborState::Stale => Some(t.last_seen_ns.saturating_add(self.dead_ns + 1)),
                NeighborState::Failed => None,
            })
            .min()
    }

    /// Datagrams a neighbor sent that were not accepted, by its sequence numbers, since it
    /// was first heard ([`missed_between`]; advances that do not fit one sender's count
    /// are not counted).
    pub fn missed_datagrams(&self, neighbor: NodeId) -> u64 {
        self.neighbors.get(&neighbor).map_or(0, |t| t.missed)
    }

    /// Median of the recent periodic intervals of a neighbor (`None` with too few).
    pub fn observed_interval_ns(&self, neighbor: NodeId) -> Option<u64> {
        self.neighbors.get(&neighbor).and_then(median)
    }
}

fn median(t: &Track) -> Option<u64> {
    if t.samples.len() < INTERVAL_MIN_SAMPLES {
        return None;
    }
    let mut v: Vec<u64> = t.samples.iter().copied().collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The median, not the mean: lost datagrams (2x intervals) and stray early ones are
/// outliers that must not move the estimate.
fn check_interval(neighbor: NodeId, t: &mut Track, configured_ns: u64) -> Option<HeartbeatEvent> {
    let observed_ns = median(t)?;
    let ratio = observed_ns as f64 / configured_ns.max(1) as f64;
    let outside = |f: f64| ratio > f || ratio < 1.0 / f;
    if !t.mismatch && outside(MISMATCH_FACTOR) {
        t.mismatch = true;
        warn!(
            ?neighbor,
            observed_ns, configured_ns, "neighbor's T_notify differs from ours (section 10)"
        );
        Some(HeartbeatEvent::NotifyIntervalMismatch {
            neighbor,
            observed_ns,
            configured_ns,
        })
    } else if t.mismatch && !outside(MATCH_FACTOR) {
        t.mismatch = false;
        Some(HeartbeatEvent::NotifyIntervalMatch {
            neighbor,
            observed_ns,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::node;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn hb(t_notify_ms: u64, miss: u8) -> Heartbeat {
        let cfg = ControllerConfig {
            miss_count: miss,
            ..ControllerConfig::with_t_notify(Duration::from_millis(t_notify_ms))
        };
        assert_eq!(cfg.validate(), Ok(()));
        Heartbeat::new(&cfg)
    }

    /// A deterministic jitter in [0.9, 1.1] x T (section 7.2), from a small LCG.
    fn jittered(t_ns: u64, seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (*seed >> 33) as f64 / (1u64 << 31) as f64; // [0, 1)
        (t_ns as f64 * (0.9 + 0.2 * u)) as u64
    }

    /// Staleness is judged as of the caller's copy of the arrivals, failure at the time
    /// given; the failure deadline alone asks for a fresh copy.
    #[test]
    fn staleness_as_of_the_copy_and_failure_at_now() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        h.on_datagram(n, Mode::Periodic, 0);
        assert_eq!(h.next_failure_deadline(), Some(60 * MS + 1));
        // The copy read at 15 ms: at 30 ms the neighbor may have sent since, and is not
        // judged stale against that copy.
        assert_eq!(h.tick_as_of(30 * MS, 15 * MS), []);
        assert_eq!(h.state(n), Some(NeighborState::Active));
        // A copy read at 23 ms still shows nothing since 0: stale as of then.
        assert_eq!(
            h.tick_as_of(30 * MS, 23 * MS),
            [HeartbeatEvent::NeighborStale { neighbor: n }]
        );
        // Failure is judged at the time given, whatever the copy's.
        assert!(matches!(
            h.tick_as_of(60 * MS + 1, 23 * MS)[..],
            [HeartbeatEvent::NeighborFailed { .. }]
        ));
        assert_eq!(h.next_failure_deadline(), None);
        // A copy "from the future" is taken at the time given.
        let mut h = hb(20, 3);
        h.on_datagram(n, Mode::Periodic, 0);
        assert_eq!(h.tick_as_of(22 * MS, 40 * MS), []);
        assert_eq!(h.next_failure_deadline(), Some(60 * MS + 1));
    }

    #[test]
    fn active_stale_failed_recovered() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        assert_eq!(
            h.on_datagram(n, Mode::Periodic, 0),
            [HeartbeatEvent::NeighborDiscovered { neighbor: n }]
        );
        assert_eq!(h.tick(22 * MS), []); // 1.1 x T_notify: still active
        assert_eq!(h.next_deadline(), Some(22 * MS + 1));
        assert_eq!(
            h.tick(22 * MS + 1),
            [HeartbeatEvent::NeighborStale { neighbor: n }]
        );
        assert_eq!(h.state(n), Some(NeighborState::Stale));
        assert!(h.failed_neighbors().is_empty());
        assert_eq!(h.next_deadline(), Some(60 * MS + 1));
        assert_eq!(h.tick(60 * MS), []);
        assert_eq!(
            h.tick(60 * MS + 1),
            [HeartbeatEvent::NeighborFailed {
                neighbor: n,
                silent_ns: 60 * MS + 1
            }]
        );
        assert_eq!(h.failed_neighbors(), BTreeSet::from([n]));
        assert_eq!(h.tick(1000 * MS), []);
        assert_eq!(h.next_deadline(), None);
        let ev = h.on_datagram(n, Mode::Triggered, 1000 * MS);
        assert_eq!(ev, [HeartbeatEvent::NeighborRecovered { neighbor: n }]);
        assert!(ev[0].affects_forwarding());
        assert!(h.failed_neighbors().is_empty());
    }

    #[test]
    fn stale_back_to_active_without_failing() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        h.on_datagram(n, Mode::Periodic, 0);
        h.tick(30 * MS);
        assert_eq!(
            h.on_datagram(n, Mode::Periodic, 40 * MS),
            [HeartbeatEvent::NeighborActive { neighbor: n }]
        );
        assert_eq!(
            h.tick(99 * MS),
            [HeartbeatEvent::NeighborStale { neighbor: n }]
        );
    }

    #[test]
    fn range_ends_of_miss_count_and_t_notify() {
        for (t, miss) in [(10, 2), (100, 10), (10, 10), (100, 2)] {
            let n = node(7, 7);
            let mut h = hb(t, miss);
            h.on_datagram(n, Mode::Periodic, 5);
            let dead = t * MS * u64::from(miss);
            h.tick(5 + dead);
            assert_ne!(h.state(n), Some(NeighborState::Failed), "{t} {miss}");
            h.tick(5 + dead + 1);
            assert_eq!(h.state(n), Some(NeighborState::Failed), "{t} {miss}");
            assert!(!entry_expired(5, 5 + dead, dead));
            assert!(entry_expired(5, 5 + dead + 1, dead));
        }
        assert!(!entry_expired(100, 50, 10)); // future timestamp: fresh
    }

    /// The YANG module defines `stale` and `failed` as silent "for more than" T_notify
    /// (here its jittered 1.1 x) and miss_count x T_notify. At exactly the boundary the
    /// neighbor is not yet in the next state, and the controller, the entry ageing and the
    /// XDP receiver's resynchronisation test (lq-common) all agree on that.
    #[test]
    fn stale_and_failed_mean_silent_for_more_than_the_interval() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        h.on_datagram(n, Mode::Periodic, 1_000);
        let (stale, dead) = (22 * MS, 60 * MS);
        assert_eq!(h.tick(1_000 + stale), []);
        assert_eq!(h.state(n), Some(NeighborState::Active));
        h.tick(1_000 + stale + 1);
        assert_eq!(h.state(n), Some(NeighborState::Stale));
        assert_eq!(h.tick(1_000 + dead), []);
        assert_eq!(h.state(n), Some(NeighborState::Stale));
        assert!(h.failed_neighbors().is_empty());
        h.tick(1_000 + dead + 1);
        assert_eq!(h.state(n), Some(NeighborState::Failed));
        for (silent, failed) in [(dead - 1, false), (dead, false), (dead + 1, true)] {
            let now = 1_000 + silent;
            assert_eq!(entry_expired(1_000, now, dead), failed, "{silent}");
            assert_eq!(
                lq_common::receive::neighbor_failed(1_000, now, dead),
                failed,
                "{silent}"
            );
        }
    }

    #[test]
    fn loss_of_two_datagrams_is_not_a_failure_but_three_is() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        h.on_datagram(n, Mode::Periodic, 0);
        // 20 and 40 lost; 60 arrives just before the deadline would hit at 60.
        assert!(h.on_datagram(n, Mode::Periodic, 59 * MS).is_empty());
        h.tick(59 * MS);
        assert_eq!(h.state(n), Some(NeighborState::Active));
        h.tick(119 * MS);
        assert_eq!(h.state(n), Some(NeighborState::Stale));
        h.tick(119 * MS + 1);
        assert_eq!(h.state(n), Some(NeighborState::Failed));
    }

    fn feed(
        h: &mut Heartbeat,
        n: NodeId,
        period_ns: u64,
        count: usize,
        t0: u64,
        seed: &mut u64,
    ) -> (u64, Vec<HeartbeatEvent>) {
        let mut t = t0;
        let mut ev = Vec::new();
        for i in 0..count {
            t += jittered(period_ns, seed);
            ev.extend(h.on_datagram(n, Mode::Periodic, t));
            // A split advertisement: a second datagram right behind the first.
            if i % 3 == 0 {
                ev.extend(h.on_datagram(n, Mode::Periodic, t + 50_000));
            }
            // A triggered datagram in the middle of an interval restarts the timer.
            if i % 5 == 0 {
                t += period_ns / 3;
                ev.extend(h.on_datagram(n, Mode::Triggered, t));
            }
            // An occasional loss.
            if i % 7 == 0 {
                t += jittered(period_ns, seed);
            }
            h.tick(t);
        }
        (t, ev)
    }

    #[test]
    fn matching_interval_with_jitter_triggers_splits_and_loss_is_quiet() {
        let n = node(0, 1);
        let mut h = hb(20, 3);
        let mut seed = 1;
        let (_, ev) = feed(&mut h, n, 20 * MS, 200, 0, &mut seed);
        assert!(
            ev.iter()
                .all(|e| !matches!(e, HeartbeatEvent::NotifyIntervalMismatch { .. })),
            "{ev:?}"
        );
        let obs = h.observed_interval_ns(n).unwrap_or(0);
        assert!((18 * MS..=22 * MS).contains(&obs), "{obs}");
    }

    #[test]
    fn a_different_t_notify_is_reported_once_and_cleared() {
        let n = node(0, 1);
        // Ours 20 ms; the neighbor uses 25 ms (Stale flaps are fine: display only).
        let mut h = hb(20, 3);
        let mut seed = 7;
        let (t, ev) = feed(&mut h, n, 25 * MS, 100, 0, &mut seed);
        let mism: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e, HeartbeatEvent::NotifyIntervalMismatch { .. }))
            .collect();
        assert_eq!(mism.len(), 1, "{ev:?}");
        assert!(
            matches!(mism[0], HeartbeatEvent::NotifyIntervalMismatch { configured_ns, .. } if *configured_ns == 20 * MS)
        );
        // The neighbor is reconfigured to 20 ms: the warning clears.
        let (_, ev) = feed(&mut h, n, 20 * MS, 100, t, &mut seed);
        assert!(
            ev.iter()
                .any(|e| matches!(e, HeartbeatEvent::NotifyIntervalMatch { .. })),
            "{ev:?}"
        );
        // Shorter than ours too: 10 ms against 20 ms.
        let m = node(0, 2);
        let (_, ev) = feed(&mut h, m, 10 * MS, 100, 0, &mut seed);
        assert!(ev.iter().any(|e| matches!(
            e,
            HeartbeatEvent::NotifyIntervalMismatch { neighbor, .. } if *neighbor == m
        )));
    }

    #[test]
    fn observe_polls_of_the_neighbor_table() {
        let k = node(0, 9);
        let mut h = hb(20, 3);
        let mut v = NeighborValue {
            last_seen_ns: 5 * MS,
            accepted: 40,
            ..Default::default()
        };
        assert_eq!(
            h.observe(k, &v, 6 * MS),
            [HeartbeatEvent::NeighborDiscovered { neighbor: k }]
        );
        assert!(h.observe(k, &v, 7 * MS).is_empty());
        // One arrival per poll: samples are taken.
        for i in 1..=10u64 {
            v.accepted += 1;
            v.last_seen_ns = 5 * MS + i * 30 * MS;
            h.observe(k, &v, v.last_seen_ns + MS);
        }
        assert_eq!(h.observed_interval_ns(k), Some(30 * MS));
        // Two arrivals between polls: no sample.
        v.accepted += 2;
        v.last_seen_ns += 40 * MS;
        h.observe(k, &v, v.last_seen_ns);
        assert_eq!(h.observed_interval_ns(k), Some(30 * MS));
        h.tick(v.last_seen_ns + 60 * MS + 1);
        assert_eq!(h.state(k), Some(NeighborState::Failed));
    }

    #[test]
    fn a_sequence_advance_beyond_the_accepted_datagrams_counts_them_missed() {
        assert_eq!(missed_between(1, 1), Some(0));
        assert_eq!(missed_between(5, 2), Some(3));
        // Nothing new, a sequence that went back or restarted, or one too far ahead.
        assert_eq!(missed_between(0, 0), None);
        assert_eq!(missed_between(0, 1), None);
        assert_eq!(missed_between(2, 3), None);
        assert_eq!(missed_between(MAX_SEQUENCE_ADVANCE + 1, 1), None);
        assert_eq!(
            missed_between(MAX_SEQUENCE_ADVANCE, 1),
            Some(u64::from(MAX_SEQUENCE_ADVANCE) - 1)
        );

        let k = node(0, 9);
        let mut h = hb(20, 3);
        let mut v = NeighborValue {
            last_seen_ns: 5 * MS,
            accepted: 1,
            last_sequence: 65_530,
            ..Default::default()
        };
        h.observe(k, &v, 5 * MS);
        assert_eq!(h.missed_datagrams(k), 0);
        // Every datagram arrives, across the sequence's wrap.
        for _ in 0..10 {
            v.accepted += 1;
            v.last_sequence = v.last_sequence.wrapping_add(1);
            v.last_seen_ns += 20 * MS;
            h.observe(k, &v, v.last_seen_ns);
        }
        assert_eq!(h.missed_datagrams(k), 0);
        // Three lost before a failure, then one more across it: counted on recovery.
        v.accepted += 1;
        v.last_sequence = v.last_sequence.wrapping_add(4);
        v.last_seen_ns += 80 * MS;
        h.observe(k, &v, v.last_seen_ns);
        assert_eq!(h.missed_datagrams(k), 3);
        h.tick(v.last_seen_ns + 61 * MS);
        assert_eq!(h.state(k), Some(NeighborState::Failed));
        v.accepted += 2;
        v.last_sequence = v.last_sequence.wrapping_add(3);
        v.last_seen_ns += 70 * MS;
        let ev = h.observe(k, &v, v.last_seen_ns);
        assert_eq!(ev, [HeartbeatEvent::NeighborRecovered { neighbor: k }]);
        assert_eq!(h.missed_datagrams(k), 4);
        // A sender that restarted its sequence: not a count.
        v.accepted += 1;
        v.last_sequence = 7;
        v.last_seen_ns += 20 * MS;
        h.observe(k, &v, v.last_seen_ns);
        assert_eq!(h.missed_datagrams(k), 4);
        // Counting goes on from the new sequence.
        v.accepted += 1;
        v.last_sequence = 9;
        v.last_seen_ns += 20 * MS;
        h.observe(k, &v, v.last_seen_ns);
        assert_eq!(h.missed_datagrams(k), 5);
    }
}
