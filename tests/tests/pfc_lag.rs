//! Seed 000: "An exporter MUST NOT use an aggregate Link Aggregation Group counter". lqd
//! refuses a bond or team in `[pfc] interfaces` and `[[pfc.ethtool]]`, naming the members
//! (issue 14 item 4).
//!
//! The detection asks the kernel in the daemon's namespace (RTM_GETLINK: IFLA_INFO_KIND and
//! IFLA_MASTER). The member discovery is checked here on the real kernel with a bridge
//! (the same IFLA_MASTER relation as a bond's ports; a bridge itself is not a LAG and is
//! not refused). When the kernel has the bonding driver, the daemon is started on a real
//! bond and must refuse it; this test machine's kernel has neither bonding nor team
//! (`ip link add b0 type bond`: "Unknown device type"), so that part reports itself
//! skipped there, and the refusal is covered by the unit tests of `lq_user::sys::lag`.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

use lq_tests::{
    daemon::Lqd,
    netns::{NetNs, veth_pair},
    require_root,
};
use lq_user::sys::lag;

#[test]
fn members_of_a_master_are_found_in_the_daemons_namespace() {
    require_root();
    let a = NetNs::new("lqt-laga").unwrap();
    let b = NetNs::new("lqt-lagb").unwrap();
    veth_pair(&a, "a0", "10.9.0.1/24", &b, "b0", "10.9.0.2/24").unwrap();
    veth_pair(&a, "a1", "10.9.1.1/24", &b, "b1", "10.9.1.2/24").unwrap();
    a.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    for m in ["a1", "a0"] {
        a.ip(&["link", "set", m, "master", "br0"]).unwrap();
    }
    let (links, br0, member, veth_driver) = a
        .run_in(|| {
            (
                lag::links().unwrap(),
                lag::refuse_aggregate("br0"),
                lag::refuse_aggregate("a0"),
                lq_user::sys::bpf::pfc::driver_name("a0").ok(),
            )
        })
        .unwrap();
    // Only this namespace's links: never the root namespace's (the daemon runs with
    // --netns, where sysfs would still show the root namespace).
    let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| !n.starts_with("lo")).count(),
        3,
        "{names:?}"
    );
    let bridge = lag::aggregate_of(&links, "br0", None, &["bridge"]).unwrap();
    assert_eq!(bridge.members, ["a0", "a1"]);
    assert_eq!(veth_driver.as_deref(), Some("veth"));
    assert_eq!(br0, Ok(()), "a bridge is not a LAG");
    assert_eq!(member, Ok(()));
}

#[test]
fn the_daemon_refuses_a_bond_and_names_its_members() {
    require_root();
    let a = NetNs::new("lqt-bonda").unwrap();
    let b = NetNs::new("lqt-bondb").unwrap();
    veth_pair(&a, "a0", "10.9.0.1/24", &b, "b0", "10.9.0.2/24").unwrap();
    veth_pair(&a, "a1", "10.9.1.1/24", &b, "b1", "10.9.1.2/24").unwrap();
    // The load-balancer role's receiver gets a link of its own, outside the bond.
    veth_pair(&a, "a2", "10.9.2.1/24", &b, "b2", "10.9.2.2/24").unwrap();
    if let Err(e) = a.ip(&["link", "add", "bond0", "type", "bond"]) {
        eprintln!("SKIPPED: this kernel cannot create a bond ({e:#}); see lq_user::sys::lag tests");
        return;
    }
    for m in ["a0", "a1"] {
        a.ip(&["link", "set", m, "down"]).unwrap();
        a.ip(&["link", "set", m, "master", "bond0"]).unwrap();
    }
    let base = "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n\n[receiver]\ninterfaces = [\"a2\"]\n\n";
    for (section, cfg) in [
        ("[pfc] interfaces", "[pfc]\ninterfaces = [\"bond0\"]\n"),
        (
            "[[pfc.ethtool]] interface",
            "[[pfc.ethtool]]\ninterface = \"bond0\"\ndirection = \"transmitted\"\npreset = \"mlx5\"\n",
        ),
    ] {
        let err = match Lqd::start(&a, &format!("{base}{cfg}")) {
            Ok(lqd) => panic!("lqd accepted a bond in {section}:\n{}", lqd.log_text()),
            Err(e) => format!("{e:#}"),
        };
        assert!(
            err.contains(&format!("{section} names an aggregate interface"))
                && err.contains("bond0 is a LAG (bond) with members a0, a1"),
            "{err}"
        );
    }
}
