//! `lqd`: the lq daemon. A deterministic core (weights, damping, heartbeat, the congestion
//! pipeline) fed typed events with time as an input, and I/O at the edges (BPF maps,
//! sockets, rtnetlink, timers).

pub mod advertisement_json;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod decode;
pub mod helper;
pub mod helper_role;
pub mod ipfix;
pub mod load_balancer;
pub mod metrics;
pub mod path_table;
pub mod pcap;
pub mod pfc;
pub mod pfc_export;
pub mod privileges;
pub mod rtnl;
pub mod show;
pub mod sim;
pub mod slow_plane;
pub mod snapshot;
pub mod yang_state;
