//! The gNMI northbound (issue 40): seed 003 section 4.3's gRPC/gNMI binding for solicited
//! retrieval of the YANG data, with section 12.2's secure transport, mutual
//! authentication and access control.
//!
//! - Capabilities: `ietf-lq-telemetry` and lq's augment `lq-weighted-ecmp`, with their
//!   revisions; JSON and JSON_IETF (both carry RFC 7951 JSON).
//! - Get: any path or prefix under `/ietf-lq-telemetry:lq-telemetry`, the document `lqd
//!   show state` prints (`views::yang_state`), from a snapshot taken after the request.
//! - Subscribe: ONCE, POLL, and STREAM with SAMPLE (`sample_interval`,
//!   `suppress_redundant`, `heartbeat_interval`) and ON_CHANGE (TARGET_DEFINED is
//!   ON_CHANGE): initial updates, then `sync_response`. An ON_CHANGE update carries the
//!   subscribed subtree whole when anything in it changed; while one is open the loop
//!   publishes a snapshot after every change of its state (every 1 ms at the fastest,
//!   within 1 % of its time, `PublishPacing`), and values no change announces are re-read
//!   every 100 ms.
//! - The module's notification: a STREAM ON_CHANGE subscription to
//!   `/ietf-lq-telemetry:lq-threshold-crossed` gets each `lq-threshold-crossed` (seed 003
//!   section 5.6) as an update of that path, as `lqd monitor` prints them; readable with
//!   `/lq-telemetry/local` (it tells the same CL changes). lq's augment's
//!   `/lq-authentication:lq-authentication-failure` (a leaf's dropped forgeries, issue 39)
//!   the same way, readable with `/lq-telemetry/neighbors` (it names neighbors).
//! - Set: UNIMPLEMENTED; the configuration is the file (SIGHUP, `lqd reload`).
//!
//! Security: TLS 1.3 with ALPN h2 (`transport::tls::grpc_server_config`); a client whose
//! certificate does not chain to `[gnmi] client-ca` never completes the handshake, one
//! with no certificate is answered UNAUTHENTICATED. What a client may read is decided by
//! `core::northbound::access` from the `[[gnmi.client]]` rules that name one of its
//! certificate's subjectAltNames: a denied path is answered PERMISSION_DENIED with no
//! data, an ancestor's read leaves the denied subtrees out. Plaintext only on loopback.
//!
//! Liveness: this runs on the client thread, never in the daemon's loop. It reads the
//! snapshots the loop publishes (`Published`); one feed task renders each snapshot once
//! for every stream; each stream has a bounded queue, and a subscriber that lets it fill
//! is closed with RESOURCE_EXHAUSTED and counted, never slowing the others. Connections
//! and subscriptions are bounded; a TLS handshake has a deadline.

use std::{
    collections::BTreeMap,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpListener,
    sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast, mpsc, watch},
};
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use super::published::{Current, Published, RefusalLog, accept_failed, state_json};
use crate::{
    core::northbound::{
        Access, DataPath, PathElem, ReadRule, access, grants, prune_selection, readable_subtree,
        select,
    },
    sys::clock::unix_ns,
    views::snapshot::{ClientStats, EndpointStats, Snapshot},
};

/// The generated gNMI messages and service (build.rs, from the vendored protos).
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    unreachable_pub,
    unused_qualifications,
    rustdoc::all
)]
pub mod proto {
    /// gnmi_ext.proto.
    pub mod gnmi_ext {
        tonic::include_proto!("gnmi_ext");
    }
    /// gnmi.proto.
    pub mod gnmi {
        tonic::include_proto!("gnmi");
    }
}

use proto::gnmi::{
    CapabilityRequest, CapabilityResponse, Encoding, GetRequest, GetResponse, ModelData,
    Notification, Path, SetRequest, SetResponse, SubscribeRequest, SubscribeResponse,
    SubscriptionList, SubscriptionMode, TypedValue, Update,
    g_nmi_server::{GNmi, GNmiServer},
    subscribe_request, subscribe_response, subscription_list, typed_value,
};

/// The gNMI version of the vendored protos (gnmi.proto's `gnmi_service` option).
pub const GNMI_VERSION: &str = "0.10.0";

/// The models this target serves, with the revisions of `yang/`.
const MODELS: [(&str, &str, &str); 3] = [
    ("ietf-lq-telemetry", "IETF", "2026-07-07"),
    ("lq-weighted-ecmp", "lq", "2026-12-05"),
    ("lq-authentication", "lq", "2026-12-05"),
];

/// Concurrent connections at most; more are closed at once and counted.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// How long a Subscribe has to send its SubscriptionList.
pub const FIRST_REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Responses queued per stream at most: a subscriber that lets more wait is closed.
pub const STREAM_QUEUE: usize = 64;
/// The shortest SAMPLE interval served (a shorter one, or 0, is raised to it).
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);
/// Largest request accepted.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Paths per Get or subscriptions per SubscriptionList at most: each answer holds a copy
/// of its selection, so a request of thousands of root paths would be that many copies
/// of the whole tree.
pub const MAX_PATHS_PER_REQUEST: usize = 64;
/// Concurrent streams (calls) per connection at most (HTTP/2 SETTINGS).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// The document a snapshot renders to, shared by every stream.
struct Rendered {
    /// When the snapshot was taken, ns since the epoch (the notifications' timestamp).
    taken_unix_ns: i64,
    doc: Value,
    /// Each subscribed selection's JSON, encoded once for every stream that reads it
    /// (`Sub::key`): 100 subscribers of one path cost one encoding per snapshot.
    encoded: Mutex<BTreeMap<String, Option<Arc<Vec<u8>>>>>,
}

/// The YANG state of a snapshot, as `lqd show state` prints it.
fn render(snap: &Snapshot) -> Rendered {
    let age = crate::sys::clock::monotonic_ns().saturating_sub(snap.taken_mono_ns);
    Rendered {
        taken_unix_ns: unix_ns().saturating_sub(age) as i64,
        doc: state_json(snap),
        encoded: Mutex::new(BTreeMap::new()),
    }
}

/// What the ON_CHANGE streams also get, beside a document after every change the loop
/// announces (groups, neighbor states, LQS and CL; `PublishPacing::state_changed`): a
/// document re-read at this interval, for the values no event announces (counters,
/// ages), so that an ON_CHANGE subscription to them is not starved.
pub const ON_CHANGE_REREAD: Duration = Duration::from_millis(100);

/// How often the streams need a new document: each registered stream's shortest SAMPLE
/// interval, and whether it has an ON_CHANGE path (every change, [`ON_CHANGE_REREAD`]
/// otherwise).
#[derive(Default)]
struct Demand {
    streams: Mutex<BTreeMap<u64, (Option<u64>, bool)>>,
    next_id: AtomicU64,
    changed: Notify,
}

impl Demand {
    fn register(&self, sample_ns: Option<u64>, on_change: bool) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.streams.lock() {
            m.insert(id, (sample_ns, on_change));
        }
        self.changed.notify_one();
        id
    }

    fn unregister(&self, id: u64) {
        if let Ok(mut m) = self.streams.lock() {
            m.remove(&id);
        }
    }

    /// The shortest interval a stream needs a document at (its SAMPLE interval; an
    /// ON_CHANGE path's [`ON_CHANGE_REREAD`]), and whether an ON_CHANGE path is open;
    /// `None` when no stream is.
    fn need(&self) -> Option<(u64, bool)> {
        let m = self.streams.lock().ok()?;
        let reread = ON_CHANGE_REREAD.as_nanos() as u64;
        let every = m
            .values()
            .map(|(sample, on_change)| {
                let change = on_change.then_some(reread);
                sample.iter().copied().chain(change).min().unwrap_or(reread)
            })
            .min()?;
        Some((every, m.values().any(|(_, on_change)| *on_change)))
    }
}

/// Removes a stream's demand when the stream ends, however it ends.
struct Registered(Arc<Demand>, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.unregister(self.1);
    }
}

/// Renders a snapshot for the streams as often as the most demanding one needs, and not
/// at all while there is none. While an ON_CHANGE stream is open it asks the loop for a
/// snapshot after every change of state ([`Published::want_changes`]) and renders each
/// one published, so an update leaves within the loop's publish interval of the change
/// instead of waiting for the next poll.
async fn feed(published: Published, tx: watch::Sender<Arc<Rendered>>, demand: Arc<Demand>) {
    loop {
        let changed = demand.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let Some((every_ns, on_change)) = demand.need() else {
            published.want_changes(false);
            changed.await;
            continue;
        };
        published.want_changes(on_change);
        let started = tokio::time::Instant::now();
        // Read before the snapshot is: a publish after it is rendered below (at worst the
        // same snapshot twice), never counted as seen unrendered.
        let mut seen = published.generation();
        let snap = published.fresh().await;
        let mut snap_taken = snap.taken_mono_ns;
        tx.send_replace(Arc::new(render(&snap)));
        let until = started + Duration::from_nanos(every_ns);
        loop {
            tokio::select! {
                // A new, more demanding stream cuts the wait short.
                () = &mut changed => break,
                () = tokio::time::sleep_until(until) => break,
                () = published.published_after(seen), if on_change => {
                    seen = published.generation();
                    let latest = published.latest();
                    if latest.taken_mono_ns > snap_taken {
                        snap_taken = latest.taken_mono_ns;
                        tx.send_replace(Arc::new(render(&latest)));
                    }
                }
            }
        }
    }
}

/// The service.
#[derive(Clone)]
struct Service {
    published: Published,
    /// The `lq-threshold-crossed` notifications, as JSON lines (`lqd monitor`'s feed).
    notifications: broadcast::Sender<String>,
    latest: watch::Receiver<Arc<Rendered>>,
    demand: Arc<Demand>,
    /// The read rules; a reload replaces them.
    rules: Arc<Current<Vec<ReadRule>>>,
    tls: bool,
    subscriptions: Arc<Semaphore>,
    stats: Arc<ClientStats>,
}

/// Who is asking: the grants of the rules that name the client, from the rules of
/// generation `rules_generation`, and its certificate, to match newer rules against.
struct Client {
    grants: Vec<DataPath>,
    peer: String,
    certificate: Option<rustls::pki_types::CertificateDer<'static>>,
    rules_generation: u64,
}

impl Client {
    /// The grants of `rules` (of `generation`) for this client.
    fn regrant(&mut self, generation: u64, rules: &[ReadRule]) {
        self.grants = match &self.certificate {
            Some(c) => grants(rules, |name| {
                crate::transport::tls::certificate_names(c, name)
            }),
            None => grants(rules, |_| false),
        }
        .into_iter()
        .cloned()
        .collect();
        self.rules_generation = generation;
    }
}

impl Service {
    fn refuse(&self, s: Status) -> Status {
        EndpointStats::inc(&self.stats.gnmi_refused);
        s
    }

    /// The client of a request: its certificate's names matched against the rules. A TLS
    /// client without a certificate is refused.
    fn identify<T>(&self, req: &Request<T>) -> Result<Client, Status> {
        let peer = req
            .remote_addr()
            .map_or_else(|| "?".to_string(), |a| a.to_string());
        let certificate = if self.tls {
            let certs = req.peer_certs().filter(|c| !c.is_empty()).ok_or_else(|| {
                self.refuse(Status::unauthenticated(
                    "a client certificate is required (one that chains to the target's [gnmi] client-ca)",
                ))
            })?;
            Some(certs[0].clone().into_owned())
        } else {
            None
        };
        let mut client = Client {
            grants: Vec::new(),
            peer,
            certificate,
            rules_generation: 0,
        };
        let (generation, rules) = self.rules.get();
        client.regrant(generation, &rules);
        Ok(client)
    }

    /// What `client` may read of `path`, or PERMISSION_DENIED naming the path.
    fn check(&self, client: &Client, path: &DataPath) -> Result<Vec<DataPath>, Status> {
        let g: Vec<&DataPath> = client.grants.iter().collect();
        match access(&g, path) {
            Access::Allowed { prune } => Ok(prune),
            Access::Denied => {
                warn!(peer = %client.peer, %path, "gNMI read refused: no [[gnmi.client]] rule grants it to this client");
                Err(self.refuse(Status::permission_denied(format!(
                    "{path}: not granted to this client (seed 003 section 12.2; [[gnmi.client]] read)"
                ))))
            }
        }
    }
}

/// A notification lqd raises, readable by a client granted the subtree that holds what it
/// tells.
#[derive(Debug)]
struct NotificationKind {
    /// Its RFC 7951 member name (module-qualified).
    member: &'static str,
    /// The child of `/lq-telemetry` whose grant reads it.
    needs: &'static str,
}

/// The module's `lq-threshold-crossed` (seed 003 section 5.6: the CL changes of this
/// node's links, what `/lq-telemetry/local` holds) and lq's augment's
/// `lq-authentication-failure` (issue 39: dropped forgeries, naming neighbors).
static NOTIFICATIONS: [NotificationKind; 2] = [
    NotificationKind {
        member: crate::core::helper::notification::JSON_MEMBER,
        needs: "local",
    },
    NotificationKind {
        member: crate::core::auth::AuthFailure::JSON_MEMBER,
        needs: "neighbors",
    },
];

/// The notification `prefix` + `path` name (`/ietf-lq-telemetry:lq-threshold-crossed`,
/// the module in the origin or on the element), and the wire path to echo.
fn notification_path(
    prefix: Option<&Path>,
    path: Option<&Path>,
) -> Option<(&'static NotificationKind, Path)> {
    let mut elems = Vec::new();
    let mut origin = "";
    for p in [prefix, path].into_iter().flatten() {
        if !p.origin.is_empty() {
            origin = &p.origin;
        }
        elems.extend(p.elem.iter().filter(|e| !e.name.is_empty()));
    }
    let [e] = elems.as_slice() else { return None };
    if !e.key.is_empty() {
        return None;
    }
    let kind = NOTIFICATIONS.iter().find(|k| {
        let Some((module, name)) = k.member.split_once(':') else {
            return false;
        };
        e.name == k.member
            || (e.name == name && (origin.is_empty() || origin == module || origin == "rfc7951"))
    })?;
    Some((
        kind,
        Path {
            origin: origin.to_string(),
            elem: vec![proto::gnmi::PathElem {
                name: e.name.clone(),
                ..Default::default()
            }],
            ..Default::default()
        },
    ))
}

/// `prefix` + `path` as a data path and as the wire path to echo.
fn data_path(prefix: Option<&Path>, path: Option<&Path>) -> Result<(DataPath, Path), Status> {
    let mut elems = Vec::new();
    let mut origin = String::new();
    for p in [prefix, path].into_iter().flatten() {
        if !p.origin.is_empty() {
            origin = p.origin.clone();
        }
        #[allow(deprecated)] // read only to refuse it
        let old_form = !p.element.is_empty();
        if old_form {
            return Err(Status::invalid_argument(
                "the deprecated `element` path form is not supported: use `elem`",
            ));
        }
        elems.extend(p.elem.iter().map(|e| PathElem {
            name: e.name.clone(),
            keys: e.key.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }));
    }
    let wire = Path {
        origin: origin.clone(),
        elem: elems
            .iter()
            .map(|e| proto::gnmi::PathElem {
                name: e.name.clone(),
                key: e.keys.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            })
            .collect(),
        ..Default::default()
    };
    let dp = DataPath::from_elems(&origin, elems).map_err(|e| Status::not_found(e.to_string()))?;
    Ok((dp, wire))
}

/// The encodings served: JSON and JSON_IETF, both RFC 7951.
fn check_encoding(e: i32) -> Result<Encoding, Status> {
    match Encoding::try_from(e) {
        Ok(Encoding::Json) => Ok(Encoding::Json),
        Ok(Encoding::JsonIetf) => Ok(Encoding::JsonIetf),
        _ => Err(Status::unimplemented(format!(
            "encoding {e}: this target serves JSON and JSON_IETF (RFC 7951)"
        ))),
    }
}

fn typed(bytes: Vec<u8>, encoding: Encoding) -> TypedValue {
    TypedValue {
        value: Some(match encoding {
            Encoding::Json => typed_value::Value::JsonVal(bytes),
            _ => typed_value::Value::JsonIetfVal(bytes),
        }),
    }
}

/// The JSON of `sub`'s selection from `r`, pruned (encoded once per snapshot and
/// selection); `None` when nothing is there.
fn encoded(r: &Rendered, sub: &Sub) -> Option<Arc<Vec<u8>>> {
    if let Ok(cache) = r.encoded.lock()
        && let Some(e) = cache.get(&sub.key)
    {
        return e.clone();
    }
    let e = select(&r.doc, &sub.path).map(|mut v| {
        prune_selection(&mut v, &sub.path, &sub.prune);
        Arc::new(serde_json::to_vec(&v).unwrap_or_default())
    });
    if let Ok(mut cache) = r.encoded.lock() {
        cache.insert(sub.key.clone(), e.clone());
    }
    e
}

/// One update of `sub` from `r`, with its encoded value; `None` when nothing is there.
fn update_of(r: &Rendered, sub: &Sub) -> Option<(Arc<Vec<u8>>, Update)> {
    let e = encoded(r, sub)?;
    let u = Update {
        path: Some(sub.wire.clone()),
        val: Some(typed(e.as_ref().clone(), sub.encoding)),
        ..Default::default()
    };
    Some((e, u))
}

fn notification(r: &Rendered, updates: Vec<Update>) -> Notification {
    Notification {
        timestamp: r.taken_unix_ns,
        update: updates,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl GNmi for Service {
    async fn capabilities(
        &self,
        req: Request<CapabilityRequest>,
    ) -> Result<Response<CapabilityResponse>, Status> {
        self.identify(&req)?;
        Ok(Response::new(CapabilityResponse {
            supported_models: MODELS
                .iter()
                .map(|(name, org, rev)| ModelData {
                    name: (*name).into(),
                    organization: (*org).into(),
                    version: (*rev).into(),
                })
                .collect(),
            supported_encodings: vec![Encoding::Json as i32, Encoding::JsonIetf as i32],
            g_nmi_version: GNMI_VERSION.into(),
            extension: Vec::new(),
        }))
    }

    async fn get(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let client = self.identify(&req)?;
        let r = req.into_inner();
        let encoding = check_encoding(r.encoding)?;
        if r.path.len() > MAX_PATHS_PER_REQUEST {
            return Err(Status::invalid_argument(format!(
                "{} paths in one Get: at most {MAX_PATHS_PER_REQUEST}",
                r.path.len()
            )));
        }
        let mut paths = Vec::new();
        if r.path.is_empty() {
            if let Some((kind, _)) = notification_path(r.prefix.as_ref(), None) {
                return Err(Status::invalid_argument(format!(
                    "/{} is a notification, not data: subscribe in STREAM mode with ON_CHANGE",
                    kind.member
                )));
            }
            paths.push(data_path(r.prefix.as_ref(), None)?);
        }
        for p in &r.path {
            if let Some((kind, _)) = notification_path(r.prefix.as_ref(), Some(p)) {
                return Err(Status::invalid_argument(format!(
                    "/{} is a notification, not data: subscribe in STREAM mode with ON_CHANGE",
                    kind.member
                )));
            }
            paths.push(data_path(r.prefix.as_ref(), Some(p))?);
        }
        // Every path's access before any data.
        let mut subs = Vec::new();
        for (path, wire) in paths {
            let prune = self.check(&client, &path)?;
            subs.push(Sub::once(path, wire, prune, encoding));
        }
        let rendered = render(self.published.fresh().await.as_ref());
        let mut notifications = Vec::new();
        for sub in &subs {
            let (_, u) = update_of(&rendered, sub)
                .ok_or_else(|| Status::not_found(format!("{}: no data", sub.path)))?;
            notifications.push(notification(&rendered, vec![u]));
        }
        Ok(Response::new(GetResponse {
            notification: notifications,
            ..Default::default()
        }))
    }

    async fn set(&self, req: Request<SetRequest>) -> Result<Response<SetResponse>, Status> {
        self.identify(&req)?;
        Err(Status::unimplemented(
            "lqd's configuration is its file: edit it and run `lqd reload` (or send SIGHUP)",
        ))
    }

    type SubscribeStream = SubscriptionStream;

    async fn subscribe(
        &self,
        req: Request<Streaming<SubscribeRequest>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let client = self.identify(&req)?;
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(FIRST_REQUEST_DEADLINE, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no SubscriptionList within 10 s"))??
            .ok_or_else(|| Status::cancelled("the client closed before subscribing"))?;
        // Taken once the client has asked: an idle connection holds no subscription.
        let permit = self
            .subscriptions
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(
                    "too many subscriptions ([gnmi] max-subscriptions): try again later",
                )
            })?;
        let Some(subscribe_request::Request::Subscribe(list)) = first.request else {
            return Err(Status::invalid_argument(
                "the first SubscribeRequest must carry a SubscriptionList",
            ));
        };
        let plan = self.plan(&client, &list)?;
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let closed = Arc::new(Mutex::new(None));
        info!(peer = %client.peer, mode = ?plan.mode, paths = plan.subs.len(), notifications = plan.notifications.len(), "gNMI subscription");
        let run = Subscription {
            service: self.clone(),
            tx,
            closed: closed.clone(),
            peer: client.peer.clone(),
            client,
            _permit: permit,
        };
        tokio::spawn(run.run(plan, inbound));
        Ok(Response::new(SubscriptionStream {
            rx,
            closed,
            done: false,
        }))
    }
}

/// One subscribed path.
struct Sub {
    path: DataPath,
    wire: Path,
    prune: Vec<DataPath>,
    encoding: Encoding,
    /// STREAM: SAMPLE's interval, or `None` for ON_CHANGE.
    sample: Option<Duration>,
    suppress_redundant: bool,
    heartbeat: Option<Duration>,
    /// The selection's key in `Rendered::encoded`: its path and what is pruned from it.
    key: String,
    /// The last value sent (its JSON), and when.
    last: Option<(Arc<Vec<u8>>, tokio::time::Instant)>,
    /// SAMPLE: when the next sample is due.
    due: tokio::time::Instant,
}

impl Sub {
    /// The key of a selection in `Rendered::encoded`. Debug quotes every name and key:
    /// two different selections never share a key.
    fn key_of(path: &DataPath, prune: &[DataPath]) -> String {
        format!("{path:?} {prune:?}")
    }

    fn once(path: DataPath, wire: Path, prune: Vec<DataPath>, encoding: Encoding) -> Self {
        let key = Self::key_of(&path, &prune);
        Self {
            key,
            path,
            wire,
            prune,
            encoding,
            sample: None,
            suppress_redundant: false,
            heartbeat: None,
            last: None,
            due: tokio::time::Instant::now(),
        }
    }
}

/// A SubscriptionList, checked.
struct Plan {
    mode: subscription_list::Mode,
    subs: Vec<Sub>,
    updates_only: bool,
    /// The notifications subscribed: their wire paths as subscribed and encodings.
    notifications: Vec<(&'static NotificationKind, Path, Encoding)>,
}

impl Service {
    fn plan(&self, client: &Client, list: &SubscriptionList) -> Result<Plan, Status> {
        let mode = subscription_list::Mode::try_from(list.mode)
            .map_err(|_| Status::invalid_argument(format!("subscription mode {}", list.mode)))?;
        let encoding = check_encoding(list.encoding)?;
        if list.subscription.is_empty() {
            return Err(Status::invalid_argument(
                "a SubscriptionList without subscriptions",
            ));
        }
        if list.subscription.len() > MAX_PATHS_PER_REQUEST {
            return Err(Status::invalid_argument(format!(
                "{} subscriptions in one list: at most {MAX_PATHS_PER_REQUEST}",
                list.subscription.len()
            )));
        }
        let mut subs = Vec::new();
        let mut notifications = Vec::new();
        for s in &list.subscription {
            if let Some((kind, wire)) = notification_path(list.prefix.as_ref(), s.path.as_ref()) {
                let streamed = mode == subscription_list::Mode::Stream
                    && matches!(
                        SubscriptionMode::try_from(s.mode),
                        Ok(SubscriptionMode::OnChange | SubscriptionMode::TargetDefined)
                    );
                if !streamed {
                    return Err(Status::invalid_argument(format!(
                        "/{} is a notification: subscribe in STREAM mode with ON_CHANGE",
                        kind.member
                    )));
                }
                // What the notification tells is what its subtree holds (seed 003 section
                // 12.2 names both sensitive).
                let g: Vec<&DataPath> = client.grants.iter().collect();
                if !readable_subtree(&g, kind.needs) {
                    warn!(peer = %client.peer, notification = kind.member, needs = kind.needs, "gNMI subscription refused: the notification needs its subtree's grant");
                    return Err(self.refuse(Status::permission_denied(format!(
                        "/{}: not granted to this client (it needs /lq-telemetry/{})",
                        kind.member, kind.needs
                    ))));
                }
                if !notifications
                    .iter()
                    .any(|(k, _, _): &(&NotificationKind, _, _)| k.member == kind.member)
                {
                    notifications.push((kind, wire, encoding));
                }
                continue;
            }
            let (path, wire) = data_path(list.prefix.as_ref(), s.path.as_ref())?;
            let prune = self.check(client, &path)?;
            let mut sub = Sub::once(path, wire, prune, encoding);
            if mode == subscription_list::Mode::Stream {
                match SubscriptionMode::try_from(s.mode) {
                    Ok(SubscriptionMode::Sample) => {
                        sub.sample =
                            Some(Duration::from_nanos(s.sample_interval).max(MIN_SAMPLE_INTERVAL));
                        sub.suppress_redundant = s.suppress_redundant;
                    }
                    Ok(SubscriptionMode::OnChange | SubscriptionMode::TargetDefined) => {}
                    Err(_) => {
                        return Err(Status::invalid_argument(format!(
                            "subscription mode {}",
                            s.mode
                        )));
                    }
                }
                // gNMI 3.5.1.5.2: a heartbeat applies to ON_CHANGE, and to SAMPLE with
                // suppress_redundant (otherwise every sample is sent anyway).
                let beats = sub.sample.is_none() || sub.suppress_redundant;
                sub.heartbeat = (beats && s.heartbeat_interval > 0)
                    .then(|| Duration::from_nanos(s.heartbeat_interval).max(MIN_SAMPLE_INTERVAL));
            }
            subs.push(sub);
        }
        Ok(Plan {
            mode,
            subs,
            updates_only: list.updates_only,
            notifications,
        })
    }
}

/// A running subscription: its queue to the client, and why it was closed.
struct Subscription {
    service: Service,
    tx: mpsc::Sender<Result<SubscribeResponse, Status>>,
    closed: Arc<Mutex<Option<Status>>>,
    peer: String,
    /// Who subscribed: a reload of the rules is applied to the running stream.
    client: Client,
    _permit: OwnedSemaphorePermit,
}

/// The client went away, or fell behind and was closed.
struct Ended;

impl Subscription {
    /// Queues one response; a full queue closes the subscription with a reason.
    fn send(&self, r: subscribe_response::Response) -> Result<(), Ended> {
        let msg = SubscribeResponse {
            response: Some(r),
            ..Default::default()
        };
        match self.tx.try_send(Ok(msg)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                EndpointStats::inc(&self.service.stats.gnmi_subscribers_dropped);
                warn!(peer = %self.peer, queued = STREAM_QUEUE, "gNMI subscriber closed: it did not keep up with its updates");
                if let Ok(mut c) = self.closed.lock() {
                    *c = Some(Status::resource_exhausted(format!(
                        "the subscriber did not keep up: {STREAM_QUEUE} responses were waiting"
                    )));
                }
                Err(Ended)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Ended),
        }
    }

    fn sync(&self) -> Result<(), Ended> {
        self.send(subscribe_response::Response::SyncResponse(true))
    }

    /// `updates` of `r` as one notification, if there are any.
    fn send_updates(&self, r: &Rendered, updates: Vec<Update>) -> Result<(), Ended> {
        if updates.is_empty() {
            return Ok(());
        }
        self.send(subscribe_response::Response::Update(notification(
            r, updates,
        )))
    }

    /// Every subscribed path's value from `r`, as one notification.
    fn all(&self, r: &Rendered, subs: &mut [Sub]) -> Result<(), Ended> {
        let now = tokio::time::Instant::now();
        let mut updates = Vec::new();
        for sub in subs.iter_mut() {
            if let Some((v, u)) = update_of(r, sub) {
                sub.last = Some((v, now));
                updates.push(u);
            }
        }
        self.send_updates(r, updates)
    }

    async fn run(self, mut plan: Plan, mut inbound: Streaming<SubscribeRequest>) {
        let _ = self.serve(&mut plan, &mut inbound).await;
    }

    async fn serve(
        &self,
        plan: &mut Plan,
        inbound: &mut Streaming<SubscribeRequest>,
    ) -> Result<(), Ended> {
        let first = render(self.service.published.fresh().await.as_ref());
        // The rules may have been reloaded since the client was identified (it had 10 s to
        // send its SubscriptionList): checked again before any data, and before every
        // later send.
        let mut rules_seen = self.client.rules_generation;
        self.recheck(plan, &mut rules_seen)?;
        if plan.updates_only {
            // Remember the values without sending them (gNMI 3.5.2.3 updates_only).
            let now = tokio::time::Instant::now();
            for sub in plan.subs.iter_mut() {
                sub.last = update_of(&first, sub).map(|(v, _)| (v, now));
            }
        } else {
            self.all(&first, &mut plan.subs)?;
        }
        self.sync()?;
        match plan.mode {
            subscription_list::Mode::Once => Ok(()),
            subscription_list::Mode::Poll => loop {
                match inbound.message().await {
                    Ok(Some(SubscribeRequest {
                        request: Some(subscribe_request::Request::Poll(_)),
                        ..
                    })) => {
                        let r = render(self.service.published.fresh().await.as_ref());
                        self.recheck(plan, &mut rules_seen)?;
                        self.all(&r, &mut plan.subs)?;
                        self.sync()?;
                    }
                    Ok(Some(_)) => {
                        if let Ok(mut c) = self.closed.lock() {
                            *c = Some(Status::invalid_argument(
                                "a POLL subscription takes only Poll requests",
                            ));
                        }
                        return Err(Ended);
                    }
                    Ok(None) | Err(_) => return Ok(()),
                }
            },
            subscription_list::Mode::Stream => self.stream(plan, inbound, rules_seen).await,
        }
    }

    async fn stream(
        &self,
        plan: &mut Plan,
        inbound: &mut Streaming<SubscribeRequest>,
        mut rules_seen: u64,
    ) -> Result<(), Ended> {
        // The shortest SAMPLE interval, and whether an ON_CHANGE path is in the list.
        let sample = plan
            .subs
            .iter()
            .filter_map(|s| s.sample.map(|i| i.as_nanos() as u64))
            .min();
        let on_change = plan.subs.iter().any(|s| s.sample.is_none());
        // A list of the notification alone needs no document.
        let _registered = (!plan.subs.is_empty()).then(|| {
            Registered(
                self.service.demand.clone(),
                self.service.demand.register(sample, on_change),
            )
        });
        let mut notifications =
            (!plan.notifications.is_empty()).then(|| self.service.notifications.subscribe());
        let mut latest = self.service.latest.clone();
        latest.mark_unchanged();
        let start = tokio::time::Instant::now();
        for sub in plan.subs.iter_mut() {
            sub.due = start + sub.sample.unwrap_or(Duration::ZERO);
        }
        // A client may half-close its side after the SubscriptionList: the stream goes on
        // until it cancels or goes away.
        let mut inbound_open = true;
        loop {
            self.recheck(plan, &mut rules_seen)?;
            // A sample is sent from the first document rendered after it is due; the timer
            // is the fallback when none comes within another interval, and the heartbeats'.
            let next_due = plan
                .subs
                .iter()
                .filter_map(|s| {
                    let sample = s.sample.map(|i| s.due + i);
                    let beat = s.heartbeat.zip(s.last.as_ref()).map(|(h, (_, t))| *t + h);
                    sample.into_iter().chain(beat).min()
                })
                .min();
            let sleep = async {
                match next_due {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = latest.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let r = latest.borrow_and_update().clone();
                    // A reload since the top of the loop applies before this send.
                    self.recheck(plan, &mut rules_seen)?;
                    self.on_change(&r, &mut plan.subs)?;
                    self.on_due(&r, &mut plan.subs)?;
                }
                () = sleep => {
                    let r = latest.borrow().clone();
                    self.recheck(plan, &mut rules_seen)?;
                    self.on_due(&r, &mut plan.subs)?;
                }
                () = self.tx.closed() => return Ok(()),
                n = async {
                    match notifications.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match n {
                    Ok(line) => {
                        self.recheck(plan, &mut rules_seen)?;
                        self.notify(plan, &line)?;
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        EndpointStats::inc(&self.service.stats.gnmi_subscribers_dropped);
                        warn!(peer = %self.peer, missed, "gNMI subscriber closed: it fell behind the notifications");
                        if let Ok(mut c) = self.closed.lock() {
                            *c = Some(Status::resource_exhausted(format!(
                                "the subscriber did not keep up: {missed} notifications missed"
                            )));
                        }
                        return Err(Ended);
                    }
                    // The daemon is stopping.
                    Err(broadcast::error::RecvError::Closed) => notifications = None,
                },
                msg = inbound.message(), if inbound_open => {
                    match msg {
                        // Nothing more is expected from a STREAM client.
                        Ok(Some(_)) => {}
                        Ok(None) => inbound_open = false,
                        Err(_) => return Ok(()),
                    }
                }
            }
        }
    }

    /// A reload replaced the read rules (their generation is not `seen`): every
    /// subscription of the stream is checked again with the client's new grants. One no
    /// longer granted closes the stream with PERMISSION_DENIED; a changed set of pruned
    /// subtrees applies from the next update.
    fn recheck(&self, plan: &mut Plan, seen: &mut u64) -> Result<(), Ended> {
        let (generation, rules) = self.service.rules.get();
        if generation == *seen {
            return Ok(());
        }
        *seen = generation;
        let mut client = Client {
            grants: Vec::new(),
            peer: self.peer.clone(),
            certificate: self.client.certificate.clone(),
            rules_generation: 0,
        };
        client.regrant(generation, &rules);
        let g: Vec<&DataPath> = client.grants.iter().collect();
        let denied = plan
            .subs
            .iter()
            .find(|sub| access(&g, &sub.path) == Access::Denied)
            .map(|sub| sub.path.to_string())
            .or_else(|| {
                plan.notifications
                    .iter()
                    .find(|(kind, _, _)| !readable_subtree(&g, kind.needs))
                    .map(|(kind, _, _)| format!("/{}", kind.member))
            });
        if let Some(path) = denied {
            EndpointStats::inc(&self.service.stats.gnmi_refused);
            warn!(peer = %self.peer, %path, "gNMI subscription closed: a reload of the [[gnmi.client]] rules withdrew its grant");
            if let Ok(mut c) = self.closed.lock() {
                *c = Some(Status::permission_denied(format!(
                    "{path}: no longer granted to this client (the target's read rules were reloaded)"
                )));
            }
            return Err(Ended);
        }
        for sub in plan.subs.iter_mut() {
            if let Access::Allowed { prune } = access(&g, &sub.path)
                && prune != sub.prune
            {
                sub.key = Sub::key_of(&sub.path, &prune);
                sub.prune = prune;
            }
        }
        Ok(())
    }

    /// One notification (a JSON line of `lqd monitor`'s feed) as an update of its
    /// subscribed path, its body the value, stamped with the time it reached the client
    /// thread (the loop forwards it as it is raised). A notification of a kind this
    /// stream did not subscribe to is not its business.
    fn notify(&self, plan: &Plan, line: &str) -> Result<(), Ended> {
        let Ok(Value::Object(mut members)) = serde_json::from_str::<Value>(line) else {
            warn!(line, "not a notification (RFC 7951 JSON object): not sent");
            return Ok(());
        };
        let Some((body, wire, encoding)) =
            plan.notifications
                .iter()
                .find_map(|(kind, wire, encoding)| {
                    Some((members.remove(kind.member)?, wire, encoding))
                })
        else {
            return Ok(());
        };
        let update = Update {
            path: Some(wire.clone()),
            val: Some(typed(
                serde_json::to_vec(&body).unwrap_or_default(),
                *encoding,
            )),
            ..Default::default()
        };
        self.send(subscribe_response::Response::Update(Notification {
            timestamp: unix_ns() as i64,
            update: vec![update],
            ..Default::default()
        }))
    }

    /// ON_CHANGE paths whose value differs from the last sent.
    fn on_change(&self, r: &Rendered, subs: &mut [Sub]) -> Result<(), Ended> {
        let now = tokio::time::Instant::now();
        let mut updates = Vec::new();
        for sub in subs.iter_mut().filter(|s| s.sample.is_none()) {
            let Some((v, u)) = update_of(r, sub) else {
                continue;
            };
            if sub.last.as_ref().is_none_or(|(last, _)| *last != v) {
                sub.last = Some((v, now));
                updates.push(u);
            }
        }
        self.send_updates(r, updates)
    }

    /// SAMPLE paths due (suppressed when unchanged, unless a heartbeat is due), and the
    /// heartbeats due.
    fn on_due(&self, r: &Rendered, subs: &mut [Sub]) -> Result<(), Ended> {
        let now = tokio::time::Instant::now();
        let mut updates = Vec::new();
        for sub in subs.iter_mut() {
            let beat = sub
                .heartbeat
                .zip(sub.last.as_ref())
                .is_some_and(|(h, (_, t))| now >= *t + h);
            let sample_due = sub.sample.is_some() && now >= sub.due;
            if let Some(interval) = sub.sample
                && sample_due
            {
                sub.due += interval;
                if sub.due <= now {
                    sub.due = now + interval;
                }
            }
            if !(sample_due || beat) {
                continue;
            }
            let Some((v, u)) = update_of(r, sub) else {
                // Nothing there now: the heartbeat's clock still moves on (else its
                // deadline stays in the past and the timer fires at once, forever).
                if let Some((_, t)) = sub.last.as_mut() {
                    *t = now;
                }
                continue;
            };
            let same = sub.last.as_ref().is_some_and(|(last, _)| *last == v);
            if sample_due && sub.suppress_redundant && same && !beat {
                continue;
            }
            sub.last = Some((v, now));
            updates.push(u);
        }
        self.send_updates(r, updates)
    }
}

/// A subscription's responses; after the last, the reason it was closed, if it was.
pub struct SubscriptionStream {
    rx: mpsc::Receiver<Result<SubscribeResponse, Status>>,
    closed: Arc<Mutex<Option<Status>>>,
    done: bool,
}

impl tokio_stream::Stream for SubscriptionStream {
    type Item = Result<SubscribeResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        // A subscriber closed for falling behind gets the reason at once; what was queued
        // for it is dropped (it would only hold memory for a client that does not read).
        if let Some(reason) = self.closed.lock().ok().and_then(|mut c| c.take()) {
            self.done = true;
            self.rx.close();
            while self.rx.try_recv().is_ok() {}
            return Poll::Ready(Some(Err(reason)));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                self.done = true;
                let reason = self.closed.lock().ok().and_then(|mut c| c.take());
                Poll::Ready(reason.map(Err))
            }
            other => other,
        }
    }
}

/// A connection that holds its place under [`MAX_CONNECTIONS`] while it lives.
struct Conn<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Conn<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// What the gNMI endpoint needs from the daemon.
pub(super) struct GnmiEndpoint {
    /// The listening socket (bound by the daemon before it drops privileges).
    pub listener: std::net::TcpListener,
    /// TLS, or `None` for plaintext on loopback; a reload replaces it (new connections).
    pub tls: Option<Arc<Current<rustls::ServerConfig>>>,
    /// The read rules; a reload replaces them (new requests and running streams).
    pub rules: Arc<Current<Vec<ReadRule>>>,
    /// Concurrent subscriptions at most.
    pub max_subscriptions: usize,
}

/// Serves the gNMI endpoint until the client thread ends (spawned on its runtime).
pub(super) async fn serve(
    endpoint: GnmiEndpoint,
    published: Published,
    notifications: broadcast::Sender<String>,
    stats: Arc<ClientStats>,
) {
    let listener = match TcpListener::from_std(endpoint.listener) {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %crate::core::report::Chain(&e), "gNMI endpoint: not served");
            return;
        }
    };
    let (latest_tx, latest) = watch::channel(Arc::new(Rendered {
        taken_unix_ns: 0,
        doc: Value::Null,
        encoded: Mutex::new(BTreeMap::new()),
    }));
    let demand = Arc::new(Demand::default());
    tokio::spawn(feed(published.clone(), latest_tx, demand.clone()));
    let service = Service {
        published,
        notifications,
        latest,
        demand,
        rules: endpoint.rules,
        tls: endpoint.tls.is_some(),
        subscriptions: Arc::new(Semaphore::new(endpoint.max_subscriptions)),
        stats: stats.clone(),
    };
    let server = GNmiServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(server);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let result = match endpoint.tls {
        Some(tls) => {
            let (tx, rx) = mpsc::channel(64);
            let handshake_stats = stats.clone();
            tokio::spawn(accept(listener, stats, connections, move |tcp, permit| {
                // The configuration of now: a reload's certificate for new connections.
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.get().1);
                let tx = tx.clone();
                let handshake_stats = handshake_stats.clone();
                async move {
                    match tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx
                                .send(Ok::<_, std::io::Error>(Conn {
                                    inner: tls,
                                    _permit: permit,
                                }))
                                .await;
                            true
                        }
                        Ok(Err(e)) => {
                            EndpointStats::inc(&handshake_stats.gnmi.unauthenticated);
                            tracing::debug!(error = %e, "gNMI TLS handshake refused");
                            true
                        }
                        Err(_) => false,
                    }
                }
            }));
            router
                .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
        }
        None => {
            let (tx, rx) = mpsc::channel(64);
            tokio::spawn(accept(listener, stats, connections, move |tcp, permit| {
                let tx = tx.clone();
                async move {
                    let _ = tx
                        .send(Ok::<_, std::io::Error>(Conn {
                            inner: tcp,
                            _permit: permit,
                        }))
                        .await;
                    true
                }
            }));
            router
                .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
        }
    };
    if let Err(e) = result {
        warn!(error = %crate::core::report::Chain(&e), "gNMI endpoint stopped");
    }
}

/// Accepts connections while there is room (`connections`), each handed to `handshake`
/// on a task of its own (which answers whether it was within its deadline).
async fn accept<F, Fut>(
    listener: TcpListener,
    stats: Arc<ClientStats>,
    connections: Arc<Semaphore>,
    handshake: F,
) where
    F: Fn(tokio::net::TcpStream, OwnedSemaphorePermit) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let mut refusals = RefusalLog::new("gnmi", MAX_CONNECTIONS);
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                accept_failed("gnmi", &stats.gnmi, &e).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            refusals.refused(&stats.gnmi);
            continue;
        };
        EndpointStats::inc(&stats.gnmi.accepted);
        let _ = tcp.set_nodelay(true);
        let stats = stats.clone();
        let fut = handshake(tcp, permit);
        tokio::spawn(async move {
            if !fut.await {
                EndpointStats::inc(&stats.gnmi.timed_out);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(origin: &str, names: &[&str]) -> Path {
        Path {
            origin: origin.into(),
            elem: names
                .iter()
                .map(|n| proto::gnmi::PathElem {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A stream with ON_CHANGE and a 10 ms SAMPLE path needs documents every 10 ms (not
    /// the ON_CHANGE re-read's 100 ms), and marks ON_CHANGE open.
    #[test]
    fn demand_keeps_the_sample_interval_beside_on_change() {
        let d = Demand::default();
        assert_eq!(d.need(), None);
        let mixed = d.register(Some(10_000_000), true);
        assert_eq!(d.need(), Some((10_000_000, true)));
        d.unregister(mixed);
        let slow = d.register(Some(1_000_000_000), false);
        assert_eq!(d.need(), Some((1_000_000_000, false)));
        d.register(None, true);
        assert_eq!(d.need(), Some((ON_CHANGE_REREAD.as_nanos() as u64, true)));
        d.unregister(slow);
        assert_eq!(d.need(), Some((ON_CHANGE_REREAD.as_nanos() as u64, true)));
    }

    /// The notification is named with its module on the element or in the origin (how
    /// pygnmi and gnmic split `/ietf-lq-telemetry:lq-threshold-crossed`), and nothing else
    /// is taken for it.
    #[test]
    fn the_notification_path_in_each_form_and_nothing_else() {
        for p in [
            path("", &["ietf-lq-telemetry:lq-threshold-crossed"]),
            path("ietf-lq-telemetry", &["lq-threshold-crossed"]),
            path("", &["lq-threshold-crossed"]),
            path("rfc7951", &["ietf-lq-telemetry:lq-threshold-crossed"]),
        ] {
            assert!(notification_path(None, Some(&p)).is_some(), "{p:?}");
        }
        let prefix = path("", &["ietf-lq-telemetry:lq-threshold-crossed"]);
        assert!(notification_path(Some(&prefix), Some(&path("", &[]))).is_some());
        // lq's augment's notification, told apart from the module's.
        for p in [
            path("", &["lq-authentication:lq-authentication-failure"]),
            path("lq-authentication", &["lq-authentication-failure"]),
        ] {
            let (kind, _) = notification_path(None, Some(&p)).unwrap();
            assert_eq!(kind.needs, "neighbors", "{p:?}");
        }
        let (kind, _) = notification_path(
            None,
            Some(&path("", &["ietf-lq-telemetry:lq-threshold-crossed"])),
        )
        .unwrap();
        assert_eq!(kind.needs, "local");
        assert!(
            notification_path(
                None,
                Some(&path("ietf-lq-telemetry", &["lq-authentication-failure"]))
            )
            .is_none()
        );
        for p in [
            path("", &["ietf-lq-telemetry:lq-telemetry"]),
            path("openconfig", &["lq-threshold-crossed"]),
            path("", &["lq-threshold-crossed", "node-id"]),
            path("", &["other-module:lq-threshold-crossed"]),
            path("", &[]),
        ] {
            assert!(notification_path(None, Some(&p)).is_none(), "{p:?}");
        }
    }
}
