//! What operators read: typed snapshots of the roles ([`snapshot`]) and their renderings:
//! `lqd show` tables ([`show`]), the YANG operational state in RFC 7951 JSON
//! ([`yang_state`]), Prometheus metrics ([`metrics`]), advertisements as JSON
//! ([`advertisement_json`]). Pure: a view reads a snapshot and returns text or JSON.

pub mod advertisement_json;
pub mod metrics;
pub mod show;
pub mod snapshot;
pub mod yang_state;
