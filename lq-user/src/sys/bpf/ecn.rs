//! The helper's ECN-eligible packet counter (seed 003 Appendix A.1: the ECN-marked
//! fraction is marked packets over the ECN-capable packets that left the link): the tc
//! egress program `lq_ecn_egress` counts ECN-capable packets per ifindex in a per-CPU hash
//! map, and the sampler reads all of them in one batched lookup per sample (a lookup per
//! link was 64 system calls and 64 allocations every 2 ms at 64 links, issue 15).
//!
//! With a pin folder, the map and the program's tcx links are pinned there
//! ([`super::tc_pinned`]): the counts go on while lqd is stopped, and the next start adopts
//! them (`show` reports totals that include the gap).

use std::os::fd::AsFd as _;

use aya::{
    Ebpf, EbpfLoader,
    maps::{Map, MapData},
    programs::{SchedClassifier, TcAttachType},
};
use lq_common::maps::{COUNTER_META_MAP, ECN_ELIGIBLE_MAP, ECN_IF_CAPACITY, ECN_PROGRAM};
use tracing::warn;

use crate::sys::sampler::CounterSource;

/// Errors of setting up the counter.
#[derive(Debug, thiserror::Error)]
pub enum EcnError {
    /// The embedded object could not be loaded.
    #[error("loading the eBPF object failed")]
    Load(#[source] aya::EbpfError),
    /// The object lacks the program or the map.
    #[error("the eBPF object has no {0}")]
    Missing(&'static str),
    /// Loading or attaching the program failed.
    #[error(transparent)]
    Program(#[from] super::ProgramOpError),
    /// The pins of a previous run could not be adopted, or new ones made.
    #[error(transparent)]
    Pins(#[from] super::tc_pinned::TcPinError),
    /// The pin folder could not be set up.
    #[error(transparent)]
    Pinned(#[from] super::path_table::LoadPinnedError),
    /// The number of possible CPUs (a per-CPU value's size) is unknown.
    #[error("reading the possible CPUs ({0})")]
    Cpus(&'static str, #[source] std::io::Error),
}

/// The tc egress counter attached to the helper's links, and the counts of the last read.
pub struct EcnEligible {
    /// The object instance: its tcx links detach when it is dropped.
    _ebpf: Ebpf,
    map: MapData,
    cpus: usize,
    /// Batch buffers, kept between reads (no allocation per sample): ifindexes, their
    /// per-CPU counts, their sums.
    keys: Vec<u32>,
    values: Vec<u64>,
    sums: Vec<u64>,
    /// (ifindex, packets summed over CPUs), sorted, as of the last read.
    counts: Vec<(u32, u64)>,
    /// The last read failed: the sampler keeps the counts it had.
    failed: bool,
}

impl EcnEligible {
    /// Attaches the counter to the egress of every interface in `ifaces` (tcx; a clsact
    /// qdisc where tcx is refused). With `pin_dir`, the map and the links are pinned there
    /// and those a previous run left are adopted; without, a fresh instance counts while
    /// this one lives.
    pub fn attach<'a>(
        pin_dir: Option<&std::path::Path>,
        ifaces: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, EcnError> {
        use super::tc_pinned::{Layout, attach_or_adopt, check_layout, link_pin, write_layout};
        let mut ebpf = match pin_dir {
            Some(dir) => {
                if check_layout(dir, &[ECN_ELIGIBLE_MAP])? == Layout::RemovedStopped {
                    tracing::info!(pin_dir = %dir.display(), "ECN-eligible counts of an earlier lqd removed: they start again at zero");
                }
                let mut ebpf =
                    super::path_table::load_pinned(dir, &[ECN_ELIGIBLE_MAP, COUNTER_META_MAP])?;
                write_layout(&mut ebpf)?;
                ebpf
            }
            None => EbpfLoader::new()
                .load(super::path_table::EBPF_OBJECT)
                .map_err(EcnError::Load)?,
        };
        let prog: &mut SchedClassifier = ebpf
            .program_mut(ECN_PROGRAM)
            .ok_or(EcnError::Missing(ECN_PROGRAM))?
            .try_into()
            .map_err(super::program_err::<EcnError>("tc", ECN_PROGRAM))?;
        prog.load()
            .map_err(super::program_err::<EcnError>("tc", "load the ECN counter"))?;
        let mut names = Vec::new();
        for iface in ifaces {
            names.push(iface);
            let Some(dir) = pin_dir else {
                super::attach_tc(prog, iface, TcAttachType::Egress).map_err(
                    super::program_err::<EcnError>(
                        "tc",
                        format!("attach the ECN counter to {iface}"),
                    ),
                )?;
                continue;
            };
            let how = attach_or_adopt(
                prog,
                iface,
                TcAttachType::Egress,
                &link_pin(dir, TcAttachType::Egress, iface),
            )?;
            tracing::debug!(%iface, how = ?how, "ECN-eligible counter");
        }
        if let Some(dir) = pin_dir {
            for iface in super::tc_pinned::release_others(dir, TcAttachType::Egress, &names) {
                tracing::info!(%iface, "ECN-eligible counter detached from an interface no longer sampled");
            }
        }
        let Some(Map::PerCpuHashMap(map)) = ebpf.take_map(ECN_ELIGIBLE_MAP) else {
            return Err(EcnError::Missing(ECN_ELIGIBLE_MAP));
        };
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| EcnError::Cpus(what, e))?;
        let capacity = ECN_IF_CAPACITY as usize;
        Ok(Self {
            _ebpf: ebpf,
            map,
            cpus,
            keys: vec![0; capacity],
            values: vec![0; capacity * cpus],
            sums: vec![0; capacity],
            counts: Vec::with_capacity(capacity),
            failed: false,
        })
    }

    /// Reads every link's count in one batched lookup.
    pub fn refresh(&mut self) -> Result<(), std::io::Error> {
        let n = super::lookup_batch_per_cpu_sums(
            self.map.fd().as_fd(),
            &mut self.keys,
            self.cpus,
            &mut self.values,
            &mut self.sums,
        )?;
        self.counts.clear();
        self.counts.extend(
            self.keys[..n]
                .iter()
                .copied()
                .zip(self.sums[..n].iter().copied()),
        );
        self.counts.sort_unstable();
        Ok(())
    }

    /// Link `ifindex`'s count as of the last read: 0 when no ECN-capable packet has left
    /// it yet (no entry).
    pub fn get(&self, ifindex: u32) -> u64 {
        self.counts
            .binary_search_by_key(&ifindex, |e| e.0)
            .map_or(0, |i| self.counts[i].1)
    }
}

impl CounterSource for EcnEligible {
    fn begin_sample(&mut self) {
        self.failed = match self.refresh() {
            Ok(()) => false,
            Err(e) => {
                if !self.failed {
                    warn!(error = %e, "reading the ECN-eligible counters failed; their last values are kept");
                }
                true
            }
        };
    }

    fn read(&mut self, ifindex: u32, _name: &str) -> Option<u64> {
        (!self.failed).then(|| self.get(ifindex))
    }
}
