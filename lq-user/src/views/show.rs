//! `lqd show`: operator views, as a table or as JSON, rendered from what they are given:
//! the path table, counters and neighbors read from the pinned maps by
//! [`crate::tools::pins`] (so they work without a running daemon, and after a crash);
//! weights and neighbor states from the running daemon's snapshot.

use std::{collections::BTreeMap, fmt::Write as _, net::Ipv4Addr};

use lq_common::maps::{
    COUNTER_COUNT, Counter, NeighborKey, NeighborValue, PATH_FLAG_PFC_FABRIC, PathKey,
};
use serde::Deserialize as _;
use serde_json::{Value, json};

use crate::{
    core::controller::effective::EffectiveEntry,
    views::snapshot::{LocalView, UplinksView, WeightsView},
};

fn ip(v: u32) -> String {
    Ipv4Addr::from(v).to_string()
}

/// The path quality table as JSON (one object per entry), ages at `now` (CLOCK_MONOTONIC).
pub fn paths_json(paths: &BTreeMap<PathKey, EffectiveEntry>, now: u64) -> Value {
    let list: Vec<Value> = paths
        .iter()
        .map(|(k, e)| {
            // The YANG link-quality entry (one rendering for `show paths` and `show
            // state`) with the effective LQS / CL (seed 003 section 6.5), plus the spine
            // and what only the table knows, including the received LQS / CL.
            let v = &e.received;
            let mut o = crate::views::yang_state::path_entry_json(k, &e.effective);
            e.annotate(&mut o);
            o["spine-as"] = json!(k.spine_as);
            o["spine-node-id"] = json!(ip(k.spine_id));
            o["sequence-number"] = json!(v.sequence);
            o["age-ms"] = json!(now.saturating_sub(v.last_update_ns) as f64 / 1e6);
            o["pfc-fabric"] = json!(v.flags & PATH_FLAG_PFC_FABRIC != 0);
            o
        })
        .collect();
    Value::Array(list)
}

/// The path table as a human table.
pub fn paths_table(v: &Value) -> String {
    let mut s = format!(
        "{:<16} {:<16} {:>6} {:>4} {:>3} {:>12} {:>6} {:>9}  {}\n",
        "SPINE", "REMOTE", "LINK", "LQS", "CL", "AVAIL-GBPS", "SEQ", "AGE-MS", "FLAGS"
    );
    for e in v.as_array().into_iter().flatten() {
        let node = |id: &str, asn: &str| {
            let a = e[asn].as_u64().unwrap_or(0);
            let n = e[id].as_str().unwrap_or("?");
            if a == 0 {
                n.to_string()
            } else {
                format!("{a}:{n}")
            }
        };
        let mut flags = Vec::new();
        if let Some(state) = e["entry-state"].as_str().filter(|s| *s != "fresh") {
            flags.push(state);
        }
        if e["pfc-fabric"] == json!(true) {
            flags.push("pfc");
        }
        if e.get("diagnostics").is_some() {
            flags.push("diag");
            if e["diagnostics"]["drops-active"] == json!(true) {
                flags.push("drops");
            }
        }
        let _ = writeln!(
            s,
            "{:<16} {:<16} {:>6} {:>4} {:>3} {:>12} {:>6} {:>9.1}  {}",
            node("spine-node-id", "spine-as"),
            node("remote-node-id", "remote-as"),
            // serde_json's Display ignores width: padded as strings.
            e["link-id"].to_string(),
            e["lqs"].to_string(),
            e["cl"].to_string(),
            e["available-bandwidth"].as_str().unwrap_or("?"),
            e["sequence-number"].to_string(),
            e["age-ms"].as_f64().unwrap_or(0.0),
            flags.join(",")
        );
    }
    s
}

/// Receiver counters (summed over CPUs) as JSON: one member per counter name.
pub fn counters_json(c: &[u64; COUNTER_COUNT as usize]) -> Value {
    let mut o = serde_json::Map::new();
    for counter in Counter::ALL {
        o.insert(counter.name().into(), json!(c[counter as usize]));
    }
    Value::Object(o)
}

/// Counters as `name value` lines.
pub fn counters_table(v: &Value) -> String {
    let mut s = String::new();
    for (k, n) in v.as_object().into_iter().flatten() {
        let _ = writeln!(s, "{k:<20} {n}");
    }
    s
}

/// Neighbors from the pinned table (when no daemon answers): failed when silent for more
/// than the configured dead interval `dead`, active otherwise.
pub fn neighbors_from_table(
    neighbors: &BTreeMap<NeighborKey, NeighborValue>,
    dead: u64,
    now: u64,
) -> Value {
    let list: Vec<Value> = neighbors
        .iter()
        .map(|(k, v)| {
            let silent = now.saturating_sub(v.last_seen_ns);
            json!({
                "node-as": k.node_as,
                "node-id": ip(k.node_id),
                "state": if silent > dead { "failed" } else { "active" },
                "last-sequence": v.last_sequence,
                "accepted": v.accepted,
                "last-seen-ms-ago": silent as f64 / 1e6,
            })
        })
        .collect();
    Value::Array(list)
}

/// One row of `lqd show neighbors`, from the daemon's answer or from the pins.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NeighborRow {
    /// Node AS.
    pub node_as: u32,
    /// Router-ID.
    pub node_id: String,
    /// active, stale or failed.
    pub state: String,
    /// Last accepted sequence number.
    pub last_sequence: u16,
    /// Datagrams accepted.
    pub accepted: u64,
    /// Datagrams sent but not accepted, by sequence (daemon answers only).
    #[serde(default)]
    pub missed_datagrams: Option<u64>,
    /// Silence so far.
    pub last_seen_ms_ago: f64,
    /// Observed advertisement interval (daemon answers only).
    #[serde(default)]
    pub observed_interval_ms: Option<f64>,
}

/// Neighbors as a table.
pub fn neighbors_table(v: &Value) -> String {
    let rows: Vec<NeighborRow> = match Vec::deserialize(v) {
        Ok(r) => r,
        Err(e) => return format!("unexpected neighbors answer: {e}\n"),
    };
    let mut s = format!(
        "{:<12} {:<16} {:<8} {:>8} {:>10} {:>8} {:>12}\n",
        "AS", "NODE-ID", "STATE", "SEQ", "ACCEPTED", "MISSED", "LAST-SEEN-MS"
    );
    for n in &rows {
        let missed = n
            .missed_datagrams
            .map_or_else(|| "-".to_string(), |m| m.to_string());
        let _ = writeln!(
            s,
            "{:<12} {:<16} {:<8} {:>8} {:>10} {:>8} {:>12.1}",
            n.node_as, n.node_id, n.state, n.last_sequence, n.accepted, missed, n.last_seen_ms_ago
        );
    }
    s
}

/// Weights per group (remote node) as a table: its destinations, then target, applied and
/// kernel weight per member.
pub fn weights_table(v: &Value) -> String {
    match WeightsView::deserialize(v) {
        Ok(w) => weights_view_table(&w),
        Err(e) => format!("unexpected weights answer: {e}\n"),
    }
}

/// A capacity as `25 Mb/s (bgp)`, `400 Gb/s (link)`: Mbit/s below 1 Gbit/s.
fn capacity_cell(gbps: f64, source: &str) -> String {
    let source = if source.is_empty() { "-" } else { source };
    if gbps > 0.0 && gbps < 1.0 {
        format!(
            "{} Mb/s ({source})",
            (gbps * 1000.0 * 1000.0).round() / 1000.0
        )
    } else {
        format!("{} Gb/s ({source})", (gbps * 1000.0).round() / 1000.0)
    }
}

/// [`weights_table`] from the typed view.
pub fn weights_view_table(w: &WeightsView) -> String {
    let mut s = String::new();
    for d in &w.groups {
        let _ = writeln!(
            s,
            "remote {}  group {}  ({})",
            d.label,
            d.group_id.map_or_else(|| "-".into(), |g| g.to_string()),
            d.quality_source
        );
        let _ = writeln!(s, "  destinations: {}", d.prefixes.join(" "));
        let _ = writeln!(
            s,
            "  {:<8} {:<10} {:<16} {:>5} {:>6} {:>7} {:>18} {:>8} {:>8} {:>7}",
            "UPLINK",
            "IFACE",
            "SPINE",
            "LOCAL",
            "REMOTE",
            "PATH-Q",
            "CAPACITY",
            "TARGET",
            "APPLIED",
            "KERNEL"
        );
        let mut gray_failures = false;
        for m in &d.members {
            gray_failures |= m.gray_failure;
            let pct = |x: f64| format!("{:.2}%", x * 100.0);
            let _ = writeln!(
                s,
                "  {:<8} {:<10} {:<16} {:>5} {:>6} {:>7} {:>18} {:>8} {:>8} {:>7}",
                m.uplink,
                m.interface.as_deref().unwrap_or("-"),
                m.spine,
                m.local_quality,
                m.remote_lqs.map_or_else(|| "-".into(), |r| r.to_string()),
                if m.gray_failure {
                    format!("{}*", m.path_quality)
                } else {
                    m.path_quality.to_string()
                },
                capacity_cell(m.capacity_gbps, &m.capacity_source),
                pct(m.target),
                pct(m.applied),
                m.kernel_weight
            );
        }
        if gray_failures {
            let _ = writeln!(
                s,
                "  * gray failure: loss (CL 7) with most of the link's capacity available, pruned ([damping] gray-failure-prune)"
            );
        }
    }
    let _ = write!(
        s,
        "group replaces: {} (moving no bucket: {})  refused: {}  member deletes on spine failure: {}  gray-failure prunes: {}",
        w.group_replaces,
        w.bucket_neutral_replaces,
        w.group_errors,
        w.member_deletes,
        w.gray_failure_prunes
    );
    s.push('\n');
    let _ = writeln!(
        s,
        "buckets moved: {}  not written (no bucket move helps): {}  holds: {} started, {} now  replaces by cause: install {}, members {}, moves {}, hold expired {}, every step {}",
        w.buckets_moved,
        w.bucket_neutral_skipped,
        w.holds_started,
        w.groups_held,
        w.replace_causes.install,
        w.replace_causes.members,
        w.replace_causes.moves,
        w.replace_causes.hold_expired,
        w.replace_causes.every_step,
    );
    let _ = writeln!(
        s,
        "group computations: {}  waited for their T_reweight boundary: {}",
        w.group_computations, w.group_computations_deferred,
    );
    let _ = writeln!(
        s,
        "control steps: {}  path table rows read: {} (by their stamp words: {})  spines declared failed (6.5): {}",
        w.control_steps, w.path_rows_read, w.path_rows_read_by_word, w.neighbor_failures,
    );
    let _ = writeln!(
        s,
        "ageing sweeps (6.5): {}  found unnecessary (every row read fresh since the last): {}",
        w.ageing_sweeps, w.ageing_sweeps_skipped,
    );
    if w.foreign_nexthop_writes > 0 {
        let _ = writeln!(
            s,
            "nexthop objects in lq's id range written by another program: {} (zebra: add `no zebra nexthop kernel enable`, docs/operator-guide.md)",
            w.foreign_nexthop_writes
        );
    }
    let t = &w.step_timing;
    if t.steps > 0 {
        let _ = writeln!(
            s,
            "last {} replacing steps, us (p50 / p99 / max): lqd {:.0} / {:.0} / {:.0}, kernel replaces {:.0} / {:.0} / {:.0}",
            t.steps,
            t.work_us.p50,
            t.work_us.p99,
            t.work_us.max,
            t.replace_us.p50,
            t.replace_us.p99,
            t.replace_us.max
        );
    }
    s
}

/// Pretty JSON (the state view has no table form: it is YANG data).
pub fn pretty_json(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

/// `lqd show status` as text.
pub fn status_table(v: &Value) -> String {
    match crate::views::snapshot::StatusView::deserialize(v) {
        Ok(s) => crate::views::snapshot::status_table(&s),
        Err(e) => format!("unexpected status answer: {e}\n"),
    }
}

/// The load-balancer role's uplinks as a table.
pub fn uplinks_table(v: &Value) -> String {
    match UplinksView::deserialize(v) {
        Ok(u) => uplinks_view_table(&u),
        Err(e) => format!("unexpected uplinks answer: {e}\n"),
    }
}

/// [`uplinks_table`] from the typed view.
pub fn uplinks_view_table(v: &UplinksView) -> String {
    let mut s = format!(
        "{:>5} {:<10} {:<16} {:<4} {:>5}  {:>7} {:>5} {:>5} {:>5} {:>5}  {:>4} {:>3}  {}\n",
        "ID",
        "IFACE",
        "SPINE",
        "OPER",
        "LOCAL",
        "APPLIED",
        "U~",
        "E~",
        "F~",
        "D~",
        "LQS",
        "CL",
        "STATE"
    );
    for u in &v.uplinks {
        let _ = write!(
            s,
            "{:>5} {:<10} {:<16} {:<4} {:>5}",
            u.id,
            u.interface,
            u.spine,
            if u.oper_up { "up" } else { "down" },
            u.local_quality
        );
        match (&u.report, u.applied_quality) {
            (Some(r), applied) => {
                let m = &r.smoothed;
                let _ = writeln!(
                    s,
                    "  {:>7} {:>5.2} {:>5.2} {:>5.2} {:>5.2}  {:>4} {:>3}  {}{}",
                    applied.map_or_else(|| "-".to_string(), |q| q.to_string()),
                    m.u,
                    m.e,
                    m.f,
                    m.d,
                    r.lqs,
                    r.cl,
                    r.state,
                    if r.hold_down { "*" } else { "" },
                );
            }
            (None, _) if v.source == "measured" => s.push_str("  (not measured yet)\n"),
            (None, _) => s.push('\n'),
        }
    }
    let _ = writeln!(
        s,
        "local quality: {}{}",
        v.source,
        if v.source == "measured" {
            format!(
                " (read errors {}, samples dropped {})",
                v.read_errors, v.samples_dropped
            )
        } else {
            " (255 up, 0 down)".to_string()
        }
    );
    s
}

/// The helper role's links as a table.
pub fn local_table(v: &Value) -> String {
    match LocalView::deserialize(v) {
        Ok(l) => local_view_table(&l),
        Err(e) => format!("unexpected local answer: {e}\n"),
    }
}

/// [`local_table`] from the typed view.
pub fn local_view_table(v: &LocalView) -> String {
    let mut s = format!(
        "{:<10} {:>5} {:>5} {:>5} {:>5} {:>5} {:>2}  {:>5} {:>5} {:>5} {:>5}  {:>4} {:>3} {:>3}  {:<10} {:>10}\n",
        "IFACE",
        "LINK",
        "U",
        "E",
        "F",
        "D",
        "X",
        "U~",
        "E~",
        "F~",
        "D~",
        "LQS",
        "CLc",
        "CL",
        "STATE",
        "AVAIL-GBPS"
    );
    let f = |x: f64| format!("{x:.2}");
    for l in &v.links {
        let Some(r) = l.report.as_ref().filter(|_| l.measured) else {
            let _ = writeln!(
                s,
                "{:<10} {:>5}  (not measured yet)",
                l.interface, l.link_id
            );
            continue;
        };
        let (raw, m) = (&r.raw, &r.smoothed);
        let _ = writeln!(
            s,
            "{:<10} {:>5} {:>5} {:>5} {:>5} {:>5} {:>2}  {:>5} {:>5} {:>5} {:>5}  {:>4} {:>3} {:>3}  {:<10} {:>10}",
            l.interface,
            l.link_id,
            f(raw.u),
            f(raw.e),
            f(raw.f),
            f(raw.d),
            u8::from(raw.x),
            f(m.u),
            f(m.e),
            f(m.f),
            f(m.d),
            r.lqs,
            r.computed_cl,
            r.cl,
            format!("{}{}", r.state, if r.hold_down { "*" } else { "" }),
            r.available_bandwidth_gbps
        );
    }
    let _ = writeln!(
        s,
        "sequence {}  periodic {}  triggered {}  datagrams sent {}  send errors {}  samples dropped {}   (~ smoothed, * hold-down running)",
        v.last_sequence_number
            .map_or_else(|| "-".into(), |n| n.to_string()),
        v.periodic,
        v.triggered,
        v.datagrams_sent,
        v.send_errors,
        v.samples_dropped
    );
    s
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn a_prefix_holds_its_addresses_and_longer_prefixes_only() {
        assert!(covers("10.4.0.0/24", "10.4.0.0/24"));
        assert!(covers("10.4.0.0/24", "10.4.0.9"));
        assert!(covers("10.4.0.0/24", "10.4.0.128/25"));
        assert!(!covers("10.4.0.0/24", "10.4.0.0/16"));
        assert!(!covers("10.4.0.0/24", "10.5.0.1"));
        assert!(covers("2001:db8::/32", "2001:db8:1::1"));
        assert!(!covers("2001:db8::/32", "10.4.0.9"));
        assert!(covers("0.0.0.0/0", "192.0.2.1"));
        assert!(!covers("10.4.0.0/24", "not an address"));
    }

    #[test]
    fn filters_keep_the_spine_remote_and_destination_asked_for() {
        let paths = json!([
            {"spine-node-id": "10.0.0.1", "remote-node-id": "10.0.1.4"},
            {"spine-node-id": "10.0.0.2", "remote-node-id": "10.0.1.4"},
            {"spine-node-id": "10.0.0.2", "remote-node-id": "10.0.1.5"},
        ]);
        let f = ShowFilter {
            spine: Some("10.0.0.2".into()),
            remote: Some("10.0.1.4".into()),
            prefix: None,
        };
        assert_eq!(f.paths(&paths), json!([paths[1].clone()]));
        let weights = json!({"groups": [
            {"remote": "0/10.0.1.4", "prefixes": ["10.4.0.0/24"], "members": [{"spine": "10.0.0.1"}, {"spine": "10.0.0.2"}]},
            {"remote": "0/10.0.1.5", "prefixes": ["10.5.0.0/24"], "members": [{"spine": "10.0.0.2"}]},
        ], "group-replaces": 3});
        let f = ShowFilter {
            spine: Some("10.0.0.2".into()),
            remote: None,
            prefix: Some("10.4.0.9".into()),
        };
        let w = f.weights(&weights);
        assert_eq!(w["group-replaces"], 3);
        assert_eq!(
            w["groups"],
            json!([{"remote": "0/10.0.1.4", "prefixes": ["10.4.0.0/24"], "members": [{"spine": "10.0.0.2"}]}])
        );
        let by_remote = ShowFilter {
            remote: Some("10.0.1.5".into()),
            ..ShowFilter::default()
        };
        assert_eq!(
            by_remote.weights(&weights)["groups"][0]["remote"],
            "0/10.0.1.5"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::snapshot::{GroupWeights, MemberWeights};

    /// The table renders the typed view the daemon serialises: a round trip through the
    /// control socket's JSON gives the same table, aligned.
    #[test]
    fn weights_table_from_the_typed_view() {
        let w = WeightsView {
            groups: vec![GroupWeights {
                label: "0/10.0.0.104".into(),
                remote: Some("0/10.0.0.104".into()),
                prefixes: vec!["10.4.0.0/24".into(), "10.4.1.0/24".into()],
                eligible: None,
                quality_source: "remote".into(),
                group_id: Some(7),
                members: vec![MemberWeights {
                    uplink: 1,
                    interface: Some("up1".into()),
                    spine: std::net::Ipv4Addr::new(10, 0, 0, 1),
                    spine_as: 0,
                    local_quality: 255,
                    remote_lqs: Some(72),
                    path_quality: 72,
                    gray_failure: false,
                    capacity_gbps: 0.025,
                    capacity_source: "bgp".into(),
                    target: 0.25,
                    applied: 0.5,
                    computed_weight: 128,
                    kernel_weight: 128,
                    nexthop_id: 9,
                }],
            }],
            group_replaces: 3,
            bucket_neutral_replaces: 1,
            ageing_sweeps: 5,
            ageing_sweeps_skipped: 40,
            ..WeightsView::default()
        };
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(json["groups"][0]["members"][0]["remote-lqs"], 72);
        assert_eq!(json["ageing-sweeps-skipped"], 40);
        assert_eq!(json["groups"][0]["prefixes"][1], "10.4.1.0/24");
        let t = weights_table(&json);
        assert_eq!(t, weights_view_table(&w));
        assert!(
            t.contains("  1        up1        10.0.0.1           255     72      72      25 Mb/s (bgp)   25.00%   50.00%     128\n"),
            "{t}"
        );
        assert!(
            t.starts_with(
                "remote 0/10.0.0.104  group 7  (remote)\n  destinations: 10.4.0.0/24 10.4.1.0/24\n"
            ),
            "{t}"
        );
        assert!(
            t.ends_with(
                "group replaces: 3 (moving no bucket: 1)  refused: 0  member deletes on spine failure: 0  gray-failure prunes: 0\nbuckets moved: 0  not written (no bucket move helps): 0  holds: 0 started, 0 now  replaces by cause: install 0, members 0, moves 0, hold expired 0, every step 0\ngroup computations: 0  waited for their T_reweight boundary: 0\ncontrol steps: 0  path table rows read: 0 (by their stamp words: 0)  spines declared failed (6.5): 0\nageing sweeps (6.5): 5  found unnecessary (every row read fresh since the last): 40\n"
            ),
            "{t}"
        );
        assert!(weights_table(&json!([])).starts_with("unexpected weights answer"));
    }

    /// `show local`'s JSON keeps its keys (measured and unmeasured links) and the table
    /// reads it back.
    #[test]
    fn local_view_round_trip() {
        use crate::views::snapshot::{LinkReportView, LocalLinkView};
        let v = LocalView {
            links: vec![
                LocalLinkView {
                    source: Some(json!({"qdisc": "tbf"})),
                    interface: "s1".into(),
                    link_id: 4,
                    measured: true,
                    report: Some(LinkReportView {
                        lqs: 237,
                        cl: 1,
                        state: "normal".into(),
                        hold_down: true,
                        available_bandwidth_gbps: "100.000".into(),
                        ..LinkReportView::default()
                    }),
                },
                LocalLinkView {
                    interface: "s2".into(),
                    link_id: 5,
                    ..LocalLinkView::default()
                },
            ],
            last_sequence_number: Some(9),
            periodic: 3,
            ..LocalView::default()
        };
        let j = serde_json::to_value(&v).unwrap();
        let keys: Vec<&str> = j["links"][0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys[..6],
            [
                "source",
                "interface",
                "link-id",
                "measured",
                "oper-up",
                "raw"
            ]
        );
        assert_eq!(
            j["links"][1],
            json!({"interface": "s2", "link-id": 5, "measured": false})
        );
        assert_eq!(LocalView::deserialize(&j).unwrap(), v);
        let t = local_table(&j);
        assert!(t.contains(" 237   0   1  normal*"), "{t}");
        assert!(t.contains("s2             5  (not measured yet)"), "{t}");
        assert!(t.contains("sequence 9  periodic 3"), "{t}");
    }

    /// `show uplinks`: a measured, a not-yet-measured and a link-state uplink; the JSON
    /// reads back and the table shows what the weights use beside what was measured.
    #[test]
    fn uplinks_view_round_trip() {
        use crate::views::snapshot::{LinkReportView, MetricsView, UplinkView};
        let measured = UplinksView {
            source: "measured".into(),
            uplinks: vec![
                UplinkView {
                    id: 1,
                    interface: "up1".into(),
                    spine: Ipv4Addr::new(10, 0, 0, 1),
                    oper_up: true,
                    local_quality: 118,
                    applied_quality: Some(118),
                    report: Some(LinkReportView {
                        oper_up: true,
                        smoothed: MetricsView {
                            u: 0.97,
                            d: 0.5,
                            ..MetricsView::default()
                        },
                        lqs: 112,
                        cl: 5,
                        state: "normal".into(),
                        ..LinkReportView::default()
                    }),
                },
                UplinkView {
                    id: 2,
                    interface: "up2".into(),
                    spine: Ipv4Addr::new(10, 0, 0, 2),
                    oper_up: false,
                    local_quality: 0,
                    applied_quality: None,
                    report: None,
                },
            ],
            read_errors: 0,
            samples_dropped: 3,
        };
        let j = serde_json::to_value(&measured).unwrap();
        assert_eq!(
            j["uplinks"][1],
            json!({"id": 2, "interface": "up2", "spine": "10.0.0.2", "oper-up": false, "local-quality": 0})
        );
        assert_eq!(UplinksView::deserialize(&j).unwrap(), measured);
        let t = uplinks_table(&j);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[1],
            "    1 up1        10.0.0.1         up     118      118  0.97  0.00  0.00  0.50   112   5  normal"
        );
        assert_eq!(
            lines[2],
            "    2 up2        10.0.0.2         down     0  (not measured yet)"
        );
        assert_eq!(
            lines[3],
            "local quality: measured (read errors 0, samples dropped 3)"
        );

        let link_state = UplinksView {
            source: "link-state".into(),
            uplinks: vec![UplinkView {
                id: 7,
                interface: "up7".into(),
                spine: Ipv4Addr::new(10, 0, 0, 7),
                oper_up: true,
                local_quality: 255,
                applied_quality: None,
                report: None,
            }],
            ..UplinksView::default()
        };
        let t = uplinks_table(&serde_json::to_value(&link_state).unwrap());
        assert!(
            t.contains("    7 up7        10.0.0.7         up     255\n"),
            "{t}"
        );
        assert!(
            t.ends_with("local quality: link-state (255 up, 0 down)\n"),
            "{t}"
        );
        assert!(uplinks_table(&json!([])).starts_with("unexpected uplinks answer"));
    }

    #[test]
    fn neighbors_table_reads_daemon_and_pin_rows() {
        let v = json!([{"node-as": 0, "node-id": "10.0.0.1", "state": "active",
            "last-sequence": 5, "accepted": 9, "last-seen-ms-ago": 3.25}]);
        let t = neighbors_table(&v);
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .starts_with("0            10.0.0.1         active"),
            "{t}"
        );
        assert!(
            t.ends_with("         3.2\n") || t.ends_with("         3.3\n"),
            "{t}"
        );
    }
}

/// `lqd show paths|weights|neighbors --spine X --remote R --prefix P`: what to keep. A
/// 64 x 512 leaf has 32 768 path rows; an operator asks about one spine, one remote leaf
/// or one destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShowFilter {
    /// A spine's Router-ID (dotted quad).
    pub spine: Option<String>,
    /// A remote node's Router-ID.
    pub remote: Option<String>,
    /// A destination: a prefix (`10.4.0.0/24`) or an address (`10.4.0.9`) inside one.
    pub prefix: Option<String>,
}

impl ShowFilter {
    /// Whether no filter is set.
    pub fn is_empty(&self) -> bool {
        self.spine.is_none() && self.remote.is_none() && self.prefix.is_none()
    }

    /// `show paths --json` rows that match.
    pub fn paths(&self, v: &Value) -> Value {
        let keep = |e: &Value| {
            self.spine
                .as_deref()
                .is_none_or(|s| e["spine-node-id"] == s)
                && self
                    .remote
                    .as_deref()
                    .is_none_or(|r| e["remote-node-id"] == r)
        };
        Value::Array(
            v.as_array()
                .into_iter()
                .flatten()
                .filter(|e| keep(e))
                .cloned()
                .collect(),
        )
    }

    /// `show neighbors --json` rows that match (`--spine`).
    pub fn neighbors(&self, v: &Value) -> Value {
        Value::Array(
            v.as_array()
                .into_iter()
                .flatten()
                .filter(|n| self.spine.as_deref().is_none_or(|s| n["node-id"] == s))
                .cloned()
                .collect(),
        )
    }

    /// `show weights --json` with the matching groups, and in them the matching members.
    pub fn weights(&self, v: &Value) -> Value {
        let mut out = v.clone();
        let remote_ok = |g: &Value| {
            self.remote.as_deref().is_none_or(|r| {
                g["remote"]
                    .as_str()
                    .is_some_and(|x| x == r || x.rsplit('/').next() == Some(r))
            })
        };
        let prefix_ok = |g: &Value| {
            self.prefix.as_deref().is_none_or(|p| {
                g["prefixes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .any(|q| covers(q, p))
            })
        };
        let groups: Vec<Value> = v["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| remote_ok(g) && prefix_ok(g))
            .map(|g| {
                let mut g = g.clone();
                if let (Some(s), Some(members)) = (self.spine.as_deref(), g["members"].as_array()) {
                    let kept: Vec<Value> = members
                        .iter()
                        .filter(|m| m["spine"] == s)
                        .cloned()
                        .collect();
                    g["members"] = Value::Array(kept);
                }
                g
            })
            .collect();
        out["groups"] = Value::Array(groups);
        out
    }
}

/// Whether prefix `q` (`10.4.0.0/24`) equals `p` or holds the address or prefix `p`.
fn covers(q: &str, p: &str) -> bool {
    if q == p {
        return true;
    }
    let (Ok(outer), Ok(inner)) = (
        crate::config::parse_prefix(q),
        crate::config::parse_prefix(p).or_else(|_| {
            p.parse::<std::net::IpAddr>()
                .map(|a| crate::core::controller::path_quality::Prefix {
                    addr: a,
                    len: if a.is_ipv4() { 32 } else { 128 },
                })
        }),
    ) else {
        return false;
    };
    inner.len >= outer.len
        && match (outer.addr, inner.addr) {
            (std::net::IpAddr::V4(o), std::net::IpAddr::V4(i)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(outer.len)).unwrap_or(0);
                u32::from(o) & mask == u32::from(i) & mask
            }
            (std::net::IpAddr::V6(o), std::net::IpAddr::V6(i)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(outer.len))
                    .unwrap_or(0);
                u128::from(o) & mask == u128::from(i) & mask
            }
            _ => false,
        }
}

/// `lqd show weights --explain DESTINATION`: for the group that carries the destination,
/// every input and rule behind each member's weight, from the daemon's weights and
/// neighbors and the pinned path table (seed 003 sections 4.1, 6.2-6.5):
/// neighbor state (6.5), the path entry and its state, local quality (6.3), path quality =
/// min(local, remote), capacity and its source (4.1), the target share, the damped
/// (applied) share (6.4) and the kernel's weight.
pub fn explain(weights: &Value, neighbors: &Value, paths: &Value, destination: &str) -> Value {
    let filter = ShowFilter {
        prefix: Some(destination.to_owned()),
        ..ShowFilter::default()
    };
    let groups = filter.weights(weights)["groups"].clone();
    let Some(g) = groups.as_array().and_then(|g| g.first()).cloned() else {
        return json!({
            "destination": destination,
            "error": "no group of lqd's carries this destination (show weights lists them)",
        });
    };
    let remote = g["remote"]
        .as_str()
        .map(|r| r.rsplit('/').next().unwrap_or(r).to_owned());
    let members: Vec<Value> = g["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let spine = m["spine"].as_str().unwrap_or_default();
            let neighbor = neighbors
                .as_array()
                .into_iter()
                .flatten()
                .find(|n| n["node-id"] == spine);
            let entry = paths.as_array().into_iter().flatten().find(|e| {
                e["spine-node-id"] == spine
                    && remote.as_deref().is_some_and(|r| e["remote-node-id"] == r)
            });
            let mut why = Vec::new();
            match neighbor.and_then(|n| n["state"].as_str()) {
                Some("failed") => why.push("the spine is failed (silent for miss-count x T_notify, 6.5): its entries count as LQS 0, CL 7".to_owned()),
                Some(s) => why.push(format!("the spine is {s}")),
                None => why.push("the spine has never been heard: no entry confirms this path (4.1), so it gets no weight".to_owned()),
            }
            match (&remote, entry) {
                (None, _) => why.push("no remote node for this destination: local quality only (6.3)".into()),
                (Some(r), None) => why.push(format!("no entry from this spine for remote node {r}: the path is unconfirmed (4.1)")),
                (Some(_), Some(e)) => {
                    let state = e["entry-state"].as_str().unwrap_or("fresh");
                    why.push(format!(
                        "entry LQS {} CL {} ({state}{})",
                        e["lqs"], e["cl"],
                        if state == "fresh" { "" } else { ": counted as LQS 0, CL 7 (6.5)" }
                    ));
                }
            }
            if m["gray-failure"] == true {
                why.push(format!(
                    "path quality 0: the spine reports loss (CL 7) on a link with most of its capacity available, a gray failure ([damping] gray-failure-prune, an opt-in departure from 6.3; min(local quality {}, remote LQS {}) would be {})",
                    m["local-quality"],
                    m["remote-lqs"].as_u64().map_or_else(|| "-".into(), |v| v.to_string()),
                    m["local-quality"].as_u64().unwrap_or(0).min(m["remote-lqs"].as_u64().unwrap_or(255))
                ));
            } else {
                why.push(format!(
                    "path quality {} = min(local quality {}, remote LQS {}) (6.3)",
                    m["path-quality"],
                    m["local-quality"],
                    m["remote-lqs"].as_u64().map_or_else(|| "-".into(), |v| v.to_string())
                ));
            }
            why.push(format!(
                "capacity {} Gbit/s from {} (4.1)",
                m["capacity-gbps"], m["capacity-source"].as_str().unwrap_or("?")
            ));
            why.push(format!(
                "target share {:.2} %, applied (damped, 6.4) {:.2} %, kernel weight {}",
                m["target"].as_f64().unwrap_or(0.0) * 100.0,
                m["applied"].as_f64().unwrap_or(0.0) * 100.0,
                m["kernel-weight"]
            ));
            json!({
                "uplink": m["uplink"],
                "spine": spine,
                "neighbor-state": neighbor.map(|n| n["state"].clone()),
                "entry": entry.map(|e| json!({
                    "lqs": e["lqs"], "cl": e["cl"],
                    "state": e["entry-state"].as_str().unwrap_or("fresh"),
                    "age-ms": e["age-ms"],
                })),
                "local-quality": m["local-quality"],
                "remote-lqs": m["remote-lqs"],
                "path-quality": m["path-quality"],
                "gray-failure": m["gray-failure"].as_bool().unwrap_or(false),
                "capacity-gbps": m["capacity-gbps"],
                "capacity-source": m["capacity-source"],
                "target": m["target"],
                "applied": m["applied"],
                "kernel-weight": m["kernel-weight"],
                "why": why,
            })
        })
        .collect();
    json!({
        "destination": destination,
        "group": g["label"],
        "remote": g["remote"],
        "prefixes": g["prefixes"],
        "quality-source": g["quality-source"],
        "members": members,
    })
}

/// The text of [`explain`].
pub fn explain_text(v: &Value) -> String {
    if let Some(e) = v["error"].as_str() {
        return format!("{}: {e}\n", v["destination"].as_str().unwrap_or("?"));
    }
    let mut s = format!(
        "{} is in group {} (remote {}, quality {}), prefixes {}\n",
        v["destination"].as_str().unwrap_or("?"),
        v["group"].as_str().unwrap_or("?"),
        v["remote"].as_str().unwrap_or("-"),
        v["quality-source"].as_str().unwrap_or("?"),
        v["prefixes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for m in v["members"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "  uplink {} via spine {}:",
            m["uplink"],
            m["spine"].as_str().unwrap_or("?")
        );
        for w in m["why"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "    - {}", w.as_str().unwrap_or("?"));
        }
    }
    s
}
