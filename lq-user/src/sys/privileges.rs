//! Least privilege: once programs are loaded, maps pinned, links attached and sockets
//! bound, lqd keeps only what running needs (seed 003 section 12): CAP_BPF for map
//! access and CAP_NET_ADMIN for nexthop groups, routes and tc/XDP changes on reload.

use caps::{CapSet, Capability, CapsHashSet};
use tracing::info;

/// The capabilities lqd keeps after start-up.
pub const KEPT: [Capability; 2] = [Capability::CAP_BPF, Capability::CAP_NET_ADMIN];

/// Drops every other capability from the effective, permitted, inheritable and ambient
/// sets, and every capability from the bounding set except the kept ones. Capabilities
/// are per thread: this drops the calling thread's, and threads it starts afterwards
/// inherit the dropped sets.
pub fn drop_capabilities() -> Result<(), caps::errors::CapsError> {
    let keep: CapsHashSet = KEPT.into_iter().collect();
    // Bounding set first: dropping from it needs CAP_SETPCAP, still held here.
    for c in caps::all() {
        if !keep.contains(&c) {
            let _ = caps::drop(None, CapSet::Bounding, c);
        }
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)?;
    caps::set(None, CapSet::Effective, &keep)?;
    caps::set(None, CapSet::Permitted, &keep)?;
    info!(
        kept = ?KEPT,
        thread = std::thread::current().name().unwrap_or("?"),
        "dropped every other capability"
    );
    Ok(())
}
