//! `lqd`: the lq daemon. The library is sorted by walls: a file's folder says what it may
//! touch (docs/architecture.md draws the rooms and the allowed arrows; `tests/walls.rs`
//! checks them).
//!
//! * [`core`]: the deterministic protocol core: controller (seed 003 section 6), helper
//!   pipeline and advertiser (Appendix A, 7.2), PFC counter model (seed 000), simulator.
//!   Time is an input; no sockets, files, clocks, threads or `unsafe`.
//! * [`ipfix`]: the IPFIX codec (RFC 7011, seed 000): pure, like `core`.
//! * [`config`]: the configuration file, parsed and validated into typed settings.
//! * [`sys`]: every system call and every `unsafe`: netlink, BPF programs and maps, ioctls,
//!   clocks, socket options, privileges, scheduling.
//! * [`transport`]: IPFIX over UDP, TCP and TLS, on std sockets and rustls.
//! * [`roles`]: the load-balancer, helper and PFC shells: own the state of a role, feed
//!   `core` with what `sys` reads, and hand `sys` what `core` decides.
//! * [`daemon`]: the event loop and its tasks (timers, clients, monitors).
//! * [`views`]: show, YANG state, metrics and JSON renderings of typed snapshots.
//! * [`tools`]: offline commands: `decode`, pcap reading.
#![deny(unsafe_code)]
// The dev-dependencies serve the integration tests, not the library's unit tests.
#![cfg_attr(test, allow(unused_crate_dependencies))]

// A package's dependencies are shared by its targets: these two are used by the binary
// (tracing-subscriber, main.rs) and for a feature (rustls-pki-types' `std`, for reading
// PEM files through `rustls::pki_types`), not by a path in the library.
use rustls_pki_types as _;
use tracing_subscriber as _;
// The `lqd` binary's `completions` and `man` subcommands.
use clap_complete as _;
use clap_mangen as _;

pub mod config;
pub mod core;
pub mod daemon;
pub mod ipfix;
pub mod roles;
#[allow(unsafe_code)]
pub mod sys;
pub mod tools;
pub mod transport;
pub mod views;
