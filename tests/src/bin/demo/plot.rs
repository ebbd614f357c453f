//! The demo's plot: an SVG written by hand (no dependencies), three panels over time:
//! L1's weight share per spine, the LQS of every spine's link to L4, and the goodput.

use std::fmt::Write as _;

use crate::Sample;

/// One plotted line: label, colour and (time, value) points (a gap where `None`).
type Series<'a> = (String, &'a str, Vec<(f64, Option<f64>)>);

const W: f64 = 1200.0;
const PANEL_H: f64 = 200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 45.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// Phase bands: (start s, end s, label).
pub type Band = (f64, f64, String);

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the SVG.
pub fn svg(samples: &[Sample], bands: &[Band], title: &str) -> String {
    let t_max = samples.last().map_or(1.0, |s| s.t_s).max(1.0);
    let plot_w = W - LEFT - RIGHT;
    let h = TOP + 3.0 * PANEL_H + 2.0 * GAP + 50.0;
    let x = |t: f64| LEFT + t / t_max * plot_w;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let max_rate = samples
        .iter()
        .map(|s| s.goodput_mbit)
        .fold(0.0f64, f64::max)
        .max(50.0);
    let panels: [(&str, f64); 3] = [
        ("L1 weight share to L4 (%)", 100.0),
        ("LQS of Si->L4 (0-255)", 255.0),
        ("goodput H1->H4 (Mbit/s)", (max_rate / 50.0).ceil() * 50.0),
    ];
    for (p, (label, ymax)) in panels.iter().enumerate() {
        let y0 = TOP + p as f64 * (PANEL_H + GAP);
        let y = |v: f64| y0 + PANEL_H - (v / ymax).clamp(0.0, 1.0) * PANEL_H;
        // Phase bands.
        for (i, (a, b, name)) in bands.iter().enumerate() {
            let fill = if i % 2 == 0 { "#f2f2f2" } else { "#e6eef7" };
            let _ = writeln!(
                o,
                r#"<rect x="{:.1}" y="{y0}" width="{:.1}" height="{PANEL_H}" fill="{fill}"/>"#,
                x(*a),
                (x(*b) - x(*a)).max(0.5)
            );
            if p == 0 {
                let _ = writeln!(
                    o,
                    r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#555">{}</text>"##,
                    x(*a) + 2.0,
                    y0 - 4.0,
                    esc(name)
                );
            }
        }
        let _ = writeln!(
            o,
            r#"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            o,
            r#"<text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"#,
            y0 + PANEL_H / 2.0,
            y0 + PANEL_H / 2.0,
            esc(label)
        );
        for k in 0..=4 {
            let v = ymax * f64::from(k) / 4.0;
            let _ = writeln!(
                o,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ccc" stroke-dasharray="3,3"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
                LEFT + plot_w,
                y(v),
                y(v),
                LEFT - 4.0,
                y(v) + 4.0
            );
        }
        let series: Vec<Series> = match p {
            0 => (0..4)
                .map(|i| {
                    (
                        format!("S{}", i + 1),
                        COLORS[i],
                        samples
                            .iter()
                            .map(|s| {
                                let total: u64 = s.weights.iter().sum();
                                (
                                    s.t_s,
                                    (total > 0).then(|| s.weights[i] as f64 * 100.0 / total as f64),
                                )
                            })
                            .collect(),
                    )
                })
                .collect(),
            1 => (0..4)
                .map(|i| {
                    (
                        format!("S{}->L4", i + 1),
                        COLORS[i],
                        samples
                            .iter()
                            .map(|s| (s.t_s, s.lqs_to_l4[i].map(f64::from)))
                            .collect(),
                    )
                })
                .collect(),
            _ => vec![(
                "goodput".to_string(),
                "#000",
                samples
                    .iter()
                    .map(|s| (s.t_s, Some(s.goodput_mbit)))
                    .collect(),
            )],
        };
        for (si, (name, color, pts)) in series.iter().enumerate() {
            let mut d = String::new();
            let mut pen = false;
            for &(t, v) in pts {
                match v {
                    Some(v) => {
                        let _ =
                            write!(d, "{}{:.1},{:.1} ", if pen { "L" } else { "M" }, x(t), y(v));
                        pen = true;
                    }
                    None => pen = false,
                }
            }
            let _ = writeln!(
                o,
                r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"/>"#
            );
            let lx = LEFT + plot_w - 90.0 * (series.len() - si) as f64;
            let _ = writeln!(
                o,
                r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                y0 + 12.0,
                lx + 16.0,
                y0 + 16.0,
                esc(name)
            );
        }
    }
    // Time axis.
    let yb = TOP + 3.0 * PANEL_H + 2.0 * GAP;
    let step = if t_max > 200.0 { 20.0 } else { 10.0 };
    let mut t = 0.0;
    while t <= t_max {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t:.0}</text>"#,
            x(t),
            yb + 16.0
        );
        t += step;
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        LEFT + plot_w / 2.0,
        yb + 34.0
    );
    o.push_str("</svg>\n");
    o
}
