//! The gNMI northbound (issue 40; seed 003 sections 4.3 and 12.2), judged by pygnmi.
//!
//! A leaf in a namespace runs lqd with `[gnmi]` (TLS 1.3, client certificates from a test
//! CA made here with rcgen) and two spines of ours advertising a remote leaf. pygnmi, in
//! the spines' namespace, reads it: Capabilities, Get (validated with yanglint), Subscribe
//! ONCE, POLL and STREAM (SAMPLE and ON_CHANGE while a spine's LQS drops and the weights
//! move), and the read rules both ways: the granted client reads `/neighbors`, a client no
//! rule names is refused it (PERMISSION_DENIED) and reads the root without it, a client
//! without a certificate is refused (UNAUTHENTICATED), and one whose certificate another
//! CA signed never gets a connection. None of the refused gets one leaf of data. The
//! Prometheus endpoint under the same TLS and `[[metrics.client]]` rules, scraped by
//! Python's ssl and the Prometheus reference parser: the granted client reads the weight
//! families, another the rest only, and one without a certificate (401), of another CA or
//! in plain HTTP nothing. A reload (SIGHUP) that withdraws a grant closes the running
//! stream that used it with PERMISSION_DENIED, and a new metrics grant applies at once.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    time::Duration,
};

use lq_tests::{
    daemon::Lqd,
    gnmi::{PyGnmi, leaf, make_ca, two_spines},
    netns::{NetNs, veth_pair},
    poll::poll_until,
    require_root, yanglint_data,
};
use serde_json::Value;

const LISTEN: &str = "10.1.1.2:9339";
const METRICS: &str = "10.1.1.2:9464";

/// One HTTPS scrape of the metrics endpoint by Python's ssl and http.client, the metric
/// families parsed by the Prometheus reference client's parser: `{"status", "families"}`,
/// or `{"error"}` when the connection failed (a refused handshake).
const SCRAPE: &str = r#"
import http.client, json, ssl, sys
from prometheus_client.parser import text_string_to_metric_families
host, port, ca, cert, key, plain = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6] == "1"
try:
    if plain:
        c = http.client.HTTPConnection(host, port, timeout=5)
    else:
        ctx = ssl.create_default_context(cafile=ca)
        ctx.check_hostname = False
        if cert:
            ctx.load_cert_chain(cert, key)
        c = http.client.HTTPSConnection(host, port, context=ctx, timeout=5)
    c.request("GET", "/metrics")
    r = c.getresponse()
    body = r.read().decode()
    fams = {}
    if r.status == 200:
        for f in text_string_to_metric_families(body):
            for s in f.samples:
                fams.setdefault(s.name, []).append([s.labels, s.value])
    print(json.dumps({"status": r.status, "families": fams, "body": body[:200]}))
except Exception as e:
    print(json.dumps({"error": repr(e)}))
"#;

/// pygnmi's answer, or the error it reported; a client that fails otherwise fails the test.
trait Query {
    fn q(&self, args: &[&str]) -> Result<Value, Value>;
}

impl Query for PyGnmi<'_> {
    fn q(&self, args: &[&str]) -> Result<Value, Value> {
        self.run(args).unwrap()
    }
}

/// The value of the first update of a pygnmi Get answer.
fn get_val(v: &Value) -> &Value {
    &v["notification"][0]["update"][0]["val"]
}

/// S2's kernel weight in a weighted-ecmp value (the container).
fn s2_weight(w: &Value) -> Option<u64> {
    w["group"][0]["member"]
        .as_array()?
        .iter()
        .find(|m| m["uplink-id"] == 2)?["kernel-weight"]
        .as_u64()
}

#[test]
fn pygnmi_reads_and_subscribes_to_a_live_leaf_under_mutual_tls_and_read_rules() {
    require_root();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lq-gnmi"));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_pem, ca) = make_ca("lq test CA").unwrap();
    let (_, other_ca) = make_ca("another CA").unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let ip: IpAddr = "10.1.1.2".parse().unwrap();
    let (server_cert, server_key) = leaf(&dir, "server", &ca, "leaf.test", Some(ip), true).unwrap();
    let collector_identity = leaf(&dir, "collector", &ca, "collector.test", None, false).unwrap();
    let viewer_identity = leaf(&dir, "viewer", &ca, "viewer.test", None, false).unwrap();
    let stranger_identity =
        leaf(&dir, "stranger", &other_ca, "collector.test", None, false).unwrap();

    let s = NetNs::new("lqt-gs").unwrap();
    let l = NetNs::new("lqt-gl").unwrap();
    veth_pair(&s, "s1", "10.1.1.1/24", &l, "up1", "10.1.1.2/24").unwrap();
    veth_pair(&s, "s2", "10.1.2.1/24", &l, "up2", "10.1.2.2/24").unwrap();
    let cfg = format!(
        r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["up1", "up2"]

[[uplink]]
id = 1
spine = "10.0.0.1"
interface = "up1"
gateway = "10.1.1.1"

[[uplink]]
id = 2
spine = "10.0.0.2"
interface = "up2"
gateway = "10.1.2.1"

[[destination]]
prefix = "10.4.0.0/24"
remote-node = "10.0.1.4"

[gnmi]
listen = "{LISTEN}"
certificate = "{0}"
private-key = "{1}"
client-ca = "{2}"

[[gnmi.client]]
name = "collector.test"
read = ["/lq-telemetry/neighbors", "/ietf-lq-telemetry:lq-telemetry/weighted-ecmp"]

[metrics]
listen = "{METRICS}"
certificate = "{0}"
private-key = "{1}"
client-ca = "{2}"

[[metrics.client]]
name = "collector.test"
read = ["/lq-telemetry/weighted-ecmp"]
"#,
        server_cert.display(),
        server_key.display(),
        ca_file.display()
    );
    let lqs = Arc::new([AtomicU8::new(230), AtomicU8::new(230)]);
    let stop = Arc::new(AtomicBool::new(false));
    let lqd = Lqd::start(&l, &cfg).unwrap();
    two_spines(&s, lqs.clone(), stop.clone()).unwrap();
    poll_until(
        "both spines in the group",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let w = lqd.show("weights").map_err(|e| e.to_string())?;
            let n = w["groups"][0]["members"].as_array().map_or(0, Vec::len);
            if n == 2 { Ok(()) } else { Err(w.to_string()) }
        },
        |w| format!("{w}\n{}", lqd.log_text()),
    )
    .unwrap();

    let granted = PyGnmi {
        ns: &s,
        target: LISTEN.into(),
        server_name: "leaf.test".into(),
        ca: Some(ca_file.clone()),
        identity: Some(collector_identity.clone()),
    };
    let ungranted = PyGnmi {
        ns: &s,
        target: LISTEN.into(),
        server_name: "leaf.test".into(),
        ca: Some(ca_file.clone()),
        identity: Some(viewer_identity.clone()),
    };

    // Capabilities: the seed's module and lq's augment, with their revisions.
    let caps = granted.q(&["caps"]).unwrap();
    let models = caps["supported_models"].as_array().unwrap();
    for (name, rev) in [
        ("ietf-lq-telemetry", "2026-07-07"),
        ("lq-weighted-ecmp", "2026-12-05"),
    ] {
        assert!(
            models
                .iter()
                .any(|m| m["name"] == name && m["version"] == rev),
            "{name}@{rev} missing: {caps}"
        );
    }
    assert!(
        caps["supported_encodings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "json_ietf"),
        "{caps}"
    );
    assert_eq!(caps["gnmi_version"], "0.10.0", "{caps}");

    // Get of the whole tree: valid against the YANG modules, neighbors included.
    let root = granted
        .q(&["get", "/ietf-lq-telemetry:lq-telemetry"])
        .unwrap();
    let tree = get_val(&root).clone();
    let doc = serde_json::json!({ "ietf-lq-telemetry:lq-telemetry": tree });
    yanglint_data(&doc).unwrap_or_else(|e| panic!("yanglint refused the Get: {e}\n{doc:#}"));
    assert_eq!(
        tree["neighbors"]["neighbor"].as_array().map(Vec::len),
        Some(2),
        "{tree:#}"
    );
    // A keyed path.
    let one = granted
        .q(&[
            "get",
            "/ietf-lq-telemetry:lq-telemetry/neighbors/neighbor[node-as=0][node-id=10.0.0.2]",
        ])
        .unwrap();
    assert_eq!(get_val(&one)["node-id"], "10.0.0.2", "{one}");

    // A client no rule names: /neighbors refused with nothing of it, and the root
    // without the sensitive subtrees.
    let denied = ungranted
        .q(&["get", "/ietf-lq-telemetry:lq-telemetry/neighbors"])
        .unwrap_err();
    assert_eq!(denied["error"], "PERMISSION_DENIED", "{denied}");
    assert!(!denied.to_string().contains("10.0.0.1"), "{denied}");
    let pruned = ungranted
        .q(&["get", "/ietf-lq-telemetry:lq-telemetry"])
        .unwrap();
    let pruned = get_val(&pruned);
    assert_eq!(pruned["role"], "load-balancer", "{pruned}");
    for s in [
        "neighbors",
        "local",
        "lq-weighted-ecmp:weighted-ecmp",
        "weighted-ecmp",
    ] {
        assert!(
            pruned.get(s).is_none(),
            "{s} shown to an ungranted client: {pruned}"
        );
    }

    // No certificate: UNAUTHENTICATED. A certificate of another CA: no connection.
    let nocert = PyGnmi {
        ns: &s,
        target: LISTEN.into(),
        server_name: "leaf.test".into(),
        ca: Some(ca_file.clone()),
        identity: None,
    };
    let e = nocert
        .q(&["nocert", "/ietf-lq-telemetry:lq-telemetry"])
        .unwrap_err();
    assert_eq!(e["error"], "UNAUTHENTICATED", "{e}");
    let foreign = PyGnmi {
        ns: &s,
        target: LISTEN.into(),
        server_name: "leaf.test".into(),
        ca: Some(ca_file.clone()),
        identity: Some(stranger_identity.clone()),
    };
    let e = foreign
        .q(&["--timeout", "2", "get", "/ietf-lq-telemetry:lq-telemetry"])
        .unwrap_err();
    assert!(
        e["error"] == "UNAVAILABLE" || e["error"] == "UNAUTHENTICATED",
        "{e}"
    );

    // Subscribe ONCE: the value, then sync_response.
    let once = granted
        .q(&["once", "/ietf-lq-telemetry:lq-telemetry/weighted-ecmp"])
        .unwrap();
    let once = once.as_array().unwrap();
    assert!(
        once.last()
            .is_some_and(|m| m.get("sync_response").is_some()),
        "{once:?}"
    );
    assert!(once.iter().any(|m| m.get("update").is_some()), "{once:?}");

    // POLL: the initial sync and two polls, each ending with a sync.
    let poll = granted
        .q(&["poll", "/ietf-lq-telemetry:lq-telemetry/role", "2"])
        .unwrap();
    assert_eq!(poll.as_array().map(Vec::len), Some(3), "{poll}");

    // STREAM SAMPLE every 100 ms for 1.5 s.
    let sample = granted
        .q(&[
            "stream",
            "/ietf-lq-telemetry:lq-telemetry/neighbors",
            "sample",
            "100",
            "1.5",
        ])
        .unwrap();
    let n = sample.as_array().map_or(1, Vec::len);
    assert!(
        (8..=20).contains(&n),
        "{n} samples in 1.5 s at 100 ms: {sample}"
    );
    println!("  ok: {n} SAMPLE updates in 1.5 s at 100 ms");

    // STREAM ON_CHANGE on the weights while S2's LQS drops: an update shows S2's kernel
    // weight below its first value.
    let flip = {
        let lqs = lqs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1200));
            lqs[1].store(60, Ordering::Relaxed);
        })
    };
    let changes = granted
        .q(&[
            "stream",
            "/ietf-lq-telemetry:lq-telemetry/weighted-ecmp",
            "on_change",
            "0",
            "4",
        ])
        .unwrap();
    flip.join().unwrap();
    let weights: Vec<u64> = changes
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![changes.clone()])
        .iter()
        .filter_map(|m| m["update"]["update"].as_array()?.first().cloned())
        .filter_map(|u| s2_weight(&u["val"]))
        .collect();
    assert!(
        weights.len() >= 2 && weights.last() < weights.first(),
        "S2's weight over the ON_CHANGE updates: {weights:?}\n{changes}"
    );
    println!("  ok: S2's kernel weight over the ON_CHANGE updates: {weights:?}");
    println!("  ok: refusals: {denied} / no certificate and another CA refused");

    // The Prometheus endpoint under the same TLS and rules (issue 40): the granted
    // client scrapes the weights, another of the same CA everything but them, and the
    // clients without a certificate, of another CA or in plain HTTP get nothing.
    let scrape = |identity: Option<&(std::path::PathBuf, std::path::PathBuf)>, plain: bool| {
        let (cert, key) = identity.map_or((String::new(), String::new()), |(c, k)| {
            (c.display().to_string(), k.display().to_string())
        });
        let ca = ca_file.display().to_string();
        let out = s
            .exec(
                "/usr/bin/python3",
                &[
                    "-c",
                    SCRAPE,
                    "10.1.1.2",
                    "9464",
                    &ca,
                    &cert,
                    &key,
                    if plain { "1" } else { "0" },
                ],
            )
            .unwrap();
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let has = |v: &Value, family: &str| v["families"].get(family).is_some();
    let sensitive = [
        "lq_weight",
        "lq_path_quality",
        "lq_path_capacity_gbps",
        "lq_neighbor_state",
    ];
    let g = scrape(Some(&collector_identity), false);
    assert_eq!(g["status"], 200, "{g}");
    assert!(has(&g, "lq_weight") && has(&g, "lq_path_quality"), "{g}");
    assert!(
        !has(&g, "lq_neighbor_state"),
        "/neighbors is not granted: {g}"
    );
    let v = scrape(Some(&viewer_identity), false);
    assert_eq!(v["status"], 200, "{v}");
    assert!(
        has(&v, "lq_up") && has(&v, "lq_group_replaces_total"),
        "{v}"
    );
    for f in sensitive {
        assert!(!has(&v, f), "{f} shown to a client no rule names: {v}");
    }
    let none = scrape(None, false);
    assert_eq!(none["status"], 401, "{none}");
    assert!(
        none["families"].as_object().is_some_and(|o| o.is_empty()),
        "{none}"
    );
    let other = scrape(Some(&stranger_identity), false);
    assert!(
        other.get("error").is_some(),
        "another CA's certificate: {other}"
    );
    let plain = scrape(None, true);
    assert!(
        plain.get("status") != Some(&Value::from(200)),
        "plain HTTP: {plain}"
    );
    let after = scrape(Some(&collector_identity), false);
    let refused: f64 = after["families"]["lq_client_connections_total"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0]["endpoint"] == "metrics" && s[0]["outcome"] == "unauthenticated")
        .map(|s| s[1].as_f64().unwrap())
        .sum();
    assert_eq!(
        refused, 3.0,
        "no certificate, another CA, plain HTTP: {after}"
    );
    println!("  ok: metrics over TLS: granted client reads lq_weight, others do not, 3 refused");

    // A reload (SIGHUP) replaces the read rules: the running stream of a grant withdrawn
    // is closed with PERMISSION_DENIED, a new metrics grant applies to the next scrape.
    let mut stream = granted
        .spawn(&[
            "stream",
            "/ietf-lq-telemetry:lq-telemetry/neighbors",
            "sample",
            "100",
            "20",
        ])
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let reloaded = cfg
        .replace(
            r#"read = ["/lq-telemetry/neighbors", "/ietf-lq-telemetry:lq-telemetry/weighted-ecmp"]"#,
            r#"read = ["/ietf-lq-telemetry:lq-telemetry/weighted-ecmp"]"#,
        )
        .replace(
            "[[metrics.client]]\n",
            "[[metrics.client]]\nname = \"viewer.test\"\nread = [\"/lq-telemetry/weighted-ecmp\"]\n\n[[metrics.client]]\n",
        );
    assert_ne!(reloaded, cfg);
    lqd.reload(&reloaded, "configuration reloaded").unwrap();
    let ended = poll_until(
        "the /neighbors stream to be closed by the reload",
        Duration::from_secs(5),
        Duration::from_millis(50),
        || stream.try_wait().unwrap().ok_or(()),
        |()| lqd.log_text(),
    );
    if ended.is_err() {
        let _ = stream.kill();
    }
    let out = stream.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    assert_eq!(
        last["error"],
        "PERMISSION_DENIED",
        "{ended:?}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().count() >= 5,
        "updates before the reload: {stdout}"
    );
    let denied_now = granted.q(&["get", "/ietf-lq-telemetry:lq-telemetry/neighbors"]);
    assert_eq!(
        denied_now.as_ref().err().map(|e| e["error"].clone()),
        Some(Value::from("PERMISSION_DENIED")),
        "{denied_now:?}"
    );
    let v = scrape(Some(&viewer_identity), false);
    assert!(has(&v, "lq_weight"), "the reloaded metrics grant: {v}");
    println!(
        "  ok: a reload closed the withdrawn stream (PERMISSION_DENIED) and granted viewer.test the weights"
    );

    stop.store(true, Ordering::Relaxed);
    drop(lqd);
    let _ = std::fs::remove_dir_all(&dir);
}
