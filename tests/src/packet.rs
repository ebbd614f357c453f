//! A small frame builder for crafted LQ datagrams and their mutations.

use lq_common::wire::{self, Entry, Header};

/// The IP layer of a crafted frame.
#[derive(Clone, Copy, Debug)]
pub enum Ip {
    /// IPv4 with a TTL, the fragment field (flags + offset) and extra header words.
    V4 {
        /// TTL.
        ttl: u8,
        /// Flags and fragment offset (0x2000 = MF).
        frag: u16,
        /// 32-bit option words after the 20-octet header.
        options: u8,
    },
    /// IPv6 with a Hop Limit.
    V6 {
        /// Hop Limit.
        hop_limit: u8,
    },
}

impl Ip {
    /// IPv4, TTL 255, no fragment, no options.
    pub const V4_GTSM: Ip = Ip::V4 {
        ttl: 255,
        frag: 0,
        options: 0,
    };
    /// IPv6, Hop Limit 255.
    pub const V6_GTSM: Ip = Ip::V6 { hop_limit: 255 };
}

/// A crafted frame.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    /// VLAN tags: (TPID, TCI) each, outermost first.
    pub vlans: Vec<(u16, u16)>,
    /// The IP layer.
    pub ip: Ip,
    /// IP protocol (17 = UDP).
    pub protocol: u8,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP length override (default: 8 + payload).
    pub udp_len: Option<u16>,
    /// The UDP payload.
    pub payload: Vec<u8>,
    /// Pad the frame with zeros to at least this length (Ethernet minimum 60).
    pub pad_to: usize,
}

impl FrameSpec {
    /// An IPv4 GTSM frame to the default port carrying `payload`.
    pub fn lq(payload: Vec<u8>) -> Self {
        Self {
            vlans: Vec::new(),
            ip: Ip::V4_GTSM,
            protocol: 17,
            dst_port: wire::DEFAULT_PORT,
            udp_len: None,
            payload,
            pad_to: 60,
        }
    }

    /// Builds the frame octets.
    pub fn build(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(128 + self.payload.len());
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // destination
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // source
        let l3_type: u16 = match self.ip {
            Ip::V4 { .. } => 0x0800,
            Ip::V6 { .. } => 0x86dd,
        };
        for (tpid, tci) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&l3_type.to_be_bytes());
        let udp_len = self.udp_len.unwrap_or((8 + self.payload.len()) as u16);
        match self.ip {
            Ip::V4 { ttl, frag, options } => {
                let ihl = 5 + options;
                let total = (u16::from(ihl) * 4) + 8 + self.payload.len() as u16;
                f.push(0x40 | ihl);
                f.push(0);
                f.extend_from_slice(&total.to_be_bytes());
                f.extend_from_slice(&[0, 1]);
                f.extend_from_slice(&frag.to_be_bytes());
                f.push(ttl);
                f.push(self.protocol);
                f.extend_from_slice(&[0, 0]);
                f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
                for _ in 0..options {
                    f.extend_from_slice(&[1, 1, 1, 1]); // NOP options
                }
            }
            Ip::V6 { hop_limit } => {
                f.extend_from_slice(&[0x60, 0, 0, 0]);
                f.extend_from_slice(&(8 + self.payload.len() as u16).to_be_bytes());
                f.push(self.protocol);
                f.push(hop_limit);
                f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            }
        }
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&self.dst_port.to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&self.payload);
        if f.len() < self.pad_to {
            f.resize(self.pad_to, 0);
        }
        f
    }
}

/// A frame that is neither LQ nor PFC: UDP to port 53 with 22 octets of payload, padded to
/// at least 64 octets (the size untagged over IPv4), over `ip` with `vlans` (TPID, TCI
/// each, outermost first). The benchmarks' stand-in for the other traffic of an interface.
pub fn udp53_frame(ip: Ip, vlans: Vec<(u16, u16)>) -> Vec<u8> {
    FrameSpec {
        vlans,
        ip,
        dst_port: 53,
        payload: vec![0xab; 22],
        pad_to: 64,
        ..FrameSpec::lq(Vec::new())
    }
    .build()
}

/// Encodes an advertisement payload (panics on an invalid one: test input only).
pub fn payload(header: &Header, entries: &[Entry]) -> Vec<u8> {
    let mut buf = vec![0u8; wire::MAX_PAYLOAD_LEN];
    let n = wire::encode(header, entries, &mut buf).expect("valid test advertisement");
    buf.truncate(n);
    buf
}

/// A plain header: unqualified, no diagnostics, periodic.
pub fn header(node_id: u32, sequence: u16) -> Header {
    Header {
        as_qualified: false,
        diagnostics: false,
        pfc_fabric: false,
        mode: wire::Mode::Periodic,
        sequence,
        node_id,
        timestamp_ms: 1000,
        node_as: 0,
    }
}

/// A plain entry.
pub fn entry(remote_node_id: u32, link_id: u32, lqs: u8, cl: u8) -> Entry {
    Entry {
        remote_as: 0,
        remote_node_id,
        link_id,
        available_bandwidth: 100.0,
        lqs,
        cl,
        diagnostics: None,
    }
}

/// An IPv4 address as the host-order integer the maps use.
pub const fn ip4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}
