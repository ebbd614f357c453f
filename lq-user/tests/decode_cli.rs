//! `lqd decode HEX`: the built binary against the golden files of the spec's test vectors.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::process::{Command, Output};

const VECTOR_1: &str = "160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000";
const VECTOR_2: &str =
    "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";
const GOLDEN_1: &str = include_str!("golden/vector1.json");
const GOLDEN_2: &str = include_str!("golden/vector2.json");

fn lqd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lqd"))
        .args(args)
        .output()
        .expect("run lqd")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
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
fn vectors_match_the_golden_files() {
    check(&lqd(&["decode", VECTOR_1]), 0, GOLDEN_1, "");
    check(&lqd(&["decode", VECTOR_2]), 0, GOLDEN_2, "");
}

#[test]
fn golden_files_are_the_structure_and_json_lines_is_the_same_document() {
    for (v, golden) in [(VECTOR_1, GOLDEN_1), (VECTOR_2, GOLDEN_2)] {
        let o = lqd(&["decode", "--json-lines", v]);
        assert_eq!(o.status.code(), Some(0));
        let out = text(&o.stdout);
        assert_eq!(out.lines().count(), 1);
        let got: serde_json::Value = serde_json::from_str(&out).unwrap();
        let want: serde_json::Value = serde_json::from_str(golden).unwrap();
        assert_eq!(got, want);
    }
    // Vector 2's timestamp 0xfffffff0 does not fit yang:milliseconds32.
    assert!(!GOLDEN_2.contains("timestamp-ms"));
}

#[test]
fn whitespace_and_0x_are_ignored_and_the_payload_may_be_split() {
    let spaced: String = VECTOR_1
        .as_bytes()
        .chunks(8)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(" \n\t");
    check(&lqd(&["decode", &format!("0x{spaced}")]), 0, GOLDEN_1, "");
    let (a, b) = VECTOR_2.split_at(32);
    check(&lqd(&["decode", &format!("0X{a}"), b]), 0, GOLDEN_2, "");
}

#[test]
fn discarded_payloads_exit_1_with_the_reason() {
    let mut bad_version = VECTOR_1.to_owned();
    bad_version.replace_range(0..1, "2");
    check(
        &lqd(&["decode", &bad_version]),
        1,
        "discarded: bad_version\n",
        "",
    );
    check(
        &lqd(&["decode", &VECTOR_1[..30]]),
        1,
        "discarded: truncated\n",
        "",
    );
    check(
        &lqd(&["decode", &VECTOR_1[..VECTOR_1.len() - 2]]),
        1,
        "discarded: bad_length\n",
        "",
    );
    let mut bad_mode = VECTOR_1.to_owned();
    bad_mode.replace_range(2..4, "02");
    check(&lqd(&["decode", &bad_mode]), 1, "discarded: bad_mode\n", "");
    // Entry 1's available bandwidth becomes -1.0.
    let mut bad_value = VECTOR_1.to_owned();
    bad_value.replace_range(48..56, "bf800000");
    check(
        &lqd(&["decode", &bad_value]),
        1,
        "discarded: bad_value\n",
        "",
    );
}

#[test]
fn as_qualification_and_plan() {
    check(
        &lqd(&["decode", "--as-qualified", "false", VECTOR_2]),
        1,
        "discarded: as_mismatch\n",
        "",
    );
    check(
        &lqd(&["decode", "--as-qualified", "true", VECTOR_1]),
        1,
        "discarded: as_mismatch\n",
        "",
    );
    check(
        &lqd(&[
            "decode",
            "--as-qualified",
            "true",
            "--as-plan",
            "65000-65100",
            VECTOR_2,
        ]),
        1,
        "discarded: as_mismatch\n",
        "",
    );
    // Node AS in the plan, remote AS 65001 not: accepted, and the entry is reported.
    check(
        &lqd(&[
            "decode",
            "--as-qualified",
            "true",
            "--as-plan",
            "65002-65100,4200000001",
            VECTOR_2,
        ]),
        0,
        GOLDEN_2,
        "entry 1 (remote-as 65001): outside the AS plan, a receiver would not store it \
         (as_mismatch_entry)\n",
    );
    check(
        &lqd(&[
            "decode",
            "--as-qualified",
            "true",
            "--as-plan",
            "65000-65100,4200000001",
            VECTOR_2,
        ]),
        0,
        GOLDEN_2,
        "",
    );
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    for (args, needle) in [
        (
            &["decode", "16x"][..],
            "'x' at position 3 is not a hex digit",
        ),
        (&["decode", "160"], "odd number of hex digits (3)"),
        (&["decode", " "], "no hex digits"),
        (&["decode", "--as-plan", "1-2", VECTOR_1], "--as-qualified"),
        (&["decode", "--port", "9", VECTOR_1], "--port"),
        (
            &[
                "decode",
                "--as-qualified",
                "true",
                "--as-plan",
                "9-1",
                VECTOR_1,
            ],
            "backwards",
        ),
        (&["decode"], "required"),
        (
            &["decode", "--pcap", "/nonexistent/lq.pcap"],
            "cannot read capture file /nonexistent/lq.pcap: No such file",
        ),
    ] {
        let o = lqd(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn help_teaches_the_checks_the_example_and_the_exit_codes() {
    let o = lqd(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let top = text(&o.stdout);
    assert!(top.starts_with("lqd, the lq daemon"), "{top}");
    assert!(top.contains("decode"));

    let o = lqd(&["decode", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = text(&o.stdout);
    for needle in [
        "bad_ttl",
        "truncated",
        "bad_version",
        "bad_mode",
        "bad_length",
        "as_mismatch",
        "bad_value",
        "stale_seq",
        "NOT checked",
        VECTOR_1,
        "Exit status",
        "frame N: discarded: REASON",
        "N frames: A accepted, D discarded, P not LQ",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
    // The example's output lines are the real output, in order (elisions aside).
    let start = help.find("  {\n").expect("example output");
    let mut golden = GOLDEN_1.lines().map(str::trim);
    for line in help[start..]
        .lines()
        .take_while(|l| !l.is_empty())
        .map(str::trim)
        .filter(|l| !l.contains("..."))
    {
        assert!(
            golden.any(|g| g == line),
            "help example line {line:?} is not in the output of vector 1, in order"
        );
    }
}

/// docs/wire.md's test vectors are the spec's (spec/lq-udp-wire.md, in the repository) and
/// decode to the JSON the page shows.
#[test]
fn the_wire_page_shows_the_spec_vectors_as_lqd_decodes_them() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/wire.md")).unwrap();
    let spec = std::fs::read_to_string(root.join("spec/lq-udp-wire.md")).unwrap();
    let blocks = |fence: &str| -> Vec<String> {
        page.split(&format!("```{fence}\n"))
            .skip(1)
            .map(|b| b.split("```").next().unwrap().to_owned())
            .collect()
    };
    let hex = blocks("hex");
    let json = blocks("json");
    assert_eq!(hex.len(), 2, "two vectors in docs/wire.md");
    assert_eq!(json.len(), 2);
    for (h, want) in [VECTOR_1, VECTOR_2].iter().zip(&hex) {
        assert_eq!(want.trim(), *h, "docs/wire.md");
        assert!(spec.contains(h), "spec/lq-udp-wire.md lacks {h}");
    }
    for (h, doc) in hex.iter().zip(&json) {
        let o = lqd(&["decode", h.trim()]);
        assert_eq!(o.status.code(), Some(0));
        let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let want: serde_json::Value = serde_json::from_str(doc).unwrap();
        assert_eq!(got, want);
    }
}
