//! Fabrics of network namespaces for the demo (`cargo xtask demo`) and the fabric tests:
//! veth links shaped with tbf, static routes, per-namespace sysctls, the hash-clearing tc
//! program on the leaves' host ports, `lqd` configurations and processes.
//!
//! Everything lives inside namespaces created here and deleted on drop (processes inside
//! are killed first); the root namespace's links, routes, sysctls and qdiscs are never
//! touched.

use std::{
    fs::File,
    net::Ipv4Addr,
    os::{fd::AsRawFd, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use aya::programs::{SchedClassifier, TcAttachType};

use crate::{
    netns::{NetNs, run},
    poll::poll_until,
};

/// Prefix of every namespace the fabric builder creates (`lqf-...`); a later run removes
/// leftovers of a killed run whose process is gone.
pub const NS_PREFIX: &str = "lqf";

/// First nexthop object id of lqd (its default `id-base`).
pub const ID_BASE: u64 = 0x4c00_0000;

/// Runs `f` with the calling thread inside namespace `ns`, then returns the thread to the
/// namespace it was in.
pub fn in_netns<T>(ns: &str, f: impl FnOnce() -> T) -> Result<T> {
    let here = File::open("/proc/thread-self/ns/net").context("open own netns")?;
    let there = File::open(format!("/run/netns/{ns}")).with_context(|| format!("netns {ns}"))?;
    // SAFETY: setns on valid namespace fds, this thread only.
    if unsafe { libc::setns(there.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {ns}: {}", std::io::Error::last_os_error());
    }
    let out = f();
    // SAFETY: as above.
    if unsafe { libc::setns(here.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        // The thread would keep working in the wrong namespace: never continue.
        panic!("setns back: {}", std::io::Error::last_os_error());
    }
    Ok(out)
}

/// Moves the calling thread into namespace `ns` for good (worker threads).
pub fn enter_netns(ns: &str) -> Result<()> {
    let there = File::open(format!("/run/netns/{ns}")).with_context(|| format!("netns {ns}"))?;
    // SAFETY: setns on a valid namespace fd, this thread only.
    if unsafe { libc::setns(there.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {ns}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Deletes `lqf-<pid>-*` namespaces of fabric runs whose process no longer exists.
pub fn remove_stale_namespaces() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return removed;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&format!("{NS_PREFIX}-")) else {
            continue;
        };
        // lqf-<role>-<pid>-<n>
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", &name]).output() {
                for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", p]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
            removed.push(name);
        }
    }
    removed
}

/// Sets the per-namespace sysctls of a router (forwarding, L4 multipath hashing, nexthop
/// objects only in dumps). Inside `ns` only.
pub fn router_sysctls(ns: &NetNs) -> Result<()> {
    for kv in [
        "net.ipv4.ip_forward=1",
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv4.nexthop_compat_mode=0",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ] {
        ns.exec("sysctl", &["-qw", kv])?;
    }
    Ok(())
}

/// Pins `net.ipv4.fib_multipath_hash_seed` of namespace `ns` (per namespace since Linux
/// 6.11; 0 means the kernel's random per-namespace key): the same seed and 5-tuples give
/// the same multipath hash, so a hash draw is repeatable. Inside `ns` only.
pub fn set_multipath_hash_seed(ns: &NetNs, seed: u32) -> Result<()> {
    ns.exec(
        "sysctl",
        &["-qw", &format!("net.ipv4.fib_multipath_hash_seed={seed}")],
    )?;
    let now = ns.exec("sysctl", &["-n", "net.ipv4.fib_multipath_hash_seed"])?;
    if now.trim() != seed.to_string() {
        bail!(
            "{}: fib_multipath_hash_seed reads {} after setting {seed}",
            ns.name(),
            now.trim()
        );
    }
    Ok(())
}

/// The egress interface the kernel of `ns` picks for TCP flows from `src:sport` to
/// `dst:dport` arriving on `iif`, one per source port (`ip route get ... iif`, the
/// forwarding lookup with the multipath hash of the packet's 5-tuple), in one `ip -batch`.
/// `None` where a line has no `dev`.
pub fn flow_egress(
    ns: &NetNs,
    iif: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    dport: u16,
    sports: &[u16],
) -> Result<Vec<Option<String>>> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["-n", ns.name(), "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn ip -batch")?;
    {
        let mut stdin = child.stdin.take().context("ip -batch stdin")?;
        for sp in sports {
            writeln!(
                stdin,
                "route get {dst} from {src} iif {iif} ipproto tcp sport {sp} dport {dport}"
            )?;
        }
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "ip -batch route get in {}: {}",
            ns.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // One route per request; a route may wrap onto indented continuation lines.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut routes: Vec<Option<String>> = Vec::new();
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace();
        let dev = words
            .by_ref()
            .skip_while(|w| *w != "dev")
            .nth(1)
            .map(str::to_string);
        routes.push(dev);
    }
    if routes.len() != sports.len() {
        bail!(
            "ip -batch route get in {}: {} answers for {} flows:\n{text}",
            ns.name(),
            routes.len(),
            sports.len()
        );
    }
    Ok(routes)
}

/// tbf parameters of a shaped link: the queue holds `latency` worth of the rate.
#[derive(Clone, Copy, Debug)]
pub struct Shaping {
    /// Rate in Mbit/s.
    pub rate_mbit: u32,
    /// Bucket size in bytes.
    pub burst_bytes: u32,
    /// Queue limit as latency in ms.
    pub latency_ms: u32,
}

impl Shaping {
    /// The demo's default shaping at `rate_mbit`.
    pub fn at(rate_mbit: u32) -> Self {
        Self {
            rate_mbit,
            burst_bytes: 32 * 1024,
            latency_ms: 20,
        }
    }
}

/// `tc qdisc replace dev IFACE root tbf ...` inside `ns`.
pub fn shape(ns: &NetNs, iface: &str, s: Shaping) -> Result<()> {
    ns.exec(
        "tc",
        &[
            "qdisc",
            "replace",
            "dev",
            iface,
            "root",
            "tbf",
            "rate",
            &format!("{}mbit", s.rate_mbit),
            "burst",
            &s.burst_bytes.to_string(),
            "latency",
            &format!("{}ms", s.latency_ms),
        ],
    )?;
    Ok(())
}

/// A veth link between two namespaces, addressed, up, each direction shaped when `shaping`
/// is given.
#[allow(clippy::too_many_arguments)]
pub fn link(
    a: &NetNs,
    a_if: &str,
    a_addr: &str,
    b: &NetNs,
    b_if: &str,
    b_addr: &str,
    shaping: Option<Shaping>,
) -> Result<()> {
    crate::netns::veth_pair(a, a_if, a_addr, b, b_if, b_addr)?;
    if let Some(s) = shaping {
        shape(a, a_if, s)?;
        shape(b, b_if, s)?;
    }
    Ok(())
}

/// The tc program `lq_clear_hash` (lq-ebpf/src/hash_clear.rs) loaded once from the object
/// embedded in lq-user and attached (tcx) at ingress of interfaces in any namespace.
/// Detached when dropped.
pub struct HashClear {
    ebpf: aya::Ebpf,
}

impl HashClear {
    /// Loads the program (the verifier runs once).
    pub fn load() -> Result<Self> {
        let obj = lq_user::sys::bpf::path_table::EBPF_OBJECT;
        if obj.is_empty() {
            bail!("lqd was built without its eBPF object");
        }
        let mut ebpf = aya::EbpfLoader::new()
            .load(obj)
            .context("load the eBPF object")?;
        let prog: &mut SchedClassifier = ebpf
            .program_mut("lq_clear_hash")
            .context("program lq_clear_hash is missing from the object")?
            .try_into()?;
        prog.load().context("load lq_clear_hash (verifier)")?;
        Ok(Self { ebpf })
    }

    /// Attaches at ingress of `iface` in namespace `ns`.
    pub fn attach(&mut self, ns: &NetNs, iface: &str) -> Result<()> {
        let prog: &mut SchedClassifier = self
            .ebpf
            .program_mut("lq_clear_hash")
            .context("lq_clear_hash")?
            .try_into()?;
        in_netns(ns.name(), || prog.attach(iface, TcAttachType::Ingress))?
            .with_context(|| format!("attach lq_clear_hash to {iface} in {}", ns.name()))?;
        Ok(())
    }
}

/// The last `n` log lines of each daemon, headed by its instance name: what a failed
/// fabric assertion shows.
pub fn log_tails<'a>(daemons: impl IntoIterator<Item = &'a Daemon>, n: usize) -> String {
    daemons
        .into_iter()
        .map(|d| format!("--- {}:\n{}", d.instance, d.log_tail(n)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running `lqd run` inside a namespace: SIGTERM on drop, pins and socket removed.
pub struct Daemon {
    child: Option<Child>,
    /// Instance name.
    pub instance: String,
    /// Its log file.
    pub log: PathBuf,
    /// Its configuration file.
    pub config: PathBuf,
}

impl Daemon {
    /// Writes `config_text` to `dir/<instance>.toml` and starts `lqd run` in `ns` with logs
    /// to `dir/<instance>.log`; waits until the control socket exists.
    pub fn start(
        lqd: &Path,
        ns: &NetNs,
        instance: &str,
        config_text: &str,
        dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join(format!("{instance}.toml"));
        std::fs::write(&config, config_text)?;
        let log = dir.join(format!("{instance}.log"));
        let _ = std::fs::remove_dir_all(Path::new("/sys/fs/bpf/lq").join(instance));
        let child = Command::new(lqd)
            .args(["--log-level", "info", "run", "--config"])
            .arg(&config)
            .args(["--instance", instance, "--netns", ns.name()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?)
            // Own process group: a Ctrl-C in the terminal reaches the demo, which stops
            // the daemons in order.
            .process_group(0)
            .spawn()
            .context("spawn lqd")?;
        let mut me = Self {
            child: Some(child),
            instance: instance.into(),
            log,
            config,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !me.socket().exists() {
            if let Some(st) = me.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                me.child = None;
                bail!("lqd {instance} exited ({st}):\n{}", me.log_tail(20));
            }
            if Instant::now() > deadline {
                bail!("lqd {instance} did not open its control socket");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(format!("/run/lq/{}.sock", self.instance))
    }

    /// Writes `config_text` over its configuration file and sends SIGHUP (lqd reloads it).
    pub fn reload(&self, config_text: &str) -> Result<()> {
        std::fs::write(&self.config, config_text)?;
        let Some(c) = self.child.as_ref() else {
            bail!("lqd {} is not running", self.instance);
        };
        // SAFETY: kill on our own child's pid.
        if unsafe { libc::kill(c.id() as i32, libc::SIGHUP) } != 0 {
            bail!(
                "SIGHUP to lqd {}: {}",
                self.instance,
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// One control request (`weights`, `local`, `neighbors`, ...).
    pub fn query(&self, what: &str) -> Result<serde_json::Value> {
        lq_user::daemon::query(&self.socket(), what)
    }

    /// SIGKILL (a crash) and wait; the control socket file is removed, the pins stay.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// SIGTERM, wait up to 5 s, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        crate::daemon::remove_pins(&self.instance);
        let _ = std::fs::remove_file(self.socket());
    }
}

/// One uplink of a leaf configuration.
#[derive(Clone, Debug)]
pub struct UplinkCfg {
    /// Member id.
    pub id: u16,
    /// The spine's Router-ID.
    pub spine: Ipv4Addr,
    /// Local interface.
    pub interface: String,
    /// The spine's address on it.
    pub gateway: Ipv4Addr,
    /// The spine's AS (`spine-as`, with `as-qualified = true`).
    pub spine_as: Option<u32>,
}

/// Options of the load-balancer configurations the builder writes.
#[derive(Clone, Debug)]
pub struct LbOptions {
    /// Resilient group buckets.
    pub buckets: u16,
    /// Resilient idle timer.
    pub idle_timer_ms: u32,
    /// Resilient unbalanced timer (0: never force).
    pub unbalanced_timer_ms: u32,
    /// Damping gain.
    pub gain: f64,
    /// The weight function (`weight-function` in `[damping]`); lqd's default when `None`.
    pub weight_function: Option<String>,
    /// `[nexthop-group] replace`; lqd's default when `None`.
    pub replace: Option<String>,
    /// `[damping] gray-failure-prune = true` (the opt-in departure from 6.3; off in lqd).
    pub gray_failure_prune: bool,
}

impl Default for LbOptions {
    fn default() -> Self {
        Self {
            buckets: 256,
            idle_timer_ms: 1000,
            unbalanced_timer_ms: 1000,
            gain: 0.5,
            weight_function: None,
            replace: None,
            gray_failure_prune: false,
        }
    }
}

/// The `[[uplink]]`, `[[destination]]`, `[damping]` and `[nexthop-group]` sections of a
/// load-balancer (or dual) node: `destinations` are (prefix, remote Router-ID).
pub fn lb_sections(
    uplinks: &[UplinkCfg],
    destinations: &[(String, Ipv4Addr)],
    o: &LbOptions,
) -> String {
    let ifaces: Vec<String> = uplinks
        .iter()
        .map(|u| format!("\"{}\"", u.interface))
        .collect();
    let weight_function = o
        .weight_function
        .as_deref()
        .map(|w| format!("weight-function = \"{w}\"\n"))
        .unwrap_or_default();
    let gray_failure = if o.gray_failure_prune {
        "gray-failure-prune = true\n"
    } else {
        ""
    };
    let replace = o
        .replace
        .as_deref()
        .map(|r| format!("replace = \"{r}\"\n"))
        .unwrap_or_default();
    let mut c = format!(
        "\n[receiver]\ninterfaces = [{}]\n\n[damping]\ngain = {}\n{weight_function}{gray_failure}\n[nexthop-group]\ntype = \"resilient\"\nbuckets = {}\nidle-timer-ms = {}\nunbalanced-timer-ms = {}\n{replace}",
        ifaces.join(", "),
        o.gain,
        o.buckets,
        o.idle_timer_ms,
        o.unbalanced_timer_ms
    );
    for u in uplinks {
        c.push_str(&format!(
            "\n[[uplink]]\nid = {}\nspine = \"{}\"\ninterface = \"{}\"\ngateway = \"{}\"\n",
            u.id, u.spine, u.interface, u.gateway
        ));
        if let Some(a) = u.spine_as {
            c.push_str(&format!("spine-as = {a}\n"));
        }
    }
    for (p, r) in destinations {
        c.push_str(&format!(
            "\n[[destination]]\nprefix = \"{p}\"\nremote-node = \"{r}\"\n"
        ));
    }
    c
}

/// `[helper]` and `[[link]]` sections: `links` are (interface, remote Router-ID).
pub fn helper_sections(links: &[(String, Ipv4Addr)], t_sample_ms: u8) -> String {
    let mut c = format!("\n[helper]\nt-sample-ms = {t_sample_ms}\n");
    for (i, r) in links {
        c.push_str(&format!(
            "\n[[link]]\ninterface = \"{i}\"\nremote-node = [\"{r}\"]\n"
        ));
    }
    c
}

/// The `[lq-telemetry]` head.
pub fn telemetry_head(role: &str, router_id: Option<Ipv4Addr>) -> String {
    let mut c = format!("[lq-telemetry]\nenabled = true\nrole = \"{role}\"\n");
    if let Some(r) = router_id {
        c.push_str(&format!("router-id = \"{r}\"\n"));
    }
    c
}

/// `[pfc]` and `[ipfix]` sections exporting to `collector`.
pub fn pfc_sections(interfaces: &[String], collector: &str, interval_ms: u32) -> String {
    let ifaces: Vec<String> = interfaces.iter().map(|i| format!("\"{i}\"")).collect();
    format!(
        "\n[pfc]\ninterfaces = [{}]\nspeed-mbps = 100\n\n[ipfix]\ncollector = \"{collector}\"\ninterval-ms = {interval_ms}\nepoch-element-id = 3\n",
        ifaces.join(", ")
    )
}

/// A nexthop group as the kernel has it: members (id - ID_BASE, weight), sorted.
pub fn group_members(ns: &NetNs, group: u64) -> Option<Vec<(u64, u64)>> {
    let out = ns
        .ip(&["-j", "nexthop", "show", "id", &group.to_string()])
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    let g = v.as_array()?.first()?.clone();
    let mut w: Vec<(u64, u64)> = g["group"]
        .as_array()?
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap_or(0).saturating_sub(ID_BASE),
                m["weight"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    w.sort_unstable();
    Some(w)
}

/// The buckets each member of a resilient group of `buckets` buckets wants for `weights`
/// ((member, weight) sorted by member), computed as the kernel does
/// (`nh_res_group_rebalance`: cumulative bounds `DIV_ROUND_CLOSEST(buckets x cumulative
/// weight, total)`). The tests' own oracle, so that a test compares forwarding rather than
/// integer weights: lqd writes a weight change only when it moves a bucket (issue 41).
pub fn wanted_buckets(buckets: u64, weights: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let total: u64 = weights.iter().map(|w| w.1).sum::<u64>().max(1);
    let (mut cum, mut prev) = (0, 0);
    weights
        .iter()
        .map(|&(m, w)| {
            cum += w;
            let upper = (buckets * cum + total / 2) / total;
            let share = upper - prev;
            prev = upper;
            (m, share)
        })
        .collect()
}

/// How a resilient group forwards: the buckets each member wants, from the kernel's own
/// weights and bucket count (`ip -j nexthop show`); see [`wanted_buckets`].
pub fn group_forwarding(ns: &NetNs, group: u64) -> Option<Vec<(u64, u64)>> {
    let out = ns
        .ip(&["-j", "nexthop", "show", "id", &group.to_string()])
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    let buckets = v.as_array()?.first()?["resilient_args"]["buckets"].as_u64()?;
    Some(wanted_buckets(buckets, &group_members(ns, group)?))
}

/// Whether the resilient group forwards as `weights` would: the same members, each with
/// the buckets the kernel's rounding of `weights` gives ([`wanted_buckets`]), or with
/// bucket counts as close to `weights`' exact shares as any ([`closest_counts`]: lqd
/// writes bucket counts judged member by member, issue 41).
pub fn forwards_as(ns: &NetNs, group: u64, weights: &[(u64, u64)]) -> bool {
    let Some(got) = group_forwarding(ns, group) else {
        return false;
    };
    let buckets = got.iter().map(|m| m.1).sum();
    got == wanted_buckets(buckets, weights) || closest_counts(&got, weights)
}

/// Whether bucket counts `got` ((member, buckets) sorted by member) put as few buckets on
/// the wrong member as any counts can for `weights`' exact shares (`buckets x weight /
/// total`): the same members, and no bucket moved from one member to another would lower
/// `sum |count - share|`, that is no member's surplus plus another's deficit exceeds one
/// bucket. lqd judges the damped fractions themselves, of which integer `weights` are a
/// rounding (a weight unit each): each fraction's share lies within `buckets / total` of
/// its weight's, so a surplus plus a deficit may exceed one bucket by twice that.
pub fn closest_counts(got: &[(u64, u64)], weights: &[(u64, u64)]) -> bool {
    let buckets: u64 = got.iter().map(|g| g.1).sum();
    let total: u64 = weights.iter().map(|w| w.1).sum::<u64>().max(1);
    counts_within(got, weights, 2.0 * buckets as f64 / total as f64)
}

/// [`closest_counts`] for exact proportions (`shares` proportional to the fractions, not
/// a rounding of them): no bucket moved from one member to another would lower `sum
/// |count - share|`, where lqd's replace rule settles a group.
pub fn settled_counts(got: &[(u64, u64)], shares: &[(u64, u64)]) -> bool {
    counts_within(got, shares, 0.0)
}

/// No member's surplus over its share plus another's deficit exceeds one bucket plus
/// `slack`.
fn counts_within(got: &[(u64, u64)], weights: &[(u64, u64)], slack: f64) -> bool {
    if got.len() != weights.len() || got.iter().zip(weights).any(|(g, w)| g.0 != w.0) {
        return false;
    }
    let buckets: u64 = got.iter().map(|g| g.1).sum();
    let total: u64 = weights.iter().map(|w| w.1).sum::<u64>().max(1);
    let error: Vec<f64> = (got.iter().zip(weights))
        .map(|(g, w)| g.1 as f64 - (buckets * w.1) as f64 / total as f64)
        .collect();
    let surplus = (got.iter().zip(&error))
        .filter(|(g, _)| g.1 > 0)
        .map(|(_, e)| *e)
        .fold(f64::NEG_INFINITY, f64::max);
    let deficit = error.iter().map(|e| -e).fold(f64::NEG_INFINITY, f64::max);
    surplus + deficit <= 1.0 + slack + 1e-9
}

/// The buckets each member holds in the kernel's resilient group now
/// (`ip -j nexthop bucket show id`), sorted by member.
pub fn group_buckets(ns: &NetNs, group: u64) -> Option<Vec<(u64, u64)>> {
    let out = ns
        .ip(&["-j", "nexthop", "bucket", "show", "id", &group.to_string()])
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    let mut per = std::collections::BTreeMap::new();
    for b in v.as_array()? {
        let id = b["bucket"]["nhid"].as_u64()?.saturating_sub(ID_BASE);
        *per.entry(id).or_insert(0u64) += 1;
    }
    Some(per.into_iter().collect())
}

/// The nexthop group id a route points at (`nhid`).
pub fn route_group(ns: &NetNs, prefix: &str) -> Option<u64> {
    route_group_in(ns, prefix, None)
}

/// [`route_group`] in routing table `table` (the main table when `None`).
pub fn route_group_in(ns: &NetNs, prefix: &str, table: Option<u32>) -> Option<u64> {
    let t = table.map(|t| t.to_string());
    let mut args = vec!["-j", "route", "show", prefix];
    if let Some(t) = &t {
        args.extend(["table", t.as_str()]);
    }
    let out = ns.ip(&args).ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    v.as_array()?.first()?["nhid"].as_u64()
}

/// Replaces a resilient group's weights by hand (lqd not running on that node), keeping
/// lqd's protocol so that a restarted lqd adopts it. `weights` are (member id offset,
/// weight); a weight of 0 leaves the member out.
pub fn set_group(ns: &NetNs, group: u64, weights: &[(u64, u64)], o: &LbOptions) -> Result<()> {
    write_group(ns, "replace", group, weights, o)
}

/// `ip nexthop VERB` (add or replace) of lqd-protocol resilient group `group` with
/// `weights` ([`set_group`]) and `o`'s bucket count and timers.
fn write_group(
    ns: &NetNs,
    verb: &str,
    group: u64,
    weights: &[(u64, u64)],
    o: &LbOptions,
) -> Result<()> {
    let members: Vec<String> = weights
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|(id, w)| format!("{},{}", ID_BASE + id, w))
        .collect();
    ns.ip(&[
        "nexthop",
        verb,
        "id",
        &group.to_string(),
        "group",
        &members.join("/"),
        "type",
        "resilient",
        "buckets",
        &o.buckets.to_string(),
        // iproute2 takes whole seconds here (lqd sends centiseconds over rtnetlink).
        "idle_timer",
        &o.idle_timer_ms.div_ceil(1000).to_string(),
        "unbalanced_timer",
        &o.unbalanced_timer_ms.div_ceil(1000).to_string(),
        "proto",
        "76",
    ])?;
    Ok(())
}

/// Deletes and re-creates a resilient group and the route to `prefix` through it (lqd's
/// protocol, so a restarted lqd adopts both): a fresh group has the same bucket layout
/// every time, so runs with the same weights and 5-tuples hash alike.
pub fn recreate_group(
    ns: &NetNs,
    group: u64,
    prefix: &str,
    weights: &[(u64, u64)],
    o: &LbOptions,
) -> Result<()> {
    recreate_group_in(ns, group, prefix, None, weights, o)
}

/// Removes lq's route to `prefix` in `table` (the main table when `None`) and the group
/// it named: with the slow plane (table [`LQ_TABLE`]), forwarding falls through to the
/// main table, i.e. to BGP's own route.
pub fn remove_lq_route(ns: &NetNs, group: u64, prefix: &str, table: Option<u32>) {
    let t = table.unwrap_or(254).to_string();
    let _ = ns.ip(&["route", "del", prefix, "table", &t, "proto", "76"]);
    let _ = ns.ip(&["nexthop", "del", "id", &group.to_string()]);
}

/// [`recreate_group`] with the route in `table` (the main table when `None`).
pub fn recreate_group_in(
    ns: &NetNs,
    group: u64,
    prefix: &str,
    table: Option<u32>,
    weights: &[(u64, u64)],
    o: &LbOptions,
) -> Result<()> {
    remove_lq_route(ns, group, prefix, table);
    let t = table.unwrap_or(254).to_string();
    // The add needs the id free. With `--bgp`, a zebra that uses kernel nexthop objects
    // re-creates a deleted group of lq's as its own a few milliseconds later (the add then
    // failed with "File exists"; `frr::ZEBRA_CONF` turns that off): should the id still be
    // taken, delete once more, and if it is still there, say what holds it.
    let id = group.to_string();
    if ns.ip(&["nexthop", "show", "id", &id]).is_ok() {
        let held = ns.ip(&["-d", "nexthop", "show", "id", &id]);
        let deleted = ns.ip(&["nexthop", "del", "id", &id]);
        if ns.ip(&["nexthop", "show", "id", &id]).is_ok() {
            bail!("nexthop id {group} is still there after two deletes ({deleted:?}): {held:?}");
        }
        eprintln!(
            "    note: nexthop id {group} survived the first delete ({held:?}); deleted again"
        );
    }
    write_group(ns, "add", group, weights, o)?;
    ns.ip(&[
        "route",
        "add",
        prefix,
        "nhid",
        &group.to_string(),
        "table",
        &t,
        "proto",
        "76",
    ])?;
    Ok(())
}

/// Interface byte counters in `ns`: name -> (tx_bytes, rx_bytes).
pub fn link_bytes(ns: &NetNs) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(out) = ns.ip(&["-j", "-s", "link", "show"])
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&out)
    {
        for l in v.as_array().into_iter().flatten() {
            let name = l["ifname"].as_str().unwrap_or_default().to_string();
            let tx = l["stats64"]["tx"]["bytes"].as_u64().unwrap_or(0);
            let rx = l["stats64"]["rx"]["bytes"].as_u64().unwrap_or(0);
            m.insert(name, (tx, rx));
        }
    }
    m
}

/// The 3-stage CLOS: `spines` x `leaves` shaped links, a host behind each leaf, a
/// management bridge to a collector namespace.
pub struct Clos3 {
    /// Spines S1.. (index 0 is S1).
    pub spines: Vec<NetNs>,
    /// Leaves L1...
    pub leaves: Vec<NetNs>,
    /// Host behind each leaf.
    pub hosts: Vec<NetNs>,
    /// The collector namespace (management bridge `br0`, 10.255.0.254).
    pub collector: NetNs,
    /// The hash-clearing program (attached to every leaf's `h0`).
    pub hash_clear: Option<HashClear>,
    /// Link shaping.
    pub shaping: Shaping,
    /// How the fabric learns its routes.
    pub routing: Routing,
}

/// How a [`Clos3`] fabric routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Static routes on the spines; the leaves' routes to other leaves are lqd's
    /// `[[destination]]` groups.
    Static,
    /// eBGP per RFC 7938 (FRR on every router, [`Clos3::start_bgp`]): spine i in AS
    /// [`Clos3::spine_as`], leaf j in AS [`Clos3::leaf_as`] announcing its host prefix; the
    /// leaves' lqd steers BGP's routes (`[slow-plane]`, seed 003 section 4.1) and learns
    /// the NNH mapping over BMP (section 6.1) from AS-qualified advertisements (6.2).
    Bgp,
}

/// Where each leaf's bgpd finds its lqd's BMP station (the leaf's own loopback).
pub const BMP_PORT: u16 = 11019;

/// lq's routing table for the slow plane (lqd's `[slow-plane] table` default).
pub const LQ_TABLE: u32 = 76;

impl Clos3 {
    /// Spine i's Router-ID (1-based).
    pub fn spine_id(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, i as u8)
    }
    /// Leaf j's Router-ID (1-based).
    pub fn leaf_id(j: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 1, j as u8)
    }
    /// Spine i's address on its link to leaf j.
    pub fn spine_addr(i: usize, j: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, i as u8, j as u8, 1)
    }
    /// Leaf j's address on its link to spine i.
    pub fn leaf_addr(i: usize, j: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, i as u8, j as u8, 2)
    }
    /// The host prefix behind leaf j.
    pub fn host_prefix(j: usize) -> String {
        format!("192.168.{j}.0/24")
    }
    /// Host j's address.
    pub fn host_addr(j: usize) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, j as u8, 2)
    }
    /// The collector's address on the management bridge.
    pub const COLLECTOR: &str = "10.255.0.254";
    /// Spine i's AS (RFC 7938: one per spine here, so a leaf's paths differ in their first
    /// AS and need `multipath-relax`).
    pub fn spine_as(i: usize) -> u32 {
        65000 + i as u32
    }
    /// Leaf j's AS: the origin AS of its host prefix, which names it (seed 003 section 6.1).
    pub fn leaf_as(j: usize) -> u32 {
        65100 + j as u32
    }

    /// Builds the namespaces, links, shaping, addresses, sysctls and the static routes of
    /// the spines and hosts (the leaves' routes to other leaves are lqd's). With
    /// `clear_hash`, loads and attaches `lq_clear_hash` on every leaf's host port.
    pub fn build(spines: usize, leaves: usize, shaping: Shaping, clear_hash: bool) -> Result<Self> {
        Self::build_routed(spines, leaves, shaping, clear_hash, Routing::Static)
    }

    /// [`Self::build`] with the routing chosen: with [`Routing::Bgp`] the spines get no
    /// static routes (BGP's, once [`Self::start_bgp`] runs).
    pub fn build_routed(
        spines: usize,
        leaves: usize,
        shaping: Shaping,
        clear_hash: bool,
        routing: Routing,
    ) -> Result<Self> {
        let mk = |role: String| NetNs::new(&format!("{NS_PREFIX}-{role}"));
        let spine_ns = (1..=spines)
            .map(|i| mk(format!("s{i}")))
            .collect::<Result<Vec<_>>>()?;
        let leaf_ns = (1..=leaves)
            .map(|j| mk(format!("l{j}")))
            .collect::<Result<Vec<_>>>()?;
        let host_ns = (1..=leaves)
            .map(|j| mk(format!("h{j}")))
            .collect::<Result<Vec<_>>>()?;
        let collector = mk("col".into())?;
        for ns in spine_ns.iter().chain(&leaf_ns) {
            router_sysctls(ns)?;
        }
        for (i, s) in spine_ns.iter().enumerate() {
            let i = i + 1;
            for (j, l) in leaf_ns.iter().enumerate() {
                let j = j + 1;
                link(
                    s,
                    &format!("l{j}"),
                    &format!("{}/24", Self::spine_addr(i, j)),
                    l,
                    &format!("s{i}"),
                    &format!("{}/24", Self::leaf_addr(i, j)),
                    Some(shaping),
                )?;
                if routing == Routing::Static {
                    s.ip(&[
                        "route",
                        "add",
                        &Self::host_prefix(j),
                        "via",
                        &Self::leaf_addr(i, j).to_string(),
                        "dev",
                        &format!("l{j}"),
                    ])?;
                }
            }
        }
        for (j, (l, h)) in leaf_ns.iter().zip(&host_ns).enumerate() {
            let j = j + 1;
            link(
                l,
                "h0",
                &format!("192.168.{j}.1/24"),
                h,
                "eth0",
                &format!("{}/24", Self::host_addr(j)),
                None,
            )?;
            h.ip(&["route", "add", "default", "via", &format!("192.168.{j}.1")])?;
        }
        // Management: a bridge in the collector namespace, one port per router.
        collector.ip(&["link", "add", "br0", "type", "bridge"])?;
        collector.ip(&[
            "addr",
            "add",
            &format!("{}/24", Self::COLLECTOR),
            "dev",
            "br0",
        ])?;
        collector.ip(&["link", "set", "br0", "up"])?;
        let routers: Vec<(&NetNs, String, u8)> = spine_ns
            .iter()
            .enumerate()
            .map(|(i, n)| (n, format!("ms{}", i + 1), 10 + i as u8 + 1))
            .chain(
                leaf_ns
                    .iter()
                    .enumerate()
                    .map(|(j, n)| (n, format!("ml{}", j + 1), 20 + j as u8 + 1)),
            )
            .collect();
        for (ns, port, host) in routers {
            collector.ip(&[
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                "m0",
                "netns",
                ns.name(),
            ])?;
            collector.ip(&["link", "set", &port, "master", "br0", "up"])?;
            ns.ip(&["addr", "add", &format!("10.255.0.{host}/24"), "dev", "m0"])?;
            ns.ip(&["link", "set", "m0", "up"])?;
        }
        let mut me = Self {
            spines: spine_ns,
            leaves: leaf_ns,
            hosts: host_ns,
            collector,
            hash_clear: None,
            shaping,
            routing,
        };
        if clear_hash {
            let mut hc = HashClear::load()?;
            for l in &me.leaves {
                hc.attach(l, "h0")?;
            }
            me.hash_clear = Some(hc);
        }
        Ok(me)
    }

    /// Leaf j's uplinks (one per spine).
    pub fn uplinks(&self, _j: usize) -> Vec<UplinkCfg> {
        (1..=self.spines.len())
            .map(|i| UplinkCfg {
                id: i as u16,
                spine: Self::spine_id(i),
                interface: format!("s{i}"),
                gateway: Self::spine_addr(i, _j),
                spine_as: (self.routing == Routing::Bgp).then(|| Self::spine_as(i)),
            })
            .collect()
    }

    /// Leaf j's load-balancer configuration: every other leaf's host prefix through the
    /// spines. `pfc`: export PFC counters of the uplinks to the collector.
    /// With [`Routing::Bgp`]: no `[[destination]]`; `[slow-plane]` steers BGP's routes
    /// and its BMP station on 127.0.0.1:[`BMP_PORT`] learns each prefix's origin AS, which
    /// the AS-qualified advertisements (`as-qualified`, `local-as`, `spine-as`) tie to a
    /// remote leaf.
    pub fn leaf_config(&self, j: usize, o: &LbOptions, pfc: bool) -> String {
        let bgp = self.routing == Routing::Bgp;
        let dests: Vec<(String, Ipv4Addr)> = (1..=self.leaves.len())
            .filter(|&k| k != j && !bgp)
            .map(|k| (Self::host_prefix(k), Self::leaf_id(k)))
            .collect();
        let ups = self.uplinks(j);
        let mut c = telemetry_head("load-balancer", Some(Self::leaf_id(j)));
        if bgp {
            c.push_str(&format!(
                "as-qualified = true\nlocal-as = {}\n",
                Self::leaf_as(j)
            ));
        }
        c.push_str(&lb_sections(&ups, &dests, o));
        if bgp {
            c.push_str(&format!(
                "\n[slow-plane]\n\n[slow-plane.bmp]\nlisten = \"127.0.0.1:{BMP_PORT}\"\n"
            ));
        }
        if pfc {
            let ifs: Vec<String> = ups.iter().map(|u| u.interface.clone()).collect();
            c.push_str(&pfc_sections(
                &ifs,
                &format!("{}:4739", Self::COLLECTOR),
                1000,
            ));
        }
        c
    }

    /// Spine i's helper configuration: every downlink monitored.
    /// With [`Routing::Bgp`] the advertisements are AS-qualified (seed 003 section 6.2:
    /// the spine's AS in the header, each leaf's AS in its entries).
    pub fn spine_config(&self, i: usize, t_sample_ms: u8, pfc: bool) -> String {
        let links: Vec<(String, Ipv4Addr)> = (1..=self.leaves.len())
            .map(|j| (format!("l{j}"), Self::leaf_id(j)))
            .collect();
        let mut c = telemetry_head("helper", Some(Self::spine_id(i)));
        if self.routing == Routing::Bgp {
            c.push_str(&format!(
                "as-qualified = true\nlocal-as = {}\n",
                Self::spine_as(i)
            ));
            let mut h = format!("\n[helper]\nt-sample-ms = {t_sample_ms}\n");
            for (j, (l, r)) in links.iter().enumerate() {
                h.push_str(&format!(
                    "\n[[link]]\ninterface = \"{l}\"\nremote-node = [\"{r}\"]\nremote-as = {}\n",
                    Self::leaf_as(j + 1)
                ));
            }
            c.push_str(&h);
        } else {
            c.push_str(&helper_sections(&links, t_sample_ms));
        }
        if pfc {
            let ifs: Vec<String> = links.iter().map(|l| l.0.clone()).collect();
            c.push_str(&pfc_sections(
                &ifs,
                &format!("{}:4739", Self::COLLECTOR),
                1000,
            ));
        }
        c
    }

    /// Starts FRR (zebra + bgpd, [`crate::frr::Frr`]) on every spine and leaf of a
    /// [`Routing::Bgp`] fabric and waits until every leaf has a route to every other
    /// leaf's host prefix through all spines: eBGP per RFC 7938, `maximum-paths 64` with
    /// `multipath-relax`, keepalive `keepalive_s` and hold time 3 x that; each leaf's bgpd
    /// streams its Adj-RIB-In to its lqd's BMP station (127.0.0.1:[`BMP_PORT`]). The
    /// daemons stop when the returned values drop.
    pub fn start_bgp(&self, keepalive_s: u32) -> Result<Vec<crate::frr::Frr>> {
        use crate::frr::{Frr, bgp_paths, bgpd_conf_timers, bmp_target};
        let timers = (keepalive_s, 3 * keepalive_s);
        let (ns, nl) = (self.spines.len(), self.leaves.len());
        let mut daemons = Vec::new();
        for (i, s) in self.spines.iter().enumerate() {
            let i = i + 1;
            let peers: Vec<(String, u32)> = (1..=nl)
                .map(|j| (Self::leaf_addr(i, j).to_string(), Self::leaf_as(j)))
                .collect();
            let peers: Vec<(&str, u32)> = peers.iter().map(|(a, n)| (a.as_str(), *n)).collect();
            let conf = bgpd_conf_timers(
                Self::spine_as(i),
                &Self::spine_id(i).to_string(),
                &peers,
                &[],
                timers,
            );
            // Each route carries the Link Bandwidth of the spine's link to the leaf that
            // originates it (seed 003 section 4.1's FARE capacity), the links' tbf rate.
            let neighbors: Vec<&str> = peers.iter().map(|(a, _)| *a).collect();
            let prefixes: Vec<String> = (1..=nl).map(Self::host_prefix).collect();
            let conf = crate::frr::with_link_bandwidth(
                &conf,
                &neighbors,
                &prefixes,
                &vec![self.shaping.rate_mbit; nl],
            );
            daemons.push(Frr::start(s, &conf).with_context(|| format!("FRR on S{i}"))?);
        }
        for (j, l) in self.leaves.iter().enumerate() {
            let j = j + 1;
            let peers: Vec<(String, u32)> = (1..=ns)
                .map(|i| (Self::spine_addr(i, j).to_string(), Self::spine_as(i)))
                .collect();
            let peers: Vec<(&str, u32)> = peers.iter().map(|(a, n)| (a.as_str(), *n)).collect();
            let mut conf = bgpd_conf_timers(
                Self::leaf_as(j),
                &Self::leaf_id(j).to_string(),
                &peers,
                &[&Self::host_prefix(j)],
                timers,
            );
            conf.push_str(&bmp_target("127.0.0.1", BMP_PORT));
            daemons.push(Frr::start(l, &conf).with_context(|| format!("FRR on L{j}"))?);
        }
        poll_until(
            "BGP to converge",
            Duration::from_secs(60),
            Duration::from_millis(200),
            || {
                let missing: Vec<String> = (1..=nl)
                    .flat_map(|j| (1..=nl).map(move |k| (j, k)))
                    .filter(|&(j, k)| {
                        j != k && bgp_paths(&self.leaves[j - 1], &Self::host_prefix(k)) != ns
                    })
                    .map(|(j, k)| format!("L{j} -> {}", Self::host_prefix(k)))
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(missing)
                }
            },
            |missing| format!("no {ns}-path route for {}", missing.join(", ")),
        )?;
        Ok(daemons)
    }

    /// Spine i announces `mbit` as the Link Bandwidth of its routes to leaf k's prefix
    /// (`frr` as [`Self::start_bgp`] returned it: spines first), re-advertised at once.
    pub fn set_link_bandwidth(
        &self,
        frr: &[crate::frr::Frr],
        i: usize,
        k: usize,
        mbit: u32,
    ) -> Result<()> {
        let cmds = crate::frr::link_bandwidth_change(k, mbit);
        let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
        frr.get(i - 1)
            .with_context(|| format!("no FRR on S{i}"))?
            .vtysh(&cmds)
            .with_context(|| format!("S{i}: Link Bandwidth of leaf {k}'s routes"))?;
        Ok(())
    }

    /// The real lqd on every node: the helper role on the spines (T_sample 2 ms), the
    /// load-balancer on the leaves with `o`, no PFC export; instances `TAG-sI-PID` and
    /// `TAG-lJ-PID`, configurations and logs in `dir`. An error names the node whose lqd
    /// did not start.
    pub fn start_lqd(
        &self,
        lqd: &Path,
        tag: &str,
        o: &LbOptions,
        dir: &Path,
    ) -> Result<(Vec<Daemon>, Vec<Daemon>)> {
        let pid = std::process::id();
        let helpers = (1..=self.spines.len())
            .map(|i| {
                Daemon::start(
                    lqd,
                    &self.spines[i - 1],
                    &format!("{tag}-s{i}-{pid}"),
                    &self.spine_config(i, 2, false),
                    dir,
                )
                .with_context(|| format!("the helper role did not start on S{i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let leaves = (1..=self.leaves.len())
            .map(|j| {
                Daemon::start(
                    lqd,
                    &self.leaves[j - 1],
                    &format!("{tag}-l{j}-{pid}"),
                    &self.leaf_config(j, o, false),
                    dir,
                )
                .with_context(|| format!("the load-balancer did not start on L{j}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((helpers, leaves))
    }

    /// Pins the multipath hash seed of every router (spines and leaves) to `seed`: one
    /// hash draw of the fabric.
    pub fn set_multipath_hash_seed(&self, seed: u32) -> Result<()> {
        for ns in self.spines.iter().chain(&self.leaves) {
            set_multipath_hash_seed(ns, seed)?;
        }
        Ok(())
    }

    /// Changes the shaping rate of spine i's link towards leaf j (both 1-based).
    pub fn set_spine_rate(&self, i: usize, j: usize, rate_mbit: u32) -> Result<()> {
        // A fresh root (`replace` of a tbf keeps a child queue that replaced its own, as
        // `stop_spine_forwarding` does): deleted first when it has such a child.
        let ns = &self.spines[i - 1];
        let dev = format!("l{j}");
        if ns
            .exec("tc", &["qdisc", "show", "dev", &dev])
            .is_ok_and(|s| s.contains("pfifo"))
        {
            ns.exec("tc", &["qdisc", "del", "dev", &dev, "root"])?;
        }
        let s = Shaping {
            rate_mbit,
            ..self.shaping
        };
        self.set_spine_shaping(i, j, s)
    }

    /// Shapes spine `i`'s link to leaf `j` with `s` (bucket and queue too).
    pub fn set_spine_shaping(&self, i: usize, j: usize, s: Shaping) -> Result<()> {
        shape(&self.spines[i - 1], &format!("l{j}"), s)
    }

    /// Spine `i`'s link to leaf `j` stops forwarding while it stays up at its rate, a gray
    /// failure: the root tbf keeps its rate (the link speed the helper reads, Appendix
    /// A.2's `link_speed`) and its queue becomes a pfifo of limit 0, which drops every
    /// packet offered; the drops count as the root qdisc's (A.1's drop counter).
    /// [`Self::set_spine_rate`] repairs it.
    pub fn stop_spine_forwarding(&self, i: usize, j: usize) -> Result<()> {
        let ns = &self.spines[i - 1];
        let dev = format!("l{j}");
        let shown = ns.exec("tc", &["-j", "qdisc", "show", "dev", &dev])?;
        let qdiscs: serde_json::Value = serde_json::from_str(&shown)
            .map_err(|e| anyhow!("tc -j qdisc show dev {dev}: {e}: {shown}"))?;
        let handle = qdiscs
            .as_array()
            .into_iter()
            .flatten()
            .find(|q| q["root"] == true && q["kind"] == "tbf")
            .and_then(|q| q["handle"].as_str())
            .ok_or_else(|| anyhow!("{dev} in {} has no root tbf: {shown}", ns.name()))?;
        ns.exec(
            "tc",
            &[
                "qdisc",
                "replace",
                "dev",
                &dev,
                "parent",
                &format!("{handle}1"),
                "pfifo",
                "limit",
                "0",
            ],
        )?;
        Ok(())
    }
}

/// Removes every process of `ns` (for callers that need it before the namespace goes).
pub fn kill_all_in(ns: &NetNs) {
    if let Ok(out) = run("ip", &["netns", "pids", ns.name()]) {
        for p in out.split_whitespace() {
            let _ = Command::new("kill").args(["-9", p]).status();
        }
    }
}
