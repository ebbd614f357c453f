//! The IPFIX encoder (RFC 7011): message header, Options Template Sets (one template per
//! Set), Data Sets, per-Observation-Domain sequence numbers.

use super::{
    Direction, ExportError, ExporterConfig, IeId, PfcRecord, TEMPLATE_IE_TYPE, TEMPLATE_RX,
    TEMPLATE_TX, ie,
};

/// IPFIX version number.
pub const VERSION: u16 = 10;
/// Message header length.
pub const HEADER_LEN: usize = 16;
/// Set ID of Template Sets.
pub const SET_TEMPLATE: u16 = 2;
/// Set ID of Options Template Sets.
pub const SET_OPTIONS_TEMPLATE: u16 = 3;
/// Field length of variable-length fields.
pub const VARLEN: u16 = 0xffff;

/// RFC 5610 informationElementDataType values.
pub mod data_type {
    /// unsigned8.
    pub const UNSIGNED8: u8 = 1;
    /// unsigned32.
    pub const UNSIGNED32: u8 = 3;
    /// unsigned64.
    pub const UNSIGNED64: u8 = 4;
}
/// RFC 5610 informationElementSemantics values.
pub mod semantics {
    /// totalCounter.
    pub const TOTAL_COUNTER: u8 = 2;
    /// identifier.
    pub const IDENTIFIER: u8 = 4;
}
/// IANA informationElementUnits values.
pub mod units {
    /// none.
    pub const NONE: u16 = 0;
    /// frames.
    pub const FRAMES: u16 = 13;
}

/// One field specifier of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// The element.
    pub ie: IeId,
    /// Its encoded length (0xffff: variable).
    pub len: u16,
}

/// A template: ID, scope field count (0: a plain Template), fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// Template ID (>= 256).
    pub id: u16,
    /// How many leading fields are scope fields.
    pub scope_count: u16,
    /// The fields in order.
    pub fields: Vec<FieldSpec>,
}

impl Template {
    /// The encoded template record.
    pub fn record(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&(self.fields.len() as u16).to_be_bytes());
        if self.scope_count > 0 {
            out.extend_from_slice(&self.scope_count.to_be_bytes());
        }
        for f in &self.fields {
            let id = if f.ie.pen != 0 {
                f.ie.id | 0x8000
            } else {
                f.ie.id
            };
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&f.len.to_be_bytes());
            if f.ie.pen != 0 {
                out.extend_from_slice(&f.ie.pen.to_be_bytes());
            }
        }
        out
    }
}

/// The PFC counter Options Template of one direction.
pub fn pfc_template(direction: Direction, config: &ExporterConfig) -> Template {
    let (id, iface) = match direction {
        Direction::Received => (TEMPLATE_RX, ie::INGRESS_PHYSICAL_INTERFACE),
        Direction::Transmitted => (TEMPLATE_TX, ie::EGRESS_PHYSICAL_INTERFACE),
    };
    let e = &config.elements;
    let mut fields = vec![
        FieldSpec {
            ie: IeId::iana(ie::OBSERVATION_POINT_ID),
            len: 8,
        },
        FieldSpec {
            ie: IeId::iana(iface),
            len: 4,
        },
        FieldSpec {
            ie: e.pfc_priority,
            len: 1,
        },
        FieldSpec {
            ie: IeId::iana(ie::OBSERVATION_TIME_MILLISECONDS),
            len: 8,
        },
        FieldSpec {
            ie: e.pfc_total,
            len: 8,
        },
    ];
    if let Some(epoch) = e.epoch {
        fields.push(FieldSpec { ie: epoch, len: 4 });
    }
    Template {
        id,
        scope_count: 3,
        fields,
    }
}

/// The RFC 5610 Information Element Type Record template (258).
pub fn ie_type_template() -> Template {
    let f = |id, len| FieldSpec {
        ie: IeId::iana(id),
        len,
    };
    Template {
        id: TEMPLATE_IE_TYPE,
        scope_count: 2,
        fields: vec![
            f(ie::INFORMATION_ELEMENT_ID, 2),
            f(ie::PRIVATE_ENTERPRISE_NUMBER, 4),
            f(ie::INFORMATION_ELEMENT_DATA_TYPE, 1),
            f(ie::INFORMATION_ELEMENT_SEMANTICS, 1),
            f(ie::INFORMATION_ELEMENT_UNITS, 2),
            f(ie::INFORMATION_ELEMENT_RANGE_BEGIN, 8),
            f(ie::INFORMATION_ELEMENT_RANGE_END, 8),
            f(ie::INFORMATION_ELEMENT_NAME, VARLEN),
        ],
    }
}

/// One Information Element Type Record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRecord {
    /// The element described.
    pub ie: IeId,
    /// informationElementDataType.
    pub data_type: u8,
    /// informationElementSemantics.
    pub semantics: u8,
    /// informationElementUnits.
    pub units: u16,
    /// informationElementRangeBegin.
    pub range_begin: u64,
    /// informationElementRangeEnd.
    pub range_end: u64,
    /// informationElementName.
    pub name: String,
}

impl TypeRecord {
    /// Encoded as a record of [`ie_type_template`].
    pub fn record(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.ie.id.to_be_bytes());
        out.extend_from_slice(&self.ie.pen.to_be_bytes());
        out.push(self.data_type);
        out.push(self.semantics);
        out.extend_from_slice(&self.units.to_be_bytes());
        out.extend_from_slice(&self.range_begin.to_be_bytes());
        out.extend_from_slice(&self.range_end.to_be_bytes());
        // Names are short: the one-octet length form.
        let name = &self.name.as_bytes()[..self.name.len().min(254)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out
    }
}

/// The type records of the configured elements.
pub fn type_records(config: &ExporterConfig) -> Vec<TypeRecord> {
    let e = &config.elements;
    let mut v = vec![
        TypeRecord {
            ie: e.pfc_priority,
            data_type: data_type::UNSIGNED8,
            semantics: semantics::IDENTIFIER,
            units: units::NONE,
            range_begin: 0,
            range_end: 7,
            name: "pfcPriority".into(),
        },
        TypeRecord {
            ie: e.pfc_total,
            data_type: data_type::UNSIGNED64,
            semantics: semantics::TOTAL_COUNTER,
            units: units::FRAMES,
            range_begin: 0,
            range_end: u64::MAX,
            name: "pfcControlFrameTotalCount".into(),
        },
    ];
    if let Some(epoch) = e.epoch {
        v.push(TypeRecord {
            ie: epoch,
            data_type: data_type::UNSIGNED32,
            semantics: semantics::IDENTIFIER,
            units: units::NONE,
            range_begin: 0,
            range_end: u64::from(u32::MAX),
            name: "lqPfcCounterEpoch".into(),
        });
    }
    v
}

/// Encodes one data record of a PFC template.
pub fn pfc_record(r: &PfcRecord, config: &ExporterConfig) -> Vec<u8> {
    let mut out = Vec::with_capacity(33);
    out.extend_from_slice(&config.observation_point_id.to_be_bytes());
    out.extend_from_slice(&r.interface.to_be_bytes());
    out.push(r.priority);
    out.extend_from_slice(&r.observed_ms.to_be_bytes());
    out.extend_from_slice(&r.total.to_be_bytes());
    if config.elements.epoch.is_some() {
        out.extend_from_slice(&r.epoch.to_be_bytes());
    }
    out
}

/// Builds messages for one Observation Domain and keeps its sequence number: the number of
/// Data Records sent before each message, modulo 2^32 (RFC 7011 section 3.1).
#[derive(Clone, Debug)]
pub struct Encoder {
    config: ExporterConfig,
    sequence: u32,
}

impl Encoder {
    /// An encoder; the element configuration is validated.
    pub fn new(config: ExporterConfig) -> Result<Self, ExportError> {
        config.elements.validate()?;
        if config.max_message_len < HEADER_LEN + 4 + 64 {
            return Err(ExportError::MessageTooSmall(config.max_message_len));
        }
        Ok(Self {
            config,
            sequence: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ExporterConfig {
        &self.config
    }

    /// The sequence number the next message will carry.
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// `msg`, built here, was not sent (nor any built after it): its Data Records were not
    /// sent either, so the sequence number goes back to the one it carries (RFC 7011
    /// section 3.1: the count of Data Records sent). A message that is not one of ours
    /// (shorter than a header) changes nothing.
    pub fn unsent_from(&mut self, msg: &[u8]) {
        if let Some(seq) = msg.get(8..12) {
            self.sequence = u32::from_be_bytes([seq[0], seq[1], seq[2], seq[3]]);
        }
    }

    fn message(&self, export_time: u32, sets: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(HEADER_LEN + sets.len());
        m.extend_from_slice(&VERSION.to_be_bytes());
        m.extend_from_slice(&((HEADER_LEN + sets.len()) as u16).to_be_bytes());
        m.extend_from_slice(&export_time.to_be_bytes());
        m.extend_from_slice(&self.sequence.to_be_bytes());
        m.extend_from_slice(&self.config.observation_domain_id.to_be_bytes());
        m.extend_from_slice(sets);
        m
    }

    fn set(id: u16, body: &[u8]) -> Vec<u8> {
        let mut s = Vec::with_capacity(4 + body.len());
        s.extend_from_slice(&id.to_be_bytes());
        s.extend_from_slice(&((4 + body.len()) as u16).to_be_bytes());
        s.extend_from_slice(body);
        s
    }

    /// The templates, each in its own Options Template Set, in one message; then (when
    /// configured) the Information Element Type Records in a second one.
    pub fn template_messages(&mut self, export_time: u32) -> Vec<Vec<u8>> {
        let mut sets = Vec::new();
        let mut templates = vec![
            pfc_template(Direction::Received, &self.config),
            pfc_template(Direction::Transmitted, &self.config),
        ];
        if self.config.type_records {
            templates.push(ie_type_template());
        }
        for t in &templates {
            sets.extend(Self::set(SET_OPTIONS_TEMPLATE, &t.record()));
        }
        let mut out = vec![self.message(export_time, &sets)];
        if self.config.type_records {
            let records = type_records(&self.config);
            let body: Vec<u8> = records.iter().flat_map(TypeRecord::record).collect();
            out.push(self.message(export_time, &Self::set(TEMPLATE_IE_TYPE, &body)));
            self.sequence = self.sequence.wrapping_add(records.len() as u32);
        }
        out
    }

    /// Data messages for `records`: one Data Set per direction run, as many records per
    /// message as fit.
    pub fn data_messages(&mut self, records: &[PfcRecord], export_time: u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut sets: Vec<u8> = Vec::new();
        let mut in_message = 0u32;
        let mut current: Option<(u16, Vec<u8>)> = None;
        let max = self.config.max_message_len;
        for r in records {
            let tid = match r.direction {
                Direction::Received => TEMPLATE_RX,
                Direction::Transmitted => TEMPLATE_TX,
            };
            let rec = pfc_record(r, &self.config);
            let open_len = current.as_ref().map_or(0, |(_, b)| 4 + b.len());
            let same_set = current.as_ref().is_some_and(|(t, _)| *t == tid);
            let needed = if same_set { rec.len() } else { 4 + rec.len() };
            if HEADER_LEN + sets.len() + open_len + needed > max {
                if let Some((t, b)) = current.take() {
                    sets.extend(Self::set(t, &b));
                }
                out.push(self.message(export_time, &sets));
                self.sequence = self.sequence.wrapping_add(in_message);
                sets.clear();
                in_message = 0;
            } else if !same_set && let Some((t, b)) = current.take() {
                sets.extend(Self::set(t, &b));
            }
            match &mut current {
                Some((t, b)) if *t == tid => b.extend(rec),
                _ => current = Some((tid, rec)),
            }
            in_message += 1;
        }
        if let Some((t, b)) = current.take() {
            sets.extend(Self::set(t, &b));
        }
        if !sets.is_empty() {
            out.push(self.message(export_time, &sets));
            self.sequence = self.sequence.wrapping_add(in_message);
        }
        out
    }
}
