//! The aarch64 build of `lqd` (SmartNIC Arm cores), run under qemu-user, gives byte for byte
//! the output of the host build: `--version`, both spec test vectors through `decode`, and
//! the Appendix B trajectory of `lqd sim` (floating point, JSON rendering, integer weights).
//!
//! `cargo xtask test` builds the aarch64 binary and runs this test with
//! `LQ_CROSS_LQD` (the binary) and `LQ_CROSS_RUNNER` (the emulator command, e.g.
//! `qemu-aarch64 -L /usr/aarch64-linux-gnu`) set; without them it fails, it never skips.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::process::{Command, Output};

const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
const VECTOR_2: &str =
    "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run this test through `cargo xtask test` (stage cross-arch)")
    })
}

fn host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lqd"))
        .args(args)
        .output()
        .expect("run the host lqd")
}

fn cross(args: &[&str]) -> Output {
    let runner = env("LQ_CROSS_RUNNER");
    let mut words = runner.split_whitespace();
    let program = words.next().expect("LQ_CROSS_RUNNER names a program");
    Command::new(program)
        .args(words)
        .arg(env("LQ_CROSS_LQD"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

#[test]
#[ignore = "needs the aarch64 lqd and qemu-user: run by `cargo xtask test`"]
fn aarch64_lqd_under_qemu_matches_the_host_build() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/appendix-b.toml");
    let cases: [&[&str]; 4] = [
        &["--version"],
        &["decode", VECTOR_1],
        &["decode", VECTOR_2],
        &["sim", scenario],
    ];
    // The emulated binary must really be another architecture, or the comparison proves
    // nothing.
    let elf = std::fs::read(env("LQ_CROSS_LQD")).expect("read LQ_CROSS_LQD");
    const EM_AARCH64: u16 = 183;
    assert!(
        elf.starts_with(b"\x7fELF") && elf.len() > 20,
        "LQ_CROSS_LQD is not an ELF file"
    );
    assert_eq!(
        u16::from_le_bytes([elf[18], elf[19]]),
        EM_AARCH64,
        "LQ_CROSS_LQD is not an aarch64 binary"
    );
    for args in cases {
        let (h, c) = (host(args), cross(args));
        assert!(h.status.success(), "host lqd {args:?}: {h:?}");
        assert!(!h.stdout.is_empty(), "host lqd {args:?} printed nothing");
        assert_eq!(
            (c.status.code(), String::from_utf8_lossy(&c.stdout)),
            (h.status.code(), String::from_utf8_lossy(&h.stdout)),
            "aarch64 lqd {args:?} differs from the host build (stderr: {})",
            String::from_utf8_lossy(&c.stderr)
        );
    }
}
