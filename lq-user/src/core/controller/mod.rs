//! The deterministic, I/O-free controller core of `lqd` (seed 003 section 6): from the
//! path quality table to weighted-ECMP weights and the rtnetlink messages that program
//! them. Time is always an input, so everything here runs in virtual time under test.
//!
//! * [`config`]: parameters and their ranges (section 10).
//! * [`path_quality`]: NNH mapping and per-destination member quality (6.1-6.3).
//! * [`path_mirror`]: the control step's copy of the path table, refreshed where it can
//!   have moved (6.2, 6.5; issue 15).
//! * [`effective`]: the effective path table, failed and aged entries as LQS 0 / CL 7 (6.5).
//! * [`heartbeat`]: neighbor liveness, entry ageing, T_notify mismatch (6.5, 10).
//! * [`weights`]: targets, damping, quantisation, bucket remapping (6.3, 6.4).
//! * [`replace`]: which computed weight changes are written to the kernel's group (6.4;
//!   issue 41).
//! * [`boundary_wait`]: the remote nodes whose groups wait for their T_reweight boundary
//!   (6.4; issue 41).
//! * [`integral`]: the capacity x integral-controller weight function (4.1, issue 12).
//! * [`local_quality`]: local_quality(S) measured on the leaf's uplinks (6.3, Appendix A).

pub mod boundary_wait;
pub mod config;
pub mod effective;
pub mod heartbeat;
pub mod integral;
pub mod local_quality;
pub mod path_mirror;
pub mod path_quality;
pub mod replace;
pub mod weights;
