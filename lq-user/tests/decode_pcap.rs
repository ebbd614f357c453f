//! `lqd decode --pcap`: capture files written here (classic pcap and pcapng) and, when
//! Wireshark's tools are installed, by `text2pcap`, read by the built binary.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
const VECTOR_2: &str =
    "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";
const GOLDEN_1: &str = include_str!("golden/vector1.json");
const GOLDEN_2: &str = include_str!("golden/vector2.json");
const PORT: u16 = 52525;

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend(PORT.to_be_bytes());
    u.extend(dport.to_be_bytes());
    u.extend((8 + payload.len() as u16).to_be_bytes());
    u.extend([0, 0]); // checksum not verified (spec check 5)
    u.extend_from_slice(payload);
    u
}

fn ipv4(ttl: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
    let udp = udp(dport, payload);
    let mut ip = vec![0x45, 0];
    ip.extend((20 + udp.len() as u16).to_be_bytes());
    ip.extend([0x12, 0x34, 0x40, 0x00, ttl, 17, 0, 0]); // DF, no fragment
    ip.extend([10, 0, 0, 2, 224, 0, 0, 1]);
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend(udp);
    ip
}

fn ipv6(hop_limit: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
    let udp = udp(dport, payload);
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend((udp.len() as u16).to_be_bytes());
    ip.extend([17, hop_limit]);
    ip.extend([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    ip.extend([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip.extend(udp);
    ip
}

/// An Ethernet II frame with the given VLAN tag protocol ids, padded to the 60-octet
/// minimum (without FCS).
fn ethernet(tags: &[u16], ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0x01, 0x00, 0x5e, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for (i, tpid) in tags.iter().enumerate() {
        f.extend(tpid.to_be_bytes());
        f.extend((100 + i as u16).to_be_bytes());
    }
    f.extend(ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f.resize(f.len().max(60), 0);
    f
}

const IP: u16 = 0x0800;
const IP6: u16 = 0x86dd;

/// The capture of the brief: frame numbers 1..=7.
fn mixed_frames() -> Vec<Vec<u8>> {
    let v1 = unhex(VECTOR_1);
    let v2 = unhex(VECTOR_2);
    vec![
        ethernet(&[], IP, &ipv4(255, PORT, &v1)),  // 1: accepted
        ethernet(&[], IP, &ipv4(64, PORT, &v1)),   // 2: bad_ttl
        ethernet(&[], IP6, &ipv6(255, PORT, &v2)), // 3: accepted
        ethernet(&[0x8100], IP, &ipv4(255, PORT, &v1)), // 4: accepted
        ethernet(&[], IP, &ipv4(255, 53, &v1)),    // 5: not LQ
        ethernet(&[0x88a8, 0x8100], IP, &ipv4(255, PORT, &v1)), // 6: not LQ
        ethernet(&[], IP, &ipv4(255, PORT, &v1[..10])), // 7: truncated, padded
    ]
}

fn mixed_stdout() -> String {
    format!(
        "{GOLDEN_1}frame 2: discarded: bad_ttl\n{GOLDEN_2}{GOLDEN_1}frame 7: discarded: truncated\n"
    )
}

const MIXED_SUMMARY: &str = "7 frames: 3 accepted, 2 discarded, 2 not LQ\n";

fn pcap_le_micros(linktype: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xa1b2_c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    for v in [0u32, 0, 262_144, linktype] {
        out.extend(v.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        for v in [
            1_700_000_000 + i as u32,
            500_000,
            f.len() as u32,
            f.len() as u32,
        ] {
            out.extend(v.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    out
}

fn pcapng_block(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    body.resize(body.len().div_ceil(4) * 4, 0);
    let total = 12 + body.len() as u32;
    let mut b = Vec::new();
    b.extend(kind.to_le_bytes());
    b.extend(total.to_le_bytes());
    b.extend(body);
    b.extend(total.to_le_bytes());
    b
}

fn pcapng_le(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut shb = Vec::new();
    shb.extend(0x1a2b_3c4du32.to_le_bytes());
    shb.extend(1u16.to_le_bytes());
    shb.extend(0u16.to_le_bytes());
    shb.extend((-1i64).to_le_bytes());
    let mut out = pcapng_block(0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend(1u16.to_le_bytes());
    idb.extend(0u16.to_le_bytes());
    idb.extend(0u32.to_le_bytes());
    out.extend(pcapng_block(1, &idb));
    for (i, f) in frames.iter().enumerate() {
        if i == 2 {
            // A simple packet block among the enhanced ones, and a block to skip.
            let mut spb = (f.len() as u32).to_le_bytes().to_vec();
            spb.extend_from_slice(f);
            out.extend(pcapng_block(3, &spb));
            out.extend(pcapng_block(5, &[0; 12])); // interface statistics
            continue;
        }
        let mut epb = Vec::new();
        for v in [0u32, 0, 0, f.len() as u32, f.len() as u32] {
            epb.extend(v.to_le_bytes());
        }
        epb.extend_from_slice(f);
        out.extend(pcapng_block(6, &epb));
    }
    out
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode_pcap");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn lqd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lqd"))
        .args(args)
        .output()
        .expect("run lqd")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[track_caller]
fn check(o: &Output, code: i32, stdout: &str, stderr: &str) {
    assert_eq!(
        (
            o.status.code(),
            text(&o.stdout).as_str(),
            text(&o.stderr).as_str()
        ),
        (Some(code), stdout, stderr)
    );
}

#[test]
fn classic_pcap_checks_every_frame() {
    let p = write("mixed.pcap", &pcap_le_micros(1, &mixed_frames()));
    let o = lqd(&["decode", "--pcap", p.to_str().unwrap()]);
    check(&o, 1, &mixed_stdout(), MIXED_SUMMARY);
}

#[test]
fn pcapng_checks_every_frame() {
    let p = write("mixed.pcapng", &pcapng_le(&mixed_frames()));
    let o = lqd(&["decode", "--pcap", p.to_str().unwrap()]);
    check(&o, 1, &mixed_stdout(), MIXED_SUMMARY);
}

#[test]
fn json_lines_and_exit_0_when_every_lq_datagram_is_accepted() {
    let frames: Vec<_> = mixed_frames()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| ![1, 6].contains(i))
        .map(|(_, f)| f)
        .collect();
    let p = write("good.pcapng", &pcapng_le(&frames));
    let o = lqd(&["decode", "--json-lines", "--pcap", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        text(&o.stderr),
        "5 frames: 3 accepted, 0 discarded, 2 not LQ\n"
    );
    let out = text(&o.stdout);
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Each record: the frame number, the source address and the RFC 7951 document.
    let member = "ietf-lq-telemetry:lq-advertisement";
    let docs: Vec<serde_json::Value> = records
        .iter()
        .map(|r| serde_json::json!({ member: r[member] }))
        .collect();
    let g1: serde_json::Value = serde_json::from_str(GOLDEN_1).unwrap();
    let g2: serde_json::Value = serde_json::from_str(GOLDEN_2).unwrap();
    assert_eq!(docs, [g1.clone(), g2, g1]);
    let frames: Vec<u64> = records
        .iter()
        .map(|r| r["frame"].as_u64().unwrap())
        .collect();
    assert_eq!(frames, [1, 2, 3]);
    assert!(records.iter().all(|r| r["source"].is_string()), "{out}");
}

/// `--json-lines` records carry the capture time and the source address as tshark reads
/// them from the same files (classic pcap in microseconds and nanoseconds, pcapng), and
/// every line is JSON (the summary goes to stderr).
#[test]
fn json_lines_records_carry_the_time_and_source_tshark_reads() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pcap_decode");
    for name in [
        "spec-vectors.pcapng",
        "spec-vectors-le-micros.pcap",
        "spec-vectors-be-nanos.pcap",
    ] {
        let path = corpus.join(name);
        let p = path.to_str().unwrap();
        let o = lqd(&["decode", "--json-lines", "--pcap", p]);
        let records: Vec<serde_json::Value> = text(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}: {l}")))
            .collect();
        let shark = std::process::Command::new("tshark")
            .args(["-r", p, "-T", "fields", "-E", "separator=;"])
            .args([
                "-e",
                "frame.number",
                "-e",
                "frame.time_epoch",
                "-e",
                "ip.src",
                "-e",
                "ipv6.src",
            ])
            .output()
            .expect("tshark (cargo xtask setup installs it)");
        let rows: Vec<Vec<String>> = String::from_utf8_lossy(&shark.stdout)
            .lines()
            .map(|l| l.split(';').map(str::to_owned).collect())
            .collect();
        assert_eq!(records.len(), rows.len(), "{name}");
        for (r, row) in records.iter().zip(&rows) {
            assert_eq!(r["frame"].to_string(), row[0], "{name}");
            let source = if row[2].is_empty() { &row[3] } else { &row[2] };
            assert_eq!(r["source"].as_str(), Some(source.as_str()), "{name}: {r}");
            // tshark prints seconds since the epoch with nine decimals; a block without a
            // time (pcapng's Simple Packet Block) has none in either.
            match r["time"].as_str() {
                Some(t) => {
                    let ours = parse_rfc3339_ns(t);
                    let theirs: f64 = row[1].parse().unwrap();
                    assert!(
                        (ours as f64 / 1e9 - theirs).abs() < 1e-6,
                        "{name}: {t} vs {}",
                        row[1]
                    );
                }
                None => assert!(
                    row[1].is_empty() || row[1] == "0.000000000",
                    "{name}: {row:?}"
                ),
            }
        }
    }
}

/// ns since the epoch of `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (days from civil, H. Hinnant).
fn parse_rfc3339_ns(t: &str) -> u64 {
    let n = |a: usize, b: usize| t[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19);
    secs as u64 * 1_000_000_000 + t[20..29].parse::<u64>().unwrap()
}

#[test]
fn port_option_and_as_setting_apply_to_frames() {
    let p = write("mixed-port.pcap", &pcap_le_micros(1, &mixed_frames()));
    let p = p.to_str().unwrap();
    // Only frame 5 goes to port 53; its TTL is 255 and it carries vector 1.
    check(
        &lqd(&["decode", "--pcap", p, "--port", "53"]),
        0,
        GOLDEN_1,
        "7 frames: 1 accepted, 0 discarded, 6 not LQ\n",
    );
    check(
        &lqd(&["decode", "--pcap", p, "--as-qualified", "false"]),
        1,
        &format!(
            "{GOLDEN_1}frame 2: discarded: bad_ttl\nframe 3: discarded: as_mismatch\n\
             {GOLDEN_1}frame 7: discarded: truncated\n"
        ),
        "7 frames: 2 accepted, 3 discarded, 2 not LQ\n",
    );
}

#[test]
fn empty_capture_is_exit_0() {
    let p = write("empty.pcap", &pcap_le_micros(1, &[]));
    check(
        &lqd(&["decode", "--pcap", p.to_str().unwrap()]),
        0,
        "",
        "0 frames: 0 accepted, 0 discarded, 0 not LQ\n",
    );
}

#[test]
fn file_errors_exit_2_naming_the_file() {
    let frames = mixed_frames();
    let whole = pcap_le_micros(1, &frames);
    let cases = [
        (
            "cooked.pcap",
            pcap_le_micros(113, &frames),
            "frame 1: link type 113 (Linux cooked capture v1) is not supported",
        ),
        (
            "cut.pcap",
            whole[..whole.len() - 3].to_vec(),
            "truncated: the file ends inside the pcap record",
        ),
        (
            "text.pcap",
            b"hello world".to_vec(),
            "not a pcap or pcapng file",
        ),
        ("empty-file.pcap", Vec::new(), "the file is empty"),
    ];
    for (name, bytes, needle) in cases {
        let p = write(name, &bytes);
        let o = lqd(&["decode", "--pcap", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        assert!(o.stdout.is_empty(), "{name}");
        let err = text(&o.stderr);
        assert!(
            err.starts_with(&format!("lqd decode: capture file {}: ", p.display())),
            "{err}"
        );
        assert!(err.contains(needle), "{name}: {err}");
    }
}

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// A hex dump in the form text2pcap reads: one packet per offset run starting at 0000.
fn od_dump(packets: &[&[u8]]) -> String {
    let mut s = String::new();
    for p in packets {
        for (i, line) in p.chunks(16).enumerate() {
            s.push_str(&format!("{:06x}", i * 16));
            for b in line {
                s.push_str(&format!(" {b:02x}"));
            }
            s.push('\n');
        }
    }
    s
}

#[test]
fn text2pcap_captures_decode() {
    let Some(text2pcap) = tool("text2pcap") else {
        println!("note: text2pcap not installed; skipping the check against Wireshark's writer");
        return;
    };
    let v1 = unhex(VECTOR_1);
    let v2 = unhex(VECTOR_2);
    let dump = tmp("t2p.txt");
    std::fs::write(&dump, od_dump(&[&v1, &v2])).unwrap();
    // text2pcap adds Ethernet + IPv4 (TTL 255) or IPv6 (hop limit 32: bad_ttl) + UDP
    // headers.
    let accepted = (
        0,
        format!("{GOLDEN_1}{GOLDEN_2}"),
        "2 frames: 2 accepted, 0 discarded, 0 not LQ\n",
    );
    let bad_ttl = (
        1,
        "frame 1: discarded: bad_ttl\nframe 2: discarded: bad_ttl\n".to_owned(),
        "2 frames: 0 accepted, 2 discarded, 0 not LQ\n",
    );
    for (format, ip, addrs, want) in [
        ("pcapng", "-4", "10.0.0.2,224.0.0.1", &accepted),
        ("pcap", "-4", "10.0.0.2,224.0.0.1", &accepted),
        ("pcapng", "-6", "fe80::2,ff02::1", &bad_ttl),
    ] {
        let out = tmp(&format!("t2p{ip}.{format}"));
        let o = Command::new(&text2pcap)
            .args(["-q", "-F", format, ip, addrs, "-u", "52525,52525"])
            .arg(&dump)
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "text2pcap failed: {}", text(&o.stderr));
        let o = lqd(&["decode", "--pcap", out.to_str().unwrap()]);
        check(&o, want.0, &want.1, want.2);
    }
}

#[test]
fn tshark_reads_the_files_this_test_writes() {
    let Some(tshark) = tool("tshark") else {
        println!("note: tshark not installed; skipping the check of the test's own writers");
        return;
    };
    for (name, bytes) in [
        ("tshark.pcap", pcap_le_micros(1, &mixed_frames())),
        ("tshark.pcapng", pcapng_le(&mixed_frames())),
    ] {
        let p = write(name, &bytes);
        let o = Command::new(&tshark)
            .args(["-n", "-r"])
            .arg(&p)
            .args(["-T", "fields", "-e", "frame.number", "-e", "udp.dstport"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let lines: Vec<String> = text(&o.stdout).lines().map(str::to_owned).collect();
        assert_eq!(
            lines,
            [
                "1\t52525", "2\t52525", "3\t52525", "4\t52525", "5\t53", "6\t52525", "7\t52525"
            ],
            "{name}"
        );
    }
}
