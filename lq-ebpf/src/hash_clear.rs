//! The demo fabric's hash clearer.
//!
//! `lq_clear_hash` (tc classifier, attached at ingress of a leaf's host-facing port): a veth
//! keeps the sending socket's random `skb->hash` across network namespaces, and the
//! kernel's multipath hashing (`fib_multipath_hash_policy = 1`) reuses an L4 hash it finds
//! instead of hashing the 5-tuple. TCP re-randomizes that hash on every timeout, so a flow
//! would change path on each one. Clearing the hash makes the leaf hash the 5-tuple, as a
//! real router does. It never drops: every packet gets `TC_ACT_OK`.

use aya_ebpf::{
    bindings::TC_ACT_OK, helpers::generated::bpf_set_hash_invalid, macros::classifier,
    programs::TcContext,
};

/// The tc entry point.
#[classifier]
pub fn lq_clear_hash(ctx: TcContext) -> i32 {
    // SAFETY: the helper takes the skb the kernel passed in and only clears its hash.
    unsafe { bpf_set_hash_invalid(ctx.skb.skb) };
    TC_ACT_OK
}
