//! The role shells: each owns the state of one role, feeds the deterministic [`crate::core`]
//! with what [`crate::sys`] reads and hands `sys` what the core decides. No `unsafe`, no raw
//! system calls of their own.
//!
//! * [`load_balancer`]: the leaf (seed 003 section 6) and its slow plane (4.1).
//! * [`helper`]: the spine (Appendix A, 7.2).
//! * [`pfc`]: PFC counting and IPFIX export (seed 000).

pub mod helper;
pub mod load_balancer;
pub mod pfc;
