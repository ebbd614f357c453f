//! lq's eBPF programs, built by `lq-user/build.rs` into one object embedded in `lqd`.
//!
//! * [`receiver`]: `lq_receiver` (XDP), the leaf's LQ advertisement receiver and path
//!   table writer, and `lq_baseline_pass`, the empty baseline of its benchmarks.
//! * [`pfc`]: `lq_pfc_ingress` (tc ingress), counts received PFC frames per priority and
//!   keeps the pause timers.
//! * [`ecn`]: `lq_ecn_egress` (tc egress), counts ECN-capable packets per interface.
//! * [`hash_clear`]: `lq_clear_hash` (tc), clears a veth-carried socket hash (the demo).
#![no_std]
#![no_main]
// Inline assembly on BPF (the atomic row claims of `atomic`): lq-ebpf is built with the
// nightly toolchain (lq-user/build.rs, -Z build-std) in any case.
#![feature(asm_experimental_arch)]
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

mod atomic;
mod ecn;
mod hash_clear;
mod pfc;
mod receiver;

/// The layout version of the tc counters' pinned maps (`lq_common::maps::COUNTER_META_MAP`),
/// written and checked by `lqd` only: no program reads it. One instance is pinned beside
/// each counter's maps (the PFC counter's folder, the ECN counter's).
#[aya_ebpf::macros::btf_map]
static LQ_COUNTER_META: aya_ebpf::btf_maps::Array<u32, 1> = aya_ebpf::btf_maps::Array::new();

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
