//! The XDP receiver loads (passes the verifier) and reports how much of the verifier's
//! budget it uses, so a change that approaches the 1M-instruction limit shows up early.

use aya::programs::Xdp;
use lq_common::maps::XDP_PROGRAM;
use lq_tests::xdp::{TestReceiver, settings};

#[test]
fn receiver_loads_well_within_the_verifier_budget() {
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let prog: &mut Xdp = rx
        .receiver
        .ebpf_mut()
        .program_mut(XDP_PROGRAM)
        .unwrap()
        .try_into()
        .unwrap();
    let info = prog.info().unwrap();
    let verified = info.verified_instruction_count().unwrap_or(0);
    println!(
        "verified instructions: {verified} (limit 1000000), size {} octets",
        info.size_translated().unwrap_or(0)
    );
    assert!(
        verified < 500_000,
        "verifier budget more than half used: {verified}"
    );
}
