//! The slow plane (seed 003 section 4.1): "A path is eligible for forwarding only if
//! permitted by the slow plane (BGP route installed) AND confirmed healthy by the fast
//! plane (LQS > 0)".
//!
//! [`SlowPlane`] is the deterministic core: fed typed route and nexthop events (a kernel
//! dump, then RTNLGRP_IPV4_ROUTE / IPV6_ROUTE / NEXTHOP notifications; see
//! [`crate::sys::netlink::route_monitor`]),
//! it keeps the routes of the followed protocols (`bgp` by default) and answers which
//! destinations lq steers and which uplinks are eligible for each: the next hops of the
//! best such route, resolved through zebra's nexthop objects where the route points at one,
//! and never more. A route with a next hop that is not an lq uplink is left to the routing
//! daemon alone. No time and no I/O here.
//!
//! The NNH mapping of those destinations (section 6.1) comes from covering rules of the
//! configuration (`[[slow-plane.map]]`), else from BGP itself: the origin AS a BMP station
//! learned for the prefix ([`crate::core::bmp`], RFC 7938: one AS per leaf), which names
//! the remote node of that AS among the AS-qualified LQ entries. A destination without
//! either falls back to local-only quality, as section 6.1 prescribes.
//!
//! The same BMP feed carries the slow plane's capacity (section 4.1: "Slow Plane
//! (BGP/FARE): ... static capacity"): the BGP Link Bandwidth community of a prefix's route
//! through each next hop, which [`SlowPlane::bgp_capacities`] turns into the capacity of
//! the path to the prefix's remote node through that next hop's uplink.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

pub use crate::sys::netlink::route::{Hop, Message, RouteEvent, RouteMsg};
use crate::{
    core::controller::path_quality::{Capacity, CapacitySource, NodeId, Prefix, UplinkId},
    sys::netlink::nexthop::{NexthopMsg, RTPROT_LQ},
};

/// The main routing table, where zebra installs BGP's routes.
pub const RT_TABLE_MAIN: u32 = 254;

/// One lq uplink as the kernel names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UplinkPort {
    /// lq's uplink id.
    pub id: UplinkId,
    /// Its interface's ifindex.
    pub oif: u32,
    /// The spine's address on it.
    pub gateway: IpAddr,
}

/// A covering rule `prefix -> remote node` (section 6.1, provisioned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapRule {
    /// Covering prefix.
    pub prefix: Prefix,
    /// The remote leaf.
    pub remote: NodeId,
}

/// What the core follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Route protocols followed (RTPROT_BGP = 186 ...).
    pub protocols: BTreeSet<u8>,
    /// The table the followed routes live in (main).
    pub source_table: u32,
    /// lq's own table, where its steered copies live.
    pub lq_table: u32,
    /// lq's uplinks.
    pub uplinks: Vec<UplinkPort>,
    /// Covering rules, any order.
    pub rules: Vec<MapRule>,
}

/// Counters of the core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Routes of followed protocols seen (adds and replaces).
    pub route_updates: u64,
    /// Route withdrawals of followed protocols seen.
    pub route_withdrawals: u64,
    /// Followed routes left to the routing daemon: a next hop that is no lq uplink.
    pub foreign_next_hops: u64,
    /// Resynchronisations after lost notifications.
    pub resets: u64,
}

/// The slow plane's state: followed routes, nexthop objects, lq's own routes.
#[derive(Clone, Debug)]
pub struct SlowPlane {
    settings: Settings,
    /// Followed routes by (prefix, metric): the kernel's key within one table.
    routes: BTreeMap<(Prefix, u32), RouteMsg>,
    /// Every nexthop object by id (zebra's, lq's and others').
    nexthops: BTreeMap<u32, NexthopMsg>,
    /// lq's routes in its own table: prefix -> nexthop id (for adoption after a restart).
    lq_routes: BTreeMap<Prefix, Option<u32>>,
    /// What the BMP station learned last (`[slow-plane.bmp]`).
    bmp: Option<Arc<crate::core::bmp::Snapshot>>,
    /// Counters.
    pub counters: Counters,
}

/// Where a destination's NNH mapping comes from (section 6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappingSource {
    /// A covering rule of the configuration: the remote node itself.
    Rule(NodeId),
    /// The origin AS BGP reports for the prefix (BMP): a remote node once an AS-qualified
    /// LQ entry of that AS is received.
    OriginAs(u32),
    /// Neither: local-only quality.
    None,
}

fn route_prefix(r: &RouteMsg) -> Option<Prefix> {
    let addr = match (r.dst, r.family as i32) {
        (Some(a), _) => a,
        (None, libc::AF_INET) => IpAddr::from([0u8; 4]),
        (None, libc::AF_INET6) => IpAddr::from([0u8; 16]),
        _ => return None,
    };
    Some(Prefix {
        addr,
        len: r.dst_len,
    })
}

fn covers(rule: &Prefix, p: &Prefix) -> bool {
    if rule.len > p.len {
        return false;
    }
    match (rule.addr, p.addr) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(rule.len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(rule.len))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

impl Settings {
    /// The core's settings from `[slow-plane]`, with the uplinks' ifindexes looked up by
    /// the caller.
    pub fn from_config(sp: &crate::config::SlowPlaneSection, uplinks: Vec<UplinkPort>) -> Self {
        Self {
            protocols: sp
                .protocols
                .iter()
                .filter_map(|p| crate::config::protocol_number(p))
                .collect(),
            source_table: RT_TABLE_MAIN,
            lq_table: sp.table,
            uplinks,
            rules: sp
                .map
                .iter()
                .filter_map(|d| {
                    d.remote_node.map(|r| MapRule {
                        prefix: d.prefix.0,
                        remote: crate::core::controller::path_quality::node(d.remote_as, r.0),
                    })
                })
                .collect(),
        }
    }
}

impl SlowPlane {
    /// An empty state.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            routes: BTreeMap::new(),
            nexthops: BTreeMap::new(),
            lq_routes: BTreeMap::new(),
            bmp: None,
            counters: Counters::default(),
        }
    }

    /// Takes the BMP station's latest snapshot. Returns whether the learned origins or
    /// Link Bandwidths changed (then the mapping and capacities are worth recomputing).
    pub fn set_bmp(&mut self, snapshot: Arc<crate::core::bmp::Snapshot>) -> bool {
        let changed = self.bmp.as_ref().is_none_or(|old| {
            !Arc::ptr_eq(&old.origins, &snapshot.origins)
                || !Arc::ptr_eq(&old.bandwidths, &snapshot.bandwidths)
        });
        self.bmp = Some(snapshot);
        changed
    }

    /// The slow plane's capacity of each path `(remote node, uplink)` (section 4.1) from
    /// the BGP Link Bandwidth communities learned over BMP: a prefix's route through next
    /// hop G is the path to the prefix's remote node (`remote_of`, the NNH mapping in
    /// force) through the uplink whose gateway is G. Several prefixes of one remote node
    /// through one uplink take the smallest bandwidth (the path carries them all). A next
    /// hop that is no uplink's gateway, or a prefix without a remote node, gives nothing.
    pub fn bgp_capacities(
        &self,
        remote_of: impl Fn(&Prefix) -> Option<NodeId>,
    ) -> BTreeMap<(NodeId, UplinkId), Capacity> {
        let mut out: BTreeMap<(NodeId, UplinkId), Capacity> = BTreeMap::new();
        let Some(bmp) = self.bmp.as_ref() else {
            return out;
        };
        for ((prefix, next_hop), gbps) in bmp.bandwidths.iter() {
            let Some(remote) = remote_of(prefix) else {
                continue;
            };
            let Some(cap) = Capacity::new(*gbps, CapacitySource::Bgp) else {
                continue;
            };
            for u in self
                .settings
                .uplinks
                .iter()
                .filter(|u| u.gateway == *next_hop)
            {
                out.entry((remote, u.id))
                    .and_modify(|c| {
                        if cap.gbps < c.gbps {
                            *c = cap;
                        }
                    })
                    .or_insert(cap);
            }
        }
        out
    }

    /// The BMP station's latest snapshot, if it runs.
    pub fn bmp(&self) -> Option<&crate::core::bmp::Snapshot> {
        self.bmp.as_deref()
    }

    /// Where the mapping of `prefix` comes from: a covering rule wins over BGP's origin AS
    /// (the operator's word over what is learned).
    pub fn mapping_of(&self, prefix: &Prefix) -> MappingSource {
        if let Some(r) = self.remote_of(prefix) {
            return MappingSource::Rule(r);
        }
        match self.bmp.as_ref().and_then(|b| b.origins.get(prefix)) {
            Some(a) => MappingSource::OriginAs(*a),
            None => MappingSource::None,
        }
    }

    /// The remote node of `prefix` given the remote nodes of the LQ entries received
    /// (`remotes`): the rule's, else the one remote of the prefix's origin AS.
    pub fn remote_for(&self, prefix: &Prefix, remotes: &BTreeSet<NodeId>) -> Option<NodeId> {
        match self.mapping_of(prefix) {
            MappingSource::Rule(r) => Some(r),
            MappingSource::OriginAs(a) => crate::core::bmp::remote_of_origin(a, remotes),
            MappingSource::None => None,
        }
    }

    /// [`Self::remote_for`] against the remote nodes of live entries first, then of all
    /// entries: path slots are never freed, so the entries of a leaf's old Router-ID
    /// (renumbered, replaced) stay in the table and would make its AS ambiguous, or name
    /// the old leaf; a leaf silent for a while (only aged entries) keeps its mapping.
    pub fn remote_for_entries(
        &self,
        prefix: &Prefix,
        live: &BTreeSet<NodeId>,
        all: &BTreeSet<NodeId>,
    ) -> Option<NodeId> {
        self.remote_for(prefix, live)
            .or_else(|| self.remote_for(prefix, all))
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Replaces the settings (a reload); the kernel state is kept.
    pub fn set_settings(&mut self, settings: Settings) {
        self.settings = settings;
    }

    /// Applies one event.
    pub fn apply(&mut self, event: RouteEvent) {
        match event {
            RouteEvent::Reset => {
                self.routes.clear();
                self.nexthops.clear();
                self.lq_routes.clear();
                self.counters.resets += 1;
            }
            RouteEvent::NewNexthop(n) => {
                if let Some(id) = n.id {
                    self.nexthops.insert(id, n);
                }
            }
            RouteEvent::DelNexthop(id) => {
                self.nexthops.remove(&id);
            }
            RouteEvent::NewRoute(r) => {
                let Some(p) = route_prefix(&r) else { return };
                if r.table == self.settings.lq_table && r.protocol == RTPROT_LQ {
                    self.lq_routes.insert(p, r.nhid);
                } else if self.followed(&r) {
                    self.counters.route_updates += 1;
                    self.routes.insert((p, r.priority), r);
                } else if r.table == self.settings.source_table {
                    // Another protocol took the (prefix, metric) slot (a replace).
                    self.routes.remove(&(p, r.priority));
                }
            }
            RouteEvent::DelRoute(r) => {
                let Some(p) = route_prefix(&r) else { return };
                if r.table == self.settings.lq_table && r.protocol == RTPROT_LQ {
                    self.lq_routes.remove(&p);
                } else if r.table == self.settings.source_table
                    && self.routes.remove(&(p, r.priority)).is_some()
                {
                    self.counters.route_withdrawals += 1;
                }
            }
        }
    }

    fn followed(&self, r: &RouteMsg) -> bool {
        r.table == self.settings.source_table
            && r.kind == crate::sys::netlink::route::RTN_UNICAST
            && self.settings.protocols.contains(&r.protocol)
    }

    /// The next hops of a route: its nexthop object's (a group's members' when a group),
    /// else its own. A route whose nexthop object is gone (the kernel flushes those without
    /// a route notification) has none.
    fn hops(&self, r: &RouteMsg) -> Vec<Hop> {
        let Some(id) = r.nhid else {
            return r.hops.clone();
        };
        let Some(nh) = self.nexthops.get(&id) else {
            return Vec::new();
        };
        let one = |n: &NexthopMsg| {
            n.oif.map(|oif| Hop {
                oif,
                gateway: n.gateway,
            })
        };
        if nh.group.is_empty() {
            one(nh).into_iter().collect()
        } else {
            nh.group
                .iter()
                .map(|m| self.nexthops.get(&m.id).and_then(one))
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default()
        }
    }

    fn uplink_of(&self, hop: &Hop) -> Option<UplinkId> {
        let on_oif: Vec<&UplinkPort> = self
            .settings
            .uplinks
            .iter()
            .filter(|u| u.oif == hop.oif)
            .collect();
        match on_oif.as_slice() {
            [] => None,
            [one] => Some(one.id),
            // Several uplinks share the interface: the gateway tells them apart.
            many => many
                .iter()
                .find(|u| Some(u.gateway) == hop.gateway)
                .map(|u| u.id),
        }
    }

    /// The destinations lq steers and the eligible uplinks of each: per prefix the best
    /// (lowest metric) followed route, if all its next hops are lq uplinks.
    pub fn eligible(&self) -> BTreeMap<Prefix, BTreeSet<UplinkId>> {
        let mut out = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for ((prefix, _metric), r) in &self.routes {
            // Keys sort by metric within a prefix: the first one is the best.
            if !seen.insert(*prefix) {
                continue;
            }
            let hops = self.hops(r);
            let members: Option<BTreeSet<UplinkId>> =
                hops.iter().map(|h| self.uplink_of(h)).collect();
            match members {
                Some(m) if !m.is_empty() => {
                    out.insert(*prefix, m);
                }
                _ => {}
            }
        }
        out
    }

    /// How many followed routes are left to the routing daemon because a next hop is no
    /// lq uplink (for the counters).
    pub fn foreign_routes(&self) -> usize {
        let steered = self.eligible().len();
        let prefixes: BTreeSet<&Prefix> = self.routes.keys().map(|(p, _)| p).collect();
        prefixes.len().saturating_sub(steered)
    }

    /// lq's routes in its table (prefix -> nexthop id), as the kernel reports them.
    pub fn lq_routes(&self) -> &BTreeMap<Prefix, Option<u32>> {
        &self.lq_routes
    }

    /// A nexthop object by id.
    pub fn nexthop(&self, id: u32) -> Option<&NexthopMsg> {
        self.nexthops.get(&id)
    }

    /// The remote node of `prefix` by the longest covering rule (section 6.1).
    pub fn remote_of(&self, prefix: &Prefix) -> Option<NodeId> {
        self.settings
            .rules
            .iter()
            .filter(|r| covers(&r.prefix, prefix))
            .max_by_key(|r| r.prefix.len)
            .map(|r| r.remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::node;

    fn p(s: &str) -> Prefix {
        let (a, l) = s.split_once('/').unwrap();
        Prefix {
            addr: a.parse().unwrap(),
            len: l.parse().unwrap(),
        }
    }

    fn settings() -> Settings {
        Settings {
            protocols: [186].into(),
            source_table: 254,
            lq_table: 76,
            uplinks: vec![
                UplinkPort {
                    id: 1,
                    oif: 11,
                    gateway: "10.0.1.1".parse().unwrap(),
                },
                UplinkPort {
                    id: 2,
                    oif: 12,
                    gateway: "10.0.2.1".parse().unwrap(),
                },
            ],
            rules: vec![
                MapRule {
                    prefix: p("10.2.0.0/16"),
                    remote: node(65102, 2),
                },
                MapRule {
                    prefix: p("10.2.3.0/24"),
                    remote: node(65103, 3),
                },
            ],
        }
    }

    fn route(prefix: &str, proto: u8, metric: u32, nhid: Option<u32>, hops: &[u32]) -> RouteMsg {
        let pr = p(prefix);
        RouteMsg {
            family: 2,
            dst_len: pr.len,
            table: 254,
            protocol: proto,
            kind: 1,
            priority: metric,
            dst: Some(pr.addr),
            nhid,
            hops: hops.iter().map(|&oif| Hop { oif, gateway: None }).collect(),
        }
    }

    fn gw(id: u32, oif: u32) -> NexthopMsg {
        NexthopMsg {
            id: Some(id),
            oif: Some(oif),
            protocol: 11,
            ..Default::default()
        }
    }

    fn group(id: u32, members: &[u32]) -> NexthopMsg {
        NexthopMsg::test_group(id, 11, members)
    }

    #[test]
    fn a_zebra_group_route_makes_its_members_eligible_and_a_withdrawal_shrinks_them() {
        let mut s = SlowPlane::new(settings());
        s.apply(RouteEvent::NewNexthop(gw(5, 11)));
        s.apply(RouteEvent::NewNexthop(gw(6, 12)));
        s.apply(RouteEvent::NewNexthop(group(7, &[5, 6])));
        s.apply(RouteEvent::NewRoute(route(
            "10.2.3.0/24",
            186,
            20,
            Some(7),
            &[],
        )));
        assert_eq!(s.eligible()[&p("10.2.3.0/24")], [1, 2].into());
        // BGP withdraws the path via uplink 2: zebra replaces the group's members.
        s.apply(RouteEvent::NewNexthop(group(7, &[5])));
        assert_eq!(s.eligible()[&p("10.2.3.0/24")], [1].into());
        // ... or points the route at another object.
        s.apply(RouteEvent::NewRoute(route(
            "10.2.3.0/24",
            186,
            20,
            Some(6),
            &[],
        )));
        assert_eq!(s.eligible()[&p("10.2.3.0/24")], [2].into());
        s.apply(RouteEvent::DelRoute(route(
            "10.2.3.0/24",
            186,
            20,
            None,
            &[],
        )));
        assert!(s.eligible().is_empty());
        assert_eq!(s.counters.route_withdrawals, 1);
    }

    #[test]
    fn a_route_whose_object_is_gone_has_no_eligible_members() {
        let mut s = SlowPlane::new(settings());
        s.apply(RouteEvent::NewNexthop(gw(5, 11)));
        s.apply(RouteEvent::NewRoute(route(
            "10.2.3.0/24",
            186,
            20,
            Some(5),
            &[],
        )));
        assert_eq!(s.eligible().len(), 1);
        s.apply(RouteEvent::DelNexthop(5));
        assert!(s.eligible().is_empty());
    }

    #[test]
    fn multipath_routes_other_protocols_and_foreign_next_hops() {
        let mut s = SlowPlane::new(settings());
        s.apply(RouteEvent::NewRoute(route(
            "10.9.0.0/24",
            186,
            20,
            None,
            &[11, 12],
        )));
        s.apply(RouteEvent::NewRoute(route(
            "10.8.0.0/24",
            2,
            0,
            None,
            &[11, 12],
        )));
        s.apply(RouteEvent::NewRoute(route(
            "10.7.0.0/24",
            186,
            20,
            None,
            &[11, 99],
        )));
        let e = s.eligible();
        assert_eq!(e.len(), 1);
        assert_eq!(e[&p("10.9.0.0/24")], [1, 2].into());
        assert_eq!(s.foreign_routes(), 1);
    }

    #[test]
    fn the_best_metric_wins() {
        let mut s = SlowPlane::new(settings());
        s.apply(RouteEvent::NewRoute(route(
            "10.9.0.0/24",
            186,
            30,
            None,
            &[11, 12],
        )));
        s.apply(RouteEvent::NewRoute(route(
            "10.9.0.0/24",
            186,
            20,
            None,
            &[12],
        )));
        assert_eq!(s.eligible()[&p("10.9.0.0/24")], [2].into());
    }

    #[test]
    fn lq_routes_are_tracked_apart_and_reset_forgets() {
        let mut s = SlowPlane::new(settings());
        let mut r = route("10.9.0.0/24", RTPROT_LQ, 0, Some(77), &[]);
        r.table = 76;
        s.apply(RouteEvent::NewRoute(r.clone()));
        assert_eq!(s.lq_routes()[&p("10.9.0.0/24")], Some(77));
        assert!(s.eligible().is_empty());
        s.apply(RouteEvent::Reset);
        assert!(s.lq_routes().is_empty());
        assert_eq!(s.counters.resets, 1);
    }

    #[test]
    fn a_rule_wins_over_the_bmp_origin_which_names_the_remote_of_its_as() {
        let mut s = SlowPlane::new(settings());
        let remotes: BTreeSet<NodeId> = [node(65102, 2), node(65107, 7)].into();
        let origins: BTreeMap<Prefix, u32> =
            [(p("10.2.3.0/24"), 65107), (p("10.7.0.0/24"), 65107)].into();
        assert!(s.set_bmp(Arc::new(crate::core::bmp::Snapshot {
            origins: Arc::new(origins),
            ..Default::default()
        })));
        // Covered by a rule: the rule's remote.
        assert_eq!(
            s.remote_for(&p("10.2.3.0/24"), &remotes),
            Some(node(65103, 3))
        );
        // Learned: the remote node of AS 65107 among the entries.
        assert_eq!(
            s.mapping_of(&p("10.7.0.0/24")),
            MappingSource::OriginAs(65107)
        );
        assert_eq!(
            s.remote_for(&p("10.7.0.0/24"), &remotes),
            Some(node(65107, 7))
        );
        // No entry of that AS yet: no mapping (local-only quality).
        assert_eq!(s.remote_for(&p("10.7.0.0/24"), &BTreeSet::new()), None);
        // The leaf of AS 65107 was renumbered: its old Router-ID's entries are aged but
        // still in the table. The live one names the leaf; with no live one, the AS is
        // ambiguous; a silent leaf alone keeps its mapping.
        let renumbered: BTreeSet<NodeId> = [node(65107, 7), node(65107, 70)].into();
        let live: BTreeSet<NodeId> = [node(65107, 70)].into();
        let l = p("10.7.0.0/24");
        assert_eq!(s.remote_for(&l, &renumbered), None);
        assert_eq!(
            s.remote_for_entries(&l, &live, &renumbered),
            Some(node(65107, 70))
        );
        assert_eq!(
            s.remote_for_entries(&l, &BTreeSet::new(), &renumbered),
            None
        );
        assert_eq!(
            s.remote_for_entries(&l, &BTreeSet::new(), &remotes),
            Some(node(65107, 7))
        );
        assert_eq!(s.mapping_of(&p("10.6.0.0/24")), MappingSource::None);
        // The same origins and bandwidths again are no change.
        let same = s.bmp().unwrap().clone();
        assert!(!s.set_bmp(Arc::new(same)));
    }

    #[test]
    fn link_bandwidths_name_the_capacity_of_the_path_through_their_next_hops_uplink() {
        let mut s = SlowPlane::new(settings());
        let r4 = node(65104, 4);
        let g = |u: usize| s.settings().uplinks[u].gateway;
        let (g1, g2) = (g(0), g(1));
        let bw: BTreeMap<(Prefix, IpAddr), f64> = [
            ((p("10.4.0.0/24"), g1), 0.1),
            ((p("10.4.0.0/24"), g2), 0.025),
            // A second prefix of the same leaf through S2 with a smaller bandwidth: the
            // path carries both, the smaller binds.
            ((p("10.4.1.0/24"), g2), 0.02),
            // A next hop that is no uplink's, and a prefix with no remote node: nothing.
            ((p("10.4.0.0/24"), "192.0.2.9".parse().unwrap()), 5.0),
            ((p("10.9.0.0/24"), g1), 7.0),
        ]
        .into();
        assert!(s.set_bmp(Arc::new(crate::core::bmp::Snapshot {
            bandwidths: Arc::new(bw),
            ..Default::default()
        })));
        let remote_of = |q: &Prefix| q.addr.to_string().starts_with("10.4.").then_some(r4);
        let caps = s.bgp_capacities(remote_of);
        let u = |k: usize| s.settings().uplinks[k].id;
        assert_eq!(caps.len(), 2, "{caps:?}");
        assert_eq!(caps[&(r4, u(0))].gbps, 0.1);
        assert_eq!(caps[&(r4, u(1))].gbps, 0.02);
        assert!(caps.values().all(|c| c.source == CapacitySource::Bgp));
        // New bandwidths (a new Arc) are a change even with the same origins.
        let again = s.bmp().unwrap().clone();
        assert!(!s.set_bmp(Arc::new(again.clone())));
        assert!(s.set_bmp(Arc::new(crate::core::bmp::Snapshot {
            bandwidths: Arc::new(BTreeMap::new()),
            ..again
        })));
        assert!(s.bgp_capacities(remote_of).is_empty());
    }

    #[test]
    fn the_longest_covering_rule_names_the_remote() {
        let s = SlowPlane::new(settings());
        assert_eq!(s.remote_of(&p("10.2.3.0/24")), Some(node(65103, 3)));
        assert_eq!(s.remote_of(&p("10.2.9.0/24")), Some(node(65102, 2)));
        assert_eq!(s.remote_of(&p("10.3.0.0/24")), None);
        assert_eq!(s.remote_of(&p("10.0.0.0/8")), None);
    }
}
