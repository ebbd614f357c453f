//! NIC PFC counters from `ethtool -S`, with the driver-specific statistic names mapped by
//! configuration. A NIC's MAC counts the PFC frames it actually transmitted, so these are
//! a transmit source that confirms emission (the generation request alone does not).

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
