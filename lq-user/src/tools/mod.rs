//! Commands beside the daemon: `lqd decode` of datagrams and capture files ([`decode`],
//! [`pcap`]), `lqd ipfix collect` ([`collect`]), `lqd show pfc` from the pins
//! ([`pfc_show`]).

pub mod collect;
pub mod decode;
pub mod pcap;
pub mod pfc_show;
