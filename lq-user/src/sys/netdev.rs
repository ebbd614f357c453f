//! Interface facts the PFC counter needs, queried in the calling thread's network
//! namespace (ioctls on a socket created there): ifindex, MAC address, link speed, and
//! whether the NIC delivers frames with FCS errors (`rx-all`).

use std::{ffi::CString, io};

/// What `lqd` writes into the counter's configuration map for one interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// ifindex in the calling thread's namespace.
    pub ifindex: u32,
    /// The interface's own unicast address.
    pub mac: [u8; 6],
    /// Link speed in Mb/s from the driver (0: unknown).
    pub speed_mbps: u32,
}

pub(crate) const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSET: u32 = 0x0000_0001;

/// `struct ethtool_cmd` (the legacy GSET view, which the kernel fills from
/// `get_link_ksettings` for every driver).
#[repr(C)]
#[derive(Default)]
struct EthtoolCmd {
    cmd: u32,
    supported: u32,
    advertising: u32,
    speed: u16,
    duplex: u8,
    port: u8,
    phy_address: u8,
    transceiver: u8,
    autoneg: u8,
    mdio_support: u8,
    maxtxpkt: u32,
    maxrxpkt: u32,
    speed_hi: u16,
    eth_tp_mdix: u8,
    eth_tp_mdix_ctrl: u8,
    lp_advertising: u32,
    reserved: [u32; 2],
}
const _: () = assert!(std::mem::size_of::<EthtoolCmd>() == 44);

pub(crate) const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;

/// `struct ethtool_drvinfo`.
#[repr(C)]
pub(crate) struct EthtoolDrvinfo {
    pub(crate) cmd: u32,
    pub(crate) driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    pub(crate) bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    pub(crate) n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}
const _: () = assert!(std::mem::size_of::<EthtoolDrvinfo>() == 196);

pub(crate) struct Sock(pub(crate) libc::c_int);
impl Drop for Sock {
    fn drop(&mut self) {
        // SAFETY: closing a descriptor this struct owns.
        unsafe { libc::close(self.0) };
    }
}

pub(crate) fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// The ifindex, MAC and speed of `iface` in the calling thread's namespace.
pub fn interface_info(iface: &str) -> io::Result<InterfaceInfo> {
    let cname = CString::new(iface).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = Sock(fd);
    let mut req = ifreq(iface)?;
    // SAFETY: SIOCGIFHWADDR fills ifr_hwaddr of a valid ifreq.
    if unsafe { libc::ioctl(sock.0, libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut mac = [0u8; 6];
    // SAFETY: the union member the ioctl just wrote.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    for (d, s) in mac.iter_mut().zip(data.iter()) {
        *d = *s as u8;
    }
    let mut cmd = EthtoolCmd {
        cmd: ETHTOOL_GSET,
        ..Default::default()
    };
    let mut req = ifreq(iface)?;
    req.ifr_ifru.ifru_data = (&mut cmd as *mut EthtoolCmd).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GSET writes one ethtool_cmd through ifru_data.
    let speed_mbps = if unsafe { libc::ioctl(sock.0, SIOCETHTOOL, &mut req) } == 0 {
        let s = (u32::from(cmd.speed_hi) << 16) | u32::from(cmd.speed);
        if s == u32::MAX || s == 0xffff { 0 } else { s }
    } else {
        0
    };
    Ok(InterfaceInfo {
        ifindex,
        mac,
        speed_mbps,
    })
}

/// The driver of `iface` (`ETHTOOL_GDRVINFO`, what `ethtool -i` prints as `driver:`), in
/// the calling thread's namespace.
pub fn driver_name(iface: &str) -> io::Result<String> {
    drvinfo(iface).map(|i| c_string(&i.driver))
}

/// Whether `iface` is a hardware device: its driver names a bus address (`ethtool -i`'s
/// `bus-info:`, e.g. `0000:03:00.0`), where software links (veth, dummy, bridge, bond,
/// tun/tap) name none, `N/A` or `tap`. `None` when the driver cannot be asked.
pub fn is_hardware(iface: &str) -> Option<bool> {
    Some(names_a_bus(&c_string(&drvinfo(iface).ok()?.bus_info)))
}

/// Whether an `ethtool -i` `bus-info:` names a device on a bus (see [`is_hardware`]).
fn names_a_bus(bus_info: &str) -> bool {
    !matches!(bus_info.trim(), "" | "N/A" | "tap")
}

/// A NUL-terminated ethtool string.
fn c_string(b: &[u8; 32]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `ETHTOOL_GDRVINFO` of `iface`, in the calling thread's namespace.
fn drvinfo(iface: &str) -> io::Result<EthtoolDrvinfo> {
    // SAFETY: plain socket call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = Sock(fd);
    // SAFETY: plain data; all-zero is valid.
    let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let mut req = ifreq(iface)?;
    req.ifr_ifru.ifru_data = (&mut info as *mut EthtoolDrvinfo).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GDRVINFO writes one ethtool_drvinfo through
    // ifru_data.
    if unsafe { libc::ioctl(sock.0, SIOCETHTOOL, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// Whether `iface` has `rx-all` on (frames with FCS errors delivered), from `ethtool -k`;
/// `None` when ethtool is missing or does not say.
pub fn rx_all(iface: &str) -> Option<bool> {
    let out = std::process::Command::new("ethtool")
        .args(["-k", iface])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let rest = l.trim().strip_prefix("rx-all:")?;
        Some(rest.trim().starts_with("on"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bus_address_is_hardware_and_software_links_name_none() {
        // mlx5 and virtio-net on PCI; veth, dummy and bond ""; bridge "N/A"; tun "tap".
        for bus in ["0000:03:00.0", "0000:00:03.0", "virtio0"] {
            assert!(names_a_bus(bus), "{bus}");
        }
        for bus in ["", "N/A", "tap"] {
            assert!(!names_a_bus(bus), "{bus:?}");
        }
    }
}
