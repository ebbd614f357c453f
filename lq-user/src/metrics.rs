//! The opt-in Prometheus text endpoint (`[metrics] listen`): LQS and CL of advertised and
//! received links, weights, neighbor states, receiver discard counters, PFC counters and
//! export health, in the text exposition format 0.0.4.

use std::fmt::Write as _;

use serde_json::Value;

use crate::{
    helper_role::HelperRole,
    load_balancer::{LoadBalancer, monotonic_ns},
    pfc_export::PfcService,
};

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

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Renders every metric the running roles have.
pub fn render(
    lb: Option<&LoadBalancer>,
    helper: Option<&HelperRole>,
    pfc: Option<&PfcService>,
) -> String {
    let mut o = Out(String::new());
    o.family("lq_up", "gauge", "1 while lqd runs.");
    o.sample("lq_up", &[], 1.0);
    if let Some(lb) = lb {
        if let Ok(c) = lb.counters() {
            o.family(
                "lq_receiver_events_total",
                "counter",
                "XDP receiver outcomes: accepted and each discard reason of the wire spec.",
            );
            for (name, v) in c {
                o.sample(
                    "lq_receiver_events_total",
                    &[("event", name.to_string())],
                    v as f64,
                );
            }
        }
        let now = monotonic_ns();
        let n = lb.neighbors_json(now);
        o.family(
            "lq_neighbor_state",
            "gauge",
            "1 for the neighbor's current state (active, stale, failed).",
        );
        for x in n.as_array().into_iter().flatten() {
            o.sample(
                "lq_neighbor_state",
                &[
                    ("node_as", s(&x["node-as"])),
                    ("node_id", s(&x["node-id"])),
                    ("state", s(&x["state"])),
                ],
                1.0,
            );
        }
        let w = lb.weights_json();
        o.family(
            "lq_path_quality",
            "gauge",
            "Path quality min(local, remote) per destination and member (seed 003 6.3).",
        );
        for d in w["destinations"].as_array().into_iter().flatten() {
            for m in d["members"].as_array().into_iter().flatten() {
                let l = [
                    ("destination", s(&d["prefix"])),
                    ("uplink", s(&m["uplink"])),
                    ("spine", s(&m["spine"])),
                ];
                o.sample(
                    "lq_path_quality",
                    &l,
                    m["path-quality"].as_f64().unwrap_or(0.0),
                );
            }
        }
        o.family("lq_weight", "gauge", "Weights per destination and member: target and applied fractions, kernel integer weight.");
        for d in w["destinations"].as_array().into_iter().flatten() {
            for m in d["members"].as_array().into_iter().flatten() {
                for (kind, key) in [
                    ("target", "target"),
                    ("applied", "applied"),
                    ("kernel", "kernel-weight"),
                ] {
                    let l = [
                        ("destination", s(&d["prefix"])),
                        ("uplink", s(&m["uplink"])),
                        ("kind", kind.into()),
                    ];
                    o.sample("lq_weight", &l, m[key].as_f64().unwrap_or(0.0));
                }
            }
        }
        o.family(
            "lq_group_replaces_total",
            "counter",
            "Nexthop group replaces done.",
        );
        o.sample("lq_group_replaces_total", &[], lb.group_replaces as f64);
        o.family(
            "lq_group_replace_errors_total",
            "counter",
            "Nexthop group replaces the kernel refused.",
        );
        o.sample("lq_group_replace_errors_total", &[], lb.group_errors as f64);
    }
    if let Some(h) = helper {
        let l = h.local_json();
        let measured: Vec<&Value> = l["links"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["measured"] == true)
            .collect();
        for (name, help, key) in [
            (
                "lq_local_lqs",
                "LQS this node computes for its egress link (Appendix A.4).",
                "lqs",
            ),
            (
                "lq_local_cl",
                "Advertised CL of the egress link (after A.6 hysteresis).",
                "cl",
            ),
        ] {
            o.family(name, "gauge", help);
            for x in &measured {
                o.sample(
                    name,
                    &[("interface", s(&x["interface"]))],
                    x[key].as_f64().unwrap_or(0.0),
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
            l["periodic"].as_f64().unwrap_or(0.0),
        );
        o.sample(
            "lq_advertisements_total",
            &[("mode", "triggered".into())],
            l["triggered"].as_f64().unwrap_or(0.0),
        );
        o.family(
            "lq_advertisement_send_errors_total",
            "counter",
            "Datagrams that could not be sent.",
        );
        o.sample(
            "lq_advertisement_send_errors_total",
            &[],
            l["send-errors"].as_f64().unwrap_or(0.0),
        );
    }
    if let Some(p) = pfc {
        if let Ok(counts) = p.rx_counts() {
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
                    v as f64,
                );
            }
        }
        o.family(
            "lq_ipfix_messages_total",
            "counter",
            "IPFIX messages exported.",
        );
        o.sample("lq_ipfix_messages_total", &[], p.messages as f64);
        o.family(
            "lq_ipfix_export_errors_total",
            "counter",
            "IPFIX exports that failed (counting continues).",
        );
        o.sample("lq_ipfix_export_errors_total", &[], p.export_errors as f64);
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
        let body = render(None, None, None);
        assert!(body.contains("# TYPE lq_up gauge\nlq_up 1\n"), "{body}");
    }
}
