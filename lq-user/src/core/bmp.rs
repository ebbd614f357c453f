//! The NNH mapping learned from BGP through BMP (RFC 7854), seed 003 section 6.1: "It MAY
//! be learned dynamically". In an RFC 7938 fabric every leaf has an AS of its own, so the
//! origin AS of a route's AS_PATH names the leaf behind the prefix; with AS-qualified LQ
//! entries (section 6.2: the key carries `remote-as`) that AS picks the remote node among
//! the entries a leaf receives.
//!
//! Beside the origin, each route's BGP next hop and its BGP Link Bandwidth extended
//! community (RFC 10005, formerly draft-ietf-idr-link-bandwidth) are kept: the slow plane's
//! static capacity (seed 003 section 4.1: the weight combines FARE's capacity with the
//! fast plane's quality). Three encodings are read (the private fn `link_bandwidth` says
//! how): the two-octet-AS form, transitive (type 0x00) and non-transitive (0x40), sub-type
//! 0x04, an IEEE 754 binary32 in bytes per second (what FRR's `set extcommunity bandwidth`
//! sends), and FRR's IPv6 Address Specific form (attribute type 25, `neighbor X
//! extended-link-bandwidth`), a 64-bit integer in bytes per second.
//!
//! Pure: [`Framer`] cuts a BMP byte stream into whole messages (bounded), [`decode`] parses
//! one with `bgpkit-parser`, and [`OriginTable`] keeps, per BMP session and monitored peer,
//! the origin AS, BGP next hop and Link Bandwidth of every prefix the peer announced, and
//! answers one origin per prefix ([`OriginTable::origins`]) and one capacity per prefix and
//! next hop ([`OriginTable::bandwidths`]). The TCP station that feeds them is
//! [`crate::transport::bmp`].

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use bgpkit_parser::{
    models::{
        AsPath, AttributeValue, Attributes, BgpMessage, ExtendedCommunity, Ipv6AddrExtCommunity,
        NetworkPrefix, NextHopAddress,
    },
    parser::bmp::{
        messages::{BmpMessage, BmpMessageBody, PeerFlags, PerPeerFlags},
        parse_bmp_msg,
    },
};

use crate::core::controller::path_quality::{NodeId, Prefix, node};

/// BMP common header: version (1), message length (4), type (1) (RFC 7854 section 4.1).
pub const COMMON_HEADER_LEN: usize = 6;

/// The longest BMP message accepted. A Peer Up carries two BGP OPENs (at most 4096 octets
/// each, 65535 with RFC 8654 extended messages) and information TLVs; a Route Monitoring
/// one UPDATE: 256 KiB holds either with room. A longer declared length is an error, and
/// the session ends (a TCP stream cannot be resynchronised), so a station's buffer never
/// holds more than this plus one read.
pub const MAX_MESSAGE_LEN: usize = 256 * 1024;

/// Errors of the BMP input path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BmpError {
    /// Not BMP version 3 (RFC 7854 section 4.1): the stream is not BMP or out of step.
    #[error("BMP version {0}, expected 3")]
    Version(u8),
    /// A declared length below the common header or above [`MAX_MESSAGE_LEN`].
    #[error("BMP message length {0} outside 6..={MAX_MESSAGE_LEN}")]
    Length(u32),
    /// The parser refused a framed message.
    #[error("BMP message not parsed: {0}")]
    Parse(String),
}

impl BmpError {
    /// Whether the stream can go on after this error: a framing error cannot.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Version(_) | Self::Length(_))
    }
}

/// Cuts a byte stream into whole BMP messages.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
}

impl Framer {
    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes held (at most [`MAX_MESSAGE_LEN`] plus one push when the caller drains).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `None` when more bytes are needed. An error is fatal
    /// (framing lost): the caller ends the session.
    pub fn next_message(&mut self) -> Option<Result<Vec<u8>, BmpError>> {
        if self.buf.len() < COMMON_HEADER_LEN {
            return None;
        }
        if self.buf[0] != 3 {
            return Some(Err(BmpError::Version(self.buf[0])));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let n = len as usize;
        if !(COMMON_HEADER_LEN..=MAX_MESSAGE_LEN).contains(&n) {
            return Some(Err(BmpError::Length(len)));
        }
        if self.buf.len() < n {
            return None;
        }
        let rest = self.buf.split_off(n);
        Some(Ok(std::mem::replace(&mut self.buf, rest)))
    }
}

/// Parses one framed BMP message.
pub fn decode(frame: &[u8]) -> Result<BmpMessage, BmpError> {
    let mut data = bytes::Bytes::copy_from_slice(frame);
    parse_bmp_msg(&mut data).map_err(|e| BmpError::Parse(e.to_string()))
}

/// A monitored peer within one BMP session (RFC 7854 section 4.2: type, distinguisher and
/// address name the peer; pre- and post-policy views are separate RIBs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerKey {
    /// The station's session number.
    pub session: u64,
    /// Peer type (0 global, 1 RD instance, 2 local instance, 3 Loc-RIB).
    pub peer_type: u8,
    /// Peer distinguisher.
    pub distinguisher: u64,
    /// Peer address.
    pub addr: IpAddr,
    /// The L flag: post-policy Adj-RIB-In.
    pub post_policy: bool,
}

/// Counters of the BMP input, all monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Counters {
    /// Messages parsed.
    pub messages: u64,
    /// Messages the parser refused (the session goes on) or that lost the framing (the
    /// session ends).
    pub bad_messages: u64,
    /// Route Monitoring messages applied.
    pub route_monitoring: u64,
    /// Prefixes announced.
    pub announced: u64,
    /// Prefixes withdrawn.
    pub withdrawn: u64,
    /// Peer Up notifications.
    pub peer_up: u64,
    /// Peer Down notifications.
    pub peer_down: u64,
    /// Messages of no use to the mapping: Adj-RIB-Out, route mirroring, statistics,
    /// initiation, termination, non-UPDATE BGP messages.
    pub ignored: u64,
    /// Announcements whose AS_PATH names no single origin (empty: our own AS; ending in an
    /// AS_SET): kept as "no origin".
    pub no_origin: u64,
    /// Link Bandwidth communities ignored for their value: not finite (infinite, NaN) or
    /// negative. One per community, per announcing UPDATE.
    pub bad_link_bandwidth: u64,
    /// Valid Link Bandwidth communities ignored because an earlier one of the same UPDATE
    /// (attribute order: extended communities before IPv6 Address Specific ones) carried a
    /// different value: the route keeps the first. One per community, per announcing
    /// UPDATE; a repeat of the kept value is not counted.
    pub link_bandwidth_differing: u64,
}

/// One route of a monitored peer: what an announcement of the prefix said.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Route {
    /// The origin AS, `None` when the AS_PATH names no single one.
    origin: Option<u32>,
    /// The BGP next hop: NEXT_HOP for the UPDATE's own NLRI, MP_REACH_NLRI's next hop for
    /// its prefixes; the peer's address when the UPDATE has neither.
    next_hop: IpAddr,
    /// The Link Bandwidth, bytes per second: finite and not negative (never NaN, so the
    /// derived equality is an equivalence on what is stored).
    bandwidth: Option<f64>,
}

/// Origin AS, BGP next hop and Link Bandwidth per prefix, per monitored peer of every
/// session.
#[derive(Clone, Debug, Default)]
pub struct OriginTable {
    routes: BTreeMap<PeerKey, BTreeMap<Prefix, Route>>,
    /// Counters.
    pub counters: Counters,
}

/// What the station publishes to the daemon loop: the learned origins and capacities, and
/// the counters.
///
/// Equality compares the capacities bit for bit (`f64::to_bits`), which makes it an
/// equivalence (`Eq`); [`OriginTable::bandwidths`] never yields NaN nor -0.0, so on what
/// the station publishes that is the same as comparing the numbers.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Prefix -> the one origin AS its announcing peers agree on.
    pub origins: Arc<BTreeMap<Prefix, u32>>,
    /// (prefix, BGP next hop) -> the route's capacity from its Link Bandwidth community,
    /// in Gbit/s (bytes per second x 8 / 1e9), from every monitored peer's routes
    /// ([`OriginTable::bandwidths`]). Routes without the community have no entry.
    pub bandwidths: Arc<BTreeMap<(Prefix, IpAddr), f64>>,
    /// Prefixes whose peers name different origin ASes (anycast, or a fabric that is not
    /// one AS per leaf): no mapping learned for them.
    pub conflicting: u64,
    /// (prefix, next hop) pairs whose peers or sessions give different Link Bandwidths:
    /// the smaller is published.
    pub bandwidth_conflicts: u64,
    /// Open BMP sessions.
    pub sessions: u64,
    /// Sessions accepted since start.
    pub sessions_accepted: u64,
    /// Connections refused (more than the station serves at once).
    pub sessions_refused: u64,
    /// Monitored peers with routes.
    pub peers: u64,
    /// Counters of the messages.
    pub counters: Counters,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        // Destructured so that a new field cannot be left out of the comparison.
        let Self {
            origins,
            bandwidths,
            conflicting,
            bandwidth_conflicts,
            sessions,
            sessions_accepted,
            sessions_refused,
            peers,
            counters,
        } = self;
        origins == &other.origins
            && bandwidths.len() == other.bandwidths.len()
            && bandwidths
                .iter()
                .zip(other.bandwidths.iter())
                .all(|((ka, va), (kb, vb))| ka == kb && va.to_bits() == vb.to_bits())
            && *conflicting == other.conflicting
            && *bandwidth_conflicts == other.bandwidth_conflicts
            && *sessions == other.sessions
            && *sessions_accepted == other.sessions_accepted
            && *sessions_refused == other.sessions_refused
            && *peers == other.peers
            && *counters == other.counters
    }
}

impl Eq for Snapshot {}

fn prefix_of(n: &NetworkPrefix) -> Prefix {
    Prefix {
        addr: n.prefix.addr(),
        len: n.prefix.prefix_len(),
    }
}

/// The origin AS (RFC 4271 section 5.1.2: the last AS of the path): the last AS of a
/// final AS_SEQUENCE, or the only member of a final AS_SET.
fn origin_of(path: Option<&AsPath>) -> Option<u32> {
    path.and_then(AsPath::get_origin_opt).map(u32::from)
}

/// MP_REACH_NLRI's next hop as one address: the global one of an RFC 2545 pair (global and
/// link-local, either order); the link-local one when the global half is unspecified
/// (`::`, as a router with no global address on the link may send).
fn mp_next_hop(nh: &NextHopAddress) -> IpAddr {
    match (nh.global_addr(), nh.link_local_addr()) {
        (IpAddr::V6(g), Some(ll)) if g.is_unspecified() => IpAddr::V6(ll),
        (g, _) => g,
    }
}

/// The type octets of FRR's Link Bandwidth in an IPv6 Address Specific Extended Community
/// (attribute type 25, RFC 5701's 20-octet layout): `ECOMMUNITY_ENCODE_AS4` (0x02), with
/// `ECOMMUNITY_FLAG_NON_TRANSITIVE` (0x40) for the non-transitive variant FRR's encoder can
/// write (its reader, `ecommunity_linkbw_present`, accepts 0x02 only; both are read here).
const EXTENDED_LINK_BANDWIDTH_TYPES: [u8; 2] = [0x02, 0x42];

/// The sub-type of FRR's extended Link Bandwidth: `ECOMMUNITY_EXTENDED_LINK_BANDWIDTH`
/// (0x06; draft-li-idr-link-bandwidth-ext).
const EXTENDED_LINK_BANDWIDTH_SUBTYPE: u8 = 0x06;

/// The bandwidth of FRR's extended Link Bandwidth community, bytes per second, `None` for
/// any other IPv6 Address Specific community.
///
/// The layout, from FRR's `bgpd/bgp_ecommunity.h` (`encode_lb_extended_extcomm`, written
/// into the IPv6 extended communities attribute by `bgp_route.c` when the peer has
/// `PEER_FLAG_EXTENDED_LINK_BANDWIDTH`) and read back the same way by `bgp_ecommunity.c`
/// (`ecommunity_linkbw_present`, `ipv6_ecommunity_lb_str`), of the 20 octets
/// (`IPV6_ECOMMUNITY_SIZE`): type (1), sub-type (1), reserved (2, zero), the bandwidth as
/// an unsigned 64-bit big-endian integer in bytes per second (8), the AS as 4 octets (4),
/// zero (4). Not an IEEE float, unlike the 8-octet form. bgpkit-parser 0.23 reads the
/// attribute as `AttributeValue::Ipv6AddressSpecificExtendedCommunities` of
/// `Ipv6AddrExtCommunity` with RFC 5701's split (type, sub-type, a 16-octet "IPv6 address"
/// = octets 2..18, 2 local octets), so the bandwidth is octets 2..10 of that address.
fn extended_link_bandwidth(c: &Ipv6AddrExtCommunity) -> Option<u64> {
    if !EXTENDED_LINK_BANDWIDTH_TYPES.contains(&u8::from(c.community_type))
        || c.subtype != EXTENDED_LINK_BANDWIDTH_SUBTYPE
    {
        return None;
    }
    let o = c.global_admin.octets();
    Some(u64::from_be_bytes([
        o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9],
    ]))
}

/// The Link Bandwidth of an UPDATE's routes, bytes per second: the first valid one of its
/// communities, in attribute order, among
/// - the two-octet-AS Link Bandwidth extended community (RFC 10005; type 0x00 transitive,
///   0x40 non-transitive; sub-type 0x04: 2-octet AS, IEEE 754 binary32 bytes per second),
///   which bgpkit-parser 0.23 decodes as `ExtendedCommunity::LinkBandwidth` (its
///   `bandwidth: f32`) in `AttributeValue::ExtendedCommunities` (attribute type 16);
/// - FRR's extended form in the IPv6 Address Specific Extended Communities attribute
///   (type 25), see [`extended_link_bandwidth`].
///
/// A value that is not finite (infinite, NaN) or negative is ignored and counted in
/// `bad_link_bandwidth`; a valid one that differs from the one kept is counted in
/// `link_bandwidth_differing`. FRR's non-standard `disable-link-bw-encoding-ieee` sends
/// the 8-octet form's value as an integer: read as a float it is a tiny number, which
/// cannot be told from a real one and is taken as it reads.
fn link_bandwidth(attrs: &Attributes, counters: &mut Counters) -> Option<f64> {
    let mut kept: Option<f64> = None;
    let mut take = |raw: f64| {
        if !raw.is_finite() || raw < 0.0 {
            counters.bad_link_bandwidth += 1;
            return;
        }
        // -0.0 is 0.0: one value, one bit pattern.
        let v = raw.abs();
        match kept {
            None => kept = Some(v),
            Some(k) if k.to_bits() != v.to_bits() => counters.link_bandwidth_differing += 1,
            Some(_) => {}
        }
    };
    for value in attrs {
        match value {
            AttributeValue::ExtendedCommunities(cs) => {
                for c in cs {
                    if let ExtendedCommunity::LinkBandwidth(lb) = c {
                        take(f64::from(lb.bandwidth));
                    }
                }
            }
            AttributeValue::Ipv6AddressSpecificExtendedCommunities(cs) => {
                for bw in cs.iter().filter_map(extended_link_bandwidth) {
                    // Exact up to 2^53 bytes per second (72 Pbit/s).
                    take(bw as f64);
                }
            }
            _ => {}
        }
    }
    kept
}

/// Gbit/s from bytes per second.
fn gbps(bytes_per_second: f64) -> f64 {
    bytes_per_second * 8.0 / 1e9
}

impl OriginTable {
    /// Applies one message of session `session`. Returns whether the routes may have
    /// changed: a prefix learned or forgotten, or its origin AS, BGP next hop or Link
    /// Bandwidth changed.
    pub fn apply(&mut self, session: u64, msg: &BmpMessage) -> bool {
        self.counters.messages += 1;
        let Some(peer) = msg.per_peer_header.as_ref() else {
            // Initiation and termination: nothing about routes.
            self.counters.ignored += 1;
            return false;
        };
        let flags = match peer.peer_flags {
            PerPeerFlags::PeerFlags(f) => f,
            PerPeerFlags::LocalRibPeerFlags(_) => PeerFlags::empty(),
        };
        let key = PeerKey {
            session,
            peer_type: u8::from(peer.peer_type),
            distinguisher: peer.peer_distinguisher,
            addr: peer.peer_ip,
            post_policy: flags.contains(PeerFlags::IS_POST_POLICY),
        };
        match &msg.message_body {
            BmpMessageBody::RouteMonitoring(rm) => {
                // Adj-RIB-Out (RFC 8671) holds what this router sends, not what it learns.
                if flags.contains(PeerFlags::IS_ADJ_RIB_OUT) {
                    self.counters.ignored += 1;
                    return false;
                }
                let BgpMessage::Update(u) = &rm.bgp_message else {
                    self.counters.ignored += 1;
                    return false;
                };
                self.counters.route_monitoring += 1;
                let attrs = &u.attributes;
                let origin = origin_of(attrs.effective_as_path().as_ref());
                let withdrawn = u
                    .withdrawn_prefixes
                    .iter()
                    .chain(
                        attrs
                            .get_unreachable_nlri()
                            .into_iter()
                            .flat_map(|n| n.prefixes.iter()),
                    )
                    .map(prefix_of);
                // The UPDATE's own NLRI goes by NEXT_HOP, MP_REACH_NLRI's by its own next
                // hop (RFC 4760 section 3); the peer's address when there is none.
                let nlri_next_hop = attrs.next_hop().unwrap_or(key.addr);
                let mp = attrs.get_reachable_nlri();
                let mp_nh = mp
                    .and_then(|n| n.next_hop.as_ref())
                    .map(mp_next_hop)
                    .unwrap_or(nlri_next_hop);
                let announced: Vec<(Prefix, IpAddr)> = u
                    .announced_prefixes
                    .iter()
                    .map(|n| (prefix_of(n), nlri_next_hop))
                    .chain(
                        mp.into_iter()
                            .flat_map(|n| n.prefixes.iter())
                            .map(|n| (prefix_of(n), mp_nh)),
                    )
                    .collect();
                let bandwidth = if announced.is_empty() {
                    None
                } else {
                    link_bandwidth(attrs, &mut self.counters)
                };
                let rib = self.routes.entry(key).or_default();
                let mut changed = false;
                for p in withdrawn {
                    self.counters.withdrawn += 1;
                    changed |= rib.remove(&p).is_some();
                }
                if !announced.is_empty() && origin.is_none() {
                    self.counters.no_origin += 1;
                }
                for (p, next_hop) in announced {
                    self.counters.announced += 1;
                    let route = Route {
                        origin,
                        next_hop,
                        bandwidth,
                    };
                    changed |= rib.insert(p, route) != Some(route);
                }
                if rib.is_empty() {
                    self.routes.remove(&key);
                }
                changed
            }
            BmpMessageBody::PeerDownNotification(_) => {
                // RFC 7854 section 4.9: the peer's routes are gone with its session.
                self.counters.peer_down += 1;
                self.drop_peer(|k| {
                    k.session == session
                        && k.peer_type == key.peer_type
                        && k.distinguisher == key.distinguisher
                        && k.addr == key.addr
                })
            }
            BmpMessageBody::PeerUpNotification(_) => {
                // A peer that comes up again starts from an empty RIB (its earlier session
                // may have ended without a Peer Down reaching us).
                self.counters.peer_up += 1;
                self.drop_peer(|k| {
                    k.session == session
                        && k.peer_type == key.peer_type
                        && k.distinguisher == key.distinguisher
                        && k.addr == key.addr
                })
            }
            _ => {
                self.counters.ignored += 1;
                false
            }
        }
    }

    fn drop_peer(&mut self, gone: impl Fn(&PeerKey) -> bool) -> bool {
        let before = self.routes.len();
        self.routes.retain(|k, _| !gone(k));
        before != self.routes.len()
    }

    /// A BMP session ended: every peer it monitored is forgotten (RFC 7854 section 3.3:
    /// the station's view of the router is gone with the session).
    pub fn end_session(&mut self, session: u64) -> bool {
        self.drop_peer(|k| k.session == session)
    }

    /// Counts a message the framer or the parser refused.
    pub fn bad_message(&mut self) {
        self.counters.bad_messages += 1;
    }

    /// Monitored peers with routes.
    pub fn peers(&self) -> usize {
        self.routes.len()
    }

    /// Per prefix the one origin AS its announcing peers agree on, and how many prefixes
    /// have conflicting origins (left without a mapping, section 6.1).
    pub fn origins(&self) -> (BTreeMap<Prefix, u32>, u64) {
        let mut all: BTreeMap<Prefix, BTreeSet<u32>> = BTreeMap::new();
        for rib in self.routes.values() {
            for (p, route) in rib {
                if let Some(a) = route.origin {
                    all.entry(*p).or_default().insert(a);
                }
            }
        }
        let mut conflicting = 0;
        let mut out = BTreeMap::new();
        for (p, set) in all {
            match set.first() {
                Some(a) if set.len() == 1 => {
                    out.insert(p, *a);
                }
                _ => conflicting += 1,
            }
        }
        (out, conflicting)
    }

    /// Per (prefix, BGP next hop) the capacity its Link Bandwidth community gives, in
    /// Gbit/s (bytes per second x 8 / 1e9), from every monitored peer's routes, and how
    /// many (prefix, next hop) pairs are given different values by different peers or
    /// sessions (the smaller is kept: a capacity is not overstated). A peer's pre-policy
    /// route is left out when the same peer's post-policy view holds the prefix: the
    /// router uses what its inbound policy made of the route, which may set or strip the
    /// community. Values are finite, not negative, never -0.0.
    pub fn bandwidths(&self) -> (BTreeMap<(Prefix, IpAddr), f64>, u64) {
        let mut all: BTreeMap<(Prefix, IpAddr), (f64, bool)> = BTreeMap::new();
        for (key, rib) in &self.routes {
            let post = if key.post_policy {
                None
            } else {
                self.routes.get(&PeerKey {
                    post_policy: true,
                    ..*key
                })
            };
            for (p, route) in rib {
                let Some(bytes) = route.bandwidth else {
                    continue;
                };
                if post.is_some_and(|r| r.contains_key(p)) {
                    continue;
                }
                let v = gbps(bytes);
                all.entry((*p, route.next_hop))
                    .and_modify(|(kept, conflict)| {
                        if kept.to_bits() != v.to_bits() {
                            *conflict = true;
                            *kept = kept.min(v);
                        }
                    })
                    .or_insert((v, false));
            }
        }
        let conflicts = all.values().filter(|(_, c)| *c).count() as u64;
        (
            all.into_iter().map(|(k, (v, _))| (k, v)).collect(),
            conflicts,
        )
    }
}

/// The remote node an origin AS names (seed 003 sections 6.1, 6.2): the one remote node
/// of that AS among the LQ entries received. `None` when no entry has that remote AS (no
/// spine advertises the leaf yet: local-only quality until one does) or when several
/// remote nodes share it (not one AS per leaf: no mapping rather than a guess).
pub fn remote_of_origin(origin_as: u32, remotes: &BTreeSet<NodeId>) -> Option<NodeId> {
    // The set orders by AS first: the AS's nodes are one range, not a walk of the set
    // (512 remote nodes for each of 1 024 destinations at every resolve).
    let mut of_as = remotes.range(node(origin_as, 0)..=node(origin_as, u32::MAX));
    match (of_as.next(), of_as.next()) {
        (Some(one), None) => Some(*one),
        _ => None,
    }
}

/// Fixtures for tests and the fuzz seed: BMP messages as FRR's bgpd sends them.
pub mod fixtures {
    /// A BGP UPDATE (RFC 4271 section 4.3) with 4-octet ASes: `announced` with AS_PATH
    /// `path` (one AS_SEQUENCE) and next hop `next_hop`, and `withdrawn`.
    pub fn update(
        path: &[u32],
        next_hop: [u8; 4],
        announced: &[([u8; 4], u8)],
        withdrawn: &[([u8; 4], u8)],
    ) -> Vec<u8> {
        update_with(path, next_hop, announced, withdrawn, &[])
    }

    /// As [`update`], with `extra` whole path attributes (see [`attribute`],
    /// [`ext_communities`], [`ipv6_ext_communities`], [`mp_reach_ipv6`]) after the others.
    /// ORIGIN and AS_PATH are present when `announced` or `extra` is not empty, NEXT_HOP
    /// when `announced` is not empty.
    pub fn update_with(
        path: &[u32],
        next_hop: [u8; 4],
        announced: &[([u8; 4], u8)],
        withdrawn: &[([u8; 4], u8)],
        extra: &[u8],
    ) -> Vec<u8> {
        let nlri = |ps: &[([u8; 4], u8)]| {
            let mut v = Vec::new();
            for (a, len) in ps {
                v.push(*len);
                v.extend_from_slice(&a[..usize::from(len.div_ceil(8))]);
            }
            v
        };
        let wd = nlri(withdrawn);
        let mut attrs = Vec::new();
        if !announced.is_empty() || !extra.is_empty() {
            attrs.extend_from_slice(&[0x40, 1, 1, 0]); // ORIGIN IGP
            let mut seg = vec![2u8, path.len() as u8];
            for a in path {
                seg.extend_from_slice(&a.to_be_bytes());
            }
            attrs.extend_from_slice(&[0x40, 2, seg.len() as u8]);
            attrs.extend_from_slice(&seg);
        }
        if !announced.is_empty() {
            attrs.extend_from_slice(&[0x40, 3, 4]);
            attrs.extend_from_slice(&next_hop);
        }
        attrs.extend_from_slice(extra);
        let ann = nlri(announced);
        let len = 19 + 2 + wd.len() + 2 + attrs.len() + ann.len();
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&(len as u16).to_be_bytes());
        m.push(2);
        m.extend_from_slice(&(wd.len() as u16).to_be_bytes());
        m.extend_from_slice(&wd);
        m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        m.extend_from_slice(&attrs);
        m.extend_from_slice(&ann);
        m
    }

    /// A path attribute: `flags` (the Extended Length bit is added when `value` needs it),
    /// type `code`, `value`.
    pub fn attribute(flags: u8, code: u8, value: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        if value.len() > 255 {
            a.extend_from_slice(&[flags | 0x10, code]);
            a.extend_from_slice(&(value.len() as u16).to_be_bytes());
        } else {
            a.extend_from_slice(&[flags, code, value.len() as u8]);
        }
        a.extend_from_slice(value);
        a
    }

    /// The EXTENDED COMMUNITIES attribute (type 16, optional transitive, RFC 4360).
    pub fn ext_communities(cs: &[[u8; 8]]) -> Vec<u8> {
        attribute(0xc0, 16, &cs.concat())
    }

    /// The IPv6 Address Specific Extended Community attribute (type 25, optional
    /// transitive, RFC 5701).
    pub fn ipv6_ext_communities(cs: &[[u8; 20]]) -> Vec<u8> {
        attribute(0xc0, 25, &cs.concat())
    }

    /// The two-octet-AS Link Bandwidth extended community (RFC 10005): type 0x00
    /// (transitive) or 0x40, sub-type 0x04, AS `asn`, IEEE 754 binary32 bytes per second.
    pub fn link_bandwidth_community(transitive: bool, asn: u16, bytes_per_second: f32) -> [u8; 8] {
        let mut c = [0u8; 8];
        c[0] = if transitive { 0x00 } else { 0x40 };
        c[1] = 0x04;
        c[2..4].copy_from_slice(&asn.to_be_bytes());
        c[4..8].copy_from_slice(&bytes_per_second.to_bits().to_be_bytes());
        c
    }

    /// FRR's Link Bandwidth in an IPv6 Address Specific Extended Community (transitive,
    /// type 0x02, sub-type 0x06): reserved (2), bytes per second as a 64-bit integer (8),
    /// AS `asn` (4), zero (4).
    pub fn extended_link_bandwidth_community(asn: u32, bytes_per_second: u64) -> [u8; 20] {
        let mut c = [0u8; 20];
        c[0] = 0x02;
        c[1] = 0x06;
        c[4..12].copy_from_slice(&bytes_per_second.to_be_bytes());
        c[12..16].copy_from_slice(&asn.to_be_bytes());
        c
    }

    /// MP_REACH_NLRI (type 14, optional, RFC 4760) for IPv6 unicast: next hop `next_hop`
    /// (16 octets, or 32 for a global and link-local pair, RFC 2545) and `announced`.
    pub fn mp_reach_ipv6(next_hop: &[u8], announced: &[([u8; 16], u8)]) -> Vec<u8> {
        let mut v = vec![0, 2, 1, next_hop.len() as u8];
        v.extend_from_slice(next_hop);
        v.push(0);
        for (a, len) in announced {
            v.push(*len);
            v.extend_from_slice(&a[..usize::from(len.div_ceil(8))]);
        }
        attribute(0x80, 14, &v)
    }

    /// A BMP message of `kind` (0 Route Monitoring, 2 Peer Down, 3 Peer Up) with a
    /// per-peer header for IPv4 peer `peer` in AS `peer_as`, post-policy, 4-octet ASes.
    pub fn bmp(kind: u8, peer: [u8; 4], peer_as: u32, body: &[u8]) -> Vec<u8> {
        bmp_view(kind, true, peer, peer_as, body)
    }

    /// As [`bmp`], of the post-policy (L flag) or the pre-policy Adj-RIB-In.
    pub fn bmp_view(
        kind: u8,
        post_policy: bool,
        peer: [u8; 4],
        peer_as: u32,
        body: &[u8],
    ) -> Vec<u8> {
        let mut m = vec![3u8, 0, 0, 0, 0, kind];
        m.push(0); // global instance peer
        m.push(if post_policy { 0x40 } else { 0 }); // L: post-policy; A clear: 4-octet ASes
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&[0; 12]);
        m.extend_from_slice(&peer);
        m.extend_from_slice(&peer_as.to_be_bytes());
        m.extend_from_slice(&peer);
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(body);
        let len = (m.len() as u32).to_be_bytes();
        m[1..5].copy_from_slice(&len);
        m
    }

    /// BMP Initiation (type 4) with a sysName TLV.
    pub fn initiation(name: &str) -> Vec<u8> {
        let mut m = vec![3u8, 0, 0, 0, 0, 4];
        m.extend_from_slice(&2u16.to_be_bytes());
        m.extend_from_slice(&(name.len() as u16).to_be_bytes());
        m.extend_from_slice(name.as_bytes());
        let len = (m.len() as u32).to_be_bytes();
        m[1..5].copy_from_slice(&len);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::{fixtures::*, *};
    use crate::core::controller::path_quality::node;

    fn p(a: [u8; 4], len: u8) -> Prefix {
        Prefix {
            addr: IpAddr::from(a),
            len,
        }
    }

    fn feed(t: &mut OriginTable, session: u64, bytes: &[u8]) -> bool {
        let mut f = Framer::default();
        f.push(bytes);
        let mut changed = false;
        while let Some(m) = f.next_message() {
            changed |= t.apply(session, &decode(&m.unwrap()).unwrap());
        }
        changed
    }

    const S1: [u8; 4] = [10, 1, 1, 1];
    const S2: [u8; 4] = [10, 1, 2, 1];

    #[test]
    fn the_origin_as_of_the_path_maps_the_prefix_and_a_withdrawal_or_peer_down_unmaps_it() {
        let mut t = OriginTable::default();
        let a = bmp(
            0,
            S1,
            65001,
            &update(&[65001, 65102], S1, &[([10, 200, 2, 0], 24)], &[]),
        );
        let b = bmp(
            0,
            S2,
            65002,
            &update(&[65002, 65102], S2, &[([10, 200, 2, 0], 24)], &[]),
        );
        let mut stream = initiation("leaf1");
        stream.extend_from_slice(&a);
        stream.extend_from_slice(&b);
        assert!(feed(&mut t, 1, &stream));
        let (o, conflicting) = t.origins();
        assert_eq!(o[&p([10, 200, 2, 0], 24)], 65102);
        assert_eq!(conflicting, 0);
        assert_eq!(t.peers(), 2);
        // Spine 1 withdraws: spine 2 still names the origin.
        feed(
            &mut t,
            1,
            &bmp(
                0,
                S1,
                65001,
                &update(&[], S1, &[], &[([10, 200, 2, 0], 24)]),
            ),
        );
        assert_eq!(t.origins().0.len(), 1);
        // Spine 2's session goes down: nobody announces it any more.
        assert!(feed(&mut t, 1, &bmp(2, S2, 65002, &[4])));
        assert!(t.origins().0.is_empty());
        assert_eq!(t.counters.withdrawn, 1);
        assert_eq!(t.counters.peer_down, 1);
    }

    #[test]
    fn conflicting_origins_and_an_empty_path_map_nothing() {
        let mut t = OriginTable::default();
        feed(
            &mut t,
            1,
            &bmp(
                0,
                S1,
                65001,
                &update(&[65001, 65102], S1, &[([10, 9, 0, 0], 16)], &[]),
            ),
        );
        feed(
            &mut t,
            1,
            &bmp(
                0,
                S2,
                65002,
                &update(&[65002, 65103], S2, &[([10, 9, 0, 0], 16)], &[]),
            ),
        );
        feed(
            &mut t,
            1,
            &bmp(0, S1, 65001, &update(&[], S1, &[([10, 8, 0, 0], 16)], &[])),
        );
        let (o, conflicting) = t.origins();
        assert!(o.is_empty(), "{o:?}");
        assert_eq!(conflicting, 1);
        assert_eq!(t.counters.no_origin, 1);
    }

    #[test]
    fn a_session_end_forgets_its_peers_only() {
        let mut t = OriginTable::default();
        let m = bmp(
            0,
            S1,
            65001,
            &update(&[65001, 65102], S1, &[([10, 2, 0, 0], 16)], &[]),
        );
        feed(&mut t, 1, &m);
        feed(&mut t, 2, &m);
        assert!(t.end_session(1));
        assert_eq!(t.origins().0.len(), 1);
        assert!(t.end_session(2));
        assert!(t.origins().0.is_empty());
    }

    #[test]
    fn framing_errors_are_fatal_and_bounded() {
        let mut f = Framer::default();
        f.push(&[3, 0, 0, 0, 2, 4]);
        assert_eq!(f.next_message(), Some(Err(BmpError::Length(2))));
        let mut f = Framer::default();
        f.push(&[3, 0xff, 0xff, 0xff, 0xff, 0]);
        assert!(f.next_message().unwrap().unwrap_err().is_fatal());
        let mut f = Framer::default();
        f.push(&[1, 0, 0, 0, 6, 4]);
        assert_eq!(f.next_message(), Some(Err(BmpError::Version(1))));
        // A message split over reads comes out whole.
        let m = initiation("x");
        let mut f = Framer::default();
        f.push(&m[..3]);
        assert!(f.next_message().is_none());
        f.push(&m[3..]);
        assert_eq!(f.next_message(), Some(Ok(m)));
        assert_eq!(f.buffered(), 0);
    }

    #[test]
    fn a_truncated_update_is_a_parse_error_not_a_panic() {
        let mut m = bmp(
            0,
            S1,
            65001,
            &update(&[65001], S1, &[([10, 2, 0, 0], 16)], &[]),
        );
        // Cut inside the BGP header (marker): the parser must refuse, not read past it.
        m.truncate(COMMON_HEADER_LEN + 42 + 10);
        let len = (m.len() as u32).to_be_bytes();
        m[1..5].copy_from_slice(&len);
        let got = decode(&m);
        assert!(matches!(got, Err(BmpError::Parse(_))), "{got:?}");
    }

    /// A real session: FRR 8.4.4's bgpd (leaf AS 65101, one eBGP peer AS 65001 announcing
    /// 10.98.2.1/32 and 10.200.2.0/24, then withdrawing the latter), captured on a plain TCP
    /// listener (/work/shared/recipes/frr-netns.md): Initiation, a Peer Down of the peer
    /// not yet up, bgpd's own route (peer address 0, empty AS path), Peer Up, Route
    /// Monitoring. Also the fuzz seed of `bmp_session`.
    #[test]
    fn a_captured_frr_session_parses_whole_and_maps_the_peers_routes() {
        let bytes = include_bytes!("../../tests/golden/frr-8.4.4-session.bmp");
        let mut f = Framer::default();
        f.push(bytes);
        let mut t = OriginTable::default();
        let mut seen = BTreeMap::new();
        let mut mapped_while_up = BTreeMap::new();
        while let Some(m) = f.next_message() {
            let msg = decode(&m.unwrap()).unwrap();
            *seen
                .entry(u8::from(msg.common_header.msg_type))
                .or_insert(0) += 1;
            t.apply(1, &msg);
            mapped_while_up.extend(t.origins().0);
        }
        assert_eq!(f.buffered(), 0);
        assert_eq!(t.counters.bad_messages, 0);
        for kind in [0u8, 2, 3, 4] {
            assert!(seen.contains_key(&kind), "type {kind}: {seen:?}");
        }
        // The peer's routes were learned with origin 65001 (its own networks); bgpd's own
        // (empty AS path) has none; the withdrawal took 10.200.2.0/24 away again.
        assert_eq!(mapped_while_up.get(&p([10, 200, 2, 0], 24)), Some(&65001));
        assert!(!mapped_while_up.contains_key(&p([10, 98, 1, 1], 32)));
        let (now, conflicting) = t.origins();
        assert_eq!(now.get(&p([10, 98, 2, 1], 32)), Some(&65001), "{now:?}");
        assert!(!now.contains_key(&p([10, 200, 2, 0], 24)), "{now:?}");
        assert_eq!(conflicting, 0);
        assert!(t.counters.no_origin >= 1);
        assert!(t.end_session(1));
        assert!(t.origins().0.is_empty());
    }

    #[test]
    fn the_origin_names_the_one_remote_node_of_its_as() {
        let remotes: BTreeSet<NodeId> = [node(65102, 2), node(65103, 3), node(65104, 4)].into();
        assert_eq!(remote_of_origin(65102, &remotes), Some(node(65102, 2)));
        assert_eq!(remote_of_origin(65199, &remotes), None);
        let shared: BTreeSet<NodeId> = [node(65102, 2), node(65102, 5)].into();
        assert_eq!(remote_of_origin(65102, &shared), None);
    }

    // ---------------------------------------------------------------- Link Bandwidth

    /// L4's prefix, as in /work/shared/recipes/frr-ucmp-link-bandwidth.md.
    const L4: ([u8; 4], u8) = ([192, 168, 44, 0], 24);

    fn k(prefix: ([u8; 4], u8), next_hop: [u8; 4]) -> (Prefix, IpAddr) {
        (p(prefix.0, prefix.1), IpAddr::from(next_hop))
    }

    /// A Route Monitoring message: `peer` (AS `peer_as`, next hop itself) announces
    /// `prefix` (origin AS 65104) with the path attributes `extra`.
    fn announce(
        post_policy: bool,
        peer: [u8; 4],
        peer_as: u32,
        prefix: ([u8; 4], u8),
        extra: &[u8],
    ) -> Vec<u8> {
        bmp_view(
            0,
            post_policy,
            peer,
            peer_as,
            &update_with(&[peer_as, 65104], peer, &[prefix], &[], extra),
        )
    }

    fn with_lb(peer: [u8; 4], peer_as: u32, communities: &[[u8; 8]]) -> Vec<u8> {
        announce(true, peer, peer_as, L4, &ext_communities(communities))
    }

    #[test]
    fn the_two_octet_as_link_bandwidth_forms_give_each_next_hop_its_capacity() {
        let mut t = OriginTable::default();
        // LB:65001:12500000 (100 Mbit/s), transitive, beside a route target.
        let rt = [0x00, 0x02, 0xfd, 0xe9, 0, 0, 0, 1];
        let s1 = with_lb(
            S1,
            65001,
            &[rt, link_bandwidth_community(true, 65001, 12_500_000.0)],
        );
        assert!(feed(&mut t, 1, &s1));
        // LB:65002:3125000 (25 Mbit/s), non-transitive.
        let s2 = with_lb(
            S2,
            65002,
            &[link_bandwidth_community(false, 65002, 3_125_000.0)],
        );
        assert!(feed(&mut t, 1, &s2));
        let (bw, conflicts) = t.bandwidths();
        assert_eq!(bw.len(), 2, "{bw:?}");
        assert_eq!(bw[&k(L4, S1)], 0.1);
        assert_eq!(bw[&k(L4, S2)], 0.025);
        assert_eq!(conflicts, 0);
        assert_eq!(t.origins().0[&p(L4.0, L4.1)], 65104);
        // The same announcement again changes nothing.
        assert!(!feed(&mut t, 1, &s1));
        assert_eq!(t.counters.bad_link_bandwidth, 0);
        assert_eq!(t.counters.link_bandwidth_differing, 0);
    }

    #[test]
    fn frrs_ipv6_address_specific_link_bandwidth_is_read_and_mp_reach_names_the_next_hop() {
        let mut t = OriginTable::default();
        // FRR's extended form: a 64-bit count of bytes per second, AS 65001.
        let ext = ipv6_ext_communities(&[extended_link_bandwidth_community(65001, 3_125_000)]);
        assert!(feed(&mut t, 1, &announce(true, S1, 65001, L4, &ext)));
        // Its non-transitive variant (0x42), another value, on spine 2.
        let mut nt = extended_link_bandwidth_community(65002, 12_500_000);
        nt[0] = 0x42;
        let ext = ipv6_ext_communities(&[nt]);
        assert!(feed(&mut t, 1, &announce(true, S2, 65002, L4, &ext)));
        // An IPv6 prefix in MP_REACH_NLRI with a global and link-local next hop pair: the
        // global address is the next hop; a pair with an unspecified global half gives
        // the link-local one.
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        let prefix = (v6("2001:db8:44::"), 48);
        let pair = [v6("fe80::1"), v6("2001:db8::1")].concat();
        let extra = [
            mp_reach_ipv6(&pair, &[prefix]),
            ext_communities(&[link_bandwidth_community(true, 65001, 1.25e9)]),
        ]
        .concat();
        let m = bmp(
            0,
            S1,
            65001,
            &update_with(&[65001, 65104], S1, &[], &[], &extra),
        );
        assert!(feed(&mut t, 1, &m));
        let unnumbered = [[0u8; 16], v6("fe80::2")].concat();
        let extra = [
            mp_reach_ipv6(&unnumbered, &[prefix]),
            ext_communities(&[link_bandwidth_community(true, 65002, 1.25e9)]),
        ]
        .concat();
        let m = bmp(
            0,
            S2,
            65002,
            &update_with(&[65002, 65104], S2, &[], &[], &extra),
        );
        assert!(feed(&mut t, 1, &m));
        let (bw, conflicts) = t.bandwidths();
        assert_eq!(bw[&k(L4, S1)], 0.025);
        assert_eq!(bw[&k(L4, S2)], 0.1);
        let v6p = Prefix {
            addr: IpAddr::from(prefix.0),
            len: 48,
        };
        assert_eq!(bw[&(v6p, "2001:db8::1".parse().unwrap())], 10.0);
        assert_eq!(bw[&(v6p, "fe80::2".parse().unwrap())], 10.0);
        assert_eq!(bw.len(), 4, "{bw:?}");
        assert_eq!(conflicts, 0);
        assert_eq!(t.origins().0[&v6p], 65104);
    }

    #[test]
    fn a_nan_negative_or_infinite_link_bandwidth_is_ignored_and_counted_and_the_first_valid_one_wins()
     {
        let mut t = OriginTable::default();
        let lb = |v: f32| link_bandwidth_community(true, 65001, v);
        let cs = [
            lb(f32::NAN),
            lb(-1.0),
            lb(f32::INFINITY),
            lb(3_125_000.0),
            lb(12_500_000.0),
            lb(3_125_000.0),
        ];
        feed(&mut t, 1, &with_lb(S1, 65001, &cs));
        assert_eq!(t.bandwidths().0[&k(L4, S1)], 0.025);
        assert_eq!(t.counters.bad_link_bandwidth, 3);
        // 12500000 differs from the kept value; the repeated 3125000 does not.
        assert_eq!(t.counters.link_bandwidth_differing, 1);
        // Only a bad one: no capacity, the origin is still learned. -0.0 is 0.
        feed(&mut t, 1, &with_lb(S2, 65002, &[lb(f32::NEG_INFINITY)]));
        let (bw, _) = t.bandwidths();
        assert!(!bw.contains_key(&k(L4, S2)), "{bw:?}");
        assert_eq!(t.counters.bad_link_bandwidth, 4);
        assert_eq!(t.origins().0[&p(L4.0, L4.1)], 65104);
        feed(&mut t, 1, &with_lb(S2, 65002, &[lb(-0.0)]));
        assert_eq!(t.bandwidths().0[&k(L4, S2)].to_bits(), 0.0f64.to_bits());
        assert_eq!(t.counters.bad_link_bandwidth, 4);
    }

    #[test]
    fn a_reannouncement_without_the_community_clears_it_and_a_withdrawal_or_peer_down_forgets_it() {
        let mut t = OriginTable::default();
        let with = with_lb(S1, 65001, &[link_bandwidth_community(true, 65001, 3e6)]);
        assert!(feed(&mut t, 1, &with));
        assert_eq!(t.bandwidths().0.len(), 1);
        // Same origin and next hop, no community: a change, and no capacity.
        assert!(feed(&mut t, 1, &announce(true, S1, 65001, L4, &[])));
        assert!(t.bandwidths().0.is_empty());
        assert_eq!(t.origins().0.len(), 1);
        // Back, then withdrawn.
        assert!(feed(&mut t, 1, &with));
        let wd = bmp(0, S1, 65001, &update(&[], S1, &[], &[L4]));
        assert!(feed(&mut t, 1, &wd));
        assert!(t.bandwidths().0.is_empty());
        // Back, the next hop moves (a change), then the peer goes down.
        assert!(feed(&mut t, 1, &with));
        let moved = bmp(
            0,
            S1,
            65001,
            &update_with(
                &[65001, 65104],
                [10, 1, 1, 9],
                &[L4],
                &[],
                &ext_communities(&[link_bandwidth_community(true, 65001, 3e6)]),
            ),
        );
        assert!(feed(&mut t, 1, &moved));
        assert_eq!(
            t.bandwidths().0.keys().collect::<Vec<_>>(),
            [&k(L4, [10, 1, 1, 9])]
        );
        assert!(feed(&mut t, 1, &bmp(2, S1, 65001, &[4])));
        assert!(t.bandwidths().0.is_empty());
        // A session's end forgets them too.
        feed(&mut t, 2, &with);
        assert!(t.end_session(2));
        assert!(t.bandwidths().0.is_empty());
    }

    #[test]
    fn sessions_that_disagree_give_the_smaller_and_post_policy_wins_over_pre_policy() {
        let mut t = OriginTable::default();
        let lb = |v: f32| [link_bandwidth_community(true, 65001, v)];
        feed(&mut t, 1, &with_lb(S1, 65001, &lb(12_500_000.0)));
        feed(&mut t, 2, &with_lb(S1, 65001, &lb(3_125_000.0)));
        let (bw, conflicts) = t.bandwidths();
        assert_eq!(bw[&k(L4, S1)], 0.025);
        assert_eq!(conflicts, 1);
        assert!(t.end_session(2));
        // Spine 2's pre-policy route says 100 Mbit/s; the leaf's inbound policy made it 25
        // (post-policy): the router uses the latter, no conflict. A prefix only in the
        // pre-policy view counts.
        let other = ([10, 9, 0, 0], 16);
        let pre = ext_communities(&lb(12_500_000.0));
        feed(&mut t, 1, &announce(false, S2, 65002, L4, &pre));
        feed(&mut t, 1, &announce(false, S2, 65002, other, &pre));
        let post = ext_communities(&lb(3_125_000.0));
        feed(&mut t, 1, &announce(true, S2, 65002, L4, &post));
        let (bw, conflicts) = t.bandwidths();
        assert_eq!(bw[&k(L4, S2)], 0.025);
        assert_eq!(bw[&k(other, S2)], 0.1);
        assert_eq!(conflicts, 0);
    }

    #[test]
    fn snapshots_compare_their_capacities_bit_for_bit() {
        let snap = |v: f64| Snapshot {
            bandwidths: Arc::new([(k(L4, S1), v)].into()),
            ..Default::default()
        };
        assert_eq!(snap(0.025), snap(0.025));
        assert_ne!(snap(0.025), snap(0.1));
        assert_ne!(snap(0.025), Snapshot::default());
        assert_eq!(snap(f64::NAN), snap(f64::NAN));
    }

    /// The fuzz seed `fuzz/corpus/bmp_session/link-bandwidth-session.bmp` (after its first
    /// byte, the read size): Initiation; spine 1 with LB:65001:12500000, transitive;
    /// spine 2 with LB:65002:3125000, non-transitive; spine 1 with FRR's IPv6 Address
    /// Specific form for another prefix; spine 2 with a NaN one for a third prefix; spine
    /// 2's Peer Down.
    fn link_bandwidth_session() -> Vec<u8> {
        let other = ([10, 9, 0, 0], 16);
        let third = ([10, 8, 0, 0], 16);
        [
            initiation("leaf1"),
            with_lb(
                S1,
                65001,
                &[link_bandwidth_community(true, 65001, 12_500_000.0)],
            ),
            with_lb(
                S2,
                65002,
                &[link_bandwidth_community(false, 65002, 3_125_000.0)],
            ),
            announce(
                true,
                S1,
                65001,
                other,
                &ipv6_ext_communities(&[extended_link_bandwidth_community(65001, 3_125_000)]),
            ),
            announce(
                true,
                S2,
                65002,
                third,
                &ext_communities(&[link_bandwidth_community(true, 65002, f32::NAN)]),
            ),
            bmp(2, S2, 65002, &[4]),
        ]
        .concat()
    }

    #[test]
    fn the_link_bandwidth_fuzz_seed_is_this_session_and_maps_what_it_says() {
        let seed = include_bytes!("../../../fuzz/corpus/bmp_session/link-bandwidth-session.bmp");
        let session = link_bandwidth_session();
        assert!(
            seed.get(1..) == Some(&session[..]),
            "the seed is not the session: {}",
            session
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let mut t = OriginTable::default();
        feed(&mut t, 1, &session);
        let (bw, conflicts) = t.bandwidths();
        assert_eq!(
            bw,
            [(k(L4, S1), 0.1), (k(([10, 9, 0, 0], 16), S1), 0.025)].into()
        );
        assert_eq!(conflicts, 0);
        assert_eq!(t.counters.bad_link_bandwidth, 1);
        assert_eq!(t.counters.peer_down, 1);
    }
}
