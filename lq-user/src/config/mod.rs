//! The configuration file of `lqd` (TOML).
//!
//! Keys of `[lq-telemetry]` are the leaves of the YANG container `lq-telemetry` of
//! `ietf-lq-telemetry` (seed 003 section 5.6), with the model's ranges and defaults. The
//! other sections hold what the model leaves to implementations: the receiver's
//! interfaces, the NNH mapping (section 6.1: uplinks and destinations), damping (6.4) and
//! nexthop-group options. Unknown keys and out-of-range values are errors that name the
//! file, the line and the allowed range.

use std::{
    collections::BTreeMap,
    fmt,
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

pub mod key_chain;

use lq_common::wire::{AsRange, DEFAULT_PORT};
use serde::{Deserialize, Deserializer, de};

use crate::core::controller::{
    config::{
        ControllerConfig, GRAY_FAILURE_MIN_AVAILABLE_DEFAULT, GRAY_FAILURE_MIN_AVAILABLE_RANGE,
        GrayFailurePrune, GroupKind, IntegralParams, ParallelLinkAggregation, WeightFunction,
        WeightResolution,
    },
    path_quality::{Capacity, CapacitySource, NnhMapping, Prefix, Uplink, UplinkId, node},
};

/// Errors of loading a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type or an out-of-range value.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A rule that spans several keys.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Defines an integer newtype whose deserialisation enforces a range, so the TOML error
/// points at the offending value's line.
macro_rules! ranged {
    ($(#[$m:meta])* $name:ident, $t:ty, $lo:expr, $hi:expr, $default:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(pub $t);
        impl $name {
            /// Smallest allowed value.
            pub const MIN: $t = $lo;
            /// Largest allowed value.
            pub const MAX: $t = $hi;
        }
        impl Default for $name {
            fn default() -> Self {
                Self($default)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // A wrong type names the range too ("expected an integer in 10..=100").
                struct Integer;
                impl de::Visitor<'_> for Integer {
                    type Value = i64;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        write!(f, "an integer in {}..={}", $lo, $hi)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
                        Ok(v)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
                        Ok(i64::try_from(v).unwrap_or(i64::MAX))
                    }
                }
                let v = d.deserialize_i64(Integer)?;
                if v < i64::from($lo) || v > i64::from($hi) {
                    return Err(de::Error::custom(format!(
                        "{v} is out of range: allowed {}..={}",
                        $lo, $hi
                    )));
                }
                Ok(Self(v as $t))
            }
        }
    };
}

ranged!(
    /// `notify-interval-ms`: T_notify, 10..=100 ms, default 20 (section 10).
    NotifyIntervalMs, u16, 10u16, 100u16, 20
);
ranged!(
    /// `change-threshold`: 10..=50, default 25 (section 10).
    ChangeThreshold, u8, 10u8, 50u8, 25
);
ranged!(
    /// `miss-count`: 2..=10, default 3 (section 10).
    MissCount, u8, 2u8, 10u8, 3
);
ranged!(
    /// Resilient group bucket count.
    Buckets, u16, 2u16, 32768u16, 128
);
ranged!(
    /// `[nexthop-group] replace-hold-ms`: the longest a bucket move is held, 0..=10000 ms.
    ReplaceHoldMs, u32, 0u32, 10_000u32, 200
);
ranged!(
    /// `rate-mbit`: a link's line rate in Mbit/s, 1 ..= 100 000 000 (100 Tbit/s). Zero
    /// would make every utilisation infinite (Appendix A.1's U = rate / capacity).
    RateMbit, u32, 1u32, 100_000_000u32, 1
);

/// A float that must lie in a range (e.g. the damping gain 0.25..=1.0).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct Gain(pub f64);

impl Default for Gain {
    fn default() -> Self {
        Self(0.5)
    }
}

impl<'de> Deserialize<'de> for Gain {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.25..=1.0).contains(&v) {
            return Err(de::Error::custom(format!(
                "{v} is out of range: allowed 0.25..=1.0 (seed 003 section 6.4)"
            )));
        }
        Ok(Self(v))
    }
}

/// Node role (YANG `role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Spine: advertises its egress links.
    Helper,
    /// Leaf: receives advertisements and steers traffic.
    LoadBalancer,
    /// Both (5-stage spine, section 9).
    Dual,
}

impl Role {
    /// The YANG enum name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Helper => "helper",
            Self::LoadBalancer => "load-balancer",
            Self::Dual => "dual",
        }
    }
    /// Whether this role receives advertisements.
    pub const fn receives(self) -> bool {
        matches!(self, Self::LoadBalancer | Self::Dual)
    }
    /// Whether this role advertises.
    pub const fn advertises(self) -> bool {
        matches!(self, Self::Helper | Self::Dual)
    }
}

/// Fewer resilient buckets per member than this and a member's share moves in steps large
/// enough that most damped reweights move no bucket at all (`lqd run` and `lqd
/// check-config` warn).
pub const BUCKETS_PER_MEMBER_HINT: usize = 8;

/// A dotted-quad Router-ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouterId(pub u32);

impl<'de> Deserialize<'de> for RouterId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ipv4Addr::from_str(&s)
            .map(|a| Self(u32::from(a)))
            .map_err(|_| {
                de::Error::custom(format!(
                    "{s:?} is not a dotted-quad Router-ID such as \"10.0.0.1\""
                ))
            })
    }
}

impl serde::Serialize for RouterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl serde::Serialize for AsRangeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let AsRange { first, last } = self.0;
        if first == last {
            s.collect_str(&first)
        } else {
            s.collect_str(&format_args!("{first}-{last}"))
        }
    }
}

impl serde::Serialize for PrefixSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}/{}", self.0.addr, self.0.len))
    }
}

impl fmt::Display for RouterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv4Addr::from(self.0).fmt(f)
    }
}

/// An AS range `"65000-65100"` or a single AS `"65001"` (or an integer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsRangeSpec(pub AsRange);

impl<'de> Deserialize<'de> for AsRangeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, serde::Serialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Str(String),
        }
        let parse = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| de::Error::custom(format!("{s:?} is not an AS number")))
        };
        match Raw::deserialize(d)? {
            Raw::Int(a) => Ok(Self(AsRange::single(a))),
            Raw::Str(s) => {
                let (a, b) = match s.split_once('-') {
                    Some((a, b)) => (parse(a)?, parse(b)?),
                    None => (parse(&s)?, parse(&s)?),
                };
                if a > b {
                    return Err(de::Error::custom(format!(
                        "AS range {s:?} is empty (first > last)"
                    )));
                }
                Ok(Self(AsRange { first: a, last: b }))
            }
        }
    }
}

/// An IP prefix `"10.4.0.0/24"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixSpec(pub Prefix);

impl<'de> Deserialize<'de> for PrefixSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_prefix(&s).map(Self).map_err(de::Error::custom)
    }
}

/// Parses `ADDR/LEN`; host bits must be zero.
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not a prefix such as \"10.4.0.0/24\""))?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IP address"))?;
    let len: u8 = l
        .parse()
        .map_err(|_| format!("{l:?} is not a prefix length"))?;
    let host_bits_set = match addr {
        IpAddr::V4(v) => {
            if len > 32 {
                return Err(format!("prefix length {len} exceeds 32"));
            }
            u32::from(v).checked_shl(u32::from(len)).unwrap_or(0) != 0
        }
        IpAddr::V6(v) => {
            if len > 128 {
                return Err(format!("prefix length {len} exceeds 128"));
            }
            u128::from(v).checked_shl(u32::from(len)).unwrap_or(0) != 0
        }
    };
    if host_bits_set {
        return Err(format!("{s:?} has host bits set"));
    }
    Ok(Prefix { addr, len })
}

/// `[lq-telemetry]`: the YANG container's leaves.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LqTelemetry {
    /// `enabled` (default false, as in the model: lqd refuses to run disabled).
    #[serde(default)]
    pub enabled: bool,
    /// `role`.
    pub role: Role,
    /// `active-transports`: only `ietf-lq-telemetry:lq-transport-udp` is implemented.
    #[serde(default = "default_transports")]
    pub active_transports: Vec<String>,
    /// `as-qualified`.
    #[serde(default)]
    pub as_qualified: bool,
    /// `local-as`: required when as-qualified (there is no BGP to take it from).
    #[serde(default)]
    pub local_as: Option<u32>,
    /// `pfc-fabric`.
    #[serde(default)]
    pub pfc_fabric: bool,
    /// `notify-interval-ms`.
    #[serde(default)]
    pub notify_interval_ms: NotifyIntervalMs,
    /// `change-threshold`.
    #[serde(default)]
    pub change_threshold: ChangeThreshold,
    /// `miss-count`.
    #[serde(default)]
    pub miss_count: MissCount,
    /// `diagnostics-enabled`.
    #[serde(default)]
    pub diagnostics_enabled: bool,
    /// The node's Router-ID (required for helper and dual roles).
    #[serde(default)]
    pub router_id: Option<RouterId>,
}

/// The transport identity lqd implements.
pub const TRANSPORT_UDP: &str = "ietf-lq-telemetry:lq-transport-udp";

fn default_transports() -> Vec<String> {
    vec![TRANSPORT_UDP.into()]
}

/// `[udp]`: the UDP binding.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Udp {
    /// UDP port of advertisements.
    #[serde(default = "default_port")]
    pub port: u16,
}

impl Default for Udp {
    fn default() -> Self {
        Self { port: DEFAULT_PORT }
    }
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

/// `[receiver]`: the XDP receiver of the load-balancer role.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Receiver {
    /// Interfaces the XDP receiver attaches to (the leaf's uplinks).
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// The AS plan: AS numbers and ranges accepted from neighbors when as-qualified.
    #[serde(default)]
    pub as_plan: Vec<AsRangeSpec>,
    /// Pass consumed LQ datagrams to the stack too (for a tcpdump on the host).
    #[serde(default)]
    pub pass_through: bool,
    /// bpffs folder for the pinned maps (default `/sys/fs/bpf/lq/<instance>`).
    #[serde(default)]
    pub pin_dir: Option<PathBuf>,
    /// Whether advertisements on these interfaces must carry a valid authentication
    /// trailer (seed 003 section 12.1; issue 39): `none` (the XDP path, trailers stepped
    /// over), `accept-unauthenticated` (migration: verified when signed, accepted and
    /// counted when not) or `required`. The mode of every interface that
    /// `interface-authentication` does not name.
    #[serde(default)]
    pub authentication: Authentication,
    /// `[receiver.interface-authentication]`: a mode per uplink (`eth2 =
    /// "accept-unauthenticated"`), over `authentication`: one spine migrated at a time,
    /// or a trusted uplink left on the XDP path beside authenticating ones.
    #[serde(default)]
    pub interface_authentication: BTreeMap<String, Authentication>,
    /// The key chain the trailers are verified with (`config::key_chain`); needed unless
    /// `authentication = "none"`. Read again on SIGHUP.
    #[serde(default)]
    pub key_chain: Option<PathBuf>,
}

impl Receiver {
    /// The authentication mode of `interface`: its `[receiver.interface-authentication]`
    /// entry, else `[receiver] authentication`.
    pub fn authentication_of(&self, interface: &str) -> Authentication {
        self.interface_authentication
            .get(interface)
            .copied()
            .unwrap_or(self.authentication)
    }

    /// The interfaces whose datagrams are verified (mode other than `none`), with their
    /// modes, in `interfaces` order.
    pub fn authenticating_interfaces(&self) -> Vec<(&str, Authentication)> {
        self.interfaces
            .iter()
            .map(|i| (i.as_str(), self.authentication_of(i)))
            .filter(|(_, m)| *m != Authentication::None)
            .collect()
    }
}

/// `[receiver] authentication`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Authentication {
    /// No verification: the XDP receiver reads every datagram (a trailer is stepped over).
    #[default]
    None,
    /// Signed datagrams are verified (and dropped when they fail); unsigned ones are
    /// accepted and counted (`auth_unauthenticated_accepted`).
    AcceptUnauthenticated,
    /// Only datagrams whose trailer verifies are accepted.
    Required,
}

impl Authentication {
    /// The configuration's (and the YANG module's) name of the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::AcceptUnauthenticated => "accept-unauthenticated",
            Self::Required => "required",
        }
    }
}

/// `[damping]`: receiver damping (section 6.4).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Damping {
    /// g, 0.25..=1.0, default 0.5.
    #[serde(default)]
    pub gain: Gain,
    /// T_reweight in ms; default T_notify; must be >= T_notify.
    #[serde(default)]
    pub reweight_interval_ms: Option<u32>,
    /// How parallel spine->remote links are combined.
    #[serde(default)]
    pub parallel_links: ParallelLinks,
    /// Scale quality by path capacity (seed 003 section 4.1: `weight(path_i) =
    /// f(FARE_capacity(i), LQ_quality(i))`); on by default. Equal capacities, or none
    /// known, give section 6.3 exactly.
    #[serde(default = "default_true")]
    pub capacity_weighting: bool,
    /// `weight-function`: "seed" (sections 6.3/6.4) or "integral" (docs/weights.md).
    #[serde(default)]
    pub weight_function: WeightFunctionName,
    /// Integral function: deadband of the congestion signal (0..=1).
    #[serde(default)]
    pub integral_deadband: Option<f64>,
    /// Integral function: multiplicative decrease of m per T_reweight.
    #[serde(default)]
    pub integral_decrease: Option<f64>,
    /// Integral function: additive recovery of m per T_reweight.
    #[serde(default)]
    pub integral_increase: Option<f64>,
    /// Integral function: smallest m with a measured (diagnostics) remote capacity.
    #[serde(default)]
    pub integral_floor: Option<f64>,
    /// Integral function: largest m (a member with spare capacity), 1..=16.
    #[serde(default)]
    pub integral_ceiling: Option<f64>,
    /// Integral function: smallest m with an estimated or unknown remote capacity.
    #[serde(default)]
    pub integral_floor_estimated: Option<f64>,
    /// Integral function: smallest fraction change that reprograms the group.
    #[serde(default)]
    pub integral_hysteresis: Option<f64>,
    /// Integral function: half-life of the peak-held available bandwidth (ms).
    #[serde(default)]
    pub integral_capacity_half_life_ms: Option<u64>,
    /// `gray-failure-prune`: an opt-in departure from section 6.3 (docs/weights.md "Gray
    /// failures"): a path whose spine reports loss (CL 7) while its link advertises at
    /// least `gray-failure-min-available` of the path's capacity as available counts as
    /// path quality 0. Off by default.
    #[serde(default)]
    pub gray_failure_prune: bool,
    /// `gray-failure-min-available`: 0.1..=1.0, default 0.9.
    #[serde(default)]
    pub gray_failure_min_available: Option<f64>,
}

impl Default for Damping {
    fn default() -> Self {
        Self {
            gain: Gain::default(),
            reweight_interval_ms: None,
            parallel_links: ParallelLinks::default(),
            capacity_weighting: true,
            weight_function: WeightFunctionName::default(),
            integral_deadband: None,
            integral_decrease: None,
            integral_increase: None,
            integral_floor: None,
            integral_ceiling: None,
            integral_floor_estimated: None,
            integral_hysteresis: None,
            integral_capacity_half_life_ms: None,
            gray_failure_prune: false,
            gray_failure_min_available: None,
        }
    }
}

/// `[damping] weight-function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightFunctionName {
    /// Seed 003 sections 6.3/6.4.
    #[default]
    Seed,
    /// Capacity x integral controller on CL / queue depth.
    Integral,
}

impl Damping {
    /// The gray-failure prune, `None` unless `gray-failure-prune = true`.
    pub fn gray_failure(&self) -> Option<GrayFailurePrune> {
        self.gray_failure_prune.then(|| GrayFailurePrune {
            min_available: self
                .gray_failure_min_available
                .unwrap_or(GRAY_FAILURE_MIN_AVAILABLE_DEFAULT),
        })
    }

    /// The weight function with its parameters (defaults for the keys not given).
    pub fn weight_function(&self) -> WeightFunction {
        match self.weight_function {
            WeightFunctionName::Seed => WeightFunction::Seed,
            WeightFunctionName::Integral => {
                let d = IntegralParams::default();
                WeightFunction::Integral(IntegralParams {
                    deadband: self.integral_deadband.unwrap_or(d.deadband),
                    decrease: self.integral_decrease.unwrap_or(d.decrease),
                    increase: self.integral_increase.unwrap_or(d.increase),
                    floor: self.integral_floor.unwrap_or(d.floor),
                    ceiling: self.integral_ceiling.unwrap_or(d.ceiling),
                    floor_estimated: self.integral_floor_estimated.unwrap_or(d.floor_estimated),
                    hysteresis: self.integral_hysteresis.unwrap_or(d.hysteresis),
                    capacity_half_life: self
                        .integral_capacity_half_life_ms
                        .map_or(d.capacity_half_life, Duration::from_millis),
                })
            }
        }
    }
}

/// Parallel-link aggregation rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParallelLinks {
    /// The minimum LQS of the parallel links.
    #[default]
    Minimum,
    /// Capacity-weighted mean.
    CapacityWeightedMean,
}

/// `[nexthop-group]`: how weights reach the kernel.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NexthopGroup {
    /// `resilient` (default) or `hash-threshold`.
    #[serde(default = "default_group_type", rename = "type")]
    pub group_type: GroupType,
    /// Resilient group bucket count.
    #[serde(default)]
    pub buckets: Buckets,
    /// Resilient group idle timer in ms (sent to the kernel in centiseconds).
    #[serde(default = "default_idle_ms")]
    pub idle_timer_ms: u32,
    /// Resilient group unbalanced timer in ms (0: never force).
    #[serde(default)]
    pub unbalanced_timer_ms: u32,
    /// Largest integer weight: 255, or 65535 (16-bit weights need kernel 6.12).
    #[serde(default = "default_weight_max")]
    pub weight_max: u32,
    /// First nexthop object id lqd uses; members are id-base + uplink id, groups
    /// id-base + 0x10000 + n (one per remote node), the slow plane's id-base + 0x18000 + k.
    #[serde(default = "default_id_base")]
    pub id_base: u32,
    /// Program the kernel (false: compute and show weights only; ECMP stays equal).
    #[serde(default = "default_true")]
    pub program_kernel: bool,
    /// Delete lqd's nexthop objects and routes on exit (default: leave forwarding in place).
    #[serde(default)]
    pub flush_on_exit: bool,
    /// Which computed weight changes are written to the kernel (issue 41,
    /// `core::controller::replace`): `forwarding-change` (default) writes a resilient group
    /// when a bucket move (judged member by member against the computed shares) helps by
    /// more than the hysteresis, or a held one once its hold ends, and a hash-threshold
    /// group when a slice moves; `every-step` writes every change of the integer weights,
    /// as lqd did before.
    #[serde(default)]
    pub replace: ReplaceModeName,
    /// Resilient groups, `replace = "forwarding-change"`: how far (in buckets) a bucket
    /// move's excess (the giver's surplus plus the taker's deficit, halved, less the half
    /// bucket any rounding leaves) may grow before the move is written at once. 0..=4,
    /// default 0.25.
    #[serde(default)]
    pub hysteresis_buckets: HysteresisBuckets,
    /// The hold of a bucket move within the hysteresis, in ms (0..=10000, default 200,
    /// ten T_reweight at the seed's defaults): a held move is made once its accumulated
    /// excess reaches `hysteresis-buckets` x this, or once some move has helped without a
    /// pause for 5 x this.
    #[serde(default)]
    pub replace_hold_ms: ReplaceHoldMs,
    /// Before issue 41: skip replaces that would move no bucket. That is now the default
    /// (`replace = "forwarding-change"`); the key is accepted, ignored, and warned about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_bucket_neutral: Option<bool>,
}

/// `[nexthop-group] replace`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplaceModeName {
    /// Only changes of forwarding, with hysteresis and a bounded hold.
    #[default]
    ForwardingChange,
    /// Every change of the integer weights.
    EveryStep,
}

/// `[nexthop-group] hysteresis-buckets`: 0..=4 buckets, default 0.25.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct HysteresisBuckets(pub f64);

impl Default for HysteresisBuckets {
    fn default() -> Self {
        Self(crate::core::controller::replace::DEFAULT_HYSTERESIS_BUCKETS)
    }
}

impl<'de> Deserialize<'de> for HysteresisBuckets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.0..=4.0).contains(&v) {
            return Err(de::Error::custom(format!(
                "{v} is out of range: allowed 0..=4 buckets"
            )));
        }
        Ok(Self(v))
    }
}

impl Default for NexthopGroup {
    fn default() -> Self {
        Self {
            group_type: GroupType::Resilient,
            buckets: Buckets::default(),
            idle_timer_ms: default_idle_ms(),
            unbalanced_timer_ms: 0,
            weight_max: default_weight_max(),
            id_base: default_id_base(),
            program_kernel: true,
            flush_on_exit: false,
            replace: ReplaceModeName::ForwardingChange,
            hysteresis_buckets: HysteresisBuckets::default(),
            replace_hold_ms: ReplaceHoldMs::default(),
            skip_bucket_neutral: None,
        }
    }
}

/// Group type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupType {
    /// Resilient hashing: a weight change moves only the buckets it must.
    Resilient,
    /// Hash-threshold (classic multipath).
    HashThreshold,
}

fn default_group_type() -> GroupType {
    GroupType::Resilient
}
fn default_idle_ms() -> u32 {
    1000
}
fn default_weight_max() -> u32 {
    255
}
fn default_id_base() -> u32 {
    0x4c00_0000
}
fn default_true() -> bool {
    true
}

/// `[[uplink]]`: one next-hop member (a local uplink towards a spine).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UplinkSpec {
    /// Stable id (1..=65535), unique.
    pub id: u16,
    /// The spine's Router-ID.
    pub spine: RouterId,
    /// The spine's AS (0 unqualified).
    #[serde(default)]
    pub spine_as: u32,
    /// Local interface.
    pub interface: String,
    /// The spine's address on that link.
    pub gateway: IpAddr,
    /// The uplink's capacity in Gbit/s (seed 003 section 4.1), which bounds every path
    /// through it. Default: `rate-mbit`, else the driver's speed, else unknown.
    #[serde(default)]
    pub capacity_gbps: Option<f64>,
    /// The uplink's line rate for `[local-quality] source = "measured"` (Mbit/s; default:
    /// the egress qdisc's shaping rate, else the driver's speed), as a `[[link]]`'s; also
    /// its capacity when `capacity-gbps` is not given.
    #[serde(default)]
    pub rate_mbit: Option<RateMbit>,
}

impl UplinkSpec {
    /// The configured capacity (Gbit/s): `capacity-gbps`, else `rate-mbit`.
    pub fn configured_capacity_gbps(&self) -> Option<f64> {
        self.capacity_gbps
            .or(self.rate_mbit.map(|r| f64::from(r.0) / 1000.0))
    }
}

/// `[[path-capacity]]`: the slow plane's capacity of the path through one spine to one
/// remote node (seed 003 section 4.1: "Slow Plane (BGP/FARE): ... static capacity"), for
/// fabrics whose BGP does not carry the Link Bandwidth community, or without BGP. It wins
/// over a Link Bandwidth learned over BMP for the same path, as covering rules win over a
/// learned mapping.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PathCapacitySpec {
    /// The spine's Router-ID (every `[[uplink]]` to it).
    pub spine: RouterId,
    /// The spine's AS (0 unqualified).
    #[serde(default)]
    pub spine_as: u32,
    /// The remote node (NNH) behind the spine.
    pub remote_node: RouterId,
    /// The remote node's AS (0 unqualified).
    #[serde(default)]
    pub remote_as: u32,
    /// The path's capacity in Gbit/s (the spine -> remote link's), > 0.
    pub capacity_gbps: f64,
}

/// `[[destination]]`: one destination prefix and its NNH (section 6.1).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DestinationSpec {
    /// The prefix routed through the group.
    pub prefix: PrefixSpec,
    /// The remote leaf's Router-ID (absent: local-only quality, 6.1).
    #[serde(default)]
    pub remote_node: Option<RouterId>,
    /// The remote leaf's AS (0 unqualified).
    #[serde(default)]
    pub remote_as: u32,
}

/// `[helper]`: the congestion pipeline (seed 003 Appendix A) and the advertiser (7.2).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HelperSection {
    /// T_sample in ms (A.1: 1..=5, default 2).
    #[serde(default = "default_t_sample")]
    pub t_sample_ms: u8,
    /// A.3 EWMA gain on rising metrics (0.3..=0.8, default 0.5).
    #[serde(default = "default_alpha_rise")]
    pub alpha_rise: f64,
    /// A.3 EWMA gain on falling metrics (0.05..=0.2, default 0.1).
    #[serde(default = "default_alpha_fall")]
    pub alpha_fall: f64,
    /// A.6 T_hold_down in ms (50..=200, default 100).
    #[serde(default = "default_hold_down")]
    pub hold_down_ms: u16,
    /// An upper bound on the links' IP MTU. Datagrams are split for the smallest real
    /// MTU of the `[[link]]`s (IFLA_MTU, followed at run time); this only lowers it.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// `multicast` (224.0.0.1 / ff02::1, the default) or `unicast` (each link's `peer`).
    #[serde(default)]
    pub send_to: SendTo,
    /// Send over IPv6 (link-local) instead of IPv4.
    #[serde(default)]
    pub ipv6: bool,
    /// A key chain file (RFC 8177 fields, `config::key_chain`): every advertisement
    /// carries an authentication trailer made with its newest key whose send-lifetime is
    /// active (seed 003 section 12.1; issue 39). Its keys are read again on SIGHUP; turning
    /// authentication on or off needs a restart (the datagrams' split changes).
    #[serde(default)]
    pub key_chain: Option<PathBuf>,
}

impl Default for HelperSection {
    fn default() -> Self {
        Self {
            t_sample_ms: default_t_sample(),
            alpha_rise: default_alpha_rise(),
            alpha_fall: default_alpha_fall(),
            hold_down_ms: default_hold_down(),
            mtu: None,
            send_to: SendTo::Multicast,
            ipv6: false,
            key_chain: None,
        }
    }
}

fn default_t_sample() -> u8 {
    2
}
fn default_alpha_rise() -> f64 {
    0.5
}
fn default_alpha_fall() -> f64 {
    0.1
}
fn default_hold_down() -> u16 {
    100
}

/// Where advertisements go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SendTo {
    /// The link-local all-nodes group.
    #[default]
    Multicast,
    /// The link's `peer` address.
    Unicast,
}

/// `[[link]]`: one monitored egress link of the helper role.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LinkSpec {
    /// The egress interface; its ifIndex is the advertised link-id.
    pub interface: String,
    /// The node(s) at the far end (several for a shared medium, seed 6.2).
    pub remote_node: Vec<RouterId>,
    /// Their AS (when as-qualified).
    #[serde(default)]
    pub remote_as: u32,
    /// Unicast destination (with `send-to = "unicast"`).
    #[serde(default)]
    pub peer: Option<IpAddr>,
    /// Configured link speed in Mbit/s (else the qdisc's shaping rate, else ethtool).
    #[serde(default)]
    pub rate_mbit: Option<RateMbit>,
    /// The PFC priorities whose pause time counts for this link's F (with the link in
    /// `[pfc] interfaces`); empty: all eight. The largest paused fraction wins.
    #[serde(default)]
    pub pfc_priorities: Vec<u8>,
}

/// `[pfc]`: PFC frame counting (seed 000) on interfaces.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PfcSection {
    /// Interfaces whose received PFC frames are counted (a bond's members, never the bond).
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// Let `interfaces` name hardware devices too: only for a NIC known to pass PFC frames
    /// to the kernel (most consume them; use `[[pfc.ethtool]]` for those). Default false:
    /// lqd refuses a hardware interface there (seed 000: every qualifying frame counted).
    #[serde(default)]
    pub tc_on_hardware: bool,
    /// bpffs folder of the PFC maps (default `/sys/fs/bpf/lq/<instance>-pfc`).
    #[serde(default)]
    pub pin_dir: Option<PathBuf>,
    /// Link speed for pause-duration accounting when the driver reports none (Mbit/s).
    #[serde(default)]
    pub speed_mbps: Option<u32>,
    /// NIC per-priority PFC counters read with `ethtool -S` (hardware consumes PFC frames
    /// before any tc hook sees them; and transmitted frames only a NIC can confirm).
    #[serde(default)]
    pub ethtool: Vec<EthtoolSource>,
    /// Transmitted counts of a veth from its peer's PFC counter (`[[pfc.veth-peer]]`).
    #[serde(default)]
    pub veth_peer: Vec<VethPeerSource>,
}

/// `[[pfc.veth-peer]]`: a veth's transmitted PFC frames, confirmed by the peer's receive
/// count (seed 000 section 5: only frames confirmed emitted count). A veth transmit is a
/// synchronous delivery to the peer's receive path, where the peer's PFC counter (another
/// lqd's `[pfc] interfaces`, or any counter pinned in lqd's layout) counts every frame by
/// the receive rules; a frame the veth dropped never reaches it.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct VethPeerSource {
    /// The veth whose transmitted frames are exported (its peer is found by the
    /// `peer_ifindex` of its ethtool statistics).
    pub interface: String,
    /// The peer's PFC counter pins, e.g. `/sys/fs/bpf/lq/<peer instance>-pfc`.
    pub peer_pin_dir: PathBuf,
}

/// `[[pfc.ethtool]]`: one interface's eight per-priority PFC counters from ethtool
/// statistics (never per-queue, per-traffic-class or 802.1p counters).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct EthtoolSource {
    /// The interface (a bond's member, never the bond).
    pub interface: String,
    /// `received` or `transmitted`.
    pub direction: PfcDirection,
    /// The driver's statistic name with `{n}` for the priority, e.g. "tx_prio{n}_pause";
    /// or use `preset`.
    #[serde(default)]
    pub template: Option<String>,
    /// A known driver's names: "mlx5".
    #[serde(default)]
    pub preset: Option<String>,
    /// The counters' width in bits (wrap accounting for narrower ones).
    #[serde(default = "default_width")]
    pub width_bits: u32,
}

fn default_width() -> u32 {
    64
}

/// Direction of PFC frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PfcDirection {
    /// Frames received on the interface.
    Received,
    /// Frames the interface sent.
    Transmitted,
}

impl EthtoolSource {
    /// The statistic names of the eight priorities.
    pub fn stat_map(&self) -> Result<crate::sys::ethtool::StatMap, String> {
        use crate::sys::ethtool::StatMap;
        match (&self.template, self.preset.as_deref()) {
            (Some(t), None) if t.contains("{n}") => Ok(StatMap::template(t, self.width_bits)),
            (Some(_), None) => Err(format!(
                "[[pfc.ethtool]] {}: template needs {{n}} for the priority",
                self.interface
            )),
            (None, Some("mlx5")) => Ok(match self.direction {
                PfcDirection::Received => StatMap::mlx5_rx(),
                PfcDirection::Transmitted => StatMap::mlx5_tx(),
            }),
            (None, Some(p)) => Err(format!(
                "[[pfc.ethtool]] {}: unknown preset {p:?} (known: mlx5)",
                self.interface
            )),
            _ => Err(format!(
                "[[pfc.ethtool]] {}: give exactly one of template and preset",
                self.interface
            )),
        }
    }
}

/// `[ipfix]`: export of PFC counters as IPFIX Options Template records (seed 000 section 6).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct IpfixSection {
    /// The collector, `ADDR:PORT` (UDP).
    pub collector: std::net::SocketAddr,
    /// Export interval in ms.
    #[serde(default = "default_export_ms")]
    pub interval_ms: u32,
    /// UDP template refresh interval in s (RFC 7011 section 8.4).
    #[serde(default = "default_refresh_s")]
    pub template_refresh_s: u32,
    /// Observation Domain ID of the message headers.
    #[serde(default = "default_one_u32")]
    pub observation_domain_id: u32,
    /// observationPointId of every record.
    #[serde(default = "default_one_u64")]
    pub observation_point_id: u64,
    /// Private Enterprise Number of the enterprise elements.
    #[serde(default = "default_pen")]
    pub pen: u32,
    /// Element ID of pfcPriority (enterprise 1..=32767, or IANA 128..=32767 with iana-ids).
    #[serde(default = "default_prio_ie")]
    pub priority_element_id: u16,
    /// Element ID of pfcControlFrameTotalCount.
    #[serde(default = "default_total_ie")]
    pub total_element_id: u16,
    /// Enterprise Element ID of lq's counter-epoch element (absent: not exported).
    #[serde(default)]
    pub epoch_element_id: Option<u16>,
    /// The two PFC elements carry IANA-assigned IDs (no PEN).
    #[serde(default)]
    pub iana_ids: bool,
    /// DSCP of the export socket, so the export avoids the priority PFC may pause.
    #[serde(default)]
    pub dscp: Option<u8>,
    /// SO_PRIORITY of the export socket.
    #[serde(default)]
    pub socket_priority: Option<u32>,
    /// `udp` (default; templates refreshed), `tcp` (reconnect with backoff, templates per
    /// session, unacknowledged records resent) or `tls` (TLS 1.3, mutual authentication).
    #[serde(default)]
    pub transport: IpfixTransport,
    /// TLS: the CA that signs the collector's certificate (PEM).
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// TLS: this exporter's certificate (PEM).
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// TLS: this exporter's private key (PEM).
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// TLS: the name the collector's certificate must carry (default: its address).
    #[serde(default)]
    pub tls_server_name: Option<String>,
}

/// IPFIX transport (RFC 7011 section 10; SCTP, which it makes mandatory, is not in this
/// kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpfixTransport {
    /// UDP.
    #[default]
    Udp,
    /// TCP.
    Tcp,
    /// TLS 1.3 over TCP with mutual authentication (RFC 9325).
    Tls,
}

fn default_export_ms() -> u32 {
    1000
}
fn default_refresh_s() -> u32 {
    60
}
fn default_one_u32() -> u32 {
    1
}
fn default_one_u64() -> u64 {
    1
}
fn default_pen() -> u32 {
    crate::ipfix::DEFAULT_PEN
}
fn default_prio_ie() -> u16 {
    1
}
fn default_total_ie() -> u16 {
    2
}

impl IpfixSection {
    /// The element identities, validated.
    pub fn elements(&self) -> Result<crate::ipfix::ElementIds, crate::ipfix::ConfigError> {
        let e = if self.iana_ids {
            crate::ipfix::ElementIds::iana(
                self.priority_element_id,
                self.total_element_id,
                self.epoch_element_id
                    .map(|id| crate::ipfix::IeId { id, pen: self.pen }),
            )
        } else {
            crate::ipfix::ElementIds::enterprise(
                self.pen,
                self.priority_element_id,
                self.total_element_id,
                self.epoch_element_id,
            )
        };
        e.validate()?;
        Ok(e)
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// The YANG leaves.
    pub lq_telemetry: LqTelemetry,
    /// UDP binding.
    #[serde(default)]
    pub udp: Udp,
    /// XDP receiver.
    #[serde(default)]
    pub receiver: Receiver,
    /// Damping.
    #[serde(default)]
    pub damping: Damping,
    /// Nexthop groups.
    #[serde(default)]
    pub nexthop_group: NexthopGroup,
    /// Next-hop members.
    #[serde(default)]
    pub uplink: Vec<UplinkSpec>,
    /// Destinations.
    #[serde(default)]
    pub destination: Vec<DestinationSpec>,
    /// Capacities of paths (spine, remote node), section 4.1.
    #[serde(default)]
    pub path_capacity: Vec<PathCapacitySpec>,
    /// Helper role parameters.
    #[serde(default)]
    pub helper: HelperSection,
    /// Monitored egress links (helper role).
    #[serde(default)]
    pub link: Vec<LinkSpec>,
    /// PFC counting.
    #[serde(default)]
    pub pfc: PfcSection,
    /// IPFIX export of the PFC counters.
    #[serde(default)]
    pub ipfix: Option<IpfixSection>,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: Option<MetricsSection>,
    /// The gNMI northbound (issue 40).
    #[serde(default)]
    pub gnmi: Option<GnmiSection>,
    /// The slow plane: follow the routing daemon's routes (seed 003 section 4.1).
    #[serde(default)]
    pub slow_plane: Option<SlowPlaneSection>,
    /// Where the uplinks' local quality comes from (seed 003 section 6.3).
    #[serde(default)]
    pub local_quality: LocalQualitySection,
}

/// `[local-quality]`: `local_quality(S)` of seed 003 section 6.3, "the quality of the
/// leaf's uplink to spine S from the local DLB mechanism" (`core::controller::local_quality`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LocalQualitySection {
    /// `link-state` (default): 255 while the uplink is up, 0 when it is down. `measured`:
    /// the Appendix A pipeline on each `[[uplink]]`'s egress every `[helper] t-sample-ms`
    /// (with the `[helper]` parameters), its LQS applied when it moves by more than
    /// `change-threshold` and otherwise once per T_notify.
    #[serde(default)]
    pub source: LocalQualitySource,
}

/// `[local-quality] source`.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LocalQualitySource {
    /// 255 up, 0 down.
    #[default]
    LinkState,
    /// The Appendix A pipeline on the uplinks.
    Measured,
}

/// `[slow-plane]`: lqd steers the multipath routes a routing daemon (FRR) installs instead
/// of `[[destination]]` entries (seed 003 section 4.1: a path is eligible only if the slow
/// plane permits it).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SlowPlaneSection {
    /// Route protocols followed (`bgp`, `ospf`, `isis`, `static`, ... or a number).
    #[serde(default = "default_slow_protocols")]
    pub protocols: Vec<String>,
    /// lq's own routing table, holding its steered copies.
    #[serde(default = "default_slow_table")]
    pub table: u32,
    /// Priority of the policy rule `lookup <table>`: before the main table's 32766.
    #[serde(default = "default_slow_rule_priority")]
    pub rule_priority: u32,
    /// Covering rules `prefix -> remote node` (the NNH mapping, section 6.1). They win
    /// over a mapping learned through BMP.
    #[serde(default)]
    pub map: Vec<DestinationSpec>,
    /// `[slow-plane.bmp]`: learn the NNH mapping from the routing daemon through BMP.
    #[serde(default)]
    pub bmp: Option<BmpSection>,
}

/// `[slow-plane.bmp]`: lqd is a BMP station (RFC 7854) the routing daemon connects to (FRR:
/// `bmp targets`, `bmp connect`); the origin AS of each prefix's AS_PATH names its remote
/// leaf in an RFC 7938 fabric (one AS per leaf), matched against the AS-qualified LQ
/// entries (seed 003 sections 6.1, 6.2).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BmpSection {
    /// TCP address to listen on (e.g. "127.0.0.1:11019"; keep it local or filtered: BMP
    /// has no authentication).
    pub listen: std::net::SocketAddr,
    /// BMP sessions served at once; more connections are closed and counted.
    #[serde(default = "default_bmp_sessions")]
    pub max_sessions: usize,
}

fn default_bmp_sessions() -> usize {
    4
}

/// Nexthop-group ids are `id_base + GROUP_ID_OFFSET + n`; member ids `id_base + uplink id`
/// (the load-balancer's id plan, checked here against the 32-bit id space).
pub const GROUP_ID_OFFSET: u32 = 0x1_0000;

/// The slow plane's groups are `id_base + GROUP_ID_OFFSET + SLOW_GROUP_OFFSET + k`, after the
/// `[[destination]]` groups (`+ n`, n < SLOW_GROUP_OFFSET), so a restart tells them apart.
pub const SLOW_GROUP_OFFSET: u32 = 0x8000;

/// How many ids the slow plane's groups may take.
pub const SLOW_GROUP_SPAN: u32 = 0x100_0000;

fn default_slow_protocols() -> Vec<String> {
    vec!["bgp".into()]
}
fn default_slow_table() -> u32 {
    u32::from(crate::sys::netlink::nexthop::RTPROT_LQ)
}
fn default_slow_rule_priority() -> u32 {
    1000
}

/// Protocol names as iproute2's rt_protos and FRR's rt_netlink.c use them.
pub fn protocol_number(name: &str) -> Option<u8> {
    Some(match name {
        "kernel" => 2,
        "boot" => 3,
        "static" => 4,
        "babel" => 42,
        "bgp" => 186,
        "isis" => 187,
        "ospf" => 188,
        "rip" => 189,
        "zstatic" => 196,
        other => return other.parse().ok(),
    })
}

impl SlowPlaneSection {
    /// Checks protocol names, the table and the rule priority.
    pub fn validate(&self) -> Result<(), String> {
        for p in &self.protocols {
            if protocol_number(p).is_none() {
                return Err(format!("[slow-plane] protocols: unknown protocol {p:?}"));
            }
        }
        if matches!(self.table, 0 | 252..=255) {
            return Err(format!(
                "[slow-plane] table = {}: not a reserved table (0, 252-255)",
                self.table
            ));
        }
        if self.rule_priority == 0 || self.rule_priority >= 32766 {
            return Err("[slow-plane] rule-priority must be in 1..32766 (before main)".into());
        }
        if let Some(b) = &self.bmp
            && !(1..=64).contains(&b.max_sessions)
        {
            return Err("[slow-plane.bmp] max-sessions must be in 1..=64".into());
        }
        Ok(())
    }
}

/// `[metrics]`: an opt-in Prometheus text endpoint, on loopback unless `listen` says
/// otherwise. Served over TLS 1.3 with client certificates when `certificate`,
/// `private-key` and `client-ca` are given (seed 003 section 12.2), plain HTTP otherwise.
/// The families that reveal `/lq-telemetry/local`, `/neighbors` or `/weighted-ecmp` are
/// served only to clients a `[[metrics.client]]` rule grants them (the gNMI rules).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MetricsSection {
    /// Address to serve `GET /metrics` on.
    #[serde(default = "default_metrics_listen")]
    pub listen: std::net::SocketAddr,
    /// The server's certificate chain, PEM, leaf first (TLS).
    #[serde(default)]
    pub certificate: Option<PathBuf>,
    /// The server's private key, PEM; a file others may read is refused.
    #[serde(default)]
    pub private_key: Option<PathBuf>,
    /// The CA certificate(s), PEM, that client certificates must chain to.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Read rules: which sensitive families each client may read.
    #[serde(default)]
    pub client: Vec<ClientReadRule>,
}

fn default_metrics_listen() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 9464))
}

impl MetricsSection {
    /// The TLS files, when all three are configured.
    pub fn tls_files(&self) -> Option<(&Path, &Path, &Path)> {
        match (&self.certificate, &self.private_key, &self.client_ca) {
            (Some(c), Some(k), Some(ca)) => Some((c, k, ca)),
            _ => None,
        }
    }

    /// The read rules, parsed.
    pub fn rules(&self) -> Result<Vec<crate::core::northbound::ReadRule>, String> {
        parse_client_rules("metrics", &self.client)
    }

    /// Checks the TLS files (all three or none), and the rules: with plain HTTP a client
    /// has no certificate, so only `name = "*"` rules can apply.
    pub fn validate(&self) -> Result<(), String> {
        let missing = missing_tls_files(&self.certificate, &self.private_key, &self.client_ca);
        if !missing.is_empty() && missing.len() < 3 {
            return Err(format!(
                "[metrics] needs {} for TLS with client certificates (or none of certificate, private-key, client-ca for plain HTTP)",
                missing.join(", ")
            ));
        }
        validate_client_names("metrics", &self.client)?;
        if self.tls_files().is_none()
            && let Some(c) = self.client.iter().find(|c| c.name != "*")
        {
            return Err(format!(
                "[[metrics.client]] name = {:?}: names are matched against client certificates, and [metrics] serves plain HTTP (configure certificate, private-key and client-ca, or name = \"*\")",
                c.name
            ));
        }
        self.rules().map(|_| ())
    }
}

/// The TLS files of a northbound endpoint that are not configured.
fn missing_tls_files(
    certificate: &Option<PathBuf>,
    private_key: &Option<PathBuf>,
    client_ca: &Option<PathBuf>,
) -> Vec<&'static str> {
    [
        ("certificate", certificate),
        ("private-key", private_key),
        ("client-ca", client_ca),
    ]
    .into_iter()
    .filter(|(_, v)| v.is_none())
    .map(|(k, _)| k)
    .collect()
}

/// `[[<section>.client]]` rules parsed into read rules.
fn parse_client_rules(
    section: &str,
    rules: &[ClientReadRule],
) -> Result<Vec<crate::core::northbound::ReadRule>, String> {
    rules
        .iter()
        .map(|c| {
            Ok(crate::core::northbound::ReadRule {
                name: c.name.clone(),
                read: c
                    .read
                    .iter()
                    .map(|r| {
                        crate::core::northbound::DataPath::parse(r)
                            .map_err(|e| format!("[[{section}.client]] {:?} read: {e}", c.name))
                    })
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

/// Each rule names `*`, a DNS name (or a wildcard one, matched as written) or an IP
/// address.
fn validate_client_names(section: &str, rules: &[ClientReadRule]) -> Result<(), String> {
    for c in rules {
        let name_ok = |n: &str| rustls_pki_types::ServerName::try_from(n).is_ok();
        let ok =
            c.name == "*" || name_ok(&c.name) || c.name.strip_prefix("*.").is_some_and(name_ok);
        if !ok {
            return Err(format!(
                "[[{section}.client]] name = {:?}: not a DNS name or IP address (of the client certificate's subjectAltName, matched exactly), nor \"*\" for every client",
                c.name
            ));
        }
    }
    Ok(())
}

/// `[gnmi]`: the gNMI northbound (seed 003 section 4.3's gRPC/gNMI binding; section 12.2:
/// a secure transport with mutual authentication and access control). Get, Subscribe
/// (ONCE, POLL, STREAM with SAMPLE and ON_CHANGE) and Capabilities over the YANG state;
/// Set answers UNIMPLEMENTED (the configuration is this file).
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GnmiSection {
    /// Address to listen on (gNMI's IANA port is 9339).
    pub listen: std::net::SocketAddr,
    /// The server's certificate chain, PEM, leaf first.
    #[serde(default)]
    pub certificate: Option<PathBuf>,
    /// The server's private key, PEM; a file others may read is refused.
    #[serde(default)]
    pub private_key: Option<PathBuf>,
    /// The CA certificate(s), PEM, that client certificates must chain to.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Serve without TLS: only on a loopback address, for a collector on the same host.
    /// Plaintext clients have no name: only `name = "*"` rules apply to them.
    #[serde(default)]
    pub plaintext: bool,
    /// Concurrent Subscribe streams at most; more are refused with RESOURCE_EXHAUSTED.
    #[serde(default = "default_gnmi_max_subscriptions")]
    pub max_subscriptions: usize,
    /// Read rules: which subtrees each client may read beyond the default.
    #[serde(default)]
    pub client: Vec<ClientReadRule>,
}

fn default_gnmi_max_subscriptions() -> usize {
    128
}

/// `[[gnmi.client]]`, `[[metrics.client]]`: a read rule (RFC 8341's spirit). Every
/// authenticated client reads the tree except `/lq-telemetry/local`,
/// `/lq-telemetry/neighbors` and `/lq-telemetry/weighted-ecmp`; a rule grants those (or
/// parts of them) to the clients it names.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientReadRule {
    /// A DNS name or IP address in the client certificate's subjectAltName, or `*` for
    /// every client.
    pub name: String,
    /// Subtrees granted, e.g. `/lq-telemetry/neighbors` (`/` grants everything).
    pub read: Vec<String>,
}

impl GnmiSection {
    /// The TLS files, when all three are configured and `plaintext` is off.
    pub fn tls_files(&self) -> Option<(&Path, &Path, &Path)> {
        match (&self.certificate, &self.private_key, &self.client_ca) {
            (Some(c), Some(k), Some(ca)) if !self.plaintext => Some((c, k, ca)),
            _ => None,
        }
    }

    /// The read rules, parsed.
    pub fn rules(&self) -> Result<Vec<crate::core::northbound::ReadRule>, String> {
        parse_client_rules("gnmi", &self.client)
    }

    /// Checks the transport (TLS files, or plaintext on loopback only), the bound and the
    /// rules.
    pub fn validate(&self) -> Result<(), String> {
        if self.plaintext {
            if !self.listen.ip().is_loopback() {
                return Err(format!(
                    "[gnmi] plaintext = true with listen = \"{}\": plaintext is served only on a loopback address (the YANG data is sensitive, seed 003 section 12.2); configure certificate, private-key and client-ca instead",
                    self.listen
                ));
            }
        } else {
            let missing = missing_tls_files(&self.certificate, &self.private_key, &self.client_ca);
            if !missing.is_empty() {
                return Err(format!(
                    "[gnmi] needs {} for TLS with client certificates (or plaintext = true on a loopback address)",
                    missing.join(", ")
                ));
            }
        }
        if !(1..=4096).contains(&self.max_subscriptions) {
            return Err("[gnmi] max-subscriptions must be in 1..=4096".into());
        }
        validate_client_names("gnmi", &self.client)?;
        self.rules().map(|_| ())
    }
}

impl Config {
    /// The settings that differ between `self` (in force) and `new` and that a running lqd
    /// cannot apply: a reload with any of them is refused as a whole, naming them (lqd
    /// must be restarted for them). What a reload applies: the load-balancer's mapping,
    /// uplinks, destinations, capacities, damping and weight function, the receiver's
    /// checks (`[receiver] as-plan`, `pass-through`, miss-count, port), the slow plane, and
    /// the helper's T_notify, CHANGE_THRESHOLD, diagnostics and Appendix A smoothing and
    /// hold-down.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let (a, b) = (self, new);
        let mut out = Vec::new();
        let mut check = |changed: bool, key: &'static str| {
            if changed {
                out.push(key);
            }
        };
        let (ta, tb) = (&a.lq_telemetry, &b.lq_telemetry);
        check(ta.role != tb.role, "[lq-telemetry] role");
        check(ta.enabled != tb.enabled, "[lq-telemetry] enabled");
        if ta.role.advertises() {
            // The helper's identity goes into every datagram's header.
            check(ta.router_id != tb.router_id, "[lq-telemetry] router-id");
            check(ta.local_as != tb.local_as, "[lq-telemetry] local-as");
            check(
                ta.as_qualified != tb.as_qualified,
                "[lq-telemetry] as-qualified",
            );
            check(ta.pfc_fabric != tb.pfc_fabric, "[lq-telemetry] pfc-fabric");
            // The advertisement sockets and their destinations.
            check(a.udp != b.udp, "[udp]");
            check(a.link != b.link, "[[link]]");
            check(
                a.helper.t_sample_ms != b.helper.t_sample_ms,
                "[helper] t-sample-ms",
            );
            check(a.helper.mtu != b.helper.mtu, "[helper] mtu");
            check(a.helper.send_to != b.helper.send_to, "[helper] send-to");
            check(a.helper.ipv6 != b.helper.ipv6, "[helper] ipv6");
            check(
                a.helper.key_chain.is_some() != b.helper.key_chain.is_some(),
                "[helper] key-chain (on or off)",
            );
        }
        if ta.role.receives() {
            check(
                a.receiver.interfaces != b.receiver.interfaces,
                "[receiver] interfaces",
            );
            check(
                a.receiver.pin_dir != b.receiver.pin_dir,
                "[receiver] pin-dir",
            );
            check(
                a.receiver.authentication != b.receiver.authentication,
                "[receiver] authentication",
            );
            check(
                a.receiver.interface_authentication != b.receiver.interface_authentication,
                "[receiver.interface-authentication]",
            );
            check(
                a.receiver.key_chain.is_some() != b.receiver.key_chain.is_some(),
                "[receiver] key-chain (on or off)",
            );
            let (na, nb) = (&a.nexthop_group, &b.nexthop_group);
            check(na.group_type != nb.group_type, "[nexthop-group] type");
            check(na.buckets != nb.buckets, "[nexthop-group] buckets");
            check(
                na.idle_timer_ms != nb.idle_timer_ms,
                "[nexthop-group] idle-timer-ms",
            );
            check(
                na.unbalanced_timer_ms != nb.unbalanced_timer_ms,
                "[nexthop-group] unbalanced-timer-ms",
            );
            check(na.weight_max != nb.weight_max, "[nexthop-group] weight-max");
            check(na.id_base != nb.id_base, "[nexthop-group] id-base");
            check(
                na.program_kernel != nb.program_kernel,
                "[nexthop-group] program-kernel",
            );
            check(a.local_quality != b.local_quality, "[local-quality]");
            if a.local_quality.source == LocalQualitySource::Measured {
                // The uplinks' sampler thread and pipelines are set up at start.
                let ifaces = |c: &Config| {
                    c.uplink
                        .iter()
                        .map(|u| u.interface.clone())
                        .collect::<Vec<_>>()
                };
                check(
                    ifaces(a) != ifaces(b),
                    "[[uplink]] interface (measured local quality)",
                );
                check(
                    a.helper.t_sample_ms != b.helper.t_sample_ms,
                    "[helper] t-sample-ms",
                );
            }
        }
        check(a.pfc != b.pfc, "[pfc]");
        check(a.ipfix != b.ipfix, "[ipfix]");
        // The endpoints' sockets are bound at start; their read rules and TLS files are
        // reloaded (a rotated certificate), TLS on or off is not.
        let (ma, mb) = (a.metrics.as_ref(), b.metrics.as_ref());
        check(ma.is_some() != mb.is_some(), "[metrics] (on or off)");
        check(
            ma.zip(mb).is_some_and(|(x, y)| x.listen != y.listen),
            "[metrics] listen",
        );
        check(
            ma.zip(mb)
                .is_some_and(|(x, y)| x.tls_files().is_some() != y.tls_files().is_some()),
            "[metrics] TLS (on or off)",
        );
        let (ga, gb) = (a.gnmi.as_ref(), b.gnmi.as_ref());
        check(ga.is_some() != gb.is_some(), "[gnmi] (on or off)");
        check(
            ga.zip(gb).is_some_and(|(x, y)| x.listen != y.listen),
            "[gnmi] listen",
        );
        check(
            ga.zip(gb).is_some_and(|(x, y)| x.plaintext != y.plaintext),
            "[gnmi] plaintext",
        );
        check(
            ga.zip(gb)
                .is_some_and(|(x, y)| x.max_subscriptions != y.max_subscriptions),
            "[gnmi] max-subscriptions",
        );
        out.dedup();
        out
    }

    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigFileError> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            ConfigFileError::Parse {
                path: path.into(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        cfg.validate()
            .and_then(|()| cfg.validate_located())
            .map_err(
                |(candidates, message)| match Locator::locate(&candidates, text) {
                    Some((line, column)) => ConfigFileError::Parse {
                        path: path.into(),
                        line,
                        column,
                        message,
                    },
                    None => ConfigFileError::Invalid {
                        path: path.into(),
                        message,
                    },
                },
            )?;
        Ok(cfg)
    }

    /// Rules on one key of a `[[uplink]]`, `[[link]]`, `[[destination]]` or
    /// `[nexthop-group]` that depend on other keys, reported at the offending value.
    ///
    /// * AS fields follow `as-qualified` (seed 003 sections 5.6 and 6.2): unqualified, every
    ///   AS component is 0 on the wire and in the path table, so a non-zero `spine-as` or
    ///   `remote-as` would key entries that can never match; qualified, every node of the
    ///   fabric sends its non-zero local AS ("MUST be configured consistently on all
    ///   nodes"), so an AS of 0 can never match either. Either mistake would silently leave
    ///   every member unconfirmed.
    /// * Nexthop object ids `id-base + uplink id` and `id-base + 0x10000 + n` must fit in
    ///   the kernel's 32-bit id: an overflow would wrap onto other objects.
    fn validate_located(&self) -> Result<(), Located> {
        let q = self.lq_telemetry.as_qualified;
        let as_rule = |asn: u32, what: &str| -> Option<String> {
            match (q, asn) {
                (false, a) if a != 0 => Some(format!(
                    "{what} = {a} needs as-qualified = true (unqualified, every AS component is 0; seed 003 section 6.2)"
                )),
                (true, 0) => Some(format!(
                    "{what} = 0 with as-qualified = true: every node of an AS-qualified fabric advertises its non-zero local AS, so AS 0 never matches"
                )),
                _ => None,
            }
        };
        for (i, u) in self.uplink.iter().enumerate() {
            if let Some(m) = as_rule(u.spine_as, "spine-as") {
                return Err((
                    vec![item("uplink", i, "spine-as")],
                    format!("[[uplink]] id = {}: {m}", u.id),
                ));
            }
        }
        for (i, l) in self.link.iter().enumerate() {
            if let Some(m) = as_rule(l.remote_as, "remote-as") {
                return Err((
                    vec![item("link", i, "remote-as")],
                    format!("[[link]] {}: {m}", l.interface),
                ));
            }
        }
        for (i, d) in self.destination.iter().enumerate() {
            if d.remote_node.is_none() {
                continue;
            }
            if let Some(m) = as_rule(d.remote_as, "remote-as") {
                return Err((
                    vec![item("destination", i, "remote-as")],
                    format!(
                        "[[destination]] {}/{}: {m}",
                        d.prefix.0.addr, d.prefix.0.len
                    ),
                ));
            }
        }
        let base = u64::from(self.nexthop_group.id_base);
        let top = |n: u64| base + n > u64::from(u32::MAX);
        let max_uplink = self.uplink.iter().map(|u| u.id).max();
        let groups = self.destination.len() as u64;
        if let Some((i, u)) = self
            .uplink
            .iter()
            .enumerate()
            .find(|(_, u)| top(u64::from(u.id)))
        {
            return Err((
                // The id-base when it is written (the usual culprit), else the id.
                vec![key("nexthop-group", "id-base"), item("uplink", i, "id")],
                format!(
                    "id-base = {base} + [[uplink]] id = {} overflows the 32-bit nexthop id: id-base is at most {}",
                    u.id,
                    u64::from(u32::MAX) - u64::from(max_uplink.unwrap_or(0))
                ),
            ));
        }
        // Every id lqd may give a group: one per remote node of the [[destination]]s from
        // id-base + 0x10000 (at most 0x8000 of them), the slow plane's after them.
        let (last, what) = if self.slow_plane.is_some() {
            (
                u64::from(GROUP_ID_OFFSET)
                    + u64::from(SLOW_GROUP_OFFSET)
                    + u64::from(SLOW_GROUP_SPAN)
                    - 1,
                "id-base + 0x10000 .. id-base + 0x1017fff ([[destination]] groups, then [slow-plane] groups)",
            )
        } else {
            (
                u64::from(GROUP_ID_OFFSET) + u64::from(SLOW_GROUP_OFFSET) - 1,
                "id-base + 0x10000 .. id-base + 0x17fff (one per remote node of the [[destination]]s)",
            )
        };
        if (groups > 0 || self.slow_plane.is_some()) && top(last) {
            return Err((
                vec![key("nexthop-group", "id-base")],
                format!(
                    "id-base = {base}: group ids {what} overflow the 32-bit nexthop id: id-base is at most {}",
                    u64::from(u32::MAX) - last
                ),
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), Located> {
        let t = &self.lq_telemetry;
        if !t.enabled {
            return Err(at(
                [key("lq-telemetry", "enabled")],
                "[lq-telemetry] enabled = false: lqd runs only with enabled = true",
            ));
        }
        if t.active_transports.iter().any(|x| x != TRANSPORT_UDP) || t.active_transports.is_empty()
        {
            return Err(at(
                [key("lq-telemetry", "active-transports")],
                format!(
                    "[lq-telemetry] active-transports: only \"{TRANSPORT_UDP}\" is implemented"
                ),
            ));
        }
        if t.as_qualified && t.local_as.is_none_or(|a| a == 0) {
            return Err(at(
                [
                    key("lq-telemetry", "local-as"),
                    key("lq-telemetry", "as-qualified"),
                ],
                "[lq-telemetry] as-qualified = true needs a non-zero local-as (there is no BGP to take it from)",
            ));
        }
        if t.role.advertises() && t.router_id.is_none() {
            return Err(at(
                [key("lq-telemetry", "role")],
                format!(
                    "[lq-telemetry] role = \"{}\" needs router-id (the dotted-quad Router-ID it advertises)",
                    t.role.as_str()
                ),
            ));
        }
        if self.receiver.as_plan.len() > lq_common::maps::AS_PLAN_MAX {
            return Err(at(
                [key("receiver", "as-plan")],
                format!(
                    "[receiver] as-plan has {} ranges; at most {}",
                    self.receiver.as_plan.len(),
                    lq_common::maps::AS_PLAN_MAX
                ),
            ));
        }
        if t.role.receives() && self.receiver.interfaces.is_empty() {
            return Err(at(
                [key("receiver", "interfaces"), key("lq-telemetry", "role")],
                format!(
                    "role = \"{}\" needs [receiver] interfaces (the uplinks the spines advertise on)",
                    t.role.as_str()
                ),
            ));
        }
        if self.local_quality.source == LocalQualitySource::Measured && !t.role.receives() {
            return Err(at(
                [key("local-quality", "source")],
                format!(
                    "[local-quality] source = \"measured\" is the load balancer's local quality (seed 003 section 6.3): role = \"{}\" has none; use role = \"load-balancer\" or \"dual\"",
                    t.role.as_str()
                ),
            ));
        }
        if let Some(ms) = self.damping.reweight_interval_ms
            && ms < u32::from(t.notify_interval_ms.0)
        {
            return Err(at(
                [key("damping", "reweight-interval-ms")],
                format!(
                    "[damping] reweight-interval-ms = {ms} is below notify-interval-ms = {} (seed 003 section 10: T_reweight >= T_notify)",
                    t.notify_interval_ms.0
                ),
            ));
        }
        if let WeightFunction::Integral(p) = self.damping.weight_function() {
            p.validate()
                .map_err(|e| at([section("damping")], format!("[damping] {e}")))?;
        }
        if let Some(v) = self.damping.gray_failure_min_available {
            if !GRAY_FAILURE_MIN_AVAILABLE_RANGE.contains(&v) {
                return Err(at(
                    [key("damping", "gray-failure-min-available")],
                    format!(
                        "[damping] gray-failure-min-available = {v} is outside 0.1..=1.0 (the fraction of the path's capacity a lossy link must still advertise as available to count as a gray failure)"
                    ),
                ));
            }
            if !self.damping.gray_failure_prune {
                return Err(at(
                    [key("damping", "gray-failure-min-available")],
                    "[damping] gray-failure-min-available is set but gray-failure-prune is not true: set gray-failure-prune = true to enable the prune, or remove the key".to_string(),
                ));
            }
        }
        if self.damping.gray_failure_prune
            && self.damping.weight_function == WeightFunctionName::Integral
        {
            return Err(at(
                [
                    key("damping", "gray-failure-prune"),
                    key("damping", "weight-function"),
                ],
                "[damping] gray-failure-prune = true needs weight-function = \"seed\": the integral function does not prune by path quality".to_string(),
            ));
        }
        let max = self.nexthop_group.weight_max;
        if max != 255 && max != 65535 {
            return Err(at(
                [key("nexthop-group", "weight-max")],
                format!(
                    "[nexthop-group] weight-max = {max}: allowed 255 or 65535 (65535 needs kernel 6.12)"
                ),
            ));
        }
        let mut ids = std::collections::BTreeSet::new();
        for (i, u) in self.uplink.iter().enumerate() {
            if u.id == 0 || !ids.insert(u.id) {
                return Err(at(
                    [item("uplink", i, "id")],
                    format!("[[uplink]] id = {}: ids must be unique and non-zero", u.id),
                ));
            }
            if u.capacity_gbps.is_some_and(|c| !c.is_finite() || c <= 0.0) {
                return Err(at(
                    [item("uplink", i, "capacity-gbps")],
                    format!("[[uplink]] id = {}: capacity-gbps must be > 0", u.id),
                ));
            }
        }
        let mut paths = std::collections::BTreeSet::new();
        for (i, c) in self.path_capacity.iter().enumerate() {
            let name = format!(
                "[[path-capacity]] spine = \"{}\", remote-node = \"{}\"",
                std::net::Ipv4Addr::from(c.spine.0),
                std::net::Ipv4Addr::from(c.remote_node.0)
            );
            if !c.capacity_gbps.is_finite() || c.capacity_gbps <= 0.0 {
                return Err(at(
                    [item("path-capacity", i, "capacity-gbps")],
                    format!(
                        "{name}: capacity-gbps = {} must be > 0 (Gbit/s; 0.025 is 25 Mbit/s)",
                        c.capacity_gbps
                    ),
                ));
            }
            if !paths.insert((c.spine_as, c.spine.0, c.remote_as, c.remote_node.0)) {
                return Err(at(
                    [item("path-capacity", i, "spine")],
                    format!("{name} appears twice"),
                ));
            }
            if !self
                .uplink
                .iter()
                .any(|u| u.spine.0 == c.spine.0 && u.spine_as == c.spine_as)
            {
                return Err(at(
                    [item("path-capacity", i, "spine")],
                    format!(
                        "{name}: no [[uplink]] leads to spine {} (AS {}), so the capacity would apply to nothing",
                        std::net::Ipv4Addr::from(c.spine.0),
                        c.spine_as
                    ),
                ));
            }
        }
        let mut prefixes = std::collections::BTreeSet::new();
        for (i, d) in self.destination.iter().enumerate() {
            if !prefixes.insert(d.prefix.0) {
                return Err(at(
                    [item("destination", i, "prefix")],
                    format!(
                        "[[destination]] prefix {}/{} appears twice",
                        d.prefix.0.addr, d.prefix.0.len
                    ),
                ));
            }
        }
        if !self.destination.is_empty() && self.uplink.is_empty() {
            return Err(at(
                [item("destination", 0, "prefix")],
                "[[destination]] entries need at least one [[uplink]]",
            ));
        }
        if let Some(g) = &self.gnmi {
            g.validate().map_err(|m| at([section("gnmi")], m))?;
        }
        if let Some(m) = &self.metrics {
            m.validate().map_err(|e| at([section("metrics")], e))?;
        }
        if let Some(sp) = &self.slow_plane {
            sp.validate().map_err(|m| at([section("slow-plane")], m))?;
            if self.uplink.is_empty() {
                return Err(at(
                    [section("slow-plane")],
                    "[slow-plane] needs at least one [[uplink]]",
                ));
            }
            if sp.bmp.is_some() && !self.lq_telemetry.as_qualified {
                // The origin AS names the remote leaf only through the entries' remote-as
                // (seed 003 section 6.2), which is 0 unqualified.
                return Err(at(
                    [section("slow-plane.bmp")],
                    "[slow-plane.bmp] needs [lq-telemetry] as-qualified = true: the origin AS matches the LQ entries' remote-as",
                ));
            }
        }
        self.controller().validate().map_err(|e| {
            at(
                [section("damping"), section("nexthop-group")],
                e.to_string(),
            )
        })?;
        for (i, e) in self.pfc.ethtool.iter().enumerate() {
            e.stat_map().map_err(|m| {
                at(
                    [
                        item("pfc.ethtool", i, "template"),
                        item("pfc.ethtool", i, "preset"),
                    ],
                    m,
                )
            })?;
            if !(8..=64).contains(&e.width_bits) {
                return Err(at(
                    [item("pfc.ethtool", i, "width-bits")],
                    format!("[[pfc.ethtool]] {}: width-bits is 8..=64", e.interface),
                ));
            }
            if e.direction == PfcDirection::Received && self.pfc.interfaces.contains(&e.interface) {
                return Err(at(
                    [item("pfc.ethtool", i, "interface")],
                    format!(
                        "[[pfc.ethtool]] {}: received frames are already counted by the tc program ([pfc] interfaces): one source per counter",
                        e.interface
                    ),
                ));
            }
        }
        for (i, v) in self.pfc.veth_peer.iter().enumerate() {
            let twice = self.pfc.veth_peer[..i]
                .iter()
                .any(|w| w.interface == v.interface)
                || self.pfc.ethtool.iter().any(|e| {
                    e.direction == PfcDirection::Transmitted && e.interface == v.interface
                });
            if twice {
                return Err(at(
                    [item("pfc.veth-peer", i, "interface")],
                    format!(
                        "[[pfc.veth-peer]] {}: its transmitted frames have another source ([[pfc.ethtool]] or [[pfc.veth-peer]]): one source per counter",
                        v.interface
                    ),
                ));
            }
        }
        if let Some(ipfix) = &self.ipfix {
            ipfix
                .elements()
                .map_err(|e| at([section("ipfix")], format!("[ipfix] {e}")))?;
            if self.pfc.interfaces.is_empty()
                && self.pfc.ethtool.is_empty()
                && self.pfc.veth_peer.is_empty()
            {
                return Err(at(
                    [section("ipfix")],
                    "[ipfix] needs [pfc] interfaces, [[pfc.ethtool]] or [[pfc.veth-peer]] sources to export",
                ));
            }
            if ipfix.interval_ms == 0 || ipfix.template_refresh_s == 0 {
                return Err(at(
                    [
                        key("ipfix", "interval-ms"),
                        key("ipfix", "template-refresh-s"),
                    ],
                    "[ipfix] interval-ms and template-refresh-s must be > 0",
                ));
            }
            if ipfix.dscp.is_some_and(|d| d > 63) {
                return Err(at([key("ipfix", "dscp")], "[ipfix] dscp is 0..=63"));
            }
            if ipfix.transport == IpfixTransport::Tls
                && (ipfix.tls_ca.is_none() || ipfix.tls_cert.is_none() || ipfix.tls_key.is_none())
            {
                return Err(at(
                    [key("ipfix", "transport")],
                    "[ipfix] transport = \"tls\" needs tls-ca, tls-cert and tls-key (mutual authentication)",
                ));
            }
        }
        if t.role.advertises() {
            if self.link.is_empty() {
                return Err(at(
                    [key("lq-telemetry", "role")],
                    format!(
                        "role = \"{}\" needs at least one [[link]] to monitor",
                        t.role.as_str()
                    ),
                ));
            }
            for (i, l) in self.link.iter().enumerate() {
                if l.remote_node.is_empty() {
                    return Err(at(
                        [item("link", i, "remote-node")],
                        format!("[[link]] {}: remote-node lists no node", l.interface),
                    ));
                }
                if self.helper.send_to == SendTo::Unicast && l.peer.is_none() {
                    return Err(at(
                        [item("link", i, "interface")],
                        format!("[[link]] {}: send-to = \"unicast\" needs peer", l.interface),
                    ));
                }
                if l.pfc_priorities.iter().any(|p| *p > 7) {
                    return Err(at(
                        [item("link", i, "pfc-priorities")],
                        format!("[[link]] {}: pfc-priorities are 0..=7", l.interface),
                    ));
                }
            }
            self.validate_helper_keys()?;
        }
        self.validate_names_and_ports()?;
        Ok(())
    }

    /// Interface names, the UDP port, a helper's links and MTU, and the AS rules that do
    /// not fit one key's check: each would make lqd fail at start, or run and never hear
    /// or match anything.
    fn validate_names_and_ports(&self) -> Result<(), Located> {
        // IFNAMSIZ is 16 octets with the terminating NUL.
        let name = |n: &str, loc: Locator, what: &str| -> Result<(), Located> {
            if n.is_empty() || n.len() > 15 || n.contains(['/', ' ', ':']) {
                return Err(at(
                    [loc],
                    format!(
                        "{what} {n:?} is not a Linux interface name (1 to 15 characters, no '/', ':' or space)"
                    ),
                ));
            }
            Ok(())
        };
        for n in &self.receiver.interfaces {
            name(n, key("receiver", "interfaces"), "[receiver] interfaces:")?;
        }
        if let Some(n) = self
            .receiver
            .interface_authentication
            .keys()
            .find(|n| !self.receiver.interfaces.contains(n))
        {
            return Err(at(
                [section("receiver.interface-authentication")],
                format!(
                    "[receiver.interface-authentication] names {n:?}, which is not in [receiver] interfaces (a mode for an interface the XDP receiver is not attached to would never apply)"
                ),
            ));
        }
        if !self.receiver.authenticating_interfaces().is_empty()
            && self.receiver.key_chain.is_none()
        {
            let loc = if self.receiver.authentication != Authentication::None {
                key("receiver", "authentication")
            } else {
                section("receiver.interface-authentication")
            };
            return Err(at(
                [loc],
                "[receiver] authentication needs [receiver] key-chain (the keys the trailers are verified with)".to_string(),
            ));
        }
        for (i, u) in self.uplink.iter().enumerate() {
            name(
                &u.interface,
                item("uplink", i, "interface"),
                "[[uplink]] interface",
            )?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, l) in self.link.iter().enumerate() {
            name(
                &l.interface,
                item("link", i, "interface"),
                "[[link]] interface",
            )?;
            if !seen.insert(&l.interface) {
                return Err(at(
                    [item("link", i, "interface")],
                    format!(
                        "[[link]] interface {:?} appears twice: one [[link]] per egress link (list several remote-node in one for a shared medium)",
                        l.interface
                    ),
                ));
            }
        }
        for n in &self.pfc.interfaces {
            name(n, key("pfc", "interfaces"), "[pfc] interfaces:")?;
        }
        if self.udp.port == 0 {
            return Err(at(
                [key("udp", "port")],
                format!(
                    "[udp] port = 0 is no port: every node of the fabric must use the same one (the default is {})",
                    lq_common::wire::DEFAULT_PORT
                ),
            ));
        }
        let t = &self.lq_telemetry;
        if !t.as_qualified && t.local_as.is_some() {
            return Err(at(
                [key("lq-telemetry", "local-as")],
                "[lq-telemetry] local-as is set but as-qualified = false: unqualified, every AS component is 0 and local-as is never used (set as-qualified = true on every node, or remove local-as)",
            ));
        }
        if t.as_qualified && !self.receiver.as_plan.is_empty() {
            let in_plan = |asn: u32| self.receiver.as_plan.iter().any(|r| r.0.contains(asn));
            if let Some((i, u)) = self
                .uplink
                .iter()
                .enumerate()
                .find(|(_, u)| !in_plan(u.spine_as))
            {
                return Err(at(
                    [item("uplink", i, "spine-as")],
                    format!(
                        "[[uplink]] id = {}: spine-as = {} is outside [receiver] as-plan: the receiver discards every advertisement from that AS (as_mismatch), so this uplink never gets a quality",
                        u.id, u.spine_as
                    ),
                ));
            }
        }
        if t.role.advertises()
            && let Some(mtu) = self.helper.mtu
        {
            let path =
                crate::core::helper::advertiser::PathMtu::smallest([], Some(mtu), self.helper.ipv6);
            if path.entries_per_datagram(t.as_qualified, t.diagnostics_enabled) == 0 {
                return Err(at(
                    [key("helper", "mtu")],
                    format!(
                        "[helper] mtu = {mtu}: not even one entry fits in a datagram (IP and UDP headers, the LQ header and one entry{})",
                        if t.diagnostics_enabled {
                            " with its diagnostics block"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The `[helper]` keys against Appendix A's ranges, by their names in the file.
    fn validate_helper_keys(&self) -> Result<(), Located> {
        let h = &self.helper;
        if !(1..=5).contains(&h.t_sample_ms) {
            return Err(at(
                [key("helper", "t-sample-ms")],
                format!(
                    "[helper] t-sample-ms = {} is out of range: allowed 1..=5 (seed 003 Appendix A.1)",
                    h.t_sample_ms
                ),
            ));
        }
        if !(0.3..=0.8).contains(&h.alpha_rise) {
            return Err(at(
                [key("helper", "alpha-rise")],
                format!(
                    "[helper] alpha-rise = {} is out of range: allowed 0.3..=0.8 (seed 003 Appendix A.3)",
                    h.alpha_rise
                ),
            ));
        }
        if !(0.05..=0.2).contains(&h.alpha_fall) {
            return Err(at(
                [key("helper", "alpha-fall")],
                format!(
                    "[helper] alpha-fall = {} is out of range: allowed 0.05..=0.2 (seed 003 Appendix A.3)",
                    h.alpha_fall
                ),
            ));
        }
        if !(50..=200).contains(&h.hold_down_ms) {
            return Err(at(
                [key("helper", "hold-down-ms")],
                format!(
                    "[helper] hold-down-ms = {} is out of range: allowed 50..=200 (seed 003 Appendix A.6)",
                    h.hold_down_ms
                ),
            ));
        }
        self.helper_params()
            .validate()
            .map_err(|e| at([section("helper")], format!("[helper] {e}")))
    }

    /// What is legal but will probably not do what was meant, located in `text` (the
    /// file this configuration was parsed from).
    pub fn warnings(&self, text: &str) -> Vec<ConfigWarning> {
        let mut out: Vec<Located> = Vec::new();
        let t = &self.lq_telemetry;
        if t.role.receives() {
            for (i, u) in self.uplink.iter().enumerate() {
                if !self.receiver.interfaces.contains(&u.interface) {
                    out.push(at(
                        [item("uplink", i, "interface")],
                        format!(
                            "[[uplink]] id = {}: interface {:?} is not in [receiver] interfaces, so the XDP receiver never hears spine {} there and the uplink stays unconfirmed (no weight)",
                            u.id, u.interface, u.spine
                        ),
                    ));
                }
            }
            if self.uplink.is_empty() && self.destination.is_empty() && self.slow_plane.is_none() {
                out.push(at(
                    [key("lq-telemetry", "role")],
                    "a load-balancer with no [[uplink]], no [[destination]] and no [slow-plane]: it receives advertisements (show paths) but steers nothing",
                ));
            }
            if let Some(skip) = self.nexthop_group.skip_bucket_neutral {
                out.push(at(
                    [key("nexthop-group", "skip-bucket-neutral")],
                    format!(
                        "[nexthop-group] skip-bucket-neutral = {skip} is ignored: replaces that move no bucket are never sent since replace = \"forwarding-change\" became the default; remove the key (replace = \"every-step\" sends every change)"
                    ),
                ));
            }
            if self.nexthop_group.group_type == GroupType::Resilient {
                let members = self.uplink.len();
                let buckets = usize::from(self.nexthop_group.buckets.0);
                if members > 0 && buckets < BUCKETS_PER_MEMBER_HINT * members {
                    out.push(at(
                        [key("nexthop-group", "buckets"), section("nexthop-group")],
                        format!(
                            "[nexthop-group] buckets = {buckets} for {members} uplinks: a member's share moves in steps of {:.2} % of the traffic, and finer weight changes move no flow; consider buckets >= {}",
                            100.0 / buckets as f64,
                            BUCKETS_PER_MEMBER_HINT * members
                        ),
                    ));
                }
            }
        } else {
            if !self.uplink.is_empty() {
                out.push(at(
                    [item("uplink", 0, "id")],
                    format!(
                        "[[uplink]] in a node with role = \"{}\": only a load-balancer uses uplinks; these are ignored",
                        t.role.as_str()
                    ),
                ));
            }
            if !self.destination.is_empty() {
                out.push(at(
                    [item("destination", 0, "prefix")],
                    format!(
                        "[[destination]] in a node with role = \"{}\": only a load-balancer steers destinations; these are ignored",
                        t.role.as_str()
                    ),
                ));
            }
        }
        if !t.role.advertises() && !self.link.is_empty() {
            out.push(at(
                [item("link", 0, "interface")],
                format!(
                    "[[link]] in a node with role = \"{}\": only a helper advertises its links; these are ignored",
                    t.role.as_str()
                ),
            ));
        }
        out.into_iter()
            .map(|(candidates, message)| {
                let (line, column) = Locator::locate(&candidates, text).unwrap_or((0, 0));
                ConfigWarning {
                    line,
                    column,
                    message,
                }
            })
            .collect()
    }

    /// The local AS used for the node's own AS components (0 when unqualified).
    pub fn node_as(&self) -> u32 {
        if self.lq_telemetry.as_qualified {
            self.lq_telemetry.local_as.unwrap_or(0)
        } else {
            0
        }
    }

    /// Which computed weight changes lqd writes to the kernel (`[nexthop-group] replace`,
    /// `hysteresis-buckets`, `replace-hold-ms`; issue 41).
    pub fn replace_policy(&self) -> crate::core::controller::replace::ReplacePolicy {
        use crate::core::controller::replace::{ReplaceMode, ReplacePolicy};
        let ng = &self.nexthop_group;
        ReplacePolicy {
            mode: match ng.replace {
                ReplaceModeName::ForwardingChange => ReplaceMode::ForwardingChange,
                ReplaceModeName::EveryStep => ReplaceMode::EveryStep,
            },
            hysteresis_buckets: ng.hysteresis_buckets.0,
            hold_ns: u64::from(ng.replace_hold_ms.0) * 1_000_000,
        }
    }

    /// The controller's parameters.
    pub fn controller(&self) -> ControllerConfig {
        let t_notify = Duration::from_millis(u64::from(self.lq_telemetry.notify_interval_ms.0));
        let ng = &self.nexthop_group;
        ControllerConfig {
            t_notify,
            miss_count: self.lq_telemetry.miss_count.0,
            t_reweight: self
                .damping
                .reweight_interval_ms
                .map_or(t_notify, |ms| Duration::from_millis(u64::from(ms))),
            gain: self.damping.gain.0,
            parallel_links: match self.damping.parallel_links {
                ParallelLinks::Minimum => ParallelLinkAggregation::Minimum,
                ParallelLinks::CapacityWeightedMean => {
                    ParallelLinkAggregation::CapacityWeightedMean
                }
            },
            capacity_weighting: self.damping.capacity_weighting,
            weight_function: self.damping.weight_function(),
            gray_failure: self.damping.gray_failure(),
            group: match ng.group_type {
                GroupType::Resilient => GroupKind::Resilient {
                    buckets: ng.buckets.0,
                    idle_timer: Duration::from_millis(u64::from(ng.idle_timer_ms)),
                    unbalanced_timer: Duration::from_millis(u64::from(ng.unbalanced_timer_ms)),
                },
                GroupType::HashThreshold => GroupKind::HashThreshold,
            },
            weight_resolution: if ng.weight_max > 255 {
                WeightResolution::Bits16
            } else {
                WeightResolution::Bits8
            },
        }
    }

    /// The NNH mapping (section 6.1) from `[[uplink]]` and `[[destination]]`.
    pub fn nnh_mapping(&self) -> NnhMapping {
        let mut m = NnhMapping::default();
        for u in &self.uplink {
            m.uplinks.insert(
                UplinkId::from(u.id),
                Uplink {
                    spine: node(u.spine_as, u.spine.0),
                    // The driver's speed, when not configured, is filled in by the role.
                    capacity: u
                        .configured_capacity_gbps()
                        .and_then(|g| Capacity::new(g, CapacitySource::Config))
                        .unwrap_or_default(),
                },
            );
        }
        for c in &self.path_capacity {
            let (spine, remote) = (
                node(c.spine_as, c.spine.0),
                node(c.remote_as, c.remote_node.0),
            );
            let Some(cap) = Capacity::new(c.capacity_gbps, CapacitySource::Config) else {
                continue;
            };
            for u in self
                .uplink
                .iter()
                .filter(|u| node(u.spine_as, u.spine.0) == spine)
            {
                m.remote_capacity
                    .insert((remote, UplinkId::from(u.id)), cap);
            }
        }
        for d in &self.destination {
            m.destinations
                .insert(d.prefix.0, d.remote_node.map(|r| node(d.remote_as, r.0)));
        }
        m
    }

    /// The helper pipeline's and advertiser's parameters.
    pub fn helper_params(&self) -> crate::core::helper::params::HelperParams {
        let h = &self.helper;
        let t = &self.lq_telemetry;
        crate::core::helper::params::HelperParams {
            t_sample: Duration::from_millis(u64::from(h.t_sample_ms)),
            alpha_rise: h.alpha_rise,
            alpha_fall: h.alpha_fall,
            t_hold_down: Duration::from_millis(u64::from(h.hold_down_ms)),
            t_notify: Duration::from_millis(u64::from(t.notify_interval_ms.0)),
            change_threshold: t.change_threshold.0,
            diagnostics: t.diagnostics_enabled,
            ..Default::default()
        }
    }

    /// The AS plan.
    pub fn as_plan(&self) -> Vec<AsRange> {
        self.receiver.as_plan.iter().map(|r| r.0).collect()
    }
}

/// Where a rule of [`Config::validate`] or [`Config::warnings`] points: a key of a table
/// (`section` may be dotted, `slow-plane.bmp`), of the n-th table of an array of tables
/// (`[[uplink]]`, `[[pfc.ethtool]]`), or the table itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Locator {
    section: &'static str,
    index: Option<usize>,
    key: Option<&'static str>,
}

/// A rule's message and where in the file it points, best candidate first.
type Located = (Vec<Locator>, String);

fn at<M: Into<String>>(locators: impl IntoIterator<Item = Locator>, message: M) -> Located {
    (locators.into_iter().collect(), message.into())
}

/// `key` of the table `[section]`.
const fn key(section: &'static str, key: &'static str) -> Locator {
    Locator {
        section,
        index: None,
        key: Some(key),
    }
}

/// `key` of the `index`-th `[[section]]`.
const fn item(section: &'static str, index: usize, key: &'static str) -> Locator {
    Locator {
        section,
        index: Some(index),
        key: Some(key),
    }
}

/// The table `[section]` itself (its header).
const fn section(section: &'static str) -> Locator {
    Locator {
        section,
        index: None,
        key: None,
    }
}

impl Locator {
    /// The byte span in `text` of the key's value, or of the table's header for a table
    /// locator; `None` when it is not written there (a default).
    fn span(&self, doc: &toml_edit::ImDocument<&str>) -> Option<std::ops::Range<usize>> {
        let mut item: &toml_edit::Item = doc.as_item();
        for part in self.section.split('.') {
            item = item.get(part)?;
        }
        let table = match self.index {
            Some(i) => item.as_array_of_tables()?.get(i)?,
            None => item.as_table()?,
        };
        match self.key {
            Some(k) => table.get(k)?.span(),
            None => table.span(),
        }
    }

    /// The (line, column) of the first candidate written in `text`, else of the first
    /// candidate's table.
    fn locate(candidates: &[Locator], text: &str) -> Option<(usize, usize)> {
        let doc = toml_edit::ImDocument::parse(text).ok()?;
        candidates
            .iter()
            .find_map(|l| l.span(&doc))
            .or_else(|| {
                candidates
                    .iter()
                    .find_map(|l| Locator { key: None, ..*l }.span(&doc))
            })
            .map(|s| line_col(text, s.start))
    }
}

/// A configuration that is legal but will probably not do what its author meant
/// ([`Config::warnings`]): `lqd check-config` prints it (`--strict` makes it an error) and
/// `lqd run` logs it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ConfigWarning {
    /// 1-based line, 0 when the rule points at nothing written in the file.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is surprising, and what to do.
    pub message: String,
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAF: &str = r#"
[lq-telemetry]
enabled = true
role = "load-balancer"

[receiver]
interfaces = ["eth1", "eth2"]

[[uplink]]
id = 1
spine = "10.0.0.1"
interface = "eth1"
gateway = "10.1.1.1"

[[uplink]]
id = 2
spine = "10.0.0.2"
interface = "eth2"
gateway = "10.1.2.1"

[[destination]]
prefix = "10.4.0.0/24"
remote-node = "10.0.1.4"
"#;

    fn parse(text: &str) -> Result<Config, ConfigFileError> {
        Config::parse(text, Path::new("leaf.toml"))
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn gnmi_needs_tls_or_loopback_plaintext_and_valid_read_paths() {
        let tls = "[gnmi]\nlisten = \"192.0.2.1:9339\"\ncertificate = \"/c.pem\"\nprivate-key = \"/k.pem\"\nclient-ca = \"/ca.pem\"\n";
        let c = parse(&format!(
            "{LEAF}{tls}\n[[gnmi.client]]\nname = \"collector.example\"\nread = [\"/lq-telemetry/neighbors\"]\n"
        ))
        .unwrap();
        let g = c.gnmi.as_ref().unwrap();
        assert_eq!(g.max_subscriptions, 128);
        assert_eq!(
            g.rules().unwrap()[0].read[0].to_string(),
            "/lq-telemetry/neighbors"
        );
        assert!(
            parse(&format!(
                "{LEAF}[gnmi]\nlisten = \"127.0.0.1:9339\"\nplaintext = true\n"
            ))
            .is_ok()
        );
        let e = err(&format!(
            "{LEAF}[gnmi]\nlisten = \"192.0.2.1:9339\"\nplaintext = true\n"
        ));
        assert!(e.contains("loopback"), "{e}");
        let e = err(&format!(
            "{LEAF}[gnmi]\nlisten = \"192.0.2.1:9339\"\ncertificate = \"/c.pem\"\n"
        ));
        assert!(e.contains("private-key, client-ca"), "{e}");
        let e = err(&format!(
            "{LEAF}{tls}\n[[gnmi.client]]\nname = \"x\"\nread = [\"/interfaces\"]\n"
        ));
        assert!(e.contains("not in this target's data tree"), "{e}");
        let e = err(&format!(
            "{LEAF}{tls}\n[[gnmi.client]]\nname = \"not a name\"\nread = [\"/\"]\n"
        ));
        assert!(e.contains("not a DNS name or IP address"), "{e}");
        let e = err(&format!("{LEAF}{tls}max-subscriptions = 0\n"));
        assert!(e.contains("max-subscriptions"), "{e}");
    }

    /// Issue 40: a reload applies the northbound read rules and TLS files; the listen
    /// address, TLS on or off and the subscription bound take a restart.
    #[test]
    fn northbound_rules_reload_and_their_sockets_take_a_restart() {
        let tls = "certificate = \"/c.pem\"\nprivate-key = \"/k.pem\"\nclient-ca = \"/ca.pem\"\n";
        let with = |listen: &str, rule: &str| {
            parse(&format!(
                "{LEAF}[gnmi]\nlisten = \"{listen}:9339\"\n{tls}[[gnmi.client]]\nname = \"c.example\"\nread = [\"{rule}\"]\n[metrics]\nlisten = \"{listen}:9464\"\n{tls}[[metrics.client]]\nname = \"c.example\"\nread = [\"{rule}\"]\n"
            ))
            .unwrap()
        };
        let a = with("192.0.2.1", "/lq-telemetry/neighbors");
        let rules = with("192.0.2.1", "/lq-telemetry/weighted-ecmp");
        assert!(a.restart_only_changes(&rules).is_empty());
        let moved = with("192.0.2.2", "/lq-telemetry/neighbors");
        assert_eq!(
            a.restart_only_changes(&moved),
            ["[metrics] listen", "[gnmi] listen"]
        );
        let mut off = a.clone();
        off.gnmi = None;
        assert_eq!(a.restart_only_changes(&off), ["[gnmi] (on or off)"]);
    }

    /// `[metrics]` (issue 40): loopback by default, TLS with all three files or none, and
    /// named rules only with TLS (plain HTTP clients have no certificate to match).
    #[test]
    fn metrics_listen_on_loopback_by_default_and_take_the_gnmi_rules() {
        let c = parse(&format!("{LEAF}[metrics]\n")).unwrap();
        let m = c.metrics.as_ref().unwrap();
        assert_eq!(m.listen.to_string(), "127.0.0.1:9464");
        assert!(m.tls_files().is_none());
        let c = parse(&format!(
            "{LEAF}[metrics]\n[[metrics.client]]\nname = \"*\"\nread = [\"/lq-telemetry/weighted-ecmp\"]\n"
        ))
        .unwrap();
        let rules = c.metrics.unwrap().rules().unwrap();
        assert_eq!(rules[0].read[0].to_string(), "/lq-telemetry/weighted-ecmp");
        let e = err(&format!(
            "{LEAF}[metrics]\nlisten = \"192.0.2.1:9464\"\ncertificate = \"/c.pem\"\n"
        ));
        assert!(e.contains("needs private-key, client-ca"), "{e}");
        let e = err(&format!(
            "{LEAF}[metrics]\n[[metrics.client]]\nname = \"prometheus.example\"\nread = [\"/\"]\n"
        ));
        assert!(e.contains("serves plain HTTP"), "{e}");
        let tls = "[metrics]\nlisten = \"192.0.2.1:9464\"\ncertificate = \"/c.pem\"\nprivate-key = \"/k.pem\"\nclient-ca = \"/ca.pem\"\n";
        let c = parse(&format!(
            "{LEAF}{tls}[[metrics.client]]\nname = \"prometheus.example\"\nread = [\"/lq-telemetry/neighbors\"]\n"
        ))
        .unwrap();
        assert!(c.metrics.unwrap().tls_files().is_some());
        let e = err(&format!(
            "{LEAF}{tls}[[metrics.client]]\nname = \"x y\"\nread = [\"/\"]\n"
        ));
        assert!(e.contains("[[metrics.client]]"), "{e}");
        let e = err(&format!(
            "{LEAF}{tls}[[metrics.client]]\nname = \"x\"\nread = [\"/interfaces\"]\n"
        ));
        assert!(e.contains("not in this target's data tree"), "{e}");
    }

    const HELPER: &str = r#"
[lq-telemetry]
enabled = true
role = "helper"
router-id = "10.0.0.2"

[[link]]
interface = "eth1"
remote-node = ["10.0.1.1"]
"#;

    /// `[receiver] authentication` (issue 39): needs a key chain, names its values, and
    /// turning it on or off (or changing it) needs a restart; the helper's key chain too.
    #[test]
    fn authentication_needs_a_key_chain_and_a_restart_to_change() {
        let auth = |extra: &str| LEAF.replace("[receiver]", &format!("[receiver]\n{extra}"));
        let e = err(&auth("authentication = \"required\""));
        assert!(e.contains("needs [receiver] key-chain"), "{e}");
        let e = err(&auth("authentication = \"always\""));
        assert!(e.contains("accept-unauthenticated"), "{e}");
        let on = parse(&auth(
            "authentication = \"required\"\nkey-chain = \"/etc/lq/keys.toml\"",
        ))
        .unwrap();
        assert_eq!(on.receiver.authentication, Authentication::Required);
        let off = parse(LEAF).unwrap();
        assert_eq!(off.receiver.authentication, Authentication::None);
        let changed = off.restart_only_changes(&on);
        assert!(
            changed.contains(&"[receiver] authentication"),
            "{changed:?}"
        );
        let h = parse(&format!(
            "{HELPER}\n[helper]\nkey-chain = \"/etc/lq/keys.toml\"\n"
        ))
        .unwrap();
        let plain = parse(HELPER).unwrap();
        assert!(
            plain
                .restart_only_changes(&h)
                .contains(&"[helper] key-chain (on or off)")
        );
        assert!(h.restart_only_changes(&h).is_empty());
        // A mode per uplink (`[receiver.interface-authentication]`): over the default,
        // only for receiver interfaces, and a key chain as soon as one authenticates.
        let per = |modes: &str, extra: &str| format!("{}{modes}", auth(extra));
        let e = err(&per(
            "\n[receiver.interface-authentication]\neth2 = \"required\"\n",
            "",
        ));
        assert!(e.contains("needs [receiver] key-chain"), "{e}");
        let e = err(&per(
            "\n[receiver.interface-authentication]\neth9 = \"required\"\n",
            "key-chain = \"/k.toml\"",
        ));
        assert!(
            e.contains("\"eth9\", which is not in [receiver] interfaces"),
            "{e}"
        );
        let mixed = parse(&per(
            "\n[receiver.interface-authentication]\neth2 = \"none\"\n",
            "authentication = \"required\"\nkey-chain = \"/k.toml\"",
        ))
        .unwrap();
        assert_eq!(
            mixed.receiver.authentication_of("eth1"),
            Authentication::Required
        );
        assert_eq!(
            mixed.receiver.authentication_of("eth2"),
            Authentication::None
        );
        assert_eq!(
            mixed.receiver.authenticating_interfaces(),
            vec![("eth1", Authentication::Required)]
        );
        let all = parse(&per(
            "",
            "authentication = \"required\"\nkey-chain = \"/k.toml\"",
        ))
        .unwrap();
        assert!(
            all.restart_only_changes(&mixed)
                .contains(&"[receiver.interface-authentication]")
        );
    }

    /// Issue 43's configurations that misbehaved with `check-config` saying ok: each is now
    /// refused at its line (file:line:col, the key's name and what is allowed).
    #[test]
    fn configurations_that_would_misbehave_are_refused_at_their_line() {
        let cases: Vec<(String, &str, &str)> = vec![
            (
                LEAF.replace("[receiver]", "[receiver]\nas-plan = [\"65000-65010\"]")
                    .replace(
                        "role = \"load-balancer\"",
                        "role = \"load-balancer\"\nas-qualified = true\nlocal-as = 65001",
                    )
                    .replace(
                        "interface = \"eth1\"",
                        "interface = \"eth1\"\nspine-as = 65100",
                    )
                    .replace(
                        "interface = \"eth2\"",
                        "interface = \"eth2\"\nspine-as = 65002",
                    )
                    .replace(
                        "remote-node = \"10.0.1.4\"",
                        "remote-node = \"10.0.1.4\"\nremote-as = 65003",
                    ),
                "leaf.toml:16:12: [[uplink]] id = 1: spine-as = 65100 is outside [receiver] as-plan",
                "spine-as outside as-plan",
            ),
            (
                format!("{HELPER}\n[[link]]\ninterface = \"eth1\"\nremote-node = [\"10.0.1.2\"]\n"),
                "leaf.toml:12:13: [[link]] interface \"eth1\" appears twice",
                "the same [[link]] interface twice",
            ),
            (
                LEAF.replace(
                    "role = \"load-balancer\"",
                    "role = \"load-balancer\"\nlocal-as = 65001",
                ),
                "leaf.toml:5:12: [lq-telemetry] local-as is set but as-qualified = false",
                "local-as unqualified",
            ),
            (
                format!("{LEAF}\n[udp]\nport = 0\n"),
                "leaf.toml:26:8: [udp] port = 0 is no port",
                "port 0",
            ),
            (
                format!("{HELPER}\n[helper]\nmtu = 40\n"),
                "leaf.toml:12:7: [helper] mtu = 40: not even one entry fits",
                "an mtu no entry fits in",
            ),
            (
                LEAF.replace(
                    "\"eth1\", \"eth2\"",
                    "\"eth1\", \"an-interface-name-of-35-characters\"",
                ),
                "leaf.toml:7:14: [receiver] interfaces: \"an-interface-name-of-35-characters\" is not a Linux interface name",
                "a 35-character interface name",
            ),
            (
                LEAF.replace("id = 2", "id = 1"),
                "leaf.toml:16:6: [[uplink]] id = 1: ids must be unique and non-zero",
                "a duplicate uplink id",
            ),
            (
                LEAF.replace(
                    "role = \"load-balancer\"",
                    "role = \"load-balancer\"\nas-qualified = true",
                ),
                "leaf.toml:5:16: [lq-telemetry] as-qualified = true needs a non-zero local-as",
                "as-qualified without local-as",
            ),
            (
                HELPER.replace("router-id = \"10.0.0.2\"\n", ""),
                "leaf.toml:4:8: [lq-telemetry] role = \"helper\" needs router-id",
                "a helper without router-id",
            ),
            (
                format!("{LEAF}\n[damping]\nreweight-interval-ms = 5\n"),
                "leaf.toml:26:24: [damping] reweight-interval-ms = 5 is below notify-interval-ms",
                "reweight-interval-ms below notify-interval-ms",
            ),
            (
                format!("{LEAF}\n[[destination]]\nprefix = \"10.4.0.0/24\"\n"),
                "leaf.toml:26:10: [[destination]] prefix 10.4.0.0/24 appears twice",
                "a duplicate prefix",
            ),
            (
                format!("{LEAF}\n[nexthop-group]\nweight-max = 300\n"),
                "leaf.toml:26:14: [nexthop-group] weight-max = 300: allowed 255 or 65535",
                "weight-max",
            ),
            (
                format!("{HELPER}\n[helper]\nt-sample-ms = 0\n"),
                "leaf.toml:12:15: [helper] t-sample-ms = 0 is out of range: allowed 1..=5",
                "t-sample-ms by its key",
            ),
            (
                format!("{HELPER}\n[helper]\nalpha-rise = 0.9\n"),
                "leaf.toml:12:14: [helper] alpha-rise = 0.9 is out of range: allowed 0.3..=0.8",
                "alpha-rise by its key",
            ),
            (
                format!("{HELPER}\n[helper]\nhold-down-ms = 10\n"),
                "leaf.toml:12:16: [helper] hold-down-ms = 10 is out of range: allowed 50..=200",
                "hold-down-ms by its key",
            ),
        ];
        let mut wrong = Vec::new();
        for (text, want, what) in cases {
            let got = parse(&text).map_or_else(|e| e.to_string(), |_| "accepted".into());
            if !got.starts_with(want) {
                wrong.push(format!("{what}:\n got  {got}\n want {want}..."));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// What is legal but surprising is warned about, at its line.
    #[test]
    fn surprising_configurations_are_warned_about_at_their_line() {
        // (line, message) of each warning.
        let warned = |text: &str| -> Vec<(usize, String)> {
            parse(text)
                .unwrap()
                .warnings(text)
                .into_iter()
                .map(|w| (w.line, w.message))
                .collect()
        };
        let has = |w: &[(usize, String)], line: usize, start: &str| {
            w.iter().any(|(l, m)| *l == line && m.starts_with(start))
        };
        let w = warned(&LEAF.replace("\"eth1\", \"eth2\"", "\"eth1\""));
        assert!(
            has(
                &w,
                18,
                "[[uplink]] id = 2: interface \"eth2\" is not in [receiver] interfaces"
            ),
            "{w:?}"
        );
        let w = warned(&format!(
            "{HELPER}\n[[uplink]]\nid = 1\nspine = \"10.0.0.1\"\ninterface = \"eth1\"\ngateway = \"10.1.1.1\"\n"
        ));
        assert!(
            has(&w, 12, "[[uplink]] in a node with role = \"helper\""),
            "{w:?}"
        );
        let w = warned(&format!(
            "{LEAF}\n[[link]]\ninterface = \"eth9\"\nremote-node = [\"10.0.1.1\"]\n"
        ));
        assert!(
            has(&w, 26, "[[link]] in a node with role = \"load-balancer\""),
            "{w:?}"
        );
        let w = warned(&format!("{LEAF}\n[nexthop-group]\nbuckets = 8\n"));
        assert!(
            has(&w, 26, "[nexthop-group] buckets = 8 for 2 uplinks"),
            "{w:?}"
        );
        let w = warned(
            "[lq-telemetry]\nenabled = true\nrole = \"load-balancer\"\n[receiver]\ninterfaces = [\"eth1\"]\n",
        );
        assert!(has(&w, 3, "a load-balancer with no [[uplink]]"), "{w:?}");
        assert!(warned(LEAF).is_empty(), "{:?}", warned(LEAF));
    }

    #[test]
    fn path_capacities_map_to_every_uplink_of_their_spine_and_bad_ones_are_refused() {
        let cfg = |extra: &str| format!("{LEAF}\n{extra}");
        let one = "[[path-capacity]]\nspine = \"10.0.0.2\"\nremote-node = \"10.0.1.4\"\ncapacity-gbps = 0.025\n";
        let c = parse(&cfg(one)).unwrap();
        let m = c.nnh_mapping();
        let r4 = node(0, u32::from(std::net::Ipv4Addr::new(10, 0, 1, 4)));
        assert_eq!(
            m.remote_capacity.get(&(r4, 2)),
            Capacity::new(0.025, CapacitySource::Config).as_ref()
        );
        assert_eq!(m.remote_capacity.len(), 1);
        // Capacity weighting is on by default; uplinks without capacity-gbps or rate-mbit
        // have no configured capacity (the role fills in the driver's speed).
        assert!(c.damping.capacity_weighting);
        assert_eq!(m.uplinks[&1].capacity.source, CapacitySource::Unknown);
        let rated = LEAF.replacen(
            "gateway = \"10.1.1.1\"\n",
            "gateway = \"10.1.1.1\"\nrate-mbit = 400\n",
            1,
        );
        let m = parse(&rated).unwrap().nnh_mapping();
        assert_eq!(
            m.uplinks[&1].capacity,
            Capacity::new(0.4, CapacitySource::Config).unwrap()
        );
        for (bad, why) in [
            (one.replace("0.025", "0"), "must be > 0"),
            (one.replace("0.025", "nan"), "must be > 0"),
            (format!("{one}\n{one}"), "appears twice"),
            (
                one.replace("10.0.0.2", "10.0.0.9"),
                "no [[uplink]] leads to spine 10.0.0.9",
            ),
        ] {
            let e = err(&cfg(&bad));
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn local_quality_source_defaults_to_link_state_and_measured_needs_a_load_balancer() {
        assert_eq!(
            parse(LEAF).unwrap().local_quality.source,
            LocalQualitySource::LinkState
        );
        let measured = format!("{LEAF}\n[local-quality]\nsource = \"measured\"\n");
        let c = parse(&measured).unwrap();
        assert_eq!(c.local_quality.source, LocalQualitySource::Measured);
        let spine = "[lq-telemetry]\nenabled = true\nrole = \"helper\"\nrouter-id = \"10.0.0.2\"\n\n[local-quality]\nsource = \"measured\"\n";
        assert!(
            err(spine).contains("load balancer's local quality"),
            "{}",
            err(spine)
        );
        let e = err(&format!("{LEAF}\n[local-quality]\nsource = \"dlb\"\n"));
        assert!(e.contains("link-state") && e.contains("measured"), "{e}");
    }

    #[test]
    fn a_leaf_config_loads_with_the_model_defaults() {
        let c = parse(LEAF).unwrap();
        assert_eq!(c.lq_telemetry.notify_interval_ms.0, 20);
        assert_eq!(c.lq_telemetry.change_threshold.0, 25);
        assert_eq!(c.lq_telemetry.miss_count.0, 3);
        assert_eq!(c.udp.port, 52525);
        let m = c.nnh_mapping();
        assert_eq!(m.uplinks.len(), 2);
        assert_eq!(m.destinations.len(), 1);
        assert_eq!(c.controller().dead_interval_ns(), 60_000_000);
    }

    #[test]
    fn unknown_keys_name_the_line() {
        let e = err(&LEAF.replace(
            "role = \"load-balancer\"",
            "role = \"load-balancer\"\nnotify-intervl-ms = 20",
        ));
        assert!(e.starts_with("leaf.toml:5:"), "{e}");
        assert!(e.contains("unknown field `notify-intervl-ms`"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_the_line_and_the_range() {
        let e = err(&LEAF.replace(
            "role = \"load-balancer\"",
            "role = \"load-balancer\"\nmiss-count = 11",
        ));
        assert!(e.starts_with("leaf.toml:5:"), "{e}");
        assert!(e.contains("11 is out of range: allowed 2..=10"), "{e}");
        let e = err(&LEAF.replace("[receiver]", "[damping]\ngain = 0.1\n[receiver]"));
        assert!(e.contains("allowed 0.25..=1.0"), "{e}");
        // A zero line rate would make every utilisation infinite (Appendix A.1).
        let e = err(&LEAF.replace(
            "interface = \"eth2\"",
            "interface = \"eth2\"\nrate-mbit = 0",
        ));
        assert!(e.starts_with("leaf.toml:19:13:"), "{e}");
        assert!(
            e.contains("0 is out of range: allowed 1..=100000000"),
            "{e}"
        );
        let e = err(&LEAF.replace(
            "role = \"load-balancer\"",
            "role = \"load-balancer\"\nnotify-interval-ms = 5",
        ));
        assert!(e.contains("allowed 10..=100"), "{e}");
    }

    #[test]
    fn weight_function_keys() {
        assert_eq!(
            parse(LEAF).unwrap().controller().weight_function,
            WeightFunction::Seed
        );
        let c = parse(&LEAF.replace(
            "[receiver]",
            "[damping]\nweight-function = \"integral\"\nintegral-floor = 0.4\n[receiver]",
        ))
        .unwrap();
        let WeightFunction::Integral(p) = c.controller().weight_function else {
            panic!("not integral");
        };
        assert_eq!(p.floor, 0.4);
        assert_eq!(p.deadband, IntegralParams::default().deadband);
        let e = err(&LEAF.replace(
            "[receiver]",
            "[damping]\nweight-function = \"integral\"\nintegral-floor = 2\n[receiver]",
        ));
        assert!(e.contains("integral weight function"), "{e}");
        let e = err(&LEAF.replace(
            "[receiver]",
            "[damping]\nweight-function = \"x\"\n[receiver]",
        ));
        assert!(
            e.contains("weight-function") || e.contains("unknown variant"),
            "{e}"
        );
    }

    #[test]
    fn gray_failure_keys() {
        let with =
            |keys: &str| LEAF.replace("[receiver]", &format!("[damping]\n{keys}\n[receiver]"));
        assert_eq!(parse(LEAF).unwrap().controller().gray_failure, None);
        let c = parse(&with("gray-failure-prune = true")).unwrap();
        assert_eq!(
            c.controller().gray_failure,
            Some(GrayFailurePrune { min_available: 0.9 })
        );
        let c = parse(&with(
            "gray-failure-prune = true\ngray-failure-min-available = 0.8",
        ))
        .unwrap();
        assert_eq!(
            c.controller().gray_failure,
            Some(GrayFailurePrune { min_available: 0.8 })
        );
        let e = err(&with(
            "gray-failure-prune = true\ngray-failure-min-available = 0.05",
        ));
        assert!(
            e.contains("gray-failure-min-available = 0.05 is outside 0.1..=1.0"),
            "{e}"
        );
        let e = err(&with("gray-failure-min-available = 0.8"));
        assert!(e.contains("gray-failure-prune is not true"), "{e}");
        let e = err(&with(
            "gray-failure-prune = true\nweight-function = \"integral\"",
        ));
        assert!(e.contains("needs weight-function = \"seed\""), "{e}");
    }

    #[test]
    fn cross_key_rules() {
        assert!(err(&LEAF.replace("enabled = true", "enabled = false")).contains("enabled = true"));
        assert!(
            err(&LEAF.replace("role = \"load-balancer\"", "role = \"helper\""))
                .contains("needs router-id")
        );
        assert!(
            err(&LEAF.replace("enabled = true", "enabled = true\nas-qualified = true"))
                .contains("local-as")
        );
        assert!(
            err(&LEAF.replace(
                "[receiver]",
                "[damping]\nreweight-interval-ms = 10\n[receiver]"
            ))
            .contains("T_reweight >= T_notify")
        );
        assert!(err(&LEAF.replace("id = 2", "id = 1")).contains("unique"));
        assert!(err(&LEAF.replace("10.4.0.0/24", "10.4.0.1/24")).contains("host bits"));
        assert!(
            err(&LEAF.replace("spine = \"10.0.0.1\"", "spine = \"10.0.0\""))
                .contains("dotted-quad")
        );
    }

    /// AS fields follow `as-qualified` (seed 003 sections 5.6, 6.2), reported at the value.
    #[test]
    fn as_fields_are_checked_against_as_qualified() {
        // Unqualified: a spine AS would key entries that never match (line 18, column 12).
        let e = err(&LEAF.replace(
            "spine = \"10.0.0.2\"",
            "spine = \"10.0.0.2\"\nspine-as = 65002",
        ));
        assert!(
            e.starts_with(
                "leaf.toml:18:12: [[uplink]] id = 2: spine-as = 65002 needs as-qualified = true"
            ),
            "{e}"
        );
        let e = err(&LEAF.replace(
            "remote-node = \"10.0.1.4\"",
            "remote-node = \"10.0.1.4\"\nremote-as = 65104",
        ));
        assert!(
            e.starts_with("leaf.toml:24:13: [[destination]] 10.4.0.0/24: remote-as"),
            "{e}"
        );

        // Qualified: AS 0 never matches. An unwritten key is pointed at by its table.
        let q = LEAF.replace(
            "enabled = true",
            "enabled = true\nas-qualified = true\nlocal-as = 65000",
        );
        let e = err(&q);
        assert!(
            e.starts_with(
                "leaf.toml:11:1: [[uplink]] id = 1: spine-as = 0 with as-qualified = true"
            ),
            "{e}"
        );
        let q = q
            .replace(
                "spine = \"10.0.0.1\"",
                "spine = \"10.0.0.1\"\nspine-as = 65001",
            )
            .replace("spine = \"10.0.0.2\"", "spine = \"10.0.0.2\"\nspine-as = 0");
        let e = err(&q);
        assert!(
            e.starts_with("leaf.toml:21:12: [[uplink]] id = 2: spine-as = 0"),
            "{e}"
        );
        let q = q.replace("spine-as = 0", "spine-as = 65002");
        assert!(err(&q).contains("[[destination]] 10.4.0.0/24: remote-as = 0"));
        let q = q.replace(
            "remote-node = \"10.0.1.4\"",
            "remote-node = \"10.0.1.4\"\nremote-as = 65104",
        );
        assert!(parse(&q).is_ok());

        // The helper's [[link]] remote-as, both ways.
        let spine = "[lq-telemetry]\nenabled = true\nrole = \"helper\"\nrouter-id = \"10.0.0.2\"\n";
        let link = "[[link]]\ninterface = \"eth1\"\nremote-node = [\"10.0.1.1\"]\n";
        let e = err(&format!("{spine}{link}remote-as = 5\n"));
        assert!(
            e.starts_with("leaf.toml:8:13: [[link]] eth1: remote-as = 5 needs as-qualified"),
            "{e}"
        );
        let qspine = spine.replace(
            "enabled = true",
            "enabled = true\nas-qualified = true\nlocal-as = 65000",
        );
        let e = err(&format!("{qspine}{link}"));
        assert!(
            e.contains("[[link]] eth1: remote-as = 0 with as-qualified = true"),
            "{e}"
        );
        assert!(parse(&format!("{qspine}{link}remote-as = 65101\n")).is_ok());
    }

    /// `replace`, `hysteresis-buckets` and `replace-hold-ms` reach the policy, out-of-range
    /// values are refused, and the retired `skip-bucket-neutral` is warned about.
    #[test]
    fn replace_policy_keys_have_ranges_and_the_old_key_is_warned_about() {
        let ng = |body: &str| format!("{LEAF}[nexthop-group]\n{body}\n");
        let c = parse(&ng(
            "replace = \"every-step\"\nhysteresis-buckets = 0.5\nreplace-hold-ms = 100",
        ))
        .unwrap();
        let p = c.replace_policy();
        assert_eq!(
            p.mode,
            crate::core::controller::replace::ReplaceMode::EveryStep
        );
        assert_eq!((p.hysteresis_buckets, p.hold_ns), (0.5, 100_000_000));
        assert_eq!(
            parse(LEAF).unwrap().replace_policy(),
            crate::core::controller::replace::ReplacePolicy::default()
        );
        for (body, want) in [
            ("hysteresis-buckets = 5.0", "allowed 0..=4 buckets"),
            ("hysteresis-buckets = -1.0", "allowed 0..=4 buckets"),
            ("replace-hold-ms = 20000", "allowed 0..=10000"),
            ("replace = \"sometimes\"", "unknown variant `sometimes`"),
        ] {
            let e = err(&ng(body));
            assert!(e.contains(want), "{body}: {e}");
        }
        let text = ng("skip-bucket-neutral = true");
        let w = parse(&text).unwrap().warnings(&text);
        assert!(
            w.iter().any(|w| w
                .message
                .starts_with("[nexthop-group] skip-bucket-neutral = true is ignored")),
            "{w:?}"
        );
    }

    /// Nexthop ids are id-base + uplink id and id-base + 0x10000 + n: they must fit in
    /// 32 bits, or they would wrap onto other objects.
    #[test]
    fn id_base_plus_ids_cannot_overflow() {
        let with_base = |b: u64| format!("{LEAF}[nexthop-group]\nid-base = {b}\n");
        // LEAF: uplinks 1 and 2, destinations: their groups take ids up to
        // id-base + 0x17fff, so id-base may be at most u32::MAX - 0x17fff.
        let max = u64::from(u32::MAX) - 0x1_7fff;
        assert!(parse(&with_base(max)).is_ok());
        let e = err(&with_base(max + 1));
        assert!(
            e.starts_with(&format!(
                "leaf.toml:25:11: id-base = {}: group ids",
                max + 1
            )),
            "{e}"
        );
        assert!(e.contains(&format!("at most {max}")), "{e}");
        let e = err(&with_base(u64::from(u32::MAX)));
        assert!(
            e.starts_with("leaf.toml:25:11: id-base = 4294967295 + [[uplink]] id = 1 overflows"),
            "{e}"
        );
        // The slow plane's groups need more room.
        let slow = format!("{}[slow-plane]\n", with_base(max));
        let e = err(&slow);
        assert!(e.contains("[slow-plane] groups) overflow"), "{e}");
        assert!(e.contains("at most 4278091776"), "{e}");
    }

    #[test]
    fn helper_and_export_error_classes() {
        let spine = "[lq-telemetry]\nenabled = true\nrole = \"helper\"\nrouter-id = \"10.0.0.2\"\n";
        assert!(err(spine).contains("needs at least one [[link]]"));
        let link = "[[link]]\ninterface = \"eth1\"\nremote-node = [\"10.0.1.1\"]\n";
        assert!(parse(&format!("{spine}{link}")).is_ok());
        assert!(err(&format!("{spine}{link}[helper]\nalpha-rise = 0.9\n")).contains("alpha"));
        assert!(
            err(&format!("{spine}{link}[helper]\nsend-to = \"unicast\"\n")).contains("needs peer")
        );
        assert!(
            err(&format!(
                "{spine}[[link]]\ninterface = \"eth1\"\nremote-node = []\n"
            ))
            .contains("lists no node")
        );
        assert!(err(&format!("{spine}[[link]]\ninterface = \"eth1\"\nremote-node = [\"10.0.1.1\"]\nremote-as = 5\n")).contains("as-qualified"));
        let ipfix = "[pfc]\ninterfaces = [\"eth1\"]\n[ipfix]\ncollector = \"127.0.0.1:4739\"\n";
        assert!(parse(&format!("{LEAF}{ipfix}")).is_ok());
        assert!(err(&format!("{LEAF}{ipfix}total-element-id = 0\n")).contains("outside 1..=32767"));
        assert!(err(&format!("{LEAF}{ipfix}iana-ids = true\n")).contains("outside 128..=32767"));
        assert!(err(&format!("{LEAF}{ipfix}dscp = 64\n")).contains("0..=63"));
        assert!(
            err(&format!("{LEAF}[ipfix]\ncollector = \"127.0.0.1:4739\"\n"))
                .contains("needs [pfc] interfaces")
        );
        let e = err(&format!("{LEAF}[ipfix]\ncollector = \"nowhere\"\n"));
        assert!(
            e.contains("leaf.toml:") && e.contains("socket address"),
            "{e}"
        );
        assert!(err(&format!("{LEAF}[metrics]\nlisten = 5\n")).contains("leaf.toml:"));
        let eth = "[[pfc.ethtool]]\ninterface = \"eth1\"\ndirection = \"transmitted\"\n";
        assert!(parse(&format!("{LEAF}{eth}preset = \"mlx5\"\n")).is_ok());
        assert!(err(&format!("{LEAF}{eth}preset = \"acme\"\n")).contains("unknown preset"));
        assert!(err(&format!("{LEAF}{eth}template = \"tx_pause\"\n")).contains("{n}"));
        assert!(err(&format!("{LEAF}{eth}\n")).contains("exactly one of template and preset"));
        let rx = "[pfc]\ninterfaces = [\"eth1\"]\n[[pfc.ethtool]]\ninterface = \"eth1\"\ndirection = \"received\"\npreset = \"mlx5\"\n";
        assert!(err(&format!("{LEAF}{rx}")).contains("one source per counter"));
        let peer =
            "[[pfc.veth-peer]]\ninterface = \"eth1\"\npeer-pin-dir = \"/sys/fs/bpf/lq/b-pfc\"\n";
        assert!(parse(&format!("{LEAF}{peer}")).is_ok());
        assert!(err(&format!("{LEAF}{peer}{peer}")).contains("one source per counter"));
        assert!(
            err(&format!("{LEAF}{eth}preset = \"mlx5\"\n{peer}"))
                .contains("one source per counter")
        );
        assert!(
            err(&format!("{LEAF}[[pfc.veth-peer]]\ninterface = \"eth1\"\n"))
                .contains("peer-pin-dir")
        );
    }

    #[test]
    fn prefixes_parse() {
        assert!(parse_prefix("10.4.0.0/24").is_ok());
        assert!(parse_prefix("0.0.0.0/0").is_ok());
        assert!(parse_prefix("10.4.0.1/32").is_ok());
        assert!(parse_prefix("10.4.0.1/24").is_err());
        assert!(parse_prefix("2001:db8::/32").is_ok());
        assert!(parse_prefix("2001:db8::1/64").is_err());
        assert!(parse_prefix("10.4.0.0/33").is_err());
    }

    /// `[slow-plane.bmp]` (issue 16): the origin AS matches remote-as, so it needs
    /// as-qualified operation; the session limit is bounded.
    #[test]
    fn slow_plane_bmp_needs_as_qualified_and_bounded_sessions() {
        let unqualified = LEAF.replace(
            "[[destination]]\nprefix = \"10.4.0.0/24\"\nremote-node = \"10.0.1.4\"\n",
            "[slow-plane]\n\n[slow-plane.bmp]\nlisten = \"127.0.0.1:11019\"\n",
        );
        assert!(unqualified.contains("[slow-plane.bmp]"));
        let e = err(&unqualified);
        assert!(
            e.contains("needs [lq-telemetry] as-qualified = true"),
            "{e}"
        );
        let qualified = unqualified
            .replace(
                "enabled = true",
                "enabled = true\nas-qualified = true\nlocal-as = 65101",
            )
            .replace(
                "spine = \"10.0.0.1\"",
                "spine = \"10.0.0.1\"\nspine-as = 65001",
            )
            .replace(
                "spine = \"10.0.0.2\"",
                "spine = \"10.0.0.2\"\nspine-as = 65002",
            );
        let c = parse(&qualified).unwrap();
        let b = c.slow_plane.unwrap().bmp.unwrap();
        assert_eq!(b.listen, "127.0.0.1:11019".parse().unwrap());
        assert_eq!(b.max_sessions, 4);
        let e = err(&qualified.replace(
            "listen = \"127.0.0.1:11019\"",
            "listen = \"127.0.0.1:11019\"\nmax-sessions = 0",
        ));
        assert!(e.contains("max-sessions"), "{e}");
    }
}

#[cfg(test)]
mod examples {
    use super::Config;

    /// Every file in examples/ loads and validates.
    #[test]
    fn every_example_config_loads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                Config::load(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 2, "no examples found in {}", dir.display());
    }
}
