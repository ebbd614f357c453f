//! Output and statistics shared by the `bench_*` programs (the `LQ-METRIC` convention of
//! `xtask/src/bench.rs`).

use serde_json::json;

/// Prints one metric line, values rounded to 3 decimals.
pub fn emit(name: &str, value: f64, unit: &str, goal: Option<&str>, baseline: Option<f64>) {
    let m = json!({
        "name": name,
        "value": round3(value),
        "unit": unit,
        "goal": goal,
        "baseline": baseline.map(round3),
    });
    println!("LQ-METRIC {m}");
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The median (mean of the two middle values for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// `min / median / max` for the human summary.
pub fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("min {min:.2} / median {:.2} / max {max:.2}", median(v))
}
