//! Feeds arbitrary bytes to `wire::decode` with a permissive and a strict policy, walks
//! every entry, and checks that every accepted advertisement survives
//! `decode(encode(x)) == x`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lq_common::wire::{
    AsQualification, AsRange, DecodePolicy, Entry, MAX_PAYLOAD_LEN, decode, encode,
};

/// A strict receiver: `as-qualified` set, an AS plan of a private range and one 32-bit AS
/// (the second spec test vector's node AS).
const STRICT_PLAN: [AsRange; 2] = [
    AsRange {
        first: 64_512,
        last: 65_534,
    },
    AsRange::single(4_200_000_001),
];

fuzz_target!(|data: &[u8]| {
    let any = round_trip(data, &DecodePolicy::ANY);
    let strict = DecodePolicy {
        as_qualification: AsQualification::Required(true),
        as_plan: &STRICT_PLAN,
    };
    let strict_ok = round_trip(data, &strict);
    assert!(
        any || !strict_ok,
        "the strict policy accepted what ANY refused"
    );
});

/// Decodes `data` with `policy`; on success re-encodes it and checks the round trip.
/// Returns whether `data` was accepted.
fn round_trip(data: &[u8], policy: &DecodePolicy<'_>) -> bool {
    let Ok(adv) = decode(data, policy) else {
        return false;
    };
    let entries: Vec<Entry> = adv.entries().collect();
    assert_eq!(entries.len(), adv.entry_count());
    let mut buf = [0u8; MAX_PAYLOAD_LEN];
    let n = encode(&adv.header, &entries, &mut buf)
        .unwrap_or_else(|e| panic!("an accepted advertisement does not re-encode: {e}"));
    assert_eq!(n, data.len(), "re-encoding changed the length");
    let again = decode(&buf[..n], policy).expect("a re-encoded advertisement is refused");
    assert_eq!(again.header, adv.header);
    let again: Vec<Entry> = again.entries().collect();
    assert_eq!(again, entries);
    // `==` on f32 hides a sign flip of zero: compare the bit patterns too.
    for (a, b) in again.iter().zip(&entries) {
        assert_eq!(
            a.available_bandwidth.to_bits(),
            b.available_bandwidth.to_bits()
        );
        let caps = |e: &Entry| e.diagnostics.map(|d| d.link_capacity.to_bits());
        assert_eq!(caps(a), caps(b));
    }
    true
}
