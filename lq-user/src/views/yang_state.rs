//! The node's state as RFC 7951 JSON of `/ietf-lq-telemetry:lq-telemetry` (seed 003
//! section 5.6): the configuration leaves, `local` (what this node advertises) and
//! `neighbors` (what it receives). `lqd show state --json` prints it; a test validates live
//! output with yanglint against the module in `yang/`.

use std::{collections::BTreeMap, net::Ipv4Addr};

use lq_common::{
    maps::{
        NeighborKey, NeighborValue, PATH_FLAG_DIAGNOSTICS, PATH_FLAG_DROPS, PathKey, PathValue,
    },
    wire::{Decimal64Milli, Entry},
};
use serde_json::{Map, Value, json};

use crate::config::{Config, TRANSPORT_UDP};

/// A neighbor's state in the model's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighborStateName {
    /// Advertisements arrive within the expected interval.
    Active,
    /// Late but not yet failed (display only).
    Stale,
    /// Silent for miss_count x T_notify.
    Failed,
}

impl NeighborStateName {
    /// The YANG enum name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Stale => "stale",
            Self::Failed => "failed",
        }
    }
}

fn bw(bits: u32) -> Value {
    // Entries in the table passed the receive value checks, so this always converts.
    Value::String(
        Decimal64Milli::from_f32(f32::from_bits(bits))
            .unwrap_or(Decimal64Milli(0))
            .to_string(),
    )
}

/// The `[lq-telemetry]` leaves, as configured (defaults filled in).
pub fn config_leaves(cfg: &Config) -> Map<String, Value> {
    let t = &cfg.lq_telemetry;
    let mut o = Map::new();
    o.insert("enabled".into(), json!(t.enabled));
    o.insert("role".into(), json!(t.role.as_str()));
    o.insert("active-transports".into(), json!([TRANSPORT_UDP]));
    o.insert("as-qualified".into(), json!(t.as_qualified));
    if let Some(a) = t.local_as {
        o.insert("local-as".into(), json!(a));
    }
    o.insert("pfc-fabric".into(), json!(t.pfc_fabric));
    o.insert("notify-interval-ms".into(), json!(t.notify_interval_ms.0));
    o.insert("change-threshold".into(), json!(t.change_threshold.0));
    o.insert("miss-count".into(), json!(t.miss_count.0));
    o.insert("diagnostics-enabled".into(), json!(t.diagnostics_enabled));
    o
}

/// One `link-quality` list entry from the path table.
pub fn path_entry_json(k: &PathKey, v: &PathValue) -> Value {
    let mut e = json!({
        "remote-as": k.remote_as,
        "remote-node-id": Ipv4Addr::from(k.remote_id).to_string(),
        "link-id": k.link_id,
        "available-bandwidth": bw(v.available_bandwidth_bits),
        "lqs": v.lqs,
        "cl": v.cl,
    });
    if v.flags & PATH_FLAG_DIAGNOSTICS != 0 {
        e["diagnostics"] = json!({
            "link-capacity": bw(v.link_capacity_bits),
            "queue-depth": v.queue_depth,
            "ecn-marking-rate": v.ecn_marking_rate,
            "pfc-pause-fraction": v.pfc_pause_fraction,
            "drops-active": v.flags & PATH_FLAG_DROPS != 0,
        });
    }
    e
}

/// One `link-quality` entry this node advertises.
pub fn local_entry_json(e: &Entry) -> Value {
    let mut o = json!({
        "remote-as": e.remote_as,
        "remote-node-id": Ipv4Addr::from(e.remote_node_id).to_string(),
        "link-id": e.link_id,
        "available-bandwidth": Decimal64Milli::from_f32(e.available_bandwidth).unwrap_or(Decimal64Milli(0)).to_string(),
        "lqs": e.lqs,
        "cl": e.cl,
    });
    if let Some(d) = &e.diagnostics {
        o["diagnostics"] = json!({
            "link-capacity": Decimal64Milli::from_f32(d.link_capacity).unwrap_or(Decimal64Milli(0)).to_string(),
            "queue-depth": d.queue_depth,
            "ecn-marking-rate": d.ecn_marking_rate,
            "pfc-pause-fraction": d.pfc_pause_fraction,
            "drops-active": d.drops_active,
        });
    }
    o
}

/// The `local` container: what this node advertises (its last sequence number and one
/// `link-quality` entry per (link, remote node)).
pub fn local_json(last_sequence: Option<u16>, entries: &[Entry]) -> Value {
    let mut o = json!({});
    if let Some(s) = last_sequence {
        o["last-sequence-number"] = json!(s);
    }
    if !entries.is_empty() {
        o["link-quality"] = Value::Array(entries.iter().map(local_entry_json).collect());
    }
    o
}

/// The `neighbors` container from the receiver's tables. `mono_now_ns` is the
/// CLOCK_MONOTONIC time the tables' timestamps use and `wall_now_ns` the real time (ns
/// since the UNIX epoch) read at the same moment; `last-seen` is converted to wall-clock
/// time from them.
pub fn neighbors_json(
    neighbors: &BTreeMap<NeighborKey, NeighborValue>,
    paths: &BTreeMap<PathKey, PathValue>,
    state_of: impl Fn(&NeighborKey, &NeighborValue) -> NeighborStateName,
    mono_now_ns: u64,
    wall_now: u64,
) -> Value {
    let list: Vec<Value> = neighbors
        .iter()
        .map(|(k, v)| {
            let seen_wall = wall_now.saturating_sub(mono_now_ns.saturating_sub(v.last_seen_ns));
            let entries: Vec<Value> = paths
                .iter()
                .filter(|(pk, _)| pk.spine_as == k.node_as && pk.spine_id == k.node_id)
                .map(|(pk, pv)| path_entry_json(pk, pv))
                .collect();
            let mut n = json!({
                "node-as": k.node_as,
                "node-id": Ipv4Addr::from(k.node_id).to_string(),
                "last-seen": rfc3339_ms(seen_wall),
                "last-sequence": v.last_sequence,
                "transport": TRANSPORT_UDP,
                "state": state_of(k, v).as_str(),
            });
            if !entries.is_empty() {
                n["link-quality"] = Value::Array(entries);
            }
            n
        })
        .collect();
    if list.is_empty() {
        json!({})
    } else {
        json!({ "neighbor": list })
    }
}

/// A load-balancer's authenticating receiver as lq's augment `lq-authentication`
/// (yang/lq-authentication@2026-12-05.yang; issue 39 item 4): its default mode, each
/// interface's mode, its key chain file and the receiver's counters by outcome (`auth_*`
/// of `lqd show counters`, 64-bit counters as RFC 7951 strings). `None` when no
/// interface authenticates.
pub fn authentication_json(cfg: &Config, counters: &[(&str, u64)]) -> Option<Value> {
    let r = &cfg.receiver;
    if r.authenticating_interfaces().is_empty() {
        return None;
    }
    let interfaces: Vec<Value> = r
        .interfaces
        .iter()
        .map(|i| json!({"name": i, "mode": r.authentication_of(i).as_str()}))
        .collect();
    let c: Map<String, Value> = counters
        .iter()
        // The run time is a time, not an outcome; the metrics have it.
        .filter(|(k, _)| !k.ends_with("_ns"))
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("auth_")?.replace('_', "-");
            Some((name, Value::String(v.to_string())))
        })
        .collect();
    let mut o = Map::new();
    o.insert("mode".into(), json!(r.authentication.as_str()));
    o.insert("interface".into(), Value::Array(interfaces));
    if let Some(k) = &cfg.receiver.key_chain {
        o.insert("key-chain".into(), json!(k.display().to_string()));
    }
    o.insert("counters".into(), Value::Object(c));
    Some(Value::Object(o))
}

/// The whole `/ietf-lq-telemetry:lq-telemetry` document; a load-balancer's groups go in
/// lq's augment, `lq-weighted-ecmp:weighted-ecmp` (yang/lq-weighted-ecmp@2026-12-05.yang),
/// its authenticating receiver in `lq-authentication:authentication`.
pub fn state_document(
    cfg: &Config,
    local: Option<Value>,
    neighbors: Option<Value>,
    weighted_ecmp: Option<Value>,
    authentication: Option<Value>,
) -> Value {
    let mut o = config_leaves(cfg);
    if let Some(l) = local {
        o.insert("local".into(), l);
    }
    if let Some(n) = neighbors.filter(|n| n.as_object().is_some_and(|m| !m.is_empty())) {
        o.insert("neighbors".into(), n);
    }
    if let Some(w) = weighted_ecmp {
        o.insert("lq-weighted-ecmp:weighted-ecmp".into(), w);
    }
    if let Some(a) = authentication {
        o.insert("lq-authentication:authentication".into(), a);
    }
    json!({ "ietf-lq-telemetry:lq-telemetry": Value::Object(o) })
}

/// `2026-07-20T10:15:30.123456789Z` (yang:date-and-time, UTC, nanoseconds) from ns since
/// the epoch: a capture's frame time.
pub fn rfc3339_ns(ns: u64) -> String {
    let ms = rfc3339_ms(ns);
    let whole = ms.split('.').next().unwrap_or_default();
    format!("{whole}.{:09}Z", ns % 1_000_000_000)
}

/// `2026-07-20T10:15:30.123Z` (yang:date-and-time, UTC) from ns since the epoch.
pub fn rfc3339_ms(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let ms = (ns / 1_000_000) % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (H. Hinnant's algorithm), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authenticating_receiver_is_state_with_its_counters_as_strings() {
        let leaf = "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"up1\"]\n";
        let plain = Config::parse(leaf, std::path::Path::new("leaf.toml")).unwrap();
        assert_eq!(authentication_json(&plain, &[("auth_bad_mac", 1)]), None);
        let text =
            format!("{leaf}authentication = \"required\"\nkey-chain = \"/etc/lq/keys.toml\"\n");
        let cfg = Config::parse(&text, std::path::Path::new("leaf.toml")).unwrap();
        let a = authentication_json(
            &cfg,
            &[
                ("accepted", 5),
                ("auth_bad_mac", 2),
                ("auth_socket_overflows", 0),
                ("auth_hand_back_run_ns", 12_345),
            ],
        )
        .unwrap();
        assert_eq!(
            a,
            json!({"mode": "required",
                   "interface": [{"name": "up1", "mode": "required"}],
                   "key-chain": "/etc/lq/keys.toml",
                   "counters": {"bad-mac": "2", "socket-overflows": "0"}})
        );
        // A mode per uplink: the default none, one uplink migrating.
        let text = leaf.replace("[\"up1\"]", "[\"up1\", \"up2\"]")
            + "key-chain = \"/etc/lq/keys.toml\"\n\n[receiver.interface-authentication]\nup2 = \"accept-unauthenticated\"\n";
        let cfg = Config::parse(&text, std::path::Path::new("leaf.toml")).unwrap();
        let a = authentication_json(&cfg, &[]).unwrap();
        assert_eq!(a["mode"], "none");
        assert_eq!(
            a["interface"],
            json!([{"name": "up1", "mode": "none"},
                   {"name": "up2", "mode": "accept-unauthenticated"}])
        );
    }

    #[test]
    fn date_and_time() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        // 2026-07-20T10:15:30.123Z
        assert_eq!(
            rfc3339_ms(1_784_542_530_123_000_000),
            "2026-07-20T10:15:30.123Z"
        );
        assert_eq!(
            rfc3339_ms(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
