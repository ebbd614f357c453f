//! The system-call layer: every system call and every `unsafe` block of `lqd` lives under
//! this folder (the crate denies `unsafe_code` everywhere else). Each module wraps one
//! kernel interface in a safe, typed API and reports failures as its own error type.
//!
//! * [`netlink`]: rtnetlink sockets, nexthop objects, routes, route monitoring, dcbnl.
//! * [`bpf`]: the XDP receiver and the PFC tc program, their pinned maps.
//! * [`sampler`]: the helper's link, qdisc and ethtool counters.
//! * [`ethtool`], [`netdev`], [`lag`]: NIC statistics, interface facts, bond members.
//! * [`clock`], [`socket`], [`sched`], [`timer`], [`privileges`]: clocks, socket options,
//!   real-time scheduling and memory locking, timerfd and tokio registration, capabilities.

pub mod bpf;
pub mod clock;
pub mod ethtool;
pub mod lag;
pub mod netdev;
pub mod netlink;
pub mod privileges;
pub mod sampler;
pub mod sched;
pub mod socket;
pub mod timer;
