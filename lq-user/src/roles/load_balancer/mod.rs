//! The load-balancer role (seed 003 sections 6 and 8): the XDP receiver fills the path
//! table; this loop turns it into weights and programs them into kernel nexthop groups.
//!
//! One step reads the pinned maps, updates neighbor liveness (6.5), computes per group
//! path quality (6.1-6.3) and damped weights (6.4), and replaces the nexthop groups whose
//! integer weights changed: a weight change is one group replace, never route churn.
//! Steps run on every change event from the XDP program's ring buffer and on a short timer
//! (heartbeat deadlines, damping steps).
//!
//! Layout in the kernel (seed 003 section 6.1: weights depend on the remote node, not the
//! prefix): one member nexthop per uplink, one group per remote node (a [`GroupKey`]), and
//! every destination behind that remote node routed at that group. A change of one remote
//! node's quality is one group replace, whatever number of prefixes it announces.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use lq_common::maps::{Counter, NeighborKey, NeighborValue};
use tracing::{debug, error, info, trace, warn};

use crate::{
    config::Config,
    core::controller::{
        boundary_wait::BoundaryWait,
        config::{ControllerConfig, GroupKind, ParallelLinkAggregation, WeightFunction},
        heartbeat::{Heartbeat, HeartbeatEvent, NeighborState},
        path_mirror::{PathMirror, RefreshClock, TableRows},
        path_quality::{
            DestinationQuality, Digest, GroupKey, LocalQuality, MemberQuality, NnhMapping, NodeId,
            PathQualityReport, Prefix, UplinkId, compute_some_groups_reusing, unused_entries,
        },
        replace::{self, GroupShape, Hold, Installed, ReplaceCause, ReplacePolicy, Verdict},
        weights::{self, Application, WeightController, moves_no_bucket, remap},
    },
    core::sorted::{SortedLookup, SortedProbe},
    sys::{
        bpf::path_table::{
            PathTableError, ReceiverSettings, TableReader, XdpReceiver, change_event, event_sender,
        },
        clock::monotonic_ns,
        netlink::{
            Rtnl, RtnlError, ifindex,
            link_watch::LinkWatch,
            nexthop::{NexthopMsg, RTPROT_LQ},
        },
    },
};

pub use crate::config::GROUP_ID_OFFSET;

/// The uplinks' interface names, in configuration order.
fn uplink_interfaces(cfg: &Config) -> Vec<String> {
    cfg.uplink.iter().map(|u| u.interface.clone()).collect()
}

/// The mirror's view of the pinned table: rows and refresh stamps read in place.
struct KnownRows<'r>(&'r TableReader);

impl TableRows for KnownRows<'_> {
    fn row(
        &mut self,
        position: usize,
    ) -> Option<(lq_common::maps::PathKey, lq_common::maps::PathValue)> {
        self.0.known_entry(position)
    }

    fn stamp(&mut self, position: usize) -> Option<u16> {
        self.0.stamp_of(position)
    }

    fn stamp_word(&mut self, position: usize) -> Option<u32> {
        self.0.stamp_word_of(position)
    }

    fn stamps(&mut self, f: impl FnMut(usize, u16)) -> bool {
        self.0.for_each_stamp(f)
    }
}

/// How often a control step reads every slot of the path table even though the receiver's
/// `slots_claimed` count has not moved: a backstop only (a step scans in full whenever the
/// count moves, so a new path is read at the next step after it is stored). At a leaf of a
/// 64 x 512 fabric a full read and rebuild of the 32 768 rows costs milliseconds; once a
/// second it was a tenth of a still fabric's lqd CPU (issue 15).
const FULL_SCAN_NS: u64 = 5_000_000_000;

/// The least time between two control steps woken for damping alone (see `next_due`).
const DAMPING_SLACK_NS: u64 = 5_000_000;

/// How often a control step recomputes every group, not only those whose inputs changed.
const FULL_UPDATE_NS: u64 = 1_000_000_000;

/// The oldest a step lets its copies of the receiver's neighbor table and counters get, in
/// tenths of T_notify (see [`TableReads`]): below the shortest jittered period (0.9 x
/// T_notify, section 7.2), so that a spine sending one datagram a period is read between
/// any two of its transmissions (the heartbeat's T_notify mismatch detector samples the
/// intervals of consecutive arrivals).
const TABLE_READ_MAX_AGE_TENTHS_T_NOTIFY: u64 = 8;

/// Rows named by change events kept between two steps; beyond, an event names its sender
/// (a burst of changes costs one read of each sender's rows, not an unbounded list).
const MAX_NAMED_SLOTS: usize = 4096;

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
    /// The uplinks' counters for `[local-quality] source = "measured"`.
    #[error("measuring the uplinks' local quality")]
    LocalQuality(#[source] crate::roles::helper::HelperRoleError),
    /// `[receiver] authentication` (its key chain).
    #[error(transparent)]
    Authentication(#[from] auth::AuthReceiverError),
}

/// What the kernel holds for one group (the destinations of one remote node).
#[derive(Clone, Debug, Default)]
struct GroupState {
    id: u32,
    /// The members and weights the kernel's group has (and their bucket counts, kept for
    /// the replace rule); empty until it exists.
    kernel: Installed,
    /// The destinations routed at this group.
    prefixes: BTreeSet<Prefix>,
    /// Some destination's route does not point at this group yet.
    routes_pending: bool,
    /// The last application the kernel refused: tried again at the next step (the
    /// controller, converged, would not emit it again).
    refused: Option<Application>,
    /// The latest computed application whose bucket move is held (`replace::Verdict::Held`;
    /// when it falls due is in `LoadBalancer::held`): decided again then, unless a later
    /// computation comes first.
    held: Option<Application>,
    /// The accumulated hold (`replace::Hold`): held, or decaying after no bucket move would
    /// help any more. Gone with the group.
    hold: Option<Hold>,
}

/// One group replace of a step's batch: the application as written, its message, and why
/// (counted once the kernel acknowledges it).
struct Replace {
    key: GroupKey,
    app: Application,
    msg: NexthopMsg,
    cause: ReplaceCause,
}

/// lqd's route for one destination.
#[derive(Clone, Debug, Default)]
struct RouteState {
    /// The group it belongs to.
    group: GroupKey,
    /// The routing table: `None` the main table (`[[destination]]`), `Some` lq's own table
    /// (a destination of the slow plane, see [`crate::roles::load_balancer::slow_plane`]).
    table: Option<u32>,
    /// The group id the kernel's route points at, once installed (or adopted).
    installed: Option<u32>,
}

pub mod auth;
mod group_table;
mod local;

// The slow plane's part of the load-balancer (seed 003 section 4.1): a child module, so it
// reaches the group state without widening it.
pub mod slow_plane;
mod steer;

use group_table::GroupTable;

/// What the slow plane's learned mapping was last resolved against: the number of
/// entries and the time of their read.
#[derive(Clone, Copy, Debug)]
struct MappingResolved {
    entries: usize,
    read_at_ns: u64,
}

/// The load-balancer: receiver, controller core and kernel programming.
pub struct LoadBalancer {
    cfg: Config,
    controller: ControllerConfig,
    mapping: NnhMapping,
    /// When the slow plane's learned mapping was last resolved against the entries
    /// (`steer.rs`, `slow_plane_resolve_due`).
    mapping_resolved: Option<MappingResolved>,
    receiver: XdpReceiver,
    reader: TableReader,
    rtnl: Option<Rtnl>,
    heartbeat: Heartbeat,
    weights: WeightController,
    local: LocalQuality,
    /// `[local-quality] source = "measured"`: the uplinks' Appendix A pipelines.
    measured_local: Option<local::MeasuredLocal>,
    groups: GroupTable<GroupState>,
    /// `groups`' generation when the step last pruned and indexed what it keeps per group.
    groups_seen: Option<u64>,
    /// The groups of each remote node (adopted ones left out: they are not recomputed), as
    /// of `groups_seen`, and those waiting for their T_reweight boundary
    /// (`groups_to_compute`, issue 41): a step that recomputes only the remote nodes whose
    /// entries moved finds their groups there instead of walking every group.
    boundary_wait: BoundaryWait,
    routes: BTreeMap<Prefix, RouteState>,
    /// Group ids of lq's that no group owns any more: deleted once no route of lqd's
    /// names them (deleting a group deletes the routes through it).
    orphans: BTreeSet<u32>,
    /// The mapping changed since the destinations were sorted into groups.
    regroup_needed: bool,
    /// Member nexthops deleted because their spine failed (see
    /// [`Self::remove_failed_members`]); re-created before a group names them again.
    removed_members: BTreeSet<UplinkId>,
    /// Member nexthops deleted on a spine failure (each one left every group at once).
    pub member_deletes: u64,
    /// Transitions of a (group, member) into the opt-in gray-failure prune.
    pub gray_failure_prunes: u64,
    /// When the next step reads every slot of the path table, not only the known ones.
    next_full_scan_ns: u64,
    /// When the step last read the receiver's neighbor table and its counters.
    table_reads: TableReads,
    /// The receiver's `slots_claimed` count at the last full scan.
    slots_claimed: u64,
    /// The receiver's `events_lost` count at the last full scan: a lost change event
    /// hides a change from the event-named reads.
    events_lost: u64,
    /// Spines named by change events since the last step: the step reads their rows.
    named_spines: BTreeSet<NeighborKey>,
    /// Rows named by change events since the last step (sender, path-table slot): the step
    /// reads those rows alone (an event names up to `EVENT_SLOTS` changed entries).
    named_slots: Vec<(NeighborKey, u32)>,
    /// The next step reads the whole table (an unreadable event, a reload).
    rebuild_needed: bool,
    /// Groups computed at least once (a new group is computed at its first step).
    computed: BTreeSet<GroupKey>,
    /// Group computations done (6.3), and those that waited for their T_reweight boundary
    /// (per group and step), for `lqd show weights` and the metrics.
    pub group_computations: u64,
    pub group_computations_deferred: u64,
    /// Control steps taken, the path table's rows they read (the control step's copy,
    /// `PathMirror`: event-named rows, ageing, full reads), and the spines declared failed
    /// by heartbeat (6.5): `lqd show weights` and the metrics, so that an operator (and
    /// `bench_scale`) sees what a step costs and whether silence was declared.
    pub control_steps: u64,
    pub path_rows_read: u64,
    /// Of those, the rows read by their stamp words alone (`PathMirror::set_qualities_only`).
    pub path_rows_read_by_word: u64,
    pub neighbor_failures: u64,
    /// Digest of the inputs every group shares (local qualities, failed spines).
    shared_digest: u64,
    /// When the next step recomputes every group.
    next_full_update_ns: u64,
    /// When the last step ran.
    last_step_ns: u64,
    /// A neighbor changed state (failed, recovered, stale) since the loop last asked
    /// ([`LoadBalancer::take_neighbors_changed`]).
    neighbors_changed: bool,
    last_report: PathQualityReport,
    /// Members' vectors of groups computed again, for the next computation
    /// (`compute_some_groups_reusing`): at most one a group.
    spare_members: Vec<Vec<MemberQuality>>,
    neighbors: BTreeMap<NeighborKey, NeighborValue>,
    /// The path table as the control step sees it, refreshed where it can have moved.
    mirror: PathMirror,
    /// Uplink state, followed from RTNLGRP_LINK notifications.
    links: LinkWatch,
    started_ns: u64,
    /// Group replaces done, and refused.
    pub group_replaces: u64,
    /// Group replaces the kernel refused.
    pub group_errors: u64,
    /// Some group holds a refused application (`GroupState::refused`).
    refused_groups: bool,
    /// Some group's routes wait to be installed (`GroupState::routes_pending`).
    routes_pending: bool,
    /// The uplinks' state was applied to the local qualities since the last start or
    /// reload: a step whose link notifications changed nothing skips that walk.
    uplinks_followed: bool,
    /// Group replaces done that moved no bucket (resilient groups; `moves_no_bucket`; only
    /// `replace = "every-step"` sends them).
    pub bucket_neutral_replaces: u64,
    /// Computations not written because the kernel already forwards as close to them as
    /// it can: no bucket move would bring the installed buckets closer to the computed
    /// weights (`replace::Verdict::SameForwarding`). Every such computation counts (its
    /// kernel weights are not computed to see whether they differ from the installed ones,
    /// issue 41).
    pub bucket_neutral_skipped: u64,
    /// Buckets the replaces moved (resilient groups: the members' bucket counts' changes,
    /// as `weights::remap` counts them).
    pub buckets_moved: u64,
    /// Groups whose bucket move was held (`replace::Verdict::Held`), counted when the hold
    /// starts.
    pub holds_started: u64,
    /// Replaces written, by why.
    pub replace_causes: crate::views::snapshot::ReplaceCauses,
    /// Which computed changes are written (`[nexthop-group] replace`, issue 41).
    replace_policy: ReplacePolicy,
    /// The groups whose bucket move is held, and when each falls due (ns).
    held: BTreeMap<GroupKey, u64>,
    /// Nexthop objects in lq's id range another program wrote (`steer::foreign_write`),
    /// seen in the slow plane's nexthop notifications.
    pub foreign_nexthop_writes: u64,
    /// The ids warned about (`note_foreign_write`).
    foreign_warned: BTreeSet<u32>,
    /// The slow plane's core, with `[slow-plane]`.
    slow: Option<crate::roles::load_balancer::slow_plane::SlowPlane>,
    /// `[receiver] authentication`: the socket receive path (issue 39).
    auth: Option<auth::AuthReceiver>,
    /// How long the last steps that replaced groups took, in two parts.
    step_times: StepTimes,
}

/// When a control step last read the receiver's neighbor table and its counters, each a
/// batch lookup system call (10-15 us each on a two-vCPU VM, a third of a step's own work
/// before this, issue 15; the neighbors' read walks the hash map's 1 024 buckets, 60-70 us
/// on the slowest VM). A step needs neither for its own sake: change events name the rows to
/// read, and a named spine the heartbeat knows as active is alive by the event itself. So
/// a step reads the neighbors only when its copy is older than
/// [`TABLE_READ_MAX_AGE_TENTHS_T_NOTIFY`] tenths of T_notify (half of it with the integral
/// weight function), when an event names a spine
/// that is not active (a recovery or a discovery must be seen at once, seed 003 section
/// 6.5), or when a heartbeat deadline has passed (a spine is declared stale or failed only
/// on a fresh read); and the counters when they are older than that, or when an event
/// names a row the last full read did not find (a new key: the claim count moved, and the
/// step reads in full). The same for a step woken by a timer (damping, a heartbeat
/// deadline, the loop's longest sleep): at a still 64 x 512 leaf those came every 10 ms and
/// read both every time, a quarter of lqd's CPU.
/// What waits at most that age: a bandwidth-only change the integral weight function reads
/// from a spine's rows, a spine's return whose datagrams change no entry, and a lost
/// change event's rows (the `events_lost` count).
#[derive(Clone, Copy, Debug, Default)]
struct TableReads {
    neighbors_ns: Option<u64>,
    counters_ns: Option<u64>,
}

impl TableReads {
    /// Whether a copy read at `last` is older than `max_age` at `now`.
    fn due(last: Option<u64>, now_ns: u64, max_age_ns: u64) -> bool {
        last.is_none_or(|t| now_ns.saturating_sub(t) >= max_age_ns)
    }
}

/// What a step's read of the path table found (`LoadBalancer::read_paths`).
#[derive(Debug)]
enum PathsRead {
    /// The whole table was read: every group is recomputed.
    Full,
    /// Only the rows that can have moved were read: the remote nodes whose entries changed,
    /// and among them those whose move can take a path quality to or from 0.
    Changed {
        moved: Vec<NodeId>,
        zero_crossing: BTreeSet<NodeId>,
    },
}

/// The groups a step recomputes (`LoadBalancer::groups_to_compute`).
#[derive(Debug)]
struct GroupsToCompute {
    /// Their keys, each once.
    keys: Vec<GroupKey>,
    /// Every group is recomputed (a full read, or FULL_UPDATE_NS passed).
    full: bool,
    /// The set of group keys changed since the last step.
    groups_moved: bool,
}

/// The durations of the last [`STEP_TIMES`] control steps that replaced at least one group:
/// lqd's own work (from the step's start to its replaces sent) and the kernel's (the
/// replaces' round trip, to the last acknowledgement). Shown by `lqd show weights` and the
/// metrics so that an operator (and `bench_controller`) can tell a slow daemon from a slow
/// kernel (issue 15: the replace, which waits for an expedited RCU grace period, is most of
/// a step).
#[derive(Default)]
struct StepTimes {
    /// (work, replace) in nanoseconds, oldest first.
    steps: std::collections::VecDeque<(u64, u64)>,
}

/// How many replacing steps [`StepTimes`] keeps.
const STEP_TIMES: usize = 256;

impl StepTimes {
    fn record(&mut self, work_ns: u64, replace_ns: u64) {
        if self.steps.len() == STEP_TIMES {
            self.steps.pop_front();
        }
        self.steps.push_back((work_ns, replace_ns));
    }

    fn view(&self) -> crate::views::snapshot::StepTimingView {
        use crate::views::snapshot::Percentiles;
        crate::views::snapshot::StepTimingView {
            steps: self.steps.len() as u64,
            work_us: Percentiles::of_ns(self.steps.iter().map(|s| s.0)),
            replace_us: Percentiles::of_ns(self.steps.iter().map(|s| s.1)),
        }
    }
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
        // Issue 39: the interfaces whose datagrams are verified on the socket path, their
        // key chain read and the program told before it is attached: attached first, it
        // would take unsigned datagrams into the (pinned) table until then.
        // Each uplink in its own mode (`[receiver.interface-authentication]`).
        let modes = cfg
            .receiver
            .interfaces
            .iter()
            .map(|i| Ok((ifindex(i)?, i.clone(), cfg.receiver.authentication_of(i))))
            .collect::<Result<Vec<_>, LoadBalancerError>>()?;
        let auth = auth::AuthReceiver::new(&cfg, modes)?;
        let auth_ifindexes = auth.as_ref().map(|a| a.ifindexes()).unwrap_or_default();
        receiver.set_authenticated_interfaces(&auth_ifindexes)?;
        for iface in &cfg.receiver.interfaces {
            let mode = receiver.attach(iface)?;
            info!(%iface, ?mode, pin_dir = %pin_dir.display(), "XDP receiver attached");
        }
        let reader = receiver.reader()?;
        let weights = WeightController::new(controller)
            .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
        let mut lb = Self {
            mapping: with_link_capacities(cfg.nnh_mapping(), &cfg),
            mapping_resolved: None,
            heartbeat: Heartbeat::new(&controller),
            controller,
            receiver,
            reader,
            rtnl: None,
            weights,
            local: LocalQuality::default(),
            measured_local: None,
            groups: GroupTable::default(),
            groups_seen: None,
            boundary_wait: BoundaryWait::default(),
            routes: BTreeMap::new(),
            orphans: BTreeSet::new(),
            regroup_needed: true,
            removed_members: BTreeSet::new(),
            member_deletes: 0,
            gray_failure_prunes: 0,
            next_full_scan_ns: 0,
            table_reads: TableReads::default(),
            slots_claimed: 0,
            events_lost: 0,
            named_spines: BTreeSet::new(),
            named_slots: Vec::new(),
            rebuild_needed: true,
            computed: BTreeSet::new(),
            group_computations: 0,
            group_computations_deferred: 0,
            control_steps: 0,
            path_rows_read: 0,
            path_rows_read_by_word: 0,
            neighbor_failures: 0,
            shared_digest: 0,
            next_full_update_ns: 0,
            last_step_ns: 0,
            neighbors_changed: false,
            last_report: PathQualityReport::default(),
            spare_members: Vec::new(),
            neighbors: BTreeMap::new(),
            mirror: PathMirror::default(),
            links: LinkWatch::open(&uplink_interfaces(&cfg)).map_err(RtnlError::Io)?,
            started_ns: monotonic_ns(),
            group_replaces: 0,
            step_times: StepTimes::default(),
            group_errors: 0,
            refused_groups: false,
            routes_pending: false,
            uplinks_followed: false,
            bucket_neutral_replaces: 0,
            bucket_neutral_skipped: 0,
            buckets_moved: 0,
            holds_started: 0,
            replace_causes: Default::default(),
            replace_policy: cfg.replace_policy(),
            held: BTreeMap::new(),
            foreign_nexthop_writes: 0,
            foreign_warned: BTreeSet::new(),
            slow: None,
            auth,
            cfg,
        };
        warn_bucket_resolution(&lb.cfg, &lb.controller);
        if lb.cfg.nexthop_group.program_kernel
            && (!lb.cfg.destination.is_empty() || lb.cfg.slow_plane.is_some())
        {
            lb.rtnl = Some(Rtnl::open()?);
            lb.program_members()?;
        }
        // Without `program-kernel` too: the groups are what the controller computes.
        lb.adopt()?;
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
        // What can fail comes before any state changes.
        let links = if uplink_interfaces(&cfg) != uplink_interfaces(&self.cfg) {
            Some(LinkWatch::open(&uplink_interfaces(&cfg)).map_err(RtnlError::Io)?)
        } else {
            None
        };
        let key_chain = match self.auth {
            Some(_) => Some(auth::AuthReceiver::read_key_chain(&cfg)?),
            None => None,
        };
        self.receiver
            .configure(&receiver_settings(&cfg, &controller))?;
        if let (Some(a), Some(k)) = (self.auth.as_mut(), key_chain) {
            a.set_key_chain(k);
        }
        // The slow plane's destinations keep their permitted members and mapping until
        // `slow_plane_reload` brings them up to date with the new rules.
        let eligible = std::mem::take(&mut self.mapping.eligible);
        let held = std::mem::take(&mut self.mapping.held);
        let steered: Vec<(
            Prefix,
            Option<crate::core::controller::path_quality::NodeId>,
        )> = self
            .routes
            .iter()
            .filter(|(_, r)| r.table.is_some())
            .filter_map(|(p, _)| self.mapping.destinations.get(p).map(|r| (*p, *r)))
            .collect();
        self.mapping = with_link_capacities(cfg.nnh_mapping(), &cfg);
        self.mapping.eligible = eligible;
        self.mapping.held = held;
        self.mapping.destinations.extend(steered);
        self.regroup_needed = true;
        // Every group is recomputed at the next step (new parameters, new mapping), from
        // a full read of the table.
        self.next_full_update_ns = 0;
        self.rebuild_needed = true;
        if let Some(links) = links {
            self.links = links;
        }
        // The uplinks (or their watch) may have changed: the next step applies them all.
        self.uplinks_followed = false;
        // The uplinks' sampler thread and pipelines are set up once, at start.
        let measured = |c: &Config| {
            (c.local_quality.source == crate::config::LocalQualitySource::Measured)
                .then(|| uplink_interfaces(c))
        };
        if measured(&cfg) != measured(&self.cfg) {
            warn!(
                "[local-quality] or the uplinks it measures changed: that takes effect when lqd restarts; the local quality stays as it was set up at start"
            );
        }
        self.replace_policy = cfg.replace_policy();
        self.cfg = cfg;
        self.slow_plane_reload();
        if self.controller != controller {
            info!("controller parameters changed: damping restarts from the applied weights");
            let mut weights = WeightController::new(controller)
                .map_err(|e| LoadBalancerError::Controller(e.to_string()))?;
            let now = monotonic_ns();
            for (k, g) in &self.groups {
                let applied = self.fractions_of(&g.kernel);
                weights.seed(k.clone(), &applied, now);
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

    /// Sorts the `[[destination]]`s into their groups (one per remote node, ids
    /// `id_base + GROUP_ID_OFFSET + n` in the order the groups first appear among the
    /// destinations, so the same configuration gets the same ids) and adopts the groups a previous lqd left (same
    /// ids, protocol lq): the controller starts from their weights, so a restart causes no
    /// weight jump. lq's groups in that range that no group owns any more (a previous
    /// layout, a destination removed) are deleted once lqd's routes no longer name them.
    fn adopt(&mut self) -> Result<(), LoadBalancerError> {
        let first = self.cfg.nexthop_group.id_base + GROUP_ID_OFFSET;
        for d in &self.cfg.destination {
            self.routes.insert(d.prefix.0, RouteState::default());
            if let Some(key) = self.mapping.group_of(&d.prefix.0)
                && !self.groups.contains_key(&key)
            {
                let id = first + self.groups.len() as u32;
                self.groups.insert(
                    key,
                    GroupState {
                        id,
                        ..Default::default()
                    },
                );
            }
        }
        self.regroup(None);
        let Some(rtnl) = self.rtnl.as_mut() else {
            return Ok(());
        };
        let existing: BTreeMap<u32, NexthopMsg> = rtnl
            .dump_nexthops()?
            .into_iter()
            .filter(|n| n.protocol == RTPROT_LQ)
            .filter_map(|n| n.id.map(|id| (id, n)))
            .collect();
        // What lqd's routes in the main table point at now (a previous lqd's, perhaps of an
        // older layout): a group is adopted only when its destinations' routes name it, and
        // an id they name is never deleted before they are repointed.
        for r in rtnl.dump_routes()? {
            if r.protocol != RTPROT_LQ || r.table != crate::sys::netlink::RT_TABLE_MAIN {
                continue;
            }
            let Some(dst) = r.dst else { continue };
            let prefix = Prefix {
                addr: dst,
                len: r.dst_len,
            };
            if let Some(route) = self.routes.get_mut(&prefix)
                && route.table.is_none()
            {
                route.installed = r.nhid;
            }
        }
        let now = monotonic_ns();
        let base = self.cfg.nexthop_group.id_base;
        let mut adopted = Vec::new();
        for (key, state) in &mut self.groups {
            // The group its destinations' routes name: this layout's id, or an older
            // layout's (whose weights seed this group's damping; that id itself is
            // repointed, then deleted).
            let named: BTreeSet<u32> = state
                .prefixes
                .iter()
                .filter_map(|p| self.routes.get(p).and_then(|r| r.installed))
                .collect();
            let source = if named.contains(&state.id) {
                Some(state.id)
            } else {
                named.into_iter().next()
            };
            let Some(g) = source
                .and_then(|id| existing.get(&id))
                .filter(|g| !g.group.is_empty())
            else {
                continue;
            };
            let weights: Vec<(UplinkId, u32)> = g
                .group
                .iter()
                .map(|m| (m.id.saturating_sub(base), m.weight))
                .collect();
            if source == Some(state.id) {
                state.kernel = Installed::new(weights.clone());
            }
            info!(group = state.id, from = ?source, remote = %key.label(), weights = ?weights, "adopted existing nexthop group");
            adopted.push((key.clone(), weights));
        }
        for (key, kernel) in adopted {
            let applied = self.fractions_of(&kernel);
            self.weights.seed(key, &applied, now);
        }
        let owned: BTreeSet<u32> = self.groups.values().map(|g| g.id).collect();
        let static_range =
            base + GROUP_ID_OFFSET..base + GROUP_ID_OFFSET + steer::SLOW_GROUP_OFFSET;
        self.orphans.extend(
            existing
                .iter()
                .filter(|(id, n)| static_range.contains(*id) && !n.group.is_empty())
                .map(|(id, _)| *id)
                .filter(|id| !owned.contains(id)),
        );
        Ok(())
    }

    /// Sorts every destination into its group ([`NnhMapping::group_of`]): a destination
    /// whose remote node (or permitted members) changed moves to that group, new groups get
    /// an id, groups left without destinations are forgotten and their ids deleted once no
    /// route names them.
    fn regroup(&mut self, slow: Option<&slow_plane::SlowPlane>) {
        self.regroup_needed = false;
        let moves: Vec<(Prefix, GroupKey)> = self
            .routes
            .iter()
            .filter_map(|(p, r)| {
                let key = self.mapping.group_of(p)?;
                let placed = key == r.group
                    && self
                        .groups
                        .get(&key)
                        .is_some_and(|g| g.prefixes.contains(p));
                (!placed).then_some((*p, key))
            })
            .collect();
        if moves.is_empty() && self.groups.values().all(|g| !g.prefixes.is_empty()) {
            return;
        }
        // A whole group that moves to one new key keeps its id and its kernel object: its
        // routes stay, and one replace changes its members. This is the common case (BGP
        // withdraws a spine's path for every prefix of a remote node at once), and costs
        // no route churn.
        let mut by_old: BTreeMap<GroupKey, (BTreeSet<GroupKey>, usize)> = BTreeMap::new();
        for (p, new) in &moves {
            // Only a destination that is in its group now leaves it (a new destination's
            // key is a placeholder, not a group it belongs to).
            if let Some(r) = self.routes.get(p)
                && self
                    .groups
                    .get(&r.group)
                    .is_some_and(|g| g.prefixes.contains(p))
            {
                let e = by_old.entry(r.group.clone()).or_default();
                e.0.insert(new.clone());
                e.1 += 1;
            }
        }
        let mut renamed = false;
        for (old, (targets, n)) in by_old {
            let Some(new) = targets.first().filter(|_| targets.len() == 1) else {
                continue;
            };
            let whole = self
                .groups
                .get(&old)
                .is_some_and(|g| !g.prefixes.is_empty() && g.prefixes.len() == n);
            if !whole || *new == old || self.groups.contains_key(new) {
                continue;
            }
            if let Some(g) = self.groups.remove(&old) {
                for p in &g.prefixes {
                    if let Some(r) = self.routes.get_mut(p) {
                        r.group = new.clone();
                    }
                }
                debug!(from = %old.label(), to = %new.label(), group = g.id, "group renamed: all its destinations moved together");
                self.weights.rekey(&old, new.clone());
                self.groups.insert(new.clone(), g);
                renamed = true;
            }
        }
        let moves: Vec<(Prefix, GroupKey)> = if renamed {
            moves
                .into_iter()
                .filter(|(p, key)| !self.groups.get(key).is_some_and(|g| g.prefixes.contains(p)))
                .collect()
        } else {
            moves
        };
        // New groups get their ids in key order, so a configuration maps to the same ids.
        let new_keys: BTreeSet<GroupKey> = moves
            .iter()
            .map(|(_, k)| k.clone())
            .filter(|k| !self.groups.contains_key(k))
            .collect();
        for key in new_keys {
            match self.allocate_group_id(&key, slow) {
                Some(id) => {
                    self.groups.insert(
                        key,
                        GroupState {
                            id,
                            ..Default::default()
                        },
                    );
                }
                None => {
                    warn!(remote = %key.label(), "nexthop group ids exhausted; its destinations are not steered")
                }
            }
        }
        for (p, key) in moves {
            let Some(route) = self.routes.get_mut(&p) else {
                continue;
            };
            let old = std::mem::replace(&mut route.group, key.clone());
            if let Some(g) = self.groups.get_mut(&old) {
                g.prefixes.remove(&p);
            }
            if let Some(g) = self.groups.get_mut(&key) {
                g.prefixes.insert(p);
                g.routes_pending |= route.installed != Some(g.id);
                self.routes_pending |= g.routes_pending;
                debug!(prefix = %format_prefix(&p), remote = %key.label(), group = g.id, "destination in its group (6.1)");
            }
        }
        let empty: Vec<GroupKey> = self
            .groups
            .iter()
            .filter(|(_, g)| g.prefixes.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for key in empty {
            if let Some(g) = self.groups.remove(&key) {
                self.weights.forget(&key);
                if !g.kernel.is_empty() {
                    self.orphans.insert(g.id);
                }
                debug!(remote = %key.label(), group = g.id, "group without destinations");
            }
        }
    }

    /// The lowest free id of the group's range: `[[destination]]` groups from
    /// `id_base + GROUP_ID_OFFSET`, the slow plane's from its own offset (ids another
    /// daemon holds are skipped, never taken over).
    fn allocate_group_id(
        &self,
        key: &GroupKey,
        slow: Option<&slow_plane::SlowPlane>,
    ) -> Option<u32> {
        // The configuration check keeps these ranges inside 32 bits.
        let base = self.cfg.nexthop_group.id_base + GROUP_ID_OFFSET;
        let range = if key.eligible.is_some() {
            let first = base + steer::SLOW_GROUP_OFFSET;
            first..first.saturating_add(steer::SLOW_GROUP_SPAN)
        } else {
            base..base + steer::SLOW_GROUP_OFFSET
        };
        let used: BTreeSet<u32> = self.groups.values().map(|g| g.id).collect();
        range.into_iter().find(|id| {
            !used.contains(id)
                && !self.orphans.contains(id)
                && slow.is_none_or(|s| {
                    s.nexthop(*id).is_none() && !s.lq_routes().values().any(|r| *r == Some(*id))
                })
        })
    }

    /// One control step at `now_ns`, in the order of seed 003 section 6: liveness (6.5),
    /// uplink state, the path table's rows that can have moved, the weights of the groups
    /// whose inputs changed (6.1-6.4), and their replaces. Returns how many groups were
    /// replaced.
    pub fn step(&mut self, now_ns: u64) -> Result<usize, LoadBalancerError> {
        // The step's own duration is measured, not taken from `now_ns` (the loop's time).
        let step_started = monotonic_ns();
        self.last_step_ns = now_ns;
        self.control_steps += 1;
        self.follow_liveness(now_ns)?;
        self.follow_uplinks()?;
        let failed: BTreeSet<NeighborKey> = self.heartbeat.failed_neighbors();
        let paths = self.read_paths(now_ns, &failed)?;
        let mirror = std::mem::take(&mut self.mirror);
        self.slow_plane_resolve_due(mirror.entries(), now_ns, matches!(paths, PathsRead::Full));
        self.mirror = mirror;
        if self.regroup_needed {
            let slow = self.slow.take();
            self.regroup(slow.as_ref());
            self.slow = slow;
        }
        let todo = self.groups_to_compute(now_ns, &paths, &failed);
        let apps = self.update_weights(now_ns, &todo);
        let replaced = self.apply(apps, now_ns, step_started);
        self.install_pending_routes();
        self.delete_orphans();
        Ok(replaced)
    }

    /// Whether a neighbor changed state (seed 003 section 6.5) since the last call: the
    /// daemon tells the clients that want every change (gNMI ON_CHANGE).
    pub fn take_neighbors_changed(&mut self) -> bool {
        std::mem::take(&mut self.neighbors_changed)
    }

    /// Seed 003 section 6.5: the receiver's neighbor table, when this step needs a fresh
    /// copy ([`TableReads`]), fed to the heartbeat; a spine that failed now leaves every
    /// group at once (`remove_failed_members`). A failure deadline passed is confirmed
    /// against a fresh copy; staleness (display only) is judged as of the copy's time, so
    /// a stale deadline does not ask for one (it did, and with 64 spines one fell due every
    /// few milliseconds: a read at nearly every step, issue 41).
    fn follow_liveness(&mut self, now_ns: u64) -> Result<(), LoadBalancerError> {
        let max_age = self.table_read_max_age_ns();
        let heartbeat = &self.heartbeat;
        let read_neighbors = TableReads::due(self.table_reads.neighbors_ns, now_ns, max_age)
            || heartbeat
                .next_failure_deadline()
                .is_some_and(|d| d <= now_ns)
            || (self.named_spines.iter())
                .chain(self.named_slots.iter().map(|(spine, _)| spine))
                .any(|spine| heartbeat.state(*spine) != Some(NeighborState::Active));
        let mut events = Vec::new();
        if read_neighbors {
            let neighbors = self.reader.neighbors()?;
            self.table_reads.neighbors_ns = Some(now_ns);
            // The receiver's change events name a spine when an entry's LQS or CL moved.
            // The integral weight function also reads what moves without them (available
            // bandwidth; with diagnostics, capacity and queue depth, docs/weights.md): with
            // it, every spine heard from since the last read is read again.
            if matches!(self.controller.weight_function, WeightFunction::Integral(_)) {
                for (k, v) in &neighbors {
                    if self
                        .neighbors
                        .get(k)
                        .is_none_or(|old| old.accepted != v.accepted)
                    {
                        self.named_spines.insert(*k);
                    }
                }
            }
            self.neighbors = neighbors;
            // While lqd was not running (a restart, a crash), no XDP program refreshed the
            // table: silence from before this start is no evidence of failure. Every entry
            // and neighbor gets a full detection interval from the start (seed 003 section
            // 6.5), so a restart adopts the forwarding state instead of pruning live
            // spines (the mirror raises the entries' refresh times the same way).
            for v in self.neighbors.values_mut() {
                v.last_seen_ns = v.last_seen_ns.max(self.started_ns);
            }
            for (k, v) in &self.neighbors {
                events.extend(self.heartbeat.observe(*k, v, now_ns));
            }
        }
        // Without a read no failure deadline has passed (above), and staleness is judged as
        // of the last read: the tick reports nothing new.
        let copy_ns = self.table_reads.neighbors_ns.unwrap_or(now_ns);
        events.extend(self.heartbeat.tick_as_of(now_ns, copy_ns));
        for e in &events {
            log_heartbeat(e);
        }
        self.neighbors_changed |= !events.is_empty();
        let failed_now: Vec<NeighborKey> = events
            .iter()
            .filter_map(|e| match e {
                HeartbeatEvent::NeighborFailed { neighbor, .. } => Some(*neighbor),
                _ => None,
            })
            .collect();
        if !failed_now.is_empty() {
            self.neighbor_failures += failed_now.len() as u64;
            self.remove_failed_members(&failed_now);
        }
        Ok(())
    }

    /// Uplink state from the link notifications queued since the last step (one
    /// non-blocking receive when nothing changed), not a system call per uplink, and the
    /// measured local quality of the up ones (`local.rs`).
    fn follow_uplinks(&mut self) -> Result<(), LoadBalancerError> {
        let changed = self.links.poll().map_err(RtnlError::Io)?;
        // Nothing to apply: no link changed and no measured quality moves with the steps.
        if !changed && self.uplinks_followed && self.measured_local.is_none() {
            return Ok(());
        }
        self.uplinks_followed = true;
        for u in &self.cfg.uplink {
            let id = UplinkId::from(u.id);
            // Down is 0 whatever was measured; up is the measured quality once there is
            // one, else 255 (seed 003 section 6.3; `[local-quality]`).
            match (self.links.is_up(&u.interface), self.measured_quality(id)) {
                (true, Some(q)) => self.local.set(id, q),
                (up, _) => self.local.set_up(id, up),
            }
        }
        Ok(())
    }

    /// The path table (issue 15): the rows of the spines that can have moved (named by
    /// change events, due by ageing, failed or recovered; `PathMirror`), read in place.
    /// The whole table only when the receiver claimed a slot (a new key) or lost an event
    /// since the last full read (each count read first: a claim after this read moves the
    /// count again, and the next step reads in full), on a reload, or on the backstop
    /// timer.
    fn read_paths(
        &mut self,
        now_ns: u64,
        failed: &BTreeSet<NeighborKey>,
    ) -> Result<PathsRead, LoadBalancerError> {
        let max_age = self.table_read_max_age_ns();
        let dead = self.controller.dead_interval_ns();
        let mut rebuild =
            self.rebuild_needed || !self.reader.mapped() || now_ns >= self.next_full_scan_ns;
        // The rows the events name, where the last full read found them. A row it did not
        // find is a claim: its sender's rows are read, and the count, which confirms the
        // claim, is read at once (a full read follows).
        let mut named = std::mem::take(&mut self.named_spines);
        let mut rows: Vec<u32> = Vec::with_capacity(self.named_slots.len());
        let mut new_row_named = false;
        for (spine, slot) in self.named_slots.drain(..) {
            match self.reader.position_of(slot) {
                Some(p) => rows.push(p as u32),
                None => {
                    named.insert(spine);
                    new_row_named = true;
                }
            }
        }
        let mut counts = None;
        if rebuild
            || new_row_named
            || TableReads::due(self.table_reads.counters_ns, now_ns, max_age)
        {
            let c = self.claim_and_loss_counts(now_ns)?;
            rebuild |= c != (self.slots_claimed, self.events_lost);
            counts = Some(c);
        }
        if !rebuild {
            let reader = &self.reader;
            // A row named by several events is read once.
            rows.sort_unstable();
            rows.dedup();
            let clock = RefreshClock {
                not_before_ns: self.started_ns,
                now_ns,
                dead_ns: dead,
            };
            self.mirror
                .set_qualities_only(!self.controller.reads_available_bandwidth());
            let r = self
                .mirror
                .refresh(&named, &rows, clock, failed, &mut KnownRows(reader));
            self.path_rows_read += r.rows_read as u64;
            self.path_rows_read_by_word += r.words_read as u64;
            if !r.stale {
                return Ok(PathsRead::Changed {
                    moved: r.changed_remotes,
                    zero_crossing: r.zero_crossing_remotes,
                });
            }
        }
        // The counts are read before the rows: a claim after this read moves the count
        // again, and a later step reads in full.
        let (claimed, lost) = match counts {
            Some(c) => c,
            None => self.claim_and_loss_counts(now_ns)?,
        };
        let paths = self.reader.paths_known(true)?;
        self.path_rows_read += paths.len() as u64;
        self.mirror
            .rebuild(paths, self.started_ns, now_ns, dead, failed);
        self.rebuild_needed = false;
        self.slots_claimed = claimed;
        self.events_lost = lost;
        self.next_full_scan_ns = now_ns + FULL_SCAN_NS;
        Ok(PathsRead::Full)
    }

    /// Only the groups whose inputs changed are recomputed (issue 15): a group's inputs
    /// are its remote node's entries (moved when the read of the path table says so), its
    /// permitted members (part of its key: a new key is a new group), every uplink's local
    /// quality and the failed spines (shared by all). The others are ticked (damping and
    /// integral steps go on). All groups are recomputed after a full read and every
    /// FULL_UPDATE_NS, which also lets the integral function's peak-held capacity estimate
    /// decay.
    ///
    /// A group whose remote node's entries moved is computed when its next target can be
    /// applied: at its T_reweight boundary, or at once when the move can take a path
    /// quality to or from 0 (6.4's exception). Section 6.4 applies a target at most once
    /// per T_reweight; a target computed at every step between two boundaries was
    /// overwritten before it was applied (issue 41: under a fabric's churn every group was
    /// computed about four times per application). The target applied is the one the seed
    /// asks for, computed from the table as it is at the boundary ([`Self::defers`]
    /// says when this holds).
    fn groups_to_compute(
        &mut self,
        now_ns: u64,
        paths: &PathsRead,
        failed: &BTreeSet<NeighborKey>,
    ) -> GroupsToCompute {
        let (moved_remotes, zero_crossing) = match paths {
            PathsRead::Changed {
                moved,
                zero_crossing,
            } => (Some(moved), Some(zero_crossing)),
            PathsRead::Full => (None, None),
        };
        let full = now_ns >= self.next_full_update_ns || moved_remotes.is_none();
        if full {
            self.next_full_update_ns = now_ns + FULL_UPDATE_NS;
        }
        let mut shared = Digest::default();
        for u in self.mapping.uplinks.keys() {
            shared.add(u64::from(*u) << 8 | u64::from(self.local.get(*u)));
        }
        for f in failed {
            shared.add(u64::from(f.node_as) << 32 | u64::from(f.node_id));
        }
        let shared_moved = shared.0 != self.shared_digest;
        self.shared_digest = shared.0;
        // What the step keeps per group follows the groups' keys: pruned and indexed again
        // only when the set of keys moved (`GroupTable`), not walked at every step.
        let groups_moved = self.groups_seen != Some(self.groups.generation());
        let all_considered = full || shared_moved || groups_moved;
        // The remote nodes waiting for their boundary, when every group is considered below
        // (they are computed now): taken before the groups are indexed again.
        let waiting: Vec<NodeId> = if all_considered {
            self.boundary_wait.waiting_remotes()
        } else {
            Vec::new()
        };
        if groups_moved {
            self.groups_seen = Some(self.groups.generation());
            self.boundary_wait
                .index(self.groups.keys().filter(|k| k.adopted.is_none()));
        }
        let mut keys: Vec<GroupKey> = Vec::new();
        if all_considered {
            // The groups, the computed set and the reports are all sorted by key: each "is
            // it there" below is a merge step (`SortedProbe`), not a tree search per group.
            let mut first_time: Vec<GroupKey> = Vec::new();
            let mut computed = SortedProbe::new(self.computed.iter());
            for key in self.groups.keys() {
                let new = !computed.contains(key);
                if new {
                    first_time.push(key.clone());
                }
                // A remote node whose groups wait for their boundary moved too: they are
                // computed now, and nothing waits after this step.
                let moved = match (moved_remotes, key.remote) {
                    (Some(m), Some(r)) => {
                        m.binary_search(&r).is_ok() || waiting.binary_search(&r).is_ok()
                    }
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                // A held group (adopted, its mapping not known yet) keeps the weights it
                // was adopted with: computed without its remote node's entries, its target
                // would be the local-only split, and flows would move twice.
                if (full || shared_moved || new || moved) && key.adopted.is_none() {
                    keys.push(key.clone());
                }
            }
            if !first_time.is_empty() || self.computed.len() != self.groups.len() {
                self.computed.extend(first_time);
                let mut present = SortedProbe::new(self.groups.keys());
                self.computed.retain(|k| present.contains(k));
            }
            // Every group whose inputs moved is computed now.
            self.boundary_wait.clear();
        } else {
            // The same keys had their first computation at an earlier step: only the
            // groups of the remote nodes whose entries moved are computed again, now or
            // at their T_reweight boundary. (A full read is `full`: the branch above.)
            let defers = self.defers();
            let t_reweight = self.controller.t_reweight_ns();
            // The groups' weights found by a merge: `moved` asks in ascending key order.
            let mut weights = SortedLookup::new(self.weights.destinations());
            if let Some(moved) = moved_remotes {
                self.boundary_wait.moved(
                    moved,
                    |r| defers && zero_crossing.is_none_or(|z| !z.contains(r)),
                    |group_keys| {
                        (group_keys.iter())
                            .map(|k| {
                                weights
                                    .get(k)
                                    .map_or(0, |d| d.reweight_boundary(t_reweight))
                            })
                            .min()
                            .unwrap_or(0)
                    },
                    &mut keys,
                );
            }
            // No key twice: a remote node is computed now or waits, never both, and its
            // groups are listed once.
            self.boundary_wait.take_due(now_ns, &mut keys);
            self.group_computations_deferred += self.boundary_wait.waiting_groups();
        }
        self.group_computations += keys.len() as u64;
        GroupsToCompute {
            keys,
            full,
            groups_moved,
        }
    }

    /// Whether a group's computation may wait for its T_reweight boundary
    /// (`groups_to_compute`): with the seed's weight function, whose target is the table's
    /// at the moment it is applied, and with the minimum over parallel links, where only
    /// an entry crossing 0 ([`EntryMove::CrossesZero`](crate::core::controller::path_quality::EntryMove::CrossesZero)) can take a path quality to or
    /// from 0. The integral function integrates its signals at every computation, and a
    /// capacity-weighted mean can floor to 0 when a link other than the one that moved is
    /// at 0: both compute at every step, as before.
    fn defers(&self) -> bool {
        matches!(self.controller.weight_function, WeightFunction::Seed)
            && self.controller.parallel_links == ParallelLinkAggregation::Minimum
    }

    /// Seed 003 sections 6.1-6.4: path quality and target weights of the groups `todo`
    /// names, damped (`WeightController`); the report the views show is this step's
    /// groups over the last ones. Returns the applications due, a refused one again.
    fn update_weights(
        &mut self,
        now_ns: u64,
        todo: &GroupsToCompute,
    ) -> Vec<(GroupKey, Application)> {
        let groups = &self.groups;
        let report = compute_some_groups_reusing(
            &self.controller,
            &self.mapping,
            &self.local,
            self.mirror.snapshot(),
            todo.keys.iter(),
            &mut self.spare_members,
        );
        let mut apps = if todo.groups_moved {
            let mut present = SortedProbe::new(groups.keys());
            self.weights
                .update_changed(&report, |k| present.contains(k), now_ns)
        } else {
            self.weights.update_reported(&report, now_ns)
        };
        let last = &mut self.last_report;
        if todo.groups_moved {
            let mut present = SortedProbe::new(groups.keys());
            last.groups.retain(|k, _| present.contains(k));
            let mut present = SortedProbe::new(groups.keys());
            last.signals.retain(|k, _| present.contains(k));
        }
        if self.controller.gray_failure.is_some() {
            self.gray_failure_prunes += note_gray_failures(&last.groups, &report.groups);
        }
        // The members' vectors the new report replaces go back to the next computation.
        last.replace_groups(report.groups, &mut self.spare_members);
        last.signals.extend(report.signals);
        if todo.full {
            (last.unknown_spine_entries, last.unknown_remote_entries) =
                unused_entries(&self.mapping, self.mirror.snapshot(), groups.keys());
        }
        last.failed_entries = report.failed_entries;
        // The walk only when a replace was refused (not every group at every step).
        if std::mem::take(&mut self.refused_groups) {
            for (key, g) in &mut self.groups {
                if let Some(app) = g.refused.take()
                    && !apps.iter().any(|(k, _)| k == key)
                {
                    apps.push((key.clone(), app));
                }
            }
        }
        apps
    }

    /// The replaces `apps` need (`judge`, then `prepare`), sent in one batch (`program`);
    /// the step's time, from `step_started` to the replaces sent and then to their
    /// acknowledgement, is kept when it replaced a group. Returns how many groups were
    /// replaced.
    fn apply(
        &mut self,
        mut apps: Vec<(GroupKey, Application)>,
        now_ns: u64,
        step_started: u64,
    ) -> usize {
        self.held_due(&mut apps, now_ns);
        // In key order, so that the groups are found in one walk beside them (each key
        // comes once: an update or a tick, a refused one or a held one not among them).
        apps.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        debug_assert!(apps.windows(2).all(|w| w[0].0 < w[1].0), "a group twice");
        let writes = self.judge(apps, now_ns);
        let mut batch = Vec::with_capacity(writes.len());
        for (key, app, cause) in writes {
            if let Some(msg) = self.prepare(&key, &app) {
                batch.push(Replace {
                    key,
                    app,
                    msg,
                    cause,
                });
            }
        }
        let work_done = monotonic_ns();
        let (replaced, kernel_ns) = self.program(batch);
        if replaced > 0 {
            self.step_times
                .record(work_done.saturating_sub(step_started), kernel_ns);
        }
        replaced
    }

    /// The receiver's `slots_claimed` and `events_lost` counts (one batch read of its
    /// counters): either moving since the last full read means the event-named reads may
    /// have missed a row.
    fn claim_and_loss_counts(&mut self, now_ns: u64) -> Result<(u64, u64), LoadBalancerError> {
        let counters = self.reader.counters()?;
        self.table_reads.counters_ns = Some(now_ns);
        Ok((
            counters[Counter::SlotsClaimed as usize],
            counters[Counter::EventsLost as usize],
        ))
    }

    /// Seed 003 section 6.5: a failed spine leaves every group at once. Deleting its
    /// member nexthops takes it out of every group that holds them in one kernel operation
    /// each (the kernel removes a deleted nexthop from its groups), instead of one replace
    /// per group; the weight step that follows then finds most groups already right. Not
    /// done when some group would be left without members (the kernel would delete the
    /// group and the routes through it): the replaces handle that case, as before.
    fn remove_failed_members(&mut self, spines: &[NeighborKey]) {
        let base = self.cfg.nexthop_group.id_base;
        let Some(rtnl) = self.rtnl.as_mut() else {
            return;
        };
        let gone: BTreeSet<UplinkId> = self
            .mapping
            .uplinks
            .iter()
            .filter(|(_, u)| spines.contains(&u.spine))
            .map(|(id, _)| *id)
            .collect();
        // A member whose link is down is gone from the kernel's groups already (the kernel
        // deletes a down device's nexthops), whatever `kernel` still says.
        let empties = self.groups.values().any(|g| {
            !g.kernel.is_empty()
                && g.kernel
                    .iter()
                    .all(|(u, _)| gone.contains(u) || self.local.get(*u) == 0)
        });
        if gone.is_empty() || empties {
            return;
        }
        for u in &gone {
            match rtnl.delete_nexthop(base + u) {
                Ok(()) => self.member_deletes += 1,
                // Already gone (its device went down): out of every group all the same.
                Err(e) => debug!(uplink = u, error = %e, "member nexthop already gone"),
            }
            self.removed_members.insert(*u);
        }
        for g in self.groups.values_mut() {
            g.kernel.retain(|(u, _)| !gone.contains(u));
        }
        info!(uplinks = ?gone, groups = self.groups.len(), "failed spine: its member nexthops deleted, out of every group at once (6.5)");
    }

    /// The held applications whose hold has ended by `now_ns`, added to this step's
    /// `apps` unless the step computed a newer one for the group (decided again in
    /// `prepare`).
    fn held_due(&mut self, apps: &mut Vec<(GroupKey, Application)>, now_ns: u64) {
        if self.held.is_empty() {
            return;
        }
        let due: Vec<GroupKey> = (self.held.iter())
            .filter(|(_, due)| **due <= now_ns)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if apps.iter().any(|(k, _)| *k == key) {
                continue;
            }
            match self.groups.get(&key).and_then(|g| g.held.clone()) {
                Some(app) => apps.push((key, app)),
                // The group went.
                None => {
                    self.held.remove(&key);
                }
            }
        }
    }

    /// The replace rule's verdict on each application (`apps` sorted by key, each key
    /// once): the groups' hold state follows it, and the applications to write are
    /// returned as written (their kernel weights those `replace::decide` chose) with why.
    /// The groups are found in one walk beside the applications: 23 000 applications a
    /// second at a leaf of a 64 x 512 fabric under LQS noise, where a tree search for each
    /// was 3 % of lqd's samples (issue 41). An application's vector goes back to the next
    /// computation ([`WeightController::recycle`]).
    fn judge(
        &mut self,
        apps: Vec<(GroupKey, Application)>,
        now_ns: u64,
    ) -> Vec<(GroupKey, Application, ReplaceCause)> {
        let shape = match self.controller.group {
            GroupKind::Resilient { buckets, .. } => GroupShape::Resilient {
                buckets,
                max_weight: self.controller.weight_resolution.max_weight(),
            },
            GroupKind::HashThreshold => GroupShape::HashThreshold,
        };
        let mut writes = Vec::new();
        let mut groups = (&mut self.groups).into_iter().peekable();
        for (key, app) in apps {
            while groups.next_if(|(k, _)| **k < key).is_some() {}
            let Some((_, state)) = groups.next_if(|(k, _)| **k == key) else {
                // The group went.
                self.weights.recycle(app);
                continue;
            };
            if !app.has_members() {
                warn!(remote = %key.label(), "no usable next hop: the group keeps its last members");
                self.weights.recycle(app);
                continue;
            }
            let verdict = replace::decide_installed(
                &self.replace_policy,
                shape,
                &state.kernel,
                &app,
                state.hold.as_ref(),
                now_ns,
            );
            match verdict {
                Verdict::SameForwarding { hold } => {
                    // Every computation not written (its kernel weights are not computed to
                    // see whether they differ from the installed ones: issue 41).
                    self.bucket_neutral_skipped += 1;
                    trace!(remote = %key.label(), fractions = ?app.fractions(), kernel = ?state.kernel, "not written: the kernel already forwards as close to these weights as buckets can");
                    if state.held.take().is_some() || !self.held.is_empty() {
                        self.held.remove(&key);
                    }
                    state.hold = hold;
                    self.weights.recycle(app);
                }
                Verdict::Held { hold, due_ns } => {
                    if self.held.insert(key.clone(), due_ns).is_none() {
                        self.holds_started += 1;
                        trace!(remote = %key.label(), fractions = ?app.fractions(), kernel = ?state.kernel, "bucket move held (within the hysteresis)");
                    }
                    state.held = Some(app);
                    state.hold = Some(hold);
                }
                Verdict::Replace { cause, weights } => {
                    debug!(remote = %key.label(), ?cause, kernel = ?state.kernel, computed = ?app.kernel(), written = ?weights, "weights written");
                    // A write makes every bucket move that helps: nothing stays held.
                    state.held = None;
                    self.held.remove(&key);
                    state.hold = None;
                    // What is written: the computed weights, or the bucket counts that move
                    // only the members' buckets that must move (`replace`, rule 3).
                    let app = app.with_kernel(weights);
                    if self.rtnl.is_none() {
                        state.kernel = Installed::new(app.kernel().to_vec());
                        continue;
                    }
                    writes.push((key, app, cause));
                }
            }
        }
        writes
    }

    /// The replace message of an application to write (`judge`), its members' nexthops
    /// re-created first where a spine's failure had deleted them; `None` when lqd does not
    /// program the kernel or the group went.
    fn prepare(&mut self, key: &GroupKey, app: &Application) -> Option<NexthopMsg> {
        let base = self.cfg.nexthop_group.id_base;
        let kind = self.controller.group;
        let state = self.groups.get(key)?;
        let rtnl = self.rtnl.as_mut()?;
        // A member deleted on its spine's failure is back: its nexthop first.
        for (u, _) in app.kernel() {
            if self.removed_members.remove(u)
                && let Some(up) = self.cfg.uplink.iter().find(|x| UplinkId::from(x.id) == *u)
                && let Ok(oif) = ifindex(&up.interface)
            {
                let _ = rtnl.replace_nexthop(&NexthopMsg::gateway(base + u, oif, up.gateway));
                debug!(uplink = u, "member nexthop re-created");
            }
        }
        Some(NexthopMsg::weighted_group(
            state.id,
            base,
            app.kernel(),
            &kind,
        ))
    }

    /// Programs the replaces of one step in one pipelined batch; returns how many groups
    /// changed and how long the kernel took, sent to acknowledged (logging and bookkeeping
    /// not counted).
    fn program(&mut self, batch: Vec<Replace>) -> (usize, u64) {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return (0, 0);
        };
        if batch.is_empty() {
            return (0, 0);
        }
        let msgs: Vec<NexthopMsg> = batch.iter().map(|r| r.msg.clone()).collect();
        let sent = monotonic_ns();
        let mut results = rtnl.replace_nexthops(&msgs);
        let mut kernel_ns = monotonic_ns().saturating_sub(sent);
        if results.iter().any(Result::is_err) {
            // The kernel deletes the nexthops of a device that goes down (and anyone may
            // delete an object): re-create lqd's member nexthops and try once more.
            let base = self.cfg.nexthop_group.id_base;
            for u in &self.cfg.uplink {
                if let Ok(oif) = ifindex(&u.interface) {
                    let id = base + u32::from(u.id);
                    let _ = rtnl.replace_nexthop(&NexthopMsg::gateway(id, oif, u.gateway));
                }
            }
            let failed: Vec<usize> = (0..results.len())
                .filter(|i| results[*i].is_err())
                .collect();
            let again: Vec<NexthopMsg> = failed.iter().map(|i| msgs[*i].clone()).collect();
            let sent = monotonic_ns();
            let retried = rtnl.replace_nexthops(&again);
            kernel_ns += monotonic_ns().saturating_sub(sent);
            for (i, r) in failed.into_iter().zip(retried) {
                results[i] = r;
            }
        }
        let mut replaced = 0;
        for (
            Replace {
                key,
                app,
                msg,
                cause,
            },
            result,
        ) in batch.into_iter().zip(results)
        {
            let Some(state) = self.groups.get_mut(&key) else {
                continue;
            };
            match result {
                Ok(()) => {
                    self.group_replaces += 1;
                    // Counted once the kernel has it, as `group_replaces` is: the causes
                    // add up to the replaces (a refused one counts neither).
                    self.replace_causes.count(cause);
                    replaced += 1;
                    if let GroupKind::Resilient { buckets, .. } = self.controller.group {
                        // Only `replace = "every-step"` lets a replace that moves no
                        // bucket through (`prepare`).
                        if moves_no_bucket(buckets, &state.kernel, app.kernel()) {
                            self.bucket_neutral_replaces += 1;
                        }
                        let moved = remap(buckets, &state.kernel, app.kernel());
                        self.buckets_moved += (moved * f64::from(buckets)).round() as u64;
                    }
                    debug!(group = msg.id, remote = %key.label(), weights = ?app.kernel(), immediate = app.immediate, "group replaced");
                    state.kernel = Installed::new(app.kernel().to_vec());
                }
                Err(e) => {
                    self.group_errors += 1;
                    error!(group = msg.id, error = %crate::core::report::Chain(&e), "group replace refused; tried again at the next step");
                    state.refused = Some(app);
                    self.refused_groups = true;
                }
            }
        }
        (replaced, kernel_ns)
    }

    /// Points every destination's route at its group, once the group exists in the kernel
    /// (a new destination, one that moved to another remote node's group, a restart).
    fn install_pending_routes(&mut self) {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return;
        };
        // The walk only while some group waits for its routes (not every group at every
        // step); it stays due until each such group is programmed and its routes are in.
        if !self.routes_pending {
            return;
        }
        let mut still_pending = false;
        for state in self.groups.values_mut() {
            if state.routes_pending && state.kernel.is_empty() {
                still_pending = true;
            }
            if !state.routes_pending || state.kernel.is_empty() {
                continue;
            }
            state.routes_pending = false;
            for p in &state.prefixes {
                let Some(route) = self.routes.get_mut(p) else {
                    continue;
                };
                if route.installed == Some(state.id) {
                    continue;
                }
                let (id, table) = (
                    state.id,
                    route.table.unwrap_or(crate::sys::netlink::RT_TABLE_MAIN),
                );
                let what = format!("route {} table {table}", format_prefix(p));
                match rtnl.request(&what, |seq| {
                    crate::sys::netlink::encode_route_replace(p, id, table, seq)
                }) {
                    Ok(()) => {
                        route.installed = Some(id);
                        info!(prefix = %format_prefix(p), group = id, "route points at the nexthop group");
                    }
                    Err(e) => {
                        state.routes_pending = true;
                        still_pending = true;
                        error!(error = %crate::core::report::Chain(&e), "route install refused");
                    }
                }
            }
        }
        self.routes_pending = still_pending;
    }

    /// Deletes lq's group ids no group owns, once no route of lqd's names them.
    fn delete_orphans(&mut self) {
        if self.orphans.is_empty() {
            return;
        }
        // A destination's route not installed by this lqd yet may still name an orphan
        // (when the kernel's route could not be read): none is deleted until it is.
        if self.routes.values().any(|r| r.installed.is_none()) {
            return;
        }
        let named: BTreeSet<u32> = self.routes.values().filter_map(|r| r.installed).collect();
        let owned: BTreeSet<u32> = self.groups.values().map(|g| g.id).collect();
        let free: Vec<u32> = self
            .orphans
            .iter()
            .copied()
            .filter(|id| !named.contains(id) && !owned.contains(id))
            .collect();
        for id in free {
            let Some(rtnl) = self.rtnl.as_mut() else {
                self.orphans.remove(&id);
                continue;
            };
            match rtnl.delete_nexthop(id) {
                Ok(()) => {
                    self.orphans.remove(&id);
                    info!(
                        group = id,
                        "deleted a group of lq's that no destination uses"
                    );
                }
                Err(RtnlError::Refused { source, .. })
                    if source.raw_os_error() == Some(libc::ENOENT) =>
                {
                    self.orphans.remove(&id);
                }
                Err(e) => {
                    warn!(group = id, error = %crate::core::report::Chain(&e), "deleting an unused group of lq's failed; tried again at the next step");
                }
            }
        }
    }

    /// The oldest a step lets its copies of the neighbor table and counters get. With the
    /// integral weight function, half a T_notify as before: a neighbor read is how it learns
    /// which spines to read again for what changes without an event (available bandwidth,
    /// diagnostics), and its controller steps every T_reweight.
    fn table_read_max_age_ns(&self) -> u64 {
        match self.controller.weight_function {
            WeightFunction::Integral(_) => self.controller.t_notify_ns() / 2,
            WeightFunction::Seed => {
                self.controller.t_notify_ns() * TABLE_READ_MAX_AGE_TENTHS_T_NOTIFY / 10
            }
        }
    }

    /// When the next step is due at the latest (damping boundary, heartbeat deadline, the
    /// neighbors' next read).
    pub fn next_due(&self, now_ns: u64) -> Option<u64> {
        [
            // Damping steps of different groups fall due at different times; at most one
            // step per DAMPING_SLACK_NS serves them all (a few ms late on a 20 ms
            // T_reweight), instead of a step per group's due time.
            self.weights
                .next_due(now_ns)
                .map(|d| d.max(self.last_step_ns.saturating_add(DAMPING_SLACK_NS))),
            // A failure falling due (staleness is judged at the neighbors' next read).
            self.heartbeat.next_failure_deadline(),
            // The earliest held move falling due (`held_due`).
            self.held.values().min().copied(),
            // The earliest T_reweight boundary of a group whose computation waits for it
            // (`groups_to_compute`), with the damping steps' slack.
            (self.boundary_wait.due_ns())
                .map(|d| d.max(self.last_step_ns.saturating_add(DAMPING_SLACK_NS))),
            // The neighbors' next read at its age (`TableReads`), not at the loop's next
            // wake-up after it.
            self.table_reads
                .neighbors_ns
                .map(|t| t.saturating_add(self.table_read_max_age_ns())),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A change event from the receiver's ring buffer: the next step reads the changed rows
    /// it names, or every row of its sender when it names none (more changes than it has
    /// room for). A record lqd cannot read makes the next step read the whole table.
    pub fn note_event(&mut self, record: &[u8]) {
        let Some(e) = change_event(record) else {
            self.rebuild_needed = true;
            return;
        };
        let spine = event_sender(&e);
        match e.named_slots() {
            // Bounded: past a table's worth of named rows, the sender's rows are read.
            Some(slots) if self.named_slots.len() < MAX_NAMED_SLOTS => {
                self.named_slots
                    .extend(slots.iter().map(|&slot| (spine, slot)));
            }
            _ => {
                self.named_spines.insert(spine);
            }
        }
    }

    /// T_reweight (seed 003 section 6.4), as configured.
    pub fn t_reweight_ns(&self) -> u64 {
        self.controller.t_reweight_ns()
    }

    /// The XDP receiver (for the ring buffers).
    pub fn receiver_mut(&mut self) -> &mut XdpReceiver {
        &mut self.receiver
    }

    /// Removes lqd's routes and nexthop objects (only with `flush-on-exit`).
    pub fn flush(&mut self) {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return;
        };
        for (p, r) in &self.routes {
            if r.installed.is_some() {
                let table = r.table.unwrap_or(crate::sys::netlink::RT_TABLE_MAIN);
                let _ = rtnl.request("delete route", |seq| {
                    crate::sys::netlink::encode_route_delete(p, table, seq)
                });
            }
        }
        for id in self
            .groups
            .values()
            .map(|g| g.id)
            .chain(self.orphans.iter().copied())
        {
            let _ = rtnl.delete_nexthop(id);
        }
        for u in &self.cfg.uplink {
            let _ = rtnl.delete_nexthop(self.cfg.nexthop_group.id_base + u32::from(u.id));
        }
        info!("flushed lqd's routes and nexthop objects");
    }

    /// Per group: its destinations, target, applied and kernel weights, with member
    /// qualities (the typed view `lqd show weights`, the metrics and the snapshots share).
    pub fn weights_view(&self) -> crate::views::snapshot::WeightsView {
        use crate::views::snapshot::{GroupWeights, MemberWeights, WeightsView};
        // Each uplink's interface name once, not a search of the configuration per member
        // (a leaf of a 64 x 512 fabric shows 32 768 members).
        let interfaces: BTreeMap<UplinkId, &String> = self
            .cfg
            .uplink
            .iter()
            .map(|u| (UplinkId::from(u.id), &u.interface))
            .collect();
        let mut groups = Vec::with_capacity(self.last_report.groups.len());
        for (key, dq) in &self.last_report.groups {
            let d = self.weights.destination(key);
            let target: BTreeMap<UplinkId, f64> = d
                .map(|d| d.target().into_iter().collect())
                .unwrap_or_default();
            let applied: BTreeMap<UplinkId, f64> = d
                .map(|d| d.applied().into_iter().collect())
                .unwrap_or_default();
            // What lqd would write now; `kernel` is what is written (issue 41: a change
            // that moves no bucket, or a held one, is not).
            let computed: BTreeMap<UplinkId, u32> = d
                .map(|d| {
                    weights::quantize(&d.applied(), self.controller.weight_resolution.max_weight())
                        .into_iter()
                        .collect()
                })
                .unwrap_or_default();
            let group = self.groups.get(key);
            let kernel: BTreeMap<UplinkId, u32> = group
                .map(|g| g.kernel.iter().copied().collect())
                .unwrap_or_default();
            let members = dq
                .members
                .iter()
                .map(|m| MemberWeights {
                    uplink: m.uplink,
                    interface: interfaces.get(&m.uplink).map(|i| (*i).clone()),
                    spine: std::net::Ipv4Addr::from(m.spine.node_id),
                    spine_as: m.spine.node_as,
                    local_quality: m.local,
                    remote_lqs: m.remote,
                    path_quality: m.quality,
                    gray_failure: m.gray_failure,
                    capacity_gbps: m.capacity.gbps,
                    capacity_source: m.capacity.source.as_str().to_string(),
                    target: target.get(&m.uplink).copied().unwrap_or(0.0),
                    applied: applied.get(&m.uplink).copied().unwrap_or(0.0),
                    computed_weight: computed.get(&m.uplink).copied().unwrap_or(0),
                    kernel_weight: kernel.get(&m.uplink).copied().unwrap_or(0),
                    nexthop_id: self.member_id(m.uplink),
                })
                .collect();
            groups.push(GroupWeights {
                label: key.label(),
                remote: key.remote_name(),
                prefixes: group
                    .map(|g| g.prefixes.iter().map(format_prefix).collect())
                    .unwrap_or_default(),
                eligible: key.eligible.clone(),
                quality_source: dq.source.as_str().to_string(),
                group_id: group.filter(|g| !g.kernel.is_empty()).map(|g| g.id),
                members,
            });
        }
        WeightsView {
            groups,
            group_replaces: self.group_replaces,
            step_timing: self.step_times.view(),
            member_deletes: self.member_deletes,
            gray_failure_prunes: self.gray_failure_prunes,
            group_errors: self.group_errors,
            bucket_neutral_replaces: self.bucket_neutral_replaces,
            bucket_neutral_skipped: self.bucket_neutral_skipped,
            group_computations: self.group_computations,
            group_computations_deferred: self.group_computations_deferred,
            control_steps: self.control_steps,
            path_rows_read: self.path_rows_read,
            path_rows_read_by_word: self.path_rows_read_by_word,
            ageing_sweeps: self.mirror.sweeps().0,
            ageing_sweeps_skipped: self.mirror.sweeps().1,
            neighbor_failures: self.neighbor_failures,
            buckets_moved: self.buckets_moved,
            holds_started: self.holds_started,
            replace_causes: self.replace_causes,
            groups_held: self.held.len() as u64,
            foreign_nexthop_writes: self.foreign_nexthop_writes,
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
                missed_datagrams: self.heartbeat.missed_datagrams(*k),
            })
            .collect();
        crate::views::snapshot::LoadBalancerSnapshot {
            weights: self.weights_view(),
            neighbors,
            paths: self.view_paths(),
            receiver_counters: self.counters().ok(),
            dead_interval_ns: self.controller.dead_interval_ns(),
            uplinks: self.uplinks_view(),
        }
    }

    /// The path table for the views: the known rows as the kernel holds them now (the
    /// control step's copy has refresh times up to a dead interval old for rows it had no
    /// reason to read again, which a view would show as aged), refresh times raised to the
    /// start as the step does.
    fn view_paths(
        &self,
    ) -> std::collections::BTreeMap<lq_common::maps::PathKey, lq_common::maps::PathValue> {
        let mut paths: std::collections::BTreeMap<_, _> = match self.reader.known_entries() {
            Some(fresh) => fresh.collect(),
            None => self.mirror.entries().iter().copied().collect(),
        };
        for v in paths.values_mut() {
            v.last_update_ns = v.last_update_ns.max(self.started_ns);
        }
        paths
    }

    /// The receiver's counters by name, summed over CPUs, and with `[receiver]
    /// authentication` the socket path's.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>, PathTableError> {
        let c = self.reader.counters()?;
        let mut v: Vec<(&'static str, u64)> = lq_common::maps::Counter::ALL
            .iter()
            .map(|k| (k.name(), c[*k as usize]))
            .collect();
        if let Some(a) = &self.auth {
            v.extend(a.counters.named());
        }
        Ok(v)
    }

    /// Whether `[receiver] authentication` needs the socket path (issue 39).
    pub fn authenticates(&self) -> bool {
        self.auth.is_some()
    }

    /// Reads and handles the datagrams waiting on an authentication socket
    /// (`sys::socket::open_auth_socket`): at most `auth::BATCH`; returns how many.
    pub fn receive_authenticated(&mut self, socket: &socket2::Socket) -> usize {
        let Some(a) = self.auth.as_mut() else {
            return 0;
        };
        a.on_readable(
            socket,
            &mut self.receiver,
            crate::sys::clock::unix_s_now(),
            monotonic_ns(),
        )
    }

    /// The `lq-authentication-failure` notifications the authenticating receiver raised
    /// since the last call (none without one).
    pub fn take_auth_notifications(&mut self) -> Vec<crate::core::auth::AuthFailure> {
        self.auth
            .as_mut()
            .map(auth::AuthReceiver::take_notifications)
            .unwrap_or_default()
    }

    /// Reads what waits on an authentication socket before a step, up to
    /// `auth::DRAIN_BEFORE_STEP` batches: the step judges each neighbor's liveness by its
    /// last datagram (seed 003 section 6.5's dead interval), and a datagram that arrived
    /// in time must not count as late because the loop was busy (a 512-group replace
    /// takes tens of milliseconds) while it sat in the socket's queue. On the XDP path the
    /// kernel writes the table as datagrams arrive; this gives the socket path the same.
    pub fn drain_authenticated(&mut self, socket: &socket2::Socket) {
        for _ in 0..auth::DRAIN_BEFORE_STEP {
            if self.receive_authenticated(socket) < auth::BATCH {
                break;
            }
        }
    }
}

/// `mapping` with the capacity of every uplink the configuration gives none
/// (`capacity-gbps`, `rate-mbit`): its driver's speed (section 4.1: a path's capacity is
/// bounded by its uplink's), else unknown (every such uplink counts the same).
fn with_link_capacities(mut mapping: NnhMapping, cfg: &Config) -> NnhMapping {
    use crate::core::controller::path_quality::{Capacity, CapacitySource};
    for u in &cfg.uplink {
        let Some(m) = mapping.uplinks.get_mut(&UplinkId::from(u.id)) else {
            continue;
        };
        if m.capacity.source != CapacitySource::Unknown {
            continue;
        }
        match crate::sys::netdev::interface_info(&u.interface) {
            Ok(i) if i.speed_mbps > 0 => {
                m.capacity = Capacity::new(f64::from(i.speed_mbps) / 1000.0, CapacitySource::Link)
                    .unwrap_or_default();
            }
            Ok(_) => {
                debug!(interface = %u.interface, "uplink reports no speed: its capacity is unknown (set capacity-gbps or rate-mbit)")
            }
            Err(e) => {
                debug!(interface = %u.interface, error = %e, "uplink speed not read: its capacity is unknown")
            }
        }
    }
    mapping
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

use crate::config::BUCKETS_PER_MEMBER_HINT;

/// Says at start when a resilient group's buckets are few for its members: a member's
/// traffic share then moves in steps of a whole bucket (1/buckets), finer weights change
/// nothing, and their replaces are counted as bucket-neutral.
fn warn_bucket_resolution(cfg: &Config, controller: &ControllerConfig) {
    let GroupKind::Resilient { buckets, .. } = controller.group else {
        return;
    };
    let members = cfg.uplink.len();
    if members > 0 && usize::from(buckets) < BUCKETS_PER_MEMBER_HINT * members {
        warn!(
            buckets,
            members,
            per_member = f64::from(buckets) / members as f64,
            "few resilient buckets for the members: a weight change finer than one bucket ({:.2} % of the traffic) moves no flow; consider [nexthop-group] buckets >= {}",
            100.0 / f64::from(buckets),
            BUCKETS_PER_MEMBER_HINT * members
        );
    }
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

/// Logs the members the opt-in gray-failure prune took out of a group or let back in since
/// the last report (`before`), one line each way per step with up to four examples, and
/// returns how many were taken out.
fn note_gray_failures(
    before: &BTreeMap<GroupKey, DestinationQuality>,
    now: &BTreeMap<GroupKey, DestinationQuality>,
) -> u64 {
    let (mut pruned, mut back) = (Vec::new(), Vec::new());
    for (key, dq) in now {
        let was = before.get(key);
        for m in &dq.members {
            let was_gray = was
                .and_then(|w| w.members.iter().find(|x| x.uplink == m.uplink))
                .is_some_and(|x| x.gray_failure);
            let what = || {
                format!(
                    "uplink {} (spine {}) to {}",
                    m.uplink,
                    std::net::Ipv4Addr::from(m.spine.node_id),
                    key.label()
                )
            };
            match (was_gray, m.gray_failure) {
                (false, true) => pruned.push(what()),
                (true, false) => back.push(what()),
                _ => {}
            }
        }
    }
    let examples = |v: &[String]| {
        let shown = v.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
        if v.len() > 4 {
            format!("{shown}, ...")
        } else {
            shown
        }
    };
    if !pruned.is_empty() {
        warn!(
            paths = pruned.len(),
            "gray failure: pruned {} (the spine reports loss, CL 7, on a link with most of its capacity available; [damping] gray-failure-prune)",
            examples(&pruned)
        );
    }
    if !back.is_empty() {
        info!(
            paths = back.len(),
            "gray failure over: {} back in the group (no loss reported, or the link's traffic is back above the threshold)",
            examples(&back)
        );
    }
    pruned.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_times_keep_the_last_steps_and_their_percentiles() {
        let mut t = StepTimes::default();
        assert_eq!(t.view().steps, 0);
        // 300 steps: the first 44 (work 1 ms) fall out of the window of 256.
        for i in 0..300u64 {
            let work = if i < 44 { 1_000_000 } else { 1_000 * (i - 43) };
            t.record(work, 2 * work);
        }
        let v = t.view();
        assert_eq!(v.steps, STEP_TIMES as u64);
        assert_eq!(v.work_us.max, 256.0);
        assert_eq!(v.work_us.p50, 128.0);
        assert_eq!(v.work_us.p99, 254.0);
        assert_eq!(v.replace_us.max, 512.0);
    }
}
