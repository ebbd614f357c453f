//! Byte fixtures of the encoder and round trips through the decoder.

use super::{
    decode::{Decoder, Problem, TemplateRefusal, interval},
    encode::{Encoder, FieldSpec, Template, pfc_record, pfc_template},
    *,
};

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

fn rec(direction: Direction, interface: u32, priority: u8, total: u64) -> PfcRecord {
    PfcRecord {
        direction,
        interface,
        priority,
        observed_ms: 0x0000_018f_0000_0001,
        total,
        epoch: 7,
    }
}

#[test]
fn template_messages_byte_for_byte() {
    let mut enc = Encoder::new(ExporterConfig {
        observation_domain_id: 0x01020304,
        observation_point_id: 9,
        ..ExporterConfig::default()
    })
    .unwrap();
    let msgs = enc.template_messages(0x6000_0000);
    assert_eq!(msgs.len(), 2);
    let t = &msgs[0];
    let expected = concat!(
        // header: version 10, length, export time, sequence 0, domain
        "000a", "0086", "60000000", "00000000", "01020304",
        // Options Template Set, template 256: 5 fields, 3 scope
        "0003", "0026", "0100", "0005", "0003", "008a0008", "00fc0004", "80010001", "00007ed9",
        "01430008", "80020008", "00007ed9", // template 257: egressPhysicalInterface
        "0003", "0026", "0101", "0005", "0003", "008a0008", "00fd0004", "80010001", "00007ed9",
        "01430008", "80020008", "00007ed9",
        // template 258: RFC 5610 type records, 8 fields, 2 scope
        "0003", "002a", "0102", "0008", "0002", "012f0002", "015a0004", "01530001", "01580001",
        "01590002", "01560008", "01570008", "0155ffff",
    );
    assert_eq!(hex(t), expected);
    // Type records: pfcPriority (unsigned8, identifier, none, 0..7) and the total
    // (unsigned64, totalCounter, frames); both count as Data Records.
    let ty = &msgs[1];
    // 16 + 4 + 38 + 52 octets: sequence 0 (nothing sent before).
    assert_eq!(hex(&ty[..16]), "000a006e600000000000000001020304");
    assert_eq!(
        hex(&ty[16..]),
        concat!(
            "0102",
            "005e",
            "0001",
            "00007ed9",
            "01",
            "04",
            "0000",
            "0000000000000000",
            "0000000000000007",
            "0b",
            "706663507269 6f72697479",
            "0002",
            "00007ed9",
            "04",
            "02",
            "000d",
            "0000000000000000",
            "ffffffffffffffff",
            "19",
            "706663436f6e74726f6c4672616d65546f74616c436f756e74",
        )
        .replace(' ', "")
    );
    assert_eq!(enc.sequence(), 2);
}

#[test]
fn data_messages_byte_for_byte_and_sequence_numbers() {
    let mut enc = Encoder::new(ExporterConfig {
        observation_domain_id: 1,
        observation_point_id: 9,
        type_records: false,
        ..ExporterConfig::default()
    })
    .unwrap();
    assert_eq!(enc.template_messages(1).len(), 1);
    assert_eq!(enc.sequence(), 0, "templates are not Data Records");
    let msgs = enc.data_messages(
        &[
            rec(Direction::Received, 3, 0, 5),
            rec(Direction::Received, 3, 7, 0),
            rec(Direction::Transmitted, 3, 3, u64::MAX),
        ],
        0x6000_0001,
    );
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        hex(&msgs[0]),
        concat!(
            "000a",
            "006f",
            "60000001",
            "00000000",
            "00000001",
            "0100",
            "003e",
            "0000000000000009",
            "00000003",
            "00",
            "0000018f00000001",
            "0000000000000005",
            "0000000000000009",
            "00000003",
            "07",
            "0000018f00000001",
            "0000000000000000",
            "0101",
            "0021",
            "0000000000000009",
            "00000003",
            "03",
            "0000018f00000001",
            "ffffffffffffffff",
        )
    );
    let next = enc.data_messages(&[rec(Direction::Received, 4, 1, 1)], 0x6000_0002);
    assert_eq!(
        &next[0][8..12],
        &3u32.to_be_bytes(),
        "three Data Records sent before"
    );
}

#[test]
fn messages_split_at_the_size_limit() {
    let mut enc = Encoder::new(ExporterConfig {
        max_message_len: 16 + 4 + 29 * 10,
        type_records: false,
        ..ExporterConfig::default()
    })
    .unwrap();
    let records: Vec<_> = (0..25u64)
        .map(|i| rec(Direction::Received, 1, (i % 8) as u8, i))
        .collect();
    let msgs = enc.data_messages(&records, 1);
    assert_eq!(msgs.len(), 3);
    assert!(msgs.iter().all(|m| m.len() <= 16 + 4 + 290));
    let seqs: Vec<u32> = msgs
        .iter()
        .map(|m| u32::from_be_bytes(m[8..12].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, [0, 10, 20]);
    let mut dec = Decoder::new(ElementIds::default());
    dec.decode(&enc.template_messages(1)[0]).unwrap();
    let n: usize = msgs.iter().map(|m| dec.decode(m).unwrap().pfc.len()).sum();
    assert_eq!(n, 25);
}

#[test]
fn round_trip_with_epoch_and_interval_rules() {
    let config = ExporterConfig {
        elements: ElementIds::enterprise(32473, 1, 2, Some(3)),
        ..ExporterConfig::default()
    };
    let mut enc = Encoder::new(config.clone()).unwrap();
    let mut dec = Decoder::new(config.elements);
    let t = enc.template_messages(1);
    let d = dec.decode(&t[0]).unwrap();
    assert_eq!(d.templates, 3);
    let types = dec.decode(&t[1]).unwrap().types;
    assert_eq!(types.len(), 3);
    assert_eq!(types[1].name.as_deref(), Some("pfcControlFrameTotalCount"));
    assert_eq!(types[1].units, Some(13));
    let a = dec
        .decode(&enc.data_messages(&[rec(Direction::Received, 3, 2, 10)], 1)[0])
        .unwrap()
        .pfc;
    let mut later = rec(Direction::Received, 3, 2, 4);
    later.observed_ms += 1000;
    let b = dec.decode(&enc.data_messages(&[later], 2)[0]).unwrap().pfc;
    assert!(a[0].is_valid() && b[0].is_valid());
    assert_eq!(a[0].epoch, Some(7));
    // Same epoch: the interval is known, modulo 2^64 (a 64-bit wrap).
    assert_eq!(interval(&a[0], &b[0]), Some(4u64.wrapping_sub(10)));
    // Another epoch: unknown.
    later.epoch = 8;
    let c = dec.decode(&enc.data_messages(&[later], 3)[0]).unwrap().pfc;
    assert_eq!(interval(&a[0], &c[0]), None);
    // Another priority: never combined.
    let d = dec
        .decode(&enc.data_messages(&[rec(Direction::Received, 3, 5, 11)], 4)[0])
        .unwrap()
        .pfc;
    assert_eq!(interval(&a[0], &d[0]), None);
    // Without the epoch element no interval is ever known.
    let mut enc = Encoder::new(ExporterConfig::default()).unwrap();
    let mut dec = Decoder::new(ElementIds::default());
    dec.decode(&enc.template_messages(1)[0]).unwrap();
    let a = dec
        .decode(&enc.data_messages(&[rec(Direction::Received, 3, 2, 10)], 1)[0])
        .unwrap()
        .pfc;
    let b = dec
        .decode(&enc.data_messages(&[rec(Direction::Received, 3, 2, 12)], 1)[0])
        .unwrap()
        .pfc;
    assert_eq!(interval(&a[0], &b[0]), None);
}

fn message(sets: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let body: Vec<u8> = sets
        .iter()
        .flat_map(|(id, b)| {
            let mut s = id.to_be_bytes().to_vec();
            s.extend(((4 + b.len()) as u16).to_be_bytes());
            s.extend(b);
            s
        })
        .collect();
    let mut m = vec![0, 10];
    m.extend(((16 + body.len()) as u16).to_be_bytes());
    m.extend([0; 8]);
    m.extend(1u32.to_be_bytes());
    m.extend(body);
    m
}

#[test]
fn collector_rules() {
    let config = ExporterConfig::default();
    let e = config.elements;
    // A template with extra elements (a variable-length one and an unknown enterprise
    // one), fields reordered, plus a plain template of something else.
    let mut t = pfc_template(Direction::Received, &config);
    t.id = 300;
    t.fields.swap(3, 4);
    t.fields.insert(
        2,
        FieldSpec {
            ie: IeId::iana(82),
            len: 0xffff,
        },
    ); // interfaceName, one more scope field
    t.scope_count += 1;
    t.fields.push(FieldSpec {
        ie: IeId { id: 99, pen: 9 },
        len: 2,
    });
    let other = Template {
        id: 301,
        scope_count: 0,
        fields: vec![FieldSpec {
            ie: IeId::iana(1),
            len: 8,
        }],
    };
    let mut both = pfc_template(Direction::Received, &config);
    both.id = 302;
    // A scope field, like the other interface: the record's only problem is having both.
    both.fields.insert(
        2,
        FieldSpec {
            ie: IeId::iana(ie::EGRESS_PHYSICAL_INTERFACE),
            len: 4,
        },
    );
    both.scope_count += 1;
    let mut missing = pfc_template(Direction::Received, &config);
    missing.id = 303;
    missing
        .fields
        .retain(|f| f.ie != IeId::iana(ie::OBSERVATION_TIME_MILLISECONDS));
    let msg = message(&[
        (3, t.record()),
        (2, other.record()),
        (3, both.record()),
        (3, missing.record()),
    ]);
    let mut dec = Decoder::new(e);
    assert_eq!(dec.decode(&msg).unwrap().templates, 4);
    let mut r300 = 9u64.to_be_bytes().to_vec();
    r300.extend(3u32.to_be_bytes());
    r300.extend([3, b'e', b't', b'h']);
    r300.push(4);
    r300.extend(42u64.to_be_bytes()); // total before time now
    r300.extend(1000u64.to_be_bytes());
    r300.extend([0xab, 0xcd]);
    let mut r302 = 9u64.to_be_bytes().to_vec();
    r302.extend(3u32.to_be_bytes());
    r302.extend(4u32.to_be_bytes());
    r302.push(1);
    r302.extend(1000u64.to_be_bytes());
    r302.extend(5u64.to_be_bytes());
    let mut r303 = 9u64.to_be_bytes().to_vec();
    r303.extend(3u32.to_be_bytes());
    r303.push(1);
    r303.extend(5u64.to_be_bytes());
    let msg = message(&[
        (300, r300),
        (301, 77u64.to_be_bytes().to_vec()),
        (302, r302),
        (303, r303),
        (999, vec![1, 2, 3, 4]),
    ]);
    let d = dec.decode(&msg).unwrap();
    assert_eq!(d.other_records, 1);
    assert_eq!(d.unknown_sets, 1);
    assert_eq!(d.pfc.len(), 3);
    let good = &d.pfc[0];
    assert!(good.is_valid(), "{:?}", good.problems);
    assert_eq!(
        (good.interface, good.priority, good.total, good.observed_ms),
        (Some(3), Some(4), Some(42), Some(1000))
    );
    assert_eq!(good.direction, Some(Direction::Received));
    assert_eq!(d.pfc[1].problems, [Problem::BothInterfaces]);
    assert_eq!(
        d.pfc[2].problems,
        [Problem::Missing("observationTimeMilliseconds")]
    );
}

/// Issue 14: the 42-octet datagram that spun the old decoder forever: an Options Template
/// whose only field has length 0, then a Data Set for it. The template is refused with a
/// reason and the set is an unknown set.
pub(crate) const ZERO_LENGTH_FIELD_DATAGRAM: &str = concat!(
    "000a002a",
    "00000000",
    "00000000",
    "00000001", // header, 42 octets, domain 1
    "0003000e",
    "0100",
    "0001",
    "0001",
    "008a0000", // template 256: observationPointId, length 0
    "0100000c",
    "0102030405060708", // a Data Set for it
);

#[test]
fn a_zero_length_fixed_field_refuses_the_template() {
    let msg = hex::decode(ZERO_LENGTH_FIELD_DATAGRAM).unwrap();
    assert_eq!(msg.len(), 42);
    let mut dec = Decoder::new(ElementIds::default());
    let d = dec.decode(&msg).unwrap();
    assert_eq!(d.templates, 0);
    assert_eq!(d.unknown_sets, 1);
    assert_eq!(d.pfc, []);
    assert_eq!(d.refused.len(), 1);
    assert_eq!(d.refused[0].template_id, 256);
    assert_eq!(
        d.refused[0].reason,
        TemplateRefusal::ZeroLengthField {
            index: 0,
            ie: IeId::iana(ie::OBSERVATION_POINT_ID)
        }
    );
    assert!(d.refused[0].reason.to_string().contains("length 0"));
    // A valid template 256 learnt before is withdrawn by the refused one: its data is not
    // read with the old definition.
    let config = ExporterConfig::default();
    let mut enc = Encoder::new(config.clone()).unwrap();
    let mut dec = Decoder::new(config.elements);
    dec.decode(&enc.template_messages(1)[0]).unwrap();
    dec.decode(&msg).unwrap();
    let d = dec
        .decode(&enc.data_messages(&[rec(Direction::Received, 3, 2, 10)], 1)[0])
        .unwrap();
    assert_eq!((d.pfc.len(), d.unknown_sets), (0, 1));
}

#[test]
fn options_templates_without_scope_or_with_too_much_are_refused() {
    // 2 fields, scope count 0; then 1 field, scope count 2.
    let body = hex::decode(concat!("0100", "0002", "0000", "008a0008", "01430008")).unwrap();
    let mut dec = Decoder::new(ElementIds::default());
    let d = dec.decode(&message(&[(3, body)])).unwrap();
    assert_eq!(d.refused[0].reason, TemplateRefusal::NoScope);
    let body = hex::decode(concat!("0101", "0001", "0002", "008a0008")).unwrap();
    let d = dec.decode(&message(&[(3, body)])).unwrap();
    assert_eq!(
        d.refused[0].reason,
        TemplateRefusal::ScopeBeyondFields {
            scope: 2,
            fields: 1
        }
    );
}

/// RFC 7011 section 8.4: over UDP a template not sent again within its lifetime (Export
/// Time) expires; its records are unknown sets until it comes again. Without a lifetime
/// (TCP, TLS) it never expires.
#[test]
fn udp_templates_expire_without_a_refresh() {
    let config = ExporterConfig::default();
    let mut enc = Encoder::new(config.clone()).unwrap();
    let records = [rec(Direction::Received, 3, 2, 10)];
    let mut dec = Decoder::new(config.elements).with_template_lifetime(Some(180));
    dec.decode(&enc.template_messages(1_000)[0]).unwrap();
    let d = dec.decode(&enc.data_messages(&records, 1_180)[0]).unwrap();
    assert_eq!((d.pfc.len(), d.expired), (1, 0), "within the lifetime");
    let d = dec.decode(&enc.data_messages(&records, 1_181)[0]).unwrap();
    assert_eq!((d.pfc.len(), d.unknown_sets), (0, 1));
    assert!(
        d.expired >= 2,
        "256 and 257 (and the type records' 258) expired: {}",
        d.expired
    );
    dec.decode(&enc.template_messages(1_200)[0]).unwrap();
    let d = dec.decode(&enc.data_messages(&records, 1_300)[0]).unwrap();
    assert_eq!(d.pfc.len(), 1, "refreshed");
    let mut tcp = Decoder::new(config.elements);
    tcp.decode(&enc.template_messages(1_000)[0]).unwrap();
    let d = tcp
        .decode(&enc.data_messages(&records, 100_000)[0])
        .unwrap();
    assert_eq!(d.pfc.len(), 1);
}

/// RFC 7011 section 3.1: the sequence number counts the Data Records sent. Messages built
/// but not sent (a failed send) give their records back: the next message carries the
/// number the first unsent one carried.
#[test]
fn records_of_unsent_messages_do_not_count_in_the_sequence() {
    let seq = |m: &[u8]| u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
    let mut enc = Encoder::new(ExporterConfig::default()).unwrap();
    let records: Vec<_> = (0..3).map(|p| rec(Direction::Received, 3, p, 10)).collect();
    let first = enc.data_messages(&records, 1);
    assert_eq!(seq(&first[0]), 0);
    let unsent = enc.data_messages(&records, 2);
    assert_eq!((seq(&unsent[0]), enc.sequence()), (3, 6));
    enc.unsent_from(&unsent[0]);
    let again = enc.data_messages(&records, 3);
    assert_eq!((seq(&again[0]), enc.sequence()), (3, 6));
}

/// RFC 7011 section 8.1: a withdrawal is 4 octets (ID, field count 0) in an Options
/// Template Set too; two in one set withdraw both, and the set's own ID (3) withdraws
/// every Options Template of the domain. Data of a withdrawn template is an unknown set.
#[test]
fn options_template_withdrawals_are_four_octets_and_can_withdraw_all() {
    let config = ExporterConfig::default();
    let mut enc = Encoder::new(config.clone()).unwrap();
    let records = [
        rec(Direction::Received, 3, 2, 10),
        rec(Direction::Transmitted, 3, 2, 10),
    ];
    // (the withdrawal set's body, then (PFC records decoded, unknown sets) of one record
    // per template)
    let cases = [
        // Both of 256 and 257 in one set.
        (concat!("0100", "0000", "0101", "0000"), (0, 2)),
        // One of them: the other still decodes.
        ("01010000", (1, 1)),
        // All Options Templates of the domain (ID 3).
        ("00030000", (0, 2)),
    ];
    for (withdrawal, want) in cases {
        let mut dec = Decoder::new(config.elements);
        dec.decode(&enc.template_messages(1)[0]).unwrap();
        dec.decode(&message(&[(3, hex::decode(withdrawal).unwrap())]))
            .unwrap();
        let got = enc
            .data_messages(&records, 1)
            .iter()
            .map(|m| dec.decode(m).unwrap())
            .fold((0, 0), |a, d| (a.0 + d.pfc.len(), a.1 + d.unknown_sets));
        assert_eq!(got, want, "withdrawal {withdrawal}");
    }
}

/// One PFC template with the field of `ie` given length `len`, and one record for it
/// (that field's value `len` octets of 0x01).
fn with_field_length(ie: IeId, len: u16) -> (Vec<u8>, Vec<u8>) {
    let config = ExporterConfig::default();
    let mut t = pfc_template(Direction::Received, &config);
    t.id = 400;
    let mut data = Vec::new();
    for f in &mut t.fields {
        if f.ie == ie {
            f.len = len;
            if len == 0xffff {
                data.push(4);
                data.extend([0, 0, 0, 1]);
                continue;
            }
        }
        // Every octet 0x01: pfcPriority 1, the other values small but non-zero.
        data.extend(std::iter::repeat_n(1u8, usize::from(f.len)));
    }
    (message(&[(3, t.record())]), message(&[(400, data)]))
}

#[test]
fn a_field_longer_than_its_type_is_flagged_not_folded() {
    let e = ElementIds::default();
    let cases = [
        (
            e.pfc_total,
            9,
            Problem::FieldLength("pfcControlFrameTotalCount", 9),
        ),
        (
            IeId::iana(ie::INGRESS_PHYSICAL_INTERFACE),
            5,
            Problem::FieldLength("ingressPhysicalInterface", 5),
        ),
        (
            IeId::iana(ie::OBSERVATION_POINT_ID),
            16,
            Problem::FieldLength("observationPointId", 16),
        ),
        (e.pfc_priority, 2, Problem::FieldLength("pfcPriority", 2)),
        // dateTimeMilliseconds has no reduced-size encoding.
        (
            IeId::iana(ie::OBSERVATION_TIME_MILLISECONDS),
            4,
            Problem::FieldLength("observationTimeMilliseconds", 4),
        ),
        // A fixed-size type sent as variable-length.
        (
            e.pfc_total,
            0xffff,
            Problem::FieldLength("pfcControlFrameTotalCount", 0xffff),
        ),
    ];
    for (ie, len, problem) in cases {
        let (t, d) = with_field_length(ie, len);
        let mut dec = Decoder::new(e);
        assert_eq!(dec.decode(&t).unwrap().templates, 1);
        let r = dec.decode(&d).unwrap().pfc;
        assert_eq!(r.len(), 1, "{problem:?}");
        assert!(r[0].problems.contains(&problem), "{:?}", r[0].problems);
        assert_eq!(r[0].scope(), None);
    }
    // Reduced-size encodings of unsigned integers are legal (RFC 7011 section 6.2).
    for (ie, len) in [(e.pfc_total, 4), (IeId::iana(ie::OBSERVATION_POINT_ID), 4)] {
        let (t, d) = with_field_length(ie, len);
        let mut dec = Decoder::new(e);
        dec.decode(&t).unwrap();
        let r = dec.decode(&d).unwrap().pfc;
        assert!(r[0].is_valid(), "{:?}", r[0].problems);
    }
}

#[test]
fn pfc_fields_out_of_their_scope_role_are_flagged() {
    let config = ExporterConfig::default();
    let data = pfc_record(&rec(Direction::Received, 3, 2, 10), &config);
    // Scope count 2: pfcPriority is a non-scope field; 4: observationTimeMilliseconds is a
    // scope field; a plain Template (set 2): no scope fields at all.
    for (set, scope, want) in [
        (3u16, 2u16, vec![Problem::Role("pfcPriority")]),
        (3, 4, vec![Problem::Role("observationTimeMilliseconds")]),
        (
            2,
            0,
            vec![
                Problem::Role("observationPointId"),
                Problem::Role("ingressPhysicalInterface"),
                Problem::Role("pfcPriority"),
            ],
        ),
    ] {
        let mut t = pfc_template(Direction::Received, &config);
        t.scope_count = scope;
        let mut dec = Decoder::new(config.elements);
        assert_eq!(
            dec.decode(&message(&[(set, t.record())]))
                .unwrap()
                .templates,
            1
        );
        let r = dec.decode(&message(&[(256, data.clone())])).unwrap().pfc;
        assert_eq!(r[0].problems, want);
        assert_eq!(r[0].scope(), None);
    }
}
