//! The IPFIX collector's decoder never panics, whatever an exporter sends; templates learned
//! from earlier messages apply to later ones, so two messages are decoded in sequence.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut d = lq_user::ipfix::decode::Decoder::new(lq_user::ipfix::ElementIds::enterprise(32473, 1, 2, Some(3)));
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    for part in [&data[..split], &data[split..], data] {
        if let Ok(dec) = d.decode(part) {
            for r in &dec.pfc {
                let _ = r.scope();
            }
        }
    }
});
