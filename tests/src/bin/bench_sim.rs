//! `cargo xtask bench sim`: `lqd sim` on 64 spines x 512 leaves (scenarios/large.toml, its
//! full 100 ms of virtual time) must run; its wall time is the metric.
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
