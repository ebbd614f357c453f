//! `lqd`: the lq daemon and its command-line tools.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

mod cli;

use std::{
    io::IsTerminal as _,
    io::{self, Read as _, Write},
    path::Path,
    process::ExitCode,
};

use clap::Parser as _;
use lq_user::tools::{
    decode::{EXIT_ERROR, parse_hex, run_frames, run_payload},
    pcap,
};

use crate::cli::{Cli, Command, DecodeArgs, LogFormat, ShowArgs, ShowWhat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A simulation's per-node logs would drown its JSON lines: quieter unless asked.
    let level = match (&cli.command, cli.log_level.as_str()) {
        (Command::Sim(_), "info") => "warn",
        (_, l) => l,
    };
    init_tracing(level, cli.log_format);
    match cli.command {
        Command::Decode(args) => decode(&args),
        Command::Run(args) => top(run(args)),
        Command::Show(args) => top(show(&args)),
        Command::CheckConfig(args) => top(check_config(&args)),
        Command::Cleanup(args) => top(cleanup(&args)),
        Command::Reload(args) => top(reload(&args)),
        Command::Instances { json } => top(instances(json)),
        Command::Completions { shell } => top((|| {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "lqd", &mut script);
            io::stdout().lock().write_all(&script)?;
            Ok(())
        })()),
        Command::Man { out } => top(man_pages(&out)),
        Command::Monitor(args) => top(monitor(&args)),
        Command::Ipfix(cli::IpfixCommand::Collect(args)) => top(collect(&args)),
        Command::Sim(args) => top(sim(&args)),
    }
}

/// The log format chosen on the command line: fatal errors follow it.
static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// Writes a fatal error to stderr: `lqd: MESSAGE: CAUSE: ...` as text, or with
/// `--log-format json` one JSON log line (level ERROR, the message and the whole chain in
/// `error`), so that a journal or collector reading JSON lines parses it too.
fn report_fatal(prefix: &str, message: &dyn std::fmt::Display) {
    match LOG_FORMAT.get() {
        Some(LogFormat::Json) => {
            tracing::error!(error = %message, "{prefix} failed");
        }
        _ => eprintln!("{prefix}: {message}"),
    }
}

/// Reports a top-level error with its causes and exits 1.
fn top(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_fatal("lqd", &format_args!("{e:#}"));
            ExitCode::from(1)
        }
    }
}

fn run(args: cli::RunArgs) -> anyhow::Result<()> {
    let cfg = lq_user::config::Config::load(&args.config)?;
    let instance = lq_user::daemon::Instance::new(&args.instance, cfg.receiver.pin_dir.as_deref());
    if let Some(ns) = &args.netns {
        lq_user::sys::netlink::enter_netns(ns)
            .map_err(|e| anyhow::anyhow!("enter network namespace {ns}: {e}"))?;
    }
    lq_user::sys::bpf::path_table::check_bpffs(&instance.pin_dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(lq_user::daemon::run(args.config, instance, args.scheduling))
}

fn show(args: &ShowArgs) -> anyhow::Result<()> {
    use lq_user::{daemon, views::show};
    let instance = daemon::Instance::new(&args.instance, args.pin_dir.as_deref());
    let filter = show::ShowFilter {
        spine: args.spine.clone(),
        remote: args.remote.clone(),
        prefix: args.prefix.clone(),
    };
    let filters_apply = matches!(
        args.what,
        ShowWhat::Paths | ShowWhat::Neighbors | ShowWhat::Weights
    );
    if !filter.is_empty() && !filters_apply {
        anyhow::bail!("--spine, --remote and --prefix apply to paths, neighbors and weights");
    }
    if let Some(dest) = &args.explain {
        if args.what != ShowWhat::Weights {
            anyhow::bail!("--explain applies to `show weights`");
        }
        let weights = daemon::query(&instance.socket, "weights")?;
        let neighbors = daemon::query(&instance.socket, "neighbors")?;
        let paths = lq_user::tools::pins::paths(&instance.pin_dir)?;
        let v = show::explain(&weights, &neighbors, &paths, dest);
        let mut out = io::stdout().lock();
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        } else {
            write!(out, "{}", show::explain_text(&v))?;
        }
        return Ok(());
    }
    let (value, table): (serde_json::Value, fn(&serde_json::Value) -> String) = match args.what {
        ShowWhat::Paths => (
            lq_user::tools::pins::paths(&instance.pin_dir)?,
            show::paths_table,
        ),
        ShowWhat::Counters => {
            let mut v = lq_user::tools::pins::counters(&instance.pin_dir)?;
            // With `[receiver] authentication`, the socket path's counters (issue 39) from
            // the running daemon beside the XDP receiver's.
            if let (Ok(serde_json::Value::Object(auth)), Some(o)) = (
                daemon::query(&instance.socket, "authentication"),
                v.as_object_mut(),
            ) {
                o.extend(auth);
            }
            (v, show::counters_table)
        }
        ShowWhat::Neighbors => {
            let v = match daemon::query(&instance.socket, "neighbors") {
                Ok(v) => v,
                Err(e) => {
                    tracing::info!(error = %e, "no daemon answer; neighbor states from the pinned table");
                    lq_user::tools::pins::neighbors(&instance.pin_dir)?
                }
            };
            (v, show::neighbors_table)
        }
        ShowWhat::State => (daemon::query(&instance.socket, "state")?, show::pretty_json),
        ShowWhat::Local => (daemon::query(&instance.socket, "local")?, show::local_table),
        ShowWhat::Uplinks => (
            daemon::query(&instance.socket, "uplinks")?,
            show::uplinks_table,
        ),
        ShowWhat::Pfc => {
            let dir = args.pin_dir.clone().unwrap_or_else(|| {
                std::path::PathBuf::from(lq_user::sys::bpf::path_table::DEFAULT_PIN_ROOT)
                    .join(format!("{}-pfc", args.instance))
            });
            (
                lq_user::tools::pfc_show::show_json(&dir)?,
                lq_user::tools::pfc_show::show_table,
            )
        }
        ShowWhat::Weights => (
            daemon::query(&instance.socket, "weights")?,
            show::weights_table,
        ),
        ShowWhat::Status => (
            daemon::query(&instance.socket, "status")?,
            show::status_table,
        ),
    };
    let value = match args.what {
        _ if filter.is_empty() => value,
        ShowWhat::Paths => filter.paths(&value),
        ShowWhat::Neighbors => filter.neighbors(&value),
        ShowWhat::Weights => filter.weights(&value),
        _ => value,
    };
    let mut out = io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        write!(out, "{}", table(&value))?;
    }
    Ok(())
}

/// lqd.8 and one page per subcommand (lqd-run.8, lqd-show.8, ...), section 8.
fn man_pages(out: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use clap::CommandFactory as _;
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let top = Cli::command().name("lqd");
    let mut pages = vec![("lqd".to_owned(), top.clone())];
    for sub in top.get_subcommands().filter(|c| !c.is_hide_set()) {
        // clap names are `&'static str`: one small leak per page of a one-off command.
        let name: &'static str = Box::leak(format!("lqd-{}", sub.get_name()).into_boxed_str());
        pages.push((name.to_owned(), sub.clone().name(name)));
    }
    for (name, cmd) in pages {
        let path = out.join(format!("{name}.8"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd.version(env!("CARGO_PKG_VERSION")))
            .section("8")
            .render(&mut buf)
            .with_context(|| format!("render {name}"))?;
        std::fs::write(&path, buf).with_context(|| format!("write {}", path.display()))?;
        writeln!(io::stdout().lock(), "{}", path.display())?;
    }
    Ok(())
}

fn instances(json: bool) -> anyhow::Result<()> {
    use lq_user::tools::instances;
    let found = instances::find(
        Path::new(lq_user::daemon::RUN_DIR),
        Path::new(lq_user::sys::bpf::path_table::DEFAULT_PIN_ROOT),
    );
    let v = instances::list(&found, |f| {
        lq_user::daemon::query_within(
            &Path::new(lq_user::daemon::RUN_DIR).join(format!("{}.sock", f.name)),
            "status",
            std::time::Duration::from_secs(1),
        )
        .ok()
    });
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        write!(out, "{}", instances::table(&v))?;
    }
    Ok(())
}

fn reload(args: &cli::ReloadArgs) -> anyhow::Result<()> {
    use lq_user::views::snapshot::ReloadOutcome;
    let instance = lq_user::daemon::Instance::new(&args.instance, None);
    let v = lq_user::daemon::query_within(
        &instance.socket,
        "reload",
        lq_user::daemon::RELOAD_DEADLINE + std::time::Duration::from_secs(2),
    )?;
    let outcome: ReloadOutcome = serde_json::from_value(v.clone())
        .map_err(|e| anyhow::anyhow!("unexpected answer {v}: {e}"))?;
    let mut out = io::stdout().lock();
    if args.json {
        writeln!(out, "{v}")?;
    } else if outcome.applied {
        write!(
            out,
            "{}",
            lq_user::views::snapshot::reload_line(&outcome)
                .replace("last reload: applied", "reloaded: applied")
        )?;
    }
    if !outcome.applied {
        anyhow::bail!(
            "reload refused, the running configuration stays: {}",
            outcome.reason.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(())
}

fn cleanup(args: &cli::CleanupArgs) -> anyhow::Result<()> {
    use lq_user::{daemon, sys::bpf::path_table::DEFAULT_PIN_ROOT};
    let (receiver_dir, pfc_dir) = match &args.config {
        Some(path) => {
            let cfg = lq_user::config::Config::load(path)?;
            (cfg.receiver.pin_dir.clone(), cfg.pfc.pin_dir.clone())
        }
        None => (None, None),
    };
    let instance = daemon::Instance::new(&args.instance, receiver_dir.as_deref());
    let dirs = match &args.pin_dir {
        Some(d) => vec![d.clone()],
        None => vec![
            instance.pin_dir.clone(),
            pfc_dir.unwrap_or_else(|| {
                std::path::Path::new(DEFAULT_PIN_ROOT).join(format!("{}-pfc", args.instance))
            }),
        ],
    };
    let v =
        lq_user::tools::cleanup::cleanup(&args.instance, &instance.socket, &dirs, args.dry_run)?;
    let mut out = io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        write!(out, "{}", lq_user::tools::cleanup::cleanup_text(&v))?;
    }
    Ok(())
}

/// A scenario named on the command line: a file, or a bare name (`appendix-b`) looked up
/// in ./scenarios, beside the installed binary (PREFIX/share/lq/scenarios, where `cargo
/// xtask install` puts them) and in /usr/share/lq/scenarios.
fn scenario_path(arg: &Path) -> anyhow::Result<std::path::PathBuf> {
    if arg.exists() || arg.components().count() > 1 {
        return Ok(arg.to_path_buf());
    }
    let file = if arg.extension().is_some() {
        arg.to_path_buf()
    } else {
        arg.with_extension("toml")
    };
    let mut dirs = vec![std::path::PathBuf::from("scenarios")];
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(Path::to_path_buf))
    {
        dirs.push(prefix.join("share/lq/scenarios"));
    }
    dirs.push("/usr/share/lq/scenarios".into());
    for d in &dirs {
        let p = d.join(&file);
        if p.exists() {
            return Ok(p);
        }
    }
    anyhow::bail!(
        "no scenario {}: not a file, and not in {}",
        arg.display(),
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn sim(args: &cli::SimArgs) -> anyhow::Result<()> {
    let mut s = lq_user::tools::scenario::load(scenario_path(&args.scenario)?)?;
    if let Some(v) = &args.variant {
        s = s.with_variant(v)?;
    }
    if let Some(ms) = args.until_ms {
        s.duration_ns = ms * 1_000_000;
    }
    if let Some(ms) = args.every_ms {
        s.every_ns = Some(ms * 1_000_000);
    }
    if let Some(seed) = args.seed {
        s.seed = seed;
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let summary = lq_user::core::sim::run(&s, &mut out)?;
    out.flush()?;
    if args.summary {
        eprintln!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

fn collect(args: &cli::CollectArgs) -> anyhow::Result<()> {
    let id = |i: usize| args.element_ids.get(i).copied();
    let elements = lq_user::ipfix::ElementIds::enterprise(
        args.pen,
        id(0).unwrap_or(1),
        id(1).unwrap_or(2),
        id(2),
    );
    elements.validate()?;
    if let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.tls_client_ca)
    {
        let tls = lq_user::transport::tls::TlsServerConfig::from_files(cert, key, ca)?;
        eprintln!(
            "lqd ipfix collect: listening on {} (TLS 1.3, client certificates required)",
            args.listen
        );
        return lq_user::tools::collect::collect_tcp(
            args.listen,
            Some(tls),
            elements,
            io::stdout(),
        );
    }
    if args.tcp {
        eprintln!("lqd ipfix collect: listening on {} (TCP)", args.listen);
        return lq_user::tools::collect::collect_tcp(args.listen, None, elements, io::stdout());
    }
    eprintln!("lqd ipfix collect: listening on {} (UDP)", args.listen);
    lq_user::tools::collect::collect(
        args.listen,
        elements,
        args.template_lifetime_s,
        io::stdout().lock(),
    )
}

fn monitor(args: &cli::MonitorArgs) -> anyhow::Result<()> {
    let instance = lq_user::daemon::Instance::new(&args.instance, None);
    let mut out = io::stdout().lock();
    lq_user::daemon::monitor(&instance.socket, |line| {
        writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
    })
}

/// Whether the configured role sends advertisements (and so signs them).
fn t_advertises(cfg: &lq_user::config::Config) -> bool {
    cfg.lq_telemetry.role.advertises()
}

fn check_config(args: &cli::CheckConfigArgs) -> anyhow::Result<()> {
    let path = args.file.as_path();
    let cfg = lq_user::config::Config::load(path)?;
    let text = std::fs::read_to_string(path)?;
    // The key chain the helper would sign with: read and checked as lqd would at start
    // (its permissions included); its secrets are not shown.
    if let Some(kc) = &cfg.helper.key_chain
        && t_advertises(&cfg)
    {
        lq_user::config::key_chain::load(kc)?;
    }
    // And the one the receiver verifies with.
    if let Some(kc) = &cfg.receiver.key_chain
        && cfg.lq_telemetry.role.receives()
    {
        lq_user::config::key_chain::load(kc)?;
    }
    let warnings = cfg.warnings(&text);
    let c = cfg.controller();
    let t = &cfg.lq_telemetry;
    let mut out = io::stdout().lock();
    if args.json {
        let v = serde_json::json!({
            "file": path.display().to_string(),
            "ok": !args.strict || warnings.is_empty(),
            "warnings": warnings,
            "derived": {
                "dead-interval-ms": c.dead_interval_ns() as f64 / 1e6,
                "reweight-interval-ms": c.t_reweight.as_secs_f64() * 1e3,
            },
            "effective": cfg,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for w in &warnings {
            writeln!(
                out,
                "{}:{}:{}: warning: {}",
                path.display(),
                w.line,
                w.column,
                w.message
            )?;
        }
        writeln!(
            out,
            "{}: ok: role {}, T_notify {:?}, change-threshold {}, miss-count {}, dead interval {:?}",
            path.display(),
            t.role.as_str(),
            c.t_notify,
            t.change_threshold.0,
            c.miss_count,
            std::time::Duration::from_nanos(c.dead_interval_ns()),
        )?;
        if t.role.receives() {
            writeln!(
                out,
                "  load-balancer: receiver on {:?}, {} uplinks, {} destinations, {} path capacities; T_reweight {:?}, gain {}, weight function {:?}; {:?} groups{}",
                cfg.receiver.interfaces,
                cfg.uplink.len(),
                cfg.destination.len(),
                cfg.path_capacity.len(),
                c.t_reweight,
                c.gain,
                cfg.damping.weight_function,
                cfg.nexthop_group.group_type,
                match cfg.nexthop_group.group_type {
                    lq_user::config::GroupType::Resilient =>
                        format!(" of {} buckets", cfg.nexthop_group.buckets.0),
                    lq_user::config::GroupType::HashThreshold => String::new(),
                }
            )?;
            if let Some(g) = c.gray_failure {
                writeln!(
                    out,
                    "  gray-failure prune: on (an opt-in departure from seed 003 section 6.3): a path whose spine reports loss (CL 7) while at least {:.0} % of its capacity is available counts as path quality 0",
                    g.min_available * 100.0
                )?;
            }
            let authenticating = cfg.receiver.authenticating_interfaces();
            if !authenticating.is_empty() {
                let modes: Vec<String> = authenticating
                    .iter()
                    .map(|(i, m)| format!("{i} {}", m.as_str()))
                    .collect();
                writeln!(
                    out,
                    "  authentication: {}; key chain {}",
                    modes.join(", "),
                    cfg.receiver
                        .key_chain
                        .as_ref()
                        .map_or("-".into(), |k| k.display().to_string())
                )?;
            }
            if let Some(sp) = &cfg.slow_plane {
                writeln!(
                    out,
                    "  slow plane: protocols {:?}, table {}, rule priority {}, BMP {}",
                    sp.protocols,
                    sp.table,
                    sp.rule_priority,
                    sp.bmp
                        .as_ref()
                        .map_or_else(|| "off".to_owned(), |b| format!("on {}", b.listen))
                )?;
            }
        }
        if t.role.advertises() {
            let links: Vec<&str> = cfg.link.iter().map(|l| l.interface.as_str()).collect();
            writeln!(
                out,
                "  helper: router-id {}, links {links:?}, T_sample {} ms, alpha-rise {}, alpha-fall {}, hold-down {} ms, diagnostics {}",
                t.router_id
                    .map_or_else(|| "-".to_owned(), |r| r.to_string()),
                cfg.helper.t_sample_ms,
                cfg.helper.alpha_rise,
                cfg.helper.alpha_fall,
                cfg.helper.hold_down_ms,
                t.diagnostics_enabled
            )?;
        }
        if !cfg.pfc.interfaces.is_empty() || cfg.ipfix.is_some() {
            writeln!(
                out,
                "  pfc: interfaces {:?}, IPFIX {}",
                cfg.pfc.interfaces,
                cfg.ipfix.as_ref().map_or_else(
                    || "off".to_owned(),
                    |x| format!("to {} every {} ms", x.collector, x.interval_ms)
                )
            )?;
        }
    }
    if args.strict && !warnings.is_empty() {
        anyhow::bail!(
            "{}: {} warning(s) and --strict",
            path.display(),
            warnings.len()
        );
    }
    Ok(())
}

fn init_tracing(filter: &str, format: LogFormat) {
    // The filter was validated when the command line was parsed.
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        // Colour only for a person at a terminal: a journal or a file gets plain text.
        .with_ansi(io::stderr().is_terminal());
    let _ = LOG_FORMAT.set(format);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Prints `lqd decode: MESSAGE` and returns exit status 2.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    report_fatal("lqd decode", &message);
    ExitCode::from(EXIT_ERROR)
}

fn decode(args: &DecodeArgs) -> ExitCode {
    let opts = match args.options_with_keys(lq_user::sys::clock::unix_s_now()) {
        Ok(o) => o,
        Err(e) => return fail(format_args!("{}", lq_user::core::report::Chain(&e))),
    };
    if opts.key_chain.is_some() && args.pcap.is_none() && opts.endpoints.is_none() {
        return fail(format_args!(
            "--key-chain with a HEX payload needs --source and --destination (the MAC covers them)"
        ));
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut err = io::stderr();
    let result = match &args.pcap {
        None => match parse_hex(&args.hex) {
            Ok(payload) => run_payload(&payload, &opts, &mut out, &mut err),
            Err(e) => return fail(format_args!("invalid hex payload: {e}")),
        },
        Some(path) => {
            let bytes = match read_file(path) {
                Ok(b) => b,
                Err(e) => {
                    return fail(format_args!(
                        "cannot read capture file {}: {e}",
                        path.display()
                    ));
                }
            };
            let capture = match pcap::read_ethernet(&bytes) {
                Ok(c) => c,
                Err(e) => return fail(format_args!("capture file {}: {e}", path.display())),
            };
            tracing::debug!(format = ?capture.format, frames = capture.frames.len(), "capture read");
            run_frames(&capture.frames, &opts, &mut out, &mut err).map(|s| s.exit_status())
        }
    };
    match result.and_then(|code| out.flush().map(|()| code)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`lqd decode ... | head`): nothing left to say.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(EXIT_ERROR),
        Err(e) => fail(format_args!("cannot write the output: {e}")),
    }
}

fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut b = Vec::new();
        io::stdin().lock().read_to_end(&mut b)?;
        Ok(b)
    } else {
        std::fs::read(path)
    }
}
