//! The load-balancer's slow-plane steering (seed 003 section 4.1), a child module of
//! [`crate::roles::load_balancer`]: turns the core's eligible sets ([`crate::roles::load_balancer::slow_plane`]) into
//! lqd's groups and routes, and restricts each destination's members to them.
//!
//! lq's steered copy of a BGP route is the same prefix in lq's own table (`[slow-plane]
//! table`, default 76), reached through a policy rule `lookup 76` before the main table.
//! Not the main table with a better metric: zebra reads such a route as a kernel route
//! (distance 0), selects it and uninstalls BGP's own route (seen with FRR 8.4), which would
//! withdraw lq's copy in turn. A destination lq does not steer finds nothing in lq's table
//! and falls through to the main table, i.e. to FRR's routes; so does every destination
//! once lqd removes its copies on exit. FRR's routes and nexthop objects are never touched.

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::slow_plane::{MappingSource, RouteEvent, SlowPlane, UplinkPort};
use super::{
    GROUP_ID_OFFSET, LoadBalancer, LoadBalancerError, MappingResolved, RouteState, format_prefix,
};
use crate::{
    core::controller::{
        path_quality::{GroupKey, Prefix, RemoteNodes, UplinkId},
        replace::Installed,
    },
    sys::netlink::{
        RtnlError, encode_route_delete, ifindex, nexthop::RTPROT_LQ, route as route_msg,
    },
};

pub use crate::config::{SLOW_GROUP_OFFSET, SLOW_GROUP_SPAN};

/// How many ids [`LoadBalancer::note_foreign_write`] warns about (each once); later ones are
/// counted only.
const FOREIGN_WARNINGS: usize = 64;

/// Whether the nexthop object `n` is in lq's id range (`id_base` up to the end of the slow
/// plane's groups) yet was not written by lqd: another protocol (zebra re-creating a group
/// lqd deleted, `proto zebra`), or a group with a member that is not one of lq's member
/// nexthops (`id_base + uplink id`; zebra sending its own copy of lq's group back down, its
/// members zebra's nexthops, while the kernel keeps the group's protocol on a replace).
pub(super) fn foreign_write(id_base: u32, n: &crate::sys::netlink::nexthop::NexthopMsg) -> bool {
    let Some(id) = n.id else {
        return false;
    };
    let end = id_base
        .saturating_add(GROUP_ID_OFFSET + SLOW_GROUP_OFFSET)
        .saturating_add(SLOW_GROUP_SPAN);
    let members = id_base..id_base.saturating_add(GROUP_ID_OFFSET);
    (id_base..end).contains(&id)
        && (n.protocol != RTPROT_LQ || n.group.iter().any(|m| !members.contains(&m.id)))
}

/// How long after the start an adopted destination waits in its own group for its learned
/// mapping (`NnhMapping::held`): bgpd's BMP session reconnects within its retry interval
/// (100 ms to 1 s in the operator guide's configuration), and the remote leaf's entries
/// arrive within one T_notify.
const HOLD_NS: u64 = 5_000_000_000;

impl LoadBalancer {
    fn slow_range(&self) -> std::ops::Range<u32> {
        let first = self.cfg.nexthop_group.id_base + GROUP_ID_OFFSET + SLOW_GROUP_OFFSET;
        first..first.saturating_add(SLOW_GROUP_SPAN)
    }

    fn slow_settings(&self) -> Option<crate::roles::load_balancer::slow_plane::Settings> {
        let sp = self.cfg.slow_plane.as_ref()?;
        let mut ports = Vec::new();
        for u in &self.cfg.uplink {
            match ifindex(&u.interface) {
                Ok(oif) => ports.push(UplinkPort {
                    id: UplinkId::from(u.id),
                    oif,
                    gateway: u.gateway,
                }),
                Err(e) => {
                    warn!(error = %e, "slow plane: uplink interface not found; its routes are left to the routing daemon")
                }
            }
        }
        Some(crate::roles::load_balancer::slow_plane::Settings::from_config(sp, ports))
    }

    /// With `[slow-plane]`: the core and the policy rules (IPv4, IPv6) to lq's table.
    pub(super) fn slow_plane_start(&mut self) -> Result<(), LoadBalancerError> {
        let Some(settings) = self.slow_settings() else {
            return Ok(());
        };
        let (table, priority) = (settings.lq_table, self.slow_rule_priority());
        if let Some(rtnl) = self.rtnl.as_mut() {
            for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
                match rtnl.request("policy rule", |seq| {
                    route_msg::encode_rule(true, family, table, priority, seq)
                }) {
                    Ok(()) => info!(
                        family,
                        table, priority, "policy rule: lookup lq's table before main"
                    ),
                    Err(RtnlError::Refused { source, .. })
                        if source.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) if family == libc::AF_INET6 as u8 => {
                        warn!(error = %e, "IPv6 policy rule refused: IPv6 routes are not steered");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        info!(protocols = ?settings.protocols, table, "slow plane: following the routing daemon's routes (seed 003 section 4.1)");
        self.slow = Some(SlowPlane::new(settings));
        Ok(())
    }

    fn slow_rule_priority(&self) -> u32 {
        self.cfg
            .slow_plane
            .as_ref()
            .map_or(1000, |s| s.rule_priority)
    }

    /// Whether `[slow-plane]` is on (the daemon then feeds [`Self::route_events`]).
    pub fn slow_plane_enabled(&self) -> bool {
        self.slow.is_some()
    }

    /// After a reload: the settings again, and the slow plane's destinations back into the
    /// freshly built NNH mapping.
    pub(super) fn slow_plane_reload(&mut self) {
        if let (Some(settings), Some(_)) = (self.slow_settings(), self.slow.as_ref())
            && let Some(slow) = self.slow.as_mut()
        {
            slow.set_settings(settings);
        }
        self.slow_sync();
        // The fresh mapping holds the configured capacities only: the learned ones again.
        self.slow_plane_capacities();
    }

    /// Feeds route and nexthop events to the core and brings lqd's groups and routes in
    /// line at once: a destination BGP withdrew loses lq's route here, before any step.
    /// Returns how many destinations came or went.
    pub fn route_events(&mut self, events: Vec<RouteEvent>) -> usize {
        if self.slow.is_none() {
            return 0;
        }
        for e in &events {
            if let RouteEvent::NewNexthop(n) = e {
                self.note_foreign_write(n);
            }
        }
        let Some(slow) = self.slow.as_mut() else {
            return 0;
        };
        for e in events {
            slow.apply(e);
        }
        self.slow_sync()
    }

    /// A nexthop object in lq's id range that another program wrote ([`foreign_write`]):
    /// counted, and a warning naming the remedy, once per id.
    fn note_foreign_write(&mut self, n: &crate::sys::netlink::nexthop::NexthopMsg) {
        let Some(id) = n.id else {
            return;
        };
        if !foreign_write(self.cfg.nexthop_group.id_base, n) {
            return;
        }
        self.foreign_nexthop_writes += 1;
        if self.foreign_warned.len() < FOREIGN_WARNINGS && self.foreign_warned.insert(id) {
            let members: Vec<u32> = n.group.iter().map(|m| m.id).collect();
            warn!(
                id = format_args!("{id:#x}"),
                protocol = n.protocol,
                ?members,
                "a nexthop object in lq's id range was written by another program: zebra (FRR 8.4 at least) sends the nexthop groups of other programs back down (undoing lq's weights of a hash-threshold group) and re-creates those lqd deletes; add `no zebra nexthop kernel enable` to zebra's configuration (docs/operator-guide.md, Running with FRR)"
            );
        }
    }

    /// Takes the BMP station's latest snapshot (`[slow-plane.bmp]`): the origin AS of each
    /// prefix, which names its remote leaf (seed 003 section 6.1). Returns whether the
    /// learned origins changed; the mapping follows at once and at every step.
    pub fn bmp_update(&mut self, snapshot: std::sync::Arc<crate::core::bmp::Snapshot>) -> bool {
        let Some(slow) = self.slow.as_mut() else {
            return false;
        };
        let changed = slow.set_bmp(snapshot);
        if changed {
            let mirror = std::mem::take(&mut self.mirror);
            self.slow_plane_resolve(mirror.entries(), self.last_step_ns);
            self.mirror = mirror;
            self.slow_plane_capacities();
        }
        changed
    }

    /// The paths' slow-plane capacities (section 4.1): `[[path-capacity]]`, and for the
    /// paths it does not name the BGP Link Bandwidth learned over BMP. When they moved,
    /// every group is computed again at the next step (a capacity changes targets, not
    /// entries, so the step would not see it otherwise).
    pub(super) fn slow_plane_capacities(&mut self) {
        let Some(slow) = self.slow.as_ref() else {
            return;
        };
        let mut capacities = self.cfg.nnh_mapping().remote_capacity;
        let destinations = &self.mapping.destinations;
        for (k, c) in slow.bgp_capacities(|p| destinations.get(p).copied().flatten()) {
            capacities.entry(k).or_insert(c);
        }
        if capacities != self.mapping.remote_capacity {
            info!(
                paths = capacities.len(),
                from_bgp = capacities
                    .values()
                    .filter(
                        |c| c.source == crate::core::controller::path_quality::CapacitySource::Bgp
                    )
                    .count(),
                "slow plane: path capacities changed (seed 003 section 4.1); every group is computed again"
            );
            self.mapping.remote_capacity = capacities;
            self.next_full_update_ns = 0;
        }
    }

    /// [`Self::slow_plane_resolve`] at a control step, when its outcome may have moved:
    /// the table has new rows (a new remote node) or was read anew (`rebuilt`), or a dead
    /// interval has passed since the last resolve (an entry that expired since). Not at
    /// every step: the resolve reads every entry (32 768 at a 64 x 512 leaf) and every
    /// steered destination, and between those events its outcome is the same. The mapping
    /// itself (the BMP snapshot, the steered destinations) resolves at once when it
    /// changes (`bmp_update`, `slow_sync`).
    pub(super) fn slow_plane_resolve_due(
        &mut self,
        paths: &[(lq_common::maps::PathKey, lq_common::maps::PathValue)],
        read_at_ns: u64,
        rebuilt: bool,
    ) {
        if self.slow.is_none() {
            return;
        }
        let dead = self.controller.dead_interval_ns();
        let due = rebuilt
            || self.mapping_resolved.is_none_or(|m| {
                m.entries != paths.len() || read_at_ns >= m.read_at_ns.saturating_add(dead)
            });
        if due {
            self.slow_plane_resolve(paths, read_at_ns);
        } else {
            self.slow_plane_hold_expiry();
        }
    }

    /// Holds end with the mapping, or HOLD_NS after the start (BMP silent, or the remote
    /// leaf's entries absent): the destinations then share the local-only group.
    fn slow_plane_hold_expiry(&mut self) {
        if !self.mapping.held.is_empty()
            && super::monotonic_ns() >= self.started_ns.saturating_add(HOLD_NS)
        {
            info!(
                destinations = self.mapping.held.len(),
                "slow plane: no learned mapping {} s after the start; adopted groups released to the local-only group",
                HOLD_NS / 1_000_000_000
            );
            self.mapping.held.clear();
            self.regroup_needed = true;
        }
    }

    /// The NNH mapping of the steered destinations against the LQ entries received
    /// (`paths`): a rule's remote, else the one remote node of the prefix's origin AS
    /// (section 6.2: AS-qualified entries carry it). Called before a computation whenever
    /// the outcome may have moved (`slow_plane_resolve_due`), so a destination gains its
    /// mapping with the first entry of its leaf's AS.
    ///
    /// `paths` are the control step's copy of the table, current as of `read_at_ns` (the
    /// step that refreshed them): liveness is judged at that time, not later, since a row
    /// the step did not need to read again may have been refreshed in the kernel since.
    pub(super) fn slow_plane_resolve(
        &mut self,
        paths: &[(lq_common::maps::PathKey, lq_common::maps::PathValue)],
        read_at_ns: u64,
    ) {
        if self.slow.is_none() {
            return;
        }
        self.slow_plane_hold_expiry();
        let Some(slow) = self.slow.as_ref() else {
            return;
        };
        let dead = self.controller.dead_interval_ns();
        // Only a learned mapping depends on the entries; rules were set at sync time.
        if slow.bmp().is_none() {
            return;
        }
        // Live entries name the leaf of an AS first (see `remote_for_entries`).
        let nodes = RemoteNodes::of_entries(paths, read_at_ns, dead);
        self.mapping_resolved = Some(MappingResolved {
            entries: paths.len(),
            read_at_ns,
        });
        for (p, r) in &self.routes {
            if r.table.is_none() {
                continue;
            }
            let remote = slow.remote_for_entries(p, &nodes.live, &nodes.all);
            if remote.is_some() && self.mapping.held.remove(p).is_some() {
                self.regroup_needed = true;
            }
            if self.mapping.destinations.get(p) != Some(&remote) {
                info!(prefix = %format_prefix(p), ?remote, source = ?slow.mapping_of(p), "slow plane: NNH mapping (seed 003 section 6.1)");
                self.mapping.destinations.insert(*p, remote);
                // Its group is the new remote node's (6.1).
                self.regroup_needed = true;
            }
        }
        if self.regroup_needed {
            // A prefix's remote node names the path its Link Bandwidth belongs to.
            self.slow_plane_capacities();
        }
    }

    fn slow_sync(&mut self) -> usize {
        // Out of `self` for the pass, so the kernel can be programmed while it is read.
        let Some(slow) = self.slow.take() else {
            return 0;
        };
        let changed = self.slow_sync_with(&slow);
        self.slow = Some(slow);
        // Groups left without destinations go now, not at the next step.
        self.delete_orphans();
        if changed > 0 {
            // New destinations get their learned mapping before the next step.
            let mirror = std::mem::take(&mut self.mirror);
            self.slow_plane_resolve(mirror.entries(), self.last_step_ns);
            self.mirror = mirror;
        }
        changed
    }

    fn slow_sync_with(&mut self, slow: &SlowPlane) -> usize {
        let eligible = slow.eligible();
        let range = self.slow_range();
        let mut changed = 0;
        // Gone: BGP's route went (or no longer runs over lq's uplinks only).
        let gone: Vec<(Prefix, RouteState)> = self
            .routes
            .iter()
            .filter(|(p, r)| r.table.is_some() && !eligible.contains_key(p))
            .map(|(p, r)| (*p, r.clone()))
            .collect();
        for (p, r) in gone {
            self.routes.remove(&p);
            self.mapping.destinations.remove(&p);
            self.mapping.eligible.remove(&p);
            self.mapping.held.remove(&p);
            if let Some(g) = self.groups.get_mut(&r.group) {
                g.prefixes.remove(&p);
            }
            self.slow_remove(&p, r.table);
            info!(prefix = %format_prefix(&p), group = ?r.installed, "slow plane: the routing daemon's route went; lq's route removed");
            self.regroup_needed = true;
            changed += 1;
        }
        // Stale copies of lq's (a killed lqd's) that no destination owns.
        let owned: BTreeSet<u32> = self.groups.values().map(|g| g.id).collect();
        let stale: Vec<(Prefix, Option<u32>)> = slow
            .lq_routes()
            .iter()
            .filter(|(p, _)| !self.routes.contains_key(p) && !eligible.contains_key(p))
            .map(|(p, id)| (*p, *id))
            .collect();
        for (p, id) in stale {
            let id = id.filter(|id| {
                range.contains(id)
                    && !owned.contains(id)
                    && slow.nexthop(*id).is_none_or(|n| n.protocol == RTPROT_LQ)
            });
            self.slow_remove(&p, Some(slow.settings().lq_table));
            self.orphans.extend(id);
        }
        // The NNH mapping of the steered destinations after a reload (which rebuilds the
        // mapping from `[[destination]]`) or a change of the covering rules: a rule's
        // remote; a learned one is refined by the steps (`slow_plane_resolve_due`).
        let learned = slow.bmp().is_some();
        // Configured, not yet heard from: the BMP station starts after the first sync, and
        // bgpd reconnects to a restarted lqd only after its retry interval.
        let bmp_configured = self
            .cfg
            .slow_plane
            .as_ref()
            .is_some_and(|s| s.bmp.is_some());
        for (p, r) in &self.routes {
            if r.table.is_none() || (learned && self.mapping.destinations.contains_key(p)) {
                continue;
            }
            let want = slow.remote_of(p);
            if self.mapping.destinations.get(p) != Some(&want) {
                self.mapping.destinations.insert(*p, want);
                self.regroup_needed = true;
            }
        }
        // Permitted members changed: the destination moves to another group.
        for (p, members) in &eligible {
            let sorted: Vec<UplinkId> = members.iter().copied().collect();
            if self.routes.get(p).is_some_and(|r| r.table.is_some())
                && self.mapping.eligible.get(p) != Some(&sorted)
            {
                self.mapping.eligible.insert(*p, sorted);
                self.regroup_needed = true;
                changed += 1;
            }
        }
        // New: adopt lq's route and group a previous lqd left, or let the regroup give
        // the destination its remote node's group.
        let now = super::monotonic_ns();
        let base = self.cfg.nexthop_group.id_base;
        for (p, members) in &eligible {
            if self.routes.contains_key(p) {
                // A `[[destination]]` of the same prefix is lqd's own and wins.
                continue;
            }
            let sorted: Vec<UplinkId> = members.iter().copied().collect();
            self.mapping.destinations.insert(*p, slow.remote_of(p));
            self.mapping.eligible.insert(*p, sorted.clone());
            let installed = slow.lq_routes().get(p).copied().flatten();
            let adoptable = installed
                .filter(|id| range.contains(id) && !self.groups.values().any(|g| g.id == *id))
                .and_then(|id| slow.nexthop(id).map(|g| (id, g)))
                .filter(|(_, g)| {
                    g.protocol == RTPROT_LQ
                        && !g.group.is_empty()
                        && g.group
                            .iter()
                            .all(|m| members.contains(&m.id.saturating_sub(base)))
                });
            // A learned mapping is not known yet (BMP speaks after the start): a route lq
            // left keeps its group until it is (`NnhMapping::held`), so a restart moves no
            // flow. Only a group lq can adopt, or one adopted for an earlier destination.
            if bmp_configured
                && slow.remote_of(p).is_none()
                && let Some(id) = installed
            {
                let held = GroupKey {
                    remote: None,
                    eligible: Some(sorted),
                    adopted: Some(id),
                };
                if adoptable.is_some() || self.groups.contains_key(&held) {
                    self.mapping.held.insert(*p, id);
                }
            }
            let key = self.mapping.group_of(p).unwrap_or_default();
            if let Some((id, g)) = adoptable
                && !self.groups.contains_key(&key)
            {
                let kernel: Vec<(UplinkId, u32)> = g
                    .group
                    .iter()
                    .map(|m| (m.id.saturating_sub(base), m.weight))
                    .collect();
                let applied = self.fractions_of(&kernel);
                self.weights.seed(key.clone(), &applied, now);
                info!(prefix = %format_prefix(p), group = id, weights = ?kernel, "slow plane: adopted lq's existing route and group");
                self.groups.insert(
                    key.clone(),
                    super::GroupState {
                        id,
                        kernel: Installed::new(kernel),
                        ..Default::default()
                    },
                );
            } else if let Some(id) = installed
                .filter(|id| range.contains(id) && !self.groups.values().any(|g| g.id == *id))
            {
                // lq's route points at a group of a previous layout: repointed at this
                // destination's group, then that id is deleted.
                self.orphans.insert(id);
            }
            info!(prefix = %format_prefix(p), eligible = ?members, remote = ?slow.remote_of(p), "slow plane: steering the routing daemon's route");
            self.routes.insert(
                *p,
                RouteState {
                    group: GroupKey::default(),
                    table: Some(slow.settings().lq_table),
                    installed,
                },
            );
            self.regroup_needed = true;
            changed += 1;
        }
        if self.regroup_needed {
            self.regroup(Some(slow));
        }
        changed
    }

    /// Deletes lq's route for `p` in `table` (never anyone else's: the route delete names
    /// protocol lq). Groups go through [`LoadBalancer::delete_orphans`].
    fn slow_remove(&mut self, p: &Prefix, table: Option<u32>) {
        let Some(rtnl) = self.rtnl.as_mut() else {
            return;
        };
        if let Some(table) = table
            && let Err(e) = rtnl.request("delete route", |seq| encode_route_delete(p, table, seq))
        {
            tracing::debug!(error = %e, "lq's route already gone");
        }
    }

    /// On exit: removes lq's steered routes and groups, so forwarding falls back to the
    /// routing daemon's own routes (a copy nobody follows any more could keep traffic on a
    /// path BGP withdraws later). The policy rule stays: with an empty table it is inert.
    pub fn withdraw_slow_plane(&mut self) {
        let steered: Vec<(Prefix, RouteState)> = self
            .routes
            .iter()
            .filter(|(_, r)| r.table.is_some())
            .map(|(p, r)| (*p, r.clone()))
            .collect();
        for (p, r) in &steered {
            self.routes.remove(p);
            self.mapping.destinations.remove(p);
            self.mapping.eligible.remove(p);
            self.mapping.held.remove(p);
            self.slow_remove(p, r.table);
        }
        // Every slow-plane group, now that no route names it.
        let groups: Vec<(GroupKey, u32)> = self
            .groups
            .iter()
            .filter(|(k, _)| k.eligible.is_some())
            .map(|(k, g)| (k.clone(), g.id))
            .collect();
        let range = self.slow_range();
        let orphans: Vec<u32> = self
            .orphans
            .iter()
            .copied()
            .filter(|id| range.contains(id))
            .collect();
        for id in &orphans {
            self.orphans.remove(id);
        }
        for (k, id) in groups {
            self.groups.remove(&k);
            self.weights.forget(&k);
            if let Some(rtnl) = self.rtnl.as_mut() {
                let _ = rtnl.delete_nexthop(id);
            }
        }
        if let Some(rtnl) = self.rtnl.as_mut() {
            for id in orphans {
                let _ = rtnl.delete_nexthop(id);
            }
        }
        if !steered.is_empty() {
            info!(
                routes = steered.len(),
                "slow plane: lq's routes removed; forwarding is the routing daemon's"
            );
        }
    }

    /// The slow plane's state for `lqd show`.
    pub fn slow_plane_json(&self) -> serde_json::Value {
        let Some(slow) = self.slow.as_ref() else {
            return serde_json::Value::Null;
        };
        let c = slow.counters;
        let steered: Vec<serde_json::Value> = slow
            .eligible()
            .iter()
            .map(|(p, m)| {
                serde_json::json!({
                    "prefix": format_prefix(p),
                    "eligible-uplinks": m,
                    "group-id": self.routes.get(p).and_then(|r| self.groups.get(&r.group)).map(|g| g.id),
                    "remote": self.mapping.destinations.get(p).copied().flatten().map(|r| format!("{}/{}", r.node_as, std::net::Ipv4Addr::from(r.node_id))),
                    "mapping-source": match slow.mapping_of(p) {
                        MappingSource::Rule(_) => "config",
                        MappingSource::OriginAs(_) => "bmp",
                        MappingSource::None => "none",
                    },
                    "origin-as": match slow.mapping_of(p) {
                        MappingSource::OriginAs(a) => Some(a),
                        _ => None,
                    },
                })
            })
            .collect();
        serde_json::json!({
            "table": slow.settings().lq_table,
            "steered": steered,
            "route-updates": c.route_updates,
            "route-withdrawals": c.route_withdrawals,
            "foreign-routes": slow.foreign_routes(),
            "resets": c.resets,
            "bmp": slow.bmp().map(|b| serde_json::json!({
                "sessions": b.sessions,
                "sessions-accepted": b.sessions_accepted,
                "sessions-refused": b.sessions_refused,
                "peers": b.peers,
                "prefixes": b.origins.len(),
                "conflicting": b.conflicting,
                "counters": b.counters,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::nexthop::NexthopMsg;

    const BASE: u32 = 0x4c00_0000;

    fn group(id: u32, protocol: u8, members: &[u32]) -> NexthopMsg {
        NexthopMsg::test_group(id, protocol, members)
    }

    /// The shapes seen with FRR 8.4's zebra in a namespace (`ip -d nexthop show` after
    /// lq-like replaces and a delete): zebra's copy of a hash-threshold group sent back
    /// down keeps the group's protocol but has zebra's members; a deleted group comes back
    /// as `proto zebra`.
    #[test]
    fn writes_of_other_programs_in_lqs_id_range_are_told_apart() {
        let (g, slow_g) = (BASE + 0x1_0000, BASE + 0x1_8000);
        let lq = RTPROT_LQ;
        // lqd's own writes.
        assert!(!foreign_write(BASE, &group(g, lq, &[BASE + 1, BASE + 2])));
        assert!(!foreign_write(BASE, &group(slow_g, lq, &[BASE + 1])));
        assert!(!foreign_write(BASE, &group(BASE + 3, lq, &[])));
        // zebra's copy sent back down (its own member ids), and a re-created group.
        assert!(foreign_write(BASE, &group(g, lq, &[13, 14])));
        assert!(foreign_write(
            BASE,
            &group(slow_g, 11, &[BASE + 1, BASE + 2])
        ));
        assert!(foreign_write(BASE, &group(slow_g + 5, 11, &[11, 12])));
        // Outside lq's range (zebra's own objects, another base): none of lqd's business.
        assert!(!foreign_write(BASE, &group(8, 11, &[11, 12])));
        assert!(!foreign_write(0x1000, &group(g, 11, &[13])));
        assert!(!foreign_write(BASE, &NexthopMsg::default()));
    }
}
