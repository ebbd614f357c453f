//! Receive checks 1-4 of `spec/lq-udp-wire.md`: find an LQ datagram in an Ethernet frame.
//!
//! The XDP program applies the same checks at the same offsets; this is the reference used
//! by `lqd decode --pcap` and by the differential test.

/// EtherType IPv4.
pub const ETH_P_IP: u16 = 0x0800;
/// EtherType IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// EtherType 802.1Q customer tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// EtherType 802.1ad service tag.
pub const ETH_P_8021AD: u16 = 0x88a8;
/// Ethernet header length.
pub const ETH_HLEN: usize = 14;
/// One VLAN tag.
pub const VLAN_HLEN: usize = 4;
/// IPv6 fixed header.
pub const IPV6_HLEN: usize = 40;
/// UDP header.
pub const UDP_HLEN: usize = 8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// The only TTL / Hop Limit accepted (GTSM, RFC 5082; seed 003 section 7.3).
pub const GTSM_TTL: u8 = 255;

/// What checks 1-4 make of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass<'a> {
    /// Checks 1-3 failed: not an LQ datagram; the XDP program passes it untouched.
    NotOurs,
    /// Check 4: an LQ datagram with a TTL / Hop Limit other than 255.
    BadTtl,
    /// Check 5 (first half): the UDP length is below 8 or beyond the frame.
    Truncated,
    /// An LQ datagram: the UDP payload, its length taken from the UDP header.
    Payload(&'a [u8]),
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The IP source address of a frame (Ethernet II, at most one VLAN tag, IPv4 or IPv6), for
/// tools that say where a datagram came from; `None` for anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpSource {
    /// An IPv4 source address.
    V4([u8; 4]),
    /// An IPv6 source address.
    V6([u8; 16]),
}

impl From<IpSource> for core::net::IpAddr {
    fn from(a: IpSource) -> Self {
        match a {
            IpSource::V4(a) => a.into(),
            IpSource::V6(a) => a.into(),
        }
    }
}

/// [`IpSource`] of `frame`, read by the same layer rules as [`classify`].
pub fn ip_source(frame: &[u8]) -> Option<IpSource> {
    let mut ethertype = be16(frame, 12)?;
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        ethertype = be16(frame, 16)?;
        l3 += VLAN_HLEN;
    }
    match ethertype {
        ETH_P_IP if frame.get(l3)? >> 4 == 4 => {
            Some(IpSource::V4(frame.get(l3 + 12..l3 + 16)?.try_into().ok()?))
        }
        ETH_P_IPV6 if frame.get(l3)? >> 4 == 6 => {
            Some(IpSource::V6(frame.get(l3 + 8..l3 + 24)?.try_into().ok()?))
        }
        _ => None,
    }
}

/// The addresses and UDP ports of a frame, as an authentication trailer's pseudo-header
/// names them (`auth::pseudo_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpEndpoints {
    /// The IP source address.
    pub source: IpSource,
    /// The IP destination address (of the same family).
    pub destination: IpSource,
    /// The UDP source port.
    pub source_port: u16,
    /// The UDP destination port.
    pub destination_port: u16,
}

/// [`UdpEndpoints`] of a UDP `frame`, read by the same layer rules as [`classify`];
/// `None` for anything else.
pub fn udp_endpoints(frame: &[u8]) -> Option<UdpEndpoints> {
    let mut ethertype = be16(frame, 12)?;
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        ethertype = be16(frame, 16)?;
        l3 += VLAN_HLEN;
    }
    let (source, destination, l4) = match ethertype {
        ETH_P_IP if frame.get(l3)? >> 4 == 4 && *frame.get(l3 + 9)? == IPPROTO_UDP => {
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            (
                IpSource::V4(frame.get(l3 + 12..l3 + 16)?.try_into().ok()?),
                IpSource::V4(frame.get(l3 + 16..l3 + 20)?.try_into().ok()?),
                l3 + ihl,
            )
        }
        ETH_P_IPV6 if frame.get(l3)? >> 4 == 6 && *frame.get(l3 + 6)? == IPPROTO_UDP => (
            IpSource::V6(frame.get(l3 + 8..l3 + 24)?.try_into().ok()?),
            IpSource::V6(frame.get(l3 + 24..l3 + 40)?.try_into().ok()?),
            l3 + IPV6_HLEN,
        ),
        _ => return None,
    };
    Some(UdpEndpoints {
        source,
        destination,
        source_port: be16(frame, l4)?,
        destination_port: be16(frame, l4 + 2)?,
    })
}

/// Applies checks 1-4 (and the UDP-length part of check 5) to a whole Ethernet frame
/// without FCS.
pub fn classify(frame: &[u8], port: u16) -> FrameClass<'_> {
    // Check 1: Ethernet II with at most one 802.1Q / 802.1ad tag.
    let Some(mut ethertype) = be16(frame, 12) else {
        return FrameClass::NotOurs;
    };
    let mut l3 = ETH_HLEN;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let Some(inner) = be16(frame, 16) else {
            return FrameClass::NotOurs;
        };
        ethertype = inner;
        l3 += VLAN_HLEN;
    }
    // Check 2.
    let (l4, ttl) = match ethertype {
        ETH_P_IP => {
            let Some(&vihl) = frame.get(l3) else {
                return FrameClass::NotOurs;
            };
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 || frame.len() < l3 + 20 {
                return FrameClass::NotOurs;
            }
            let Some(frag) = be16(frame, l3 + 6) else {
                return FrameClass::NotOurs;
            };
            if frag & 0x3fff != 0 || frame[l3 + 9] != IPPROTO_UDP {
                return FrameClass::NotOurs;
            }
            (l3 + ihl, frame[l3 + 8])
        }
        ETH_P_IPV6 => {
            if frame.len() < l3 + IPV6_HLEN || frame[l3] >> 4 != 6 || frame[l3 + 6] != IPPROTO_UDP {
                return FrameClass::NotOurs;
            }
            (l3 + IPV6_HLEN, frame[l3 + 7])
        }
        _ => return FrameClass::NotOurs,
    };
    // Check 3.
    if frame.len() < l4 + UDP_HLEN || be16(frame, l4 + 2) != Some(port) {
        return FrameClass::NotOurs;
    }
    // Check 4.
    if ttl != GTSM_TTL {
        return FrameClass::BadTtl;
    }
    let udp_len = usize::from(be16(frame, l4 + 4).unwrap_or(0));
    if udp_len < UDP_HLEN || l4 + udp_len > frame.len() {
        return FrameClass::Truncated;
    }
    FrameClass::Payload(&frame[l4 + UDP_HLEN..l4 + udp_len])
}
