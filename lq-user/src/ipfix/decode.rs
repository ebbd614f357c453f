//! A Collecting Process's decoder for PFC Counter Records (seed 000 section 8):
//!
//! * Templates with additional Information Elements are accepted (extra fields skipped,
//!   variable-length ones included); the order of fields is not significant.
//! * Records of other templates are accepted and skipped (counted).
//! * A record with both physical-interface elements, or missing a required field, or with
//!   a required field twice, is flagged, not silently used.
//! * Priorities are never summed: every record stays one (interface, priority) counter.
//! * An interval count is known only with a confirmed epoch ([`interval`]).
//!
//! One [`Decoder`] holds the templates of one Transport Session.

use std::collections::{BTreeMap, HashMap};

use super::{
    Direction, ElementIds, IeId,
    encode::{HEADER_LEN, SET_OPTIONS_TEMPLATE, SET_TEMPLATE, VARLEN, VERSION},
    ie,
};

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its header or its stated length.
    #[error("truncated message")]
    Truncated,
    /// Not version 10.
    #[error("not IPFIX version 10: {0}")]
    Version(u16),
    /// A set or template overruns its container.
    #[error("malformed set {0}")]
    MalformedSet(u16),
}

/// A problem that makes a PFC record unusable as a counter reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    /// Both ingressPhysicalInterface and egressPhysicalInterface.
    BothInterfaces,
    /// A required field is missing (named by its element).
    Missing(&'static str),
    /// A required field occurs more than once in the template.
    Duplicate(&'static str),
    /// pfcPriority outside 0..=7.
    PriorityRange(u8),
}

/// One decoded PFC Counter Record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PfcDecoded {
    /// Observation Domain of the message.
    pub domain: u32,
    /// Export time of the message (seconds).
    pub export_time: u32,
    /// Sequence number of the message.
    pub sequence: u32,
    /// The template.
    pub template_id: u16,
    /// observationPointId.
    pub observation_point_id: Option<u64>,
    /// Direction from the interface element present (None when neither or both).
    pub direction: Option<Direction>,
    /// The interface.
    pub interface: Option<u32>,
    /// pfcPriority.
    pub priority: Option<u8>,
    /// observationTimeMilliseconds.
    pub observed_ms: Option<u64>,
    /// pfcControlFrameTotalCount.
    pub total: Option<u64>,
    /// The enterprise counter epoch, when the template carries it.
    pub epoch: Option<u32>,
    /// Problems; an empty list means a usable reading.
    pub problems: Vec<Problem>,
}

impl PfcDecoded {
    /// Whether the record is a usable counter reading.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One decoded RFC 5610 Information Element Type Record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// The element described.
    pub ie: IeId,
    /// informationElementDataType.
    pub data_type: Option<u8>,
    /// informationElementSemantics.
    pub semantics: Option<u8>,
    /// informationElementUnits.
    pub units: Option<u16>,
    /// informationElementName.
    pub name: Option<String>,
}

/// What one message held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// PFC Counter Records (valid and flagged).
    pub pfc: Vec<PfcDecoded>,
    /// Information Element Type Records.
    pub types: Vec<TypeInfo>,
    /// Templates and Options Templates learnt.
    pub templates: usize,
    /// Records of other templates, skipped.
    pub other_records: usize,
    /// Data Sets whose template is unknown (skipped).
    pub unknown_sets: usize,
}

#[derive(Clone, Debug)]
struct Field {
    ie: IeId,
    len: u16,
}

#[derive(Clone, Debug)]
struct Tmpl {
    fields: Vec<Field>,
}

/// A decoder for one Transport Session.
pub struct Decoder {
    elements: ElementIds,
    templates: HashMap<(u32, u16), Tmpl>,
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
}

impl Decoder {
    /// A decoder recognising the PFC elements by `elements`.
    pub fn new(elements: ElementIds) -> Self {
        Self {
            elements,
            templates: HashMap::new(),
        }
    }

    /// Decodes one message (one UDP datagram, or one message cut from a TCP stream by its
    /// length field).
    pub fn decode(&mut self, msg: &[u8]) -> Result<Decoded, DecodeError> {
        if msg.len() < HEADER_LEN {
            return Err(DecodeError::Truncated);
        }
        let version = be(&msg[0..2]) as u16;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let len = be(&msg[2..4]) as usize;
        if len < HEADER_LEN || len > msg.len() {
            return Err(DecodeError::Truncated);
        }
        let export_time = be(&msg[4..8]) as u32;
        let sequence = be(&msg[8..12]) as u32;
        let domain = be(&msg[12..16]) as u32;
        let mut out = Decoded::default();
        let mut at = HEADER_LEN;
        while at + 4 <= len {
            let set_id = be(&msg[at..at + 2]) as u16;
            let set_len = be(&msg[at + 2..at + 4]) as usize;
            if set_len < 4 || at + set_len > len {
                return Err(DecodeError::MalformedSet(set_id));
            }
            let body = &msg[at + 4..at + set_len];
            match set_id {
                SET_TEMPLATE | SET_OPTIONS_TEMPLATE => {
                    out.templates += self.templates_in(domain, set_id, body)?;
                }
                id if id >= 256 => {
                    let Some(t) = self.templates.get(&(domain, id)).cloned() else {
                        out.unknown_sets += 1;
                        at += set_len;
                        continue;
                    };
                    self.records_in(&t, id, body, (domain, export_time, sequence), &mut out);
                }
                _ => {}
            }
            at += set_len;
        }
        Ok(out)
    }

    fn templates_in(
        &mut self,
        domain: u32,
        set_id: u16,
        body: &[u8],
    ) -> Result<usize, DecodeError> {
        let mut at = 0;
        let mut n = 0;
        let hdr = if set_id == SET_OPTIONS_TEMPLATE { 6 } else { 4 };
        // Anything shorter than a template header is padding.
        while at + hdr <= body.len() {
            let id = be(&body[at..at + 2]) as u16;
            let count = be(&body[at + 2..at + 4]) as usize;
            at += hdr;
            if count == 0 {
                // Template withdrawal.
                self.templates.remove(&(domain, id));
                continue;
            }
            let mut fields = Vec::with_capacity(count);
            for _ in 0..count {
                if at + 4 > body.len() {
                    return Err(DecodeError::MalformedSet(set_id));
                }
                let raw = be(&body[at..at + 2]) as u16;
                let len = be(&body[at + 2..at + 4]) as u16;
                at += 4;
                let pen = if raw & 0x8000 != 0 {
                    if at + 4 > body.len() {
                        return Err(DecodeError::MalformedSet(set_id));
                    }
                    let p = be(&body[at..at + 4]) as u32;
                    at += 4;
                    p
                } else {
                    0
                };
                fields.push(Field {
                    ie: IeId {
                        id: raw & 0x7fff,
                        pen,
                    },
                    len,
                });
            }
            self.templates.insert((domain, id), Tmpl { fields });
            n += 1;
        }
        Ok(n)
    }

    fn records_in(
        &self,
        t: &Tmpl,
        template_id: u16,
        body: &[u8],
        (domain, export_time, sequence): (u32, u32, u32),
        out: &mut Decoded,
    ) {
        let e = &self.elements;
        let has = |ie: IeId| t.fields.iter().any(|f| f.ie == ie);
        let is_pfc = has(e.pfc_priority) || has(e.pfc_total);
        let is_type = has(IeId::iana(ie::INFORMATION_ELEMENT_ID));
        let min_len: usize = t
            .fields
            .iter()
            .map(|f| {
                if f.len == VARLEN {
                    1
                } else {
                    usize::from(f.len)
                }
            })
            .sum();
        let mut at = 0;
        while at + min_len.max(1) <= body.len() {
            let mut values: Vec<(IeId, &[u8])> = Vec::with_capacity(t.fields.len());
            let mut ok = true;
            for f in &t.fields {
                let len = if f.len == VARLEN {
                    let Some(&l) = body.get(at) else {
                        ok = false;
                        break;
                    };
                    at += 1;
                    if l == 255 {
                        if at + 2 > body.len() {
                            ok = false;
                            break;
                        }
                        let l = be(&body[at..at + 2]) as usize;
                        at += 2;
                        l
                    } else {
                        usize::from(l)
                    }
                } else {
                    usize::from(f.len)
                };
                if at + len > body.len() {
                    ok = false;
                    break;
                }
                values.push((f.ie, &body[at..at + len]));
                at += len;
            }
            if !ok {
                break;
            }
            if is_pfc {
                out.pfc
                    .push(self.pfc_record(&values, template_id, domain, export_time, sequence));
            } else if is_type {
                let get = |id: u16| {
                    values
                        .iter()
                        .find(|(i, _)| *i == IeId::iana(id))
                        .map(|v| v.1)
                };
                out.types.push(TypeInfo {
                    ie: IeId {
                        id: get(ie::INFORMATION_ELEMENT_ID).map_or(0, |v| be(v) as u16),
                        pen: get(ie::PRIVATE_ENTERPRISE_NUMBER).map_or(0, |v| be(v) as u32),
                    },
                    data_type: get(ie::INFORMATION_ELEMENT_DATA_TYPE).map(|v| be(v) as u8),
                    semantics: get(ie::INFORMATION_ELEMENT_SEMANTICS).map(|v| be(v) as u8),
                    units: get(ie::INFORMATION_ELEMENT_UNITS).map(|v| be(v) as u16),
                    name: get(ie::INFORMATION_ELEMENT_NAME)
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                });
            } else {
                out.other_records += 1;
            }
        }
    }

    fn pfc_record(
        &self,
        values: &[(IeId, &[u8])],
        template_id: u16,
        domain: u32,
        export_time: u32,
        sequence: u32,
    ) -> PfcDecoded {
        let e = &self.elements;
        let mut problems = Vec::new();
        let mut one = |ie: IeId, name: &'static str, required: bool| -> Option<u64> {
            let mut it = values.iter().filter(|(i, _)| *i == ie);
            let first = it.next();
            if it.next().is_some() {
                problems.push(Problem::Duplicate(name));
            }
            if first.is_none() && required {
                problems.push(Problem::Missing(name));
            }
            first.map(|(_, v)| be(v))
        };
        let observation_point_id = one(
            IeId::iana(ie::OBSERVATION_POINT_ID),
            "observationPointId",
            true,
        );
        let ingress = one(
            IeId::iana(ie::INGRESS_PHYSICAL_INTERFACE),
            "ingressPhysicalInterface",
            false,
        );
        let egress = one(
            IeId::iana(ie::EGRESS_PHYSICAL_INTERFACE),
            "egressPhysicalInterface",
            false,
        );
        let priority = one(e.pfc_priority, "pfcPriority", true);
        let observed_ms = one(
            IeId::iana(ie::OBSERVATION_TIME_MILLISECONDS),
            "observationTimeMilliseconds",
            true,
        );
        let total = one(e.pfc_total, "pfcControlFrameTotalCount", true);
        let epoch = e.epoch.and_then(|ie| one(ie, "counterEpoch", false));
        let (direction, interface) = match (ingress, egress) {
            (Some(i), None) => (Some(Direction::Received), Some(i as u32)),
            (None, Some(o)) => (Some(Direction::Transmitted), Some(o as u32)),
            (Some(_), Some(_)) => {
                problems.push(Problem::BothInterfaces);
                (None, None)
            }
            (None, None) => {
                problems.push(Problem::Missing("ingress/egressPhysicalInterface"));
                (None, None)
            }
        };
        let priority = priority.map(|p| p as u8);
        if let Some(p) = priority.filter(|p| *p > 7) {
            problems.push(Problem::PriorityRange(p));
        }
        PfcDecoded {
            domain,
            export_time,
            sequence,
            template_id,
            observation_point_id,
            direction,
            interface,
            priority,
            observed_ms,
            total,
            epoch: epoch.map(|v| v as u32),
            problems,
        }
    }
}

/// The scoped counter a record reads: (domain, observation point, direction, interface,
/// priority). Records are never summed across priorities.
pub type CounterScope = (u32, u64, Direction, u32, u8);

impl PfcDecoded {
    /// The scoped counter of a valid record.
    pub fn scope(&self) -> Option<CounterScope> {
        if !self.is_valid() {
            return None;
        }
        Some((
            self.domain,
            self.observation_point_id?,
            self.direction?,
            self.interface?,
            self.priority?,
        ))
    }
}

/// The exact count between two readings of the same scoped counter: known only when both
/// carry the same epoch (confirming one counter instance without reset; the epoch
/// exporter also guarantees fewer than 2^64 increments by tracking wraps), and the later
/// reading is not older. Otherwise unknown (`None`): never a guess.
pub fn interval(earlier: &PfcDecoded, later: &PfcDecoded) -> Option<u64> {
    let scope = earlier.scope()?;
    if later.scope()? != scope {
        return None;
    }
    let (e0, e1) = (earlier.epoch?, later.epoch?);
    if e0 != e1 || later.observed_ms? < earlier.observed_ms? {
        return None;
    }
    Some(later.total?.wrapping_sub(earlier.total?))
}

/// The latest valid reading of every scoped counter in `records`.
pub fn latest(records: &[PfcDecoded]) -> BTreeMap<CounterScope, &PfcDecoded> {
    let mut out: BTreeMap<CounterScope, &PfcDecoded> = BTreeMap::new();
    for r in records {
        if let Some(s) = r.scope() {
            match out.get(&s) {
                Some(prev) if prev.observed_ms > r.observed_ms => {}
                _ => {
                    out.insert(s, r);
                }
            }
        }
    }
    out
}
