//! lqd as a BMP station (RFC 7854): the routing daemon (FRR's bgpd, `bmp connect`) opens a
//! TCP session to lqd and streams its Adj-RIB-In; lqd learns each prefix's origin AS (the
//! NNH mapping, seed 003 section 6.1) and, per prefix and BGP next hop, the capacity of the
//! BGP Link Bandwidth extended community (the slow plane's static capacity, section 4.1;
//! the pure part is [`crate::core::bmp`]).
//!
//! The station runs on a thread of its own with its own single-threaded runtime, so a slow,
//! silent or hostile BMP peer can never stall the daemon's loop (the project's rule 3).
//! Every session's buffer is bounded ([`MAX_MESSAGE_LEN`] plus one read), the number of
//! sessions too; a message the parser refuses is counted and skipped, one that breaks the
//! framing ends its session (counted). The loop receives the result through a
//! `tokio::sync::watch` channel: the latest snapshot replaces the previous one, so the
//! station never waits for the loop and the loop never reads a stale backlog.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{io::AsyncReadExt as _, net::TcpListener, sync::watch};
use tracing::{debug, info, warn};

use crate::core::bmp::{Framer, MAX_MESSAGE_LEN, OriginTable, Snapshot, decode};

/// One read from a BMP session at most.
const READ_CHUNK: usize = 64 * 1024;

/// Errors of the station's start (later errors are counted and logged).
#[derive(Debug, thiserror::Error)]
pub enum BmpStationError {
    /// The listening socket.
    #[error("BMP station: cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread or its runtime.
    #[error("BMP station thread")]
    Thread(#[source] std::io::Error),
}

/// The station's shared state: the origin table and the session counts.
struct Station {
    table: OriginTable,
    open: u64,
    accepted: u64,
    refused: u64,
    next_session: u64,
    latest: Snapshot,
}

impl Station {
    /// Publishes a snapshot; the origins and the Link Bandwidth capacities are recomputed
    /// only when the routes may have changed, and each gets a new `Arc` only when it did
    /// change (the loop compares the `Arc`s to know whether to re-map or re-weigh).
    fn publish(&mut self, tx: &watch::Sender<Arc<Snapshot>>, changed: bool) {
        if changed {
            let (origins, conflicting) = self.table.origins();
            if *self.latest.origins != origins {
                self.latest.origins = Arc::new(origins);
            }
            self.latest.conflicting = conflicting;
            // Never NaN (`OriginTable::bandwidths`): `!=` on the numbers is exact.
            let (bandwidths, bandwidth_conflicts) = self.table.bandwidths();
            if *self.latest.bandwidths != bandwidths {
                self.latest.bandwidths = Arc::new(bandwidths);
            }
            self.latest.bandwidth_conflicts = bandwidth_conflicts;
        }
        self.latest.sessions = self.open;
        self.latest.sessions_accepted = self.accepted;
        self.latest.sessions_refused = self.refused;
        self.latest.peers = self.table.peers() as u64;
        self.latest.counters = self.table.counters;
        tx.send_replace(Arc::new(self.latest.clone()));
    }
}

/// Binds the BMP station's listening socket (while the daemon still holds every
/// capability: a port below 1024 needs CAP_NET_BIND_SERVICE).
pub fn bind(listen: SocketAddr) -> Result<std::net::TcpListener, BmpStationError> {
    let bind = |addr: SocketAddr| -> std::io::Result<std::net::TcpListener> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())?;
        s.listen(64)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    };
    bind(listen).map_err(|source| BmpStationError::Bind {
        addr: listen,
        source,
    })
}

/// Binds `listen` now (so a wrong address fails lqd's start) and serves BMP sessions on a
/// thread of its own. Returns the channel of snapshots.
///
/// Call it after the daemon dropped its capabilities: capabilities are per thread, and
/// this thread parses what a peer sends.
pub fn spawn(
    std_listener: std::net::TcpListener,
    max_sessions: usize,
) -> Result<watch::Receiver<Arc<Snapshot>>, BmpStationError> {
    let listen = std_listener.local_addr().map_err(BmpStationError::Thread)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BmpStationError::Thread)?;
    let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    std::thread::Builder::new()
        .name("lqd-bmp".into())
        .spawn(move || rt.block_on(serve(std_listener, max_sessions, tx)))
        .map_err(BmpStationError::Thread)?;
    info!(%listen, max_sessions, "BMP station: the routing daemon's routes name the remote leaves (seed 003 section 6.1)");
    Ok(rx)
}

async fn serve(
    std_listener: std::net::TcpListener,
    max_sessions: usize,
    tx: watch::Sender<Arc<Snapshot>>,
) {
    let listener = match TcpListener::from_std(std_listener) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "BMP station: not listening; no mapping will be learned");
            return;
        }
    };
    let station = Arc::new(Mutex::new(Station {
        table: OriginTable::default(),
        open: 0,
        accepted: 0,
        refused: 0,
        next_session: 1,
        latest: Snapshot::default(),
    }));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                warn!(error = %e, "BMP station: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = {
            let mut st = lock(&station);
            if st.open >= max_sessions as u64 {
                st.refused += 1;
                st.publish(&tx, false);
                warn!(%peer, max_sessions, "BMP station: session refused (too many)");
                continue;
            }
            st.open += 1;
            st.accepted += 1;
            st.next_session += 1;
            st.publish(&tx, false);
            st.next_session - 1
        };
        info!(%peer, session = id, "BMP session open");
        tokio::spawn(session(stream, peer, id, station.clone(), tx.clone()));
    }
}

fn lock(s: &Mutex<Station>) -> std::sync::MutexGuard<'_, Station> {
    // Nothing panics while holding it; if something did, the table is still whole.
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn session(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    id: u64,
    station: Arc<Mutex<Station>>,
    tx: watch::Sender<Arc<Snapshot>>,
) {
    let mut framer = Framer::default();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut bad_logged = false;
    let why = 'session: loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) => break "closed by the router",
            Ok(n) => n,
            Err(e) => {
                debug!(error = %e, session = id, "BMP read");
                break "read error";
            }
        };
        framer.push(&buf[..n]);
        let mut st = lock(&station);
        let mut changed = false;
        while let Some(frame) = framer.next_message() {
            match frame.and_then(|m| decode(&m)) {
                Ok(msg) => changed |= st.table.apply(id, &msg),
                Err(e) => {
                    st.table.bad_message();
                    if e.is_fatal() {
                        st.publish(&tx, changed);
                        warn!(%peer, session = id, error = %e, "BMP framing lost: session closed");
                        break 'session "framing lost";
                    }
                    // Logged once per session; the counter tells the rest.
                    if !bad_logged {
                        warn!(%peer, session = id, error = %e, "BMP message skipped (counted in bad-messages)");
                        bad_logged = true;
                    }
                }
            }
        }
        debug_assert!(framer.buffered() <= MAX_MESSAGE_LEN + READ_CHUNK);
        st.publish(&tx, changed);
    };
    let mut st = lock(&station);
    let changed = st.table.end_session(id);
    st.open = st.open.saturating_sub(1);
    st.publish(&tx, changed);
    info!(%peer, session = id, why, "BMP session ended; its routes are forgotten");
}
