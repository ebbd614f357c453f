//! The helper role's I/O shell (seed 003 sections 7.2 and 7.3, Appendix A): every
//! T_sample it reads the monitored links' counters, feeds the deterministic pipeline and
//! advertiser of [`crate::core::helper`], and sends the advertiser's datagrams out of every link
//! with TTL 255 on a socket bound to that link.

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

use lq_common::wire::Mode;
use rand::{RngCore, SeedableRng, rngs::SmallRng};
use serde_json::{Value, json};
use socket2::{SockAddr, Socket};
use tracing::{debug, info, warn};

use crate::{
    config::{Config, SendTo},
    core::auth::{Endpoints, KeyChain, SequenceSource, sign},
    core::helper::{
        advertiser::{
            Advertiser, AdvertiserError, Identity, MonitoredLink, Outgoing, PathMtu, RemoteNode,
        },
        notification::ThresholdCrossed,
        pipeline::{LinkPipeline, LinkReport, RawSample},
    },
    sys::{
        clock::{boottime_ns, os_random_u64},
        netlink::ifindex,
    },
    views::snapshot::{SigningView, TriggerView},
};

/// How late a periodic timer may fire and still send "at" its deadline (see
/// [`HelperRole::advertise_due`]).
const MAX_ANCHORED_LATENESS_NS: u64 = 2_000_000;

/// Where the counters of the monitored links come from (the kernel sampler in production,
/// a scripted source in tests and `lqd sim`).
pub trait SampleSource {
    /// One sample per monitored link, in the order of `[[link]]`, read at `t_ns`.
    fn sample(&mut self, t_ns: u64) -> Result<Vec<RawSample>, String>;

    /// Per link, how the last sample was obtained (speed source, qdisc, caveats), for
    /// `lqd show local`: typed and copied, rendered only when a client asks (a sample is
    /// taken 500 times a second per link).
    fn describe(&self) -> Vec<LinkDescription> {
        Vec::new()
    }

    /// Per link, in the order of `[[link]]`, its MTU as of the last sample (`None`:
    /// unknown). Empty when the source does not know: the MTUs read at start stay.
    fn link_mtus(&self) -> &[Option<u32>] {
        &[]
    }
}

/// How one link's last sample was obtained ([`SampleSource::describe`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkDescription {
    /// Where the link speed came from.
    pub speed_source: &'static str,
    /// The link speed used.
    pub link_speed_bps: u64,
    /// The egress root qdisc's kind.
    pub qdisc: Option<crate::sys::sampler::QdiscKind>,
    /// A.1 counters as read.
    pub ecn_eligible: u64,
    pub ecn_marked: u64,
    pub pause_ns: u64,
    /// Caveats.
    pub notes: crate::sys::sampler::Notes,
}

impl LinkDescription {
    /// The `source` object of `lqd show local`.
    pub fn to_json(&self) -> Value {
        json!({
            "speed-source": self.speed_source,
            "link-speed-bps": self.link_speed_bps,
            "qdisc": self.qdisc,
            "ecn-eligible-packets": self.ecn_eligible,
            "ecn-marked-packets": self.ecn_marked,
            "pfc-paused-ns": self.pause_ns,
            "notes": self.notes,
        })
    }
}

/// One sample of every monitored link.
#[derive(Debug)]
pub struct SampleBatch {
    /// When it was taken (CLOCK_BOOTTIME ns).
    pub t_ns: u64,
    /// One sample per link, or why the counters could not be read.
    pub samples: Result<Vec<RawSample>, String>,
    /// How they were obtained ([`SampleSource::describe`]).
    pub described: Vec<LinkDescription>,
    /// The links' MTUs as of this sample ([`SampleSource::link_mtus`]).
    pub link_mtus: Vec<Option<u32>>,
    /// How long reading them took.
    pub took_ns: u64,
}

/// When a sample's counters were read, for the record of the advertisement it triggers.
#[derive(Clone, Copy, Debug)]
struct SampleTiming {
    /// When the reading began (CLOCK_BOOTTIME ns).
    t_ns: u64,
    /// How long it took.
    read_ns: u64,
    /// When the reading of the sample before it began, if there was one.
    previous_ns: Option<u64>,
}

/// Errors of the helper role.
#[derive(Debug, thiserror::Error)]
pub enum HelperRoleError {
    /// Socket set-up.
    #[error("advertisement socket on {iface}")]
    Socket {
        /// The link.
        iface: String,
        /// The cause.
        source: io::Error,
    },
    /// A monitored interface does not exist.
    #[error(transparent)]
    Rtnl(#[from] crate::sys::netlink::RtnlError),
    /// Advertiser configuration.
    #[error(transparent)]
    Advertiser(#[from] AdvertiserError),
    /// `[helper] key-chain` cannot be used.
    #[error(transparent)]
    KeyChain(#[from] crate::config::key_chain::KeyChainFileError),
    /// A link's source address for the authentication trailer's pseudo-header.
    #[error("the source address of link {iface} (for the authentication trailer)")]
    Source {
        /// The link.
        iface: String,
        /// The cause.
        source: io::Error,
    },
}

/// Signs every datagram with the key chain's newest active send key (`[helper]
/// key-chain`; seed 003 section 12.1, issue 39).
struct Signer {
    path: std::path::PathBuf,
    chain: KeyChain,
    sequence: SequenceSource,
    signed: u64,
    no_send_key: u64,
    last_key: Option<(u16, lq_common::auth::Algorithm)>,
}

impl Signer {
    fn load(path: &std::path::Path) -> Result<Self, HelperRoleError> {
        let chain = crate::config::key_chain::load(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            chain,
            sequence: SequenceSource::new(crate::sys::clock::unix_s_now().max(0) as u64),
            signed: 0,
            no_send_key: 0,
            last_key: None,
        })
    }

    /// The room every datagram keeps for the trailer: the longest of the chain's keys.
    fn trailer_room(chain: &KeyChain) -> u32 {
        chain
            .keys()
            .iter()
            .map(|k| k.algorithm.trailer_len() as u32)
            .max()
            .unwrap_or(0)
    }
}

struct Link {
    iface: String,
    ifindex: u32,
    pipeline: LinkPipeline,
    socket: Socket,
    to: SockAddr,
    /// The link's MTU: the datagrams sent out of every link must fit the smallest.
    mtu: u32,
    /// Source and destination as the authentication trailer's pseudo-header names them
    /// (with `[helper] key-chain`).
    endpoints: Option<Endpoints>,
}

/// The helper role: pipelines, advertiser, sockets.
pub struct HelperRole {
    links: Vec<Link>,
    advertiser: Advertiser<SmallRng>,
    /// The counter source, until [`HelperRole::spawn_sampler`] moves it to its thread.
    source: Option<Box<dyn SampleSource + Send>>,
    /// How the last samples were obtained ([`SampleSource::describe`]).
    described: Vec<LinkDescription>,
    /// `[helper] mtu`: an upper bound on the links' MTUs, if configured.
    mtu_cap: Option<u32>,
    reports: Vec<Option<LinkReport>>,
    notifications: Vec<ThresholdCrossed>,
    /// The last [`RECENT_TRIGGERS`] triggered advertisements: when the sample that
    /// triggered each was taken and when it left (seed 003 section 7.2, "within one sampling
    /// interval"), oldest first.
    recent_triggers: std::collections::VecDeque<TriggerView>,
    /// When the reading of the last sample's counters began (a sample that was read): a
    /// triggered advertisement's [`TriggerView::previous_sample_ns`].
    last_sample_ns: Option<u64>,
    /// Batches the sampler thread dropped because the loop had 4 not taken yet.
    samples_dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The count of those last logged.
    samples_dropped_logged: u64,
    /// Datagrams sent, and send errors (counted, logged once a second at most).
    pub sent: u64,
    /// Send errors.
    pub send_errors: u64,
    last_error_log_ns: u64,
    /// With `[helper] key-chain`: the signer.
    signer: Option<Signer>,
}

/// How many triggered advertisements `show local` lists ([`HelperRole::local_view`]).
pub const RECENT_TRIGGERS: usize = 16;

impl HelperRole {
    /// Opens one socket per `[[link]]` and builds the advertiser.
    pub fn start(
        cfg: &Config,
        source: Box<dyn SampleSource + Send>,
    ) -> Result<Self, HelperRoleError> {
        let params = cfg.helper_params();
        let t = &cfg.lq_telemetry;
        let signer = cfg
            .helper
            .key_chain
            .as_deref()
            .map(Signer::load)
            .transpose()?;
        let mut links = Vec::new();
        let mut monitored = Vec::new();
        for l in &cfg.link {
            let idx = ifindex(&l.interface)?;
            let socket =
                crate::sys::socket::open_advertisement_socket(&l.interface, idx, cfg.helper.ipv6)
                    .map_err(|source| HelperRoleError::Socket {
                    iface: l.interface.clone(),
                    source,
                })?;
            let ip: IpAddr = match (cfg.helper.send_to, l.peer) {
                (SendTo::Unicast, Some(p)) => p,
                _ if cfg.helper.ipv6 => IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)),
                _ => IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
            };
            let to = match ip {
                IpAddr::V6(a) => {
                    SockAddr::from(std::net::SocketAddrV6::new(a, cfg.udp.port, 0, idx))
                }
                IpAddr::V4(a) => SockAddr::from(SocketAddr::new(IpAddr::V4(a), cfg.udp.port)),
            };
            monitored.push(MonitoredLink {
                link_id: idx,
                remotes: l
                    .remote_node
                    .iter()
                    .map(|r| RemoteNode {
                        node_id: r.0,
                        node_as: l.remote_as,
                    })
                    .collect(),
            });
            let mtu = crate::sys::socket::link_mtu(&socket, &l.interface).map_err(|source| {
                HelperRoleError::Socket {
                    iface: l.interface.clone(),
                    source,
                }
            })?;
            let endpoints = match &signer {
                Some(_) => {
                    let source =
                        crate::sys::socket::advertisement_source(&socket, &l.interface, &to)
                            .map_err(|source| HelperRoleError::Source {
                                iface: l.interface.clone(),
                                source,
                            })?;
                    let destination = to.as_socket().ok_or_else(|| HelperRoleError::Source {
                        iface: l.interface.clone(),
                        source: io::Error::other("no destination address"),
                    })?;
                    Some(Endpoints {
                        source,
                        destination,
                    })
                }
                None => None,
            };
            links.push(Link {
                iface: l.interface.clone(),
                ifindex: idx,
                pipeline: LinkPipeline::new(idx, &params),
                socket,
                to,
                mtu,
                endpoints,
            });
            info!(iface = %l.interface, link_id = idx, to = %ip, mtu, "monitoring link");
        }
        let identity = Identity {
            node_id: t.router_id.map_or(0, |r| r.0),
            node_as: t.as_qualified.then(|| t.local_as.unwrap_or(0)),
            pfc_fabric: t.pfc_fabric,
        };
        let mut seed_rng = SmallRng::seed_from_u64(os_random_u64());
        // The wire spec: a sender starts its sequence numbers at a random value.
        let first_sequence = (seed_rng.next_u32() & 0xffff) as u16;
        let advertiser = Advertiser::new(
            params,
            identity,
            monitored,
            PathMtu::smallest(links.iter().map(|l| l.mtu), cfg.helper.mtu, cfg.helper.ipv6)
                .with_trailer(
                    signer
                        .as_ref()
                        .map_or(0, |s| Signer::trailer_room(&s.chain)),
                ),
            first_sequence,
            SmallRng::seed_from_u64(seed_rng.next_u64()),
        )?;
        info!(
            path_mtu = advertiser.path_mtu().mtu,
            entries_per_datagram = advertiser.entries_per_datagram(),
            "advertisements split for the smallest link MTU"
        );
        let n = links.len();
        Ok(Self {
            mtu_cap: cfg.helper.mtu,
            links,
            advertiser,
            source: Some(source),
            described: Vec::new(),
            reports: vec![None; n],
            notifications: Vec::new(),
            recent_triggers: std::collections::VecDeque::with_capacity(RECENT_TRIGGERS),
            last_sample_ns: None,
            samples_dropped: std::sync::Arc::default(),
            samples_dropped_logged: 0,
            sent: 0,
            send_errors: 0,
            last_error_log_ns: 0,
            signer,
        })
    }

    /// Whether [`HelperRole::reload`] would accept `cfg` (changing nothing).
    pub fn check_reload(&self, cfg: &Config) -> Result<(), HelperRoleError> {
        self.advertiser.check_params(&cfg.helper_params())?;
        if let Some(path) = &cfg.helper.key_chain {
            crate::config::key_chain::load(path)?;
        }
        Ok(())
    }

    /// Applies a reloaded configuration's helper parameters (T_notify, CHANGE_THRESHOLD,
    /// diagnostics, the Appendix A smoothing, weights, thresholds and hold-down) to the
    /// advertiser and every link's pipeline, or changes nothing and says why. What needs
    /// the sockets or the sampler thread anew is refused before this is called
    /// ([`Config::restart_only_changes`]).
    pub fn reload(&mut self, cfg: &Config) -> Result<(), HelperRoleError> {
        let params = cfg.helper_params();
        // The key chain is read before anything changes: a bad one changes nothing.
        let chain = match (&cfg.helper.key_chain, &self.signer) {
            (Some(path), Some(_)) => Some((path, crate::config::key_chain::load(path)?)),
            _ => None,
        };
        // Checks the parameters before it changes anything; the pipelines only after.
        self.advertiser.set_params(params)?;
        if let (Some((path, chain)), Some(signer)) = (chain, self.signer.as_mut()) {
            let room = Signer::trailer_room(&chain);
            let old = self.advertiser.path_mtu();
            if room != old.trailer
                && let Err(e) = self.advertiser.set_path_mtu(old.with_trailer(room))
            {
                warn!(error = %e, "the new key chain's trailer does not fit the path MTU; keys kept");
            } else {
                info!(key_chain = %path.display(), keys = ?chain.keys().iter().map(|k| k.id).collect::<Vec<_>>(), "key chain reloaded");
                signer.path = path.clone();
                signer.chain = chain;
            }
        }
        for l in &mut self.links {
            l.pipeline.set_params(&params);
        }
        info!(
            t_notify_ms = params.t_notify.as_millis() as u64,
            change_threshold = params.change_threshold,
            diagnostics = params.diagnostics,
            "helper parameters reloaded"
        );
        Ok(())
    }

    /// One sample at `now_ns` (CLOCK_BOOTTIME), read on the calling thread: returns the
    /// datagrams sent. Does nothing once the source runs on its own thread.
    pub fn sample(&mut self, now_ns: u64) -> usize {
        let Some(source) = self.source.as_mut() else {
            return 0;
        };
        let samples = source.sample(now_ns);
        let batch = SampleBatch {
            t_ns: now_ns,
            samples,
            described: source.describe(),
            link_mtus: source.link_mtus().to_vec(),
            took_ns: 0,
        };
        self.on_batch(batch, now_ns)
    }

    /// Reads the counters on a thread of its own every `t_sample` and hands each batch to
    /// the returned channel: reading them (rtnetlink dumps) can wait on kernel locks for
    /// tens of ms when other namespaces churn, and must not hold the periodic send.
    /// Batches the loop has not taken yet (4) are not queued further: the oldest wait,
    /// new ones are dropped and counted (`samples-dropped`; the next batch's deltas span
    /// the dropped interval, so no counts are lost).
    ///
    /// With `realtime`, the thread runs under SCHED_RR priority 1 like the loop: the
    /// sample period is what "within one sampling interval" (seed 003 section 7.2) is
    /// measured in, and under the normal policy a thread woken beside a busy one waited
    /// out its time slice (3.5 ms once in `bench helper`'s 25 trials, before this).
    /// Setting the policy needs CAP_SYS_NICE, so the caller spawns the thread while it
    /// still holds its capabilities; the thread then drops its own (they are per thread)
    /// to the kept set before it reads anything, and this returns after it has.
    pub fn spawn_sampler(
        &mut self,
        t_sample: std::time::Duration,
        realtime: bool,
    ) -> io::Result<tokio::sync::mpsc::Receiver<SampleBatch>> {
        let source = self
            .source
            .take()
            .ok_or_else(|| io::Error::other("the counter source already has its thread"))?;
        spawn_sampler_thread(
            "lqd-sampler",
            source,
            t_sample,
            realtime,
            self.samples_dropped.clone(),
        )
    }

    /// Feeds one batch of samples to the pipelines and the advertiser at `now_ns`
    /// (CLOCK_BOOTTIME) and sends what is due: returns the datagrams sent.
    pub fn on_batch(&mut self, batch: SampleBatch, now_ns: u64) -> usize {
        self.described = batch.described;
        let samples = match batch.samples {
            Ok(s) => s,
            Err(e) => {
                self.log_error(now_ns, &format!("reading link counters failed: {e}"));
                return 0;
            }
        };
        let previous_ns = self.last_sample_ns.replace(batch.t_ns);
        let dropped = self
            .samples_dropped
            .load(std::sync::atomic::Ordering::Relaxed);
        if dropped > self.samples_dropped_logged {
            self.log_error(
                now_ns,
                &format!(
                    "{} samples dropped so far: the loop fell 4 batches behind the sampler thread (the next sample's deltas span them)",
                    dropped
                ),
            );
            self.samples_dropped_logged = dropped;
        }
        self.follow_link_mtus(now_ns, &batch.link_mtus);
        let mut fresh = Vec::with_capacity(samples.len());
        for (i, (link, s)) in self.links.iter_mut().zip(&samples).enumerate() {
            if let Some(r) = link.pipeline.on_sample(s) {
                self.reports[i] = Some(r);
                fresh.push(r);
            }
        }
        let out = self.advertiser.on_sample(now_ns, &fresh);
        let timing = SampleTiming {
            t_ns: batch.t_ns,
            read_ns: batch.took_ns,
            previous_ns,
        };
        self.transmit(now_ns, out, Some(timing))
    }

    /// The periodic timer fired at `now_ns` (CLOCK_BOOTTIME) between samples: sends the
    /// periodic advertisement with the last reports, so the jittered period of seed 003
    /// section 7.2 is kept to the timer's precision rather than rounded up to the next
    /// T_sample tick. Returns the datagrams sent.
    pub fn advertise_due(&mut self, now_ns: u64) -> usize {
        // A timer that fired a little late sends "at" its deadline: the next period is
        // drawn from the deadline, so wake-up latency does not add to every period (it
        // would shift all of them above the uniform [0.9, 1.1] x T_notify). Much later than
        // that, the send counts from now, so a stalled loop does not send a burst.
        let at = match self.advertiser.next_due_at() {
            Some(due) if now_ns >= due && now_ns - due <= MAX_ANCHORED_LATENESS_NS => due,
            _ => now_ns,
        };
        let out = self.advertiser.on_sample(at, &[]);
        self.transmit(now_ns, out, None)
    }

    /// Sends the advertiser's datagrams `out` (if any) out of every link; `sample` is the
    /// timing of the sample it was decided on (none for the periodic timer's sends).
    fn transmit(
        &mut self,
        now_ns: u64,
        out: Option<Outgoing>,
        sample: Option<SampleTiming>,
    ) -> usize {
        self.notifications
            .extend(self.advertiser.take_notifications());
        let Some(out) = out else {
            return 0;
        };
        let mut n = 0;
        let mut errors = Vec::new();
        // With a key chain, each link's copy is signed with its own pseudo-header.
        let key = self
            .signer
            .as_ref()
            .map(|s| s.chain.send_key(crate::sys::clock::unix_s_now()).cloned());
        let mut signed = Vec::new();
        for d in &out.datagrams {
            for link in &self.links {
                let wire: &[u8] = match (&key, &mut self.signer, &link.endpoints) {
                    (None, _, _) => d,
                    (Some(None), Some(signer), _) => {
                        signer.no_send_key += 1;
                        errors.push(format!("{}: no key's send-lifetime is active", link.iface));
                        continue;
                    }
                    (Some(Some(k)), Some(signer), Some(endpoints)) => {
                        signed.clear();
                        signed.extend_from_slice(d);
                        signed.resize(d.len() + k.algorithm.trailer_len(), 0);
                        match sign(
                            &mut signed,
                            d.len(),
                            k,
                            signer.sequence.next_sequence(),
                            endpoints,
                        ) {
                            Ok(len) => {
                                signer.signed += 1;
                                signer.last_key = Some((k.id, k.algorithm));
                                &signed[..len]
                            }
                            Err(e) => {
                                errors.push(format!("{}: {e}", link.iface));
                                continue;
                            }
                        }
                    }
                    _ => continue,
                };
                match link.socket.send_to(wire, &link.to) {
                    Ok(_) => n += 1,
                    Err(e) => errors.push(format!("{}: {e}", link.iface)),
                }
            }
        }
        self.sent += n as u64;
        // A triggered advertisement that left by at least one link.
        if out.mode == Mode::Triggered
            && n > 0
            && let Some(sample) = sample
        {
            if self.recent_triggers.len() == RECENT_TRIGGERS {
                self.recent_triggers.pop_front();
            }
            self.recent_triggers.push_back(TriggerView {
                sequence: out.first_sequence,
                sample_ns: sample.t_ns,
                previous_sample_ns: sample.previous_ns,
                read_ns: sample.read_ns,
                decided_ns: now_ns,
                sent_ns: boottime_ns(),
            });
        }
        if !errors.is_empty() {
            self.send_errors += errors.len() as u64;
            self.log_error(
                now_ns,
                &format!("sending advertisements failed: {}", errors.join("; ")),
            );
        }
        debug!(mode = ?out.mode, datagrams = out.datagrams.len(), first_sequence = out.first_sequence, "advertised");
        n
    }

    /// Takes the links' MTUs from the source's last link dump (IFLA_MTU) and re-splits
    /// the advertisements when the smallest changed (an operator changed a link's MTU).
    fn follow_link_mtus(&mut self, now_ns: u64, link_mtus: &[Option<u32>]) {
        let mut changed = false;
        for (link, mtu) in self.links.iter_mut().zip(link_mtus) {
            if let Some(m) = mtu.filter(|m| *m != link.mtu) {
                info!(iface = %link.iface, old = link.mtu, new = m, "link MTU changed");
                link.mtu = m;
                changed = true;
            }
        }
        if !changed {
            return;
        }
        let old = self.advertiser.path_mtu();
        let path = PathMtu::smallest(self.links.iter().map(|l| l.mtu), self.mtu_cap, old.ipv6)
            .with_trailer(old.trailer);
        if let Err(e) = self.advertiser.set_path_mtu(path) {
            self.send_errors += 1;
            self.log_error(
                now_ns,
                &format!("link MTU change refused, keeping MTU {}: {e}", old.mtu),
            );
        }
    }

    fn log_error(&mut self, now_ns: u64, msg: &str) {
        if now_ns.saturating_sub(self.last_error_log_ns) > 1_000_000_000 {
            warn!("{msg}");
            self.last_error_log_ns = now_ns;
        }
    }

    /// When the advertiser is next due (absolute CLOCK_BOOTTIME ns).
    pub fn next_due_at(&self) -> Option<u64> {
        self.advertiser.next_due_at()
    }

    /// Notifications raised since the last call.
    pub fn take_notifications(&mut self) -> Vec<ThresholdCrossed> {
        std::mem::take(&mut self.notifications)
    }

    /// The YANG `local` container: what this node advertises.
    pub fn local_yang(&self) -> Value {
        crate::views::yang_state::local_json(
            self.advertiser.last_sequence(),
            &self.advertiser.entries(),
        )
    }

    /// The typed state the daemon publishes to its clients (see [`crate::views::snapshot`]).
    pub fn snapshot(&self) -> crate::views::snapshot::HelperSnapshot {
        crate::views::snapshot::HelperSnapshot {
            local: self.local_view(),
            advertised: self.advertiser.entries(),
        }
    }

    /// Every link's raw and smoothed metrics, LQS, CL and hysteresis state (`lqd show
    /// local`).
    pub fn local_view(&self) -> crate::views::snapshot::LocalView {
        use crate::views::snapshot::{LinkReportView, LocalLinkView, LocalView};
        let described = &self.described;
        let links = self
            .links
            .iter()
            .zip(&self.reports)
            .enumerate()
            .map(|(i, (l, r))| LocalLinkView {
                source: r.as_ref().map(|_| {
                    described
                        .get(i)
                        .map_or(Value::Null, LinkDescription::to_json)
                }),
                interface: l.iface.clone(),
                link_id: l.ifindex,
                measured: r.is_some(),
                report: r
                    .as_ref()
                    .map(|r| LinkReportView::of(r, self.advertiser.lqs_last_sent(l.ifindex))),
            })
            .collect();
        let st = self.advertiser.stats();
        LocalView {
            links,
            last_sequence_number: self.advertiser.last_sequence(),
            periodic: st.periodic,
            triggered: st.triggered,
            datagrams_sent: self.sent,
            send_errors: self.send_errors,
            samples_dropped: self
                .samples_dropped
                .load(std::sync::atomic::Ordering::Relaxed),
            path_mtu: self.advertiser.path_mtu().mtu,
            entries_per_datagram: self.advertiser.entries_per_datagram(),
            recent_triggers: self.recent_triggers.iter().cloned().collect(),
            authentication: self.signer.as_ref().map(|s| SigningView {
                key_chain: s.path.display().to_string(),
                keys: s.chain.keys().iter().map(|k| k.id).collect(),
                send_key_id: s.last_key.map(|(id, _)| id),
                algorithm: s.last_key.map(|(_, a)| a.name().to_string()),
                signed: s.signed,
                no_send_key: s.no_send_key,
                next_sequence: s.sequence.peek(),
            }),
        }
    }

    /// [`Self::local_view`] as JSON.
    pub fn local_json(&self) -> Value {
        serde_json::to_value(self.local_view()).unwrap_or(Value::Null)
    }
}

/// Reads `source` on a thread of its own (named `name`) every `t_sample` and hands each
/// batch to the returned channel ([`HelperRole::spawn_sampler`] says why and how; the
/// load balancer's measured local quality uses it too). Batches the loop has not taken
/// yet (4) are not queued further: new ones are dropped and counted in `dropped`.
pub fn spawn_sampler_thread(
    name: &str,
    mut source: Box<dyn SampleSource + Send>,
    t_sample: std::time::Duration,
    realtime: bool,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> io::Result<tokio::sync::mpsc::Receiver<SampleBatch>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let period = u64::try_from(t_sample.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let what = format!("{name} thread");
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if realtime {
                crate::sys::sched::set_realtime_thread(&what, "its samples may come late");
            }
            let privileges = crate::sys::privileges::drop_capabilities()
                .map_err(|e| format!("dropping the sampler thread's capabilities: {e}"));
            let failed = privileges.is_err();
            let _ = ready_tx.send(privileges);
            if failed {
                return;
            }
            let mut next = boottime_ns();
            loop {
                next = next.saturating_add(period);
                let now = boottime_ns();
                if next > now {
                    std::thread::sleep(std::time::Duration::from_nanos(next - now));
                } else {
                    // Behind (a slow read): skip the missed ticks.
                    next = now;
                }
                let t_ns = boottime_ns();
                let samples = source.sample(t_ns);
                let batch = SampleBatch {
                    t_ns,
                    samples,
                    described: source.describe(),
                    link_mtus: source.link_mtus().to_vec(),
                    took_ns: boottime_ns().saturating_sub(t_ns),
                };
                match tx.try_send(batch) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                        dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(rx),
        Ok(Err(e)) => Err(io::Error::other(e)),
        Err(_) => Err(io::Error::other(
            "the sampler thread ended before it started",
        )),
    }
}

/// The kernel counters of the configured `[[link]]`s (rtnetlink link and qdisc
/// statistics, seed 003 Appendix A.1), read by [`crate::sys::sampler::Sampler`], with
/// two eBPF-fed sources: ECN-eligible packets counted by `lq_ecn_egress` on each link
/// (E = marked / eligible, A.2), and, for links with PFC counting (`[pfc] interfaces`), the
/// paused time of the link's PFC priorities (F, A.2; the largest paused fraction among
/// them, as the issue asks, taken as the priority with the most paused time).
pub fn kernel_source(
    cfg: &Config,
    pfc_pin_dir: Option<&std::path::Path>,
    ecn_pin_dir: Option<&std::path::Path>,
) -> Result<Box<dyn SampleSource + Send>, HelperRoleError> {
    let links: Vec<SampledLink> = cfg
        .link
        .iter()
        .map(|l| SampledLink {
            interface: &l.interface,
            rate_mbit: l.rate_mbit,
            pfc_priorities: &l.pfc_priorities,
        })
        .collect();
    kernel_source_for(cfg, &links, pfc_pin_dir, ecn_pin_dir)
}

/// One link [`kernel_source_for`] reads: a `[[link]]` of the helper, or an `[[uplink]]`
/// whose local quality is measured.
pub struct SampledLink<'a> {
    /// The interface.
    pub interface: &'a str,
    /// A configured line rate (Mbit/s).
    pub rate_mbit: Option<crate::config::RateMbit>,
    /// The PFC priorities whose pause time counts (empty: all eight).
    pub pfc_priorities: &'a [u8],
}

/// [`kernel_source`] for any list of links, in that order (`cfg` for `[pfc] interfaces`).
/// With `ecn_pin_dir`, the ECN-eligible counter's map and links are pinned there and
/// outlive lqd (adopted by the next start).
pub fn kernel_source_for(
    cfg: &Config,
    links: &[SampledLink<'_>],
    pfc_pin_dir: Option<&std::path::Path>,
    ecn_pin_dir: Option<&std::path::Path>,
) -> Result<Box<dyn SampleSource + Send>, HelperRoleError> {
    use crate::sys::sampler::{LinkConfig, Sampler};
    let other = |what: &str, e: String| HelperRoleError::Socket {
        iface: what.into(),
        source: io::Error::other(e),
    };
    let sampled = links
        .iter()
        .map(|l| LinkConfig {
            name: l.interface.to_owned(),
            rate_bps: l.rate_mbit.map(|m| u64::from(m.0) * 1_000_000),
        })
        .collect();
    let mut sampler = Sampler::new(sampled).map_err(|e| other("rtnetlink", e.to_string()))?;
    // Link state and speed from notifications, counters from RTM_GETSTATS: a full link
    // dump every T_sample was most of the sampler's cost (issue 15 item 3).
    sampler
        .follow_link_notifications()
        .map_err(|e| other("rtnetlink link notifications", e.to_string()))?;

    // ECN-eligible counter (A.1): the tc egress program on every link, read in one
    // batched lookup per sample.
    let ecn =
        crate::sys::bpf::ecn::EcnEligible::attach(ecn_pin_dir, links.iter().map(|l| l.interface))
            .map_err(|e| {
            other(
                "ECN-eligible counter",
                crate::core::report::Chain(&e).to_string(),
            )
        })?;
    sampler.set_ecn_eligible_source(Box::new(ecn));

    if let Some(dir) = pfc_pin_dir {
        let reader = crate::sys::bpf::pfc::PfcReader::open(dir)
            .map_err(|e| other("PFC maps", e.to_string()))?;
        // The priorities that matter: the link's DCB configuration when the driver has one
        // (dcbnl IEEE PFC pfc_en), else `pfc-priorities`, else all eight.
        let mut rtnl = crate::sys::netlink::Rtnl::open().ok();
        let prios: std::collections::BTreeMap<String, Vec<u8>> = links
            .iter()
            .filter(|l| cfg.pfc.interfaces.iter().any(|i| i == l.interface))
            .map(|l| {
                let dcb = rtnl
                    .as_mut()
                    .and_then(|r| crate::sys::netlink::dcb::pfc_enabled(r, l.interface).ok().flatten())
                    .filter(|en| *en != 0);
                let p = match dcb {
                    Some(en) => {
                        info!(iface = %l.interface, pfc_en = en, "PFC priorities from the link's DCB configuration");
                        crate::sys::netlink::dcb::priorities(en)
                    }
                    None if !l.pfc_priorities.is_empty() => l.pfc_priorities.to_vec(),
                    None => (0..8).collect(),
                };
                (l.interface.to_owned(), p)
            })
            .collect();
        sampler.set_pause_source(Box::new(move |ifindex: u32, name: &str| {
            let ps = prios.get(name)?;
            let now = crate::sys::clock::monotonic_ns();
            ps.iter()
                .filter_map(|p| reader.paused_ns(ifindex, *p, now).ok())
                .max()
        }));
    }
    Ok(Box::new(KernelSource {
        sampler,
        last: Vec::new(),
        mtus: Vec::new(),
    }))
}

/// [`SampleSource`] over the kernel sampler. All samples of one step carry the step's
/// time, so the pipeline and the advertiser share one clock.
struct KernelSource {
    sampler: crate::sys::sampler::Sampler,
    /// The last sample of every link, as the sampler gave it (`describe` copies what
    /// `lqd show local` shows; the view renders it).
    last: Vec<crate::sys::sampler::LinkSample>,
    mtus: Vec<Option<u32>>,
}

impl SampleSource for KernelSource {
    fn sample(&mut self, t_ns: u64) -> Result<Vec<RawSample>, String> {
        self.last = self.sampler.sample().map_err(|e| e.to_string())?;
        self.mtus.clear();
        self.mtus.extend(self.last.iter().map(|s| s.mtu));
        Ok(self
            .last
            .iter()
            .map(|s| RawSample { t_ns, ..s.raw })
            .collect())
    }

    fn describe(&self) -> Vec<LinkDescription> {
        self.last
            .iter()
            .map(|s| LinkDescription {
                speed_source: s.speed_source.as_str(),
                link_speed_bps: s.raw.link_speed_bps,
                qdisc: s.qdisc,
                ecn_eligible: s.raw.ecn_eligible,
                ecn_marked: s.raw.ecn_marked,
                pause_ns: s.raw.pause_ns,
                notes: s.notes,
            })
            .collect()
    }

    fn link_mtus(&self) -> &[Option<u32>] {
        &self.mtus
    }
}
