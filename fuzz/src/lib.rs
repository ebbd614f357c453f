//! The entry points of the fuzz targets, one function per target, each taking the raw input.
//!
//! The targets in `fuzz_targets/` call these under libFuzzer; `lq-user/tests/fuzz_regressions.rs`
//! includes this file by path and feeds the committed corpora and every regression input of
//! `fuzz/regressions/TARGET/` to the same functions on the stable toolchain, with a time
//! bound, so a finding stays fixed without nightly or cargo-fuzz. This file therefore uses
//! only `lq_common` and `lq_user` (no libFuzzer).
//!
//! Every function checks what its decoder promises (issue 9 and the project's rule 3: bad
//! input gets an error, never a panic, a hang or unbounded memory) and panics when a promise
//! is broken: libFuzzer reports the panic as a crash, the replay test as a failure.

use std::collections::BTreeMap;

use lq_common::{
    maps::{
        AS_PLAN_MAX, AS_QUALIFIED_NO, AS_QUALIFIED_YES, COUNTER_COUNT, NeighborKey, NeighborValue,
        PathKey, PathValue, ReceiverConfig,
    },
    receive::{Counters, Discard, ReceiveTables, TableFull, Verdict, process_frame},
    wire::{AsQualification, AsRange, DEFAULT_PORT, DecodePolicy, Entry, decode, encode},
};

/// A target's entry point: the raw input, no result (a broken promise panics).
pub type EntryPoint = fn(&[u8]);

/// Every target: its name (the file stem in `fuzz_targets/` and the folder of its corpus and
/// regressions) and its entry point.
pub const TARGETS: &[(&str, EntryPoint)] = &[
    ("bmp_session", bmp_session),
    ("config_parse", config_parse),
    ("gnmi_path", gnmi_path),
    ("ipfix_decode", ipfix_decode),
    ("ipfix_session", ipfix_session),
    ("key_chain_parse", key_chain_parse),
    ("netlink_sampler", netlink_sampler),
    ("nexthop_decode", nexthop_decode),
    ("pcap_decode", pcap_decode),
    ("receive_frame", receive_frame),
    ("slow_plane_route", slow_plane_route),
    ("wire_decode", wire_decode),
];

// ------------------------------------------------------------------ gnmi_path

/// A state document with every top-level subtree, the sensitive ones included.
fn northbound_doc() -> serde_json::Value {
    serde_json::json!({
        "ietf-lq-telemetry:lq-telemetry": {
            "config": { "enabled": true, "role": "load-balancer" },
            "local": { "link": [ { "link-id": 3, "lqs": 200, "congestion-level": 1 } ] },
            "neighbors": { "neighbor": [
                { "node-as": 0, "node-id": "10.0.0.1", "entry": [ { "remote-node-id": "10.0.1.4", "lqs": 230 } ] },
                { "node-as": "4200000001", "node-id": "10.0.0.2", "entry": [] }
            ] },
            "lq-weighted-ecmp:weighted-ecmp": { "group": [
                { "remote": "10.0.1.4", "member": [ { "uplink": 1, "kernel-weight": 255 } ] }
            ] }
        }
    })
}

/// A gNMI path as a client or a read rule writes it (`lq_user::core::northbound`): the
/// input's first line as text (`DataPath::parse`: rules, pygnmi's path strings), its third
/// as elements (`name;key=value;...|name...`, `DataPath::from_elems`: a SubscribeRequest's
/// elems), its second as grants (paths separated by spaces); each path is judged against
/// the grants, selected from a state document and pruned. Promised: no panic; a parsed
/// path prints and parses back to itself (when no key value holds a bracket); a path inside
/// a sensitive subtree (seed 003 section 12.2) is refused unless a grant covers it; an
/// allowed read of the root or the top container holds no sensitive subtree that no grant
/// covers.
pub fn gnmi_path(data: &[u8]) {
    use lq_user::core::northbound::{
        Access, DataPath, PathElem, SENSITIVE, access, prune_selection, select,
    };
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let (first, second, third) = (
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
    );
    let grants: Vec<DataPath> = second
        .split(' ')
        .filter_map(|t| DataPath::parse(t).ok())
        .collect();
    let g: Vec<&DataPath> = grants.iter().collect();
    let mut paths = Vec::new();
    if let Ok(p) = DataPath::parse(first) {
        let bracket = p
            .elems
            .iter()
            .any(|e| e.keys.values().any(|v| v.contains(['[', ']'])));
        if !bracket {
            let again = DataPath::parse(&p.to_string());
            assert_eq!(again.as_ref(), Ok(&p), "{p} does not parse back");
        }
        paths.push(p);
    }
    if !third.is_empty() {
        let elems = third
            .split('|')
            .map(|e| {
                let mut parts = e.split(';');
                PathElem {
                    name: parts.next().unwrap_or("").to_string(),
                    keys: parts
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                }
            })
            .collect();
        if let Ok(p) = DataPath::from_elems("", elems) {
            paths.push(p);
        }
    }
    let doc = northbound_doc();
    for path in paths {
        let covered = |p: &DataPath| g.iter().any(|x| x.covers(p));
        match access(&g, &path) {
            Access::Denied => assert!(
                SENSITIVE
                    .iter()
                    .any(|s| DataPath::top_child(s).covers(&path))
                    && !covered(&path),
                "{path} refused outside a sensitive subtree or with a grant"
            ),
            Access::Allowed { prune } => {
                for s in SENSITIVE {
                    let subtree = DataPath::top_child(s);
                    assert!(
                        !subtree.covers(&path) || covered(&path),
                        "{path} inside /{s} allowed without a grant"
                    );
                }
                let Some(mut v) = select(&doc, &path) else {
                    continue;
                };
                prune_selection(&mut v, &path, &prune);
                let top = match path.elems.len() {
                    0 => v.get("ietf-lq-telemetry:lq-telemetry").cloned(),
                    1 => Some(v),
                    _ => None,
                };
                let Some(serde_json::Value::Object(top)) = top else {
                    continue;
                };
                for s in SENSITIVE {
                    let held = top.keys().any(|k| k.rsplit(':').next() == Some(s));
                    assert!(
                        !held || covered(&DataPath::top_child(s)),
                        "{path} read holds /{s}, granted {grants:?}"
                    );
                }
            }
        }
    }
}

// ------------------------------------------------------------------ bmp_session

/// A BMP session as lqd's station reads it (`lq_user::transport::bmp`): the bytes arrive in
/// reads cut where the input says (its first byte, so libFuzzer explores the cuts), go
/// through the bounded framer, the bgpkit-parser decoder and the origin table (seed 003
/// section 6.1: origin AS; section 4.1: the BGP Link Bandwidth capacity per prefix and next
/// hop). Promised: no panic, no hang; the framer's buffer stays bounded; a framing error
/// ends the stream; the learned origins and the (prefix, next hop) capacities are never
/// more than the prefixes announced; a capacity is finite and not negative; a session's end
/// forgets all its peers, their capacities too.
pub fn bmp_session(data: &[u8]) {
    use lq_user::core::bmp::{Framer, MAX_MESSAGE_LEN, OriginTable, decode};
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(cut).max(1) * 7;
    let mut framer = Framer::default();
    let mut table = OriginTable::default();
    'stream: for piece in stream.chunks(chunk) {
        framer.push(piece);
        assert!(
            framer.buffered() <= MAX_MESSAGE_LEN + chunk,
            "framer holds {} bytes",
            framer.buffered()
        );
        while let Some(frame) = framer.next_message() {
            match frame.and_then(|m| decode(&m)) {
                Ok(msg) => {
                    table.apply(1, &msg);
                }
                Err(e) => {
                    table.bad_message();
                    if e.is_fatal() {
                        break 'stream;
                    }
                }
            }
        }
    }
    let (origins, conflicting) = table.origins();
    assert!(
        origins.len() as u64 + conflicting <= table.counters.announced,
        "more prefixes mapped than announced"
    );
    let (bandwidths, bandwidth_conflicts) = table.bandwidths();
    assert!(
        bandwidths.len() as u64 <= table.counters.announced,
        "more capacities than prefixes announced"
    );
    assert!(bandwidth_conflicts <= bandwidths.len() as u64);
    for (key, gbps) in &bandwidths {
        assert!(
            gbps.is_finite() && gbps.is_sign_positive(),
            "{key:?}: capacity {gbps}"
        );
    }
    table.end_session(1);
    assert!(
        table.origins().0.is_empty(),
        "the session's end forgets its peers"
    );
    assert!(
        table.bandwidths().0.is_empty(),
        "the session's end forgets its capacities"
    );
    assert_eq!(table.peers(), 0);
}

// ------------------------------------------------------------------ slow_plane_route

/// The slow plane's rtnetlink route decoder never panics on what a socket returns, and the
/// core digests whatever it decodes (seed 003 section 4.1): the eligible members of a
/// prefix are never more than its route's next hops.
pub fn slow_plane_route(data: &[u8]) {
    use lq_user::{
        roles::load_balancer::slow_plane::{RouteEvent, Settings, SlowPlane},
        sys::netlink::route::{self as route_msg, Message},
    };
    let mut core = SlowPlane::new(Settings {
        protocols: [186].into(),
        source_table: 254,
        lq_table: 76,
        uplinks: Vec::new(),
        rules: Vec::new(),
    });
    for m in route_msg::parse(data) {
        match m {
            Ok(Message::NewRoute(r)) => core.apply(RouteEvent::NewRoute(r)),
            Ok(Message::DelRoute(r)) => core.apply(RouteEvent::DelRoute(r)),
            Ok(Message::NewNexthop(n)) => core.apply(RouteEvent::NewNexthop(n)),
            _ => {}
        }
    }
    // No uplinks are configured, so nothing may be eligible.
    assert!(
        core.eligible().values().all(|m| m.is_empty()),
        "members without uplinks"
    );
    let _ = route_msg::decode_route(data);
}

// ------------------------------------------------------------------ wire_decode

/// A strict receiver: `as-qualified` set, an AS plan of a private range and one 32-bit AS
/// (the second spec test vector's node AS).
const STRICT_PLAN: [AsRange; 2] = [
    AsRange {
        first: 64_512,
        last: 65_534,
    },
    AsRange::single(4_200_000_001),
];

/// `wire::decode` with a permissive and a strict policy: walks every entry, and checks that
/// every accepted advertisement survives `decode(encode(x)) == x`.
pub fn wire_decode(data: &[u8]) {
    let any = wire_round_trip(data, &DecodePolicy::ANY);
    let strict = DecodePolicy {
        as_qualification: AsQualification::Required(true),
        as_plan: &STRICT_PLAN,
    };
    let strict_ok = wire_round_trip(data, &strict);
    assert!(
        any || !strict_ok,
        "the strict policy accepted what ANY refused"
    );
}

/// Decodes `data` with `policy`; on success re-encodes it and checks the round trip.
/// Returns whether `data` was accepted.
fn wire_round_trip(data: &[u8], policy: &DecodePolicy<'_>) -> bool {
    let Ok(adv) = decode(data, policy) else {
        return false;
    };
    let entries: Vec<Entry> = adv.entries().collect();
    assert_eq!(entries.len(), adv.entry_count());
    let mut buf = [0u8; lq_common::auth::MAX_DATAGRAM_LEN];
    let mut n = encode(&adv.header, &entries, &mut buf)
        .unwrap_or_else(|e| panic!("an accepted advertisement does not re-encode: {e}"));
    assert_eq!(
        n, adv.body_len,
        "re-encoding changed the advertisement's length"
    );
    if let Some(t) = adv.trailer {
        // The trailer as it came, after the A flag: framed the same again.
        buf[0] |= lq_common::auth::FLAG_A;
        let whole = n + t.fixed.len() + t.mac.len();
        assert_eq!(
            whole,
            data.len(),
            "the trailer is not the rest of the datagram"
        );
        buf[n..whole].copy_from_slice(&data[n..]);
        n = whole;
        // No key chain verifies what the fuzzer made up, and trying never panics.
        let endpoints = lq_user::core::auth::Endpoints {
            source: "10.0.0.1:40000".parse().unwrap(),
            destination: "224.0.0.1:52525".parse().unwrap(),
        };
        let chain = fuzz_key_chain();
        assert!(lq_user::core::auth::verify(&adv, data, &endpoints, &chain, 0).is_err());
    } else {
        assert_eq!(n, data.len(), "re-encoding changed the length");
    }
    let again = decode(&buf[..n], policy).expect("a re-encoded advertisement is refused");
    assert_eq!(again.trailer, adv.trailer);
    assert_eq!(again.header, adv.header);
    let again: Vec<Entry> = again.entries().collect();
    assert_eq!(again, entries);
    // `==` on f32 hides a sign flip of zero: compare the bit patterns too.
    for (a, b) in again.iter().zip(&entries) {
        assert_eq!(
            a.available_bandwidth.to_bits(),
            b.available_bandwidth.to_bits()
        );
        let caps = |e: &Entry| e.diagnostics.map(|d| d.link_capacity.to_bits());
        assert_eq!(caps(a), caps(b));
    }
    true
}

// ------------------------------------------------------------------ receive_frame

/// Small capacities so that a 91-entry datagram fills the path table.
const PATH_CAPACITY: usize = 64;
const NEIGHBOR_CAPACITY: usize = 4;
const DEAD_INTERVAL_NS: u64 = 3_000_000_000;
const NOW_NS: u64 = 10_000_000_000;

/// A `ReceiveTables` over BTreeMaps that refuses new keys beyond a capacity, like the
/// kernel's hash maps.
#[derive(Default, PartialEq)]
struct Tables {
    neighbors: BTreeMap<NeighborKey, NeighborValue>,
    paths: BTreeMap<PathKey, PathValue>,
}

fn insert<K: Ord, V>(map: &mut BTreeMap<K, V>, cap: usize, k: K, v: V) -> Result<(), TableFull> {
    if map.len() >= cap && !map.contains_key(&k) {
        return Err(TableFull);
    }
    map.insert(k, v);
    Ok(())
}

impl ReceiveTables for Tables {
    fn neighbor(&self, key: &NeighborKey) -> Option<NeighborValue> {
        self.neighbors.get(key).copied()
    }
    fn set_neighbor(&mut self, key: NeighborKey, value: NeighborValue) -> Result<(), TableFull> {
        insert(&mut self.neighbors, NEIGHBOR_CAPACITY, key, value)
    }
    fn path(&self, key: &PathKey) -> Option<PathValue> {
        self.paths.get(key).copied()
    }
    fn set_path(&mut self, key: PathKey, value: PathValue) -> Result<(), TableFull> {
        insert(&mut self.paths, PATH_CAPACITY, key, value)
    }
}

fn receiver_config(as_qualified: bool) -> ReceiverConfig {
    let mut as_plan = [AsRange::default(); AS_PLAN_MAX];
    as_plan[0] = AsRange {
        first: 64_512,
        last: 65_534,
    };
    as_plan[1] = AsRange::single(4_200_000_001);
    ReceiverConfig {
        dead_interval_ns: DEAD_INTERVAL_NS,
        udp_port: DEFAULT_PORT,
        as_qualified: if as_qualified {
            AS_QUALIFIED_YES
        } else {
            AS_QUALIFIED_NO
        },
        pass_through: 0,
        as_plan_len: if as_qualified { 2 } else { 0 },
        as_plan,
    }
}

/// The XDP receiver's logic (`receive::process_frame`) on arbitrary bytes as an Ethernet
/// frame, twice in a row against the same capacity-limited tables, under an unqualified and
/// an AS-qualified configuration. Checks: the tables never exceed their capacity, the second
/// copy of an accepted datagram is `stale_seq`, and a discarded or foreign frame gets the
/// same verdict again without touching the tables.
pub fn receive_frame(frame: &[u8]) {
    for as_qualified in [false, true] {
        receive_twice(frame, &receiver_config(as_qualified));
    }
}

fn receive_twice(frame: &[u8], cfg: &ReceiverConfig) {
    let mut tables = Tables::default();
    let mut counters: Counters = [0; COUNTER_COUNT as usize];
    let first = process_frame(frame, cfg, NOW_NS, &mut tables, &mut counters);
    check_capacity(&tables);
    let after_first = (tables.neighbors.clone(), tables.paths.clone());
    let second = process_frame(frame, cfg, NOW_NS + 1, &mut tables, &mut counters);
    check_capacity(&tables);
    match first {
        Verdict::Accept { .. } => {
            assert_eq!(
                second,
                Verdict::Discard(Discard::StaleSeq),
                "replay accepted"
            );
        }
        Verdict::Discard(d) => {
            assert_ne!(d, Discard::StaleSeq, "stale_seq against empty tables");
            assert_eq!(second, first, "a discard is not deterministic");
        }
        Verdict::NotOurs => assert_eq!(second, first),
    }
    // Only an accepted datagram writes; the replay is refused, so nothing changed.
    assert!(
        after_first == (tables.neighbors.clone(), tables.paths.clone()),
        "the second copy changed the tables"
    );
    let total: u64 = counters.iter().sum();
    assert!(total >= 2, "every frame is counted somewhere");
}

fn check_capacity(t: &Tables) {
    assert!(t.paths.len() <= PATH_CAPACITY);
    assert!(t.neighbors.len() <= NEIGHBOR_CAPACITY);
}

// ------------------------------------------------------------------ config_parse

/// `Config::parse` (TOML, then the validation `lqd run` and `lqd check-config` apply) on
/// any text: a Config or an error naming the file, never a panic; a valid Config then
/// yields every derived setting the daemon builds at start.
/// A key chain of one key per algorithm (ids 1-3), for the trailers the fuzzer makes.
fn fuzz_key_chain() -> lq_user::core::auth::KeyChain {
    use lq_user::core::auth::{Key, KeyChain, Lifetime, Secret};
    KeyChain::new(
        lq_common::auth::Algorithm::ALL
            .into_iter()
            .zip(1u16..)
            .map(|(algorithm, id)| Key {
                id,
                algorithm,
                secret: Secret::new(b"fuzz".to_vec()),
                send: Lifetime::ALWAYS,
                accept: Lifetime::ALWAYS,
            })
            .collect(),
    )
    .expect("a valid key chain")
}

/// The key chain file (`lq_user::config::key_chain::parse`): any text parses or is refused
/// with an error that never quotes a key string; a parsed chain answers send-key and
/// accept-key questions at any time.
pub fn key_chain_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match lq_user::config::key_chain::parse("fuzz.toml", text) {
        Ok(chain) => {
            for t in [i64::MIN, -1, 0, 1_800_000_000, i64::MAX] {
                let _ = chain.send_key(t);
                for k in chain.keys() {
                    let _ = chain.accept_key(k.id, t);
                }
            }
        }
        Err(e) => {
            let _ = lq_user::core::report::Chain(&e).to_string();
        }
    }
}

pub fn config_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match lq_user::config::Config::parse(text, std::path::Path::new("fuzz.toml")) {
        Ok(cfg) => {
            let c = cfg.controller();
            let _ = c.dead_interval_ns();
            let _ = cfg.nnh_mapping();
            let _ = cfg.helper_params();
            let _ = cfg.as_plan();
            let _ = cfg.node_as();
            if let Some(ipfix) = &cfg.ipfix {
                // Validated by parse: the element identities are usable.
                ipfix
                    .elements()
                    .expect("a validated [ipfix] section has valid elements");
            }
            for e in &cfg.pfc.ethtool {
                e.stat_map()
                    .expect("a validated [[pfc.ethtool]] has a stat map");
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("fuzz.toml"), "an error names the file: {msg}");
        }
    }
}

// ------------------------------------------------------------------ ipfix_decode

/// The element identities `lqd ipfix collect` uses by default (PEN 32473, elements 1, 2
/// and the epoch 3).
fn collector_elements() -> lq_user::ipfix::ElementIds {
    lq_user::ipfix::ElementIds::enterprise(32473, 1, 2, Some(3))
}

/// The IPFIX collector's message decoder on any bytes. Templates learned from earlier
/// messages apply to later ones, so the input is also decoded in two parts (split at the
/// offset its first octet gives) through one decoder.
pub fn ipfix_decode(data: &[u8]) {
    let mut d = lq_user::ipfix::decode::Decoder::new(collector_elements());
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    for part in [&data[..split], &data[split..], data] {
        if let Ok(dec) = d.decode(part) {
            for r in &dec.pfc {
                let _ = r.scope();
            }
        }
    }
}

// ------------------------------------------------------------------ ipfix_session

/// IPFIX message header length (RFC 7011 section 3.1).
const IPFIX_HEADER_LEN: usize = 16;

/// One Transport Session of `lqd ipfix collect --tcp` on a byte stream: the stream is cut
/// into messages by their Length field like the collector's session reader (RFC 7011
/// section 10.4.2: a wrong version or a length below the header ends the session), and
/// every message goes through the session's one stateful decoder, so templates, options
/// templates, withdrawals and data sets of one input meet. The records then go through the
/// collector's interval logic (one `last` reading per scoped counter, as in
/// `pfc_export::collect_tcp_on`) and `decode::latest`.
///
/// Checks: the decoder never panics or hangs on any sequence; an interval count is given
/// only between readings of the same scope with the same epoch; `latest` returns only
/// valid readings of their own scope.
pub fn ipfix_session(stream: &[u8]) {
    use lq_user::ipfix::decode::{self, CounterScope, PfcDecoded};

    let mut dec = decode::Decoder::new(collector_elements());
    let mut last: BTreeMap<CounterScope, PfcDecoded> = BTreeMap::new();
    let mut all = Vec::new();
    let mut rest = stream;
    while rest.len() >= IPFIX_HEADER_LEN {
        let version = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        if version != 10 || len < IPFIX_HEADER_LEN {
            break;
        }
        // A stream that ends inside a message: the collector closes the session; decode
        // what is there anyway (the UDP collector gets such datagrams).
        let msg = &rest[..len.min(rest.len())];
        rest = &rest[msg.len()..];
        let Ok(d) = dec.decode(msg) else { continue };
        for r in d.pfc {
            let scope = r.scope();
            assert_eq!(
                scope.is_some(),
                r.is_valid(),
                "a valid record has a scope: {r:?}"
            );
            if let Some(prev) = scope.and_then(|s| last.get(&s))
                && decode::interval(prev, &r).is_some()
            {
                assert_eq!(prev.scope(), scope);
                assert!(prev.epoch.is_some() && prev.epoch == r.epoch);
            }
            if let Some(s) = scope {
                last.insert(s, r.clone());
            }
            all.push(r);
        }
    }
    for (scope, r) in decode::latest(&all) {
        assert_eq!(r.scope(), Some(scope));
    }
}

// ------------------------------------------------------------------ pcap_decode

/// `lqd decode --pcap` on any file: `pcap::read_ethernet` (classic pcap either byte order,
/// pcapng), then every frame through checks 1-9 and the JSON printer, under the default
/// options and an AS-qualified plan (which also prints check 11's notes). Checks: every
/// frame borrowed from the file lies within it, numbered 1.., and the summary adds up.
pub fn pcap_decode(data: &[u8]) {
    use lq_user::tools::decode::{DecodeOptions, run_frames};

    let Ok(capture) = lq_user::tools::pcap::read(data) else {
        return;
    };
    let range = data.as_ptr_range();
    for (i, f) in capture.frames.iter().enumerate() {
        assert_eq!(f.number, i + 1);
        let r = f.data.as_ptr_range();
        assert!(range.start <= r.start && r.end <= range.end);
    }
    if lq_user::tools::pcap::read_ethernet(data).is_err() {
        return;
    }
    let strict = DecodeOptions {
        as_qualified: Some(true),
        as_plan: STRICT_PLAN.to_vec(),
        json_lines: true,
        ..DecodeOptions::default()
    };
    for opts in [DecodeOptions::default(), strict] {
        let s = run_frames(
            &capture.frames,
            &opts,
            &mut std::io::sink(),
            &mut std::io::sink(),
        )
        .expect("writing to a sink cannot fail");
        assert_eq!(s.frames, capture.frames.len());
        assert_eq!(s.accepted + s.discarded + s.not_lq, s.frames);
    }
}

// ------------------------------------------------------------------ netlink_sampler

/// The helper's counter sampler on any rtnetlink receive buffer: the framing
/// (`sampler::messages`), then each message by its type through the decoder of the dump
/// it answers (RTM_NEWLINK: the link dump; RTM_NEWSTATS: RTM_GETSTATS; RTM_NEWQDISC: the
/// qdisc dump with stats and xstats; RTM_NEWTCLASS: the htb class dump), whatever the
/// type says, and the dump loop's own handling of NLMSG_DONE / NLMSG_ERROR
/// (`sampler::dump_part`). The buffer is also read as a dcbnl reply (`dcb::decode_pfc_en`).
pub fn netlink_sampler(buf: &[u8]) {
    use lq_user::sys::sampler;

    let mut classes = Vec::new();
    for m in sampler::messages(buf) {
        let Ok(m) = m else { break };
        let p = m.payload;
        let _ = sampler::decode_link(p).map(|l| l.oper_up());
        let _ = sampler::decode_stats(p);
        if let Ok((ifindex, parent)) = sampler::peek_qdisc(p) {
            // The qdisc decoder reads the same tcmsg the peek does.
            if let Ok(q) = sampler::decode_qdisc(p) {
                assert_eq!((q.ifindex, q.parent), (ifindex, parent));
                let _ = (q.is_root(), q.ecn.can_mark());
            }
        } else {
            assert!(sampler::decode_qdisc(p).is_err());
        }
        if let Ok(c) = sampler::decode_class(p) {
            classes.push(c);
        }
    }
    let _ = sampler::htb_root_rate(&classes);
    // The dump loop: the sequence number it waits for is the first message's, if any.
    let seq = buf
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let mut seen = 0usize;
    let _ = sampler::dump_part(buf, seq, "fuzz", |_, _| seen += 1);
    let _ = lq_user::sys::netlink::dcb::decode_pfc_en(buf);
}

// ------------------------------------------------------------------ nexthop_decode

/// The controller's rtnetlink nexthop codec on any receive buffer: `parse_messages`, a
/// decoded RTM_NEWNEXTHOP re-encodes, the payload decoder on the raw bytes, and the
/// request/ACK and nexthop-dump loops of `rtnl::Rtnl` (`rtnl::ack_in`,
/// `rtnl::nexthop_dump_part`) waiting for the first message's sequence number.
pub fn nexthop_decode(data: &[u8]) {
    use lq_user::sys::{netlink as rtnl, netlink::nexthop};

    for m in nexthop::parse_messages(data) {
        if let Ok(nexthop::NetlinkMessage::NewNexthop(_, msg)) = m {
            let _ = nexthop::encode_new(&msg, 1);
        }
    }
    if let Ok(msg) = nexthop::decode_nexthop(data) {
        let _ = nexthop::encode_new(&msg, 1);
    }
    let seq = data
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    if let Some(Err(e)) = rtnl::ack_in(data, seq, "fuzz") {
        let _ = e.to_string();
    }
    let mut out = Vec::new();
    if let Err(e) = rtnl::nexthop_dump_part(data, seq, &mut out) {
        let _ = e.to_string();
    }
}

/// The entry point of `target`, if there is one.
pub fn entry(target: &str) -> Option<EntryPoint> {
    TARGETS.iter().find(|(n, _)| *n == target).map(|(_, f)| *f)
}
