//! IPFIX Collecting Process over TCP, or TLS over TCP with client authentication
//! ([`TcpCollector`]): accepts sessions (TLS with client-certificate verification when
//! configured), cuts the byte stream into messages by the header's Length field (RFC 7011
//! section 3.1, 10.4.2) and hands each session's messages to its own handler (templates
//! are scoped to the Transport Session, RFC 7011 section 8).

use std::{
    io::{self, Read},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use crate::{
    ipfix::encode::{HEADER_LEN, VERSION},
    transport::tls::TlsServerConfig,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a collector session handler sees.
#[derive(Debug)]
pub enum SessionEvent<'a> {
    /// A session was accepted (after a successful TLS handshake, with TLS).
    Open,
    /// One whole IPFIX message, cut from the stream by its Length field.
    Message(&'a [u8]),
    /// The TLS handshake failed (no client certificate, an untrusted one, ...): refused.
    Refused(String),
    /// The session ended: `None` at a clean end of stream, else why.
    Closed(Option<String>),
}

/// Stops a running [`TcpCollector`]: closes the listener and resets every session.
#[derive(Clone)]
pub struct CollectorStop {
    flag: Arc<AtomicBool>,
    sessions: Arc<Mutex<Vec<TcpStream>>>,
}

impl CollectorStop {
    /// Stops accepting and shuts every open session down.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        for s in lock(&self.sessions).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// An IPFIX Collecting Process over TCP, or TLS over TCP with client authentication.
pub struct TcpCollector {
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: CollectorStop,
}

/// The largest time a peer may take to finish a TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TcpCollector {
    /// Binds `listen`; with `tls`, every session must complete a TLS 1.3 handshake with a
    /// client certificate that chains to the configured CA.
    pub fn bind(listen: SocketAddr, tls: Option<TlsServerConfig>) -> io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        // Polled, so that stop() is noticed without a connection to wake accept().
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            tls: tls.map(|t| t.config),
            stop: CollectorStop {
                flag: Arc::new(AtomicBool::new(false)),
                sessions: Arc::new(Mutex::new(Vec::new())),
            },
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Whether sessions use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A handle that stops [`Self::run`].
    pub fn stop_handle(&self) -> CollectorStop {
        self.stop.clone()
    }

    /// Accepts sessions until stopped; each gets a thread and the handler `new_session`
    /// makes for its peer.
    pub fn run<F, H>(self, mut new_session: F) -> io::Result<()>
    where
        F: FnMut(SocketAddr) -> H,
        H: FnMut(SessionEvent<'_>) + Send + 'static,
    {
        while !self.stop.flag.load(Ordering::SeqCst) {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                // A connection that died before accept, or a descriptor shortage: keep
                // serving the others.
                Err(e) => {
                    tracing::warn!(error = %crate::core::report::Chain(&e), "IPFIX accept failed");
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            let handler = new_session(peer);
            if let Err(e) = stream.set_nonblocking(false) {
                tracing::warn!(error = %crate::core::report::Chain(&e), %peer, "IPFIX session setup failed");
                continue;
            }
            if let Ok(c) = stream.try_clone() {
                let mut v = lock(&self.stop.sessions);
                // Forget sessions that have ended (their clones are not needed to stop them).
                v.retain(|s| s.peer_addr().is_ok());
                v.push(c);
            }
            let tls = self.tls.clone();
            thread::Builder::new()
                .name("ipfix-session".into())
                .spawn(move || serve(stream, tls, handler))?;
        }
        Ok(())
    }
}

fn serve<H: FnMut(SessionEvent<'_>)>(
    stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut handler: H,
) {
    match tls {
        None => {
            handler(SessionEvent::Open);
            read_messages(stream, &mut handler);
        }
        Some(config) => {
            let conn = match rustls::ServerConnection::new(config) {
                Ok(c) => c,
                Err(e) => return handler(SessionEvent::Refused(e.to_string())),
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let _ = tls.sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
            while tls.conn.is_handshaking() {
                // complete_io verifies the client certificate (RFC 9325 section 3; seed 000
                // section 9: Exporting and Collecting Processes authenticate one another)
                // and sends the alert that refuses a bad one.
                if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
                    return handler(SessionEvent::Refused(e.to_string()));
                }
            }
            let _ = tls.sock.set_read_timeout(None);
            handler(SessionEvent::Open);
            read_messages(tls, &mut handler);
        }
    }
}

/// Cuts the stream into messages by the header's Length field (RFC 7011 section 10.4.2:
/// over TCP, messages follow each other with no other framing).
fn read_messages<R: Read, H: FnMut(SessionEvent<'_>)>(mut r: R, handler: &mut H) {
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    loop {
        match read_full(&mut r, &mut buf[..HEADER_LEN]) {
            Ok(false) => return handler(SessionEvent::Closed(None)),
            Ok(true) => {}
            Err(e) => return handler(SessionEvent::Closed(Some(e.to_string()))),
        }
        let version = u16::from_be_bytes([buf[0], buf[1]]);
        let len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
        // A wrong version or a length shorter than the header means the framing is lost:
        // nothing after it can be cut reliably, so the session ends (RFC 7011 section 10.4.2).
        if version != VERSION || len < HEADER_LEN {
            return handler(SessionEvent::Closed(Some(format!(
                "stream out of sync: version {version}, length {len}"
            ))));
        }
        match read_full(&mut r, &mut buf[HEADER_LEN..len]) {
            Ok(true) => handler(SessionEvent::Message(&buf[..len])),
            Ok(false) => {
                return handler(SessionEvent::Closed(Some(
                    "stream ended inside a message".into(),
                )));
            }
            Err(e) => return handler(SessionEvent::Closed(Some(e.to_string()))),
        }
    }
}

/// Fills `buf`; `Ok(false)` at end of stream before its first byte.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
