//! The fabric builder end to end, short enough for CI: a 3-stage CLOS of 4 spines and 2
//! leaves with hosts, tbf-shaped veths, `lq_clear_hash` on the leaves' host ports, `lqd`
//! load-balancers on the leaves; TCP from H1 to H2 crosses the fabric, and the leaf's
//! resilient group for H2's prefix follows the spines' advertisements (a congested
//! S2->L2 link loses weight). Spines run the real helper role when it starts, else test
//! senders advertise scripted values.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    time::{Duration, Instant},
};

use lq_tests::{
    daemon::{Sender, lqd_bin},
    fabric::{Clos3, Daemon, LbOptions, Shaping, enter_netns, group_members, route_group},
    packet::{entry, header},
    require_root,
};

/// Scripted spines: every 20 ms each spine advertises its links to both leaves; S2's link
/// to L2 has the LQS in `s2_l2`.
fn scripted_spines(
    fab: &Clos3,
    s2_l2: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (1..=fab.spines.len())
        .map(|i| {
            let ns = fab.spines[i - 1].name().to_string();
            let (q, stop) = (s2_l2.clone(), stop.clone());
            std::thread::spawn(move || {
                enter_netns(&ns).unwrap();
                let mut senders: Vec<Sender> = (1..=2)
                    .map(|j| {
                        Sender::bind(SocketAddr::new(Clos3::spine_addr(i, j).into(), 0), 255)
                            .unwrap()
                    })
                    .collect();
                let mut seq = 7u16;
                while !stop.load(Ordering::Relaxed) {
                    seq = seq.wrapping_add(1);
                    let l2 = if i == 2 {
                        q.load(Ordering::Relaxed)
                    } else {
                        237
                    };
                    let entries = [
                        entry(u32::from(Clos3::leaf_id(1)), 1, 237, 0),
                        entry(
                            u32::from(Clos3::leaf_id(2)),
                            2,
                            l2,
                            if l2 < 100 { 3 } else { 0 },
                        ),
                    ];
                    for (j, s) in senders.iter_mut().enumerate() {
                        let to = SocketAddr::new(Clos3::leaf_addr(i, j + 1).into(), 52525);
                        let _ = s.send(to, &header(u32::from(Clos3::spine_id(i)), seq), &entries);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect()
}

fn wait_weights(fab: &Clos3, group: u64, want: &[(u64, u64)], what: &str) {
    let start = Instant::now();
    loop {
        let got = group_members(&fab.leaves[0], group);
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: L1's group {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn clos3_carries_tcp_and_reweights_on_remote_congestion() {
    require_root();
    let fab = Clos3::build(4, 2, Shaping::at(100), true).unwrap();
    let lqd = lqd_bin().unwrap();
    let dir = std::env::temp_dir().join(lq_tests::unique_name("lqf-test"));
    let o = LbOptions::default();
    let pid = std::process::id();

    // Spines: the real helper if it runs, scripted senders otherwise.
    let helper: Vec<Daemon> = (1..=4)
        .map_while(|i| {
            Daemon::start(
                &lqd,
                &fab.spines[i - 1],
                &format!("lqft-s{i}-{pid}"),
                &fab.spine_config(i, 2, false),
                &dir,
            )
            .ok()
        })
        .collect();
    let real_helper = helper.len() == 4;
    drop(if real_helper { Vec::new() } else { helper });
    let s2_l2 = Arc::new(AtomicU8::new(237));
    let stop = Arc::new(AtomicBool::new(false));
    let scripted = if real_helper {
        Vec::new()
    } else {
        eprintln!("helper role unavailable: scripted spines");
        scripted_spines(&fab, s2_l2.clone(), stop.clone())
    };
    let _leaves: Vec<Daemon> = (1..=2)
        .map(|j| {
            Daemon::start(
                &lqd,
                &fab.leaves[j - 1],
                &format!("lqft-l{j}-{pid}"),
                &fab.leaf_config(j, &o, false),
                &dir,
            )
            .unwrap()
        })
        .collect();

    let prefix = Clos3::host_prefix(2);
    let start = Instant::now();
    let group = loop {
        if let Some(g) = route_group(&fab.leaves[0], &prefix) {
            break g;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no route to {prefix} on L1"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let equal = [(1, 255), (2, 255), (3, 255), (4, 255)];
    wait_weights(&fab, group, &equal, "steady state");

    // TCP across the fabric (H1 -> L1 -> Si -> L2 -> H2), 4 MiB.
    let h2 = fab.hosts[1].name().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        enter_netns(&h2).unwrap();
        let l = TcpListener::bind((Clos3::host_addr(2), 5201)).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut n = 0usize;
        let mut b = vec![0u8; 65536];
        loop {
            match c.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        n
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let h1 = fab.hosts[0].name().to_string();
    std::thread::spawn(move || {
        enter_netns(&h1).unwrap();
        let mut c = TcpStream::connect((Clos3::host_addr(2), 5201)).unwrap();
        c.write_all(&vec![1u8; 4 << 20]).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(server.join().unwrap(), 4 << 20);
    // The hash clearer was loaded and attached (tcx) on every leaf's host port.
    assert!(fab.hash_clear.is_some());

    if !real_helper {
        // Appendix B: S2->L2 at LQS 72 -> weights 255/77/255/255.
        s2_l2.store(72, Ordering::Relaxed);
        wait_weights(
            &fab,
            group,
            &[(1, 255), (2, 77), (3, 255), (4, 255)],
            "S2->L2 congested",
        );
        s2_l2.store(237, Ordering::Relaxed);
        wait_weights(&fab, group, &equal, "S2->L2 recovered");
    }
    stop.store(true, Ordering::Relaxed);
    for t in scripted {
        t.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
