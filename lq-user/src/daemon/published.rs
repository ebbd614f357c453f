//! What every client endpoint of the daemon shares (the control socket, the metrics
//! endpoint, gNMI): the snapshots the loop publishes on request ([`Published`]), the YANG
//! state they render to, and the bookkeeping of accepts and refusals.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use tokio::sync::Notify;
use tracing::warn;

use crate::{
    sys::clock::monotonic_ns,
    views::snapshot::{EndpointStats, Snapshot},
};

/// The latest snapshot, shared by the loop and the client thread, and built on request.
///
/// A client that needs the daemon's state asks for a snapshot taken after its request
/// ([`Published::fresh`]): it raises `wanted` and wakes the loop, which builds one at its
/// next iteration (at most once per publish interval, so a flood of requests costs the loop
/// a bounded share of its time) and wakes the waiting clients. With no client asking, the
/// loop builds nothing: at a leaf of a 64 x 512 fabric a snapshot takes milliseconds, and
/// building one on a timer was a sixth of an idle lqd's CPU (issue 15). An answer is never
/// older than the request, so `lqd show` right after a change shows it.
///
/// The loop only try-locks the snapshot: the client thread, preempted while it holds the
/// lock, can never hold up the real-time loop (no priority inversion); a publish that
/// finds it taken is retried on the next iteration. Clients hold it only to clone an `Arc`.
#[derive(Clone)]
pub(super) struct Published {
    latest: Arc<std::sync::Mutex<Arc<Snapshot>>>,
    /// A client waits for a snapshot newer than its request.
    wanted: Arc<AtomicBool>,
    /// Wakes the loop for `wanted`.
    wake_loop: Arc<Notify>,
    /// Wakes the clients waiting in [`Published::fresh`] after each publish.
    published: Arc<Notify>,
    /// Counts publishes, so that a client that was busy when one happened sees it.
    generation: Arc<AtomicU64>,
    /// A client (a gNMI ON_CHANGE stream) wants a snapshot after every change of state.
    changes_wanted: Arc<AtomicBool>,
}

/// The longest a client waits for the loop to build a snapshot newer than its request
/// before it is answered from the latest one (a loop busy with a long step, such as
/// programming a thousand groups at start; `taken_mono_ns` says how old the answer is).
pub const FRESH_SNAPSHOT_WAIT: Duration = Duration::from_millis(1500);

impl Published {
    pub(super) fn new(first: Snapshot) -> Self {
        Self {
            latest: Arc::new(std::sync::Mutex::new(Arc::new(first))),
            wanted: Arc::new(AtomicBool::new(false)),
            wake_loop: Arc::new(Notify::new()),
            published: Arc::new(Notify::new()),
            generation: Arc::new(AtomicU64::new(0)),
            changes_wanted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Replaces the snapshot unless a client holds the lock right now.
    pub(super) fn try_publish(&self, snap: Snapshot) -> bool {
        let snap = Arc::new(snap);
        match self.latest.try_lock() {
            Ok(mut latest) => {
                // The old snapshot is dropped after the lock is released.
                let _old = std::mem::replace(&mut *latest, snap);
                drop(latest);
                self.generation.fetch_add(1, Ordering::SeqCst);
                self.published.notify_waiters();
                true
            }
            Err(_) => false,
        }
    }

    /// The latest snapshot.
    pub(super) fn latest(&self) -> Arc<Snapshot> {
        match self.latest.lock() {
            Ok(s) => s.clone(),
            // Nothing panics while holding it; if something did, the value is still whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The loop's side: whether a client asked for a snapshot, clearing the request (a
    /// request made after this call raises it again). Call before taking the snapshot's
    /// time, so that the snapshot is newer than every request this call took.
    pub(super) fn take_wanted(&self) -> bool {
        self.wanted.swap(false, Ordering::SeqCst)
    }

    /// The loop's side: a request taken by [`Published::take_wanted`] was not served (the
    /// lock was taken); the next iteration tries again.
    pub(super) fn still_wanted(&self) {
        self.wanted.store(true, Ordering::SeqCst);
    }

    /// Whether a client waits for a snapshot.
    pub(super) fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::SeqCst)
    }

    /// The loop's side: completes when a client asks for a snapshot (at once if one asked
    /// since the last call).
    pub(super) async fn asked(&self) {
        self.wake_loop.notified().await;
    }

    /// The loop's side: whether a client (a gNMI ON_CHANGE stream) wants a snapshot after
    /// every change of the loop's state.
    pub(super) fn changes_wanted(&self) -> bool {
        self.changes_wanted.load(Ordering::Relaxed)
    }

    /// The client's side: whether some client wants a snapshot after every change of the
    /// loop's state ([`Published::changes_wanted`]).
    pub(super) fn want_changes(&self, on: bool) {
        self.changes_wanted.store(on, Ordering::Relaxed);
    }

    /// How many snapshots were published so far.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The client's side: completes at the next publish after the generation is not
    /// `seen` (at once if it already is not).
    pub(super) async fn published_after(&self, seen: u64) {
        loop {
            let next = self.published.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            if self.generation() != seen {
                return;
            }
            next.await;
        }
    }

    /// The client's side: a snapshot taken after this call, or after
    /// [`FRESH_SNAPSHOT_WAIT`] the latest one.
    pub(super) async fn fresh(&self) -> Arc<Snapshot> {
        let asked = monotonic_ns();
        self.wanted.store(true, Ordering::SeqCst);
        self.wake_loop.notify_one();
        let until = tokio::time::Instant::now() + FRESH_SNAPSHOT_WAIT;
        loop {
            // Registered before the check: a publish between the check and the wait
            // still wakes this client.
            let next = self.published.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            let snap = self.latest();
            if snap.taken_mono_ns >= asked {
                return snap;
            }
            if tokio::time::timeout_at(until, next).await.is_err() {
                return self.latest();
            }
        }
    }
}

/// Logs refused connections at most once a second per endpoint.
pub(super) struct RefusalLog {
    endpoint: &'static str,
    /// The endpoint's bound on connections.
    limit: usize,
    last: Option<std::time::Instant>,
}

impl RefusalLog {
    /// For `endpoint`, whose connections are bounded by `limit`.
    pub(super) fn new(endpoint: &'static str, limit: usize) -> Self {
        Self {
            endpoint,
            limit,
            last: None,
        }
    }

    /// Counts one refused connection; logs at most once a second.
    pub(super) fn refused(&mut self, stats: &EndpointStats) {
        EndpointStats::inc(&stats.refused);
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.last = Some(std::time::Instant::now());
            warn!(
                endpoint = self.endpoint,
                limit = self.limit,
                refused_total = load(&stats.refused),
                "too many client connections: closing new ones until some finish"
            );
        }
    }
}

fn load(c: &AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

/// After a failed accept (e.g. EMFILE) the pending connection stays queued: wait a little
/// instead of spinning on it.
pub(super) async fn accept_failed(
    endpoint: &'static str,
    stats: &EndpointStats,
    e: &std::io::Error,
) {
    EndpointStats::inc(&stats.accept_errors);
    warn!(endpoint, error = %crate::core::report::Chain(&e), "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The YANG operational state of `snap` in RFC 7951 JSON (`lqd show state`, gNMI).
pub(super) fn state_json(snap: &Snapshot) -> Value {
    let now = monotonic_ns();
    let lb = snap.load_balancer.as_ref();
    let neighbors = lb.map(|lb| lb.neighbors_yang(now, crate::sys::clock::unix_ns()));
    let local = snap
        .helper
        .as_ref()
        .map(crate::views::snapshot::HelperSnapshot::local_yang);
    let weighted_ecmp = lb.map(|lb| crate::views::snapshot::weighted_ecmp_json(&lb.weights));
    let authentication = lb.and_then(|lb| {
        crate::views::yang_state::authentication_json(
            &snap.config,
            lb.receiver_counters.as_deref().unwrap_or_default(),
        )
    });
    crate::views::yang_state::state_document(
        &snap.config,
        local,
        neighbors,
        weighted_ecmp,
        authentication,
    )
}

/// A value the client thread's tasks read and a reload replaces (an endpoint's read rules
/// and TLS configuration): only the client thread locks it, never the loop, which hands a
/// reload's values over a channel ([`NorthboundReload`]). Each replacement moves the
/// generation, so a long-lived reader (a gNMI stream) sees that it must look again.
pub(super) struct Current<T> {
    value: std::sync::RwLock<(u64, Arc<T>)>,
}

impl<T> Current<T> {
    pub(super) fn new(value: impl Into<Arc<T>>) -> Arc<Self> {
        Arc::new(Self {
            value: std::sync::RwLock::new((0, value.into())),
        })
    }

    /// The value now and its generation.
    pub(super) fn get(&self) -> (u64, Arc<T>) {
        match self.value.read() {
            Ok(v) => (v.0, v.1.clone()),
            Err(poisoned) => {
                let v = poisoned.into_inner();
                (v.0, v.1.clone())
            }
        }
    }

    /// Replaces the value.
    pub(super) fn set(&self, value: impl Into<Arc<T>>) {
        let mut v = match self.value.write() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        };
        *v = (v.0 + 1, value.into());
    }
}

/// What a reload (SIGHUP, `lqd reload`) changes of a northbound endpoint while it runs: its
/// read rules and its TLS configuration (the files read again, for a rotated certificate or
/// CA). Built and checked by the loop's reload, applied by the client thread.
pub(super) struct EndpointReload {
    /// The TLS configuration (`None`: plaintext, which a reload cannot change).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The read rules.
    pub rules: Vec<crate::core::northbound::ReadRule>,
}

/// A reload's values for the endpoints that run.
#[derive(Default)]
pub(super) struct NorthboundReload {
    pub gnmi: Option<EndpointReload>,
    pub metrics: Option<EndpointReload>,
}
