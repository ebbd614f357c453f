//! `lqd sim` with elastic (TCP-like fluid) load, issue 12: on a scaled-down copy of the
//! netns demo (scenarios/demo.toml), the seed's 6.3/6.4 weight function sloshes the weights
//! around while the integral function keeps capacity shares, and ECMP, static capacity
//! weights and lq keep the netns demo's order of job completion times.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use lq_user::core::sim::elastic::JobStats;
use lq_user::core::sim::{Scenario, run};

/// 4 spines x 4 leaves at 100 Mbit/s, S2 -> L4 cut to 25 Mbit/s; 32 flows x 2 MiB from L1
/// to L4 at t = 1 s.
const DEMO_SMALL: &str = r#"
name = "demo-small"
duration_ms = 12000
seed = 3
[params]
t_sample_ms = 2
t_notify_ms = 20
[[nodes]]
prefix = "S"
count = 4
tier = 1
group = "spines"
[[nodes]]
prefix = "L"
count = 4
tier = 0
group = "leaves"
[[links]]
a = "@spines"
b = "@leaves"
capacity_gbps = 0.1
[elastic]
watch_source = "L1"
watch_destination = "L4"
degraded = "S2"
[[elastic.job]]
sources = "L1"
destination = "L4"
at_ms = 1000
flows = 32
size_mib = 2
[[elastic.capacity]]
from = "S2"
to = "L4"
at_ms = 0
gbps = 0.025
[[variant]]
name = "ecmp"
balancing = "ecmp"
[[variant]]
name = "static"
balancing = "static"
[[variant]]
name = "seed"
weight_function = "seed"
[[variant]]
name = "integral"
weight_function = "integral"
[[variant]]
name = "integral-bgp"
weight_function = "integral"
slow_plane_capacity = true
[[variant]]
name = "integral-diag"
weight_function = "integral"
diagnostics = true
[[variant]]
name = "seed-bgp"
weight_function = "seed"
slow_plane_capacity = true
"#;

fn job(variant: &str) -> JobStats {
    let s = Scenario::parse(DEMO_SMALL, "demo-small")
        .unwrap()
        .with_variant(variant)
        .unwrap();
    let summary = run(&s, &mut std::io::sink()).unwrap();
    let e = summary.elastic.expect("elastic stats");
    assert_eq!(e.jobs.len(), 1);
    e.jobs[0].clone()
}

#[test]
fn sim_elastic_integral_converges_where_seed_sloshes() {
    let ecmp = job("ecmp");
    let stat = job("static");
    let seed = job("seed");
    let integral = job("integral");
    let bgp = job("integral-bgp");
    let diag = job("integral-diag");
    let seed_bgp = job("seed-bgp");
    for j in [&ecmp, &stat, &seed, &integral, &bgp, &diag, &seed_bgp] {
        assert_eq!(j.completed, 32, "{j:?}");
    }
    let jct = |j: &JobStats| j.jct_s.unwrap();
    // ECMP puts a quarter of the flows on the quarter-capacity path.
    assert!(jct(&ecmp) > 1.5 * jct(&stat), "{ecmp:?} {stat:?}");
    assert_eq!(ecmp.weight_swing, 0.0);
    assert!(
        (stat.degraded_share - 25.0 / 325.0).abs() < 0.01,
        "{stat:?}"
    );
    // The seed's function: LQS ~0 on every loaded path, 255 on a momentarily idle one.
    assert!(seed.weight_swing > 0.1, "{seed:?}");
    eprintln!("seed {seed:?}\nseed-bgp {seed_bgp:?}\nintegral {integral:?}\nintegral-bgp {bgp:?}");
    // Section 5.5: the diagnostics block reaches no weight. The helpers sending it changes
    // nothing at all.
    assert_eq!(
        JobStats {
            name: integral.name.clone(),
            ..diag
        },
        integral
    );
    // The integral function: capacity shares, calm. With the slow plane's capacity (BGP
    // Link Bandwidth) the floor is 0.75: issue 12's range for the degraded share. Without,
    // the capacity is estimated (floor 0.25, so that a cut under load can still be
    // followed) and the share sits near the floor's 2 %-4 % in this short job
    // (docs/weights.md).
    for (j, lo) in [(&bgp, 0.04), (&integral, 0.03)] {
        assert!(j.weight_swing <= 0.05, "{j:?}");
        assert!((lo..=0.12).contains(&j.degraded_share), "{j:?}");
        assert!(jct(j) <= 1.05 * jct(&stat), "{j:?} {stat:?}");
        assert!(jct(&ecmp) / jct(j) >= 2.0, "{ecmp:?} {j:?}");
    }
}

#[test]
fn sim_elastic_bad_input_is_refused() {
    for (bad, what) in [
        ("flows = 32", "flows = 0"),
        ("size_mib = 2", "size_mib = -1"),
        ("gbps = 0.025", "gbps = 0"),
        ("degraded = \"S2\"", "degraded = \"S9\""),
    ] {
        let text = DEMO_SMALL.replacen(bad, what, 1);
        assert!(Scenario::parse(&text, "bad").is_err(), "{what}");
    }
    let text = DEMO_SMALL.replace("weight_function = \"integral\"", "weight_function = \"x\"");
    assert!(Scenario::parse(&text, "bad").is_err());
    // A spine as a source: a clear setup error, not a panic.
    let text = DEMO_SMALL.replacen("sources = \"L1\"", "sources = \"S1\"", 1);
    let s = Scenario::parse(&text, "bad").unwrap();
    let e = run(&s, &mut std::io::sink()).unwrap_err().to_string();
    assert!(e.contains("not a load-balancer"), "{e}");
}

/// `sample_jitter`: a saturated link's TX counter, read with its boundaries displaced,
/// reads U below 1 on average (samples above the line rate are clamped), as the netns
/// fabric's helpers do (docs/sim.md); without it the model's counters are exact.
#[test]
fn sim_elastic_sample_jitter_spreads_a_saturated_links_raw_u() {
    let mean_raw_u = |extra: &str| -> (f64, usize) {
        let text = DEMO_SMALL
            .replacen(
                "degraded = \"S2\"",
                &format!("degraded = \"S2\"\n{extra}"),
                1,
            )
            .replacen("seed = 3", "seed = 3\nevery_ms = 10", 1);
        let s = Scenario::parse(&text, "jitter")
            .unwrap()
            .with_variant("static")
            .unwrap();
        let mut out = Vec::new();
        run(&s, &mut out).unwrap();
        // S1 -> L4 while the job saturates it.
        let u: Vec<f64> = String::from_utf8(out)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["node"] == "S1" && v["link"] == "L4")
            .filter(|v| (1300.0..2000.0).contains(&v["t-ms"].as_f64().unwrap()))
            .map(|v| v["raw-u"].as_f64().unwrap())
            .collect();
        (u.iter().sum::<f64>() / u.len() as f64, u.len())
    };
    let (exact, n) = mean_raw_u("");
    assert!(n > 0);
    assert!(exact > 0.99, "{exact}");
    let (jittered, n) = mean_raw_u("sample_jitter = 0.2");
    assert!(n > 100, "{n} lines");
    assert!((0.85..0.97).contains(&jittered), "{jittered}");
    let text = DEMO_SMALL.replacen(
        "degraded = \"S2\"",
        "degraded = \"S2\"\nsample_jitter = 0.6",
        1,
    );
    let e = Scenario::parse(&text, "bad").unwrap_err().to_string();
    assert!(e.contains("sample_jitter"), "{e}");
}
