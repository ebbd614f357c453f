//! The opt-in Prometheus text endpoint (`[metrics] listen`): LQS and CL of advertised and
//! received links, weights, neighbor states, receiver discard counters, PFC counters and
//! export health, in the text exposition format 0.0.4.

use std::fmt::Write as _;

use std::net::Ipv4Addr;

use crate::views::snapshot::{ClientStats, LinkReportView, Snapshot};

/// Escapes a label value (backslash, double quote, newline).
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }
    /// A counter family with its one unlabelled sample.
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value as f64);
    }
    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        if l.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{}}} {value}", l.join(","));
        }
    }
}

/// Renders every metric the running roles have, from the loop's latest snapshot, and the
/// client counters of the daemon's endpoints. The families that reveal a sensitive subtree
/// of seed 003 section 12.2 (`/lq-telemetry/local`, `/neighbors`, and lq's
/// `/weighted-ecmp`, [`crate::core::northbound::SENSITIVE`]) are rendered only when
/// `readable` says the client may read that subtree (`[[metrics.client]]`).
pub fn render(
    snap: &Snapshot,
    clients: Option<&ClientStats>,
    readable: impl Fn(&str) -> bool,
) -> String {
    let neighbors = readable("neighbors");
    let weighted_ecmp = readable("weighted-ecmp");
    let local = readable("local");
    let mut o = Out(String::new());
    o.family("lq_up", "gauge", "1 while lqd runs.");
    o.sample("lq_up", &[], 1.0);
    if let Some(lb) = &snap.load_balancer {
        if let Some(c) = &lb.receiver_counters {
            o.family(
                "lq_receiver_events_total",
                "counter",
                "XDP receiver outcomes: accepted and each discard reason of the wire spec.",
            );
            for (name, v) in c.iter().filter(|(n, _)| !n.ends_with("_ns")) {
                o.sample(
                    "lq_receiver_events_total",
                    &[("event", (*name).to_string())],
                    *v as f64,
                );
            }
            // Times, not events (`auth_hand_back_run_ns`): in seconds, one family each.
            for (name, v) in c.iter().filter(|(n, _)| n.ends_with("_ns")) {
                let family = format!("lq_receiver_{}_seconds_total", name.trim_end_matches("_ns"));
                o.family(&family, "counter", "Receiver time spent, seconds.");
                o.sample(&family, &[], *v as f64 / 1e9);
            }
        }
        if neighbors {
            o.family(
                "lq_neighbor_state",
                "gauge",
                "1 for the neighbor's current state (active, stale, failed).",
            );
        }
        for n in lb.neighbors.iter().filter(|_| neighbors) {
            o.sample(
                "lq_neighbor_state",
                &[
                    ("node_as", n.key.node_as.to_string()),
                    ("node_id", Ipv4Addr::from(n.key.node_id).to_string()),
                    ("state", n.state.as_str().to_string()),
                ],
                1.0,
            );
        }
        if neighbors {
            o.family(
                "lq_neighbor_datagrams_missed_total",
                "counter",
                "Datagrams a neighbor sent that were not accepted, by its sequence numbers (seed 003 sequence-number: loss detection).",
            );
        }
        for n in lb.neighbors.iter().filter(|_| neighbors) {
            o.sample(
                "lq_neighbor_datagrams_missed_total",
                &[
                    ("node_as", n.key.node_as.to_string()),
                    ("node_id", Ipv4Addr::from(n.key.node_id).to_string()),
                ],
                n.missed_datagrams as f64,
            );
        }
        let w = &lb.weights;
        if weighted_ecmp {
            o.family(
                "lq_path_quality",
                "gauge",
                "Path quality min(local, remote) per group (remote node) and member (seed 003 6.3).",
            );
            for d in &w.groups {
                for m in &d.members {
                    let l = [
                        ("remote", d.label.clone()),
                        ("uplink", m.uplink.to_string()),
                        ("spine", m.spine.to_string()),
                    ];
                    o.sample("lq_path_quality", &l, f64::from(m.path_quality));
                }
            }
            o.family(
                "lq_path_capacity_gbps",
                "gauge",
                "Path capacity per group (remote node) and member, Gbit/s (seed 003 4.1: min(uplink, slow plane's)), labelled with its source: bgp (Link Bandwidth over BMP), config, link (the uplink's speed) or unknown.",
            );
            for d in &w.groups {
                for m in &d.members {
                    let l = [
                        ("remote", d.label.clone()),
                        ("uplink", m.uplink.to_string()),
                        ("source", m.capacity_source.clone()),
                    ];
                    o.sample("lq_path_capacity_gbps", &l, m.capacity_gbps);
                }
            }
            o.family(
                "lq_uplink_local_quality",
                "gauge",
                "local_quality(S) per uplink (seed 003 6.3): 255 up / 0 down, or the LQS measured on the uplink with [local-quality] source = \"measured\".",
            );
            let local: std::collections::BTreeMap<u32, u8> = w
                .groups
                .iter()
                .flat_map(|d| d.members.iter().map(|m| (m.uplink, m.local_quality)))
                .collect();
            for (uplink, q) in local {
                o.sample(
                    "lq_uplink_local_quality",
                    &[("uplink", uplink.to_string())],
                    f64::from(q),
                );
            }
            o.family("lq_weight", "gauge", "Weights per group (remote node) and member: target and applied fractions, kernel integer weight.");
            for d in &w.groups {
                for m in &d.members {
                    for (kind, value) in [
                        ("target", m.target),
                        ("applied", m.applied),
                        ("kernel", f64::from(m.kernel_weight)),
                    ] {
                        let l = [
                            ("remote", d.label.clone()),
                            ("uplink", m.uplink.to_string()),
                            ("kind", kind.into()),
                        ];
                        o.sample("lq_weight", &l, value);
                    }
                }
            }
        }
        o.counter(
            "lq_group_replaces_total",
            "Nexthop group replaces done.",
            w.group_replaces,
        );
        let t = &w.step_timing;
        if t.steps > 0 {
            o.family(
                "lq_control_step_seconds",
                "gauge",
                "The last replacing control steps (up to 256): lqd's work up to the replaces sent (part=\"lqd\") and the replaces' kernel round trip (part=\"kernel\"), by quantile.",
            );
            for (part, p) in [("lqd", &t.work_us), ("kernel", &t.replace_us)] {
                for (q, v) in [("0.5", p.p50), ("0.99", p.p99), ("1", p.max)] {
                    o.sample(
                        "lq_control_step_seconds",
                        &[("part", part.into()), ("quantile", q.into())],
                        v / 1e6,
                    );
                }
            }
        }
        o.counter(
            "lq_group_replaces_bucket_neutral_total",
            "Nexthop group replaces done that moved no resilient bucket (the forwarding stayed the same).",
            w.bucket_neutral_replaces,
        );
        o.counter(
            "lq_group_replaces_skipped_total",
            "Group computations not written because no bucket move would bring the installed buckets closer to the computed weights (the kernel already forwards as close to them as it can).",
            w.bucket_neutral_skipped,
        );
        o.counter(
            "lq_group_computations_total",
            "Group computations done (path quality and target weights, seed 003 section 6.3).",
            w.group_computations,
        );
        o.counter(
            "lq_group_computations_deferred_total",
            "Group computations that waited for the group's next T_reweight boundary (its entries moved, but no target could be applied before it), per group and step.",
            w.group_computations_deferred,
        );
        o.counter(
            "lq_control_steps_total",
            "Control steps taken by the load balancer.",
            w.control_steps,
        );
        o.counter(
            "lq_path_rows_read_total",
            "Rows of the path table the control steps read (event-named rows, ageing sweeps, full reads; seed 003 section 6.2).",
            w.path_rows_read,
        );
        o.counter(
            "lq_path_rows_read_by_word_total",
            "Of the path table rows read, those read by their stamp words alone (LQS, CL, refresh stamp), not whole.",
            w.path_rows_read_by_word,
        );
        o.counter(
            "lq_ageing_sweeps_total",
            "Ageing sweeps of the path table's refresh stamps (seed 003 section 6.5), once the oldest live entry may have aged.",
            w.ageing_sweeps,
        );
        o.counter(
            "lq_ageing_sweeps_skipped_total",
            "Ageing sweeps found unnecessary: every row read and found fresh since the last sweep.",
            w.ageing_sweeps_skipped,
        );
        o.counter(
            "lq_neighbor_failures_total",
            "Spines declared failed by missed heartbeats (seed 003 section 6.5).",
            w.neighbor_failures,
        );
        o.counter(
            "lq_group_buckets_moved_total",
            "Resilient nexthop group buckets the replaces moved.",
            w.buckets_moved,
        );
        o.counter(
            "lq_group_holds_total",
            "Bucket moves held within the hysteresis ([nexthop-group] hysteresis-buckets), counted when each hold starts.",
            w.holds_started,
        );
        o.family(
            "lq_group_replaces_by_cause_total",
            "counter",
            "Nexthop group replaces written, by why: install, members (a path to or from 0), moves (a bucket bound past the hysteresis), hold-expired (a held bound's budget reached), every-step.",
        );
        let c = &w.replace_causes;
        for (cause, v) in [
            ("install", c.install),
            ("members", c.members),
            ("moves", c.moves),
            ("hold-expired", c.hold_expired),
            ("every-step", c.every_step),
        ] {
            o.sample(
                "lq_group_replaces_by_cause_total",
                &[("cause", cause.into())],
                v as f64,
            );
        }
        o.family(
            "lq_groups_held",
            "gauge",
            "Groups whose bucket move is held now.",
        );
        o.sample("lq_groups_held", &[], w.groups_held as f64);
        o.counter(
            "lq_nexthop_foreign_writes_total",
            "Nexthop objects in lq's id range written by another program (zebra sending lq's groups back down; seen with [slow-plane]).",
            w.foreign_nexthop_writes,
        );
        o.counter(
            "lq_group_replace_errors_total",
            "Nexthop group replaces the kernel refused.",
            w.group_errors,
        );
        o.counter(
            "lq_member_deletes_total",
            "Member nexthops deleted on a spine failure, each leaving every group at once (seed 003 6.5).",
            w.member_deletes,
        );
        o.counter(
            "lq_gray_failure_prunes_total",
            "Paths pruned by the opt-in gray-failure prune ([damping] gray-failure-prune): loss (CL 7) on a spine link with most of its capacity available; per group and member, each transition into the pruned state.",
            w.gray_failure_prunes,
        );
    }
    if let Some(h) = &snap.helper {
        let h = &h.local;
        let measured: Vec<(&str, &LinkReportView)> = h
            .links
            .iter()
            .filter_map(|l| l.report.as_ref().map(|r| (l.interface.as_str(), r)))
            .collect();
        let sensitive = [
            (
                "lq_local_lqs",
                "LQS this node computes for its egress link (Appendix A.4).",
                (|r: &LinkReportView| r.lqs) as fn(&LinkReportView) -> u8,
            ),
            (
                "lq_local_cl",
                "Advertised CL of the egress link (after A.6 hysteresis).",
                |r: &LinkReportView| r.cl,
            ),
        ];
        for (name, help, value) in sensitive.into_iter().filter(|_| local) {
            o.family(name, "gauge", help);
            for (iface, r) in &measured {
                o.sample(
                    name,
                    &[("interface", (*iface).to_string())],
                    f64::from(value(r)),
                );
            }
        }
        o.family(
            "lq_advertisements_total",
            "counter",
            "Advertisements built, by mode.",
        );
        o.sample(
            "lq_advertisements_total",
            &[("mode", "periodic".into())],
            h.periodic as f64,
        );
        o.sample(
            "lq_advertisements_total",
            &[("mode", "triggered".into())],
            h.triggered as f64,
        );
        o.counter(
            "lq_advertisement_send_errors_total",
            "Datagrams that could not be sent.",
            h.send_errors,
        );
        if let Some(a) = &h.authentication {
            o.counter(
                "lq_advertisements_signed_total",
                "Datagrams sent with an authentication trailer ([helper] key-chain; seed 003 12.1).",
                a.signed,
            );
            o.counter(
                "lq_advertisements_unsigned_no_key_total",
                "Datagrams not sent because no key's send-lifetime was active.",
                a.no_send_key,
            );
        }
        o.counter(
            "lq_samples_dropped_total",
            "Counter samples the sampler thread dropped because the loop had not taken the last 4.",
            h.samples_dropped,
        );
    }
    if let Some(p) = &snap.pfc {
        if let Some(counts) = &p.rx_counts {
            o.family(
                "lq_pfc_rx_frames_total",
                "counter",
                "Valid PFC frames received per interface and priority (IEEE 802.1Qbb).",
            );
            for ((ifindex, prio), v) in counts {
                o.sample(
                    "lq_pfc_rx_frames_total",
                    &[
                        ("ifindex", ifindex.to_string()),
                        ("priority", prio.to_string()),
                    ],
                    *v as f64,
                );
            }
        }
        o.counter(
            "lq_ipfix_messages_total",
            "IPFIX messages exported.",
            p.messages,
        );
        o.counter(
            "lq_ipfix_export_errors_total",
            "IPFIX exports that failed (counting continues).",
            p.export_errors,
        );
    }
    if let Some(c) = clients {
        o.family(
            "lq_client_connections_total",
            "counter",
            "Client connections of the metrics endpoint, the control socket and the gNMI endpoint, by outcome (refused: at the bound; timed-out: missed a read or write deadline; unauthenticated: a TLS handshake refused, or at the metrics endpoint a request without a client certificate; gNMI counts those in lq_gnmi_requests_refused_total).",
        );
        for (endpoint, stats) in [
            ("metrics", &c.metrics),
            ("control", &c.control),
            ("gnmi", &c.gnmi),
        ] {
            for (outcome, v) in stats.outcomes() {
                o.sample(
                    "lq_client_connections_total",
                    &[("endpoint", endpoint.into()), ("outcome", outcome.into())],
                    v as f64,
                );
            }
        }
        o.counter(
            "lq_monitor_clients_dropped_total",
            "`lqd monitor` clients dropped because they fell behind the notifications.",
            c.monitors_dropped
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        o.counter(
            "lq_gnmi_requests_refused_total",
            "gNMI requests refused: no client certificate (UNAUTHENTICATED) or a path no rule grants (PERMISSION_DENIED).",
            c.gnmi_refused.load(std::sync::atomic::Ordering::Relaxed),
        );
        o.counter(
            "lq_gnmi_subscribers_dropped_total",
            "gNMI subscriptions closed because the subscriber did not keep up.",
            c.gnmi_subscribers_dropped
                .load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    o.0
}

/// An HTTP/1.0 response with the metrics.
pub fn http_response(body: &str) -> String {
    format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let cfg: crate::config::Config =
            toml::from_str("[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n")
                .expect("minimal config");
        let snap = Snapshot::empty(std::sync::Arc::new(cfg), Default::default());
        let body = render(&snap, Some(&ClientStats::default()), |_| true);
        assert!(body.contains("# TYPE lq_up gauge\nlq_up 1\n"), "{body}");
        assert!(
            body.contains(
                "lq_client_connections_total{endpoint=\"control\",outcome=\"refused\"} 0\n"
            ),
            "{body}"
        );
    }

    /// Issue 40: a client without a grant gets no family of a sensitive subtree (seed 003
    /// section 12.2), the counters that reveal no path still.
    #[test]
    fn sensitive_families_only_to_clients_granted_them() {
        let cfg: crate::config::Config =
            toml::from_str("[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n")
                .expect("minimal config");
        let mut snap = Snapshot::empty(std::sync::Arc::new(cfg), Default::default());
        let member: crate::views::snapshot::MemberWeights =
            serde_json::from_value(serde_json::json!({
                "uplink": 1, "interface": "up1", "spine": "10.0.0.1", "spine-as": 0,
                "local-quality": 255, "remote-lqs": 200, "path-quality": 200,
                "capacity-gbps": 10.0, "capacity-source": "link", "target": 1.0, "applied": 1.0,
                "kernel-weight": 255, "nexthop-id": 7
            }))
            .unwrap();
        let mut lb = crate::views::snapshot::LoadBalancerSnapshot::default();
        lb.weights
            .groups
            .push(crate::views::snapshot::GroupWeights {
                label: "10.0.1.4".into(),
                members: vec![member],
                ..Default::default()
            });
        snap.load_balancer = Some(lb);
        let none = render(&snap, None, |_| false);
        for family in [
            "lq_neighbor_state",
            "lq_path_quality",
            "lq_path_capacity_gbps",
            "lq_uplink_local_quality",
            "lq_weight",
        ] {
            assert!(!none.contains(family), "{family} in\n{none}");
        }
        assert!(none.contains("lq_group_replaces_total 0"), "{none}");
        let ecmp = render(&snap, None, |s| s == "weighted-ecmp");
        assert!(
            ecmp.contains("lq_weight{remote=\"10.0.1.4\",uplink=\"1\",kind=\"kernel\"} 255"),
            "{ecmp}"
        );
        assert!(ecmp.contains("lq_path_quality{"), "{ecmp}");
        assert!(!ecmp.contains("lq_neighbor_state"), "{ecmp}");
        let all = render(&snap, None, |_| true);
        assert!(all.contains("# TYPE lq_neighbor_state gauge"), "{all}");
    }
}
