//! The eBPF programs and their pinned maps, through aya: the XDP receiver and its path
//! table ([`path_table`]), the PFC tc counter ([`pfc`]).

pub mod path_table;
pub mod pfc;
