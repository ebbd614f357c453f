//! `lqd run`: the event loop at the edge. Timers, the XDP change-event ring buffer, the
//! control socket and signals feed the deterministic core; nothing here decides anything.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use tokio::{
    io::unix::AsyncFd,
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixListener,
    signal::unix::{SignalKind, signal},
};
use tracing::{info, warn};

use crate::{
    config::Config,
    helper_role::{HelperRole, boottime_ns},
    load_balancer::{LoadBalancer, monotonic_ns},
    path_table::DEFAULT_PIN_ROOT,
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

/// Runs the daemon until SIGTERM or SIGINT: the load-balancer role, the helper role, or
/// both (dual, seed 003 section 9), in one event loop.
pub async fn run(config_path: PathBuf, instance: Instance) -> Result<()> {
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
            crate::pfc_export::PfcService::start(&cfg, &instance.name)
                .context("starting PFC counting")?,
        )
    };
    let mut helper = if role.advertises() {
        let pfc_dir = pfc.as_ref().map(|p| p.counter().pin_dir().to_path_buf());
        let source = crate::helper_role::kernel_source(&cfg, pfc_dir.as_deref())
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
            // SAFETY: the ring buffer owns its fd and lives inside the AsyncFd until the
            // loop ends, so the fd stays open while registered.
            Some(
                unsafe { AsyncFd::register(events) }
                    .map_err(|e| anyhow::anyhow!("ring buffer fd: {e}"))?,
            )
        }
        None => None,
    };
    // The slow plane (seed 003 section 4.1): the routing daemon's routes, dumped once and
    // then followed by notification.
    let mut routes = match lb.as_mut() {
        Some(lb) if lb.slow_plane_enabled() => {
            let mut monitor =
                crate::slow_plane::monitor::RouteMonitor::open().context("route monitor socket")?;
            lb.route_events(monitor.dump().context("route and nexthop dump")?);
            // SAFETY: the monitor owns its fd and lives inside the AsyncFd until the loop
            // ends, so the fd stays open while registered.
            Some(
                unsafe { AsyncFd::register_with_interest(monitor, tokio::io::Interest::READABLE) }
                    .map_err(|e| anyhow::anyhow!("route monitor fd: {e}"))?,
            )
        }
        _ => None,
    };

    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("create {RUN_DIR}"))?;
    let _ = std::fs::remove_file(&instance.socket);
    let listener = UnixListener::bind(&instance.socket)
        .with_context(|| format!("bind the control socket {}", instance.socket.display()))?;
    set_mode(&instance.socket, 0o600)?;
    info!(socket = %instance.socket.display(), "control socket (root only)");
    let (notify_tx, _) = tokio::sync::broadcast::channel::<String>(1024);
    let metrics = match &cfg.metrics {
        Some(m) => {
            let l = tokio::net::TcpListener::bind(m.listen)
                .await
                .with_context(|| format!("bind the metrics endpoint {}", m.listen))?;
            info!(listen = %m.listen, "Prometheus metrics at /metrics");
            Some(l)
        }
        None => None,
    };

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let t_sample = Duration::from_millis(u64::from(cfg.helper.t_sample_ms));
    let mut sample_tick = tokio::time::interval(t_sample);
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    if let Some(lb) = lb.as_mut() {
        lb.step(monotonic_ns())?;
    }
    let mut config_now = cfg;
    // Everything privileged is set up: keep only CAP_BPF and CAP_NET_ADMIN.
    crate::privileges::drop_capabilities().context("dropping capabilities")?;
    info!("lqd running");
    loop {
        let now = monotonic_ns();
        let due = [
            lb.as_ref().and_then(|lb| lb.next_due(now)),
            pfc.as_ref().and_then(|p| p.next_due()),
        ]
        .into_iter()
        .flatten()
        .min();
        let sleep = due.map_or(MAX_SLEEP, |due| {
            Duration::from_nanos(due.saturating_sub(now)).min(MAX_SLEEP)
        });
        let mut step_lb = lb.is_some();
        tokio::select! {
            _ = tokio::time::sleep(sleep), if lb.is_some() || pfc.is_some() => {
                if let Some(p) = pfc.as_mut() {
                    p.tick(monotonic_ns());
                }
            }
            _ = sample_tick.tick(), if helper.is_some() => {
                step_lb = false;
                if let Some(h) = helper.as_mut() {
                    h.sample(boottime_ns());
                    for n in h.take_notifications() {
                        let line = n.to_json_string();
                        info!(notification = %line, "lq-threshold-crossed");
                        let _ = notify_tx.send(line);
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
                while rb.next().is_some() {
                    n += 1;
                }
                guard.clear_ready();
                tracing::trace!(events = n, "path table changed");
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
                    Err(e) => warn!(error = %e, "route monitor"),
                }
                guard.clear_ready();
            }
            conn = async {
                match metrics.as_ref() {
                    Some(l) => l.accept().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Ok((mut stream, _)) = conn {
                    step_lb = false;
                    let body = crate::metrics::render(lb.as_ref(), helper.as_ref(), pfc.as_ref());
                    let mut req = [0u8; 1024];
                    let _ = tokio::time::timeout(Duration::from_millis(100), tokio::io::AsyncReadExt::read(&mut stream, &mut req)).await;
                    let _ = stream.write_all(crate::metrics::http_response(&body).as_bytes()).await;
                }
            }
            conn = listener.accept() => {
                if let Ok((stream, _)) = conn {
                    serve(stream, lb.as_ref(), helper.as_ref(), &config_now, &notify_tx).await;
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
                                config_now = new;
                            }
                            Err(e) => warn!(error = %e, "reload failed; the running configuration stays"),
                        }
                    }
                    Err(e) => warn!(error = %e, "reload refused; the running configuration stays"),
                }
            }
        }
        if step_lb
            && let Some(lb) = lb.as_mut()
            && let Err(e) = lb.step(monotonic_ns())
        {
            warn!(error = %e, "control step failed");
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

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// Answers one control request: a line naming a view, a JSON document back; `monitor`
/// instead streams `lq-threshold-crossed` notifications as JSON lines until the client
/// goes away.
async fn serve(
    stream: tokio::net::UnixStream,
    lb: Option<&LoadBalancer>,
    helper: Option<&HelperRole>,
    cfg: &Config,
    notify: &tokio::sync::broadcast::Sender<String>,
) {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(r);
    let request =
        match tokio::time::timeout(Duration::from_millis(200), reader.read_line(&mut line)).await {
            Ok(Ok(_)) => line.trim().to_string(),
            _ => String::new(),
        };
    if request == "monitor" {
        let mut rx = notify.subscribe();
        tokio::spawn(async move {
            while let Ok(n) = rx.recv().await {
                if w.write_all(format!("{n}\n").as_bytes()).await.is_err() {
                    break;
                }
            }
        });
        return;
    }
    let reply = answer(&request, lb, helper, cfg);
    let mut text = reply.to_string();
    text.push('\n');
    let _ = w.write_all(text.as_bytes()).await;
}

fn answer(
    request: &str,
    lb: Option<&LoadBalancer>,
    helper: Option<&HelperRole>,
    cfg: &Config,
) -> Value {
    let now = monotonic_ns();
    let no = |what: &str| json!({"error": format!("this node does not run the {what} role")});
    match request {
        "weights" => lb.map_or_else(|| no("load-balancer"), LoadBalancer::weights_json),
        "neighbors" => lb.map_or_else(|| no("load-balancer"), |lb| lb.neighbors_json(now)),
        "local" => helper.map_or_else(|| no("helper"), HelperRole::local_json),
        "state" => {
            let neighbors = lb.map(|lb| lb.neighbors_yang(now));
            let local = helper.map(HelperRole::local_yang);
            crate::yang_state::state_document(cfg, local, neighbors)
        }
        other => {
            json!({"error": format!("unknown request {other:?}: weights, neighbors, local, state, monitor")})
        }
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
