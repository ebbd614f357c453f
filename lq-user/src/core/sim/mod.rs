//! `lqd sim`: a virtual-time fabric simulator (no kernel, no sockets) that runs the real
//! deterministic cores of lq on a fabric of any size:
//!
//! * every helper (spine, super-spine, or dual-mode spine, seed 003 sections 4.2, 8 and 9)
//!   samples its egress links every T_sample through the real
//!   [`crate::core::helper::pipeline::LinkPipeline`] (Appendix A) and schedules and encodes
//!   advertisements with the real [`crate::core::helper::advertiser::Advertiser`] (7.2), jittered
//!   by a seeded RNG;
//! * every datagram is delivered in virtual time (optional per-link delay and loss) to the
//!   helper's lower-tier neighbours and decoded by the reference receiver
//!   [`lq_common::receive::process_payload`] into that node's in-memory path table (6.2);
//! * every load-balancer runs the real [`crate::core::controller::heartbeat::Heartbeat`] (6.5),
//!   [`crate::core::controller::path_quality::compute`] (6.1-6.3) and
//!   [`crate::core::controller::weights::WeightController`] (6.3, 6.4).
//!
//! The scenario format is documented in [`scenario`] and in `docs/sim.md`; the output is one
//! JSON object per line (see [`run`]).

pub mod elastic;
pub mod engine;
pub mod scenario;

use serde::Serialize;
use thiserror::Error;

pub use scenario::Scenario;

/// Why a scenario could not be loaded or run.
#[derive(Debug, Error)]
pub enum SimError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid scenario.
    #[error("{origin}:{line}: {message}")]
    Scenario {
        /// The file.
        origin: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Parameters outside the seed's ranges.
    #[error("invalid parameters: {0}")]
    Params(String),
    /// `--variant` names no `[[variant]]`.
    #[error("no variant named {0:?} in the scenario")]
    UnknownVariant(String),
    /// A core refused its configuration.
    #[error("node {node}: {message}")]
    Setup {
        /// The node.
        node: String,
        /// The error.
        message: String,
    },
    /// Writing the output failed.
    #[error("writing the output")]
    Output(#[from] std::io::Error),
}

/// Statistics of one watched weight series (`[[watch]]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct WatchStats {
    /// The load-balancer.
    pub node: String,
    /// The destination.
    pub destination: String,
    /// The next hop.
    pub next_hop: String,
    /// Applications of a new weight within the window.
    pub changes: u64,
    /// Direction changes of the applied weight (up then down or down then up).
    pub reversals: u64,
    /// Largest minus smallest applied weight within the window (fraction of 1).
    pub peak_to_peak: f64,
    /// From `from_ms` until the weight stays within `tolerance` of its final value (ms);
    /// 0 when it never left that band.
    pub settling_time_ms: f64,
    /// The weight at the end.
    pub final_weight: f64,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Summary {
    /// The scenario.
    pub scenario: String,
    /// The variant, if any.
    pub variant: Option<String>,
    /// Virtual time simulated (ms).
    pub end_ms: f64,
    /// Nodes, links.
    pub nodes: usize,
    /// Bidirectional links.
    pub links: usize,
    /// Lines written.
    pub lines: u64,
    /// Link samples taken (all pipelines).
    pub samples: u64,
    /// Periodic advertisements sent.
    pub periodic: u64,
    /// Triggered advertisements sent.
    pub triggered: u64,
    /// Datagrams delivered to a receiver.
    pub datagrams_delivered: u64,
    /// Datagrams lost on a link.
    pub datagrams_lost: u64,
    /// Datagrams the receiver accepted.
    pub datagrams_accepted: u64,
    /// Datagrams the receiver discarded.
    pub datagrams_discarded: u64,
    /// Weight applications (all load-balancers and destinations).
    pub applications: u64,
    /// Heartbeat failures (6.5).
    pub neighbor_failures: u64,
    /// The `[[watch]]` series.
    pub watches: Vec<WatchStats>,
    /// The elastic load model's results (`[elastic]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elastic: Option<elastic::ElasticStats>,
}

/// Runs `scenario` to its end, writing JSON lines to `out`:
///
/// * helper lines `{"t-ms", "node", "link", "lqs", "cl", "u", "d", "raw-u", "x"}` whenever a link's LQS or
///   (advertised) CL changes, `link` being the remote node's name;
/// * load-balancer lines `{"t-ms", "node", "destination", "targets", "weights"}` whenever
///   the target or applied weights of a destination change at 4 decimals, each a map of
///   next-hop node name to a fraction of 1 rounded to 4 decimals;
/// * with `every_ms`, every line every N ms as well.
pub fn run(scenario: &Scenario, out: &mut dyn std::io::Write) -> Result<Summary, SimError> {
    engine::Engine::new(scenario)?.run(out)
}
