//! `lqd instances`: the instances on this host, from their control sockets (/run/lq) and
//! their pin folders (/sys/fs/bpf/lq), with what each running one says of itself.

use std::{collections::BTreeMap, path::Path};

use serde_json::{Value, json};

/// One instance found on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Its name.
    pub name: String,
    /// Whether it has a control socket in the run folder (it may be stale).
    pub socket: bool,
    /// Its pin folders.
    pub pins: Vec<String>,
}

/// Every instance with a control socket in `run_dir` or pins in `pin_root`.
pub fn find(run_dir: &Path, pin_root: &Path) -> Vec<Found> {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for e in std::fs::read_dir(run_dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(instance) = name.strip_suffix(".sock") {
            found.entry(instance.to_owned()).or_default().socket = true;
        }
    }
    for e in std::fs::read_dir(pin_root).into_iter().flatten().flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let instance = name.strip_suffix("-pfc").unwrap_or(&name).to_owned();
        found
            .entry(instance)
            .or_default()
            .pins
            .push(e.path().display().to_string());
    }
    found
        .into_iter()
        .map(|(name, f)| Found { name, ..f })
        .collect()
}

/// `lqd instances --json`: each found instance with its `status` (`None`: it did not
/// answer).
pub fn list(found: &[Found], status: impl Fn(&Found) -> Option<Value>) -> Value {
    Value::Array(
        found
            .iter()
            .map(|f| {
                let st = if f.socket { status(f) } else { None };
                json!({
                    "instance": f.name,
                    "running": st.is_some(),
                    "status": st,
                    "pins": f.pins,
                })
            })
            .collect(),
    )
}

/// The text of [`list`].
pub fn table(v: &Value) -> String {
    let mut s = format!(
        "{:<20} {:<8} {:>8} {:<14} {:>10}  {}\n",
        "INSTANCE", "RUNNING", "PID", "ROLE", "UPTIME-S", "CONFIG / PINS"
    );
    for i in v.as_array().into_iter().flatten() {
        let st = &i["status"];
        let pins: Vec<&str> = i["pins"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        s.push_str(&format!(
            "{:<20} {:<8} {:>8} {:<14} {:>10}  {}\n",
            i["instance"].as_str().unwrap_or("?"),
            if i["running"] == true { "yes" } else { "no" },
            st["pid"]
                .as_u64()
                .map_or_else(|| "-".into(), |p| p.to_string()),
            st["role"].as_str().unwrap_or("-"),
            st["uptime-s"]
                .as_f64()
                .map_or_else(|| "-".into(), |u| format!("{u:.0}")),
            st["config-file"]
                .as_str()
                .map_or_else(|| pins.join(" "), str::to_owned),
        ));
    }
    s
}
