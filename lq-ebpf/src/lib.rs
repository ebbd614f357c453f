#![no_std]
// Only a marker (see below): the dependencies are the programs' in main.rs.
#![allow(unused_crate_dependencies)]
// This file exists so that lq-user can name lq-ebpf as a build dependency (cargo then
// rebuilds the eBPF object when this crate changes); the programs live in main.rs.
