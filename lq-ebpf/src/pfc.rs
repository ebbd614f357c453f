//! The tc PFC counter.
//!
//! `lq_pfc_ingress` (tc classifier, attached at ingress with tcx, or clsact on old kernels):
//! counts every valid received PFC frame per (ifindex, priority), one increment per set bit
//! of the class-enable vector, before and regardless of local PFC enablement, and keeps the
//! pause timer of each (interface, priority) for the pause fraction F. The receive rules are
//! `lq_common::pfc::classify`, applied here in the same order. It never drops: every frame
//! gets `TC_ACT_OK`.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, TC_ACT_OK},
    btf_maps::{HashMap, PerCpuArray, PerCpuHashMap},
    helpers::bpf_ktime_get_ns,
    macros::{btf_map, classifier},
    programs::TcContext,
};
use lq_common::{
    frame::{ETH_P_8021AD, ETH_P_8021Q},
    pfc::{
        ETH_P_MAC_CONTROL, MIN_FRAME_LEN, PFC_IF_CAPACITY, PFC_IF_CONFIGURED, PFC_KEY_CAPACITY,
        PFC_MULTICAST, PFC_OPCODE, PFC_PRIORITIES, PFC_REJECT_COUNT, PfcIfConfig, PfcKey, PfcPause,
        PfcReject,
    },
};

#[btf_map]
static PFC_RX_COUNTERS: PerCpuHashMap<PfcKey, u64, { PFC_KEY_CAPACITY as usize }> =
    PerCpuHashMap::new();

#[btf_map]
static PFC_PAUSE: HashMap<PfcKey, PfcPause, { PFC_KEY_CAPACITY as usize }> = HashMap::new();

#[btf_map]
static PFC_IF_CONFIG: HashMap<u32, PfcIfConfig, { PFC_IF_CAPACITY as usize }> = HashMap::new();

#[btf_map]
static PFC_REJECTS: PerCpuArray<u64, { PFC_REJECT_COUNT as usize }> = PerCpuArray::new();

/// The tc entry point: thin, everything happens in [`try_count`].
#[classifier]
pub fn lq_pfc_ingress(ctx: TcContext) -> i32 {
    try_count(&ctx);
    TC_ACT_OK
}

/// The benchmarks' baseline (`bench_pfc`): an empty tc classifier that returns `TC_ACT_OK`,
/// the floor `lq_pfc_ingress` is compared against under BPF_PROG_TEST_RUN. Never attached.
#[classifier]
pub fn lq_tc_baseline(_ctx: TcContext) -> i32 {
    TC_ACT_OK
}

#[inline(always)]
fn reject(reason: PfcReject) {
    if let Some(p) = PFC_REJECTS.get_ptr_mut(reason as u32) {
        // SAFETY: this CPU's slot; tc runs with preemption (migration) disabled.
        unsafe { *p += 1 };
    }
}

/// The one bounds-checked packet accessor: `N` octets at `offset` (copied with
/// `bpf_skb_load_bytes`, so non-linear skbs work too), or `None` when the frame is shorter.
#[inline(always)]
fn bytes_at<const N: usize>(ctx: &TcContext, offset: usize) -> Option<[u8; N]> {
    ctx.load::<[u8; N]>(offset).ok()
}

/// Ethernet header + opcode + class-enable vector + 8 pause times.
const HEAD: usize = 14 + 2 + 2 + 16;

fn try_count(ctx: &TcContext) {
    // Fast path: nearly every frame is neither MAC Control nor VLAN-tagged; decide from the
    // EtherType alone, with direct packet access (no helper call, no skb field reads). A
    // frame whose header is not linear takes the full path below.
    let (start, end) = (ctx.data(), ctx.data_end());
    if start + 14 <= end {
        // SAFETY: octets 12-13 lie inside the linear data, just checked.
        let et = u16::from_be_bytes(unsafe { *((start + 12) as *const [u8; 2]) });
        if et != ETH_P_MAC_CONTROL && et != ETH_P_8021Q && et != ETH_P_8021AD {
            return;
        }
        // A tag still in the frame (802.1Q, 802.1ad outer + 802.1Q inner): look past up to
        // two tags with direct packet access as well, so a tagged data frame costs no more
        // than an untagged one. IEEE 802.1Qbb: PFC frames are untagged, so a tagged MAC
        // Control frame is only counted as rejected. (When the NIC or veth stripped the
        // outer tag into skb metadata, octets 12-13 already hold the next EtherType.)
        if et != ETH_P_MAC_CONTROL && start + 22 <= end {
            // SAFETY: octets 16-17 and 20-21 lie inside the linear data, just checked.
            let mut inner = u16::from_be_bytes(unsafe { *((start + 16) as *const [u8; 2]) });
            if inner == ETH_P_8021Q || inner == ETH_P_8021AD {
                // SAFETY: as above.
                inner = u16::from_be_bytes(unsafe { *((start + 20) as *const [u8; 2]) });
            }
            if inner == ETH_P_MAC_CONTROL {
                reject(PfcReject::VlanTagged);
            }
            return;
        }
    }
    // SAFETY: reads of two fields of the context the kernel passed in.
    let (ifindex, vlan_present) = unsafe { ((*ctx.skb.skb).ifindex, (*ctx.skb.skb).vlan_present) };
    let Some(h) = bytes_at::<HEAD>(ctx, 0) else {
        // Shorter than a PFC header: a MAC Control frame this short is a runt.
        if let Some(et) = bytes_at::<2>(ctx, 12)
            && u16::from_be_bytes(et) == ETH_P_MAC_CONTROL
        {
            reject(if vlan_present != 0 {
                PfcReject::VlanTagged
            } else {
                PfcReject::Short
            });
        }
        return;
    };
    let ethertype = u16::from_be_bytes([h[12], h[13]]);
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let mut inner = u16::from_be_bytes([h[16], h[17]]);
        if inner == ETH_P_8021Q || inner == ETH_P_8021AD {
            inner = u16::from_be_bytes([h[20], h[21]]);
        }
        if inner == ETH_P_MAC_CONTROL {
            reject(PfcReject::VlanTagged);
        }
        return;
    }
    if ethertype != ETH_P_MAC_CONTROL {
        return;
    }
    if vlan_present != 0 {
        reject(PfcReject::VlanTagged);
        return;
    }
    if (ctx.len() as usize) < MIN_FRAME_LEN {
        reject(PfcReject::Short);
        return;
    }
    if u16::from_be_bytes([h[14], h[15]]) != PFC_OPCODE {
        reject(PfcReject::BadOpcode);
        return;
    }
    // SAFETY: the value is copied out at once.
    let cfg: Option<PfcIfConfig> = unsafe { PFC_IF_CONFIG.get(ifindex) }
        .copied()
        .filter(|c| c.flags & PFC_IF_CONFIGURED != 0);
    let dst = [h[0], h[1], h[2], h[3], h[4], h[5]];
    if dst != PFC_MULTICAST {
        match &cfg {
            None => {
                reject(PfcReject::NoConfig);
                return;
            }
            Some(c) if c.mac != dst => {
                reject(PfcReject::BadDestination);
                return;
            }
            Some(_) => {}
        }
    }
    let enable = h[17];
    let speed = cfg.map(|c| c.speed_mbps).unwrap_or(0);
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let mut n = 0;
    while n < PFC_PRIORITIES as usize {
        if enable & (1 << n) != 0 {
            let key = PfcKey {
                ifindex,
                priority: n as u32,
            };
            count(&key);
            let quanta = u16::from_be_bytes([h[18 + 2 * n], h[19 + 2 * n]]);
            pause(&key, now, quanta, speed);
        }
        n += 1;
    }
}

#[inline(always)]
fn count(key: &PfcKey) {
    if let Some(p) = PFC_RX_COUNTERS.get_ptr_mut(key) {
        // SAFETY: this CPU's copy of the value.
        unsafe { *p += 1 };
        return;
    }
    // First frame for this key since the map was created: this CPU's copy starts at 1,
    // the other CPUs' at 0. Another CPU may have created it meanwhile: then add.
    if PFC_RX_COUNTERS
        .insert(key, 1u64, BPF_NOEXIST as u64)
        .is_err()
        && let Some(p) = PFC_RX_COUNTERS.get_ptr_mut(key)
    {
        // SAFETY: as above.
        unsafe { *p += 1 };
    }
}

/// Frames of one link arrive on one receive queue (non-IP frames do not spread by RSS), so
/// the read-modify-write of the shared pause state is serialised in practice; a race would
/// only misplace one pause boundary, never a frame count.
#[inline(always)]
fn pause(key: &PfcKey, now: u64, quanta: u16, speed: u32) {
    if let Some(p) = PFC_PAUSE.get_ptr_mut(key) {
        // SAFETY: a map value that stays allocated while the program runs (RCU).
        unsafe { (*p).apply(now, quanta, speed) };
        return;
    }
    let mut state = PfcPause::default();
    state.apply(now, quanta, speed);
    let _ = PFC_PAUSE.insert(key, state, BPF_NOEXIST as u64);
}
