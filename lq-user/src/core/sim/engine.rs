//! The discrete-event engine of `lqd sim`.
//!
//! Events are ordered by (virtual time, phase, insertion). Within one instant:
//! 1. helpers wake: sample their links (A.2-A.6) and let the advertiser decide (7.2);
//! 2. datagrams due now are decoded by the reference receiver into the path tables (6.2);
//! 3. load-balancers whose table changed, whose heartbeat deadline passed, or whose next
//!    damped step is due run their controller (6.3-6.5), and print what changed;
//! 4. the optional `every_ms` dump.
//!
//! So an advertisement sent with zero delay is received and applied at the instant it was
//! sent (Appendix B.3 assumes the triggered advertisement of T=104 ms is applied at 104).
//!
//! Scale: a load-balancer recomputes only the destinations whose path entries changed
//! (process_payload reports a change only when an entry's LQS or CL changes or it is new),
//! or all of them after a heartbeat failure/recovery or a local quality change. For that it
//! calls the real [`compute`] with an NNH mapping restricted to those destinations and a
//! [`PathSnapshot`] of their entries only, which gives the same qualities as the full table
//! (compute reads `links(spine, remote)` of the mapped remotes only).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;

use lq_common::maps::{NeighborKey, NeighborValue, PathKey, PathValue, ReceiverConfig};
use lq_common::receive::{Counters, ReceiveTables, TableFull, Verdict, process_payload};
use lq_common::wire::Mode;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value};

use super::elastic::ElasticModel;
use super::scenario::{Feedback, Scenario, SeriesKind};
use super::{SimError, Summary, WatchStats};
use crate::core::controller::config::ControllerConfig;
use crate::core::controller::heartbeat::Heartbeat;
use crate::core::controller::path_quality::{
    Capacity, CapacitySource, GroupKey, LocalQuality, NnhMapping, PathSnapshot, Prefix, Uplink,
    UplinkId, compute, node,
};
use crate::core::controller::weights::{Application, WeightController, quantize};
use crate::core::helper::advertiser::{Advertiser, Identity, MonitoredLink, PathMtu, RemoteNode};
use crate::core::helper::pipeline::{LinkPipeline, LinkReport, Metrics, RawSample};

const PH_FLUID: u8 = 0;
const PH_WAKE: u8 = 1;
const PH_DELIVER: u8 = 2;
const PH_CONTROL: u8 = 3;
const PH_EVERY: u8 = 4;

/// Router-ID of node `i`: 10.0.0.0 + i + 1.
fn router_id(i: usize) -> u32 {
    0x0A00_0000 + i as u32 + 1
}

/// The prefix standing for destination node `i`: 10.hi.lo.0/24.
fn prefix_of(i: usize) -> Prefix {
    Prefix {
        addr: IpAddr::V4(Ipv4Addr::new(10, (i >> 8) as u8, i as u8, 0)),
        len: 24,
    }
}

/// The nexthop group of destination node `i` (one per remote node, seed 003 section 6.1).
fn group_of(i: usize) -> GroupKey {
    GroupKey::remote(node(0, router_id(i)))
}

/// The destination node a group stands for.
fn node_of_group(g: &GroupKey) -> usize {
    g.remote.map_or(usize::MAX, |r| {
        r.node_id.wrapping_sub(router_id(0)) as usize
    })
}

fn round4(x: f64) -> f64 {
    (x * 1.0e4).round() / 1.0e4
}

enum Kind {
    Wake(usize),
    Deliver {
        to: usize,
        from: usize,
        mode: Mode,
        datagrams: Rc<Vec<Vec<u8>>>,
    },
    Control(usize),
    Every,
    Fluid,
}

struct Event {
    key: (u64, u8, u64),
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

/// Where a link's raw metrics come from.
#[derive(Clone, Copy)]
enum Source {
    Idle,
    Series(usize, usize),
    Feedback(usize),
    /// A queue of the elastic model.
    Elastic(usize),
}

/// One sampled directed link.
struct SLink {
    remote: usize,
    capacity_gbps: f64,
    pipe: LinkPipeline,
    counters: RawSample,
    source: Source,
    cursor: usize,
    printed: Option<(u8, u8)>,
    /// `[elastic] sample_jitter`: where the counters put each sample's boundary.
    jitter: Option<CounterJitter>,
}

/// The elastic model's TX counter as a real interface shows it to a 2 ms sampler: the
/// octets of a sample are counted up to a boundary displaced by up to `span` x T_sample
/// from the nominal instant (packets leave a shaped veth in bursts: the qdisc's watchdog
/// and the softirq that runs it are late on a loaded host). Octets are conserved, but a
/// sample that reads more than the line rate is clamped to U = 1 by the pipeline (A.2),
/// so a saturated link reads U below 1 on average, as in the netns fabric (docs/sim.md).
struct CounterJitter {
    rng: SmallRng,
    span: f64,
    /// The model's own counter at the previous sample.
    previous_true: f64,
}

struct HelperState {
    /// Egress links to lower-tier neighbours; link id = index + 1.
    links: Vec<SLink>,
    advertiser: Advertiser<SmallRng>,
}

/// The in-memory path table of one receiver: a dense slot per (uplink helper, helper link)
/// as the topology predicts them, and a map for anything else.
struct SimTable {
    neighbors: HashMap<NeighborKey, NeighborValue>,
    /// Router-ID of an uplink helper -> (first slot, that helper's remote Router-IDs by
    /// link id - 1).
    spines: HashMap<u32, (usize, Rc<Vec<u32>>)>,
    slots: Vec<PathValue>,
    overflow: HashMap<PathKey, PathValue>,
    cache: Cell<Option<(u32, usize, usize)>>,
    /// Remote Router-IDs whose entry changed (LQS or CL) or appeared.
    changed: Vec<u32>,
}

const EMPTY_NS: u64 = u64::MAX;

impl SimTable {
    fn slot(&self, k: &PathKey) -> Option<usize> {
        if k.spine_as != 0 || k.remote_as != 0 || k.link_id == 0 {
            return None;
        }
        let (base, len) = match self.cache.get() {
            Some((id, b, l)) if id == k.spine_id => (b, l),
            _ => {
                let (b, remotes) = self.spines.get(&k.spine_id)?;
                self.cache.set(Some((k.spine_id, *b, remotes.len())));
                (*b, remotes.len())
            }
        };
        let i = k.link_id as usize - 1;
        if i >= len {
            return None;
        }
        let (_, remotes) = self.spines.get(&k.spine_id)?;
        (remotes[i] == k.remote_id).then_some(base + i)
    }
}

impl ReceiveTables for SimTable {
    fn neighbor(&self, key: &NeighborKey) -> Option<NeighborValue> {
        self.neighbors.get(key).copied()
    }

    fn set_neighbor(&mut self, key: NeighborKey, value: NeighborValue) -> Result<(), TableFull> {
        self.neighbors.insert(key, value);
        Ok(())
    }

    fn path(&self, key: &PathKey) -> Option<PathValue> {
        match self.slot(key) {
            Some(i) => Some(self.slots[i]).filter(|v| v.last_update_ns != EMPTY_NS),
            None => self.overflow.get(key).copied(),
        }
    }

    fn set_path(&mut self, key: PathKey, value: PathValue) -> Result<(), TableFull> {
        let old = match self.slot(&key) {
            Some(i) => {
                let old = Some(self.slots[i]).filter(|v| v.last_update_ns != EMPTY_NS);
                self.slots[i] = value;
                old
            }
            None => self.overflow.insert(key, value),
        };
        if old.is_none_or(|o| o.lqs != value.lqs || o.cl != value.cl) {
            self.changed.push(key.remote_id);
        }
        Ok(())
    }
}

struct LbState {
    /// Uplink helpers; uplink id = index + 1.
    uplinks: Vec<usize>,
    /// Local DLB pipelines of the uplinks that have a metrics series.
    local_links: Vec<(usize, SLink)>,
    mapping_uplinks: BTreeMap<UplinkId, Uplink>,
    /// Destination nodes, sorted.
    dests: Vec<usize>,
    dest_pos: HashMap<usize, usize>,
    table: SimTable,
    heartbeat: Heartbeat,
    weights: WeightController,
    local: LocalQuality,
    dirty: Vec<bool>,
    dirty_list: Vec<usize>,
    all_dirty: bool,
    /// Fingerprint of the last printed line per destination.
    printed: Vec<u64>,
    control_at: Option<u64>,
    counters: Counters,
}

struct NodeState {
    id: u32,
    helper: Option<HelperState>,
    lb: Option<LbState>,
    /// Next sample time, when the node samples anything.
    next_sample: Option<u64>,
}

/// The simulator.
pub struct Engine<'a> {
    sc: &'a Scenario,
    nodes: Vec<NodeState>,
    /// Directed (from, to) -> link index.
    link_of: HashMap<(usize, usize), usize>,
    /// (helper, remote) -> the helper's link id.
    helper_link: HashMap<(usize, usize), u32>,
    by_router: HashMap<u32, usize>,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    rng: SmallRng,
    rcfg: ReceiverConfig,
    t_sample: u64,
    summary: Summary,
    /// (node, destination) -> watch indices.
    watched: HashMap<(usize, usize), Vec<usize>>,
    /// Per watch: (t_ns, weight) at each application.
    watch_series: Vec<Vec<(u64, f64)>>,
    /// The elastic load model.
    elastic: Option<ElasticModel>,
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mk_link(
    sc: &Scenario,
    from: usize,
    remote: usize,
    capacity_gbps: f64,
    link_id: u32,
    feedback_of: &HashMap<(usize, usize), usize>,
) -> SLink {
    let source = if let Some(&f) = feedback_of.get(&(from, remote)) {
        Source::Feedback(f)
    } else if sc.metrics.contains_key(&(from, remote)) {
        Source::Series(from, remote)
    } else {
        Source::Idle
    };
    SLink {
        remote,
        capacity_gbps,
        pipe: LinkPipeline::new(link_id, &sc.params.helper),
        counters: RawSample {
            t_ns: 0,
            max_buffer_bytes: sc.params.max_buffer_bytes,
            link_speed_bps: (capacity_gbps * 1.0e9).round() as u64,
            oper_up: true,
            ..RawSample::default()
        },
        source,
        cursor: 0,
        printed: None,
        jitter: None,
    }
}

impl<'a> Engine<'a> {
    /// Builds every node's state.
    pub fn new(sc: &'a Scenario) -> Result<Self, SimError> {
        let n = sc.nodes.len();
        let topo = Topology::of(sc);
        let feedback_of = topo.feedback_sinks(sc);
        // Helpers first (a node with links to a lower tier), then the load-balancers (a
        // node with uplinks to helpers), which need each helper's link ids and remotes.
        let mut helper_link = HashMap::new();
        let mut remotes_of: Vec<Rc<Vec<u32>>> = Vec::with_capacity(n);
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let helper = match topo.helper_of(sc, i, &feedback_of)? {
                None => {
                    remotes_of.push(Rc::new(Vec::new()));
                    None
                }
                Some(h) => {
                    remotes_of.push(h.remotes);
                    helper_link.extend(h.link_ids);
                    Some(h.state)
                }
            };
            nodes.push(NodeState {
                id: router_id(i),
                helper,
                lb: None,
                next_sample: None,
            });
        }
        let cfg: ControllerConfig = sc.params.controller;
        for i in 0..n {
            nodes[i].lb = topo.load_balancer_of(sc, i, &nodes, &remotes_of, cfg)?;
        }
        for nd in &mut nodes {
            let samples =
                nd.helper.is_some() || nd.lb.as_ref().is_some_and(|l| !l.local_links.is_empty());
            if samples {
                nd.next_sample = Some(0);
            }
        }
        let mut watched: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        for (w, spec) in sc.watches.iter().enumerate() {
            watched
                .entry((spec.node, spec.destination))
                .or_default()
                .push(w);
        }
        let rcfg = ReceiverConfig {
            dead_interval_ns: cfg.dead_interval_ns(),
            ..ReceiverConfig::default()
        };
        let elastic = elastic_model(sc, &nodes, &topo.link_of)?;
        if let Some(m) = &elastic {
            attach_elastic_queues(sc, m, &mut nodes);
        }
        let mut e = Self {
            elastic,
            sc,
            by_router: (0..n).map(|i| (router_id(i), i)).collect(),
            nodes,
            link_of: topo.link_of,
            helper_link,
            heap: BinaryHeap::new(),
            seq: 0,
            rng: SmallRng::seed_from_u64(sc.seed ^ 0x5151_5eed),
            rcfg,
            t_sample: sc.params.helper.t_sample_ns().max(1),
            summary: Summary {
                scenario: sc.name.clone(),
                variant: sc.variant.clone(),
                nodes: n,
                links: sc.links.len(),
                ..Summary::default()
            },
            watch_series: vec![Vec::new(); sc.watches.len()],
            watched,
        };
        for i in 0..n {
            if e.nodes[i].next_sample.is_some() {
                e.push(0, PH_WAKE, Kind::Wake(i));
            }
        }
        if let Some(every) = sc.every_ns {
            e.push(every, PH_EVERY, Kind::Every);
        }
        if e.elastic.is_some() {
            e.push(0, PH_FLUID, Kind::Fluid);
        }
        Ok(e)
    }

    fn push(&mut self, t: u64, phase: u8, kind: Kind) {
        self.seq += 1;
        self.heap.push(Reverse(Event {
            key: (t, phase, self.seq),
            kind,
        }));
    }

    fn schedule_control(&mut self, i: usize, t: u64) {
        let Some(lb) = self.nodes[i].lb.as_mut() else {
            return;
        };
        if lb.control_at.is_some_and(|c| c <= t) {
            return;
        }
        lb.control_at = Some(t);
        self.push(t, PH_CONTROL, Kind::Control(i));
    }

    /// Runs to the end of the scenario.
    pub fn run(mut self, out: &mut dyn Write) -> Result<Summary, SimError> {
        let mut w = BufWriter::with_capacity(1 << 16, out);
        let end = self.sc.duration_ns;
        while let Some(Reverse(ev)) = self.heap.pop() {
            let t = ev.key.0;
            if t > end {
                break;
            }
            match ev.kind {
                Kind::Wake(i) => self.wake(i, t, &mut w)?,
                Kind::Deliver {
                    to,
                    from,
                    mode,
                    datagrams,
                } => self.deliver(to, from, mode, &datagrams, t),
                Kind::Control(i) => self.control(i, t, &mut w)?,
                Kind::Fluid => {
                    self.fluid(t);
                    if let Some(dt) = self.sc.elastic.as_ref().map(|e| e.dt_ns) {
                        self.push(t + dt, PH_FLUID, Kind::Fluid);
                    }
                }
                Kind::Every => {
                    self.dump(t, &mut w)?;
                    if let Some(e) = self.sc.every_ns {
                        self.push(t + e, PH_EVERY, Kind::Every);
                    }
                }
            }
        }
        w.flush()?;
        drop(w);
        self.summary.end_ms = end as f64 / 1e6;
        self.summary.watches = self.watch_stats();
        self.summary.elastic = self.elastic.as_ref().map(|m| m.stats());
        Ok(self.summary)
    }

    /// Raw metrics of a sampled link for the interval starting at `t0`.
    fn raw_metrics(&self, from: usize, l: &mut SLink, t0: u64) -> (Metrics, bool) {
        let p = &self.sc.params.helper;
        match l.source {
            Source::Idle => (Metrics::default(), false),
            Source::Series(a, b) => {
                let segs = &self.sc.metrics[&(a, b)].segments;
                while l.cursor + 1 < segs.len()
                    && (segs[l.cursor + 1].1.at_ms * 1e6).round() as u64 <= t0
                {
                    l.cursor += 1;
                }
                let (kind, s) = segs[l.cursor];
                if (s.at_ms * 1e6).round() as u64 > t0 {
                    // Before the first segment: idle.
                    return (Metrics::default(), false);
                }
                let target = Metrics {
                    u: s.u,
                    e: s.e,
                    f: s.f,
                    d: s.d,
                };
                match kind {
                    SeriesKind::Raw => (target, s.x),
                    SeriesKind::Smoothed => {
                        // Invert A.3 against the pipeline's current smoothed values.
                        let prev = l.pipe.report().filter(|r| r.oper_up).map(|r| r.smooth);
                        let inv = |target: f64, prev: Option<f64>| match prev {
                            None => target,
                            Some(prev) => {
                                let a = if target > prev {
                                    p.alpha_rise
                                } else {
                                    p.alpha_fall
                                };
                                ((target - (1.0 - a) * prev) / a).clamp(0.0, 1.0)
                            }
                        };
                        (
                            Metrics {
                                u: inv(target.u, prev.map(|m| m.u)),
                                e: inv(target.e, prev.map(|m| m.e)),
                                f: inv(target.f, prev.map(|m| m.f)),
                                d: inv(target.d, prev.map(|m| m.d)),
                            },
                            s.x,
                        )
                    }
                }
            }
            Source::Elastic(_) => (Metrics::default(), false),
            Source::Feedback(fi) => {
                let f: &Feedback = &self.sc.feedback[fi];
                let mut gbps: f64 = f
                    .background
                    .iter()
                    .filter(|b| b.via == from && b.at_ns <= t0)
                    .map(|b| b.gbps)
                    .sum();
                for &src in &f.sources {
                    gbps += f.offered_gbps * self.applied_share(src, f.destination, from);
                }
                let o = gbps / l.capacity_gbps;
                let above = ((o - f.knee) / (1.0 - f.knee)).max(0.0);
                (
                    Metrics {
                        u: o.min(1.0),
                        e: (f.ecn_gain * above).clamp(0.0, 1.0),
                        f: 0.0,
                        d: (f.queue_gain * above).clamp(0.0, 1.0),
                    },
                    false,
                )
            }
        }
    }

    /// One step of the elastic model: capacity steps, the groups' kernel weights from the
    /// load-balancers' applied fractions (quantised as they are programmed), the flows.
    fn fluid(&mut self, t: u64) {
        let Some(mut m) = self.elastic.take() else {
            return;
        };
        for (from, to, gbps) in m.capacity_steps(t) {
            if let Some(h) = self.nodes[from].helper.as_mut()
                && let Some(l) = h.links.iter_mut().find(|l| l.remote == to)
            {
                l.capacity_gbps = gbps;
                l.counters.link_speed_bps = (gbps * 1e9).round() as u64;
                if let Source::Elastic(q) = l.source {
                    l.counters.max_buffer_bytes = m.queues[q].buffer_bytes.round() as u64;
                }
            }
        }
        let max_w = self.sc.params.controller.weight_resolution.max_weight();
        for (s, d) in m.group_pairs() {
            let lq = self.nodes[s].lb.as_ref().and_then(|lb| {
                let dw = lb.weights.destination(&group_of(d))?;
                let k = quantize(&dw.applied(), max_w);
                let mut w = vec![0u32; lb.uplinks.len()];
                for (id, x) in k {
                    if let Some(slot) = w.get_mut(id as usize - 1) {
                        *slot = x;
                    }
                }
                Some(w)
            });
            m.set_weights(s, d, lq, t);
        }
        m.step(t);
        self.elastic = Some(m);
    }

    /// The fraction of `src`'s traffic to `dest` it currently sends through `helper`.
    fn applied_share(&self, src: usize, dest: usize, helper: usize) -> f64 {
        let Some(lb) = self.nodes[src].lb.as_ref() else {
            return 0.0;
        };
        let Some(k) = lb.uplinks.iter().position(|&h| h == helper) else {
            return 0.0;
        };
        match lb.weights.destination(&group_of(dest)) {
            Some(d) => d
                .applied()
                .iter()
                .find(|(id, _)| *id == k as UplinkId + 1)
                .map_or(0.0, |x| x.1),
            None => 1.0 / lb.uplinks.len() as f64,
        }
    }

    /// Advances a link's counters by one interval ending at `t` and runs its pipeline.
    fn sample_link(&self, from: usize, l: &mut SLink, t: u64) {
        if let (Source::Elastic(q), Some(m)) = (l.source, self.elastic.as_ref()) {
            // The model's own counters: what the real sampler reads from the interface
            // and the qdisc (A.2).
            let q = &m.queues[q];
            let c = &mut l.counters;
            let tx = match l.jitter.as_mut() {
                None => q.tx_bytes,
                Some(j) => {
                    // The boundary moves by `shift` x the last interval's octets (the rate
                    // then); never below what was already counted.
                    let shift = j.rng.random_range(-j.span..=j.span);
                    let per_interval = q.tx_bytes - j.previous_true;
                    j.previous_true = q.tx_bytes;
                    (q.tx_bytes + shift * per_interval).max(c.tx_bytes as f64)
                }
            };
            c.tx_bytes = tx.round() as u64;
            c.queue_depth_bytes = q.backlog.round() as u64;
            c.drops = q.drops;
            c.t_ns = t;
            l.pipe.on_sample(&l.counters);
            return;
        }
        if t > 0 {
            let t0 = t - self.t_sample;
            let (m, x) = self.raw_metrics(from, l, t0);
            let dt = self.t_sample as f64;
            let c = &mut l.counters;
            // A.2 in reverse: octets for U, packets for E (1e6 ECT packets a sample keeps
            // the ratio exact to 1e-6), pause time for F, the queue gauge for D.
            c.tx_bytes += (m.u * c.link_speed_bps as f64 / 8.0 * dt / 1e9).round() as u64;
            c.ecn_eligible += 1_000_000;
            c.ecn_marked += (m.e * 1e6).round() as u64;
            c.pause_ns += (m.f * dt).round() as u64;
            c.queue_depth_bytes = (m.d * c.max_buffer_bytes as f64).round() as u64;
            c.drops += u64::from(x);
        }
        l.counters.t_ns = t;
        l.pipe.on_sample(&l.counters);
    }

    fn wake(&mut self, i: usize, t: u64, w: &mut dyn Write) -> Result<(), SimError> {
        let mut reports = Vec::new();
        let sampling = self.nodes[i].next_sample == Some(t);
        if sampling {
            let mut helper = self.nodes[i].helper.take();
            if let Some(h) = helper.as_mut() {
                for l in &mut h.links {
                    self.sample_link(i, l, t);
                    self.summary.samples += 1;
                    if let Some(r) = l.pipe.report() {
                        reports.push(*r);
                        if l.printed != Some((r.lqs, r.cl)) {
                            l.printed = Some((r.lqs, r.cl));
                            self.helper_line(w, t, i, l.remote, r)?;
                        }
                    }
                }
            }
            self.nodes[i].helper = helper;
            let mut lb = self.nodes[i].lb.take();
            let mut local_changed = false;
            if let Some(lb) = lb.as_mut() {
                for (k, l) in &mut lb.local_links {
                    self.sample_link(i, l, t);
                    self.summary.samples += 1;
                    if let Some(r) = l.pipe.report() {
                        let uid = *k as UplinkId + 1;
                        if lb.local.get(uid) != r.lqs {
                            lb.local.set(uid, r.lqs);
                            local_changed = true;
                        }
                    }
                }
                if local_changed {
                    lb.all_dirty = true;
                }
            }
            self.nodes[i].lb = lb;
            if local_changed {
                self.schedule_control(i, t);
            }
            self.nodes[i].next_sample = Some(t + self.t_sample);
        }
        let mut out = None;
        let mut next_due = None;
        if let Some(h) = self.nodes[i].helper.as_mut() {
            out = h.advertiser.on_sample(t, &reports);
            next_due = h.advertiser.next_due_at();
        }
        if let Some(o) = out {
            match o.mode {
                Mode::Periodic => self.summary.periodic += 1,
                Mode::Triggered => self.summary.triggered += 1,
            }
            let datagrams = Rc::new(o.datagrams);
            let n = self.nodes[i].helper.as_ref().map_or(0, |h| h.links.len());
            for k in 0..n {
                let to = self.nodes[i]
                    .helper
                    .as_ref()
                    .map_or(0, |h| h.links[k].remote);
                let link = &self.sc.links[self.link_of[&(i, to)]];
                if self.nodes[to].lb.is_none() {
                    continue;
                }
                let payload = if link.loss > 0.0 {
                    let mut kept = Vec::new();
                    for d in datagrams.iter() {
                        if self.rng.random::<f64>() < link.loss {
                            self.summary.datagrams_lost += 1;
                        } else {
                            kept.push(d.clone());
                        }
                    }
                    if kept.is_empty() {
                        continue;
                    }
                    Rc::new(kept)
                } else {
                    datagrams.clone()
                };
                self.push(
                    t + link.delay_ns,
                    PH_DELIVER,
                    Kind::Deliver {
                        to,
                        from: i,
                        mode: o.mode,
                        datagrams: payload,
                    },
                );
            }
        }
        let next = [self.nodes[i].next_sample, next_due]
            .into_iter()
            .flatten()
            .filter(|&x| x > t)
            .min();
        if let Some(x) = next {
            self.push(x, PH_WAKE, Kind::Wake(i));
        }
        Ok(())
    }

    fn deliver(&mut self, to: usize, from: usize, mode: Mode, datagrams: &[Vec<u8>], t: u64) {
        let rcfg = self.rcfg;
        let from_id = self.nodes[from].id;
        let Some(lb) = self.nodes[to].lb.as_mut() else {
            return;
        };
        let mut forwarding = false;
        for d in datagrams {
            self.summary.datagrams_delivered += 1;
            match process_payload(d, &rcfg, t, &mut lb.table, &mut lb.counters) {
                Verdict::Accept { .. } => {
                    self.summary.datagrams_accepted += 1;
                    for e in lb.heartbeat.on_datagram(node(0, from_id), mode, t) {
                        forwarding |= e.affects_forwarding();
                    }
                }
                _ => self.summary.datagrams_discarded += 1,
            }
        }
        let mut any = forwarding;
        if forwarding {
            lb.all_dirty = true;
        }
        let changed = std::mem::take(&mut lb.table.changed);
        for rid in changed {
            if let Some(&r) = self.by_router.get(&rid)
                && let Some(&p) = lb.dest_pos.get(&r)
                && !lb.dirty[p]
            {
                lb.dirty[p] = true;
                lb.dirty_list.push(p);
                any = true;
            }
        }
        if any {
            self.schedule_control(to, t);
        }
    }

    fn control(&mut self, i: usize, t: u64, w: &mut dyn Write) -> Result<(), SimError> {
        let Some(mut lb) = self.nodes[i].lb.take() else {
            return Ok(());
        };
        if lb.control_at != Some(t) {
            self.nodes[i].lb = Some(lb);
            return Ok(());
        }
        lb.control_at = None;
        let cfg = self.sc.params.controller;
        // 6.5: silent neighbours fail; their entries count as LQS 0.
        for e in lb.heartbeat.tick(t) {
            if e.affects_forwarding() {
                lb.all_dirty = true;
            }
            if matches!(
                e,
                crate::core::controller::heartbeat::HeartbeatEvent::NeighborFailed { .. }
            ) {
                self.summary.neighbor_failures += 1;
            }
        }
        let dirty: Vec<usize> = if lb.all_dirty {
            (0..lb.dests.len()).collect()
        } else {
            let mut d = std::mem::take(&mut lb.dirty_list);
            d.sort_unstable();
            d
        };
        lb.all_dirty = false;
        lb.dirty_list.clear();
        lb.dirty.iter_mut().for_each(|x| *x = false);
        let mut touched: Vec<(usize, Application)> = Vec::new();
        if !dirty.is_empty() {
            let failed = lb.heartbeat.failed_neighbors();
            let mut entries = Vec::new();
            let mut destinations = BTreeMap::new();
            for &p in &dirty {
                let r = lb.dests[p];
                let rid = router_id(r);
                destinations.insert(prefix_of(r), Some(node(0, rid)));
                for &h in &lb.uplinks {
                    if let Some(&link_id) = self.helper_link.get(&(h, r)) {
                        let key = PathKey {
                            spine_as: 0,
                            spine_id: router_id(h),
                            remote_as: 0,
                            remote_id: rid,
                            link_id,
                        };
                        if let Some(v) = lb.table.path(&key) {
                            entries.push((key, v));
                        }
                    }
                }
            }
            let snapshot = PathSnapshot::from_entries(entries, t, cfg.dead_interval_ns(), &failed);
            let mut mapping = NnhMapping {
                uplinks: lb.mapping_uplinks.clone(),
                destinations,
                ..NnhMapping::default()
            };
            if self.sc.params.slow_plane_capacity {
                for &p in &dirty {
                    let r = lb.dests[p];
                    for (k, &h) in lb.uplinks.iter().enumerate() {
                        let Some(cap) = self.nodes[h]
                            .helper
                            .as_ref()
                            .and_then(|hs| hs.links.iter().find(|l| l.remote == r))
                            .and_then(|l| Capacity::new(l.capacity_gbps, CapacitySource::Bgp))
                        else {
                            continue;
                        };
                        mapping
                            .remote_capacity
                            .insert((node(0, router_id(r)), k as UplinkId + 1), cap);
                    }
                }
            }
            let report = compute(&cfg, &mapping, &lb.local, &snapshot);
            for (group, dq) in &report.groups {
                let p = lb.dest_pos[&node_of_group(group)];
                let signals = report.signals.get(group).map_or(&[][..], Vec::as_slice);
                if let Some(a) = lb
                    .weights
                    .update_one_with(group.clone(), &dq.members, signals, t)
                {
                    touched.push((p, a));
                } else {
                    // The target changed but the step waits for T_reweight (6.4): the
                    // target is still worth a line.
                    self.lb_line(w, &mut lb, i, p, t)?;
                }
            }
        }
        for (group, a) in lb.weights.tick(t) {
            touched.push((lb.dest_pos[&node_of_group(&group)], a));
        }
        for (p, a) in touched {
            self.summary.applications += 1;
            if let Some(ws) = self.watched.get(&(i, lb.dests[p])) {
                for &wi in ws {
                    let hop = self.sc.watches[wi].next_hop;
                    if let Some(k) = lb.uplinks.iter().position(|&h| h == hop) {
                        let f = a
                            .fractions()
                            .iter()
                            .find(|(id, _)| *id == k as UplinkId + 1)
                            .map_or(0.0, |x| x.1);
                        self.watch_series[wi].push((t, f));
                    }
                }
            }
            self.lb_line(w, &mut lb, i, p, t)?;
        }
        let next = [lb.weights.next_due(t), lb.heartbeat.next_deadline()]
            .into_iter()
            .flatten()
            .min()
            .map(|x| x.max(t + 1));
        self.nodes[i].lb = Some(lb);
        if let Some(x) = next {
            self.schedule_control(i, x);
        }
        Ok(())
    }

    fn helper_line(
        &mut self,
        w: &mut dyn Write,
        t: u64,
        i: usize,
        remote: usize,
        r: &LinkReport,
    ) -> Result<(), SimError> {
        let four = |x: f64| (x * 1e4).round() / 1e4;
        let mut m = Map::new();
        m.insert("t-ms".into(), Value::from(t as f64 / 1e6));
        m.insert("node".into(), Value::from(self.sc.nodes[i].name.as_str()));
        m.insert(
            "link".into(),
            Value::from(self.sc.nodes[remote].name.as_str()),
        );
        m.insert("lqs".into(), Value::from(r.lqs));
        m.insert("cl".into(), Value::from(r.cl));
        // The smoothed U and D, the raw U and drop flag behind them (what the calibration
        // against the netns demo compares, docs/sim.md).
        m.insert("u".into(), Value::from(four(r.smooth.u)));
        m.insert("d".into(), Value::from(four(r.smooth.d)));
        m.insert("raw-u".into(), Value::from(four(r.raw.m.u)));
        m.insert("x".into(), Value::from(r.raw.x));
        serde_json::to_writer(&mut *w, &Value::Object(m)).map_err(std::io::Error::from)?;
        w.write_all(b"\n")?;
        self.summary.lines += 1;
        Ok(())
    }

    /// Prints destination `p` of load-balancer `i` if its rounded targets or weights
    /// changed since the last line (`force`: print anyway).
    fn lb_line_inner(
        &mut self,
        w: &mut dyn Write,
        lb: &mut LbState,
        i: usize,
        p: usize,
        t: u64,
        force: bool,
    ) -> Result<(), SimError> {
        let Some(d) = lb.weights.destination(&group_of(lb.dests[p])) else {
            return Ok(());
        };
        let (targets, applied) = (d.target(), d.applied());
        let name = |id: UplinkId| self.sc.nodes[lb.uplinks[id as usize - 1]].name.as_str();
        let mut fp: u64 = 0xcbf2_9ce4_8422_2325;
        for (id, x) in targets.iter().chain(applied.iter()) {
            let q = (x * 1e4).round() as i64 as u64;
            fp = (fp ^ u64::from(*id)).wrapping_mul(0x0100_0000_01b3);
            fp = (fp ^ q).wrapping_mul(0x0100_0000_01b3);
        }
        fp |= 1;
        if !force && lb.printed[p] == fp {
            return Ok(());
        }
        lb.printed[p] = fp;
        let mut tm = Map::new();
        for (id, x) in &targets {
            tm.insert(name(*id).into(), Value::from(round4(*x)));
        }
        let mut wm = Map::new();
        for (id, x) in &applied {
            wm.insert(name(*id).into(), Value::from(round4(*x)));
        }
        let mut m = Map::new();
        m.insert("t-ms".into(), Value::from(t as f64 / 1e6));
        m.insert("node".into(), Value::from(self.sc.nodes[i].name.as_str()));
        m.insert(
            "destination".into(),
            Value::from(self.sc.nodes[lb.dests[p]].name.as_str()),
        );
        m.insert("targets".into(), Value::Object(tm));
        m.insert("weights".into(), Value::Object(wm));
        serde_json::to_writer(&mut *w, &Value::Object(m)).map_err(std::io::Error::from)?;
        w.write_all(b"\n")?;
        self.summary.lines += 1;
        Ok(())
    }

    fn lb_line(
        &mut self,
        w: &mut dyn Write,
        lb: &mut LbState,
        i: usize,
        p: usize,
        t: u64,
    ) -> Result<(), SimError> {
        self.lb_line_inner(w, lb, i, p, t, false)
    }

    /// The `every_ms` dump: every helper link and every destination.
    fn dump(&mut self, t: u64, w: &mut dyn Write) -> Result<(), SimError> {
        for i in 0..self.nodes.len() {
            let lines: Vec<(usize, LinkReport)> = self.nodes[i]
                .helper
                .as_ref()
                .map(|h| {
                    h.links
                        .iter()
                        .filter_map(|l| l.pipe.report().map(|r| (l.remote, *r)))
                        .collect()
                })
                .unwrap_or_default();
            for (remote, r) in lines {
                self.helper_line(w, t, i, remote, &r)?;
            }
            if let Some(mut lb) = self.nodes[i].lb.take() {
                for p in 0..lb.dests.len() {
                    self.lb_line_inner(w, &mut lb, i, p, t, true)?;
                }
                self.nodes[i].lb = Some(lb);
            }
        }
        Ok(())
    }

    fn watch_stats(&self) -> Vec<WatchStats> {
        let sc = self.sc;
        sc.watches
            .iter()
            .zip(&self.watch_series)
            .map(|(spec, series)| {
                let from_ns = (spec.from_ms * 1e6).round() as u64;
                // The weight in force at the window start, then every application after.
                let before = series.iter().rev().find(|(t, _)| *t < from_ns).map(|x| x.1);
                let mut vals: Vec<(u64, f64)> = before.map(|v| (from_ns, v)).into_iter().collect();
                vals.extend(series.iter().copied().filter(|(t, _)| *t >= from_ns));
                let final_weight = vals.last().map_or(0.0, |x| x.1);
                let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                for &(_, v) in &vals {
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
                // A reversal is a move of more than `tolerance` against the current
                // direction, measured from the last extreme: LQS quantisation makes tiny
                // wiggles that are not oscillation.
                let mut reversals = 0;
                let mut changes = 0;
                let mut dir = 0i8;
                let mut extreme = vals.first().map_or(0.0, |x| x.1);
                for win in vals.windows(2) {
                    if (win[1].1 - win[0].1).abs() >= 1e-9 {
                        changes += 1;
                    }
                    let v = win[1].1;
                    match dir {
                        1 if v > extreme => extreme = v,
                        -1 if v < extreme => extreme = v,
                        _ => {}
                    }
                    let dv = v - extreme;
                    if dv.abs() > spec.tolerance && (dir == 0 || (dv > 0.0) != (dir > 0)) {
                        if dir != 0 {
                            reversals += 1;
                        }
                        dir = if dv > 0.0 { 1 } else { -1 };
                        extreme = v;
                    }
                }
                let last_out = vals
                    .iter()
                    .rposition(|(_, v)| (v - final_weight).abs() > spec.tolerance);
                let settling_time_ms = match last_out {
                    None => 0.0,
                    Some(k) => (vals[k + 1].0.saturating_sub(from_ns)) as f64 / 1e6,
                };
                WatchStats {
                    node: sc.nodes[spec.node].name.clone(),
                    destination: sc.nodes[spec.destination].name.clone(),
                    next_hop: sc.nodes[spec.next_hop].name.clone(),
                    changes,
                    reversals,
                    peak_to_peak: if vals.is_empty() { 0.0 } else { hi - lo },
                    settling_time_ms,
                    final_weight,
                }
            })
            .collect()
    }
}

/// The scenario's links as adjacency: what the engine's set-up derives the roles from.
struct Topology {
    /// Each node's neighbours, in link order.
    neigh: Vec<Vec<usize>>,
    /// (from, to) -> link index, both ways.
    link_of: HashMap<(usize, usize), usize>,
}

/// A node's helper role as [`Topology::helper_of`] sets it up.
struct HelperSetup {
    state: HelperState,
    /// The router ids of its remote nodes, in link id order.
    remotes: Rc<Vec<u32>>,
    /// (node, remote) -> link id.
    link_ids: Vec<((usize, usize), u32)>,
}

impl Topology {
    fn of(sc: &Scenario) -> Self {
        let mut neigh: Vec<Vec<usize>> = vec![Vec::new(); sc.nodes.len()];
        let mut link_of = HashMap::new();
        for (i, l) in sc.links.iter().enumerate() {
            neigh[l.a].push(l.b);
            neigh[l.b].push(l.a);
            link_of.insert((l.a, l.b), i);
            link_of.insert((l.b, l.a), i);
        }
        Self { neigh, link_of }
    }

    /// The `[[feedback]]` block each (helper, destination) link carries: every helper above
    /// one of its sources that links to its destination.
    fn feedback_sinks(&self, sc: &Scenario) -> HashMap<(usize, usize), usize> {
        let tier = |i: usize| sc.nodes[i].tier;
        let mut feedback_of = HashMap::new();
        for (fi, f) in sc.feedback.iter().enumerate() {
            for &src in &f.sources {
                for &h in &self.neigh[src] {
                    if tier(h) > tier(src) && self.link_of.contains_key(&(h, f.destination)) {
                        feedback_of.insert((h, f.destination), fi);
                    }
                }
            }
        }
        feedback_of
    }

    /// Node `i`'s helper role when it links to a lower tier (seed 003 Appendix A per egress
    /// link; link ids from 1 in node order).
    fn helper_of(
        &self,
        sc: &Scenario,
        i: usize,
        feedback_of: &HashMap<(usize, usize), usize>,
    ) -> Result<Option<HelperSetup>, SimError> {
        let tier = |i: usize| sc.nodes[i].tier;
        let name = &sc.nodes[i].name;
        let mut down: Vec<usize> = self.neigh[i]
            .iter()
            .copied()
            .filter(|&r| tier(r) < tier(i))
            .collect();
        if down.is_empty() {
            return Ok(None);
        }
        down.sort_unstable();
        let mut links = Vec::with_capacity(down.len());
        let mut monitored = Vec::with_capacity(down.len());
        let mut link_ids = Vec::with_capacity(down.len());
        for (k, &r) in down.iter().enumerate() {
            let link_id = k as u32 + 1;
            link_ids.push(((i, r), link_id));
            let cap = sc.links[self.link_of[&(i, r)]].capacity_gbps;
            links.push(mk_link(sc, i, r, cap, link_id, feedback_of));
            monitored.push(MonitoredLink {
                link_id,
                remotes: vec![RemoteNode {
                    node_id: router_id(r),
                    node_as: 0,
                }],
            });
        }
        let h = fnv(name) ^ sc.seed.rotate_left(17);
        let advertiser = Advertiser::new(
            sc.params.helper,
            Identity {
                node_id: router_id(i),
                node_as: None,
                pfc_fabric: false,
            },
            monitored,
            PathMtu::default(),
            (h >> 48) as u16,
            SmallRng::seed_from_u64(h),
        )
        .map_err(|e| SimError::Setup {
            node: name.clone(),
            message: e.to_string(),
        })?;
        Ok(Some(HelperSetup {
            state: HelperState { links, advertiser },
            remotes: Rc::new(down.iter().map(|&r| router_id(r)).collect()),
            link_ids,
        }))
    }

    /// Node `i`'s load-balancer role when it has uplinks to helpers (uplink ids from 1 in
    /// node order): its destinations are the other nodes of its tier its helpers reach, its
    /// path table has a slot per (helper, remote) pair, and an uplink with a metrics series
    /// has a local-quality pipeline of its own (6.3 local_quality; else an up link, 255).
    fn load_balancer_of(
        &self,
        sc: &Scenario,
        i: usize,
        nodes: &[NodeState],
        remotes_of: &[Rc<Vec<u32>>],
        cfg: ControllerConfig,
    ) -> Result<Option<LbState>, SimError> {
        let tier = |i: usize| sc.nodes[i].tier;
        let mut up: Vec<usize> = self.neigh[i]
            .iter()
            .copied()
            .filter(|&h| tier(h) > tier(i) && nodes[h].helper.is_some())
            .collect();
        if up.is_empty() {
            return Ok(None);
        }
        up.sort_unstable();
        let mut dests: Vec<usize> = up
            .iter()
            .flat_map(|&h| self.neigh[h].iter().copied())
            .filter(|&r| r != i && tier(r) == tier(i))
            .collect();
        dests.sort_unstable();
        dests.dedup();
        let mut mapping_uplinks = BTreeMap::new();
        let mut spines = HashMap::new();
        let mut slots = 0usize;
        let mut local = LocalQuality::default();
        let mut local_links = Vec::new();
        for (k, &h) in up.iter().enumerate() {
            let uid = k as UplinkId + 1;
            let cap = sc.links[self.link_of[&(i, h)]].capacity_gbps;
            mapping_uplinks.insert(
                uid,
                Uplink {
                    spine: node(0, router_id(h)),
                    capacity: Capacity::new(cap, CapacitySource::Link).unwrap_or_default(),
                },
            );
            spines.insert(router_id(h), (slots, remotes_of[h].clone()));
            slots += remotes_of[h].len();
            local.set_up(uid, true);
            if sc.metrics.contains_key(&(i, h)) {
                local_links.push((k, mk_link(sc, i, h, cap, uid, &HashMap::new())));
            }
        }
        let weights = WeightController::new(cfg).map_err(|e| SimError::Setup {
            node: sc.nodes[i].name.clone(),
            message: e.to_string(),
        })?;
        let nd = dests.len();
        Ok(Some(LbState {
            uplinks: up,
            local_links,
            mapping_uplinks,
            dest_pos: dests.iter().enumerate().map(|(p, &d)| (d, p)).collect(),
            dests,
            table: SimTable {
                neighbors: HashMap::new(),
                spines,
                slots: vec![
                    PathValue {
                        last_update_ns: EMPTY_NS,
                        ..PathValue::default()
                    };
                    slots
                ],
                overflow: HashMap::new(),
                cache: Cell::new(None),
                changed: Vec::new(),
            },
            heartbeat: Heartbeat::new(&cfg),
            weights,
            local,
            dirty: vec![false; nd],
            dirty_list: Vec::new(),
            all_dirty: false,
            printed: vec![0; nd],
            control_at: None,
            counters: [0; lq_common::maps::COUNTER_COUNT as usize],
        }))
    }
}

/// The `[elastic]` model over the load-balancers' uplinks; an error when one of its sources
/// is no load-balancer.
fn elastic_model(
    sc: &Scenario,
    nodes: &[NodeState],
    link_of: &HashMap<(usize, usize), usize>,
) -> Result<Option<ElasticModel>, SimError> {
    let Some(spec) = sc.elastic.as_ref() else {
        return Ok(None);
    };
    let uplinks = |leaf: usize| -> Vec<usize> {
        nodes[leaf]
            .lb
            .as_ref()
            .map(|l| l.uplinks.clone())
            .unwrap_or_default()
    };
    let capacity = |a: usize, b: usize| -> Option<f64> {
        link_of.get(&(a, b)).map(|&k| sc.links[k].capacity_gbps)
    };
    let mut m = ElasticModel::new(spec, sc.params.balancing, sc.seed, &uplinks, &capacity);
    m.set_replace_policy(
        sc.params.replace,
        sc.params.controller.weight_resolution.max_weight(),
    );
    if let Some((s, d)) = m.memberless_group() {
        return Err(SimError::Setup {
            node: sc.nodes[s].name.clone(),
            message: format!(
                "[elastic] source for {} is not a load-balancer (no uplink to a helper)",
                sc.nodes[d].name
            ),
        });
    }
    Ok(Some(m))
}

/// The helper links the elastic model loads read its queues (with the counter jitter its
/// spec asks for).
fn attach_elastic_queues(sc: &Scenario, m: &ElasticModel, nodes: &mut [NodeState]) {
    for (i, nd) in nodes.iter_mut().enumerate() {
        let Some(h) = nd.helper.as_mut() else {
            continue;
        };
        for l in &mut h.links {
            if let Some(q) = m.queue_index(i, l.remote) {
                l.source = Source::Elastic(q);
                l.counters.max_buffer_bytes = m.queues[q].buffer_bytes.round() as u64;
                let span = m.spec().sample_jitter;
                if span > 0.0 {
                    l.jitter = Some(CounterJitter {
                        rng: SmallRng::seed_from_u64(
                            sc.seed ^ (q as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                        ),
                        span,
                        previous_true: 0.0,
                    });
                }
            }
        }
    }
}
