//! From the path quality table to one quality per next-hop member and destination (seed
//! 003 sections 6.1-6.3).
//!
//! Inputs: the NNH mapping ([`NnhMapping`], section 6.1), the local uplink qualities
//! ([`LocalQuality`], the "local DLB" of 6.3), a snapshot of the path table written by the
//! XDP receiver (section 6.2) and the set of failed spines from the heartbeat (6.5).
//! Output: per destination, `path_quality(member) = min(local_quality, remote LQS)`.
//!
//! Every member also carries its path capacity ([`Capacity`], section 4.1: "Slow Plane
//! (BGP/FARE): ... static capacity", `weight(path_i) = f(FARE_capacity(i),
//! LQ_quality(i))`): `min(local uplink capacity, remote capacity)`, the remote capacity from
//! the slow plane (the BGP Link Bandwidth community learned over BMP, or configuration),
//! never from the diagnostics block.
//!
//! Section 5.5: "Receivers MUST NOT use them [the diagnostic metrics] for forwarding
//! decisions." Nothing here reads them: the seed's weights read the LQS (and the entry's
//! age) of a [`PathValue`], and the [`MemberSignal`]s the integral weight function reads
//! are the other interoperability fields (CL, available bandwidth; sections 5.3, 5.4).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use lq_common::maps::{NeighborKey, PathKey, PathValue};
use tracing::debug;

use super::config::{ControllerConfig, ParallelLinkAggregation, WeightFunction};
use super::heartbeat::entry_expired;

/// A node identity: (AS, Router-ID), AS 0 when unqualified (section 6.2).
pub type NodeId = NeighborKey;

/// Shorthand for a [`NodeId`].
#[inline]
pub const fn node(node_as: u32, node_id: u32) -> NodeId {
    NeighborKey { node_as, node_id }
}

/// A path key's place in the control step's order and the [`PathSnapshot`]'s: remote node,
/// then spine, then link.
pub fn remote_order(k: &PathKey) -> (u32, u32, u32, u32, u32) {
    (k.remote_as, k.remote_id, k.spine_as, k.spine_id, k.link_id)
}

/// The remote nodes the LQ entries name: those of live entries, and those of all entries.
/// A learned NNH mapping (an origin AS, seed 003 section 6.1) is resolved against them
/// (`SlowPlane::remote_for_entries` says why both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteNodes {
    /// Remote nodes with at least one entry not expired at the time of the read.
    pub live: BTreeSet<NodeId>,
    /// Remote nodes with any entry.
    pub all: BTreeSet<NodeId>,
}

impl RemoteNodes {
    /// From `entries` sorted by [`remote_order`] (a remote node's entries are adjacent),
    /// liveness judged at `read_at_ns`: one pass, one set insert per remote node, not per
    /// entry (32 768 entries, 512 remote nodes at a 64 x 512 leaf). Entries out of that
    /// order give the same sets, only slower.
    pub fn of_entries(entries: &[(PathKey, PathValue)], read_at_ns: u64, dead_ns: u64) -> Self {
        let mut nodes = Self::default();
        let mut current: Option<(NodeId, bool)> = None;
        for (k, v) in entries {
            let r = node(k.remote_as, k.remote_id);
            let live = !entry_expired(v.last_update_ns, read_at_ns, dead_ns);
            match &mut current {
                Some((c, any_live)) if *c == r => *any_live |= live,
                _ => {
                    if let Some((c, any_live)) = current.replace((r, live)) {
                        nodes.note(c, any_live);
                    }
                }
            }
        }
        if let Some((c, any_live)) = current {
            nodes.note(c, any_live);
        }
        nodes
    }

    fn note(&mut self, remote: NodeId, live: bool) {
        if live {
            self.live.insert(remote);
        }
        self.all.insert(remote);
    }
}

/// Identifier of a local uplink (the leaf's ifIndex, or any stable id the caller uses).
pub type UplinkId = u32;

/// Where a capacity came from (`lqd show weights` names it for every member).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacitySource {
    /// The BGP Link Bandwidth extended community of the destination's route through the
    /// member's next hop (RFC 10005; FARE's capacity, seed 003 sections 1.4 and 4.1),
    /// learned over BMP.
    Bgp,
    /// The configuration: `[[path-capacity]]` for a path, `capacity-gbps` or `rate-mbit`
    /// of an `[[uplink]]`.
    Config,
    /// The local uplink's speed as its driver reports it.
    Link,
    /// Nothing known: every such member counts the same (1 Gbit/s), so a leaf that knows
    /// no capacity weights by quality alone (section 6.3 as written).
    #[default]
    Unknown,
}

impl CapacitySource {
    /// The name the views print.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Bgp => "bgp",
            Self::Config => "config",
            Self::Link => "link",
            Self::Unknown => "unknown",
        }
    }

    /// From the slow plane or the operator, not from a link's own speed or a guess.
    pub const fn is_provisioned(self) -> bool {
        matches!(self, Self::Bgp | Self::Config)
    }
}

/// A capacity in Gbit/s and where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// Gbit/s, finite and > 0.
    pub gbps: f64,
    /// Its source.
    pub source: CapacitySource,
}

impl Default for Capacity {
    fn default() -> Self {
        Self::UNKNOWN
    }
}

impl Capacity {
    /// No capacity known: 1 Gbit/s, the same for every such member.
    pub const UNKNOWN: Self = Self {
        gbps: 1.0,
        source: CapacitySource::Unknown,
    };

    /// `gbps` from `source`; `None` unless finite and > 0.
    pub fn new(gbps: f64, source: CapacitySource) -> Option<Self> {
        (gbps.is_finite() && gbps > 0.0).then_some(Self { gbps, source })
    }

    /// The path capacity of section 4.1: the smaller of the local uplink's and the remote
    /// one (the slow plane's), with the source of the one that binds (the remote one on a
    /// tie: it is the more specific). An unknown local capacity does not bind a known
    /// remote one, so that a leaf whose uplinks report no speed still follows BGP.
    pub fn path(local: Self, remote: Option<Self>) -> Self {
        match remote {
            None => local,
            Some(r) if local.source == CapacitySource::Unknown || r.gbps <= local.gbps => r,
            Some(_) => local,
        }
    }
}

/// A destination prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

/// The destinations one nexthop group serves. Seed 003 section 6.1: a destination's
/// weights depend on the remote node R it is reachable through, not on its prefix; so every
/// destination behind the same R (with the same members permitted by the slow plane, 4.1)
/// shares one group, and a change of R's quality costs one group replace, however many
/// prefixes R announces. Destinations without an NNH mapping all read the same local-only
/// quality (6.1) and share one group too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The remote node (NNH); `None`: no mapping, local-only quality (6.1).
    pub remote: Option<NodeId>,
    /// The members the slow plane permits (a BGP route's next hops, 4.1), sorted; `None`:
    /// every uplink (a `[[destination]]`).
    pub eligible: Option<Vec<UplinkId>>,
    /// Without a mapping yet: the kernel group a previous lqd left this destination in,
    /// kept until the learned mapping is known ([`NnhMapping::held`]).
    pub adopted: Option<u32>,
}

impl GroupKey {
    /// Every destination behind `remote`, every uplink a member.
    pub const fn remote(remote: NodeId) -> Self {
        Self {
            remote: Some(remote),
            eligible: None,
            adopted: None,
        }
    }

    /// The remote node as `65104/10.0.0.4` (AS/Router-ID); `None` for local-only.
    pub fn remote_name(&self) -> Option<String> {
        self.remote
            .map(|r| format!("{}/{}", r.node_as, std::net::Ipv4Addr::from(r.node_id)))
    }

    /// `65104/10.0.0.4`, or `local-only`, with the permitted uplinks when restricted.
    pub fn label(&self) -> String {
        let r = match (self.remote_name(), self.adopted) {
            (Some(r), _) => r,
            (None, None) => "local-only".to_string(),
            (None, Some(id)) => format!("local-only (adopted group {id:#x})"),
        };
        match &self.eligible {
            None => r,
            Some(e) => format!(
                "{r} via {}",
                e.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// One next-hop member: a local uplink towards a spine. Several uplinks to the same spine
/// are separate members (each has its own local quality and its own kernel nexthop).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Uplink {
    /// The spine at the far end.
    pub spine: NodeId,
    /// The uplink's own capacity (configuration, else its speed, else unknown).
    pub capacity: Capacity,
}

/// The NNH mapping of section 6.1 plus the leaf's next-hop members.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NnhMapping {
    /// Next-hop members by local uplink id.
    pub uplinks: BTreeMap<UplinkId, Uplink>,
    /// Destination -> remote node R through which it is reachable (the NNH). `None`: the
    /// destination is known (it has a group) but the mapping is missing: local-only (6.1).
    pub destinations: BTreeMap<Prefix, Option<NodeId>>,
    /// Destination -> the members the slow plane permits (4.1), sorted. A destination
    /// absent here may use every uplink.
    pub eligible: BTreeMap<Prefix, Vec<UplinkId>>,
    /// Destination -> the kernel group it was adopted in at start, while its learned
    /// mapping (BMP, 6.1) is not known yet: destinations without a mapping would all share
    /// one local-only group, so a restart would move every adopted destination into it and
    /// out again when the mapping arrives, reshuffling their flows twice. Held, each stays
    /// in its own group; once its remote node is known, the whole group moves to that
    /// node's key and keeps its id.
    pub held: BTreeMap<Prefix, u32>,
    /// Provisioned capacity of a spine -> remote link `(spine, remote, link_id)`, used only
    /// by [`ParallelLinkAggregation::CapacityWeightedMean`]; a missing link counts as 1 so
    /// that the rule degrades to a plain mean.
    pub remote_link_capacity: BTreeMap<(NodeId, NodeId, u32), f64>,
    /// The slow plane's capacity of the path to a remote node through a member, `(remote,
    /// uplink)` (section 4.1's FARE capacity): the BGP Link Bandwidth of the remote node's
    /// routes through that uplink's next hop, or `[[path-capacity]]`. The member's path
    /// capacity is the smaller of this and its uplink's ([`Capacity::path`]).
    pub remote_capacity: BTreeMap<(NodeId, UplinkId), Capacity>,
}

impl NnhMapping {
    /// The group a destination belongs to; `None` for an unknown destination.
    pub fn group_of(&self, prefix: &Prefix) -> Option<GroupKey> {
        let remote = *self.destinations.get(prefix)?;
        Some(GroupKey {
            remote,
            eligible: self.eligible.get(prefix).cloned(),
            adopted: if remote.is_none() {
                self.held.get(prefix).copied()
            } else {
                None
            },
        })
    }

    /// Every group with its destinations.
    pub fn groups(&self) -> BTreeMap<GroupKey, Vec<Prefix>> {
        let mut out: BTreeMap<GroupKey, Vec<Prefix>> = BTreeMap::new();
        for p in self.destinations.keys() {
            if let Some(k) = self.group_of(p) {
                out.entry(k).or_default().push(*p);
            }
        }
        out
    }
}

/// Local quality of each uplink, 0..=255 (section 6.3 `local_quality(S)`): 255 for an up
/// uplink and 0 for a down one, or, with `[local-quality] source = "measured"`, the LQS of
/// the uplink's own Appendix A pipeline while it is up ([`super::local_quality`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalQuality {
    quality: BTreeMap<UplinkId, u8>,
}

impl LocalQuality {
    /// Mark an uplink up (255) or down (0).
    pub fn set_up(&mut self, uplink: UplinkId, up: bool) {
        self.quality.insert(uplink, if up { 255 } else { 0 });
    }

    /// Set a measured quality.
    pub fn set(&mut self, uplink: UplinkId, quality: u8) {
        self.quality.insert(uplink, quality);
    }

    /// The quality of an uplink; an uplink never reported is taken as down, so a member is
    /// only used once the link state is known.
    pub fn get(&self, uplink: UplinkId) -> u8 {
        self.quality.get(&uplink).copied().unwrap_or(0)
    }
}

/// Where a destination's qualities came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QualitySource {
    /// Remote LQS entries were combined with local quality (6.3).
    Remote,
    /// No NNH mapping for the destination: local-only (DLB) quality (6.1).
    LocalOnlyNoMapping,
    /// A mapping, but no path table entry for the remote through any member's spine.
    LocalOnlyNoEntries,
}

impl QualitySource {
    /// The name `show weights` and the YANG state give it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Remote => "remote",
            Self::LocalOnlyNoMapping => "local-only-no-mapping",
            Self::LocalOnlyNoEntries => "local-only-no-entries",
        }
    }
}

/// The quality of one member for one destination.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemberQuality {
    /// The member.
    pub uplink: UplinkId,
    /// Its spine.
    pub spine: NodeId,
    /// Its path capacity (section 4.1): `min(uplink, slow plane's remote capacity)`.
    pub capacity: Capacity,
    /// Local uplink quality.
    pub local: u8,
    /// Aggregated remote LQS through that spine, `None` when there is no entry.
    pub remote: Option<u8>,
    /// `min(local, remote)`. When `remote` is `None`: `local` if no member's spine has
    /// an entry for the destination's remote node (local-only fallback, 6.1), else 0 (a
    /// spine that has not advertised R is not confirmed healthy, 4.1). 0 when
    /// `gray_failure`.
    pub quality: u8,
    /// The opt-in gray-failure prune ([`super::config::GrayFailurePrune`]) set `quality` to
    /// 0: the spine reports loss (CL 7) on a link with most of its capacity available.
    pub gray_failure: bool,
}

/// The qualities of every member of one group (the destinations of one remote node).
#[derive(Clone, Debug, PartialEq)]
pub struct DestinationQuality {
    /// How they were obtained.
    pub source: QualitySource,
    /// One per member, in uplink id order.
    pub members: Vec<MemberQuality>,
}

/// The result of [`compute`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathQualityReport {
    /// Per group.
    pub groups: BTreeMap<GroupKey, DestinationQuality>,
    /// Per group, the congestion and capacity signals of every member (same order as
    /// `groups[..].members`); read only by `weight-function = "integral"`, and computed
    /// only for it (empty with the seed's function).
    pub signals: BTreeMap<GroupKey, Vec<MemberSignal>>,
    /// Entries whose remote node is the NNH of no destination: kept, unused (6.1).
    pub unknown_remote_entries: usize,
    /// Entries from nodes that are not the spine of any member (unused).
    pub unknown_spine_entries: usize,
    /// Entries counted as LQS 0 because they aged out or their spine failed (6.5).
    pub failed_entries: usize,
}

impl PathQualityReport {
    /// Takes `newer`'s groups in, each replacing the group's last computation, and hands
    /// the members' vectors they replace to `spare` (for [`compute_some_groups_reusing`]).
    /// Both are sorted: one walk of this report's groups to `newer`'s last, not a search
    /// per group (a step at a leaf of a 64 x 512 fabric replaces a hundred of its 512
    /// groups, issue 41); a group new to this report is inserted.
    pub fn replace_groups(
        &mut self,
        newer: BTreeMap<GroupKey, DestinationQuality>,
        spare: &mut Vec<Vec<MemberQuality>>,
    ) {
        let mut new_groups = Vec::new();
        let mut mine = self.groups.iter_mut().peekable();
        for (key, quality) in newer {
            while mine.next_if(|(k, _)| **k < key).is_some() {}
            match mine.next_if(|(k, _)| **k == key) {
                Some((_, last)) => spare.push(std::mem::replace(last, quality).members),
                None => new_groups.push((key, quality)),
            }
        }
        self.groups.extend(new_groups);
    }
}

/// The path table reduced to what forwarding may use: the effective LQS of every
/// `(spine, remote, link)` after ageing and failure (section 6.5 and the wire spec: a
/// failed neighbor's or an unrefreshed entry counts as LQS 0 / CL 7).
///
/// Flat and sorted by `(remote, spine, link)`, indexed by remote node, then by spine within
/// a remote node: a leaf of a 64 x 512 fabric holds 32 768 entries, and one map node and two
/// vectors per pair made building the snapshot most of a step's cost (issue 15); a group's
/// computation finds its remote node once, then each member's spine among a few dozen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathSnapshot {
    /// Remote node -> its range in `pairs`, sorted.
    remotes: Vec<(NodeId, u32, u32)>,
    /// Spine -> its range in `links` and `signals`, one run per remote node, sorted.
    pairs: Vec<(NodeId, u32, u32)>,
    links: Vec<(u32, u8)>,
    signals: Vec<(u32, LinkSignal)>,
    failed_entries: usize,
}

/// A 64-bit mixing digest (multiply-xor per word, as FxHash): the control step folds the
/// inputs every group shares (local qualities, failed spines) into one, to see whether they
/// moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Digest {
    /// Folds one word in.
    pub fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The entries towards one remote node, by spine (see [`PathSnapshot::remote`]).
#[derive(Clone, Copy, Debug)]
pub struct RemoteEntries<'a> {
    snapshot: &'a PathSnapshot,
    pairs: &'a [(NodeId, u32, u32)],
}

impl<'a> RemoteEntries<'a> {
    /// Where `spine`'s links are, looked for first at `hint` (its place among the remote
    /// node's spines when every spine advertises it), then searched.
    #[inline]
    fn range_near(&self, spine: NodeId, hint: usize) -> std::ops::Range<usize> {
        let at = match self.pairs.get(hint) {
            Some(e) if e.0 == spine => Some(hint),
            _ => self.pairs.binary_search_by(|e| e.0.cmp(&spine)).ok(),
        };
        at.map_or(0..0, |i| self.pairs[i].1 as usize..self.pairs[i].2 as usize)
    }

    /// Effective LQS of every link from `spine`, by link id.
    pub fn links(&self, spine: NodeId) -> &'a [(u32, u8)] {
        self.links_near(spine, usize::MAX)
    }

    /// [`Self::links`], looked for first at `hint` among the remote node's spines (sorted):
    /// a group's members walk the spines in order, and a search per member was most of a
    /// 512 x 64 computation (issue 15).
    #[inline]
    pub fn links_near(&self, spine: NodeId, hint: usize) -> &'a [(u32, u8)] {
        &self.snapshot.links[self.range_near(spine, hint)]
    }

    /// Signals of every link from `spine`, by link id.
    pub fn signals(&self, spine: NodeId) -> &'a [(u32, LinkSignal)] {
        self.signals_near(spine, usize::MAX)
    }

    /// [`Self::signals`], looked for first at `hint` (see [`Self::links_near`]).
    pub fn signals_near(&self, spine: NodeId, hint: usize) -> &'a [(u32, LinkSignal)] {
        &self.snapshot.signals[self.range_near(spine, hint)]
    }
}

/// What an entry says besides its LQS, for the integral weight function: the CL (which,
/// unlike the LQS, does not clamp when every loaded link is at U ~ 1, A.4/A.5) and the
/// available bandwidth (5.4), both interoperability fields. Never the diagnostics block
/// (section 5.5: receivers MUST NOT use it for forwarding): this type has no place for it.
/// A failed or aged entry reads CL 7, no bandwidth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkSignal {
    /// The entry is live: fresh and its spine not failed (6.5).
    pub live: bool,
    /// CL 0..=7.
    pub cl: u8,
    /// Available bandwidth, binary32 bits (Gbps).
    pub available_bits: u32,
}

/// The signals of one member towards one destination, folded over the parallel
/// spine -> remote links: the worst CL, the summed available bandwidth.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemberSignal {
    /// The member.
    pub uplink: UplinkId,
    /// Some spine -> remote link entry is live (not aged, spine not failed, 6.5).
    pub live: bool,
    /// Worst CL of the spine -> remote links; `None` without an entry.
    pub cl: Option<u8>,
    /// Summed available bandwidth (Gbps); `None` without an entry.
    pub available_gbps: Option<f64>,
}

impl PathSnapshot {
    /// Build from a copy of the BPF path table.
    pub fn from_map(
        table: &BTreeMap<PathKey, PathValue>,
        now_ns: u64,
        dead_interval_ns: u64,
        failed_spines: &BTreeSet<NodeId>,
    ) -> Self {
        Self::from_entries(
            table.iter().map(|(k, v)| (*k, *v)),
            now_ns,
            dead_interval_ns,
            failed_spines,
        )
    }

    /// Build from any iteration of the path table (e.g. a BPF map iterator).
    pub fn from_entries(
        entries: impl IntoIterator<Item = (PathKey, PathValue)>,
        now_ns: u64,
        dead_interval_ns: u64,
        failed_spines: &BTreeSet<NodeId>,
    ) -> Self {
        let mut failed_entries = 0;
        let mut flat: Vec<((NodeId, NodeId), u32, u8, LinkSignal)> = entries
            .into_iter()
            .map(|(k, v)| {
                let (spine, remote) =
                    (node(k.spine_as, k.spine_id), node(k.remote_as, k.remote_id));
                let (lqs, signal) =
                    effective_entry(&v, failed_spines.contains(&spine), now_ns, dead_interval_ns);
                failed_entries += usize::from(!signal.live);
                ((spine, remote), k.link_id, lqs, signal)
            })
            .collect();
        // Any source order gives the same snapshot.
        flat.sort_unstable_by_key(|e| (e.0.1, e.0.0, e.1));
        let mut s = Self {
            failed_entries,
            links: Vec::with_capacity(flat.len()),
            signals: Vec::with_capacity(flat.len()),
            pairs: Vec::new(),
            remotes: Vec::new(),
        };
        for ((spine, remote), link, lqs, signal) in flat {
            let at = s.links.len() as u32;
            let new_remote = s.remotes.last().is_none_or(|r| r.0 != remote);
            if new_remote {
                let p = s.pairs.len() as u32;
                s.remotes.push((remote, p, p));
            }
            match s.pairs.last_mut() {
                Some((sp, _, end)) if !new_remote && *sp == spine => *end = at + 1,
                _ => {
                    s.pairs.push((spine, at, at + 1));
                    if let Some(r) = s.remotes.last_mut() {
                        r.2 = s.pairs.len() as u32;
                    }
                }
            }
            s.links.push((link, lqs));
            s.signals.push((link, signal));
        }
        s
    }

    /// Entries in the snapshot (its positions are `0..len`, in [`remote_order`] of the
    /// keys it was built from).
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Replaces the effective values at `position` (an entry's place in the sorted order the
    /// snapshot was built from; its key is unchanged). Returns how they moved, so that the
    /// control step can recompute only the remote nodes whose entries moved (issue 15), and
    /// at once only those whose move can take a path to or from 0 (issue 41).
    #[inline]
    pub fn update_at(&mut self, position: usize, lqs: u8, signal: LinkSignal) -> EntryMove {
        let (Some(l), Some(s)) = (self.links.get_mut(position), self.signals.get_mut(position))
        else {
            return EntryMove::Unchanged;
        };
        if l.1 == lqs && s.1 == signal {
            return EntryMove::Unchanged;
        }
        // What can take a member's path quality to or from 0 (6.3, 6.4): the entry's LQS
        // to or from 0 (ageing and failure included, 6.5), and any move of an entry at CL
        // 7 before or after (the opt-in gray-failure prune reads its CL and available
        // bandwidth). With the minimum over parallel links (lqd's default) nothing else
        // can.
        let crosses_zero =
            (l.1 == 0) != (lqs == 0) || s.1.cl == 7 || signal.cl == 7 || s.1.live != signal.live;
        match (s.1.live, signal.live) {
            (true, false) => self.failed_entries += 1,
            (false, true) => self.failed_entries = self.failed_entries.saturating_sub(1),
            _ => {}
        }
        l.1 = lqs;
        s.1 = signal;
        if crosses_zero {
            EntryMove::CrossesZero
        } else {
            EntryMove::Changed
        }
    }

    /// How many remote nodes the snapshot holds entries for.
    pub fn remote_count(&self) -> usize {
        self.remotes.len()
    }

    /// The remote node at `index` among them (sorted, as the entries are): the `index`-th
    /// distinct remote node in the entries' order.
    pub fn remote_at(&self, index: usize) -> Option<NodeId> {
        self.remotes.get(index).map(|r| r.0)
    }

    /// The entries towards `remote` (none when no spine advertised it).
    pub fn remote(&self, remote: NodeId) -> RemoteEntries<'_> {
        let pairs = match self.remotes.binary_search_by(|e| e.0.cmp(&remote)) {
            Ok(i) => &self.pairs[self.remotes[i].1 as usize..self.remotes[i].2 as usize],
            Err(_) => &[],
        };
        RemoteEntries {
            snapshot: self,
            pairs,
        }
    }

    /// Signals of every link from `spine` to `remote`, by link id.
    pub fn signals(&self, spine: NodeId, remote: NodeId) -> &[(u32, LinkSignal)] {
        self.remote(remote).signals(spine)
    }

    /// Effective LQS of every link from `spine` to `remote`, by link id.
    pub fn links(&self, spine: NodeId, remote: NodeId) -> &[(u32, u8)] {
        self.remote(remote).links(spine)
    }

    /// Every `(spine, remote)` pair with its number of links.
    #[cfg(test)]
    fn pairs(&self) -> impl Iterator<Item = ((NodeId, NodeId), usize)> + '_ {
        self.remotes.iter().flat_map(move |(r, a, b)| {
            self.pairs[*a as usize..*b as usize]
                .iter()
                .map(move |(sp, x, y)| ((*sp, *r), (y - x) as usize))
        })
    }
}

/// How an entry's effective values moved ([`PathSnapshot::update_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryMove {
    /// Not at all.
    Unchanged,
    /// Within what keeps every path quality on the same side of 0.
    Changed,
    /// Its LQS to or from 0, its liveness, or anything of an entry at CL 7 before or after
    /// (what the opt-in gray-failure prune reads): a path quality through it may cross 0,
    /// which section 6.4 applies at once.
    CrossesZero,
}

/// What forwarding may use of one entry (section 6.5 and the wire spec): its LQS and
/// signals, or LQS 0 / CL 7 when its spine failed or the entry was not refreshed within the
/// dead interval. Inlined: every row a refresh reads comes here (1.6 M a second at a leaf
/// of a 64 x 512 fabric); a build that called it across codegen units read 19.5 ns a row
/// in `bench step` against 13.1 inlined.
#[inline]
pub fn effective_entry(
    v: &PathValue,
    spine_failed: bool,
    now_ns: u64,
    dead_interval_ns: u64,
) -> (u8, LinkSignal) {
    if spine_failed || entry_expired(v.last_update_ns, now_ns, dead_interval_ns) {
        return (
            0,
            LinkSignal {
                cl: 7,
                ..LinkSignal::default()
            },
        );
    }
    // Section 5.5: the diagnostics (`v.link_capacity_bits`, `v.queue_depth`, ...) stay in
    // the table for `lqd show paths` and never go further.
    (
        v.lqs,
        LinkSignal {
            live: true,
            cl: v.cl.min(7),
            available_bits: v.available_bandwidth_bits,
        },
    )
}

/// Fold the LQS of parallel spine -> remote links into one value (section 6.3 permits the
/// minimum or a weighted average). `None` when there is no link. Inlined: it runs for
/// every member of every group a step computes.
#[inline]
fn aggregate(
    rule: ParallelLinkAggregation,
    mapping: &NnhMapping,
    spine: NodeId,
    remote: NodeId,
    links: &[(u32, u8)],
) -> Option<u8> {
    match rule {
        ParallelLinkAggregation::Minimum => links.iter().map(|&(_, q)| q).min(),
        ParallelLinkAggregation::CapacityWeightedMean => {
            if links.is_empty() {
                return None;
            }
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for &(link, q) in links {
                let c = mapping
                    .remote_link_capacity
                    .get(&(spine, remote, link))
                    .copied()
                    .filter(|c| c.is_finite() && *c >= 0.0)
                    .unwrap_or(1.0);
                num += c * f64::from(q);
                den += c;
            }
            if den <= 0.0 {
                // Every link provisioned at capacity 0: nothing usable.
                return Some(0);
            }
            // Floor so that the mean never rounds a near-dead bundle up; clamp is exact for
            // a convex combination of values in 0..=255.
            Some((num / den).floor().clamp(0.0, 255.0) as u8)
        }
    }
}

/// Compute the member qualities of every group of `mapping` (section 6.3).
pub fn compute(
    config: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    snapshot: &PathSnapshot,
) -> PathQualityReport {
    let groups: BTreeSet<GroupKey> = mapping.groups().into_keys().collect();
    compute_groups(config, mapping, local, snapshot, groups.iter())
}

/// Compute the member qualities of `groups` (section 6.3): the caller keeps the set of
/// groups between steps, so a step costs one computation per remote node, not per prefix.
pub fn compute_groups<'g>(
    config: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    snapshot: &PathSnapshot,
    groups: impl IntoIterator<Item = &'g GroupKey> + Clone,
) -> PathQualityReport {
    let mut report = compute_some_groups(config, mapping, local, snapshot, groups.clone());
    (report.unknown_spine_entries, report.unknown_remote_entries) =
        unused_entries(mapping, snapshot, groups);
    report
}

/// Entries no group uses: (from nodes that are the spine of no member, towards remote
/// nodes that are no group's). A pass over the whole table: the control step counts them
/// only on its periodic full update.
pub fn unused_entries<'g>(
    mapping: &NnhMapping,
    snapshot: &PathSnapshot,
    groups: impl IntoIterator<Item = &'g GroupKey>,
) -> (usize, usize) {
    // Sorted, as the snapshot's remote nodes and each one's spines are: a remote node is
    // looked up once, and its spines are merged with the uplinks' (a tree search per
    // pair, 32 768 pairs at a 64 x 512 leaf, was 1.5 % of lqd's CPU there, issue 41).
    let mut spines: Vec<NodeId> = mapping.uplinks.values().map(|u| u.spine).collect();
    spines.sort_unstable();
    spines.dedup();
    let remotes: BTreeSet<NodeId> = groups.into_iter().filter_map(|g| g.remote).collect();
    let (mut spine, mut remote) = (0, 0);
    for (r, a, b) in &snapshot.remotes {
        let known_remote = remotes.contains(r);
        let mut known_spines = spines.iter().peekable();
        for (s, x, y) in &snapshot.pairs[*a as usize..*b as usize] {
            let links = (y - x) as usize;
            let known_spine = loop {
                match known_spines.peek() {
                    Some(&k) if k < s => {
                        known_spines.next();
                    }
                    Some(&k) => break k == s,
                    None => break false,
                }
            };
            if !known_spine {
                spine += links;
            } else if !known_remote {
                remote += links;
            }
        }
    }
    (spine, remote)
}

/// [`compute_groups`] for some groups only (those whose inputs changed), without the
/// unused-entry counters ([`unused_entries`]).
pub fn compute_some_groups<'g>(
    config: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    snapshot: &PathSnapshot,
    groups: impl IntoIterator<Item = &'g GroupKey>,
) -> PathQualityReport {
    compute_some_groups_reusing(config, mapping, local, snapshot, groups, &mut Vec::new())
}

/// [`compute_some_groups`], each group's members written into a vector taken from `spare`
/// (cleared; a new one when `spare` is empty): a caller that keeps the last report hands
/// back the vectors the new one replaces, so that a step allocates and frees no members'
/// vector (512 of them, 2.5 KiB each, every T_reweight at a leaf of a 64 x 512 fabric
/// under the churn: issue 41).
pub fn compute_some_groups_reusing<'g>(
    config: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    snapshot: &PathSnapshot,
    groups: impl IntoIterator<Item = &'g GroupKey>,
    spare: &mut Vec<Vec<MemberQuality>>,
) -> PathQualityReport {
    compute_groups_into(config, mapping, local, snapshot, groups, spare, true)
}

/// [`compute_some_groups_reusing`]; `one_link_each` lets a group whose remote node every
/// member's spine advertises over one link take [`members_one_link_each`] (the tests turn
/// it off to hold the two to the same report).
fn compute_groups_into<'g>(
    config: &ControllerConfig,
    mapping: &NnhMapping,
    local: &LocalQuality,
    snapshot: &PathSnapshot,
    groups: impl IntoIterator<Item = &'g GroupKey>,
    spare: &mut Vec<Vec<MemberQuality>>,
    one_link_each: bool,
) -> PathQualityReport {
    let mut report = PathQualityReport {
        failed_entries: snapshot.failed_entries,
        ..Default::default()
    };

    // Per uplink once, not per group and uplink (a walk of the uplinks' tree per group was
    // a tenth of a group's computation, issue 41): its id, spine, capacity and local
    // quality, and its spine's place among the uplinks' spines (sorted), which is its
    // place among a remote node's entries when every spine advertises the node.
    let mut spines: Vec<NodeId> = mapping.uplinks.values().map(|u| u.spine).collect();
    spines.sort_unstable();
    spines.dedup();
    let uplinks: Vec<(UplinkId, &Uplink, u8, usize)> = (mapping.uplinks.iter())
        .map(|(&id, u)| {
            let rank = spines.binary_search(&u.spine).unwrap_or(usize::MAX);
            (id, u, local.get(id), rank)
        })
        .collect();
    // Only the integral weight function reads the members' signals (and the opt-in
    // gray-failure prune reads one member's at a time).
    let with_signals = matches!(config.weight_function, WeightFunction::Integral(_));
    // What only the general loop below handles: signals, the gray-failure prune, and
    // parallel links folded by anything but their minimum.
    let one_link_each = one_link_each
        && !with_signals
        && config.gray_failure.is_none()
        && config.parallel_links == ParallelLinkAggregation::Minimum;
    let mut remote_capacities: Vec<(UplinkId, Capacity)> = Vec::new();
    let groups = groups.into_iter();
    let mut computed = Vec::with_capacity(groups.size_hint().0);
    for key in groups {
        let remote = &key.remote;
        let entries = remote.map(|r| snapshot.remote(r));
        // The slow plane's capacities towards this remote node, by uplink (sorted, as the
        // uplinks are): one range of the map per group, walked beside the uplinks, not a
        // search per member (32 768 entries at a 64 x 512 leaf that learns them by BGP).
        remote_capacities.clear();
        if let Some(r) = remote {
            remote_capacities.extend(
                (mapping
                    .remote_capacity
                    .range((*r, UplinkId::MIN)..=(*r, UplinkId::MAX)))
                .map(|(&(_, u), &c)| (u, c)),
            );
        }
        let mut signals = Vec::with_capacity(if with_signals { uplinks.len() } else { 0 });
        let mut members = spare.pop().unwrap_or_default();
        members.clear();
        members.reserve(uplinks.len());
        // Nearly every group of a fabric (all 512 at every T_reweight under `bench scale`'s
        // churn, issue 41): every uplink a member, each member's spine advertising the remote
        // node over one link. Then a member's quality is `min(local, that link's LQS)`, found
        // at its spine's place among the node's entries, in one pass without a branch per
        // case; any other shape is found on the way and computed by the general loop.
        let one_link = one_link_each
            && key.eligible.is_none()
            && entries.is_some_and(|e| {
                members_one_link_each(&uplinks, e, &remote_capacities, &mut members)
            });
        let general = if one_link {
            &[][..]
        } else {
            members.clear();
            &uplinks[..]
        };
        let mut any_remote = one_link;
        let mut next_capacity = remote_capacities.iter().peekable();
        for &(uplink, u, local_q, rank) in general {
            let remote_capacity = loop {
                match next_capacity.peek() {
                    Some(&&(id, _)) if id < uplink => {
                        next_capacity.next();
                    }
                    Some(&&(id, c)) if id == uplink => break Some(c),
                    _ => break None,
                }
            };
            // Section 4.1: only what the slow plane permits (a BGP route's next hops).
            if key
                .eligible
                .as_ref()
                .is_some_and(|e| e.binary_search(&uplink).is_err())
            {
                continue;
            }
            let remote_q = remote.zip(entries).and_then(|(r, e)| {
                aggregate(
                    config.parallel_links,
                    mapping,
                    u.spine,
                    r,
                    e.links_near(u.spine, rank),
                )
            });
            any_remote |= remote_q.is_some();
            let signal = (with_signals || config.gray_failure.is_some()).then(|| {
                member_signal(
                    uplink,
                    entries.map_or(&[][..], |e| e.signals_near(u.spine, rank)),
                )
            });
            let capacity = Capacity::path(u.capacity, remote_capacity);
            // The opt-in departure from 6.3 (`GrayFailurePrune`): the spine's link loses
            // data (CL 7) though most of its capacity is available. Its capacity is the
            // slow plane's for the path when known (the remote link's, not the uplink's),
            // else the member's path capacity; unknown, the prune does not apply.
            let gray_failure = config.gray_failure.zip(signal).is_some_and(|(g, sig)| {
                let against = remote_capacity
                    .or((capacity.source != CapacitySource::Unknown).then_some(capacity))
                    .map(|c| c.gbps);
                g.applies(sig.cl, sig.available_gbps, against)
            });
            if with_signals && let Some(sig) = signal {
                signals.push(sig);
            }
            members.push(MemberQuality {
                uplink,
                spine: u.spine,
                capacity,
                local: local_q,
                remote: remote_q,
                quality: if gray_failure {
                    0
                } else {
                    remote_q.map_or(local_q, |r| r.min(local_q))
                },
                gray_failure,
            });
        }
        if any_remote {
            // Some spine has advertised R, so R's entries are what confirms a path. A spine
            // that has not (yet) advertised R is not confirmed healthy by the fast plane
            // and is not eligible (section 4.1: LQS > 0 required); giving it local-only
            // quality would rank an unconfirmed spine above every confirmed one. Only when
            // no spine has any entry for R does the local-only fallback apply (6.1).
            for m in members.iter_mut().filter(|m| m.remote.is_none()) {
                m.quality = 0;
            }
        }
        let source = match remote {
            None => QualitySource::LocalOnlyNoMapping,
            Some(_) if !any_remote => QualitySource::LocalOnlyNoEntries,
            Some(_) => QualitySource::Remote,
        };
        if source != QualitySource::Remote {
            debug!(
                group = %key.label(),
                ?source,
                "destinations fall back to local-only quality (6.1)"
            );
        }
        computed.push((key.clone(), DestinationQuality { source, members }));
        if with_signals {
            report.signals.insert(key.clone(), signals);
        }
    }
    // Built at once from the groups in the order asked (sorted, as a step asks them: a
    // bulk build, where an insert per group searched the tree and grew it node by node,
    // 2.6 % of lqd's samples under `bench scale`'s churn, issue 41); a group asked twice
    // keeps its last computation, as inserts would.
    report.groups = computed.into_iter().collect();
    report
}

/// The members of a group of every uplink whose remote node each member's spine advertises
/// over exactly one link, with the seed's minimum for parallel links and no prune: what the
/// general loop of [`compute_groups_into`] computes for such a group (section 6.3: the
/// member's path quality `min(local_quality(S), remote_lqs(S, R, L))`, its capacity per 4.1),
/// in one pass. `false` when the group is of another shape (`members` then holds garbage).
#[inline]
fn members_one_link_each(
    uplinks: &[(UplinkId, &Uplink, u8, usize)],
    entries: RemoteEntries<'_>,
    remote_capacities: &[(UplinkId, Capacity)],
    members: &mut Vec<MemberQuality>,
) -> bool {
    let (pairs, links) = (entries.pairs, &entries.snapshot.links[..]);
    let mut one_link_each = true;
    // The slow plane's capacities by uplink, sorted as the uplinks are: walked beside them.
    let mut next_capacity = 0;
    members.extend(uplinks.iter().map(|&(uplink, u, local, rank)| {
        // The spine's place among the remote node's spines is its place among the uplinks'
        // spines when every spine advertises the node ([`RemoteEntries::links_near`]).
        let lqs = match pairs.get(rank) {
            Some(&(spine, a, b)) if spine == u.spine && b == a + 1 => {
                links.get(a as usize).map(|l| l.1)
            }
            _ => None,
        };
        one_link_each &= lqs.is_some();
        let lqs = lqs.unwrap_or(0);
        while remote_capacities
            .get(next_capacity)
            .is_some_and(|c| c.0 < uplink)
        {
            next_capacity += 1;
        }
        let remote_capacity = remote_capacities
            .get(next_capacity)
            .filter(|c| c.0 == uplink)
            .map(|c| c.1);
        MemberQuality {
            uplink,
            spine: u.spine,
            capacity: Capacity::path(u.capacity, remote_capacity),
            local,
            remote: Some(lqs),
            quality: lqs.min(local),
            gray_failure: false,
        }
    }));
    one_link_each
}

/// Fold the signals of parallel links (see [`MemberSignal`]); binary32 values that are not
/// finite and >= 0 (the receiver refuses them, but the table is shared) count as absent.
fn member_signal(uplink: UplinkId, links: &[(u32, LinkSignal)]) -> MemberSignal {
    let gbps = |bits: u32| {
        let x = f64::from(f32::from_bits(bits));
        (x.is_finite() && x >= 0.0).then_some(x)
    };
    if links.is_empty() {
        return MemberSignal {
            uplink,
            ..MemberSignal::default()
        };
    }
    MemberSignal {
        uplink,
        live: links.iter().any(|(_, l)| l.live),
        cl: links.iter().map(|(_, l)| l.cl).max(),
        available_gbps: Some(
            links
                .iter()
                .filter_map(|(_, l)| gbps(l.available_bits))
                .sum(),
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    pub(crate) fn prefix(a: u8) -> Prefix {
        Prefix {
            addr: IpAddr::V4(Ipv4Addr::new(10, 1, a, 0)),
            len: 24,
        }
    }

    pub(crate) fn key(spine: u32, remote: u32, link: u32) -> PathKey {
        PathKey {
            spine_as: 0,
            spine_id: spine,
            remote_as: 0,
            remote_id: remote,
            link_id: link,
        }
    }

    pub(crate) fn value(lqs: u8, t: u64) -> PathValue {
        PathValue {
            last_update_ns: t,
            lqs,
            ..Default::default()
        }
    }

    #[test]
    fn remote_nodes_are_those_of_live_and_of_all_entries() {
        let dead = 60;
        // Remote 7: one live entry among aged ones; remote 8: all aged; remote 9: live;
        // in remote order, then shuffled (the same sets, read out of order).
        let mut entries = vec![
            (key(1, 7, 0), value(10, 0)),
            (key(2, 7, 0), value(10, 950)),
            (key(3, 7, 0), value(10, 0)),
            (key(1, 8, 0), value(10, 100)),
            (key(2, 8, 0), value(10, 100)),
            (key(4, 9, 1), value(10, 990)),
        ];
        let want = RemoteNodes {
            live: [node(0, 7), node(0, 9)].into(),
            all: [node(0, 7), node(0, 8), node(0, 9)].into(),
        };
        assert_eq!(RemoteNodes::of_entries(&entries, 1000, dead), want);
        entries.swap(0, 5);
        entries.swap(1, 3);
        assert_eq!(RemoteNodes::of_entries(&entries, 1000, dead), want);
        assert_eq!(
            RemoteNodes::of_entries(&[], 1000, dead),
            RemoteNodes::default()
        );
    }

    /// Four spines 1..=4, one uplink each (ids 11..=14), destination 10.1.4.0/24 behind
    /// remote leaf 104 (seed section 8 / Appendix B).
    pub(crate) fn fabric() -> (NnhMapping, LocalQuality) {
        let mut m = NnhMapping::default();
        let mut l = LocalQuality::default();
        for s in 1..=4u32 {
            m.uplinks.insert(
                10 + s,
                Uplink {
                    spine: node(0, s),
                    capacity: Capacity::new(400.0, CapacitySource::Link).unwrap(),
                },
            );
            l.set_up(10 + s, true);
        }
        m.destinations.insert(prefix(4), Some(node(0, 104)));
        (m, l)
    }

    /// The group of destination `p` in report `r`.
    pub(crate) fn of<'a>(
        r: &'a PathQualityReport,
        m: &NnhMapping,
        p: Prefix,
    ) -> &'a DestinationQuality {
        &r.groups[&m.group_of(&p).expect("a known destination")]
    }

    fn qualities(r: &PathQualityReport, m: &NnhMapping, p: Prefix) -> Vec<u8> {
        of(r, m, p).members.iter().map(|m| m.quality).collect()
    }

    fn run(
        cfg: &ControllerConfig,
        m: &NnhMapping,
        l: &LocalQuality,
        t: &BTreeMap<PathKey, PathValue>,
        now: u64,
    ) -> PathQualityReport {
        let snap = PathSnapshot::from_map(t, now, cfg.dead_interval_ns(), &BTreeSet::new());
        compute(cfg, m, l, &snap)
    }

    #[test]
    fn a_spines_links_are_found_whatever_the_hint() {
        // Remote 104 heard from spines 1, 2, 4 and 9 (not 3): the hints that are right, wrong
        // or past the end all find what a search finds.
        let mut t = BTreeMap::new();
        for (s, link, q) in [
            (1, 7, 201),
            (2, 7, 202),
            (2, 8, 12),
            (4, 7, 204),
            (9, 7, 209),
        ] {
            t.insert(key(s, 104, link), value(q, 0));
        }
        let snap = PathSnapshot::from_map(&t, 0, u64::MAX, &BTreeSet::new());
        let e = snap.remote(node(0, 104));
        for spine in 1..=9 {
            let want = e.links(node(0, spine));
            for hint in [0, 1, 2, 3, 4, 5, usize::MAX] {
                assert_eq!(
                    e.links_near(node(0, spine), hint),
                    want,
                    "spine {spine} hint {hint}"
                );
                assert_eq!(
                    e.signals_near(node(0, spine), hint),
                    e.signals(node(0, spine)),
                    "spine {spine} hint {hint}"
                );
            }
        }
        assert_eq!(e.links(node(0, 2)), &[(7, 202), (8, 12)]);
        assert!(e.links(node(0, 3)).is_empty());
    }

    #[test]
    fn min_of_local_and_remote() {
        let cfg = ControllerConfig::default();
        let (m, mut l) = fabric();
        l.set(13, 100);
        let mut t = BTreeMap::new();
        for (s, q) in [(1, 237), (2, 72), (3, 237), (4, 237)] {
            t.insert(key(s, 104, 7), value(q, 0));
        }
        let r = run(&cfg, &m, &l, &t, 1_000);
        assert_eq!(qualities(&r, &m, prefix(4)), [237, 72, 100, 237]);
        assert_eq!(of(&r, &m, prefix(4)).source, QualitySource::Remote);
    }

    #[test]
    fn missing_mapping_or_entries_fall_back_to_local() {
        let cfg = ControllerConfig::default();
        let (mut m, mut l) = fabric();
        l.set_up(12, false);
        m.destinations.insert(prefix(5), None);
        m.destinations.insert(prefix(6), Some(node(0, 106)));
        let mut t = BTreeMap::new();
        t.insert(key(1, 104, 7), value(50, 0));
        // An entry for a remote no destination maps to: kept, counted, unused.
        t.insert(key(1, 999, 7), value(1, 0));
        t.insert(key(1, 998, 8), value(1, 0));
        // An entry from a node that is no member's spine.
        t.insert(key(77, 104, 7), value(1, 0));
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(5)), [255, 0, 255, 255]);
        assert_eq!(
            of(&r, &m, prefix(5)).source,
            QualitySource::LocalOnlyNoMapping
        );
        assert_eq!(qualities(&r, &m, prefix(6)), [255, 0, 255, 255]);
        assert_eq!(
            of(&r, &m, prefix(6)).source,
            QualitySource::LocalOnlyNoEntries
        );
        // Spines 2-4 have no entry for 104 while spine 1 has: they are not confirmed
        // healthy (4.1) and get nothing, whatever their local quality.
        assert_eq!(qualities(&r, &m, prefix(4)), [50, 0, 0, 0]);
        assert_eq!(r.unknown_remote_entries, 2);
        assert_eq!(r.unknown_spine_entries, 1);
    }

    /// The unused-entry counts merged by remote node and spine are those of a lookup of
    /// every pair, on random tables (spines and remote nodes known or not, several links).
    #[test]
    fn unused_entries_are_those_of_a_lookup_per_pair() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        for _ in 0..300 {
            let mut m = NnhMapping::default();
            for s in 1..=rng.random_range(0..=6u32) {
                // Spine ids with gaps, some shared by two uplinks.
                m.uplinks.insert(
                    10 + s,
                    Uplink {
                        spine: node(0, s * 2 - rng.random_range(0..=1)),
                        capacity: Capacity::new(100.0, CapacitySource::Link).unwrap(),
                    },
                );
            }
            let mut groups = BTreeSet::new();
            for r in 100..110 {
                if rng.random_bool(0.5) {
                    groups.insert(GroupKey::remote(node(0, r)));
                }
            }
            groups.insert(GroupKey::default());
            let mut t = BTreeMap::new();
            for _ in 0..rng.random_range(0..60) {
                let k = key(rng.random_range(0..14), rng.random_range(98..112), 0);
                t.insert(
                    PathKey {
                        link_id: rng.random_range(0..3),
                        ..k
                    },
                    value(rng.random(), 0),
                );
            }
            let snap = PathSnapshot::from_map(&t, 0, u64::MAX, &BTreeSet::new());
            let spines: BTreeSet<NodeId> = m.uplinks.values().map(|u| u.spine).collect();
            let remotes: BTreeSet<NodeId> = groups.iter().filter_map(|g| g.remote).collect();
            let (mut spine, mut remote) = (0, 0);
            for ((s, r), links) in snap.pairs() {
                if !spines.contains(&s) {
                    spine += links;
                } else if !remotes.contains(&r) {
                    remote += links;
                }
            }
            assert_eq!(unused_entries(&m, &snap, &groups), (spine, remote), "{t:?}");
        }
    }

    /// Seed 003 section 4.1: a path is eligible only if confirmed healthy by the fast
    /// plane. A spine that has not (yet) advertised the destination's remote node must not
    /// get local-only quality 255, more than the spines that did advertise it.
    #[test]
    fn a_spine_that_has_not_advertised_the_remote_is_not_confirmed() {
        let cfg = ControllerConfig::default();
        let (m, l) = fabric();
        let mut t = BTreeMap::new();
        for s in 1..=3 {
            t.insert(key(s, 104, 7), value(200, 0));
        }
        // Spine 4 has advertised another remote only (it is alive, just not for 104).
        t.insert(key(4, 105, 7), value(250, 0));
        let r = run(&cfg, &m, &l, &t, 0);
        let d = &of(&r, &m, prefix(4));
        assert_eq!(d.source, QualitySource::Remote);
        assert_eq!(qualities(&r, &m, prefix(4)), [200, 200, 200, 0]);
        assert_eq!(d.members[3].remote, None);
        // And so no weight (6.3): the first application goes straight to the target.
        let mut c = crate::core::controller::weights::WeightController::new(cfg).unwrap();
        let apps = c.update(&r, 0);
        let kernel: Vec<UplinkId> = apps[0].1.kernel().iter().map(|&(u, _)| u).collect();
        assert_eq!(kernel, [11, 12, 13]);

        // Once spine 4 advertises 104 it takes part like the others.
        t.insert(key(4, 104, 7), value(200, 0));
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [200, 200, 200, 200]);

        // No spine has advertised 104 at all: local-only fallback (6.1), all usable.
        let mut t = BTreeMap::new();
        t.insert(key(4, 105, 7), value(250, 0));
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(
            of(&r, &m, prefix(4)).source,
            QualitySource::LocalOnlyNoEntries
        );
        assert_eq!(qualities(&r, &m, prefix(4)), [255, 255, 255, 255]);
    }

    /// Seed 003 section 6.1: weights depend on the remote node, not the prefix. Every
    /// destination behind one remote node is one group (one computation, one replace);
    /// destinations without a mapping share the local-only group; destinations the slow
    /// plane restricts to other members are a group of their own, without the others.
    #[test]
    fn destinations_behind_one_remote_node_share_one_group() {
        let cfg = ControllerConfig::default();
        let (mut m, l) = fabric();
        m.destinations.insert(prefix(40), Some(node(0, 104)));
        m.destinations.insert(prefix(41), Some(node(0, 104)));
        m.destinations.insert(prefix(5), Some(node(0, 105)));
        m.destinations.insert(prefix(6), None);
        m.destinations.insert(prefix(7), None);
        m.destinations.insert(prefix(42), Some(node(0, 104)));
        m.eligible.insert(prefix(42), vec![11, 13]);
        let groups = m.groups();
        assert_eq!(groups.len(), 4, "{groups:?}");
        assert_eq!(
            groups[&GroupKey::remote(node(0, 104))],
            [prefix(4), prefix(40), prefix(41)]
        );
        assert_eq!(groups[&GroupKey::default()], [prefix(6), prefix(7)]);
        let mut t = BTreeMap::new();
        for (s, q) in [(1, 237), (2, 72), (3, 200), (4, 237)] {
            t.insert(key(s, 104, 7), value(q, 0));
        }
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(r.groups.len(), 4);
        assert_eq!(qualities(&r, &m, prefix(41)), [237, 72, 200, 237]);
        // Restricted by the slow plane (4.1): only uplinks 11 and 13 are members.
        let restricted = of(&r, &m, prefix(42));
        assert_eq!(
            restricted
                .members
                .iter()
                .map(|x| (x.uplink, x.quality))
                .collect::<Vec<_>>(),
            [(11, 237), (13, 200)]
        );
        // The members' signals, which only the integral function reads, are computed for
        // it alone, over the same members.
        assert!(r.signals.is_empty());
        let integral = ControllerConfig {
            weight_function: WeightFunction::Integral(Default::default()),
            ..cfg
        };
        let ri = run(&integral, &m, &l, &t, 0);
        assert_eq!(ri.signals[&m.group_of(&prefix(42)).unwrap()].len(), 2);
        assert_eq!(
            m.group_of(&prefix(42)).unwrap().label(),
            "0/0.0.0.104 via 11,13"
        );
        assert_eq!(GroupKey::default().label(), "local-only");
    }

    #[test]
    fn parallel_links_minimum_and_capacity_weighted_mean() {
        let (mut m, l) = fabric();
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            t.insert(key(s, 104, 7), value(200, 0));
        }
        t.insert(key(1, 104, 8), value(100, 0));
        let cfg = ControllerConfig::default();
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [100, 200, 200, 200]);

        let cfg = ControllerConfig {
            parallel_links: ParallelLinkAggregation::CapacityWeightedMean,
            ..Default::default()
        };
        // Unprovisioned capacities: plain mean.
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [150, 200, 200, 200]);
        // 300 G at LQS 200 and 100 G at LQS 100: (3 x 200 + 100) / 4 = 175.
        m.remote_link_capacity
            .insert((node(0, 1), node(0, 104), 7), 300.0);
        m.remote_link_capacity
            .insert((node(0, 1), node(0, 104), 8), 100.0);
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [175, 200, 200, 200]);
    }

    #[test]
    fn shared_link_uses_the_per_destination_entry() {
        let cfg = ControllerConfig::default();
        let (mut m, l) = fabric();
        m.destinations.insert(prefix(5), Some(node(0, 105)));
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            // One link 7 from every spine reaches both 104 and 105 (section 6.2 case 3).
            t.insert(key(s, 104, 7), value(240, 0));
            t.insert(key(s, 105, 7), value(240, 0));
        }
        t.insert(key(2, 105, 7), value(30, 0));
        let r = run(&cfg, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 240, 240, 240]);
        assert_eq!(qualities(&r, &m, prefix(5)), [240, 30, 240, 240]);
    }

    #[test]
    fn parallel_local_uplinks_to_one_spine_are_separate_members() {
        let cfg = ControllerConfig::default();
        let (mut m, mut l) = fabric();
        m.uplinks.insert(
            21,
            Uplink {
                spine: node(0, 1),
                capacity: Capacity::new(400.0, CapacitySource::Link).unwrap(),
            },
        );
        l.set(21, 90);
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            t.insert(key(s, 104, 7), value(200, 0));
        }
        let r = run(&cfg, &m, &l, &t, 0);
        let d = &of(&r, &m, prefix(4));
        assert_eq!(d.members.len(), 5);
        assert_eq!(qualities(&r, &m, prefix(4)), [200, 200, 200, 200, 90]);
        assert_eq!(d.members[4].spine, node(0, 1));
    }

    #[test]
    fn aged_entries_and_failed_spines_count_as_zero() {
        let cfg = ControllerConfig::default();
        let (m, l) = fabric();
        let mut t = BTreeMap::new();
        t.insert(key(1, 104, 7), value(200, 0));
        t.insert(key(2, 104, 7), value(200, 10_000_000));
        t.insert(key(3, 104, 7), value(200, 10_000_000));
        t.insert(key(4, 104, 7), value(200, 10_000_000));
        // Spine 1's entry is 60 ms + 1 ns old: not refreshed for more than miss_count x
        // T_notify, so expired.
        let failed = BTreeSet::from([node(0, 4)]);
        let snap = PathSnapshot::from_map(&t, 60_000_001, cfg.dead_interval_ns(), &failed);
        let r = compute(&cfg, &m, &l, &snap);
        assert_eq!(qualities(&r, &m, prefix(4)), [0, 200, 200, 0]);
        assert_eq!(r.failed_entries, 2);
    }

    #[test]
    fn diagnostics_never_change_the_output() {
        // Section 5.5: diagnostics MUST NOT be used for forwarding decisions.
        let cfg = ControllerConfig {
            parallel_links: ParallelLinkAggregation::CapacityWeightedMean,
            ..Default::default()
        };
        let (m, l) = fabric();
        let mut plain = BTreeMap::new();
        for s in 1..=4 {
            plain.insert(key(s, 104, 7), value(100 + s as u8, 5));
            plain.insert(key(s, 104, 8), value(50 + s as u8, 5));
        }
        let base = run(&cfg, &m, &l, &plain, 10);
        let mut noisy = plain.clone();
        for (i, v) in noisy.values_mut().enumerate() {
            let i = i as u8;
            v.flags ^= lq_common::maps::PATH_FLAG_DIAGNOSTICS
                | lq_common::maps::PATH_FLAG_DROPS
                | lq_common::maps::PATH_FLAG_PFC_FABRIC;
            v.link_capacity_bits = 400.0f32.to_bits() + u32::from(i) * 1_000_000;
            v.queue_depth = 255 - i;
            v.ecn_marking_rate = 31;
            v.pfc_pause_fraction = i % 32;
        }
        // Neither the seed's qualities nor the integral function's signals see them.
        let integral = ControllerConfig {
            weight_function: WeightFunction::Integral(Default::default()),
            ..cfg
        };
        let noisy_signals = run(&integral, &m, &l, &noisy, 10);
        let noisy = run(&cfg, &m, &l, &noisy, 10);
        assert_eq!(noisy.groups, base.groups);
        let plain_signals = run(&integral, &m, &l, &plain, 10);
        assert!(!plain_signals.signals.is_empty());
        assert_eq!(noisy_signals.signals, plain_signals.signals);
        assert_eq!(noisy_signals.groups, plain_signals.groups);
    }

    #[test]
    fn path_capacity_is_the_smaller_of_uplink_and_slow_plane_with_its_source() {
        let cfg = ControllerConfig::default();
        let (mut m, l) = fabric();
        let r4 = node(0, 104);
        // S2's path to R4 is 25 Gbit/s by BGP, S3's 1 000 Gbit/s (the 400 G uplink binds),
        // S4's configured 400 (a tie: the slow plane's source is named).
        let cap = |g, s| Capacity::new(g, s).unwrap();
        m.remote_capacity
            .insert((r4, 12), cap(25.0, CapacitySource::Bgp));
        m.remote_capacity
            .insert((r4, 13), cap(1000.0, CapacitySource::Bgp));
        m.remote_capacity
            .insert((r4, 14), cap(400.0, CapacitySource::Config));
        // Another remote node's capacity does not leak into R4's group.
        m.remote_capacity
            .insert((node(0, 105), 11), cap(1.0, CapacitySource::Bgp));
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            t.insert(key(s, 104, 7), value(200, 0));
        }
        let r = run(&cfg, &m, &l, &t, 0);
        let got: Vec<(f64, CapacitySource)> = of(&r, &m, prefix(4))
            .members
            .iter()
            .map(|x| (x.capacity.gbps, x.capacity.source))
            .collect();
        assert_eq!(
            got,
            [
                (400.0, CapacitySource::Link),
                (25.0, CapacitySource::Bgp),
                (400.0, CapacitySource::Link),
                (400.0, CapacitySource::Config),
            ]
        );
        // An uplink of unknown speed does not bind a known remote capacity.
        assert_eq!(
            Capacity::path(Capacity::UNKNOWN, Some(cap(0.1, CapacitySource::Bgp))),
            cap(0.1, CapacitySource::Bgp)
        );
        assert_eq!(Capacity::new(f64::NAN, CapacitySource::Bgp), None);
        assert_eq!(Capacity::new(0.0, CapacitySource::Bgp), None);
    }

    /// Members' vectors handed back from an earlier report (`compute_some_groups_reusing`)
    /// are written from empty: the report is the one fresh vectors give, whatever the spare
    /// vectors held and however many there are.
    #[test]
    fn reused_members_vectors_give_the_same_report() {
        let (m, l) = fabric();
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            t.insert(key(s, 104, 1), value(200, 0));
            t.insert(key(s, 103, 1), value(120 + s as u8, 0));
        }
        let cfg = ControllerConfig::default();
        let snap = PathSnapshot::from_map(&t, 0, cfg.dead_interval_ns(), &BTreeSet::new());
        let keys = [
            GroupKey::remote(node(0, 103)),
            GroupKey::remote(node(0, 104)),
            GroupKey::remote(node(0, 105)),
        ];
        let fresh = compute_some_groups(&cfg, &m, &l, &snap, &keys);
        // Each spare vector holds another group's members (one more than a group has).
        let stale: Vec<MemberQuality> = (fresh.groups.values())
            .flat_map(|d| d.members.iter().copied())
            .collect();
        for n in [0, 1, 2, 5] {
            let mut spare = vec![stale.clone(); n];
            let reused = compute_some_groups_reusing(&cfg, &m, &l, &snap, &keys, &mut spare);
            assert_eq!(reused, fresh, "{n} spare vectors");
            assert_eq!(
                spare.len(),
                n.saturating_sub(keys.len()),
                "one taken a group"
            );
        }
    }

    /// A group whose remote node every member's spine advertises over one link is computed
    /// in one pass (`members_one_link_each`): the same report as the general loop, over
    /// random fabrics where some groups have that shape and others not (a spine without an
    /// entry for the node, parallel links, a spine that is no uplink's, two uplinks to one
    /// spine, the slow plane's capacities for some members, some uplinks down, aged entries,
    /// groups restricted by the slow plane, no mapping).
    #[test]
    fn one_link_each_groups_are_computed_as_the_general_loop_computes_them() {
        use rand::{Rng, SeedableRng, rngs::SmallRng};
        let mut rng = SmallRng::seed_from_u64(41);
        let cfg = ControllerConfig::default();
        let (mut regular, mut other) = (0, 0);
        for run in 0..200 {
            let mut m = NnhMapping::default();
            let mut l = LocalQuality::default();
            let spines = rng.random_range(2..=8u32);
            let mut uplink = 10;
            for s in 1..=spines {
                for _ in 0..if rng.random_bool(0.1) { 2 } else { 1 } {
                    uplink += 1;
                    let capacity = if rng.random_bool(0.2) {
                        Capacity::UNKNOWN
                    } else {
                        Capacity::new(
                            f64::from(rng.random_range(1..=8u32)) * 100.0,
                            CapacitySource::Link,
                        )
                        .unwrap()
                    };
                    m.uplinks.insert(
                        uplink,
                        Uplink {
                            spine: node(0, s),
                            capacity,
                        },
                    );
                    l.set_up(uplink, !rng.random_bool(0.05));
                    if rng.random_bool(0.3) {
                        l.set(uplink, rng.random());
                    }
                }
            }
            let ids: Vec<UplinkId> = m.uplinks.keys().copied().collect();
            let mut t = BTreeMap::new();
            let mut keys = vec![GroupKey::default()];
            for r in 100..106u32 {
                let advertisers = (1..=spines).chain((rng.random_bool(0.1)).then_some(50));
                for s in advertisers {
                    let links = match rng.random_range(0..100) {
                        0..8 if r != 100 => 0,
                        8..13 => 2,
                        _ => 1,
                    };
                    for link in 0..links {
                        let at = if rng.random_bool(0.05) { 0 } else { 900 };
                        t.insert(key(s, r, link), value(rng.random(), at));
                    }
                }
                for &u in &ids {
                    if rng.random_bool(0.2) {
                        let c = Capacity::new(
                            f64::from(rng.random_range(1..=9u32)) * 50.0,
                            CapacitySource::Bgp,
                        );
                        m.remote_capacity.insert((node(0, r), u), c.unwrap());
                    }
                }
                keys.push(GroupKey::remote(node(0, r)));
                if rng.random_bool(0.3) {
                    let eligible: Vec<UplinkId> = ids
                        .iter()
                        .copied()
                        .filter(|_| rng.random_bool(0.7))
                        .collect();
                    keys.push(GroupKey {
                        eligible: Some(eligible),
                        ..GroupKey::remote(node(0, r))
                    });
                }
            }
            keys.push(GroupKey::remote(node(0, 200)));
            keys.sort();
            let snap = PathSnapshot::from_map(&t, 1_000, cfg.dead_interval_ns(), &BTreeSet::new());
            let general = compute_groups_into(&cfg, &m, &l, &snap, &keys, &mut Vec::new(), false);
            let one_pass = compute_groups_into(&cfg, &m, &l, &snap, &keys, &mut Vec::new(), true);
            assert_eq!(one_pass, general, "run {run}");
            for k in &keys {
                let one_link = k.eligible.is_none()
                    && k.remote.is_some_and(|r| {
                        let e = snap.remote(r);
                        m.uplinks.values().all(|u| e.links(u.spine).len() == 1)
                    });
                if one_link { regular += 1 } else { other += 1 }
            }
        }
        assert!(
            regular > 200 && other > 200,
            "{regular} one-link groups, {other} others"
        );
    }

    /// Taking a step's groups into the last report in one walk gives the report that an
    /// insert per group gives, and hands back exactly the members' vectors replaced: over
    /// random reports, the newer groups replacing some, adding others (before, between and
    /// after the last report's), or none.
    #[test]
    fn replaced_groups_are_those_inserts_replace() {
        use rand::{Rng, SeedableRng, rngs::SmallRng};
        let mut rng = SmallRng::seed_from_u64(41);
        let quality = |rng: &mut SmallRng, n: u32| DestinationQuality {
            source: QualitySource::Remote,
            members: (0..rng.random_range(0..4))
                .map(|i| MemberQuality {
                    uplink: n * 10 + i,
                    spine: node(0, i),
                    capacity: Capacity::UNKNOWN,
                    local: 255,
                    remote: Some(rng.random()),
                    quality: rng.random(),
                    gray_failure: false,
                })
                .collect(),
        };
        let (mut replaced, mut added) = (0, 0);
        for _ in 0..500 {
            let mut last = PathQualityReport::default();
            for r in 0..40 {
                if rng.random_bool(0.5) {
                    last.groups
                        .insert(GroupKey::remote(node(0, r)), quality(&mut rng, r));
                }
            }
            let mut newer = BTreeMap::new();
            for r in 0..40 {
                if rng.random_bool(0.3) {
                    newer.insert(GroupKey::remote(node(0, r)), quality(&mut rng, r + 100));
                }
            }
            let mut want = last.clone();
            let mut want_spare = Vec::new();
            for (k, q) in newer.clone() {
                match want.groups.insert(k, q) {
                    Some(old) => {
                        want_spare.push(old.members);
                        replaced += 1;
                    }
                    None => added += 1,
                }
            }
            let mut spare = Vec::new();
            last.replace_groups(newer, &mut spare);
            assert_eq!(last, want);
            assert_eq!(spare, want_spare);
        }
        assert!(
            replaced > 1_000 && added > 1_000,
            "{replaced} replaced, {added} added"
        );
    }

    /// The slow plane's capacities are read with one range per group, walked beside the
    /// uplinks: the same capacities as a search per member, with other remote nodes'
    /// capacities on both sides in the map, some uplinks without one, and a group whose
    /// slow plane permits only some uplinks.
    #[test]
    fn remote_capacities_are_each_members_own() {
        let (mut m, l) = fabric();
        let cap = |g| Capacity::new(g, CapacitySource::Bgp).unwrap();
        for (r, u, g) in [
            (103, 11, 10.0),
            (103, 14, 20.0),
            (104, 12, 30.0),
            (104, 14, 40.0),
            (104, 99, 50.0),
            (105, 11, 60.0),
        ] {
            m.remote_capacity.insert((node(0, r), u), cap(g));
        }
        let mut t = BTreeMap::new();
        for s in 1..=4 {
            t.insert(key(s, 104, 1), value(200, 0));
        }
        let cfg = ControllerConfig::default();
        let snap = PathSnapshot::from_map(&t, 0, cfg.dead_interval_ns(), &BTreeSet::new());
        let every = GroupKey::remote(node(0, 104));
        let some = GroupKey {
            eligible: Some(vec![11, 14]),
            ..every.clone()
        };
        let r = compute_some_groups(&cfg, &m, &l, &snap, [&every, &some]);
        for k in [&every, &some] {
            let got: Vec<(UplinkId, Capacity)> = r.groups[k]
                .members
                .iter()
                .map(|x| (x.uplink, x.capacity))
                .collect();
            let want: Vec<(UplinkId, Capacity)> = (m.uplinks.iter())
                .filter(|(u, _)| k.eligible.as_ref().is_none_or(|e| e.contains(u)))
                .map(|(&u, up)| {
                    let remote = m.remote_capacity.get(&(node(0, 104), u)).copied();
                    (u, Capacity::path(up.capacity, remote))
                })
                .collect();
            assert_eq!(got, want, "{k:?}");
        }
        assert_eq!(r.groups[&every].members[1].capacity, cap(30.0));
        assert_eq!(r.groups[&some].members[1].capacity, cap(40.0));
    }

    #[test]
    fn the_gray_failure_prune_takes_a_lossy_idle_path_out_and_only_when_asked() {
        use crate::core::controller::config::GrayFailurePrune;
        let (mut m, l) = fabric();
        let r4 = node(0, 104);
        // The slow plane's capacity of every path to R4: 100 Gbit/s (the remote link's,
        // smaller than the 400 G uplinks).
        for u in 11..=14 {
            m.remote_capacity.insert(
                (r4, u),
                Capacity::new(100.0, CapacitySource::Config).unwrap(),
            );
        }
        let entry = |lqs, cl, available_gbps: f32| PathValue {
            last_update_ns: 0,
            lqs,
            cl,
            available_bandwidth_bits: available_gbps.to_bits(),
            ..Default::default()
        };
        let mut t = BTreeMap::new();
        // S1: healthy. S2: loss while 99 of 100 Gbit/s are free (Appendix A.4 with X = 1
        // and U ~ 0.01: LQS 25): a failing link. S3: loss at 95 % utilisation (LQS 1): a
        // congested link. S4: loss, exactly half free.
        t.insert(key(1, 104, 7), entry(240, 0, 90.0));
        t.insert(key(2, 104, 7), entry(25, 7, 99.0));
        t.insert(key(3, 104, 7), entry(1, 7, 5.0));
        t.insert(key(4, 104, 7), entry(12, 7, 50.0));
        let seed = ControllerConfig::default();
        let r = run(&seed, &m, &l, &t, 0);
        // Section 6.3 as written: every LQS is its path quality, nothing is pruned.
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 25, 1, 12]);
        assert!(
            of(&r, &m, prefix(4))
                .members
                .iter()
                .all(|x| !x.gray_failure)
        );
        let on = ControllerConfig {
            gray_failure: Some(GrayFailurePrune { min_available: 0.5 }),
            ..seed
        };
        let r = run(&on, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 0, 1, 0]);
        let gray: Vec<bool> = of(&r, &m, prefix(4))
            .members
            .iter()
            .map(|x| x.gray_failure)
            .collect();
        assert_eq!(gray, [false, true, false, true]);
        // The remote LQS is kept for the views.
        assert_eq!(of(&r, &m, prefix(4)).members[1].remote, Some(25));
        // The default threshold (0.9) keeps the half-free link.
        let strict = ControllerConfig {
            gray_failure: Some(GrayFailurePrune::default()),
            ..seed
        };
        let r = run(&strict, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 0, 1, 12]);
        // Without the slow plane's capacity the member's path capacity is the reference
        // (the 400 G uplink: 99 is not half of it); with none known, nothing is pruned.
        m.remote_capacity.clear();
        let r = run(&on, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 25, 1, 12]);
        for u in m.uplinks.values_mut() {
            u.capacity = Capacity::UNKNOWN;
        }
        let r = run(&on, &m, &l, &t, 0);
        assert_eq!(qualities(&r, &m, prefix(4)), [240, 25, 1, 12]);
    }
}
