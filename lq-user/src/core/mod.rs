//! The deterministic core. Everything here is fed typed inputs with time as an argument
//! (nanoseconds on a monotonic clock) and returns typed decisions, so it runs in virtual
//! time under test and in the simulator exactly as in the daemon. It may import
//! `lq_common` and itself, nothing of `sys`, `roles`, `daemon`, `views` or `transport`, and
//! no crate that does I/O (the wall test in `tests/walls.rs` says which).
//!
//! * [`auth`]: key chains, the authentication trailer's MAC and its replay check (12.1).
//! * [`bmp`]: the NNH mapping learned through BMP (RFC 7854; section 6.1).
//! * [`controller`]: the load-balancer's controller (seed 003 section 6).
//! * [`helper`]: the helper's congestion pipeline and advertiser (Appendix A, 7.2).
//! * [`northbound`]: data paths, selections and read rules of the gNMI northbound (4.3, 12.2).
//! * [`pfc`]: the PFC counter model (seed 000 section 5).
//! * [`sim`]: the fabric simulator that drives both roles (`lqd sim`).
//! * [`report`]: an error and its causes in one log line.
//! * [`sorted`]: membership tests by merge against a sorted sequence.

pub mod auth;
pub mod bmp;
pub mod controller;
pub mod helper;
pub mod northbound;
pub mod pfc;
pub mod report;
pub mod sim;
pub mod sorted;
