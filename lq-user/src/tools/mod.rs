//! Offline commands: `lqd decode` of datagrams and capture files ([`decode`], [`pcap`]).

pub mod decode;
pub mod pcap;
