//! `lqd`: the lq daemon. A deterministic core (weights, damping, heartbeat, the congestion
//! pipeline) fed typed events with time as an input, and I/O at the edges (BPF maps,
//! sockets, rtnetlink, timers).

pub mod advertisement_json;
pub mod controller;
pub mod decode;
pub mod ipfix;
pub mod path_table;
pub mod pcap;
pub mod pfc;
