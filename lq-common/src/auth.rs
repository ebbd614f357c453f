//! The authentication trailer of the LQ UDP binding (docs/wire.md, "Authentication
//! trailer"; issue 39).
//!
//! Seed 003 section 12.1: "authentication of LQ messages SHOULD be applied; IPsec or a
//! comparable integrity mechanism SHOULD be used by any transport binding in untrusted
//! environments". The trailer is that mechanism for the UDP binding, modelled on OSPFv3's
//! authentication trailer (RFC 7166) and placed as Babel's MAC is (RFC 8967): after the
//! advertisement, outside its entry count, so that a receiver without keys still parses
//! the advertisement. The A flag (octet 0, the bit the version-1 header reserved) says a
//! trailer follows; check 7 then takes the payload length as the advertisement plus the
//! trailer's own length field.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Type (1)     |   Algorithm   |        Trailer Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Key ID             |           Reserved            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Sequence Number, high word (sender's start, s)       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Sequence Number, low word (datagram counter)         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     MAC (32, 48 or 64 octets: HMAC-SHA-256, -384, -512)       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! This module frames the trailer (no cryptography: `lq-common` is shared with the eBPF
//! program, which only needs to step over it); the MAC itself is computed and checked in
//! `lq-user` (`core::auth`).

use crate::wire::MAX_PAYLOAD_LEN;

/// Flag bit of octet 0: an authentication trailer follows the entries (the bit version 1
/// of the header reserved as R, 0 on send and ignored on receipt).
pub const FLAG_A: u8 = 0x01;
/// The trailer's Type: a keyed MAC.
pub const TRAILER_TYPE_MAC: u8 = 1;
/// The trailer's fixed part (type, algorithm, length, key id, reserved, sequence).
pub const TRAILER_HEADER_LEN: usize = 16;
/// The longest MAC (HMAC-SHA-512).
pub const MAX_MAC_LEN: usize = 64;
/// The longest trailer.
pub const MAX_TRAILER_LEN: usize = TRAILER_HEADER_LEN + MAX_MAC_LEN;
/// The longest UDP payload a receiver accepts: the longest advertisement and the longest
/// trailer.
pub const MAX_DATAGRAM_LEN: usize = MAX_PAYLOAD_LEN + MAX_TRAILER_LEN;
/// The pseudo-header's length for IPv4 (source, destination, source port, destination
/// port).
pub const PSEUDO_HEADER_V4_LEN: usize = 12;
/// The pseudo-header's length for IPv6.
pub const PSEUDO_HEADER_V6_LEN: usize = 36;

/// The MAC algorithm (the trailer's Algorithm octet), named as RFC 8177's
/// `ietf-key-chain` crypto-algorithm identities name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Algorithm {
    /// HMAC-SHA-256 (RFC 2104, FIPS 180-4): a 32-octet MAC.
    HmacSha256 = 1,
    /// HMAC-SHA-384: a 48-octet MAC.
    HmacSha384 = 2,
    /// HMAC-SHA-512: a 64-octet MAC.
    HmacSha512 = 3,
}

impl Algorithm {
    /// Every algorithm, in wire order.
    pub const ALL: [Self; 3] = [Self::HmacSha256, Self::HmacSha384, Self::HmacSha512];

    /// The wire value.
    pub const fn to_wire(self) -> u8 {
        self as u8
    }

    /// The algorithm of a wire value; `None` for one this implementation does not know.
    pub const fn from_wire(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::HmacSha256),
            2 => Some(Self::HmacSha384),
            3 => Some(Self::HmacSha512),
            _ => None,
        }
    }

    /// The MAC's length in octets.
    pub const fn mac_len(self) -> usize {
        match self {
            Self::HmacSha256 => 32,
            Self::HmacSha384 => 48,
            Self::HmacSha512 => 64,
        }
    }

    /// The whole trailer's length with this algorithm.
    pub const fn trailer_len(self) -> usize {
        TRAILER_HEADER_LEN + self.mac_len()
    }

    /// The RFC 8177 identity name (`hmac-sha-256`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha-256",
            Self::HmacSha384 => "hmac-sha-384",
            Self::HmacSha512 => "hmac-sha-512",
        }
    }

    /// The algorithm an RFC 8177 identity name names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// A trailer as framed on the wire (check 7): its fields, the octets the MAC covers after
/// the advertisement (the trailer's fixed part) and the MAC as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer<'a> {
    /// The Algorithm octet; [`Algorithm::from_wire`] tells whether it is known.
    pub algorithm: u8,
    /// The key id (RFC 8177's key-id, 16 bits on the wire).
    pub key_id: u16,
    /// The 64-bit sequence number: high word the sender's start time in seconds, low word
    /// a counter, so that a restarted sender never repeats one.
    pub sequence: u64,
    /// The trailer's fixed part, as the MAC covers it.
    pub fixed: &'a [u8],
    /// The MAC as sent (`Trailer Length - 16` octets).
    pub mac: &'a [u8],
}

/// Frames the trailer that fills `rest`, the octets after an advertisement whose A flag is
/// set (check 7). `None` when they are not exactly one trailer: shorter than its fixed
/// part, a Type other than [`TRAILER_TYPE_MAC`], a Trailer Length that is not `rest.len()`
/// or is longer than [`MAX_TRAILER_LEN`]. An unknown algorithm is framed (its length is
/// its own): it is refused where the MAC is checked, not here.
pub fn frame_trailer(rest: &[u8]) -> Option<Trailer<'_>> {
    if rest.len() < TRAILER_HEADER_LEN || rest.len() > MAX_TRAILER_LEN {
        return None;
    }
    if rest[0] != TRAILER_TYPE_MAC {
        return None;
    }
    let length = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
    if length != rest.len() {
        return None;
    }
    let mut sequence = [0u8; 8];
    sequence.copy_from_slice(&rest[8..16]);
    Some(Trailer {
        algorithm: rest[1],
        key_id: u16::from_be_bytes([rest[4], rest[5]]),
        sequence: u64::from_be_bytes(sequence),
        fixed: &rest[..TRAILER_HEADER_LEN],
        mac: &rest[TRAILER_HEADER_LEN..],
    })
}

/// Why a trailer could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrailerError {
    /// The buffer cannot hold the advertisement and the trailer.
    BufferTooSmall,
    /// `body_len` is shorter than a header: no advertisement to append to.
    NoAdvertisement,
}

/// Appends a trailer's fixed part after the advertisement of `body_len` octets in `out`,
/// sets the A flag in octet 0 and zeroes the MAC's place; returns the datagram's whole
/// length. The caller then computes the MAC over [`mac_input`]'s parts and writes it at
/// `body_len + 16`.
pub fn write_trailer(
    out: &mut [u8],
    body_len: usize,
    algorithm: Algorithm,
    key_id: u16,
    sequence: u64,
) -> Result<usize, TrailerError> {
    if body_len < crate::wire::HEADER_LEN {
        return Err(TrailerError::NoAdvertisement);
    }
    let total = body_len + algorithm.trailer_len();
    let out = out.get_mut(..total).ok_or(TrailerError::BufferTooSmall)?;
    out[0] |= FLAG_A;
    let t = &mut out[body_len..];
    t.fill(0);
    t[0] = TRAILER_TYPE_MAC;
    t[1] = algorithm.to_wire();
    // Cannot truncate: at most 80.
    t[2..4].copy_from_slice(&(algorithm.trailer_len() as u16).to_be_bytes());
    t[4..6].copy_from_slice(&key_id.to_be_bytes());
    t[8..16].copy_from_slice(&sequence.to_be_bytes());
    Ok(total)
}

/// The pseudo-header the MAC covers before the datagram (as Babel's, RFC 8967 section
/// 4.1): source address, destination address, source port, destination port, in network
/// byte order; 12 octets for IPv4, 36 for IPv6. Written into `out`, its length returned.
pub fn pseudo_header(
    source: &[u8],
    destination: &[u8],
    source_port: u16,
    destination_port: u16,
    out: &mut [u8; PSEUDO_HEADER_V6_LEN],
) -> Option<usize> {
    let alen = source.len();
    if (alen != 4 && alen != 16) || destination.len() != alen {
        return None;
    }
    out[..alen].copy_from_slice(source);
    out[alen..2 * alen].copy_from_slice(destination);
    out[2 * alen..2 * alen + 2].copy_from_slice(&source_port.to_be_bytes());
    out[2 * alen + 2..2 * alen + 4].copy_from_slice(&destination_port.to_be_bytes());
    Some(2 * alen + 4)
}

/// The octets the MAC covers, in order: the pseudo-header, the advertisement (A flag set,
/// as sent) and the trailer's fixed part. The MAC itself is not covered.
pub fn mac_input<'a>(pseudo: &'a [u8], datagram: &'a [u8], body_len: usize) -> [&'a [u8]; 2] {
    let end = (body_len + TRAILER_HEADER_LEN).min(datagram.len());
    [pseudo, &datagram[..end]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_fit_the_receiver_scratch_and_the_wire() {
        assert_eq!(MAX_TRAILER_LEN, 80);
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_wire(a.to_wire()), Some(a));
            assert_eq!(Algorithm::from_name(a.name()), Some(a));
            assert!(a.trailer_len() <= MAX_TRAILER_LEN);
        }
        assert_eq!(Algorithm::from_wire(0), None);
        assert_eq!(Algorithm::from_wire(4), None);
        assert_eq!(Algorithm::from_name("md5"), None);
    }

    #[test]
    fn a_written_trailer_frames_back() {
        let mut buf = [0u8; 200];
        buf[0] = 0x10;
        let total = write_trailer(
            &mut buf,
            32,
            Algorithm::HmacSha384,
            0xbeef,
            0x1122_3344_5566_7788,
        )
        .unwrap();
        assert_eq!(total, 32 + 64);
        assert_eq!(buf[0], 0x11);
        let t = frame_trailer(&buf[32..total]).unwrap();
        assert_eq!(t.algorithm, 2);
        assert_eq!(t.key_id, 0xbeef);
        assert_eq!(t.sequence, 0x1122_3344_5566_7788);
        assert_eq!(t.fixed.len(), 16);
        assert_eq!(t.mac.len(), 48);
        assert_eq!(
            write_trailer(&mut buf[..90], 32, Algorithm::HmacSha512, 1, 1),
            Err(TrailerError::BufferTooSmall)
        );
        assert_eq!(
            write_trailer(&mut buf, 8, Algorithm::HmacSha512, 1, 1),
            Err(TrailerError::NoAdvertisement)
        );
    }

    #[test]
    fn only_exactly_one_trailer_frames() {
        let mut t = [0u8; 48];
        t[0] = TRAILER_TYPE_MAC;
        t[1] = 1;
        t[2..4].copy_from_slice(&48u16.to_be_bytes());
        assert!(frame_trailer(&t).is_some());
        // One octet short or long of its length field.
        assert!(frame_trailer(&t[..47]).is_none());
        let mut long = [0u8; 49];
        long[..48].copy_from_slice(&t);
        assert!(frame_trailer(&long).is_none());
        // Another type.
        let mut other = t;
        other[0] = 2;
        assert!(frame_trailer(&other).is_none());
        // Shorter than its fixed part, or longer than the longest.
        assert!(frame_trailer(&t[..15]).is_none());
        let mut huge = [0u8; 81];
        huge[0] = 1;
        huge[2..4].copy_from_slice(&81u16.to_be_bytes());
        assert!(frame_trailer(&huge).is_none());
        // An unknown algorithm is framed by its length.
        let mut unknown = t;
        unknown[1] = 9;
        assert_eq!(frame_trailer(&unknown).unwrap().algorithm, 9);
    }

    #[test]
    fn pseudo_headers() {
        let mut out = [0u8; PSEUDO_HEADER_V6_LEN];
        let n = pseudo_header(&[10, 0, 0, 1], &[224, 0, 0, 1], 40000, 52525, &mut out).unwrap();
        assert_eq!(
            &out[..n],
            &[10, 0, 0, 1, 224, 0, 0, 1, 0x9c, 0x40, 0xcd, 0x2d]
        );
        let n = pseudo_header(&[0xfe; 16], &[0xff; 16], 1, 2, &mut out).unwrap();
        assert_eq!(n, 36);
        assert!(pseudo_header(&[1; 4], &[1; 16], 1, 2, &mut out).is_none());
        assert!(pseudo_header(&[1; 5], &[1; 5], 1, 2, &mut out).is_none());
    }
}
