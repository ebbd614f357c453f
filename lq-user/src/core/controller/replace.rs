//! When a computed weight change is written to the kernel's nexthop group, and what is
//! written (issue 41).
//!
//! Seed 003 section 6.4 bounds how often a receiver may apply weights ("MUST NOT apply
//! target weights more often than once per T_reweight per destination"), not how often it
//! must: the damped weights are computed at every T_reweight as the seed says, and this
//! module decides which of those computations change forwarding enough to be worth a group
//! replace. A replace costs the kernel an RCU grace period (about 100 us for a resilient
//! group of 64 members); at a leaf of a 64 x 512 fabric lqd's own policy of writing every
//! damped step was most of the leaf's CPU, and most of those replaces moved no flow or
//! moved a bucket there and back.
//!
//! A resilient group's forwarding is its members' bucket counts: the kernel gives member i
//! the buckets between two cumulative bounds, `B(i) = round(buckets x cumulative weight /
//! total)` (`nh_res_group_rebalance`), and migrates a bucket only from a member that has
//! more than its count to one that has fewer. For a group whose installed kernel weights
//! are `installed` and whose newly computed ones are `proposed` (both by uplink id, as lqd
//! programs them):
//! 1. A member set change (a path_quality transition to or from 0, a member added or
//!    removed) is written at once, as computed: 6.4's exception ("SHOULD be applied
//!    immediately") is never held.
//! 2. The installed counts `c_i` are judged against the computed weights' exact shares
//!    `x_i = buckets x w_i / total`, where `w_i` are the applied fractions themselves (an
//!    [`Application`]'s; their quantisation to kernel weights is computed only for a
//!    write, and judging it instead moved each share by up to `buckets / total weight`:
//!    0.008 bucket for 64 members of 128 buckets, a quarter bucket for two; over 5 000
//!    random groups the two judges gave the same verdict 4 999 times). A bucket moved
//!    from member a to member b puts fewer buckets on the wrong member (`sum |c_i - x_i|`) exactly when a's surplus `c_a - x_a`
//!    and b's deficit `x_b - c_b` add up to more than one bucket. The best such move (the
//!    largest surplus to the largest deficit) has an excess `e = (surplus + deficit) / 2 -
//!    0.5`, in buckets: past the half bucket on each side that any rounding leaves (for
//!    two members it is exactly the distance of their bound past its rounding point).
//!    Past `hysteresis` it is made at once. Between 0 and `hysteresis` it is held, and `e`
//!    is accumulated over time, in bucket-seconds, going down while `e` is negative, never
//!    below 0 (a CUSUM change detector); it is made when the sum reaches the hold's
//!    budget, `hysteresis x hold`, or when `e` has stayed positive for
//!    [`LONGEST_HOLD_FACTOR`] x `hold` without a pause (1 s with the defaults), whatever
//!    its size. Noise at a rounding point, which the damped weights of a fabric carry at
//!    every step (every entry's LQS moves by a few units every T_notify), averages 0 or
//!    less and never moves a bucket there and back.
//! 3. When a move is made, every further move that helps (excess above 0) is made with
//!    it, largest first, so the write leaves nothing held: the write costs the same, and
//!    undoing any of them would need its own excess, held as any other. The written
//!    weights are the chosen bucket counts scaled to the weight range (a
//!    member's weight is its count times one factor; a member with no bucket weighs 1),
//!    checked to give exactly those counts under the kernel's rounding: only the members
//!    a move is between change their buckets. When the counts cannot be expressed so (the
//!    factor would be too small), the computed weights are written as they are, if they
//!    move a bucket (else nothing is written: the same write would come back at every
//!    step).
//! 4. Hash-threshold groups have no buckets: the kernel gives each member a slice of the
//!    31-bit hash space, `round(2^31 x cumulative weight / total) - 1`
//!    (`nh_hthr_group_rebalance`). Weights that give the same slices are not written; any
//!    other change is written as computed (no hysteresis: every slice boundary that moves
//!    moves flows).
//!
//! Judging the cumulative bounds instead (each bound against the kernel's rounding of the
//! computed weights, as lqd did before) moves buckets among bystanders: one member's
//! share falling by half a bucket in a 64-member group moves every bound after it by up to
//! 0.4 bucket, each crossing its rounding point at a different damped step, and under a
//! fabric's churn that was 4.7 replaces for each event that moved a bucket (issue 41). By
//! members, a group settles where no single bucket move puts fewer buckets on the wrong
//! member (the fewest any counts give: the largest-remainder apportionment's), a move is
//! held only while its gain is within the hysteresis, and that gain's time-integral
//! before it is made is at most the hold's budget (0.05 bucket-seconds with the
//! defaults).

use super::weights::{Application, is_member, resilient_bounds};

/// What a computation proposes to write, as [`decide`] reads it: integer weights by
/// uplink id, or an [`Application`], whose fractions a resilient group's rule judges
/// directly (their exact shares) and whose kernel weights are quantised only when written
/// (issue 41: 99 of 100 computations at a leaf of a 64 x 512 fabric are not).
pub trait Proposal {
    /// The kernel weights as computed, by uplink id (what rules 1, 3 and 4 write).
    fn weights(&self) -> &[(u32, u32)];
    /// The proposed members are `installed`'s, in the same order.
    fn same_members(&self, installed: &[(u32, u32)]) -> bool;
    /// Each member's exact (real) share of `buckets`, in member order (rule 2): an
    /// iterator, so that the common verdict (no bucket move helps) allocates nothing.
    fn shares(&self, buckets: u16) -> impl Iterator<Item = f64> + '_;
}

/// Integer weights (a slice, a vector, an array): judged by their own exact shares.
impl<W: AsRef<[(u32, u32)]> + ?Sized> Proposal for W {
    fn weights(&self) -> &[(u32, u32)] {
        self.as_ref()
    }

    fn same_members(&self, installed: &[(u32, u32)]) -> bool {
        let w = self.as_ref();
        w.len() == installed.len() && w.iter().zip(installed).all(|(a, b)| a.0 == b.0)
    }

    fn shares(&self, buckets: u16) -> impl Iterator<Item = f64> + '_ {
        ideal_counts(buckets, self.as_ref())
    }
}

/// The applied fractions' exact shares: `buckets x fraction / sum`, over the members (the
/// positive fractions, as the kernel weights' members are). Their quantisation to kernel
/// weights moves a share by at most `buckets x 0.5 / total weight`: 0.004 bucket for 64
/// members of 128 buckets at the default 8-bit weights, a sixtieth of the default
/// hysteresis.
impl Proposal for Application {
    fn weights(&self) -> &[(u32, u32)] {
        self.kernel()
    }

    fn same_members(&self, installed: &[(u32, u32)]) -> bool {
        let fractions = self.fractions();
        // Nearly always (no member at 0): the ids alone.
        if self.every_fraction_a_member() {
            return installed.len() == fractions.len()
                && installed.iter().zip(fractions).all(|(w, f)| w.0 == f.0);
        }
        // A plain loop: this runs for every group a step applies.
        let mut i = 0;
        for &(id, f) in fractions {
            if is_member(f) {
                if installed.get(i).is_none_or(|w| w.0 != id) {
                    return false;
                }
                i += 1;
            }
        }
        i == installed.len()
    }

    fn shares(&self, buckets: u16) -> impl Iterator<Item = f64> + '_ {
        // The members' sum as the application summed them (in order, the same value).
        let (sum, every) = (self.member_sum(), self.every_fraction_a_member());
        let members = self
            .fractions()
            .iter()
            .map(|&(_, f)| f)
            .filter(move |&f| every || is_member(f));
        let scale = if sum > 0.0 {
            f64::from(buckets) / sum
        } else {
            1.0
        };
        members.map(move |f| f * scale)
    }
}

/// Whether lqd writes every computed weight change, or only those that change forwarding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplaceMode {
    /// Only changes that move a bucket (resilient) or a hash slice (hash-threshold), with
    /// the hysteresis and hold of [`ReplacePolicy`]. lqd's default.
    #[default]
    ForwardingChange,
    /// Every computed change of the integer weights, as computed (lqd before issue 41).
    EveryStep,
}

/// How computed weights reach the kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplacePolicy {
    /// See [`ReplaceMode`].
    pub mode: ReplaceMode,
    /// Resilient groups: how far past the half bucket any rounding leaves a bucket move's
    /// excess may grow before it is made at once, in buckets (>= 0; rule 2).
    pub hysteresis_buckets: f64,
    /// With the hysteresis, the hold's budget (`hysteresis x hold`): how long a move at
    /// the hysteresis' edge waits, in ns.
    pub hold_ns: u64,
}

/// The default hysteresis: a quarter of a bucket past the rounding's half bucket.
pub const DEFAULT_HYSTERESIS_BUCKETS: f64 = 0.25;
/// The default hold: 200 ms, ten T_reweight at the seed's default of 20 ms.
pub const DEFAULT_HOLD_NS: u64 = 200_000_000;
/// A move whose excess has stayed positive without a pause for this many `hold`s is made,
/// whatever its excess (rule 2's time bound: 1 s with the defaults).
pub const LONGEST_HOLD_FACTOR: u64 = 5;

impl Default for ReplacePolicy {
    fn default() -> Self {
        Self {
            mode: ReplaceMode::ForwardingChange,
            hysteresis_buckets: DEFAULT_HYSTERESIS_BUCKETS,
            hold_ns: DEFAULT_HOLD_NS,
        }
    }
}

/// The kind of group the weights are written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupShape {
    /// A resilient group.
    Resilient {
        /// Bucket count.
        buckets: u16,
        /// The largest kernel weight (255, or 65535 with 16-bit weights).
        max_weight: u32,
    },
    /// A hash-threshold group.
    HashThreshold,
}

/// Why a computed change is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplaceCause {
    /// Nothing is installed yet.
    Install,
    /// The member set changes (6.4: transitions to or from 0 at once).
    Members,
    /// A resilient group's bucket move past the hysteresis, or a hash slice moved.
    Moves,
    /// A held bucket move's accumulated excess reached the hold's budget, or its time
    /// bound.
    HoldExpired,
    /// `ReplaceMode::EveryStep`.
    EveryStep,
}

/// A resilient group's held or decaying bucket move (rule 2 of the module).
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The accumulated excess of the best move, in bucket-nanoseconds (>= 0).
    pub excess_bucket_ns: f64,
    /// Since when some move has had a positive excess without a pause (`u64::MAX`: none
    /// has).
    pub past_since_ns: u64,
    /// When it was last accumulated.
    pub at_ns: u64,
}

/// What to do with one computed change.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Write `weights` (the computed ones, or the chosen bucket counts scaled: rule 3).
    Replace {
        /// Why.
        cause: ReplaceCause,
        /// What to write, by uplink id.
        weights: Vec<(u32, u32)>,
    },
    /// No bucket move would put fewer buckets on the wrong member (the kernel forwards as
    /// close to the computed weights as bucket counts can): nothing to write. A hold whose
    /// accumulated excess has not decayed to 0 goes on (`Some`).
    SameForwarding {
        /// The group's hold, decayed.
        hold: Option<Hold>,
    },
    /// A bucket move would help, within the hysteresis: held. Ask again (with `hold`) by
    /// `due_ns`, when it is made if the computed weights stay as they are.
    Held {
        /// The group's hold, accumulated.
        hold: Hold,
        /// When the move reaches the budget at its present excess, or its time bound.
        due_ns: u64,
    },
}

/// A group's installed kernel weights, by uplink id, with each member's bucket count under
/// them kept from the first decision after a write to the next write: the counts are the
/// same at every decision in between, and computing them again (a rounded division per
/// member) was a quarter of the replace rule's instructions (callgrind, `bench step`), at
/// 25 600 decisions a second at a leaf of a 64 x 512 fabric (issue 41).
#[derive(Clone, Default)]
pub struct Installed {
    weights: Vec<(u32, u32)>,
    /// The bucket count they were computed for, and the counts.
    counts: std::cell::OnceCell<(u16, Vec<u64>)>,
}

impl Installed {
    /// The group holds `weights` (empty: no group yet).
    pub fn new(weights: Vec<(u32, u32)>) -> Self {
        Self {
            weights,
            counts: std::cell::OnceCell::new(),
        }
    }

    /// Keeps the members `keep` accepts (the kernel removed the others).
    pub fn retain(&mut self, keep: impl FnMut(&(u32, u32)) -> bool) {
        self.weights.retain(keep);
        self.counts = std::cell::OnceCell::new();
    }

    /// Each member's bucket count in a resilient group of `buckets` buckets: computed once.
    fn counts(&self, buckets: u16) -> std::borrow::Cow<'_, [u64]> {
        let (b, counts) = self
            .counts
            .get_or_init(|| (buckets, installed_counts(buckets, &self.weights)));
        if *b == buckets {
            counts.into()
        } else {
            installed_counts(buckets, &self.weights).into()
        }
    }
}

impl std::ops::Deref for Installed {
    type Target = [(u32, u32)];

    fn deref(&self) -> &[(u32, u32)] {
        &self.weights
    }
}

/// Two are equal when their weights are (the counts follow from them).
impl PartialEq for Installed {
    fn eq(&self, other: &Self) -> bool {
        self.weights == other.weights
    }
}

/// The weights only, as a log line shows them.
impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.weights.fmt(f)
    }
}

/// The verdict for writing `proposed` over `installed` at `now_ns`; `hold` is the group's
/// hold from its last verdict (`Held`, or `SameForwarding` with `Some`).
pub fn decide<P: Proposal + ?Sized>(
    policy: &ReplacePolicy,
    shape: GroupShape,
    installed: &[(u32, u32)],
    proposed: &P,
    hold: Option<&Hold>,
    now_ns: u64,
) -> Verdict {
    let counts = |buckets| installed_counts(buckets, installed).into();
    decide_with(policy, shape, installed, counts, proposed, hold, now_ns)
}

/// [`decide`] for a group whose installed weights keep their bucket counts between
/// decisions (what lqd's groups do).
pub fn decide_installed<P: Proposal + ?Sized>(
    policy: &ReplacePolicy,
    shape: GroupShape,
    installed: &Installed,
    proposed: &P,
    hold: Option<&Hold>,
    now_ns: u64,
) -> Verdict {
    let counts = |buckets| installed.counts(buckets);
    decide_with(policy, shape, installed, counts, proposed, hold, now_ns)
}

/// [`decide`], the installed bucket counts from `counts` (asked only for a resilient
/// group whose members stay).
fn decide_with<'i, P: Proposal + ?Sized>(
    policy: &ReplacePolicy,
    shape: GroupShape,
    installed: &'i [(u32, u32)],
    counts: impl FnOnce(u16) -> std::borrow::Cow<'i, [u64]>,
    proposed: &P,
    hold: Option<&Hold>,
    now_ns: u64,
) -> Verdict {
    let write = |cause| Verdict::Replace {
        cause,
        weights: proposed.weights().to_vec(),
    };
    if installed.is_empty() {
        return write(ReplaceCause::Install);
    }
    if !proposed.same_members(installed) {
        return write(ReplaceCause::Members);
    }
    if policy.mode == ReplaceMode::EveryStep {
        return if installed == proposed.weights() {
            Verdict::SameForwarding { hold: None }
        } else {
            write(ReplaceCause::EveryStep)
        };
    }
    match shape {
        GroupShape::HashThreshold => {
            if hash_bounds(installed).eq(hash_bounds(proposed.weights())) {
                Verdict::SameForwarding { hold: None }
            } else {
                write(ReplaceCause::Moves)
            }
        }
        GroupShape::Resilient {
            buckets,
            max_weight,
        } => decide_resilient(
            policy,
            buckets,
            max_weight,
            installed,
            counts(buckets),
            proposed,
            hold,
            now_ns,
        ),
    }
}

/// Rules 2 and 3 of the module for a resilient group (same members, same order).
#[allow(clippy::too_many_arguments)] // `decide`'s inputs, and the installed counts
fn decide_resilient<P: Proposal + ?Sized>(
    policy: &ReplacePolicy,
    buckets: u16,
    max_weight: u32,
    installed: &[(u32, u32)],
    counts: std::borrow::Cow<'_, [u64]>,
    proposed: &P,
    hold: Option<&Hold>,
    now_ns: u64,
) -> Verdict {
    // Every group a step applies comes here (25 600 a second at a leaf of a 64 x 512
    // fabric under LQS noise, issue 41), and nearly all are not written: the best move is
    // judged over the installed counts (kept, `Installed`) and the proposed shares (an
    // iterator) without an allocation; the shares are collected, the counts copied and
    // the proposed kernel weights computed only when a move is made.
    let dt = hold.map_or(0, |h| now_ns.saturating_sub(h.at_ns)) as f64;
    let budget = policy.hysteresis_buckets * policy.hold_ns as f64;
    let longest = policy.hold_ns.saturating_mul(LONGEST_HOLD_FACTOR);
    let (mut excess, mut past_since) =
        hold.map_or((0.0, u64::MAX), |h| (h.excess_bucket_ns, h.past_since_ns));
    let (from, to, e) = best_move(&counts, proposed.shares(buckets));
    excess = (excess + e * dt).max(0.0);
    if e > 0.0 {
        past_since = past_since.min(now_ns);
    } else {
        past_since = u64::MAX;
    }
    let cause = if e > policy.hysteresis_buckets {
        Some(ReplaceCause::Moves)
    } else if e > 0.0 && (excess >= budget || now_ns.saturating_sub(past_since) >= longest) {
        Some(ReplaceCause::HoldExpired)
    } else {
        None
    };
    let Some(cause) = cause else {
        return if e > 0.0 {
            let wait = ((budget - excess) / e)
                .ceil()
                .clamp(0.0, u64::MAX as f64 / 2.0);
            Verdict::Held {
                due_ns: past_since
                    .saturating_add(longest)
                    .min(now_ns.saturating_add(wait as u64)),
                hold: Hold {
                    excess_bucket_ns: excess,
                    past_since_ns: past_since,
                    at_ns: now_ns,
                },
            }
        } else {
            Verdict::SameForwarding {
                hold: (excess > 0.0).then_some(Hold {
                    excess_bucket_ns: excess,
                    past_since_ns: u64::MAX,
                    at_ns: now_ns,
                }),
            }
        };
    };
    // The move that is due, then every other that helps (rule 3): the write costs the same.
    let ideal: Vec<f64> = proposed.shares(buckets).collect();
    let mut counts = counts.into_owned();
    counts[from] -= 1;
    counts[to] += 1;
    loop {
        let (from, to, e) = best_move(&counts, ideal.iter().copied());
        if e <= 0.0 {
            break;
        }
        counts[from] -= 1;
        counts[to] += 1;
    }
    let bounds: Vec<u64> = counts
        .iter()
        .scan(0u64, |c, x| {
            *c += x;
            Some(*c)
        })
        .collect();
    // Not expressible as bucket counts (the factor would be too small): the computed
    // weights, as the kernel rounds them, unless they give the installed counts again (the
    // move cannot be made by weights; writing them would change nothing and come back at
    // every step).
    let weights = match weights_for_bounds(buckets, max_weight, installed, &bounds) {
        Some(w) => w,
        None => {
            let w = proposed.weights().to_vec();
            if installed_counts(buckets, &w) == installed_counts(buckets, installed) {
                return Verdict::SameForwarding { hold: None };
            }
            w
        }
    };
    Verdict::Replace { cause, weights }
}

/// Each member's bucket count under installed weights `w`: the differences of the
/// kernel's cumulative bounds ([`resilient_bounds`]), in one pass.
///
/// The bounds' integer divisions (`DIV_ROUND_CLOSEST`) are done in `f64`: one 64-bit
/// integer division per member was most of this rule's time (issue 41), and a floating
/// division of independent operands pipelines. It is exact here: numerator `n` and
/// divisor `d` are integers below 2^53 (at most 65 535 buckets times a cumulative weight of
/// at most 2^16 per member, for up to 2^16 members), so the quotient rounds correctly to
/// the nearest double; when `n / d` is not an integer it is at least `1 / d` from every
/// integer, far more than half a double's spacing near the quotient (`n / d x 2^-53`, as
/// `n < 2^53`), so truncating the rounded quotient gives the integer quotient. The test
/// `installed_counts_are_the_bounds_differences` checks it against the integer form.
fn installed_counts(buckets: u16, w: &[(u32, u32)]) -> Vec<u64> {
    let total = w.iter().map(|x| u64::from(x.1)).sum::<u64>().max(1);
    let (half, total_f) = ((total / 2) as i64 as f64, total as i64 as f64);
    let (mut cum, mut prev) = (0u64, 0u64);
    w.iter()
        .map(|x| {
            cum += u64::from(x.1);
            // Through i64, which x86-64 converts in one instruction each way (u64 takes a
            // sequence); every value here is below 2^53.
            let bound = ((u64::from(buckets) * cum) as i64 as f64 + half) / total_f;
            let bound = bound as i64 as u64;
            let c = bound.saturating_sub(prev);
            prev = bound;
            c
        })
        .collect()
}

/// Each member's bucket count, from the group's cumulative bounds.
#[cfg(test)]
fn bucket_counts(bounds: &[u64]) -> Vec<u64> {
    let mut prev = 0;
    bounds
        .iter()
        .map(|&b| {
            let c = b.saturating_sub(prev);
            prev = b;
            c
        })
        .collect()
}

/// Each member's exact (real) share of the buckets under weights `w`.
fn ideal_counts(buckets: u16, w: &[(u32, u32)]) -> impl Iterator<Item = f64> + '_ {
    let total = w.iter().map(|x| u64::from(x.1)).sum::<u64>().max(1) as f64;
    w.iter()
        .map(move |x| f64::from(buckets) * f64::from(x.1) / total)
}

/// The one-bucket move that brings the counts closest to the ideal shares: from the member
/// with the largest surplus (`count - ideal`) to the one with the largest deficit, and its
/// excess, `(surplus + deficit) / 2 - 0.5` (rule 2): positive when the move lowers the
/// buckets given to the wrong member (`sum |count - ideal|`, by four times the excess while
/// both errors are within a bucket); a half-bucket error on both sides is what any
/// rounding leaves. The counts and the shares both sum to the bucket count, so the largest
/// surplus and deficit are >= 0 and the excess >= -0.5; with no move to make (one member,
/// or no member with a bucket) it is -0.5 too.
fn best_move(counts: &[u64], ideal: impl IntoIterator<Item = f64>) -> (usize, usize, f64) {
    let (mut from, mut to) = (0, 0);
    let (mut surplus, mut deficit) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (k, (&c, x)) in counts.iter().zip(ideal).enumerate() {
        // Through i64: one instruction (a count is at most 65 535).
        let s = c as i64 as f64 - x;
        if c > 0 && s > surplus {
            (from, surplus) = (k, s);
        }
        if -s > deficit {
            (to, deficit) = (k, -s);
        }
    }
    if from == to || surplus == f64::NEG_INFINITY {
        return (from, to, -0.5);
    }
    let excess = (surplus + deficit) / 2.0 - 0.5;
    // Exact ties (a move that leaves as many buckets on the wrong member) are not moves:
    // the shares' rounding in f64 must not decide them.
    (from, to, if excess.abs() < 1e-9 { 0.0 } else { excess })
}

/// The exact (real) cumulative bounds of weights `w`: `buckets x cumulative / total`.
#[cfg(test)]
fn exact_bounds(buckets: u16, w: &[(u32, u32)]) -> Vec<f64> {
    let total = w.iter().map(|x| u64::from(x.1)).sum::<u64>().max(1) as f64;
    let mut cum = 0u64;
    w.iter()
        .map(|x| {
            cum += u64::from(x.1);
            f64::from(buckets) * cum as f64 / total
        })
        .collect()
}

/// Kernel weights for `members` (their ids) that give exactly the cumulative bounds
/// `bounds` under the kernel's rounding: each member's bucket count times one factor, 1 for
/// a member with no bucket; `None` when the bounds are out of order or no factor within
/// `max_weight` gives them.
pub fn weights_for_bounds(
    buckets: u16,
    max_weight: u32,
    members: &[(u32, u32)],
    bounds: &[u64],
) -> Option<Vec<(u32, u32)>> {
    if bounds.len() != members.len() || bounds.last() != Some(&u64::from(buckets)) {
        return None;
    }
    let mut counts = Vec::with_capacity(bounds.len());
    let mut prev = 0u64;
    for &b in bounds {
        counts.push(b.checked_sub(prev)?);
        prev = b;
    }
    let largest = counts.iter().copied().max()?.max(1);
    let factor = u64::from(max_weight) / largest;
    if factor == 0 {
        return None;
    }
    let weights: Vec<(u32, u32)> = (members.iter().zip(&counts))
        .map(|(m, &c)| (m.0, (c * factor).max(1) as u32))
        .collect();
    (resilient_bounds(buckets, &weights) == bounds).then_some(weights)
}

/// The upper bounds a hash-threshold group gives its members, as the kernel computes
/// them: `DIV_ROUND_CLOSEST_ULL(cumulative << 31, total) - 1`.
fn hash_bounds(w: &[(u32, u32)]) -> impl Iterator<Item = u64> + '_ {
    let total = w.iter().map(|x| u64::from(x.1)).sum::<u64>().max(1);
    w.iter().scan(0u64, move |c, x| {
        *c += u64::from(x.1);
        Some(((*c << 31) + total / 2) / total)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RES: GroupShape = GroupShape::Resilient {
        buckets: 128,
        max_weight: 255,
    };
    const MS: u64 = 1_000_000;

    /// How far a resilient group's computed cumulative bounds are from the installed ones.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct BoundDrift {
        /// The largest distance, in buckets, from an installed (integer) bound to the
        /// proposed weights' exact (real) bound.
        max_buckets: f64,
        /// Bounds the kernel would move were the proposed weights written.
        moves: usize,
    }

    /// The [`BoundDrift`] of `proposed` from `installed` (same members, same order) in a
    /// resilient group of `buckets` buckets.
    fn bound_drift(buckets: u16, installed: &[(u32, u32)], proposed: &[(u32, u32)]) -> BoundDrift {
        let have = resilient_bounds(buckets, installed);
        let want = resilient_bounds(buckets, proposed);
        let exact = exact_bounds(buckets, proposed);
        BoundDrift {
            max_buckets: (exact.iter().zip(&have))
                .map(|(x, h)| (x - *h as f64).abs())
                .fold(0.0, f64::max),
            moves: have.iter().zip(&want).filter(|(h, w)| h != w).count(),
        }
    }

    fn equal(n: u32, w: u32) -> Vec<(u32, u32)> {
        (1..=n).map(|i| (i, w)).collect()
    }

    fn written(v: &Verdict) -> Option<(ReplaceCause, &[(u32, u32)])> {
        match v {
            Verdict::Replace { cause, weights, .. } => Some((*cause, weights)),
            _ => None,
        }
    }

    #[test]
    fn member_changes_and_first_installs_are_written_at_once_as_computed() {
        let p = ReplacePolicy::default();
        let four = equal(4, 255);
        let three: Vec<_> = four[..3].to_vec();
        let v = decide(&p, RES, &[], &four, None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::Install, &four[..])));
        let v = decide(&p, RES, &four, &three, None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::Members, &three[..])));
        // Held or not, a member leaving is never held.
        let held = Hold {
            excess_bucket_ns: 1.0,
            past_since_ns: u64::MAX,
            at_ns: 0,
        };
        let v = decide(&p, RES, &four, &three, Some(&held), 1);
        assert_eq!(written(&v), Some((ReplaceCause::Members, &three[..])));
        let mut other = four.clone();
        other[3].0 = 9;
        let v = decide(&p, RES, &four, &other, None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::Members, &other[..])));
    }

    /// An application's shares and members are what its fractions say, judged from the
    /// sum and the flag it keeps (`member_sum`, `every_fraction_a_member`): bit for bit the
    /// shares of the members summed and scaled in each pass, and the same members, over
    /// random fractions with zeros, negative, infinite and not-a-number ones among them.
    #[test]
    fn kept_member_sum_judges_as_the_fractions_summed_each_time() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        let (mut all_members, mut some_not) = (0, 0);
        for _ in 0..3_000 {
            let n = rng.random_range(0..=70u32);
            let odd = [0.0, -0.0, -0.25, f64::INFINITY, f64::NAN, f64::MIN_POSITIVE];
            let rare = rng.random_bool(0.5);
            let fractions: Vec<(u32, f64)> = (1..=n)
                .map(|i| {
                    let f = if rare && rng.random_bool(0.1) {
                        odd[rng.random_range(0..odd.len())]
                    } else {
                        rng.random_range(1e-6..1.0)
                    };
                    (10 + i, f)
                })
                .collect();
            let buckets = [16u16, 128, 512][rng.random_range(0..3usize)];
            let app = Application::new(0, fractions.clone(), 255, false, false);
            // The shares as summed and scaled in each pass before.
            let members = || fractions.iter().map(|&(_, f)| f).filter(|&f| is_member(f));
            let sum: f64 = members().sum();
            let scale = if sum > 0.0 {
                f64::from(buckets) / sum
            } else {
                1.0
            };
            let want: Vec<u64> = members().map(|f| (f * scale).to_bits()).collect();
            let got: Vec<u64> = app.shares(buckets).map(f64::to_bits).collect();
            assert_eq!(got, want, "{fractions:?}");
            // The members as told one by one.
            let ids: Vec<(u32, u32)> = (fractions.iter())
                .filter(|&&(_, f)| is_member(f))
                .map(|&(id, _)| (id, 1))
                .collect();
            let mut other = ids.clone();
            match rng.random_range(0..4) {
                0 => {}
                1 => other.push((200, 1)),
                2 => {
                    other.pop();
                }
                _ => {
                    if let Some(w) = other.first_mut() {
                        w.0 = 1;
                    }
                }
            }
            let same = |installed: &[(u32, u32)]| {
                installed.len() == ids.len() && installed.iter().zip(&ids).all(|(a, b)| a.0 == b.0)
            };
            assert!(app.same_members(&ids), "{fractions:?}");
            assert_eq!(
                app.same_members(&other),
                same(&other),
                "{fractions:?} against {other:?}"
            );
            if fractions.iter().all(|&(_, f)| is_member(f)) {
                all_members += 1;
            } else {
                some_not += 1;
            }
        }
        assert!(
            all_members > 1_000 && some_not > 500,
            "{all_members} and {some_not}"
        );
    }

    /// An application is judged by its fractions' exact shares; its kernel weights (their
    /// quantisation) would be judged within `buckets / total weight` of them: the
    /// quantisation's error, which judging the fractions takes out of the rule.
    #[test]
    fn fractions_are_judged_within_the_quantisations_error_of_their_weights() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let (mut worst, mut agree, mut n_cases) = (0.0f64, 0, 0);
        for _ in 0..5_000 {
            let n = rng.random_range(1..=80usize);
            let buckets = [16u16, 128, 512][rng.random_range(0..3usize)];
            let fractions = |rng: &mut rand::rngs::SmallRng| -> Vec<(u32, f64)> {
                (1..=n as u32)
                    .map(|i| (i, rng.random_range(0.5..1.5)))
                    .collect()
            };
            let installed = crate::core::controller::weights::quantize(&fractions(&mut rng), 255);
            let app = Application::new(0, fractions(&mut rng), 255, false, false);
            let counts = installed_counts(buckets, &installed);
            let by_fractions = best_move(&counts, app.shares(buckets)).2;
            let by_weights = best_move(&counts, ideal_counts(buckets, app.kernel())).2;
            let total: u32 = app.kernel().iter().map(|w| w.1).sum();
            let error = f64::from(buckets) / f64::from(total);
            assert!(
                (by_fractions - by_weights).abs() <= error + 1e-9,
                "n {n}, buckets {buckets}: {by_fractions} against {by_weights}, error {error}"
            );
            worst = worst.max((by_fractions - by_weights).abs() / error);
            let p = ReplacePolicy::default();
            let shape = GroupShape::Resilient {
                buckets,
                max_weight: 255,
            };
            n_cases += 1;
            agree += usize::from(
                std::mem::discriminant(&decide(&p, shape, &installed, &app, None, 0))
                    == std::mem::discriminant(&decide(
                        &p,
                        shape,
                        &installed,
                        app.kernel(),
                        None,
                        0,
                    )),
            );
        }
        assert!(worst > 0.0);
        // The two judges differ only near the thresholds.
        assert!(agree * 100 >= n_cases * 95, "{agree} of {n_cases}");
    }

    /// When the bucket counts a move needs cannot be written as weights (a member would
    /// need more buckets than the largest weight), the computed weights are written only
    /// if they move a bucket: else the same write would come back at every step.
    #[test]
    fn a_move_weights_cannot_express_is_not_written_again_and_again() {
        let p = ReplacePolicy::default();
        let shape = GroupShape::Resilient {
            buckets: 1024,
            max_weight: 255,
        };
        // Two members at 30 / 70 %: 307 and 717 buckets, more than 255 weight units each;
        // one weight unit is 2.8 buckets, so fractions that move a share by a bucket can
        // keep the same weights.
        let installed = crate::core::controller::weights::quantize(&[(1, 0.3), (2, 0.7)], 255);
        let mut found = false;
        for k in 0..2_000 {
            let f = 0.29 + f64::from(k) * 0.00001;
            let app = Application::new(0, vec![(1, f), (2, 1.0 - f)], 255, false, false);
            if app.kernel() != installed.as_slice() {
                continue;
            }
            let counts = installed_counts(1024, &installed);
            if best_move(&counts, app.shares(1024)).2 <= p.hysteresis_buckets {
                continue;
            }
            found = true;
            assert_eq!(
                decide(&p, shape, &installed, &app, None, 0),
                Verdict::SameForwarding { hold: None },
                "{f}"
            );
        }
        assert!(
            found,
            "no fraction moved a bucket's worth within the same weights"
        );
    }

    /// 64 members of 2 buckets each: one member 10 % lower moves no bound across a
    /// rounding point (its bound moves 0.2 bucket), so nothing is written.
    #[test]
    fn a_change_that_moves_no_bucket_is_not_written() {
        let p = ReplacePolicy::default();
        let all = equal(64, 255);
        let mut one = all.clone();
        one[10].1 = 230;
        let d = bound_drift(128, &all, &one);
        assert_eq!(d.moves, 0, "{d:?}");
        assert!(d.max_buckets > 0.15 && d.max_buckets < 0.25, "{d:?}");
        assert_eq!(
            decide(&p, RES, &all, &one, None, 0),
            Verdict::SameForwarding { hold: None }
        );
        assert_eq!(
            decide(&p, RES, &all, &all, None, 0),
            Verdict::SameForwarding { hold: None }
        );
        // One member: no move to make, whatever its weight.
        assert_eq!(
            decide(&p, RES, &[(1, 255)], &[(1, 7)], None, 0),
            Verdict::SameForwarding { hold: None }
        );
        // The kernel's own check agrees.
        assert!(crate::core::controller::weights::moves_no_bucket(
            128, &all, &one
        ));
    }

    /// Two members of 64 (2 buckets each) falling from LQS 200 to 150 deserve 1.5 buckets
    /// each; the other 62 gain 0.016 each. No bucket move helps (whoever took member 11's
    /// bucket would be 0.98 over), so along the whole damped trajectory nothing is written,
    /// though the kernel's rounding of the computed weights moves 21 bounds after them (the
    /// bound-by-bound rule moved those, among bystanders, over the trajectory's steps).
    #[test]
    fn a_member_losing_half_a_bucket_moves_no_bystanders_bucket() {
        use crate::core::controller::weights::quantize;
        let p = ReplacePolicy::default();
        let mut applied = vec![1.0 / 64.0; 64];
        let mut target: Vec<f64> = vec![200.0; 64];
        target[10] = 150.0;
        target[11] = 150.0;
        let t: f64 = target.iter().sum();
        let mut steps = Vec::new();
        for k in 0..40u64 {
            for (a, x) in applied.iter_mut().zip(&target) {
                *a += 0.5 * (x / t - *a);
            }
            let f: Vec<(u32, f64)> = (applied.iter().enumerate())
                .map(|(i, a)| (i as u32 + 1, *a))
                .collect();
            steps.push((k * 20 * MS, quantize(&f, 255)));
        }
        let installed = equal(64, 255);
        let kernel_moves = (steps.iter())
            .map(|(_, w)| bound_drift(128, &installed, w).moves)
            .max();
        assert_eq!(kernel_moves, Some(21));
        let v = run(&p, RES, &installed, &steps);
        assert!(v.iter().all(|v| written(v).is_none()), "{v:?}");
    }

    /// The verdicts of `proposals` (time, weights) from `installed`, writing as told.
    fn run(
        p: &ReplacePolicy,
        shape: GroupShape,
        installed: &[(u32, u32)],
        proposals: &[(u64, Vec<(u32, u32)>)],
    ) -> Vec<Verdict> {
        let (mut installed, mut hold) = (installed.to_vec(), None);
        let mut out = Vec::new();
        for (t, w) in proposals {
            let v = decide(p, shape, &installed, w, hold.as_ref(), *t);
            hold = match &v {
                Verdict::Replace { weights, .. } => {
                    installed = weights.clone();
                    None
                }
                Verdict::SameForwarding { hold } => hold.clone(),
                Verdict::Held { hold, .. } => Some(hold.clone()),
            };
            out.push(v);
        }
        out
    }

    const EIGHT: GroupShape = GroupShape::Resilient {
        buckets: 8,
        max_weight: 255,
    };

    /// 4 members in 8 buckets (2 each), member 1 at `m1`, the others at 100.
    fn w(m1: u32) -> Vec<(u32, u32)> {
        vec![(1, m1), (2, 100), (3, 100), (4, 100)]
    }

    /// The excess of the best bucket move from 2, 2, 2, 2 to `w(m1)`'s shares: member 1's
    /// deficit `8 m1 / (m1 + 300) - 2` and another's surplus `2 - 800 / (m1 + 300)`,
    /// averaged, less 0.5.
    fn excess(m1: u32) -> f64 {
        let t = f64::from(m1) + 300.0;
        (8.0 * f64::from(m1) / t - 800.0 / t) / 2.0 - 0.5
    }

    /// A move whose excess is within the hysteresis is held, and made once its accumulated
    /// excess reaches the budget; past the hysteresis it is made at once. Only the members
    /// the move is between change their bucket counts: the written weights are the counts,
    /// scaled.
    #[test]
    fn a_small_move_is_held_until_its_excess_reaches_the_budget() {
        let p = ReplacePolicy::default();
        let installed = equal(4, 100);
        // Member 1 at 150: 2.67 buckets, the others 1.78: a bucket to member 1 would leave
        // it 0.33 over and another 0.78 under, more wrong than now. Nothing is written,
        // though the kernel's rounding of these weights would move a bound (2.67 to 3).
        assert!(excess(150) < 0.0);
        assert_eq!(bound_drift(8, &installed, &w(150)).moves, 1);
        assert_eq!(
            decide(&p, EIGHT, &installed, &w(150), None, 0),
            Verdict::SameForwarding { hold: None }
        );
        // At 170 the move's excess is 0.096: held; the budget (0.25 x 200 ms) is reached
        // after 0.05 / 0.096 = 0.52 s.
        let e = excess(170);
        assert!(e > 0.09 && e < 0.1, "{e}");
        let v = decide(&p, EIGHT, &installed, &w(170), None, 10 * MS);
        let Verdict::Held { hold, due_ns } = &v else {
            panic!("{v:?}")
        };
        assert_eq!((hold.excess_bucket_ns, hold.past_since_ns), (0.0, 10 * MS));
        let wait = (0.05e9 / e).ceil() as u64;
        assert_eq!(*due_ns, 10 * MS + wait);
        let steps: Vec<(u64, Vec<(u32, u32)>)> =
            (0..60).map(|k| (10 * MS + k * 20 * MS, w(170))).collect();
        let v = run(&p, EIGHT, &installed, &steps);
        let first = v.iter().position(|v| written(v).is_some()).unwrap();
        assert_eq!(first as u64, wait.div_ceil(20 * MS));
        // A bucket from member 2 to member 1 (3, 1, 2, 2 times 85); nothing after.
        let moved = [(1, 255), (2, 85), (3, 170), (4, 170)];
        assert_eq!(
            written(&v[first]),
            Some((ReplaceCause::HoldExpired, &moved[..]))
        );
        assert!(v[first + 1..].iter().all(|v| written(v).is_none()), "{v:?}");
        // At 200 (excess 0.3, past 0.25): at once.
        assert!(excess(200) > 0.25);
        let v = decide(&p, EIGHT, &installed, &w(200), Some(hold), 20 * MS);
        assert_eq!(written(&v), Some((ReplaceCause::Moves, &moved[..])));
        // Hysteresis 0: any move with a positive excess at once.
        let zero = ReplacePolicy {
            hysteresis_buckets: 0.0,
            ..p
        };
        let v = decide(&zero, EIGHT, &installed, &w(170), None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::Moves, &moved[..])));
        // Every step: any change of the integer weights, as computed.
        let every = ReplacePolicy {
            mode: ReplaceMode::EveryStep,
            ..p
        };
        let v = decide(&every, EIGHT, &installed, &w(134), None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::EveryStep, &w(134)[..])));
    }

    /// A move whose excess stays small (0.022: the budget would take 2.3 s) is made after
    /// 5 x hold = 1 s: the hold's time bound.
    #[test]
    fn a_move_due_for_good_is_made_within_five_holds() {
        let p = ReplacePolicy::default();
        let installed = equal(4, 100);
        assert!(excess(160) > 0.02 && excess(160) < 0.025);
        let steps: Vec<(u64, Vec<(u32, u32)>)> = (0..80).map(|k| (k * 20 * MS, w(160))).collect();
        let v = run(&p, EIGHT, &installed, &steps);
        let first = v.iter().position(|v| written(v).is_some()).unwrap();
        assert_eq!(first, 50, "{v:?}");
        let moved = [(1, 255), (2, 85), (3, 170), (4, 170)];
        assert_eq!(
            written(&v[first]),
            Some((ReplaceCause::HoldExpired, &moved[..]))
        );
        // Until then it was held, due at 1 s.
        let Verdict::Held { due_ns, .. } = &v[1] else {
            panic!("{:?}", v[1])
        };
        assert_eq!(*due_ns, 1000 * MS);
    }

    /// A write makes the move that is due and every other that helps, however small, so
    /// it leaves nothing held: nothing is lost when the computed weights stop changing.
    #[test]
    fn a_write_makes_every_move_that_helps() {
        let p = ReplacePolicy::default();
        let installed = equal(4, 100);
        // Shares 1.26, 1.26, 3.37, 2.11 of 8 buckets.
        let proposed = [(1, 60), (2, 60), (3, 160), (4, 100)];
        // A bucket from member 1 to member 3 (excess 0.55), then member 2's surplus of 0.74
        // against member 3's new deficit of 0.37 (excess 0.053): counts 1, 1, 4, 2.
        let v = decide(&p, EIGHT, &installed, &proposed, None, 0);
        let both = [(1, 63), (2, 63), (3, 252), (4, 126)];
        assert_eq!(written(&v), Some((ReplaceCause::Moves, &both[..])));
        let v = decide(&p, EIGHT, &both, &proposed, None, 20 * MS);
        assert_eq!(v, Verdict::SameForwarding { hold: None });
    }

    /// A member toggling across the point where a bucket would move, back and forth every
    /// step, writes nothing (its excess averages below 0); with hysteresis 0 it writes
    /// every crossing.
    #[test]
    fn a_toggle_at_a_rounding_point_writes_nothing() {
        let installed = equal(4, 100);
        let steps: Vec<(u64, Vec<(u32, u32)>)> = (0..100u64)
            .map(|k| (k * 20 * MS, if k % 2 == 0 { w(170) } else { w(100) }))
            .collect();
        let writes = |p: &ReplacePolicy| {
            (run(p, EIGHT, &installed, &steps).iter())
                .filter(|v| written(v).is_some())
                .count()
        };
        assert_eq!(writes(&ReplacePolicy::default()), 0);
        let zero = ReplacePolicy {
            hysteresis_buckets: 0.0,
            ..ReplacePolicy::default()
        };
        assert_eq!(writes(&zero), 100);
    }

    /// The installed counts kept between decisions (`decide_installed`) give the verdicts
    /// computing them at every decision (`decide`) gives, through writes, holds and
    /// members leaving (`Installed::retain`).
    #[test]
    fn kept_installed_counts_decide_as_counts_computed_each_time() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        let p = ReplacePolicy::default();
        let (mut writes, mut decisions) = (0, 0);
        for _ in 0..100 {
            let n = rng.random_range(2..=64u32);
            let buckets = [16u16, 128, 512][rng.random_range(0..3usize)];
            let shape = GroupShape::Resilient {
                buckets,
                max_weight: 255,
            };
            let mut ids: Vec<u32> = (1..=n).collect();
            let mut kept = Installed::default();
            let mut plain: Vec<(u32, u32)> = Vec::new();
            let (mut kept_hold, mut plain_hold) = (None, None);
            for step in 0..100u64 {
                let now = step * 20_000_000;
                if rng.random_bool(0.02) && ids.len() > 2 {
                    let gone = ids.remove(rng.random_range(0..ids.len()));
                    kept.retain(|w| w.0 != gone);
                    plain.retain(|w| w.0 != gone);
                }
                let fractions: Vec<(u32, f64)> = (ids.iter())
                    .map(|&i| {
                        (
                            i,
                            1.0 + 0.02 * f64::from(i % 7) + rng.random_range(0.0..0.05),
                        )
                    })
                    .collect();
                let app = Application::new(now, fractions, 255, false, false);
                let a = decide_installed(&p, shape, &kept, &app, kept_hold.as_ref(), now);
                let b = decide(&p, shape, &plain, &app, plain_hold.as_ref(), now);
                assert_eq!(a, b, "step {step}");
                decisions += 1;
                match a {
                    Verdict::Replace { weights, .. } => {
                        writes += 1;
                        kept = Installed::new(weights.clone());
                        plain = weights;
                        (kept_hold, plain_hold) = (None, None);
                    }
                    Verdict::Held { hold, .. } => {
                        (kept_hold, plain_hold) = (Some(hold.clone()), Some(hold))
                    }
                    Verdict::SameForwarding { hold } => {
                        (kept_hold, plain_hold) = (hold.clone(), hold)
                    }
                }
                assert_eq!(&kept[..], &plain[..]);
            }
        }
        // Both kinds of verdict, many times.
        assert!(
            writes > 200 && decisions - writes > 5_000,
            "{writes} of {decisions}"
        );
    }

    /// Left alone with its computed weights, a group settles on bucket counts no single
    /// move improves: the fewest buckets on the wrong member that any counts give (the
    /// largest-remainder apportionment's), whatever counts it started from.
    #[test]
    fn a_group_settles_where_no_bucket_move_helps() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let p = ReplacePolicy::default();
        for _ in 0..2_000 {
            let n = rng.random_range(2..=16u32);
            let buckets = rng.random_range(n..=128) as u16;
            let shape = GroupShape::Resilient {
                buckets,
                max_weight: 65535,
            };
            let from: Vec<_> = (1..=n).map(|i| (i, rng.random_range(1..=255))).collect();
            let to: Vec<_> = (1..=n).map(|i| (i, rng.random_range(1..=255))).collect();
            let steps: Vec<(u64, Vec<(u32, u32)>)> =
                (0..200).map(|k| (k * 20 * MS, to.clone())).collect();
            let v = run(&p, shape, &from, &steps);
            let last = (v.iter().rev())
                .find_map(|v| written(v).map(|(_, w)| w.to_vec()))
                .unwrap_or(from.clone());
            let counts = bucket_counts(&resilient_bounds(buckets, &last));
            let ideal: Vec<f64> = ideal_counts(buckets, &to).collect();
            let wrong = |c: &[u64]| -> f64 {
                c.iter()
                    .zip(&ideal)
                    .map(|(c, x)| (*c as f64 - x).abs())
                    .sum()
            };
            let best = largest_remainder(buckets, &ideal);
            assert!(
                wrong(&counts) <= wrong(&best) + 1e-9,
                "{from:?} -> {to:?}: {counts:?}, best {best:?}"
            );
            assert!(best_move(&counts, ideal.iter().copied()).2 <= 0.0);
        }
    }

    /// Hamilton's apportionment: the floors, then a bucket each to the largest remainders.
    fn largest_remainder(buckets: u16, ideal: &[f64]) -> Vec<u64> {
        let mut c: Vec<u64> = ideal.iter().map(|x| x.floor() as u64).collect();
        let mut order: Vec<usize> = (0..ideal.len()).collect();
        order.sort_by(|a, b| {
            (ideal[*b] - ideal[*b].floor()).total_cmp(&(ideal[*a] - ideal[*a].floor()))
        });
        let left = u64::from(buckets) - c.iter().sum::<u64>();
        for k in order.into_iter().take(left as usize) {
            c[k] += 1;
        }
        c
    }

    /// Noise on every member at every step (a fabric's LQS wobbling by +-5 around levels of
    /// 150 and 200), damped as the seed damps (g = 0.5): the default writes under one
    /// replace in ten seconds per group. Measured before the bound-by-bound rule: a hold
    /// that restarted whenever the weights came back within the rounding wrote 4 replaces
    /// a second per group, and one accumulated on the largest bound's distance 2.
    #[test]
    fn noise_around_rounding_points_is_not_written() {
        use crate::core::controller::weights::quantize;
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let p = ReplacePolicy::default();
        let (groups, secs) = (32, 20u64);
        let (mut settling, mut writes) = (0, 0);
        for _ in 0..groups {
            let level: Vec<f64> = (0..64)
                .map(|_| if rng.random_bool(0.2) { 150.0 } else { 200.0 })
                .collect();
            let total: f64 = level.iter().sum();
            let mut applied: Vec<f64> = level.iter().map(|l| l / total).collect();
            let kernel = |a: &[f64]| {
                let s: f64 = a.iter().sum();
                let f: Vec<(u32, f64)> = (a.iter().enumerate())
                    .map(|(i, x)| (i as u32 + 1, x / s))
                    .collect();
                quantize(&f, 255)
            };
            let steps: Vec<(u64, Vec<(u32, u32)>)> = (0..secs * 50)
                .map(|k| {
                    let q: Vec<f64> = (level.iter())
                        .map(|l| l + f64::from(rng.random_range(-5i8..=5)))
                        .collect();
                    let t: f64 = q.iter().sum();
                    for (a, x) in applied.iter_mut().zip(&q) {
                        *a += 0.5 * (x / t - *a);
                    }
                    (k * 20 * MS, kernel(&applied))
                })
                .collect();
            let v = run(&p, RES, &steps[0].1, &steps);
            // The first half lets the bounds installed from the first, noisy computation
            // settle on their side of the rounding; the second is the steady state.
            let half = v.len() / 2;
            settling += v[..half].iter().filter(|v| written(v).is_some()).count();
            writes += v[half..].iter().filter(|v| written(v).is_some()).count();
        }
        let per_s = |n: usize| n as f64 / (groups as f64 * secs as f64 / 2.0);
        let (settling, steady) = (per_s(settling), per_s(writes));
        assert!(
            steady < 0.2,
            "{settling} then {steady} writes a second per group"
        );
    }

    /// Hash-threshold: weights in the same proportion give the same slices and are not
    /// written; any other change is, as computed.
    #[test]
    fn hash_threshold_writes_what_moves_a_slice() {
        let p = ReplacePolicy::default();
        let a = [(1, 100), (2, 50)];
        let b = [(1, 200), (2, 100)];
        let c = [(1, 200), (2, 101)];
        assert_eq!(
            decide(&p, GroupShape::HashThreshold, &a, &b, None, 0),
            Verdict::SameForwarding { hold: None }
        );
        let v = decide(&p, GroupShape::HashThreshold, &a, &c, None, 0);
        assert_eq!(written(&v), Some((ReplaceCause::Moves, &c[..])));
    }

    /// The one-pass counts are the differences of the kernel's bounds.
    #[test]
    fn installed_counts_are_the_bounds_differences() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        for i in 0..10_000 {
            // Half the groups at the kernel's extremes (65 535 buckets, hundreds of members
            // at 16-bit weights): the floating division must stay exact there too.
            let extreme = i % 2 == 1;
            let n = rng.random_range(1..=if extreme { 400 } else { 80usize });
            let buckets = rng.random_range(1..=if extreme { 65_535 } else { 1024 }) as u16;
            let max_weight = if extreme || rng.random_bool(0.5) {
                65_535
            } else {
                255
            };
            let w: Vec<(u32, u32)> = (1..=n as u32)
                .map(|i| (i, rng.random_range(1..=max_weight)))
                .collect();
            assert_eq!(
                installed_counts(buckets, &w),
                bucket_counts(&resilient_bounds(buckets, &w))
            );
        }
    }

    /// Chosen bounds come back exactly through the kernel's rounding, or not at all.
    #[test]
    fn weights_for_bounds_give_exactly_the_bounds() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let mut some = 0;
        for _ in 0..20_000 {
            let n = rng.random_range(1..=64usize);
            let buckets = rng.random_range(n.max(2)..=512) as u16;
            // Random bucket counts summing to `buckets`.
            let mut cuts: Vec<u64> = (0..n - 1)
                .map(|_| rng.random_range(0..=u64::from(buckets)))
                .collect();
            cuts.push(u64::from(buckets));
            cuts.sort_unstable();
            let members: Vec<(u32, u32)> = (1..=n as u32).map(|i| (i, 1)).collect();
            let max_weight = if rng.random_bool(0.5) { 255 } else { 65535 };
            if let Some(w) = weights_for_bounds(buckets, max_weight, &members, &cuts) {
                some += 1;
                assert_eq!(resilient_bounds(buckets, &w), cuts);
                assert!(w.iter().all(|x| x.1 >= 1 && x.1 <= max_weight));
            }
        }
        assert!(some > 10_000, "{some}");
        // Out of order, or not ending at the bucket count: none.
        let m = equal(3, 1);
        assert_eq!(weights_for_bounds(8, 255, &m, &[3, 2, 8]), None);
        assert_eq!(weights_for_bounds(8, 255, &m, &[2, 4, 7]), None);
    }

    /// The drift agrees with the kernel's bucket shares (`weights::bucket_shares`): no
    /// bound moves exactly when no member's share changes.
    #[test]
    fn drift_agrees_with_the_bucket_shares() {
        use crate::core::controller::weights::bucket_shares;
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
        for _ in 0..20_000 {
            let n = rng.random_range(1..=16u32);
            let buckets = rng.random_range(2..=256u16);
            let a: Vec<_> = (1..=n).map(|i| (i, rng.random_range(1..=255))).collect();
            let b: Vec<_> = (1..=n).map(|i| (i, rng.random_range(1..=255))).collect();
            let same = bucket_shares(buckets, &a) == bucket_shares(buckets, &b);
            assert_eq!(bound_drift(buckets, &a, &b).moves == 0, same, "{a:?} {b:?}");
        }
    }
}
/// Churn like `bench_scale`'s fabric windows, in virtual time, for one group of 64 members
/// and 128 buckets: every member's LQS wobbling by +-5 around its level every 20 ms, a
/// level move 200 <-> 150 on some member 0.32 times a second, and member 8 silent (LQS 0:
/// it leaves the group) for 500 ms every 10 s; damped as the seed damps (g = 0.5).
#[cfg(test)]
mod probe {
    use super::*;
    use crate::core::controller::weights::quantize;
    use rand::{Rng as _, SeedableRng as _};

    const RES: GroupShape = GroupShape::Resilient {
        buckets: 128,
        max_weight: 255,
    };

    /// Writes a second per group under `p`, over `groups` groups and `secs` seconds.
    fn writes_per_s(p: &ReplacePolicy, groups: u64, secs: u64) -> f64 {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut writes = 0u64;
        let kernel = |a: &[f64]| {
            let s: f64 = a.iter().sum();
            let f: Vec<(u32, f64)> = (a.iter().enumerate())
                .map(|(i, x)| (i as u32 + 1, x / s))
                .collect();
            quantize(&f, 255)
        };
        for _ in 0..groups {
            let mut level = vec![200.0f64; 64];
            let mut applied = vec![1.0 / 64.0; 64];
            let mut installed = kernel(&applied);
            let mut hold: Option<Hold> = None;
            for k in 0..secs * 50 {
                if rng.random_bool(0.0064) {
                    let m = rng.random_range(0..64);
                    level[m] = if level[m] == 200.0 { 150.0 } else { 200.0 };
                }
                let silent = k % 500 < 25;
                let q: Vec<f64> = (level.iter().enumerate())
                    .map(|(i, l)| {
                        if silent && i == 7 {
                            0.0
                        } else {
                            l + f64::from(rng.random_range(-5i8..=5))
                        }
                    })
                    .collect();
                let t: f64 = q.iter().sum();
                for (a, x) in applied.iter_mut().zip(&q) {
                    // A path to 0 at once (6.4), the others damped.
                    *a = if *x == 0.0 {
                        0.0
                    } else {
                        *a + 0.5 * (x / t - *a)
                    };
                }
                let s: f64 = applied.iter().sum();
                applied.iter_mut().for_each(|a| *a /= s);
                if silent {
                    // The failed spine's member nexthop is deleted: out of the group.
                    installed.retain(|x| x.0 != 8);
                }
                let proposed = kernel(&applied);
                match decide(p, RES, &installed, &proposed, hold.as_ref(), k * 20_000_000) {
                    Verdict::Replace { weights, .. } => {
                        writes += 1;
                        installed = weights;
                        hold = None;
                    }
                    Verdict::SameForwarding { hold: h } => hold = h,
                    Verdict::Held { hold: h, .. } => hold = Some(h),
                }
            }
        }
        writes as f64 / (groups * secs) as f64
    }

    /// About a write in five seconds per group (0.20 measured: the spine failures' member
    /// leaving and returning, and the level moves once several add up; 0.21 when a write
    /// made only the moves with an excess above 0.1), against 50 (every T_reweight) with
    /// every change written. The bound-by-bound rule this module had before wrote 0.98
    /// here (2.03 without the bounds that moved along).
    #[test]
    fn fabric_churn_costs_about_a_write_in_five_seconds_per_group() {
        let default = writes_per_s(&ReplacePolicy::default(), 16, 20);
        let every = writes_per_s(
            &ReplacePolicy {
                mode: ReplaceMode::EveryStep,
                ..ReplacePolicy::default()
            },
            4,
            20,
        );
        assert!(
            default < 0.3 && every > 100.0 * default,
            "{default} {every}"
        );
    }
}
