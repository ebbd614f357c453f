//! `cargo xtask bench sim`: `lqd sim` on 64 spines x 512 leaves (scenarios/large.toml, its
//! full 100 ms of virtual time) must run; its wall time is the metric. It also checks what
//! `sim_large_completes` (lq-user/tests/sim_scenarios.rs, ignored in a debug build) checks,
//! at full length: 576 nodes and 32 768 links, no datagram discarded, and every other leaf
//! moving its traffic for L1 away from S1 (the watched weight below 1/64).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/large.toml");
    let s = lq_user::tools::scenario::load(&path)?;
    let start = Instant::now();
    let summary = lq_user::core::sim::run(&s, &mut std::io::sink())?;
    let wall = start.elapsed().as_secs_f64();
    eprintln!(
        "large: {} nodes, {} links, {} ms virtual in {wall:.1} s wall",
        summary.nodes,
        summary.links,
        s.duration_ns / 1_000_000
    );
    anyhow::ensure!(
        (summary.nodes, summary.links) == (576, 32768),
        "large: {} nodes and {} links, not 576 and 32768",
        summary.nodes,
        summary.links
    );
    anyhow::ensure!(
        summary.datagrams_discarded == 0,
        "large: {} datagrams discarded",
        summary.datagrams_discarded
    );
    let w = summary
        .watches
        .first()
        .ok_or_else(|| anyhow::anyhow!("large: no watch"))?;
    anyhow::ensure!(
        w.final_weight < 1.0 / 64.0,
        "large: the watched leaf kept {} of its traffic for L1 on S1 (LQS 72 against 237): {w:?}",
        w.final_weight
    );
    println!(
        "LQ-METRIC {}",
        serde_json::json!({"name": "sim_large_64x512_wall_s", "value": (wall * 10.0).round() / 10.0, "unit": "s", "goal": null, "baseline": null})
    );
    println!(
        "LQ-METRIC {}",
        serde_json::json!({"name": "sim_large_virtual_ms", "value": s.duration_ns / 1_000_000, "unit": "ms", "goal": null, "baseline": null})
    );
    Ok(())
}
