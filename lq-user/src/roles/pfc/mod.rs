//! The PFC service of the daemon (seed 000): attaches the PFC counter to `[pfc]`
//! interfaces and, with `[ipfix]`, exports the per-priority received counts as IPFIX
//! Options Template records every interval, through the counter model that assigns epochs
//! (a reset starts a new epoch; a missing reading is never exported as zero).
//!
//! Transmitted counts are exported only from a source that confirms emission (seed 000
//! section 5): a NIC's counters (`[[pfc.ethtool]]`) or, for a veth, its peer's receive
//! count (`[[pfc.veth-peer]]`). None is configured by default, so only template 256
//! carries data.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use tracing::{info, warn};

use crate::{
    config::{Config, IpfixTransport},
    core::pfc::counter::{CounterTracker, RawReading, SourceInstance},
    ipfix::{Direction, ExporterConfig, PfcRecord},
    sys::{
        bpf::pfc::{PfcCounter, PfcReader},
        clock::{monotonic_ns, unix_ms_now},
    },
};

/// Errors of the PFC service.
#[derive(Debug, thiserror::Error)]
pub enum PfcServiceError {
    /// Loading or attaching the tc program.
    #[error(transparent)]
    Pfc(#[from] crate::sys::bpf::pfc::PfcError),
    /// The exporter.
    #[error(transparent)]
    Export(#[from] crate::ipfix::ExportError),
    /// Element identities.
    #[error(transparent)]
    Elements(#[from] crate::ipfix::ConfigError),
    /// An ethtool source's statistic names (configuration validation refuses this first).
    #[error("{0}")]
    Ethtool(String),
    /// A `[[pfc.veth-peer]]` interface that is missing or is not a veth.
    #[error("[[pfc.veth-peer]] {iface}: {reason}")]
    VethPeer {
        /// The configured interface.
        iface: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS without its files (configuration validation refuses this first).
    #[error("[ipfix] transport = \"tls\" needs tls-ca, tls-cert and tls-key")]
    TlsFiles,
    /// TLS certificates and keys.
    #[error(transparent)]
    Tls(#[from] crate::transport::tls::TlsConfigError),
    /// A bond or team device where a physical interface belongs (seed 000: never an
    /// aggregate LAG counter).
    #[error("{section} names an aggregate interface")]
    Aggregate {
        /// `[pfc] interfaces` or `[[pfc.ethtool]]`.
        section: &'static str,
        /// The aggregate and its members.
        #[source]
        source: crate::sys::lag::Aggregate,
    },
}

/// The export transport.
enum Exporter {
    Udp(crate::transport::udp::UdpExporter),
    Tcp(crate::transport::tcp::TcpExporter),
    Tls(crate::transport::tls::TlsExporter),
}

impl Exporter {
    /// Sends (UDP) or queues (TCP, TLS: a worker sends, reconnects and resends) the
    /// records; returns the messages written.
    fn export(&mut self, records: &[PfcRecord]) -> Result<usize, crate::ipfix::ExportError> {
        match self {
            Self::Udp(e) => e.export(records),
            Self::Tcp(e) => e.export(records),
            Self::Tls(e) => e.export(records),
        }
    }
}

/// Counting and, optionally, exporting.
pub struct PfcService {
    counter: PfcCounter,
    reader: PfcReader,
    exporter: Option<Exporter>,
    interval: Duration,
    trackers: BTreeMap<(u32, u8, Direction), Tracked>,
    /// NIC sources, each keeping its socket, statistic layout and link speed between
    /// exports (one statistics ioctl per source per export).
    ethtool: Vec<(Direction, crate::sys::ethtool::StatsReader)>,
    veth_peers: Vec<VethPeer>,
    first_epoch: u32,
    next_export_ns: u64,
    /// Messages exported and export errors.
    pub messages: u64,
    /// Export errors (the collector unreachable etc.); counting goes on regardless.
    pub export_errors: u64,
    /// Readings of narrow counters not exported because their wraps could not be proven
    /// (unknown link speed, or a read gap long enough for a full wrap).
    pub withheld_readings: u64,
    /// The counters whose last reading was withheld (to log each change once).
    withholding: std::collections::BTreeSet<(u32, u8, Direction)>,
}

/// One exported counter's tracker, with the epoch its source keeps (the tc counter keeps
/// one per interface, across restarts of lqd; NIC counters have none).
struct Tracked {
    source_epoch: Option<u32>,
    tracker: CounterTracker,
}

/// The tracker of `key`: a new one, in the source's epoch when it keeps one (else `first`),
/// when there is none yet or the source's epoch changed (its counters started anew).
fn tracker(
    trackers: &mut BTreeMap<(u32, u8, Direction), Tracked>,
    key: (u32, u8, Direction),
    width_bits: u32,
    speed_mbps: u32,
    source_epoch: Option<u32>,
    first: u32,
) -> &mut CounterTracker {
    let t = trackers.entry(key).or_insert_with(|| Tracked {
        source_epoch,
        tracker: CounterTracker::new(width_bits, speed_mbps, source_epoch.unwrap_or(first)),
    });
    if t.source_epoch != source_epoch {
        *t = Tracked {
            source_epoch,
            tracker: CounterTracker::new(width_bits, speed_mbps, source_epoch.unwrap_or(first)),
        };
    }
    &mut t.tracker
}

/// A veth whose transmitted counts are its peer's received counts.
struct VethPeer {
    iface: String,
    /// The veth's own ifindex: the records' egressPhysicalInterface.
    ifindex: u32,
    source: tx::TxSource,
    /// Its last read failed (to log each change once).
    unreadable: bool,
}

/// The PFC pin folder of an instance.
pub fn pin_dir(cfg: &Config, instance: &str) -> PathBuf {
    cfg.pfc.pin_dir.clone().unwrap_or_else(|| {
        PathBuf::from(crate::sys::bpf::path_table::DEFAULT_PIN_ROOT).join(format!("{instance}-pfc"))
    })
}

impl PfcService {
    /// Loads the counter (adopting the pinned maps and links of a previous run that still
    /// count: see [`crate::sys::bpf::pfc`]), attaches it to the configured interfaces,
    /// and connects the exporter.
    pub fn start(cfg: &Config, instance: &str) -> Result<Self, PfcServiceError> {
        // Seed 000: a record identifies a LAG's member interface, never the aggregate. Checked
        // before anything is loaded or attached, with the members named.
        for iface in &cfg.pfc.interfaces {
            crate::sys::lag::refuse_aggregate(iface).map_err(|source| {
                PfcServiceError::Aggregate {
                    section: "[pfc] interfaces",
                    source,
                }
            })?;
        }
        for e in &cfg.pfc.ethtool {
            crate::sys::lag::refuse_aggregate(&e.interface).map_err(|source| {
                PfcServiceError::Aggregate {
                    section: "[[pfc.ethtool]] interface",
                    source,
                }
            })?;
        }
        // Veth peers resolved before anything is loaded: a misnamed one loads nothing.
        let mut veth_peers = Vec::new();
        for v in &cfg.pfc.veth_peer {
            let fail = |reason: String| PfcServiceError::VethPeer {
                iface: v.interface.clone(),
                reason,
            };
            let info = crate::sys::netdev::interface_info(&v.interface)
                .map_err(|e| fail(format!("no such interface ({e})")))?;
            // The veth driver reports its peer's ifindex (in the peer's namespace) among
            // its ethtool statistics; no other driver does.
            let peer_ifindex = crate::sys::ethtool::read_stats(&v.interface)
                .ok()
                .and_then(|s| s.get("peer_ifindex").copied())
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| {
                    fail("not a veth: its ethtool statistics name no peer_ifindex".into())
                })?;
            info!(iface = %v.interface, peer_ifindex, peer_pins = %v.peer_pin_dir.display(), "transmitted PFC counts from the veth peer's receive count");
            veth_peers.push(VethPeer {
                iface: v.interface.clone(),
                ifindex: info.ifindex,
                source: tx::TxSource::VethPeer {
                    peer_pin_dir: v.peer_pin_dir.clone(),
                    peer_ifindex,
                },
                unreadable: false,
            });
        }
        let dir = pin_dir(cfg, instance);
        let mut counter = PfcCounter::load(&dir)?;
        counter.set_tc_on_hardware(cfg.pfc.tc_on_hardware);
        for iface in &cfg.pfc.interfaces {
            let a = counter.attach(iface, cfg.pfc.speed_mbps)?;
            use crate::sys::bpf::tc_pinned::Attachment;
            match a.how {
                Attachment::Adopted => {
                    info!(%iface, ifindex = a.info.ifindex, epoch = a.epoch, "PFC counter adopted: it counted on while lqd was stopped; totals go on in the same epoch")
                }
                Attachment::Upgraded { previous_program } => {
                    info!(%iface, ifindex = a.info.ifindex, epoch = a.epoch, previous_program, "PFC counter adopted and switched to this build's program without a gap; totals go on in the same epoch")
                }
                Attachment::Attached(why) => {
                    info!(%iface, ifindex = a.info.ifindex, epoch = a.epoch, reason = why.as_str(), "PFC counter attached: counting starts at zero in a new epoch")
                }
                Attachment::Clsact => {
                    info!(%iface, ifindex = a.info.ifindex, epoch = a.epoch, "PFC counter attached with a clsact filter (no tcx), which detaches when lqd exits: counting starts at zero in a new epoch at every start")
                }
            }
        }
        let keep: Vec<&str> = cfg.pfc.interfaces.iter().map(String::as_str).collect();
        for iface in counter.release_others(&keep) {
            info!(%iface, "PFC counter detached from an interface no longer in [pfc] interfaces");
        }
        counter.forget_others()?;
        let reader = counter.reader()?;
        let (exporter, interval) = match &cfg.ipfix {
            Some(x) => {
                let ec = ExporterConfig {
                    observation_domain_id: x.observation_domain_id,
                    observation_point_id: x.observation_point_id,
                    elements: x.elements()?,
                    template_refresh: Duration::from_secs(u64::from(x.template_refresh_s)),
                    ..ExporterConfig::default()
                };
                let tcp = || crate::transport::tcp::TcpConfig {
                    exporter: ExporterConfig {
                        max_message_len: 16384,
                        ..ec.clone()
                    },
                    dscp: x.dscp,
                    socket_priority: x.socket_priority,
                    ..crate::transport::tcp::TcpConfig::default()
                };
                let e = match x.transport {
                    IpfixTransport::Udp => {
                        let e = crate::transport::udp::UdpExporter::connect(x.collector, ec)?;
                        crate::sys::socket::set_traffic_class(
                            e.socket(),
                            x.dscp,
                            x.socket_priority,
                        );
                        Exporter::Udp(e)
                    }
                    IpfixTransport::Tcp => Exporter::Tcp(
                        crate::transport::tcp::TcpExporter::connect(x.collector, tcp())?,
                    ),
                    IpfixTransport::Tls => {
                        let (Some(ca), Some(cert), Some(key)) =
                            (&x.tls_ca, &x.tls_cert, &x.tls_key)
                        else {
                            return Err(PfcServiceError::TlsFiles);
                        };
                        let name = x
                            .tls_server_name
                            .clone()
                            .unwrap_or_else(|| x.collector.ip().to_string());
                        let tls = crate::transport::tls::TlsClientConfig::from_files(
                            ca, cert, key, &name,
                        )?;
                        Exporter::Tls(crate::transport::tls::TlsExporter::connect(
                            x.collector,
                            tcp(),
                            tls,
                        )?)
                    }
                };
                info!(collector = %x.collector, transport = ?x.transport, interval_ms = x.interval_ms, "IPFIX export");
                (Some(e), Duration::from_millis(u64::from(x.interval_ms)))
            }
            None => (None, Duration::from_secs(1)),
        };
        // Epochs must differ from any exported before this start (`first_epoch_at` says
        // why the wall clock's milliseconds give that).
        let first_epoch = crate::core::pfc::counter::first_epoch_at(unix_ms_now());
        let mut ethtool = Vec::new();
        for e in &cfg.pfc.ethtool {
            let map = e.stat_map().map_err(PfcServiceError::Ethtool)?;
            let dir = match e.direction {
                crate::config::PfcDirection::Received => Direction::Received,
                crate::config::PfcDirection::Transmitted => Direction::Transmitted,
            };
            info!(iface = %e.interface, direction = ?dir, "PFC counters from ethtool statistics");
            ethtool.push((
                dir,
                crate::sys::ethtool::StatsReader::new(&e.interface, map),
            ));
        }
        Ok(Self {
            counter,
            reader,
            ethtool,
            veth_peers,
            exporter,
            interval,
            trackers: BTreeMap::new(),
            first_epoch,
            next_export_ns: 0,
            messages: 0,
            export_errors: 0,
            withheld_readings: 0,
            withholding: std::collections::BTreeSet::new(),
        })
    }

    /// When the next export is due (CLOCK_MONOTONIC ns), if exporting.
    pub fn next_due(&self) -> Option<u64> {
        self.exporter.as_ref().map(|_| self.next_export_ns)
    }

    /// Exports if due at `now_ns`.
    pub fn tick(&mut self, now_ns: u64) {
        if self.exporter.is_none() || now_ns < self.next_export_ns {
            return;
        }
        self.next_export_ns = now_ns + self.interval.as_nanos() as u64;
        let records = match self.records() {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %crate::core::report::Chain(&e), "reading PFC counters failed; nothing exported this interval");
                return;
            }
        };
        if let Some(x) = self.exporter.as_mut() {
            match x.export(&records) {
                Ok(n) => self.messages += n as u64,
                Err(e) => {
                    self.export_errors += 1;
                    warn!(error = %crate::core::report::Chain(&e), "IPFIX export failed; counting continues");
                }
            }
        }
    }

    fn records(&mut self) -> Result<Vec<PfcRecord>, crate::sys::bpf::pfc::PfcError> {
        let instance = u64::from(self.reader.instance());
        let mut out = Vec::new();
        // The maps hold this run's interfaces (`start` forgets the others): their
        // counters, adopted from the run before or started here, in the epoch the
        // interface's configuration keeps.
        for (ifindex, cfg) in self.reader.interfaces()? {
            let counts = self.reader.rx_priorities(ifindex)?;
            // Seed 000: observationTimeMilliseconds is the closest available time to the
            // counter's reading, so each source is stamped right after its own read.
            let (mono, unix) = (monotonic_ns(), unix_ms_now());
            for (prio, c) in counts.iter().enumerate() {
                // A missing reading is never exported as zero.
                let Some(value) = *c else { continue };
                let t = tracker(
                    &mut self.trackers,
                    (ifindex, prio as u8, Direction::Received),
                    64,
                    cfg.speed_mbps,
                    Some(cfg.epoch),
                    self.first_epoch,
                );
                let (total, _) = t.update(RawReading {
                    value,
                    instance: SourceInstance {
                        ifindex,
                        id: instance,
                    },
                    mono_ns: mono,
                    unix_ms: unix,
                });
                out.push(PfcRecord {
                    direction: Direction::Received,
                    interface: ifindex,
                    priority: prio as u8,
                    observed_ms: total.unix_ms,
                    total: total.value,
                    epoch: total.epoch,
                });
            }
        }
        // NIC counters: wrap accounting for narrow counters and reset detection (a new
        // device identity or a decrease beyond a wrap) start a new epoch; a source that
        // cannot be read exports nothing this interval, never zeros.
        for (dir, src) in &mut self.ethtool {
            let dir = &*dir;
            let width_bits = src.width_bits();
            let s = match src.read() {
                Ok(s) => s,
                Err(e) => {
                    warn!(iface = src.iface(), error = %crate::core::report::Chain(&e), "ethtool PFC counters unreadable; not exported this interval");
                    continue;
                }
            };
            let (mono, unix) = (monotonic_ns(), unix_ms_now());
            let r = crate::roles::pfc::tx::TxReading {
                counts: s.counts,
                width_bits,
                instance: SourceInstance {
                    ifindex: s.ifindex,
                    id: s.device_id,
                },
                epoch: None,
            };
            // The link speed bounds how many frames can have passed: what tells a wrap of
            // a narrow counter from a reset (read once per source, cached by the reader).
            let speed = s.speed_mbps;
            for (prio, c) in r.counts.iter().enumerate() {
                let Some(value) = *c else { continue };
                let key = (r.instance.ifindex, prio as u8, *dir);
                let t = tracker(
                    &mut self.trackers,
                    key,
                    r.width_bits,
                    speed,
                    r.epoch,
                    self.first_epoch,
                );
                let (total, how) = t.update(RawReading {
                    value,
                    instance: r.instance,
                    mono_ns: mono,
                    unix_ms: unix,
                });
                // Seed 000: a narrow source whose wraps cannot be accounted for is not
                // exported as pfcControlFrameTotalCount; the tracker began a new epoch.
                if !how.exportable() {
                    self.withheld_readings += 1;
                    if self.withholding.insert(key) {
                        warn!(
                            ifindex = key.0,
                            priority = key.1,
                            direction = ?dir,
                            width_bits = r.width_bits,
                            speed_mbps = speed,
                            interval_ms = self.interval.as_millis() as u64,
                            "narrow PFC counter: wraps unprovable (unknown link speed, or a read gap long enough for a full wrap); reading not exported"
                        );
                    }
                    continue;
                }
                if self.withholding.remove(&key) {
                    info!(ifindex = key.0, priority = key.1, direction = ?dir, epoch = total.epoch, "narrow PFC counter: wraps provable again; exporting in a new epoch");
                }
                out.push(PfcRecord {
                    direction: *dir,
                    interface: r.instance.ifindex,
                    priority: prio as u8,
                    observed_ms: total.unix_ms,
                    total: total.value,
                    epoch: total.epoch,
                });
            }
        }
        // Veth peers: 64-bit counters that start at zero with the peer's counter, in the
        // epoch the peer's counter keeps for that interface (a new one when it starts
        // anew; its map instance changes when its pins are removed: a reset too). The peer may
        // start after this daemon or stop: nothing is exported while its pins cannot be
        // read, and each change is logged once.
        for peer in &mut self.veth_peers {
            let r = match peer.source.read() {
                Ok(r) => r,
                Err(e) => {
                    if !peer.unreadable {
                        warn!(iface = %peer.iface, error = %crate::core::report::Chain(&e), "veth peer's PFC counter unreadable; transmitted counts not exported until it is");
                    }
                    peer.unreadable = true;
                    continue;
                }
            };
            if peer.unreadable {
                info!(iface = %peer.iface, "veth peer's PFC counter readable again");
                peer.unreadable = false;
            }
            let (mono, unix) = (monotonic_ns(), unix_ms_now());
            for (prio, c) in r.counts.iter().enumerate() {
                let Some(value) = *c else { continue };
                let t = tracker(
                    &mut self.trackers,
                    (peer.ifindex, prio as u8, Direction::Transmitted),
                    r.width_bits,
                    0,
                    r.epoch,
                    self.first_epoch,
                );
                let (total, _) = t.update(RawReading {
                    value,
                    instance: r.instance,
                    mono_ns: mono,
                    unix_ms: unix,
                });
                out.push(PfcRecord {
                    direction: Direction::Transmitted,
                    interface: peer.ifindex,
                    priority: prio as u8,
                    observed_ms: total.unix_ms,
                    total: total.value,
                    epoch: total.epoch,
                });
            }
        }
        Ok(out)
    }

    /// Received PFC frames by (ifindex, priority), summed over CPUs.
    pub fn rx_counts(&self) -> Result<BTreeMap<(u32, u8), u64>, crate::sys::bpf::pfc::PfcError> {
        Ok(self
            .reader
            .rx_counts()?
            .into_iter()
            .map(|(k, v)| ((k.ifindex, k.priority as u8), v))
            .collect())
    }

    /// The attached interfaces.
    pub fn counter(&self) -> &PfcCounter {
        &self.counter
    }
}

pub mod tx;
