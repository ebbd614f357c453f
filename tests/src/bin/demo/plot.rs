//! The demo's plot: an SVG written by hand (no dependencies). One block per scenario and
//! hash draw, each with three panels over the scenario's own time (ECMP, static weights and
//! lq one after the other, as phase bands): L1's weight share per spine (the 100 ms
//! samples, where a swinging weight shows), the LQS of every spine's link to L4, and the
//! goodput. The blocks of one scenario share their time scale so that draws compare at a
//! glance.

use std::fmt::Write as _;

use crate::{Sample, metrics::WeightSample};

/// One plotted line: label, colour and (time, value) points (a gap where `None`).
type Series<'a> = (String, &'a str, Vec<(f64, Option<f64>)>);

const W: f64 = 1200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 40.0;
/// Space above a draw's block for its title.
const BLOCK_HEAD: f64 = 46.0;
/// Space below a draw's block for its time axis.
const BLOCK_FOOT: f64 = 40.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// Phase bands: (start s, end s, label), in seconds since the epoch.
pub type Band = (f64, f64, String);

/// What one draw's block shows.
pub struct DrawPlot {
    /// Block title.
    pub title: String,
    /// The scenario: blocks of one scenario share their time scale.
    pub row: String,
    /// The draw's start and end (seconds since the epoch).
    pub t0: f64,
    pub t1: f64,
    /// The 0.5 s monitor samples of the draw.
    pub samples: Vec<Sample>,
    /// L1's group every 100 ms during the draw.
    pub weights: Vec<WeightSample>,
    /// Its phases.
    pub bands: Vec<Band>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the SVG: one block of three panels per draw.
pub fn svg(draws: &[DrawPlot], title: &str) -> String {
    let panel_h = match draws.len() {
        0..=1 => 200.0,
        2..=5 => 140.0,
        _ => 100.0,
    };
    let block_h = BLOCK_HEAD + 3.0 * panel_h + 2.0 * GAP + BLOCK_FOOT;
    let span_of = |row: &str| {
        draws
            .iter()
            .filter(|d| d.row == row)
            .map(|d| d.t1 - d.t0)
            .fold(1.0f64, f64::max)
    };
    let h = TOP + block_h * draws.len().max(1) as f64 + 10.0;
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
    for (k, d) in draws.iter().enumerate() {
        let top = TOP + k as f64 * block_h;
        block(&mut o, d, top, panel_h, span_of(&d.row));
    }
    o.push_str("</svg>\n");
    o
}

fn block(o: &mut String, d: &DrawPlot, top: f64, panel_h: f64, span: f64) {
    let plot_w = W - LEFT - RIGHT;
    let x = |t: f64| LEFT + ((t - d.t0) / span).clamp(0.0, 1.0) * plot_w;
    let _ = writeln!(
        o,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
        top + 16.0,
        esc(&d.title)
    );
    let max_rate = d
        .samples
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
        let y0 = top + BLOCK_HEAD + p as f64 * (panel_h + GAP);
        let y = |v: f64| y0 + panel_h - (v / ymax).clamp(0.0, 1.0) * panel_h;
        // Phase bands.
        for (i, (a, b, name)) in d.bands.iter().enumerate() {
            let fill = if i % 2 == 0 { "#f2f2f2" } else { "#e6eef7" };
            let _ = writeln!(
                o,
                r#"<rect x="{:.1}" y="{y0}" width="{:.1}" height="{panel_h}" fill="{fill}"/>"#,
                x(*a),
                (x(*b) - x(*a)).max(0.5)
            );
            if p == 0 {
                // Two rows of labels: neighbouring short phases do not overwrite each other.
                let _ = writeln!(
                    o,
                    r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#555">{}</text>"##,
                    x(*a) + 2.0,
                    y0 - if i % 2 == 0 { 4.0 } else { 15.0 },
                    esc(name)
                );
            }
        }
        let _ = writeln!(
            o,
            r#"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{panel_h}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            o,
            r#"<text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle" font-size="11">{}</text>"#,
            y0 + panel_h / 2.0,
            y0 + panel_h / 2.0,
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
                        d.weights
                            .iter()
                            .map(|s| (s.t_s, s.shares().map(|sh| sh[i] * 100.0)))
                            .collect(),
                    )
                })
                .collect(),
            1 => (0..4)
                .map(|i| {
                    (
                        format!("S{}->L4", i + 1),
                        COLORS[i],
                        d.samples
                            .iter()
                            .map(|s| (s.t_s, s.lqs_to_l4[i].map(f64::from)))
                            .collect(),
                    )
                })
                .collect(),
            _ => vec![(
                "goodput".to_string(),
                "#000",
                d.samples
                    .iter()
                    .map(|s| (s.t_s, Some(s.goodput_mbit)))
                    .collect(),
            )],
        };
        for (si, (name, color, pts)) in series.iter().enumerate() {
            let mut path = String::new();
            let mut pen = false;
            for &(t, v) in pts {
                match v {
                    Some(v) => {
                        let _ = write!(
                            path,
                            "{}{:.1},{:.1} ",
                            if pen { "L" } else { "M" },
                            x(t),
                            y(v)
                        );
                        pen = true;
                    }
                    None => pen = false,
                }
            }
            let _ = writeln!(
                o,
                r#"<path d="{path}" fill="none" stroke="{color}" stroke-width="1.3"/>"#
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
    // Time axis: seconds since the scenario's start, about ten ticks whatever its length.
    let yb = top + BLOCK_HEAD + 3.0 * panel_h + 2.0 * GAP;
    let step = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
        .into_iter()
        .find(|s| span / s <= 12.0)
        .unwrap_or(100.0);
    let mut t = 0.0;
    while t <= span {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#,
            x(d.t0 + t),
            yb + 14.0
        );
        t += step;
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time since the scenario's start (s)</text>"#,
        LEFT + plot_w / 2.0,
        yb + 30.0
    );
}
