//! `lqd decode`: the receive checks of `spec/lq-udp-wire.md` applied to one UDP payload
//! (checks 5-9) or to every frame of a capture file (checks 1-9), with each accepted
//! advertisement printed as RFC 7951 JSON.
//!
//! Check 10 (the sequence number) needs the receiver's per-neighbor state and is not
//! applied; check 11's per-entry AS-plan test is reported on stderr, not applied.

use std::{fmt, io::Write};

use lq_common::{
    frame::{FrameClass, classify},
    receive::Discard,
    wire::{
        AsQualification, AsRange, DEFAULT_PORT, DecodeError, DecodePolicy, as_plan_contains, decode,
    },
};
use thiserror::Error;

use crate::{
    core::auth::{self, Endpoints, KeyChain, Reject},
    tools::pcap::Frame,
    views::advertisement_json::advertisement_document,
};
use lq_common::{auth::Algorithm, wire::Advertisement};

/// Exit status: every LQ datagram was accepted.
pub const EXIT_ACCEPTED: u8 = 0;
/// Exit status: at least one LQ datagram was discarded.
pub const EXIT_DISCARDED: u8 = 1;
/// Exit status: usage error, or a file that cannot be read.
pub const EXIT_ERROR: u8 = 2;

/// The local settings `lqd decode` checks against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeOptions {
    /// UDP destination port (check 3; frames only).
    pub port: u16,
    /// The local `as-qualified` setting; `None` accepts both Q values and skips the AS plan.
    pub as_qualified: Option<bool>,
    /// The AS plan (empty: none); only used with `as_qualified`.
    pub as_plan: Vec<AsRange>,
    /// Print each document on one line.
    pub json_lines: bool,
    /// Verify authentication trailers with this key chain (issue 39); an advertisement
    /// without a valid one is then discarded with the reason.
    pub key_chain: Option<KeyChain>,
    /// A payload's source and destination (`--source`, `--destination`), which a frame
    /// carries itself: the trailer's pseudo-header.
    pub endpoints: Option<Endpoints>,
    /// The time key lifetimes are judged at (Unix seconds) when a frame has no capture
    /// time: now.
    pub now_s: i64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            port: DEFAULT_PORT,
            as_qualified: None,
            as_plan: Vec::new(),
            json_lines: false,
            key_chain: None,
            endpoints: None,
            now_s: 0,
        }
    }
}

/// What the trailer of an accepted advertisement says and, with a key chain, whether it
/// verifies: `None` when there is neither a trailer nor a key chain.
fn authentication(
    adv: &Advertisement<'_>,
    datagram: &[u8],
    endpoints: Option<&Endpoints>,
    opts: &DecodeOptions,
    at_s: i64,
) -> Option<(serde_json::Value, Option<Reject>)> {
    if adv.trailer.is_none() && opts.key_chain.is_none() {
        return None;
    }
    let mut doc = serde_json::Map::new();
    if let Some(t) = &adv.trailer {
        doc.insert(
            "algorithm".into(),
            Algorithm::from_wire(t.algorithm)
                .map_or_else(|| serde_json::Value::from(t.algorithm), |a| a.name().into()),
        );
        doc.insert("key-id".into(), t.key_id.into());
        // A 64-bit integer is a string in RFC 7951 JSON.
        doc.insert("sequence".into(), t.sequence.to_string().into());
    }
    let refused = opts.key_chain.as_ref().map(|chain| match endpoints {
        Some(e) => auth::verify(adv, datagram, e, chain, at_s).err(),
        None => Some(Reject::BadMac),
    });
    match refused {
        None => {}
        Some(None) => {
            doc.insert("verified".into(), true.into());
        }
        Some(Some(r)) => {
            doc.insert("verified".into(), false.into());
            doc.insert("refused".into(), r.name().into());
        }
    }
    Some((serde_json::Value::Object(doc), refused.flatten()))
}

/// The endpoints a frame's IP and UDP headers carry.
fn frame_endpoints(frame: &[u8]) -> Option<Endpoints> {
    let e = lq_common::frame::udp_endpoints(frame)?;
    Some(Endpoints {
        source: std::net::SocketAddr::new(e.source.into(), e.source_port),
        destination: std::net::SocketAddr::new(e.destination.into(), e.destination_port),
    })
}

impl DecodeOptions {
    /// The policy of check 8.
    pub fn policy(&self) -> DecodePolicy<'_> {
        match self.as_qualified {
            None => DecodePolicy::ANY,
            Some(q) => DecodePolicy {
                as_qualification: AsQualification::Required(q),
                as_plan: &self.as_plan,
            },
        }
    }
}

/// A hex payload that cannot be parsed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HexError {
    /// No hex digits at all.
    #[error("no hex digits")]
    Empty,
    /// A character that is not a hex digit.
    #[error("{ch:?} at position {position} is not a hex digit")]
    BadDigit {
        /// The character.
        ch: char,
        /// Its 1-based position among the digits (whitespace and 0x removed).
        position: usize,
    },
    /// An odd number of digits.
    #[error("odd number of hex digits ({0}): every octet takes two")]
    OddLength(usize),
}

/// Parses a payload given as hex: whitespace anywhere and a leading `0x` (of each part)
/// are ignored.
pub fn parse_hex<S: AsRef<str>>(parts: &[S]) -> Result<Vec<u8>, HexError> {
    let mut digits = String::new();
    for part in parts {
        let part: String = part
            .as_ref()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let part = part
            .strip_prefix("0x")
            .or_else(|| part.strip_prefix("0X"))
            .unwrap_or(&part);
        digits.push_str(part);
    }
    if let Some((i, ch)) = digits
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_hexdigit())
    {
        return Err(HexError::BadDigit {
            ch,
            position: i + 1,
        });
    }
    if digits.is_empty() {
        return Err(HexError::Empty);
    }
    if !digits.len().is_multiple_of(2) {
        return Err(HexError::OddLength(digits.len()));
    }
    hex::decode(&digits).map_err(|_| HexError::OddLength(digits.len()))
}

/// Parses an AS plan: comma-separated AS numbers and inclusive ranges `first-last`,
/// e.g. `65000-65100,4200000001`.
pub fn parse_as_plan(s: &str) -> Result<Vec<AsRange>, String> {
    let asn = |t: &str| -> Result<u32, String> {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("{:?} is not an AS number (0..=4294967295)", t.trim()))
    };
    let mut plan = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("empty item in AS plan {s:?}"));
        }
        let range = match item.split_once('-') {
            Some((a, b)) => {
                let (first, last) = (asn(a)?, asn(b)?);
                if first > last {
                    return Err(format!("AS range {item:?} is backwards (first > last)"));
                }
                AsRange { first, last }
            }
            None => AsRange::single(asn(item)?),
        };
        plan.push(range);
    }
    Ok(plan)
}

/// What checks 1-9 make of one frame.
#[derive(Clone, Copy, Debug)]
pub enum FrameOutcome<'a> {
    /// Checks 1-3 failed: not an LQ datagram.
    NotLq,
    /// Discarded (checks 4-9), with the reason.
    Discarded(Discard),
    /// Accepted.
    Accepted(lq_common::wire::Advertisement<'a>),
    /// Decoded, but its authentication trailer did not verify with `--key-chain`.
    Refused(Reject),
}

/// Applies checks 1-9 to an Ethernet frame.
pub fn decode_frame<'a>(frame: &'a [u8], opts: &DecodeOptions) -> FrameOutcome<'a> {
    match classify(frame, opts.port) {
        FrameClass::NotOurs => FrameOutcome::NotLq,
        FrameClass::BadTtl => FrameOutcome::Discarded(Discard::BadTtl),
        FrameClass::Truncated => FrameOutcome::Discarded(Discard::Decode(DecodeError::Truncated)),
        FrameClass::Payload(p) => match decode(p, &opts.policy()) {
            Ok(adv) => FrameOutcome::Accepted(adv),
            Err(e) => FrameOutcome::Discarded(Discard::Decode(e)),
        },
    }
}

/// Counts of a capture decode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frames in the file.
    pub frames: usize,
    /// LQ datagrams accepted.
    pub accepted: usize,
    /// LQ datagrams discarded.
    pub discarded: usize,
    /// Frames that are not LQ datagrams.
    pub not_lq: usize,
}

impl Summary {
    /// The exit status this summary calls for.
    pub fn exit_status(&self) -> u8 {
        if self.discarded > 0 {
            EXIT_DISCARDED
        } else {
            EXIT_ACCEPTED
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} frames: {} accepted, {} discarded, {} not LQ",
            self.frames, self.accepted, self.discarded, self.not_lq
        )
    }
}

fn print_accepted(
    adv: &lq_common::wire::Advertisement<'_>,
    label: &str,
    opts: &DecodeOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    let doc = advertisement_document(adv);
    if opts.json_lines {
        serde_json::to_writer(&mut *out, &doc)?;
    } else {
        serde_json::to_writer_pretty(&mut *out, &doc)?;
    }
    writeln!(out)?;
    as_plan_notes(adv, label, opts, err)
}

/// Check 11, on `err`: entries a receiver with this AS plan would not store.
fn as_plan_notes(
    adv: &lq_common::wire::Advertisement<'_>,
    label: &str,
    opts: &DecodeOptions,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    if opts.as_qualified == Some(true)
        && !opts.as_plan.is_empty()
        && adv.header.effectively_qualified()
    {
        for (i, e) in adv.entries().enumerate() {
            if !as_plan_contains(&opts.as_plan, e.remote_as) {
                writeln!(
                    err,
                    "{label}entry {} (remote-as {}): outside the AS plan, a receiver would not \
                     store it (as_mismatch_entry)",
                    i + 1,
                    e.remote_as
                )?;
            }
        }
    }
    Ok(())
}

/// Decodes one UDP payload (checks 5-9), prints the JSON document or `discarded: REASON`
/// on `out`, and returns the exit status.
pub fn run_payload(
    payload: &[u8],
    opts: &DecodeOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<u8> {
    match decode(payload, &opts.policy()) {
        Ok(adv) => {
            let auth = authentication(&adv, payload, opts.endpoints.as_ref(), opts, opts.now_s);
            if let Some((_, Some(r))) = &auth {
                writeln!(out, "discarded: {r}")?;
                return Ok(EXIT_DISCARDED);
            }
            print_accepted(&adv, "", opts, out, err)?;
            if let Some((doc, _)) = auth {
                writeln!(err, "authentication trailer: {doc}")?;
            }
            Ok(EXIT_ACCEPTED)
        }
        Err(e) => {
            writeln!(out, "discarded: {}", e.name())?;
            Ok(EXIT_DISCARDED)
        }
    }
}

/// Decodes every frame (checks 1-9): prints a JSON document per accepted frame and
/// `frame N: discarded: REASON` per discarded one on `out`, skips frames that are not LQ
/// datagrams, and prints the summary on `err`. With `json_lines`, every LQ frame is one
/// JSON object on `out` and nothing else is: `frame` (Wireshark's number), `time` (the
/// capture time, RFC 3339 UTC, when the file has one), `source` (the IP source address)
/// and either the advertisement's RFC 7951 document member
/// (`ietf-lq-telemetry:lq-advertisement`) or `discarded` with the reason.
pub fn run_frames(
    frames: &[Frame<'_>],
    opts: &DecodeOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<Summary> {
    let mut s = Summary {
        frames: frames.len(),
        ..Summary::default()
    };
    for f in frames {
        let mut outcome = decode_frame(f.data, opts);
        // With a key chain, an advertisement whose trailer does not verify is discarded
        // (lifetimes judged at the frame's capture time, when the file has one).
        let at_s = f.time_ns.map_or(opts.now_s, |t| (t / 1_000_000_000) as i64);
        let auth = match &outcome {
            FrameOutcome::Accepted(adv) => match classify(f.data, opts.port) {
                FrameClass::Payload(p) => {
                    authentication(adv, p, frame_endpoints(f.data).as_ref(), opts, at_s)
                }
                _ => None,
            },
            _ => None,
        };
        if let Some((_, Some(r))) = &auth {
            outcome = FrameOutcome::Refused(*r);
        }
        if matches!(outcome, FrameOutcome::NotLq) {
            s.not_lq += 1;
            tracing::debug!(frame = f.number, "not an LQ datagram");
            continue;
        }
        let label = format!("frame {}: ", f.number);
        if opts.json_lines {
            let mut record = serde_json::Map::new();
            record.insert("frame".into(), serde_json::Value::from(f.number));
            if let Some(t) = f.time_ns {
                record.insert(
                    "time".into(),
                    crate::views::yang_state::rfc3339_ns(t).into(),
                );
            }
            if let Some(src) = lq_common::frame::ip_source(f.data) {
                let ip = std::net::IpAddr::from(src);
                record.insert("source".into(), ip.to_string().into());
            }
            if let Some((doc, _)) = &auth {
                record.insert("authentication".into(), doc.clone());
            }
            match &outcome {
                FrameOutcome::Discarded(d) => {
                    s.discarded += 1;
                    record.insert("discarded".into(), d.name().into());
                }
                FrameOutcome::Refused(r) => {
                    s.discarded += 1;
                    record.insert("discarded".into(), r.name().into());
                }
                FrameOutcome::Accepted(adv) => {
                    s.accepted += 1;
                    if let serde_json::Value::Object(doc) = advertisement_document(adv) {
                        record.extend(doc);
                    }
                    as_plan_notes(adv, &label, opts, err)?;
                }
                FrameOutcome::NotLq => {}
            }
            serde_json::to_writer(&mut *out, &record)?;
            writeln!(out)?;
            continue;
        }
        match outcome {
            FrameOutcome::NotLq => {}
            FrameOutcome::Discarded(d) => {
                s.discarded += 1;
                writeln!(out, "frame {}: discarded: {}", f.number, d.name())?;
            }
            FrameOutcome::Refused(r) => {
                s.discarded += 1;
                writeln!(out, "frame {}: discarded: {r}", f.number)?;
            }
            FrameOutcome::Accepted(adv) => {
                s.accepted += 1;
                print_accepted(&adv, &label, opts, out, err)?;
                if let Some((doc, _)) = &auth {
                    writeln!(err, "{label}authentication trailer: {doc}")?;
                }
            }
        }
    }
    writeln!(err, "{s}")?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
    const VECTOR_2: &str =
        "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";

    #[test]
    fn hex_ignores_whitespace_and_0x() {
        assert_eq!(
            parse_hex(&["0x16 01\n12\t34"]).unwrap(),
            [0x16, 1, 0x12, 0x34]
        );
        assert_eq!(
            parse_hex(&["0X16", "0x01", "1234"]).unwrap(),
            [0x16, 1, 0x12, 0x34]
        );
        assert_eq!(parse_hex(&["  "]), Err(HexError::Empty));
        assert_eq!(parse_hex(&["abc"]), Err(HexError::OddLength(3)));
        assert_eq!(
            parse_hex(&["16 0g"]),
            Err(HexError::BadDigit {
                ch: 'g',
                position: 4
            })
        );
        assert!(matches!(
            parse_hex(&["16x0"]),
            Err(HexError::BadDigit { ch: 'x', .. })
        ));
    }

    #[test]
    fn as_plan_parses_ranges_and_refuses_nonsense() {
        assert_eq!(
            parse_as_plan("65000-65100, 4200000001").unwrap(),
            [
                AsRange {
                    first: 65000,
                    last: 65100
                },
                AsRange::single(4_200_000_001)
            ]
        );
        for bad in [
            "",
            "65000,",
            "a",
            "65100-65000",
            "1-2-3",
            "4294967296",
            "-5",
        ] {
            assert!(parse_as_plan(bad).is_err(), "{bad}");
        }
    }

    fn run(hex: &str, opts: &DecodeOptions) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_payload(&parse_hex(&[hex]).unwrap(), opts, &mut out, &mut err).unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn policy_follows_the_options() {
        let any = DecodeOptions::default();
        assert_eq!(run(VECTOR_1, &any).0, EXIT_ACCEPTED);
        assert_eq!(run(VECTOR_2, &any).0, EXIT_ACCEPTED);
        let unqualified = DecodeOptions {
            as_qualified: Some(false),
            ..DecodeOptions::default()
        };
        assert_eq!(run(VECTOR_1, &unqualified).0, EXIT_ACCEPTED);
        assert_eq!(
            run(VECTOR_2, &unqualified),
            (
                EXIT_DISCARDED,
                "discarded: as_mismatch\n".into(),
                String::new()
            )
        );
        let qualified = DecodeOptions {
            as_qualified: Some(true),
            as_plan: parse_as_plan("65000-65100").unwrap(),
            ..DecodeOptions::default()
        };
        assert_eq!(run(VECTOR_2, &qualified).1, "discarded: as_mismatch\n");
        let qualified = DecodeOptions {
            as_qualified: Some(true),
            as_plan: parse_as_plan("4200000001,65002").unwrap(),
            json_lines: true,
            ..DecodeOptions::default()
        };
        let (code, out, err) = run(VECTOR_2, &qualified);
        assert_eq!(code, EXIT_ACCEPTED);
        assert_eq!(out.lines().count(), 1);
        assert_eq!(
            err,
            "entry 1 (remote-as 65001): outside the AS plan, a receiver would not store it \
             (as_mismatch_entry)\n"
        );
    }
}
