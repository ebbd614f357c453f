//! The load-balancer role (seed 003 sections 6 and 8): the XDP receiver fills the path
//! table; this loop turns it into weights and programs them into kernel nexthop groups.
//!
//! One step reads the pinned maps, updates neighbor liveness (6.5), computes per
//! destination path quality (6.1-6.3) and damped weights (6.4), and replaces the nexthop
//! groups whose integer weights changed: a weight change is one group replace, never route
//! churn. Steps run on every change event from the XDP program's ring buffer and on a
//! short timer (heartbeat deadlines, damping steps).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use lq_common::maps::{NeighborKey, NeighborValue};
use tracing::{debug, error, info, warn};

use crate::{
    config::Config,
    core::controller::{
        config::ControllerConfig,
        heartbeat::{Heartbeat, HeartbeatEvent, NeighborState},
        path_quality::{
            LocalQuality, NnhMapping, PathQualityReport, PathSnapshot, Prefix, UplinkId, compute,
        },
        weights::{Application, WeightController},
    },
    sys::{
        bpf::path_table::{PathTableError, ReceiverSettings, TableReader, XdpReceiver},
        clock::monotonic_ns,
        netlink::{
            LinkProbe, Rtnl, RtnlError, ifindex,
            nexthop::{GroupMember, NexthopMsg, RTPROT_LQ},
        },
    },
};

pub use crate::config::GROUP_ID_OFFSET;

/// Errors of the load-balancer role.
#[derive(Debug, thiserror::Error)]
pub enum LoadBalancerError {
    /// The XDP receiver.
    #[error(transparent)]
    PathTable(#[from] PathTableError),
    /// rtnetlink.
    #[error(transparent)]
    Rtnl(#[from] RtnlError),
    /// Controller parameters.
    #[error("controller configuration: {0}")]
    Controller(String),
}

/// What the kernel holds for one destination.
#[derive(Clone, Debug, Default)]
struct GroupState {
    id: u32,
    kernel: Vec<(UplinkId, u32)>,
    route_installed: bool,
    /// The routing table of lqd's route: `None` the main table (`[[destination]]`),
    /// `Some` lq's own table (a destination of the slow plane, see [`crate::roles::load_balancer::slow_plane`]).
    table: Option<u32>,
}

// The slow plane's part of the load-balancer (seed 003 section 4.1): a child module, so it
// reaches the group state without widening it.
pub mod slow_plane;
mod steer;

/// The load-balancer: receiver, controller core and kernel programming.
pub struct LoadBalancer {
    cfg: Config,
    controller: ControllerConfig,
    mapping: NnhMapping,
    receiver: XdpReceiver,
    reader: TableReader,
    rtnl: Option<Rtnl>,
    heartbeat: Heartbeat,
    weights: WeightController,
    local: LocalQuality,
    groups: BTreeMap<Prefix, GroupState>,
    last_report: PathQualityReport,
    neighbors: BTreeMap<NeighborKey, NeighborValue>,
    paths: BTreeMap<lq_common::maps::PathKey, lq_common::maps::PathValue>,
    probe: LinkProbe,
    started_ns: u64,
    /// Group replaces done, and refused.
    pub group_replaces: u64,
    /// Group replaces the kernel refused.
    pub group_errors: u64,
    /// The slow plane's core, with `[slow-plane]`.
    slow: Option<crate::roles::load_balancer::slow_plane::SlowPlane>,
}

impl LoadBalancer {
    /// Loads and attaches the receiver and, unless `program-kernel = false`, creates the
    /// member nexthops and adopts lqd's existing groups and routes.
    pub fn start(cfg: Config, pin_dir: PathBuf) -> Result<Self, LoadBalancerError> {
        let controller = cfg.controller();
        controller
            .validate()
            .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
        check_sysctls();
        let settings = receiver_settings(&cfg, &controller);
        let mut receiver = XdpReceiver::load(&pin_dir, &settings)?;
        for iface in &cfg.receiver.interfaces {
            let mode = receiver.attach(iface)?;
            info!(%iface, ?mode, pin_dir = %pin_dir.display(), "XDP receiver attached");
        }
        let reader = receiver.reader()?;
        let weights = WeightController::new(controller)
            .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
        let mut lb = Self {
            mapping: cfg.nnh_mapping(),
            heartbeat: Heartbeat::new(&controller),
            controller,
            receiver,
            reader,
            rtnl: None,
            weights,
            local: LocalQuality::default(),
            groups: BTreeMap::new(),
            last_report: PathQualityReport::default(),
            neighbors: BTreeMap::new(),
            paths: BTreeMap::new(),
            probe: LinkProbe::open().map_err(RtnlError::Io)?,
            started_ns: monotonic_ns(),
            group_replaces: 0,
            group_errors: 0,
            slow: None,
            cfg,
        };
        if lb.cfg.nexthop_group.program_kernel
            && (!lb.cfg.destination.is_empty() || lb.cfg.slow_plane.is_some())
        {
            lb.rtnl = Some(Rtnl::open()?);
            lb.program_members()?;
            lb.adopt()?;
        }
        lb.slow_plane_start()?;
        Ok(lb)
    }

    /// Applies a reloaded configuration (SIGHUP): the receiver settings and the
    /// parameters; state (path table, damping, groups) is kept.
    pub fn reload(&mut self, cfg: Config) -> Result<(), LoadBalancerError> {
        let controller = cfg.controller();
        controller
            .validate()
            .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
        self.receiver
            .configure(&receiver_settings(&cfg, &controller))?;
        self.mapping = cfg.nnh_mapping();
        self.cfg = cfg;
        self.slow_plane_reload();
        if self.controller != controller {
            info!("controller parameters changed: damping restarts from the applied weights");
            let mut weights = WeightController::new(controller)
                .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
            let now = monotonic_ns();
            for (p, g) in &self.groups {
                let applied = self.fractions_of(&g.kernel);
                weights.seed(*p, &applied, now);
            }
            self.weights = weights;
            self.heartbeat = Heartbeat::new(&controller);
            self.controller = controller;
        }
        Ok(())
    }

    fn fractions_of(&self, kernel: &[(UplinkId, u32)]) -> Vec<(UplinkId, f64)> {
        let total: f64 = kernel.iter().map(|(_, w)| f64::from(*w)).sum();
        kernel
            .iter()
            .map(|(u, w)| {
                (
                    *u,
                    if total > 0.0 {
                        f64::from(*w) / total
                    } else {
                        0.0
                    },
                )
            })
            .collect()
    }

    fn member_id(&self, uplink: UplinkId) -> u32 {
        self.cfg.nexthop_group.id_base + uplink
    }

    /// One gateway nexthop object per uplink (id = id_base + uplink id).
    fn program_members(&mut self) -> Result<(), LoadBalancerError> {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return Ok(());
        };
        for u in &self.cfg.uplink {
            let oif = ifindex(&u.interface)?;
            let id = self.cfg.nexthop_group.id_base + u32::from(u.id);
            rtnl.replace_nexthop(&NexthopMsg::gateway(id, oif, u.gateway))?;
            debug!(id, iface = %u.interface, gateway = %u.gateway, "member nexthop");
        }
        Ok(())
    }

    /// Adopts the groups a previous lqd left (same ids, protocol lq): the controller starts
    /// from their weights, so a restart causes no weight jump.
    fn adopt(&mut self) -> Result<(), LoadBalancerError> {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return Ok(());
        };
        let existing: BTreeMap<u32, NexthopMsg> = rtnl
            .dump_nexthops()?
            .into_iter()
            .filter(|n| n.protocol == RTPROT_LQ)
            .filter_map(|n| n.id.map(|id| (id, n)))
            .collect();
        let now = monotonic_ns();
        let base = self.cfg.nexthop_group.id_base;
        let prefixes: Vec<Prefix> = self.cfg.destination.iter().map(|d| d.prefix.0).collect();
        for (n, prefix) in prefixes.into_iter().enumerate() {
            let id = base + GROUP_ID_OFFSET + n as u32;
            let mut state = GroupState {
                id,
                ..Default::default()
            };
            if let Some(g) = existing.get(&id).filter(|g| !g.group.is_empty()) {
                state.kernel = g
                    .group
                    .iter()
                    .map(|m| (m.id.saturating_sub(base), m.weight))
                    .collect();
                let applied = self.fractions_of(&state.kernel);
                self.weights.seed(prefix, &applied, now);
                info!(group = id, prefix = %format_prefix(&prefix), weights = ?state.kernel, "adopted existing nexthop group");
            }
            self.groups.insert(prefix, state);
        }
        Ok(())
    }

    /// One control step at `now_ns`. Returns how many groups were replaced.
    pub fn step(&mut self, now_ns: u64) -> Result<usize, LoadBalancerError> {
        let mut paths = self.reader.paths()?;
        self.neighbors = self.reader.neighbors()?;
        // While lqd was not running (a restart, a crash), no XDP program refreshed the
        // table: silence from before this start is no evidence of failure. Every entry and
        // neighbor gets a full detection interval from the start (seed 003 section 6.5),
        // so a restart adopts the forwarding state instead of pruning live spines.
        for v in paths.values_mut() {
            v.last_update_ns = v.last_update_ns.max(self.started_ns);
        }
        for v in self.neighbors.values_mut() {
            v.last_seen_ns = v.last_seen_ns.max(self.started_ns);
        }
        let mut events = Vec::new();
        for (k, v) in &self.neighbors {
            events.extend(self.heartbeat.observe(*k, v, now_ns));
        }
        events.extend(self.heartbeat.tick(now_ns));
        for e in &events {
            log_heartbeat(e);
        }
        for u in &self.cfg.uplink {
            self.local
                .set_up(UplinkId::from(u.id), self.probe.oper_up(&u.interface));
        }
        let failed: BTreeSet<NeighborKey> = self.heartbeat.failed_neighbors();
        self.slow_plane_resolve(&paths);
        let snapshot =
            PathSnapshot::from_map(&paths, now_ns, self.controller.dead_interval_ns(), &failed);
        let mut report = compute(&self.controller, &self.mapping, &self.local, &snapshot);
        self.restrict_to_slow_plane(&mut report);
        let apps = self.weights.update(&report, now_ns);
        self.last_report = report;
        self.paths = paths;
        let mut replaced = 0;
        for (prefix, app) in apps {
            if self.apply(&prefix, &app) {
                replaced += 1;
            }
        }
        Ok(replaced)
    }

    /// Programs one application; returns whether the kernel group changed.
    fn apply(&mut self, prefix: &Prefix, app: &Application) -> bool {
        let base = self.cfg.nexthop_group.id_base;
        let kind = self.controller.group;
        let Some(state) = self.groups.get_mut(prefix) else {
            return false;
        };
        if app.kernel.is_empty() {
            warn!(prefix = %format_prefix(prefix), "no usable next hop: the group keeps its last members");
            return false;
        }
        if app.kernel == state.kernel && state.route_installed {
            return false;
        }
        let Some(rtnl) = self.rtnl.as_mut() else {
            state.kernel = app.kernel.clone();
            return false;
        };
        let members: Vec<GroupMember> = app
            .kernel
            .iter()
            .map(|(u, w)| GroupMember {
                id: base + u,
                weight: *w,
            })
            .collect();
        let msg = NexthopMsg::group(state.id, members, &kind);
        let mut result = rtnl.replace_nexthop(&msg);
        if result.is_err() {
            // The kernel deletes the nexthops of a device that goes down (and anyone may
            // delete an object): re-create lqd's member nexthops and try once more.
            for u in &self.cfg.uplink {
                if let Ok(oif) = ifindex(&u.interface) {
                    let id = base + u32::from(u.id);
                    let _ = rtnl.replace_nexthop(&NexthopMsg::gateway(id, oif, u.gateway));
                }
            }
            result = rtnl.replace_nexthop(&msg);
        }
        match result {
            Ok(()) => {
                self.group_replaces += 1;
                debug!(group = state.id, prefix = %format_prefix(prefix), weights = ?app.kernel, immediate = app.immediate, "group replaced");
                state.kernel = app.kernel.clone();
            }
            Err(e) => {
                self.group_errors += 1;
                error!(group = state.id, error = %crate::core::report::Chain(&e), "group replace refused");
                return false;
            }
        }
        if !state.route_installed {
            let (id, table) = (
                state.id,
                state.table.unwrap_or(crate::sys::netlink::RT_TABLE_MAIN),
            );
            let what = format!("route {} table {table}", format_prefix(prefix));
            match rtnl.request(&what, |seq| {
                crate::sys::netlink::encode_route_replace(prefix, id, table, seq)
            }) {
                Ok(()) => {
                    state.route_installed = true;
                    info!(prefix = %format_prefix(prefix), group = state.id, "route points at the nexthop group");
                }
                Err(e) => error!(error = %crate::core::report::Chain(&e), "route install refused"),
            }
        }
        true
    }

    /// When the next step is due at the latest (damping boundary or heartbeat deadline).
    pub fn next_due(&self, now_ns: u64) -> Option<u64> {
        [
            self.weights.next_due(now_ns),
            self.heartbeat.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The XDP receiver (for the ring buffer).
    pub fn receiver_mut(&mut self) -> &mut XdpReceiver {
        &mut self.receiver
    }

    /// Removes lqd's routes and nexthop objects (only with `flush-on-exit`).
    pub fn flush(&mut self) {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return;
        };
        for (p, g) in &self.groups {
            if g.route_installed {
                let table = g.table.unwrap_or(crate::sys::netlink::RT_TABLE_MAIN);
                let _ = rtnl.request("delete route", |seq| {
                    crate::sys::netlink::encode_route_delete(p, table, seq)
                });
            }
            let _ = rtnl.delete_nexthop(g.id);
        }
        for u in &self.cfg.uplink {
            let _ = rtnl.delete_nexthop(self.cfg.nexthop_group.id_base + u32::from(u.id));
        }
        info!("flushed lqd's routes and nexthop objects");
    }

    /// Per destination: target, applied and kernel weights, with member qualities (the
    /// typed view `lqd show weights`, the metrics and the snapshots share).
    pub fn weights_view(&self) -> crate::views::snapshot::WeightsView {
        use crate::views::snapshot::{DestinationWeights, MemberWeights, WeightsView};
        let mut destinations = Vec::new();
        for (prefix, dq) in &self.last_report.destinations {
            let d = self.weights.destination(prefix);
            let target: BTreeMap<UplinkId, f64> = d
                .map(|d| d.target().into_iter().collect())
                .unwrap_or_default();
            let applied: BTreeMap<UplinkId, f64> = d
                .map(|d| d.applied().into_iter().collect())
                .unwrap_or_default();
            let group = self.groups.get(prefix);
            let kernel: BTreeMap<UplinkId, u32> = group
                .map(|g| g.kernel.iter().copied().collect())
                .unwrap_or_default();
            let members = dq
                .members
                .iter()
                .map(|m| {
                    let up = self
                        .cfg
                        .uplink
                        .iter()
                        .find(|u| UplinkId::from(u.id) == m.uplink);
                    MemberWeights {
                        uplink: m.uplink,
                        interface: up.map(|u| u.interface.clone()),
                        spine: std::net::Ipv4Addr::from(m.spine.node_id).to_string(),
                        spine_as: m.spine.node_as,
                        local_quality: m.local,
                        remote_lqs: m.remote,
                        path_quality: m.quality,
                        target: target.get(&m.uplink).copied().unwrap_or(0.0),
                        applied: applied.get(&m.uplink).copied().unwrap_or(0.0),
                        kernel_weight: kernel.get(&m.uplink).copied().unwrap_or(0),
                        nexthop_id: self.member_id(m.uplink),
                    }
                })
                .collect();
            destinations.push(DestinationWeights {
                prefix: format_prefix(prefix),
                quality_source: format!("{:?}", dq.source),
                group_id: group.map(|g| g.id),
                members,
            });
        }
        WeightsView {
            destinations,
            group_replaces: self.group_replaces,
            group_errors: self.group_errors,
            unknown_remote_entries: self.last_report.unknown_remote_entries as u64,
            unknown_spine_entries: self.last_report.unknown_spine_entries as u64,
            failed_entries: self.last_report.failed_entries as u64,
            slow_plane: Some(self.slow_plane_json()).filter(|v| !v.is_null()),
        }
    }

    /// The typed state the daemon publishes to its clients (see [`crate::views::snapshot`]).
    pub fn snapshot(&self) -> crate::views::snapshot::LoadBalancerSnapshot {
        let neighbors = self
            .neighbors
            .iter()
            .map(|(k, v)| crate::views::snapshot::NeighborView {
                key: *k,
                value: *v,
                state: match self.heartbeat.state(*k) {
                    Some(NeighborState::Active) => {
                        crate::views::yang_state::NeighborStateName::Active
                    }
                    Some(NeighborState::Stale) => {
                        crate::views::yang_state::NeighborStateName::Stale
                    }
                    Some(NeighborState::Failed) | None => {
                        crate::views::yang_state::NeighborStateName::Failed
                    }
                },
                observed_interval_ns: self.heartbeat.observed_interval_ns(*k),
            })
            .collect();
        crate::views::snapshot::LoadBalancerSnapshot {
            weights: self.weights_view(),
            neighbors,
            paths: self.paths.clone(),
            receiver_counters: self.counters().ok(),
            dead_interval_ns: self.controller.dead_interval_ns(),
        }
    }

    /// The receiver's counters by name, summed over CPUs.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>, PathTableError> {
        let c = self.reader.counters()?;
        Ok(lq_common::maps::Counter::ALL
            .iter()
            .map(|k| (k.name(), c[*k as usize]))
            .collect())
    }
}

fn receiver_settings(cfg: &Config, controller: &ControllerConfig) -> ReceiverSettings {
    ReceiverSettings {
        udp_port: cfg.udp.port,
        as_qualified: cfg.lq_telemetry.as_qualified,
        as_plan: cfg.as_plan(),
        dead_interval_ns: controller.dead_interval_ns(),
        pass_through: cfg.receiver.pass_through,
    }
}

/// `10.4.0.0/24`.
pub fn format_prefix(p: &Prefix) -> String {
    format!("{}/{}", p.addr, p.len)
}

fn log_heartbeat(e: &HeartbeatEvent) {
    if e.affects_forwarding() {
        warn!(event = ?e, "neighbor liveness changed (seed 003 section 6.5)");
    } else {
        info!(event = ?e, "neighbor");
    }
}

/// Warns about sysctls that change how the groups behave (read only: lqd never writes
/// sysctls).
fn check_sysctls() {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if let Some(v) = read("/proc/sys/net/ipv4/nexthop_compat_mode")
        && v != "0"
    {
        warn!(
            value = %v,
            "net.ipv4.nexthop_compat_mode is not 0: every group replace also sends legacy route notifications (set it to 0)"
        );
    }
    if read("/proc/sys/net/ipv4/fib_multipath_hash_policy").as_deref() == Some("0") {
        warn!(
            "net.ipv4.fib_multipath_hash_policy = 0 hashes on addresses only: flows between two hosts share one path (1 hashes the L4 ports too)"
        );
    }
}
