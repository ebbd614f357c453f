//! IPFIX over TLS over TCP (RFC 7011 section 10.4 and 11.1) with mutual authentication.
//!
//! Seed 000 section 9: Exporting and Collecting Processes SHOULD authenticate one another
//! and protect the telemetry, and TLS deployments MUST follow BCP 195 (RFC 9325). Hence:
//!
//! * TLS 1.3 only (RFC 9325 section 3.1.1 recommends 1.3; nothing older is offered or
//!   accepted, so no downgrade to 1.2 without the RFC's extra cipher rules).
//! * No TLS compression (RFC 9325 section 3.3): TLS 1.3 has none, and rustls implements
//!   none.
//! * The ring provider's TLS 1.3 suites only (AES-GCM, ChaCha20-Poly1305: AEAD, forward
//!   secret, RFC 9325 section 4.2).
//! * The exporter verifies the collector's chain against the configured CA and the server
//!   name (RFC 9325 section 5, RFC 9525 identity checks via webpki); it always presents its
//!   own certificate and key.
//! * The collector requires a client certificate chaining to its configured CA: a client
//!   with none, or with one from another CA, is refused in the handshake.
//! * No 0-RTT data (RFC 9325 section 3.1.1 ties it to replay protection; rustls leaves it
//!   off unless asked).
//!
//! The session logic (templates per session, reconnect, resend) is the TCP one:
//! [`TlsExporter`] is a [`TcpExporter`] whose sessions are TLS sessions.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    sync::Arc,
    time::Duration,
};

use rustls::{
    ClientConnection,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject},
};

use crate::ipfix::{ExportError, PfcRecord};
use crate::transport::tcp::{
    Connector, CountingStream, Session, TcpConfig, TcpExporter, TransportStats,
};

/// The IANA port for IPFIX over TLS/TCP (and DTLS).
pub const IPFIX_TLS_PORT: u16 = 4740;

/// TLS configuration problems (all found when the configuration is built, not later).
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// A file could not be read.
    #[error("{path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// Malformed PEM.
    #[error("{what}: bad PEM: {error}")]
    Pem {
        /// Which input.
        what: &'static str,
        /// The parser's message.
        error: String,
    },
    /// A PEM input without the expected item.
    #[error("{0}: no certificate or key found")]
    Empty(&'static str),
    /// The server name is not a DNS name or an IP address.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    /// rustls refused the configuration (e.g. a key that does not match the certificate).
    #[error("TLS configuration")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(String),
    /// A private key file that others may read.
    #[error("{path}: mode {mode:o} lets other users read the private key: chmod 600 it")]
    KeyReadableByOthers {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

fn certs(what: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let v = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::Pem {
            what,
            error: e.to_string(),
        })?;
    if v.is_empty() {
        return Err(TlsConfigError::Empty(what));
    }
    Ok(v)
}

fn key(what: &'static str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsConfigError::Empty(what),
        e => TlsConfigError::Pem {
            what,
            error: e.to_string(),
        },
    })
}

fn roots(what: &'static str, pem: &[u8]) -> Result<rustls::RootCertStore, TlsConfigError> {
    let mut store = rustls::RootCertStore::empty();
    for c in certs(what, pem)? {
        store.add(c)?;
    }
    Ok(store)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|source| TlsConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The exporter's side: the CA that signs collectors, the server name to check, and the
/// exporter's own certificate chain and key.
#[derive(Clone, Debug)]
pub struct TlsClientConfig {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

impl TlsClientConfig {
    /// From PEM: CA certificate(s), the exporter's chain (leaf first) and its key; the
    /// collector's certificate must name `server_name` (a DNS name or an IP address).
    pub fn from_pem(
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        server_name: &str,
    ) -> Result<Self, TlsConfigError> {
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|_| TlsConfigError::ServerName(server_name.into()))?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots("CA", ca_pem)?)
            .with_client_auth_cert(certs("certificate", cert_pem)?, key("key", key_pem)?)?;
        Ok(Self {
            config: Arc::new(config),
            server_name,
        })
    }

    /// From PEM files.
    pub fn from_files(
        ca: &Path,
        cert: &Path,
        key: &Path,
        server_name: &str,
    ) -> Result<Self, TlsConfigError> {
        Self::from_pem(&read(ca)?, &read(cert)?, &read(key)?, server_name)
    }
}

/// The collector's side: its certificate chain and key, and the CA that signs exporters.
#[derive(Clone, Debug)]
pub struct TlsServerConfig {
    pub(crate) config: Arc<rustls::ServerConfig>,
}

impl TlsServerConfig {
    /// From PEM: the collector's chain (leaf first), its key, and the CA certificate(s)
    /// that exporters' certificates must chain to (a client certificate is required).
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        client_ca_pem: &[u8],
    ) -> Result<Self, TlsConfigError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots("client CA", client_ca_pem)?),
            provider(),
        )
        .build()
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs("certificate", cert_pem)?, key("key", key_pem)?)?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// From PEM files.
    pub fn from_files(cert: &Path, key: &Path, client_ca: &Path) -> Result<Self, TlsConfigError> {
        Self::from_pem(&read(cert)?, &read(key)?, &read(client_ca)?)
    }
}

/// The gNMI server's TLS (issue 40): [`northbound_server_config`] with ALPN `h2` (gRPC).
pub fn grpc_server_config(
    cert: &Path,
    key_file: &Path,
    client_ca: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    northbound_server_config(cert, key_file, client_ca, b"h2")
}

/// The Prometheus endpoint's TLS (issue 40): [`northbound_server_config`] with ALPN
/// `http/1.1`.
pub fn metrics_server_config(
    cert: &Path,
    key_file: &Path,
    client_ca: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    northbound_server_config(cert, key_file, client_ca, b"http/1.1")
}

/// A northbound server's TLS (seed 003 section 12.2: a secure transport with mutual
/// authentication): TLS 1.3 only, ALPN `alpn`, its certificate and key, and client
/// certificates verified against `client_ca`. A client that presents a certificate from
/// another CA is refused in the handshake; one that presents none completes it and is then
/// refused by the service (gNMI UNAUTHENTICATED, HTTP 401), which says why. The key file
/// must not be readable by others.
pub fn northbound_server_config(
    cert: &Path,
    key_file: &Path,
    client_ca: &Path,
    alpn: &[u8],
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(key_file)
        .map_err(|source| TlsConfigError::Read {
            path: key_file.display().to_string(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o007 != 0 {
        return Err(TlsConfigError::KeyReadableByOthers {
            path: key_file.display().to_string(),
            mode: mode & 0o777,
        });
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots("client CA", &read(client_ca)?)?),
        provider(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certs("certificate", &read(cert)?)?,
            key("key", &read(key_file)?)?,
        )?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// Whether a read rule's `name` is one of a verified client certificate's names: a DNS
/// name or an IP address of its subjectAltName, exactly. A wildcard SAN (*.example.net)
/// matches only a rule that names that wildcard, never the rule of one host under it.
/// A certificate that does not parse names nothing.
pub fn certificate_names(cert: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(leaf) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => leaf
            .verify_is_valid_for_subject_name(&ServerName::IpAddress(ip.into()))
            .is_ok(),
        Err(_) => leaf.valid_dns_names().any(|d| d.eq_ignore_ascii_case(name)),
    }
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

struct TlsSession {
    conn: ClientConnection,
    sock: CountingStream,
}

impl TlsSession {
    fn connect(tls: &TlsClientConfig, config: &TcpConfig, to: SocketAddr) -> io::Result<Self> {
        // connect_tcp set the read timeout to the connect timeout: it bounds the handshake.
        let sock = super::tcp::connect_tcp(config, to)?;
        let conn =
            ClientConnection::new(tls.config.clone(), tls.server_name.clone()).map_err(invalid)?;
        let mut s = Self { conn, sock };
        let deadline = std::time::Instant::now() + config.connect_timeout;
        while s.conn.is_handshaking() {
            // Verifies the collector's chain and name; a failure here is the exporter
            // refusing the collector (RFC 9325 section 5).
            s.conn.complete_io(&mut s.sock)?;
            if std::time::Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ));
            }
        }
        s.confirm(
            config.connect_timeout.min(CONFIRM_WAIT),
            config.connect_timeout,
        )?;
        Ok(s)
    }

    /// In TLS 1.3 the client's handshake ends before the server has verified the client
    /// certificate (RFC 8446 section 2: the client's Certificate and Finished are its last
    /// flight), so a refused exporter would learn it only from an alert after it had sent
    /// records, whose bytes the collector's TCP acknowledges although its TLS discarded them.
    /// Wait for the server's first post-handshake record instead: an alert is a refusal
    /// before any record is sent; a session ticket (rustls and OpenSSL servers send them at
    /// once) or silence until `wait` means accepted. The read timeout is then `restore`.
    fn confirm(&mut self, wait: Duration, restore: Duration) -> io::Result<()> {
        self.sock.inner.set_read_timeout(Some(wait))?;
        let r = match self.conn.read_tls(&mut self.sock) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the collector closed the session after the handshake",
            )),
            Ok(_) => match self.conn.process_new_packets() {
                Ok(state) if state.peer_has_closed() => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the collector closed the TLS session after the handshake",
                )),
                Ok(_) => Ok(()),
                Err(e) => Err(invalid(e)),
            },
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.sock.inner.set_read_timeout(Some(restore))?;
        r
    }
}

/// How long a new TLS session waits for the collector to accept or refuse the exporter's
/// certificate (see [`TlsSession::confirm`]).
const CONFIRM_WAIT: Duration = Duration::from_millis(500);

impl Session for TlsSession {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(msg)?;
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.sock)?;
        }
        self.sock.flush()
    }

    fn check(&mut self) -> io::Result<()> {
        // The collector sends TLS records after the handshake (session tickets, and alerts
        // when it refuses our certificate or closes): process them without blocking.
        self.sock.inner.set_nonblocking(true)?;
        let r = (|| {
            loop {
                match self.conn.read_tls(&mut self.sock) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the collector closed the session",
                        ));
                    }
                    Ok(_) => {
                        let state = self.conn.process_new_packets().map_err(invalid)?;
                        if state.peer_has_closed() {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the collector closed the TLS session",
                            ));
                        }
                        // A Collecting Process sends no IPFIX data: discard any.
                        let mut buf = [0u8; 256];
                        while let Ok(n) = self.conn.reader().read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        })();
        // Alerts the processing queued (e.g. a close) are best effort.
        let _ = self.conn.write_tls(&mut self.sock);
        self.sock.inner.set_nonblocking(false)?;
        r
    }

    fn tcp(&self) -> &TcpStream {
        &self.sock.inner
    }

    fn wire_bytes(&self) -> u64 {
        self.sock.written
    }
}

/// IPFIX over TLS 1.3 with mutual authentication: a [`TcpExporter`] (same queueing,
/// reconnect with backoff, templates per session and resend) whose sessions are TLS.
pub struct TlsExporter(TcpExporter);

impl TlsExporter {
    /// Starts the worker, which connects to `collector` in the background (default port
    /// [`IPFIX_TLS_PORT`]).
    pub fn connect(
        collector: SocketAddr,
        config: TcpConfig,
        tls: TlsClientConfig,
    ) -> Result<Self, ExportError> {
        let connector: Connector = Box::new(move |c, to| {
            TlsSession::connect(&tls, c, to).map(|s| Box::new(s) as Box<dyn Session>)
        });
        TcpExporter::with_connector(collector, config, connector).map(Self)
    }

    /// As [`TcpExporter::export`].
    pub fn export(&mut self, records: &[PfcRecord]) -> Result<usize, ExportError> {
        self.0.export(records)
    }

    /// As [`TcpExporter::stats`].
    pub fn stats(&self) -> TransportStats {
        self.0.stats()
    }

    /// As [`TcpExporter::flush`].
    pub fn flush(&self, timeout: Duration) -> bool {
        self.0.flush(timeout)
    }
}
