//! Link Aggregation Group detection. Seed 000: "For a physical interface that belongs to a
//! Link Aggregation Group, the record MUST identify that member interface. An exporter
//! MUST NOT use an aggregate Link Aggregation Group counter for this record." PFC acts per
//! physical link; a bond or team device sees the members' frames only after the members
//! (and for PFC frames, which a member's MAC consumes, often not at all), and its counters
//! mix links. So `[pfc] interfaces` and `[[pfc.ethtool]]` refuse an aggregate, naming its
//! members, which are what to configure.
//!
//! An interface is an aggregate when the kernel says so, asked in the calling thread's
//! network namespace (sysfs would show the namespace it was mounted in, not the one
//! `lqd run --netns` entered):
//! * its rtnetlink link kind (`IFLA_INFO_KIND`, what `ip -d link` prints) is `bond` or
//!   `team`, or
//! * its driver (`ETHTOOL_GDRVINFO`, what `ethtool -i` prints) is `bonding` or `team`.
//!
//! Its members are the links whose `IFLA_MASTER` is the aggregate.

use std::io;

use netlink_packet_route::link::LinkMessage;

use crate::sys::netlink::wire::{self, RouteSocket};

/// The link kinds that aggregate physical links.
pub const AGGREGATE_KINDS: [&str; 2] = ["bond", "team"];

/// An aggregate interface and its members.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{iface} is a LAG ({kind}) with members {}: configure the members; an aggregate's counter mixes links (seed 000: a record identifies the member interface)",
    member_list(.members)
)]
pub struct Aggregate {
    /// The aggregate interface.
    pub iface: String,
    /// "bond" or "team".
    pub kind: String,
    /// Its member interfaces, sorted.
    pub members: Vec<String>,
}

fn member_list(members: &[String]) -> String {
    if members.is_empty() {
        "(none enslaved now)".into()
    } else {
        members.join(", ")
    }
}

/// One link of an RTM_GETLINK dump: what LAG detection needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// IFLA_IFNAME.
    pub name: String,
    /// IFLA_MASTER: the ifindex of the bond, team, bridge or VRF it is enslaved to.
    pub master: Option<u32>,
    /// IFLA_LINKINFO / IFLA_INFO_KIND ("bond", "team", "veth", "bridge", ...).
    pub kind: Option<String>,
}

/// Whether `iface` is an aggregate of one of `kinds` in `links`; `driver` (its ethtool
/// driver name, when known) is a second opinion for a link whose kind is not reported.
pub fn aggregate_of(
    links: &[Link],
    iface: &str,
    driver: Option<&str>,
    kinds: &[&str],
) -> Option<Aggregate> {
    let link = links.iter().find(|l| l.name == iface);
    let kind = match (link.and_then(|l| l.kind.as_deref()), driver) {
        (Some(k), _) if kinds.contains(&k) => k.to_owned(),
        (_, Some("bonding")) if kinds.contains(&"bond") => "bond".to_owned(),
        (_, Some("team")) if kinds.contains(&"team") => "team".to_owned(),
        _ => return None,
    };
    let mut members: Vec<String> = link
        .map(|agg| {
            links
                .iter()
                .filter(|l| l.master == Some(agg.index))
                .map(|l| l.name.clone())
                .collect()
        })
        .unwrap_or_default();
    members.sort();
    Some(Aggregate {
        iface: iface.to_owned(),
        kind,
        members,
    })
}

/// Refuses `iface` when it is a bond or team in the calling thread's network namespace.
/// When the link dump fails, the driver name alone decides (members then unlisted).
pub fn refuse_aggregate(iface: &str) -> Result<(), Aggregate> {
    let driver = super::netdev::driver_name(iface).ok();
    let links = match links() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, %iface, "RTM_GETLINK dump failed; LAG check by driver name only");
            Vec::new()
        }
    };
    match aggregate_of(&links, iface, driver.as_deref(), &AGGREGATE_KINDS) {
        Some(a) => Err(a),
        None => Ok(()),
    }
}

const IFINFOMSG_LEN: usize = 16;
const IFLA_IFNAME: u16 = libc::IFLA_IFNAME;
const IFLA_MASTER: u16 = libc::IFLA_MASTER;
const IFLA_LINKINFO: u16 = libc::IFLA_LINKINFO;
const IFLA_INFO_KIND: u16 = libc::IFLA_INFO_KIND;

/// The (type, payload) attributes of a netlink attribute stream (the shared iterator);
/// stops at the first malformed one.
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    wire::attrs(b).map_while(Result::ok)
}

fn c_string(p: &[u8]) -> String {
    let end = p.iter().position(|c| *c == 0).unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

/// Decodes the payload of an RTM_NEWLINK message (`struct ifinfomsg` and attributes).
/// Lenient on purpose (a malformed attribute ends the attributes, the link stays): LAG
/// detection wants the names and masters of every link it can read.
pub fn parse_link(payload: &[u8]) -> Option<Link> {
    let index = u32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let mut l = Link {
        index,
        ..Link::default()
    };
    for (ty, p) in attrs(payload.get(IFINFOMSG_LEN..)?) {
        match ty {
            IFLA_IFNAME => l.name = c_string(p),
            IFLA_MASTER => {
                l.master = p
                    .get(..4)
                    .map(|m| u32::from_ne_bytes([m[0], m[1], m[2], m[3]]))
                    .filter(|m| *m != 0)
            }
            IFLA_LINKINFO => {
                l.kind = attrs(p)
                    .find(|(t, _)| *t == IFLA_INFO_KIND)
                    .map(|(_, k)| c_string(k));
            }
            _ => {}
        }
    }
    Some(l)
}

/// The links of the calling thread's network namespace (one RTM_GETLINK dump, the request
/// a `netlink-packet-route` [`LinkMessage`] for every family; a reply that does not come
/// within 2 s is an error, never a hang).
pub fn links() -> io::Result<Vec<Link>> {
    let sock = RouteSocket::open()?;
    socket2::SockRef::from(&sock).set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
    let seq = 1u32;
    sock.send(&wire::message(
        libc::RTM_GETLINK,
        wire::NLM_F_REQUEST | wire::NLM_F_DUMP,
        seq,
        &LinkMessage::default(),
    ))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = sock.recv(&mut buf)?;
        for f in wire::frames(&buf[..n]) {
            let f = f.map_err(|_| io::Error::other("malformed netlink message"))?;
            match f.ty {
                wire::NLMSG_DONE => return Ok(out),
                wire::NLMSG_ERROR => {
                    let errno = f.error_code().unwrap_or(0).saturating_neg();
                    return Err(io::Error::from_raw_os_error(errno));
                }
                libc::RTM_NEWLINK => out.extend(parse_link(f.payload)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, name: &str, master: Option<u32>, kind: Option<&str>) -> Link {
        Link {
            index,
            name: name.into(),
            master,
            kind: kind.map(str::to_owned),
        }
    }

    #[test]
    fn bonds_and_teams_are_refused_with_their_members() {
        let links = [
            link(1, "lo", None, None),
            link(2, "eth2", Some(5), None),
            link(3, "eth1", Some(5), None),
            link(4, "eth3", Some(6), None),
            link(5, "bond0", None, Some("bond")),
            link(6, "team0", None, Some("team")),
            link(7, "br0", None, Some("bridge")),
            link(8, "veth1", Some(7), Some("veth")),
            link(9, "bond1", None, Some("bond")),
        ];
        let k = &AGGREGATE_KINDS;
        let bond = aggregate_of(&links, "bond0", Some("bonding"), k).unwrap();
        assert_eq!(bond.members, ["eth1", "eth2"]);
        assert_eq!(
            bond.to_string().split(':').next().unwrap(),
            "bond0 is a LAG (bond) with members eth1, eth2"
        );
        let team = aggregate_of(&links, "team0", None, k).unwrap();
        assert_eq!(
            (team.kind.as_str(), team.members),
            ("team", vec!["eth3".to_owned()])
        );
        // Members, plain NICs, veths and bridges are not aggregates.
        for name in ["eth1", "lo", "veth1", "br0", "missing"] {
            assert_eq!(
                aggregate_of(&links, name, Some("mlx5_core"), k),
                None,
                "{name}"
            );
        }
        // An empty bond is refused too; the driver name alone also tells a bond.
        assert!(
            aggregate_of(&links, "bond1", None, k)
                .unwrap()
                .to_string()
                .contains("(none enslaved now)")
        );
        assert_eq!(
            aggregate_of(&[link(3, "bond9", None, None)], "bond9", Some("bonding"), k)
                .unwrap()
                .kind,
            "bond"
        );
    }

    #[test]
    fn parses_an_rtm_newlink_payload() {
        let mut p = vec![0u8; 16];
        p[4..8].copy_from_slice(&12u32.to_ne_bytes());
        let attr = |ty: u16, v: &[u8]| {
            let mut a = ((4 + v.len()) as u16).to_ne_bytes().to_vec();
            a.extend(ty.to_ne_bytes());
            a.extend(v);
            a.resize(a.len().next_multiple_of(4), 0);
            a
        };
        p.extend(attr(IFLA_IFNAME, b"bond0\0"));
        p.extend(attr(IFLA_MASTER, &0u32.to_ne_bytes()));
        // IFLA_LINKINFO, nested (NLA_F_NESTED set), holding IFLA_INFO_KIND "bond".
        p.extend(attr(
            IFLA_LINKINFO | 0x8000,
            &attr(IFLA_INFO_KIND, b"bond\0"),
        ));
        assert_eq!(
            parse_link(&p),
            Some(Link {
                index: 12,
                name: "bond0".into(),
                master: None,
                kind: Some("bond".into())
            })
        );
        // Truncated: no link; a malformed attribute ends the attributes.
        assert_eq!(parse_link(&p[..8]), None);
        let mut bad = p[..16].to_vec();
        bad.extend([200, 0, 3, 0]);
        assert_eq!(parse_link(&bad).unwrap().name, "");
    }

    /// The real kernel (in this thread's namespace): the dump lists loopback with index 1.
    #[test]
    fn dumps_the_links_of_this_namespace() {
        let links = links().unwrap();
        assert!(
            links.iter().any(|l| l.name == "lo" && l.index == 1),
            "{links:?}"
        );
        assert_eq!(refuse_aggregate("lo"), Ok(()));
    }
}
