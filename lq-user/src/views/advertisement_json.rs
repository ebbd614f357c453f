//! RFC 7951 JSON of the YANG `lq-advertisement` structure (module `ietf-lq-telemetry`),
//! member for member in the model's order, as `lqd decode` prints it and `lqd show` will.
//!
//! Encoding rules (RFC 7951 and `spec/lq-udp-wire.md`, "Decoding for display"):
//!
//! * `node-id` and `remote-node-id` are dotted quads; the 32-bit integers are JSON numbers;
//! * bandwidths are decimal64 strings in canonical form with at most 3 fractional digits
//!   ([`Decimal64Milli`]), e.g. `"180.0"`, `"61.25"`;
//! * `timestamp-ms` is omitted when it exceeds 2147483647: `yang:milliseconds32` is signed
//!   and cannot hold it, although the wire value wraps at 2^32;
//! * `diagnostics` (a presence container) appears only for an entry with valid diagnostics;
//! * `link-quality` is omitted for a heartbeat without entries: a YANG list with no
//!   entries has no instance to encode.

use std::net::Ipv4Addr;

use lq_common::wire::{Advertisement, Decimal64Milli, Diagnostics, Entry, Header};
use serde_json::{Map, Value, json};

/// The qualified member name of the structure.
pub const MEMBER: &str = "ietf-lq-telemetry:lq-advertisement";

/// The largest `yang:milliseconds32` (a signed 32-bit type).
pub const MILLISECONDS32_MAX: u32 = i32::MAX as u32;

/// A bandwidth as a decimal64 string. A decoded advertisement has passed check 9, so the
/// value is always representable; anything else (which only a caller holding an
/// unchecked value could pass) becomes JSON `null` rather than a wrong number.
pub fn bandwidth_json(gbps: f32) -> Value {
    Decimal64Milli::from_f32(gbps).map_or(Value::Null, |d| Value::String(d.to_string()))
}

/// The `diagnostics` container of one entry.
pub fn diagnostics_json(d: &Diagnostics) -> Value {
    json!({
        "link-capacity": bandwidth_json(d.link_capacity),
        "queue-depth": d.queue_depth,
        "ecn-marking-rate": d.ecn_marking_rate,
        "pfc-pause-fraction": d.pfc_pause_fraction,
        "drops-active": d.drops_active,
    })
}

/// One `link-quality` list entry.
pub fn entry_json(e: &Entry) -> Value {
    let mut m = Map::new();
    m.insert("remote-as".into(), e.remote_as.into());
    m.insert(
        "remote-node-id".into(),
        Ipv4Addr::from(e.remote_node_id).to_string().into(),
    );
    m.insert("link-id".into(), e.link_id.into());
    m.insert(
        "available-bandwidth".into(),
        bandwidth_json(e.available_bandwidth),
    );
    m.insert("lqs".into(), e.lqs.into());
    m.insert("cl".into(), e.cl.into());
    if let Some(d) = &e.diagnostics {
        m.insert("diagnostics".into(), diagnostics_json(d));
    }
    Value::Object(m)
}

/// The header leaves of the structure, without `link-quality`.
pub fn header_json(h: &Header) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "node-id".into(),
        Ipv4Addr::from(h.node_id).to_string().into(),
    );
    m.insert("node-as".into(), h.node_as.into());
    m.insert("sequence-number".into(), h.sequence.into());
    if h.timestamp_ms <= MILLISECONDS32_MAX {
        m.insert("timestamp-ms".into(), h.timestamp_ms.into());
    }
    m.insert("pfc-fabric".into(), h.pfc_fabric.into());
    m.insert("signaling-mode".into(), h.mode.as_str().into());
    m
}

/// The contents of the `lq-advertisement` structure: header leaves and the `link-quality`
/// list, in the model's order. See [`advertisement_document`] for the whole document.
pub fn advertisement_json(adv: &Advertisement<'_>) -> Value {
    let mut m = header_json(&adv.header);
    if adv.entry_count() > 0 {
        m.insert(
            "link-quality".into(),
            Value::Array(adv.entries().map(|e| entry_json(&e)).collect()),
        );
    }
    Value::Object(m)
}

/// The RFC 7951 document: `{"ietf-lq-telemetry:lq-advertisement": {...}}`.
pub fn advertisement_document(adv: &Advertisement<'_>) -> Value {
    let mut m = Map::new();
    m.insert(MEMBER.into(), advertisement_json(adv));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lq_common::wire::{DecodePolicy, Header, MAX_PAYLOAD_LEN, Mode, decode, encode};

    fn render(h: &Header, e: &[Entry]) -> Value {
        let mut buf = [0u8; MAX_PAYLOAD_LEN];
        let n = encode(h, e, &mut buf).unwrap();
        advertisement_document(&decode(&buf[..n], &DecodePolicy::ANY).unwrap())
    }

    fn header(timestamp_ms: u32) -> Header {
        Header {
            as_qualified: false,
            diagnostics: true,
            pfc_fabric: true,
            mode: Mode::Triggered,
            sequence: 9001,
            node_id: u32::from(Ipv4Addr::new(10, 0, 1, 1)),
            timestamp_ms,
            node_as: 0,
        }
    }

    #[test]
    fn reproduces_the_yang_kit_sample_member_for_member() {
        // spec/yang/samples/lq-advertisement.json, verbatim.
        let sample = r#"{
  "ietf-lq-telemetry:lq-advertisement": {
    "node-id": "10.0.1.1",
    "node-as": 0,
    "sequence-number": 9001,
    "timestamp-ms": 123456789,
    "pfc-fabric": true,
    "signaling-mode": "triggered",
    "link-quality": [
      {
        "remote-as": 0,
        "remote-node-id": "10.0.0.4",
        "link-id": 7,
        "available-bandwidth": "395.0",
        "lqs": 250,
        "cl": 0
      },
      {
        "remote-as": 0,
        "remote-node-id": "10.0.0.5",
        "link-id": 8,
        "available-bandwidth": "61.25",
        "lqs": 42,
        "cl": 5,
        "diagnostics": {
          "link-capacity": "400.0",
          "queue-depth": 201,
          "ecn-marking-rate": 22,
          "pfc-pause-fraction": 9,
          "drops-active": false
        }
      }
    ]
  }
}"#;
        let entries = [
            Entry {
                remote_as: 0,
                remote_node_id: u32::from(Ipv4Addr::new(10, 0, 0, 4)),
                link_id: 7,
                available_bandwidth: 395.0,
                lqs: 250,
                cl: 0,
                diagnostics: None,
            },
            Entry {
                remote_as: 0,
                remote_node_id: u32::from(Ipv4Addr::new(10, 0, 0, 5)),
                link_id: 8,
                available_bandwidth: 61.25,
                lqs: 42,
                cl: 5,
                diagnostics: Some(Diagnostics {
                    link_capacity: 400.0,
                    queue_depth: 201,
                    ecn_marking_rate: 22,
                    pfc_pause_fraction: 9,
                    drops_active: false,
                }),
            },
        ];
        let got = serde_json::to_string_pretty(&render(&header(123_456_789), &entries)).unwrap();
        assert_eq!(got, sample);
    }

    #[test]
    fn timestamp_beyond_milliseconds32_is_omitted_and_empty_list_too() {
        let doc = render(&header(MILLISECONDS32_MAX), &[]);
        assert_eq!(doc[MEMBER]["timestamp-ms"], json!(2_147_483_647));
        let doc = render(&header(MILLISECONDS32_MAX + 1), &[]);
        let body = doc[MEMBER].as_object().unwrap();
        assert!(!body.contains_key("timestamp-ms"));
        assert!(!body.contains_key("link-quality"));
        let keys: Vec<_> = body.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "node-id",
                "node-as",
                "sequence-number",
                "pfc-fabric",
                "signaling-mode"
            ]
        );
    }

    #[test]
    fn unrepresentable_bandwidth_is_null_not_a_wrong_number() {
        assert_eq!(bandwidth_json(f32::NAN), Value::Null);
        assert_eq!(bandwidth_json(-1.0), Value::Null);
        assert_eq!(bandwidth_json(0.1), json!("0.1"));
    }
}
