//! The tc PFC counter on a real veth pair in namespaces: frames injected on one end
//! (AF_PACKET and scapy), exact per-priority counts read from the pinned maps on the other.

use lq_common::pfc::{PFC_MULTICAST, PfcClass, PfcReject, build_frame, classify};
use lq_tests::{
    netns::{NetNs, veth_pair},
    pfc::{TestPfc, send_frames},
};
use lq_user::pfc::TcMode;

const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];

struct Topo {
    a: NetNs,
    b: NetNs,
}

fn topo() -> Topo {
    lq_tests::require_root();
    let a = NetNs::new("lqpfc-a").unwrap();
    let b = NetNs::new("lqpfc-b").unwrap();
    veth_pair(&a, "pa", "10.77.0.1/30", &b, "pb", "10.77.0.2/30").unwrap();
    Topo { a, b }
}

fn mac_of(ns: &NetNs, iface: &str) -> [u8; 6] {
    let out = ns.ip(&["-j", "link", "show", iface]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = v[0]["address"].as_str().unwrap();
    let mut mac = [0u8; 6];
    for (m, part) in mac.iter_mut().zip(s.split(':')) {
        *m = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

/// The mixed fixture set: (description, frame, priorities it must count).
fn fixtures(own: [u8; 6]) -> Vec<(&'static str, Vec<u8>, u8)> {
    let q = |v: u16| [v; 8];
    let mut v: Vec<(&'static str, Vec<u8>, u8)> = Vec::new();
    v.push((
        "bits 0 and 3, pause",
        build_frame(PFC_MULTICAST, SRC, 0x0009, q(100)).to_vec(),
        0x09,
    ));
    v.push((
        "all bits, zero quanta (resume) counts",
        build_frame(PFC_MULTICAST, SRC, 0x00ff, q(0)).to_vec(),
        0xff,
    ));
    v.push((
        "bit 7 only; clear bits with non-zero timers do not count",
        build_frame(
            PFC_MULTICAST,
            SRC,
            0x0080,
            [500, 500, 500, 500, 500, 500, 500, 0],
        )
        .to_vec(),
        0x80,
    ));
    v.push((
        "no bit set",
        build_frame(PFC_MULTICAST, SRC, 0x0000, q(1000)).to_vec(),
        0,
    ));
    v.push((
        "reserved high byte ignored",
        build_frame(PFC_MULTICAST, SRC, 0xff02, q(1)).to_vec(),
        0x02,
    ));
    v.push((
        "own unicast address",
        build_frame(own, SRC, 0x0010, q(7)).to_vec(),
        0x10,
    ));
    v.push((
        "another unicast address",
        build_frame([0x02, 9, 9, 9, 9, 9], SRC, 0x00ff, q(7)).to_vec(),
        0,
    ));
    v.push((
        "another multicast address",
        build_frame([0x01, 0x80, 0xc2, 0, 0, 0x02], SRC, 0x00ff, q(7)).to_vec(),
        0,
    ));
    let mut pause = build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7));
    pause[14..16].copy_from_slice(&[0x00, 0x01]);
    v.push(("PAUSE opcode 0x0001", pause.to_vec(), 0));
    let mut opcode = build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7));
    opcode[14..16].copy_from_slice(&[0x01, 0x02]);
    v.push(("opcode 0x0102", opcode.to_vec(), 0));
    let mut et = build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7));
    et[12..14].copy_from_slice(&[0x88, 0x09]);
    v.push(("EtherType 0x8809", et.to_vec(), 0));
    v.push((
        "59 octets",
        build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7))[..59].to_vec(),
        0,
    ));
    v.push((
        "34 octets: the PFC fields only",
        build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7))[..34].to_vec(),
        0,
    ));
    let f = build_frame(PFC_MULTICAST, SRC, 0x00ff, q(7));
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&f[12..]);
    v.push(("VLAN-tagged (802.1Q)", tagged, 0));
    let mut prio_tagged = f[..12].to_vec();
    prio_tagged.extend_from_slice(&[0x81, 0x00, 0x60, 0x00]);
    prio_tagged.extend_from_slice(&f[12..]);
    v.push(("priority-tagged (VID 0)", prio_tagged, 0));
    let mut long = build_frame(PFC_MULTICAST, SRC, 0x0041, q(3)).to_vec();
    long.extend_from_slice(&[0u8; 40]);
    v.push(("100 octets (longer than minimum)", long, 0x41));
    v
}

#[test]
fn counts_exactly_per_priority_and_survives_a_restart() {
    let t = topo();
    let own = mac_of(&t.b, "pb");
    let mut pfc = TestPfc::load().unwrap();
    let att = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(att.mode, TcMode::Tcx);
    assert_eq!(att.info.mac, own);
    assert_eq!(att.info.speed_mbps, 10_000, "veth reports 10 Gb/s");
    let ifindex = att.info.ifindex;

    let reader = pfc.reader().unwrap();
    assert_eq!(
        reader.rx_priorities(ifindex).unwrap(),
        [Some(0); 8],
        "created at zero"
    );

    let fx = fixtures(own);
    let mut expected = [0u64; 8];
    for (what, frame, bits) in &fx {
        // The reference rules agree with the fixture table.
        let reference = match classify(frame, false, Some(own)) {
            PfcClass::Pfc(p) => p.enable,
            _ => 0,
        };
        assert_eq!(reference, *bits, "reference: {what}");
        for (n, e) in expected.iter_mut().enumerate() {
            *e += u64::from(bits >> n & 1);
        }
    }
    // Three rounds, so every count is a multiple of three of a single round.
    for _ in 0..3 {
        send_frames(&t.a, "pa", fx.iter().map(|f| f.1.clone()).collect()).unwrap();
    }
    let expected = expected.map(|e| Some(3 * e));
    assert_eq!(reader.rx_priorities(ifindex).unwrap(), expected);
    let rejects: std::collections::BTreeMap<_, _> = reader.rejects().unwrap().into_iter().collect();
    assert_eq!(rejects[&PfcReject::VlanTagged], 6);
    assert_eq!(rejects[&PfcReject::BadOpcode], 6);
    // Another unicast address and 01-80-C2-00-00-02, each round.
    assert_eq!(rejects[&PfcReject::BadDestination], 6);
    assert_eq!(rejects[&PfcReject::Short], 6);

    // A restart keeps the counters (pinned maps) and counting continues.
    pfc.restart().unwrap();
    pfc.attach(&t.b, "pb", None).unwrap();
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x0001, [0; 8]).to_vec()],
    )
    .unwrap();
    let after = pfc.reader().unwrap().rx_priorities(ifindex).unwrap();
    assert_eq!(after[0], Some(expected[0].unwrap() + 1));
    assert_eq!(after[1..], expected[1..]);
    assert_eq!(
        pfc.reader().unwrap().instance(),
        reader.instance(),
        "same map instance"
    );
}
