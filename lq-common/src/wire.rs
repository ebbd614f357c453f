//! The LQ advertisement over UDP, version 1 (`spec/lq-udp-wire.md`).
//!
//! Every field sits at a fixed offset that depends only on the Q and D flags (seed 003
//! section 7.1), so this module is a set of offsets, a validating view ([`decode`]) and a
//! writer ([`encode`]). It never allocates and never panics on any input; the XDP program in
//! `lq-ebpf` reads the same offsets and calls the same pure validators
//! ([`bandwidth_bits_valid`], [`serial_gt`], [`entry_len`]).

use core::fmt;

/// Version carried in the top nibble of octet 0.
pub const VERSION: u8 = 1;
/// Default UDP destination port (a dynamic-range port until the binding's is assigned).
pub const DEFAULT_PORT: u16 = 52525;
/// Header length without the Node AS word.
pub const HEADER_LEN: usize = 16;
/// Entry length without Remote AS and diagnostics.
pub const ENTRY_BASE_LEN: usize = 16;
/// Octets added to the header and to every entry by the Q flag.
pub const AS_LEN: usize = 4;
/// Octets added to every entry by the D flag.
pub const DIAGNOSTICS_LEN: usize = 8;
/// The most entries one datagram carries: 1500 - 20 - 8 - 16 = 1456 = 91 x 16. Senders
/// never put more in one datagram, and this receiver processes at most this many (a larger
/// count is discarded as [`DecodeError::BadLength`]; documented in docs/wire.md).
pub const MAX_ENTRIES: usize = 91;
/// The largest UDP payload a receiver accepts: a Q = 1, D = 1 datagram of 91 entries.
pub const MAX_PAYLOAD_LEN: usize =
    HEADER_LEN + AS_LEN + MAX_ENTRIES * (ENTRY_BASE_LEN + AS_LEN + DIAGNOSTICS_LEN);

/// Flag bits of octet 0 (below the version nibble).
pub const FLAG_Q: u8 = 0x08;
/// Diagnostics present in every entry.
pub const FLAG_D: u8 = 0x04;
/// The sender runs a PFC (lossless) fabric.
pub const FLAG_P: u8 = 0x02;
/// Entry octet 13: diagnostics of this entry are valid (only meaningful with D).
pub const ENTRY_FLAG_V: u8 = 0x10;
/// Diagnostics octet 6, low bit 2: drops active.
pub const DIAG_FLAG_X: u8 = 0x04;

/// The largest decimal64 with 3 fraction digits, 9223372036854775.807, in milli-units.
pub const DECIMAL64_MAX_MILLI: u64 = i64::MAX as u64;

/// The bit pattern of the largest finite binary32 that does not exceed the decimal64
/// maximum 9223372036854775.807: 9223371401199616.0 (checked by a test). Positive binary32
/// values order like their bit patterns, so the value rule of the spec is two integer
/// comparisons, which the eBPF verifier likes and which needs no floating point.
pub const BANDWIDTH_MAX_BITS: u32 = 0x5a03_126e;

/// Value rule of the spec for Available Bandwidth and Link Capacity: finite, >= 0 and
/// <= 9223372036854775.807. `-0.0` compares equal to 0 and is accepted.
#[inline(always)]
pub const fn bandwidth_bits_valid(bits: u32) -> bool {
    bits <= BANDWIDTH_MAX_BITS || bits == 0x8000_0000
}

/// Header length for the given Q flag.
#[inline(always)]
pub const fn header_len(q: bool) -> usize {
    if q { HEADER_LEN + AS_LEN } else { HEADER_LEN }
}

/// Entry length the spec requires for the given flags: 16 + 4*Q + 8*D.
#[inline(always)]
pub const fn entry_len(q: bool, d: bool) -> usize {
    ENTRY_BASE_LEN + if q { AS_LEN } else { 0 } + if d { DIAGNOSTICS_LEN } else { 0 }
}

/// RFC 1982 serial number comparison with SERIAL_BITS = 16: is `a` serially greater than
/// `b`? Equal numbers and numbers exactly 2^15 apart (undefined in RFC 1982) are not.
#[inline(always)]
pub const fn serial_gt(a: u16, b: u16) -> bool {
    let diff = a.wrapping_sub(b);
    diff != 0 && diff < 0x8000
}

/// Signaling mode (YANG `signaling-mode`). `solicited` (2) is not used over UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Sent every T_notify.
    Periodic = 0,
    /// Sent early because a link's LQS or CL changed (seed 003 section 7.2).
    Triggered = 1,
}

impl Mode {
    /// The wire value.
    pub const fn to_wire(self) -> u8 {
        self as u8
    }
    /// Parse a wire value; `None` for solicited and unknown values.
    pub const fn from_wire(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Periodic),
            1 => Some(Self::Triggered),
            _ => None,
        }
    }
    /// The YANG enum name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Triggered => "triggered",
        }
    }
}

/// Why a datagram was discarded by checks 5-9 of the spec. The names are the spec's
/// counter names ([`DecodeError::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// Check 5: the UDP payload is shorter than 16 octets.
    Truncated,
    /// Check 5: version is not 1.
    BadVersion,
    /// Check 6: mode is neither periodic (0) nor triggered (1).
    BadMode,
    /// Check 7: entry length or payload length does not match the flags and the count.
    BadLength,
    /// Check 8: Q does not match the local setting, or the node AS is outside the AS plan.
    AsMismatch,
    /// Check 9: a bandwidth is NaN, infinite, negative or larger than decimal64 allows.
    BadValue,
}

impl DecodeError {
    /// The spec's name for this discard reason.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::BadVersion => "bad_version",
            Self::BadMode => "bad_mode",
            Self::BadLength => "bad_length",
            Self::AsMismatch => "as_mismatch",
            Self::BadValue => "bad_value",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An inclusive range of AS numbers of the configured AS plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct AsRange {
    /// First AS number in the range.
    pub first: u32,
    /// Last AS number in the range (inclusive).
    pub last: u32,
}

impl AsRange {
    /// One AS number.
    pub const fn single(asn: u32) -> Self {
        Self {
            first: asn,
            last: asn,
        }
    }
    /// Whether `asn` lies in the range.
    pub const fn contains(&self, asn: u32) -> bool {
        asn >= self.first && asn <= self.last
    }
}

/// Whether `asn` is inside the plan; an empty plan means "no plan configured".
pub fn as_plan_contains(plan: &[AsRange], asn: u32) -> bool {
    plan.is_empty() || plan.iter().any(|r| r.contains(asn))
}

/// What the receiver expects of the Q flag (check 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsQualification {
    /// Accept Q = 0 and Q = 1 and skip the AS plan (`lqd decode` without a local setting).
    Any,
    /// The local `as-qualified` setting: a datagram must match it.
    Required(bool),
}

/// Local settings that decoding depends on (check 8).
#[derive(Clone, Copy, Debug)]
pub struct DecodePolicy<'a> {
    /// The local `as-qualified` setting.
    pub as_qualification: AsQualification,
    /// The AS plan; empty when none is configured.
    pub as_plan: &'a [AsRange],
}

impl DecodePolicy<'static> {
    /// Accept both Q values and skip the AS plan.
    pub const ANY: Self = Self {
        as_qualification: AsQualification::Any,
        as_plan: &[],
    };
}

/// The fixed header of an advertisement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Q flag: Node AS and a Remote AS per entry are on the wire.
    pub as_qualified: bool,
    /// D flag: every entry carries a diagnostics block.
    pub diagnostics: bool,
    /// P flag (`pfc-fabric`).
    pub pfc_fabric: bool,
    /// `signaling-mode`.
    pub mode: Mode,
    /// `sequence-number`.
    pub sequence: u16,
    /// `node-id`: the sender's Router-ID, as a host-order integer.
    pub node_id: u32,
    /// `timestamp-ms`: milliseconds since the sender booted, modulo 2^32.
    pub timestamp_ms: u32,
    /// `node-as`; 0 when Q = 0.
    pub node_as: u32,
}

impl Header {
    /// Whether the datagram is AS-qualified in the sense of check 8: Q = 1 with a non-zero
    /// AS (a Q = 1 datagram with AS 0 is unqualified).
    pub const fn effectively_qualified(&self) -> bool {
        self.as_qualified && self.node_as != 0
    }
}

/// Tier 3 diagnostics of one entry (seed 003 section 5.5). Never used for weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diagnostics {
    /// `link-capacity`, Gbps, binary32 on the wire.
    pub link_capacity: f32,
    /// `queue-depth`: round(D x 255).
    pub queue_depth: u8,
    /// `ecn-marking-rate`: round(E x 31), 0..=31.
    pub ecn_marking_rate: u8,
    /// `pfc-pause-fraction`: round(F x 31), 0..=31.
    pub pfc_pause_fraction: u8,
    /// `drops-active`.
    pub drops_active: bool,
}

/// One `link-quality` entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// `remote-as`; 0 when Q = 0.
    pub remote_as: u32,
    /// `remote-node-id`, host-order integer.
    pub remote_node_id: u32,
    /// `link-id`: the sender's ifIndex of the link.
    pub link_id: u32,
    /// `available-bandwidth`, Gbps, binary32 on the wire.
    pub available_bandwidth: f32,
    /// `lqs`, 0..=255.
    pub lqs: u8,
    /// `cl`, 0..=7.
    pub cl: u8,
    /// The diagnostics block when D = 1 and V = 1.
    pub diagnostics: Option<Diagnostics>,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A decoded advertisement: the header and its validated entries, borrowed from the
/// payload.
#[derive(Clone, Copy, Debug)]
pub struct Advertisement<'a> {
    /// The header.
    pub header: Header,
    /// The authentication trailer, when the A flag is set (framed, not verified: the MAC
    /// is checked in `lq-user`).
    pub trailer: Option<crate::auth::Trailer<'a>>,
    /// The advertisement's length without the trailer (what the MAC covers after the
    /// pseudo-header, with the trailer's fixed part).
    pub body_len: usize,
    entries: &'a [u8],
    count: usize,
}

impl<'a> Advertisement<'a> {
    /// Number of entries.
    pub const fn entry_count(&self) -> usize {
        self.count
    }

    /// The entries, in wire order.
    pub fn entries(&self) -> Entries<'a> {
        Entries {
            buf: self.entries,
            q: self.header.as_qualified,
            d: self.header.diagnostics,
            next: 0,
            count: self.count,
        }
    }
}

/// Iterator over the entries of a decoded [`Advertisement`].
#[derive(Clone, Debug)]
pub struct Entries<'a> {
    buf: &'a [u8],
    q: bool,
    d: bool,
    next: usize,
    count: usize,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if self.next >= self.count {
            return None;
        }
        let len = entry_len(self.q, self.d);
        let e = self.buf.get(self.next * len..(self.next + 1) * len)?;
        self.next += 1;
        Some(parse_entry(e, self.q, self.d))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.count - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Entries<'_> {}

/// Parses one entry of exactly `entry_len(q, d)` octets (already length-checked).
fn parse_entry(e: &[u8], q: bool, d: bool) -> Entry {
    let remote_as = if q { be32(e, 16) } else { 0 };
    let diag_at = ENTRY_BASE_LEN + if q { AS_LEN } else { 0 };
    let diagnostics = if d && e[13] & ENTRY_FLAG_V != 0 {
        let b = &e[diag_at..diag_at + DIAGNOSTICS_LEN];
        Some(Diagnostics {
            link_capacity: f32::from_bits(be32(b, 0)),
            queue_depth: b[4],
            ecn_marking_rate: b[5] >> 3,
            pfc_pause_fraction: b[6] >> 3,
            drops_active: b[6] & DIAG_FLAG_X != 0,
        })
    } else {
        None
    };
    Entry {
        remote_as,
        remote_node_id: be32(e, 0),
        link_id: be32(e, 4),
        available_bandwidth: f32::from_bits(be32(e, 8)),
        lqs: e[12],
        cl: e[13] >> 5,
        diagnostics,
    }
}

/// Decodes and validates a UDP payload with checks 5 to 9 of the spec, in the spec's order.
/// Checks 1-4 belong to [`crate::frame`]; check 10 (sequence) and 11 (store) to
/// [`crate::receive`].
pub fn decode<'a>(
    payload: &'a [u8],
    policy: &DecodePolicy<'_>,
) -> Result<Advertisement<'a>, DecodeError> {
    // Check 5.
    if payload.len() < HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    if payload[0] >> 4 != VERSION {
        return Err(DecodeError::BadVersion);
    }
    let flags = payload[0];
    let q = flags & FLAG_Q != 0;
    let d = flags & FLAG_D != 0;
    // Check 6.
    let mode = Mode::from_wire(payload[1]).ok_or(DecodeError::BadMode)?;
    // Check 7. With the A flag the octets after the entries are exactly one
    // authentication trailer (`auth::frame_trailer`), whose length is its own.
    let count = usize::from(be16(payload, 12));
    let elen = entry_len(q, d);
    let hlen = header_len(q);
    let body_len = hlen + count * elen;
    if usize::from(payload[14]) != elen || count > MAX_ENTRIES || payload.len() < body_len {
        return Err(DecodeError::BadLength);
    }
    let trailer = if flags & crate::auth::FLAG_A != 0 {
        Some(crate::auth::frame_trailer(&payload[body_len..]).ok_or(DecodeError::BadLength)?)
    } else if payload.len() != body_len {
        return Err(DecodeError::BadLength);
    } else {
        None
    };
    let header = Header {
        as_qualified: q,
        diagnostics: d,
        pfc_fabric: flags & FLAG_P != 0,
        mode,
        sequence: be16(payload, 2),
        node_id: be32(payload, 4),
        timestamp_ms: be32(payload, 8),
        node_as: if q { be32(payload, 16) } else { 0 },
    };
    // Check 8.
    if let AsQualification::Required(local) = policy.as_qualification {
        let qualified = header.effectively_qualified();
        if qualified != local || (qualified && !as_plan_contains(policy.as_plan, header.node_as)) {
            return Err(DecodeError::AsMismatch);
        }
    }
    // Check 9: every value of every entry, before anything is stored.
    let entries = &payload[hlen..body_len];
    let diag_at = ENTRY_BASE_LEN + if q { AS_LEN } else { 0 };
    for e in entries.chunks_exact(elen) {
        if !bandwidth_bits_valid(be32(e, 8)) {
            return Err(DecodeError::BadValue);
        }
        if d && e[13] & ENTRY_FLAG_V != 0 && !bandwidth_bits_valid(be32(e, diag_at)) {
            return Err(DecodeError::BadValue);
        }
    }
    Ok(Advertisement {
        header,
        trailer,
        body_len,
        entries,
        count,
    })
}

/// Why an advertisement could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is shorter than [`encoded_len`].
    BufferTooSmall,
    /// More than [`MAX_ENTRIES`] entries: split them over several datagrams.
    TooManyEntries,
    /// A CL above 7, an ECN or PFC code above 31, or a bandwidth the receiver would refuse.
    ValueOutOfRange,
    /// An AS number is set while the header is not AS-qualified.
    AsWithoutQualifier,
    /// An entry carries diagnostics while the header's D flag is clear.
    DiagnosticsWithoutFlag,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BufferTooSmall => "output buffer too small",
            Self::TooManyEntries => "more than 91 entries in one datagram",
            Self::ValueOutOfRange => "a field value is out of its wire range",
            Self::AsWithoutQualifier => "an AS number is set but the Q flag is clear",
            Self::DiagnosticsWithoutFlag => "an entry has diagnostics but the D flag is clear",
        })
    }
}

/// The payload length of an advertisement with `count` entries.
pub const fn encoded_len(header: &Header, count: usize) -> usize {
    header_len(header.as_qualified) + count * entry_len(header.as_qualified, header.diagnostics)
}

/// Writes one datagram's UDP payload into `out` and returns its length. The reserved bits
/// are written as 0.
pub fn encode(header: &Header, entries: &[Entry], out: &mut [u8]) -> Result<usize, EncodeError> {
    let q = header.as_qualified;
    let d = header.diagnostics;
    if entries.len() > MAX_ENTRIES {
        return Err(EncodeError::TooManyEntries);
    }
    let len = encoded_len(header, entries.len());
    let out = out.get_mut(..len).ok_or(EncodeError::BufferTooSmall)?;
    if !q && header.node_as != 0 {
        return Err(EncodeError::AsWithoutQualifier);
    }
    for e in entries {
        if e.cl > 7 || !bandwidth_bits_valid(e.available_bandwidth.to_bits()) {
            return Err(EncodeError::ValueOutOfRange);
        }
        if !q && e.remote_as != 0 {
            return Err(EncodeError::AsWithoutQualifier);
        }
        if let Some(diag) = &e.diagnostics {
            if !d {
                return Err(EncodeError::DiagnosticsWithoutFlag);
            }
            if diag.ecn_marking_rate > 31
                || diag.pfc_pause_fraction > 31
                || !bandwidth_bits_valid(diag.link_capacity.to_bits())
            {
                return Err(EncodeError::ValueOutOfRange);
            }
        }
    }
    out.fill(0);
    out[0] = VERSION << 4
        | if q { FLAG_Q } else { 0 }
        | if d { FLAG_D } else { 0 }
        | if header.pfc_fabric { FLAG_P } else { 0 };
    out[1] = header.mode.to_wire();
    out[2..4].copy_from_slice(&header.sequence.to_be_bytes());
    out[4..8].copy_from_slice(&header.node_id.to_be_bytes());
    out[8..12].copy_from_slice(&header.timestamp_ms.to_be_bytes());
    // Cannot truncate: entries.len() <= 91.
    out[12..14].copy_from_slice(&(entries.len() as u16).to_be_bytes());
    let elen = entry_len(q, d);
    out[14] = elen as u8;
    if q {
        out[16..20].copy_from_slice(&header.node_as.to_be_bytes());
    }
    let hlen = header_len(q);
    for (e, w) in entries.iter().zip(out[hlen..].chunks_exact_mut(elen)) {
        w[0..4].copy_from_slice(&e.remote_node_id.to_be_bytes());
        w[4..8].copy_from_slice(&e.link_id.to_be_bytes());
        w[8..12].copy_from_slice(&e.available_bandwidth.to_bits().to_be_bytes());
        w[12] = e.lqs;
        w[13] = e.cl << 5
            | if e.diagnostics.is_some() {
                ENTRY_FLAG_V
            } else {
                0
            };
        let mut at = ENTRY_BASE_LEN;
        if q {
            w[at..at + 4].copy_from_slice(&e.remote_as.to_be_bytes());
            at += AS_LEN;
        }
        if let Some(diag) = &e.diagnostics {
            w[at..at + 4].copy_from_slice(&diag.link_capacity.to_bits().to_be_bytes());
            w[at + 4] = diag.queue_depth;
            w[at + 5] = diag.ecn_marking_rate << 3;
            w[at + 6] =
                diag.pfc_pause_fraction << 3 | if diag.drops_active { DIAG_FLAG_X } else { 0 };
        }
    }
    Ok(len)
}

/// A decimal64 with 3 fraction digits (the YANG `bandwidth-gbps` type), held exactly in
/// milli-units. Displays in YANG canonical form: no leading or trailing zeros, one digit on
/// each side of the point at least (RFC 7950 section 9.3.2), e.g. `180.0`, `390.5`,
/// `0.125`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Decimal64Milli(pub u64);

impl Decimal64Milli {
    /// Converts a wire binary32 to decimal64: the exact binary value rounded to 3 fraction
    /// digits, ties to even (the spec's display rule). `None` for values the receive checks
    /// refuse (NaN, infinite, negative, above the decimal64 maximum).
    pub fn from_f32(v: f32) -> Option<Self> {
        let bits = v.to_bits();
        if !bandwidth_bits_valid(bits) {
            return None;
        }
        let bits = bits & 0x7fff_ffff;
        if bits == 0 {
            return Some(Self(0));
        }
        let exp = (bits >> 23) as i32;
        let frac = u128::from(bits & 0x7f_ffff);
        // value = mant * 2^e2.
        let (mant, e2) = if exp == 0 {
            (frac, -149)
        } else {
            (frac | 0x80_0000, exp - 150)
        };
        let scaled = mant * 1000;
        let milli = if e2 >= 0 {
            // Exact; e2 <= 30 for values below the maximum, so this cannot overflow u128.
            scaled << e2
        } else {
            let shift = (-e2) as u32;
            if shift >= 64 {
                // value < 2^24 * 2^-64 * 1000 < 0.0005: rounds to 0.
                0
            } else {
                let q = scaled >> shift;
                let rem = scaled & ((1u128 << shift) - 1);
                let half = 1u128 << (shift - 1);
                if rem > half || (rem == half && q & 1 == 1) {
                    q + 1
                } else {
                    q
                }
            }
        };
        u64::try_from(milli)
            .ok()
            .filter(|m| *m <= DECIMAL64_MAX_MILLI)
            .map(Self)
    }

    /// The nearest binary32 (ties to even) for the wire.
    pub fn to_f32(self) -> f32 {
        // u64 -> f64 is exact below 2^53; the division by a power of ten is then correctly
        // rounded in f64 and the final rounding to f32 can double-round only for values
        // whose f64 lies exactly between two f32s, which a decimal with 3 digits never hits
        // below 2^24 (checked by the round-trip property test).
        (self.0 as f64 / 1000.0) as f32
    }
}

impl fmt::Display for Decimal64Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let int = self.0 / 1000;
        let mut frac = self.0 % 1000;
        let mut digits = 3;
        while digits > 1 && frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        write!(f, "{int}.{frac:0digits$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{format, string::ToString, vec, vec::Vec};

    const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
    const VECTOR_2: &str =
        "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";

    fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from_be_bytes([a, b, c, d])
    }

    fn vector_1() -> (Header, Vec<Entry>) {
        (
            Header {
                as_qualified: false,
                diagnostics: true,
                pfc_fabric: true,
                mode: Mode::Triggered,
                sequence: 0x1234,
                node_id: ip(10, 0, 0, 2),
                timestamp_ms: 100,
                node_as: 0,
            },
            vec![
                Entry {
                    remote_as: 0,
                    remote_node_id: ip(10, 0, 1, 4),
                    link_id: 7,
                    available_bandwidth: 180.0,
                    lqs: 72,
                    cl: 3,
                    diagnostics: Some(Diagnostics {
                        link_capacity: 400.0,
                        queue_depth: 77,
                        ecn_marking_rate: 5,
                        pfc_pause_fraction: 0,
                        drops_active: false,
                    }),
                },
                Entry {
                    remote_as: 0,
                    remote_node_id: ip(10, 0, 1, 1),
                    link_id: 5,
                    available_bandwidth: 390.5,
                    lqs: 237,
                    cl: 0,
                    diagnostics: None,
                },
            ],
        )
    }

    fn vector_2() -> (Header, Vec<Entry>) {
        (
            Header {
                as_qualified: true,
                diagnostics: false,
                pfc_fabric: false,
                mode: Mode::Periodic,
                sequence: 1,
                node_id: ip(192, 0, 2, 1),
                timestamp_ms: 0xffff_fff0,
                node_as: 4_200_000_001,
            },
            vec![Entry {
                remote_as: 65001,
                remote_node_id: ip(192, 0, 2, 9),
                link_id: 1,
                available_bandwidth: 0.0,
                lqs: 0,
                cl: 7,
                diagnostics: None,
            }],
        )
    }

    #[test]
    fn spec_vectors_encode_byte_for_byte() {
        for (hex_str, (h, e)) in [(VECTOR_1, vector_1()), (VECTOR_2, vector_2())] {
            let mut buf = [0u8; MAX_PAYLOAD_LEN];
            let n = encode(&h, &e, &mut buf).unwrap();
            assert_eq!(hex::encode(&buf[..n]), hex_str);
        }
    }

    #[test]
    fn spec_vectors_decode_field_for_field() {
        for (hex_str, (h, e)) in [(VECTOR_1, vector_1()), (VECTOR_2, vector_2())] {
            let bytes = hex::decode(hex_str).unwrap();
            let adv = decode(&bytes, &DecodePolicy::ANY).unwrap();
            assert_eq!(adv.header, h);
            assert_eq!(adv.entries().collect::<Vec<_>>(), e);
        }
    }

    #[test]
    fn bandwidth_max_bits_is_the_largest_binary32_within_decimal64() {
        let max = 9_223_372_036_854_775.807_f64;
        assert!(f64::from(f32::from_bits(BANDWIDTH_MAX_BITS)) <= max);
        assert!(f64::from(f32::from_bits(BANDWIDTH_MAX_BITS + 1)) > max);
        assert!(bandwidth_bits_valid((-0.0f32).to_bits()));
        assert!(!bandwidth_bits_valid((-1.0f32).to_bits()));
        assert!(!bandwidth_bits_valid(f32::NAN.to_bits()));
        assert!(!bandwidth_bits_valid(f32::INFINITY.to_bits()));
        assert!(!bandwidth_bits_valid(f32::from_bits(0x7fc0_0001).to_bits()));
    }

    #[test]
    fn serial_arithmetic_follows_rfc1982() {
        assert!(serial_gt(1, 0));
        assert!(serial_gt(0, 65535));
        assert!(!serial_gt(5, 5));
        assert!(!serial_gt(0, 1));
        assert!(!serial_gt(0x8000, 0)); // exactly half the space apart: undefined, refused
        assert!(serial_gt(0x7fff, 0));
    }

    #[test]
    fn decimal64_display_is_canonical_and_rounds_ties_to_even() {
        let d = |v: f32| Decimal64Milli::from_f32(v).unwrap().to_string();
        assert_eq!(d(180.0), "180.0");
        assert_eq!(d(390.5), "390.5");
        assert_eq!(d(0.0), "0.0");
        assert_eq!(d(-0.0), "0.0");
        assert_eq!(d(0.125), "0.125");
        assert_eq!(d(61.25), "61.25");
        // 0.0625 is exact in binary: 62.5 milli, a tie, rounds to even 62.
        assert_eq!(d(0.0625), "0.062");
        // 0.1875 = 187.5 milli, tie, rounds to 188.
        assert_eq!(d(0.1875), "0.188");
        // 0.1 as binary32 is 0.100000001490116...
        assert_eq!(d(0.1), "0.1");
        assert_eq!(d(f32::from_bits(1)), "0.0");
        let max = Decimal64Milli::from_f32(f32::from_bits(BANDWIDTH_MAX_BITS)).unwrap();
        assert!(max.0 <= DECIMAL64_MAX_MILLI);
        assert_eq!(
            format!("{}", Decimal64Milli(DECIMAL64_MAX_MILLI)),
            "9223372036854775.807"
        );
        assert!(Decimal64Milli::from_f32(f32::NAN).is_none());
    }

    #[test]
    fn every_truncation_of_a_valid_datagram_is_refused() {
        for hex_str in [VECTOR_1, VECTOR_2] {
            let bytes = hex::decode(hex_str).unwrap();
            for n in 0..bytes.len() {
                let want = if n < HEADER_LEN {
                    DecodeError::Truncated
                } else {
                    DecodeError::BadLength
                };
                assert_eq!(
                    decode(&bytes[..n], &DecodePolicy::ANY).unwrap_err(),
                    want,
                    "length {n}"
                );
            }
        }
    }

    #[test]
    fn flag_and_length_mismatches_are_bad_length() {
        let bytes = hex::decode(VECTOR_1).unwrap();
        // Flip Q, D or both: the entry length no longer matches the flags.
        for flip in [FLAG_Q, FLAG_D, FLAG_Q | FLAG_D] {
            let mut b = bytes.clone();
            b[0] ^= flip;
            assert_eq!(
                decode(&b, &DecodePolicy::ANY).unwrap_err(),
                DecodeError::BadLength
            );
        }
        // Wrong entry length octet, wrong count, trailing octet.
        for (at, v) in [(14usize, 16u8), (14, 0), (13, 3), (13, 1)] {
            let mut b = bytes.clone();
            b[at] = v;
            assert_eq!(
                decode(&b, &DecodePolicy::ANY).unwrap_err(),
                DecodeError::BadLength,
                "{at}={v}"
            );
        }
        let mut b = bytes.clone();
        b.push(0);
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadLength
        );
    }

    #[test]
    fn version_mode_as_and_value_checks() {
        let bytes = hex::decode(VECTOR_1).unwrap();
        let mut b = bytes.clone();
        b[0] = (b[0] & 0x0f) | 0x20;
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadVersion
        );
        for mode in [2u8, 3, 255] {
            let mut b = bytes.clone();
            b[1] = mode;
            assert_eq!(
                decode(&b, &DecodePolicy::ANY).unwrap_err(),
                DecodeError::BadMode
            );
        }
        // Reserved bits are ignored.
        let mut b = bytes.clone();
        b[15] = 0xff;
        b[16 + 14] = 0xff;
        assert!(decode(&b, &DecodePolicy::ANY).is_ok());
        // The bit version 1 reserved as R is A (`auth::FLAG_A`): a trailer must follow.
        let mut b = bytes.clone();
        b[0] |= crate::auth::FLAG_A;
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadLength
        );
        let body = b.len();
        b.resize(body + 48, 0);
        crate::auth::write_trailer(&mut b, body, crate::auth::Algorithm::HmacSha256, 1, 1).unwrap();
        let adv = decode(&b, &DecodePolicy::ANY).unwrap();
        assert_eq!(
            (adv.body_len, adv.trailer.map(|t| t.key_id)),
            (body, Some(1))
        );
        b.push(0);
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadLength
        );
        // Q = 0 against a local as-qualified = true.
        let strict = DecodePolicy {
            as_qualification: AsQualification::Required(true),
            as_plan: &[],
        };
        assert_eq!(
            decode(&bytes, &strict).unwrap_err(),
            DecodeError::AsMismatch
        );
        let v2 = hex::decode(VECTOR_2).unwrap();
        let plan = [AsRange {
            first: 65000,
            last: 65100,
        }];
        let planned = DecodePolicy {
            as_qualification: AsQualification::Required(true),
            as_plan: &plan,
        };
        assert_eq!(decode(&v2, &planned).unwrap_err(), DecodeError::AsMismatch);
        let plan = [AsRange::single(4_200_000_001)];
        let planned = DecodePolicy {
            as_qualification: AsQualification::Required(true),
            as_plan: &plan,
        };
        assert!(decode(&v2, &planned).is_ok());
        // NaN bandwidth in entry 2; NaN capacity in entry 2 only matters when V = 1.
        let mut b = bytes.clone();
        b[16 + 24 + 8..16 + 24 + 12].copy_from_slice(&f32::NAN.to_bits().to_be_bytes());
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadValue
        );
        let mut b = bytes.clone();
        b[16 + 24 + 16..16 + 24 + 20].copy_from_slice(&(-1.0f32).to_bits().to_be_bytes());
        assert!(
            decode(&b, &DecodePolicy::ANY).is_ok(),
            "capacity of an entry with V = 0 is ignored"
        );
        b[16 + 24 + 13] |= ENTRY_FLAG_V;
        assert_eq!(
            decode(&b, &DecodePolicy::ANY).unwrap_err(),
            DecodeError::BadValue
        );
    }

    #[test]
    fn encode_refuses_what_a_receiver_would_refuse() {
        let (h, mut e) = vector_1();
        let mut buf = [0u8; MAX_PAYLOAD_LEN];
        e[0].cl = 8;
        assert_eq!(encode(&h, &e, &mut buf), Err(EncodeError::ValueOutOfRange));
        let (mut h, e) = vector_1();
        h.diagnostics = false;
        assert_eq!(
            encode(&h, &e, &mut buf),
            Err(EncodeError::DiagnosticsWithoutFlag)
        );
        let (h, e) = vector_1();
        assert_eq!(
            encode(&h, &e, &mut buf[..10]),
            Err(EncodeError::BufferTooSmall)
        );
        let many = vec![e[1]; MAX_ENTRIES + 1];
        assert_eq!(
            encode(&h, &many, &mut buf),
            Err(EncodeError::TooManyEntries)
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn bandwidth() -> impl Strategy<Value = f32> {
            prop_oneof![
                (0u32..=BANDWIDTH_MAX_BITS).prop_map(f32::from_bits),
                (0u64..=1_000_000_000).prop_map(|m| Decimal64Milli(m).to_f32()),
            ]
        }

        fn header() -> impl Strategy<Value = Header> {
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<u16>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
            )
                .prop_map(|(q, d, p, m, sequence, node_id, timestamp_ms, node_as)| {
                    Header {
                        as_qualified: q,
                        diagnostics: d,
                        pfc_fabric: p,
                        mode: if m { Mode::Triggered } else { Mode::Periodic },
                        sequence,
                        node_id,
                        timestamp_ms,
                        node_as: if q { node_as } else { 0 },
                    }
                })
        }

        fn entry(q: bool, d: bool) -> impl Strategy<Value = Entry> {
            let diag = (bandwidth(), any::<u8>(), 0u8..32, 0u8..32, any::<bool>()).prop_map(
                |(c, qd, e, p, x)| Diagnostics {
                    link_capacity: c,
                    queue_depth: qd,
                    ecn_marking_rate: e,
                    pfc_pause_fraction: p,
                    drops_active: x,
                },
            );
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                bandwidth(),
                any::<u8>(),
                0u8..8,
                proptest::option::of(diag),
            )
                .prop_map(move |(ras, rid, link, bw, lqs, cl, diag)| Entry {
                    remote_as: if q { ras } else { 0 },
                    remote_node_id: rid,
                    link_id: link,
                    available_bandwidth: bw,
                    lqs,
                    cl,
                    diagnostics: if d { diag } else { None },
                })
        }

        fn advertisement() -> impl Strategy<Value = (Header, Vec<Entry>)> {
            header().prop_flat_map(|h| {
                (
                    Just(h),
                    proptest::collection::vec(
                        entry(h.as_qualified, h.diagnostics),
                        0..=MAX_ENTRIES,
                    ),
                )
            })
        }

        proptest! {
            #[test]
            fn decode_inverts_encode((h, e) in advertisement()) {
                let mut buf = [0u8; MAX_PAYLOAD_LEN];
                let n = encode(&h, &e, &mut buf).unwrap();
                prop_assert_eq!(n, encoded_len(&h, e.len()));
                let adv = decode(&buf[..n], &DecodePolicy::ANY).unwrap();
                prop_assert_eq!(adv.header, h);
                let got: Vec<Entry> = adv.entries().collect();
                // Compare bit patterns: -0.0 == 0.0 would hide a sign flip.
                prop_assert_eq!(got.len(), e.len());
                for (a, b) in got.iter().zip(&e) {
                    prop_assert_eq!(a.available_bandwidth.to_bits(), b.available_bandwidth.to_bits());
                    prop_assert_eq!(a, b);
                }
            }

            #[test]
            fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..800)) {
                let _ = decode(&bytes, &DecodePolicy::ANY).map(|a| a.entries().count());
            }

            #[test]
            fn decimal_round_trips_through_binary32(m in 0u64..16_777_216) {
                // Below 2^24 milli (16777.216 Gbps) a binary32 holds 3 decimals well enough
                // that the display of the wire value gives back the decimal.
                let back = Decimal64Milli::from_f32(Decimal64Milli(m).to_f32()).unwrap();
                prop_assert!(back.0.abs_diff(m) <= 1, "{} -> {}", m, back.0);
            }
        }
    }
}
