//! IPFIX over TCP and TLS (RFC 7011 section 10.4 and 11, RFC 9325, seed 000 section 9):
//! exporter and collector on 127.0.0.1, no privileges needed.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    collections::BTreeSet,
    io::{Read as _, Write},
    net::{SocketAddr, TcpListener},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use lq_user::{
    ipfix::{Direction, ElementIds, PfcRecord, encode::Encoder},
    tools::collect::collect_tcp_on,
    transport::{
        collector::{CollectorStop, TcpCollector},
        tcp::{TcpConfig, TcpExporter},
        tls::{TlsClientConfig, TlsExporter, TlsServerConfig},
    },
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::Value;

/// The collector's JSON lines, shared with the test.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn lines(&self) -> Vec<Value> {
        let mut b = self.0.lock().unwrap().clone();
        // The collector writes a line in several pieces: parse only complete lines.
        let complete = b.iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
        b.truncate(complete);
        String::from_utf8(b)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    /// (interface, priority, total) of every PFC record line.
    fn records(&self) -> BTreeSet<(u64, u64, u64)> {
        self.lines()
            .iter()
            .filter(|l| l.get("pfc-control-frame-total-count").is_some())
            .map(|l| {
                (
                    l["interface"].as_u64().unwrap(),
                    l["pfc-priority"].as_u64().unwrap(),
                    l["pfc-control-frame-total-count"].as_u64().unwrap(),
                )
            })
            .collect()
    }
    fn count(&self, key: &str, value: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.get(key).and_then(Value::as_str) == Some(value))
            .count()
    }
}

struct Collector {
    addr: SocketAddr,
    stop: CollectorStop,
    sink: Sink,
    thread: thread::JoinHandle<()>,
}

impl Collector {
    fn start(listen: SocketAddr, tls: Option<TlsServerConfig>) -> Self {
        let c = TcpCollector::bind(listen, tls).expect("bind collector");
        let addr = c.local_addr().unwrap();
        let stop = c.stop_handle();
        let sink = Sink::default();
        let out = sink.clone();
        let thread = thread::spawn(move || {
            collect_tcp_on(c, ElementIds::default(), out).expect("collector");
        });
        Self {
            addr,
            stop,
            sink,
            thread,
        }
    }

    fn stop(self) -> Sink {
        self.stop.stop();
        self.thread.join().unwrap();
        self.sink
    }
}

/// Batch `b`: interfaces 1 and 2, priorities 0..8, totals unique per batch.
fn batch(b: u64) -> Vec<PfcRecord> {
    let mut v = Vec::new();
    for interface in 1..=2u32 {
        for priority in 0..8u8 {
            v.push(PfcRecord {
                direction: Direction::Received,
                interface,
                priority,
                observed_ms: 1_700_000_000_000 + b * 1000,
                total: b * 1000 + u64::from(interface) * 100 + u64::from(priority),
                epoch: 1,
            });
        }
    }
    v
}

fn keys(records: &[PfcRecord]) -> BTreeSet<(u64, u64, u64)> {
    records
        .iter()
        .map(|r| (u64::from(r.interface), u64::from(r.priority), r.total))
        .collect()
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Per session (exporter address): the session opens, a templates line comes before its
/// first record, no data set arrives before its template, and the sequence numbers count
/// the data records of the session (RFC 7011 section 3.1: 2 Information Element Type
/// Records come with the templates, so the first data message carries 2).
fn check_sessions(lines: &[Value]) -> usize {
    let mut sessions: Vec<String> = Vec::new();
    for l in lines {
        let e = l["exporter"].as_str().unwrap().to_string();
        if !sessions.contains(&e) {
            sessions.push(e);
        }
    }
    for s in &sessions {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["exporter"] == *s).collect();
        assert_eq!(
            mine[0]["session"], "open",
            "{s}: first line opens the session"
        );
        let first_tmpl = mine.iter().position(|l| l.get("templates").is_some());
        let first_rec = mine
            .iter()
            .position(|l| l.get("pfc-control-frame-total-count").is_some());
        if let Some(r) = first_rec {
            assert!(
                first_tmpl.is_some_and(|t| t < r),
                "{s}: templates before data"
            );
        }
        assert!(
            mine.iter().all(|l| l.get("unknown-sets").is_none()),
            "{s}: no data before its template"
        );
        let seqs: Vec<u64> = mine
            .iter()
            .filter_map(|l| {
                l.get("pfc-control-frame-total-count")
                    .and(l["sequence"].as_u64())
            })
            .collect();
        let mut expected = 2u64;
        let mut i = 0;
        while i < seqs.len() {
            assert_eq!(seqs[i], expected, "{s}: sequence number of a message");
            let n = seqs[i..].iter().take_while(|&&x| x == seqs[i]).count();
            expected += n as u64;
            i += n;
        }
    }
    sessions.len()
}

#[test]
fn tcp_templates_first_then_reconnect_without_loss() {
    println!("TCP: the collector receives templates, then data, decoded by the same Decoder");
    let a = Collector::start("127.0.0.1:0".parse().unwrap(), None);
    let addr = a.addr;
    let mut exp = TcpExporter::connect(addr, TcpConfig::default()).unwrap();
    let mut sent = batch(1);
    exp.export(&batch(1)).unwrap();
    assert!(wait_until(Duration::from_secs(10), || a.sink.records() == keys(&sent)));
    assert!(exp.flush(Duration::from_secs(5)), "batch 1 acknowledged");
    let lines_a = a.sink.lines();
    assert_eq!(check_sessions(&lines_a), 1);
    println!("  ok: 1 session, templates before 16 records, sequence numbers from 2");

    println!("TCP: the collector is stopped (sessions reset) and restarted on the same port");
    let sink_a = a.stop();
    assert!(
        wait_until(Duration::from_secs(5), || !exp.stats().connected),
        "the exporter notices the closed session"
    );
    for b in 2..=3 {
        exp.export(&batch(b)).unwrap();
        sent.extend(batch(b));
        thread::sleep(Duration::from_millis(400));
    }
    let s = exp.stats();
    println!("  while down: {s:?}");
    assert!(
        s.connect_failures >= 1,
        "reconnects are attempted (backoff)"
    );
    assert_eq!(s.queued, 32, "records exported while down are kept");
    let b = Collector::start(addr, None);
    exp.export(&batch(4)).unwrap();
    sent.extend(batch(4));
    assert!(
        wait_until(Duration::from_secs(15), || b.sink.records()
            == keys(&batch(2))
                .union(&keys(&batch(3)))
                .chain(keys(&batch(4)).iter())
                .copied()
                .collect()),
        "batches 2-4 delivered to the restarted collector: {:?}",
        exp.stats()
    );
    assert!(exp.flush(Duration::from_secs(5)));
    let s = exp.stats();
    println!("  after restart: {s:?}");
    assert!(s.sessions >= 2, "a new session");
    assert_eq!(s.records_dropped, 0, "nothing dropped");
    let sink_b = b.stop();
    assert!(check_sessions(&sink_b.lines()) >= 1);
    let all: BTreeSet<_> = sink_a.records().union(&sink_b.records()).copied().collect();
    assert_eq!(all, keys(&sent), "every record delivered");
    println!(
        "  ok: {} records of 4 batches delivered, templates resent first on the new session, \
         sequence numbers restart per session",
        all.len()
    );
}

#[test]
fn tcp_buffer_overflow_is_counted() {
    println!(
        "TCP: with no collector, the bounded buffer keeps the newest records and counts drops"
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = TcpConfig {
        buffer_records: 10,
        ..TcpConfig::default()
    };
    let mut exp = TcpExporter::connect(port, cfg).unwrap();
    let t = Instant::now();
    exp.export(&batch(1)).unwrap();
    exp.export(&batch(2)[..9]).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "export does not block"
    );
    let s = exp.stats();
    println!("  {s:?}");
    assert_eq!((s.queued, s.records_dropped), (10, 15));
    println!("  ok: 25 exported, 10 kept, 15 counted as dropped, export returned at once");
}

/// A CA: its PEM and the issuer that signs leaves.
fn make_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(p, key))
}

/// A leaf for localhost / 127.0.0.1: (certificate PEM, key PEM).
fn leaf(issuer: &Issuer<'static, KeyPair>, name: &str, server: bool) -> (String, String) {
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

struct Pki {
    ca: String,
    other_ca: String,
    server: (String, String),
    client: (String, String),
    other_client: (String, String),
}

fn pki() -> Pki {
    let (ca_pem, ca) = make_ca("lq test CA");
    let (other_pem, other) = make_ca("another CA");
    Pki {
        server: leaf(&ca, "collector", true),
        client: leaf(&ca, "exporter", false),
        other_client: leaf(&other, "exporter elsewhere", false),
        ca: ca_pem,
        other_ca: other_pem,
    }
}

fn server_config(p: &Pki) -> TlsServerConfig {
    TlsServerConfig::from_pem(
        p.server.0.as_bytes(),
        p.server.1.as_bytes(),
        p.ca.as_bytes(),
    )
    .unwrap()
}

#[test]
fn tls_mutual_authentication_delivers() {
    println!("TLS: exporter and collector authenticate each other (CA, server name, client cert)");
    let p = pki();
    let c = Collector::start("127.0.0.1:0".parse().unwrap(), Some(server_config(&p)));
    let tls = TlsClientConfig::from_pem(
        p.ca.as_bytes(),
        p.client.0.as_bytes(),
        p.client.1.as_bytes(),
        "localhost",
    )
    .unwrap();
    let mut exp = TlsExporter::connect(c.addr, TcpConfig::default(), tls).unwrap();
    exp.export(&batch(1)).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || c.sink.records()
            == keys(&batch(1))),
        "records over TLS: {:?}",
        exp.stats()
    );
    assert!(exp.flush(Duration::from_secs(5)));
    let sink = c.stop();
    assert_eq!(check_sessions(&sink.lines()), 1);
    assert_eq!(sink.count("session", "refused"), 0);
    assert!(
        sink.lines()
            .iter()
            .all(|l| l["transport"].as_str() == Some("tls"))
    );
    println!("  ok: 16 records over TLS 1.3, templates first, no refusal");
}

#[test]
fn tls_refuses_unauthenticated_peers() {
    let p = pki();
    let c = Collector::start("127.0.0.1:0".parse().unwrap(), Some(server_config(&p)));

    println!("TLS: a client without a certificate is refused by the collector");
    {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types_certs(&p.ca) {
            roots.add(cert).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let conn = rustls::ClientConnection::new(
            Arc::new(config),
            "localhost".to_string().try_into().unwrap(),
        )
        .unwrap();
        let sock = std::net::TcpStream::connect(c.addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut s = rustls::StreamOwned::new(conn, sock);
        let mut enc = Encoder::new(Default::default()).unwrap();
        // The client's side of a TLS 1.3 handshake ends before the server has checked the
        // client's certificate: the refusal arrives as an alert on the next read.
        let _ = enc
            .template_messages(0)
            .iter()
            .try_for_each(|m| s.write_all(m));
        let mut buf = [0u8; 16];
        let r = s.read(&mut buf);
        println!("  client sees: {r:?}");
        assert!(!matches!(r, Ok(n) if n > 0), "no data from the collector");
        assert!(wait_until(Duration::from_secs(5), || c
            .sink
            .count("session", "refused")
            >= 1));
        println!("  ok: refused ({})", refusal(&c.sink, 0));
    }

    println!("TLS: a client certificate from another CA is refused by the collector");
    {
        let tls = TlsClientConfig::from_pem(
            p.ca.as_bytes(),
            p.other_client.0.as_bytes(),
            p.other_client.1.as_bytes(),
            "localhost",
        )
        .unwrap();
        let mut exp = TlsExporter::connect(c.addr, TcpConfig::default(), tls).unwrap();
        exp.export(&batch(1)).unwrap();
        assert!(wait_until(Duration::from_secs(5), || c
            .sink
            .count("session", "refused")
            >= 2));
        assert!(
            wait_until(Duration::from_secs(5), || exp.stats().connect_failures >= 1),
            "the exporter sees the refusal before sending anything"
        );
        let s = exp.stats();
        println!("  exporter: {s:?}");
        assert_eq!(s.sessions, 0, "no session counted as established");
        assert_eq!(s.records_sent, 0, "no record sent into the refused session");
        assert_eq!(
            (s.queued, s.records_dropped),
            (16, 0),
            "records kept, not lost"
        );
        println!("  ok: refused ({})", refusal(&c.sink, 1));
    }

    println!("TLS: an exporter trusting another CA refuses the collector");
    {
        let tls = TlsClientConfig::from_pem(
            p.other_ca.as_bytes(),
            p.client.0.as_bytes(),
            p.client.1.as_bytes(),
            "localhost",
        )
        .unwrap();
        let exp = TlsExporter::connect(c.addr, TcpConfig::default(), tls).unwrap();
        assert!(wait_until(Duration::from_secs(5), || exp
            .stats()
            .connect_failures
            >= 1));
        let s = exp.stats();
        println!("  exporter: {s:?}");
        assert_eq!(s.sessions, 0);
        let e = s.last_error.unwrap_or_default();
        assert!(e.contains("certificate"), "{e}");
        println!("  ok: exporter refused the collector: {e}");
    }

    println!("TLS: an exporter expecting another server name refuses the collector");
    {
        let tls = TlsClientConfig::from_pem(
            p.ca.as_bytes(),
            p.client.0.as_bytes(),
            p.client.1.as_bytes(),
            "collector.example",
        )
        .unwrap();
        let exp = TlsExporter::connect(c.addr, TcpConfig::default(), tls).unwrap();
        assert!(wait_until(Duration::from_secs(5), || exp
            .stats()
            .connect_failures
            >= 1));
        let s = exp.stats();
        assert_eq!(s.sessions, 0);
        let e = s.last_error.unwrap_or_default();
        assert!(e.contains("certificate"), "{e}");
        println!("  ok: {e}");
    }

    let sink = c.stop();
    assert!(
        sink.records().is_empty(),
        "no record accepted from any of them"
    );
    assert_eq!(sink.count("session", "open"), 0, "no session opened");
    println!("  ok: the collector accepted no session and no record");
}

fn refusal(sink: &Sink, i: usize) -> String {
    sink.lines()
        .iter()
        .filter(|l| l["session"] == "refused")
        .nth(i)
        .map(|l| l["error"].to_string())
        .unwrap_or_default()
}

fn rustls_pki_types_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn tcp_slow_collector_loses_nothing_and_never_blocks_the_exporter() {
    println!("TCP: a collector that reads 64 octets every 5 ms for its first second");
    // A small receive buffer, so the slowness reaches back to the exporter.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    sock.listen(1).unwrap();
    let listener: TcpListener = sock.into();
    let addr = listener.local_addr().unwrap();
    let reader = thread::spawn(move || {
        use std::io::Read as _;
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut stream = Vec::new();
        let start = Instant::now();
        let mut buf = [0u8; 65536];
        loop {
            let want = if start.elapsed() < Duration::from_secs(1) {
                64
            } else {
                buf.len()
            };
            match s.read(&mut buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => stream.extend_from_slice(&buf[..n]),
            }
            if start.elapsed() < Duration::from_secs(1) {
                thread::sleep(Duration::from_millis(5));
            }
        }
        stream
    });
    let mut exp = TcpExporter::connect(addr, TcpConfig::default()).unwrap();
    let mut sent = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut backlog = 0;
    for b in 1..=200 {
        let t = Instant::now();
        exp.export(&batch(b)).unwrap();
        slowest = slowest.max(t.elapsed());
        sent.extend(batch(b));
        let st = exp.stats();
        backlog = backlog.max(st.queued + st.unacknowledged);
        thread::sleep(Duration::from_millis(5));
    }
    println!("  largest backlog while the collector was slow: {backlog} records");
    assert!(
        backlog > 100,
        "the slow collector should have held records back"
    );
    assert!(
        exp.flush(Duration::from_secs(10)),
        "everything acknowledged: {:?}",
        exp.stats()
    );
    let s = exp.stats();
    drop(exp);
    let stream = reader.join().unwrap();
    // Cut the byte stream into IPFIX messages by their Length field and decode them.
    let mut dec = lq_user::ipfix::decode::Decoder::new(ElementIds::default());
    let mut got = BTreeSet::new();
    let mut rest = &stream[..];
    while rest.len() >= 4 {
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        if len < 16 || len > rest.len() {
            break;
        }
        for r in dec.decode(&rest[..len]).unwrap().pfc {
            got.insert((
                u64::from(r.interface.unwrap()),
                u64::from(r.priority.unwrap()),
                r.total.unwrap(),
            ));
        }
        rest = &rest[len..];
    }
    println!("  {s:?}; slowest export call {slowest:?}");
    assert!(
        slowest < Duration::from_millis(50),
        "export blocked for {slowest:?}"
    );
    assert_eq!(s.records_dropped, 0);
    assert_eq!(
        got,
        keys(&sent),
        "every record delivered once the collector catches up"
    );
    println!(
        "  ok: {} records delivered, none dropped, export never blocked",
        got.len()
    );
}
