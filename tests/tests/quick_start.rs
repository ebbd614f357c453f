//! The operator guide's quick start, followed as written (issue 43): its two configuration
//! files pass `lqd check-config --strict`, and run on the veth pair the guide creates (in
//! namespaces of this test's own), the leaf hears the spine: `show neighbors` has it
//! active and `show paths` holds its entry for the link, with the columns the guide shows.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{process::Command, time::Duration};

use lq_tests::{
    daemon::{Lqd, lqd_bin},
    netns::{NetNs, veth_pair},
    poll::poll_until,
    require_root,
};

/// The guide's quick start section: (its toml blocks in order, its text).
fn quick_start() -> (Vec<String>, String) {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md"),
    )
    .unwrap();
    let start = guide
        .find("## Quick start")
        .expect("docs/operator-guide.md has a Quick start section");
    let section = &guide[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let blocks = section
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned())
        .collect();
    (blocks, section.to_owned())
}

fn lqd_text(args: &[&str]) -> String {
    let o = Command::new(lqd_bin().unwrap())
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "lqd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_quick_start_runs_as_written() {
    require_root();
    let (blocks, section) = quick_start();
    assert_eq!(blocks.len(), 2, "a spine and a leaf configuration");
    let (spine_cfg, leaf_cfg) = (&blocks[0], &blocks[1]);
    assert!(spine_cfg.starts_with("# qs-spine.toml"), "{spine_cfg}");
    assert!(leaf_cfg.starts_with("# qs-leaf.toml"), "{leaf_cfg}");
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-quick-start"));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [("qs-spine.toml", spine_cfg), ("qs-leaf.toml", leaf_cfg)] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        lqd_text(&["check-config", "--strict", path.to_str().unwrap()]);
    }
    // The guide's veth pair and addresses.
    assert!(section.contains("ip link add s1 netns qs-spine type veth peer name l1 netns qs-leaf"));
    assert!(section.contains("10.9.0.1/24 dev s1") && section.contains("10.9.0.2/24 dev l1"));
    let s = NetNs::new("lqt-qss").unwrap();
    let l = NetNs::new("lqt-qsl").unwrap();
    veth_pair(&s, "s1", "10.9.0.1/24", &l, "l1", "10.9.0.2/24").unwrap();
    let spine = Lqd::start(&s, spine_cfg).unwrap();
    let leaf = Lqd::start(&l, leaf_cfg).unwrap();
    poll_until(
        "the leaf to hear the spine",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let n = leaf.show("neighbors").map_err(|e| e.to_string())?;
            let p = leaf.show("paths").map_err(|e| e.to_string())?;
            let active = n[0]["node-id"] == "10.0.0.2" && n[0]["state"] == "active";
            let entry = p.as_array().is_some_and(|a| {
                a.iter()
                    .any(|e| e["remote-node-id"] == "10.0.1.1" && e["lqs"].as_u64() >= Some(240))
            });
            if active && entry {
                Ok(())
            } else {
                Err(format!("{n}\n{p}"))
            }
        },
        |e| format!("{e}\n{}", leaf.log_text()),
    )
    .unwrap();
    // The text views the guide shows: the same columns.
    let neighbors = lqd_text(&["show", "neighbors", "--instance", &leaf.instance]);
    let paths = lqd_text(&["show", "paths", "--instance", &leaf.instance]);
    eprintln!("{neighbors}\n{paths}");
    for (view, text) in [("neighbors", &neighbors), ("paths", &paths)] {
        let header = text
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>();
        assert!(
            section
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == header),
            "the guide's `show {view}` header differs from lqd's: {header:?}"
        );
    }
    let counters = leaf.show("counters").unwrap();
    assert!(counters["accepted"].as_u64() > Some(0), "{counters}");
    // Every JSON output parses with jq, an independent parser, line by line (`jq -e`
    // fails on a line that is not JSON, and on false or null).
    let jq = |what: &str, json: &[u8]| {
        use std::io::Write as _;
        let mut child = Command::new("jq")
            .args(["-e", "."])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("jq (cargo xtask setup installs it)");
        child.stdin.take().unwrap().write_all(json).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && !json.is_empty(),
            "{what}: jq refused {}:\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(json)
        );
    };
    for (instance, views) in [
        (
            &leaf.instance,
            &[
                "paths",
                "counters",
                "neighbors",
                "weights",
                "uplinks",
                "state",
                "status",
            ][..],
        ),
        (&spine.instance, &["local", "state", "status"][..]),
    ] {
        for view in views {
            let o = Command::new(lqd_bin().unwrap())
                .args(["show", view, "--json", "--instance", instance])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "show {view}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            jq(&format!("show {view} --json"), &o.stdout);
        }
    }
    // `lqd instances` lists both, running, with their roles.
    let o = Command::new(lqd_bin().unwrap())
        .args(["instances", "--json"])
        .output()
        .unwrap();
    jq("instances --json", &o.stdout);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for (instance, role) in [
        (&leaf.instance, "load-balancer"),
        (&spine.instance, "helper"),
    ] {
        let me = all
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["instance"] == instance.as_str())
            .unwrap_or_else(|| panic!("{instance} not listed: {all}"));
        assert_eq!(me["running"], true, "{me}");
        assert_eq!(me["status"]["role"], role, "{me}");
    }
    let sim = Command::new(lqd_bin().unwrap())
        .args(["sim", "appendix-b", "--until-ms", "100", "--summary"])
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .unwrap();
    assert!(sim.status.success());
    jq("sim lines", &sim.stdout);
    jq("sim summary", &sim.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
