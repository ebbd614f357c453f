//! FRR (Debian `frr`: zebra + bgpd) inside a test namespace, one set of daemons per
//! namespace with its own zserv socket, vty folder and pid files (so the daemons of two
//! namespaces never find each other; /work/shared/recipes/frr-netns.md). Stopped on drop.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{netns::NetNs, poll::poll_until};

/// zebra's configuration: no kernel nexthop objects of its own. zebra (FRR 8.4.4 here) takes
/// every kernel nexthop group it learns whose id is above its protocol range (24 193 548,
/// lq's 0x4c0xxxxx ids included) or that a route it imported uses (lq's routes in table 76)
/// as its own: on every replace by another program it sends its first copy back down (for a
/// hash-threshold group that undoes lq's weights; a resilient one the kernel refuses, with
/// an error in zebra's log), and a group lq deleted it re-creates as `proto zebra` under the
/// same id (`zebra_nhg_handle_kernel_state_change`). With this line zebra installs its
/// routes with inline next hops and sends nothing back (docs/operator-guide.md, "Running
/// with FRR").
pub const ZEBRA_CONF: &str = "no zebra nexthop kernel enable\n";

/// zebra and bgpd of one namespace.
pub struct Frr {
    dir: PathBuf,
    netns: String,
}

/// Whether FRR is installed (`cargo xtask setup` installs it).
pub fn available() -> bool {
    std::path::Path::new("/usr/lib/frr/bgpd").exists()
}

impl Frr {
    /// Starts zebra ([`ZEBRA_CONF`]) and bgpd in `ns` with `bgpd_conf` (bgpd's `-M bmp`
    /// module loaded, so a configuration may name BMP targets).
    pub fn start(ns: &NetNs, bgpd_conf: &str) -> Result<Self> {
        Self::start_with_zebra(ns, bgpd_conf, ZEBRA_CONF)
    }

    /// [`Self::start`] with zebra's configuration `zebra_conf` (`""`: FRR's defaults, zebra's
    /// routes through nexthop objects of its own).
    pub fn start_with_zebra(ns: &NetNs, bgpd_conf: &str, zebra_conf: &str) -> Result<Self> {
        if !available() {
            bail!("FRR is not installed: apt-get install -y --no-install-recommends frr");
        }
        let dir = std::env::temp_dir().join(format!("frr-{}", ns.name()));
        std::fs::create_dir_all(&dir)?;
        let me = Self {
            dir: dir.clone(),
            netns: ns.name().to_string(),
        };
        // The daemons drop privileges to user frr: the folder must be writable by it.
        set_mode(&dir, 0o777)?;
        std::fs::write(dir.join("zebra.conf"), zebra_conf)?;
        std::fs::write(dir.join("bgpd.conf"), bgpd_conf)?;
        set_mode(&dir.join("zebra.conf"), 0o666)?;
        set_mode(&dir.join("bgpd.conf"), 0o666)?;
        me.daemon("zebra", &[])?;
        me.daemon("bgpd", &["-M", "bmp"])?;
        Ok(me)
    }

    fn daemon(&self, name: &str, extra: &[&str]) -> Result<()> {
        let d = self.dir.display().to_string();
        let st = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.netns,
                &format!("/usr/lib/frr/{name}"),
            ])
            .args(["-d", "-f", &format!("{d}/{name}.conf")])
            .args(["-i", &format!("{d}/{name}.pid")])
            .args(["-z", &format!("{d}/zserv.api"), "--vty_socket", &d])
            .args(["--log", &format!("file:{d}/{name}.log")])
            .args(extra)
            // Start-up chatter (zebra: "Disabling MPLS support") stays out of the
            // caller's output; the daemons log to their files.
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .with_context(|| format!("start {name}"))?;
        if !st.success() {
            bail!("{name} did not start ({st}): {}", self.log(name));
        }
        // zebra must listen before bgpd connects.
        if name == "zebra" {
            poll_until(
                "zebra to open its zserv socket",
                Duration::from_secs(10),
                Duration::from_millis(20),
                || self.dir.join("zserv.api").exists().then_some(()).ok_or(()),
                |()| self.log("zebra"),
            )?;
        }
        Ok(())
    }

    /// A daemon's log.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Runs `vtysh -c CMD` (several commands in sequence, e.g. configure, router bgp ...).
    pub fn vtysh(&self, cmds: &[&str]) -> Result<String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, "vtysh", "--vty_socket"]);
        c.arg(&self.dir);
        for cmd in cmds {
            c.args(["-c", cmd]);
        }
        let out = c.output().context("vtysh")?;
        if !out.status.success() {
            bail!(
                "vtysh {cmds:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `show bgp summary json`: how many sessions are Established.
    pub fn established(&self) -> usize {
        let Ok(s) = self.vtysh(&["show bgp ipv4 unicast summary json"]) else {
            return 0;
        };
        let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_default();
        v["peers"].as_object().map_or(0, |p| {
            p.values().filter(|p| p["state"] == "Established").count()
        })
    }

    fn pids(&self) -> Vec<i32> {
        ["bgpd", "zebra"]
            .iter()
            .filter_map(|n| std::fs::read_to_string(self.dir.join(format!("{n}.pid"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect()
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: kill on the daemons this harness started (their pid files).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && self
                .pids()
                .iter()
                .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn set_mode(p: &std::path::Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", p.display()))
}

/// An eBGP speaker per RFC 7938 (one AS per node, multipath across neighbor ASes on),
/// keepalive 1 s and hold time 3 s.
pub fn bgpd_conf(
    asn: u32,
    router_id: &str,
    neighbors: &[(&str, u32)],
    networks: &[&str],
) -> String {
    bgpd_conf_timers(asn, router_id, neighbors, networks, (1, 3))
}

/// [`bgpd_conf`] with `timers bgp KEEPALIVE HOLD` (seconds): the demo's sessions share
/// links its traffic congests, and a 3 s hold time there would end sessions that a
/// router's control-plane protection keeps alive.
pub fn bgpd_conf_timers(
    asn: u32,
    router_id: &str,
    neighbors: &[(&str, u32)],
    networks: &[&str],
    (keepalive, hold): (u32, u32),
) -> String {
    let mut c = format!(
        "router bgp {asn}\n bgp router-id {router_id}\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n timers bgp {keepalive} {hold}\n"
    );
    for (addr, remote) in neighbors {
        c.push_str(&format!(
            " neighbor {addr} remote-as {remote}\n neighbor {addr} timers connect 1\n neighbor {addr} advertisement-interval 0\n"
        ));
    }
    c.push_str(" address-family ipv4 unicast\n  maximum-paths 64\n");
    for n in networks {
        c.push_str(&format!("  network {n}\n"));
    }
    c.push_str(" exit-address-family\n");
    c
}

/// A spine's BGP Link Bandwidth (RFC 10005; FARE's capacity, seed 003 section 4.1) on what
/// it advertises to its leaves, as FRR's UCMP uses it
/// (shared/recipes/frr-ucmp-link-bandwidth.md): `bgpd_conf` with an outbound route-map
/// `LBW` on every neighbor whose entry k (sequence 10 k) sets `set extcommunity bandwidth
/// MBIT` on leaf k's prefix (`prefixes[k - 1]`, MBIT `mbit[k - 1]`: the spine's link to that
/// leaf), the rest passing unchanged. [`link_bandwidth_change`] changes one entry at run
/// time.
pub fn with_link_bandwidth(
    bgpd_conf: &str,
    neighbors: &[&str],
    prefixes: &[String],
    mbit: &[u32],
) -> String {
    let mut af = String::new();
    for n in neighbors {
        af.push_str(&format!("  neighbor {n} route-map LBW out\n"));
    }
    let mut c = bgpd_conf.replacen(
        " exit-address-family\n",
        &format!("{af} exit-address-family\n"),
        1,
    );
    c.push_str("exit\n");
    for (k, (p, m)) in prefixes.iter().zip(mbit).enumerate() {
        let k = k + 1;
        c.push_str(&format!(
            "ip prefix-list LEAF{k} seq 5 permit {p}\nroute-map LBW permit {}\n match ip address prefix-list LEAF{k}\n set extcommunity bandwidth {m}\nexit\n",
            10 * k
        ));
    }
    c.push_str("route-map LBW permit 1000\nexit\n");
    c
}

/// The vtysh commands that set entry `k` (1-based leaf) of [`with_link_bandwidth`]'s
/// route-map to `mbit` and re-advertise at once (`clear bgp ... soft out`; without it FRR
/// applies a route-map change after its route-map delay timer).
pub fn link_bandwidth_change(k: usize, mbit: u32) -> Vec<String> {
    vec![
        "configure terminal".into(),
        format!("route-map LBW permit {}", 10 * k),
        format!("set extcommunity bandwidth {mbit}"),
        "end".into(),
        "clear bgp ipv4 unicast * soft out".into(),
    ]
}

/// The lines that make bgpd (started with `-M bmp`, as [`Frr::start`] does) a BMP client
/// of lqd's station (`[slow-plane.bmp]`): post-policy Adj-RIB-In of IPv4 unicast, retried
/// every 100 ms to 1 s until lqd listens. Appended to [`bgpd_conf`]'s output (still inside
/// `router bgp`).
pub fn bmp_target(addr: &str, port: u16) -> String {
    format!(
        " bmp targets lq\n  bmp connect {addr} port {port} min-retry 100 max-retry 1000\n  bmp monitor ipv4 unicast post-policy\n exit\n"
    )
}

/// `ip -j ARGS` in `ns`, parsed (`Null` when ip fails or prints no JSON).
pub fn ip_json(ns: &NetNs, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["-j"];
    a.extend_from_slice(args);
    ns.ip(&a)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Member ids of a nexthop object (itself when not a group; none when absent).
pub fn nexthop_members(ns: &NetNs, id: u64) -> Vec<u64> {
    let v = ip_json(ns, &["nexthop", "show", "id", &id.to_string()]);
    let nh = &v[0];
    match nh["group"].as_array() {
        Some(g) => g.iter().filter_map(|m| m["id"].as_u64()).collect(),
        None if nh.is_object() => vec![id],
        None => vec![],
    }
}

/// How many next hops BGP's route to `prefix` has in the main table (zebra installs it
/// pointing at a nexthop group of its own, or with the next hops inline).
pub fn bgp_paths(ns: &NetNs, prefix: &str) -> usize {
    let v = ip_json(ns, &["route", "show", prefix, "proto", "bgp"]);
    if let Some(id) = v[0]["nhid"].as_u64() {
        return nexthop_members(ns, id).len();
    }
    v[0]["nexthops"]
        .as_array()
        .map_or(usize::from(v[0].is_object()), Vec::len)
}
