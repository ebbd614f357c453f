//! Transmitted PFC counts, only from sources that confirm the frame left on the link
//! (seed 000 section 5): a NIC's ethtool counters mapped by configuration, or, for a veth,
//! delivery to the peer, i.e. the peer's receive count read from the PFC counter attached
//! to the peer (a veth transmit is a synchronous delivery to the peer's receive path).

use std::path::PathBuf;

use crate::{
    core::pfc::counter::SourceInstance,
    sys::{
        bpf::pfc::{PfcError, PfcReader},
        ethtool::{self, StatMap},
    },
};

/// Where one interface's transmitted counts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxSource {
    /// `ethtool -S` of the interface, with the driver's names mapped.
    Ethtool {
        /// The interface (in the calling thread's namespace).
        iface: String,
        /// The eight statistic names and their width.
        map: StatMap,
    },
    /// A veth whose peer runs the PFC counter: transmitted here = received there.
    VethPeer {
        /// Pin folder of the PFC counter attached to the peer.
        peer_pin_dir: PathBuf,
        /// The peer's ifindex (in the peer's namespace).
        peer_ifindex: u32,
    },
}

/// One reading of the eight transmitted counters (`None`: missing, never zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxReading {
    /// Per-priority raw values.
    pub counts: [Option<u64>; 8],
    /// The source counter width in bits.
    pub width_bits: u32,
    /// The source instance (a change means a reset).
    pub instance: SourceInstance,
    /// The epoch the source keeps for these counters (lq's tc counter on a veth peer);
    /// `None` for a NIC's, whose epochs lqd assigns.
    pub epoch: Option<u32>,
}

impl TxSource {
    /// Reads the source now.
    pub fn read(&self) -> Result<TxReading, PfcError> {
        match self {
            TxSource::Ethtool { iface, map } => {
                let s = ethtool::StatsReader::new(iface, map.clone())
                    .read()
                    .map_err(|source| PfcError::Interface {
                        iface: iface.clone(),
                        source,
                    })?;
                Ok(TxReading {
                    counts: s.counts,
                    width_bits: map.width_bits,
                    instance: SourceInstance {
                        ifindex: s.ifindex,
                        id: s.device_id,
                    },
                    epoch: None,
                })
            }
            TxSource::VethPeer {
                peer_pin_dir,
                peer_ifindex,
            } => {
                let reader = PfcReader::open(peer_pin_dir)?;
                Ok(TxReading {
                    counts: reader.rx_priorities(*peer_ifindex)?,
                    width_bits: 64,
                    instance: SourceInstance {
                        ifindex: *peer_ifindex,
                        id: u64::from(reader.instance()),
                    },
                    epoch: reader.epoch(*peer_ifindex)?,
                })
            }
        }
    }
}
