//! The NNH mapping learned from BGP through BMP (RFC 7854), seed 003 section 6.1: "It MAY
//! be learned dynamically". In an RFC 7938 fabric every leaf has an AS of its own, so the
//! origin AS of a route's AS_PATH names the leaf behind the prefix; with AS-qualified LQ
//! entries (section 6.2: the key carries `remote-as`) that AS picks the remote node among
//! the entries a leaf receives.
//!
//! Pure: [`Framer`] cuts a BMP byte stream into whole messages (bounded), [`decode`] parses
//! one with `bgpkit-parser`, and [`OriginTable`] keeps, per BMP session and monitored peer,
//! the origin AS of every prefix the peer announced, and answers one origin per prefix.
//! The TCP station that feeds them is [`crate::transport::bmp`].

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use bgpkit_parser::{
    models::{AsPath, BgpMessage, NetworkPrefix},
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
}

/// Origin AS per prefix, per monitored peer of every session.
#[derive(Clone, Debug, Default)]
pub struct OriginTable {
    routes: BTreeMap<PeerKey, BTreeMap<Prefix, Option<u32>>>,
    /// Counters.
    pub counters: Counters,
}

/// What the station publishes to the daemon loop: the learned origins and the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Prefix -> the one origin AS its announcing peers agree on.
    pub origins: Arc<BTreeMap<Prefix, u32>>,
    /// Prefixes whose peers name different origin ASes (anycast, or a fabric that is not
    /// one AS per leaf): no mapping learned for them.
    pub conflicting: u64,
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

impl OriginTable {
    /// Applies one message of session `session`. Returns whether the origins may have
    /// changed.
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
                let origin = origin_of(u.attributes.effective_as_path().as_ref());
                let rib = self.routes.entry(key).or_default();
                let withdrawn = u
                    .withdrawn_prefixes
                    .iter()
                    .chain(
                        u.attributes
                            .get_unreachable_nlri()
                            .into_iter()
                            .flat_map(|n| n.prefixes.iter()),
                    )
                    .map(prefix_of);
                let mut changed = false;
                for p in withdrawn {
                    self.counters.withdrawn += 1;
                    changed |= rib.remove(&p).is_some();
                }
                let announced: Vec<Prefix> = u
                    .announced_prefixes
                    .iter()
                    .chain(
                        u.attributes
                            .get_reachable_nlri()
                            .into_iter()
                            .flat_map(|n| n.prefixes.iter()),
                    )
                    .map(prefix_of)
                    .collect();
                if !announced.is_empty() && origin.is_none() {
                    self.counters.no_origin += 1;
                }
                for p in announced {
                    self.counters.announced += 1;
                    changed |= rib.insert(p, origin) != Some(origin);
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
            for (p, origin) in rib {
                if let Some(a) = origin {
                    all.entry(*p).or_default().insert(*a);
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
        if !announced.is_empty() {
            attrs.extend_from_slice(&[0x40, 1, 1, 0]); // ORIGIN IGP
            let mut seg = vec![2u8, path.len() as u8];
            for a in path {
                seg.extend_from_slice(&a.to_be_bytes());
            }
            attrs.extend_from_slice(&[0x40, 2, seg.len() as u8]);
            attrs.extend_from_slice(&seg);
            attrs.extend_from_slice(&[0x40, 3, 4]);
            attrs.extend_from_slice(&next_hop);
        }
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

    /// A BMP message of `kind` (0 Route Monitoring, 2 Peer Down, 3 Peer Up) with a
    /// per-peer header for IPv4 peer `peer` in AS `peer_as`, post-policy, 4-octet ASes.
    pub fn bmp(kind: u8, peer: [u8; 4], peer_as: u32, body: &[u8]) -> Vec<u8> {
        let mut m = vec![3u8, 0, 0, 0, 0, kind];
        m.push(0); // global instance peer
        m.push(0x40); // L: post-policy; A clear: 4-octet ASes
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
}
