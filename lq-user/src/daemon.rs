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

/// The longest the loop sleeps without a reason: it bounds how late a heartbeat
/// deadline or a damping step can be noticed (a tenth of the default T_notify).
const MAX_SLEEP: Duration = Duration::from_millis(2);

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(config_path: PathBuf, instance: Instance) -> Result<()> {
    let cfg = Config::load(&config_path)?;
    let role = cfg.lq_telemetry.role;
    if !role.receives() {
        anyhow::bail!(
            "role \"{}\": the helper role (advertising) is not implemented yet; lqd runs the load-balancer role",
            role.as_str()
        );
    }
    info!(role = role.as_str(), instance = %instance.name, config = %config_path.display(), "lqd starting");
    let mut lb = LoadBalancer::start(cfg, instance.pin_dir.clone()).with_context(|| {
        format!(
            "starting the load-balancer role from {}",
            config_path.display()
        )
    })?;
    let events = lb
        .receiver_mut()
        .take_events()
        .context("change-event ring buffer")?;
    // SAFETY: the ring buffer owns its fd and lives inside the AsyncFd until the loop
    // ends, so the fd stays open while registered.
    let mut events =
        unsafe { AsyncFd::register(events) }.map_err(|e| anyhow::anyhow!("ring buffer fd: {e}"))?;

    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("create {RUN_DIR}"))?;
    let _ = std::fs::remove_file(&instance.socket);
    let listener = UnixListener::bind(&instance.socket)
        .with_context(|| format!("bind the control socket {}", instance.socket.display()))?;
    set_mode(&instance.socket, 0o600)?;
    info!(socket = %instance.socket.display(), "control socket (root only)");

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    lb.step(monotonic_ns())?;
    info!("lqd running");
    loop {
        let now = monotonic_ns();
        let sleep = lb.next_due(now).map_or(MAX_SLEEP, |due| {
            Duration::from_nanos(due.saturating_sub(now)).min(MAX_SLEEP)
        });
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            ready = events.readable_mut() => {
                let mut guard = ready?;
                let rb = guard.get_inner_mut();
                let mut n = 0u32;
                while rb.next().is_some() {
                    n += 1;
                }
                guard.clear_ready();
                tracing::trace!(events = n, "path table changed");
            }
            conn = listener.accept() => {
                if let Ok((stream, _)) = conn {
                    serve(stream, &lb).await;
                }
            }
            _ = term.recv() => { info!("SIGTERM"); break; }
            _ = int.recv() => { info!("SIGINT"); break; }
            _ = hup.recv() => {
                match Config::load(&config_path) {
                    Ok(new) => match lb.reload(new) {
                        Ok(()) => info!("configuration reloaded"),
                        Err(e) => warn!(error = %e, "reload failed; the running configuration stays"),
                    },
                    Err(e) => warn!(error = %e, "reload refused; the running configuration stays"),
                }
            }
        }
        if let Err(e) = lb.step(monotonic_ns()) {
            warn!(error = %e, "control step failed");
        }
    }
    let _ = std::fs::remove_file(&instance.socket);
    if lb_flush_on_exit(&config_path) {
        lb.flush();
    } else {
        info!(
            "exiting; forwarding state (nexthop groups, routes) and the pinned path table stay in place"
        );
    }
    Ok(())
}

fn lb_flush_on_exit(path: &Path) -> bool {
    Config::load(path)
        .map(|c| c.nexthop_group.flush_on_exit)
        .unwrap_or(false)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// Answers one control request: a line naming a view, a JSON document back.
async fn serve(stream: tokio::net::UnixStream, lb: &LoadBalancer) {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(r);
    let reply =
        match tokio::time::timeout(Duration::from_millis(200), reader.read_line(&mut line)).await {
            Ok(Ok(_)) => answer(line.trim(), lb),
            _ => json!({"error": "no request"}),
        };
    let mut text = reply.to_string();
    text.push('\n');
    let _ = w.write_all(text.as_bytes()).await;
}

fn answer(request: &str, lb: &LoadBalancer) -> Value {
    match request {
        "weights" => lb.weights_json(),
        "neighbors" => lb.neighbors_json(monotonic_ns()),
        "state" => lb.state_json(monotonic_ns()),
        other => json!({"error": format!("unknown request {other:?}: weights, neighbors, state")}),
    }
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
