//! The counter model: turns raw readings of a source counter (possibly narrower than 64
//! bits, possibly reset) into exportable `pfcControlFrameTotalCount` values with an epoch
//! that changes on every reset (seed 000 sections 6-7).
//!
//! * A narrow counter's wraps are accounted for: the exported total is 64-bit.
//! * A reset is told from a wrap: a decrease is a wrap only when the wrapped increment is
//!   within what the link could have produced since the previous reading
//!   ([`max_increments`]); otherwise it is a reset. A change of the source instance (the
//!   ifindex, the BPF map id, the driver) is always a reset. When the time since the
//!   previous reading allows a full wrap, continuity cannot be proven: a new epoch starts.
//! * A reset starts a new epoch whose total restarts at the raw value: the source counts
//!   from its own initialisation, and no full wrap fits in the gap (else it is
//!   unprovable, below).
//! * Where a narrow counter's earlier wraps are unknown (its first reading: it may have
//!   wrapped before lqd first read it; or continuity lost) the new epoch's total starts at
//!   zero at that reading: the 64-bit total lqd keeps is then the measurement source,
//!   initialised there (seed 000: "The counter starts at zero when its measurement source
//!   initializes"), where the raw value would carry an unknown number of wraps. A 64-bit
//!   counter's first reading is its raw value (it cannot have wrapped).
//! * A reading of a narrow counter whose wraps cannot be proven ([`Continuity::Unprovable`]:
//!   the link speed is unknown, or the read gap was long enough for a full wrap) is not
//!   exported as pfcControlFrameTotalCount (seed 000: "If the exporter cannot meet these
//!   requirements [account for wraps], it MUST NOT export that source as
//!   pfcControlFrameTotalCount"): [`Continuity::exportable`]. The
//!   next reading after a short enough gap continues the new epoch and is exported again.
//! * A missing reading is [`None`] and is never exported as zero.

/// Which counter instance a reading comes from: any change means a reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SourceInstance {
    /// The interface's ifindex.
    pub ifindex: u32,
    /// A source-specific identity: the BPF map id, or a hash of driver + bus address.
    pub id: u64,
}

/// One raw reading of a source counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawReading {
    /// The counter's value, `< 2^width`.
    pub value: u64,
    /// The instance it was read from.
    pub instance: SourceInstance,
    /// When it was read, CLOCK_MONOTONIC ns (for wrap plausibility).
    pub mono_ns: u64,
    /// When it was read, Unix milliseconds (observationTimeMilliseconds).
    pub unix_ms: u64,
}

/// An exportable reading: a 64-bit total within an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Total {
    /// pfcControlFrameTotalCount.
    pub value: u64,
    /// Counter epoch: equal epochs of one scoped counter mean no reset in between.
    pub epoch: u32,
    /// observationTimeMilliseconds: when the source was read.
    pub unix_ms: u64,
}

/// What one update concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continuity {
    /// The first reading: a new epoch.
    First,
    /// Same epoch, no wrap.
    Continued,
    /// Same epoch, the narrow source wrapped (once).
    Wrapped,
    /// The source reset (decrease beyond a wrap, or another instance): a new epoch.
    Reset,
    /// A narrow counter whose wraps cannot be accounted for: too long since the last
    /// reading to exclude a full wrap, or the link speed is unknown (then no reading of it,
    /// the first included, can be proven). A new epoch; the reading is not exportable.
    Unprovable,
}

impl Continuity {
    /// Whether the reading may be exported as pfcControlFrameTotalCount (seed 000: not when
    /// the wraps of a narrow source cannot be accounted for).
    pub fn exportable(self) -> bool {
        !matches!(self, Self::Unprovable)
    }
}

/// The most increments one PFC priority counter can gain in `elapsed_ns` on a link of
/// `speed_mbps`: one per minimum-size frame (64 octets + 20 of preamble and gap = 672
/// bits). `None` when the speed is unknown.
pub fn max_increments(speed_mbps: u32, elapsed_ns: u64) -> Option<u64> {
    if speed_mbps == 0 {
        return None;
    }
    // frames = elapsed_ns * speed_mbps * 1e6 / 1e9 / 672
    let n = u128::from(elapsed_ns) * u128::from(speed_mbps) / 1000 / 672 + 1;
    Some(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Tracks one scoped source counter.
#[derive(Clone, Debug)]
pub struct CounterTracker {
    width_bits: u32,
    speed_mbps: u32,
    epoch: u32,
    last: Option<(RawReading, u64)>,
}

impl CounterTracker {
    /// A tracker for a source `width_bits` wide (1..=64) on a link of `speed_mbps` (0:
    /// unknown; then a narrow counter's decrease is a reset and continuity over any gap
    /// longer than nothing cannot be proven for narrow counters). `first_epoch` is the
    /// epoch of the first reading: choose it so that it differs from epochs exported
    /// before (the daemon persists it, or derives it from the source instance).
    pub fn new(width_bits: u32, speed_mbps: u32, first_epoch: u32) -> Self {
        assert!((1..=64).contains(&width_bits), "counter width 1..=64");
        Self {
            width_bits,
            speed_mbps,
            epoch: first_epoch.wrapping_sub(1),
            last: None,
        }
    }

    fn modulus_mask(&self) -> u64 {
        if self.width_bits == 64 {
            u64::MAX
        } else {
            (1u64 << self.width_bits) - 1
        }
    }

    /// The current epoch (meaningful after the first update).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The last exported total.
    pub fn last(&self) -> Option<Total> {
        self.last.map(|(r, v)| Total {
            value: v,
            epoch: self.epoch,
            unix_ms: r.unix_ms,
        })
    }

    /// Feeds one reading; returns the exportable total and what was concluded. A missing
    /// reading is simply not fed: the next one is judged against the last one seen.
    pub fn update(&mut self, raw: RawReading) -> (Total, Continuity) {
        let mask = self.modulus_mask();
        let value = raw.value & mask;
        let narrow = self.width_bits < 64;
        let (total, how) = match self.last {
            // Unknown speed: the wraps of a narrow counter are never provable.
            None if narrow && self.speed_mbps == 0 => (0, Continuity::Unprovable),
            None if narrow => (0, Continuity::First),
            None => (value, Continuity::First),
            Some((prev, total)) => {
                let delta = value.wrapping_sub(prev.value) & mask;
                let elapsed = raw.mono_ns.saturating_sub(prev.mono_ns);
                let bound = max_increments(self.speed_mbps, elapsed);
                let wrapped = value < prev.value;
                let full_wrap_possible = match bound {
                    Some(b) => self.width_bits < 64 && b > mask,
                    // Unknown speed: a 64-bit counter cannot wrap in practice; a narrow
                    // one could have wrapped any number of times.
                    None => self.width_bits < 64,
                };
                // Checked first: a narrow counter of a new instance can also have wrapped
                // since it started, if the gap allows a full wrap.
                if full_wrap_possible {
                    (0, Continuity::Unprovable)
                } else if prev.instance != raw.instance {
                    (value, Continuity::Reset)
                } else if wrapped && self.width_bits == 64 {
                    // 2^64 increments between two readings are impossible: a reset.
                    (value, Continuity::Reset)
                } else if wrapped && bound.is_some_and(|b| delta > b) {
                    (value, Continuity::Reset)
                } else if wrapped {
                    (total.wrapping_add(delta), Continuity::Wrapped)
                } else {
                    (total.wrapping_add(delta), Continuity::Continued)
                }
            }
        };
        if matches!(
            how,
            Continuity::First | Continuity::Reset | Continuity::Unprovable
        ) {
            self.epoch = self.epoch.wrapping_add(1);
        }
        self.last = Some((RawReading { value, ..raw }, total));
        (
            Total {
                value: total,
                epoch: self.epoch,
                unix_ms: raw.unix_ms,
            },
            how,
        )
    }
}

/// The epoch a daemon started at `unix_ms` (wall clock, milliseconds) gives its counters'
/// first readings. Epochs must differ from every one exported before the start; a run
/// adds one per reset it sees, at most one per reading, and readings are at least 1 ms
/// apart, so a run's epochs stay below the milliseconds that have passed since it began,
/// and the next start's epoch lies beyond them. The low 32 bits repeat after 49.7 days,
/// far beyond any reading a collector compares with. (Whole seconds repeated for a
/// restart within the second.)
pub fn first_epoch_at(unix_ms: u64) -> u32 {
    // Truncation on purpose: the low 32 bits.
    unix_ms as u32
}

/// The epoch of a counter that starts anew (at zero) at `unix_ms`: [`first_epoch_at`],
/// one more where that is the epoch the counter had before (two starts in one
/// millisecond), so a collector never takes the new counter for the old one.
pub fn new_epoch(unix_ms: u64, previous: Option<u32>) -> u32 {
    let e = first_epoch_at(unix_ms);
    if previous == Some(e) {
        e.wrapping_add(1)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_started_anew_never_keeps_its_epoch() {
        let t = 1_764_669_600_123;
        assert_eq!(new_epoch(t, None), first_epoch_at(t));
        assert_eq!(new_epoch(t, Some(7)), first_epoch_at(t));
        assert_eq!(new_epoch(t, Some(first_epoch_at(t))), first_epoch_at(t) + 1);
    }

    /// Two starts differ even within one second, and a run's epochs (one more per reset,
    /// at most one per 1 ms reading) never reach the next start's.
    #[test]
    fn no_start_reuses_an_epoch_of_the_run_before() {
        let start = 1_764_669_600_123; // 2025-12-02T10:00:00.123Z
        let restart = start + 300;
        assert_ne!(first_epoch_at(start), first_epoch_at(restart));
        // The most resets a run of 300 ms can see: one per 1 ms reading.
        let last_of_run = first_epoch_at(start).wrapping_add(299);
        assert!(last_of_run < first_epoch_at(restart));
        // Across the 32-bit wrap the next start is still one step on.
        let at_wrap = u64::from(u32::MAX) + (1 << 32) * 411;
        assert_eq!(
            first_epoch_at(at_wrap).wrapping_add(1),
            first_epoch_at(at_wrap + 1)
        );
    }

    fn raw(value: u64, ms: u64, ifindex: u32) -> RawReading {
        RawReading {
            value,
            instance: SourceInstance { ifindex, id: 7 },
            mono_ns: ms * 1_000_000,
            unix_ms: 1_700_000_000_000 + ms,
        }
    }

    #[test]
    fn a_narrow_counter_wraps_within_one_epoch() {
        // 16-bit counter at 1 Gb/s: ~1488 frames/ms; polled every 10 ms (< 2^16 frames).
        // Its first reading starts the total at zero: it may have wrapped before.
        let mut t = CounterTracker::new(16, 1000, 5);
        assert_eq!(
            t.update(raw(65_000, 0, 3)),
            (
                Total {
                    value: 0,
                    epoch: 5,
                    unix_ms: 1_700_000_000_000
                },
                Continuity::First
            )
        );
        let (tot, how) = t.update(raw(100, 10, 3));
        assert_eq!(how, Continuity::Wrapped);
        assert_eq!(tot.value, 636);
        assert_eq!(tot.epoch, 5);
        let (tot, how) = t.update(raw(200, 20, 3));
        assert_eq!((tot.value, how), (736, Continuity::Continued));
    }

    #[test]
    fn a_decrease_beyond_a_wrap_is_a_reset() {
        // 32-bit at 1 Gb/s, 1 ms apart: at most ~1489 increments; 1000 -> 10 would need
        // 2^32 - 990.
        let mut t = CounterTracker::new(32, 1000, 0);
        t.update(raw(1000, 0, 3));
        let (tot, how) = t.update(raw(10, 1, 3));
        assert_eq!((tot.value, tot.epoch, how), (10, 1, Continuity::Reset));
        // An ifindex change is a reset even when the value grew.
        let (tot, how) = t.update(raw(20, 2, 4));
        assert_eq!((tot.value, tot.epoch, how), (20, 2, Continuity::Reset));
        // A 64-bit decrease is always a reset.
        let mut t = CounterTracker::new(64, 0, 0);
        t.update(raw(5, 0, 3));
        assert_eq!(t.update(raw(4, 1, 3)).1, Continuity::Reset);
        assert_eq!(
            t.update(raw(9, 1_000_000, 3)).0,
            Total {
                value: 9,
                epoch: 1,
                unix_ms: 1_700_000_000_000 + 1_000_000
            }
        );
    }

    #[test]
    fn a_gap_long_enough_for_a_full_wrap_breaks_continuity() {
        // 16-bit at 100 Gb/s: 2^16 frames take ~0.44 ms.
        let mut t = CounterTracker::new(16, 100_000, 0);
        t.update(raw(10, 0, 3));
        assert_eq!(t.update(raw(20, 1, 3)).1, Continuity::Unprovable);
        assert_eq!(t.epoch(), 1);
        // Unknown speed: a narrow counter never proves continuity.
        let mut t = CounterTracker::new(32, 0, 0);
        t.update(raw(10, 0, 3));
        assert_eq!(t.update(raw(20, 1, 3)).1, Continuity::Unprovable);
    }

    /// Issue 14 item 4, in virtual time: a 16-bit counter on a 1 Gb/s link (at most
    /// 1 488 096 PFC frames/s: 2^16 of them take 44 ms) read every 10 ms is exported, wraps
    /// included; a 50 ms gap could hide a full wrap, so that reading is withheld and a new
    /// epoch starts; the next reading 10 ms later is exported again, in the new epoch.
    #[test]
    fn narrow_counter_readings_whose_wraps_are_unprovable_are_not_exported() {
        let mut t = CounterTracker::new(16, 1000, 1);
        let mut feed = |value, ms| {
            let (total, how) = t.update(raw(value, ms, 3));
            (how.exportable().then_some((total.value, total.epoch)), how)
        };
        assert_eq!(feed(60_000, 0), (Some((0, 1)), Continuity::First));
        assert_eq!(feed(65_000, 10), (Some((5_000, 1)), Continuity::Continued));
        // 65 000 -> 500 in 10 ms: a wrap (+1 036 <= 14 881 possible increments).
        assert_eq!(feed(500, 20), (Some((6_036, 1)), Continuity::Wrapped));
        // 45 ms allow 66 965 > 2^16 - 1 increments: the wrap count is unknown; the new
        // epoch counts from zero at this reading, which is withheld.
        assert_eq!(feed(900, 65), (None, Continuity::Unprovable));
        assert_eq!(feed(1_000, 75), (Some((100, 2)), Continuity::Continued));
        // 44 ms allow 65 477 increments: no full wrap, continuity is proven.
        assert_eq!(feed(1_100, 119), (Some((200, 2)), Continuity::Continued));
        // Another instance (the NIC replaced) after a long gap: it may have wrapped since
        // it started, so not a provable reset; after a short one it is.
        let mut t = CounterTracker::new(16, 1000, 1);
        t.update(raw(10, 0, 3));
        assert_eq!(t.update(raw(20, 100, 4)).1, Continuity::Unprovable);
        // A provable reset: the new instance counted 30 since it started.
        assert_eq!(
            t.update(raw(30, 110, 5)),
            (
                Total {
                    value: 30,
                    epoch: 3,
                    unix_ms: 1_700_000_000_110
                },
                Continuity::Reset
            )
        );
        // Unknown speed: no reading of a narrow counter is exported, the first included;
        // a 64-bit counter needs no speed.
        let mut t = CounterTracker::new(32, 0, 0);
        for ms in [0, 1, 2] {
            assert!(!t.update(raw(10 + ms, ms, 3)).1.exportable());
        }
        let mut t = CounterTracker::new(64, 0, 0);
        assert!(t.update(raw(10, 0, 3)).1.exportable());
        assert!(t.update(raw(11, 1_000_000, 3)).1.exportable());
    }
}
