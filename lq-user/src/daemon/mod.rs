//! `lqd run`: the event loop at the edge. Timers, the XDP change-event ring buffer and
//! signals feed the deterministic core; nothing here decides anything. Clients (control
//! socket, metrics) are served on a thread of their own from published snapshots.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::broadcast,
};
use tracing::{info, warn};

use crate::{
    config::Config,
    roles::{helper::HelperRole, load_balancer::LoadBalancer},
    sys::{
        bpf::path_table::DEFAULT_PIN_ROOT,
        clock::{boottime_ns, monotonic_ns},
    },
    views::snapshot::{ClientStats, PfcSnapshot, Snapshot},
};

mod clients;
mod gnmi;
mod published;

pub use clients::{
    MAX_CLIENTS, MAX_CONTROL_REQUEST, MAX_HTTP_REQUEST, RELOAD_DEADLINE, REQUEST_DEADLINE,
    WRITE_DEADLINE, monitor, query, query_within,
};
use published::{Current, Published};

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

/// Which of an instance's two ECN-eligible counters (each with its own pins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EcnCounter {
    /// The helper's `[[link]]`s.
    Links,
    /// The load-balancer's `[[uplink]]`s, with `[local-quality] source = "measured"`.
    Uplinks,
}

impl Instance {
    /// The pin folder of one of the instance's ECN-eligible counters, inside its own.
    pub fn ecn_pin_dir(&self, which: EcnCounter) -> PathBuf {
        self.pin_dir.join(match which {
            EcnCounter::Links => "ecn-links",
            EcnCounter::Uplinks => "ecn-uplinks",
        })
    }

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
const MAX_SLEEP_NS: u64 = 10_000_000;

/// How often at most the loop builds a snapshot for its clients, however many ask
/// (`published::Published`): requests inside the interval wait for its end and share a build.
const PUBLISH_EVERY_NS: u64 = 5_000_000;

/// A snapshot's share of the loop's time at most (1/100), under any rate of requests: a
/// large node's snapshot (a leaf of a 64 x 512 fabric: 512 groups of 64 members, 32 768
/// entries) takes milliseconds to build. The interval stretches to 100 x the last build's
/// CPU time, at most MAX_PUBLISH_EVERY_NS.
const PUBLISH_COST_FACTOR: u64 = 100;
/// The longest interval between two builds: below `published::FRESH_SNAPSHOT_WAIT`, so a
/// request is answered from a snapshot newer than itself unless a step holds the loop.
const MAX_PUBLISH_EVERY_NS: u64 = 1_000_000_000;

/// Change events closer than their least interval to the last step they woke wait for the
/// next step, at most that long after that one: an isolated event is handled at once, a dense
/// stream (a 64 x 512 fabric's entries changing every few hundred microseconds) costs at
/// most one step per interval instead of one per event (`EventStepPacing`).
///
/// The events with a zero transition (`EVENT_FLAG_ZERO_TRANSITION`: a path quality may go
/// to or from 0, which seed 003 section 6.4 applies immediately) have their own ring and
/// this least interval: a storm of them (a receiver's first T_notify, when every entry is
/// new) steps lqd once a millisecond, not once a datagram.
const MIN_ZERO_EVENT_STEP_NS: u64 = 1_000_000;

/// The other change events step lqd this many times per T_reweight at most (every 5 ms
/// with the default 20 ms, well inside T_reweight, the damping boundary at which weights
/// move anyway: seed 003 section 6.4). Two (10 ms) was measured and not kept (issue 41,
/// `bench scale`'s churn): the control steps fell from 188-203 a second to 152-168, as the
/// damping steps, the neighbor table's reads and the heartbeat deadlines wake the loop
/// too, and lqd's CPU moved less than the host's noise, while a change that a group
/// whose boundary has passed could apply at once would wait up to 10 ms.
const PACED_EVENT_STEPS_PER_T_REWEIGHT: u64 = 4;

/// A sample that takes longer than this is logged (debug): a slow rtnetlink read.
const SLOW_SAMPLE_NS: u64 = 2_000_000;

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

/// Handles the datagrams waiting on an authentication socket (issue 39): a full batch
/// leaves the rest for the next turn, the socket still readable.
fn auth_readable(
    mut guard: tokio::io::unix::AsyncFdReadyMutGuard<'_, crate::sys::socket::AuthSocket>,
    lb: Option<&mut crate::roles::load_balancer::LoadBalancer>,
) {
    let n = lb.map_or(0, |lb| lb.receive_authenticated(&guard.get_inner().0));
    if n < crate::roles::load_balancer::auth::BATCH {
        guard.clear_ready();
    }
}

/// Runs the daemon until SIGTERM or SIGINT: the load-balancer role, the helper role, or
/// both (dual, seed 003 section 9), in one event loop.
pub async fn run(config_path: PathBuf, instance: Instance, scheduling: Scheduling) -> Result<()> {
    let cfg = Config::load(&config_path)?;
    // What `lqd check-config` warns about: legal, but probably not what was meant.
    if let Ok(text) = std::fs::read_to_string(&config_path) {
        for w in cfg.warnings(&text) {
            warn!(config = %config_path.display(), line = w.line, column = w.column, "{}", w.message);
        }
    }
    let role = cfg.lq_telemetry.role;
    info!(role = role.as_str(), instance = %instance.name, config = %config_path.display(), "lqd starting");
    let Roles {
        mut lb,
        mut helper,
        mut pfc,
    } = Roles::start(&cfg, &instance, &config_path)?;
    // The receiver's two change-event rings: the paced one and the zero transitions'.
    let (mut events, mut zero_events) = match lb.as_mut() {
        Some(lb) => {
            let rx = lb.receiver_mut();
            let paced = rx.take_events().context("change-event ring buffer")?;
            let zero =
                (rx.take_zero_events()).context("change-event ring buffer (zero transitions)")?;
            let register = |ring| {
                crate::sys::timer::register(ring, tokio::io::Interest::READABLE)
                    .map_err(|e| anyhow::anyhow!("ring buffer fd: {e}"))
            };
            (Some(register(paced)?), Some(register(zero)?))
        }
        None => (None, None),
    };
    // `[receiver] authentication` (issue 39): the sockets the XDP program passes the
    // interfaces' LQ datagrams up to, one per address family.
    let (mut auth_v4, mut auth_v6) = match lb.as_ref() {
        Some(lb) if lb.authenticates() => {
            let open = |v6: bool| -> Result<_> {
                let s =
                    crate::sys::socket::open_auth_socket(cfg.udp.port, v6).with_context(|| {
                        format!(
                            "authentication socket (UDP port {}, {})",
                            cfg.udp.port,
                            if v6 { "IPv6" } else { "IPv4" }
                        )
                    })?;
                crate::sys::timer::register(
                    crate::sys::socket::AuthSocket(s),
                    tokio::io::Interest::READABLE,
                )
                .map_err(|e| anyhow::anyhow!("authentication socket fd: {e}"))
            };
            // IPv6 may be disabled on the node: then IPv4 alone, with a warning.
            let v6 = match open(true) {
                Ok(s) => Some(s),
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "no IPv6 authentication socket: only IPv4 advertisements are authenticated");
                    None
                }
            };
            (Some(open(false)?), v6)
        }
        _ => (None, None),
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
    let control = clients::bind_control(&instance.socket)
        .with_context(|| format!("bind the control socket {}", instance.socket.display()))?;
    clients::set_mode(&instance.socket, 0o600)?;
    info!(socket = %instance.socket.display(), "control socket (root only)");
    let (notify_tx, _) = broadcast::channel::<String>(1024);
    // The northbound endpoints: their TLS files are read and their sockets bound now, so
    // that a bad certificate or a taken port stops lqd at start with the reason.
    let northbound = northbound_settings(&cfg)?;
    let metrics = match (&cfg.metrics, northbound.metrics) {
        (Some(m), Some(settings)) => {
            let listener = clients::bind_tcp(m.listen)
                .with_context(|| format!("bind the metrics endpoint {}", m.listen))?;
            let granted = log_metrics_grants(m, &settings);
            info!(
                listen = %m.listen,
                tls = settings.tls.is_some(),
                rules = settings.rules.len(),
                "Prometheus metrics at /metrics (families of /lq-telemetry/local, /neighbors and /weighted-ecmp only to clients a [[metrics.client]] rule grants them; granted to someone: {granted:?})"
            );
            Some(clients::MetricsEndpoint {
                listener,
                tls: settings.tls.map(Current::new),
                rules: Current::new(settings.rules),
            })
        }
        _ => None,
    };
    let gnmi = match (&cfg.gnmi, northbound.gnmi) {
        (Some(g), Some(settings)) => {
            let listener = clients::bind_tcp(g.listen)
                .with_context(|| format!("bind the gNMI endpoint {}", g.listen))?;
            info!(listen = %g.listen, tls = settings.tls.is_some(), rules = settings.rules.len(), "gNMI endpoint (Capabilities, Get, Subscribe)");
            Some(gnmi::GnmiEndpoint {
                listener,
                tls: settings.tls.map(Current::new),
                rules: Current::new(settings.rules),
                max_subscriptions: g.max_subscriptions,
            })
        }
        _ => None,
    };
    let (northbound_tx, northbound_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut status = crate::views::snapshot::StatusView {
        instance: instance.name.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        role: role.as_str().into(),
        config_file: config_path.display().to_string(),
        started_unix_ms: crate::sys::clock::unix_ms_now(),
        ..Default::default()
    };
    let mut config_now = Arc::new(cfg);
    let snapshots = Published::new(Snapshot::empty(config_now.clone(), status.clone()));
    let reload_asked = Arc::new(tokio::sync::Notify::new());

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let t_sample = Duration::from_millis(u64::from(config_now.helper.t_sample_ms));
    // The periodic advertisement's own timer (seed 003 section 7.2: [0.9, 1.1] x
    // T_notify, uniform): a timerfd on CLOCK_BOOTTIME with absolute deadlines, because
    // tokio's 1 ms timer wheel, or waiting for the next T_sample tick, would round the
    // jitter away.
    let periodic = match helper {
        Some(_) => Some(
            crate::sys::timer::DeadlineTimer::boottime().context("periodic advertisement timer")?,
        ),
        None => None,
    };
    // The loop's own wake-up (steps, PFC ticks, held snapshot requests), on the steps'
    // clock; armed each iteration at the next due time, moved only when that moves. A
    // helper alone wakes for its own timers and samples, and for a held request only.
    let wake = crate::sys::timer::DeadlineTimer::monotonic().context("the loop's timer")?;
    let timed = lb.is_some() || pfc.is_some();
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
    // The uplinks' counters for a measured local quality, likewise on a thread of their own.
    let mut local_batches = match lb.as_mut() {
        Some(lb) => lb
            .spawn_local_sampler(t_sample, scheduling == Scheduling::Realtime)
            .context("local-quality sampler thread")?,
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
    clients::spawn_client_thread(
        clients::Endpoints {
            control,
            metrics,
            gnmi,
            reloads: northbound_rx,
        },
        snapshots.clone(),
        notify_tx.clone(),
        clients.clone(),
        reload_asked.clone(),
    )?;
    info!("lqd running");
    let mut publish = PublishPacing::default();
    let mut event_steps = EventStepPacing::default();
    loop {
        let now = monotonic_ns();
        publish.publish_if_wanted(now, &snapshots, |taken| {
            build_snapshot(
                taken,
                &config_now,
                &status,
                lb.as_ref(),
                helper.as_ref(),
                pfc.as_ref(),
            )
        });
        if let (Some(t), Some(h)) = (periodic.as_ref(), helper.as_ref())
            && let Err(e) = t.arm(h.next_due_at())
        {
            warn!(error = %crate::core::report::Chain(&e), "arming the periodic advertisement timer failed");
        }
        let due = [
            lb.as_ref().and_then(|lb| lb.next_due(now)),
            pfc.as_ref().and_then(|p| p.next_due()),
            event_steps.due(),
            publish.due(&snapshots),
        ]
        .into_iter()
        .flatten()
        .min();
        let wake_at = match due {
            Some(due) if timed => Some(due.min(now + MAX_SLEEP_NS)),
            None if timed => Some(now + MAX_SLEEP_NS),
            due => due,
        };
        if let Err(e) = wake.arm(wake_at) {
            warn!(error = %crate::core::report::Chain(&e), "arming the loop's timer failed");
        }
        // Whether the load balancer steps after this wake-up: on its timers and on change
        // events (paced by `event_steps`), not on the helper's or a client's business.
        let mut step_lb = lb.is_some();
        // Whether the state a client sees changed without a group replace (an LQS or CL
        // moved in the path table, a triggered advertisement, a reload): told to
        // `snapshots` for the clients that want every change (gNMI ON_CHANGE).
        let mut changed = false;
        tokio::select! {
            // The periodic timer first: when it is ready together with a sample, the send
            // goes out at the timer's deadline (seed 003 section 7.2), not after the sample.
            biased;
            fired = when_some(periodic.as_ref().map(|t| t.expired())) => {
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
            fired = wake.expired() => {
                if let Err(e) = fired {
                    warn!(error = %crate::core::report::Chain(&e), "reading the loop's timer failed");
                }
                if let Some(p) = pfc.as_mut() {
                    p.tick(monotonic_ns());
                }
            }
            batch = when_some(batches.as_mut().map(|rx| rx.recv())) => {
                step_lb = false;
                match (batch, helper.as_mut()) {
                    (Some(b), Some(h)) => {
                        if b.took_ns > SLOW_SAMPLE_NS {
                            tracing::debug!(took_ms = b.took_ns as f64 / 1e6, "reading the link counters was slow");
                        }
                        // Sent on a sample: a triggered advertisement (an LQS or CL moved).
                        changed = h.on_batch(b, boottime_ns()) > 0;
                        forward_notifications(h, &notify_tx);
                    }
                    _ => {
                        warn!("the sampler thread stopped: no new samples, periodic advertisements go on with the last values");
                        batches = None;
                    }
                }
            }
            batch = when_some(local_batches.as_mut().map(|rx| rx.recv())) => {
                match (batch, lb.as_mut()) {
                    // A step only when an uplink's applied local quality moved.
                    (Some(b), Some(lb)) => step_lb = lb.on_local_batch(b),
                    _ => {
                        warn!("the local-quality sampler thread stopped: the uplinks' local quality keeps its last values");
                        local_batches = None;
                        step_lb = false;
                    }
                }
            }
            // Not while events wait for their paced step: their records stay in the ring
            // until that step reads them (`drain_change_events`), and the ring buffer
            // wakes its reader only once the reader has caught up (its adaptive wake-up),
            // so a dense stream of events wakes the loop once per step, not once per
            // datagram (issue 41: a 64 x 512 leaf's receiver commits 19 000 a second).
            ready = when_some(
                events
                    .as_mut()
                    .filter(|_| !event_steps.waiting())
                    .map(|e| e.readable_mut()),
            ) => {
                ready?.clear_ready();
                step_lb = event_steps.arrived(monotonic_ns(), paced_interval_ns(lb.as_ref()));
            }
            // The zero transitions' ring, listened to while the paced one waits (seed 003
            // section 6.4: applied at once), with its own short interval.
            ready = when_some(
                zero_events
                    .as_mut()
                    .filter(|_| !event_steps.zero_waiting())
                    .map(|e| e.readable_mut()),
            ) => {
                ready?.clear_ready();
                step_lb = event_steps.arrived(monotonic_ns(), MIN_ZERO_EVENT_STEP_NS);
            }
            // Authenticated datagrams go to the XDP program now, whose change events wake
            // the loop on the rings, paced as the others: no step of their own.
            ready = when_some(auth_v4.as_mut().map(|s| s.readable_mut())) => {
                auth_readable(ready?, lb.as_mut());
                step_lb = false;
            }
            ready = when_some(auth_v6.as_mut().map(|s| s.readable_mut())) => {
                auth_readable(ready?, lb.as_mut());
                step_lb = false;
            }
            ready = when_some(routes.as_mut().map(|r| r.readable_mut())) => {
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
            changed = when_some(bmp.as_mut().map(|rx| rx.changed())) => {
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
            // A client waits for a snapshot: built at the top of the next iteration.
            _ = snapshots.asked() => { step_lb = false; }
            _ = term.recv() => { info!("SIGTERM"); break; }
            _ = int.recv() => { info!("SIGINT"); break; }
            // SIGHUP, or `lqd reload` over the control socket (which waits for the outcome
            // in the next snapshot).
            _ = async {
                tokio::select! {
                    _ = hup.recv() => {}
                    () = reload_asked.notified() => {}
                }
            } => {
                step_lb = false;
                let (new, outcome) = reload(&config_path, &config_now, lb.as_mut(), helper.as_mut(), &northbound_tx);
                changed = true;
                status.reloads += 1;
                status.last_reload = Some(outcome);
                if let Some(new) = new {
                    // The next snapshot a client asks for carries it.
                    config_now = Arc::new(new);
                }
            }
        }
        if step_lb && let Some(lb) = lb.as_mut() {
            // The change events the receiver committed since the last step: every step
            // reads them, whatever woke it, so none waits in the ring for a later one.
            for ring in [zero_events.as_mut(), events.as_mut()]
                .into_iter()
                .flatten()
            {
                changed |= drain_change_events(ring.get_mut(), lb) > 0;
            }
            // The authenticated datagrams already queued count before liveness is judged.
            for s in [auth_v4.as_ref(), auth_v6.as_ref()].into_iter().flatten() {
                lb.drain_authenticated(&s.get_ref().0);
            }
            let now = monotonic_ns();
            event_steps.stepped(now);
            match lb.step(now) {
                Ok(replaced) => {
                    // Taken every step: a flag left set would publish at a later one.
                    let neighbors = lb.take_neighbors_changed();
                    changed |= replaced > 0 || neighbors;
                }
                Err(e) => {
                    warn!(error = %crate::core::report::Chain(&e), "control step failed");
                }
            }
        }
        if let Some(lb) = lb.as_mut() {
            forward_auth_notifications(lb, &notify_tx);
        }
        if changed {
            publish.state_changed(&snapshots);
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

/// The roles one lqd runs (seed 003 section 9: a helper, a load balancer, or both) and
/// PFC counting (seed 000), each started from the configuration or absent.
struct Roles {
    lb: Option<LoadBalancer>,
    helper: Option<HelperRole>,
    pfc: Option<crate::roles::pfc::PfcService>,
}

impl Roles {
    /// Starts what `cfg` asks for; the helper role reads the PFC counters' pins when PFC
    /// counting runs too.
    fn start(cfg: &Config, instance: &Instance, config_path: &Path) -> Result<Self> {
        let role = cfg.lq_telemetry.role;
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
        let pfc = if cfg.pfc.interfaces.is_empty()
            && cfg.pfc.ethtool.is_empty()
            && cfg.pfc.veth_peer.is_empty()
        {
            None
        } else {
            Some(
                crate::roles::pfc::PfcService::start(cfg, &instance.name)
                    .context("starting PFC counting")?,
            )
        };
        let pfc_dir = pfc.as_ref().map(|p| p.counter().pin_dir().to_path_buf());
        if let Some(lb) = lb.as_mut()
            && cfg.local_quality.source == crate::config::LocalQualitySource::Measured
        {
            lb.measure_local_quality(
                pfc_dir.as_deref(),
                Some(&instance.ecn_pin_dir(EcnCounter::Uplinks)),
            )
            .context("[local-quality] source = \"measured\"")?;
        }
        let helper = if role.advertises() {
            let source = crate::roles::helper::kernel_source(
                cfg,
                pfc_dir.as_deref(),
                Some(&instance.ecn_pin_dir(EcnCounter::Links)),
            )
            .context("link counters of the helper role")?;
            Some(HelperRole::start(cfg, source).context("starting the helper role")?)
        } else {
            None
        };
        Ok(Self { lb, helper, pfc })
    }
}

/// The least interval between two control steps woken by change events without a zero
/// transition: T_reweight / PACED_EVENT_STEPS_PER_T_REWEIGHT, never below the zero
/// transitions' own.
fn paced_interval_ns(lb: Option<&LoadBalancer>) -> u64 {
    lb.map_or(MIN_ZERO_EVENT_STEP_NS, |lb| {
        (lb.t_reweight_ns() / PACED_EVENT_STEPS_PER_T_REWEIGHT).max(MIN_ZERO_EVENT_STEP_NS)
    })
}

/// Hands every change event a ring buffer holds to the load balancer (the next step reads
/// the rows they name); returns how many.
fn drain_change_events(
    ring: &mut aya::maps::RingBuf<aya::maps::MapData>,
    lb: &mut LoadBalancer,
) -> u32 {
    let mut n = 0u32;
    while let Some(record) = ring.next() {
        lb.note_event(&record);
        n += 1;
    }
    tracing::trace!(events = n, "path table changed");
    n
}

/// A future that waits for `f`, or forever when there is none: a `select!` branch of a
/// source this lqd does not have (no helper role, no slow plane) never fires.
async fn when_some<F: std::future::Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// A reload (SIGHUP, `lqd reload`): the configuration file read again and applied as a
/// whole, or refused as a whole with the reason (the file's error; the settings that change
/// only at a restart, [`Config::restart_only_changes`]; a role's refusal). Everything that
/// can refuse is checked before anything changes. Returns the new configuration when
/// applied, and the outcome for `show status` and `lqd reload`.
/// The sensitive subtrees some `[[metrics.client]]` rule grants, with a warning when a
/// plain-HTTP endpoint on a non-loopback address serves them (at start and each reload).
fn log_metrics_grants(
    m: &crate::config::MetricsSection,
    settings: &published::EndpointReload,
) -> Vec<&'static str> {
    let granted: Vec<&'static str> = crate::core::northbound::SENSITIVE
        .into_iter()
        .filter(|s| {
            settings.rules.iter().any(|r| {
                r.read
                    .iter()
                    .any(|p| p.covers(&crate::core::northbound::DataPath::top_child(s)))
            })
        })
        .collect();
    if settings.tls.is_none() && !m.listen.ip().is_loopback() && !granted.is_empty() {
        warn!(listen = %m.listen, "metrics: {granted:?} served in plain HTTP to anyone who reaches a non-loopback address (seed 003 section 12.2 asks for a secure transport; configure certificate, private-key and client-ca)");
    }
    granted
}

/// The northbound endpoints' TLS configurations (their files read and checked) and read
/// rules, as `cfg` configures them: at start and at each reload.
fn northbound_settings(cfg: &Config) -> Result<published::NorthboundReload> {
    use published::EndpointReload;
    let gnmi = cfg
        .gnmi
        .as_ref()
        .map(|g| -> Result<EndpointReload> {
            let tls = match g.tls_files() {
                Some((c, k, ca)) => Some(
                    crate::transport::tls::grpc_server_config(c, k, ca)
                        .context("[gnmi] TLS configuration")?,
                ),
                None => None,
            };
            let rules = g.rules().map_err(anyhow::Error::msg)?;
            Ok(EndpointReload { tls, rules })
        })
        .transpose()?;
    let metrics = cfg
        .metrics
        .as_ref()
        .map(|m| -> Result<EndpointReload> {
            let tls = match m.tls_files() {
                Some((c, k, ca)) => Some(
                    crate::transport::tls::metrics_server_config(c, k, ca)
                        .context("[metrics] TLS configuration")?,
                ),
                None => None,
            };
            let rules = m.rules().map_err(anyhow::Error::msg)?;
            Ok(EndpointReload { tls, rules })
        })
        .transpose()?;
    Ok(published::NorthboundReload { gnmi, metrics })
}

fn reload(
    config_path: &Path,
    current: &Config,
    lb: Option<&mut LoadBalancer>,
    helper: Option<&mut HelperRole>,
    northbound: &tokio::sync::mpsc::UnboundedSender<published::NorthboundReload>,
) -> (Option<Config>, crate::views::snapshot::ReloadOutcome) {
    use crate::views::snapshot::ReloadOutcome;
    let at_unix_ms = crate::sys::clock::unix_ms_now();
    let refuse = |reason: String, restart_needed: Vec<String>| {
        warn!(%reason, "reload refused; the running configuration stays");
        (
            None,
            ReloadOutcome {
                at_unix_ms,
                applied: false,
                reason: Some(reason),
                restart_needed,
            },
        )
    };
    let new = match Config::load(config_path) {
        Ok(new) => new,
        Err(e) => return refuse(crate::core::report::Chain(&e).to_string(), Vec::new()),
    };
    let restart = current.restart_only_changes(&new);
    if !restart.is_empty() {
        return refuse(
            format!(
                "{} changed, which takes a restart of lqd (nothing else was applied either)",
                restart.join(", ")
            ),
            restart.iter().map(ToString::to_string).collect(),
        );
    }
    // The northbound's files are read (a rotated certificate) and checked before anything
    // is applied: a bad one refuses the whole reload.
    let northbound_new = match northbound_settings(&new) {
        Ok(n) => n,
        Err(e) => return refuse(crate::core::report::Chain(&*e).to_string(), Vec::new()),
    };
    if let Some(h) = helper.as_deref()
        && let Err(e) = h.check_reload(&new)
    {
        return refuse(
            format!("helper: {}", crate::core::report::Chain(&e)),
            Vec::new(),
        );
    }
    if let Some(lb) = lb
        && let Err(e) = lb.reload(new.clone())
    {
        return refuse(
            format!("load-balancer: {}", crate::core::report::Chain(&e)),
            Vec::new(),
        );
    }
    if let Some(h) = helper
        && let Err(e) = h.reload(&new)
    {
        // check_reload accepted the same parameters: not expected.
        warn!(error = %crate::core::report::Chain(&e), "helper parameters not reloaded");
    }
    if let (Some(m), Some(settings)) = (&new.metrics, &northbound_new.metrics) {
        log_metrics_grants(m, settings);
    }
    // Applied by the client thread; never blocks the loop.
    let _ = northbound.send(northbound_new);
    info!("configuration reloaded");
    (
        Some(new),
        ReloadOutcome {
            at_unix_ms,
            applied: true,
            reason: None,
            restart_needed: Vec::new(),
        },
    )
}

/// When the loop builds a snapshot for its clients: when one asks ([`Published::fresh`]),
/// at most once per interval: PUBLISH_EVERY_NS, stretched to PUBLISH_COST_FACTOR x the
/// last build's CPU time (at most MAX_PUBLISH_EVERY_NS). Requests inside the interval wait
/// for its end and share one build. After a change of the loop's state, while a client
/// wants every change (a gNMI ON_CHANGE stream): CHANGE_PUBLISH_MIN_NS after the last
/// build at the soonest, when the build budget allows one. The budget is a token bucket of
/// CPU time filled at 1 / PUBLISH_COST_FACTOR of wall time (at most CHANGE_BURST_NS, or
/// two builds' worth) and spent by every build: over any window, builds for changes take
/// no more than that share of the loop's time and a burst, and a change that follows a
/// request's build by a millisecond is not held for the request interval.
struct PublishPacing {
    last_ns: u64,
    every_ns: u64,
    /// The state changed since the last build and a client wants every change.
    change_pending: bool,
    /// The build budget (CPU ns) and when it was last filled.
    credit_ns: u64,
    credit_at_ns: u64,
    /// The last build's CPU time: what the next one is expected to cost.
    last_cost_ns: u64,
}

/// The shortest interval between two builds for changes of state.
const CHANGE_PUBLISH_MIN_NS: u64 = 1_000_000;
/// The build budget's capacity (CPU time), unless two builds cost more.
const CHANGE_BURST_NS: u64 = 200_000;

impl Default for PublishPacing {
    fn default() -> Self {
        Self {
            last_ns: 0,
            every_ns: PUBLISH_EVERY_NS,
            change_pending: false,
            credit_ns: CHANGE_BURST_NS,
            credit_at_ns: 0,
            last_cost_ns: 0,
        }
    }
}

impl PublishPacing {
    /// The loop's state changed (a group replaced, a spine failed or came back, an LQS or
    /// CL moved, a reload): a snapshot is due when a client wants every change.
    fn state_changed(&mut self, to: &Published) {
        if to.changes_wanted() {
            self.change_pending = true;
        }
    }

    /// The budget at `now_ns`, filled since the last call.
    fn fill(&mut self, now_ns: u64) {
        let earned = now_ns.saturating_sub(self.credit_at_ns) / PUBLISH_COST_FACTOR;
        let cap = CHANGE_BURST_NS.max(self.last_cost_ns.saturating_mul(2));
        self.credit_ns = self.credit_ns.saturating_add(earned).min(cap);
        self.credit_at_ns = now_ns;
    }

    /// Whether a build for a change is allowed at `now_ns` (the budget filled).
    fn change_allowed(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.last_ns) >= CHANGE_PUBLISH_MIN_NS
            && self.credit_ns >= self.last_cost_ns
    }

    /// Builds and publishes a snapshot at `now_ns` when a client waits for one, or the
    /// state changed for a client that wants every change, and the pacing allows.
    /// `build` gets the snapshot's time, taken after the request is.
    fn publish_if_wanted(
        &mut self,
        now_ns: u64,
        to: &Published,
        build: impl FnOnce(u64) -> Snapshot,
    ) {
        self.fill(now_ns);
        // The client that wanted every change may have gone since.
        self.change_pending &= to.changes_wanted();
        let asked = to.is_wanted() && now_ns.saturating_sub(self.last_ns) >= self.every_ns;
        let change = self.change_pending && self.change_allowed(now_ns);
        if !(asked || change) {
            return;
        }
        // Every request raised before this is served by the build below.
        let took_request = to.take_wanted();
        let took_change = std::mem::take(&mut self.change_pending);
        let cpu0 = crate::sys::clock::thread_cpu_ns();
        // Read after the request is taken: the snapshot is newer than each request served.
        let taken_ns = monotonic_ns().max(now_ns);
        if to.try_publish(build(taken_ns)) {
            self.last_ns = taken_ns;
        } else {
            if took_request {
                to.still_wanted();
            }
            self.change_pending |= took_change;
        }
        // The build's CPU time, not its wall time: a build preempted (by an interrupt, the
        // XDP softirq) for a millisecond once stretched the next interval to 100 ms.
        let took = crate::sys::clock::thread_cpu_ns().saturating_sub(cpu0);
        self.last_cost_ns = took;
        self.credit_ns = self.credit_ns.saturating_sub(took);
        self.every_ns = took
            .saturating_mul(PUBLISH_COST_FACTOR)
            .clamp(PUBLISH_EVERY_NS, MAX_PUBLISH_EVERY_NS);
    }

    /// When the loop must wake to serve a request or a change that the pacing held back.
    fn due(&self, to: &Published) -> Option<u64> {
        let request = to
            .is_wanted()
            .then(|| self.last_ns.saturating_add(self.every_ns));
        let change = (self.change_pending && to.changes_wanted()).then(|| {
            // When the budget covers the next build's expected cost.
            let short = self.last_cost_ns.saturating_sub(self.credit_ns);
            self.credit_at_ns
                .saturating_add(short.saturating_mul(PUBLISH_COST_FACTOR))
                .max(self.last_ns.saturating_add(CHANGE_PUBLISH_MIN_NS))
        });
        request.into_iter().chain(change).min()
    }
}

/// Change events closer than their least interval to the last step they woke wait for the
/// next step, at most that interval after it: MIN_ZERO_EVENT_STEP_NS for a zero transition,
/// the paced interval (T_reweight / PACED_EVENT_STEPS_PER_T_REWEIGHT) for the others.
#[derive(Default)]
struct EventStepPacing {
    /// The last control step woken by change events.
    last_step_ns: u64,
    /// When the step of the events that wait is due; `None`: none wait.
    due_ns: Option<u64>,
}

impl EventStepPacing {
    /// Change events arrived at `now_ns` that may step the load balancer `least_interval_ns`
    /// after the last step they woke: whether they step it now.
    fn arrived(&mut self, now_ns: u64, least_interval_ns: u64) -> bool {
        let at = self.last_step_ns.saturating_add(least_interval_ns);
        if now_ns >= at {
            self.last_step_ns = now_ns;
            true
        } else {
            self.due_ns = Some(self.due_ns.map_or(at, |d| d.min(at)));
            false
        }
    }

    /// Events wait for their paced step ([`Self::due`]): the loop stops listening to the
    /// paced ring until then.
    fn waiting(&self) -> bool {
        self.due_ns.is_some()
    }

    /// A step is due within MIN_ZERO_EVENT_STEP_NS of the last: the loop stops listening to
    /// the zero-transition ring too, whose events that step reads.
    fn zero_waiting(&self) -> bool {
        self.due_ns
            .is_some_and(|d| d <= self.last_step_ns.saturating_add(MIN_ZERO_EVENT_STEP_NS))
    }

    /// When the step of waiting events is due.
    fn due(&self) -> Option<u64> {
        self.due_ns
    }

    /// A step ran at `now_ns`: it handled every waiting event.
    fn stepped(&mut self, now_ns: u64) {
        if self.due_ns.take().is_some() {
            self.last_step_ns = now_ns;
        }
    }
}

fn forward_notifications(h: &mut HelperRole, notify: &broadcast::Sender<String>) {
    for n in h.take_notifications() {
        let line = n.to_json_string();
        info!(notification = %line, "lq-threshold-crossed");
        let _ = notify.send(line);
    }
}

/// The authenticating receiver's `lq-authentication-failure` notifications to `lqd
/// monitor` and gNMI subscribers (the receiver already logged each).
fn forward_auth_notifications(lb: &mut LoadBalancer, notify: &broadcast::Sender<String>) {
    for n in lb.take_auth_notifications() {
        let _ = notify.send(n.to_json_string());
    }
}

/// The loop's state as the typed snapshot its clients read.
fn build_snapshot(
    now_ns: u64,
    config: &Arc<Config>,
    status: &crate::views::snapshot::StatusView,
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
        status: status.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// The paced interval with the default T_reweight (20 ms).
    const PACED: u64 = 20 * MS / PACED_EVENT_STEPS_PER_T_REWEIGHT;
    const ZERO: u64 = MIN_ZERO_EVENT_STEP_NS;

    #[test]
    fn events_closer_than_the_minimum_wait_for_one_step() {
        let mut p = EventStepPacing::default();
        assert!(
            p.arrived(100 * MS, PACED),
            "an isolated event steps at once"
        );
        assert_eq!(p.due(), None);
        assert!(!p.waiting(), "events that stepped do not wait");
        assert!(!p.arrived(101 * MS, PACED), "a second one 1 ms later waits");
        assert!(
            p.waiting(),
            "the loop stops listening to the paced ring until the paced step"
        );
        assert!(
            !p.zero_waiting(),
            "but listens to the zero transitions' ring"
        );
        assert!(!p.arrived(103 * MS, PACED));
        assert_eq!(p.due(), Some(100 * MS + PACED));
        p.stepped(100 * MS + PACED);
        assert_eq!(p.due(), None, "the step handled both");
        assert!(!p.waiting(), "and the loop listens again");
        assert!(
            !p.arrived(101 * MS + PACED, PACED),
            "the deferred step counts as the last one"
        );
        p.stepped(100 * MS + 2 * PACED);
        assert!(p.arrived(100 * MS + 3 * PACED, PACED));
    }

    #[test]
    fn a_zero_transition_steps_at_once_past_its_own_short_interval() {
        let mut p = EventStepPacing::default();
        assert!(p.arrived(100 * MS, PACED));
        assert!(!p.arrived(101 * MS, PACED), "paced: waits");
        assert_eq!(p.due(), Some(100 * MS + PACED));
        // A zero transition 2 ms after the last step does not wait for the paced step;
        // that step reads the waiting events too.
        assert!(p.arrived(102 * MS, ZERO), "seed 003 section 6.4: at once");
        p.stepped(102 * MS);
        assert_eq!(p.due(), None, "the step read the paced events too");
        // Zero transitions closer than their interval wait for one step, which the
        // loop takes at that interval, listening to neither ring meanwhile.
        assert!(!p.arrived(102 * MS + ZERO / 2, ZERO));
        assert_eq!(p.due(), Some(102 * MS + ZERO));
        assert!(p.waiting() && p.zero_waiting());
        // A paced event meanwhile does not put that step off.
        assert!(!p.arrived(102 * MS + ZERO * 3 / 4, PACED));
        assert_eq!(p.due(), Some(102 * MS + ZERO));
        p.stepped(102 * MS + ZERO);
        assert!(!p.waiting() && !p.zero_waiting());
        // A paced event waits for a paced interval after that step; a zero transition
        // that comes meanwhile brings the step forward to its own interval.
        assert!(!p.arrived(102 * MS + 2 * ZERO - 1, PACED));
        assert_eq!(p.due(), Some(102 * MS + ZERO + PACED));
        assert!(!p.zero_waiting());
        assert!(!p.arrived(102 * MS + ZERO + ZERO / 2, ZERO));
        assert_eq!(p.due(), Some(102 * MS + 2 * ZERO));
        assert!(p.zero_waiting());
    }

    #[test]
    fn a_snapshot_is_built_only_when_asked_and_at_most_once_an_interval() {
        let cfg = Config::parse(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n[receiver]\ninterfaces = [\"eth1\"]\n",
            Path::new("test.toml"),
        )
        .expect("a minimal configuration");
        let cfg = Arc::new(cfg);
        let to = Published::new(Snapshot::empty(cfg.clone(), Default::default()));
        let mut p = PublishPacing::default();
        let mut builds = 0;
        let mut build = |taken| {
            builds += 1;
            let mut s = Snapshot::empty(cfg.clone(), Default::default());
            s.taken_mono_ns = taken;
            s
        };
        let t0 = monotonic_ns();
        p.publish_if_wanted(t0, &to, &mut build);
        assert_eq!(p.due(&to), None, "nobody asked: nothing built, nothing due");
        to.still_wanted();
        let asked = monotonic_ns();
        p.publish_if_wanted(asked, &to, &mut build);
        let first = to.latest().taken_mono_ns;
        assert!(first >= asked, "taken after the request: {first} < {asked}");
        assert!(!to.is_wanted());
        to.still_wanted();
        p.publish_if_wanted(first + 1, &to, &mut build);
        assert_eq!(
            to.latest().taken_mono_ns,
            first,
            "inside the interval: held back"
        );
        let due = p.due(&to).expect("the held request is due");
        assert!(due >= first + PUBLISH_EVERY_NS, "{due}");
        p.publish_if_wanted(due.max(monotonic_ns()), &to, &mut build);
        assert!(to.latest().taken_mono_ns >= due);
        assert_eq!(p.due(&to), None);
        assert_eq!(builds, 2);
    }

    /// Issue 40: a change of state is published only while a client wants every change (a
    /// gNMI ON_CHANGE stream), without the request interval (at CHANGE_PUBLISH_MIN_NS at
    /// the soonest), and such a client sees each publish, one that happened while it was
    /// busy included.
    #[test]
    fn a_change_is_published_only_while_a_client_wants_changes() {
        let cfg = Arc::new(
            Config::parse(
                "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n[receiver]\ninterfaces = [\"eth1\"]\n",
                Path::new("test.toml"),
            )
            .expect("a minimal configuration"),
        );
        let to = Published::new(Snapshot::empty(cfg.clone(), Default::default()));
        let mut p = PublishPacing::default();
        let build = |taken| {
            let mut s = Snapshot::empty(cfg.clone(), Default::default());
            s.taken_mono_ns = taken;
            s
        };
        let t0 = monotonic_ns();
        p.state_changed(&to);
        assert_eq!(p.due(&to), None, "nobody wants changes: nothing due");
        to.want_changes(true);
        p.state_changed(&to);
        let seen = to.generation();
        p.publish_if_wanted(t0, &to, build);
        assert_eq!(to.generation(), seen + 1, "the change is published");
        let first = to.latest().taken_mono_ns;
        p.state_changed(&to);
        p.publish_if_wanted(first + 1, &to, build);
        assert_eq!(to.generation(), seen + 1, "within the minimum: held");
        let due = p.due(&to).expect("the held change is due");
        assert!(
            due >= first + CHANGE_PUBLISH_MIN_NS && due < first + PUBLISH_EVERY_NS,
            "{due} - {first}"
        );
        p.publish_if_wanted(due.max(monotonic_ns()), &to, build);
        assert_eq!(to.generation(), seen + 2, "published at its due time");
        // A build that costs 1 ms of CPU spends the budget: the next change waits until
        // 100 x that has passed (1 % of the loop's time).
        let costly = |taken| {
            let t = crate::sys::clock::thread_cpu_ns();
            while crate::sys::clock::thread_cpu_ns() - t < 1_000_000 {
                std::hint::spin_loop();
            }
            build(taken)
        };
        p.state_changed(&to);
        let at = to.latest().taken_mono_ns + CHANGE_PUBLISH_MIN_NS;
        p.publish_if_wanted(at, &to, costly);
        assert_eq!(to.generation(), seen + 3);
        p.state_changed(&to);
        let held = p.due(&to).expect("held by the budget");
        assert!(
            held >= at + 80_000_000,
            "due {} ms later",
            (held - at) / 1_000_000
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), to.published_after(seen))
                .await
                .expect("a publish before the wait is seen");
            let now = to.generation();
            let waiting = tokio::time::timeout(Duration::from_millis(50), to.published_after(now));
            assert!(waiting.await.is_err(), "no publish since: it waits");
        });
        to.want_changes(false);
        p.state_changed(&to);
        assert_eq!(p.due(&to), None);
    }
}
