//! The tc PFC counter on a real veth pair in namespaces: frames injected on one end
//! (AF_PACKET and scapy), exact per-priority counts read from the pinned maps on the other.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use lq_common::pfc::{PFC_MULTICAST, PfcClass, PfcReject, build_frame, classify};
use lq_tests::{
    netns::{NetNs, veth_pair},
    pfc::{TestPfc, send_frames},
};
use lq_user::sys::bpf::pfc::TcMode;

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
#[allow(clippy::vec_init_then_push)]
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
    // QinQ: veth strips the outer tag into skb metadata, the inner one stays in the frame.
    let mut qinq = f[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x05]);
    qinq.extend_from_slice(&f[12..]);
    v.push(("QinQ-tagged (802.1ad + 802.1Q)", qinq, 0));
    let mut long = build_frame(PFC_MULTICAST, SRC, 0x0041, q(3)).to_vec();
    long.extend_from_slice(&[0u8; 40]);
    v.push(("100 octets (longer than minimum)", long, 0x41));
    v
}

#[test]
fn counts_exactly_per_priority_and_counts_on_across_a_restart_until_cleanup() {
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
    assert_eq!(rejects[&PfcReject::VlanTagged], 9);
    assert_eq!(rejects[&PfcReject::BadOpcode], 6);
    // Another unicast address and 01-80-C2-00-00-02, each round.
    assert_eq!(rejects[&PfcReject::BadDestination], 6);
    assert_eq!(rejects[&PfcReject::Short], 6);

    // The link is pinned: frames sent while lqd is stopped are counted, and a restart
    // adopts maps, link and epoch, so its totals include them (issue 42).
    let epoch = reader.epoch(ifindex).unwrap().expect("an epoch");
    pfc.stop();
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x00ff, [0; 8]).to_vec()],
    )
    .unwrap();
    pfc.restart().unwrap();
    let again = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(
        again.how,
        lq_user::sys::bpf::tc_pinned::Attachment::Adopted,
        "the pinned link counted on"
    );
    assert_eq!(again.epoch, epoch, "the same epoch");
    let reader_after = pfc.reader().unwrap();
    assert_eq!(reader_after.instance(), reader.instance(), "the same maps");
    let gap = expected.map(|e| e.map(|e| e + 1));
    assert_eq!(
        reader_after.rx_priorities(ifindex).unwrap(),
        gap,
        "the frame of the gap counted on every priority"
    );
    // Only one program counts: a frame sent now is counted once.
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x0001, [0; 8]).to_vec()],
    )
    .unwrap();
    assert_eq!(
        reader_after.rx_count(ifindex, 0).unwrap(),
        gap[0].map(|e| e + 1)
    );

    // `lqd cleanup` (removing the pins) stops counting for good: frames of that gap are
    // not counted, and the next start begins at zero, in new maps and a new epoch.
    pfc.stop();
    lq_user::sys::bpf::tc_pinned::release(&pfc.pin_dir).unwrap();
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x00ff, [0; 8]).to_vec()],
    )
    .unwrap();
    pfc.restart().unwrap();
    let fresh = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(
        fresh.how,
        lq_user::sys::bpf::tc_pinned::Attachment::Attached(
            lq_user::sys::bpf::tc_pinned::Fresh::NoPin
        )
    );
    assert_ne!(fresh.epoch, epoch, "a new epoch");
    let reader_new = pfc.reader().unwrap();
    assert_eq!(reader_new.rx_priorities(ifindex).unwrap(), [Some(0); 8]);
    assert_ne!(reader_new.instance(), reader.instance(), "new map instance");
}

/// scapy's PFC frame (contrib.mac_control), sent `count` times out of `iface` in `ns`.
fn scapy_send(ns: &NetNs, iface: &str, enabled: &[u8], count: u32) {
    let fields: Vec<String> = enabled
        .iter()
        .map(|n| format!("c{n}_enabled=1, c{n}_pause_time={}", 100 * u32::from(*n)))
        .collect();
    let script = format!(
        "from scapy.all import Ether, sendp\n\
         from scapy.contrib.mac_control import MACControlClassBasedFlowControl as C\n\
         p = Ether(dst='01:80:c2:00:00:01', src='02:00:00:00:00:bb') / C({})\n\
         assert len(bytes(p)) == 60\n\
         sendp(p, iface='{iface}', count={count}, verbose=False)\n",
        fields.join(", ")
    );
    ns.exec("/usr/bin/python3", &["-c", &script]).unwrap();
}

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigint(child: &mut Child) {
    // SAFETY: signals a process this test started.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGINT) };
    let _ = child.0.wait();
}

#[test]
fn exports_counts_read_from_the_pins_to_tshark_and_nfacctd() {
    use lq_user::{
        core::pfc::counter::{CounterTracker, RawReading, SourceInstance},
        ipfix::{Direction, ElementIds, ExporterConfig, PfcRecord},
        roles::pfc::tx::TxSource,
        sys::clock::{monotonic_ns, unix_ms_now},
        transport::udp::UdpExporter,
    };
    let t = topo();
    let mut pfc_b = TestPfc::load().unwrap();
    let mut pfc_a = TestPfc::load().unwrap();
    let pb = pfc_b.attach(&t.b, "pb", None).unwrap().info.ifindex;
    let pa = pfc_a.attach(&t.a, "pa", None).unwrap().info.ifindex;

    // pa -> pb: received at pb. 0x09 three times, 0xff twice (zero quanta).
    let mut frames = vec![build_frame(PFC_MULTICAST, SRC, 0x0009, [100; 8]).to_vec(); 3];
    frames.extend(vec![
        build_frame(PFC_MULTICAST, SRC, 0x00ff, [0; 8]).to_vec();
        2
    ]);
    send_frames(&t.a, "pa", frames).unwrap();
    // pb -> pa with scapy: transmitted by pb, confirmed by pa's receive count.
    scapy_send(&t.b, "pb", &[0, 7], 4);

    let rx_expected = [5u64, 2, 2, 5, 2, 2, 2, 2];
    let tx_expected = [4u64, 0, 0, 0, 0, 0, 0, 4];
    let rx = pfc_b.reader().unwrap().rx_priorities(pb).unwrap();
    assert_eq!(rx, rx_expected.map(Some));
    let tx = TxSource::VethPeer {
        peer_pin_dir: pfc_a.pin_dir.clone(),
        peer_ifindex: pa,
    }
    .read()
    .unwrap();
    assert_eq!(tx.counts, tx_expected.map(Some));

    // Through the counter model: 64-bit source, one epoch per counter.
    let now_ms = unix_ms_now();
    let instance = SourceInstance {
        ifindex: pb,
        id: u64::from(pfc_b.reader().unwrap().instance()),
    };
    let mut records = Vec::new();
    for (direction, counts, inst) in [
        (Direction::Received, rx, instance),
        (Direction::Transmitted, tx.counts, tx.instance),
    ] {
        for (n, c) in counts.iter().enumerate() {
            let Some(value) = c else { continue };
            let mut tracker = CounterTracker::new(64, 10_000, 1);
            let (total, _) = tracker.update(RawReading {
                value: *value,
                instance: inst,
                mono_ns: monotonic_ns(),
                unix_ms: now_ms,
            });
            records.push(PfcRecord {
                direction,
                interface: pb,
                priority: n as u8,
                observed_ms: total.unix_ms,
                total: total.value,
                epoch: total.epoch,
            });
        }
    }
    assert_eq!(records.len(), 16);

    // The collectors, in namespace b on its loopback.
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-ipfix"));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("ipfix.pcapng");
    let primitives = dir.join("primitives.lst");
    std::fs::write(
        &primitives,
        "name=obs_point field_type=138 len=8 semantics=u_int\n\
         name=in_phy field_type=252 len=4 semantics=u_int\n\
         name=out_phy field_type=253 len=4 semantics=u_int\n\
         name=obs_ms field_type=323 len=8 semantics=u_int\n\
         name=pfc_prio field_type=32473:1 len=1 semantics=u_int\n\
         name=pfc_total field_type=32473:2 len=8 semantics=u_int\n\
         name=pfc_epoch field_type=32473:3 len=4 semantics=u_int\n",
    )
    .unwrap();
    let out_json = dir.join("nfacctd.json");
    let conf = dir.join("nfacctd.conf");
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\n\
             nfacctd_ip: 127.0.0.1\n\
             nfacctd_port: 4739\n\
             nfacctd_account_options: true\n\
             aggregate_primitives: {}\n\
             plugins: print[pfc]\n\
             aggregate[pfc]: obs_point, in_phy, out_phy, obs_ms, pfc_prio, pfc_total, pfc_epoch\n\
             print_output[pfc]: json\n\
             print_output_file[pfc]: {}\n\
             print_output_file_append[pfc]: true\n\
             print_refresh_time[pfc]: 1\n",
            primitives.display(),
            out_json.display()
        ),
    )
    .unwrap();
    let mut tshark = Child(
        t.b.command("tshark")
            .args(["-i", "lo", "-f", "udp port 4739", "-w"])
            .arg(&pcap)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut nfacctd = Child(
        t.b.command("nfacctd")
            .arg("-f")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_secs(3));

    let config = ExporterConfig {
        observation_domain_id: 42,
        observation_point_id: 7,
        elements: ElementIds::enterprise(32473, 1, 2, Some(3)),
        ..ExporterConfig::default()
    };
    let sent =
        t.b.run_in(move || -> anyhow::Result<usize> {
            let mut exp = UdpExporter::connect("127.0.0.1:4739".parse()?, config)?;
            Ok(exp.export(&records)?)
        })
        .unwrap()
        .unwrap();
    assert_eq!(sent, 3, "templates, type records, one data message");
    std::thread::sleep(std::time::Duration::from_secs(3));
    sigint(&mut tshark);
    sigint(&mut nfacctd);

    // tshark: the templates and the records, decoded independently.
    let json = lq_tests::netns::run(
        "tshark",
        &[
            "-r",
            pcap.to_str().unwrap(),
            "-d",
            "udp.port==4739,cflow",
            "-T",
            "json",
            "--no-duplicate-keys",
        ],
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v.as_array().unwrap().len(),
        3,
        "three IPFIX messages captured"
    );
    // The enterprise values (raw bytes to tshark): the data message carries every total
    // and epoch; check the received priority-0 total is among them.
    let ent = tshark_cflow_fields(&pcap, ';', &["cflow.enterprise_private_entry"]);
    let mut expected_ent = Vec::new();
    for counts in [rx_expected, tx_expected] {
        for (n, c) in counts.iter().enumerate() {
            expected_ent.push(format!("{n:02x};{c:016x};00000001"));
        }
    }
    assert_eq!(
        ent.lines().nth(2).unwrap(),
        expected_ent.join(";"),
        "(priority; total; epoch) per record"
    );
    let fields = tshark_cflow_fields(
        &pcap,
        ',',
        &[
            "cflow.template_id",
            "cflow.ingress_physical_interface",
            "cflow.egress_physical_interface",
            "cflow.observation_point_id",
        ],
    );
    let lines: Vec<&str> = fields.lines().collect();
    assert!(lines[0].starts_with("256,257,258\t"), "{}", lines[0]);
    let data = lines[2].split('\t').collect::<Vec<_>>();
    assert_eq!(data[1], vec![pb.to_string(); 8].join(","));
    assert_eq!(data[2], vec![pb.to_string(); 8].join(","));
    assert_eq!(data[3], vec!["7"; 16].join(","));

    // nfacctd: one line per (direction, priority) with the same counts.
    let out = std::fs::read_to_string(&out_json).unwrap_or_default();
    let mut got_rx = [None; 8];
    let mut got_tx = [None; 8];
    for l in out.lines() {
        let Ok(r) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        let num = |k: &str| {
            r[k].as_u64()
                .or_else(|| r[k].as_str().and_then(|s| s.parse().ok()))
        };
        if num("obs_point") != Some(7) {
            continue;
        }
        let prio = num("pfc_prio").unwrap() as usize;
        let total = num("pfc_total").unwrap();
        assert_eq!(num("pfc_epoch"), Some(1));
        match (num("in_phy"), num("out_phy")) {
            (Some(i), Some(0)) if i == u64::from(pb) => got_rx[prio] = Some(total),
            (Some(0), Some(o)) if o == u64::from(pb) => got_tx[prio] = Some(total),
            other => panic!("unexpected interfaces {other:?} in {l}"),
        }
    }
    assert_eq!(got_rx, rx_expected.map(Some), "nfacctd output:\n{out}");
    assert_eq!(got_tx, tx_expected.map(Some), "nfacctd output:\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tags left in the frame (BPF_PROG_TEST_RUN does not strip them into skb metadata, as veth
/// does): 802.1Q- and QinQ-tagged MAC Control frames are rejected as VLAN-tagged on the
/// direct-access fast path, tagged data frames count nothing.
#[test]
fn tags_in_the_frame_are_looked_past() {
    use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
    let mut pfc = TestPfc::load().unwrap();
    let reader = pfc.reader().unwrap();
    let vlan_rejects = |r: &lq_user::sys::bpf::pfc::PfcReader| -> u64 {
        r.rejects()
            .unwrap()
            .into_iter()
            .filter(|(k, _)| *k == PfcReject::VlanTagged)
            .map(|(_, n)| n)
            .sum()
    };
    let before = vlan_rejects(&reader);
    let f = build_frame(PFC_MULTICAST, SRC, 0x00ff, [7; 8]);
    let tag = |tags: &[u8]| {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(tags);
        t.extend_from_slice(&f[12..]);
        t
    };
    let vlan = tag(&[0x81, 0x00, 0x00, 0x05]);
    let qinq = tag(&[0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x05]);
    let mut qinq_ip = qinq.clone();
    qinq_ip[20..22].copy_from_slice(&[0x08, 0x00]);
    let mut vlan_ip = vlan.clone();
    vlan_ip[16..18].copy_from_slice(&[0x86, 0xdd]);
    let prog: &mut SchedClassifier = pfc
        .counter
        .as_mut()
        .unwrap()
        .ebpf_mut()
        .program_mut(lq_common::pfc::PFC_PROGRAM)
        .unwrap()
        .try_into()
        .unwrap();
    for frame in [&vlan, &qinq, &qinq_ip, &vlan_ip] {
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.repeat = 1;
        assert_eq!(prog.test_run(opts).unwrap().return_value, 0, "TC_ACT_OK");
    }
    assert_eq!(
        vlan_rejects(&reader) - before,
        2,
        "the 802.1Q and the QinQ MAC Control frame"
    );
}

/// tshark's fields `names` of every IPFIX message in `pcap` (UDP 4739 decoded as cflow),
/// one line a message, a field's occurrences joined by `aggregator`.
fn tshark_cflow_fields(pcap: &std::path::Path, aggregator: char, names: &[&str]) -> String {
    let aggregator = format!("aggregator={aggregator}");
    let mut args = vec![
        "-r",
        pcap.to_str().unwrap(),
        "-d",
        "udp.port==4739,cflow",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        &aggregator,
    ];
    for n in names {
        args.extend(["-e", n]);
    }
    lq_tests::netns::run("tshark", &args).unwrap()
}

/// `bpftool`, which makes the fixtures of another lqd's pins.
fn bpftool(args: &[&str]) {
    let out = std::process::Command::new("bpftool")
        .args(args)
        .output()
        .expect("bpftool (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "bpftool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Upgrades (issue 42): the pins of the previous release's layout (no layout map, a
/// 16-octet interface configuration; made here by bpftool, as that lqd left them) hold
/// the counts of a counter that stopped when it exited, so they are removed and counting
/// starts anew; pins of a layout this lqd does not know are refused with the command that
/// clears them, and never read or written; after that command the start succeeds.
#[test]
fn pins_of_the_previous_layout_are_replaced_and_of_an_unknown_layout_refused() {
    let t = topo();
    let dir = std::path::PathBuf::from("/sys/fs/bpf").join(lq_tests::unique_name("lq-pfc-up"));
    std::fs::create_dir_all(&dir).unwrap();
    let pin = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    // The previous release: PFC_IF_CONFIG with 16-octet values, no LQ_COUNTER_META.
    bpftool(&[
        "map",
        "create",
        &pin("PFC_IF_CONFIG"),
        "type",
        "hash",
        "key",
        "4",
        "value",
        "16",
        "entries",
        "256",
        "name",
        "PFC_IF_CONFIG",
    ]);
    bpftool(&[
        "map",
        "create",
        &pin("PFC_RX_COUNTERS"),
        "type",
        "percpu_hash",
        "key",
        "8",
        "value",
        "8",
        "entries",
        "2048",
        "name",
        "PFC_RX_COUNTERS",
    ]);
    let mut pfc = TestPfc {
        counter: Some(lq_user::sys::bpf::pfc::PfcCounter::load(&dir).unwrap()),
        pin_dir: dir.clone(),
    };
    let att = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(
        att.how,
        lq_user::sys::bpf::tc_pinned::Attachment::Attached(
            lq_user::sys::bpf::tc_pinned::Fresh::NoPin
        )
    );
    let reader = pfc.reader().unwrap();
    assert_eq!(reader.epoch(att.info.ifindex).unwrap(), Some(att.epoch));
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x0008, [0; 8]).to_vec()],
    )
    .unwrap();
    assert_eq!(reader.rx_count(att.info.ifindex, 3).unwrap(), Some(1));
    pfc.stop();
    drop(reader);

    // A layout this lqd does not know (a newer lqd's, or a damaged pin): refused.
    bpftool(&[
        "map",
        "update",
        "pinned",
        &pin("LQ_COUNTER_META"),
        "key",
        "0",
        "0",
        "0",
        "0",
        "value",
        "99",
        "0",
        "0",
        "0",
    ]);
    let err = match lq_user::sys::bpf::pfc::PfcCounter::load(&dir) {
        Ok(_) => panic!("pins of layout 99 adopted"),
        Err(e) => lq_user::core::report::Chain(&e).to_string(),
    };
    assert!(
        err.contains("map layout 99")
            && err.contains(&format!("lqd cleanup --pin-dir {}", dir.display())),
        "{err}"
    );
    // Nothing was touched: the counter still counts into its maps.
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x0008, [0; 8]).to_vec()],
    )
    .unwrap();
    assert_eq!(
        lq_user::sys::bpf::pfc::PfcReader::open(&dir)
            .unwrap()
            .rx_count(att.info.ifindex, 3)
            .unwrap(),
        Some(2)
    );
    // The command the error names, then a start at zero.
    let out = std::process::Command::new(lq_tests::daemon::lqd_bin().unwrap())
        .args(["cleanup", "--pin-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists());
    pfc.restart().unwrap();
    let again = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(
        pfc.reader()
            .unwrap()
            .rx_count(again.info.ifindex, 3)
            .unwrap(),
        Some(0)
    );
}

/// An upgrade whose program differs from the running one (another build) but whose maps
/// have the same layout: the pinned link is switched to the new program in one step
/// (bpf_link_update), so the interface never runs without a counter and one program
/// counts afterwards. The "older build" here is the object's empty tc classifier.
#[test]
fn a_pinned_link_running_another_build_is_switched_without_a_gap() {
    use aya::programs::{
        LinkOrder, SchedClassifier, TcAttachType, links::FdLink, tc::TcAttachOptions,
    };
    let t = topo();
    let mut pfc = TestPfc::load().unwrap();
    let link_pin =
        lq_user::sys::bpf::tc_pinned::link_pin(&pfc.pin_dir, TcAttachType::Ingress, "pb");
    let pin = link_pin.clone();
    let old_id =
        t.b.run_in(move || {
            let mut ebpf = aya::Ebpf::load(lq_user::sys::bpf::path_table::EBPF_OBJECT).unwrap();
            let prog: &mut SchedClassifier = ebpf
                .program_mut(lq_common::pfc::TC_BASELINE_PROGRAM)
                .unwrap()
                .try_into()
                .unwrap();
            prog.load().unwrap();
            let id = prog
                .attach_with_options(
                    "pb",
                    TcAttachType::Ingress,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )
                .unwrap();
            let link: FdLink = prog.take_link(id).unwrap().try_into().unwrap();
            let prog_id = link.info().unwrap().program_id();
            link.pin(&pin).unwrap();
            prog_id
        })
        .unwrap();
    let att = pfc.attach(&t.b, "pb", None).unwrap();
    assert_eq!(
        att.how,
        lq_user::sys::bpf::tc_pinned::Attachment::Upgraded {
            previous_program: old_id
        }
    );
    // One program runs at pb's ingress, and it is not the old one.
    let running =
        t.b.run_in(|| {
            SchedClassifier::query_tcx("pb", TcAttachType::Ingress)
                .unwrap()
                .1
        })
        .unwrap();
    assert_eq!(running.len(), 1);
    assert_ne!(running[0].id(), old_id);
    send_frames(
        &t.a,
        "pa",
        vec![build_frame(PFC_MULTICAST, SRC, 0x0081, [0; 8]).to_vec()],
    )
    .unwrap();
    let r = pfc
        .reader()
        .unwrap()
        .rx_priorities(att.info.ifindex)
        .unwrap();
    assert_eq!((r[0], r[7], r[3]), (Some(1), Some(1), Some(0)));
    assert!(link_pin.exists());
}
