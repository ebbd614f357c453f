//! NIC PFC counters from `ethtool -S`, with the driver-specific statistic names mapped by
//! configuration. A NIC's MAC counts the PFC frames it actually transmitted, so these are
//! a transmit source that confirms emission (the generation request alone does not).
//!
//! The daemon reads them with [`StatsReader`] (the `SIOCETHTOOL` ioctls `ethtool -S` and
//! `ethtool -i` use, on one kept socket); [`read_stats`] runs the utility itself.

use std::{collections::BTreeMap, io, process::Command};

/// Which `ethtool -S` statistics hold one direction's eight per-priority counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatMap {
    /// Statistic name per priority; `{n}` in a template is replaced by the priority.
    pub names: [String; 8],
    /// Counter width in bits (most drivers: 64).
    pub width_bits: u32,
}

impl StatMap {
    /// Names from a template such as `tx_prio{n}_pause`.
    pub fn template(template: &str, width_bits: u32) -> Self {
        Self {
            names: std::array::from_fn(|n| template.replace("{n}", &n.to_string())),
            width_bits,
        }
    }

    /// mlx5 transmitted PFC frames per priority (`tx_prio<n>_pause`, 64-bit).
    pub fn mlx5_tx() -> Self {
        Self::template("tx_prio{n}_pause", 64)
    }

    /// mlx5 received PFC frames per priority (`rx_prio<n>_pause`, 64-bit).
    pub fn mlx5_rx() -> Self {
        Self::template("rx_prio{n}_pause", 64)
    }
}

/// Parses `ethtool -S` output (`NIC statistics:` then `     name: value` lines).
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().rsplit_once(':')?;
            Some((name.trim().to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Picks the eight mapped counters out of parsed statistics; a statistic the driver does
/// not report is `None` (a missing reading, never zero).
pub fn select(stats: &BTreeMap<String, u64>, map: &StatMap) -> [Option<u64>; 8] {
    std::array::from_fn(|n| stats.get(&map.names[n]).copied())
}

/// Runs `ethtool -S iface` (in the calling thread's namespace) and parses it.
pub fn read_stats(iface: &str) -> io::Result<BTreeMap<String, u64>> {
    let out = Command::new("ethtool").args(["-S", iface]).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ethtool -S {iface}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(parse_stats(&String::from_utf8_lossy(&out.stdout)))
}

/// A stable identity of the NIC behind `iface` (driver and bus address from `ethtool -i`):
/// a change means another counter instance, i.e. a reset.
pub fn device_identity(iface: &str) -> io::Result<u64> {
    use std::hash::{Hash, Hasher};
    let out = Command::new("ethtool").args(["-i", iface]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for l in text.lines() {
        if l.starts_with("driver:") || l.starts_with("bus-info:") {
            l.hash(&mut h);
        }
    }
    Ok(h.finish())
}

/// `ETHTOOL_GSTRINGS`: the names of a string set.
const ETHTOOL_GSTRINGS: u32 = 0x0000_001b;
/// `ETHTOOL_GSTATS`: the values of the `ETH_SS_STATS` set.
const ETHTOOL_GSTATS: u32 = 0x0000_001d;
/// `ETH_SS_STATS`.
const ETH_SS_STATS: u32 = 1;
/// `ETH_GSTRING_LEN`.
const ETH_GSTRING_LEN: usize = 32;
/// Room beyond the count the driver announced: the kernel writes as many entries as the
/// driver reports at the time of the call, so a set that grew in between must not write
/// past the buffer (the `ethtool` utility has the same race and no margin).
const STATS_MARGIN: usize = 64;
/// How long a cached link speed is trusted; it is also refreshed when the ifindex changes.
pub const SPEED_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// One reading of an interface's mapped statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsReading {
    /// The eight mapped counters (`None`: the driver does not report it).
    pub counts: [Option<u64>; 8],
    /// ifindex now.
    pub ifindex: u32,
    /// The device identity (driver and bus address), as [`device_identity`].
    pub device_id: u64,
    /// Link speed in Mb/s (0: unknown), refreshed every [`SPEED_REFRESH`] and on an
    /// ifindex change.
    pub speed_mbps: u32,
}

/// Reads what `ethtool -S` and `ethtool -i` print, through `SIOCETHTOOL` ioctls on one
/// socket kept open (in the namespace of the thread that made it): per reading one
/// `SIOCGIFINDEX`, one `ETHTOOL_GDRVINFO` and one `ETHTOOL_GSTATS`; the statistic names
/// are fetched again only when the driver, bus address or statistic count changes.
/// Replaces two `ethtool` subprocesses and an interface query per priority per export.
pub struct StatsReader {
    iface: String,
    map: StatMap,
    sock: Option<super::netdev::Sock>,
    /// (device identity, statistic count) the indices were computed for.
    layout: Option<(u64, u32)>,
    /// Index of each mapped statistic in the `ETH_SS_STATS` set.
    index: [Option<usize>; 8],
    /// (ifindex, speed, when) of the last speed query.
    speed: Option<(u32, u32, std::time::Instant)>,
    stats: Vec<u64>,
}

impl StatsReader {
    /// A reader of `iface`'s statistics mapped by `map`; nothing is queried yet.
    pub fn new(iface: &str, map: StatMap) -> Self {
        Self {
            iface: iface.to_owned(),
            map,
            sock: None,
            layout: None,
            index: [None; 8],
            speed: None,
            stats: Vec::new(),
        }
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The mapped statistics' width in bits.
    pub fn width_bits(&self) -> u32 {
        self.map.width_bits
    }

    fn ioctl(&self, fd: libc::c_int, data: *mut libc::c_void) -> io::Result<()> {
        let mut req = super::netdev::ifreq(&self.iface)?;
        req.ifr_ifru.ifru_data = data.cast();
        // SAFETY: SIOCETHTOOL writes through ifru_data into a buffer the callers size for
        // the command.
        if unsafe { libc::ioctl(fd, super::netdev::SIOCETHTOOL, &mut req) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the statistics now.
    pub fn read(&mut self) -> io::Result<StatsReading> {
        let fd = match &self.sock {
            Some(s) => s.0,
            None => {
                // SAFETY: plain socket call.
                let fd = unsafe {
                    libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                self.sock = Some(super::netdev::Sock(fd));
                fd
            }
        };
        let mut req = super::netdev::ifreq(&self.iface)?;
        // SAFETY: SIOCGIFINDEX fills ifr_ifindex of a valid ifreq.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the union member the ioctl just wrote.
        let ifindex = unsafe { req.ifr_ifru.ifru_ifindex } as u32;

        // SAFETY: plain data; all-zero is valid.
        let mut info: super::netdev::EthtoolDrvinfo = unsafe { std::mem::zeroed() };
        info.cmd = super::netdev::ETHTOOL_GDRVINFO;
        self.ioctl(fd, (&mut info as *mut super::netdev::EthtoolDrvinfo).cast())?;
        let device_id = identity_of(&cstr(&info.driver), &cstr(&info.bus_info));
        let n = info.n_stats;
        if self.layout != Some((device_id, n)) {
            self.index = self.names_index(fd, n as usize)?;
            self.layout = Some((device_id, n));
        }
        // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }: the header is one u64.
        self.stats.clear();
        self.stats.resize(1 + n as usize + STATS_MARGIN, 0);
        self.stats[0] = u64::from(ETHTOOL_GSTATS) | (u64::from(n) << 32);
        if cfg!(target_endian = "big") {
            self.stats[0] = (u64::from(ETHTOOL_GSTATS) << 32) | u64::from(n);
        }
        let buf = self.stats.as_mut_ptr();
        self.ioctl(fd, buf.cast())?;
        let got = if cfg!(target_endian = "big") {
            self.stats[0] as u32
        } else {
            (self.stats[0] >> 32) as u32
        };
        if got != n {
            // The set changed between the two calls: names and values may not match.
            self.layout = None;
            return Err(io::Error::other(format!(
                "{}: statistic count changed from {n} to {got} while reading",
                self.iface
            )));
        }
        let values = &self.stats[1..=n as usize];
        let counts = self.index.map(|i| i.and_then(|i| values.get(i).copied()));

        let now = std::time::Instant::now();
        let speed_mbps = match self.speed {
            Some((idx, s, at)) if idx == ifindex && now.duration_since(at) < SPEED_REFRESH => s,
            _ => {
                let s = crate::sys::netdev::interface_info(&self.iface).map_or(0, |i| i.speed_mbps);
                self.speed = Some((ifindex, s, now));
                s
            }
        };
        Ok(StatsReading {
            counts,
            ifindex,
            device_id,
            speed_mbps,
        })
    }

    /// Where each mapped name sits in the `ETH_SS_STATS` set (the last of duplicates, as
    /// [`parse_stats`] keeps it).
    fn names_index(&self, fd: libc::c_int, n: usize) -> io::Result<[Option<usize>; 8]> {
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
        let mut buf = vec![0u8; 12 + (n + STATS_MARGIN) * ETH_GSTRING_LEN];
        buf[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        buf[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        buf[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        self.ioctl(fd, buf.as_mut_ptr().cast())?;
        let len = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
        if len != n {
            return Err(io::Error::other(format!(
                "{}: statistic count changed from {n} to {len} while reading",
                self.iface
            )));
        }
        let mut index = [None; 8];
        for (i, name) in buf[12..12 + n * ETH_GSTRING_LEN]
            .chunks_exact(ETH_GSTRING_LEN)
            .enumerate()
        {
            let name = cstr(name);
            for (slot, want) in index.iter_mut().zip(&self.map.names) {
                if name.trim() == want.as_str() {
                    *slot = Some(i);
                }
            }
        }
        Ok(index)
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The identity hash of a driver and bus address, the lines [`device_identity`] hashes.
fn identity_of(driver: &str, bus_info: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("driver: {driver}").hash(&mut h);
    format!("bus-info: {bus_info}").hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_mlx5_names() {
        let text = "NIC statistics:\n     rx_packets: 10\n     tx_prio0_pause: 3\n     tx_prio3_pause: 18446744073709551615\n     tx_prio3_pause_duration: 77\n     weird line\n";
        let stats = parse_stats(text);
        assert_eq!(stats["rx_packets"], 10);
        let got = select(&stats, &StatMap::mlx5_tx());
        assert_eq!(got[0], Some(3));
        assert_eq!(got[3], Some(u64::MAX));
        assert_eq!(
            got[1], None,
            "a statistic the driver lacks is missing, not zero"
        );
    }
}
