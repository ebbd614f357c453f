//! The ECN-eligible packet counter of the helper role (seed 003 Appendix A.1: "ECN-eligible
//! packet counter"). `lq_ecn_egress` (tc egress, tcx) counts, per interface, the IPv4 and
//! IPv6 packets whose ECN field is ECT(0), ECT(1) or CE: the packets an AQM could mark. It
//! runs before the qdisc, so marks the qdisc makes come from the qdisc's own statistics;
//! E = marked / eligible (A.2). It never drops: every packet gets `TC_ACT_OK`.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, TC_ACT_OK},
    btf_maps::PerCpuHashMap,
    macros::{btf_map, classifier},
    programs::TcContext,
};
use lq_common::{
    frame::{ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6},
    maps::ECN_IF_CAPACITY,
};

#[btf_map]
static LQ_ECN_ELIGIBLE: PerCpuHashMap<u32, u64, { ECN_IF_CAPACITY as usize }> =
    PerCpuHashMap::new();

/// The tc entry point: thin, the work is in [`try_count`].
#[classifier]
pub fn lq_ecn_egress(ctx: TcContext) -> i32 {
    try_count(&ctx);
    TC_ACT_OK
}

/// The one bounds-checked accessor (`bpf_skb_load_bytes`: works on non-linear skbs too).
#[inline(always)]
fn bytes_at<const N: usize>(ctx: &TcContext, offset: usize) -> Option<[u8; N]> {
    ctx.load::<[u8; N]>(offset).ok()
}

#[inline(always)]
fn try_count(ctx: &TcContext) {
    let Some(eth) = bytes_at::<14>(ctx, 0) else {
        return;
    };
    let mut ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    let mut l3 = 14;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let Some(t) = bytes_at::<4>(ctx, 14) else {
            return;
        };
        ethertype = u16::from_be_bytes([t[2], t[3]]);
        l3 = 18;
    }
    let ecn = if ethertype == ETH_P_IP {
        let Some(h) = bytes_at::<2>(ctx, l3) else {
            return;
        };
        h[1] & 0x03
    } else if ethertype == ETH_P_IPV6 {
        let Some(h) = bytes_at::<2>(ctx, l3) else {
            return;
        };
        // Traffic class straddles octets 0 and 1; its ECN bits are bits 4-5 of octet 1.
        (h[1] >> 4) & 0x03
    } else {
        return;
    };
    if ecn == 0 {
        return;
    }
    // SAFETY: reads one field of the context the kernel passed in.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    match LQ_ECN_ELIGIBLE.get_ptr_mut(ifindex) {
        // SAFETY: this CPU's value of a per-CPU map, alive until the program returns.
        Some(p) => unsafe { *p += 1 },
        None => {
            let _ = LQ_ECN_ELIGIBLE.insert(ifindex, 1u64, BPF_NOEXIST as u64);
        }
    }
}
