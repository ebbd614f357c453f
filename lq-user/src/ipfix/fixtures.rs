//! Byte fixtures of the encoder and round trips through the decoder.

use super::{
    decode::{Decoder, Problem, interval},
    encode::{Encoder, FieldSpec, Template, pfc_template},
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
    ); // interfaceName
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
    both.fields.push(FieldSpec {
        ie: IeId::iana(ie::EGRESS_PHYSICAL_INTERFACE),
        len: 4,
    });
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
    r302.push(1);
    r302.extend(1000u64.to_be_bytes());
    r302.extend(5u64.to_be_bytes());
    r302.extend(4u32.to_be_bytes());
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
