//! The local cluster: an in-memory, Kubernetes-API-compatible HTTP server
//! with simulated kubelets, for running and testing a scheduler (like
//! KWOK/envtest, for the resources a scheduler touches).
//!
//! Must never depend on: the scheduler (engine, daemon), the lab, or kube-rs
//! outside its `client`/`testing` features (`ci/deps.sh` checks it): it
//! stands in for a real API server, and uses the model and the TLS front door
//! only.
//!
//! Served (JSON over HTTPS/1.1 with RBAC, see "Security" below): discovery (`/version`, `/api`,
//! `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`); core/v1 namespaces,
//! nodes (+status), pods (+binding, +status, +eviction), events;
//! events.k8s.io/v1 events (one stored Event, core/v1 a view of it: see
//! [`eventview`]); coordination.k8s.io/v1
//! leases; scheduling.k8s.io/v1 priorityclasses; policy/v1
//! poddisruptionbudgets (+status, kept current); authentication.k8s.io/v1
//! tokenreviews and authorization.k8s.io/v1 subjectaccessreviews (create
//! only, answered from [`ClusterConfig::auth`]: see [`auth`]). Verbs: get, list (label and
//! field selectors, limit/continue), watch (resume, bookmarks,
//! sendInitialEvents, 410 Expired), create, update, patch (merge,
//! strategic, JSON patch, server-side apply with managedFields and conflicts), delete (grace period,
//! preconditions), deletecollection. kubectl gets meta.k8s.io Tables
//! (also on watches, for `kubectl get -w`). Storage (core/v1
//! persistentvolumes and persistentvolumeclaims with status,
//! storage.k8s.io/v1 storageclasses/csinodes/csidrivers/csistoragecapacities)
//! has controllers behind it ([`volumes`]). Also stored and served, with no
//! controller behind them: services, replicationcontrollers, configmaps,
//! storage.k8s.io/v1 volumeattachments,
//! scheduling.k8s.io/v1beta1 podgroups (+status) and workloads.
//!
//! Devices (resource.k8s.io/v1 resourceclaims (+status),
//! resourceclaimtemplates, deviceclasses, resourceslices), as a cluster
//! with a DRA driver runs them: a simulated driver publishes a
//! ResourceSlice per node and a DeviceClass ([`dra_driver`],
//! [`ClusterConfig::devices`]), the resourceclaim controller
//! ([`controllers::resourceclaim`]) makes claims from templates, releases
//! and deallocates them when their pods are done and deletes generated
//! ones with their pods, and the kubelet refuses to start a pod whose
//! claims are not allocated and reserved for it (Warning
//! `FailedPrepareDynamicResources`, the pod Pending in ContainerCreating).
//! Simplified: claims and their status are not validated (a real API
//! server refuses `reservedFor` without an allocation, and more); no
//! PodSchedulingContext, device taint eviction, CDI or unprepare; a
//! refusal's event is written once per reason, not counted on each retry.
//!
//! Custom resources: apiextensions.k8s.io/v1 customresourcedefinitions
//! are validated, get their NamesAccepted/Established status at once, and
//! their served versions join the served resources at run time (the
//! [`resources::Registry`]): discovery, every verb, watch, selectors
//! (`selectableFields` too), pages, a `status` subresource when declared,
//! kubectl Tables from `additionalPrinterColumns`. Every served version
//! reads one store (apiVersion rewritten: no conversion). A version's
//! schema prunes unknown fields, fills defaults and checks types,
//! `required`, `enum`, bounds and lengths ([`crd`]; no CEL, `pattern` or
//! `format`). Deleting a CRD deletes its objects at once.
//!
//! OpenAPI ([`openapi`]): `/openapi/v2` (Swagger 2.0) and `/openapi/v3`
//! (the root, and one OpenAPI 3.0 document per group-version) are generated
//! on first request from k8s-openapi's schemas and the CRDs' schemas, cached
//! with upstream's ETags and `?hash=` URLs, so `kubectl explain` and
//! `kubectl apply` with validation on work. Writes honour
//! `fieldValidation` (Strict refuses unknown and duplicate fields naming
//! them, Warn, the default, answers `Warning` headers, Ignore is silent).
//!
//! Lifecycle, as Kubernetes documents it: a pod's grace period is the
//! request's, else its own, 0 when it is not bound or already terminal,
//! 1 s when negative; a second delete may only shorten it. Finalizers hold
//! every object, pods included (a pod the kubelet is done with stays,
//! terminal, until they are removed). Deleting a namespace makes it
//! Terminating (creating in it is refused, 403 as NamespaceLifecycle
//! answers), deletes its pods gracefully and the rest at once, and removes
//! it once empty. The kubelet honours readinessGates and turns a
//! terminating pod NotReady at once, so PodDisruptionBudget status follows.
//! PodGC ([`podgc`]) deletes the pods of a deleted node after its
//! quarantine (Failed, DisruptionTarget `DeletionByPodGC`), and the
//! node's CSINode goes with it. Validation: PriorityClass values above one
//! billion (system classes excepted), scheduling gates added after
//! creation, a gated pod created bound, malformed claims and volumes are
//! refused (422, with the field).
//!
//! Storage: the default StorageClass `standard` (WaitForFirstConsumer)
//! served by the simulated CSI driver `csi.berth.dev`, a CSINode per node
//! with a configurable attach limit, DefaultStorageClass admission, the PV
//! controller (binding, phases, reclaim), the driver's provisioner (a
//! volume in the selected node's zone), pvc/pv-protection, and a kubelet
//! that keeps a pod Pending while its claims are not usable on its node.
//!
//! Security, as kube-apiserver with `--authorization-mode=RBAC`: HTTPS
//! with a CA of the cluster's own ([`tls`]; kept in the data directory),
//! bearer tokens ([`authn`]: the admin token in `system:masters` that the
//! written kubeconfig carries, ServiceAccount tokens; 401 for an unknown
//! one), RBAC over the stored roles and bindings with upstream's
//! bootstrap policy and Forbidden messages ([`authz`], [`rbac`]).
//! `--authorization-mode AlwaysAllow` ([`ClusterConfig::authorization`])
//! gives every request, even anonymous, full access (a warning is logged
//! when the address is not loopback); [`ClusterConfig::tls`] off serves
//! plain HTTP, for tests that write HTTP by hand.
//!
//! Known simplifications: no client certificates (tokens only); bodies are JSON, or protobuf for the
//! built-in kinds (requests only, decoded into the same JSON: [`proto`];
//! responses are JSON, which protobuf clients accept), no CBOR; lists
//! always answer the current state (a resourceVersion ahead of the
//! store's is refused as "Too large resource version" after a short wait,
//! any other resourceVersion/resourceVersionMatch on lists is ignored, and
//! continued pages read the live state after the token's key); server-side apply ([`managed`]) tracks
//! `metadata.managedFields` and conflicts as the API server does, but
//! keeps no more than the writes' own entries (no cap of ten Update
//! managers, no entries for the cluster's own controllers and kubelets);
//! dryRun is honoured by create, update and patch, refused (400) on
//! deletes; `/openapi/v2` and `/openapi/v3` answer JSON only
//! (a protobuf-only Accept gets 406), and their schemas have no patch merge keys;
//! server-side apply bodies are not checked for unknown fields; pod spec immutability is only enforced for spec.nodeName,
//! priority, scheduling gates and spec.schedulingGroup; nodes get no heartbeats or leases; pods
//! bound to a missing node stay Pending until PodGC collects them; the
//! namespace controller does not retry with backoff (its conditions are
//! written once, when the deletion starts); no `namespaces/finalize`
//! subresource; an Event's managedFields name its events.k8s.io/v1 fields
//! whichever version wrote them (upstream records each manager's fields in
//! the version it wrote through);
//! no generic ephemeral volume controller, no volume attach
//! (VolumeAttachment), expansion or snapshots; the kubelet's terminal phase
//! for a deleted pod is always Succeeded.
//!
//! Workload controllers ([`controllers`]): Deployments roll ReplicaSets,
//! ReplicaSets and Jobs create pods from their templates, StatefulSets run
//! ordered pods with claims from their volumeClaimTemplates (with
//! ControllerRevisions), DaemonSets run one pod per eligible node through the
//! scheduler (required node affinity on `metadata.name`), and owners'
//! deletion takes their dependents.
//!
//! Simulated kubelets ([`kubelet`]) run bound pods, complete pods annotated
//! [`COMPLETE_AFTER`], and remove terminating pods after their grace period.
//! Faults ([`Faults`]): error answers per (verb, resource), watch cuts,
//! history compaction, server restarts.
//!
//! Recovery: with [`ClusterConfig::data_dir`] every object is kept on
//! disk (see [`Store::open`]; resourceVersions continue after a restart
//! and watches from before it get 410 Gone); a read or watch from a
//! resourceVersion ahead of the store's (the server's state went
//! backwards) is answered "Too large resource version" (504) so clients
//! relist; [`ClusterConfig::kubernetes_version`] picks the release
//! answered as ([`version`]).
//!
//! Tests use `kubectl` when it is on PATH (or `$BERTH_KUBECTL`); CI
//! installs it with
//! `command -v kubectl || (apt-get update && apt-get install -y kubernetes-client)`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_cluster::Error> {
//! use berth_cluster::{ClusterConfig, LocalCluster};
//! let cluster = LocalCluster::start(ClusterConfig { nodes: 10, ..Default::default() }).await?;
//! let client = cluster.client()?;
//! // ... drive it with kube::Api<Pod> etc ...
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admission;
pub mod auth;
pub mod authn;
pub mod authz;
pub mod crd;
pub mod cli;
pub mod controllers;
pub mod dra_driver;
pub mod eventview;
pub mod faults;
pub mod http;
pub mod inflight;
pub mod jsonptr;
pub mod kubelet;
pub mod managed;
pub mod object;
pub mod openapi;
pub mod podgc;
pub mod proto;
pub mod rbac;
pub mod scale;
pub mod resources;
pub mod selector;
pub mod store;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
pub mod version;
pub mod volumes;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use faults::{ErrorRule, FaultConfig, FaultKind, Faults};
pub use kubelet::{COMPLETE_AFTER, KubeletConfig};
pub use podgc::PodGcConfig;
pub use volumes::StorageConfig;
pub use store::{Store, StoreConfig};

/// Errors of the local cluster as a whole.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving the listen address failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing the kubeconfig failed.
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a kube client failed.
    #[error("cannot build a kube client: {0}")]
    Client(String),
    /// Seeding the store failed.
    #[error("store: {0}")]
    Store(#[from] store::Error),
    /// The data directory cannot be used.
    #[error("{0}")]
    DataDir(#[from] store::DataDirError),
    /// A fault action failed.
    #[error("fault: {0}")]
    Fault(#[from] faults::Error),
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The authorization layer could not be set up.
    #[error("authorization: {0}")]
    Authz(#[from] authz::Error),
    /// The simulated DRA driver's devices are invalid or could not be published.
    #[error("{0}")]
    Devices(#[from] dra_driver::Error),
    /// The cluster's certificates could not be made.
    #[error("{0}")]
    Tls(#[from] tls::Error),
    /// The admin token kept in the data directory could not be read or written.
    #[error("{path}: {source}")]
    AdminToken {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Configuration of a local cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Listen address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Number of nodes created at start (`node-0` .. `node-N-1`).
    pub nodes: usize,
    /// Zones the nodes are spread over round-robin (`zone-a`, `zone-b`, ...).
    pub zones: usize,
    /// Node CPU capacity (quantity string).
    pub node_cpu: String,
    /// Node memory capacity (quantity string).
    pub node_memory: String,
    /// Node pod capacity.
    pub node_pods: u32,
    /// Kubelet simulation.
    pub kubelet: KubeletConfig,
    /// Store tuning (history size, watcher buffer).
    pub store: StoreConfig,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Faults active from the start.
    pub faults: FaultConfig,
    /// Static tokens and rules answering TokenReview and SubjectAccessReview.
    pub auth: auth::AuthConfig,
    /// Storage: default class, CSI driver and CSINodes, PV controller and provisioner.
    pub storage: StorageConfig,
    /// PodGC (orphaned pods of deleted nodes).
    pub podgc: PodGcConfig,
    /// Workload controllers (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, garbage collection)
    /// and the resourceclaim controller.
    pub controllers: controllers::ControllersConfig,
    /// Devices of the simulated DRA driver (none by default: no driver).
    pub devices: dra_driver::DevicesConfig,
    /// Keep every object in this directory across restarts (see
    /// [`store::Store::open`]); `None` keeps the cluster in memory only.
    /// A directory that already holds a store is read back as it is:
    /// nothing is seeded (`nodes` and the storage seeds only fill a new
    /// directory).
    pub data_dir: Option<std::path::PathBuf>,
    /// The Kubernetes release answered as: `/version`, and the built-in
    /// resources it serves by default (see [`version`]).
    pub kubernetes_version: version::KubeVersion,
    /// How requests are authorized: RBAC (the default, see [`authz`]) or
    /// [`authz::AuthorizationMode::AlwaysAllow`] (every request, even
    /// anonymous, has full access).
    pub authorization: authz::AuthorizationMode,
    /// Serve HTTPS (the default; see [`tls`]). Off, the cluster speaks
    /// plain HTTP, over which client-go (kubectl, helm) sends no token:
    /// only for tests that speak raw HTTP.
    pub tls: bool,
    /// The CA that signs the serving certificate; None: the data
    /// directory's, else a new one. A cluster that replaces another on
    /// its address (an etcd restore) passes the other's
    /// ([`tls::Identity::ca`]), so that its clients still trust it.
    pub ca: Option<tls::Ca>,
    /// How long an Event is kept after its last write (kube-apiserver's
    /// `--event-ttl`, one hour by default).
    pub event_ttl: Duration,
    /// Read-only requests in flight at most, watches not counted
    /// (kube-apiserver's `--max-requests-inflight`, 400; 0: no limit);
    /// the excess gets 429 (see [`inflight`]).
    pub max_requests_inflight: usize,
    /// Mutating requests in flight at most (kube-apiserver's
    /// `--max-mutating-requests-inflight`, 200; 0: no limit).
    pub max_mutating_requests_inflight: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            nodes: 3,
            zones: 3,
            node_cpu: "4".into(),
            node_memory: "32Gi".into(),
            node_pods: 110,
            kubelet: KubeletConfig::default(),
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(5),
            faults: FaultConfig::default(),
            auth: auth::AuthConfig::default(),
            storage: StorageConfig::default(),
            podgc: PodGcConfig::default(),
            controllers: controllers::ControllersConfig::default(),
            devices: dra_driver::DevicesConfig::default(),
            data_dir: None,
            kubernetes_version: version::KubeVersion::default(),
            authorization: authz::AuthorizationMode::default(),
            event_ttl: Duration::from_secs(3600),
            tls: true,
            ca: None,
            max_requests_inflight: inflight::DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
        }
    }
}

/// Delete Events once they are `ttl` old (see [`Store::expire_events`]),
/// checking every tenth of the TTL (at most every minute).
fn spawn_event_expiry(store: Arc<Store>, ttl: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let every = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(60));
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(every);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = iv.tick() => {
                    let n = store.expire_events(ttl);
                    if n > 0 {
                        tracing::debug!(expired = n, "events past their TTL deleted");
                    }
                }
            }
        }
    })
}

/// Name of zone `i` (`zone-a`, ..., `zone-z`, `zone-26`, ...).
pub fn zone_name(i: usize) -> String {
    match u8::try_from(i) {
        Ok(b) if b < 26 => format!("zone-{}", (b'a' + b) as char),
        _ => format!("zone-{i}"),
    }
}

/// The JSON of simulated node `i`.
pub fn node_json(name: &str, i: usize, zones: usize, cpu: &str, memory: &str, pods: u32) -> Value {
    let zone = zone_name(i % zones.max(1));
    let ip = format!("10.0.{}.{}", (i / 250) % 256, i % 250 + 1);
    let cap = json!({"cpu": cpu, "memory": memory, "pods": pods.to_string(), "ephemeral-storage": "100Gi"});
    let now = store::now_rfc3339();
    let c = |ty: &str, st: &str, reason: &str| {
        json!({"type": ty, "status": st, "reason": reason, "message": "", "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "region-1",
                "type": "berth",
            },
        },
        "spec": {},
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "phase": "Running",
            "conditions": [
                c("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                c("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                c("PIDPressure", "False", "KubeletHasSufficientPID"),
                c("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "",
                "containerRuntimeVersion": "berth://1.0",
                "kernelVersion": "6.1.0",
                "kubeProxyVersion": "v1.37.0",
                "kubeletVersion": "v1.37.0-berth",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "berth simulated node",
                "systemUUID": "",
            },
        },
    })
}

/// A node's kubelet and kube-proxy report the release the cluster answers
/// as (when it is not the default, which [`node_json`] writes).
fn with_node_version(mut node: Value, v: version::KubeVersion) -> Value {
    if v != version::KubeVersion::default()
        && let Some(info) = node.pointer_mut("/status/nodeInfo").and_then(Value::as_object_mut)
    {
        info.insert("kubeletVersion".into(), json!(format!("v{v}.0-berth")));
        info.insert("kubeProxyVersion".into(), json!(format!("v{v}.0")));
    }
    node
}

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Owns the listener; can stop and re-listen on the same address.
struct ServerCtl {
    addr: SocketAddr,
    app: axum::Router,
    /// TLS, unless the cluster speaks plain HTTP.
    acceptor: Option<berth_tls::tokio_rustls::TlsAcceptor>,
    watch_gen: Arc<watch::Sender<u64>>,
    running: tokio::sync::Mutex<Option<Running>>,
}

impl ServerCtl {
    async fn listen(&self) -> Result<(), Error> {
        let mut last = None;
        for _ in 0..100 {
            match bind(self.addr) {
                Ok(l) => {
                    let mut plain = None;
                    let (stop, mut rx) = watch::channel(false);
                    let app = self.app.clone();
                    let tls = match &self.acceptor {
                        Some(a) => Some(tls::TlsListener::new(l, a.clone()).map_err(|source| Error::Listen { addr: self.addr, source })?),
                        None => {
                            plain = Some(l);
                            None
                        }
                    };
                    let task = tokio::spawn(async move {
                        let signal = async move {
                            let _ = rx.wait_for(|s| *s).await;
                        };
                        let served = match (tls, plain) {
                            (Some(l), _) => axum::serve(l, app).with_graceful_shutdown(signal).await,
                            (None, Some(l)) => axum::serve(l, app).with_graceful_shutdown(signal).await,
                            (None, None) => Ok(()),
                        };
                        if let Err(e) = served {
                            tracing::warn!(error = %e, "local cluster server stopped with an error");
                        }
                    });
                    *self.running.lock().await = Some(Running { stop, task });
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Err(Error::Listen {
            addr: self.addr,
            source: last.unwrap_or_else(|| std::io::Error::other("bind failed")),
        })
    }

    async fn stop(&self) {
        self.watch_gen.send_modify(|g| *g += 1);
        let running = self.running.lock().await.take();
        if let Some(r) = running {
            let _ = r.stop.send(true);
            let mut task = r.task;
            if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
                task.abort();
            }
        }
    }
}

impl faults::Restarter for ServerCtl {
    fn restart(self: Arc<Self>) -> futures::future::BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            self.stop().await;
            self.listen().await.map_err(|e| e.to_string())
        })
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let sock = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    sock.set_reuseaddr(true)?;
    sock.set_nodelay(true)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

/// A running local cluster.
pub struct LocalCluster {
    cfg: ClusterConfig,
    addr: SocketAddr,
    identity: Option<tls::Identity>,
    store: Arc<Store>,
    faults: Faults,
    server: Arc<ServerCtl>,
    inflight: Arc<inflight::Inflight>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl LocalCluster {
    /// Seed the store, bind the listener and start the kubelets.
    pub async fn start(mut cfg: ClusterConfig) -> Result<LocalCluster, Error> {
        if cfg.zones == 0 {
            return Err(Error::Config("zones must be at least 1".into()));
        }
        if authn::admin_token(&cfg.auth).is_none() {
            let token = match &cfg.data_dir {
                Some(dir) => kept_admin_token(dir)?,
                None => authn::new_admin_token(),
            };
            cfg.auth.tokens.push(auth::StaticToken::new(&token, authn::ADMIN_USER, &[rbac::SYSTEM_MASTERS]));
        }
        if cfg.authorization == authz::AuthorizationMode::AlwaysAllow && !cfg.listen.ip().is_loopback() {
            tracing::warn!(listen = %cfg.listen, "--authorization-mode AlwaysAllow on a non-loopback address: every request, even anonymous, has full access to this cluster");
        }
        let identity = if cfg.tls { Some(tls::Identity::new(cfg.listen, cfg.data_dir.as_deref(), cfg.ca.as_ref())?) } else { None };
        let (store, restored) = match &cfg.data_dir {
            Some(dir) => Store::open(cfg.store.clone(), dir)?,
            None => (Store::new(cfg.store.clone()), false),
        };
        let store = Arc::new(store);
        store.set_kubernetes_version(cfg.kubernetes_version);
        let (access, upkeep) = authz::Access::install(&store, cfg.authorization, &cfg.auth)?;
        if cfg.storage.enabled {
            store.enable_storage_protection();
        }
        if !restored {
            seed(&store, &cfg)?;
        }
        if cfg.devices.enabled() && !restored {
            dra_driver::seed(&store, &cfg.devices)?;
        }
        // A new data directory holds the seeds before the cluster is served.
        store.synced().await?;

        let (ktx, krx) = mpsc::unbounded_channel();
        store.set_kubelet(ktx);
        if restored {
            store.resume_kubelets();
        }
        let (stop, stop_rx) = watch::channel(false);
        let watch_gen = Arc::new(watch::channel(0u64).0);
        let faults = Faults::new(&cfg.faults, store.clone(), watch_gen.clone());

        // Bind first (port 0 → real port), then build the app with the real address.
        let listener = bind(cfg.listen).map_err(|source| Error::Listen { addr: cfg.listen, source })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen { addr: cfg.listen, source })?;
        drop(listener);
        let state = http::AppState { store: store.clone(), faults: faults.clone(), watch_gen: watch_gen.clone(), addr: addr.to_string(), auth: Arc::new(cfg.auth.clone()), openapi: Arc::default() };
        let mut app = http::router(state);
        if store.is_persistent() {
            app = app.layer(axum::middleware::from_fn_with_state(store.clone(), durable_writes));
        }
        // Authorization: a refused request reaches nothing.
        app = app.layer(axum::middleware::from_fn_with_state(access.clone(), authz::middleware));
        // Requests in flight, outermost: the excess costs no more than a 429.
        let inflight = Arc::new(inflight::Inflight::new(cfg.max_requests_inflight, cfg.max_mutating_requests_inflight, authn::Authenticator::new(&cfg.auth, store.clone())));
        app = app.layer(axum::middleware::from_fn_with_state(inflight.clone(), inflight::middleware));
        let acceptor = identity.as_ref().map(tls::Identity::acceptor);
        let server = Arc::new(ServerCtl { addr, app, acceptor, watch_gen, running: tokio::sync::Mutex::new(None) });
        server.listen().await?;
        let weak: std::sync::Weak<dyn faults::Restarter> = Arc::downgrade(&(server.clone() as Arc<dyn faults::Restarter>));
        faults.set_server(weak);

        let kubelet = kubelet::spawn(store.clone(), cfg.kubelet.clone(), krx, stop_rx.clone());
        let upkeep = match &identity {
            Some(id) => upkeep.root_ca(id.ca_pem()),
            None => upkeep,
        };
        let mut tasks = vec![kubelet, access.spawn(upkeep, stop_rx.clone())];
        if cfg.storage.enabled {
            tasks.push(volumes::spawn(store.clone(), cfg.storage.clone(), stop_rx.clone()));
        }
        if cfg.podgc.enabled {
            tasks.push(podgc::spawn(store.clone(), cfg.podgc.clone(), stop_rx.clone()));
        }
        if cfg.controllers.enabled {
            tasks.push(controllers::spawn(store.clone(), cfg.controllers.clone(), stop_rx.clone()));
        }
        if cfg.devices.enabled() {
            tasks.push(dra_driver::spawn(store.clone(), cfg.devices.clone(), stop_rx.clone()));
        }
        let ticker = {
            let store = store.clone();
            let mut stop_rx = stop_rx;
            let every = cfg.bookmark_interval.max(Duration::from_millis(10));
            tokio::spawn(async move {
                let mut iv = tokio::time::interval(every);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop_rx.changed() => break,
                        _ = iv.tick() => store.bookmark_tick(),
                    }
                }
            })
        };
        tasks.push(ticker);
        tasks.push(spawn_event_expiry(store.clone(), cfg.event_ttl, stop.subscribe()));
        Ok(LocalCluster { cfg, addr, identity, store, faults, server, inflight, stop, tasks: Mutex::new(tasks) })
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT` (`http://` when [`ClusterConfig::tls`] is off).
    pub fn url(&self) -> String {
        let scheme = if self.identity.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The cluster's CA and serving certificate (None over plain HTTP).
    pub fn identity(&self) -> Option<&tls::Identity> {
        self.identity.as_ref()
    }

    /// A raw connection to the server (TLS trusting the cluster's CA, or
    /// plain TCP without TLS), for clients that write HTTP themselves.
    pub async fn connect(&self) -> std::io::Result<tls::Conn> {
        tls::connect(self.addr, self.identity.as_ref()).await
    }

    #[cfg(feature = "client")]
    /// A kube client config for this cluster (default namespace
    /// "default"; kube's default retry of 429/503/504 stays on).
    pub fn client_config(&self) -> Result<kube::Config, Error> {
        let uri: axum::http::Uri = self.url().parse().map_err(|e| Error::Client(format!("{e}")))?;
        let mut cfg = kube::Config::new(uri);
        cfg.default_namespace = "default".into();
        cfg.read_timeout = Some(Duration::from_secs(60));
        cfg.auth_info.token = Some(self.admin_token().to_string().into());
        cfg.root_cert = self.identity.as_ref().map(|i| vec![i.ca_der().to_vec()]);
        Ok(cfg)
    }

    #[cfg(feature = "client")]
    /// A kube client for this cluster, from [`LocalCluster::client_config`].
    pub fn client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.client_config()?).map_err(|e| Error::Client(e.to_string()))
    }

    #[cfg(feature = "client")]
    /// A kube client that does not retry 429s, to observe raw answers.
    pub fn client_without_retry(&self) -> Result<kube::Client, Error> {
        let mut cfg = self.client_config()?;
        cfg.default_retry = false;
        kube::Client::try_from(cfg).map_err(|e| Error::Client(e.to_string()))
    }

    /// The kubeconfig YAML pointing at this cluster: its CA
    /// (`certificate-authority-data`) and the admin token.
    pub fn kubeconfig_yaml(&self) -> String {
        let yaml = kubeconfig_yaml_with_token(&self.url(), self.admin_token());
        match &self.identity {
            Some(id) => with_certificate_authority(&yaml, id.ca_pem()),
            None => yaml,
        }
    }

    /// The admin bearer token (a static token in `system:masters`).
    pub fn admin_token(&self) -> &str {
        authn::admin_token(&self.cfg.auth).unwrap_or_default()
    }

    /// Write the kubeconfig to `path`, whole or not at all: it is written
    /// beside it and renamed, so that whoever waits for the file to appear
    /// (`bench --e2e`, a script) never reads half of it.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        write_whole(path, self.kubeconfig_yaml().as_bytes()).map_err(|source| Error::Kubeconfig { path: path.display().to_string(), source })
    }

    /// Fault injection handle.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Direct store access (seeding, assertions).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Requests refused with 429 so far (over the in-flight limits).
    pub fn inflight_refused(&self) -> inflight::Refused {
        self.inflight.refused()
    }

    /// Add a simulated node named `name` with the standard labels and the
    /// configured capacity; its zone continues the round-robin.
    pub fn add_node(&self, name: &str) -> Result<k8s_openapi::api::core::v1::Node, Error> {
        let c = &self.cfg;
        let index = self.store.count(resources::NODES);
        let o = self.store.create(resources::NODES, "", with_node_version(node_json(name, index, c.zones, &c.node_cpu, &c.node_memory, c.node_pods), self.cfg.kubernetes_version))?;
        self.add_csinode(&o)?;
        Ok(o.decode()?)
    }

    /// Add a node with its own capacity; `index` picks its zone among `zones`.
    pub fn add_custom_node(&self, name: &str, index: usize, zones: usize, cpu: &str, memory: &str, pods: u32) -> Result<k8s_openapi::api::core::v1::Node, Error> {
        let o = self.store.create(resources::NODES, "", with_node_version(node_json(name, index, zones, cpu, memory, pods), self.cfg.kubernetes_version))?;
        self.add_csinode(&o)?;
        Ok(o.decode()?)
    }

    /// The CSINode a node's CSI driver registers (storage enabled).
    fn add_csinode(&self, node: &store::Obj) -> Result<(), Error> {
        if self.cfg.storage.enabled {
            self.store.create(resources::CSINODES, "", volumes::csinode_json(node.name(), node.uid(), self.cfg.storage.attach_limit))?;
        }
        Ok(())
    }

    /// The configuration the cluster was started with.
    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }

    /// Stop everything: listener, connections, watches, kubelets, timers.
    pub async fn shutdown(self) {
        self.server.stop().await;
        let _ = self.stop.send(true);
        let tasks = match self.tasks.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.store.close_persistence();
    }

    /// Stop at once, as `kill -9` would: tasks and the listener are
    /// aborted, and the data directory keeps only what is committed (every
    /// acknowledged write; changes still queued are dropped). Its file is
    /// released, so a new cluster can open it at once.
    pub fn abort(self) {
        self.store.halt_persistence();
        let tasks = match self.tasks.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for t in tasks {
            t.abort();
        }
        if let Ok(mut g) = self.server.running.try_lock()
            && let Some(r) = g.take()
        {
            r.task.abort();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Commit what is queued and release the data directory (a new
        // cluster may open it next); later writes of the stopping tasks
        // are not kept.
        self.store.close_persistence();
        let _ = self.stop.send(true);
        self.server.watch_gen.send_modify(|g| *g += 1);
        if let Ok(mut g) = self.server.running.try_lock()
            && let Some(r) = g.take() {
                let _ = r.stop.send(true);
            }
    }
}

/// What a new cluster holds: its namespaces, the system priority classes,
/// the storage seeds and `cfg.nodes` nodes (with their CSINodes).
fn seed(store: &Store, cfg: &ClusterConfig) -> Result<(), Error> {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.create(resources::NAMESPACES, "", json!({"metadata": {"name": ns}}))?;
    }
    for (name, value) in [("system-cluster-critical", 2_000_000_000i64), ("system-node-critical", 2_000_001_000)] {
        store.create(
            resources::PRIORITY_CLASSES,
            "",
            json!({"metadata": {"name": name}, "value": value, "description": "Used for system critical pods that must not be moved from their current node."}),
        )?;
    }
    if cfg.storage.enabled {
        volumes::seed(store)?;
    }
    for i in 0..cfg.nodes {
        let name = format!("node-{i}");
        let node = node_json(&name, i, cfg.zones, &cfg.node_cpu, &cfg.node_memory, cfg.node_pods);
        let node = store.create(resources::NODES, "", with_node_version(node, cfg.kubernetes_version))?;
        if cfg.storage.enabled {
            store.create(resources::CSINODES, "", volumes::csinode_json(&name, node.uid(), cfg.storage.attach_limit))?;
        }
    }
    Ok(())
}

/// With a data directory: a request that wrote (any method but GET,
/// HEAD and OPTIONS, answered with success) is answered once its
/// changes are committed, so that what was acknowledged survives a crash.
async fn durable_writes(
    axum::extract::State(store): axum::extract::State<Arc<Store>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    use axum::response::IntoResponse as _;
    let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let resp = next.run(req).await;
    if read || !resp.status().is_success() {
        return resp;
    }
    match store.synced().await {
        Ok(()) => resp,
        Err(e) => {
            let body = http::status_json(500, "InternalError", &format!("Internal error occurred: {e}"), None);
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
        }
    }
}

/// A kubeconfig for `url` without auth.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: berth\n  cluster:\n    server: {url}\ncontexts:\n- name: berth\n  context:\n    cluster: berth\n    user: berth\n    namespace: default\ncurrent-context: berth\nusers:\n- name: berth\n  user: {{}}\n"
    )
}

/// A kubeconfig for `url` whose user sends the bearer `token`. Note:
/// client-go (so kubectl and helm) sends a user's credentials only to an
/// `https://` server (`IsConfigTransportTLS` on the URL alone): the
/// local cluster serves HTTPS and [`LocalCluster::kubeconfig_yaml`] adds
/// its CA ([`with_certificate_authority`]); over plain HTTP
/// ([`ClusterConfig::tls`] off) kubectl would be `system:anonymous`
/// (kube-rs sends the token either way).
pub fn kubeconfig_yaml_with_token(url: &str, token: &str) -> String {
    kubeconfig_yaml(url).replace("  user: {}\n", &format!("  user:\n    token: {token}\n"))
}

/// `yaml` (a kubeconfig of [`kubeconfig_yaml`]) with the cluster's CA
/// certificate (PEM) as its `certificate-authority-data`.
pub fn with_certificate_authority(yaml: &str, ca_pem: &str) -> String {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    yaml.replacen("  cluster:\n", &format!("  cluster:\n    certificate-authority-data: {data}\n"), 1)
}

/// The admin token kept in `dir` (file `admin-token`, readable by its
/// owner only), made and written there the first time, so that a
/// restarted cluster accepts the kubeconfigs written before.
fn kept_admin_token(dir: &Path) -> Result<String, Error> {
    let path = dir.join("admin-token");
    let err = |source| Error::AdminToken { path: path.display().to_string(), source };
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    std::fs::create_dir_all(dir).map_err(err)?;
    let token = authn::new_admin_token();
    tls::write_private(&path, token.as_bytes()).map_err(err)?;
    Ok(token)
}

/// Write `bytes` to `path` so that a reader never sees part of them: into
/// `<path>.partial`, then renamed over `path` (a script waiting for the
/// kubeconfig to appear would otherwise read it half-written).
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
mod write_tests {
    use super::*;

    #[test]
    fn a_file_is_written_whole_and_replaces_what_was_there() {
        let dir = std::env::temp_dir().join(format!("berth-write-whole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("kubeconfig");
        let partial = dir.join("kubeconfig.partial");
        write_whole(&path, b"first").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read(&path).unwrap_or_default(), b"first");
        assert!(!partial.exists());
        // A stale partial file from a crashed writer and the old file are both replaced.
        std::fs::write(&partial, b"stale").unwrap_or_else(|e| panic!("{e}"));
        write_whole(&path, b"second").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read(&path).unwrap_or_default(), b"second");
        assert!(!partial.exists());
        // A directory that does not exist is an error, not a panic.
        assert!(write_whole(&dir.join("missing").join("kubeconfig"), b"x").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
