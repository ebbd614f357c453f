//! Fixture tests of the XDP receiver through BPF_PROG_TEST_RUN (katran style: a
//! description, an input frame, the expected verdict and counter), one per receive check of
//! `spec/lq-udp-wire.md`, then the table contents.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use lq_common::{
    maps::{Counter, NeighborKey, PATH_FLAG_DIAGNOSTICS, PATH_FLAG_PFC_FABRIC, PathKey},
    wire::{AsRange, Diagnostics, Mode},
};
use lq_tests::{
    packet::{FrameSpec, Ip, entry, header, ip4, payload},
    xdp::{TestReceiver, XDP_DROP, XDP_PASS, ring_events, settings},
};

struct Fixture {
    description: &'static str,
    frame: Vec<u8>,
    verdict: u32,
    counter: Counter,
}

fn valid_payload(seq: u16) -> Vec<u8> {
    payload(
        &header(ip4(10, 0, 0, 2), seq),
        &[entry(ip4(10, 0, 1, 4), 7, 200, 1)],
    )
}

fn with<F: FnOnce(&mut FrameSpec)>(seq: u16, f: F) -> Vec<u8> {
    let mut s = FrameSpec::lq(valid_payload(seq));
    f(&mut s);
    s.build()
}

fn fixtures() -> Vec<Fixture> {
    let mut v = Vec::new();
    let mut push = |description, frame, verdict, counter| {
        v.push(Fixture {
            description,
            frame,
            verdict,
            counter,
        })
    };
    // Check 1.
    push(
        "ARP frame",
        {
            let mut f = FrameSpec::lq(vec![0; 28]).build();
            f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            f
        },
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "two VLAN tags (QinQ) are not ours",
        with(1, |s| s.vlans = vec![(0x88a8, 10), (0x8100, 20)]),
        XDP_PASS,
        Counter::NotOurs,
    );
    // BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header.
    push(
        "Ethernet header alone, IPv4 EtherType",
        {
            let mut f = vec![0u8; 14];
            f[12] = 0x08;
            f
        },
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "IPv4 header cut short",
        FrameSpec::lq(vec![]).build()[..30].to_vec(),
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "UDP header cut short",
        FrameSpec::lq(vec![]).build()[..38].to_vec(),
        XDP_PASS,
        Counter::NotOurs,
    );
    // Check 2.
    push(
        "IPv4 fragment (MF)",
        with(1, |s| {
            s.ip = Ip::V4 {
                ttl: 255,
                frag: 0x2000,
                options: 0,
            }
        }),
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "IPv4 non-first fragment",
        with(1, |s| {
            s.ip = Ip::V4 {
                ttl: 255,
                frag: 0x0010,
                options: 0,
            }
        }),
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "IPv4 TCP",
        with(1, |s| s.protocol = 6),
        XDP_PASS,
        Counter::NotOurs,
    );
    push(
        "IPv6 with a non-UDP next header",
        with(1, |s| {
            s.ip = Ip::V6_GTSM;
            s.protocol = 0
        }),
        XDP_PASS,
        Counter::NotOurs,
    );
    // Check 3.
    push(
        "UDP to another port",
        with(1, |s| s.dst_port = 53),
        XDP_PASS,
        Counter::NotOurs,
    );
    // Check 4.
    push(
        "IPv4 TTL 254 (forged from afar, GTSM)",
        with(1, |s| {
            s.ip = Ip::V4 {
                ttl: 254,
                frag: 0,
                options: 0,
            }
        }),
        XDP_DROP,
        Counter::BadTtl,
    );
    push(
        "IPv6 Hop Limit 64",
        with(1, |s| s.ip = Ip::V6 { hop_limit: 64 }),
        XDP_DROP,
        Counter::BadTtl,
    );
    // Check 5.
    push(
        "UDP length 7",
        with(1, |s| s.udp_len = Some(7)),
        XDP_DROP,
        Counter::Truncated,
    );
    push(
        "UDP length beyond the frame",
        with(1, |s| s.udp_len = Some(2000)),
        XDP_DROP,
        Counter::Truncated,
    );
    push(
        "payload of 15 octets",
        FrameSpec::lq(valid_payload(1)[..15].to_vec()).build(),
        XDP_DROP,
        Counter::Truncated,
    );
    push(
        "version 2",
        {
            let mut p = valid_payload(1);
            p[0] = 0x20;
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadVersion,
    );
    // Check 6.
    push(
        "mode solicited (2)",
        {
            let mut p = valid_payload(1);
            p[1] = 2;
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadMode,
    );
    // Check 7.
    push(
        "entry length 20 without Q",
        {
            let mut p = valid_payload(1);
            p[14] = 20;
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadLength,
    );
    push(
        "count 2 with one entry",
        {
            let mut p = valid_payload(1);
            p[13] = 2;
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadLength,
    );
    push(
        "trailing octet",
        {
            let mut p = valid_payload(1);
            p.push(0);
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadLength,
    );
    // Check 8 (local as-qualified = false).
    push(
        "AS-qualified datagram to an unqualified receiver",
        {
            let mut h = header(ip4(10, 0, 0, 2), 1);
            h.as_qualified = true;
            h.node_as = 65001;
            FrameSpec::lq(payload(&h, &[])).build()
        },
        XDP_DROP,
        Counter::AsMismatch,
    );
    // Check 9.
    push(
        "NaN available bandwidth",
        {
            let mut e = entry(ip4(10, 0, 1, 4), 7, 200, 1);
            e.available_bandwidth = 1.0;
            let mut p = payload(&header(ip4(10, 0, 0, 2), 1), &[e]);
            p[16 + 8..16 + 12].copy_from_slice(&f32::NAN.to_bits().to_be_bytes());
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadValue,
    );
    push(
        "negative available bandwidth",
        {
            let mut p = valid_payload(1);
            p[16 + 8..16 + 12].copy_from_slice(&(-1.0f32).to_bits().to_be_bytes());
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadValue,
    );
    push(
        "bandwidth above the decimal64 maximum",
        {
            let mut p = valid_payload(1);
            p[16 + 8..16 + 12].copy_from_slice(&1e16f32.to_bits().to_be_bytes());
            FrameSpec::lq(p).build()
        },
        XDP_DROP,
        Counter::BadValue,
    );
    // Check 9 looks at CHECKS_PER_CALL (4) entries per call: a bad value in any position of
    // a later call refuses the whole datagram too.
    for (entries, bad) in [(6, 5), (9, 8), (91, 90)] {
        push(
            match bad {
                5 => "negative bandwidth in entry 6 of 6",
                8 => "negative bandwidth in entry 9 of 9",
                _ => "negative bandwidth in entry 91 of 91",
            },
            {
                let es: Vec<_> = (1..=entries as u32)
                    .map(|link| entry(ip4(10, 0, 1, 4), link, 200, 1))
                    .collect();
                let mut p = payload(&header(ip4(10, 0, 0, 2), 1), &es);
                let at = 16 + bad * 16 + 8;
                p[at..at + 4].copy_from_slice(&(-1.0f32).to_bits().to_be_bytes());
                FrameSpec::lq(p).build()
            },
            XDP_DROP,
            Counter::BadValue,
        );
    }
    // Accepted, in several framings.
    push(
        "IPv4 datagram, sequence 1",
        with(1, |_| ()),
        XDP_DROP,
        Counter::Accepted,
    );
    push(
        "IPv4 with options, 802.1Q tag, sequence 2",
        with(2, |s| {
            s.vlans = vec![(0x8100, 5)];
            s.ip = Ip::V4 {
                ttl: 255,
                frag: 0x4000,
                options: 2,
            }
        }),
        XDP_DROP,
        Counter::Accepted,
    );
    push(
        "IPv6, 802.1ad tag, sequence 3",
        with(3, |s| {
            s.vlans = vec![(0x88a8, 5)];
            s.ip = Ip::V6_GTSM
        }),
        XDP_DROP,
        Counter::Accepted,
    );
    // Check 10.
    push(
        "replayed sequence 3",
        with(3, |_| ()),
        XDP_DROP,
        Counter::StaleSeq,
    );
    push(
        "old sequence 2",
        with(2, |_| ()),
        XDP_DROP,
        Counter::StaleSeq,
    );
    push(
        "sequence 3 + 2^15 (serially undefined)",
        with(3 + 0x8000, |_| ()),
        XDP_DROP,
        Counter::StaleSeq,
    );
    push(
        "next sequence 4",
        with(4, |_| ()),
        XDP_DROP,
        Counter::Accepted,
    );
    v
}

#[test]
fn every_receive_check_has_its_verdict_and_counter() {
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let mut claimed = 0;
    for f in fixtures() {
        let before = rx.counters().unwrap();
        let verdict = rx.run(&f.frame).unwrap();
        let after = rx.counters().unwrap();
        assert_eq!(verdict, f.verdict, "{}: verdict", f.description);
        for (i, (a, b)) in after.iter().zip(before.iter()).enumerate() {
            let want = u64::from(i == f.counter as usize);
            let got = a - b;
            // Accepted datagrams also count the entries they stored.
            if f.counter == Counter::Accepted && i == Counter::EntriesStored as usize {
                assert_eq!(got, 1, "{}: entries_stored", f.description);
                continue;
            }
            // ... and claim a slot when their entry is new (checked over the run below).
            if f.counter == Counter::Accepted && i == Counter::SlotsClaimed as usize {
                claimed += got;
                continue;
            }
            assert_eq!(
                got,
                want,
                "{}: counter {:?}",
                f.description,
                lq_common::maps::Counter::ALL[i]
            );
        }
    }
    let paths = rx.reader.paths().unwrap();
    assert_eq!(paths.len(), 1);
    assert_eq!(claimed, 1, "one slot claimed, by the first accepted entry");
    assert_eq!(rx.reader.counter(Counter::SlotsClaimed).unwrap(), 1);
    let key = PathKey {
        spine_as: 0,
        spine_id: ip4(10, 0, 0, 2),
        remote_as: 0,
        remote_id: ip4(10, 0, 1, 4),
        link_id: 7,
    };
    let v = paths[&key];
    assert_eq!((v.lqs, v.cl, v.sequence), (200, 1, 4));
    assert_eq!(f32::from_bits(v.available_bandwidth_bits), 100.0);
    let n = rx.reader.neighbors().unwrap()[&NeighborKey {
        node_as: 0,
        node_id: ip4(10, 0, 0, 2),
    }];
    assert_eq!((n.last_sequence, n.accepted, n.last_entry_count), (4, 4, 1));
}

#[test]
fn table_holds_diagnostics_pfc_flag_and_91_entries() {
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let mut h = header(ip4(10, 0, 0, 9), 100);
    h.diagnostics = true;
    h.pfc_fabric = true;
    h.mode = Mode::Triggered;
    let entries: Vec<_> = (0..91u32)
        .map(|i| {
            let mut e = entry(ip4(10, 0, 2, i as u8), i, (i * 2) as u8, (i % 8) as u8);
            if i % 2 == 0 {
                e.diagnostics = Some(Diagnostics {
                    link_capacity: 400.0,
                    queue_depth: i as u8,
                    ecn_marking_rate: (i % 32) as u8,
                    pfc_pause_fraction: 3,
                    drops_active: i % 4 == 0,
                });
            }
            e
        })
        .collect();
    // 91 entries of 24 octets do not fit a 1500-octet frame, but a receiver must take what
    // arrives: the frame here is 2250 octets (TestRun allows it).
    let frame = FrameSpec::lq(payload(&h, &entries)).build();
    assert_eq!(rx.run(&frame).unwrap(), XDP_DROP);
    let c = rx.counters().unwrap();
    assert_eq!(c[Counter::Accepted as usize], 1);
    assert_eq!(c[Counter::EntriesStored as usize], 91);
    let paths = rx.reader.paths().unwrap();
    assert_eq!(paths.len(), 91);
    for e in &entries {
        let key = PathKey {
            spine_as: 0,
            spine_id: ip4(10, 0, 0, 9),
            remote_as: 0,
            remote_id: e.remote_node_id,
            link_id: e.link_id,
        };
        let v = paths[&key];
        assert_eq!((v.lqs, v.cl), (e.lqs, e.cl));
        assert!(v.flags & PATH_FLAG_PFC_FABRIC != 0);
        match e.diagnostics {
            Some(d) => {
                assert!(v.flags & PATH_FLAG_DIAGNOSTICS != 0);
                assert_eq!(
                    (v.queue_depth, v.ecn_marking_rate, v.pfc_pause_fraction),
                    (d.queue_depth, d.ecn_marking_rate, d.pfc_pause_fraction)
                );
                assert_eq!(
                    v.flags & lq_common::maps::PATH_FLAG_DROPS != 0,
                    d.drops_active
                );
                assert_eq!(f32::from_bits(v.link_capacity_bits), 400.0);
            }
            None => assert_eq!(v.flags & PATH_FLAG_DIAGNOSTICS, 0),
        }
    }
}

#[test]
fn as_plan_discards_datagrams_and_entries_outside_it() {
    let mut s = settings();
    s.as_qualified = true;
    s.as_plan = vec![AsRange {
        first: 65000,
        last: 65010,
    }];
    let mut rx = TestReceiver::load(&s).unwrap();
    let mut h = header(ip4(10, 0, 0, 2), 1);
    h.as_qualified = true;
    h.node_as = 65001;
    let mut inside = entry(ip4(10, 0, 1, 1), 1, 100, 0);
    inside.remote_as = 65002;
    let mut outside = entry(ip4(10, 0, 1, 2), 2, 100, 0);
    outside.remote_as = 64999;
    assert_eq!(
        rx.run(&FrameSpec::lq(payload(&h, &[inside, outside])).build())
            .unwrap(),
        XDP_DROP
    );
    h.node_as = 70000;
    h.sequence = 2;
    assert_eq!(
        rx.run(&FrameSpec::lq(payload(&h, &[inside])).build())
            .unwrap(),
        XDP_DROP
    );
    // Q = 1 with AS 0 is unqualified: a mismatch for an AS-qualified receiver.
    h.node_as = 0;
    assert_eq!(
        rx.run(&FrameSpec::lq(payload(&h, &[inside])).build())
            .unwrap(),
        XDP_DROP
    );
    let c = rx.counters().unwrap();
    assert_eq!(c[Counter::Accepted as usize], 1);
    assert_eq!(c[Counter::AsMismatchEntry as usize], 1);
    assert_eq!(c[Counter::AsMismatch as usize], 2);
    let paths = rx.reader.paths().unwrap();
    assert_eq!(paths.len(), 1);
    assert!(
        paths
            .keys()
            .all(|k| k.remote_as == 65002 && k.spine_as == 65001)
    );
}

#[test]
fn a_failed_neighbor_resynchronises_on_any_sequence() {
    let mut s = settings();
    s.dead_interval_ns = 2_000_000; // 2 ms
    let mut rx = TestReceiver::load(&s).unwrap();
    assert_eq!(rx.run(&with(1000, |_| ())).unwrap(), XDP_DROP);
    assert_eq!(rx.run(&with(999, |_| ())).unwrap(), XDP_DROP); // stale, within 2 ms
    std::thread::sleep(std::time::Duration::from_millis(5));
    // A restarted sender starting lower is accepted once the neighbor is failed.
    assert_eq!(rx.run(&with(5, |_| ())).unwrap(), XDP_DROP);
    let c = rx.counters().unwrap();
    assert_eq!(c[Counter::Accepted as usize], 2);
    assert_eq!(c[Counter::StaleSeq as usize], 1);
    assert_eq!(c[Counter::Resync as usize], 1);
}

#[test]
fn pass_through_passes_consumed_datagrams() {
    let mut s = settings();
    s.pass_through = true;
    let mut rx = TestReceiver::load(&s).unwrap();
    assert_eq!(rx.run(&with(1, |_| ())).unwrap(), XDP_PASS);
    assert_eq!(rx.counters().unwrap()[Counter::Accepted as usize], 1);
}

#[test]
fn a_change_event_reaches_the_ring_buffer_only_on_change() {
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let mut events = rx.receiver.take_events().unwrap();
    let mut zero_events = rx.receiver.take_zero_events().unwrap();
    let frame = |seq: u16, lqs: u8, cl: u8| {
        FrameSpec::lq(payload(
            &header(ip4(10, 0, 0, 3), seq),
            &[entry(ip4(10, 0, 1, 4), 7, lqs, cl)],
        ))
        .build()
    };
    // (sequence, LQS, CL, the ring its event goes to: None, Some(zero transition)).
    let steps = [
        (1, 200, 1, Some(true)),  // a new entry: a path quality from none (6.4)
        (2, 200, 1, None),        // unchanged: no event
        (3, 72, 1, Some(false)),  // changed, not across 0: the paced ring
        (4, 0, 1, Some(true)),    // LQS to 0
        (5, 0, 1, None),          // unchanged at 0: no event
        (6, 90, 1, Some(true)),   // LQS from 0
        (7, 90, 7, Some(true)),   // CL to 7
        (8, 60, 7, Some(true)),   // a move at CL 7 (the gray-failure prune reads it)
        (9, 60, 7, None),         // unchanged at CL 7: no event
        (10, 60, 2, Some(true)),  // CL from 7
        (11, 60, 3, Some(false)), // a CL move below 7
    ];
    // Each event names the changed entry's row: the first row, claimed by the only key.
    let slot = 0;
    for (seq, lqs, cl, want) in steps {
        rx.run(&frame(seq, lqs, cl)).unwrap();
        let (zero, paced) = (ring_events(&mut zero_events), ring_events(&mut events));
        let got: Vec<_> = (zero.iter().map(|e| (e, true)))
            .chain(paced.iter().map(|e| (e, false)))
            .map(|(e, on_zero_ring)| {
                assert_eq!(e.zero_transition(), on_zero_ring, "{e:?}");
                (
                    e.sequence,
                    e.changed,
                    e.entries,
                    e.named_slots().map(<[u32]>::to_vec),
                    on_zero_ring,
                )
            })
            .collect();
        let want: Vec<_> = want
            .map(|z| (seq, 1, 1, Some(vec![slot]), z))
            .into_iter()
            .collect();
        assert_eq!(got, want, "datagram {seq}: LQS {lqs}, CL {cl}");
    }
}

/// A datagram that changes more entries than an event has room for names its sender only
/// (the controller then reads all of that sender's rows); one with fewer names each.
#[test]
fn a_change_event_names_up_to_event_slots_entries() {
    use lq_common::maps::{EVENT_SLOTS, NO_SLOT, PathEvent};
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let mut events = rx.receiver.take_events().unwrap();
    let mut zero_events = rx.receiver.take_zero_events().unwrap();
    let frame = |seq: u16, n: u32, lqs: u8| {
        let entries: Vec<_> = (0..n)
            .map(|r| entry(ip4(10, 0, 1, 10 + r as u8), 7, lqs, 1))
            .collect();
        FrameSpec::lq(payload(&header(ip4(10, 0, 0, 3), seq), &entries)).build()
    };
    let n = EVENT_SLOTS as u32 + 1;
    rx.run(&frame(1, n, 200)).unwrap(); // n new entries: the sender only
    rx.run(&frame(2, n, 200)).unwrap(); // unchanged: no event
    rx.run(&frame(3, EVENT_SLOTS as u32, 90)).unwrap(); // EVENT_SLOTS changed: named
    // The new entries' event on the zero transitions' ring, the LQS moves' on the other.
    let mut got: Vec<PathEvent> = ring_events(&mut zero_events);
    got.extend(ring_events(&mut events));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].zero_transition() && !got[1].zero_transition());
    assert_eq!(got[0].changed as usize, EVENT_SLOTS + 1);
    assert_eq!(got[0].named_slots(), None);
    assert!(got[0].changed_slots.iter().all(|&s| s != NO_SLOT));
    let named = got[1].named_slots().expect("slots named");
    // Rows are claimed in arrival order: the first datagram's entries took rows 0, 1, ...
    let want: Vec<u32> = (0..EVENT_SLOTS as u32).collect();
    assert_eq!(named, &want[..]);
}

/// The path table's key index probes linearly (`lq_common::maps::path_index_at`): a key
/// whose `PATH_SLOT_PROBES` cells all lead to other keys is refused as `table_full`, the
/// others are stored, each in the row the reference model (`lq_tests::xdp::SlotTable`)
/// puts it in, and a second datagram updates them in place. The second datagram lists the
/// keys in reverse, so the receiver's guess of the next row (the row after the last
/// entry's) misses every time and each key is found through the index.
#[test]
fn colliding_keys_fill_their_probe_run_then_count_table_full() {
    use lq_common::maps::{PATH_SLOT_PROBES, PathValue, path_index_at};
    use lq_tests::xdp::SlotTable;

    let spine = ip4(10, 0, 0, 7);
    let remote = ip4(10, 0, 3, 1);
    let key = |link_id: u32| PathKey {
        spine_as: 0,
        spine_id: spine,
        remote_as: 0,
        remote_id: remote,
        link_id,
    };
    // PATH_SLOT_PROBES + 1 link ids whose keys all start probing at the same cell.
    let target = path_index_at(&key(1), 0);
    let links: Vec<u32> = (1..u32::MAX)
        .filter(|&l| path_index_at(&key(l), 0) == target)
        .take(PATH_SLOT_PROBES as usize + 1)
        .collect();
    assert_eq!(links.len(), PATH_SLOT_PROBES as usize + 1);

    let mut rx = TestReceiver::load(&settings()).unwrap();
    for (seq, lqs) in [(1u16, 100u8), (2, 101)] {
        let mut entries: Vec<_> = links.iter().map(|&l| entry(remote, l, lqs, 2)).collect();
        if seq == 2 {
            entries.reverse();
        }
        let frame = FrameSpec::lq(payload(&header(spine, seq), &entries)).build();
        let before = rx.counters().unwrap();
        assert_eq!(rx.run(&frame).unwrap(), XDP_DROP);
        let after = rx.counters().unwrap();
        let delta = |c: Counter| after[c as usize] - before[c as usize];
        assert_eq!(delta(Counter::Accepted), 1);
        assert_eq!(delta(Counter::EntriesStored), u64::from(PATH_SLOT_PROBES));
        assert_eq!(
            delta(Counter::TableFull),
            1,
            "the colliding key after the probe run"
        );

        let mut model = SlotTable::default();
        for &l in &links {
            let stored = model.set(key(l), PathValue::default());
            assert_eq!(stored.is_some(), l != *links.last().unwrap());
        }
        let paths = rx.reader.paths().unwrap();
        assert_eq!(paths.len(), PATH_SLOT_PROBES as usize);
        for &l in &links[..PATH_SLOT_PROBES as usize] {
            assert_eq!(paths[&key(l)].lqs, lqs, "link {l} updated in place");
        }
        assert!(!paths.contains_key(&key(*links.last().unwrap())));
        // The same keys in the same slots as the reference model.
        assert_eq!(
            paths.keys().collect::<Vec<_>>(),
            model.entries().keys().collect::<Vec<_>>()
        );
    }
}

/// Rows are claimed in arrival order until none is left: the 65 537th distinct key counts
/// `table_full` (as the reference model refuses it), and the keys already stored are still
/// updated in place.
#[test]
fn the_table_refuses_new_keys_once_every_row_is_claimed() {
    use lq_common::maps::{PATH_TABLE_CAPACITY, PathValue};
    use lq_tests::xdp::SlotTable;

    let spine = ip4(10, 0, 0, 9);
    let remote = |i: u32| 0x0a01_0000 + i;
    let mut rx = TestReceiver::load(&settings()).unwrap();
    let mut model = SlotTable::default();
    let keys = PATH_TABLE_CAPACITY + 1;
    let mut seq = 0u16;
    let mut send = |rx: &mut TestReceiver, first: u32, n: u32, lqs: u8| {
        seq += 1;
        let entries: Vec<_> = (first..first + n)
            .map(|i| entry(remote(i), 1, lqs, 0))
            .collect();
        let frame = FrameSpec::lq(payload(&header(spine, seq), &entries)).build();
        assert_eq!(rx.run(&frame).unwrap(), XDP_DROP);
    };
    let mut first = 0;
    while first < keys {
        let n = (keys - first).min(91);
        send(&mut rx, first, n, 200);
        first += n;
    }
    let stored: Vec<bool> = (0..keys)
        .map(|i| {
            let key = PathKey {
                spine_as: 0,
                spine_id: spine,
                remote_as: 0,
                remote_id: remote(i),
                link_id: 1,
            };
            model.set(key, PathValue::default()).is_some()
        })
        .collect();
    assert_eq!(
        stored.iter().filter(|s| **s).count(),
        PATH_TABLE_CAPACITY as usize
    );
    assert!(
        !stored[keys as usize - 1],
        "the model refuses the last key too"
    );
    let counters = rx.counters().unwrap();
    assert_eq!(counters[Counter::TableFull as usize], 1);
    assert_eq!(
        counters[Counter::SlotsClaimed as usize],
        u64::from(PATH_TABLE_CAPACITY)
    );
    // A full table still takes its keys' updates (here the first datagram's, in place).
    send(&mut rx, 0, 91, 90);
    let paths = rx.reader.paths().unwrap();
    assert_eq!(paths.len(), PATH_TABLE_CAPACITY as usize);
    let first_key = PathKey {
        spine_as: 0,
        spine_id: spine,
        remote_as: 0,
        remote_id: remote(0),
        link_id: 1,
    };
    assert_eq!(paths[&first_key].lqs, 90);
    assert_eq!(rx.counters().unwrap()[Counter::TableFull as usize], 1);
}

/// The maps of the path table (rows, key index, row count, stamps) are kept or created
/// anew together: a restart keeps the whole table; a pin folder holding rows without the
/// key index (an older lqd's) gets a new table, not a new index over old rows, which would
/// claim second rows for keys that have one.
#[test]
fn the_path_table_parts_are_kept_or_created_together() {
    use lq_common::maps::PATH_INDEX_MAP;

    let mut rx = TestReceiver::load(&settings()).unwrap();
    let frame = |seq: u16| {
        let entries = [
            entry(ip4(10, 0, 1, 4), 7, 200, 1),
            entry(ip4(10, 0, 1, 5), 7, 200, 1),
        ];
        FrameSpec::lq(payload(&header(ip4(10, 0, 0, 3), seq), &entries)).build()
    };
    rx.run(&frame(1)).unwrap();
    rx.reload(&settings()).unwrap();
    assert_eq!(
        rx.reader.paths().unwrap().len(),
        2,
        "a restart keeps the table"
    );
    rx.run(&frame(2)).unwrap();
    assert_eq!(rx.reader.paths().unwrap().len(), 2);

    std::fs::remove_file(rx.pin_dir().join(PATH_INDEX_MAP)).unwrap();
    rx.reload(&settings()).unwrap();
    assert!(
        rx.reader.paths().unwrap().is_empty(),
        "rows without their index are created anew"
    );
    let claimed = rx.counters().unwrap()[Counter::SlotsClaimed as usize];
    rx.run(&frame(3)).unwrap();
    assert_eq!(rx.reader.paths().unwrap().len(), 2);
    assert_eq!(
        rx.counters().unwrap()[Counter::SlotsClaimed as usize] - claimed,
        2
    );
}

/// Two CPUs claiming rows at once: two instances of the receiver share the pinned table,
/// each run by a thread pinned to its own CPU (BPF_PROG_TEST_RUN runs the program on the
/// calling thread's CPU), released together round after round. In each round both send
/// one spine's datagram of 91 new keys (the same keys: both may claim them together; one
/// datagram may also be refused as stale, check 10), then each a datagram of another
/// spine (different new keys, claimed at once). Every key sent must end in exactly one used
/// row and every used row hold a key that was sent: a lost claim race leaves its row
/// unused, never a second row for a key or two keys in a row. And each datagram's new keys
/// sit in adjacent rows (each CPU claims from its own block).
#[test]
fn concurrent_claims_keep_one_row_per_key() {
    use aya::maps::{Array, Map, MapData};
    use lq_common::maps::{PATH_ROWS_MAP, PATH_TABLE_MAP, PathSlot};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Barrier};

    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("one CPU: no concurrent claims to test");
        return;
    }
    const ROUNDS: u32 = 150;
    const PER: u32 = 91;
    let shared_spine = ip4(10, 0, 0, 20);
    let own_spine = |cpu: u32| ip4(10, 0, 0, 21 + cpu as u8);
    let remote = |round: u32, i: u32| 0x0a02_0000 + round * PER + i;
    let frame = move |spine: u32, seq: u16, round: u32| {
        let entries: Vec<_> = (0..PER)
            .map(|i| entry(remote(round, i), 1, 200, 0))
            .collect();
        FrameSpec::lq(payload(&header(spine, seq), &entries)).build()
    };
    let rx = TestReceiver::load(&settings()).unwrap();
    let other = rx.another_instance(&settings()).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let run = move |mut rx: TestReceiver, cpu: u32, barrier: Arc<Barrier>| {
        lq_tests::bench::pin_to_cpu(0, cpu as usize);
        for round in 0..ROUNDS {
            let shared = frame(shared_spine, (2 * round + cpu + 1) as u16, round);
            let own = frame(own_spine(cpu), (round + 1) as u16, round);
            barrier.wait();
            assert_eq!(rx.run(&shared).unwrap(), XDP_DROP);
            barrier.wait();
            assert_eq!(rx.run(&own).unwrap(), XDP_DROP);
        }
        rx
    };
    let b = barrier.clone();
    let second = std::thread::spawn(move || run(other, 1, b));
    let rx = run(rx, 0, barrier);
    drop(second.join().unwrap());

    let dir = rx.receiver.pin_dir().to_path_buf();
    let open = |name: &str| MapData::from_pin(dir.join(name)).unwrap();
    let rows: Array<MapData, PathSlot> = Array::try_from(Map::Array(open(PATH_TABLE_MAP))).unwrap();
    let claimed: Array<MapData, u64> = Array::try_from(Map::Array(open(PATH_ROWS_MAP))).unwrap();
    let claimed = claimed.get(&0, 0).unwrap();
    let mut rows_of: BTreeMap<PathKey, usize> = BTreeMap::new();
    let mut row_of: BTreeMap<PathKey, u32> = BTreeMap::new();
    for i in 0..claimed as u32 {
        let slot = rows.get(&i, 0).unwrap();
        if slot.used != 0 {
            *rows_of.entry(slot.key).or_default() += 1;
            row_of.insert(slot.key, i);
        }
    }
    let key = |spine: u32, remote: u32| PathKey {
        spine_as: 0,
        spine_id: spine,
        remote_as: 0,
        remote_id: remote,
        link_id: 1,
    };
    let mut sent = BTreeSet::new();
    for round in 0..ROUNDS {
        for i in 0..PER {
            for spine in [shared_spine, own_spine(0), own_spine(1)] {
                sent.insert(key(spine, remote(round, i)));
            }
        }
    }
    let twice: Vec<_> = rows_of.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "keys in more than one used row: {twice:?}"
    );
    let stray: Vec<_> = rows_of.keys().filter(|k| !sent.contains(*k)).collect();
    assert!(
        stray.is_empty(),
        "used rows holding keys never sent: {stray:?}"
    );
    let missing: Vec<_> = sent.iter().filter(|k| !rows_of.contains_key(*k)).collect();
    let counters = rx.counters().unwrap();
    assert!(
        missing.is_empty(),
        "{} keys sent have no row: {:?}; counters {:?}",
        missing.len(),
        &missing[..missing.len().min(8)],
        lq_common::maps::Counter::ALL
            .iter()
            .map(|c| (c.name(), counters[*c as usize]))
            .filter(|(_, n)| *n != 0)
            .collect::<Vec<_>>()
    );
    // Each CPU claims from its own block of rows: the new keys of one datagram take
    // adjacent rows while the other CPU claims too (breaks only where a block ends, at most
    // twice in 91 rows, or at a rare lost race; about once a datagram here, where each CPU
    // also claims rows for the shared spine), so the receiver's guess of the next row
    // holds. Claims from one shared count would interleave the two CPUs' rows.
    let mut breaks = 0;
    for cpu in 0..2 {
        for round in 0..ROUNDS {
            let rows: Vec<u32> = (0..PER)
                .map(|i| row_of[&key(own_spine(cpu), remote(round, i))])
                .collect();
            breaks += rows.windows(2).filter(|w| w[1] != w[0] + 1).count();
        }
    }
    assert!(
        breaks <= 2 * 2 * ROUNDS as usize + 10,
        "{breaks} breaks in the rows of {} datagrams",
        2 * ROUNDS
    );
    eprintln!(
        "{} keys in {} rows reserved ({} unused: lost claim races, blocks not used up); {} breaks in the rows of {} datagrams",
        sent.len(),
        claimed,
        claimed as usize - rows_of.len(),
        breaks,
        2 * ROUNDS
    );
}
