//! The command line of `lqd`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lq_common::wire::{AsRange, DEFAULT_PORT};
use lq_user::tools::decode::{DecodeOptions, parse_as_plan};

/// `lqd`: the lq daemon and its tools.
#[derive(Debug, Parser)]
#[command(
    name = "lqd",
    version,
    about = "lqd, the lq daemon: exchanges link-quality (LQ) advertisements with CLOS neighbors\n\
             over UDP, receives them in XDP, turns them into path weights, and inspects them.",
    propagate_version = true
)]
pub struct Cli {
    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives such as
    /// `lq_user=debug`. Logs go to stderr.
    #[arg(long, global = true, value_name = "FILTER", default_value = "info", value_parser = parse_log_filter)]
    pub log_level: String,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Format of the log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode LQ advertisements from a hex UDP payload or a pcap/pcapng capture and print
    /// them as RFC 7951 JSON.
    #[command(
        long_about = DECODE_LONG_ABOUT,
        after_help = "Exit status: 0 all accepted, 1 any discarded, 2 usage or file error. \
                      See --help for the checks and an example.",
        after_long_help = DECODE_AFTER_LONG_HELP
    )]
    Decode(DecodeArgs),
    /// Run the daemon with a configuration file (see examples/ and docs/operator-guide.md).
    #[command(long_about = RUN_LONG_ABOUT)]
    Run(RunArgs),
    /// Show what an instance knows: paths, counters, neighbors, weights, local, pfc, state
    /// (paths, counters and pfc also after a stop or crash).
    #[command(long_about = SHOW_LONG_ABOUT)]
    Show(ShowArgs),
    /// Follow notifications as RFC 7951 JSON lines, until interrupted: lq-threshold-crossed
    /// (CL changes of this node's links) and lq-authentication-failure (advertisements an
    /// authenticating uplink dropped, one per neighbor and reason a minute).
    Monitor(MonitorArgs),
    /// Simulate a fabric in virtual time (no kernel): the real helper pipeline and
    /// advertiser, receiver and controller on any fabric; JSON lines of LQS, CL, targets and
    /// weights (see docs/sim.md and scenarios/).
    Sim(SimArgs),
    /// IPFIX tools: `lqd ipfix collect --listen ADDR` prints received PFC records as JSON
    /// lines.
    #[command(subcommand)]
    Ipfix(IpfixCommand),
    /// Check a configuration file and print the effective settings; exit 1 on an error,
    /// which names the file, the line and the allowed range.
    #[command(long_about = CHECK_CONFIG_LONG_ABOUT)]
    CheckConfig(CheckConfigArgs),
    /// List the instances on this host (control sockets in /run/lq, pins in
    /// /sys/fs/bpf/lq): whether each runs, its pid, role, uptime and configuration file.
    Instances {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Reload a running instance's configuration file (as SIGHUP does) and report whether
    /// it was applied; exit 1 when it was refused, with the reason.
    #[command(long_about = RELOAD_LONG_ABOUT)]
    Reload(ReloadArgs),
    /// Print a shell completion script for lqd (bash, zsh, fish, elvish, powershell), e.g.
    /// `lqd completions bash > /etc/bash_completion.d/lqd`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write lqd's man pages (section 8: lqd.8 and one per subcommand, lqd-run.8, ...)
    /// into a folder, e.g. `lqd man --out /usr/local/share/man/man8`.
    Man {
        /// The folder (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Detach the counters a stopped instance left counting (PFC, ECN-eligible) and remove
    /// its pinned maps; refused while the instance runs.
    #[command(long_about = CLEANUP_LONG_ABOUT)]
    Cleanup(CleanupArgs),
}

const RELOAD_LONG_ABOUT: &str = "\
Reload a running instance's configuration file and report the outcome.

The daemon reads the file again and applies it as a whole, or refuses it as a whole and
keeps the running configuration (the answer and the log say why). Applied at run time: the
load-balancer's uplinks, destinations, mapping, capacities, damping and weight function,
which weight changes are written ([nexthop-group] replace, hysteresis-buckets,
replace-hold-ms), the receiver's checks (as-plan, pass-through, miss-count), the slow plane, the
helper's notify-interval-ms, change-threshold, diagnostics-enabled and Appendix A
smoothing and hold-down, and the read rules and TLS files (read again: a rotated
certificate) of [gnmi] and [metrics]. Changed only by a restart (a reload with any of them is refused,
naming them): the role, a helper's identity (router-id, local-as, as-qualified,
pfc-fabric), [udp], [[link]], [helper] t-sample-ms, mtu, send-to and ipv6, [receiver]
interfaces and pin-dir, [nexthop-group] type, buckets, timers, weight-max, id-base and
program-kernel, [local-quality], [pfc], [ipfix], and of [metrics] and [gnmi] their listen
address, TLS or plaintext, and max-subscriptions. SIGHUP does the same;
`lqd show status` shows the last outcome.

Exit status: 0 applied, 1 refused or no answer.

Example:
  $ lqd reload --instance leaf1
  $ systemctl reload lqd@leaf1       # the unit's ExecReload runs `lqd reload`";

/// Arguments of `lqd reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// Instance name.
    #[arg(long, default_value = "default", value_parser = parse_instance)]
    pub instance: String,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

const CLEANUP_LONG_ABOUT: &str = "\
Detach the counters a stopped instance left counting and remove its pins.

lqd's tc counters outlive it on purpose: the PFC counter and the ECN-eligible counter are
attached through tcx links pinned beside their maps, so they go on counting while lqd is
stopped, restarted or upgraded, and the next start adopts them (the PFC totals it exports
then include the frames of the gap, in the same counter epoch). The path table's maps are
pinned too (a restart keeps the table). `lqd cleanup` ends all that for one instance:
it removes every pin under /sys/fs/bpf/lq/INSTANCE (path table, ECN counters) and
/sys/fs/bpf/lq/INSTANCE-pfc (or the folders the configuration names), which detaches the
counters. The next start counts from zero in a new epoch. Use it to uninstall lq, to stop
counting for good, or when a new lqd refuses pins of another map layout. Forwarding state
(nexthop groups, routes) is not touched: `[nexthop-group] flush-on-exit = true` removes it.

Examples:
  $ lqd cleanup --instance leaf1 --dry-run
  $ lqd cleanup --instance leaf1 --config /etc/lq/leaf1.toml
  $ lqd cleanup --pin-dir /sys/fs/bpf/lq/leaf1-pfc";

/// Arguments of `lqd cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Instance name: its pins under /sys/fs/bpf/lq/NAME and /sys/fs/bpf/lq/NAME-pfc.
    #[arg(long, default_value = "default", value_parser = parse_instance)]
    pub instance: String,
    /// The instance's configuration, for the pin folders it sets (`[receiver] pin-dir`,
    /// `[pfc] pin-dir`) instead of the defaults.
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Clean only this folder (and its subfolders), e.g. the one a refused start names.
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub pin_dir: Option<PathBuf>,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

const RUN_LONG_ABOUT: &str = "\
Run lqd with a configuration file (TOML; keys of [lq-telemetry] are the YANG leaves of
ietf-lq-telemetry; `lqd check-config FILE` checks one). The role decides what runs:
  load-balancer  (a leaf) the XDP receiver on [receiver] interfaces keeps the path quality
                 table in maps pinned under /sys/fs/bpf/lq/INSTANCE (a restart keeps it);
                 weighted-ECMP weights with damping (seed 003 section 6) go into one
                 nexthop group per remote node, which every [[destination]] behind it
                 is routed at (protocol id 76, `lq`).
  helper         (a spine) every T_sample the Appendix A pipeline turns each [[link]]'s
                 counters into LQS and CL, advertised every notify-interval-ms and at once
                 on a change, with TTL 255, out of every link.
  dual           both (a 5-stage spine, section 9).
[pfc] counts received PFC frames per priority and [ipfix] exports them; [metrics] serves
Prometheus text (loopback by default; TLS and the read rules as [gnmi]); [gnmi] serves gNMI Get and Subscribe over the YANG state (TLS 1.3 with
client certificates, read rules per client). lqd never touches nexthop objects or routes it did not create. SIGHUP
reloads the file; SIGTERM leaves forwarding in place unless [nexthop-group]
flush-on-exit = true. Once running it keeps only CAP_BPF and CAP_NET_ADMIN.

Example:
  $ lqd run --config examples/leaf.toml --instance leaf1
  $ lqd run --config leaf.toml --instance leaf1 --netns leaf1   # inside a netns
  $ lqd show weights --instance leaf1
  $ ip -j nexthop show protocol 76";

const SHOW_LONG_ABOUT: &str = "\
Show what an instance knows. `paths`, `counters` and `pfc` read the pinned BPF maps
directly, so they work while lqd runs, after it stopped and after a crash; `neighbors` asks
the daemon and falls back to the pins; `weights`, `uplinks`, `local`, `state` and `status`
ask the running daemon over its control socket /run/lq/INSTANCE.sock (root only).

  paths      the path quality table (seed 003 section 6.2): one line per
             (spine, remote node, link) with LQS, CL, available bandwidth, sequence, age
  counters   the XDP receiver's counters: accepted and each discard reason of the spec
  neighbors  each advertising neighbor: state (active, stale, failed), last sequence
  weights    per group (remote node) and its destinations: each member's local and
             remote quality, capacity and its source, the target, applied (damped) and
             kernel weights
  uplinks    (load-balancer) each uplink: link state, the local quality in use and, with
             [local-quality] source = \"measured\", the metrics and LQS it comes from
  local      (helper role) each monitored link: raw and smoothed U, E, F, D, X, the LQS,
             the computed and advertised CL, the hysteresis state, available bandwidth
  pfc        received PFC frames per interface and priority (IEEE 802.1Qbb receive rules),
             paused time, and frames rejected by reason; read from the pins
  state      the YANG state /ietf-lq-telemetry:lq-telemetry (configuration leaves in
             force, neighbors with their link-quality entries, lq's weighted-ECMP augment)
             as RFC 7951 JSON; always JSON
  status     the daemon: version, pid, role, configuration file, uptime, reloads and how
             the last one went

Add --json for the JSON form of any view. Filters: --spine ID (paths, neighbors, weights'
members), --remote ID (paths, weights' groups), --prefix P (weights' groups holding P).
`show weights --explain P` says, per member of P's group, why it has its weight.

Examples:
  $ lqd show paths --instance leaf1 --spine 10.0.0.2 --remote 10.0.1.4
  $ lqd show weights --instance leaf1 --explain 10.4.0.9";

/// Arguments of `lqd run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The configuration file.
    #[arg(long, short, value_name = "FILE")]
    pub config: PathBuf,
    /// Instance name: pins under /sys/fs/bpf/lq/NAME, control socket /run/lq/NAME.sock.
    #[arg(long, default_value = "default", value_parser = parse_instance)]
    pub instance: String,
    /// Run inside the network namespace /run/netns/NAME (prefer this to `ip netns exec`,
    /// which hides the host's /sys/fs/bpf and so the pinned maps).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Scheduling of the event loop and the helper's sampler thread: `realtime` (SCHED_RR
    /// priority 1 and the pages mapped at start locked in memory, needs CAP_SYS_NICE and
    /// CAP_IPC_LOCK; a spine's samples and advertisements then keep their period under CPU
    /// and memory pressure) or `normal`.
    #[arg(long, value_enum, default_value = "realtime")]
    pub scheduling: lq_user::daemon::Scheduling,
}

/// What `lqd show` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShowWhat {
    /// The path quality table.
    Paths,
    /// Receiver counters.
    Counters,
    /// Neighbors and their states.
    Neighbors,
    /// Weights per group (remote node) and its destinations.
    Weights,
    /// The node's state as RFC 7951 JSON of /ietf-lq-telemetry:lq-telemetry.
    State,
    /// The helper role's links: raw and smoothed metrics, LQS, CL, hysteresis state.
    Local,
    /// The load-balancer role's uplinks: link state, the local quality the weights use
    /// and, with `[local-quality] source = "measured"`, the metrics and LQS it comes from.
    Uplinks,
    /// PFC frames received per interface and priority, paused time, rejected frames.
    Pfc,
    /// The daemon: version, pid, role, configuration file, uptime, reloads and how the
    /// last one went.
    Status,
}

/// Arguments of `lqd show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The view.
    #[arg(value_enum)]
    pub what: ShowWhat,
    /// Instance name.
    #[arg(long, default_value = "default", value_parser = parse_instance)]
    pub instance: String,
    /// The pin folder, when the instance's config set a non-default `[receiver]` pin-dir.
    #[arg(long, value_name = "DIR")]
    pub pin_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only this spine (Router-ID): paths, neighbors, and the members of weights.
    #[arg(long, value_name = "ROUTER-ID")]
    pub spine: Option<String>,
    /// Only this remote node (Router-ID): paths, and the groups of weights.
    #[arg(long, value_name = "ROUTER-ID")]
    pub remote: Option<String>,
    /// Only the group(s) of weights whose prefixes hold this prefix or address.
    #[arg(long, value_name = "PREFIX|ADDRESS")]
    pub prefix: Option<String>,
    /// With `weights`: why each member of the destination's group has its weight (neighbor
    /// state, the path entry and its state, local and path quality, capacity and its
    /// source, target, damped and kernel weight).
    #[arg(long, value_name = "PREFIX|ADDRESS")]
    pub explain: Option<String>,
}

/// Arguments of `lqd sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// The scenario (TOML): a file, e.g. scenarios/appendix-b.toml, or a bare name
    /// (`appendix-b`) found in ./scenarios or the installed PREFIX/share/lq/scenarios.
    pub scenario: PathBuf,
    /// Stop at this virtual time (ms) instead of the scenario's duration.
    #[arg(long, value_name = "MS")]
    pub until_ms: Option<u64>,
    /// Also print every value every N ms, not only on change.
    #[arg(long, value_name = "MS")]
    pub every_ms: Option<u64>,
    /// The scenario's random seed (instead of its `seed`): the advertisement jitter and,
    /// with `[elastic]`, every flow's hash bucket and the counters' jitter; `--seed 1..N`
    /// gives N hash draws of one scenario.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run a named variant of the scenario (e.g. herd.toml's "undamped").
    #[arg(long)]
    pub variant: Option<String>,
    /// Print the run's summary (counts, oscillation statistics) as JSON on stderr.
    #[arg(long)]
    pub summary: bool,
}

/// `lqd ipfix ...`.
#[derive(Debug, Subcommand)]
pub enum IpfixCommand {
    /// A collector for lq's PFC Options Template records (and any exporter following seed
    /// 000): prints each PFC record as a JSON line with the count over the interval when
    /// the counter epoch confirms no reset happened ("unknown" otherwise), and flags
    /// malformed records (fields longer than their type, PFC fields outside their scope
    /// role). Templates and readings are kept per exporter (UDP: source address and port;
    /// TCP/TLS: the connection): exporters never mix. A template with a zero-length field
    /// is refused ("template-refused" with a "reason"). UDP by default, `--tcp` for TCP,
    /// `--tls-cert/--tls-key/--tls-client-ca` for TLS 1.3 with mutual authentication (SCTP,
    /// which RFC 7011 makes mandatory, is not in this kernel).
    Collect(CollectArgs),
}

/// Arguments of `lqd ipfix collect`.
#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:4739")]
    pub listen: std::net::SocketAddr,
    /// Private Enterprise Number of the PFC elements.
    #[arg(long, default_value_t = 32473)]
    pub pen: u32,
    /// Element IDs of pfcPriority, pfcControlFrameTotalCount and the counter epoch.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub element_ids: Vec<u16>,
    /// UDP: seconds of Export Time a template stays usable without being sent again (RFC
    /// 7011 section 8.4; at least three times the exporter's template refresh interval).
    /// Its records are then unknown sets until it comes again ("templates-expired").
    #[arg(long, value_name = "SECONDS", default_value_t = lq_user::ipfix::collect::DEFAULT_UDP_TEMPLATE_LIFETIME_S, value_parser = clap::value_parser!(u32).range(1..))]
    pub template_lifetime_s: u32,
    /// Accept IPFIX over TCP instead of UDP (one session per exporter; templates per
    /// session).
    #[arg(long)]
    pub tcp: bool,
    /// TLS 1.3 with mutual authentication (implies --tcp): this collector's certificate.
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "tls_client_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// TLS: this collector's private key.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS: the CA exporters' client certificates must chain to.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

/// Arguments of `lqd monitor`.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Instance name.
    #[arg(long, default_value = "default", value_parser = parse_instance)]
    pub instance: String,
}

const CHECK_CONFIG_LONG_ABOUT: &str = "\
Check a configuration file: the checks `lqd run` makes before it touches anything, and
warnings about what is legal but will probably misbehave.

Errors (exit 1) name the file, the line and column, the key and its allowed range:
a value out of range or of the wrong type, an unknown key, rules that span keys (AS fields
that do not follow as-qualified, a spine-as outside [receiver] as-plan, duplicate uplink
ids, [[link]] interfaces or prefixes, interface names longer than 15 characters, [udp]
port 0, an [helper] mtu no entry fits in, ...).

Warnings (exit 0, or 1 with --strict): an [[uplink]] interface the XDP receiver does not
listen on, [[link]] in a load-balancer or [[uplink]] in a helper (ignored), a
load-balancer that steers nothing, resilient buckets too few for the members.

The output lists the effective settings, defaults included: the summary as text, or with
--json the whole configuration as lqd reads it (every section and key, kebab-case) with
the warnings and the derived timers.

Example:
  $ lqd check-config /etc/lq/leaf1.toml
  $ lqd check-config --strict --json /etc/lq/leaf1.toml | jq '.effective.damping'";

/// Arguments of `lqd check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The configuration file.
    pub file: PathBuf,
    /// Treat warnings as errors (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Print the effective configuration, the warnings and the derived timers as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_instance(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?}: an instance name is 1-64 letters, digits, '-' or '_'"
        ))
    }
}

const DECODE_LONG_ABOUT: &str = "\
Decode LQ advertisements (spec/lq-udp-wire.md, version 1) and print each accepted one as
RFC 7951 JSON under the member \"ietf-lq-telemetry:lq-advertisement\".

What it checks, in the spec's order, with the spec's discard reasons:
  With --pcap only (whole Ethernet frames; pcap or pcapng, link type Ethernet):
    1-3  Ethernet II with at most one 802.1Q/802.1ad tag, IPv4 (not a fragment) or IPv6,
         UDP to --port. Frames failing these are not LQ datagrams and are skipped.
    4    TTL / Hop Limit 255 (GTSM), else bad_ttl.
  Always (the UDP payload):
    5    at least 16 octets (else truncated), version 1 (else bad_version)
    6    mode periodic or triggered, else bad_mode
    7    entry length and payload length match the flags and the count, else bad_length
    8    Q matches --as-qualified and the node AS is in --as-plan, else as_mismatch
         (skipped when --as-qualified is absent: both Q values are accepted)
    9    bandwidths finite, >= 0 and within decimal64, else bad_value
  NOT checked: 10, the sequence number (stale_seq). It is stateful (the last number
  accepted from each neighbor), so decode accepts replayed and reordered datagrams.
  Entries whose remote AS lies outside --as-plan (a receiver would not store them,
  check 11) are reported on stderr.

Display: bandwidths are decimal64 strings rounded to 3 fractional digits; timestamp-ms is
omitted when above 2147483647 (yang:milliseconds32 is signed); diagnostics appear only for
entries whose diagnostics are valid (V = 1); link-quality is omitted when there are no
entries.";

const DECODE_AFTER_LONG_HELP: &str = "\
Example, the spec's first test vector (Q 0, D 1, two entries):
  $ lqd decode \\
      160112340a00000200000064000218000a00010400000007433400004870000043c800004d2800000a0001010000000543c34000ed0000000000000000000000
  {
    \"ietf-lq-telemetry:lq-advertisement\": {
      \"node-id\": \"10.0.0.2\",
      \"node-as\": 0,
      \"sequence-number\": 4660,
      \"timestamp-ms\": 100,
      \"pfc-fabric\": true,
      \"signaling-mode\": \"triggered\",
      \"link-quality\": [
        {
          \"remote-as\": 0,
          \"remote-node-id\": \"10.0.1.4\",
          \"link-id\": 7,
          \"available-bandwidth\": \"180.0\",
          \"lqs\": 72,
          \"cl\": 3,
          \"diagnostics\": { \"link-capacity\": \"400.0\", \"queue-depth\": 77, ... }
        },
        { \"remote-as\": 0, \"remote-node-id\": \"10.0.1.1\", ..., \"cl\": 0 }
      ]
    }
  }

A discarded payload prints `discarded: REASON`. With --pcap, each accepted frame prints one
JSON document, each discarded frame prints `frame N: discarded: REASON` (N counts from 1
as in Wireshark), and a summary `N frames: A accepted, D discarded, P not LQ` goes to
stderr. With --pcap --json-lines stdout is JSON only, one object per LQ frame: `frame`,
`time` (capture time, RFC 3339 UTC, when the file records one), `source` (IP source
address), and the advertisement's `ietf-lq-telemetry:lq-advertisement` member or
`discarded` with the reason:
  $ tcpdump -i eth0 -w lq.pcap 'udp port 52525 or (vlan and udp port 52525)'
  $ lqd decode --pcap lq.pcap --as-qualified true --as-plan 65000-65100,4200000001

Exit status:
  0  every LQ datagram was accepted (also when the capture holds none)
  1  at least one LQ datagram was discarded
  2  usage error, invalid hex, or a capture file that cannot be read";

/// Arguments of `lqd decode`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["hex", "pcap"]))]
pub struct DecodeArgs {
    /// A UDP payload in hex (whitespace and a leading 0x are ignored; it may be split over
    /// several arguments).
    #[arg(value_name = "HEX", num_args = 1..)]
    pub hex: Vec<String>,
    /// Decode every frame of this pcap or pcapng capture (Ethernet frames; `-` reads stdin).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// UDP destination port of LQ datagrams (with --pcap) [default: 52525].
    // An Option without a clap default, and `conflicts_with` rather than `requires = "pcap"`:
    // clap 4 does not enforce `requires` here (a default value, or the required group).
    #[arg(long, value_name = "PORT", conflicts_with = "hex")]
    pub port: Option<u16>,
    /// The local as-qualified setting (check 8). When absent, both Q values are accepted
    /// and no AS plan is checked.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub as_qualified: Option<bool>,
    /// The AS plan: AS numbers and inclusive ranges, comma-separated
    /// (e.g. 65000-65100,4200000001). Needs --as-qualified.
    #[arg(long, value_name = "RANGES", requires = "as_qualified", value_parser = parse_as_plan_arg)]
    pub as_plan: Option<AsPlan>,
    /// Print each JSON document compactly on one line.
    #[arg(long)]
    pub json_lines: bool,
    /// Verify authentication trailers with this key chain (the file `[helper] key-chain`
    /// names; RFC 8177 fields): an advertisement without a trailer that verifies is
    /// discarded with the reason (missing-trailer, unknown-key-id, key-not-accepted,
    /// bad-mac). Key lifetimes are judged at each frame's capture time (a HEX payload:
    /// now). Without it a trailer is shown, not checked.
    #[arg(long, value_name = "FILE")]
    pub key_chain: Option<PathBuf>,
    /// With HEX and --key-chain: the datagram's source, ADDR:PORT (the trailer's MAC
    /// covers it; a frame of --pcap carries its own).
    #[arg(long, value_name = "ADDR:PORT", requires_all = ["key_chain", "destination"], conflicts_with = "pcap")]
    pub source: Option<std::net::SocketAddr>,
    /// With HEX and --key-chain: the datagram's destination, ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT", requires_all = ["key_chain", "source"], conflicts_with = "pcap")]
    pub destination: Option<std::net::SocketAddr>,
}

/// A parsed `--as-plan`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsPlan(pub Vec<AsRange>);

fn parse_as_plan_arg(s: &str) -> Result<AsPlan, String> {
    parse_as_plan(s).map(AsPlan)
}

fn parse_log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

impl DecodeArgs {
    /// The decode options these arguments ask for (the key chain not read yet: see
    /// [`DecodeArgs::options_with_keys`]).
    pub fn options(&self) -> DecodeOptions {
        DecodeOptions {
            port: self.port.unwrap_or(DEFAULT_PORT),
            as_qualified: self.as_qualified,
            as_plan: self.as_plan.clone().map(|p| p.0).unwrap_or_default(),
            json_lines: self.json_lines,
            key_chain: None,
            endpoints: match (self.source, self.destination) {
                (Some(source), Some(destination)) => Some(lq_user::core::auth::Endpoints {
                    source,
                    destination,
                }),
                _ => None,
            },
            now_s: 0,
        }
    }

    /// [`DecodeArgs::options`] with `--key-chain` read and the time `now_s`.
    pub fn options_with_keys(
        &self,
        now_s: i64,
    ) -> Result<DecodeOptions, lq_user::config::key_chain::KeyChainFileError> {
        let key_chain = self
            .key_chain
            .as_deref()
            .map(lq_user::config::key_chain::load)
            .transpose()?;
        Ok(DecodeOptions {
            key_chain,
            now_s,
            ..self.options()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lqd").chain(args.iter().copied()))
    }

    #[test]
    fn decode_arguments() {
        let cli = parse(&["decode", "0x16", "01"]).unwrap();
        let Command::Decode(d) = cli.command else {
            panic!("decode")
        };
        assert_eq!(d.hex, ["0x16", "01"]);
        assert_eq!(d.options(), DecodeOptions::default());
        let cli = parse(&[
            "--log-format",
            "json",
            "decode",
            "--pcap",
            "x.pcap",
            "--port",
            "9",
            "--as-qualified",
            "true",
            "--as-plan",
            "1-2,7",
        ])
        .unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        let Command::Decode(d) = cli.command else {
            panic!("decode")
        };
        assert_eq!(d.options().port, 9);
        assert_eq!(d.options().as_qualified, Some(true));
        assert_eq!(d.options().as_plan.len(), 2);
        for bad in [
            &["decode"][..],
            &["decode", "16", "--pcap", "x"],
            &["decode", "16", "--port", "9"],
            &["decode", "16", "--as-plan", "1-2"],
            &["decode", "16", "--as-qualified", "yes"],
            &["decode", "16", "--as-qualified", "true", "--as-plan", "2-1"],
            &["--log-level", "lq_user=loud", "decode", "16"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
