//! A small reader for capture files: classic pcap (either byte order, micro- or nanosecond
//! timestamps) and pcapng (sections of either byte order; Interface Description, Enhanced
//! Packet and Simple Packet blocks; every other block is skipped).
//!
//! `lqd decode --pcap` needs only the frames and their link type, so timestamps and options
//! are not interpreted. The reader borrows the frames from the file's bytes, checks every
//! length against the bytes it has, and never panics on any input.

use thiserror::Error;

/// LINKTYPE_ETHERNET: the only link type `lqd decode` accepts.
pub const LINKTYPE_ETHERNET: u16 = 1;

const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const PCAP_HEADER_LEN: usize = 24;
const PCAP_RECORD_LEN: usize = 16;

const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const PCAPNG_IDB: u32 = 0x0000_0001;
const PCAPNG_SPB: u32 = 0x0000_0003;
const PCAPNG_EPB: u32 = 0x0000_0006;

/// The container format of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap format.
    Pcap {
        /// Timestamps in nanoseconds (magic 0xa1b23c4d) rather than microseconds.
        nanos: bool,
        /// The file was written big endian.
        big_endian: bool,
    },
    /// pcapng (each section carries its own byte order).
    PcapNg,
}

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// 1-based position among the file's packet records (Wireshark's frame number).
    pub number: usize,
    /// Link type of the interface it was captured on (LINKTYPE_*).
    pub linktype: u16,
    /// The captured octets (possibly cut short by the snap length).
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// When it was captured, ns since the UNIX epoch (classic pcap's record time; pcapng's
    /// Enhanced Packet Block time in its interface's `if_tsresol`); `None` for a Simple
    /// Packet Block, which has none.
    pub time_ns: Option<u64>,
}

/// A parsed capture file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capture<'a> {
    /// The container format.
    pub format: Format,
    /// Every packet record, in file order.
    pub frames: Vec<Frame<'a>>,
}

/// Why a capture file could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PcapError {
    /// The file starts with neither a pcap magic number nor a pcapng section header.
    #[error(
        "not a pcap or pcapng file (it starts with {0}; expected a pcap magic number such as \
         d4 c3 b2 a1, or the pcapng section header 0a 0d 0d 0a)"
    )]
    UnknownFormat(String),
    /// The file ends in the middle of a header, record or block.
    #[error("truncated: the file ends inside the {what} at offset {offset}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// File offset where it starts.
        offset: usize,
    },
    /// A pcapng block is malformed.
    #[error("malformed pcapng {block} at offset {offset}: {reason}")]
    BadBlock {
        /// The block's kind.
        block: &'static str,
        /// File offset of the block.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A pcapng packet refers to an interface no Interface Description Block described.
    #[error(
        "pcapng packet block at offset {offset} refers to interface {interface}, but its \
         section describes {described} interface(s)"
    )]
    UnknownInterface {
        /// File offset of the packet block.
        offset: usize,
        /// The interface id it names.
        interface: u32,
        /// How many interfaces the section has.
        described: usize,
    },
    /// A frame was not captured on Ethernet.
    #[error(
        "frame {frame}: link type {linktype}{} is not supported; only Ethernet (link type 1) is \
         (capture on one Ethernet interface, e.g. tcpdump -i eth0, not -i any)",
        linktype_suffix(.linktype)
    )]
    UnsupportedLinkType {
        /// The frame's number.
        frame: usize,
        /// Its link type.
        linktype: u16,
    },
}

fn linktype_suffix(linktype: impl std::borrow::Borrow<u16>) -> String {
    linktype_name(*linktype.borrow())
        .map(|n| format!(" ({n})"))
        .unwrap_or_default()
}

/// Names of a few link types an operator may meet instead of Ethernet.
fn linktype_name(linktype: u16) -> Option<&'static str> {
    Some(match linktype {
        0 => "NULL/loopback",
        1 => "Ethernet",
        101 => "raw IP",
        105 => "IEEE 802.11",
        113 => "Linux cooked capture v1",
        127 => "802.11 radiotap",
        228 => "raw IPv4",
        229 => "raw IPv6",
        276 => "Linux cooked capture v2",
        _ => return None,
    })
}

#[derive(Clone, Copy)]
struct Endian {
    big: bool,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> Option<u16> {
        let v: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if self.big {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        })
    }
    fn u32(self, b: &[u8], at: usize) -> Option<u32> {
        let v: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        })
    }
}

/// Reads every frame of a pcap or pcapng file, whatever its link type.
pub fn read(bytes: &[u8]) -> Result<Capture<'_>, PcapError> {
    let Some(head) = bytes.get(..4) else {
        return Err(if bytes.is_empty() {
            PcapError::UnknownFormat("nothing: the file is empty".into())
        } else {
            PcapError::Truncated {
                what: "file header",
                offset: 0,
            }
        });
    };
    let le = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let be = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    match (le, be) {
        (PCAPNG_SHB, _) => read_pcapng(bytes),
        (PCAP_MAGIC_MICROS, _) => read_pcap(bytes, Endian { big: false }, false),
        (PCAP_MAGIC_NANOS, _) => read_pcap(bytes, Endian { big: false }, true),
        (_, PCAP_MAGIC_MICROS) => read_pcap(bytes, Endian { big: true }, false),
        (_, PCAP_MAGIC_NANOS) => read_pcap(bytes, Endian { big: true }, true),
        _ => Err(PcapError::UnknownFormat(format!(
            "{:02x} {:02x} {:02x} {:02x}",
            head[0], head[1], head[2], head[3]
        ))),
    }
}

/// Reads every frame and requires them all to be Ethernet frames.
pub fn read_ethernet(bytes: &[u8]) -> Result<Capture<'_>, PcapError> {
    let capture = read(bytes)?;
    if let Some(f) = capture
        .frames
        .iter()
        .find(|f| f.linktype != LINKTYPE_ETHERNET)
    {
        return Err(PcapError::UnsupportedLinkType {
            frame: f.number,
            linktype: f.linktype,
        });
    }
    Ok(capture)
}

fn read_pcap(bytes: &[u8], e: Endian, nanos: bool) -> Result<Capture<'_>, PcapError> {
    if bytes.len() < PCAP_HEADER_LEN {
        return Err(PcapError::Truncated {
            what: "pcap file header",
            offset: 0,
        });
    }
    // The upper bits of the link-type word may carry FCS information; the link type
    // itself is the low 16 bits.
    let linktype = e.u16(bytes, 20).unwrap_or(0);
    let linktype = if e.big {
        e.u16(bytes, 22).unwrap_or(0)
    } else {
        linktype
    };
    let mut frames = Vec::new();
    let mut at = PCAP_HEADER_LEN;
    while at < bytes.len() {
        let truncated = PcapError::Truncated {
            what: "pcap record",
            offset: at,
        };
        let (Some(incl), Some(orig)) = (e.u32(bytes, at + 8), e.u32(bytes, at + 12)) else {
            return Err(truncated);
        };
        let start = at + PCAP_RECORD_LEN;
        let data = usize::try_from(incl)
            .ok()
            .and_then(|n| start.checked_add(n))
            .and_then(|end| bytes.get(start..end))
            .ok_or(truncated)?;
        // ts_sec, then microseconds or (nanosecond magic) nanoseconds.
        let time_ns = match (e.u32(bytes, at), e.u32(bytes, at + 4)) {
            (Some(sec), Some(frac)) => u64::from(sec)
                .checked_mul(1_000_000_000)
                .and_then(|t| t.checked_add(u64::from(frac) * if nanos { 1 } else { 1000 })),
            _ => None,
        };
        frames.push(Frame {
            number: frames.len() + 1,
            linktype,
            data,
            orig_len: orig,
            time_ns,
        });
        at = start + data.len();
    }
    Ok(Capture {
        format: Format::Pcap {
            nanos,
            big_endian: e.big,
        },
        frames,
    })
}

#[derive(Clone, Copy)]
struct Interface {
    linktype: u16,
    snaplen: u32,
    /// `if_tsresol` (option 9): the timestamp unit, 10^-n s (high bit clear) or 2^-n s
    /// (high bit set); 6 (microseconds) when absent.
    tsresol: u8,
}

impl Interface {
    /// A timestamp of this interface in ns; `None` when it does not fit 64 bits.
    fn ns(&self, ts: u64) -> Option<u64> {
        let n = u32::from(self.tsresol & 0x7f);
        if self.tsresol & 0x80 != 0 {
            // 2^-n s.
            let ns = (u128::from(ts) * 1_000_000_000) >> n.min(127);
            u64::try_from(ns).ok()
        } else if n <= 9 {
            ts.checked_mul(10u64.checked_pow(9 - n)?)
        } else {
            Some(ts / 10u64.checked_pow(n - 9)?)
        }
    }
}

/// The `if_tsresol` option of an Interface Description Block's options (after its 8 octets
/// of fixed fields); 6 when absent or malformed.
fn if_tsresol(e: Endian, options: &[u8]) -> u8 {
    let mut at = 0;
    while let (Some(code), Some(len)) = (e.u16(options, at), e.u16(options, at + 2)) {
        let len = usize::from(len);
        match code {
            0 => break,
            9 if len == 1 => return options.get(at + 4).copied().unwrap_or(6),
            _ => {}
        }
        at += 4 + len.div_ceil(4) * 4;
    }
    6
}

fn read_pcapng(bytes: &[u8]) -> Result<Capture<'_>, PcapError> {
    let mut frames = Vec::new();
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut e = Endian { big: false };
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(raw_type) = bytes.get(at..at + 4) else {
            return Err(PcapError::Truncated {
                what: "pcapng block header",
                offset: at,
            });
        };
        let is_shb = raw_type == PCAPNG_SHB.to_le_bytes();
        if is_shb {
            // The byte order of the section comes from its own header.
            e = match bytes.get(at + 8..at + 12) {
                Some(m) if m == PCAPNG_BYTE_ORDER_MAGIC.to_le_bytes() => Endian { big: false },
                Some(m) if m == PCAPNG_BYTE_ORDER_MAGIC.to_be_bytes() => Endian { big: true },
                Some(_) => {
                    return Err(PcapError::BadBlock {
                        block: "section header block",
                        offset: at,
                        reason: "unknown byte-order magic",
                    });
                }
                None => {
                    return Err(PcapError::Truncated {
                        what: "pcapng section header block",
                        offset: at,
                    });
                }
            };
            interfaces.clear();
        } else if at == 0 {
            return Err(PcapError::BadBlock {
                block: "file",
                offset: 0,
                reason: "does not start with a section header block",
            });
        }
        let block_type = e.u32(bytes, at).unwrap_or(0);
        let name = match block_type {
            PCAPNG_SHB => "section header block",
            PCAPNG_IDB => "interface description block",
            PCAPNG_EPB => "enhanced packet block",
            PCAPNG_SPB => "simple packet block",
            _ => "block",
        };
        let Some(total) = e.u32(bytes, at + 4) else {
            return Err(PcapError::Truncated {
                what: "pcapng block header",
                offset: at,
            });
        };
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        if total < 12 || !total.is_multiple_of(4) {
            return Err(PcapError::BadBlock {
                block: name,
                offset: at,
                reason: "block length is below 12 or not a multiple of 4",
            });
        }
        let Some(block) = at.checked_add(total).and_then(|end| bytes.get(at..end)) else {
            return Err(PcapError::Truncated {
                what: name,
                offset: at,
            });
        };
        if e.u32(block, total - 4) != e.u32(block, 4) {
            return Err(PcapError::BadBlock {
                block: name,
                offset: at,
                reason: "the trailing block length differs from the leading one",
            });
        }
        let body = &block[8..total - 4];
        let short = PcapError::BadBlock {
            block: name,
            offset: at,
            reason: "block too short for its fixed fields",
        };
        match block_type {
            PCAPNG_SHB if body.len() < 16 => return Err(short),
            PCAPNG_IDB => {
                let (Some(linktype), Some(snaplen)) = (e.u16(body, 0), e.u32(body, 4)) else {
                    return Err(short);
                };
                interfaces.push(Interface {
                    linktype,
                    snaplen,
                    tsresol: if_tsresol(e, body.get(8..).unwrap_or_default()),
                });
            }
            PCAPNG_EPB => {
                let (Some(interface), Some(caplen), Some(orig)) =
                    (e.u32(body, 0), e.u32(body, 12), e.u32(body, 16))
                else {
                    return Err(short);
                };
                let iface = usize::try_from(interface)
                    .ok()
                    .and_then(|i| interfaces.get(i))
                    .ok_or(PcapError::UnknownInterface {
                        offset: at,
                        interface,
                        described: interfaces.len(),
                    })?;
                let data = usize::try_from(caplen)
                    .ok()
                    .and_then(|n| body.get(20..20usize.checked_add(n)?))
                    .ok_or(PcapError::BadBlock {
                        block: name,
                        offset: at,
                        reason: "captured length exceeds the block",
                    })?;
                let time_ns = match (e.u32(body, 4), e.u32(body, 8)) {
                    (Some(high), Some(low)) => iface.ns(u64::from(high) << 32 | u64::from(low)),
                    _ => None,
                };
                frames.push(Frame {
                    number: frames.len() + 1,
                    linktype: iface.linktype,
                    data,
                    orig_len: orig,
                    time_ns,
                });
            }
            PCAPNG_SPB => {
                let Some(orig) = e.u32(body, 0) else {
                    return Err(short);
                };
                let iface = interfaces.first().ok_or(PcapError::UnknownInterface {
                    offset: at,
                    interface: 0,
                    described: 0,
                })?;
                // The captured length is the original length cut to the snap length and to
                // the block (whose data is padded to 32 bits).
                let mut caplen = usize::try_from(orig).unwrap_or(usize::MAX);
                if iface.snaplen != 0 {
                    caplen = caplen.min(usize::try_from(iface.snaplen).unwrap_or(usize::MAX));
                }
                caplen = caplen.min(body.len() - 4);
                frames.push(Frame {
                    number: frames.len() + 1,
                    linktype: iface.linktype,
                    data: &body[4..4 + caplen],
                    orig_len: orig,
                    time_ns: None,
                });
            }
            _ => {}
        }
        at += total;
    }
    Ok(Capture {
        format: Format::PcapNg,
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pcap(big: bool, nanos: bool, linktype: u32, frames: &[&[u8]]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let w16 = |v: u16| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        out.extend(w32(if nanos {
            PCAP_MAGIC_NANOS
        } else {
            PCAP_MAGIC_MICROS
        }));
        out.extend(w16(2));
        out.extend(w16(4));
        out.extend(w32(0));
        out.extend(w32(0));
        out.extend(w32(65535));
        out.extend(w32(linktype));
        for (i, f) in frames.iter().enumerate() {
            out.extend(w32(1_700_000_000 + i as u32));
            out.extend(w32(123));
            out.extend(w32(f.len() as u32));
            out.extend(w32(f.len() as u32 + 4));
            out.extend_from_slice(f);
        }
        out
    }

    fn block(big: bool, kind: u32, body: &[u8]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let total = body.len() as u32 + 12;
        let mut out = Vec::new();
        out.extend(w32(kind));
        out.extend(w32(total));
        out.extend(body);
        out.extend(w32(total));
        out
    }

    fn shb(big: bool) -> Vec<u8> {
        let mut body = Vec::new();
        if big {
            body.extend(PCAPNG_BYTE_ORDER_MAGIC.to_be_bytes());
            body.extend(1u16.to_be_bytes());
            body.extend(0u16.to_be_bytes());
        } else {
            body.extend(PCAPNG_BYTE_ORDER_MAGIC.to_le_bytes());
            body.extend(1u16.to_le_bytes());
            body.extend(0u16.to_le_bytes());
        }
        body.extend((-1i64).to_le_bytes());
        block(big, PCAPNG_SHB, &body)
    }

    fn idb(big: bool, linktype: u16, snaplen: u32) -> Vec<u8> {
        let mut body = Vec::new();
        if big {
            body.extend(linktype.to_be_bytes());
            body.extend(0u16.to_be_bytes());
            body.extend(snaplen.to_be_bytes());
        } else {
            body.extend(linktype.to_le_bytes());
            body.extend(0u16.to_le_bytes());
            body.extend(snaplen.to_le_bytes());
        }
        block(big, PCAPNG_IDB, &body)
    }

    fn epb(big: bool, interface: u32, data: &[u8]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut body = Vec::new();
        for v in [interface, 0, 0, data.len() as u32, data.len() as u32] {
            body.extend(w32(v));
        }
        body.extend_from_slice(data);
        block(big, PCAPNG_EPB, &body)
    }

    fn spb(big: bool, orig: u32, data: &[u8]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut body = w32(orig).to_vec();
        body.extend_from_slice(data);
        block(big, PCAPNG_SPB, &body)
    }

    const A: &[u8] = b"first frame, 23 octets!";
    const B: &[u8] = b"second";

    #[test]
    fn classic_pcap_in_every_byte_order_and_resolution() {
        for big in [false, true] {
            for nanos in [false, true] {
                let file = pcap(big, nanos, 1, &[A, B]);
                let c = read_ethernet(&file).unwrap();
                assert_eq!(
                    c.format,
                    Format::Pcap {
                        nanos,
                        big_endian: big
                    }
                );
                assert_eq!(c.frames.len(), 2);
                assert_eq!(c.frames[0].data, A);
                assert_eq!(c.frames[0].orig_len, A.len() as u32 + 4);
                assert_eq!((c.frames[1].number, c.frames[1].data), (2, B));
                assert!(c.frames.iter().all(|f| f.linktype == LINKTYPE_ETHERNET));
            }
        }
    }

    #[test]
    fn classic_pcap_link_type_ignores_fcs_bits_and_refuses_other_types() {
        let file = pcap(false, false, 0x1000_0001, &[A]);
        assert_eq!(read_ethernet(&file).unwrap().frames[0].linktype, 1);
        let file = pcap(true, false, 113, &[A]);
        let err = read_ethernet(&file).unwrap_err();
        assert_eq!(
            err,
            PcapError::UnsupportedLinkType {
                frame: 1,
                linktype: 113
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("113 (Linux cooked capture v1)"), "{msg}");
        assert!(msg.contains("only Ethernet"), "{msg}");
        // An empty capture of another link type has no frame to refuse.
        assert!(read_ethernet(&pcap(false, false, 113, &[])).is_ok());
    }

    #[test]
    fn pcapng_in_both_byte_orders_with_epb_spb_and_skipped_blocks() {
        for big in [false, true] {
            let mut file = shb(big);
            file.extend(idb(big, 1, 0));
            file.extend(block(big, 0x0000_0004, b"name resolution")); // NRB: skipped
            file.extend(epb(big, 0, A));
            file.extend(spb(big, B.len() as u32, B));
            file.extend(block(big, 0x0000_0bad, b"custom")); // unknown: skipped
            let c = read_ethernet(&file).unwrap();
            assert_eq!(c.format, Format::PcapNg);
            let got: Vec<_> = c.frames.iter().map(|f| (f.number, f.data)).collect();
            assert_eq!(got, vec![(1, A), (2, B)]);
        }
    }

    #[test]
    fn pcapng_sections_switch_byte_order_and_interfaces() {
        let mut file = shb(false);
        file.extend(idb(false, 1, 0));
        file.extend(idb(false, 113, 0));
        file.extend(epb(false, 0, A));
        file.extend(shb(true));
        file.extend(idb(true, 1, 0));
        file.extend(epb(true, 0, B));
        let c = read_ethernet(&file).unwrap();
        assert_eq!(c.frames.len(), 2);
        assert_eq!(c.frames[1].data, B);
        // Interface 1 of the first section is not Ethernet.
        let mut file = shb(false);
        file.extend(idb(false, 1, 0));
        file.extend(idb(false, 276, 0));
        file.extend(epb(false, 1, A));
        assert_eq!(
            read_ethernet(&file).unwrap_err(),
            PcapError::UnsupportedLinkType {
                frame: 1,
                linktype: 276
            }
        );
        // Interfaces do not carry over into a new section.
        let mut file = shb(false);
        file.extend(idb(false, 1, 0));
        file.extend(shb(false));
        file.extend(epb(false, 0, A));
        assert!(matches!(
            read(&file).unwrap_err(),
            PcapError::UnknownInterface { described: 0, .. }
        ));
    }

    #[test]
    fn spb_is_cut_to_the_snap_length() {
        let mut file = shb(false);
        file.extend(idb(false, 1, 4));
        file.extend(spb(false, A.len() as u32, &A[..4]));
        let c = read(&file).unwrap();
        assert_eq!(c.frames[0].data, &A[..4]);
        assert_eq!(c.frames[0].orig_len, A.len() as u32);
    }

    #[test]
    fn malformed_files_give_clear_errors() {
        assert!(matches!(
            read(b"").unwrap_err(),
            PcapError::UnknownFormat(_)
        ));
        let err = read(b"GET / HTTP/1.1").unwrap_err();
        assert!(err.to_string().contains("47 45 54 20"), "{err}");
        let file = pcap(false, false, 1, &[A]);
        assert_eq!(
            read(&file[..20]).unwrap_err(),
            PcapError::Truncated {
                what: "pcap file header",
                offset: 0
            }
        );
        assert_eq!(
            read(&file[..file.len() - 1]).unwrap_err(),
            PcapError::Truncated {
                what: "pcap record",
                offset: 24
            }
        );
        let mut file = shb(false);
        file.extend(idb(false, 1, 0));
        let at = file.len();
        file.extend(epb(false, 0, A));
        let n = file.len();
        file[n - 4] ^= 4; // trailing length differs
        assert!(matches!(
            read(&file).unwrap_err(),
            PcapError::BadBlock { offset, .. } if offset == at
        ));
        let mut file = shb(false);
        file.extend(epb(false, 0, A));
        assert!(matches!(
            read(&file).unwrap_err(),
            PcapError::UnknownInterface { interface: 0, .. }
        ));
        // A pcapng file must start with a section header.
        let file = idb(false, 1, 0);
        assert!(matches!(
            read(&file).unwrap_err(),
            PcapError::UnknownFormat(_)
        ));
    }

    fn valid_files() -> Vec<Vec<u8>> {
        let mut ng = shb(false);
        ng.extend(idb(false, 1, 0));
        ng.extend(epb(false, 0, A));
        ng.extend(spb(false, B.len() as u32, B));
        let mut ngbe = shb(true);
        ngbe.extend(idb(true, 1, 3));
        ngbe.extend(spb(true, B.len() as u32, B));
        ngbe.extend(epb(true, 0, A));
        vec![
            pcap(false, false, 1, &[A, B]),
            pcap(true, true, 1, &[B, A]),
            ng,
            ngbe,
        ]
    }

    #[test]
    fn every_truncation_of_a_valid_file_is_an_error_or_a_prefix() {
        for file in valid_files() {
            let whole = read(&file).unwrap();
            for n in 0..file.len() {
                if let Ok(c) = read(&file[..n]) {
                    // Only a cut at a record boundary can succeed, and it yields a prefix.
                    assert!(c.frames.len() < whole.frames.len(), "length {n}");
                    assert_eq!(c.frames[..], whole.frames[..c.frames.len()]);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read(&bytes);
        }

        #[test]
        fn random_bodies_behind_valid_headers_never_panic(
            which in 0usize..4,
            tail in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let file = &valid_files()[which];
            let head = if which < 2 { PCAP_HEADER_LEN } else { 28 };
            let mut bytes = file[..head].to_vec();
            bytes.extend(tail);
            let _ = read(&bytes);
        }

        #[test]
        fn mutated_and_truncated_files_never_panic(
            which in 0usize..4,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut bytes = valid_files()[which].clone();
            for (at, v) in flips {
                let n = bytes.len();
                bytes[at % n] = v;
            }
            let cut = cut % (bytes.len() + 1);
            let _ = read_ethernet(&bytes[..cut]);
        }
    }
}
