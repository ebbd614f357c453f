//! The helper's counter sampler against a real kernel (seed 003 Appendix A, A.1/A.2): a
//! veth pair between two namespaces, a tbf shaper on one end, UDP traffic at twice the
//! shaped rate, and the `Sampler`'s readings checked against what was sent. Everything
//! runs in namespaces this test creates; the root namespace is never touched.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use std::{
    net::UdpSocket,
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use anyhow::{Result, bail, ensure};
use lq_tests::{
    netns::{NetNs, run, veth_pair},
    require_root,
};
use lq_user::sys::sampler::{EcnMarking, LinkConfig, LinkSample, Sampler, SpeedSource, note};

/// UDP payload; the frame on the veth is payload + 8 UDP + 20 IPv4 + 14 Ethernet.
const PAYLOAD: usize = 1400;
const FRAME: u64 = PAYLOAD as u64 + 8 + 20 + 14;
/// Offered load: twice the 100 Mbit/s tbf rate, so the queue fills and tbf drops.
const OFFERED_BPS: f64 = 200e6;
const TRAFFIC: Duration = Duration::from_millis(1000);

fn link(name: &str) -> LinkConfig {
    LinkConfig {
        name: name.into(),
        rate_bps: None,
    }
}

fn one(s: &mut Sampler) -> Result<LinkSample> {
    let mut v = s.sample()?;
    ensure!(v.len() == 1, "one link configured, {} samples", v.len());
    Ok(v.remove(0))
}

/// What the sender and the sampler saw inside namespace A.
struct Run {
    before: LinkSample,
    during: Vec<LinkSample>,
    drained: LinkSample,
    sent: u64,
    send_errors: u64,
}

/// Sends paced UDP datagrams to `dst` for `TRAFFIC`; returns (sent, errors).
fn send_udp(dst: &'static str) -> Result<(u64, u64)> {
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    // A send buffer larger than tbf's queue limit (about 650 kB), so that the qdisc, not
    // the socket, is the bottleneck and tbf has to drop (SO_SNDBUFFORCE: root bypasses
    // net.core.wmem_max, which this test must not change).
    let size: libc::c_int = 8 << 20;
    // SAFETY: valid fd and option value.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&raw const size).cast(),
            4,
        )
    };
    ensure!(
        rc == 0,
        "SO_SNDBUFFORCE: {}",
        std::io::Error::last_os_error()
    );
    sock.connect(dst)?;
    let buf = [0x5au8; PAYLOAD];
    let (mut sent, mut errors) = (0u64, 0u64);
    let start = Instant::now();
    let pps = OFFERED_BPS / 8.0 / FRAME as f64;
    while start.elapsed() < TRAFFIC {
        let due = (start.elapsed().as_secs_f64() * pps) as u64;
        while sent + errors < due {
            match sock.send(&buf) {
                Ok(_) => sent += 1,
                Err(_) => errors += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((sent, errors))
}

#[test]
fn sampler_reads_tbf_shaped_veth() -> Result<()> {
    require_root();
    let a = NetNs::new("lqsa")?;
    let b = NetNs::new("lqsb")?;
    veth_pair(&a, "s0", "10.77.0.1/24", &b, "s1", "10.77.0.2/24")?;
    run(
        "tc",
        &[
            "-n",
            a.name(),
            "qdisc",
            "add",
            "dev",
            "s0",
            "root",
            "tbf",
            "rate",
            "100mbit",
            "burst",
            "32kb",
            "latency",
            "50ms",
        ],
    )?;

    // Namespace A: the shaped end, under twice its rate.
    let r = a.run_in(|| -> Result<Run> {
        let mut s = Sampler::new(vec![link("s0")])?;
        let before = one(&mut s)?;
        let sender = std::thread::spawn(|| send_udp("10.77.0.2:9"));
        let mut during = Vec::new();
        let start = Instant::now();
        let mut next = start;
        while !sender.is_finished() {
            during.push(one(&mut s)?);
            next += Duration::from_millis(2);
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        let (sent, send_errors) = match sender.join() {
            Ok(r) => r?,
            Err(_) => bail!("sender panicked"),
        };
        // tbf's queue holds at most 50 ms at 100 Mbit/s: 300 ms drains it.
        std::thread::sleep(Duration::from_millis(300));
        let drained = one(&mut s)?;
        Ok(Run {
            before,
            during,
            drained,
            sent,
            send_errors,
        })
    })??;

    let b4 = &r.before;
    eprintln!("before: {b4:?}");
    assert_eq!(b4.speed_source, SpeedSource::Qdisc);
    assert_eq!(b4.speed_source.as_str(), "qdisc");
    assert_eq!(b4.raw.link_speed_bps, 100_000_000);
    assert_eq!(b4.qdisc.as_deref(), Some("tbf"));
    assert_eq!(b4.ecn, EcnMarking::CannotMark);
    assert!(b4.notes.contains(&note::CANNOT_MARK));
    assert!(b4.notes.contains(&note::NO_ECN_ELIGIBLE));
    assert!(b4.raw.oper_up);
    // tc: limit = rate x latency + burst = 12.5 MB/s x 50 ms + 32 KiB.
    let limit = 625_000 + 32 * 1024;
    assert!(
        b4.raw.max_buffer_bytes.abs_diff(limit) < 2048,
        "tbf limit {} vs {limit}",
        b4.raw.max_buffer_bytes
    );
    assert!(b4.ifindex.is_some());

    let max_backlog = r.during.iter().map(|s| s.raw.queue_depth_bytes).max();
    let d = &r.drained;
    let drops = d.raw.drops - b4.raw.drops;
    let tx = d.raw.tx_bytes - b4.raw.tx_bytes;
    eprintln!(
        "sent {} datagrams ({} errors), {} samples, max backlog {max_backlog:?} B, drops {drops}, \
         tx {tx} B, drained {d:?}",
        r.sent,
        r.send_errors,
        r.during.len()
    );
    assert!(r.during.len() > 200, "about 500 samples in 1 s");
    assert!(max_backlog.unwrap_or(0) > 100_000, "the queue built up");
    assert!(
        max_backlog.unwrap_or(0) <= b4.raw.max_buffer_bytes + FRAME,
        "backlog within tbf's limit"
    );
    assert!(drops > 0, "tbf dropped under 2x overload");
    // Every datagram is either transmitted or dropped (the queue is empty again); a few
    // hundred bytes of ARP/IPv6 housekeeping are allowed for.
    let expect = (r.sent - drops) * FRAME;
    assert!(
        tx.abs_diff(expect) < expect / 100 + 4096,
        "tx_bytes grew by {tx}, expected {expect} (sent {} - dropped {drops}) x {FRAME}",
        r.sent
    );
    // Transmitted at the shaped rate: about 100 Mbit/s over the traffic (plus the burst).
    let (first, last) = (&r.during[0], &r.during[r.during.len() - 1]);
    let rate = (last.raw.tx_bytes - first.raw.tx_bytes) as f64 * 8e9
        / (last.raw.t_ns - first.raw.t_ns) as f64;
    eprintln!("tx rate while shaped: {:.1} Mbit/s", rate / 1e6);
    assert!((85e6..=115e6).contains(&rate), "tx rate {rate}");
    // Time and counters only move forward.
    for w in r.during.windows(2) {
        assert!(w[1].raw.t_ns > w[0].raw.t_ns);
        assert!(w[1].raw.tx_bytes >= w[0].raw.tx_bytes);
        assert!(w[1].raw.drops >= w[0].raw.drops);
    }
    assert_eq!(d.raw.queue_depth_bytes, 0);

    // Namespace B: the unshaped end (noqueue) reads its speed from ethtool (a veth says
    // 10000 Mbit/s); a configured rate wins over everything; an htb with one root class
    // gives that class's rate.
    let bn = b.name().to_owned();
    let (eth, conf, htb, htb2, missing) = b.run_in(move || -> Result<_> {
        let eth = one(&mut Sampler::new(vec![link("s1")])?)?;
        let conf = one(&mut Sampler::new(vec![LinkConfig {
            name: "s1".into(),
            rate_bps: Some(25_000_000_000),
        }])?)?;
        let tc = |args: &[&str]| {
            let mut full = vec!["-n", bn.as_str()];
            full.extend_from_slice(args);
            run("tc", &full)
        };
        tc(&[
            "qdisc", "add", "dev", "s1", "root", "handle", "1:", "htb", "default", "10",
        ])?;
        tc(&[
            "class", "add", "dev", "s1", "parent", "1:", "classid", "1:10", "htb", "rate", "50mbit",
        ])?;
        let htb = one(&mut Sampler::new(vec![link("s1")])?)?;
        tc(&[
            "class", "add", "dev", "s1", "parent", "1:", "classid", "1:20", "htb", "rate", "20mbit",
        ])?;
        let htb2 = one(&mut Sampler::new(vec![link("s1")])?)?;
        let missing = one(&mut Sampler::new(vec![link("nope0")])?)?;
        // Full link dumps only every 3rd sample, RTM_GETSTATS in between: same readings.
        let mut cheap = Sampler::new(vec![link("s1")])?;
        cheap.set_link_dump_every(3);
        for _ in 0..4 {
            let r = one(&mut cheap)?;
            ensure!(
                r.raw.oper_up && r.raw.tx_bytes >= htb2.raw.tx_bytes,
                "{r:?}"
            );
            ensure!(r.raw.link_speed_bps == 10_000_000_000, "{r:?}");
        }
        Ok((eth, conf, htb, htb2, missing))
    })??;
    eprintln!("noqueue: {eth:?}\nhtb: {htb:?}\nhtb, two roots: {htb2:?}");
    assert_eq!(eth.qdisc.as_deref(), Some("noqueue"));
    assert_eq!(
        (eth.speed_source, eth.raw.link_speed_bps),
        (SpeedSource::Ethtool, 10_000_000_000)
    );
    assert!(eth.notes.contains(&note::NOQUEUE));
    assert_eq!(
        (conf.speed_source, conf.raw.link_speed_bps),
        (SpeedSource::Configured, 25_000_000_000)
    );
    assert_eq!(
        (htb.speed_source, htb.raw.link_speed_bps),
        (SpeedSource::Qdisc, 50_000_000)
    );
    assert!(htb.notes.contains(&note::HTB_ROOT_CLASS));
    assert_eq!(
        (htb2.speed_source, htb2.raw.link_speed_bps),
        (SpeedSource::Ethtool, 10_000_000_000)
    );
    assert!(htb2.notes.contains(&note::HTB_NOT_SIMPLE));
    assert_eq!((missing.ifindex, missing.raw.oper_up), (None, false));

    // Administratively down: IFLA_OPERSTATE is DOWN.
    a.ip(&["link", "set", "s0", "down"])?;
    let down = a.run_in(|| one(&mut Sampler::new(vec![link("s0")])?))??;
    eprintln!("down: {down:?}");
    assert!(!down.raw.oper_up);
    assert_eq!(down.raw.link_speed_bps, 100_000_000);
    Ok(())
}

/// With link notifications (what the helper role does, issue 15 item 3), a sample does the
/// full RTM_GETLINK dump only when a link notification arrived: counters come from
/// RTM_GETSTATS in between, and a link going down or up is seen at the next sample.
#[test]
fn link_notifications_drive_the_full_dump() -> Result<()> {
    require_root();
    let a = NetNs::new("lqsn-a")?;
    let b = NetNs::new("lqsn-b")?;
    veth_pair(&a, "n0", "10.78.0.1/24", &b, "n1", "10.78.0.2/24")?;
    let name = a.name().to_string();
    let (quiet, down, up) = a.run_in(move || -> Result<(u64, bool, bool)> {
        let mut s = Sampler::new(vec![link("n0")])?;
        s.follow_link_notifications()?;
        ensure!(one(&mut s)?.raw.oper_up, "n0 starts up");
        // Quiet: no notification, no full dump beyond the first sample's.
        for _ in 0..20 {
            one(&mut s)?;
            std::thread::sleep(Duration::from_millis(2));
        }
        let quiet = s.notified_dumps;
        // Another process changes the link; the next sample must see it.
        run("ip", &["-n", &name, "link", "set", "n0", "down"])?;
        let down = !one(&mut s)?.raw.oper_up;
        run("ip", &["-n", &name, "link", "set", "n0", "up"])?;
        // veth reports carrier once both ends are up: give the kernel a moment.
        let t0 = Instant::now();
        let mut up = false;
        while t0.elapsed() < Duration::from_secs(2) && !up {
            std::thread::sleep(Duration::from_millis(2));
            up = one(&mut s)?.raw.oper_up;
        }
        ensure!(s.notified_dumps > quiet, "the changes were notified");
        Ok((quiet, down, up))
    })??;
    assert_eq!(quiet, 0, "no full dump was notified while nothing changed");
    assert!(down, "n0 down seen at the next sample");
    assert!(up, "n0 up again");
    Ok(())
}
