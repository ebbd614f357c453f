//! A Collecting Process's decoder for PFC Counter Records (seed 000 section 8):
//!
//! * Templates with additional Information Elements are accepted (extra fields skipped,
//!   variable-length ones included); the order of fields is not significant.
//! * Records of other templates are accepted and skipped (counted).
//! * A record with both physical-interface elements, or missing a required field, or with
//!   a required field twice, is flagged, not silently used.
//! * Priorities are never summed: every record stays one (interface, priority) counter.
//! * An interval count is known only with a confirmed epoch ([`interval`]).
//! * A field longer than its type (RFC 7011 section 6.2 allows only shorter, reduced-size
//!   encodings of integers) or encoded with variable length is flagged, never folded into
//!   a number; a PFC field outside its role (scope or not, seed 000 section 6) is flagged.
//! * A template that cannot describe records is refused with a reason
//!   ([`RefusedTemplate`]): a fixed-length field of length 0 (RFC 7011 section 3.2: 65535
//!   is the only length without octets of its own; a record of 0 octets would never end a
//!   set), or an Options Template whose scope field count is 0 or exceeds its field count
//!   (RFC 7011 section 3.4.2.2).
//!
//! One [`Decoder`] holds the templates of one Transport Session (RFC 7011 section 8:
//! templates are scoped by Transport Session and Observation Domain): a collector keeps
//! one per exporter ([`super::collect`]).

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
    /// A field encoded longer than its type allows, or with variable length, or with a
    /// reduced size its type does not allow (the element, the encoded length in octets).
    /// Its value is not used.
    FieldLength(&'static str, usize),
    /// A field outside its role: observationPointId, the physical interface and
    /// pfcPriority must be scope fields, observationTimeMilliseconds and
    /// pfcControlFrameTotalCount must not (seed 000 section 6).
    Role(&'static str),
}

/// Why a template was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateRefusal {
    /// A fixed-length field of length 0 (the field's index and element).
    ZeroLengthField {
        /// Position in the template, from 0.
        index: usize,
        /// The element.
        ie: IeId,
    },
    /// An Options Template whose scope field count is 0.
    NoScope,
    /// An Options Template with more scope fields than fields.
    ScopeBeyondFields {
        /// Scope field count.
        scope: usize,
        /// Field count.
        fields: usize,
    },
}

impl std::fmt::Display for TemplateRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ZeroLengthField { index, ie } => write!(
                f,
                "field {index} (element {}{}) has length 0; a fixed-length field needs at least one octet (RFC 7011 section 3.2)",
                ie.id,
                if ie.pen == 0 {
                    String::new()
                } else {
                    format!(", PEN {}", ie.pen)
                }
            ),
            Self::NoScope => {
                write!(
                    f,
                    "an Options Template needs at least one scope field (RFC 7011 section 3.4.2.2)"
                )
            }
            Self::ScopeBeyondFields { scope, fields } => write!(
                f,
                "scope field count {scope} exceeds the field count {fields}"
            ),
        }
    }
}

/// A template the decoder refused: data sets for its ID are then unknown sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusedTemplate {
    /// Observation Domain of the message.
    pub domain: u32,
    /// The template ID.
    pub template_id: u16,
    /// Why.
    pub reason: TemplateRefusal,
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
    /// Templates refused (their Data Sets are then unknown sets).
    pub refused: Vec<RefusedTemplate>,
    /// Templates of the message's domain dropped before it was read: not refreshed within
    /// the template lifetime ([`Decoder::with_template_lifetime`]).
    pub expired: usize,
}

#[derive(Clone, Debug)]
struct Field {
    ie: IeId,
    len: u16,
}

#[derive(Clone, Debug)]
struct Tmpl {
    fields: Vec<Field>,
    /// How many leading fields are scope fields (0: a plain Template).
    scope_count: usize,
    /// The Export Time of the message that last carried it.
    learnt_at: u32,
}

/// One field of a data record: the element, its template length, whether it is a scope
/// field, and its octets.
struct Value<'a> {
    ie: IeId,
    declared_len: u16,
    scope: bool,
    bytes: &'a [u8],
}

/// A decoder for one Transport Session.
pub struct Decoder {
    elements: ElementIds,
    templates: HashMap<(u32, u16), Tmpl>,
    /// Seconds of Export Time a template stays usable without being sent again (UDP).
    lifetime_s: Option<u32>,
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
            lifetime_s: None,
        }
    }

    /// Templates expire `seconds` of Export Time after the message that last carried them
    /// (RFC 7011 section 8.4: over UDP, a template not refreshed within its lifetime is
    /// discarded, and its Data Sets are unknown until it comes again). `None`: never (TCP
    /// and TLS, where a template lives as long as its session).
    pub fn with_template_lifetime(mut self, seconds: Option<u32>) -> Self {
        self.lifetime_s = seconds;
        self
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
        if let Some(lifetime) = self.lifetime_s {
            // Export Time going backwards (another exporter clock) keeps them.
            let before = self.templates.len();
            self.templates.retain(|&(d, _), t| {
                d != domain || export_time.saturating_sub(t.learnt_at) <= lifetime
            });
            out.expired = before - self.templates.len();
        }
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
                    out.templates +=
                        self.templates_in((domain, export_time), set_id, body, &mut out.refused)?;
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
        (domain, export_time): (u32, u32),
        set_id: u16,
        body: &[u8],
        refused: &mut Vec<RefusedTemplate>,
    ) -> Result<usize, DecodeError> {
        let mut at = 0;
        let mut n = 0;
        // Anything shorter than a withdrawal (ID and a field count of 0) is padding.
        while at + 4 <= body.len() {
            let id = be(&body[at..at + 2]) as u16;
            let count = be(&body[at + 2..at + 4]) as usize;
            if count == 0 {
                // A withdrawal (RFC 7011 section 8.1): 4 octets in either kind of set, no
                // scope field count. The set's own ID withdraws every template of its kind
                // in the domain.
                at += 4;
                if id == set_id {
                    let options = set_id == SET_OPTIONS_TEMPLATE;
                    self.templates
                        .retain(|&(d, _), t| d != domain || (t.scope_count > 0) != options);
                } else {
                    self.templates.remove(&(domain, id));
                }
                continue;
            }
            let hdr = if set_id == SET_OPTIONS_TEMPLATE { 6 } else { 4 };
            if at + hdr > body.len() {
                // Padding (at most 3 octets) after the last record.
                break;
            }
            let scope_count = if set_id == SET_OPTIONS_TEMPLATE {
                be(&body[at + 4..at + 6]) as usize
            } else {
                0
            };
            at += hdr;
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
            let refusal = if let Some(index) = fields.iter().position(|f| f.len == 0) {
                Some(TemplateRefusal::ZeroLengthField {
                    index,
                    ie: fields[index].ie,
                })
            } else if set_id == SET_OPTIONS_TEMPLATE && scope_count == 0 {
                Some(TemplateRefusal::NoScope)
            } else if scope_count > count {
                Some(TemplateRefusal::ScopeBeyondFields {
                    scope: scope_count,
                    fields: count,
                })
            } else {
                None
            };
            if let Some(reason) = refusal {
                // The previous definition of this ID is gone too: a Data Set following the
                // refused template must not be read with an older one.
                self.templates.remove(&(domain, id));
                refused.push(RefusedTemplate {
                    domain,
                    template_id: id,
                    reason,
                });
                continue;
            }
            self.templates.insert(
                (domain, id),
                Tmpl {
                    fields,
                    scope_count,
                    learnt_at: export_time,
                },
            );
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
            let record_start = at;
            let mut values: Vec<Value<'_>> = Vec::with_capacity(t.fields.len());
            let mut ok = true;
            for (index, f) in t.fields.iter().enumerate() {
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
                values.push(Value {
                    ie: f.ie,
                    declared_len: f.len,
                    scope: index < t.scope_count,
                    bytes: &body[at..at + len],
                });
                at += len;
            }
            // A record must consume octets, or the set never ends (refused templates make
            // this unreachable; kept so no template can ever spin the loop).
            if !ok || at == record_start {
                break;
            }
            if is_pfc {
                out.pfc
                    .push(self.pfc_record(&values, template_id, domain, export_time, sequence));
            } else if is_type {
                let get = |id: u16| {
                    values
                        .iter()
                        .find(|v| v.ie == IeId::iana(id))
                        .map(|v| v.bytes)
                        // An integer longer than 8 octets cannot be one of these types.
                        .filter(|b| b.len() <= 8 || id == ie::INFORMATION_ELEMENT_NAME)
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
        values: &[Value<'_>],
        template_id: u16,
        domain: u32,
        export_time: u32,
        sequence: u32,
    ) -> PfcDecoded {
        let e = &self.elements;
        let mut problems = Vec::new();
        // One field of the seed's table: at most once, in its role, no longer than its
        // type (reduced-size encoding, RFC 7011 section 6.2, only where the type allows
        // it). A field failing these is flagged and its value not used.
        let mut one = |ie: IeId, rule: FieldRule| -> Option<u64> {
            let mut it = values.iter().filter(|v| v.ie == ie);
            let first = it.next();
            if it.next().is_some() {
                problems.push(Problem::Duplicate(rule.name));
            }
            let Some(v) = first else {
                if rule.required {
                    problems.push(Problem::Missing(rule.name));
                }
                return None;
            };
            if let Some(scope) = rule.scope
                && v.scope != scope
            {
                problems.push(Problem::Role(rule.name));
            }
            let len = v.bytes.len();
            let len_ok = v.declared_len != VARLEN
                && if rule.reduced_size {
                    (1..=rule.octets).contains(&len)
                } else {
                    len == rule.octets
                };
            if !len_ok {
                problems.push(Problem::FieldLength(
                    rule.name,
                    if v.declared_len == VARLEN {
                        usize::from(VARLEN)
                    } else {
                        len
                    },
                ));
                return None;
            }
            Some(be(v.bytes))
        };
        let observation_point_id = one(
            IeId::iana(ie::OBSERVATION_POINT_ID),
            FieldRule::scope("observationPointId", 8, true),
        );
        let ingress = one(
            IeId::iana(ie::INGRESS_PHYSICAL_INTERFACE),
            FieldRule {
                required: false,
                ..FieldRule::scope("ingressPhysicalInterface", 4, true)
            },
        );
        let egress = one(
            IeId::iana(ie::EGRESS_PHYSICAL_INTERFACE),
            FieldRule {
                required: false,
                ..FieldRule::scope("egressPhysicalInterface", 4, true)
            },
        );
        let priority = one(e.pfc_priority, FieldRule::scope("pfcPriority", 1, false));
        // dateTimeMilliseconds has no reduced-size encoding (RFC 7011 section 6.2).
        let observed_ms = one(
            IeId::iana(ie::OBSERVATION_TIME_MILLISECONDS),
            FieldRule::data("observationTimeMilliseconds", 8, false),
        );
        let total = one(
            e.pfc_total,
            FieldRule::data("pfcControlFrameTotalCount", 8, true),
        );
        let epoch = e.epoch.and_then(|ie| {
            one(
                ie,
                FieldRule {
                    required: false,
                    scope: None,
                    ..FieldRule::data("counterEpoch", 4, true)
                },
            )
        });
        let (direction, interface) = match (ingress, egress) {
            // An interface field flagged above (length) leaves the record invalid already.
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

/// How one PFC field must be encoded.
#[derive(Clone, Copy)]
struct FieldRule {
    name: &'static str,
    required: bool,
    /// Must be a scope field (`Some(true)`), must not (`Some(false)`), either (`None`).
    scope: Option<bool>,
    /// The type's size.
    octets: usize,
    /// Whether shorter (reduced-size) encodings are allowed.
    reduced_size: bool,
}

impl FieldRule {
    const fn scope(name: &'static str, octets: usize, reduced_size: bool) -> Self {
        Self {
            name,
            required: true,
            scope: Some(true),
            octets,
            reduced_size,
        }
    }

    const fn data(name: &'static str, octets: usize, reduced_size: bool) -> Self {
        Self {
            name,
            required: true,
            scope: Some(false),
            octets,
            reduced_size,
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
