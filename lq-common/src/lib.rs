//! `lq-common`: everything the kernel side and the user side of `lq` must agree on.
//!
//! * [`wire`]: the LQ advertisement codec of `spec/lq-udp-wire.md` (version 1), with the
//!   receive checks 5-9 of that spec.
//! * [`auth`]: the framing of the authentication trailer (the MAC is computed in
//!   `lq-user`).
//! * [`frame`]: receive checks 1-4 (Ethernet, one VLAN tag, IPv4/IPv6, UDP port, GTSM TTL).
//! * [`receive`]: the whole receive procedure (checks 1-11) over an abstract path table: the
//!   reference the XDP program is differentially tested against.
//! * [`maps`]: `#[repr(C)]` map keys, values, counters and names shared with `lq-ebpf`.
//!
//! The crate is `no_std` and allocation-free so that the eBPF program can use the same
//! constants and pure helpers, and everything is testable on the host.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(test)]
extern crate std;

pub mod auth;
pub mod frame;
pub mod maps;
pub mod pfc;
pub mod receive;
pub mod wire;
