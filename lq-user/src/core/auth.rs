//! Authenticated advertisements (issue 39; docs/wire.md, "Authentication trailer"): the key
//! chain a node sends and accepts with, the keyed MAC of the trailer, and the replay check
//! of its 64-bit sequence number.
//!
//! Seed 003 section 12.1: "authentication of LQ messages SHOULD be applied; IPsec or a
//! comparable integrity mechanism SHOULD be used by any transport binding in untrusted
//! environments". Keys are modelled on RFC 8177 (`ietf-key-chain`): a key id, a crypto
//! algorithm, a key string, a send-lifetime and an accept-lifetime. Time is an input (Unix
//! seconds), so everything here runs in virtual time under test.
//!
//! The MAC (HMAC-SHA-256, -384 or -512, by `ring`) covers the pseudo-header (source and
//! destination address, UDP ports), the advertisement as sent (A flag set) and the
//! trailer's fixed part; it is compared in constant time (`ring::hmac::verify`). A secret
//! never leaves this module: [`Secret`] has no `Display`, its `Debug` is redacted, and no
//! view serialises a key.

use std::collections::BTreeMap;

use lq_common::{
    auth::{self, Algorithm, PSEUDO_HEADER_V6_LEN, TRAILER_HEADER_LEN, Trailer},
    wire::Advertisement,
};
use ring::hmac;

/// A key's secret octets (RFC 8177 `key-string`): never shown, never logged. It keeps
/// the HMAC key schedule made from them (the padded key's two hashed blocks), made on
/// first use: every signed or verified datagram would otherwise hash them again.
#[derive(Clone)]
pub struct Secret(Vec<u8>, std::sync::OnceLock<(Algorithm, hmac::Key)>);

impl Secret {
    /// A secret from its octets.
    pub fn new(octets: Vec<u8>) -> Self {
        Self(octets, std::sync::OnceLock::new())
    }

    /// The HMAC key of these octets for `algorithm`: the schedule made at the first use,
    /// or a new one for another algorithm than that use's.
    fn hmac_key(&self, algorithm: Algorithm) -> std::borrow::Cow<'_, hmac::Key> {
        let (made_for, key) = self.1.get_or_init(|| {
            (
                algorithm,
                hmac::Key::new(ring_algorithm(algorithm), &self.0),
            )
        });
        if *made_for == algorithm {
            std::borrow::Cow::Borrowed(key)
        } else {
            std::borrow::Cow::Owned(hmac::Key::new(ring_algorithm(algorithm), &self.0))
        }
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} octets, redacted>)", self.0.len())
    }
}

/// When a key may be used (RFC 8177 `lifetime`): from `start` (inclusive) to `end`
/// (exclusive), Unix seconds; `None` is open (`always`, `no-end-time`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifetime {
    /// The first second the key may be used; `None`: since ever.
    pub start_s: Option<i64>,
    /// The first second it may no longer be used; `None`: no end.
    pub end_s: Option<i64>,
}

impl Lifetime {
    /// RFC 8177's `always`.
    pub const ALWAYS: Self = Self {
        start_s: None,
        end_s: None,
    };

    /// Whether the lifetime is active at `now_s`.
    pub fn contains(&self, now_s: i64) -> bool {
        self.start_s.is_none_or(|s| now_s >= s) && self.end_s.is_none_or(|e| now_s < e)
    }
}

/// One key of a key chain (RFC 8177 `key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// `key-id`; 16 bits on the wire (the trailer's Key ID).
    pub id: u16,
    /// `crypto-algorithm`.
    pub algorithm: Algorithm,
    /// `key-string`.
    pub secret: Secret,
    /// `send-lifetime`.
    pub send: Lifetime,
    /// `accept-lifetime`.
    pub accept: Lifetime,
}

/// Why a key chain is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyChainError {
    /// Two keys with one id.
    #[error("key id {0} appears twice")]
    DuplicateId(u16),
    /// A key with an empty key string.
    #[error("key {0} has an empty key string")]
    EmptySecret(u16),
    /// A lifetime that ends before it starts.
    #[error("key {id}: its {which} ends before it starts")]
    Inverted {
        /// The key.
        id: u16,
        /// `send-lifetime` or `accept-lifetime`.
        which: &'static str,
    },
    /// No key at all.
    #[error("the key chain has no key")]
    Empty,
}

/// A key chain (RFC 8177 `key-chain`): the keys in id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyChain {
    keys: Vec<Key>,
}

impl KeyChain {
    /// A key chain of `keys`, checked: ids unique, secrets not empty, lifetimes not
    /// inverted, at least one key.
    pub fn new(mut keys: Vec<Key>) -> Result<Self, KeyChainError> {
        if keys.is_empty() {
            return Err(KeyChainError::Empty);
        }
        keys.sort_by_key(|k| k.id);
        for w in keys.windows(2) {
            if w[0].id == w[1].id {
                return Err(KeyChainError::DuplicateId(w[0].id));
            }
        }
        for k in &keys {
            if k.secret.0.is_empty() {
                return Err(KeyChainError::EmptySecret(k.id));
            }
            for (which, l) in [("send-lifetime", k.send), ("accept-lifetime", k.accept)] {
                if let (Some(s), Some(e)) = (l.start_s, l.end_s)
                    && e <= s
                {
                    return Err(KeyChainError::Inverted { id: k.id, which });
                }
            }
        }
        Ok(Self { keys })
    }

    /// The keys, in id order.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The key to send with at `now_s`: of the keys whose send-lifetime is active, the
    /// newest (the latest send start; a key without a start is the oldest), the higher id
    /// on a tie. `None` when no send-lifetime is active (the node then sends nothing: an
    /// unauthenticated advertisement would be dropped by a receiver that requires one).
    pub fn send_key(&self, now_s: i64) -> Option<&Key> {
        self.keys
            .iter()
            .filter(|k| k.send.contains(now_s))
            .max_by_key(|k| (k.send.start_s.unwrap_or(i64::MIN), k.id))
    }

    /// The key with `id`, if its accept-lifetime is active at `now_s`.
    pub fn accept_key(&self, id: u16, now_s: i64) -> Result<&Key, Reject> {
        let k = self
            .keys
            .binary_search_by_key(&id, |k| k.id)
            .map(|i| &self.keys[i])
            .map_err(|_| Reject::UnknownKey)?;
        if !k.accept.contains(now_s) {
            return Err(Reject::KeyNotAccepted);
        }
        Ok(k)
    }
}

/// Why an advertisement is not accepted as authentic (the counters of issue 39 item 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reject {
    /// No trailer (A flag clear) where one is required.
    Missing,
    /// The trailer's key id is not in the key chain.
    UnknownKey,
    /// The key exists but its accept-lifetime is not active.
    KeyNotAccepted,
    /// The MAC does not verify (or the trailer's algorithm is not the key's).
    BadMac,
    /// The 64-bit sequence number is not above the last accepted from this sender and key.
    Replayed,
}

impl Reject {
    /// Every reason, in counter order.
    pub const ALL: [Self; 5] = [
        Self::Missing,
        Self::UnknownKey,
        Self::KeyNotAccepted,
        Self::BadMac,
        Self::Replayed,
    ];

    /// The counter's name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Missing => "missing-trailer",
            Self::UnknownKey => "unknown-key-id",
            Self::KeyNotAccepted => "key-not-accepted",
            Self::BadMac => "bad-mac",
            Self::Replayed => "replayed-sequence",
        }
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// lq's `lq-authentication-failure` notification (yang/lq-authentication@2026-12-05.yang;
/// issue 39 item 4): an advertisement an authenticating interface dropped. The receiver
/// raises at most one per neighbor and reason a minute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFailure {
    /// The receiver interface it arrived on.
    pub interface: String,
    /// The AS qualifier and Router-ID its header carries (a forger's choice).
    pub neighbor_as: u32,
    /// See `neighbor_as`.
    pub neighbor_id: u32,
    /// Its IP source address.
    pub source: std::net::IpAddr,
    /// Why it was dropped.
    pub reason: Reject,
}

impl AuthFailure {
    /// The notification's RFC 7951 member name.
    pub const JSON_MEMBER: &str = "lq-authentication:lq-authentication-failure";

    /// The notification as one RFC 7951 JSON line (`lqd monitor`'s feed).
    pub fn to_json_string(&self) -> String {
        serde_json::json!({ Self::JSON_MEMBER: {
            "interface": self.interface,
            "neighbor-node-as": self.neighbor_as,
            "neighbor-node-id": std::net::Ipv4Addr::from(self.neighbor_id).to_string(),
            "source-address": self.source.to_string(),
            "reason": self.reason.name(),
        }})
        .to_string()
    }
}

fn ring_algorithm(a: Algorithm) -> hmac::Algorithm {
    match a {
        Algorithm::HmacSha256 => hmac::HMAC_SHA256,
        Algorithm::HmacSha384 => hmac::HMAC_SHA384,
        Algorithm::HmacSha512 => hmac::HMAC_SHA512,
    }
}

/// The addresses and ports of a datagram, as the pseudo-header carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Source address and port.
    pub source: std::net::SocketAddr,
    /// Destination address and port.
    pub destination: std::net::SocketAddr,
}

impl Endpoints {
    /// The pseudo-header's octets (`lq_common::auth::pseudo_header`); `None` when the two
    /// addresses are of different families.
    pub fn pseudo_header(&self) -> Option<([u8; PSEUDO_HEADER_V6_LEN], usize)> {
        let octets = |a: std::net::IpAddr| match a {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mut out = [0u8; PSEUDO_HEADER_V6_LEN];
        let n = auth::pseudo_header(
            &octets(self.source.ip()),
            &octets(self.destination.ip()),
            self.source.port(),
            self.destination.port(),
            &mut out,
        )?;
        Some((out, n))
    }
}

/// The MAC of a datagram whose trailer's fixed part is written (`datagram` up to
/// `body_len + 16`), with `key`.
fn mac_of(key: &Key, pseudo: &[u8], covered: &[u8]) -> hmac::Tag {
    let k = key.secret.hmac_key(key.algorithm);
    let mut ctx = hmac::Context::with_key(&k);
    ctx.update(pseudo);
    ctx.update(covered);
    ctx.sign()
}

/// Why a datagram could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The buffer cannot hold the trailer, or `body_len` is not an advertisement.
    #[error("no room for the authentication trailer ({0:?})")]
    Trailer(auth::TrailerError),
    /// The endpoints are of two families.
    #[error("source and destination are of different address families")]
    Endpoints,
}

/// Appends the authentication trailer to the advertisement of `body_len` octets in `out`
/// (which must have room for [`Algorithm::trailer_len`] more), sets its A flag and writes
/// the MAC; returns the datagram's length.
pub fn sign(
    out: &mut [u8],
    body_len: usize,
    key: &Key,
    sequence: u64,
    endpoints: &Endpoints,
) -> Result<usize, SignError> {
    let (pseudo, n) = endpoints.pseudo_header().ok_or(SignError::Endpoints)?;
    let total = auth::write_trailer(out, body_len, key.algorithm, key.id, sequence)
        .map_err(SignError::Trailer)?;
    let covered = body_len + TRAILER_HEADER_LEN;
    let tag = mac_of(key, &pseudo[..n], &out[..covered]);
    out[covered..total].copy_from_slice(tag.as_ref());
    Ok(total)
}

/// An advertisement's trailer verified: which key and which sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The key id.
    pub key_id: u16,
    /// The 64-bit sequence number (not yet checked for replay: [`ReplayGuard`]).
    pub sequence: u64,
}

/// Verifies the trailer of `adv`, decoded from `datagram`, against `chain` at `now_s`: the
/// key must exist with an active accept-lifetime and the MAC must match in constant time.
pub fn verify(
    adv: &Advertisement<'_>,
    datagram: &[u8],
    endpoints: &Endpoints,
    chain: &KeyChain,
    now_s: i64,
) -> Result<Verified, Reject> {
    let trailer: Trailer<'_> = adv.trailer.ok_or(Reject::Missing)?;
    let key = chain.accept_key(trailer.key_id, now_s)?;
    if Algorithm::from_wire(trailer.algorithm) != Some(key.algorithm)
        || trailer.mac.len() != key.algorithm.mac_len()
    {
        return Err(Reject::BadMac);
    }
    let (pseudo, n) = endpoints.pseudo_header().ok_or(Reject::BadMac)?;
    let covered = adv.body_len + TRAILER_HEADER_LEN;
    let covered = datagram.get(..covered).ok_or(Reject::BadMac)?;
    // One contiguous input for ring's constant-time verify.
    let mut input = Vec::with_capacity(n + covered.len());
    input.extend_from_slice(&pseudo[..n]);
    input.extend_from_slice(covered);
    hmac::verify(&key.secret.hmac_key(key.algorithm), &input, trailer.mac)
        .map_err(|_| Reject::BadMac)?;
    Ok(Verified {
        key_id: trailer.key_id,
        sequence: trailer.sequence,
    })
}

/// The replay check of issue 39 item 3: per sender (node AS, node id) the 64-bit sequence
/// number must rise strictly, whatever the key. A sender numbers all its datagrams from
/// one source ([`SequenceSource`]), so a rollover keeps the numbers rising, and a
/// datagram held back under the old key is refused once a newer one came under any. A
/// restarted sender starts its high word at its start time in seconds. The guard lives in
/// lqd's memory: after the receiver's own restart it starts empty (docs/wire.md).
#[derive(Clone, Debug, Default)]
pub struct ReplayGuard {
    last: BTreeMap<(u32, u32), u64>,
}

impl ReplayGuard {
    /// Accepts `v` from sender `(node_as, node_id)` when its sequence is above the last one
    /// accepted from that sender, and remembers it.
    pub fn check(&mut self, node_as: u32, node_id: u32, v: Verified) -> Result<(), Reject> {
        let k = (node_as, node_id);
        if self.last.get(&k).is_some_and(|&last| v.sequence <= last) {
            return Err(Reject::Replayed);
        }
        self.last.insert(k, v.sequence);
        Ok(())
    }

    /// Senders and keys remembered.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// Rebuilds, around a UDP `payload` the socket receiver read, the Ethernet frame the XDP
/// receiver parses (zero MAC addresses; IPv4 without options or IPv6; the TTL / Hop Limit
/// as received, so that check 4 judges it; checksums 0, which the receiver does not read).
/// Into `out`, which is cleared first.
pub fn rebuild_frame(
    source: std::net::SocketAddr,
    destination: std::net::IpAddr,
    destination_port: u16,
    ttl: u8,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    let udp_len = (8 + payload.len()).min(usize::from(u16::MAX)) as u16;
    out.extend_from_slice(&[0u8; 12]);
    match (source.ip(), destination) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            out.extend_from_slice(&0x0800u16.to_be_bytes());
            let total = udp_len.saturating_add(20);
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&total.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0, ttl, 17, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |a: std::net::IpAddr| match a {
                std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
                std::net::IpAddr::V6(a) => a,
            };
            out.extend_from_slice(&0x86ddu16.to_be_bytes());
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&udp_len.to_be_bytes());
            out.extend_from_slice(&[17, ttl]);
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination_port.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
}

/// The 64-bit sequence numbers a sender gives its datagrams: the high word its start time
/// in Unix seconds, the low word a counter from 0; the counter's wrap carries into the
/// high word, so the numbers only rise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceSource {
    next: u64,
}

impl SequenceSource {
    /// Numbers for a sender started at `start_s` (Unix seconds).
    pub fn new(start_s: u64) -> Self {
        Self {
            next: (start_s & 0xffff_ffff) << 32,
        }
    }

    /// The number the next datagram gets.
    pub fn peek(&self) -> u64 {
        self.next
    }

    /// The next number.
    pub fn next_sequence(&mut self) -> u64 {
        let s = self.next;
        self.next = self.next.wrapping_add(1);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lq_common::wire::{DecodePolicy, Entry, Header, Mode, decode, encode, encoded_len};
    use std::net::SocketAddr;

    fn key(id: u16, algorithm: Algorithm, secret: &[u8]) -> Key {
        Key {
            id,
            algorithm,
            secret: Secret::new(secret.to_vec()),
            send: Lifetime::ALWAYS,
            accept: Lifetime::ALWAYS,
        }
    }

    fn endpoints() -> Endpoints {
        Endpoints {
            source: "10.0.0.1:40000".parse::<SocketAddr>().unwrap(),
            destination: "224.0.0.1:52525".parse::<SocketAddr>().unwrap(),
        }
    }

    /// An advertisement of two entries, with room for the longest trailer.
    fn advertisement() -> (Vec<u8>, usize) {
        let header = Header {
            as_qualified: false,
            diagnostics: false,
            pfc_fabric: false,
            mode: Mode::Periodic,
            sequence: 7,
            node_id: 0x0a00_0001,
            timestamp_ms: 1000,
            node_as: 0,
        };
        let entries = [
            Entry {
                remote_as: 0,
                remote_node_id: 0x0a00_0101,
                link_id: 3,
                available_bandwidth: 100.0,
                lqs: 237,
                cl: 0,
                diagnostics: None,
            },
            Entry {
                remote_as: 0,
                remote_node_id: 0x0a00_0102,
                link_id: 4,
                available_bandwidth: 40.0,
                lqs: 72,
                cl: 3,
                diagnostics: None,
            },
        ];
        let body = encoded_len(&header, entries.len());
        let mut buf = vec![0u8; body + lq_common::auth::MAX_TRAILER_LEN];
        encode(&header, &entries, &mut buf).unwrap();
        (buf, body)
    }

    #[test]
    fn a_signed_datagram_verifies_with_every_algorithm_and_fails_with_any_change() {
        for alg in Algorithm::ALL {
            let chain = KeyChain::new(vec![key(5, alg, b"secret")]).unwrap();
            let (mut buf, body) = advertisement();
            let n = sign(&mut buf, body, chain.send_key(0).unwrap(), 42, &endpoints()).unwrap();
            let datagram = &buf[..n];
            let adv = decode(datagram, &DecodePolicy::ANY).unwrap();
            assert_eq!(adv.entry_count(), 2, "a receiver without keys still parses");
            let ok = verify(&adv, datagram, &endpoints(), &chain, 0).unwrap();
            assert_eq!(
                ok,
                Verified {
                    key_id: 5,
                    sequence: 42
                }
            );
            // Every single flipped bit of the datagram is refused (by framing or by MAC).
            for i in 0..n * 8 {
                let mut bad = datagram.to_vec();
                bad[i / 8] ^= 1 << (i % 8);
                let outcome = decode(&bad, &DecodePolicy::ANY)
                    .ok()
                    .map(|a| verify(&a, &bad, &endpoints(), &chain, 0));
                assert!(!matches!(outcome, Some(Ok(_))), "bit {i} flipped verified");
            }
            // Another source, destination or port.
            for e in [
                Endpoints {
                    source: "10.0.0.2:40000".parse().unwrap(),
                    ..endpoints()
                },
                Endpoints {
                    destination: "10.0.0.9:52525".parse().unwrap(),
                    ..endpoints()
                },
                Endpoints {
                    source: "10.0.0.1:40001".parse().unwrap(),
                    ..endpoints()
                },
            ] {
                assert_eq!(verify(&adv, datagram, &e, &chain, 0), Err(Reject::BadMac));
            }
            // Another key string.
            let other = KeyChain::new(vec![key(5, alg, b"secreT")]).unwrap();
            assert_eq!(
                verify(&adv, datagram, &endpoints(), &other, 0),
                Err(Reject::BadMac)
            );
        }
    }

    #[test]
    fn missing_unknown_expired_and_mismatched_keys_are_refused_by_reason() {
        let chain = KeyChain::new(vec![Key {
            accept: Lifetime {
                start_s: Some(100),
                end_s: Some(200),
            },
            ..key(1, Algorithm::HmacSha256, b"k")
        }])
        .unwrap();
        let (mut buf, body) = advertisement();
        let plain = buf[..body].to_vec();
        let adv = decode(&plain, &DecodePolicy::ANY).unwrap();
        assert_eq!(
            verify(&adv, &plain, &endpoints(), &chain, 150),
            Err(Reject::Missing)
        );
        let n = sign(&mut buf, body, &chain.keys()[0], 1, &endpoints()).unwrap();
        let adv = decode(&buf[..n], &DecodePolicy::ANY).unwrap();
        assert!(verify(&adv, &buf[..n], &endpoints(), &chain, 150).is_ok());
        assert_eq!(
            verify(&adv, &buf[..n], &endpoints(), &chain, 99),
            Err(Reject::KeyNotAccepted)
        );
        assert_eq!(
            verify(&adv, &buf[..n], &endpoints(), &chain, 200),
            Err(Reject::KeyNotAccepted)
        );
        let other_id = KeyChain::new(vec![key(2, Algorithm::HmacSha256, b"k")]).unwrap();
        assert_eq!(
            verify(&adv, &buf[..n], &endpoints(), &other_id, 150),
            Err(Reject::UnknownKey)
        );
        let other_alg = KeyChain::new(vec![key(1, Algorithm::HmacSha512, b"k")]).unwrap();
        assert_eq!(
            verify(&adv, &buf[..n], &endpoints(), &other_alg, 150),
            Err(Reject::BadMac)
        );
    }

    #[test]
    fn the_newest_active_send_key_is_used() {
        let at = |start, end| Lifetime {
            start_s: start,
            end_s: end,
        };
        let chain = KeyChain::new(vec![
            Key {
                send: at(None, Some(1000)),
                ..key(1, Algorithm::HmacSha256, b"a")
            },
            Key {
                send: at(Some(900), Some(2000)),
                ..key(2, Algorithm::HmacSha256, b"b")
            },
            Key {
                send: at(Some(1900), None),
                ..key(3, Algorithm::HmacSha256, b"c")
            },
        ])
        .unwrap();
        let id = |t| chain.send_key(t).map(|k| k.id);
        assert_eq!(id(0), Some(1));
        assert_eq!(id(899), Some(1));
        assert_eq!(id(900), Some(2), "overlap: the newer key");
        assert_eq!(id(1899), Some(2));
        assert_eq!(id(1900), Some(3));
        assert_eq!(id(5000), Some(3));
        let none = KeyChain::new(vec![Key {
            send: at(Some(10), Some(20)),
            ..key(1, Algorithm::HmacSha256, b"a")
        }])
        .unwrap();
        assert_eq!(none.send_key(20).map(|k| k.id), None);
    }

    #[test]
    fn bad_key_chains_are_refused() {
        let k = |id| key(id, Algorithm::HmacSha256, b"x");
        assert_eq!(KeyChain::new(vec![]), Err(KeyChainError::Empty));
        assert_eq!(
            KeyChain::new(vec![k(1), k(1)]),
            Err(KeyChainError::DuplicateId(1))
        );
        assert_eq!(
            KeyChain::new(vec![key(1, Algorithm::HmacSha256, b"")]),
            Err(KeyChainError::EmptySecret(1))
        );
        assert_eq!(
            KeyChain::new(vec![Key {
                accept: Lifetime {
                    start_s: Some(5),
                    end_s: Some(5)
                },
                ..k(1)
            }]),
            Err(KeyChainError::Inverted {
                id: 1,
                which: "accept-lifetime"
            })
        );
    }

    #[test]
    fn secrets_are_not_shown() {
        let k = key(1, Algorithm::HmacSha256, b"hunter2");
        let shown = format!("{k:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn a_rebuilt_frame_is_what_the_receiver_checks() {
        let (buf, body) = advertisement();
        let mut f = Vec::new();
        for (src, dst) in [
            ("10.0.0.1:40000", "224.0.0.1"),
            ("[fe80::1]:40000", "ff02::1"),
        ] {
            rebuild_frame(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                52525,
                255,
                &buf[..body],
                &mut f,
            );
            match lq_common::frame::classify(&f, 52525) {
                lq_common::frame::FrameClass::Payload(p) => assert_eq!(p, &buf[..body]),
                other => panic!("{other:?}"),
            }
            let e = lq_common::frame::udp_endpoints(&f).unwrap();
            assert_eq!(e.source_port, 40000);
            rebuild_frame(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                52525,
                64,
                &buf[..body],
                &mut f,
            );
            assert_eq!(
                lq_common::frame::classify(&f, 52525),
                lq_common::frame::FrameClass::BadTtl
            );
        }
    }

    #[test]
    fn sequences_rise_across_restarts_and_replays_are_refused() {
        let mut a = SequenceSource::new(1_000);
        let first = a.next_sequence();
        assert_eq!(first, 1_000 << 32);
        assert_eq!(a.next_sequence(), first + 1);
        // Restarted a second later: above anything the first run sent in 2^32 datagrams.
        let mut b = SequenceSource::new(1_001);
        assert!(b.next_sequence() > first + u64::from(u32::MAX) - 1);
        let mut g = ReplayGuard::default();
        let v = |key_id, sequence| Verified { key_id, sequence };
        assert_eq!(g.check(0, 1, v(1, 10)), Ok(()));
        assert_eq!(g.check(0, 1, v(1, 10)), Err(Reject::Replayed));
        assert_eq!(g.check(0, 1, v(1, 9)), Err(Reject::Replayed));
        assert_eq!(g.check(0, 1, v(1, 11)), Ok(()));
        // Per sender, whatever the key: an older datagram under another key is a replay.
        assert_eq!(g.check(0, 1, v(2, 5)), Err(Reject::Replayed));
        assert_eq!(g.check(0, 1, v(2, 12)), Ok(()));
        assert_eq!(g.check(0, 2, v(1, 1)), Ok(()));
        assert_eq!(g.check(7, 1, v(1, 1)), Ok(()));
        assert_eq!(g.len(), 3);
    }
}
