//! `lqd ipfix collect`: a small IPFIX collector for PFC records (seed 000 section 7) over
//! UDP, TCP or TLS, printing one JSON line per record or session event. The per-session
//! logic is [`crate::ipfix::collect`]; the transports are [`crate::transport`].

use std::net::SocketAddr;

use serde_json::json;

/// `lqd ipfix collect`: receives IPFIX over UDP on `listen` and prints every PFC record as
/// a JSON line, following seed 000's collector rules (records of other templates counted,
/// priorities never summed, an interval only with a confirmed epoch of the same exporter,
/// problems flagged, refused templates reported with the reason). Each exporter (source
/// address and port) is its own Transport Session: templates, last readings and interval
/// counts never mix between exporters ([`crate::ipfix::collect`]). A template not sent
/// again within `template_lifetime_s` of Export Time expires (RFC 7011 section 8.4).
pub fn collect(
    listen: SocketAddr,
    elements: crate::ipfix::ElementIds,
    template_lifetime_s: u32,
    mut out: impl std::io::Write,
) -> anyhow::Result<()> {
    let sock = std::net::UdpSocket::bind(listen)?;
    let mut sessions =
        crate::ipfix::collect::UdpSessions::new(elements).template_lifetime(template_lifetime_s);
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = sock.recv_from(&mut buf)?;
        for line in sessions.datagram(from, &buf[..n]) {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
}

/// `lqd ipfix collect --tcp` (and `--tls-*`): receives IPFIX over TCP, or TLS 1.3 with
/// client-certificate verification, on `listen`, and prints the same JSON lines as
/// [`collect`] (with `"transport"`), plus one line per session event: `"session": "open"`,
/// `"closed"` (with `"error"` when not clean) or `"refused"` (a TLS client without a
/// certificate from the configured CA), `"templates"` when a message carried templates and
/// `"unknown-sets"` for data sets whose template the session has not sent (RFC 7011
/// section 8: templates first, once per Transport Session).
pub fn collect_tcp(
    listen: SocketAddr,
    tls: Option<crate::transport::tls::TlsServerConfig>,
    elements: crate::ipfix::ElementIds,
    out: impl std::io::Write + Send + 'static,
) -> anyhow::Result<()> {
    let collector = crate::transport::collector::TcpCollector::bind(listen, tls)?;
    collect_tcp_on(collector, elements, out)
}

/// [`collect_tcp`] on a bound collector (stopped through its
/// [`crate::transport::collector::TcpCollector::stop_handle`]).
pub fn collect_tcp_on(
    collector: crate::transport::collector::TcpCollector,
    elements: crate::ipfix::ElementIds,
    out: impl std::io::Write + Send + 'static,
) -> anyhow::Result<()> {
    use std::sync::{Arc, Mutex};

    use crate::{ipfix::collect::Session, transport::collector::SessionEvent};

    let transport = if collector.is_tls() { "tls" } else { "tcp" };
    let out = Arc::new(Mutex::new(out));
    collector.run(move |peer| {
        let out = out.clone();
        let from = peer.to_string();
        // Templates and last readings belong to one Transport Session (RFC 7011 section 8,
        // seed 000 section 7): a reading is never compared with another connection's.
        let mut session = Session::new(from.clone(), transport, elements);
        move |ev: SessionEvent<'_>| {
            let lines = match ev {
                SessionEvent::Open => {
                    vec![json!({"exporter": from, "transport": transport, "session": "open"})]
                }
                SessionEvent::Refused(e) => vec![
                    json!({"exporter": from, "transport": transport, "session": "refused", "error": e}),
                ],
                SessionEvent::Closed(e) => vec![
                    json!({"exporter": from, "transport": transport, "session": "closed", "error": e}),
                ],
                SessionEvent::Message(m) => session.message(m),
            };
            let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for l in lines {
                // A closed output (e.g. a pipe) cannot be reported anywhere better.
                let _ = writeln!(o, "{l}");
            }
            let _ = o.flush();
        }
    })?;
    Ok(())
}
