//! Commands beside the daemon: `lqd sim` scenario files ([`scenario`]), `lqd decode` of datagrams and capture files ([`decode`],
//! [`pcap`]), `lqd ipfix collect` ([`collect`]), `lqd show` from the pins
//! ([`pins`], [`pfc_show`]), `lqd cleanup` of the counters and pins an instance leaves
//! ([`cleanup`]), `lqd instances` ([`instances`]).

pub mod cleanup;
pub mod collect;
pub mod decode;
pub mod instances;
pub mod pcap;
pub mod pfc_show;
pub mod pins;
pub mod scenario;
