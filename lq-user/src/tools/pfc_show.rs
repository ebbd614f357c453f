//! `lqd show pfc`: the PFC counters read straight from the pinned maps, so it works
//! without a daemon.

use serde_json::{Value, json};

use crate::sys::bpf::pfc::{PfcError, PfcReader};

/// `lqd show pfc`: per interface and priority, received PFC frames, paused time and
/// rejected frames, read from the pins (works without a daemon).
pub fn show_json(pin_dir: &std::path::Path) -> Result<Value, PfcError> {
    let reader = PfcReader::open(pin_dir)?;
    let now = crate::sys::clock::monotonic_ns();
    let mut ifaces = Vec::new();
    for (ifindex, c) in reader.interfaces()? {
        let counts = reader.rx_priorities(ifindex)?;
        let mut prios = Vec::new();
        for (p, v) in counts.iter().enumerate() {
            prios.push(json!({
                "priority": p,
                "rx-frames": v,
                "paused-ns": reader.paused_ns(ifindex, p as u8, now).ok(),
            }));
        }
        ifaces.push(json!({
            "ifindex": ifindex,
            "mac": c.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
            "speed-mbps": c.speed_mbps,
            // The epoch the exporter puts on these counters: it stays across restarts of
            // lqd while the pinned link counts on, and changes when counting starts anew.
            "counter-epoch": c.epoch,
            "priorities": prios,
        }));
    }
    let rejects: serde_json::Map<String, Value> = reader
        .rejects()?
        .iter()
        .map(|(r, n)| (r.name().to_string(), json!(n)))
        .collect();
    Ok(json!({ "interfaces": ifaces, "rejected": rejects, "counter-instance": reader.instance() }))
}

/// The table form of [`show_json`].
pub fn show_table(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for i in v["interfaces"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "ifindex {}  mac {}  speed {} Mbit/s  counter epoch {}",
            i["ifindex"],
            i["mac"].as_str().unwrap_or("?"),
            i["speed-mbps"],
            i["counter-epoch"]
        );
        let _ = writeln!(
            s,
            "  {:<9} {:>14} {:>14}",
            "PRIORITY", "RX-FRAMES", "PAUSED-MS"
        );
        for p in i["priorities"].as_array().into_iter().flatten() {
            let _ = writeln!(
                s,
                "  {:<9} {:>14} {:>14}",
                p["priority"],
                p["rx-frames"]
                    .as_u64()
                    .map_or("missing".into(), |n| n.to_string()),
                p["paused-ns"]
                    .as_u64()
                    .map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6))
            );
        }
    }
    let _ = writeln!(s, "rejected: {}", v["rejected"]);
    s
}
