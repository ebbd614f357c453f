//! The scenario file of `lqd sim` (TOML) and its validation into a [`Scenario`].
//!
//! # Format
//!
//! ```toml
//! name = "appendix-b"      # optional, defaults to the file name
//! duration_ms = 800        # virtual time simulated
//! seed = 7                 # periodic-advertisement jitter and link loss (seed 003 7.2)
//! every_ms = 100           # optional: also print every line every N ms
//!
//! [params]                 # every key optional; defaults are seed 003's (section 10, App. A)
//! t_sample_ms = 2          # A.1 T_sample (1-5 ms)
//! alpha_rise = 0.5         # A.3
//! alpha_fall = 0.1         # A.3
//! t_hold_down_ms = 100     # A.6
//! t_notify_ms = 20         # 7.2 / 10
//! change_threshold = 25    # 7.2 / 10
//! miss_count = 3           # 6.5 / 10
//! t_reweight_ms = 20       # 6.4 / 10
//! gain = 0.5               # 6.4 g
//! max_buffer_bytes = 1000000  # the queue's buffer, D = queue_depth / max_buffer (A.2)
//! delay_ms = 0             # default one-way delivery delay of an advertisement
//! loss = 0.0               # default probability that one datagram is lost
//!
//! [[nodes]]                # a group of nodes: explicit names ...
//! names = ["S1", "S2"]
//! tier = 1                 # 0 leaves, 1 spines, 2 super-spines
//! group = "spines"         # optional; selectors may say "@spines"
//! [[nodes]]                # ... or generated names prefix1..prefixN
//! prefix = "L"
//! count = 4
//! tier = 0
//! group = "leaves"
//!
//! [[links]]                # every a x b pair gets one bidirectional link
//! a = "@spines"            # a selector: a node name, "@group", or a list of them
//! b = ["L1", "L2"]
//! capacity_gbps = 400      # default 400 (seed 003 Appendix B)
//! delay_ms = 0             # optional, overrides [params] delay_ms for these links
//! loss = 0.0               # optional, overrides [params] loss
//!
//! [[metrics]]              # a time series for every directed link from -> to
//! from = "S2"
//! to = "L4"
//! kind = "smoothed"        # "smoothed" (default) or "raw"
//! segments = [
//!   { at_ms = 0, u = 0.07 },
//!   { at_ms = 102, u = 0.55, d = 0.30, e = 0.15 },   # f and x default to 0 / false
//! ]
//!
//! [[feedback]]             # a fluid load model, see below
//! destination = "LD"
//! sources = "@sources"
//! offered_gbps = 10
//! knee = 0.8
//! background = [{ via = "S2", at_ms = 100, gbps = 200 }]
//!
//! [[watch]]                # series summarised in the Summary (reversals, settling)
//! node = "L1"
//! destination = "LD"
//! next_hop = "S2"
//! from_ms = 100
//! tolerance = 0.01
//!
//! [[variant]]              # named overrides of [params], selected with --variant
//! name = "undamped"
//! gain = 1.0
//! t_reweight_ms = 20
//! ```
//!
//! # Roles (seed 003 sections 4.2, 8, 9)
//!
//! Roles follow from the tiers: a node with lower-tier neighbours is a helper and
//! advertises the LQS/CL of its links to them, to them (link-local, 7.3); a node with
//! higher-tier neighbours is a load-balancer over those uplinks. Both: dual mode (section 9).
//! A load-balancer's destinations are the nodes of its own tier that one of its uplink
//! helpers has a link to; the NNH (6.1) of such a destination is the destination itself.
//! At most one link per pair of nodes (next hops are named by node).
//!
//! # Metrics of a directed link
//!
//! A sample at time t (every T_sample from 0) measures the interval (t - T_sample, t]; its
//! values come from the segment in force at the interval's start. The first sample only
//! sets the counter baseline (A.2 works on deltas).
//!
//! * `kind = "smoothed"`: the segment gives the smoothed-metric targets U, D, E, F (A.3)
//!   and the drop indicator X. Each sample the simulator picks the raw value that brings
//!   the pipeline's current smoothed value to the target, i.e. solves A.3's
//!   `M_smooth = alpha * M_raw + (1 - alpha) * M_prev` for `M_raw` (alpha_rise when rising,
//!   alpha_fall otherwise) and clamps it to [0, 1]. A reachable target is therefore hit in
//!   one sample, an unreachable one as fast as A.3 allows: a rise from 0.07 to 0.55 needs two
//!   samples, a fall decays with alpha_fall ("slow EWMA decay", B.4).
//! * `kind = "raw"`: the segment gives the raw per-sample metrics of A.2 directly.
//!
//! Either way the raw metrics are turned into free-running counters (TX octets, ECN marked
//! and eligible, pause time, drops) and a queue gauge, which the real
//! [`crate::core::helper::pipeline::LinkPipeline`] turns back into metrics. A link without a series
//! is idle (LQS 255). Helper links are always sampled; a load-balancer's uplink is sampled
//! (its pipeline LQS becomes the local DLB quality of 6.3) only when it has a series,
//! otherwise its local quality is 255.
//!
//! # Feedback (fluid load model)
//!
//! Each source leaf offers `offered_gbps` to `destination`, split over its uplinks by its
//! currently applied weights for that destination (equal before the first application).
//! The link from helper S to the destination then carries
//! `load(S) = background(S) + sum over sources of weight(src, S) * offered_gbps`, and its raw
//! metrics each sample are `U = min(1, o)`, `D = clamp(queue_gain * (o - knee) / (1 - knee))`,
//! `E = clamp(ecn_gain * (o - knee) / (1 - knee))`, F = 0, X = 0, with `o = load / capacity`
//! (the offered utilisation, which may exceed 1). `background` entries are steps of extra
//! load on the link `via -> destination` from `at_ms` on. Feedback replaces any `[[metrics]]`
//! of those links.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::SimError;
use crate::core::controller::config::{ControllerConfig, IntegralParams, WeightFunction};
use crate::core::controller::replace::{ReplaceMode, ReplacePolicy};
use crate::core::helper::params::HelperParams;

/// `[params]` and `[[variant]]` keys; every one optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamsFile {
    t_sample_ms: Option<f64>,
    alpha_rise: Option<f64>,
    alpha_fall: Option<f64>,
    t_hold_down_ms: Option<f64>,
    t_notify_ms: Option<f64>,
    change_threshold: Option<u8>,
    miss_count: Option<u8>,
    t_reweight_ms: Option<f64>,
    gain: Option<f64>,
    max_buffer_bytes: Option<u64>,
    delay_ms: Option<f64>,
    loss: Option<f64>,
    diagnostics: Option<bool>,
    slow_plane_capacity: Option<bool>,
    weight_function: Option<String>,
    integral_deadband: Option<f64>,
    integral_decrease: Option<f64>,
    integral_increase: Option<f64>,
    integral_floor: Option<f64>,
    integral_ceiling: Option<f64>,
    integral_floor_estimated: Option<f64>,
    integral_hysteresis: Option<f64>,
    balancing: Option<String>,
    replace: Option<String>,
    hysteresis_buckets: Option<f64>,
}

impl ParamsFile {
    fn overlay(&self, o: &ParamsFile) -> ParamsFile {
        ParamsFile {
            t_sample_ms: o.t_sample_ms.or(self.t_sample_ms),
            alpha_rise: o.alpha_rise.or(self.alpha_rise),
            alpha_fall: o.alpha_fall.or(self.alpha_fall),
            t_hold_down_ms: o.t_hold_down_ms.or(self.t_hold_down_ms),
            t_notify_ms: o.t_notify_ms.or(self.t_notify_ms),
            change_threshold: o.change_threshold.or(self.change_threshold),
            miss_count: o.miss_count.or(self.miss_count),
            t_reweight_ms: o.t_reweight_ms.or(self.t_reweight_ms),
            gain: o.gain.or(self.gain),
            max_buffer_bytes: o.max_buffer_bytes.or(self.max_buffer_bytes),
            delay_ms: o.delay_ms.or(self.delay_ms),
            loss: o.loss.or(self.loss),
            diagnostics: o.diagnostics.or(self.diagnostics),
            slow_plane_capacity: o.slow_plane_capacity.or(self.slow_plane_capacity),
            weight_function: o.weight_function.clone().or(self.weight_function.clone()),
            integral_deadband: o.integral_deadband.or(self.integral_deadband),
            integral_decrease: o.integral_decrease.or(self.integral_decrease),
            integral_increase: o.integral_increase.or(self.integral_increase),
            integral_floor: o.integral_floor.or(self.integral_floor),
            integral_ceiling: o.integral_ceiling.or(self.integral_ceiling),
            integral_floor_estimated: o.integral_floor_estimated.or(self.integral_floor_estimated),
            integral_hysteresis: o.integral_hysteresis.or(self.integral_hysteresis),
            balancing: o.balancing.clone().or(self.balancing.clone()),
            replace: o.replace.clone().or(self.replace.clone()),
            hysteresis_buckets: o.hysteresis_buckets.or(self.hysteresis_buckets),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: String,
    #[serde(flatten)]
    params: ParamsFile,
}

/// One selector string or a list of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum SelectorValue {
    One(String),
    Many(Vec<String>),
}

/// A selector with its position in the file.
type Selector = Spanned<SelectorValue>;

fn items(s: &Selector) -> Vec<&String> {
    match s.get_ref() {
        SelectorValue::One(x) => vec![x],
        SelectorValue::Many(v) => v.iter().collect(),
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesFile {
    names: Option<Vec<Spanned<String>>>,
    prefix: Option<Spanned<String>>,
    count: Option<u32>,
    tier: u8,
    group: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinksFile {
    a: Selector,
    b: Selector,
    capacity_gbps: Option<f64>,
    delay_ms: Option<f64>,
    loss: Option<f64>,
}

/// One segment of a metrics time series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// Start of the segment (ms of virtual time).
    pub at_ms: f64,
    /// Utilisation U.
    #[serde(default)]
    pub u: f64,
    /// Normalised queue depth D.
    #[serde(default)]
    pub d: f64,
    /// ECN marking rate E.
    #[serde(default)]
    pub e: f64,
    /// PFC pause fraction F.
    #[serde(default)]
    pub f: f64,
    /// Drops active X.
    #[serde(default)]
    pub x: bool,
}

/// How a segment's values are meant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesKind {
    /// Smoothed-metric targets (A.3 output), converted into raw samples.
    #[default]
    Smoothed,
    /// Raw per-sample metrics (A.2).
    Raw,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFile {
    from: Selector,
    to: Selector,
    #[serde(default)]
    kind: SeriesKind,
    segments: Spanned<Vec<Segment>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackgroundFile {
    via: Spanned<String>,
    at_ms: f64,
    gbps: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FeedbackFile {
    destination: Spanned<String>,
    sources: Selector,
    offered_gbps: Spanned<f64>,
    knee: Option<f64>,
    queue_gain: Option<f64>,
    ecn_gain: Option<f64>,
    #[serde(default)]
    background: Vec<BackgroundFile>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchFile {
    node: Spanned<String>,
    destination: Spanned<String>,
    next_hop: Spanned<String>,
    from_ms: Option<f64>,
    tolerance: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    duration_ms: Spanned<f64>,
    seed: Option<u64>,
    every_ms: Option<Spanned<f64>>,
    #[serde(default)]
    params: ParamsFile,
    #[serde(default)]
    nodes: Vec<NodesFile>,
    #[serde(default)]
    links: Vec<LinksFile>,
    #[serde(default)]
    metrics: Vec<MetricsFile>,
    #[serde(default)]
    feedback: Vec<FeedbackFile>,
    #[serde(default)]
    watch: Vec<WatchFile>,
    #[serde(default)]
    variant: Vec<VariantFile>,
    elastic: Option<ElasticFile>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ElasticFile {
    dt_ms: Option<f64>,
    mss_bytes: Option<f64>,
    base_rtt_ms: Option<f64>,
    buffer_ms: Option<f64>,
    beta: Option<f64>,
    increase_mss_per_rtt: Option<f64>,
    goodput: Option<f64>,
    source_gbps: Option<f64>,
    sample_jitter: Option<f64>,
    buckets: Option<u16>,
    idle_timer_ms: Option<f64>,
    unbalanced_timer_ms: Option<f64>,
    sample_ms: Option<f64>,
    watch_source: Spanned<String>,
    watch_destination: Spanned<String>,
    degraded: Spanned<String>,
    #[serde(default)]
    job: Vec<JobFile>,
    #[serde(default)]
    poisson: Vec<PoissonFile>,
    #[serde(default)]
    capacity: Vec<CapacityFile>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    name: Option<String>,
    sources: Selector,
    destination: Spanned<String>,
    at_ms: f64,
    flows: u32,
    size_mib: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoissonFile {
    name: Option<String>,
    sources: Selector,
    destination: Spanned<String>,
    at_ms: f64,
    duration_ms: f64,
    rate_per_s: f64,
    size_mib: f64,
    pacing_mbps: Option<f64>,
    seed: Option<u64>,
    window_from_ms: Option<f64>,
    window_to_ms: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityFile {
    from: Spanned<String>,
    to: Spanned<String>,
    at_ms: f64,
    gbps: f64,
}

/// How a source leaf spreads its elastic flows over its uplinks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balancing {
    /// The load-balancer's applied weights (the weight function under test).
    #[default]
    Lq,
    /// Equal weights.
    Ecmp,
    /// Weights proportional to the path capacity `min(uplink, spine -> destination)`.
    Static,
}

/// Flows started together.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Its name in the summary.
    pub name: String,
    /// Source leaves (flows spread round-robin over them).
    pub sources: Vec<usize>,
    /// Destination leaf.
    pub destination: usize,
    /// Start (ns).
    pub at_ns: u64,
    /// Number of flows.
    pub flows: u32,
    /// Bytes per flow.
    pub size_bytes: f64,
}

/// Poisson flow arrivals.
#[derive(Clone, Debug, PartialEq)]
pub struct Poisson {
    /// Its name in the summary.
    pub name: String,
    /// Source leaves (arrivals spread round-robin).
    pub sources: Vec<usize>,
    /// Destination leaf.
    pub destination: usize,
    /// First possible arrival (ns).
    pub at_ns: u64,
    /// Arrivals stop after this long (ns).
    pub duration_ns: u64,
    /// Mean arrivals per second.
    pub rate_per_s: f64,
    /// Bytes per flow.
    pub size_bytes: f64,
    /// Sender pacing (bit/s), if any.
    pub pacing_bps: Option<f64>,
    /// RNG seed of the arrivals.
    pub seed: u64,
    /// Window (ns) over which weight swing and degraded share are reported.
    pub window: (u64, u64),
}

/// A capacity step of a directed link (a shaping rate change).
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityStep {
    /// From.
    pub from: usize,
    /// To.
    pub to: usize,
    /// When (ns).
    pub at_ns: u64,
    /// New capacity (Gbps).
    pub gbps: f64,
}

/// The elastic (TCP-like fluid) load model, see docs/sim.md.
#[derive(Clone, Debug, PartialEq)]
pub struct Elastic {
    /// Fluid step (ns).
    pub dt_ns: u64,
    /// Segment size (bytes): the additive increase unit.
    pub mss_bytes: f64,
    /// Round-trip time without queueing (s).
    pub base_rtt_s: f64,
    /// Every queue holds this many seconds of its rate (tbf `latency`).
    pub buffer_s: f64,
    /// Multiplicative decrease factor on loss.
    pub beta: f64,
    /// Additive increase per RTT, in segments.
    pub increase_mss_per_rtt: f64,
    /// Payload share of the line rate.
    pub goodput: f64,
    /// What one source (the hosts behind a leaf) can send in all, bit/s of payload; `None`:
    /// no limit. The sender backs off without a loss (its own CPU or socket buffers): the
    /// flows' offers are scaled down together.
    pub source_bps: Option<f64>,
    /// How far (fraction of T_sample, in [0, 0.5]) the TX counter's view of a sample
    /// boundary moves at random (`engine::CounterJitter`); 0: exact counters.
    pub sample_jitter: f64,
    /// Buckets of every resilient group.
    pub buckets: u16,
    /// Resilient idle timer (ns).
    pub idle_timer_ns: u64,
    /// Resilient unbalanced timer (ns, 0: never).
    pub unbalanced_timer_ns: u64,
    /// Share sampling period for the weight swing (ns).
    pub sample_ns: u64,
    /// The load-balancer whose shares are measured.
    pub watch_source: usize,
    /// Its destination.
    pub watch_destination: usize,
    /// The degraded spine whose share is reported.
    pub degraded: usize,
    /// Jobs.
    pub jobs: Vec<Job>,
    /// Poisson loads.
    pub poisson: Vec<Poisson>,
    /// Capacity steps, sorted by time.
    pub capacity: Vec<CapacityStep>,
}

/// The resolved parameters of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimParams {
    /// The helper pipeline and advertiser parameters (Appendix A, 7.2).
    pub helper: HelperParams,
    /// The load-balancer parameters (6.3-6.5).
    pub controller: ControllerConfig,
    /// Buffer size of every queue.
    pub max_buffer_bytes: u64,
    /// How elastic flows are spread (`balancing`).
    pub balancing: Balancing,
    /// The load-balancers know each spine -> remote link's capacity from the slow plane
    /// (`slow_plane_capacity`: the BGP Link Bandwidth community of seed 003 section 4.1,
    /// following capacity steps at once), as `[[path-capacity]]` or BMP give lqd.
    pub slow_plane_capacity: bool,
    /// Which computed weight changes reach the groups (`replace`, `hysteresis_buckets`;
    /// lqd's `[nexthop-group]` keys, issue 41).
    pub replace: ReplacePolicy,
}

/// A node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// Its name.
    pub name: String,
    /// Its tier (0 = leaves).
    pub tier: u8,
}

/// A bidirectional link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// One end (node index).
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Line rate (Gbps), both ways.
    pub capacity_gbps: f64,
    /// One-way delivery delay of advertisements (ns).
    pub delay_ns: u64,
    /// Probability that one datagram is lost.
    pub loss: f64,
}

/// A metrics time series of one directed link.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Segments sorted by start time, each with its kind.
    pub segments: Vec<(SeriesKind, Segment)>,
}

/// A background load step of a feedback model.
#[derive(Clone, Debug, PartialEq)]
pub struct Background {
    /// The helper whose link to the destination carries it.
    pub via: usize,
    /// From when (ns).
    pub at_ns: u64,
    /// How much (Gbps).
    pub gbps: f64,
}

/// A fluid feedback model (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Feedback {
    /// The destination node.
    pub destination: usize,
    /// The source load-balancers.
    pub sources: Vec<usize>,
    /// Offered load per source (Gbps).
    pub offered_gbps: f64,
    /// Offered utilisation above which queue and ECN build.
    pub knee: f64,
    /// Slope of D above the knee (per unit of (o - knee) / (1 - knee)).
    pub queue_gain: f64,
    /// Slope of E above the knee.
    pub ecn_gain: f64,
    /// Background load steps.
    pub background: Vec<Background>,
}

/// A weight series summarised in the [`super::Summary`].
#[derive(Clone, Debug, PartialEq)]
pub struct Watch {
    /// The load-balancer.
    pub node: usize,
    /// The destination.
    pub destination: usize,
    /// The next hop whose applied weight is watched.
    pub next_hop: usize,
    /// Start of the analysed window (ms).
    pub from_ms: f64,
    /// Settling band (fraction of 1) around the final weight.
    pub tolerance: f64,
}

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// The variant applied, if any.
    pub variant: Option<String>,
    /// Virtual time simulated (ns).
    pub duration_ns: u64,
    /// RNG seed.
    pub seed: u64,
    /// Print every line every this many ns as well (`None`: on change only).
    pub every_ns: Option<u64>,
    /// Parameters.
    pub params: SimParams,
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Links.
    pub links: Vec<LinkSpec>,
    /// Metrics per directed link `(from, to)`.
    pub metrics: BTreeMap<(usize, usize), Series>,
    /// Feedback models.
    pub feedback: Vec<Feedback>,
    /// Watched series.
    pub watches: Vec<Watch>,
    /// The elastic load model, if any.
    pub elastic: Option<Elastic>,
    base_params: ParamsFile,
    variants: Vec<VariantFile>,
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map_or(0, |s| s.bytes().filter(|&b| b == b'\n').count())
        + 1
}

fn ms_to_ns(ms: f64) -> Option<u64> {
    (0.0..1.0e12)
        .contains(&ms)
        .then(|| (ms * 1.0e6).round() as u64)
}

fn duration_ms(ms: f64) -> Option<Duration> {
    ms_to_ns(ms).map(Duration::from_nanos)
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn err<T>(&self, offset: usize, msg: impl Into<String>) -> Result<T, SimError> {
        Err(SimError::Scenario {
            origin: self.origin.to_string(),
            line: line_of(self.text, offset),
            message: msg.into(),
        })
    }
}

impl Scenario {
    /// Parses and validates scenario text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, SimError> {
        let cx = Ctx { text, origin };
        let file: File = match toml::from_str(text) {
            Ok(f) => f,
            Err(e) => {
                let line = e.span().map_or(0, |s| line_of(text, s.start));
                return Err(SimError::Scenario {
                    origin: origin.to_string(),
                    line,
                    message: e.message().to_string(),
                });
            }
        };
        build(&cx, file)
    }

    /// Names of the `[[variant]]`s.
    pub fn variant_names(&self) -> Vec<&str> {
        self.variants.iter().map(|v| v.name.as_str()).collect()
    }

    /// This scenario with the `[params]` overrides of variant `name`.
    pub fn with_variant(&self, name: &str) -> Result<Self, SimError> {
        let v = self
            .variants
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| SimError::UnknownVariant(name.to_string()))?;
        let merged = self.base_params.overlay(&v.params);
        let mut s = self.clone();
        s.params = resolve_params(&merged)
            .map_err(|m| SimError::Params(format!("variant {name}: {m}")))?;
        s.variant = Some(name.to_string());
        Ok(s)
    }

    /// Node index by name.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

fn resolve_params(p: &ParamsFile) -> Result<SimParams, String> {
    let mut helper = HelperParams::default();
    let mut controller = ControllerConfig::default();
    let dur = |v: Option<f64>, name: &str, d: Duration| -> Result<Duration, String> {
        match v {
            None => Ok(d),
            Some(ms) => duration_ms(ms).ok_or_else(|| format!("{name} = {ms} is not a duration")),
        }
    };
    helper.t_sample = dur(p.t_sample_ms, "t_sample_ms", helper.t_sample)?;
    helper.alpha_rise = p.alpha_rise.unwrap_or(helper.alpha_rise);
    helper.alpha_fall = p.alpha_fall.unwrap_or(helper.alpha_fall);
    helper.t_hold_down = dur(p.t_hold_down_ms, "t_hold_down_ms", helper.t_hold_down)?;
    helper.t_notify = dur(p.t_notify_ms, "t_notify_ms", helper.t_notify)?;
    helper.change_threshold = p.change_threshold.unwrap_or(helper.change_threshold);
    controller.t_notify = helper.t_notify;
    // Section 6.4: T_reweight is RECOMMENDED to equal T_notify.
    controller.t_reweight = dur(p.t_reweight_ms, "t_reweight_ms", helper.t_notify)?;
    controller.miss_count = p.miss_count.unwrap_or(controller.miss_count);
    controller.gain = p.gain.unwrap_or(controller.gain);
    helper.diagnostics = p.diagnostics.unwrap_or(helper.diagnostics);
    controller.weight_function = match p.weight_function.as_deref() {
        None | Some("seed") => WeightFunction::Seed,
        Some("integral") => {
            let d = IntegralParams::default();
            WeightFunction::Integral(IntegralParams {
                deadband: p.integral_deadband.unwrap_or(d.deadband),
                decrease: p.integral_decrease.unwrap_or(d.decrease),
                increase: p.integral_increase.unwrap_or(d.increase),
                floor: p.integral_floor.unwrap_or(d.floor),
                ceiling: p.integral_ceiling.unwrap_or(d.ceiling),
                floor_estimated: p.integral_floor_estimated.unwrap_or(d.floor_estimated),
                hysteresis: p.integral_hysteresis.unwrap_or(d.hysteresis),
                capacity_half_life: d.capacity_half_life,
            })
        }
        Some(other) => {
            return Err(format!(
                "weight_function = {other:?}: expected \"seed\" or \"integral\""
            ));
        }
    };
    let balancing = match p.balancing.as_deref() {
        None | Some("lq") => Balancing::Lq,
        Some("ecmp") => Balancing::Ecmp,
        Some("static") => Balancing::Static,
        Some(other) => {
            return Err(format!(
                "balancing = {other:?}: expected \"lq\", \"ecmp\" or \"static\""
            ));
        }
    };
    let mut replace = ReplacePolicy::default();
    match p.replace.as_deref() {
        None | Some("forwarding-change") => {}
        Some("every-step") => replace.mode = ReplaceMode::EveryStep,
        Some(other) => {
            return Err(format!(
                "replace = {other:?}: expected \"forwarding-change\" or \"every-step\""
            ));
        }
    }
    if let Some(h) = p.hysteresis_buckets {
        if !(0.0..=4.0).contains(&h) {
            return Err(format!("hysteresis_buckets = {h}: allowed 0..=4"));
        }
        replace.hysteresis_buckets = h;
    }
    helper.validate().map_err(|e| e.to_string())?;
    controller.validate().map_err(|e| e.to_string())?;
    if helper.t_sample.is_zero() {
        return Err("t_sample_ms must be positive".into());
    }
    let max_buffer_bytes = p.max_buffer_bytes.unwrap_or(1_000_000);
    if max_buffer_bytes == 0 {
        return Err("max_buffer_bytes must be positive".into());
    }
    Ok(SimParams {
        helper,
        controller,
        max_buffer_bytes,
        balancing,
        slow_plane_capacity: p.slow_plane_capacity.unwrap_or(false),
        replace,
    })
}

fn check_unit(cx: &Ctx, at: usize, what: &str, v: f64) -> Result<(), SimError> {
    if !(0.0..=1.0).contains(&v) {
        return cx.err(at, format!("{what} = {v} is outside [0, 1]"));
    }
    Ok(())
}

/// The scenario the file describes, checked: each section in its own function, in the
/// file's order of dependence (nodes, then the links between them, then what names nodes
/// and links: metrics, feedback, watches, the elastic model), then the variants.
fn build(cx: &Ctx, f: File) -> Result<Scenario, SimError> {
    let params =
        resolve_params(&f.params).map_err(|m| SimError::Params(format!("[params]: {m}")))?;
    let Some(duration_ns) = ms_to_ns(*f.duration_ms.get_ref()).filter(|d| *d > 0) else {
        return cx.err(
            f.duration_ms.span().start,
            "duration_ms must be a positive number",
        );
    };
    let every_ns = match &f.every_ms {
        None => None,
        Some(e) => match ms_to_ns(*e.get_ref()).filter(|d| *d > 0) {
            Some(n) => Some(n),
            None => return cx.err(e.span().start, "every_ms must be a positive number"),
        },
    };
    let default_delay = f.params.delay_ms.unwrap_or(0.0);
    let default_loss = f.params.loss.unwrap_or(0.0);
    if ms_to_ns(default_delay).is_none() || !(0.0..=1.0).contains(&default_loss) {
        return Err(SimError::Params(
            "[params]: delay_ms must be >= 0 and loss within [0, 1]".into(),
        ));
    }
    let nodes = NodeTable::build(cx, &f.nodes)?;
    let links = LinkTable::build(cx, &f.links, &nodes, default_delay, default_loss)?;
    let metrics = build_metrics(cx, &f.metrics, &nodes, &links)?;
    let feedback = build_feedback(cx, &f.feedback, &nodes, &links)?;
    let watches = f
        .watch
        .iter()
        .map(|w| {
            Ok(Watch {
                node: nodes.one(cx, &w.node)?,
                destination: nodes.one(cx, &w.destination)?,
                next_hop: nodes.one(cx, &w.next_hop)?,
                from_ms: w.from_ms.unwrap_or(0.0),
                tolerance: w.tolerance.unwrap_or(0.01),
            })
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    let elastic = match &f.elastic {
        None => None,
        Some(e) => Some(build_elastic(cx, e, &nodes, &links)?),
    };
    check_variants(&f)?;
    Ok(Scenario {
        name: f.name.clone().unwrap_or_default(),
        variant: None,
        duration_ns,
        seed: f.seed.unwrap_or(1),
        every_ns,
        params,
        nodes: nodes.nodes,
        links: links.links,
        metrics,
        feedback,
        watches,
        elastic,
        base_params: f.params.clone(),
        variants: f.variant.clone(),
    })
}

/// `[[nodes]]`: the nodes in definition order, by name and by group; every later section
/// names nodes through [`Self::select`] (`"S1"`, `"@spines"`, lists) or [`Self::one`].
struct NodeTable {
    nodes: Vec<NodeSpec>,
    by_name: HashMap<String, usize>,
    groups: HashMap<String, Vec<usize>>,
}

impl NodeTable {
    fn build(cx: &Ctx, blocks: &[NodesFile]) -> Result<Self, SimError> {
        let mut t = Self {
            nodes: Vec::new(),
            by_name: HashMap::new(),
            groups: HashMap::new(),
        };
        for g in blocks {
            let mut names: Vec<(String, usize)> = Vec::new();
            match (&g.names, &g.prefix, g.count) {
                (Some(list), None, None) => {
                    for n in list {
                        names.push((n.get_ref().clone(), n.span().start));
                    }
                }
                (None, Some(p), Some(c)) => {
                    for i in 1..=c {
                        names.push((format!("{}{i}", p.get_ref()), p.span().start));
                    }
                }
                _ => {
                    let at = g
                        .names
                        .as_ref()
                        .and_then(|l| l.first().map(|n| n.span().start))
                        .or(g.prefix.as_ref().map(|p| p.span().start))
                        .unwrap_or(0);
                    return cx.err(
                        at,
                        "[[nodes]] needs either `names` or both `prefix` and `count`",
                    );
                }
            }
            for (name, at) in names {
                if name.is_empty() || name.starts_with('@') {
                    return cx.err(at, format!("invalid node name {name:?}"));
                }
                if t.by_name.insert(name.clone(), t.nodes.len()).is_some() {
                    return cx.err(at, format!("node {name} is defined twice"));
                }
                if let Some(gr) = &g.group {
                    t.groups.entry(gr.clone()).or_default().push(t.nodes.len());
                }
                t.nodes.push(NodeSpec { name, tier: g.tier });
            }
        }
        if t.nodes.len() > 0xFFFF {
            return Err(SimError::Params("at most 65535 nodes".into()));
        }
        Ok(t)
    }

    /// The nodes a selector names: node names and `@group`s.
    fn select(&self, cx: &Ctx, s: &Selector) -> Result<Vec<usize>, SimError> {
        let mut out = Vec::new();
        for name in items(s) {
            if let Some(g) = name.strip_prefix('@') {
                match self.groups.get(g) {
                    Some(v) => out.extend_from_slice(v),
                    None => return cx.err(s.span().start, format!("unknown group {name}")),
                }
            } else {
                match self.by_name.get(name) {
                    Some(&i) => out.push(i),
                    None => return cx.err(s.span().start, format!("unknown node {name}")),
                }
            }
        }
        Ok(out)
    }

    /// The one node `s` names.
    fn one(&self, cx: &Ctx, s: &Spanned<String>) -> Result<usize, SimError> {
        self.by_name.get(s.get_ref()).copied().map_or_else(
            || cx.err(s.span().start, format!("unknown node {}", s.get_ref())),
            Ok,
        )
    }

    fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }
}

/// `[[links]]`: at most one link per pair of nodes, always between two tiers.
struct LinkTable {
    links: Vec<LinkSpec>,
    /// The pairs of nodes `links` joins: (lower node index, higher).
    pairs: HashSet<(usize, usize)>,
}

impl LinkTable {
    fn build(
        cx: &Ctx,
        blocks: &[LinksFile],
        nodes: &NodeTable,
        default_delay: f64,
        default_loss: f64,
    ) -> Result<Self, SimError> {
        let mut t = Self {
            links: Vec::new(),
            pairs: HashSet::new(),
        };
        for l in blocks {
            let at = l.a.span().start;
            let capacity_gbps = l.capacity_gbps.unwrap_or(400.0);
            if !(capacity_gbps.is_finite() && capacity_gbps > 0.0) {
                return cx.err(at, "capacity_gbps must be positive");
            }
            let delay_ms = l.delay_ms.unwrap_or(default_delay);
            let Some(delay_ns) = ms_to_ns(delay_ms) else {
                return cx.err(at, "delay_ms must be a non-negative number");
            };
            let loss = l.loss.unwrap_or(default_loss);
            check_unit(cx, at, "loss", loss)?;
            for &a in &nodes.select(cx, &l.a)? {
                for &b in &nodes.select(cx, &l.b)? {
                    if a == b {
                        return cx.err(at, format!("link from {} to itself", nodes.name(a)));
                    }
                    let tier = nodes.nodes[a].tier;
                    if tier == nodes.nodes[b].tier {
                        return cx.err(
                            at,
                            format!(
                                "link {} - {} joins two nodes of tier {tier}: links go between tiers",
                                nodes.name(a),
                                nodes.name(b)
                            ),
                        );
                    }
                    if !t.pairs.insert((a.min(b), a.max(b))) {
                        return cx.err(
                            at,
                            format!(
                                "second link {} - {}: at most one link per pair of nodes",
                                nodes.name(a),
                                nodes.name(b)
                            ),
                        );
                    }
                    t.links.push(LinkSpec {
                        a,
                        b,
                        capacity_gbps,
                        delay_ns,
                        loss,
                    });
                }
            }
        }
        Ok(t)
    }

    /// Whether a link joins nodes `a` and `b` (either way).
    fn joins(&self, a: usize, b: usize) -> bool {
        self.pairs.contains(&(a.min(b), a.max(b)))
    }
}

/// `[[metrics]]`: each directed link's series of segments, sorted by start time.
fn build_metrics(
    cx: &Ctx,
    blocks: &[MetricsFile],
    nodes: &NodeTable,
    links: &LinkTable,
) -> Result<BTreeMap<(usize, usize), Series>, SimError> {
    let mut metrics: BTreeMap<(usize, usize), Series> = BTreeMap::new();
    for m in blocks {
        let at = m.segments.span().start;
        for s in m.segments.get_ref() {
            if ms_to_ns(s.at_ms).is_none() {
                return cx.err(at, format!("segment at_ms = {} is not a time", s.at_ms));
            }
            for (n, v) in [("u", s.u), ("d", s.d), ("e", s.e), ("f", s.f)] {
                check_unit(cx, at, n, v)?;
            }
        }
        for &a in &nodes.select(cx, &m.from)? {
            for &b in &nodes.select(cx, &m.to)? {
                if !links.joins(a, b) {
                    let at = m.from.span().start;
                    return cx.err(
                        at,
                        format!("no link between {} and {}", nodes.name(a), nodes.name(b)),
                    );
                }
                let series = metrics.entry((a, b)).or_insert(Series {
                    segments: Vec::new(),
                });
                for s in m.segments.get_ref() {
                    series.segments.push((m.kind, *s));
                }
            }
        }
    }
    for s in metrics.values_mut() {
        // Stable: at equal times the later block wins (it comes later, and the engine takes
        // the last segment that has started).
        s.segments.sort_by(|x, y| x.1.at_ms.total_cmp(&y.1.at_ms));
    }
    Ok(metrics)
}

/// `[[feedback]]`: closed-loop sources towards one destination, with their background
/// load.
fn build_feedback(
    cx: &Ctx,
    blocks: &[FeedbackFile],
    nodes: &NodeTable,
    links: &LinkTable,
) -> Result<Vec<Feedback>, SimError> {
    let mut feedback = Vec::new();
    for fb in blocks {
        let destination = nodes.one(cx, &fb.destination)?;
        let sources = nodes.select(cx, &fb.sources)?;
        let at = fb.offered_gbps.span().start;
        let offered_gbps = *fb.offered_gbps.get_ref();
        if !(offered_gbps.is_finite() && offered_gbps >= 0.0) {
            return cx.err(at, "offered_gbps must be >= 0");
        }
        let knee = fb.knee.unwrap_or(0.8);
        if !(0.0..1.0).contains(&knee) {
            return cx.err(at, "knee must be within [0, 1)");
        }
        let mut background = Vec::new();
        for b in &fb.background {
            let via = nodes.one(cx, &b.via)?;
            if !links.joins(via, destination) {
                return cx.err(
                    b.via.span().start,
                    "no link between `via` and the destination",
                );
            }
            let Some(at_ns) = ms_to_ns(b.at_ms) else {
                return cx.err(b.via.span().start, "at_ms is not a time");
            };
            if !(b.gbps.is_finite() && b.gbps >= 0.0) {
                return cx.err(b.via.span().start, "gbps must be >= 0");
            }
            background.push(Background {
                via,
                at_ns,
                gbps: b.gbps,
            });
        }
        feedback.push(Feedback {
            destination,
            sources,
            offered_gbps,
            knee,
            queue_gain: fb.queue_gain.unwrap_or(1.0),
            ecn_gain: fb.ecn_gain.unwrap_or(1.0),
            background,
        });
    }
    Ok(feedback)
}

/// `[[variant]]`: each one's parameters resolve over the base ones, and none varies a
/// per-link setting.
fn check_variants(f: &File) -> Result<(), SimError> {
    for v in &f.variant {
        if v.params.delay_ms.is_some() || v.params.loss.is_some() {
            return Err(SimError::Params(format!(
                "variant {}: delay_ms and loss are per-link settings and cannot vary",
                v.name
            )));
        }
        resolve_params(&f.params.overlay(&v.params))
            .map_err(|m| SimError::Params(format!("variant {}: {m}", v.name)))?;
    }
    Ok(())
}

fn build_elastic(
    cx: &Ctx,
    e: &ElasticFile,
    nodes: &NodeTable,
    links: &LinkTable,
) -> Result<Elastic, SimError> {
    let one = |s: &Spanned<String>| nodes.one(cx, s);
    let select = |s: &Selector| nodes.select(cx, s);
    let at = e.watch_source.span().start;
    let pos = |v: Option<f64>, d: f64, what: &str| -> Result<f64, SimError> {
        let x = v.unwrap_or(d);
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            cx.err(at, format!("[elastic] {what} must be positive"))
        }
    };
    let ns = |ms: f64, what: &str| -> Result<u64, SimError> {
        ms_to_ns(ms).map_or_else(|| cx.err(at, format!("{what} = {ms} is not a time")), Ok)
    };
    let dt_ns = ns(pos(e.dt_ms, 0.5, "dt_ms")?, "dt_ms")?.max(1);
    let beta = e.beta.unwrap_or(0.7);
    let goodput = e.goodput.unwrap_or(1448.0 / 1514.0);
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !((0.0..1.0).contains(&beta) && positive(goodput) && goodput <= 1.0) {
        return cx.err(at, "[elastic] beta must be in [0, 1) and goodput in (0, 1]");
    }
    let buckets = e.buckets.unwrap_or(256);
    if buckets == 0 {
        return cx.err(at, "[elastic] buckets must be positive");
    }
    let mut jobs = Vec::new();
    for (k, j) in e.job.iter().enumerate() {
        let sources = select(&j.sources)?;
        let destination = one(&j.destination)?;
        if sources.is_empty() || j.flows == 0 || !positive(j.size_mib) {
            return cx.err(
                j.destination.span().start,
                "[[elastic.job]] needs sources, flows and size_mib > 0",
            );
        }
        jobs.push(Job {
            name: j.name.clone().unwrap_or_else(|| format!("job{}", k + 1)),
            sources,
            destination,
            at_ns: ns(j.at_ms, "at_ms")?,
            flows: j.flows,
            size_bytes: j.size_mib * 1_048_576.0,
        });
    }
    let mut poisson = Vec::new();
    for (k, p) in e.poisson.iter().enumerate() {
        let sources = select(&p.sources)?;
        let destination = one(&p.destination)?;
        let bad = sources.is_empty()
            || !(p.rate_per_s.is_finite() && p.rate_per_s > 0.0)
            || !positive(p.size_mib)
            || p.pacing_mbps.is_some_and(|x| !positive(x));
        if bad {
            return cx.err(
                p.destination.span().start,
                "[[elastic.poisson]] needs sources, rate_per_s > 0, size_mib > 0, pacing_mbps > 0",
            );
        }
        let at_ns = ns(p.at_ms, "at_ms")?;
        let duration_ns = ns(p.duration_ms, "duration_ms")?;
        let window = (
            ns(p.window_from_ms.unwrap_or(p.at_ms), "window_from_ms")?,
            ns(
                p.window_to_ms.unwrap_or(p.at_ms + p.duration_ms),
                "window_to_ms",
            )?,
        );
        poisson.push(Poisson {
            name: p
                .name
                .clone()
                .unwrap_or_else(|| format!("poisson{}", k + 1)),
            sources,
            destination,
            at_ns,
            duration_ns,
            rate_per_s: p.rate_per_s,
            size_bytes: p.size_mib * 1_048_576.0,
            pacing_bps: p.pacing_mbps.map(|m| m * 1e6),
            seed: p.seed.unwrap_or(7),
            window,
        });
    }
    let mut capacity = Vec::new();
    for c in &e.capacity {
        let (from, to) = (one(&c.from)?, one(&c.to)?);
        if !links.joins(from, to) || !positive(c.gbps) {
            return cx.err(
                c.from.span().start,
                "[[elastic.capacity]] needs an existing link and gbps > 0",
            );
        }
        capacity.push(CapacityStep {
            from,
            to,
            at_ns: ns(c.at_ms, "at_ms")?,
            gbps: c.gbps,
        });
    }
    capacity.sort_by_key(|c| c.at_ns);
    Ok(Elastic {
        dt_ns,
        mss_bytes: pos(e.mss_bytes, 1448.0, "mss_bytes")?,
        base_rtt_s: pos(e.base_rtt_ms, 0.2, "base_rtt_ms")? / 1e3,
        buffer_s: pos(e.buffer_ms, 20.0, "buffer_ms")? / 1e3,
        beta,
        increase_mss_per_rtt: pos(e.increase_mss_per_rtt, 1.0, "increase_mss_per_rtt")?,
        goodput,
        source_bps: match e.source_gbps {
            None => None,
            Some(g) => Some(pos(Some(g), 1.0, "source_gbps")? * 1e9),
        },
        sample_jitter: {
            let j = e.sample_jitter.unwrap_or(0.0);
            if !(0.0..=0.5).contains(&j) {
                return cx.err(
                    at,
                    format!("[elastic] sample_jitter = {j} is outside [0, 0.5]"),
                );
            }
            j
        },
        buckets,
        idle_timer_ns: ns(e.idle_timer_ms.unwrap_or(1000.0), "idle_timer_ms")?,
        unbalanced_timer_ns: ns(
            e.unbalanced_timer_ms.unwrap_or(1000.0),
            "unbalanced_timer_ms",
        )?,
        sample_ns: ns(pos(e.sample_ms, 100.0, "sample_ms")?, "sample_ms")?.max(1),
        watch_source: one(&e.watch_source)?,
        watch_destination: one(&e.watch_destination)?,
        degraded: one(&e.degraded)?,
        jobs,
        poisson,
        capacity,
    })
}
