//! The daemon's clients: the control socket (`lqd show`, `lqd monitor`) and the
//! Prometheus metrics endpoint (plain HTTP, or TLS 1.3 with client certificates and the
//! read rules of `[[metrics.client]]`), served on a thread of their own from the snapshots the
//! event loop builds when they ask (`Published`). A client, however slow or silent, costs
//! the loop nothing but CPU: the loop only try-locks the snapshot and builds at most one
//! per publish interval, every request and answer has a deadline, and connections beyond
//! [`MAX_CLIENTS`] are closed at once and counted.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, UnixListener, UnixStream},
    sync::{Notify, Semaphore, broadcast},
};
use tracing::{info, warn};

use super::published::{
    Current, NorthboundReload, Published, RefusalLog, accept_failed, state_json,
};
use crate::{
    core::northbound::{DataPath, ReadRule, grants, readable_subtree},
    sys::clock::monotonic_ns,
    views::snapshot::{ClientStats, EndpointStats, Snapshot},
};

/// Concurrent connections per endpoint (metrics, control socket); more are closed at once
/// and counted as refused.
pub const MAX_CLIENTS: usize = 256;

/// How long a client has to send its request once connected.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);

/// How long writing an answer (or one `monitor` notification) may take.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(2);

/// Longest control request line (`weights`, `state`, ...).
pub const MAX_CONTROL_REQUEST: usize = 256;

/// Longest HTTP request (request line and headers) of the metrics endpoint.
pub const MAX_HTTP_REQUEST: usize = 8192;

/// Listen backlog of both endpoints: a burst of connections waits in the kernel instead of
/// being dropped, and is then served or refused by the client thread.
const BACKLOG: i32 = 1024;

/// The control socket, listening with [`BACKLOG`].
pub(super) fn bind_control(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    s.bind(&SockAddr::unix(path)?)?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// The metrics endpoint, listening with [`BACKLOG`].
pub(super) fn bind_tcp(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

pub(super) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// What the metrics endpoint needs from the daemon.
pub(super) struct MetricsEndpoint {
    /// The listening socket (bound by the daemon at start).
    pub listener: std::net::TcpListener,
    /// TLS, or `None` for plain HTTP; a reload replaces it (new connections).
    pub tls: Option<Arc<Current<rustls::ServerConfig>>>,
    /// The read rules (`[[metrics.client]]`); a reload replaces them.
    pub rules: Arc<Current<Vec<ReadRule>>>,
}

/// What the client thread needs.
struct Clients {
    snapshots: Published,
    notify: broadcast::Sender<String>,
    stats: Arc<ClientStats>,
    /// `lqd reload`: wakes the loop, which reloads as on SIGHUP.
    reload: Arc<Notify>,
}

/// How long `lqd reload` waits for the loop's outcome.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// The client endpoints the daemon set up at start, and how its reloads reach them.
pub(super) struct Endpoints {
    /// The control socket (`lqd show`, `lqd monitor`, `lqd reload`).
    pub control: std::os::unix::net::UnixListener,
    /// The Prometheus endpoint, when configured.
    pub metrics: Option<MetricsEndpoint>,
    /// The gNMI endpoint, when configured.
    pub gnmi: Option<super::gnmi::GnmiEndpoint>,
    /// Each applied reload's read rules and TLS configurations.
    pub reloads: tokio::sync::mpsc::UnboundedReceiver<NorthboundReload>,
}

/// Serves the control socket and the metrics endpoint on a thread of their own, from the
/// snapshots the loop publishes: the loop never waits on a client, and a flood of
/// connections competes with the loop only for CPU.
pub(super) fn spawn_client_thread(
    endpoints: Endpoints,
    snapshots: Published,
    notify: broadcast::Sender<String>,
    stats: Arc<ClientStats>,
    reload: Arc<Notify>,
) -> Result<()> {
    let Endpoints {
        control,
        metrics,
        gnmi,
        reloads,
    } = endpoints;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("client runtime")?;
    let ctx = Arc::new(Clients {
        snapshots,
        notify,
        stats,
        reload,
    });
    std::thread::Builder::new()
        .name("lqd-clients".into())
        .spawn(move || {
            rt.block_on(async move {
                let control = match UnixListener::from_std(control) {
                    Ok(l) => l,
                    Err(e) => {
                        warn!(error = %crate::core::report::Chain(&e), "control socket: no clients will be served");
                        return;
                    }
                };
                tokio::spawn(apply_reloads(
                    reloads,
                    metrics.as_ref().map(|m| (m.tls.clone(), m.rules.clone())),
                    gnmi.as_ref().map(|g| (g.tls.clone(), g.rules.clone())),
                ));
                let metrics = metrics.and_then(|m| {
                    TcpListener::from_std(m.listener)
                        .inspect_err(|e| warn!(error = %crate::core::report::Chain(&e), "metrics endpoint: not served"))
                        .ok()
                        .map(|l| (l, m.tls, m.rules))
                });
                let c = tokio::spawn(accept_control(control, ctx.clone()));
                if let Some((listener, tls, rules)) = metrics {
                    tokio::spawn(accept_metrics(listener, tls, rules, ctx.clone()));
                }
                if let Some(g) = gnmi {
                    tokio::spawn(super::gnmi::serve(
                        g,
                        ctx.snapshots.clone(),
                        ctx.notify.clone(),
                        ctx.stats.clone(),
                    ));
                }
                let _ = c.await;
            });
        })
        .context("client thread")?;
    Ok(())
}

async fn accept_control(listener: UnixListener, ctx: Arc<Clients>) {
    let permits = Arc::new(Semaphore::new(MAX_CLIENTS));
    let mut log = RefusalLog::new("control", MAX_CLIENTS);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                accept_failed("control", &ctx.stats.control, &e).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            log.refused(&ctx.stats.control);
            continue;
        };
        EndpointStats::inc(&ctx.stats.control.accepted);
        let ctx = ctx.clone();
        tokio::spawn(async move {
            serve_control(stream, &ctx).await;
            drop(permit);
        });
    }
}

/// The TLS configuration and read rules of one endpoint, as a reload replaces them.
type EndpointCurrent = (
    Option<Arc<Current<rustls::ServerConfig>>>,
    Arc<Current<Vec<ReadRule>>>,
);

/// Applies each reload's TLS configurations and read rules (built and checked by the
/// loop's reload) to the endpoints: new connections take the new certificate, new requests
/// and running gNMI streams the new rules.
async fn apply_reloads(
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<NorthboundReload>,
    metrics: Option<EndpointCurrent>,
    gnmi: Option<EndpointCurrent>,
) {
    while let Some(r) = reloads.recv().await {
        for (name, current, new) in [("metrics", &metrics, r.metrics), ("gNMI", &gnmi, r.gnmi)] {
            let (Some((tls, rules)), Some(new)) = (current, new) else {
                continue;
            };
            if let (Some(tls), Some(config)) = (tls, new.tls) {
                tls.set(config);
            }
            let n = new.rules.len();
            rules.set(new.rules);
            tracing::info!(
                endpoint = name,
                rules = n,
                "read rules and TLS files reloaded"
            );
        }
    }
}

async fn accept_metrics(
    listener: TcpListener,
    tls: Option<Arc<Current<rustls::ServerConfig>>>,
    rules: Arc<Current<Vec<ReadRule>>>,
    ctx: Arc<Clients>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CLIENTS));
    let mut log = RefusalLog::new("metrics", MAX_CLIENTS);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                accept_failed("metrics", &ctx.stats.metrics, &e).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            log.refused(&ctx.stats.metrics);
            continue;
        };
        EndpointStats::inc(&ctx.stats.metrics.accepted);
        // The configuration and rules of now: a reload's for new connections.
        let acceptor = tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.get().1));
        let rules = rules.get().1;
        let ctx = ctx.clone();
        tokio::spawn(async move {
            // One deadline for the handshake and the request head: a scraper sends both
            // at once, a client that trickles them holds a slot for a second at most.
            let deadline = tokio::time::Instant::now() + REQUEST_DEADLINE;
            match acceptor {
                None => {
                    let g = grants(&rules, |_| false).into_iter().cloned().collect();
                    serve_metrics(stream, deadline, Ok(g), &ctx).await;
                }
                Some(acceptor) => {
                    let stats = &ctx.stats.metrics;
                    match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                        Err(_) => EndpointStats::inc(&stats.timed_out),
                        Ok(Err(e)) => {
                            EndpointStats::inc(&stats.unauthenticated);
                            tracing::debug!(error = %e, "metrics TLS handshake refused");
                        }
                        Ok(Ok(tls)) => {
                            let g = match tls.get_ref().1.peer_certificates() {
                                Some([leaf, ..]) => Ok(grants(&rules, |name| {
                                    crate::transport::tls::certificate_names(leaf, name)
                                })
                                .into_iter()
                                .cloned()
                                .collect()),
                                _ => Err(()),
                            };
                            serve_metrics(tls, deadline, g, &ctx).await;
                        }
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Writes `bytes` within [`WRITE_DEADLINE`]; a client that does not read in time is
/// counted and dropped.
async fn write_within(
    w: &mut (impl AsyncWriteExt + Unpin),
    bytes: &[u8],
    stats: &EndpointStats,
) -> bool {
    match tokio::time::timeout(WRITE_DEADLINE, w.write_all(bytes)).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => false,
        Err(_) => {
            EndpointStats::inc(&stats.timed_out);
            false
        }
    }
}

/// One metrics request: reads the HTTP request head (up to [`MAX_HTTP_REQUEST`] octets,
/// by `deadline`) and answers with the metrics of the latest snapshot that the client's
/// `grants` let it read; a TLS client without a certificate (`Err`) gets 401.
async fn serve_metrics(
    mut stream: impl AsyncReadExt + AsyncWriteExt + Unpin,
    deadline: tokio::time::Instant,
    grants: Result<Vec<DataPath>, ()>,
    ctx: &Clients,
) {
    let stats = &ctx.stats.metrics;
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout_at(deadline, async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            head.extend_from_slice(&chunk[..n]);
            if n == 0 || head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok::<bool, std::io::Error>(true);
            }
            if head.len() > MAX_HTTP_REQUEST {
                return Ok(false);
            }
        }
    })
    .await;
    let answer = match read {
        Err(_) => {
            EndpointStats::inc(&stats.timed_out);
            return;
        }
        Ok(Err(_)) => return,
        Ok(Ok(false)) => {
            EndpointStats::inc(&stats.too_large);
            b"HTTP/1.0 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n".to_vec()
        }
        Ok(Ok(true)) => match grants {
            Err(()) => {
                EndpointStats::inc(&stats.unauthenticated);
                warn!("metrics request refused: no client certificate ([metrics] client-ca)");
                b"HTTP/1.0 401 Unauthorized\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\na client certificate is required (one that chains to [metrics] client-ca)\n".to_vec()
            }
            Ok(grants) => {
                let g: Vec<&DataPath> = grants.iter().collect();
                let readable = |subtree: &str| readable_subtree(&g, subtree);
                let snap = ctx.snapshots.fresh().await;
                let body = crate::views::metrics::render(&snap, Some(&ctx.stats), readable);
                crate::views::metrics::http_response(&body).into_bytes()
            }
        },
    };
    if write_within(&mut stream, &answer, stats).await {
        // TLS: close_notify, so the client reads a clean end of the answer.
        let _ = tokio::time::timeout(WRITE_DEADLINE, stream.shutdown()).await;
    }
}

/// Answers one control request: a line naming a view, a JSON document back; `monitor`
/// instead streams notifications (`lq-threshold-crossed`, `lq-authentication-failure`) as
/// JSON lines until the client
/// goes away or falls behind.
async fn serve_control(stream: UnixStream, ctx: &Clients) {
    let stats = &ctx.stats.control;
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(r.take(MAX_CONTROL_REQUEST as u64 + 1));
    match tokio::time::timeout(REQUEST_DEADLINE, reader.read_line(&mut line)).await {
        Err(_) => {
            EndpointStats::inc(&stats.timed_out);
            return;
        }
        Ok(Err(_)) => line.clear(),
        Ok(Ok(_)) => {}
    }
    if line.len() > MAX_CONTROL_REQUEST {
        EndpointStats::inc(&stats.too_large);
        let reply = json!({"error": format!("request longer than {MAX_CONTROL_REQUEST} octets")});
        let _ = write_within(&mut w, format!("{reply}\n").as_bytes(), stats).await;
        return;
    }
    let request = line.trim();
    if request == "monitor" {
        follow_notifications(w, ctx).await;
        return;
    }
    if request == "reload" {
        let mut text = reload(ctx).await;
        text.push('\n');
        let _ = write_within(&mut w, text.as_bytes(), stats).await;
        return;
    }
    let snap = ctx.snapshots.fresh().await;
    let mut text = answer(request, &snap);
    text.push('\n');
    let _ = write_within(&mut w, text.as_bytes(), stats).await;
}

/// `lqd reload`: asks the loop to reload (as SIGHUP does) and answers with the outcome
/// (`last-reload` of the status), or an error when the loop has not reloaded within
/// [`RELOAD_DEADLINE`]. The loop reloads between two of its steps; this client waits on
/// its own task.
async fn reload(ctx: &Clients) -> String {
    let before = ctx.snapshots.fresh().await.status.reloads;
    ctx.reload.notify_one();
    let until = tokio::time::Instant::now() + RELOAD_DEADLINE;
    loop {
        let snap = ctx.snapshots.fresh().await;
        if snap.status.reloads > before {
            return serde_json::to_string(&snap.status.last_reload).unwrap_or_else(|e| {
                json!({"error": format!("rendering the reply: {e}")}).to_string()
            });
        }
        if tokio::time::Instant::now() > until {
            return json!({"error": "the daemon did not reload within 10 s"}).to_string();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `lqd monitor`: one JSON line per notification. A client that falls more than the
/// channel's capacity behind, or does not take a line within [`WRITE_DEADLINE`], is
/// dropped (and counted) so it holds back nobody else.
async fn follow_notifications(mut w: tokio::net::unix::OwnedWriteHalf, ctx: &Clients) {
    let mut rx = ctx.notify.subscribe();
    info!("lqd monitor: a client follows the notifications");
    loop {
        match rx.recv().await {
            Ok(n) => {
                if !write_within(&mut w, format!("{n}\n").as_bytes(), &ctx.stats.control).await {
                    break;
                }
            }
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                EndpointStats::inc(&ctx.stats.monitors_dropped);
                warn!(
                    lost,
                    "monitor client fell behind the notifications: dropped"
                );
                break;
            }
            Err(broadcast::error::RecvError::Closed) => break,
        }
    }
}

/// The reply to one request, as JSON text. Typed views are written straight to text: a
/// `serde_json::Value` of a 512-group leaf's weights (32 768 members) took tens of MB of
/// the client thread's heap for a moment, and the allocator kept it (issue 15, RSS).
fn answer(request: &str, snap: &Snapshot) -> String {
    let now = monotonic_ns();
    let no = |what: &str| {
        json!({"error": format!("this node does not run the {what} role")}).to_string()
    };
    let text = |v: Result<String, serde_json::Error>| {
        v.unwrap_or_else(|e| json!({"error": format!("rendering the reply: {e}")}).to_string())
    };
    let lb = snap.load_balancer.as_ref();
    let helper = snap.helper.as_ref();
    match request {
        "weights" => lb.map_or_else(
            || no("load-balancer"),
            |lb| text(serde_json::to_string(&lb.weights)),
        ),
        "neighbors" => lb.map_or_else(
            || no("load-balancer"),
            |lb| lb.neighbors_json(now).to_string(),
        ),
        "local" => helper.map_or_else(|| no("helper"), |h| text(serde_json::to_string(&h.local))),
        "uplinks" => lb.map_or_else(
            || no("load-balancer"),
            |lb| text(serde_json::to_string(&lb.uplinks)),
        ),
        // The socket path's counters of `[receiver] authentication` (issue 39), which live
        // in lqd, not in the pinned maps `lqd show counters` reads: empty without it.
        "authentication" => lb.map_or_else(
            || no("load-balancer"),
            |lb| {
                let auth: serde_json::Map<String, serde_json::Value> = lb
                    .receiver_counters
                    .iter()
                    .flatten()
                    .filter(|(k, _)| k.starts_with("auth_"))
                    .map(|(k, v)| ((*k).to_string(), (*v).into()))
                    .collect();
                serde_json::Value::Object(auth).to_string()
            },
        ),
        "status" => {
            let mut status = snap.status.clone();
            status.uptime_s = crate::sys::clock::unix_ms_now()
                .saturating_sub(status.started_unix_ms) as f64
                / 1000.0;
            text(serde_json::to_string(&status))
        }
        "state" => state_json(snap).to_string(),
        other => json!({"error": format!("unknown request {other:?}: weights, neighbors, local, uplinks, authentication, state, status, reload, monitor")})
            .to_string(),
    }
}

/// Follows the notifications of a running instance: calls `each` with
/// every JSON line until the daemon goes away.
pub fn monitor(socket: &Path, mut each: impl FnMut(&str) -> bool) -> Result<()> {
    use std::io::{BufRead as _, Write as _};
    let mut s = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "connect to {} (is lqd running with this --instance?)",
            socket.display()
        )
    })?;
    s.write_all(b"monitor\n")?;
    for line in std::io::BufReader::new(s).lines() {
        if !each(&line?) {
            break;
        }
    }
    Ok(())
}

/// Sends one request to a running instance and returns its JSON answer.
pub fn query(socket: &Path, request: &str) -> Result<Value> {
    query_within(socket, request, Duration::from_secs(5))
}

/// [`query`] with the answer awaited for at most `deadline`.
pub fn query_within(socket: &Path, request: &str, deadline: Duration) -> Result<Value> {
    use std::io::{BufRead as _, Write as _};
    let mut s = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "connect to {} (is lqd running with this --instance?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(deadline))?;
    s.write_all(format!("{request}\n").as_bytes())?;
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line)?;
    let v: Value = serde_json::from_str(&line).context("parse the daemon's answer")?;
    if let Some(e) = v.get("error") {
        anyhow::bail!("lqd answered: {e}");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::atomic::Ordering;

    fn clients() -> (Arc<Clients>, Published) {
        let cfg = Config::parse(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n[receiver]\ninterfaces = [\"eth1\"]\n",
            Path::new("test.toml"),
        )
        .expect("a minimal configuration");
        let cfg = Arc::new(cfg);
        let tx = Published::new(Snapshot::empty(cfg.clone(), Default::default()));
        // The loop's part: a snapshot when a client asks.
        let publisher = tx.clone();
        tokio::spawn(async move {
            loop {
                publisher.asked().await;
                if publisher.take_wanted() {
                    let mut s = Snapshot::empty(cfg.clone(), Default::default());
                    s.taken_mono_ns = monotonic_ns();
                    assert!(publisher.try_publish(s));
                }
            }
        });
        let (notify, _) = broadcast::channel(1024);
        let ctx = Arc::new(Clients {
            snapshots: tx.clone(),
            notify,
            stats: Arc::new(ClientStats::default()),
            reload: Arc::new(Notify::new()),
        });
        (ctx, tx)
    }

    async fn ask(ctx: &Arc<Clients>, request: &[u8]) -> String {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let c = ctx.clone();
        let task = tokio::spawn(async move { serve_control(theirs, &c).await });
        let (r, mut w) = ours.into_split();
        w.write_all(request).await.unwrap();
        let mut line = String::new();
        BufReader::new(r).read_line(&mut line).await.unwrap();
        task.await.unwrap();
        line
    }

    #[tokio::test]
    async fn control_requests_are_answered_from_the_snapshot() {
        let (ctx, _tx) = clients();
        let state: Value = serde_json::from_str(&ask(&ctx, b"state\n").await).unwrap();
        assert_eq!(
            state["ietf-lq-telemetry:lq-telemetry"]["role"], "load-balancer",
            "{state}"
        );
        let w = ask(&ctx, b"weights\n").await;
        assert!(w.contains("does not run the load-balancer role"), "{w}");
        let long = vec![b'x'; MAX_CONTROL_REQUEST + 10];
        let e = ask(&ctx, &long).await;
        assert!(e.contains("request longer than 256 octets"), "{e}");
        assert_eq!(ctx.stats.control.too_large.load(Ordering::Relaxed), 1);
    }

    /// A request is answered from a snapshot taken after it, built because it asked; with
    /// no loop answering, from the latest one after the wait.
    #[tokio::test]
    async fn a_request_waits_for_a_snapshot_newer_than_itself() {
        let (ctx, tx) = clients();
        let before = monotonic_ns();
        let snap = ctx.snapshots.fresh().await;
        assert!(
            snap.taken_mono_ns >= before,
            "{} < {before}",
            snap.taken_mono_ns
        );
        assert!(!tx.is_wanted(), "the request was served");
        let cfg = snap.config.clone();
        let lonely = Published::new(Snapshot::empty(cfg, Default::default()));
        let started = std::time::Instant::now();
        let snap = lonely.fresh().await;
        assert_eq!(
            snap.taken_mono_ns, 0,
            "the latest one: nobody built another"
        );
        assert!(started.elapsed() >= super::super::published::FRESH_SNAPSHOT_WAIT);
        assert!(lonely.is_wanted(), "the request stands for the loop");
    }

    #[tokio::test]
    async fn a_silent_client_is_closed_at_the_request_deadline() {
        let (ctx, _tx) = clients();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let started = std::time::Instant::now();
        serve_control(theirs, &ctx).await;
        let took = started.elapsed();
        assert!(
            took >= REQUEST_DEADLINE && took < REQUEST_DEADLINE * 3,
            "{took:?}"
        );
        assert_eq!(ctx.stats.control.timed_out.load(Ordering::Relaxed), 1);
        drop(ours);
    }

    /// `monitor` streams notifications; a client that falls more than the channel's
    /// capacity behind is dropped and counted instead of holding anyone back.
    #[tokio::test]
    async fn monitor_streams_and_drops_a_client_that_falls_behind() {
        let (ctx, _tx) = clients();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let c = ctx.clone();
        let follower = tokio::spawn(async move { serve_control(theirs, &c).await });
        let (r, mut w) = ours.into_split();
        w.write_all(b"monitor\n").await.unwrap();
        while ctx.notify.receiver_count() == 0 {
            tokio::task::yield_now().await;
        }
        let mut lines = BufReader::new(r).lines();
        for i in 0..3 {
            ctx.notify.send(format!("{{\"n\":{i}}}")).unwrap();
            assert_eq!(
                lines.next_line().await.unwrap().as_deref(),
                Some(format!("{{\"n\":{i}}}").as_str())
            );
        }
        // 1 100 notifications before the follower runs again: it lags the 1 024-slot
        // channel, is dropped, and its stream ends.
        for i in 0..1100 {
            let _ = ctx.notify.send(format!("{{\"n\":{i}}}"));
        }
        follower.await.unwrap();
        assert_eq!(ctx.stats.monitors_dropped.load(Ordering::Relaxed), 1);
        assert_eq!(lines.next_line().await.unwrap(), None);
    }
}
