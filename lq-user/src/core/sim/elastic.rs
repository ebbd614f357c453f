//! The elastic load model of `lqd sim`: a fluid model of TCP-like flows over a two-hop
//! leaf -> spine -> leaf path, with the kernel's resilient nexthop group in front.
//!
//! Every `dt`:
//! 1. flows due start (jobs together, Poisson arrivals at their times); each flow hashes to
//!    a bucket of its source's resilient group for the destination, and the bucket names the
//!    member (spine) it takes. Buckets move as the kernel moves them
//!    (`nh_res_table_upkeep`): when the weights change, buckets of over-weight members that
//!    have been idle for `idle_timer`, or any once the group has been unbalanced for
//!    `unbalanced_timer`, go to under-weight members; a removed member's buckets go at once.
//!    A moved flow's new data takes the new member; what it had queued stays in the old
//!    path's queues and drains there (packets already queued at a spine are not re-routed);
//! 2. each flow offers `min(rate, pacing, what is left to send) x dt` to its first queue
//!    (leaf -> spine), whose output feeds the second (spine -> destination). A queue serves
//!    its capacity (times the payload share `goodput`) per second, the backlog of each flow
//!    in proportion to what it holds; arrivals beyond the buffer (`buffer_ms` of its rate,
//!    tbf's `latency`) are dropped, and every flow whose arrivals were dropped sees a loss;
//! 3. rates follow AIMD: slow start doubles the rate every RTT until the first loss, then
//!    `increase_mss_per_rtt` segments per RTT per RTT, times `beta` on a loss (at most once
//!    per RTT); the RTT is `base_rtt` plus the queueing delay of both queues;
//! 4. a flow completes when all its bytes have left the second queue.
//!
//! The spine -> destination queues feed the helpers' real pipelines (A.2 counters: TX
//! octets, queue gauge, drops) and so LQS, CL and available bandwidth.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::scenario::{Balancing, Elastic};
use crate::core::controller::path_quality::UplinkId;
use crate::core::controller::replace::{self, GroupShape, Hold, ReplacePolicy, Verdict};
use crate::core::controller::weights::{bucket_shares, remap};

/// One directed link's queue.
#[derive(Clone, Debug)]
pub struct Queue {
    /// Line rate (bit/s).
    pub rate_bps: f64,
    /// Buffer (bytes).
    pub buffer_bytes: f64,
    /// Backlog (bytes).
    pub backlog: f64,
    /// Octets transmitted, cumulative (line octets).
    pub tx_bytes: f64,
    /// Drop events (packets), cumulative.
    pub drops: u64,
    /// Sum of the flows' inputs this step (scratch).
    input: f64,
}

/// A resilient nexthop group of one (source, destination).
#[derive(Clone, Debug)]
struct Group {
    source: usize,
    destination: usize,
    /// Member spines, in uplink id order.
    members: Vec<usize>,
    /// Kernel weights per member (0: not a member).
    weights: Vec<u32>,
    /// Member index of every bucket.
    buckets: Vec<usize>,
    /// Last time a bucket carried traffic; `None`: never (idle since the group exists).
    last_active: Vec<Option<u64>>,
    unbalanced_since: Option<u64>,
    /// (first queue, second queue) per member.
    queues: Vec<(usize, usize)>,
    /// lq's held or decaying bound moves (`replace::Hold`).
    hold: Option<Hold>,
    /// lq's last computed weights, and when its held move falls due.
    computed: Vec<u32>,
    due_ns: u64,
}

impl Group {
    fn wanted(&self, n: u16) -> Vec<u64> {
        let w: Vec<(UplinkId, u32)> = self
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0)
            .map(|(k, w)| (k as UplinkId + 1, *w))
            .collect();
        let mut out = vec![0u64; self.members.len()];
        for (id, b) in bucket_shares(n, &w) {
            out[id as usize - 1] = b;
        }
        out
    }

    /// The kernel's upkeep: move buckets from over-weight to under-weight members.
    fn upkeep(&mut self, t: u64, idle_ns: u64, unbalanced_ns: u64) {
        let n = self.buckets.len() as u16;
        let wanted = self.wanted(n);
        let mut have = vec![0u64; self.members.len()];
        for &m in &self.buckets {
            have[m] += 1;
        }
        if have == wanted {
            self.unbalanced_since = None;
            return;
        }
        let since = *self.unbalanced_since.get_or_insert(t);
        let force = unbalanced_ns > 0 && t.saturating_sub(since) >= unbalanced_ns;
        for b in 0..self.buckets.len() {
            let m = self.buckets[b];
            if have[m] <= wanted[m] {
                continue;
            }
            let removed = self.weights[m] == 0;
            let idle = self.last_active[b].is_none_or(|a| t.saturating_sub(a) >= idle_ns);
            if !(removed || idle || force) {
                continue;
            }
            let Some(to) = (0..self.members.len()).find(|&k| have[k] < wanted[k]) else {
                break;
            };
            have[m] -= 1;
            have[to] += 1;
            self.buckets[b] = to;
        }
        if have == wanted {
            self.unbalanced_since = None;
        }
    }
}

#[derive(Clone, Debug)]
struct Flow {
    group: usize,
    bucket: usize,
    start_ns: u64,
    size: f64,
    /// Bytes not yet sent (net of drops, which are sent again).
    unsent: f64,
    delivered: f64,
    /// Backlog in the first and second queue.
    b1: f64,
    b2: f64,
    /// The flow's current first and second queue.
    q: (usize, usize),
    /// Data still queued on the paths the flow took before its bucket moved.
    stale: Vec<Stale>,
    rate: f64,
    pacing: Option<f64>,
    slow_start: bool,
    last_cut_ns: u64,
    done_ns: Option<u64>,
    /// Which traffic block.
    block: usize,
}

/// What a step's first hop left for the second ([`ElasticModel::serve_first_hop`]), per
/// active flow in `active` order.
struct FirstHop {
    /// What each flow's first queue served this step.
    out1: Vec<f64>,
    /// What the first queues of the flows' stale parts served, in flow and part order.
    stale_out: Vec<f64>,
    /// The flow lost data this step (at either hop).
    lost: Vec<bool>,
}

/// Per queue, what one pass of [`serve_queues`] did: the fraction served of what the queue
/// held, and the fraction of its arrivals dropped.
struct QueueShares {
    served_frac: Vec<f64>,
    drop_frac: Vec<f64>,
}

/// One pass of every queue over a step of `dt` seconds: each serves up to its rate (times
/// the goodput share) of its backlog plus its input, drops what exceeds its buffer, and
/// counts what it sent and dropped. A queue is a fluid FIFO: the shares returned apply to
/// every flow in it alike.
fn serve_queues(queues: &mut [Queue], backlog: &[f64], spec: &Elastic, dt: f64) -> QueueShares {
    let good = spec.goodput;
    let mss = spec.mss_bytes;
    let mut shares = QueueShares {
        served_frac: vec![0.0; queues.len()],
        drop_frac: vec![0.0; queues.len()],
    };
    for (k, q) in queues.iter_mut().enumerate() {
        let hold = backlog[k] + q.input;
        if hold <= 0.0 {
            q.backlog = 0.0;
            continue;
        }
        let s = (q.rate_bps / 8.0 * good * dt).min(hold);
        let left = hold - s;
        let over = (left - q.buffer_bytes).max(0.0);
        shares.served_frac[k] = s / hold;
        shares.drop_frac[k] = if q.input > 0.0 {
            (over / q.input).min(1.0)
        } else {
            0.0
        };
        q.backlog = left - over;
        q.tx_bytes += s / good;
        if over > 0.0 {
            q.drops += (over / mss).ceil() as u64;
        }
    }
    shares
}

/// A flow's data left in the queues of a path it no longer takes.
#[derive(Clone, Copy, Debug)]
struct Stale {
    q: (usize, usize),
    b1: f64,
    b2: f64,
}

/// Result of one job.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobStats {
    /// Its name.
    pub name: String,
    /// Flows completed / started.
    pub completed: usize,
    /// Flows.
    pub flows: usize,
    /// Job completion time (s): last completion minus start; `None` if unfinished.
    pub jct_s: Option<f64>,
    /// Mean over consecutive share samples of half the sum of absolute share changes.
    pub weight_swing: f64,
    /// Largest such change.
    pub weight_swing_max: f64,
    /// The weight swing over samples 500 ms apart (the netns demo's timeline period).
    pub weight_swing_500ms: f64,
    /// Mean share of the degraded spine.
    pub degraded_share: f64,
}

/// Result of one Poisson load.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PoissonStats {
    /// Its name.
    pub name: String,
    /// Flows completed.
    pub completed: usize,
    /// Flows started.
    pub flows: usize,
    /// Bytes delivered by the end / bytes of the started flows.
    pub delivered_fraction: f64,
    /// Flow completion time percentiles (s) of the completed flows.
    pub p50_fct_s: f64,
    /// 99th percentile.
    pub p99_fct_s: f64,
    /// Weight swing within the window.
    pub weight_swing: f64,
    /// Largest change within the window.
    pub weight_swing_max: f64,
    /// The weight swing over samples 500 ms apart within the window.
    pub weight_swing_500ms: f64,
    /// Mean share of the degraded spine within the window.
    pub degraded_share: f64,
}

/// What the elastic model measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ElasticStats {
    /// `lq`, `ecmp` or `static`.
    pub balancing: String,
    /// Jobs.
    pub jobs: Vec<JobStats>,
    /// Poisson loads.
    pub poisson: Vec<PoissonStats>,
    /// Group weight changes written over the run (lq: those `replace::decide` lets
    /// through; the baselines: every change).
    pub replaces: u64,
    /// Resilient buckets those changes moved (lq only).
    pub buckets_moved: u64,
}

/// The model's state.
pub struct ElasticModel {
    spec: Elastic,
    balancing: Balancing,
    /// Queues; `queue_of[(from, to)]` indexes them.
    pub queues: Vec<Queue>,
    queue_of: HashMap<(usize, usize), usize>,
    groups: Vec<Group>,
    group_of: HashMap<(usize, usize), usize>,
    flows: Vec<Flow>,
    active: Vec<usize>,
    /// Pending starts (ns, group, size, pacing, block), sorted by time descending.
    pending: Vec<(u64, usize, f64, Option<f64>, usize)>,
    next_capacity: usize,
    rng: SmallRng,
    /// Share samples of the watched group: (t, fractions).
    samples: Vec<(u64, Vec<f64>)>,
    next_sample: u64,
    /// Which of lq's computed changes reach the groups (lqd's `[nexthop-group] replace`),
    /// and the largest kernel weight.
    replace: ReplacePolicy,
    max_weight: u32,
    /// Group weight changes written, and the buckets they moved.
    replaces: u64,
    buckets_moved: u64,
}

impl ElasticModel {
    /// Builds the queues and groups. `uplinks(leaf)` gives a leaf's uplink spines in uplink
    /// id order; `capacity(a, b)` a link's line rate (Gbps).
    pub fn new(
        spec: &Elastic,
        balancing: Balancing,
        seed: u64,
        uplinks: &dyn Fn(usize) -> Vec<usize>,
        capacity: &dyn Fn(usize, usize) -> Option<f64>,
    ) -> Self {
        let mut m = Self {
            spec: spec.clone(),
            balancing,
            queues: Vec::new(),
            queue_of: HashMap::new(),
            groups: Vec::new(),
            group_of: HashMap::new(),
            flows: Vec::new(),
            active: Vec::new(),
            pending: Vec::new(),
            next_capacity: 0,
            rng: SmallRng::seed_from_u64(seed ^ 0xe1a5_71c0),
            samples: Vec::new(),
            next_sample: 0,
            replace: ReplacePolicy::default(),
            max_weight: 255,
            replaces: 0,
            buckets_moved: 0,
        };
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for j in &spec.jobs {
            pairs.extend(j.sources.iter().map(|&s| (s, j.destination)));
        }
        for p in &spec.poisson {
            pairs.extend(p.sources.iter().map(|&s| (s, p.destination)));
        }
        pairs.push((spec.watch_source, spec.watch_destination));
        for (s, d) in pairs {
            m.group(s, d, uplinks, capacity);
        }
        // Starts.
        for (bi, j) in spec.jobs.iter().enumerate() {
            for k in 0..j.flows as usize {
                let src = j.sources[k % j.sources.len()];
                let g = m.group_of[&(src, j.destination)];
                m.pending.push((j.at_ns, g, j.size_bytes, None, bi));
            }
        }
        for (pi, p) in spec.poisson.iter().enumerate() {
            let mut rng = SmallRng::seed_from_u64(p.seed);
            let mut t = 0.0f64;
            let mut k = 0usize;
            loop {
                let u: f64 = rng.random_range(1e-9..1.0);
                t += -u.ln() / p.rate_per_s;
                if t * 1e9 >= p.duration_ns as f64 {
                    break;
                }
                let src = p.sources[k % p.sources.len()];
                k += 1;
                let g = m.group_of[&(src, p.destination)];
                let at = p.at_ns + (t * 1e9) as u64;
                m.pending
                    .push((at, g, p.size_bytes, p.pacing_bps, spec.jobs.len() + pi));
            }
        }
        m.pending.sort_by_key(|p| std::cmp::Reverse(p.0));
        m
    }

    /// The model's parameters.
    pub fn spec(&self) -> &Elastic {
        &self.spec
    }

    fn queue(&mut self, a: usize, b: usize, gbps: f64) -> usize {
        if let Some(&q) = self.queue_of.get(&(a, b)) {
            return q;
        }
        let rate_bps = gbps * 1e9;
        self.queues.push(Queue {
            rate_bps,
            buffer_bytes: (rate_bps / 8.0 * self.spec.buffer_s).max(3.0 * self.spec.mss_bytes),
            backlog: 0.0,
            tx_bytes: 0.0,
            drops: 0,
            input: 0.0,
        });
        self.queue_of.insert((a, b), self.queues.len() - 1);
        self.queues.len() - 1
    }

    fn group(
        &mut self,
        s: usize,
        d: usize,
        uplinks: &dyn Fn(usize) -> Vec<usize>,
        capacity: &dyn Fn(usize, usize) -> Option<f64>,
    ) {
        if self.group_of.contains_key(&(s, d)) {
            return;
        }
        let members = uplinks(s);
        let mut queues = Vec::new();
        for &h in &members {
            let q1 = self.queue(s, h, capacity(s, h).unwrap_or(0.0));
            let q2 = self.queue(h, d, capacity(h, d).unwrap_or(0.0));
            queues.push((q1, q2));
        }
        let n = usize::from(self.spec.buckets);
        let k = members.len().max(1);
        let g = Group {
            source: s,
            destination: d,
            weights: vec![1; members.len()],
            hold: None,
            computed: Vec::new(),
            due_ns: u64::MAX,
            buckets: (0..n).map(|b| b * k / n).collect(),
            last_active: vec![None; n],
            unbalanced_since: None,
            members,
            queues,
        };
        self.groups.push(g);
        self.group_of.insert((s, d), self.groups.len() - 1);
    }

    /// A (source, destination) pair whose source has no uplink towards a helper: its
    /// flows could go nowhere (the scenario names a node that is not a load-balancer).
    pub fn memberless_group(&self) -> Option<(usize, usize)> {
        self.groups
            .iter()
            .find(|g| g.members.is_empty())
            .map(|g| (g.source, g.destination))
    }

    /// The queue of a directed link, if the model loads it.
    pub fn queue_index(&self, from: usize, to: usize) -> Option<usize> {
        self.queue_of.get(&(from, to)).copied()
    }

    /// Every (source, destination) group.
    pub fn group_pairs(&self) -> Vec<(usize, usize)> {
        self.groups
            .iter()
            .map(|g| (g.source, g.destination))
            .collect()
    }

    /// Capacity steps due at `t`: (from, to, new Gbps).
    pub fn capacity_steps(&mut self, t: u64) -> Vec<(usize, usize, f64)> {
        let mut out = Vec::new();
        while let Some(c) = self.spec.capacity.get(self.next_capacity) {
            if c.at_ns > t {
                break;
            }
            out.push((c.from, c.to, c.gbps));
            if let Some(&q) = self.queue_of.get(&(c.from, c.to)) {
                let q = &mut self.queues[q];
                q.rate_bps = c.gbps * 1e9;
                q.buffer_bytes =
                    (q.rate_bps / 8.0 * self.spec.buffer_s).max(3.0 * self.spec.mss_bytes);
            }
            self.next_capacity += 1;
        }
        out
    }

    /// Sets the kernel weights of a group from the load-balancer's applied fractions
    /// (by uplink id order; `None`: no application yet, equal).
    pub fn set_weights(&mut self, s: usize, d: usize, lq: Option<Vec<u32>>, t: u64) {
        let Some(&gi) = self.group_of.get(&(s, d)) else {
            return;
        };
        let g = &self.groups[gi];
        let mut w: Vec<u32> = match self.balancing {
            Balancing::Ecmp => vec![1; g.members.len()],
            Balancing::Static => g
                .queues
                .iter()
                .map(|&(q1, q2)| {
                    let c = self.queues[q1].rate_bps.min(self.queues[q2].rate_bps);
                    (c / 1e6).round().max(1.0) as u32
                })
                .collect(),
            Balancing::Lq => lq.unwrap_or_else(|| vec![1; g.members.len()]),
        };
        let g = &mut self.groups[gi];
        if g.weights != w {
            // lq's weights reach the group as lqd writes them: only when they change
            // forwarding (`replace::decide`, issue 41); the baselines' are set outright.
            if let Balancing::Lq = self.balancing {
                let pairs = |v: &[u32]| -> Vec<(UplinkId, u32)> {
                    (v.iter().enumerate())
                        .filter(|(_, x)| **x > 0)
                        .map(|(k, x)| (k as UplinkId + 1, *x))
                        .collect()
                };
                // Decided when the computed weights change or a held move falls due.
                if g.computed == w && t < g.due_ns {
                    return;
                }
                g.computed.clone_from(&w);
                g.due_ns = u64::MAX;
                let (installed, proposed) = (pairs(&g.weights), pairs(&w));
                let shape = GroupShape::Resilient {
                    buckets: self.spec.buckets,
                    max_weight: self.max_weight,
                };
                let v = replace::decide(
                    &self.replace,
                    shape,
                    &installed,
                    &proposed,
                    g.hold.as_ref(),
                    t,
                );
                let written = match v {
                    Verdict::Replace { weights, .. } => {
                        g.hold = None;
                        weights
                    }
                    Verdict::SameForwarding { hold } => {
                        g.hold = hold;
                        return;
                    }
                    Verdict::Held { hold, due_ns } => {
                        g.hold = Some(hold);
                        g.due_ns = due_ns;
                        return;
                    }
                };
                let moved = remap(self.spec.buckets, &installed, &written);
                self.buckets_moved += (moved * f64::from(self.spec.buckets)).round() as u64;
                w = vec![0u32; g.members.len()];
                for (id, x) in written {
                    w[id as usize - 1] = x;
                }
            }
            self.replaces += 1;
            g.weights = w;
            let (idle, unb) = (self.spec.idle_timer_ns, self.spec.unbalanced_timer_ns);
            g.upkeep(t, idle, unb);
        }
    }

    /// One fluid step ending at `t + dt`: flows start, resilient groups run their upkeep,
    /// every active flow offers its data to its path's first queue (leaf to spine), the
    /// first queues serve and drop, what they served crosses the second queues (spine to
    /// leaf), and each flow's AIMD reacts to its losses; then the watched group's shares
    /// are sampled.
    pub fn step(&mut self, t: u64) {
        let dt = self.spec.dt_ns as f64 / 1e9;
        self.start_flows(t);
        // Resilient upkeep (the kernel runs it periodically while unbalanced).
        let (idle, unb) = (self.spec.idle_timer_ns, self.spec.unbalanced_timer_ns);
        for g in &mut self.groups {
            if g.unbalanced_since.is_some() {
                g.upkeep(t, idle, unb);
            }
        }
        let offered = self.offer_first_hop(t, dt);
        let first = self.serve_first_hop(&offered, dt);
        let second = self.serve_second_hop(&first, dt);
        let now = t + self.spec.dt_ns;
        self.deliver_and_adapt(now, dt, first, &second);
        self.active.retain(|&fi| self.flows[fi].done_ns.is_none());
        self.sample_watched(now);
    }

    /// The flows whose start time has come join the active set, each on a random bucket of
    /// its group.
    fn start_flows(&mut self, t: u64) {
        while let Some(&(at, g, size, pacing, block)) = self.pending.last() {
            if at > t {
                break;
            }
            self.pending.pop();
            let bucket = self.rng.random_range(0..self.groups[g].buckets.len());
            let rtt = self.spec.base_rtt_s;
            self.flows.push(Flow {
                group: g,
                bucket,
                start_ns: at,
                size,
                unsent: size,
                delivered: 0.0,
                b1: 0.0,
                b2: 0.0,
                q: (usize::MAX, usize::MAX),
                stale: Vec::new(),
                rate: 10.0 * self.spec.mss_bytes / rtt,
                pacing: pacing.map(|p| p / 8.0),
                slow_start: true,
                last_cut_ns: 0,
                done_ns: None,
                block,
            });
            self.active.push(self.flows.len() - 1);
        }
    }

    /// What each active flow (in `active` order) offers its path's first queue this step,
    /// its bucket's member deciding the path; the first queues' `input` is set to the sum.
    fn offer_first_hop(&mut self, t: u64, dt: f64) -> Vec<f64> {
        for q in &mut self.queues {
            q.input = 0.0;
        }
        let mut input1 = Vec::with_capacity(self.active.len());
        for &fi in &self.active {
            let f = &mut self.flows[fi];
            let g = &mut self.groups[f.group];
            let m = g.buckets[f.bucket];
            g.last_active[f.bucket] = Some(t);
            // A moved bucket takes the flow's new data to the new member's queues; what it
            // had queued drains on the old path. (Moving the backlog too, as this model
            // once did, filled the healthy paths' queues with the degraded path's backlog
            // at every removal: their LQS fell to 0 and they were removed in turn, which the
            // netns fabric does not do; docs/sim.md.)
            let q = g.queues[m];
            if q != f.q {
                if f.b1 + f.b2 > 0.0 && f.q.0 != usize::MAX {
                    f.stale.push(Stale {
                        q: f.q,
                        b1: f.b1,
                        b2: f.b2,
                    });
                }
                f.b1 = 0.0;
                f.b2 = 0.0;
                f.q = q;
            }
            let r = f.pacing.map_or(f.rate, |p| f.rate.min(p));
            let x = (r * dt).min(f.unsent).max(0.0);
            input1.push(x);
        }
        // The source's own limit (`source_gbps`): every flow of an over-offering source
        // sends the same share of its offer, without a loss.
        if let Some(bps) = self.spec.source_bps {
            let budget = bps / 8.0 * dt;
            let mut offered: HashMap<usize, f64> = HashMap::new();
            for (k, &fi) in self.active.iter().enumerate() {
                *offered
                    .entry(self.groups[self.flows[fi].group].source)
                    .or_default() += input1[k];
            }
            for (k, &fi) in self.active.iter().enumerate() {
                let f = &mut self.flows[fi];
                let o = offered[&self.groups[f.group].source];
                if o > budget {
                    input1[k] *= budget / o;
                    // What the flow could send is its rate (TCP's congestion window
                    // validation): a sender-limited flow does not grow without bound.
                    f.rate = f.rate.min(input1[k] / dt);
                }
            }
        }
        for (k, &fi) in self.active.iter().enumerate() {
            self.queues[self.flows[fi].q.0].input += input1[k];
        }
        input1
    }

    /// The first queues serve and drop; each flow keeps what its first queue still holds.
    fn serve_first_hop(&mut self, input1: &[f64], dt: f64) -> FirstHop {
        let nq = self.queues.len();
        let mut backlog1 = vec![0.0; nq];
        for &fi in &self.active {
            let f = &self.flows[fi];
            backlog1[f.q.0] += f.b1;
            for st in &f.stale {
                backlog1[st.q.0] += st.b1;
            }
        }
        let mut out = FirstHop {
            out1: vec![0.0; self.active.len()],
            stale_out: Vec::new(),
            lost: vec![false; self.active.len()],
        };
        let shares = serve_queues(&mut self.queues, &backlog1, &self.spec, dt);
        for (k, &fi) in self.active.iter().enumerate() {
            let f = &mut self.flows[fi];
            let q = f.q.0;
            let arrive = input1[k];
            let dropped = arrive * shares.drop_frac[q];
            let kept = arrive - dropped;
            f.unsent -= kept;
            if dropped > 0.0 {
                out.lost[k] = true;
            }
            let hold = f.b1 + kept;
            // Served in proportion to what the flow holds (FIFO in the fluid limit);
            // the dropped share is what exceeded the buffer.
            let s = (f.b1 + arrive) * shares.served_frac[q];
            let s = s.min(hold);
            f.b1 = hold - s;
            out.out1[k] = s;
            // Stale data: no arrivals, served in proportion to what it holds.
            for st in &mut f.stale {
                let s = st.b1 * shares.served_frac[st.q.0];
                st.b1 -= s;
                // Arrives at the old path's second queue below (same step).
                out.stale_out.push(s);
            }
        }
        out
    }

    /// What the first queues served arrives at the second queues, which serve and drop;
    /// returns their served and dropped fractions.
    fn serve_second_hop(&mut self, first: &FirstHop, dt: f64) -> QueueShares {
        for q in &mut self.queues {
            q.input = 0.0;
        }
        let mut backlog2 = vec![0.0; self.queues.len()];
        let mut si = 0;
        for (k, &fi) in self.active.iter().enumerate() {
            let f = &self.flows[fi];
            self.queues[f.q.1].input += first.out1[k];
            backlog2[f.q.1] += f.b2;
            for st in &f.stale {
                self.queues[st.q.1].input += first.stale_out[si];
                backlog2[st.q.1] += st.b2;
                si += 1;
            }
        }
        // The first queues' tx was counted; count the second hop separately.
        let tx_before: Vec<f64> = self.queues.iter().map(|q| q.tx_bytes).collect();
        let backlog_first: Vec<f64> = self.queues.iter().map(|q| q.backlog).collect();
        let shares = serve_queues(&mut self.queues, &backlog2, &self.spec, dt);
        // A queue is either a first or a second hop in this model (leaf -> spine or spine ->
        // leaf), so the two passes touch disjoint queues; keep the first pass's backlog
        // where the second had nothing.
        for (k, q) in self.queues.iter_mut().enumerate() {
            if q.input <= 0.0 && backlog2[k] <= 0.0 {
                q.backlog = backlog_first[k];
                q.tx_bytes = tx_before[k];
            }
        }
        shares
    }

    /// Each flow's data through its second queue (and its stale parts' through theirs),
    /// delivered or lost, then AIMD on this step's losses, at `now` (the step's end).
    fn deliver_and_adapt(&mut self, now: u64, dt: f64, first: FirstHop, second: &QueueShares) {
        let mss = self.spec.mss_bytes;
        let FirstHop {
            out1,
            stale_out,
            mut lost,
        } = first;
        let mut si = 0;
        for (k, &fi) in self.active.iter().enumerate() {
            let f = &mut self.flows[fi];
            for st in &mut f.stale {
                let arrive = stale_out[si];
                si += 1;
                let q = st.q.1;
                let dropped = arrive * second.drop_frac[q];
                if dropped > 0.0 {
                    lost[k] = true;
                    f.unsent += dropped;
                }
                let hold = st.b2 + arrive - dropped;
                let s = ((st.b2 + arrive) * second.served_frac[q]).min(hold);
                st.b2 = hold - s;
                f.delivered += s;
            }
            // A remainder below a micro-octet: counted as delivered, not lost.
            for st in f.stale.iter().filter(|st| st.b1 + st.b2 <= 1e-6) {
                f.delivered += st.b1 + st.b2;
            }
            f.stale.retain(|st| st.b1 + st.b2 > 1e-6);
            let q = f.q.1;
            let arrive = out1[k];
            let dropped = arrive * second.drop_frac[q];
            if dropped > 0.0 {
                lost[k] = true;
                // Lost after the first hop: to be sent again.
                f.unsent += dropped;
            }
            let hold = f.b2 + arrive - dropped;
            let s = ((f.b2 + arrive) * second.served_frac[q]).min(hold);
            f.b2 = hold - s;
            f.delivered += s;
            // AIMD.
            let (q1, q2) = (&self.queues[f.q.0], &self.queues[f.q.1]);
            let rtt = self.spec.base_rtt_s
                + q1.backlog / (q1.rate_bps / 8.0).max(1.0)
                + q2.backlog / (q2.rate_bps / 8.0).max(1.0);
            let since_cut = now.saturating_sub(f.last_cut_ns) as f64 / 1e9;
            if lost[k] && since_cut >= rtt {
                f.rate *= self.spec.beta;
                f.slow_start = false;
                f.last_cut_ns = now;
            } else if !lost[k] {
                if f.slow_start {
                    f.rate *= 2f64.powf((dt / rtt).min(4.0));
                } else {
                    f.rate += self.spec.increase_mss_per_rtt * mss / rtt * dt / rtt;
                }
            }
            let cap = f.pacing.unwrap_or(f64::INFINITY).min(1.25e9);
            // At least half a segment per RTT (a TCP never stops), at most the pacing rate;
            // max then min, so that a pacing rate below the floor wins without a panic.
            f.rate = f.rate.max(mss / rtt.max(1e-6) * 0.5).min(cap.max(mss));
            if f.delivered >= f.size * (1.0 - 1e-9) && f.unsent <= 1e-6 {
                f.done_ns = Some(now);
            }
        }
    }

    /// The watched group's weight shares, every `sample_ns`.
    fn sample_watched(&mut self, now: u64) {
        if now < self.next_sample {
            return;
        }
        self.next_sample = now + self.spec.sample_ns;
        if let Some(&gi) = self
            .group_of
            .get(&(self.spec.watch_source, self.spec.watch_destination))
        {
            let w = &self.groups[gi].weights;
            let s: f64 = w.iter().map(|x| f64::from(*x)).sum();
            let f: Vec<f64> = w
                .iter()
                .map(|x| if s > 0.0 { f64::from(*x) / s } else { 0.0 })
                .collect();
            self.samples.push((now, f));
        }
    }

    /// Statistics at the end.
    pub fn stats(&self) -> ElasticStats {
        let degraded = self
            .group_of
            .get(&(self.spec.watch_source, self.spec.watch_destination))
            .and_then(|&g| {
                self.groups[g]
                    .members
                    .iter()
                    .position(|&m| m == self.spec.degraded)
            });
        // The netns demo's timeline samples every 500 ms: the same statistic on every
        // k-th sample, for the calibration (docs/sim.md).
        let k500 = (500_000_000 / self.spec.sample_ns).max(1) as usize;
        let window = |from: u64, to: u64| -> (f64, f64, f64, f64) {
            let v: Vec<&(u64, Vec<f64>)> = self
                .samples
                .iter()
                .filter(|(t, _)| *t >= from && *t <= to)
                .collect();
            let change = |a: &[f64], b: &[f64]| {
                a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / 2.0
            };
            let mut sw = Vec::new();
            for w in v.windows(2) {
                sw.push(change(&w[0].1, &w[1].1));
            }
            let v500: Vec<&&(u64, Vec<f64>)> = v.iter().step_by(k500).collect();
            let mut sw500 = Vec::new();
            for w in v500.windows(2) {
                sw500.push(change(&w[0].1, &w[1].1));
            }
            let mean = |x: &[f64]| {
                if x.is_empty() {
                    0.0
                } else {
                    x.iter().sum::<f64>() / x.len() as f64
                }
            };
            let share: Vec<f64> = v
                .iter()
                .map(|(_, f)| degraded.map_or(0.0, |k| f[k]))
                .collect();
            (
                mean(&sw),
                sw.iter().copied().fold(0.0, f64::max),
                mean(&share),
                mean(&sw500),
            )
        };
        let mut jobs = Vec::new();
        for (bi, j) in self.spec.jobs.iter().enumerate() {
            let fl: Vec<&Flow> = self.flows.iter().filter(|f| f.block == bi).collect();
            let done: Vec<u64> = fl.iter().filter_map(|f| f.done_ns).collect();
            let last = done.iter().copied().max();
            let jct = (done.len() == j.flows as usize)
                .then(|| last.map(|l| (l - j.at_ns) as f64 / 1e9))
                .flatten();
            let end = last.unwrap_or(u64::MAX);
            let (sw, swmax, share, sw500) = window(j.at_ns, end);
            jobs.push(JobStats {
                name: j.name.clone(),
                completed: done.len(),
                flows: j.flows as usize,
                jct_s: jct,
                weight_swing: sw,
                weight_swing_max: swmax,
                weight_swing_500ms: sw500,
                degraded_share: share,
            });
        }
        let mut poisson = Vec::new();
        for (pi, p) in self.spec.poisson.iter().enumerate() {
            let b = self.spec.jobs.len() + pi;
            let fl: Vec<&Flow> = self.flows.iter().filter(|f| f.block == b).collect();
            let mut fct: Vec<f64> = fl
                .iter()
                .filter_map(|f| f.done_ns.map(|d| (d - f.start_ns) as f64 / 1e9))
                .collect();
            fct.sort_by(f64::total_cmp);
            let pct = |q: f64| {
                if fct.is_empty() {
                    0.0
                } else {
                    fct[((fct.len() as f64 * q).ceil() as usize).clamp(1, fct.len()) - 1]
                }
            };
            let size: f64 = fl.iter().map(|f| f.size).sum();
            let del: f64 = fl.iter().map(|f| f.delivered.min(f.size)).sum();
            let (sw, swmax, share, sw500) = window(p.window.0, p.window.1);
            poisson.push(PoissonStats {
                name: p.name.clone(),
                completed: fct.len(),
                flows: fl.len(),
                delivered_fraction: if size > 0.0 { del / size } else { 0.0 },
                p50_fct_s: pct(0.5),
                p99_fct_s: pct(0.99),
                weight_swing: sw,
                weight_swing_max: swmax,
                weight_swing_500ms: sw500,
                degraded_share: share,
            });
        }
        ElasticStats {
            balancing: match self.balancing {
                Balancing::Lq => "lq",
                Balancing::Ecmp => "ecmp",
                Balancing::Static => "static",
            }
            .into(),
            jobs,
            poisson,
            replaces: self.replaces,
            buckets_moved: self.buckets_moved,
        }
    }

    /// Sets which of lq's computed weight changes reach the groups, and the largest kernel
    /// weight.
    pub fn set_replace_policy(&mut self, policy: ReplacePolicy, max_weight: u32) {
        self.replace = policy;
        self.max_weight = max_weight;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sim::scenario::Scenario;

    /// Two spines, two leaves; one flow of `mib` MiB from L1 to L2 at t = 0; S1 -> L2 at
    /// 10 Mbit/s (a queue builds there), every other link 100 Mbit/s.
    fn model(extra: &str, flows: u32, mib: f64) -> (ElasticModel, Scenario) {
        let text = format!(
            r#"
name = "unit"
duration_ms = 10000
[params]
t_sample_ms = 2
t_notify_ms = 20
[[nodes]]
prefix = "S"
count = 2
tier = 1
group = "spines"
[[nodes]]
prefix = "L"
count = 2
tier = 0
group = "leaves"
[[links]]
a = "@spines"
b = "@leaves"
capacity_gbps = 0.1
[elastic]
watch_source = "L1"
watch_destination = "L2"
degraded = "S1"
{extra}
[[elastic.job]]
sources = "L1"
destination = "L2"
at_ms = 0
flows = {flows}
size_mib = {mib}
"#
        );
        let sc = Scenario::parse(&text, "unit").unwrap();
        let idx = |n: &str| sc.nodes.iter().position(|x| x.name == n).unwrap();
        let (s1, s2, l1, l2) = (idx("S1"), idx("S2"), idx("L1"), idx("L2"));
        let spec = sc.elastic.clone().unwrap();
        let uplinks = move |leaf: usize| if leaf == l1 { vec![s1, s2] } else { vec![] };
        let capacity = move |a: usize, b: usize| Some(if (a, b) == (s1, l2) { 0.01 } else { 0.1 });
        let m = ElasticModel::new(&spec, Balancing::Lq, 1, &uplinks, &capacity);
        (m, sc)
    }

    fn node(sc: &Scenario, n: &str) -> usize {
        sc.nodes.iter().position(|x| x.name == n).unwrap()
    }

    /// A flow moved to another spine leaves what it had queued at the old spine, which
    /// drains there (packets already queued are not re-routed), and every octet arrives.
    #[test]
    fn a_moved_flow_drains_its_backlog_on_the_old_path() {
        let (mut m, sc) = model("", 1, 4.0);
        let (s1, s2, l1, l2) = (
            node(&sc, "S1"),
            node(&sc, "S2"),
            node(&sc, "L1"),
            node(&sc, "L2"),
        );
        let dt = m.spec().dt_ns;
        let old = m.queue_index(s1, l2).unwrap();
        let new = m.queue_index(s2, l2).unwrap();
        m.set_weights(l1, l2, Some(vec![1, 0]), 0);
        let mut t = 0;
        while m.queues[old].backlog < 10_000.0 {
            m.step(t);
            t += dt;
            assert!(t < 2_000_000_000, "no backlog at S1 -> L2");
        }
        let old_first = m.queue_index(l1, s1).unwrap();
        let queued = m.queues[old].backlog;
        m.set_weights(l1, l2, Some(vec![0, 1]), t);
        m.step(t);
        t += dt;
        // The old path still holds (nearly all of) it: 10 Mbit/s drains 625 octets a step.
        assert!(
            m.queues[old].backlog > queued - 1_000.0,
            "{} of {queued}",
            m.queues[old].backlog
        );
        // From now on the old path only drains: what its first queue still held moves on
        // to its second, nothing new comes in.
        let stale = |m: &ElasticModel| m.queues[old].backlog + m.queues[old_first].backlog;
        let mut last = stale(&m);
        while stale(&m) > 0.0 {
            m.step(t);
            t += dt;
            assert!(stale(&m) <= last + 1e-6, "the old path took new data");
            last = stale(&m);
            assert!(t < 5_000_000_000, "the old path never drained");
        }
        while m.stats().jobs[0].completed == 0 {
            m.step(t);
            t += dt;
            assert!(t < 10_000_000_000, "the flow never completed");
        }
        assert!(m.queues[new].tx_bytes > 0.0);
        assert_eq!(m.stats().jobs[0].completed, 1);
        // Every octet once: delivered equals the size, and the two second hops carried at
        // least that much (line octets; drops are sent again).
        let size = 4.0 * 1024.0 * 1024.0;
        assert!(
            (m.flows[0].delivered - size).abs() < 1.0,
            "{}",
            m.flows[0].delivered
        );
        let carried = (m.queues[old].tx_bytes + m.queues[new].tx_bytes) * m.spec().goodput;
        assert!(carried >= size - 1.0, "{carried} < {size}");
    }

    /// `source_gbps`: a source's flows send no more than it in all, without a loss.
    #[test]
    fn the_source_limit_caps_what_a_leaf_sends() {
        let (mut m, sc) = model("source_gbps = 0.05", 8, 64.0);
        let (s2, l1, l2) = (node(&sc, "S2"), node(&sc, "L1"), node(&sc, "L2"));
        // Every flow on S2's path at 100 Mbit/s: the limit, not a queue, is the bottleneck.
        m.set_weights(l1, l2, Some(vec![0, 1]), 0);
        let dt = m.spec().dt_ns;
        let q1 = m.queue_index(l1, s2).unwrap();
        let mut t = 0;
        while t < 2_000_000_000 {
            m.step(t);
            t += dt;
        }
        let before = m.queues[q1].tx_bytes;
        while t < 4_000_000_000 {
            m.step(t);
            t += dt;
        }
        let line_bps = (m.queues[q1].tx_bytes - before) * 8.0 / 2.0;
        let limit = 0.05e9 / m.spec().goodput;
        assert!(
            (0.95 * limit..=1.001 * limit).contains(&line_bps),
            "{line_bps} vs {limit}"
        );
        assert_eq!(m.queues[q1].drops, 0);
        assert_eq!(m.queues[m.queue_index(s2, l2).unwrap()].drops, 0);
        // Sender-limited flows keep the rate they can send, not slow start's.
        for f in &m.flows {
            assert!(f.rate <= 0.05e9 / 8.0 * 1.01, "{}", f.rate);
        }
    }
}
