//! The `lq-threshold-crossed` notification of the ietf-lq-telemetry module (seed 003
//! section 5.6, `notification lq-threshold-crossed`): "Generated when a link's congestion
//! level (CL) changes". The advertiser emits one per (link, remote node) whenever the
//! advertised CL of a link changes, i.e. after the A.6 hysteresis, so management systems
//! see the same transitions the leaves see.

use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

/// The module-qualified member name of the notification in RFC 7951 JSON.
pub const JSON_MEMBER: &str = "ietf-lq-telemetry:lq-threshold-crossed";

/// One `lq-threshold-crossed` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThresholdCrossed {
    /// `node-id`: the reporting (local) node's Router-ID.
    pub node_id: u32,
    /// `node-as`: the local AS when AS-qualified, else 0.
    pub node_as: u32,
    /// `remote-as`: the far end's AS when AS-qualified, else 0.
    pub remote_as: u32,
    /// `remote-node-id`: the far end's Router-ID.
    pub remote_node_id: u32,
    /// `link-id`: the local ifIndex.
    pub link_id: u32,
    /// `old-cl`: the previously advertised CL.
    pub old_cl: u8,
    /// `new-cl`: the newly advertised CL.
    pub new_cl: u8,
    /// `lqs`: the LQS advertised with the new CL.
    pub lqs: u8,
    /// When the change happened, on the helper's monotonic clock. Not a leaf of the
    /// notification: the YANG notification carries its time in the transport envelope
    /// (`eventTime`, RFC 5277 / RFC 8639), which the I/O shell fills in from wall-clock
    /// time.
    pub t_ns: u64,
}

impl ThresholdCrossed {
    /// RFC 7951 JSON of the notification body, in the shape of
    /// `spec/yang/samples/lq-threshold-crossed.notif.json`: Router-IDs as dotted quads
    /// (`yang:dotted-quad`), AS numbers, link-id, CLs and LQS as JSON numbers (uint32 and
    /// smaller are numbers in RFC 7951 section 6.1). `node-as` and `remote-as` have the
    /// default 0 and are always written, as in the sample, so the unqualified case is
    /// explicit.
    pub fn to_json(&self) -> Value {
        let mut body = Map::new();
        body.insert(
            "node-id".into(),
            Ipv4Addr::from(self.node_id).to_string().into(),
        );
        body.insert("node-as".into(), self.node_as.into());
        body.insert("remote-as".into(), self.remote_as.into());
        body.insert(
            "remote-node-id".into(),
            Ipv4Addr::from(self.remote_node_id).to_string().into(),
        );
        body.insert("link-id".into(), self.link_id.into());
        // congestion-level is a uint8 range 0..7: never write an invalid instance.
        body.insert("old-cl".into(), self.old_cl.min(7).into());
        body.insert("new-cl".into(), self.new_cl.min(7).into());
        body.insert("lqs".into(), self.lqs.into());
        json!({ JSON_MEMBER: body })
    }

    /// [`Self::to_json`] on one line.
    pub fn to_json_string(&self) -> String {
        // One line: `lqd monitor` and the log carry notifications as JSON lines, one
        // notification per line (a pretty-printed body would split it over nine).
        self.to_json().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from(Ipv4Addr::new(a, b, c, d))
    }

    fn sample() -> ThresholdCrossed {
        ThresholdCrossed {
            node_id: ip(10, 0, 1, 1),
            node_as: 0,
            remote_as: 0,
            remote_node_id: ip(10, 0, 0, 5),
            link_id: 8,
            old_cl: 2,
            new_cl: 5,
            lqs: 42,
            t_ns: 0,
        }
    }

    #[test]
    fn renders_like_the_shared_sample() {
        let expect: Value = serde_json::from_str(
            r#"{
              "ietf-lq-telemetry:lq-threshold-crossed": {
                "node-id": "10.0.1.1", "node-as": 0, "remote-as": 0,
                "remote-node-id": "10.0.0.5", "link-id": 8,
                "old-cl": 2, "new-cl": 5, "lqs": 42
              }
            }"#,
        )
        .unwrap();
        assert_eq!(sample().to_json(), expect);
    }

    /// Validates rendered notifications with yanglint (libyang) against the module in
    /// `yang/`, the command of `spec/yang/README.md`. Skipped, with a note, when yanglint
    /// is not installed.
    #[test]
    fn yanglint_accepts_rendered_notifications() {
        let yanglint = Path::new("/usr/bin/yanglint");
        if !yanglint.exists() {
            eprintln!("note: /usr/bin/yanglint not installed; skipping YANG validation");
            return;
        }
        let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../yang");
        let module = modules.join("ietf-lq-telemetry@2026-07-07.yang");
        let dir = std::env::temp_dir().join(format!("lq-helper-notif-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let qualified = ThresholdCrossed {
            node_as: 4_200_000_001,
            remote_as: 65_001,
            link_id: u32::MAX,
            old_cl: 7,
            new_cl: 0,
            lqs: 255,
            ..sample()
        };
        for (name, n) in [("unqualified", sample()), ("qualified", qualified)] {
            let file = dir.join(format!("{name}.json"));
            std::fs::write(&file, n.to_json_string()).unwrap();
            let out = Command::new(yanglint)
                .arg("-p")
                .arg(&modules)
                .args(["-t", "notif"])
                .arg(&module)
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The check has teeth: an out-of-range CL in hand-written JSON is refused.
        let bad = dir.join("bad.json");
        let mut v = sample().to_json();
        v[JSON_MEMBER]["new-cl"] = 8.into();
        std::fs::write(&bad, v.to_string()).unwrap();
        let out = Command::new(yanglint)
            .arg("-p")
            .arg(&modules)
            .args(["-t", "notif"])
            .arg(&module)
            .arg(&bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "yanglint accepted new-cl 8");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
