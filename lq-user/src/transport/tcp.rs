//! IPFIX over TCP (RFC 7011 section 10.4), and the session machinery that TLS reuses.
//!
//! Exporting Process ([`TcpExporter`]):
//!
//! * The daemon calls [`TcpExporter::export`] once per interval and must never wait for the
//!   network: records go into a bounded queue, and a worker thread owns the connection.
//! * Every new connection is a new Transport Session: the worker sends the Templates first
//!   (RFC 7011 section 8: a Template must reach the Collecting Process before the Data
//!   Records that use it; over TCP it is sent once per session and never refreshed, section
//!   8.4 applies to UDP only), then data.
//! * Sequence numbers count the Data Records sent "in the current stream from the current
//!   Observation Domain" (RFC 7011 section 3.1): a new TCP connection is a new stream, so a
//!   new [`Encoder`] (sequence 0, templates unsent) is made for it.
//! * A write error, a closed connection or a TLS alert ends the session; the worker
//!   reconnects with jittered exponential backoff (100 ms doubling to 5 s by default).
//! * Nothing is lost silently. IPFIX has no application acknowledgement, so the worker keeps
//!   every record whose bytes the collector's TCP has not acknowledged yet (Linux SIOCOUTQ),
//!   and sends them again, after the templates, on the next session. A record can then arrive
//!   twice, which is harmless for a totalCounter reading (seed 000 section 6: the same total
//!   at the same observation time), while a lost one is a gap. The queue is bounded: on
//!   overflow the oldest records go first (a later total includes what an earlier one
//!   counted) and [`TransportStats::records_dropped`] counts them.
//!
//! The Collecting Process is [`crate::transport::collector`].

use std::{
    collections::VecDeque,
    io::{self, Read, Write},
    net::{Shutdown, SocketAddr, TcpStream},
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use rand::{Rng as _, SeedableRng as _, rngs::SmallRng};

use crate::ipfix::{ExportError, ExporterConfig, PfcRecord, encode::Encoder};

/// Settings of a stream (TCP or TLS) exporter.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Message encoding (observation domain, elements, message size). `template_refresh` is
    /// ignored: over TCP templates are sent once per session (RFC 7011 section 8.4).
    pub exporter: ExporterConfig,
    /// Records kept while the collector is unreachable; the oldest are dropped (and counted)
    /// beyond this.
    pub buffer_records: usize,
    /// Limit of one TCP connect (and of a TLS handshake).
    pub connect_timeout: Duration,
    /// A write blocked longer than this (a stalled collector) ends the session.
    pub write_timeout: Duration,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// While idle, how often the worker checks that the collector has not closed the
    /// session (so the next interval's records meet an open session).
    pub idle_check: Duration,
    /// DSCP of the connection (seed 000 section 9: an export path that stays available
    /// while PFC pauses the monitored priority).
    pub dscp: Option<u8>,
    /// SO_PRIORITY of the connection.
    pub socket_priority: Option<u32>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            exporter: ExporterConfig {
                // Messages are not limited by a path MTU over TCP; stay well below the
                // 65535-octet Length field anyway.
                max_message_len: 16384,
                ..ExporterConfig::default()
            },
            buffer_records: 65536,
            connect_timeout: Duration::from_secs(3),
            write_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            idle_check: Duration::from_millis(200),
            dscp: None,
            socket_priority: None,
        }
    }
}

/// What the worker has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Sessions established (templates sent).
    pub sessions: u64,
    /// Connection or handshake attempts that failed.
    pub connect_failures: u64,
    /// Established sessions that ended on an error or a close by the collector.
    pub session_failures: u64,
    /// Messages written (templates included).
    pub messages_sent: u64,
    /// Data records of PFC templates written (a resent record counts again).
    pub records_sent: u64,
    /// Records dropped because the buffer overflowed while the collector was unreachable.
    pub records_dropped: u64,
    /// Records waiting to be sent.
    pub queued: u64,
    /// Records written but not yet acknowledged by the collector's TCP.
    pub unacknowledged: u64,
    /// Whether a session is open now.
    pub connected: bool,
    /// The last transport error.
    pub last_error: Option<String>,
}

/// One established Transport Session, plain TCP or TLS over TCP.
pub(crate) trait Session: Send {
    /// Writes one whole message (and flushes it to the socket).
    fn send(&mut self, msg: &[u8]) -> io::Result<()>;
    /// Without blocking: an error when the collector closed the session or sent an alert.
    fn check(&mut self) -> io::Result<()>;
    /// The TCP socket.
    fn tcp(&self) -> &TcpStream;
    /// Bytes written to the TCP socket so far (TLS records included).
    fn wire_bytes(&self) -> u64;
}

/// Opens a session to the collector.
pub(crate) type Connector =
    Box<dyn FnMut(&TcpConfig, SocketAddr) -> io::Result<Box<dyn Session>> + Send>;

/// A TCP stream that counts the bytes written to it (to match SIOCOUTQ's unacknowledged
/// byte count to messages).
pub(crate) struct CountingStream {
    pub(crate) inner: TcpStream,
    pub(crate) written: u64,
}

impl Read for CountingStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Write for CountingStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Connects with the configured timeouts and socket class.
pub(crate) fn connect_tcp(config: &TcpConfig, to: SocketAddr) -> io::Result<CountingStream> {
    let s = TcpStream::connect_timeout(&to, config.connect_timeout)?;
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(config.write_timeout))?;
    // Reads happen only in a TLS handshake (bounded by the connect timeout) and in
    // non-blocking checks.
    s.set_read_timeout(Some(config.connect_timeout))?;
    crate::sys::socket::set_traffic_class(&s, config.dscp, config.socket_priority);
    Ok(CountingStream {
        inner: s,
        written: 0,
    })
}

/// Reads what the collector sent, without blocking: an error when it closed the session.
/// An IPFIX Collecting Process sends nothing over TCP (RFC 7011 section 10.4), so any data
/// is discarded.
pub(crate) fn check_closed(s: &mut TcpStream) -> io::Result<()> {
    s.set_nonblocking(true)?;
    let mut buf = [0u8; 256];
    let r = loop {
        match s.read(&mut buf) {
            Ok(0) => {
                break Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the collector closed the session",
                ));
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
    };
    s.set_nonblocking(false)?;
    r
}

struct PlainSession(CountingStream);

impl Session for PlainSession {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.0.write_all(msg)?;
        self.0.flush()
    }
    fn check(&mut self) -> io::Result<()> {
        check_closed(&mut self.0.inner)
    }
    fn tcp(&self) -> &TcpStream {
        &self.0.inner
    }
    fn wire_bytes(&self) -> u64 {
        self.0.written
    }
}

/// Jittered exponential backoff: each delay is drawn from [d/2, d], d doubling up to the
/// maximum, so exporters that lost one collector do not reconnect in lockstep.
struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
    rng: SmallRng,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id());
        let initial = initial.max(Duration::from_millis(1));
        Self {
            initial,
            max: max.max(initial),
            current: initial,
            rng: SmallRng::seed_from_u64(seed),
        }
    }
    fn reset(&mut self) {
        self.current = self.initial;
    }
    fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        let ms = d.as_millis().max(1) as u64;
        Duration::from_millis(self.rng.random_range(ms / 2..=ms))
    }
}

struct Queue {
    records: VecDeque<PfcRecord>,
    shutdown: bool,
}

#[derive(Default)]
struct Counters {
    sessions: AtomicU64,
    connect_failures: AtomicU64,
    session_failures: AtomicU64,
    messages_sent: AtomicU64,
    records_sent: AtomicU64,
    records_dropped: AtomicU64,
    unacknowledged: AtomicU64,
    connected: AtomicBool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    capacity: usize,
    counters: Counters,
    last_error: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in the other thread must not stop export: the data is still consistent
    // (every update is a single push or drain).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Appends, dropping the oldest beyond the capacity.
    fn push(&self, records: &[PfcRecord]) {
        let mut q = lock(&self.queue);
        q.records.extend(records.iter().copied());
        self.trim(&mut q);
        drop(q);
        self.wake.notify_all();
    }

    /// Puts records that were not (surely) delivered back in front, in their order.
    fn requeue(&self, records: Vec<PfcRecord>) {
        let mut q = lock(&self.queue);
        for r in records.into_iter().rev() {
            q.records.push_front(r);
        }
        self.trim(&mut q);
    }

    fn trim(&self, q: &mut Queue) {
        let over = q.records.len().saturating_sub(self.capacity);
        if over > 0 {
            q.records.drain(..over);
            self.counters
                .records_dropped
                .fetch_add(over as u64, Ordering::Relaxed);
        }
    }

    fn error(&self, e: &io::Error) {
        *lock(&self.last_error) = Some(e.to_string());
    }
}

/// IPFIX over TCP: `export` queues, a worker thread sends (see the module documentation).
pub struct TcpExporter {
    shared: Arc<Shared>,
    worker: Option<thread::JoinHandle<()>>,
    reported_messages: u64,
}

impl TcpExporter {
    /// Starts the worker, which connects to `collector` (in the background: this does not
    /// wait for the collector).
    pub fn connect(collector: SocketAddr, config: TcpConfig) -> Result<Self, ExportError> {
        let connector: Connector = Box::new(|c, to| {
            connect_tcp(c, to).map(|s| Box::new(PlainSession(s)) as Box<dyn Session>)
        });
        Self::with_connector(collector, config, connector)
    }

    /// Starts the worker with a session factory (TCP or TLS).
    pub(crate) fn with_connector(
        collector: SocketAddr,
        config: TcpConfig,
        connector: Connector,
    ) -> Result<Self, ExportError> {
        // Validate now: the worker makes an encoder per session and must not fail there.
        Encoder::new(config.exporter.clone())?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                records: VecDeque::new(),
                shutdown: false,
            }),
            wake: Condvar::new(),
            capacity: config.buffer_records.max(1),
            counters: Counters::default(),
            last_error: Mutex::new(None),
        });
        let s = shared.clone();
        let worker = thread::Builder::new()
            .name("ipfix-export".into())
            .spawn(move || Worker::new(s, config, collector, connector).run())?;
        Ok(Self {
            shared,
            worker: Some(worker),
            reported_messages: 0,
        })
    }

    /// Queues `records` for the worker and returns at once; returns the messages the worker
    /// wrote since the previous call (the same meaning as [`crate::transport::udp::UdpExporter::export`],
    /// one interval late).
    pub fn export(&mut self, records: &[PfcRecord]) -> Result<usize, ExportError> {
        if self.worker.as_ref().is_none_or(|w| w.is_finished()) {
            return Err(ExportError::Io(io::Error::other(
                "the IPFIX export worker has stopped",
            )));
        }
        self.shared.push(records);
        let sent = self.shared.counters.messages_sent.load(Ordering::Relaxed);
        let n = sent - self.reported_messages;
        self.reported_messages = sent;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Counters and state of the transport.
    pub fn stats(&self) -> TransportStats {
        let c = &self.shared.counters;
        TransportStats {
            sessions: c.sessions.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
            session_failures: c.session_failures.load(Ordering::Relaxed),
            messages_sent: c.messages_sent.load(Ordering::Relaxed),
            records_sent: c.records_sent.load(Ordering::Relaxed),
            records_dropped: c.records_dropped.load(Ordering::Relaxed),
            queued: lock(&self.shared.queue).records.len() as u64,
            unacknowledged: c.unacknowledged.load(Ordering::Relaxed),
            connected: c.connected.load(Ordering::Relaxed),
            last_error: lock(&self.shared.last_error).clone(),
        }
    }

    /// Waits up to `timeout` until every queued record is written and acknowledged by the
    /// collector's TCP; true if so (for shutdown and tests).
    pub fn flush(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let s = self.stats();
            if s.queued == 0 && s.unacknowledged == 0 {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            self.shared.wake.notify_all();
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TcpExporter {
    fn drop(&mut self) {
        lock(&self.shared.queue).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

struct Live {
    session: Box<dyn Session>,
    encoder: Encoder,
}

struct Worker {
    shared: Arc<Shared>,
    config: TcpConfig,
    collector: SocketAddr,
    connector: Connector,
    live: Option<Live>,
    /// Written records by the wire offset at which their message ends.
    inflight: VecDeque<(u64, Vec<PfcRecord>)>,
    backoff: Backoff,
    next_attempt: Instant,
}

/// Records per batch taken from the queue (bounds the time the queue lock is held and the
/// size of one write burst).
const BATCH: usize = 4096;

impl Worker {
    fn new(
        shared: Arc<Shared>,
        config: TcpConfig,
        collector: SocketAddr,
        connector: Connector,
    ) -> Self {
        let backoff = Backoff::new(config.backoff_initial, config.backoff_max);
        Self {
            shared,
            config,
            collector,
            connector,
            live: None,
            inflight: VecDeque::new(),
            backoff,
            next_attempt: Instant::now(),
        }
    }

    fn run(mut self) {
        loop {
            if lock(&self.shared.queue).shutdown {
                return;
            }
            if self.live.is_none() && Instant::now() >= self.next_attempt {
                self.open();
            }
            let mut more = false;
            if self.live.is_some() {
                self.prune_acknowledged();
                let batch: Vec<PfcRecord> = {
                    let mut q = lock(&self.shared.queue);
                    let n = q.records.len().min(BATCH);
                    q.records.drain(..n).collect()
                };
                more = batch.len() == BATCH;
                let r = if batch.is_empty() {
                    self.live.as_mut().map_or(Ok(()), |l| l.session.check())
                } else {
                    self.send(batch)
                };
                if let Err(e) = r {
                    self.fail(&e);
                }
            }
            if more {
                continue;
            }
            let timeout = match self.live {
                Some(_) => self.config.idle_check,
                None => self.next_attempt.saturating_duration_since(Instant::now()),
            };
            let q = lock(&self.shared.queue);
            if q.shutdown || (self.live.is_some() && !q.records.is_empty()) {
                continue;
            }
            let _ = self
                .shared
                .wake
                .wait_timeout(q, timeout.max(Duration::from_millis(1)));
        }
    }

    /// Connects, sends the templates; on failure schedules the next attempt.
    fn open(&mut self) {
        let c = &self.shared.counters;
        let r = (self.connector)(&self.config, self.collector).and_then(|mut session| {
            // A new Transport Session: a new stream for sequence numbering (RFC 7011
            // section 3.1) and templates sent before any data (section 8). The config was
            // validated when the exporter was made.
            let mut encoder =
                Encoder::new(self.config.exporter.clone()).map_err(io::Error::other)?;
            for m in encoder.template_messages(crate::sys::clock::unix_seconds()) {
                session.send(&m)?;
                c.messages_sent.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Live { session, encoder })
        });
        match r {
            Ok(live) => {
                self.live = Some(live);
                self.backoff.reset();
                c.sessions.fetch_add(1, Ordering::Relaxed);
                c.connected.store(true, Ordering::Relaxed);
                tracing::info!(collector = %self.collector, "IPFIX session established");
            }
            Err(e) => {
                c.connect_failures.fetch_add(1, Ordering::Relaxed);
                self.shared.error(&e);
                self.next_attempt = Instant::now() + self.backoff.next_delay();
                tracing::debug!(collector = %self.collector, error = %crate::core::report::Chain(&e), "IPFIX connect failed");
            }
        }
    }

    /// Drops inflight records whose bytes the collector's TCP has acknowledged.
    fn prune_acknowledged(&mut self) {
        let Some(live) = &self.live else { return };
        let written = live.session.wire_bytes();
        // Without SIOCOUTQ the acknowledgement is unknown: keep nothing (best effort).
        let unacked = crate::sys::socket::unacknowledged_bytes(live.session.tcp()).unwrap_or(0);
        let acked = written.saturating_sub(unacked);
        while self.inflight.front().is_some_and(|(end, _)| *end <= acked) {
            self.inflight.pop_front();
        }
        self.count_unacknowledged();
    }

    fn count_unacknowledged(&self) {
        let n: usize = self.inflight.iter().map(|(_, r)| r.len()).sum();
        self.shared
            .counters
            .unacknowledged
            .store(n as u64, Ordering::Relaxed);
    }

    /// Sends a batch; on error the records of the messages not written are queued again.
    fn send(&mut self, batch: Vec<PfcRecord>) -> Result<(), io::Error> {
        let Some(live) = self.live.as_mut() else {
            self.shared.requeue(batch);
            return Ok(());
        };
        // A collector that closed the session while idle must not receive the batch into
        // a dead connection (the kernel would accept the first write).
        if let Err(e) = live.session.check() {
            self.shared.requeue(batch);
            return Err(e);
        }
        let start_seq = live.encoder.sequence();
        let messages = live
            .encoder
            .data_messages(&batch, crate::sys::clock::unix_seconds());
        let end_seq = live.encoder.sequence();
        // Which records each message holds: its header's sequence number is the count of
        // records before it (RFC 7011 section 3.1), and data_messages keeps their order.
        let mut at = 0usize;
        let c = &self.shared.counters;
        for (i, m) in messages.iter().enumerate() {
            let seq = seq_of(m).unwrap_or(start_seq);
            let next = messages
                .get(i + 1)
                .and_then(|n| seq_of(n))
                .unwrap_or(end_seq);
            let n = (next.wrapping_sub(seq) as usize).min(batch.len() - at);
            let records = batch[at..at + n].to_vec();
            if let Err(e) = live.session.send(m) {
                // This message may be partly written: it and the rest go again.
                self.shared.requeue(batch[at..].to_vec());
                return Err(e);
            }
            at += n;
            c.messages_sent.fetch_add(1, Ordering::Relaxed);
            c.records_sent.fetch_add(n as u64, Ordering::Relaxed);
            self.inflight
                .push_back((live.session.wire_bytes(), records));
        }
        self.count_unacknowledged();
        Ok(())
    }

    /// Ends the session: everything not acknowledged goes back in front of the queue.
    fn fail(&mut self, e: &io::Error) {
        let c = &self.shared.counters;
        if let Some(live) = self.live.take() {
            let _ = live.session.tcp().shutdown(Shutdown::Both);
            c.session_failures.fetch_add(1, Ordering::Relaxed);
        }
        c.connected.store(false, Ordering::Relaxed);
        let back: Vec<PfcRecord> = self.inflight.drain(..).flat_map(|(_, r)| r).collect();
        self.shared.requeue(back);
        self.count_unacknowledged();
        self.shared.error(e);
        self.next_attempt = Instant::now() + self.backoff.next_delay();
        tracing::warn!(collector = %self.collector, error = %crate::core::report::Chain(&e), "IPFIX session lost; reconnecting");
    }
}

fn seq_of(m: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(m.get(8..12)?.try_into().ok()?))
}
