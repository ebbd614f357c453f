//! IPFIX (RFC 7011) export of PFC counters (seed 000, `spec/pfc-ipfix.md`).
//!
//! * [`encode`]: the Exporting Process's encoder: Options Templates 256 (received,
//!   ingressPhysicalInterface) and 257 (transmitted, egressPhysicalInterface), 258 for the
//!   RFC 5610 Information Element Type Records of the new elements, one Options Template
//!   per Set, message headers with export time and per-domain sequence numbers.
//! * [`decode`]: a Collecting Process's decoder following the seed's collector rules.
//! * [`collect`]: the collector's sessions, one per exporter (templates, last readings and
//!   interval counts never mix between exporters).

pub mod collect;
pub mod decode;
pub mod encode;

use std::time::Duration;

/// The IANA port for IPFIX over UDP and TCP.
pub const IPFIX_PORT: u16 = 4739;
/// Options Template of received-frame records.
pub const TEMPLATE_RX: u16 = 256;
/// Options Template of transmitted-frame records.
pub const TEMPLATE_TX: u16 = 257;
/// Options Template of the RFC 5610 Information Element Type Records.
pub const TEMPLATE_IE_TYPE: u16 = 258;
/// RFC 5612 documentation PEN, the default until IANA assigns the Element IDs.
pub const DEFAULT_PEN: u32 = 32473;

/// IANA Information Elements used here.
pub mod ie {
    /// observationPointId (unsigned64).
    pub const OBSERVATION_POINT_ID: u16 = 138;
    /// ingressPhysicalInterface (unsigned32).
    pub const INGRESS_PHYSICAL_INTERFACE: u16 = 252;
    /// egressPhysicalInterface (unsigned32).
    pub const EGRESS_PHYSICAL_INTERFACE: u16 = 253;
    /// observationTimeMilliseconds (dateTimeMilliseconds).
    pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
    /// informationElementId (RFC 5610).
    pub const INFORMATION_ELEMENT_ID: u16 = 303;
    /// informationElementDataType.
    pub const INFORMATION_ELEMENT_DATA_TYPE: u16 = 339;
    /// informationElementName.
    pub const INFORMATION_ELEMENT_NAME: u16 = 341;
    /// informationElementRangeBegin.
    pub const INFORMATION_ELEMENT_RANGE_BEGIN: u16 = 342;
    /// informationElementRangeEnd.
    pub const INFORMATION_ELEMENT_RANGE_END: u16 = 343;
    /// informationElementSemantics.
    pub const INFORMATION_ELEMENT_SEMANTICS: u16 = 344;
    /// informationElementUnits.
    pub const INFORMATION_ELEMENT_UNITS: u16 = 345;
    /// privateEnterpriseNumber.
    pub const PRIVATE_ENTERPRISE_NUMBER: u16 = 346;
}

/// An Information Element identity: an IANA ID (`pen == 0`) or an enterprise one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IeId {
    /// The Element ID, without the enterprise bit.
    pub id: u16,
    /// Private Enterprise Number; 0 for IANA elements.
    pub pen: u32,
}

impl IeId {
    /// An IANA element.
    pub const fn iana(id: u16) -> Self {
        Self { id, pen: 0 }
    }
}

/// Invalid element configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// IANA IDs for the new elements come from 128..=32767.
    #[error("{0}: IANA Element ID {1} is outside 128..=32767")]
    IanaId(&'static str, u16),
    /// Enterprise IDs are 15-bit, 0 reserved.
    #[error("{0}: enterprise Element ID {1} is outside 1..=32767")]
    EnterpriseId(&'static str, u16),
    /// Two elements share an identity.
    #[error("the PFC elements must have distinct identities")]
    Duplicate,
    /// The epoch element has no IANA registration: it needs a PEN.
    #[error("the counter-epoch element is enterprise-specific: it needs a PEN")]
    EpochNeedsPen,
}

/// Which identities the two PFC elements (and the optional epoch element) use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementIds {
    /// pfcPriority (unsigned8, identifier).
    pub pfc_priority: IeId,
    /// pfcControlFrameTotalCount (unsigned64, totalCounter, frames).
    pub pfc_total: IeId,
    /// Optional enterprise counter epoch (unsigned32, identifier): equal values of one
    /// scoped counter mean no reset in between.
    pub epoch: Option<IeId>,
}

impl Default for ElementIds {
    /// PEN 32473, pfcPriority 1, pfcControlFrameTotalCount 2, no epoch element.
    fn default() -> Self {
        Self {
            pfc_priority: IeId {
                id: 1,
                pen: DEFAULT_PEN,
            },
            pfc_total: IeId {
                id: 2,
                pen: DEFAULT_PEN,
            },
            epoch: None,
        }
    }
}

impl ElementIds {
    /// Enterprise elements under `pen` with the given IDs (and an epoch element if
    /// `epoch_id` is given).
    pub fn enterprise(pen: u32, priority_id: u16, total_id: u16, epoch_id: Option<u16>) -> Self {
        Self {
            pfc_priority: IeId {
                id: priority_id,
                pen,
            },
            pfc_total: IeId { id: total_id, pen },
            epoch: epoch_id.map(|id| IeId { id, pen }),
        }
    }

    /// IANA-assigned IDs (no enterprise bit); an epoch element stays enterprise-specific.
    pub fn iana(priority_id: u16, total_id: u16, epoch: Option<IeId>) -> Self {
        Self {
            pfc_priority: IeId::iana(priority_id),
            pfc_total: IeId::iana(total_id),
            epoch,
        }
    }

    /// Checks the ID ranges: IANA 128..=32767, enterprise 1..=32767.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |name: &'static str, ie: IeId| {
            if ie.pen == 0 {
                if !(128..=32767).contains(&ie.id) {
                    return Err(ConfigError::IanaId(name, ie.id));
                }
            } else if !(1..=32767).contains(&ie.id) {
                return Err(ConfigError::EnterpriseId(name, ie.id));
            }
            Ok(())
        };
        check("pfcPriority", self.pfc_priority)?;
        check("pfcControlFrameTotalCount", self.pfc_total)?;
        if let Some(e) = self.epoch {
            if e.pen == 0 {
                return Err(ConfigError::EpochNeedsPen);
            }
            check("counter epoch", e)?;
            if e == self.pfc_priority || e == self.pfc_total {
                return Err(ConfigError::Duplicate);
            }
        }
        if self.pfc_priority == self.pfc_total {
            return Err(ConfigError::Duplicate);
        }
        Ok(())
    }
}

/// Direction of a PFC counter record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Received frames (ingressPhysicalInterface, template 256).
    Received,
    /// Transmitted frames (egressPhysicalInterface, template 257).
    Transmitted,
}

/// One PFC Counter Record to export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcRecord {
    /// Direction.
    pub direction: Direction,
    /// The physical interface (a LAG member, never the aggregate).
    pub interface: u32,
    /// Priority 0..=7.
    pub priority: u8,
    /// observationTimeMilliseconds: when the source counter was read.
    pub observed_ms: u64,
    /// pfcControlFrameTotalCount.
    pub total: u64,
    /// Counter epoch (exported only when the epoch element is configured).
    pub epoch: u32,
}

/// Exporter settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExporterConfig {
    /// Observation Domain ID of the message headers.
    pub observation_domain_id: u32,
    /// observationPointId of every record.
    pub observation_point_id: u64,
    /// Element identities.
    pub elements: ElementIds,
    /// Export RFC 5610 Information Element Type Records (template 258) with the templates.
    pub type_records: bool,
    /// Largest message (UDP: keep below the path MTU).
    pub max_message_len: usize,
    /// UDP template refresh interval (RFC 7011 section 8.4).
    pub template_refresh: Duration,
}

impl Default for ExporterConfig {
    fn default() -> Self {
        Self {
            observation_domain_id: 1,
            observation_point_id: 1,
            elements: ElementIds::default(),
            type_records: true,
            max_message_len: 1400,
            template_refresh: Duration::from_secs(60),
        }
    }
}

/// Export errors.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Socket error.
    #[error("IPFIX transport")]
    Io(#[from] std::io::Error),
    /// A message limit too small for one record.
    #[error("max_message_len {0} cannot hold one record")]
    MessageTooSmall(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_id_ranges_are_validated() {
        assert_eq!(ElementIds::default().validate(), Ok(()));
        assert_eq!(
            ElementIds::iana(127, 500, None).validate(),
            Err(ConfigError::IanaId("pfcPriority", 127))
        );
        assert_eq!(
            ElementIds::iana(500, 32768, None).validate(),
            Err(ConfigError::IanaId("pfcControlFrameTotalCount", 32768))
        );
        assert_eq!(ElementIds::iana(128, 32767, None).validate(), Ok(()));
        assert_eq!(
            ElementIds::enterprise(32473, 0, 2, None).validate(),
            Err(ConfigError::EnterpriseId("pfcPriority", 0))
        );
        assert_eq!(
            ElementIds::enterprise(32473, 1, 40000, None).validate(),
            Err(ConfigError::EnterpriseId(
                "pfcControlFrameTotalCount",
                40000
            ))
        );
        assert_eq!(
            ElementIds::enterprise(32473, 1, 1, None).validate(),
            Err(ConfigError::Duplicate)
        );
        assert_eq!(
            ElementIds::iana(600, 601, Some(IeId::iana(602))).validate(),
            Err(ConfigError::EpochNeedsPen)
        );
        assert_eq!(
            ElementIds::enterprise(32473, 1, 2, Some(3)).validate(),
            Ok(())
        );
    }
}

#[cfg(test)]
mod fixtures;
