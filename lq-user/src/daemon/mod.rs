//! `lqd run`: the event loop at the edge. Timers, the XDP change-event ring buffer and
//! signals feed the deterministic core; nothing here decides anything. Clients (control
//! socket, metrics) are served on a thread of their own from published snapshots.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    signal::unix::{SignalKind, signal},
    sync::{Semaphore, broadcast},
};
use tracing::{info, warn};

use crate::{
    config::Config,
    roles::{helper::HelperRole, load_balancer::LoadBalancer},
    sys::{
        bpf::path_table::DEFAULT_PIN_ROOT,
        clock::{boottime_ns, monotonic_ns},
    },
    views::snapshot::{ClientStats, EndpointStats, PfcSnapshot, Snapshot},
};

/// Default folder of control sockets.
pub const RUN_DIR: &str = "/run/lq";

/// Where an instance keeps its pins and its control socket.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Instance name (several lqd can run on one host, e.g. in network namespaces).
    pub name: String,
    /// bpffs folder of the pinned maps.
    pub pin_dir: PathBuf,
    /// Control socket path.
    pub socket: PathBuf,
}

impl Instance {
    /// The default locations of instance `name`, with the config's pin-dir if it has one.
    pub fn new(name: &str, cfg_pin_dir: Option<&Path>) -> Self {
        Self {
            name: name.into(),
            pin_dir: cfg_pin_dir
                .map_or_else(|| Path::new(DEFAULT_PIN_ROOT).join(name), Path::to_path_buf),
            socket: Path::new(RUN_DIR).join(format!("{name}.sock")),
        }
    }
}

/// The longest the loop sleeps without a reason. Heartbeat deadlines and damping steps
/// wake it at their own time and change events from the XDP program at once; this bounds
/// only how late a local uplink going down (polled each step) is noticed.
const MAX_SLEEP: Duration = Duration::from_millis(10);

/// How often at most the loop publishes a snapshot for its clients. Clients never wait on
/// the loop: they read the latest snapshot, at most this much (plus one loop step) old on
/// a node whose snapshot is cheap (see PUBLISH_COST_FACTOR for a large one).
const PUBLISH_EVERY_NS: u64 = 5_000_000;

/// A snapshot's share of the loop's time at most (1/100): a large node's snapshot (a leaf
/// of a 64 x 512 fabric: 512 groups of 64 members, 32 768 entries) takes milliseconds to
/// build, and at PUBLISH_EVERY_NS that alone took most of a core. The interval stretches
/// to 100 x the last build's CPU time, at most MAX_PUBLISH_EVERY_NS.
const PUBLISH_COST_FACTOR: u64 = 100;
/// The oldest a published snapshot gets (before the loop's own step).
const MAX_PUBLISH_EVERY_NS: u64 = 1_000_000_000;

/// Change events closer than this to the last step they woke wait for the next step, at most
/// this long after that one: an isolated event (a path turning bad) is handled at once, a dense
/// stream (a 64 x 512 fabric's entries changing every few hundred microseconds) costs at
/// most one step per interval instead of one per event. Well inside T_reweight (20 ms),
/// the damping boundary at which weights move anyway (seed 003 section 6.4).
const MIN_EVENT_STEP_NS: u64 = 5_000_000;

/// A sample that takes longer than this is logged (debug): a slow rtnetlink read.
const SLOW_SAMPLE_NS: u64 = 2_000_000;

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

/// How the event loop's thread is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    /// SCHED_RR priority 1 (with reset-on-fork): when a timer fires, the loop preempts
    /// ordinary processes at once instead of waiting out their time slice (several ms
    /// under EEVDF), which would stretch the advertisement period a leaf watches; and the
    /// pages mapped at start locked in memory (no major faults on the loop's code).
    Realtime,
    /// The default policy of the process.
    Normal,
}

/// Runs the daemon until SIGTERM or SIGINT: the load-balancer role, the helper role, or
/// both (dual, seed 003 section 9), in one event loop.
pub async fn run(config_path: PathBuf, instance: Instance, scheduling: Scheduling) -> Result<()> {
    let cfg = Config::load(&config_path)?;
    let role = cfg.lq_telemetry.role;
    info!(role = role.as_str(), instance = %instance.name, config = %config_path.display(), "lqd starting");
    let mut lb = if role.receives() {
        Some(
            LoadBalancer::start(cfg.clone(), instance.pin_dir.clone()).with_context(|| {
                format!(
                    "starting the load-balancer role from {}",
                    config_path.display()
                )
            })?,
        )
    } else {
        None
    };
    let mut pfc = if cfg.pfc.interfaces.is_empty() && cfg.pfc.ethtool.is_empty() {
        None
    } else {
        Some(
            crate::roles::pfc::PfcService::start(&cfg, &instance.name)
                .context("starting PFC counting")?,
        )
    };
    let mut helper = if role.advertises() {
        let pfc_dir = pfc.as_ref().map(|p| p.counter().pin_dir().to_path_buf());
        let source = crate::roles::helper::kernel_source(&cfg, pfc_dir.as_deref())
            .context("link counters of the helper role")?;
        Some(HelperRole::start(&cfg, source).context("starting the helper role")?)
    } else {
        None
    };
    let mut events = match lb.as_mut() {
        Some(lb) => {
            let events = lb
                .receiver_mut()
                .take_events()
                .context("change-event ring buffer")?;
            Some(
                crate::sys::timer::register(events, tokio::io::Interest::READABLE)
                    .map_err(|e| anyhow::anyhow!("ring buffer fd: {e}"))?,
            )
        }
        None => None,
    };
    // The slow plane (seed 003 section 4.1): the routing daemon's routes, dumped once and
    // then followed by notification.
    let mut routes = match lb.as_mut() {
        Some(lb) if lb.slow_plane_enabled() => {
            let mut monitor = crate::sys::netlink::route_monitor::RouteMonitor::open()
                .context("route monitor socket")?;
            lb.route_events(monitor.dump().context("route and nexthop dump")?);
            Some(
                crate::sys::timer::register(monitor, tokio::io::Interest::READABLE)
                    .map_err(|e| anyhow::anyhow!("route monitor fd: {e}"))?,
            )
        }
        _ => None,
    };
    // The NNH mapping learned through BMP (section 6.1): the station's socket is bound now,
    // its thread started once the capabilities are dropped.
    let bmp_listener = match (
        lb.as_ref(),
        cfg.slow_plane.as_ref().and_then(|s| s.bmp.as_ref()),
    ) {
        (Some(lb), Some(b)) if lb.slow_plane_enabled() => Some((
            crate::transport::bmp::bind(b.listen).context("BMP station")?,
            b.max_sessions,
        )),
        _ => None,
    };

    crate::sys::sched::raise_fd_limit();
    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("create {RUN_DIR}"))?;
    let _ = std::fs::remove_file(&instance.socket);
    let control = bind_control(&instance.socket)
        .with_context(|| format!("bind the control socket {}", instance.socket.display()))?;
    set_mode(&instance.socket, 0o600)?;
    info!(socket = %instance.socket.display(), "control socket (root only)");
    let (notify_tx, _) = broadcast::channel::<String>(1024);
    let metrics = match &cfg.metrics {
        Some(m) => {
            let l = bind_tcp(m.listen)
                .with_context(|| format!("bind the metrics endpoint {}", m.listen))?;
            info!(listen = %m.listen, "Prometheus metrics at /metrics");
            Some(l)
        }
        None => None,
    };
    let mut config_now = Arc::new(cfg);
    let snapshots = Published::new(Snapshot::empty(config_now.clone()));

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let t_sample = Duration::from_millis(u64::from(config_now.helper.t_sample_ms));
    // The periodic advertisement's own timer (seed 003 section 7.2: [0.9, 1.1] x
    // T_notify, uniform): a timerfd on CLOCK_BOOTTIME with absolute deadlines, because
    // tokio's 1 ms timer wheel, or waiting for the next T_sample tick, would round the
    // jitter away.
    let periodic = match helper {
        Some(_) => {
            Some(crate::sys::timer::PeriodicTimer::new().context("periodic advertisement timer")?)
        }
        None => None,
    };
    if let Some(lb) = lb.as_mut() {
        lb.step(monotonic_ns())?;
    }
    // While CAP_SYS_NICE and CAP_IPC_LOCK are still held.
    if scheduling == Scheduling::Realtime {
        crate::sys::sched::set_realtime();
        crate::sys::sched::lock_memory();
    }
    // The counters are read on a thread of their own: the loop only feeds their batches
    // in. Started while CAP_SYS_NICE is held, for the same scheduling policy as the loop;
    // it drops its own capabilities before it returns (spawn_sampler).
    let mut batches = match helper.as_mut() {
        Some(h) => Some(
            h.spawn_sampler(t_sample, scheduling == Scheduling::Realtime)
                .context("sampler thread")?,
        ),
        None => None,
    };
    // Everything privileged is set up: keep only CAP_BPF and CAP_NET_ADMIN.
    crate::sys::privileges::drop_capabilities().context("dropping capabilities")?;
    // Only now the client thread: capabilities are per thread, and it inherits the
    // dropped set (and, by SCHED_RESET_ON_FORK, the normal scheduling policy).
    // The BMP station parses what a peer sends: it starts with the dropped set too.
    let mut bmp = match bmp_listener {
        Some((l, max)) => Some(crate::transport::bmp::spawn(l, max).context("BMP station")?),
        None => None,
    };
    let clients = Arc::new(ClientStats::default());
    spawn_client_thread(
        control,
        metrics,
        snapshots.clone(),
        notify_tx.clone(),
        clients.clone(),
    )?;
    info!("lqd running");
    let mut last_publish_ns = 0u64;
    let mut publish_every_ns = PUBLISH_EVERY_NS;
    // The last control step woken by change events, and whether events wait for the next.
    let mut last_event_step_ns = 0u64;
    let mut events_pending = false;
    // A step ran since the last publish: the loop wakes to publish it when due, so that a
    // client sees a step's outcome within one publish interval.
    let mut unpublished = false;
    loop {
        let now = monotonic_ns();
        if now.saturating_sub(last_publish_ns) >= publish_every_ns {
            let cpu0 = crate::sys::clock::thread_cpu_ns();
            let snap = build_snapshot(now, &config_now, lb.as_ref(), helper.as_ref(), pfc.as_ref());
            if snapshots.try_publish(snap) {
                last_publish_ns = now;
                unpublished = false;
            }
            // The build's CPU time, not its wall time: a build preempted (by an interrupt,
            // the XDP softirq) for a millisecond once stretched the next interval to
            // 100 ms, and `lqd show` answered from a snapshot older than the last change.
            let took = crate::sys::clock::thread_cpu_ns().saturating_sub(cpu0);
            publish_every_ns = took
                .saturating_mul(PUBLISH_COST_FACTOR)
                .clamp(PUBLISH_EVERY_NS, MAX_PUBLISH_EVERY_NS);
        }
        if let (Some(t), Some(h)) = (periodic.as_ref(), helper.as_ref())
            && let Err(e) = t.arm(h.next_due_at())
        {
            warn!(error = %crate::core::report::Chain(&e), "arming the periodic advertisement timer failed");
        }
        let due = [
            lb.as_ref().and_then(|lb| lb.next_due(now)),
            pfc.as_ref().and_then(|p| p.next_due()),
            events_pending.then(|| last_event_step_ns.saturating_add(MIN_EVENT_STEP_NS)),
            unpublished.then(|| last_publish_ns.saturating_add(publish_every_ns)),
        ]
        .into_iter()
        .flatten()
        .min();
        let sleep = due.map_or(MAX_SLEEP, |due| {
            Duration::from_nanos(due.saturating_sub(now)).min(MAX_SLEEP)
        });
        let mut step_lb = lb.is_some();
        tokio::select! {
            // The periodic timer first: when it is ready together with a sample, the send
            // goes out at the timer's deadline (seed 003 section 7.2), not after the sample.
            biased;
            fired = async {
                match periodic.as_ref() {
                    Some(t) => t.expired().await,
                    None => std::future::pending().await,
                }
            } => {
                step_lb = false;
                match fired {
                    Ok(()) => {
                        if let Some(h) = helper.as_mut() {
                            h.advertise_due(boottime_ns());
                            forward_notifications(h, &notify_tx);
                        }
                    }
                    Err(e) => warn!(error = %crate::core::report::Chain(&e), "reading the periodic advertisement timer failed"),
                }
            }
            _ = tokio::time::sleep(sleep), if lb.is_some() || pfc.is_some() => {
                if let Some(p) = pfc.as_mut() {
                    p.tick(monotonic_ns());
                }
            }
            batch = async {
                match batches.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                step_lb = false;
                match (batch, helper.as_mut()) {
                    (Some(b), Some(h)) => {
                        if b.took_ns > SLOW_SAMPLE_NS {
                            tracing::debug!(took_ms = b.took_ns as f64 / 1e6, "reading the link counters was slow");
                        }
                        h.on_batch(b, boottime_ns());
                        forward_notifications(h, &notify_tx);
                    }
                    _ => {
                        warn!("the sampler thread stopped: no new samples, periodic advertisements go on with the last values");
                        batches = None;
                    }
                }
            }
            ready = async {
                match events.as_mut() {
                    Some(e) => e.readable_mut().await,
                    None => std::future::pending().await,
                }
            } => {
                let mut guard = ready?;
                let rb = guard.get_inner_mut();
                let mut n = 0u32;
                while let Some(record) = rb.next() {
                    if let Some(lb) = lb.as_mut() {
                        lb.note_event(&record);
                    }
                    n += 1;
                }
                guard.clear_ready();
                tracing::trace!(events = n, "path table changed");
                let now = monotonic_ns();
                if now.saturating_sub(last_event_step_ns) < MIN_EVENT_STEP_NS {
                    step_lb = false;
                    events_pending = true;
                } else {
                    last_event_step_ns = now;
                }
            }
            ready = async {
                match routes.as_mut() {
                    Some(r) => r.readable_mut().await,
                    None => std::future::pending().await,
                }
            } => {
                let mut guard = ready?;
                match guard.get_inner_mut().drain() {
                    Ok(events) => {
                        if let Some(lb) = lb.as_mut() {
                            lb.route_events(events);
                        }
                    }
                    Err(e) => warn!(error = %crate::core::report::Chain(&e), "route monitor"),
                }
                guard.clear_ready();
            }
            changed = async {
                match bmp.as_mut() {
                    Some(rx) => rx.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                match (changed, bmp.as_mut(), lb.as_mut()) {
                    (Ok(()), Some(rx), Some(lb)) => {
                        let snap = rx.borrow_and_update().clone();
                        lb.bmp_update(snap);
                    }
                    _ => {
                        warn!("the BMP station stopped: the learned mapping stays as it was");
                        bmp = None;
                    }
                }
            }
            _ = term.recv() => { info!("SIGTERM"); break; }
            _ = int.recv() => { info!("SIGINT"); break; }
            _ = hup.recv() => {
                match Config::load(&config_path) {
                    Ok(new) if new.lq_telemetry.role != role => {
                        warn!("reload refused: the role cannot change at run time; restart lqd");
                    }
                    Ok(new) => {
                        let result = match lb.as_mut() {
                            Some(lb) => lb.reload(new.clone()).map_err(anyhow::Error::from),
                            None => Ok(()),
                        };
                        match result {
                            Ok(()) => {
                                info!("configuration reloaded");
                                config_now = Arc::new(new);
                                // Clients see the new configuration at once.
                                last_publish_ns = 0;
                            }
                            Err(e) => warn!(error = %crate::core::report::Chain(e.as_ref()), "reload failed; the running configuration stays"),
                        }
                    }
                    Err(e) => warn!(error = %crate::core::report::Chain(&e), "reload refused; the running configuration stays"),
                }
            }
        }
        if step_lb && let Some(lb) = lb.as_mut() {
            let now = monotonic_ns();
            if events_pending {
                // The deferred events' step.
                last_event_step_ns = now;
            }
            events_pending = false;
            unpublished = true;
            if let Err(e) = lb.step(now) {
                warn!(error = %crate::core::report::Chain(&e), "control step failed");
            }
        }
    }
    let _ = std::fs::remove_file(&instance.socket);
    if let Some(lb) = lb.as_mut() {
        lb.withdraw_slow_plane();
        if config_now.nexthop_group.flush_on_exit {
            lb.flush();
        } else {
            info!(
                "exiting; forwarding state (nexthop groups, routes) and the pinned path table stay in place"
            );
        }
    }
    Ok(())
}

fn forward_notifications(h: &mut HelperRole, notify: &broadcast::Sender<String>) {
    for n in h.take_notifications() {
        let line = n.to_json_string();
        info!(notification = %line, "lq-threshold-crossed");
        let _ = notify.send(line);
    }
}

/// The loop's state as the typed snapshot its clients read.
fn build_snapshot(
    now_ns: u64,
    config: &Arc<Config>,
    lb: Option<&LoadBalancer>,
    helper: Option<&HelperRole>,
    pfc: Option<&crate::roles::pfc::PfcService>,
) -> Snapshot {
    Snapshot {
        taken_mono_ns: now_ns,
        config: config.clone(),
        load_balancer: lb.map(LoadBalancer::snapshot),
        helper: helper.map(HelperRole::snapshot),
        pfc: pfc.map(|p| PfcSnapshot {
            rx_counts: p.rx_counts().ok(),
            messages: p.messages,
            export_errors: p.export_errors,
        }),
    }
}

/// The control socket, listening with [`BACKLOG`].
fn bind_control(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    s.bind(&SockAddr::unix(path)?)?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// The metrics endpoint, listening with [`BACKLOG`].
fn bind_tcp(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// What the client thread needs.
struct Clients {
    snapshots: Published,
    notify: broadcast::Sender<String>,
    stats: Arc<ClientStats>,
}

/// The latest snapshot, shared by the loop and the client thread. The loop only
/// try-locks it: the client thread, preempted while it holds the lock, can never hold up
/// the real-time loop (no priority inversion); a publish that finds it taken is retried on
/// the next iteration. Clients hold it only to clone an `Arc`.
#[derive(Clone)]
struct Published(Arc<std::sync::Mutex<Arc<Snapshot>>>);

impl Published {
    fn new(first: Snapshot) -> Self {
        Self(Arc::new(std::sync::Mutex::new(Arc::new(first))))
    }

    /// Replaces the snapshot unless a client holds the lock right now.
    fn try_publish(&self, snap: Snapshot) -> bool {
        let snap = Arc::new(snap);
        match self.0.try_lock() {
            Ok(mut latest) => {
                // The old snapshot is dropped after the lock is released.
                let _old = std::mem::replace(&mut *latest, snap);
                drop(latest);
                true
            }
            Err(_) => false,
        }
    }

    /// The latest snapshot.
    fn latest(&self) -> Arc<Snapshot> {
        match self.0.lock() {
            Ok(s) => s.clone(),
            // Nothing panics while holding it; if something did, the value is still whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Serves the control socket and the metrics endpoint on a thread of their own, from the
/// snapshots the loop publishes: the loop never waits on a client, and a flood of
/// connections competes with the loop only for CPU.
fn spawn_client_thread(
    control: std::os::unix::net::UnixListener,
    metrics: Option<std::net::TcpListener>,
    snapshots: Published,
    notify: broadcast::Sender<String>,
    stats: Arc<ClientStats>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("client runtime")?;
    let ctx = Arc::new(Clients {
        snapshots,
        notify,
        stats,
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
                let metrics = metrics.and_then(|m| {
                    TcpListener::from_std(m)
                        .inspect_err(|e| warn!(error = %crate::core::report::Chain(&e), "metrics endpoint: not served"))
                        .ok()
                });
                let c = tokio::spawn(accept_control(control, ctx.clone()));
                if let Some(m) = metrics {
                    tokio::spawn(accept_metrics(m, ctx.clone()));
                }
                let _ = c.await;
            });
        })
        .context("client thread")?;
    Ok(())
}

/// Logs refused connections at most once a second per endpoint.
struct RefusalLog {
    endpoint: &'static str,
    last: Option<std::time::Instant>,
}

impl RefusalLog {
    fn refused(&mut self, stats: &EndpointStats) {
        EndpointStats::inc(&stats.refused);
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.last = Some(std::time::Instant::now());
            warn!(
                endpoint = self.endpoint,
                limit = MAX_CLIENTS,
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
async fn accept_failed(endpoint: &'static str, stats: &EndpointStats, e: &std::io::Error) {
    EndpointStats::inc(&stats.accept_errors);
    warn!(endpoint, error = %crate::core::report::Chain(&e), "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn accept_control(listener: UnixListener, ctx: Arc<Clients>) {
    let permits = Arc::new(Semaphore::new(MAX_CLIENTS));
    let mut log = RefusalLog {
        endpoint: "control",
        last: None,
    };
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

async fn accept_metrics(listener: TcpListener, ctx: Arc<Clients>) {
    let permits = Arc::new(Semaphore::new(MAX_CLIENTS));
    let mut log = RefusalLog {
        endpoint: "metrics",
        last: None,
    };
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
        let ctx = ctx.clone();
        tokio::spawn(async move {
            serve_metrics(stream, &ctx).await;
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
/// within [`REQUEST_DEADLINE`]) and answers with the metrics of the latest snapshot.
async fn serve_metrics(mut stream: TcpStream, ctx: &Clients) {
    let stats = &ctx.stats.metrics;
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(REQUEST_DEADLINE, async {
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
    let body = match read {
        Err(_) => {
            EndpointStats::inc(&stats.timed_out);
            return;
        }
        Ok(Err(_)) => return,
        Ok(Ok(false)) => {
            EndpointStats::inc(&stats.too_large);
            let _ = write_within(
                &mut stream,
                b"HTTP/1.0 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n",
                stats,
            )
            .await;
            return;
        }
        Ok(Ok(true)) => {
            let snap = ctx.snapshots.latest();
            crate::views::metrics::render(&snap, Some(&ctx.stats))
        }
    };
    let _ = write_within(
        &mut stream,
        crate::views::metrics::http_response(&body).as_bytes(),
        stats,
    )
    .await;
}

/// Answers one control request: a line naming a view, a JSON document back; `monitor`
/// instead streams `lq-threshold-crossed` notifications as JSON lines until the client
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
    let snap = ctx.snapshots.latest();
    let mut text = answer(request, &snap);
    text.push('\n');
    let _ = write_within(&mut w, text.as_bytes(), stats).await;
}

/// `lqd monitor`: one JSON line per notification. A client that falls more than the
/// channel's capacity behind, or does not take a line within [`WRITE_DEADLINE`], is
/// dropped (and counted) so it holds back nobody else.
async fn follow_notifications(mut w: tokio::net::unix::OwnedWriteHalf, ctx: &Clients) {
    let mut rx = ctx.notify.subscribe();
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
        "state" => {
            let neighbors = lb.map(|lb| lb.neighbors_yang(now, crate::sys::clock::unix_ns()));
            let local = helper.map(crate::views::snapshot::HelperSnapshot::local_yang);
            crate::views::yang_state::state_document(&snap.config, local, neighbors).to_string()
        }
        other => json!({"error": format!("unknown request {other:?}: weights, neighbors, local, state, monitor")})
            .to_string(),
    }
}

/// Follows `lq-threshold-crossed` notifications of a running instance: calls `each` with
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
    use std::io::{BufRead as _, Write as _};
    let mut s = std::os::unix::net::UnixStream::connect(socket).with_context(|| {
        format!(
            "connect to {} (is lqd running with this --instance?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
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
    use std::sync::atomic::Ordering;

    fn clients() -> (Arc<Clients>, Published) {
        let cfg = Config::parse(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n[receiver]\ninterfaces = [\"eth1\"]\n",
            Path::new("test.toml"),
        )
        .expect("a minimal configuration");
        let tx = Published::new(Snapshot::empty(Arc::new(cfg)));
        let (notify, _) = broadcast::channel(1024);
        let ctx = Arc::new(Clients {
            snapshots: tx.clone(),
            notify,
            stats: Arc::new(ClientStats::default()),
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
