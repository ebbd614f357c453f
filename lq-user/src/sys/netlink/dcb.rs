//! The PFC priorities a link has enabled, from its DCB configuration over dcbnl
//! (RTM_GETDCB, DCB_CMD_IEEE_GET, DCB_ATTR_IEEE_PFC `pfc_en`): the Linux counterpart of the
//! PfcEnable bitmap of seed 002. Drivers without DCB (veth, most virtual NICs) answer with an
//! error, and lqd then takes the priorities from the configuration.

use crate::sys::netlink::{Rtnl, RtnlError};

/// RTM_GETDCB (include/uapi/linux/rtnetlink.h).
pub const RTM_GETDCB: u16 = 78;
/// DCB_CMD_IEEE_GET (include/uapi/linux/dcbnl.h).
pub const DCB_CMD_IEEE_GET: u8 = 21;
/// DCB_ATTR_IFNAME.
pub const DCB_ATTR_IFNAME: u16 = 1;
/// DCB_ATTR_IEEE (nested).
pub const DCB_ATTR_IEEE: u16 = 13;
/// DCB_ATTR_IEEE_PFC: struct ieee_pfc { u8 pfc_cap; u8 pfc_en; u8 mbc; u16 delay; ... }.
pub const DCB_ATTR_IEEE_PFC: u16 = 2;

/// Encodes RTM_GETDCB / DCB_CMD_IEEE_GET for `ifname`.
pub fn encode_ieee_get(ifname: &str, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(48);
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
    b.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // struct dcbmsg { u8 dcb_family; u8 cmd; u16 dcb_pad; }
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0]);
    let name = ifname.as_bytes();
    b.extend_from_slice(&((4 + name.len() + 1) as u16).to_ne_bytes());
    b.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
    b.extend_from_slice(name);
    b.push(0);
    while b.len() % 4 != 0 {
        b.push(0);
    }
    let len = b.len() as u32;
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b
}

fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((ty, payload))
    })
}

/// The `pfc_en` bitmap of a DCB IEEE reply message (the netlink message, header
/// included); `None` when the message is an error or carries no PFC configuration.
pub fn decode_pfc_en(msg: &[u8]) -> Option<u8> {
    let ty = u16::from_ne_bytes([*msg.get(4)?, *msg.get(5)?]);
    if ty != RTM_GETDCB {
        return None;
    }
    let len = (u32::from_ne_bytes(msg.get(0..4)?.try_into().ok()?) as usize).min(msg.len());
    let body = msg.get(16 + 4..len)?;
    let ieee = attrs(body).find(|(t, _)| *t == DCB_ATTR_IEEE)?.1;
    let pfc = attrs(ieee).find(|(t, _)| *t == DCB_ATTR_IEEE_PFC)?.1;
    pfc.get(1).copied()
}

/// Asks the kernel for `ifname`'s enabled PFC priorities. `Ok(None)`: the driver has no DCB.
pub fn pfc_enabled(rtnl: &mut Rtnl, ifname: &str) -> Result<Option<u8>, RtnlError> {
    let seq = rtnl.send_request(|seq| encode_ieee_get(ifname, seq))?;
    for _ in 0..8 {
        let buf = rtnl.recv_raw()?;
        if buf.len() < 16 {
            continue;
        }
        let rseq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        if rseq != seq {
            continue;
        }
        // NLMSG_ERROR: no DCB ops on this device (EOPNOTSUPP), or no such device.
        if u16::from_ne_bytes([buf[4], buf[5]]) == libc::NLMSG_ERROR as u16 {
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
