//! The sender side of the helper role: when to advertise (seed 003 section 7.2) and what
//! datagrams to send (`spec/lq-udp-wire.md`).
//!
//! * Periodic: every T_notify, each period drawn uniformly from [0.9, 1.1] x T_notify by an
//!   injected random number generator, so that helpers desynchronise (7.2, 6.4) and tests
//!   are reproducible with a seeded one.
//! * Triggered: in the same sample in which any link's advertised LQS moved by more than
//!   CHANGE_THRESHOLD from the LQS last sent for it, or its advertised CL changed (7.2:
//!   "within one sampling interval"); a triggered send restarts the periodic timer.
//! * Every advertisement carries every monitored link's entries, one per (link, remote
//!   node), split over as many datagrams as needed, at most min(91, what the MTU allows)
//!   entries each, every datagram with its own sequence number (wire spec). The same
//!   datagrams go out of every link, so the MTU that bounds them is the smallest real MTU
//!   of the links ([`PathMtu`]); the I/O shell updates it when a link's MTU changes.
//!
//! Time is an input (`now_ns`, nanoseconds since boot on a monotonic clock such as
//! CLOCK_BOOTTIME, which also gives the wire timestamp); nothing here does I/O.

use std::collections::HashMap;

use lq_common::wire::{self, EncodeError, Entry, Header, Mode};
use rand::{Rng, RngCore};
use thiserror::Error;

use super::notification::ThresholdCrossed;
use super::params::{HelperParams, ParamsError};
use super::pipeline::LinkReport;

/// UDP header length.
const UDP_HEADER_LEN: u32 = 8;
/// IPv4 header without options (the sender sets none).
const IPV4_HEADER_LEN: u32 = 20;
/// IPv6 fixed header (the sender adds no extension headers).
const IPV6_HEADER_LEN: u32 = 40;

/// The far end of a link. A shared medium lists several (the YANG list is keyed by
/// remote AS, remote node and link id, section 5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteNode {
    /// Remote Router-ID (host-order integer).
    pub node_id: u32,
    /// Remote AS; must be 0 unless the helper is AS-qualified.
    pub node_as: u32,
}

/// A monitored egress link and the remote nodes behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitoredLink {
    /// The local ifIndex (wire Link ID); matches [`LinkReport::link_id`].
    pub link_id: u32,
    /// Remote nodes reached over this link; at least one.
    pub remotes: Vec<RemoteNode>,
}

/// Who this helper is, and the fabric-wide flags it advertises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Local Router-ID (host-order integer).
    pub node_id: u32,
    /// `Some(local AS)` for AS-qualified operation (Q = 1; section 10 requires every spine
    /// of a fabric to agree), `None` for unqualified operation.
    pub node_as: Option<u32>,
    /// P flag: this is a PFC (lossless) fabric.
    pub pfc_fabric: bool,
}

/// The path the datagrams take, which bounds how many entries fit in one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathMtu {
    /// The smallest MTU of the links the datagrams go out of (the same datagrams go out of
    /// every link, wire spec), so that no datagram exceeds any link's MTU: a larger one
    /// would be fragmented, and receivers pass fragments by as not theirs.
    pub mtu: u32,
    /// IPv6 (40-octet header) rather than IPv4 (20).
    pub ipv6: bool,
    /// Octets every datagram keeps for its authentication trailer (0 without one; issue
    /// 39, `lq_common::auth`).
    pub trailer: u32,
}

impl Default for PathMtu {
    fn default() -> Self {
        Self {
            mtu: 1500,
            ipv6: false,
            trailer: 0,
        }
    }
}

impl PathMtu {
    /// The path MTU of datagrams sent out of links with these MTUs: the smallest of them
    /// and of `cap` (a configured upper bound), 1500 when there is neither.
    pub fn smallest(
        link_mtus: impl IntoIterator<Item = u32>,
        cap: Option<u32>,
        ipv6: bool,
    ) -> Self {
        let mtu = link_mtus.into_iter().chain(cap).min().unwrap_or(1500);
        Self {
            mtu,
            ipv6,
            trailer: 0,
        }
    }

    /// The same path with room kept for a trailer of `octets` in every datagram.
    pub fn with_trailer(self, octets: u32) -> Self {
        Self {
            trailer: octets,
            ..self
        }
    }

    /// How many entries fit in one datagram: min(91, (mtu - IP - UDP - header) /
    /// entry_len); 0 when not even one fits.
    pub fn entries_per_datagram(&self, as_qualified: bool, diagnostics: bool) -> usize {
        let ip = if self.ipv6 {
            IPV6_HEADER_LEN
        } else {
            IPV4_HEADER_LEN
        };
        let room = self
            .mtu
            .saturating_sub(ip + UDP_HEADER_LEN)
            .saturating_sub(wire::header_len(as_qualified) as u32)
            .saturating_sub(self.trailer);
        let fit = room as usize / wire::entry_len(as_qualified, diagnostics);
        fit.min(wire::MAX_ENTRIES)
    }
}

/// Why an advertiser could not be built.
#[derive(Debug, Error, PartialEq)]
pub enum AdvertiserError {
    /// A parameter is out of its range.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// Two monitored links share an ifIndex: their entries would collide.
    #[error("link {0} is listed twice")]
    DuplicateLink(u32),
    /// A monitored link without a remote node has no entry to advertise.
    #[error("link {0} has no remote node")]
    NoRemote(u32),
    /// The same (link, remote AS, remote node) twice: the YANG list key would repeat.
    #[error("link {link_id} lists remote node {remote_node_id} (AS {remote_as}) twice")]
    DuplicateRemote {
        /// The link.
        link_id: u32,
        /// The remote Router-ID.
        remote_node_id: u32,
        /// The remote AS.
        remote_as: u32,
    },
    /// A remote AS is set while the helper is not AS-qualified (wire spec: Remote AS
    /// exists only when Q = 1).
    #[error("link {link_id} has remote AS {remote_as} but the helper is not AS-qualified")]
    RemoteAsUnqualified {
        /// The link.
        link_id: u32,
        /// The refused AS.
        remote_as: u32,
    },
    /// Not even one entry fits in a datagram of this MTU.
    #[error("MTU {mtu} leaves no room for one {entry_len}-octet entry")]
    MtuTooSmall {
        /// The refused MTU.
        mtu: u32,
        /// The entry length the flags require.
        entry_len: usize,
    },
}

/// One advertisement to send now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Periodic or triggered.
    pub mode: Mode,
    /// The UDP payloads, in order; each goes out of every link. Sequence numbers are
    /// consecutive (mod 2^16), starting at `first_sequence`.
    pub datagrams: Vec<Vec<u8>>,
    /// Sequence number of the first datagram.
    pub first_sequence: u16,
}

struct Slot {
    link: MonitoredLink,
    report: Option<LinkReport>,
    /// LQS_last_sent and the CL last sent (7.2), `None` before the first send.
    sent: Option<(u8, u8)>,
}

/// Counters for `lqd show` and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdvertiserStats {
    /// Periodic advertisements sent.
    pub periodic: u64,
    /// Triggered advertisements sent.
    pub triggered: u64,
    /// Datagrams built.
    pub datagrams: u64,
    /// Reports for a link that is not monitored (ignored).
    pub unknown_reports: u64,
    /// Datagrams the codec refused (unreachable with a validated configuration; the
    /// datagram is dropped rather than the process aborted).
    pub encode_errors: u64,
}

/// The helper's advertisement scheduler and datagram builder. `R` supplies the jitter: a
/// seeded [`rand::rngs::SmallRng`] in the daemon and in tests.
pub struct Advertiser<R> {
    params: HelperParams,
    identity: Identity,
    slots: Vec<Slot>,
    index: HashMap<u32, usize>,
    rng: R,
    path: PathMtu,
    per_datagram: usize,
    next_sequence: u16,
    last_sequence: Option<u16>,
    next_due_ns: Option<u64>,
    events: Vec<ThresholdCrossed>,
    stats: AdvertiserStats,
    last_encode_error: Option<EncodeError>,
}

impl<R: RngCore> Advertiser<R> {
    /// An advertiser for `links`, which starts its sequence numbers at `first_sequence`
    /// (the wire spec asks for a random start; the caller draws it).
    pub fn new(
        params: HelperParams,
        identity: Identity,
        links: Vec<MonitoredLink>,
        path: PathMtu,
        first_sequence: u16,
        rng: R,
    ) -> Result<Self, AdvertiserError> {
        params.validate()?;
        let q = identity.node_as.is_some();
        let per_datagram = path.entries_per_datagram(q, params.diagnostics);
        if per_datagram == 0 {
            return Err(AdvertiserError::MtuTooSmall {
                mtu: path.mtu,
                entry_len: wire::entry_len(q, params.diagnostics),
            });
        }
        let mut index = HashMap::with_capacity(links.len());
        let mut slots = Vec::with_capacity(links.len());
        for link in links {
            if index.insert(link.link_id, slots.len()).is_some() {
                return Err(AdvertiserError::DuplicateLink(link.link_id));
            }
            if link.remotes.is_empty() {
                return Err(AdvertiserError::NoRemote(link.link_id));
            }
            for (i, r) in link.remotes.iter().enumerate() {
                if !q && r.node_as != 0 {
                    return Err(AdvertiserError::RemoteAsUnqualified {
                        link_id: link.link_id,
                        remote_as: r.node_as,
                    });
                }
                if link.remotes[..i].contains(r) {
                    return Err(AdvertiserError::DuplicateRemote {
                        link_id: link.link_id,
                        remote_node_id: r.node_id,
                        remote_as: r.node_as,
                    });
                }
            }
            slots.push(Slot {
                link,
                report: None,
                sent: None,
            });
        }
        Ok(Self {
            params,
            identity,
            slots,
            index,
            rng,
            path,
            per_datagram,
            next_sequence: first_sequence,
            last_sequence: None,
            next_due_ns: None,
            events: Vec::new(),
            stats: AdvertiserStats::default(),
            last_encode_error: None,
        })
    }

    /// Takes the latest reports (any subset of the monitored links; a link keeps its last
    /// report until a new one arrives) and returns the advertisement to send now, if any.
    ///
    /// Nothing is sent until every monitored link has reported once: the pipeline reports
    /// a link from its second sample (or at once when it is down), so this delays the
    /// first advertisement by one T_sample and never advertises a value that was not
    /// measured. That first advertisement is periodic and starts the timer.
    pub fn on_sample(&mut self, now_ns: u64, reports: &[LinkReport]) -> Option<Outgoing> {
        for r in reports {
            let Some(&i) = self.index.get(&r.link_id) else {
                self.stats.unknown_reports += 1;
                continue;
            };
            let slot = &mut self.slots[i];
            if let Some(prev) = slot.report
                && prev.cl != r.cl
            {
                for remote in &slot.link.remotes {
                    self.events.push(ThresholdCrossed {
                        node_id: self.identity.node_id,
                        node_as: self.identity.node_as.unwrap_or(0),
                        remote_as: remote.node_as,
                        remote_node_id: remote.node_id,
                        link_id: r.link_id,
                        old_cl: prev.cl,
                        new_cl: r.cl,
                        lqs: r.lqs,
                        t_ns: now_ns,
                    });
                }
            }
            slot.report = Some(*r);
        }
        if self.slots.iter().any(|s| s.report.is_none()) {
            return None;
        }
        let threshold = self.params.change_threshold;
        let changed = self.slots.iter().any(|s| match (s.report, s.sent) {
            (Some(r), Some((lqs, cl))) => r.lqs.abs_diff(lqs) > threshold || r.cl != cl,
            _ => false,
        });
        let mode = match self.next_due_ns {
            None => Mode::Periodic,
            Some(_) if changed => Mode::Triggered,
            Some(due) if now_ns >= due => Mode::Periodic,
            Some(_) => return None,
        };
        Some(self.send(now_ns, mode))
    }

    /// Nanoseconds from `now_ns` until the next periodic advertisement is due (0 when
    /// overdue); `None` before the first advertisement. The I/O shell wakes up at the
    /// earlier of this and the next sample, and calls [`Self::on_sample`] (with no new
    /// reports if no sample was taken).
    pub fn next_due(&self, now_ns: u64) -> Option<u64> {
        self.next_due_ns.map(|due| due.saturating_sub(now_ns))
    }

    /// Absolute time the next periodic advertisement is due.
    pub fn next_due_at(&self) -> Option<u64> {
        self.next_due_ns
    }

    /// Takes the `lq-threshold-crossed` events raised since the last call, in order.
    pub fn take_notifications(&mut self) -> Vec<ThresholdCrossed> {
        std::mem::take(&mut self.events)
    }

    /// Sequence number of the last datagram built (YANG `last-sequence-number`).
    pub fn last_sequence(&self) -> Option<u16> {
        self.last_sequence
    }

    /// LQS_last_sent of a link (7.2), `None` for an unknown link or before the first send.
    pub fn lqs_last_sent(&self, link_id: u32) -> Option<u8> {
        let i = *self.index.get(&link_id)?;
        self.slots[i].sent.map(|(lqs, _)| lqs)
    }

    /// How many entries go in one datagram.
    pub fn entries_per_datagram(&self) -> usize {
        self.per_datagram
    }

    /// The path MTU the datagrams are split for.
    pub fn path_mtu(&self) -> PathMtu {
        self.path
    }

    /// A link's MTU changed (or a link was measured for the first time): split the next
    /// advertisements for `path`. An MTU too small for one entry is refused and the
    /// previous one kept. Returns whether the split changed.
    pub fn set_path_mtu(&mut self, path: PathMtu) -> Result<bool, AdvertiserError> {
        let q = self.identity.node_as.is_some();
        let per_datagram = path.entries_per_datagram(q, self.params.diagnostics);
        if per_datagram == 0 {
            return Err(AdvertiserError::MtuTooSmall {
                mtu: path.mtu,
                entry_len: wire::entry_len(q, self.params.diagnostics),
            });
        }
        let changed = per_datagram != self.per_datagram;
        self.path = path;
        self.per_datagram = per_datagram;
        Ok(changed)
    }

    /// Counters.
    pub fn stats(&self) -> AdvertiserStats {
        self.stats
    }

    /// The last error of the codec, if it ever refused a datagram.
    pub fn last_encode_error(&self) -> Option<EncodeError> {
        self.last_encode_error
    }

    /// The current entries, one per (link, remote), in configuration order (for `lqd show
    /// local`); links that have not reported yet are left out.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for slot in &self.slots {
            let Some(r) = &slot.report else { continue };
            let diagnostics = self.params.diagnostics.then(|| r.diagnostics());
            for remote in &slot.link.remotes {
                out.push(Entry {
                    remote_as: remote.node_as,
                    remote_node_id: remote.node_id,
                    link_id: slot.link.link_id,
                    available_bandwidth: r.available_bandwidth.to_f32(),
                    lqs: r.lqs,
                    cl: r.cl.min(7),
                    diagnostics,
                });
            }
        }
        out
    }

    /// New parameters (a reload): T_notify takes effect from the next periodic
    /// advertisement (the one already scheduled keeps its time, at most 1.1 x the old
    /// T_notify away), CHANGE_THRESHOLD from the next report, the diagnostics flag from the
    /// next datagram. Refused, changing nothing, when the parameters are out of range or
    /// no entry would fit the path MTU.
    pub fn set_params(&mut self, params: HelperParams) -> Result<(), AdvertiserError> {
        self.per_datagram = self.check_params(&params)?;
        self.params = params;
        Ok(())
    }

    /// Whether [`Advertiser::set_params`] would accept `params`: the entries per datagram
    /// they give.
    pub fn check_params(&self, params: &HelperParams) -> Result<usize, AdvertiserError> {
        params.validate()?;
        let q = self.identity.node_as.is_some();
        let per_datagram = self.path.entries_per_datagram(q, params.diagnostics);
        if per_datagram == 0 {
            return Err(AdvertiserError::MtuTooSmall {
                mtu: self.path.mtu,
                entry_len: wire::entry_len(q, params.diagnostics),
            });
        }
        Ok(per_datagram)
    }

    /// The parameters in force.
    pub fn params(&self) -> &HelperParams {
        &self.params
    }

    /// One period drawn uniformly from [0.9, 1.1] x T_notify (7.2), in whole nanoseconds.
    fn jittered_period(&mut self) -> u64 {
        let t = self.params.t_notify_ns();
        self.rng.random_range(t / 10 * 9..=t / 10 * 11)
    }

    fn send(&mut self, now_ns: u64, mode: Mode) -> Outgoing {
        let entries = self.entries();
        let header = Header {
            as_qualified: self.identity.node_as.is_some(),
            diagnostics: self.params.diagnostics,
            pfc_fabric: self.identity.pfc_fabric,
            mode,
            sequence: 0,
            node_id: self.identity.node_id,
            // Wire spec: milliseconds since boot modulo 2^32; the `as` cast is that modulo.
            timestamp_ms: (now_ns / 1_000_000) as u32,
            node_as: self.identity.node_as.unwrap_or(0),
        };
        let first_sequence = self.next_sequence;
        let mut datagrams = Vec::new();
        // An empty advertisement is still one (heartbeat) datagram: entry count 0 is legal.
        let chunks: Vec<&[Entry]> = if entries.is_empty() {
            vec![&[]]
        } else {
            entries.chunks(self.per_datagram).collect()
        };
        for chunk in chunks {
            let header = Header {
                sequence: self.next_sequence,
                ..header
            };
            let mut buf = vec![0u8; wire::encoded_len(&header, chunk.len())];
            match wire::encode(&header, chunk, &mut buf) {
                Ok(len) => {
                    buf.truncate(len);
                    datagrams.push(buf);
                }
                Err(e) => {
                    self.stats.encode_errors += 1;
                    self.last_encode_error = Some(e);
                }
            }
            // Every datagram built gets its own number, wrapping 65535 -> 0.
            self.last_sequence = Some(self.next_sequence);
            self.next_sequence = self.next_sequence.wrapping_add(1);
            self.stats.datagrams += 1;
        }
        for slot in &mut self.slots {
            slot.sent = slot.report.map(|r| (r.lqs, r.cl));
        }
        match mode {
            Mode::Periodic => self.stats.periodic += 1,
            Mode::Triggered => self.stats.triggered += 1,
        }
        // 7.2: the periodic timer (re)starts at every send, triggered ones included.
        self.next_due_ns = Some(now_ns.saturating_add(self.jittered_period()));
        Outgoing {
            mode,
            datagrams,
            first_sequence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::helper::pipeline::{Band, Metrics, RawMetrics};
    use lq_common::wire::{Decimal64Milli, DecodePolicy, decode};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const MS: u64 = 1_000_000;

    fn report(link_id: u32, lqs: u8, cl: u8) -> LinkReport {
        LinkReport {
            link_id,
            t_ns: 0,
            oper_up: true,
            raw: RawMetrics::default(),
            smooth: Metrics {
                u: 0.55,
                e: 0.15,
                f: 0.0,
                d: 0.30,
            },
            lqs,
            computed_cl: cl,
            cl,
            band: Band::of(cl),
            hold_down_since_ns: None,
            capacity: Decimal64Milli(400_000),
            available_bandwidth: Decimal64Milli(180_000),
        }
    }

    fn links(n: u32) -> Vec<MonitoredLink> {
        (1..=n)
            .map(|i| MonitoredLink {
                link_id: i,
                remotes: vec![RemoteNode {
                    node_id: 0x0a00_0100 + i,
                    node_as: 0,
                }],
            })
            .collect()
    }

    fn identity() -> Identity {
        Identity {
            node_id: 0x0a00_0002,
            node_as: None,
            pfc_fabric: false,
        }
    }

    fn adv(n: u32, seq: u16, seed: u64) -> Advertiser<SmallRng> {
        Advertiser::new(
            HelperParams::default(),
            identity(),
            links(n),
            PathMtu::default(),
            seq,
            SmallRng::seed_from_u64(seed),
        )
        .unwrap()
    }

    fn all(n: u32, lqs: u8, cl: u8) -> Vec<LinkReport> {
        (1..=n).map(|i| report(i, lqs, cl)).collect()
    }

    fn decoded(out: &Outgoing) -> Vec<(Header, Vec<Entry>)> {
        out.datagrams
            .iter()
            .map(|d| {
                let a = decode(d, &DecodePolicy::ANY).unwrap();
                (a.header, a.entries().collect())
            })
            .collect()
    }

    #[test]
    fn first_advertisement_waits_for_every_link() {
        let mut a = adv(2, 100, 1);
        assert_eq!(a.on_sample(0, &[report(1, 200, 0)]), None);
        assert_eq!(a.next_due(0), None);
        let out = a.on_sample(2 * MS, &[report(2, 210, 0)]).unwrap();
        assert_eq!(out.mode, Mode::Periodic);
        assert_eq!(out.first_sequence, 100);
        let d = decoded(&out);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].1.len(), 2);
        assert_eq!(a.lqs_last_sent(1), Some(200));
        assert_eq!(a.lqs_last_sent(2), Some(210));
        let due = a.next_due_at().unwrap();
        assert!((2 * MS + 18 * MS..=2 * MS + 22 * MS).contains(&due));
    }

    #[test]
    fn jitter_stays_in_bounds_and_averages_t_notify() {
        let mut a = adv(4, 0, 42);
        let steady = all(4, 237, 0);
        let mut now = 0;
        a.on_sample(now, &steady).unwrap();
        let periods = 20_000u64;
        let (mut min, mut max, mut sum) = (u64::MAX, 0, 0);
        for _ in 0..periods {
            let due = a.next_due_at().unwrap();
            // Nothing before the due time...
            assert_eq!(a.on_sample(due - 1, &steady), None);
            // ...and a periodic send exactly at it.
            let out = a.on_sample(due, &steady).unwrap();
            assert_eq!(out.mode, Mode::Periodic);
            let period = due - now;
            (min, max, sum) = (min.min(period), max.max(period), sum + period);
            now = due;
        }
        assert!(min >= 18 * MS && max <= 22 * MS, "{min} {max}");
        // The draw really spreads over the window.
        assert!(
            min < 18 * MS + MS / 10 && max > 22 * MS - MS / 10,
            "{min} {max}"
        );
        let mean = sum as f64 / periods as f64;
        assert!((mean - 20.0e6).abs() < 0.05e6, "mean period {mean} ns");
        assert_eq!(a.stats().periodic, periods + 1);
        assert_eq!(a.stats().triggered, 0);
    }

    #[test]
    fn same_seed_same_schedule() {
        let run = |seed| {
            let mut a = adv(1, 0, seed);
            let mut dues = Vec::new();
            a.on_sample(0, &all(1, 237, 0));
            for _ in 0..50 {
                let due = a.next_due_at().unwrap();
                a.on_sample(due, &[]);
                dues.push(due);
            }
            dues
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn triggered_within_one_sample_and_restarts_the_timer() {
        let mut a = adv(3, 0, 3);
        a.on_sample(0, &all(3, 237, 0)).unwrap();
        let mut now = 0;
        // Samples every 2 ms: an LQS move of exactly CHANGE_THRESHOLD (25) does not
        // trigger; the periodic send still comes at its due time.
        let due = a.next_due_at().unwrap();
        let mut reports = all(3, 237, 0);
        reports[1].lqs = 212;
        while now + 2 * MS < due {
            now += 2 * MS;
            assert_eq!(a.on_sample(now, &reports), None, "at {now}");
        }
        // The change is below the threshold, so the periodic send carries it.
        let out = a.on_sample(due, &reports).unwrap();
        assert_eq!(out.mode, Mode::Periodic);
        assert_eq!(a.lqs_last_sent(2), Some(212));
        now = due;
        // B.2: LQS 237 -> 72 on one link: triggered in the very sample of the crossing.
        now += 2 * MS;
        reports[0].lqs = 72;
        let out = a.on_sample(now, &reports).unwrap();
        assert_eq!(out.mode, Mode::Triggered);
        let d = decoded(&out);
        assert_eq!(d[0].0.mode, Mode::Triggered);
        assert_eq!(
            d[0].1.len(),
            3,
            "a triggered advertisement carries every link"
        );
        assert_eq!(d[0].1[0].lqs, 72);
        // The periodic timer restarted from the triggered send.
        let due = a.next_due_at().unwrap();
        assert!((now + 18 * MS..=now + 22 * MS).contains(&due));
        // LQS_last_sent is now 72: a drift of 26 triggers again, of 25 does not.
        now += 2 * MS;
        reports[0].lqs = 97;
        assert_eq!(a.on_sample(now, &reports), None);
        now += 2 * MS;
        reports[0].lqs = 98;
        assert_eq!(a.on_sample(now, &reports).unwrap().mode, Mode::Triggered);
        // A CL change triggers whatever the LQS does.
        now += 2 * MS;
        reports[2].cl = 1;
        assert_eq!(a.on_sample(now, &reports).unwrap().mode, Mode::Triggered);
        // A report for only one link keeps the others' last reports.
        now += 2 * MS;
        assert_eq!(
            a.on_sample(now, &[report(3, 237, 3)]).unwrap().mode,
            Mode::Triggered
        );
        let out = a.on_sample(a.next_due_at().unwrap(), &[]).unwrap();
        let d = decoded(&out);
        let lqs: Vec<u8> = d[0].1.iter().map(|e| e.lqs).collect();
        assert_eq!(lqs, vec![98, 212, 237]);
    }

    #[test]
    fn two_hundred_links_split_into_three_datagrams() {
        let mut a = adv(200, 1000, 5);
        assert_eq!(a.entries_per_datagram(), 91);
        let out = a.on_sample(5 * MS, &all(200, 237, 0)).unwrap();
        assert_eq!(out.datagrams.len(), 3);
        let d = decoded(&out);
        let counts: Vec<usize> = d.iter().map(|(_, e)| e.len()).collect();
        assert_eq!(counts, vec![91, 91, 18]);
        let seqs: Vec<u16> = d.iter().map(|(h, _)| h.sequence).collect();
        assert_eq!(seqs, vec![1000, 1001, 1002]);
        let mut ids: Vec<u32> = d
            .iter()
            .flat_map(|(_, e)| e.iter().map(|e| e.link_id))
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=200).collect::<Vec<_>>());
        for d in &out.datagrams {
            // Each fits a 1500-octet IPv4 MTU.
            assert!(d.len() + 28 <= 1500);
        }
        assert_eq!(a.last_sequence(), Some(1002));
        // The next advertisement continues the numbering.
        let out = a.on_sample(a.next_due_at().unwrap(), &[]).unwrap();
        assert_eq!(out.first_sequence, 1003);
    }

    /// The same datagrams go out of every link, so they are split for the smallest real
    /// MTU of the links; a link MTU change re-splits the next advertisement.
    #[test]
    fn links_with_different_mtus_split_for_the_smallest() {
        let p = PathMtu::smallest([1500, 576, 9000], None, false);
        assert_eq!(p.mtu, 576);
        // (576 - 20 - 8 - 16) / 16 = 33.
        assert_eq!(p.entries_per_datagram(false, false), 33);
        assert_eq!(PathMtu::smallest([9000], Some(1400), false).mtu, 1400);
        assert_eq!(PathMtu::smallest([], None, true).mtu, 1500);

        let mut a = adv(100, 1, 3);
        let out = a.on_sample(0, &all(100, 237, 0)).unwrap();
        assert_eq!(decoded(&out).len(), 2);
        assert_eq!(a.set_path_mtu(p), Ok(true));
        assert_eq!(a.path_mtu(), p);
        let out = a.on_sample(a.next_due_at().unwrap(), &[]).unwrap();
        let counts: Vec<usize> = decoded(&out).iter().map(|(_, e)| e.len()).collect();
        assert_eq!(counts, [33, 33, 33, 1]);
        for d in &out.datagrams {
            assert!(d.len() + 28 <= 576, "{}", d.len());
        }
        // Too small: refused, the previous split stays.
        assert!(matches!(
            a.set_path_mtu(PathMtu {
                mtu: 59,
                ipv6: false,
                ..PathMtu::default()
            }),
            Err(AdvertiserError::MtuTooSmall { mtu: 59, .. })
        ));
        assert_eq!(a.entries_per_datagram(), 33);
        assert_eq!(a.set_path_mtu(p), Ok(false));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut a = adv(200, 65534, 5);
        let out = a.on_sample(0, &all(200, 237, 0)).unwrap();
        let seqs: Vec<u16> = decoded(&out).iter().map(|(h, _)| h.sequence).collect();
        assert_eq!(seqs, vec![65534, 65535, 0]);
        let out = a.on_sample(a.next_due_at().unwrap(), &[]).unwrap();
        assert_eq!(decoded(&out)[0].0.sequence, 1);
    }

    #[test]
    fn mtu_and_flags_bound_the_entries_per_datagram() {
        // IPv6, Q = 1, D = 1: (1280 - 40 - 8 - 20) / 28 = 43.
        let p = PathMtu {
            mtu: 1280,
            ipv6: true,
            ..PathMtu::default()
        };
        assert_eq!(p.entries_per_datagram(true, true), 43);
        // Jumbo frames: still at most 91.
        let jumbo = PathMtu {
            mtu: 9000,
            ipv6: false,
            ..PathMtu::default()
        };
        assert_eq!(jumbo.entries_per_datagram(false, false), 91);
        // An authentication trailer (HMAC-SHA-512: 80 octets) takes entries' room:
        // (1500 - 20 - 8 - 16 - 80) / 16 = 86.
        let signed = PathMtu::default().with_trailer(80);
        assert_eq!(signed.entries_per_datagram(false, false), 86);
        let params = HelperParams {
            diagnostics: true,
            ..HelperParams::default()
        };
        let id = Identity {
            node_id: 0xc000_0201,
            node_as: Some(4_200_000_001),
            pfc_fabric: true,
        };
        let mut a =
            Advertiser::new(params, id, links(200), p, 7, SmallRng::seed_from_u64(1)).unwrap();
        // A timestamp past 2^32 ms wraps: (2^32 + 5) ms since boot.
        let now = ((1u64 << 32) + 5) * MS;
        let out = a.on_sample(now, &all(200, 72, 3)).unwrap();
        let d = decoded(&out);
        assert_eq!(d.len(), 5); // 43 * 4 = 172, + 28.
        let (h, e) = &d[0];
        assert!(h.as_qualified && h.diagnostics && h.pfc_fabric);
        assert_eq!(
            (h.node_id, h.node_as, h.timestamp_ms),
            (0xc000_0201, 4_200_000_001, 5)
        );
        let diag = e[0].diagnostics.unwrap();
        assert_eq!((diag.queue_depth, diag.ecn_marking_rate), (77, 5));
        assert_eq!(
            (e[0].available_bandwidth, e[0].lqs, e[0].cl),
            (180.0, 72, 3)
        );
        for dg in &out.datagrams {
            assert!(dg.len() + 48 <= 1280);
        }
        // Too small an MTU is refused with a clear error.
        let tiny = PathMtu {
            mtu: 60,
            ipv6: false,
            ..PathMtu::default()
        };
        assert_eq!(
            Advertiser::new(params, id, links(1), tiny, 0, SmallRng::seed_from_u64(1)).err(),
            Some(AdvertiserError::MtuTooSmall {
                mtu: 60,
                entry_len: 28
            })
        );
    }

    #[test]
    fn shared_medium_lists_every_remote_and_notifies_each() {
        let remotes = vec![
            RemoteNode {
                node_id: 0x0a00_0005,
                node_as: 0,
            },
            RemoteNode {
                node_id: 0x0a00_0006,
                node_as: 0,
            },
            RemoteNode {
                node_id: 0x0a00_0007,
                node_as: 0,
            },
        ];
        let mut a = Advertiser::new(
            HelperParams::default(),
            identity(),
            vec![MonitoredLink {
                link_id: 8,
                remotes,
            }],
            PathMtu::default(),
            0,
            SmallRng::seed_from_u64(1),
        )
        .unwrap();
        let out = a.on_sample(0, &[report(8, 237, 2)]).unwrap();
        let d = decoded(&out);
        let ids: Vec<(u32, u32)> = d[0]
            .1
            .iter()
            .map(|e| (e.link_id, e.remote_node_id))
            .collect();
        assert_eq!(
            ids,
            vec![(8, 0x0a00_0005), (8, 0x0a00_0006), (8, 0x0a00_0007)]
        );
        assert!(
            a.take_notifications().is_empty(),
            "no event for the first value"
        );
        // CL 2 -> 5: one event per remote, and a triggered send in the same call.
        let out = a.on_sample(2 * MS, &[report(8, 42, 5)]).unwrap();
        assert_eq!(out.mode, Mode::Triggered);
        let ev = a.take_notifications();
        assert_eq!(ev.len(), 3);
        assert_eq!(
            ev[0],
            ThresholdCrossed {
                node_id: 0x0a00_0002,
                node_as: 0,
                remote_as: 0,
                remote_node_id: 0x0a00_0005,
                link_id: 8,
                old_cl: 2,
                new_cl: 5,
                lqs: 42,
                t_ns: 2 * MS,
            }
        );
        assert_eq!(
            ev[0].to_json()["ietf-lq-telemetry:lq-threshold-crossed"]["node-id"],
            "10.0.0.2"
        );
        assert!(a.take_notifications().is_empty());
        // An LQS change alone raises no event.
        a.on_sample(4 * MS, &[report(8, 200, 5)]);
        assert!(a.take_notifications().is_empty());
    }

    #[test]
    fn configuration_errors() {
        let mk = |links: Vec<MonitoredLink>, id: Identity| {
            Advertiser::new(
                HelperParams::default(),
                id,
                links,
                PathMtu::default(),
                0,
                SmallRng::seed_from_u64(1),
            )
            .err()
        };
        let mut dup = links(2);
        dup[1].link_id = 1;
        assert_eq!(mk(dup, identity()), Some(AdvertiserError::DuplicateLink(1)));
        let mut none = links(1);
        none[0].remotes.clear();
        assert_eq!(mk(none, identity()), Some(AdvertiserError::NoRemote(1)));
        let mut twice = links(1);
        let first = twice[0].remotes[0];
        twice[0].remotes.push(first);
        assert!(matches!(
            mk(twice, identity()),
            Some(AdvertiserError::DuplicateRemote { link_id: 1, .. })
        ));
        let mut with_as = links(1);
        with_as[0].remotes[0].node_as = 65001;
        assert_eq!(
            mk(with_as.clone(), identity()),
            Some(AdvertiserError::RemoteAsUnqualified {
                link_id: 1,
                remote_as: 65001
            })
        );
        let qualified = Identity {
            node_as: Some(65000),
            ..identity()
        };
        assert_eq!(mk(with_as, qualified), None);
        let bad = HelperParams {
            change_threshold: 60,
            ..HelperParams::default()
        };
        assert_eq!(
            Advertiser::new(
                bad,
                identity(),
                links(1),
                PathMtu::default(),
                0,
                SmallRng::seed_from_u64(1)
            )
            .err(),
            Some(AdvertiserError::Params(ParamsError::ChangeThreshold(60)))
        );
    }

    #[test]
    fn no_links_sends_heartbeats_and_unknown_reports_are_counted() {
        let mut a = adv(0, 9, 1);
        let out = a.on_sample(0, &[report(77, 0, 7)]).unwrap();
        let d = decoded(&out);
        assert_eq!((d.len(), d[0].1.len(), d[0].0.sequence), (1, 0, 9));
        assert_eq!(a.stats().unknown_reports, 1);
    }
}
