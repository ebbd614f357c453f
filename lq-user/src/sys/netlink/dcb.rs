//! The PFC priorities a link has enabled, from its DCB configuration over dcbnl
//! (RTM_GETDCB, DCB_CMD_IEEE_GET, DCB_ATTR_IEEE_PFC `pfc_en`): the Linux counterpart of the
//! PfcEnable bitmap of seed 002. Drivers without DCB (veth, most virtual NICs) answer with an
//! error, and lqd then takes the priorities from the configuration.

use super::wire::{self, Body, Nla};
use crate::sys::netlink::{Rtnl, RtnlError};

/// RTM_GETDCB (include/uapi/linux/rtnetlink.h).
pub const RTM_GETDCB: u16 = libc::RTM_GETDCB;
// dcbnl.h is in neither libc nor netlink-packet-route: its few constants are ours.
/// DCB_CMD_IEEE_GET (include/uapi/linux/dcbnl.h).
pub const DCB_CMD_IEEE_GET: u8 = 21;
/// DCB_ATTR_IFNAME.
pub const DCB_ATTR_IFNAME: u16 = 1;
/// DCB_ATTR_IEEE (nested).
pub const DCB_ATTR_IEEE: u16 = 13;
/// DCB_ATTR_IEEE_PFC: struct ieee_pfc { u8 pfc_cap; u8 pfc_en; u8 mbc; u16 delay; ... }.
pub const DCB_ATTR_IEEE_PFC: u16 = 2;
/// sizeof(struct dcbmsg).
const DCBMSG_LEN: usize = 4;

/// The one attribute lqd sends in a dcbnl request, emitted through `netlink-packet-core`.
enum DcbAttr<'a> {
    /// DCB_ATTR_IFNAME: the device name, NUL-terminated.
    IfName(&'a str),
}

impl Nla for DcbAttr<'_> {
    fn value_len(&self) -> usize {
        match self {
            Self::IfName(n) => n.len() + 1,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::IfName(_) => DCB_ATTR_IFNAME,
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::IfName(n) => {
                let (name, nul) = buf.split_at_mut(n.len());
                name.copy_from_slice(n.as_bytes());
                nul.fill(0);
            }
        }
    }
}

/// Encodes RTM_GETDCB / DCB_CMD_IEEE_GET for `ifname`.
pub fn encode_ieee_get(ifname: &str, seq: u32) -> Vec<u8> {
    // struct dcbmsg { u8 dcb_family; u8 cmd; u16 dcb_pad; }
    let dcbmsg = [libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0];
    wire::message(
        RTM_GETDCB,
        wire::NLM_F_REQUEST,
        seq,
        &Body {
            fixed: &dcbmsg,
            attrs: &[DcbAttr::IfName(ifname)],
        },
    )
}

/// The attributes of `b` (the shared iterator), up to the first malformed one.
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    wire::attrs(b).map_while(Result::ok)
}

/// The `pfc_en` bitmap of a DCB IEEE reply message (the netlink message, header
/// included); `None` when the message is an error or carries no PFC configuration.
pub fn decode_pfc_en(msg: &[u8]) -> Option<u8> {
    let f = wire::frames(msg).next()?.ok()?;
    if f.ty != RTM_GETDCB {
        return None;
    }
    let body = f.payload.get(DCBMSG_LEN..)?;
    let ieee = attrs(body).find(|(t, _)| *t == DCB_ATTR_IEEE)?.1;
    let pfc = attrs(ieee).find(|(t, _)| *t == DCB_ATTR_IEEE_PFC)?.1;
    pfc.get(1).copied()
}

/// Asks the kernel for `ifname`'s enabled PFC priorities. `Ok(None)`: the driver has no DCB.
pub fn pfc_enabled(rtnl: &mut Rtnl, ifname: &str) -> Result<Option<u8>, RtnlError> {
    let seq = rtnl.send_request(|seq| encode_ieee_get(ifname, seq))?;
    for _ in 0..8 {
        let buf = rtnl.recv_raw()?;
        let Some(Ok(f)) = wire::frames(buf).next() else {
            continue;
        };
        if f.seq != seq {
            continue;
        }
        // NLMSG_ERROR: no DCB ops on this device (EOPNOTSUPP), or no such device.
        if f.ty == wire::NLMSG_ERROR {
            return Ok(None);
        }
        return Ok(decode_pfc_en(buf));
    }
    Ok(None)
}

/// The priorities of a `pfc_en` bitmap.
pub fn priorities(pfc_en: u8) -> Vec<u8> {
    (0..8).filter(|p| pfc_en & (1 << p) != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes() {
        let b = encode_ieee_get("eth1", 9);
        let mut want = Vec::new();
        want.extend_from_slice(&32u32.to_ne_bytes()); // 16 + 4 + 12 (attr 4 + "eth1\0" + 3 pad)
        want.extend_from_slice(&78u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes()); // NLM_F_REQUEST
        want.extend_from_slice(&9u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[0, 21, 0, 0]); // AF_UNSPEC, DCB_CMD_IEEE_GET
        want.extend_from_slice(&9u16.to_ne_bytes()); // attr len 4 + 5
        want.extend_from_slice(&1u16.to_ne_bytes()); // DCB_ATTR_IFNAME
        want.extend_from_slice(b"eth1\0\0\0\0");
        assert_eq!(b, want);
    }

    #[test]
    fn reply_with_pfc_en() {
        // ieee_pfc: pfc_cap 8, pfc_en 0b0000_1000 (priority 3), mbc 0, delay 0, counters.
        let mut pfc = vec![8u8, 0x08, 0, 0, 0, 0];
        pfc.resize(6 + 2 + 128, 0);
        let mut ieee = Vec::new();
        ieee.extend_from_slice(&((4 + pfc.len()) as u16).to_ne_bytes());
        ieee.extend_from_slice(&DCB_ATTR_IEEE_PFC.to_ne_bytes());
        ieee.extend_from_slice(&pfc);
        let mut m = Vec::new();
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&1u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0, 21, 0, 0]);
        m.extend_from_slice(&((4 + ieee.len()) as u16).to_ne_bytes());
        m.extend_from_slice(&(DCB_ATTR_IEEE | 0x8000).to_ne_bytes());
        m.extend_from_slice(&ieee);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(decode_pfc_en(&m), Some(0x08));
        assert_eq!(priorities(0x08), vec![3]);
        for cut in 0..m.len() {
            let _ = decode_pfc_en(&m[..cut]);
        }
    }
}
