//! What an operator runs before any fabric exists (issue 43): every example passes
//! `lqd check-config --strict`, its `--json` is pure JSON (checked by jq, an independent
//! parser), every subcommand's `--help` works and says what the views need, and
//! `lqd cleanup` / `lqd reload` without a daemon fail or answer cleanly.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Output, Stdio},
};

fn lqd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lqd"))
        .args(args)
        .output()
        .expect("run lqd")
}

/// `jq -e .` on `json`: every value parses and none is false or null.
fn jq(json: &[u8]) -> String {
    let mut child = Command::new("jq")
        .args(["-e", "."])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jq (cargo xtask setup installs it)");
    child.stdin.take().unwrap().write_all(json).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "jq refused:\n{}\n{}",
        String::from_utf8_lossy(json),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_example_passes_check_config_strictly_and_its_json_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let p = path.to_str().unwrap();
        let text = lqd(&["check-config", "--strict", p]);
        assert!(
            text.status.success(),
            "{p}: {}{}",
            String::from_utf8_lossy(&text.stdout),
            String::from_utf8_lossy(&text.stderr)
        );
        let json = lqd(&["check-config", "--strict", "--json", p]);
        assert!(json.status.success(), "{p}");
        assert!(
            json.stderr.is_empty(),
            "{p}: diagnostics belong on stderr only when there are some"
        );
        jq(&json.stdout);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["ok"], true, "{p}");
        assert!(
            v["effective"]["lq-telemetry"]["notify-interval-ms"].is_u64(),
            "{p}: {v}"
        );
        n += 1;
    }
    assert!(n >= 5, "only {n} examples");
}

#[test]
fn warnings_are_printed_with_their_line_and_strict_makes_them_errors() {
    let dir = std::env::temp_dir().join(format!("lq-operator-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("leaf.toml");
    std::fs::write(
        &file,
        "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"eth1\"]\n\n[[uplink]]\nid = 1\nspine = \"10.0.0.1\"\ninterface = \"eth2\"\ngateway = \"10.1.1.1\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let lenient = lqd(&["check-config", f]);
    let out = String::from_utf8_lossy(&lenient.stdout);
    assert!(lenient.status.success(), "{out}");
    assert!(
        out.contains(&format!("{f}:11:13: warning: [[uplink]] id = 1: interface \"eth2\" is not in [receiver] interfaces")),
        "{out}"
    );
    let strict = lqd(&["check-config", "--strict", f]);
    assert_eq!(strict.status.code(), Some(1));
    let json = lqd(&["check-config", "--strict", "--json", f]);
    let v: serde_json::Value = serde_json::from_str(&jq(&json.stdout)).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["warnings"][0]["line"], 11);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check-config` says which uplinks authenticate and how (issue 39), reading the key
/// chain as lqd would.
#[test]
fn check_config_names_each_uplinks_authentication() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("lq-operator-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        "[[key]]\nkey-id = 1\ncrypto-algorithm = \"hmac-sha-256\"\nkey-string = \"k\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.join("leaf.toml");
    std::fs::write(
        &file,
        format!(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"eth1\", \"eth2\", \"eth3\"]\nauthentication = \"required\"\nkey-chain = \"{}\"\n\n[receiver.interface-authentication]\neth2 = \"accept-unauthenticated\"\neth3 = \"none\"\n",
            keys.display()
        ),
    )
    .unwrap();
    let out = lqd(&["check-config", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "authentication: eth1 required, eth2 accept-unauthenticated; key chain {}",
            keys.display()
        )),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_subcommand_teaches_its_use() {
    for sub in [
        &["decode"][..],
        &["run"],
        &["show"],
        &["monitor"],
        &["sim"],
        &["ipfix", "collect"],
        &["check-config"],
        &["reload"],
        &["cleanup"],
        &["completions"],
        &["man"],
        &["instances"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = lqd(&args);
        assert!(o.status.success(), "{args:?}");
        assert!(!o.stdout.is_empty(), "{args:?}");
    }
    let show = String::from_utf8(lqd(&["show", "--help"]).stdout).unwrap();
    for view in ["uplinks", "status", "pfc", "state", "weights"] {
        assert!(
            show.contains(&format!("  {view} ")),
            "show --help omits {view}:\n{show}"
        );
    }
    let collect = String::from_utf8(lqd(&["ipfix", "collect", "--help"]).stdout).unwrap();
    assert!(collect.contains("--tcp"), "{collect}");
}

#[test]
fn reload_and_cleanup_without_a_daemon_say_what_is_wrong() {
    let reload = lqd(&["reload", "--instance", "no-such-instance-here"]);
    assert_eq!(reload.status.code(), Some(1));
    let err = String::from_utf8_lossy(&reload.stderr);
    assert!(
        err.contains("is lqd running with this --instance?"),
        "{err}"
    );
    let cleanup = lqd(&[
        "cleanup",
        "--instance",
        "no-such-instance-here",
        "--pin-dir",
        "/nonexistent/lq-pins",
        "--dry-run",
        "--json",
    ]);
    assert!(
        cleanup.status.success(),
        "{}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&jq(&cleanup.stdout)).unwrap();
    assert_eq!(v["removed"], serde_json::json!([]));
}

#[test]
fn fatal_errors_follow_the_log_format_and_logs_carry_no_colour_off_a_terminal() {
    let json = lqd(&[
        "--log-format",
        "json",
        "check-config",
        "/nonexistent/lq.toml",
    ]);
    assert_eq!(json.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_str(&jq(&json.stderr)).unwrap();
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        line["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/lq.toml"),
        "{line}"
    );
    // An info log line (no daemon answers) and the error, to a pipe: no escape codes.
    let text = lqd(&["show", "neighbors", "--instance", "no-such-instance-here"]);
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(err.contains("no daemon answer"), "{err}");
    assert!(!err.contains('\u{1b}'), "colour codes in {err:?}");
}

#[test]
fn decode_outputs_parse_with_jq_line_by_line() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pcap_decode");
    for name in ["spec-vectors.pcapng", "spec-vectors-le-micros.pcap"] {
        let p = corpus.join(name);
        let o = lqd(&["decode", "--json-lines", "--pcap", p.to_str().unwrap()]);
        assert!(o.status.success(), "{name}");
        let lines = jq(&o.stdout);
        assert!(lines.contains("\"frame\""), "{name}: {lines}");
    }
    let vector = "18000001c0000201fffffff000011400fa56ea01c0000209000000010000000000e000000000fde9";
    jq(&lqd(&["decode", vector]).stdout);
    jq(&lqd(&["decode", "--json-lines", vector]).stdout);
}
