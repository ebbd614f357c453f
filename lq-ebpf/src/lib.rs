#![no_std]
// This file exists so that lq-user can name lq-ebpf as a build dependency (cargo then
// rebuilds the eBPF object when this crate changes); the programs live in main.rs.
