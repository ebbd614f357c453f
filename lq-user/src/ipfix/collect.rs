//! The Collecting Process of `lqd ipfix collect`: one [`Session`] per exporter, so that
//! templates, last readings and interval counts never mix between exporters.
//!
//! RFC 7011 section 8 scopes templates by Transport Session and Observation Domain; seed
//! 000 section 7 lets a collector report an interval count only once it has confirmed
//! that both readings refer to the same scoped counter instance. Two exporters can share
//! an Observation Domain ID, observation point, interface, priority and even a counter
//! epoch: only the Transport Session (UDP: the exporter's source address and port; TCP and
//! TLS: the connection) tells them apart. A reading is compared only with the previous
//! reading of the same session; a new session (a TCP reconnection, another source port)
//! starts without a previous reading, so its first interval count is unknown.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
};

use serde_json::{Value, json};

use super::{
    Direction, ElementIds,
    decode::{CounterScope, Decoder, PfcDecoded, Problem, interval},
};

/// The most scoped counters one session remembers a last reading of; readings of further
/// counters are printed with an unknown interval (and counted), never stored.
pub const MAX_SCOPES_PER_SESSION: usize = 65_536;

/// The most UDP exporters remembered at once; the one silent longest is forgotten first
/// (its next reading then has an unknown interval count, and its templates must come
/// again, RFC 7011 section 8.4).
pub const MAX_UDP_SESSIONS: usize = 1024;

/// How long a template received over UDP stays usable without being sent again, by
/// default (RFC 7011 section 8.4: at least three times the exporter's refresh interval;
/// 1 800 s covers a 600 s refresh, lqd's own default is 60 s).
pub const DEFAULT_UDP_TEMPLATE_LIFETIME_S: u32 = 1800;

/// The state of one Transport Session: its templates and the last reading of each of its
/// scoped counters.
pub struct Session {
    exporter: String,
    transport: &'static str,
    decoder: Decoder,
    last: BTreeMap<CounterScope, PfcDecoded>,
    /// Readings whose counter could not be remembered ([`MAX_SCOPES_PER_SESSION`]).
    pub scopes_dropped: u64,
}

impl Session {
    /// A session with `exporter` (printed as is) over `transport` ("udp", "tcp", "tls").
    pub fn new(exporter: String, transport: &'static str, elements: ElementIds) -> Self {
        Self::with_template_lifetime(exporter, transport, elements, None)
    }

    /// [`Session::new`] whose templates expire after `lifetime_s` seconds of Export Time
    /// without a refresh ([`Decoder::with_template_lifetime`]; UDP).
    pub fn with_template_lifetime(
        exporter: String,
        transport: &'static str,
        elements: ElementIds,
        lifetime_s: Option<u32>,
    ) -> Self {
        Self {
            exporter,
            transport,
            decoder: Decoder::new(elements).with_template_lifetime(lifetime_s),
            last: BTreeMap::new(),
            scopes_dropped: 0,
        }
    }

    /// Decodes one message and returns the JSON lines to print: one per PFC record (with
    /// its interval count, or "unknown"), one per refused template (with the reason), and
    /// counts of templates learnt, unknown sets and records of other templates.
    pub fn message(&mut self, msg: &[u8]) -> Vec<Value> {
        let (from, transport) = (self.exporter.as_str(), self.transport);
        let d = match self.decoder.decode(msg) {
            Ok(d) => d,
            Err(e) => {
                return vec![
                    json!({"exporter": from, "transport": transport, "error": e.to_string()}),
                ];
            }
        };
        let mut lines = Vec::new();
        if d.expired > 0 {
            lines.push(
                json!({"exporter": from, "transport": transport, "templates-expired": d.expired}),
            );
        }
        if d.templates > 0 {
            lines.push(json!({"exporter": from, "transport": transport, "templates": d.templates}));
        }
        for r in &d.refused {
            lines.push(json!({
                "exporter": from,
                "transport": transport,
                "observation-domain-id": r.domain,
                "template-refused": r.template_id,
                "reason": r.reason.to_string(),
            }));
        }
        if d.unknown_sets > 0 {
            lines.push(
                json!({"exporter": from, "transport": transport, "unknown-sets": d.unknown_sets}),
            );
        }
        for r in d.pfc {
            let count = r
                .scope()
                .and_then(|s| self.last.get(&s))
                .and_then(|prev| interval(prev, &r));
            lines.push(collected_line(from, transport, &r, count));
            if let Some(s) = r.scope() {
                if self.last.len() < MAX_SCOPES_PER_SESSION || self.last.contains_key(&s) {
                    self.last.insert(s, r);
                } else {
                    self.scopes_dropped += 1;
                }
            }
        }
        if d.other_records > 0 {
            lines.push(
                json!({"exporter": from, "transport": transport, "other-records": d.other_records}),
            );
        }
        lines
    }
}

/// The sessions of a UDP collector, keyed by the exporter's source address and port.
pub struct UdpSessions {
    elements: ElementIds,
    /// [`DEFAULT_UDP_TEMPLATE_LIFETIME_S`] unless set ([`UdpSessions::template_lifetime`]).
    lifetime_s: u32,
    sessions: HashMap<SocketAddr, (Session, u64)>,
    clock: u64,
    /// Sessions forgotten to stay within [`MAX_UDP_SESSIONS`].
    pub evicted: u64,
}

impl UdpSessions {
    /// No sessions yet.
    pub fn new(elements: ElementIds) -> Self {
        Self {
            elements,
            lifetime_s: DEFAULT_UDP_TEMPLATE_LIFETIME_S,
            sessions: HashMap::new(),
            clock: 0,
            evicted: 0,
        }
    }

    /// Templates expire after `seconds` of Export Time without a refresh.
    pub fn template_lifetime(mut self, seconds: u32) -> Self {
        self.lifetime_s = seconds;
        self
    }

    /// One datagram from `from`: the lines to print.
    pub fn datagram(&mut self, from: SocketAddr, msg: &[u8]) -> Vec<Value> {
        self.clock += 1;
        if !self.sessions.contains_key(&from) && self.sessions.len() >= MAX_UDP_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, (_, seen))| *seen)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.sessions.remove(&k);
                self.evicted += 1;
            }
        }
        let (elements, lifetime) = (self.elements, Some(self.lifetime_s));
        let (session, seen) = self.sessions.entry(from).or_insert_with(|| {
            let s = Session::with_template_lifetime(from.to_string(), "udp", elements, lifetime);
            (s, 0)
        });
        *seen = self.clock;
        session.message(msg)
    }
}

fn problem_text(p: &Problem) -> String {
    format!("{p:?}")
}

/// One PFC record as a JSON line.
pub fn collected_line(from: &str, transport: &str, r: &PfcDecoded, interval: Option<u64>) -> Value {
    json!({
        "exporter": from,
        "transport": transport,
        "observation-domain-id": r.domain,
        "sequence": r.sequence,
        "template-id": r.template_id,
        "observation-point-id": r.observation_point_id,
        "direction": r.direction.map(|d| match d { Direction::Received => "received", Direction::Transmitted => "transmitted" }),
        "interface": r.interface,
        "pfc-priority": r.priority,
        "observation-time-ms": r.observed_ms,
        "pfc-control-frame-total-count": r.total,
        "counter-epoch": r.epoch,
        // Only with a confirmed epoch of this exporter's counter: otherwise the count over
        // the interval, and any rate, is unknown (seed 000 section 7).
        "interval-count": interval.map_or(json!("unknown"), |n| json!(n)),
        "problems": r.problems.iter().map(problem_text).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipfix::{ExporterConfig, PfcRecord, encode::Encoder};

    fn reading(total: u64, ms: u64) -> PfcRecord {
        PfcRecord {
            direction: Direction::Received,
            interface: 3,
            priority: 3,
            observed_ms: 1_700_000_000_000 + ms,
            total,
            epoch: 42,
        }
    }

    /// Issue 14: two exporters with the same Observation Domain, observation point,
    /// interface, priority and epoch; each reading is compared only with its own exporter's.
    #[test]
    fn two_exporters_with_one_scope_never_mix() {
        let config = ExporterConfig {
            elements: ElementIds::enterprise(32473, 1, 2, Some(3)),
            ..ExporterConfig::default()
        };
        let mut a = Encoder::new(config.clone()).unwrap();
        let mut b = Encoder::new(config.clone()).unwrap();
        let (pa, pb): (SocketAddr, SocketAddr) = (
            "127.0.0.1:40001".parse().unwrap(),
            "127.0.0.1:40002".parse().unwrap(),
        );
        let mut c = UdpSessions::new(config.elements);
        let now = 1_796_000_000;
        let mut counts = Vec::new();
        let mut feed = |from, msgs: Vec<Vec<u8>>| {
            for m in msgs {
                for l in c.datagram(from, &m) {
                    if l.get("pfc-priority").is_some() {
                        counts.push((from, l["interval-count"].clone()));
                    }
                }
            }
        };
        feed(pa, a.template_messages(now));
        feed(pb, b.template_messages(now));
        feed(pa, a.data_messages(&[reading(100, 0)], now));
        feed(pb, b.data_messages(&[reading(1000, 10)], now));
        feed(pa, a.data_messages(&[reading(150, 20)], now));
        feed(pb, b.data_messages(&[reading(1001, 30)], now));
        assert_eq!(
            counts,
            [
                (pa, json!("unknown")),
                (pb, json!("unknown")),
                (pa, json!(50)),
                (pb, json!(1))
            ]
        );
    }

    #[test]
    fn a_data_set_needs_the_template_of_its_own_exporter() {
        let config = ExporterConfig::default();
        let mut a = Encoder::new(config.clone()).unwrap();
        let mut c = UdpSessions::new(config.elements);
        let now = 1_796_000_000;
        for m in a.template_messages(now) {
            c.datagram("127.0.0.1:1".parse().unwrap(), &m);
        }
        let lines = c.datagram(
            "127.0.0.1:2".parse().unwrap(),
            &a.data_messages(&[reading(1, 0)], now)[0],
        );
        assert_eq!(
            lines,
            [json!({"exporter": "127.0.0.1:2", "transport": "udp", "unknown-sets": 1})]
        );
    }

    #[test]
    fn udp_sessions_are_bounded() {
        let mut c = UdpSessions::new(ElementIds::default());
        let mut enc = Encoder::new(ExporterConfig::default()).unwrap();
        let t = enc.template_messages(1);
        for port in 0..(MAX_UDP_SESSIONS as u16 + 10) {
            c.datagram(SocketAddr::from(([127, 0, 0, 1], 1000 + port)), &t[0]);
        }
        assert_eq!(c.sessions.len(), MAX_UDP_SESSIONS);
        assert_eq!(c.evicted, 10);
    }
}
