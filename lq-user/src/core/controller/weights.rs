//! Weighted ECMP targets (seed 003 section 6.3), receiver damping (6.4) and the
//! quantisation of applied weights to kernel nexthop-group weights.
//!
//! Per destination the controller keeps the applied fractions (summing to 1) and moves
//! them towards the targets at most once per T_reweight, by `w += g (target - w)`. Time is
//! an input (`u64` ns), so the whole schedule is reproducible in virtual time; the caller
//! asks [`WeightController::next_due`] when to call [`WeightController::tick`] again.

use std::collections::BTreeMap;

use tracing::{debug, trace};

use super::config::{ConfigError, ControllerConfig, IntegralParams, WeightFunction};
use super::integral::{self, MemberState};
use super::path_quality::{
    Capacity, GroupKey, MemberQuality, MemberSignal, PathQualityReport, UplinkId,
};
use crate::core::sorted::SortedProbe;

/// The input of the target computation for one member.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemberInput {
    /// The member.
    pub uplink: UplinkId,
    /// path_quality (6.3): min(local, remote).
    pub quality: u8,
    /// Local uplink usable (local quality > 0): the all-zero fallback spreads over these.
    pub local_up: bool,
    /// Path capacity (section 4.1), used with capacity weighting and by the integral
    /// function.
    pub capacity: Capacity,
}

/// A member as the target computation reads it: a [`MemberInput`], or a path-quality
/// report's [`MemberQuality`] read in place. A step at a leaf of a 64 x 512 fabric updates
/// 512 groups of 64 members every T_reweight, and copying each report's members into inputs
/// first was a third of the update's own work (its first loads missed the cache, issue 41).
pub trait Member: Copy {
    /// What the target computation reads of it (inlined: only the fields read are loaded).
    fn input(&self) -> MemberInput;
}

impl Member for MemberInput {
    #[inline]
    fn input(&self) -> MemberInput {
        *self
    }
}

impl Member for MemberQuality {
    #[inline]
    fn input(&self) -> MemberInput {
        MemberInput::from(self)
    }
}

impl From<&MemberQuality> for MemberInput {
    #[inline]
    fn from(m: &MemberQuality) -> Self {
        Self {
            uplink: m.uplink,
            quality: m.quality,
            local_up: m.local > 0,
            capacity: m.capacity,
        }
    }
}

/// Target fractions, one per member in input order, summing to 1 (or all 0 when no member
/// is usable at all).
///
/// Section 6.3: `target(S) = path_quality(S) / sum(path_quality)`; LQS 0 gets 0 unless all
/// paths are 0, then equal weights (here: over the members whose local uplink is up, since
/// a down uplink cannot forward at all). With `capacity_weighting` (lqd's default) each
/// quality is scaled by the member's path capacity, section 4.1's `weight(path_i) =
/// f(FARE_capacity(i), LQ_quality(i))` with `f` the product: `target(S) = capacity(S) x
/// path_quality(S) / sum(capacity x path_quality)`, and the all-zero fallback is equal
/// quality, i.e. the capacity shares. Equal capacities (or none known) give 6.3 exactly.
pub fn target_weights(members: &[MemberInput], capacity_weighting: bool) -> Vec<f64> {
    let mut target = Vec::with_capacity(members.len());
    target_weights_into(members, capacity_weighting, &mut target);
    target
}

/// [`target_weights`] into `target` (cleared first): a step reuses the destination's
/// vector rather than allocating one per group.
fn target_weights_into<M: Member>(members: &[M], capacity_weighting: bool, target: &mut Vec<f64>) {
    target.clear();
    // `Capacity` is finite and > 0 by construction.
    let capacity = |m: &M| {
        if capacity_weighting {
            m.input().capacity.gbps
        } else {
            1.0
        }
    };
    let score = |m: &M| f64::from(m.input().quality) * capacity(m);
    let total: f64 = members.iter().map(score).sum();
    if total > 0.0 {
        target.extend(members.iter().map(|m| score(m) / total));
        return;
    }
    let fallback = |m: &M| if m.input().local_up { capacity(m) } else { 0.0 };
    let up: f64 = members.iter().map(fallback).sum();
    target.extend(
        members
            .iter()
            .map(|m| if up > 0.0 { fallback(m) / up } else { 0.0 }),
    );
}

/// The members sorted by uplink id, each once (the first of a repeated id): borrowed when
/// they come so, as a path-quality report's do, so that a step copies nothing per group.
fn sorted_members<M: Member>(members: &[M]) -> std::borrow::Cow<'_, [M]> {
    if members
        .windows(2)
        .all(|w| w[0].input().uplink < w[1].input().uplink)
    {
        return members.into();
    }
    let mut v = members.to_vec();
    v.sort_by_key(|m| m.input().uplink);
    v.dedup_by_key(|m| m.input().uplink);
    v.into()
}

/// One application of weights to the kernel.
#[derive(Clone, Debug)]
pub struct Application {
    /// When it was applied.
    pub at_ns: u64,
    /// Applied fractions of every member (including 0s), by uplink id; sum 1 or all 0.
    fractions: Vec<(UplinkId, f64)>,
    /// The sum of the members' fractions ([`is_member`]), and whether every fraction is a
    /// member's: the replace rule judges every application (25 600 a second at a leaf of a
    /// 64 x 512 fabric, issue 41) by the members' shares, and summed them and told members
    /// from the others again in each of its passes (a quarter of its instructions).
    member_sum: f64,
    every_fraction_a_member: bool,
    /// The kernel weights ([`Self::kernel`]), computed when first asked: the replace rule
    /// judges the fractions, and at a leaf of a 64 x 512 fabric under LQS noise 99 of 100
    /// applications are not written (issue 41), so their quantisation, a tenth of lqd's
    /// CPU there, was work for nothing.
    kernel: std::cell::OnceCell<Vec<(UplinkId, u32)>>,
    /// The largest kernel weight ([`quantize`]'s `max_weight`).
    max_weight: u32,
    /// Applied outside the T_reweight schedule (first application, a path_quality
    /// transition to or from 0, or a member set change; section 6.4).
    pub immediate: bool,
    /// The applied fractions equal the targets: no further step is due.
    pub converged: bool,
}

impl Application {
    /// An application of `fractions` (by uplink id), its kernel weights quantised to
    /// `1..=max_weight` when first asked.
    pub fn new(
        at_ns: u64,
        fractions: Vec<(UplinkId, f64)>,
        max_weight: u32,
        immediate: bool,
        converged: bool,
    ) -> Self {
        // One pass, without a branch per fraction. The sum is the members' in order, as
        // summing them alone gives (adding 0 for the others changes no sum of positive
        // terms; with no member it is 0, of either sign).
        let (mut member_sum, mut every_fraction_a_member) = (0.0f64, true);
        for &(_, f) in &fractions {
            let member = is_member(f);
            every_fraction_a_member &= member;
            member_sum += if member { f } else { 0.0 };
        }
        Self {
            at_ns,
            fractions,
            member_sum,
            every_fraction_a_member,
            kernel: std::cell::OnceCell::new(),
            max_weight,
            immediate,
            converged,
        }
    }

    /// Kernel weights of the group members ([`quantize`] of the fractions, unless
    /// [`Self::with_kernel`] set what is written): fraction-0 members are not members.
    /// Empty when no member is usable (the caller must then remove the route or the group).
    pub fn kernel(&self) -> &[(UplinkId, u32)] {
        self.kernel
            .get_or_init(|| quantize(&self.fractions, self.max_weight))
    }

    /// The same application written as `kernel` (the replace rule's bucket counts scaled
    /// to weights, which forward as the fractions' quantisation would not: rule 3 of
    /// [`super::replace`]).
    pub fn with_kernel(self, kernel: Vec<(UplinkId, u32)>) -> Self {
        Self {
            kernel: std::cell::OnceCell::from(kernel),
            ..self
        }
    }

    /// Applied fractions of every member (including 0s), by uplink id; sum 1 or all 0.
    pub fn fractions(&self) -> &[(UplinkId, f64)] {
        &self.fractions
    }

    /// The sum of the members' fractions (those that are [`is_member`]), in order.
    pub fn member_sum(&self) -> f64 {
        self.member_sum
    }

    /// Every fraction is a member's ([`is_member`]): none is 0.
    pub fn every_fraction_a_member(&self) -> bool {
        self.every_fraction_a_member
    }

    /// The members: the uplinks with a positive (finite) fraction ([`is_member`]), in
    /// order; the kernel weights' ids without computing them.
    pub fn members(&self) -> impl Iterator<Item = UplinkId> + '_ {
        self.fractions
            .iter()
            .filter(|(_, f)| is_member(*f))
            .map(|(id, _)| *id)
    }

    /// Some member is usable ([`Self::kernel`] is not empty).
    pub fn has_members(&self) -> bool {
        self.members().next().is_some()
    }
}

/// Two applications are equal when everything they say is, their kernel weights included
/// (computed if need be).
impl PartialEq for Application {
    fn eq(&self, other: &Self) -> bool {
        self.at_ns == other.at_ns
            && self.fractions == other.fractions
            && self.immediate == other.immediate
            && self.converged == other.converged
            && self.kernel() == other.kernel()
    }
}

/// Damping state of one destination.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DestinationWeights {
    members: Vec<UplinkId>,
    qualities: Vec<u8>,
    up: Vec<bool>,
    target: Vec<f64>,
    applied: Vec<f64>,
    last_apply_ns: Option<u64>,
    /// Integral weight function only: per-member state, signals, last step, and whether a
    /// step is pending (`None` in seed mode).
    integral: Vec<MemberState>,
    signals: Vec<MemberSignal>,
    capacities: Vec<Capacity>,
    last_step_ns: Option<u64>,
    at_rest: Option<bool>,
    /// [`Self::due_at`] as last computed; cleared by every change.
    due: DueCache,
}

/// A cached due time (see [`DestinationWeights::due_at`]): a leaf of 512 groups asks every
/// group at every step whether a damped step is due, and the answer compares 64-member
/// vectors (issue 15). Not part of the state: two states that differ only here are equal.
#[derive(Clone, Debug, Default)]
struct DueCache(std::cell::Cell<Option<Option<u64>>>);

impl PartialEq for DueCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl DestinationWeights {
    /// New inputs (path qualities changed or were re-evaluated). Returns the application
    /// when one happens now; otherwise the new target waits for [`Self::next_due`].
    pub fn update(
        &mut self,
        config: &ControllerConfig,
        members: &[MemberInput],
        now_ns: u64,
    ) -> Option<Application> {
        self.update_with(config, members, &[], now_ns)
    }

    /// [`Self::update`] with the members' congestion and capacity signals, which only the
    /// integral weight function reads (members without a signal: no entry); the members
    /// as inputs or as a report's qualities ([`Member`]).
    pub fn update_with<M: Member>(
        &mut self,
        config: &ControllerConfig,
        members: &[M],
        signals: &[MemberSignal],
        now_ns: u64,
    ) -> Option<Application> {
        self.update_reusing(
            config,
            members,
            signals,
            now_ns,
            &mut SpareFractions::default(),
        )
    }

    /// [`Self::update_with`], an application's fractions taken from `spare` where it holds
    /// a vector.
    fn update_reusing<M: Member>(
        &mut self,
        config: &ControllerConfig,
        members: &[M],
        signals: &[MemberSignal],
        now_ns: u64,
        spare: &mut SpareFractions,
    ) -> Option<Application> {
        self.due.0.set(None);
        if let WeightFunction::Integral(p) = config.weight_function {
            return self.update_integral(config, &p, members, signals, now_ns, spare);
        }
        // This and the in-place updates below run for every group a step changes, 512 x 64
        // members at a large leaf (issue 15).
        if self.last_apply_ns.is_some() && self.same_members_no_transition(members) {
            // Nearly every update at a leaf under LQS noise (25 600 a second at 64 x 512,
            // issue 41): the same members, sorted, none to or from 0. One pass found it,
            // where the general path (`update_seed`) takes six.
            for ((q, u), m) in self.qualities.iter_mut().zip(&mut self.up).zip(members) {
                let m = m.input();
                (*q, *u) = (m.quality, m.local_up);
            }
            target_weights_into(members, config.capacity_weighting, &mut self.target);
            return self.tick_reusing(config, now_ns, spare);
        }
        self.update_seed(config, members, now_ns, spare)
    }

    /// [`Self::update_with`] for the seed's weight function, whatever the members: the path
    /// its one-pass case takes a shortcut through (the test
    /// `the_one_pass_update_is_the_general_one` holds the two to the same results).
    fn update_seed<M: Member>(
        &mut self,
        config: &ControllerConfig,
        members: &[M],
        now_ns: u64,
        spare: &mut SpareFractions,
    ) -> Option<Application> {
        let sorted = sorted_members(members);
        let sorted = &*sorted;

        let first = self.last_apply_ns.is_none();
        let membership_changed = !sorted
            .iter()
            .map(|m| m.input().uplink)
            .eq(self.members.iter().copied());
        // Section 6.4: a path_quality transition to or from 0 is applied at once. A local
        // uplink going up or down changes the all-zero fallback set: the same kind of
        // event (a path appearing or disappearing).
        let zero_transition = membership_changed
            || sorted
                .iter()
                .zip(&self.qualities)
                .any(|(m, b)| (m.input().quality == 0) != (*b == 0))
            || !sorted
                .iter()
                .map(|m| m.input().local_up)
                .eq(self.up.iter().copied());

        if membership_changed {
            // Carry the applied weights of the members that stay; new ones start at 0.
            let old: BTreeMap<UplinkId, f64> = self
                .members
                .iter()
                .copied()
                .zip(self.applied.iter().copied())
                .collect();
            self.applied = sorted
                .iter()
                .map(|m| old.get(&m.input().uplink).copied().unwrap_or(0.0))
                .collect();
            normalise(&mut self.applied);
            self.members.clear();
            self.members.extend(sorted.iter().map(|m| m.input().uplink));
        }
        self.qualities.clear();
        self.qualities
            .extend(sorted.iter().map(|m| m.input().quality));
        self.up.clear();
        self.up.extend(sorted.iter().map(|m| m.input().local_up));
        target_weights_into(sorted, config.capacity_weighting, &mut self.target);

        if first {
            // Nothing was programmed yet: there is no old distribution to damp from.
            self.applied = self.target.clone();
            return Some(self.finish(config, now_ns, true, spare));
        }
        if zero_transition {
            debug!("path quality transition to or from 0: applying at once (6.4)");
            self.step_zero_transitions(config);
            return Some(self.finish(config, now_ns, true, spare));
        }
        self.tick_reusing(config, now_ns, spare)
    }

    /// `members` are sorted by uplink id, each once, the destination's members in the same
    /// order, and none moves to or from 0 (its path quality, or its local uplink up or
    /// down): what the general path of [`Self::update_with`] finds in several passes.
    fn same_members_no_transition<M: Member>(&self, members: &[M]) -> bool {
        let n = members.len();
        if n != self.members.len() || n != self.qualities.len() || n != self.up.len() {
            return false;
        }
        let mut previous: Option<UplinkId> = None;
        for (i, m) in members.iter().enumerate() {
            let m = m.input();
            if previous.is_some_and(|p| p >= m.uplink)
                || self.members[i] != m.uplink
                || (m.quality == 0) != (self.qualities[i] == 0)
                || m.local_up != self.up[i]
            {
                return false;
            }
            previous = Some(m.uplink);
        }
        true
    }

    /// Starts from weights found in the kernel (a restarted daemon adopting its own
    /// groups), so the first update is a damped step from them rather than a jump to the
    /// target.
    pub fn seed(&mut self, applied: &[(UplinkId, f64)], now_ns: u64) {
        self.due.0.set(None);
        let mut sorted = applied.to_vec();
        sorted.sort_by_key(|(id, _)| *id);
        sorted.dedup_by_key(|(id, _)| *id);
        self.members = sorted.iter().map(|(id, _)| *id).collect();
        self.applied = sorted.iter().map(|(_, w)| *w).collect();
        normalise(&mut self.applied);
        self.target = self.applied.clone();
        self.qualities = Vec::new();
        self.up = Vec::new();
        self.last_apply_ns = Some(now_ns);
    }

    /// When a new target would be applied: the next T_reweight boundary after the last
    /// application (6.4), 0 before the first. A caller may compute the target then rather
    /// than at every change before it (`LoadBalancer::groups_to_compute`).
    pub fn reweight_boundary(&self, t_reweight_ns: u64) -> u64 {
        self.last_apply_ns
            .map_or(0, |t| t.saturating_add(t_reweight_ns))
    }

    /// Apply a damped step if one is due at `now_ns`.
    pub fn tick(&mut self, config: &ControllerConfig, now_ns: u64) -> Option<Application> {
        self.tick_reusing(config, now_ns, &mut SpareFractions::default())
    }

    /// [`Self::tick`], an application's fractions taken from `spare` where it holds one.
    fn tick_reusing(
        &mut self,
        config: &ControllerConfig,
        now_ns: u64,
        spare: &mut SpareFractions,
    ) -> Option<Application> {
        if let WeightFunction::Integral(p) = config.weight_function {
            return self.tick_integral(config, &p, now_ns, spare);
        }
        let due = self.next_due(config, now_ns)?;
        if now_ns < due {
            trace!(
                due,
                now_ns, "reweight deferred to the next T_reweight boundary"
            );
            return None;
        }
        self.due.0.set(None);
        self.step(config);
        Some(self.finish(config, now_ns, false, spare))
    }

    /// When the next damped step is due (at or after `now_ns`), `None` when converged.
    pub fn next_due(&self, config: &ControllerConfig, now_ns: u64) -> Option<u64> {
        self.due_at(config).map(|t| t.max(now_ns))
    }

    /// When the next damped step is due, independent of the time of asking (0: at once);
    /// `None` when converged.
    fn due_at(&self, config: &ControllerConfig) -> Option<u64> {
        if let Some(due) = self.due.0.get() {
            return due;
        }
        let due = self.compute_due_at(config);
        self.due.0.set(Some(due));
        due
    }

    fn compute_due_at(&self, config: &ControllerConfig) -> Option<u64> {
        if let Some(rest) = self.at_rest {
            if rest {
                return None;
            }
            return Some(
                self.last_step_ns
                    .map_or(0, |t| t.saturating_add(config.t_reweight_ns())),
            );
        }
        if self.converged() {
            return None;
        }
        Some(
            self.last_apply_ns
                .map_or(0, |t| t.saturating_add(config.t_reweight_ns())),
        )
    }

    /// Are the applied fractions at the targets (integral: is the controller at rest)?
    pub fn converged(&self) -> bool {
        match self.at_rest {
            Some(rest) => rest && self.applied == self.target,
            None => self.applied == self.target,
        }
    }

    /// Integral weight function: new inputs (see [`integral`]).
    fn update_integral<M: Member>(
        &mut self,
        config: &ControllerConfig,
        p: &IntegralParams,
        members: &[M],
        signals: &[MemberSignal],
        now_ns: u64,
        spare: &mut SpareFractions,
    ) -> Option<Application> {
        let sorted = sorted_members(members);
        let ids: Vec<UplinkId> = sorted.iter().map(|m| m.input().uplink).collect();
        let qualities: Vec<u8> = sorted.iter().map(|m| m.input().quality).collect();
        let up: Vec<bool> = sorted.iter().map(|m| m.input().local_up).collect();
        let first = self.last_apply_ns.is_none();
        let membership_changed = ids != self.members;
        let up_changed = up != self.up;
        // Eligibility changes are failures or recoveries: at once (6.4). A member's signal
        // is looked for first at the member's own place (a report lists both in the same
        // order), then searched: a search per member was quadratic in a group's size.
        let live = |sg: &[MemberSignal], at: usize, id: UplinkId| {
            match sg.get(at) {
                Some(s) if s.uplink == id => Some(s),
                _ => sg.iter().find(|s| s.uplink == id),
            }
            .is_none_or(|s| s.cl.is_none() || s.live)
        };
        let zero_transition = membership_changed
            || up != self.up
            || ids
                .iter()
                .enumerate()
                .any(|(at, id)| live(signals, at, *id) != live(&self.signals, at, *id));
        if membership_changed || self.integral.len() != ids.len() {
            let old: BTreeMap<UplinkId, (f64, MemberState)> = self
                .members
                .iter()
                .copied()
                .zip(self.applied.iter().copied().enumerate().map(|(k, w)| {
                    // After `seed` (weights adopted from the kernel) there is no state yet.
                    (w, self.integral.get(k).copied().unwrap_or_default())
                }))
                .collect();
            let carried: Vec<(f64, MemberState)> = ids
                .iter()
                .map(|id| {
                    old.get(id)
                        .copied()
                        .unwrap_or((0.0, MemberState::default()))
                })
                .collect();
            self.applied = carried.iter().map(|x| x.0).collect();
            self.integral = carried.iter().map(|x| x.1).collect();
            normalise(&mut self.applied);
        }
        self.signals = ids
            .iter()
            .map(|id| {
                signals
                    .iter()
                    .find(|s| s.uplink == *id)
                    .copied()
                    .unwrap_or(MemberSignal {
                        uplink: *id,
                        ..MemberSignal::default()
                    })
            })
            .collect();
        for (st, sg) in self.integral.iter_mut().zip(&self.signals) {
            st.observe(p, sg.available_gbps, now_ns);
        }
        self.capacities = sorted.iter().map(|m| m.input().capacity).collect();
        self.members = ids;
        self.qualities = qualities;
        self.up = up;
        self.target.resize(self.members.len(), 0.0);
        if !first && !membership_changed && !up_changed && self.all_silent() {
            // Every helper fell silent together (6.5 failed or aged, all members at once)
            // while every local uplink stayed as it was: the common cause is this
            // receiver or its whole fabric, not one path, and no member is singled out.
            // The seed's all-zero fallback (6.3, equal weights) would move every flow; the
            // weights in force are held until a helper is heard again (then the recovery
            // is applied at once, 6.4). A local uplink going down is still applied at once.
            debug!("every helper silent at once: weights held (integral)");
            self.target = self.applied.clone();
            self.at_rest = Some(true);
            return None;
        }
        self.at_rest = Some(false);
        if first || zero_transition {
            self.integral_targets(p, false);
            self.applied = self.target.clone();
            self.last_step_ns = Some(now_ns);
            return Some(self.finish(config, now_ns, true, spare));
        }
        self.tick_integral(config, p, now_ns, spare)
    }

    /// Integral function: every member has an entry and none is live (every helper
    /// failed or aged out at once).
    fn all_silent(&self) -> bool {
        !self.signals.is_empty() && self.signals.iter().all(|s| s.cl.is_some() && !s.live)
    }

    /// Targets from the current state; with `step`, one controller step first.
    fn integral_targets(&mut self, p: &IntegralParams, step: bool) -> bool {
        // Eligible: the local uplink is up and the path is not failed (heartbeat, ageing,
        // 6.5). Not `quality > 0`: on an all-loaded fabric every LQS is ~0 (A.4 clamps at
        // U ~ 1) although every path forwards (docs/weights.md names the departure). Once
        // some spine has advertised the remote node, a member whose spine has not is not
        // confirmed by the fast plane (4.1) and gets nothing: the local-only fallback (6.1)
        // is for a remote node no spine advertises.
        let any_entry = self.signals.iter().any(|s| s.cl.is_some());
        let eligible: Vec<bool> = (0..self.members.len())
            .map(|i| {
                let s = &self.signals[i];
                self.up[i]
                    && if any_entry {
                        s.cl.is_some() && s.live
                    } else {
                        true
                    }
            })
            .collect();
        let capacity: Vec<f64> = (0..self.members.len())
            .map(|i| integral::path_capacity(self.capacity_of(i), &self.integral[i]))
            .collect();
        let congestion: Vec<f64> = self.signals.iter().map(integral::congestion).collect();
        let headroom: Vec<f64> = (0..self.members.len())
            .map(|i| integral::headroom(&self.signals[i], self.capacity_of(i), &self.integral[i]))
            .collect();
        let floors: Vec<f64> = (0..self.members.len())
            .map(|i| {
                if self.capacity_of(i).source.is_provisioned() {
                    p.floor
                } else {
                    p.floor_estimated
                }
            })
            .collect();
        let mut changed = false;
        let mut frozen = self.integral.clone();
        let state = if step {
            &mut self.integral
        } else {
            &mut frozen
        };
        let t = integral::step(
            p,
            &floors,
            &eligible,
            &capacity,
            &congestion,
            &headroom,
            &self.applied,
            state,
            &mut changed,
        );
        self.target = match t {
            Some(t) => t,
            None => {
                // Nothing eligible: the all-zero fallback of 6.3 over the up uplinks.
                let n = self.up.iter().filter(|u| **u).count();
                self.up
                    .iter()
                    .map(|u| if *u && n > 0 { 1.0 / n as f64 } else { 0.0 })
                    .collect()
            }
        };
        step && changed
    }

    /// Integral weight function: one step if due; an application when a fraction moved by
    /// at least the hysteresis.
    fn tick_integral(
        &mut self,
        config: &ControllerConfig,
        p: &IntegralParams,
        now_ns: u64,
        spare: &mut SpareFractions,
    ) -> Option<Application> {
        let due = self.next_due(config, now_ns)?;
        if now_ns < due {
            return None;
        }
        self.due.0.set(None);
        let changed = self.integral_targets(p, true);
        self.last_step_ns = Some(now_ns);
        self.at_rest = Some(!changed);
        let moved = self
            .applied
            .iter()
            .zip(&self.target)
            .map(|(a, t)| (a - t).abs())
            .fold(0.0f64, f64::max);
        if moved >= p.hysteresis.max(1e-12) {
            self.applied = self.target.clone();
            return Some(self.finish(config, now_ns, false, spare));
        }
        if !changed {
            // At rest within the hysteresis: what is programmed stays; the target shown is
            // what is applied, so that the schedule ends.
            self.target = self.applied.clone();
        }
        None
    }

    fn capacity_of(&self, i: usize) -> Capacity {
        self.capacities.get(i).copied().unwrap_or_default()
    }

    /// Applied fractions by uplink id.
    pub fn applied(&self) -> Vec<(UplinkId, f64)> {
        self.by_member(&self.applied).collect()
    }

    /// Target fractions by uplink id.
    pub fn target(&self) -> Vec<(UplinkId, f64)> {
        self.by_member(&self.target).collect()
    }

    /// `values` (one per member, in the members' order) paired with the members' uplinks.
    fn by_member<'s>(&'s self, values: &'s [f64]) -> impl Iterator<Item = (UplinkId, f64)> + 's {
        self.members.iter().copied().zip(values.iter().copied())
    }

    /// One damped step (6.4): `w += g (target - w)`, members with target 0 dropped at once
    /// (pruning a dead path cannot oscillate), renormalised to 1; once every share is within
    /// `0.5 / max_weight` of its target the step snaps to it so that the schedule ends.
    /// That is half a kernel weight unit when one member carries everything and more than
    /// that otherwise ([`quantize`] maps the largest share to `max_weight`): with 64 members
    /// and the default 255, a share moving by up to an eighth of itself gets there in one
    /// step. What the snap skips (at most 0.5 / 255 of the traffic) is under half of one
    /// resilient bucket at the default 128 buckets, so a flow moves at most one step early.
    fn step(&mut self, config: &ControllerConfig) {
        let g = config.gain;
        for (w, t) in self.applied.iter_mut().zip(&self.target) {
            *w = if *t == 0.0 { 0.0 } else { *w + g * (*t - *w) };
        }
        normalise(&mut self.applied);
        self.settle_if_close(config);
    }

    /// Within half a weight unit of the target everywhere: the target itself (converged).
    /// The unit is the kernel's, as [`quantize`] maps fractions (the largest to the
    /// largest weight), not 1/255 of the whole: in a group of 64 that was an eighth of a
    /// member's share, so every damped step under a fabric's LQS noise of a few units
    /// landed "close" and snapped to the noisy target, and the noise reached the kernel
    /// undamped (issue 41).
    fn settle_if_close(&mut self, config: &ControllerConfig) {
        let largest = self.target.iter().copied().fold(0.0, f64::max);
        let eps = 0.5 * largest / f64::from(config.weight_resolution.max_weight());
        let close = self
            .applied
            .iter()
            .zip(&self.target)
            .all(|(w, t)| (w - t).abs() <= eps);
        if close {
            self.applied.clone_from(&self.target);
        }
    }

    /// Section 6.4's exception, and only it: the paths whose quality went to 0 leave at
    /// once, and the paths back from 0 (or new) take their damped step from 0 at once; the
    /// other members keep their applied weights (renormalised), and move at their next
    /// T_reweight boundary. A failure elsewhere is no reason to skip the others' damping.
    fn step_zero_transitions(&mut self, config: &ControllerConfig) {
        let g = config.gain;
        for (w, t) in self.applied.iter_mut().zip(&self.target) {
            if *t == 0.0 {
                *w = 0.0;
            } else if *w == 0.0 {
                *w = g * *t;
            }
        }
        normalise(&mut self.applied);
        self.settle_if_close(config);
    }

    fn finish(
        &mut self,
        config: &ControllerConfig,
        now_ns: u64,
        immediate: bool,
        spare: &mut SpareFractions,
    ) -> Application {
        // Every application, immediate or scheduled, is this interval's one (6.4).
        self.last_apply_ns = Some(now_ns);
        let mut fractions = spare.take();
        fractions.extend(self.by_member(&self.applied));
        Application::new(
            now_ns,
            fractions,
            config.weight_resolution.max_weight(),
            immediate,
            self.converged(),
        )
    }
}

/// Scale to sum 1; all 0 stays all 0.
fn normalise(w: &mut [f64]) {
    let s: f64 = w.iter().sum();
    if s > 0.0 && s.is_finite() {
        for x in w.iter_mut() {
            *x /= s;
        }
    } else {
        w.iter_mut().for_each(|x| *x = 0.0);
    }
}

/// Whether an applied fraction makes its uplink a member of the kernel's group: positive
/// and finite ([`quantize`] leaves the others out; a kernel weight cannot be 0).
pub fn is_member(fraction: f64) -> bool {
    fraction.is_finite() && fraction > 0.0
}

/// Integer kernel weights 1..=`max_weight` for fractions, by largest remainder.
///
/// The total is chosen so that the largest fraction maps to (at most) `max_weight`, which
/// uses the whole resolution. Members with fraction 0 (or not finite) are left out: a
/// kernel weight cannot be 0, so they must leave the group. Ties of remainders go to the
/// member listed first (callers list by uplink id), so the result is deterministic.
pub fn quantize(fractions: &[(UplinkId, f64)], max_weight: u32) -> Vec<(UplinkId, u32)> {
    let max_weight = max_weight.max(1);
    let positive = is_member;
    let (mut n, mut sum, mut max) = (0usize, 0.0f64, 0.0f64);
    for &(_, f) in fractions {
        if positive(f) {
            n += 1;
            sum += f;
            max = max.max(f);
        }
    }
    let fmax = max / sum;
    // Positive finite inputs give a positive sum, but an overflow to infinity must not.
    if n == 0 || !sum.is_finite() || sum <= 0.0 || fmax <= 0.0 {
        return Vec::new();
    }
    let total = (f64::from(max_weight) / fmax).floor();
    // This runs for every group a step applies (25 600 a second at a leaf of a 64 x 512
    // fabric under LQS noise, issue 41): one allocation, the output's. The remainders
    // are kept as their IEEE 754 bit patterns, which order as the values do for finite
    // values >= 0, so that the selection compares integers; a group of up to
    // `ON_STACK` members keeps them on the stack.
    const ON_STACK: usize = 128;
    let mut out: Vec<(UplinkId, u32)> = Vec::with_capacity(n);
    let (mut keys_stack, mut scratch_stack) = ([0u64; ON_STACK], [0u64; ON_STACK]);
    let (mut keys_heap, mut scratch_heap) = (Vec::new(), Vec::new());
    let (keys, scratch): (&mut [u64], &mut [u64]) = if n <= ON_STACK {
        (&mut keys_stack[..n], &mut scratch_stack[..n])
    } else {
        keys_heap.resize(n, 0);
        scratch_heap.resize(n, 0);
        (&mut keys_heap, &mut scratch_heap)
    };
    let mut floors = 0u64;
    for (&(id, f), key) in fractions
        .iter()
        .filter(|(_, f)| positive(*f))
        .zip(keys.iter_mut())
    {
        // exact >= 0 and at most `max_weight` (f / sum <= fmax): the conversion truncates,
        // which is the floor (and, unlike `f64::floor` on the baseline x86-64 target, not
        // a library call), and fits. Through i64, which x86-64 converts in one instruction
        // each way (u64 takes a sequence).
        let exact = f / sum * total;
        let fl = exact as i64;
        floors += fl as u64;
        out.push((id, fl as u32));
        *key = (exact - fl as f64).to_bits();
    }
    let extra = (total as u64).saturating_sub(floors).min(n as u64) as usize;
    if extra > 0 {
        // The `extra` largest remainders get one more; of equal remainders the member
        // listed first (a stable sort's choice). The extra-th largest is `threshold`:
        // every remainder above it is taken, and as many equal to it as are left, first
        // listed first.
        scratch.copy_from_slice(keys);
        let (_, threshold, _) = scratch.select_nth_unstable_by(extra - 1, |a, b| b.cmp(a));
        let threshold = *threshold;
        let above = keys.iter().filter(|k| **k > threshold).count();
        let mut at_threshold = (extra - above) as u32;
        // Without branches: whether a remainder is above the threshold is a coin toss per
        // member, and a mispredicted branch per member was a quarter of this function.
        for (w, &k) in out.iter_mut().zip(keys.iter()) {
            let tie = u32::from(k == threshold) & u32::from(at_threshold > 0);
            w.1 = w.1.saturating_add(u32::from(k > threshold) | tie);
            at_threshold -= tie;
        }
    }
    for w in &mut out {
        w.1 = w.1.clamp(1, max_weight);
    }
    out
}

/// The cumulative upper bounds the kernel gives the members of a resilient group of
/// `buckets` buckets, in the order given (net/ipv4/nexthop.c, `nh_res_group_rebalance`):
/// `DIV_ROUND_CLOSEST(buckets * cumulative_weight, total_weight)`. Member i owns the
/// buckets between bounds i-1 and i.
pub fn resilient_bounds(buckets: u16, weights: &[(UplinkId, u32)]) -> Vec<u64> {
    let total = weights.iter().map(|x| u64::from(x.1)).sum::<u64>().max(1);
    let mut cum = 0u64;
    weights
        .iter()
        .map(|x| {
            cum += u64::from(x.1);
            (u64::from(buckets) * cum + total / 2) / total
        })
        .collect()
}

/// Buckets each member of a resilient group of `buckets` buckets wants, computed as the
/// kernel does ([`resilient_bounds`]), members in id order.
pub fn bucket_shares(buckets: u16, weights: &[(UplinkId, u32)]) -> Vec<(UplinkId, u64)> {
    let mut w: Vec<(UplinkId, u32)> = weights.to_vec();
    w.sort_by_key(|(id, _)| *id);
    let mut prev = 0u64;
    (w.iter().zip(resilient_bounds(buckets, &w)))
        .map(|((id, _), upper)| {
            let share = upper - prev;
            prev = upper;
            (*id, share)
        })
        .collect()
}

/// The minimum fraction of the `buckets` buckets of a resilient group that must move when
/// its weights change from `old` to `new`: sum of the positive differences of the bucket
/// shares, divided by the bucket count. Members absent from one side have share 0.
pub fn remap(buckets: u16, old: &[(UplinkId, u32)], new: &[(UplinkId, u32)]) -> f64 {
    if buckets == 0 {
        return 0.0;
    }
    let old: BTreeMap<UplinkId, u64> = bucket_shares(buckets, old).into_iter().collect();
    let moved: u64 = bucket_shares(buckets, new)
        .into_iter()
        .map(|(id, b)| b.saturating_sub(old.get(&id).copied().unwrap_or(0)))
        .sum();
    moved as f64 / f64::from(buckets)
}

/// Whether replacing a resilient group's weights `old` with `new` would move no bucket:
/// the same members in the same order, each wanting the same number of the `buckets`
/// buckets. The kernel only ever migrates buckets towards what members want
/// (`nh_res_group_rebalance`, then the table's upkeep), so such a replace forwards every
/// flow exactly as before, yet still costs an RCU grace period (`replace_nexthop_grp`).
/// With few buckets per member (128 buckets for 64 members: 2 each) most small reweights
/// are of this kind.
pub fn moves_no_bucket(buckets: u16, old: &[(UplinkId, u32)], new: &[(UplinkId, u32)]) -> bool {
    old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| a.0 == b.0)
        && bucket_shares(buckets, old) == bucket_shares(buckets, new)
}

/// Damping state of every group (or of any other key: the simulator and the tests key it
/// by prefix).
#[derive(Clone, Debug)]
pub struct WeightController<K = GroupKey> {
    config: ControllerConfig,
    destinations: BTreeMap<K, DestinationWeights>,
    /// The earliest [`DestinationWeights`] due time, `Some(None)` when all converged;
    /// `None` when a change may have moved it. The daemon asks at every wake-up, and
    /// asking every destination each time was a visible share of a 512-group leaf's CPU
    /// (issue 15).
    earliest_due: std::cell::Cell<Option<Option<u64>>>,
    /// The fraction vectors of applications given back ([`Self::recycle`]), for the next.
    spare: SpareFractions,
}

/// Fraction vectors of applications no longer needed, for the next ones: at a leaf of a
/// 64 x 512 fabric under LQS noise a step makes 23 000 applications a second of 64
/// fractions each, and 94 in 100 are not written (the replace rule finds the kernel
/// forwarding as they would); allocating and freeing each one's vector was 3 % of lqd's
/// samples (issue 41).
#[derive(Debug, Default)]
pub struct SpareFractions(Vec<Vec<(UplinkId, f64)>>);

/// A copy starts with no spare vectors: they hold no state, only capacity.
impl Clone for SpareFractions {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl SpareFractions {
    /// At most this many vectors are kept: more than a step's applications at that leaf
    /// (512 groups), so the vectors of one step serve the next.
    const KEPT: usize = 1024;

    /// An empty vector, reused when one is spare.
    fn take(&mut self) -> Vec<(UplinkId, f64)> {
        let mut v = self.0.pop().unwrap_or_default();
        v.clear();
        v
    }

    fn give(&mut self, v: Vec<(UplinkId, f64)>) {
        if self.0.len() < Self::KEPT && v.capacity() > 0 {
            self.0.push(v);
        }
    }
}

impl<K: Ord + Clone> WeightController<K> {
    /// A controller for a configuration (validated here).
    pub fn new(config: ControllerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            destinations: BTreeMap::new(),
            earliest_due: std::cell::Cell::new(None),
            spare: SpareFractions::default(),
        })
    }

    /// Gives back an application no longer needed (judged by the replace rule and not
    /// kept): its fractions' vector serves a later application.
    pub fn recycle(&mut self, app: Application) {
        self.spare.give(app.fractions);
    }

    /// The configuration.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// New inputs for one destination.
    pub fn update_one(
        &mut self,
        key: K,
        members: &[MemberInput],
        now_ns: u64,
    ) -> Option<Application> {
        self.update_one_with(key, members, &[], now_ns)
    }

    /// New inputs for one destination, with the members' signals (integral function).
    pub fn update_one_with<M: Member>(
        &mut self,
        key: K,
        members: &[M],
        signals: &[MemberSignal],
        now_ns: u64,
    ) -> Option<Application> {
        self.earliest_due.set(None);
        self.destinations.entry(key).or_default().update_with(
            &self.config,
            members,
            signals,
            now_ns,
        )
    }

    /// Apply every damped step due at `now_ns`.
    pub fn tick(&mut self, now_ns: u64) -> Vec<(K, Application)> {
        self.earliest_due.set(None);
        let (cfg, spare) = (&self.config, &mut self.spare);
        self.destinations
            .iter_mut()
            .filter_map(|(k, d)| d.tick_reusing(cfg, now_ns, spare).map(|a| (k.clone(), a)))
            .collect()
    }

    /// The earliest time at which [`Self::tick`] has work, `None` when all converged.
    pub fn next_due(&self, now_ns: u64) -> Option<u64> {
        let earliest = self.earliest_due.get().unwrap_or_else(|| {
            let e = self
                .destinations
                .values()
                .filter_map(|d| d.due_at(&self.config))
                .min();
            self.earliest_due.set(Some(e));
            e
        });
        earliest.map(|t| t.max(now_ns))
    }

    /// Seeds a destination with weights adopted from the kernel (see
    /// [`DestinationWeights::seed`]).
    pub fn seed(&mut self, key: K, applied: &[(UplinkId, f64)], now_ns: u64) {
        self.earliest_due.set(None);
        self.destinations
            .entry(key)
            .or_default()
            .seed(applied, now_ns);
    }

    /// The state of one destination.
    pub fn destination(&self, key: &K) -> Option<&DestinationWeights> {
        self.destinations.get(key)
    }

    /// Every destination's state, in ascending order of key.
    pub fn destinations(&self) -> std::collections::btree_map::Iter<'_, K, DestinationWeights> {
        self.destinations.iter()
    }

    /// Moves a destination's damping state to another key (its group was renamed: every
    /// destination of the group moved together).
    pub fn rekey(&mut self, old: &K, new: K) {
        self.earliest_due.set(None);
        if let Some(d) = self.destinations.remove(old) {
            self.destinations.insert(new, d);
        }
    }

    /// Forgets one destination (its group went).
    pub fn forget(&mut self, key: &K) {
        self.earliest_due.set(None);
        self.destinations.remove(key);
    }
}

impl WeightController<GroupKey> {
    /// New path qualities for the groups in `report` (those whose inputs changed); every
    /// other group that `keep` names is ticked (its damped step or integral step, as an
    /// update with unchanged inputs would do), the rest are forgotten. Returns the
    /// applications that happen now. The one difference from updating every group: an
    /// unchanged group's peak-held capacity estimate decays at its next update, which the
    /// caller forces periodically.
    pub fn update_changed(
        &mut self,
        report: &PathQualityReport,
        mut keep: impl FnMut(&GroupKey) -> bool,
        now_ns: u64,
    ) -> Vec<(GroupKey, Application)> {
        // Both maps are sorted by key and visited in order: merges, not searches.
        let mut reported = SortedProbe::new(report.groups.keys());
        let before = self.destinations.len();
        self.destinations
            .retain(|k, _| reported.contains(k) || keep(k));
        if self.destinations.len() != before {
            self.earliest_due.set(None);
        }
        self.update_reported(report, now_ns)
    }

    /// [`Self::update_changed`] when the set of groups is the one of the last update: no
    /// destination is forgotten, and only those due are ticked (a step at a leaf of a
    /// 64 x 512 fabric recomputes a handful of its 512 groups).
    pub fn update_reported(
        &mut self,
        report: &PathQualityReport,
        now_ns: u64,
    ) -> Vec<(GroupKey, Application)> {
        // Nothing reported and, as of the last walk (nothing changed since), nothing due
        // yet: there is nothing to tick and that earliest due time stands. A leaf steps
        // a hundred times a second with nothing to compute, and each walk of 512
        // destinations was most of such a step (issue 15).
        if report.groups.is_empty()
            && let Some(earliest) = self.earliest_due.get()
            && earliest.is_none_or(|t| t > now_ns)
        {
            return Vec::new();
        }
        self.earliest_due.set(None);
        let (cfg, spare) = (&self.config, &mut self.spare);
        let signals_of = |k: &GroupKey| report.signals.get(k).map_or(&[][..], Vec::as_slice);
        let (mut out, mut ticked) = (Vec::with_capacity(report.groups.len()), Vec::new());
        // One walk of the destinations beside the reported groups (both sorted by key): a
        // reported one is updated, any other ticked if its next step is due, and the
        // earliest due time is taken on the way (`next_due`, asked at every wake-up of the
        // daemon, does not walk them all again). A search per reported group was 1.6 % of
        // lqd's samples at a leaf of a 64 x 512 fabric under `bench scale`'s churn (issue 41).
        let mut reported = report.groups.iter().peekable();
        let mut new_keys = Vec::new();
        let mut earliest: Option<u64> = None;
        for (k, dw) in &mut self.destinations {
            while let Some((new, _)) = reported.next_if(|(r, _)| *r < k) {
                new_keys.push(new);
            }
            if let Some((_, d)) = reported.next_if(|(r, _)| *r == k) {
                // The report's members read in place (`Member`), not copied.
                if let Some(a) = dw.update_reusing(cfg, &d.members, signals_of(k), now_ns, spare) {
                    out.push((k.clone(), a));
                }
            } else if dw.next_due(cfg, now_ns).is_some_and(|due| due <= now_ns)
                && let Some(a) = dw.tick_reusing(cfg, now_ns, spare)
            {
                ticked.push((k.clone(), a));
            }
            if let Some(due) = dw.due_at(cfg) {
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
            }
        }
        new_keys.extend(reported.map(|(k, _)| k));
        if !new_keys.is_empty() {
            for k in new_keys {
                let dw = self.destinations.entry(k.clone()).or_default();
                let members = &report.groups[k].members;
                if let Some(a) = dw.update_reusing(cfg, members, signals_of(k), now_ns, spare) {
                    out.push((k.clone(), a));
                }
                if let Some(due) = dw.due_at(cfg) {
                    earliest = Some(earliest.map_or(due, |e| e.min(due)));
                }
            }
            // The updates in key order, as the report lists them.
            out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        // The updates first, then the ticks.
        out.append(&mut ticked);
        self.earliest_due.set(Some(earliest));
        out
    }

    /// New path qualities for every group. Groups absent from the report are forgotten.
    /// Returns the applications that happen now.
    pub fn update(
        &mut self,
        report: &PathQualityReport,
        now_ns: u64,
    ) -> Vec<(GroupKey, Application)> {
        self.update_changed(report, |_| false, now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::controller::path_quality::tests::{fabric, key, prefix, value};
    use crate::core::controller::path_quality::{CapacitySource, PathSnapshot, compute};
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn members(q: &[u8]) -> Vec<MemberInput> {
        q.iter()
            .enumerate()
            .map(|(i, &quality)| MemberInput {
                uplink: 11 + i as u32,
                quality,
                local_up: true,
                capacity: Capacity::new(400.0, CapacitySource::Link).unwrap(),
            })
            .collect()
    }

    /// [`members`] with path capacities from the slow plane.
    fn members_with(q: &[u8], gbps: &[f64]) -> Vec<MemberInput> {
        let mut m = members(q);
        for (x, g) in m.iter_mut().zip(gbps) {
            x.capacity = Capacity::new(*g, CapacitySource::Bgp).unwrap();
        }
        m
    }

    fn pct(a: &Application, uplink: UplinkId) -> String {
        let f = a
            .fractions()
            .iter()
            .find(|(id, _)| *id == uplink)
            .map_or(f64::NAN, |x| x.1);
        format!("{:.2}", f * 100.0)
    }

    /// A report of groups `keys`, each member i of quality `q[i]`.
    fn report_of(keys: &[(GroupKey, [u8; 3])]) -> PathQualityReport {
        use crate::core::controller::path_quality::{
            DestinationQuality, MemberQuality, QualitySource, node,
        };
        let mut r = PathQualityReport::default();
        for (k, q) in keys {
            let members = q
                .iter()
                .enumerate()
                .map(|(i, &quality)| MemberQuality {
                    uplink: i as u32 + 1,
                    spine: node(0, i as u32 + 1),
                    capacity: Capacity::new(100.0, CapacitySource::Link).unwrap(),
                    local: 255,
                    remote: Some(quality),
                    quality,
                    gray_failure: false,
                })
                .collect();
            r.groups.insert(
                k.clone(),
                DestinationQuality {
                    source: QualitySource::Remote,
                    members,
                },
            );
        }
        r
    }

    /// `update_reported` as it was, a search per reported group and then a walk of every
    /// destination: the reference the one walk is held to.
    fn update_reported_by_search(
        wc: &mut WeightController,
        report: &PathQualityReport,
        now_ns: u64,
    ) -> Vec<(GroupKey, Application)> {
        let mut out = Vec::new();
        for (k, d) in &report.groups {
            let signals = report.signals.get(k).map_or(&[][..], Vec::as_slice);
            let dw = wc.destinations.entry(k.clone()).or_default();
            if let Some(a) = dw.update_with(&wc.config, &d.members, signals, now_ns) {
                out.push((k.clone(), a));
            }
        }
        let mut earliest: Option<u64> = None;
        for (k, d) in &mut wc.destinations {
            if d.next_due(&wc.config, now_ns)
                .is_some_and(|due| due <= now_ns)
                && !report.groups.contains_key(k)
                && let Some(a) = d.tick(&wc.config, now_ns)
            {
                out.push((k.clone(), a));
            }
            if let Some(due) = d.due_at(&wc.config) {
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
            }
        }
        wc.earliest_due.set(Some(earliest));
        out
    }

    /// The update's one walk of the destinations beside the reported groups gives the
    /// applications, states and next due time of a search per reported group: over random
    /// runs where groups are reported or not, new groups come before, between and after
    /// the known ones, and steps fall between and on T_reweight boundaries (the seed's
    /// weight function, and in one run of four the integral one).
    #[test]
    fn one_walk_updates_as_a_search_per_group() {
        use crate::core::controller::path_quality::node;
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        let (mut updated, mut ticked, mut new) = (0, 0, 0);
        for run in 0..100 {
            let mut cfg = ControllerConfig {
                gain: [0.25, 0.5, 1.0][run % 3],
                ..ControllerConfig::default()
            };
            if run % 4 == 3 {
                cfg.weight_function = WeightFunction::Integral(IntegralParams::default());
            }
            let mut walk = WeightController::new(cfg).unwrap();
            let mut search = WeightController::new(cfg).unwrap();
            let mut now = 0;
            for step in 0..40 {
                now += rng.random_range(1..15) * MS;
                let mut changed = Vec::new();
                for r in 0..24 {
                    let key = GroupKey::remote(node(0, r * 10));
                    if rng.random_bool(0.25) {
                        new += usize::from(!walk.destinations.contains_key(&key));
                        let q = |rng: &mut rand::rngs::SmallRng| rng.random_range(150..=220);
                        changed.push((key, [q(&mut rng), q(&mut rng), q(&mut rng)]));
                    }
                }
                let report = report_of(&changed);
                let a = walk.update_reported(&report, now);
                let b = update_reported_by_search(&mut search, &report, now);
                updated += a
                    .iter()
                    .filter(|(k, _)| report.groups.contains_key(k))
                    .count();
                ticked += a
                    .iter()
                    .filter(|(k, _)| !report.groups.contains_key(k))
                    .count();
                assert_eq!(a, b, "run {run}, step {step}");
                assert_eq!(
                    walk.destinations, search.destinations,
                    "run {run}, step {step}"
                );
                assert_eq!(
                    walk.next_due(now),
                    search.next_due(now),
                    "run {run}, step {step}"
                );
            }
        }
        assert!(
            updated > 1_000 && ticked > 1_000 && new > 1_000,
            "{updated} updated, {ticked} ticked, {new} new"
        );
    }

    /// Recomputing only the changed groups and ticking the others gives the same
    /// applications, step by step, as updating every group with its unchanged inputs; so
    /// does `update_reported` (the same groups throughout, only the due ones ticked).
    #[test]
    fn updating_only_changed_groups_matches_updating_all() {
        use crate::core::controller::path_quality::node;
        let (a, b) = (
            GroupKey::remote(node(0, 100)),
            GroupKey::remote(node(0, 200)),
        );
        for cfg in [
            ControllerConfig::default(),
            ControllerConfig {
                weight_function: WeightFunction::Integral(IntegralParams::default()),
                ..ControllerConfig::default()
            },
        ] {
            same_applications(&a, &b, cfg);
        }
    }

    fn same_applications(a: &GroupKey, b: &GroupKey, cfg: ControllerConfig) {
        let mut all = WeightController::new(cfg).unwrap();
        let mut some = WeightController::new(cfg).unwrap();
        let mut due_only = WeightController::new(cfg).unwrap();
        // Both start equal; then B's remote congests (one input change), A varies; after
        // step 40 nothing changes (reports empty: the damped steps still due are ticked,
        // then none is due).
        let steps: Vec<([u8; 3], [u8; 3])> = (0..60)
            .map(|i| {
                let qa = [255, 200 + (i.min(40) % 3) as u8 * 20, 255];
                let qb = if i < 3 { [255; 3] } else { [255, 20, 255] };
                (qa, qb)
            })
            .collect();
        let mut prev: Option<([u8; 3], [u8; 3])> = None;
        for (i, (qa, qb)) in steps.into_iter().enumerate() {
            let now = 1_000 * MS + i as u64 * 7 * MS;
            let full = report_of(&[(a.clone(), qa), (b.clone(), qb)]);
            let changed: Vec<(GroupKey, [u8; 3])> = [(a.clone(), qa), (b.clone(), qb)]
                .into_iter()
                .filter(|(k, q)| {
                    prev.is_none_or(|(pa, pb)| if k == a { pa != *q } else { pb != *q })
                })
                .collect();
            prev = Some((qa, qb));
            let mut x = all.update(&full, now);
            let mut y = some.update_changed(&report_of(&changed), |k| k == a || k == b, now);
            let mut z = if i == 0 {
                due_only.update_changed(&report_of(&changed), |k| k == a || k == b, now)
            } else {
                due_only.update_reported(&report_of(&changed), now)
            };
            x.sort_by(|p, q| p.0.cmp(&q.0));
            y.sort_by(|p, q| p.0.cmp(&q.0));
            z.sort_by(|p, q| p.0.cmp(&q.0));
            assert_eq!(x, y, "step {i}");
            assert_eq!(x, z, "step {i}: update_reported");
            // The earliest due time `update_reported` leaves behind is the one a walk of
            // every destination finds.
            let walked = due_only.clone();
            walked.earliest_due.set(None);
            assert_eq!(
                due_only.next_due(now),
                walked.next_due(now),
                "step {i}: next_due"
            );
            // (Once nothing changes, updating every group with its unchanged inputs is
            // not a tick: the integral function's estimates go on moving.)
            if i <= 40 {
                assert_eq!(
                    due_only.next_due(now),
                    all.next_due(now),
                    "step {i}: next_due"
                );
            }
        }
    }

    /// The one-pass update (same members, sorted, no transition to or from 0) gives what
    /// the general path gives, state and applications, over random inputs that take both:
    /// noise on every member, paths to and from 0, uplinks down and up, members added and
    /// removed, members unsorted or repeated, and ticks in between. The one-pass side reads
    /// the members as a path-quality report holds them (`MemberQuality`, in place), the
    /// general one as `MemberInput`s. The one-pass side takes its applications' vectors
    /// from spare ones given back (as lqd does, `WeightController::recycle`), some of them
    /// other groups' with other lengths; the general side allocates each.
    #[test]
    fn the_one_pass_update_is_the_general_one() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        let (mut one_pass, mut updates) = (0, 0);
        let mut spare = SpareFractions::default();
        let give_back = |a: Option<Application>, spare: &mut SpareFractions| {
            if let Some(a) = a {
                spare.give(a.fractions);
            }
        };
        for run in 0..200 {
            let cfg = ControllerConfig {
                capacity_weighting: run % 2 == 0,
                gain: [0.25, 0.5, 1.0][run % 3],
                ..ControllerConfig::default()
            };
            let (mut fast, mut general) =
                (DestinationWeights::default(), DestinationWeights::default());
            // A few members, and in one run of four a leaf's 64 or so.
            let n = if run % 4 == 3 {
                rng.random_range(56..72)
            } else {
                rng.random_range(1..8)
            };
            let mut ids: Vec<UplinkId> = (11..11 + n).collect();
            let mut now = 0;
            for _ in 0..60 {
                now += rng.random_range(1..30) * MS;
                if rng.random_bool(0.05) {
                    if rng.random_bool(0.5) && ids.len() > 1 {
                        ids.remove(rng.random_range(0..ids.len()));
                    } else {
                        ids.push(ids.iter().max().unwrap() + 1);
                    }
                }
                // A 64-member group with a few percent of transitions per member would
                // never take the one-pass path: rarer per member in the large runs.
                let rare = if ids.len() > 8 { 1.0 / 16.0 } else { 1.0 };
                let mut m: Vec<MemberInput> = ids
                    .iter()
                    .map(|&uplink| MemberInput {
                        uplink,
                        quality: if rng.random_bool(0.05 * rare) {
                            0
                        } else {
                            rng.random_range(150..=210)
                        },
                        local_up: rng.random_bool(1.0 - 0.03 * rare),
                        capacity: Capacity::new(
                            [100.0, 400.0][rng.random_range(0..2)],
                            CapacitySource::Link,
                        )
                        .unwrap(),
                    })
                    .collect();
                if rng.random_bool(0.03) {
                    m.reverse();
                }
                if rng.random_bool(0.03) {
                    m.push(m[0]);
                }
                if rng.random_bool(0.1) {
                    // Another group's vector, longer or shorter, its contents stale.
                    let len = rng.random_range(1..80);
                    spare.give((0..len).map(|i| (i, 0.5)).collect());
                }
                if rng.random_bool(0.2) {
                    let a = fast.tick_reusing(&cfg, now, &mut spare);
                    assert_eq!(a, general.tick(&cfg, now));
                    give_back(a, &mut spare);
                    continue;
                }
                one_pass += usize::from(
                    fast.last_apply_ns.is_some() && fast.same_members_no_transition(&m),
                );
                updates += 1;
                // The fast side reads the members as a path-quality report holds them (in
                // place, `Member`), the general one as inputs.
                let q: Vec<MemberQuality> = m
                    .iter()
                    .map(|x| MemberQuality {
                        uplink: x.uplink,
                        spine: crate::core::controller::path_quality::node(0, x.uplink),
                        capacity: x.capacity,
                        local: if x.local_up {
                            rng.random_range(1..=255)
                        } else {
                            0
                        },
                        remote: Some(x.quality),
                        quality: x.quality,
                        gray_failure: false,
                    })
                    .collect();
                let a = fast.update_reusing(&cfg, &q, &[], now, &mut spare);
                general.due.0.set(None);
                let b = general.update_seed(&cfg, &m, now, &mut SpareFractions::default());
                assert_eq!(a, b, "run {run} at {now}");
                assert_eq!(fast, general, "run {run} at {now}");
                give_back(a, &mut spare);
            }
        }
        // Both paths were taken, each for a good share of the updates.
        assert!(
            one_pass > updates / 4 && updates - one_pass > updates / 4,
            "{one_pass} of {updates}"
        );
    }

    #[test]
    fn appendix_b_targets() {
        let t = target_weights(&members(&[237, 72, 237, 237]), false);
        let s: Vec<String> = t.iter().map(|x| format!("{:.2}", x * 100.0)).collect();
        assert_eq!(s, ["30.27", "9.20", "30.27", "30.27"]);
        assert!((t.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    /// Appendix B.3 and B.4 in virtual time: g = 0.5, T_reweight = 20 ms, the triggered
    /// advertisement (S2: LQS 72) handled at T = 104 ms.
    #[test]
    fn appendix_b_damped_schedule_and_recovery() {
        let cfg = ControllerConfig::default();
        let mut c = WeightController::new(cfg).unwrap();
        let p = prefix(4);
        // B.1: steady state, equal weights.
        let a = c.update_one(p, &members(&[237, 237, 237, 237]), 0).unwrap();
        assert!(a.immediate && a.converged);
        assert_eq!(pct(&a, 12), "25.00");
        assert_eq!(a.kernel(), [(11, 255), (12, 255), (13, 255), (14, 255)]);
        assert_eq!(c.next_due(50 * MS), None);

        // B.3: S2 drops to 72 at T = 104 ms.
        let a = c
            .update_one(p, &members(&[237, 72, 237, 237]), 104 * MS)
            .unwrap();
        assert!(!a.immediate);
        assert_eq!(pct(&a, 12), "17.10");
        let mut seen = vec![(104, pct(&a, 12))];
        let mut now = 104 * MS;
        while let Some(due) = c.next_due(now) {
            assert!(c.tick(due - 1).is_empty(), "nothing before the boundary");
            let v = c.tick(due);
            assert_eq!(v.len(), 1);
            seen.push((due / MS, pct(&v[0].1, 12)));
            now = due;
            if due >= 184 * MS {
                break;
            }
        }
        let want: Vec<(u64, String)> = [
            (104, "17.10"),
            (124, "13.15"),
            (144, "11.17"),
            (164, "10.18"),
            (184, "9.69"),
        ]
        .iter()
        .map(|(t, s)| (*t, s.to_string()))
        .collect();
        assert_eq!(seen, want);
        // The other spines share the rest equally at every step.
        let d = c.destination(&p).unwrap();
        let w = d.applied();
        assert!((w[0].1 - w[2].1).abs() < 1e-12 && (w[0].1 - w[3].1).abs() < 1e-12);
        // The schedule ends: converged to the target.
        let mut steps = 0;
        while let Some(due) = c.next_due(now) {
            c.tick(due);
            now = due;
            steps += 1;
            assert!(steps < 10);
        }
        let a = c.destination(&p).unwrap();
        assert!(a.converged());
        assert_eq!(format!("{:.2}", a.applied()[1].1 * 100.0), "9.20");

        // B.4: S2 recovers (LQS 228 in the seed's text; the test uses 237 so that the
        // targets are exactly equal again) at T = 500 ms: damped return to 25 %.
        let a = c
            .update_one(p, &members(&[237, 237, 237, 237]), 500 * MS)
            .unwrap();
        assert!(!a.immediate);
        assert_eq!(pct(&a, 12), "17.10");
        let mut now = 500 * MS;
        let mut last = a;
        let mut steps = 1;
        while let Some(due) = c.next_due(now) {
            assert_eq!(due, now + 20 * MS);
            let v = c.tick(due);
            let w12: f64 = v[0].1.fractions()[1].1;
            let prev: f64 = last.fractions()[1].1;
            assert!(w12 > prev && w12 <= 0.25, "monotone approach");
            last = v[0].1.clone();
            now = due;
            steps += 1;
        }
        // Converged once every member is within half a kernel weight unit (1/255 of the
        // largest share) of its target: 9 steps from 17.10 % (0.5^8 x 7.9 % < 0.05 %).
        assert!(steps <= 9, "{steps}");
        assert!(last.converged);
        assert_eq!(last.kernel(), [(11, 255), (12, 255), (13, 255), (14, 255)]);
    }

    #[test]
    fn all_paths_zero_means_equal_over_up_uplinks() {
        let mut m = members(&[0, 0, 0, 0]);
        m[2].local_up = false;
        let t = target_weights(&m, false);
        let third = 1.0 / 3.0;
        assert_eq!(t, [third, third, 0.0, third]);
        m.iter_mut().for_each(|x| x.local_up = false);
        assert_eq!(target_weights(&m, false), [0.0; 4]);
        let mut d = DestinationWeights::default();
        let a = d.update(&ControllerConfig::default(), &m, 0).unwrap();
        assert!(a.kernel().is_empty());
        assert!(a.fractions().iter().all(|(_, f)| *f == 0.0));
    }

    #[test]
    fn capacity_weighting() {
        let mut m = members(&[200, 200, 100, 0]);
        m[1].capacity = Capacity::new(100.0, CapacitySource::Bgp).unwrap();
        let t = target_weights(&m, true);
        // 400x200 : 100x200 : 400x100 : 0 = 4 : 1 : 2 : 0.
        let want = [4.0 / 7.0, 1.0 / 7.0, 2.0 / 7.0, 0.0];
        for (a, b) in t.iter().zip(want) {
            assert!((a - b).abs() < 1e-12);
        }
        assert_eq!(target_weights(&m, false)[1], 0.4);
        // Equal capacities: section 6.3 exactly (Appendix B's targets).
        let b = members(&[237, 72, 237, 237]);
        assert_eq!(target_weights(&b, true), target_weights(&b, false));
        // Every path at 0 (6.3: "fallback to equal"): equal quality, so the capacity
        // shares over the up uplinks.
        let mut z = members_with(&[0, 0, 0, 0], &[100.0, 25.0, 100.0, 100.0]);
        z[3].local_up = false;
        let t = target_weights(&z, true);
        let want = [100.0 / 225.0, 25.0 / 225.0, 100.0 / 225.0, 0.0];
        for (a, b) in t.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{t:?}");
        }
        assert_eq!(
            target_weights(&z, false),
            [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0]
        );
    }

    #[test]
    fn a_path_to_zero_is_pruned_at_once_and_a_return_is_immediate() {
        let cfg = ControllerConfig::default();
        let mut d = DestinationWeights::default();
        d.update(&cfg, &members(&[200, 200, 200, 200]), 0);
        // 5 ms later (inside T_reweight) spine 2 fails: applied at once, its weight 0.
        let a = d
            .update(&cfg, &members(&[200, 0, 200, 200]), 5 * MS)
            .unwrap();
        assert!(a.immediate && a.converged);
        assert_eq!(a.fractions()[1].1, 0.0);
        assert_eq!(a.kernel(), [(11, 255), (13, 255), (14, 255)]);
        // Back 3 ms later (still inside the interval of the last application): immediate,
        // its damped step from 0 (1/8), the others unchanged but renormalised: 1/9.
        let a = d
            .update(&cfg, &members(&[200, 200, 200, 200]), 8 * MS)
            .unwrap();
        assert!(a.immediate && !a.converged);
        assert_eq!(format!("{:.4}", a.fractions()[1].1), "0.1111");
        assert!(a.kernel().iter().any(|(id, _)| *id == 12));
        // The immediate application counts as this interval's: the next step is at 28 ms.
        assert_eq!(d.next_due(&cfg, 9 * MS), Some(28 * MS));
    }

    #[test]
    fn a_second_change_inside_t_reweight_waits_for_the_boundary() {
        let cfg = ControllerConfig::default();
        let mut c = WeightController::new(cfg).unwrap();
        let p = prefix(4);
        c.update_one(p, &members(&[200, 200, 200, 200]), 0);
        assert!(
            c.update_one(p, &members(&[200, 100, 200, 200]), 30 * MS)
                .is_some()
        );
        // 10 ms later: deferred.
        assert!(
            c.update_one(p, &members(&[200, 50, 200, 200]), 40 * MS)
                .is_none()
        );
        assert_eq!(c.next_due(40 * MS), Some(50 * MS));
        assert!(c.tick(49 * MS).is_empty());
        let v = c.tick(50 * MS);
        assert_eq!(v.len(), 1);
        // Stepped towards the newest target (50/650).
        let d = c.destination(&p).unwrap();
        assert_eq!(d.target()[1].1, 50.0 / 650.0);
        // A late caller is served at once.
        assert_eq!(c.next_due(95 * MS), Some(95 * MS));
    }

    #[test]
    fn gain_one_jumps_to_target_and_t_reweight_is_respected() {
        let cfg = ControllerConfig {
            gain: 1.0,
            t_reweight: Duration::from_millis(40),
            ..Default::default()
        };
        let mut c = WeightController::new(cfg).unwrap();
        let p = prefix(4);
        c.update_one(p, &members(&[237, 237, 237, 237]), 0);
        assert!(
            c.update_one(p, &members(&[237, 72, 237, 237]), 39 * MS)
                .is_none()
        );
        assert_eq!(c.next_due(39 * MS), Some(40 * MS));
        let v = c.tick(40 * MS);
        assert!(v[0].1.converged);
        assert_eq!(pct(&v[0].1, 12), "9.20");
        assert_eq!(c.next_due(41 * MS), None);
    }

    /// Section 6.4's exception moves only the path that failed: members on their way to
    /// a target keep their applied weights (renormalised) until their T_reweight boundary.
    #[test]
    fn a_failure_does_not_step_the_other_members() {
        let cfg = ControllerConfig::default();
        let mut d = DestinationWeights::default();
        d.update(&cfg, &members(&[237, 237, 237, 237]), 0);
        // Appendix B.3: S2 to 72, the first damped step (S2 25 % -> 17.1 %) at 20 ms.
        let a = d
            .update(&cfg, &members(&[237, 72, 237, 237]), 20 * MS)
            .unwrap();
        let before: Vec<f64> = a.fractions().iter().map(|x| x.1).collect();
        assert_eq!(format!("{:.3}", before[1]), "0.171");
        // S4 fails 5 ms later: S4 leaves at once; S1, S2, S3 keep their ratios.
        let a = d
            .update(&cfg, &members(&[237, 72, 237, 0]), 25 * MS)
            .unwrap();
        assert!(a.immediate);
        let after: Vec<f64> = a.fractions().iter().map(|x| x.1).collect();
        assert_eq!(after[3], 0.0);
        let kept = before[0] + before[1] + before[2];
        for i in 0..3 {
            assert!(
                (after[i] - before[i] / kept).abs() < 1e-12,
                "{after:?} {before:?}"
            );
        }
        // The others' next damped step is at the boundary after this application.
        assert_eq!(d.next_due(&cfg, 26 * MS), Some(45 * MS));
    }

    #[test]
    fn membership_change_is_immediate_and_carries_weights() {
        let cfg = ControllerConfig::default();
        let mut d = DestinationWeights::default();
        d.update(&cfg, &members(&[200, 200]), 0);
        let mut m = members(&[200, 200, 200]);
        m.reverse(); // order of the input does not matter
        let a = d.update(&cfg, &m, MS).unwrap();
        assert!(a.immediate);
        assert_eq!(
            a.fractions().iter().map(|x| x.0).collect::<Vec<_>>(),
            [11, 12, 13]
        );
        // The new member takes its damped step from 0 at once (1/6); the old members keep
        // 0.5 each until their T_reweight boundary: renormalised, 3/7 and 1/7.
        assert_eq!(format!("{:.4}", a.fractions()[0].1), "0.4286");
        assert_eq!(format!("{:.4}", a.fractions()[2].1), "0.1429");
    }

    #[test]
    fn bucket_neutral_reweights() {
        // 64 members of weight 255 in 128 buckets: 2 buckets each. One member at 231
        // (its LQS from 200 to 180) still wants 2: the forwarding is the same.
        let equal: Vec<(UplinkId, u32)> = (1..=64).map(|u| (u, 255)).collect();
        let mut one_lower = equal.clone();
        one_lower[9].1 = 231;
        assert!(moves_no_bucket(128, &equal, &one_lower));
        // With 4096 buckets (64 each) the same change moves some.
        assert!(!moves_no_bucket(4096, &equal, &one_lower));
        // Halving one member's weight moves a bucket even at 2 per member.
        let mut halved = equal.clone();
        halved[9].1 = 127;
        assert!(!moves_no_bucket(128, &equal, &halved));
        // A member set change is never neutral, even when the member gets no bucket.
        let mut fewer = equal.clone();
        fewer.remove(9);
        assert!(!moves_no_bucket(128, &equal, &fewer));
        let mut tiny = equal.clone();
        tiny.push((65, 1));
        assert_eq!(bucket_shares(128, &tiny).last(), Some(&(65, 0)));
        assert!(!moves_no_bucket(128, &equal, &tiny));
        // Seed 003 section 8: four members, S2 from 25 % towards 9.2 % moves buckets.
        let four = [(1, 255), (2, 255), (3, 255), (4, 255)];
        assert!(!moves_no_bucket(
            128,
            &four,
            &[(1, 255), (2, 150), (3, 255), (4, 255)]
        ));
        assert!(moves_no_bucket(128, &four, &four));
    }

    /// The largest-remainder rule as first written (a stable sort of every member by
    /// remainder): [`quantize`] selects instead, and must give the same weights.
    fn quantize_by_stable_sort(
        fractions: &[(UplinkId, f64)],
        max_weight: u32,
    ) -> Vec<(UplinkId, u32)> {
        let max_weight = max_weight.max(1);
        let pos: Vec<(UplinkId, f64)> = fractions
            .iter()
            .copied()
            .filter(|(_, f)| f.is_finite() && *f > 0.0)
            .collect();
        let sum: f64 = pos.iter().map(|(_, f)| f).sum();
        let fmax = pos.iter().map(|(_, f)| f / sum).fold(0.0f64, f64::max);
        if pos.is_empty() || !sum.is_finite() || sum <= 0.0 || fmax <= 0.0 {
            return Vec::new();
        }
        let total = (f64::from(max_weight) / fmax).floor();
        let mut out: Vec<(UplinkId, u64, f64)> = pos
            .iter()
            .map(|&(id, f)| {
                let exact = f / sum * total;
                let fl = exact.floor();
                (id, fl as u64, exact - fl)
            })
            .collect();
        let floors: u64 = out.iter().map(|(_, w, _)| w).sum();
        let extra = (total as u64).saturating_sub(floors).min(out.len() as u64) as usize;
        let mut order: Vec<usize> = (0..out.len()).collect();
        order.sort_by(|&a, &b| out[b].2.total_cmp(&out[a].2));
        for &i in order.iter().take(extra) {
            out[i].1 += 1;
        }
        out.into_iter()
            .map(|(id, w, _)| (id, (w.clamp(1, u64::from(max_weight))) as u32))
            .collect()
    }

    mod quantize_property {
        use super::{UplinkId, quantize, quantize_by_stable_sort};
        use proptest::prelude::*;

        proptest! {
            /// Selection and the stable sort agree, ties of remainders included (equal
            /// fractions, few distinct values), at every resolution.
            #[test]
            fn quantize_selects_what_a_stable_sort_would(
                values in proptest::collection::vec(
                    prop_oneof![
                        Just(0.0f64),
                        Just(1.0f64),
                        Just(0.25f64),
                        0.0f64..1.0,
                        Just(f64::NAN),
                    ],
                    // Past 128: the remainders leave the stack.
                    0..200,
                ),
                max_weight in prop_oneof![Just(1u32), Just(2), Just(3), Just(255), Just(65_535)],
            ) {
                let fractions: Vec<(UplinkId, f64)> = (1..).zip(values).collect();
                prop_assert_eq!(
                    quantize(&fractions, max_weight),
                    quantize_by_stable_sort(&fractions, max_weight)
                );
            }
        }
    }

    #[test]
    fn quantize_largest_remainder() {
        assert_eq!(quantize(&[], 255), []);
        assert_eq!(quantize(&[(1, 0.0), (2, f64::NAN)], 255), []);
        assert_eq!(quantize(&[(1, 1.0)], 255), [(1, 255)]);
        // Appendix B targets: total = floor(255 / 0.302682) = 842.
        let t = target_weights(&members(&[237, 72, 237, 237]), false);
        let f: Vec<(u32, f64)> = (11..).zip(t).collect();
        let q = quantize(&f, 255);
        assert_eq!(q, [(11, 255), (12, 77), (13, 255), (14, 255)]);
        // Ties of remainders go to the first member: 3 x 1/3 at max 2 -> total 6, exact.
        assert_eq!(
            quantize(&[(1, 1.0), (2, 1.0), (3, 1.0)], 2),
            [(1, 2), (2, 2), (3, 2)]
        );
        // total = floor(4 / 0.4) = 10: 4, 3, 3 exact.
        assert_eq!(
            quantize(&[(1, 0.4), (2, 0.3), (3, 0.3)], 4),
            [(1, 4), (2, 3), (3, 3)]
        );
        // A tiny share still gets weight 1 (it is a member).
        assert_eq!(quantize(&[(1, 0.999), (2, 0.001)], 255), [(1, 255), (2, 1)]);
        // Tie on the remainder: 1/2, 1/4, 1/4 at max 3: total 6 -> 3, 1.5, 1.5: one extra
        // goes to the first of the tied members.
        assert_eq!(
            quantize(&[(1, 0.5), (2, 0.25), (3, 0.25)], 3),
            [(1, 3), (2, 2), (3, 1)]
        );
        // 16-bit resolution.
        let q = quantize(&f_b(), 65_535);
        assert_eq!(q[0].1, 65_535);
        assert!(q.iter().all(|(_, w)| (1..=65_535).contains(w)));
    }

    fn f_b() -> Vec<(u32, f64)> {
        (11..)
            .zip(target_weights(&members(&[237, 72, 237, 237]), false))
            .collect()
    }

    #[test]
    fn remap_fraction() {
        let eq = [(1, 1), (2, 1), (3, 1), (4, 1)];
        assert_eq!(remap(128, &eq, &eq), 0.0);
        assert_eq!(
            bucket_shares(128, &eq),
            [(1, 32), (2, 32), (3, 32), (4, 32)]
        );
        // Member 2 leaves: its 32 buckets move.
        assert_eq!(remap(128, &eq, &[(1, 1), (3, 1), (4, 1)]), 32.0 / 128.0);
        // Appendix B target kernel weights: 255, 77, 255, 255 over 842.
        let b = [(1, 255), (2, 77), (3, 255), (4, 255)];
        let shares = bucket_shares(128, &b);
        assert_eq!(shares.iter().map(|x| x.1).sum::<u64>(), 128);
        let moved = remap(128, &eq, &b);
        // Cumulative rounding as in the kernel: 39, 11, 39, 39. Member 2 goes 32 -> 11, so
        // 3 x 7 = 21 buckets move to the others.
        assert_eq!(shares, [(1, 39), (2, 11), (3, 39), (4, 39)]);
        assert_eq!(moved, 21.0 / 128.0);
        assert_eq!(remap(0, &eq, &b), 0.0);
        assert_eq!(remap(8, &[], &eq), 1.0);
    }

    #[test]
    fn from_path_table_to_weights() {
        let cfg = ControllerConfig::default();
        let (m, l) = fabric();
        let mut t = BTreeMap::new();
        for (s, q) in [(1, 237), (2, 72), (3, 237), (4, 237)] {
            t.insert(key(s, 104, 7), value(q, 100 * MS));
        }
        let snap = PathSnapshot::from_map(&t, 104 * MS, cfg.dead_interval_ns(), &BTreeSet::new());
        let r = compute(&cfg, &m, &l, &snap);
        let mut c = WeightController::new(cfg).unwrap();
        let v = c.update(&r, 104 * MS);
        assert_eq!(v.len(), 1);
        assert_eq!(pct(&v[0].1, 12), "9.20"); // first application: straight to the target
        // The destination disappears from the mapping: forgotten.
        c.update(&PathQualityReport::default(), 105 * MS);
        assert!(c.destination(&m.group_of(&prefix(4)).unwrap()).is_none());
    }

    #[test]
    fn integral_keeps_capacity_shares_when_every_lqs_is_zero() {
        // Elastic load: every path at U ~ 1, LQS 0 everywhere, CL 1 on all: the seed's
        // function falls back to equal weights; the integral one keeps capacity shares.
        let cfg = ControllerConfig {
            weight_function: WeightFunction::Integral(IntegralParams::default()),
            ..Default::default()
        };
        let p = prefix(4);
        let m = members_with(&[0, 0, 0, 0], &[400.0, 100.0, 400.0, 400.0]);
        let sig = |cl: u8, live: bool| MemberSignal {
            live,
            cl: Some(cl),
            available_gbps: Some(0.0),
            ..MemberSignal::default()
        };
        let signals = |live2: bool| -> Vec<MemberSignal> {
            m.iter()
                .enumerate()
                .map(|(k, x)| MemberSignal {
                    uplink: x.uplink,
                    ..sig(1, k != 1 || live2)
                })
                .collect()
        };
        let mut c = WeightController::new(cfg).unwrap();
        let a = c.update_one_with(p, &m, &signals(true), 0).unwrap();
        assert!(a.immediate);
        assert_eq!(pct(&a, 12), format!("{:.2}", 100.0 / 13.0 * 100.0 / 100.0));
        // Nothing moves: no further application, the controller rests.
        for k in 1..20 {
            assert!(
                c.update_one_with(p, &m, &signals(true), k * 20 * MS)
                    .is_none()
            );
        }
        assert_eq!(c.next_due(400 * MS), None);
        // The spine of member 12 fails (heartbeat): removed at once.
        let a = c.update_one_with(p, &m, &signals(false), 401 * MS).unwrap();
        assert!(a.immediate);
        assert_eq!(pct(&a, 12), "0.00");
        assert_eq!(pct(&a, 11), "33.33");
        // The seed's function on the same inputs: all-zero fallback (6.3), equal quality,
        // so the capacity shares (4.1); without capacity weighting, equal weights.
        let mut seed = WeightController::new(ControllerConfig::default()).unwrap();
        let a = seed.update_one_with(p, &m, &signals(true), 0).unwrap();
        assert_eq!(pct(&a, 12), format!("{:.2}", 100.0 / 13.0));
        let mut seed = WeightController::new(ControllerConfig {
            capacity_weighting: false,
            ..Default::default()
        })
        .unwrap();
        let a = seed.update_one_with(p, &m, &signals(true), 0).unwrap();
        assert_eq!(pct(&a, 12), "25.00");
    }

    #[test]
    fn integral_gives_nothing_to_a_spine_that_has_not_advertised_the_remote() {
        // Section 4.1: once S1, S3, S4 have advertised R, S2 (no entry for R) is not
        // confirmed by the fast plane, whatever its uplink's capacity. With no entry from
        // any spine, 6.1's local-only fallback uses every up uplink.
        let cfg = ControllerConfig {
            weight_function: WeightFunction::Integral(IntegralParams::default()),
            ..Default::default()
        };
        let p = prefix(4);
        let m = members(&[200, 0, 200, 200]);
        let signals: Vec<MemberSignal> = m
            .iter()
            .enumerate()
            .map(|(k, x)| MemberSignal {
                uplink: x.uplink,
                live: k != 1,
                cl: (k != 1).then_some(0),
                available_gbps: (k != 1).then_some(400.0),
            })
            .collect();
        let mut c = WeightController::new(cfg).unwrap();
        let a = c.update_one_with(p, &m, &signals, 0).unwrap();
        assert_eq!(pct(&a, 12), "0.00");
        assert_eq!(pct(&a, 11), "33.33");
        let none: Vec<MemberSignal> = m
            .iter()
            .map(|x| MemberSignal {
                uplink: x.uplink,
                ..MemberSignal::default()
            })
            .collect();
        let mut c = WeightController::new(cfg).unwrap();
        let a = c.update_one_with(p, &members(&[255; 4]), &none, 0).unwrap();
        assert_eq!(pct(&a, 12), "25.00");
    }

    #[test]
    fn integral_holds_the_weights_while_every_helper_is_silent_at_once() {
        // The netns demo on a loaded 2-core machine: every spine's advertisements stop for
        // 60-120 ms together (the receiver's or the whole machine's stall, not one path), so
        // 6.5 fails them all at once. The seed's all-zero fallback (equal weights) would move
        // every flow and back; the integral function holds what is in force.
        let cfg = ControllerConfig {
            weight_function: WeightFunction::Integral(IntegralParams::default()),
            ..Default::default()
        };
        let p = prefix(4);
        let m = members_with(&[0, 0, 0, 0], &[0.1, 0.025, 0.1, 0.1]);
        let signals = |live: [bool; 4]| -> Vec<MemberSignal> {
            m.iter()
                .enumerate()
                .map(|(k, x)| MemberSignal {
                    uplink: x.uplink,
                    live: live[k],
                    cl: Some(if live[k] { 1 } else { 7 }),
                    available_gbps: Some(0.0),
                })
                .collect()
        };
        let mut c = WeightController::new(cfg).unwrap();
        let a = c.update_one_with(p, &m, &signals([true; 4]), 0).unwrap();
        let share = format!("{:.2}", 0.025 / 0.325 * 100.0);
        assert_eq!(pct(&a, 12), share);
        // Every helper silent at once: no application, nothing due, the group stays.
        assert!(
            c.update_one_with(p, &m, &signals([false; 4]), 100 * MS)
                .is_none()
        );
        assert_eq!(c.next_due(100 * MS), None);
        assert!(c.tick(200 * MS).is_empty());
        let d = c.destination(&p).unwrap();
        let s2 = d.applied().iter().find(|x| x.0 == 12).unwrap().1;
        assert!((s2 - 0.025 / 0.325).abs() < 1e-9, "{s2}");
        // Heard again: back to the same targets at once; nothing else moved.
        let a = c
            .update_one_with(p, &m, &signals([true; 4]), 210 * MS)
            .unwrap();
        assert!(a.immediate);
        assert_eq!(pct(&a, 12), share);
        // One helper silent while the others are heard: that path is removed at once (6.5,
        // 6.4), as before.
        let a = c
            .update_one_with(p, &m, &signals([true, false, true, true]), 300 * MS)
            .unwrap();
        assert!(a.immediate);
        assert_eq!(pct(&a, 12), "0.00");
    }

    #[test]
    fn integral_throttles_a_dropping_path_slowly_with_hysteresis() {
        let cfg = ControllerConfig {
            weight_function: WeightFunction::Integral(IntegralParams::default()),
            ..Default::default()
        };
        let p = prefix(4);
        let m = members(&[0, 0, 0, 0]);
        let signals: Vec<MemberSignal> = m
            .iter()
            .enumerate()
            .map(|(k, x)| MemberSignal {
                uplink: x.uplink,
                live: true,
                cl: Some(if k == 1 { 7 } else { 1 }),
                ..MemberSignal::default()
            })
            .collect();
        let mut c = WeightController::new(cfg).unwrap();
        c.update_one_with(p, &m, &signals, 0).unwrap();
        let mut apps = Vec::new();
        let mut t = 0;
        while let Some(due) = c.next_due(t) {
            t = due;
            apps.extend(c.tick(t));
            assert!(t < 10_000 * MS, "never rests");
        }
        // Down to the estimated-capacity floor 0.25, 0.25 / 3.25 of the group, within the
        // hysteresis (a last step smaller than 0.02 is not programmed).
        let last = &apps.last().unwrap().1;
        let f = last.fractions().iter().find(|x| x.0 == 12).unwrap().1;
        assert!((f - 0.25 / 3.25).abs() < 0.02, "{f}");
        assert!(f > 0.25 / 3.25);
        // Monotone, and each application moved the share by at least the hysteresis.
        let s: Vec<f64> = apps
            .iter()
            .map(|(_, a)| a.fractions().iter().find(|x| x.0 == 12).unwrap().1)
            .collect();
        for w in s.windows(2) {
            assert!(w[1] < w[0]);
        }
        assert!(apps.len() < 12, "{}", apps.len());
    }

    #[test]
    fn invalid_config_is_refused() {
        let cfg = ControllerConfig {
            gain: 2.0,
            ..Default::default()
        };
        assert!(WeightController::<GroupKey>::new(cfg).is_err());
    }
}
