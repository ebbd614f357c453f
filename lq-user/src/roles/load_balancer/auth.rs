//! The authenticating receive path (issue 39 item 3; seed 003 section 12.1).
//!
//! Mainline XDP cannot compute an HMAC, so on the interfaces of `[receiver]
//! authentication` the XDP program passes LQ datagrams up to this receiver. It reads each
//! with its TTL, destination and ingress interface, checks the trailer's MAC in constant
//! time against the key chain and its 64-bit sequence per sender and key
//! (`core::auth`), and hands every authentic datagram back to the same XDP program through
//! BPF_PROG_TEST_RUN (`XdpReceiver::receive_verified`), which applies checks 1-11 and
//! writes the path table exactly as for a datagram on the wire: one implementation of
//! the checks. Cheap checks come first: a datagram with a TTL other than 255 (GTSM, check
//! 4) or one that does not decode goes straight to the program, which discards and counts
//! it under its own reason, without a MAC computed for it.
//!
//! A datagram that fails is dropped and counted by reason (missing trailer, unknown key
//! id, key outside its accept-lifetime, bad MAC, replayed sequence); one warning per
//! neighbor and reason per minute says so, with an `lq-authentication-failure`
//! notification (lq's augment module) for `lqd monitor` and gNMI subscribers.

use std::{collections::BTreeMap, path::PathBuf};

use lq_common::wire::{DecodePolicy, decode};
use tracing::{info, warn};

use crate::{
    config::{Authentication, Config},
    core::auth::{self, AuthFailure, Endpoints, KeyChain, Reject, ReplayGuard, rebuild_frame},
    sys::{
        bpf::path_table::{PathTableError, XdpReceiver},
        socket::{ReceivedInfo, recv_with_info},
    },
};

/// At most this many datagrams per socket wake-up: a flood of forged datagrams (each
/// costs an HMAC) cannot hold the daemon's loop; the rest wait for the next turn.
pub const BATCH: usize = 256;

/// At most this many batches are read before a step (`LoadBalancer::drain_authenticated`):
/// a 64-spine fabric's 20 ms is 384 datagrams; a flood of forgeries still cannot hold the
/// step back for more than about 16 ms.
pub const DRAIN_BEFORE_STEP: usize = 8;

/// One warning per neighbor and reason at most this often.
const NOTICE_INTERVAL_NS: u64 = 60_000_000_000;
/// At most this many such warnings a minute in all, and this many (neighbor, reason)
/// pairs remembered: the neighbor ids are a forger's to choose, so neither the log nor
/// the memory may follow them.
const NOTICES_PER_INTERVAL: u32 = 20;
const NOTICED_MAX: usize = 1024;

/// The receive path's counters (issue 39 item 4), in `lqd show counters` and the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthCounters {
    /// Datagrams read from the socket on an interface that requires authentication.
    pub received: u64,
    /// Datagrams whose trailer verified and whose sequence was new.
    pub verified: u64,
    /// `accept-unauthenticated`: datagrams without a trailer, accepted.
    pub unauthenticated_accepted: u64,
    /// Refused, by reason ([`Reject::ALL`] order).
    pub refused: [u64; 5],
    /// Handed back to the XDP program (verified, unauthenticated accepted, or for it to
    /// discard: TTL, framing).
    pub handed_back: u64,
    /// The XDP program's run time over those, ns (BPF_PROG_TEST_RUN's duration): what
    /// handing back costs beyond the socket read and the MAC. The kernel's run-time
    /// statistics of the program (bpftool) include these runs too.
    pub hand_back_run_ns: u64,
    /// BPF_PROG_TEST_RUN failures (the datagram is lost; logged).
    pub hand_back_errors: u64,
    /// Datagrams on other interfaces (with `pass-through`), ignored.
    pub other_interface: u64,
    /// Datagrams longer than the receive buffer (truncated: dropped).
    pub oversized: u64,
    /// Datagrams the kernel dropped because a socket's queue was full (SO_RXQ_OVFL): the
    /// loop fell behind the uplinks by more than the socket's buffer.
    pub socket_overflows: u64,
}

impl AuthCounters {
    /// The counters by name.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("auth_received", self.received),
            ("auth_verified", self.verified),
            (
                "auth_unauthenticated_accepted",
                self.unauthenticated_accepted,
            ),
        ];
        for (r, n) in Reject::ALL.iter().zip(self.refused) {
            v.push((
                match r {
                    Reject::Missing => "auth_missing_trailer",
                    Reject::UnknownKey => "auth_unknown_key_id",
                    Reject::KeyNotAccepted => "auth_key_not_accepted",
                    Reject::BadMac => "auth_bad_mac",
                    Reject::Replayed => "auth_replayed_sequence",
                },
                n,
            ));
        }
        v.extend([
            ("auth_handed_back", self.handed_back),
            ("auth_hand_back_run_ns", self.hand_back_run_ns),
            ("auth_hand_back_errors", self.hand_back_errors),
            ("auth_other_interface", self.other_interface),
            ("auth_oversized", self.oversized),
            ("auth_socket_overflows", self.socket_overflows),
        ]);
        v
    }
}

/// Why the receive path could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum AuthReceiverError {
    /// The key chain.
    #[error(transparent)]
    KeyChain(#[from] crate::config::key_chain::KeyChainFileError),
    /// `[receiver] authentication` without `key-chain` (config validation says so first).
    #[error("[receiver] authentication needs [receiver] key-chain")]
    NoKeyChain,
}

/// The receive path of `[receiver] authentication`.
pub struct AuthReceiver {
    key_chain: PathBuf,
    chain: KeyChain,
    /// Every receiver interface (ifindex, name) with its mode (`[receiver]
    /// authentication` and `[receiver.interface-authentication]`), `none` included.
    modes: Vec<(u32, String, Authentication)>,
    port: u16,
    replay: ReplayGuard,
    /// The counters.
    pub counters: AuthCounters,
    buf: Vec<u8>,
    frame: Vec<u8>,
    /// When each (node AS, node id, reason) was last warned about.
    noticed: BTreeMap<(u32, u32, Reject), u64>,
    /// The current minute's start, the warnings logged and those suppressed in it.
    notice_window: (u64, u32, u64),
    /// Notifications raised and not yet taken by the loop (at most
    /// [`NOTICES_PER_INTERVAL`] a minute are raised).
    notifications: Vec<AuthFailure>,
    /// When datagrams of another interface were last warned about.
    other_interface_warned: Option<u64>,
    /// The last SO_RXQ_OVFL count seen on the IPv4 and the IPv6 socket.
    overflow_seen: [u32; 2],
    /// When socket overflows were last warned about.
    overflow_warned: Option<u64>,
}

impl AuthReceiver {
    /// The receive path for `cfg`'s `[receiver]`, given every receiver interface's
    /// ifindex, name and mode; `None` when no interface authenticates.
    pub fn new(
        cfg: &Config,
        modes: Vec<(u32, String, Authentication)>,
    ) -> Result<Option<Self>, AuthReceiverError> {
        if modes.iter().all(|(_, _, m)| *m == Authentication::None) {
            return Ok(None);
        }
        let (key_chain, chain) = Self::read_key_chain(cfg)?;
        info!(key_chain = %key_chain.display(), keys = ?chain.keys().iter().map(|k| k.id).collect::<Vec<_>>(), interfaces = ?cfg.receiver.authenticating_interfaces(), "authenticated advertisements: the XDP receiver passes these interfaces' LQ datagrams up for verification");
        Ok(Some(Self {
            key_chain,
            chain,
            modes,
            port: cfg.udp.port,
            replay: ReplayGuard::default(),
            counters: AuthCounters::default(),
            buf: vec![0; lq_common::auth::MAX_DATAGRAM_LEN + 1],
            frame: Vec::with_capacity(lq_common::auth::MAX_DATAGRAM_LEN + 80),
            noticed: BTreeMap::new(),
            notice_window: (0, 0, 0),
            notifications: Vec::new(),
            other_interface_warned: None,
            overflow_seen: [0; 2],
            overflow_warned: None,
        }))
    }

    /// The `lq-authentication-failure` notifications raised since the last call.
    pub fn take_notifications(&mut self) -> Vec<AuthFailure> {
        std::mem::take(&mut self.notifications)
    }

    /// The interfaces that authenticate (mode other than `none`).
    pub fn ifindexes(&self) -> Vec<u32> {
        self.modes
            .iter()
            .filter(|(_, _, m)| *m != Authentication::None)
            .map(|(i, _, _)| *i)
            .collect()
    }

    /// `cfg`'s `[receiver] key-chain`, read: at start and, on SIGHUP, before anything of
    /// the reload changes state ([`AuthReceiver::set_key_chain`] applies it).
    pub fn read_key_chain(cfg: &Config) -> Result<(PathBuf, KeyChain), AuthReceiverError> {
        let path = cfg
            .receiver
            .key_chain
            .clone()
            .ok_or(AuthReceiverError::NoKeyChain)?;
        let chain = crate::config::key_chain::load(&path)?;
        Ok((path, chain))
    }

    /// Applies a key chain [`AuthReceiver::read_key_chain`] read (SIGHUP).
    pub fn set_key_chain(&mut self, (path, chain): (PathBuf, KeyChain)) {
        info!(key_chain = %path.display(), keys = ?chain.keys().iter().map(|k| k.id).collect::<Vec<_>>(), "receiver key chain reloaded");
        self.chain = chain;
        self.key_chain = path;
    }

    /// Reads up to [`BATCH`] datagrams from `socket` and handles each; returns how many
    /// were read. `now_s` (Unix seconds) judges key lifetimes; `now_ns` (monotonic) paces
    /// the warnings.
    pub fn on_readable(
        &mut self,
        socket: &socket2::Socket,
        receiver: &mut XdpReceiver,
        now_s: i64,
        now_ns: u64,
    ) -> usize {
        let mut n = 0;
        while n < BATCH {
            let info = match recv_with_info(socket, &mut self.buf) {
                Ok(Some(info)) => info,
                Ok(None) => break,
                Err(e) => {
                    warn!(error = %e, "reading the authentication socket");
                    break;
                }
            };
            n += 1;
            self.handle(info, receiver, now_s, now_ns);
        }
        n
    }

    /// One warning per (neighbor, reason) a minute and [`NOTICES_PER_INTERVAL`] a minute
    /// in all; the others are counted (the counters have every drop) and summed up when
    /// the next minute begins.
    fn notice(
        &mut self,
        interface: usize,
        node_as: u32,
        node_id: u32,
        reason: Reject,
        source: std::net::SocketAddr,
        now_ns: u64,
    ) {
        let (start, logged, suppressed) = &mut self.notice_window;
        if now_ns.saturating_sub(*start) >= NOTICE_INTERVAL_NS {
            if *suppressed > 0 {
                warn!(
                    suppressed = *suppressed,
                    "LQ advertisements not authentic: warnings suppressed in the last minute (the counters have every one)"
                );
            }
            *start = now_ns;
            *logged = 0;
            *suppressed = 0;
            self.noticed
                .retain(|_, t| now_ns.saturating_sub(*t) < NOTICE_INTERVAL_NS);
        }
        let key = (node_as, node_id, reason);
        if self
            .noticed
            .get(&key)
            .is_some_and(|t| now_ns.saturating_sub(*t) < NOTICE_INTERVAL_NS)
        {
            return;
        }
        if *logged >= NOTICES_PER_INTERVAL || self.noticed.len() >= NOTICED_MAX {
            *suppressed += 1;
            return;
        }
        *logged += 1;
        self.noticed.insert(key, now_ns);
        let failure = AuthFailure {
            interface: self.modes[interface].1.clone(),
            neighbor_as: node_as,
            neighbor_id: node_id,
            source: source.ip(),
            reason,
        };
        warn!(
            interface = %failure.interface,
            neighbor = %std::net::Ipv4Addr::from(node_id),
            node_as,
            %source,
            reason = reason.name(),
            "LQ advertisement not authentic: dropped (one warning and lq-authentication-failure notification per neighbor and reason per minute)"
        );
        self.notifications.push(failure);
    }

    /// Counts the datagrams a socket dropped for a full queue since the last one read
    /// (its SO_RXQ_OVFL count moved), and says so once a minute at most.
    fn count_overflows(&mut self, info: &ReceivedInfo, now_ns: u64) {
        let Some(dropped) = info.dropped else {
            return;
        };
        let seen = &mut self.overflow_seen[usize::from(info.source.is_ipv6())];
        let new = dropped.wrapping_sub(*seen);
        if new == 0 {
            return;
        }
        *seen = dropped;
        self.counters.socket_overflows += u64::from(new);
        if self
            .overflow_warned
            .is_none_or(|t| now_ns.saturating_sub(t) >= NOTICE_INTERVAL_NS)
        {
            self.overflow_warned = Some(now_ns);
            warn!(
                dropped = new,
                total = self.counters.socket_overflows,
                "the authentication socket's queue overflowed: the kernel dropped LQ datagrams before lqd read them (the loop fell behind the uplinks)"
            );
        }
    }

    fn handle(&mut self, info: ReceivedInfo, receiver: &mut XdpReceiver, now_s: i64, now_ns: u64) {
        self.count_overflows(&info, now_ns);
        let Some(at) = self.modes.iter().position(|(i, _, _)| *i == info.ifindex) else {
            // Another interface's datagram (with `pass-through`, or on a VLAN
            // sub-interface, which IP_PKTINFO names where the XDP program saw the physical
            // one): ignored, and said once a minute at most.
            self.counters.other_interface += 1;
            if self
                .other_interface_warned
                .is_none_or(|t| now_ns.saturating_sub(t) >= NOTICE_INTERVAL_NS)
            {
                self.other_interface_warned = Some(now_ns);
                warn!(ifindex = info.ifindex, source = %info.source, total = self.counters.other_interface, "an LQ datagram on an interface that is not an authenticated receiver interface: ignored (a VLAN sub-interface of one is not supported yet)");
            }
            return;
        };
        let mode = self.modes[at].2;
        if mode == Authentication::None {
            // An interface of `authentication = "none"` with `pass-through`: the XDP
            // program read this datagram already; the stack's copy is not ours.
            return;
        }
        self.counters.received += 1;
        if info.truncated {
            self.counters.oversized += 1;
            return;
        }
        let payload = &self.buf[..info.len];
        // GTSM and framing first, by the program itself: no MAC for what it discards.
        let verdict = if info.ttl != lq_common::frame::GTSM_TTL {
            Ok(None)
        } else {
            match decode(payload, &DecodePolicy::ANY) {
                Err(_) => Ok(None),
                Ok(adv) => {
                    let sender = (adv.header.node_as, adv.header.node_id);
                    let endpoints = Endpoints {
                        source: info.source,
                        destination: std::net::SocketAddr::new(info.destination, self.port),
                    };
                    match auth::verify(&adv, payload, &endpoints, &self.chain, now_s) {
                        Ok(v) => match self.replay.check(sender.0, sender.1, v) {
                            Ok(()) => Ok(Some(true)),
                            Err(r) => Err((sender, r)),
                        },
                        Err(Reject::Missing) if mode == Authentication::AcceptUnauthenticated => {
                            Ok(Some(false))
                        }
                        Err(r) => Err((sender, r)),
                    }
                }
            }
        };
        match verdict {
            Ok(authenticated) => {
                match authenticated {
                    Some(true) => self.counters.verified += 1,
                    Some(false) => self.counters.unauthenticated_accepted += 1,
                    None => {}
                }
                rebuild_frame(
                    info.source,
                    info.destination,
                    self.port,
                    info.ttl,
                    &self.buf[..info.len],
                    &mut self.frame,
                );
                match receiver.receive_verified(&self.frame) {
                    Ok((_, run)) => {
                        self.counters.handed_back += 1;
                        self.counters.hand_back_run_ns += run.as_nanos() as u64;
                    }
                    Err(e) => {
                        self.counters.hand_back_errors += 1;
                        warn!(error = %crate::core::report::Chain(&e as &PathTableError), "handing an authenticated datagram to the XDP receiver failed");
                    }
                }
            }
            Err(((node_as, node_id), reason)) => {
                if let Some(i) = Reject::ALL.iter().position(|r| *r == reason) {
                    self.counters.refused[i] += 1;
                }
                self.notice(at, node_as, node_id, reason, info.source, now_ns);
            }
        }
    }
}
