//! DynamicResources' PreBind and PostFilter writes: ResourceClaims
//! (finalizer, allocation and reservation), the extended-resource claim,
//! deallocation.

use std::time::{Duration, Instant};

use futures::TryFutureExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;

use berth_model::PodInfo;

use super::guarded::{Patience, Subject, WriteKind, Written};
use super::{api_code, stop, PreBindStop, Writer};


/// The finalizer that keeps an allocated claim until it is deallocated
/// (upstream `resourceapi.Finalizer`).
pub const CLAIM_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// The annotation of the claim PreBind creates for extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";
/// Attempts at one claim when it conflicts (409) with another writer
/// (upstream retries with `retry.DefaultRetry`: 5 steps).
const CLAIM_WRITE_TRIES: u32 = 5;

/// What the claim as the API shows it asks of PreBind next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ClaimNext {
    /// Allocated as we decided (or allocated already, for a reservation)
    /// and reserved for the pod: nothing to write.
    Done,
    /// The delete-protection finalizer must be added first.
    Finalizer,
    /// The status update (allocation and reservation) is due.
    Status,
    /// PreBind cannot succeed: the reason.
    Fail(String),
}

/// The devices of an allocation, as (request, driver, pool, device), sorted.
fn allocated_devices(a: &k8s_openapi::api::resource::v1::AllocationResult) -> Vec<(String, String, String, String)> {
    let mut v: Vec<_> = a.devices.iter().flat_map(|d| d.results.iter().flatten()).map(|r| (r.request.clone(), r.driver.clone(), r.pool.clone(), r.device.clone())).collect();
    v.sort();
    v
}

/// Decides PreBind's next step for `claim` (namespace/name `key`, whose uid
/// must be `uid`): write `ours` (None: the claim is allocated already) and a
/// reservation for the pod `pod_uid` (upstream `bindClaim`).
pub(super) fn claim_next(claim: &k8s_openapi::api::resource::v1::ResourceClaim, key: &str, uid: &str, ours: Option<&k8s_openapi::api::resource::v1::AllocationResult>, pod_uid: &str) -> ClaimNext {
    let m = &claim.metadata;
    if m.uid.as_deref() != Some(uid) || m.deletion_timestamp.is_some() {
        return ClaimNext::Fail(format!("claim {key} got deleted in the meantime"));
    }
    let status = claim.status.as_ref();
    let current = status.and_then(|s| s.allocation.as_ref());
    let reserved = status.and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| r.iter().any(|c| c.uid == pod_uid));
    match (ours, current) {
        (Some(a), Some(c)) if allocated_devices(a) == allocated_devices(c) => {
            if reserved { ClaimNext::Done } else { ClaimNext::Status }
        }
        (Some(_), Some(_)) => ClaimNext::Fail(format!("claim {key} got allocated elsewhere in the meantime")),
        (Some(_), None) => {
            if m.finalizers.iter().flatten().any(|f| f == CLAIM_FINALIZER) { ClaimNext::Status } else { ClaimNext::Finalizer }
        }
        (None, Some(_)) => {
            if reserved { ClaimNext::Done } else { ClaimNext::Status }
        }
        (None, None) => ClaimNext::Fail(format!("claim {key} got deallocated in the meantime")),
    }
}

/// The claim as the scheduler's cache shows it (the API's view, nothing
/// assumed), as the base of PreBind's first conditional write
/// ([`Writer::allocate_claim`]): its uid, resourceVersion, finalizers and
/// allocation. None (read the claim first) when the cache has no
/// resourceVersion, the claim is being deleted, or it has reservations:
/// the cache keeps a consumer's resource, name and uid but not its API
/// group, and the status write carries the whole reservedFor list.
pub fn seen_claim(c: &berth_engine::cache::devices::Claim) -> Option<ResourceClaim> {
    if c.resource_version.is_empty() || c.deleting || !c.reserved_for.is_empty() {
        return None;
    }
    let mut claim = ResourceClaim::default();
    let m = &mut claim.metadata;
    m.namespace = Some(c.namespace.clone());
    m.name = Some(c.name.clone());
    m.uid = Some(c.uid.clone());
    m.resource_version = Some(c.resource_version.clone());
    m.finalizers = (!c.finalizers.is_empty()).then(|| c.finalizers.clone());
    claim.status = Some(k8s_openapi::api::resource::v1::ResourceClaimStatus { allocation: c.allocation.clone(), ..Default::default() });
    Some(claim)
}

/// The status PreBind writes: the allocation (when it makes one) and the
/// reservedFor list with the pod added, under the claim's uid and
/// resourceVersion (a claim changed since it was read answers 409).
pub(super) fn claim_status_patch(claim: &k8s_openapi::api::resource::v1::ResourceClaim, ours: Option<&serde_json::Value>, pod_name: &str, pod_uid: &str) -> serde_json::Value {
    let mut reserved: Vec<serde_json::Value> = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).into_iter().flatten().map(|r| json!({"resource": r.resource, "name": r.name, "uid": r.uid, "apiGroup": r.api_group})).collect();
    reserved.push(json!({"resource": "pods", "name": pod_name, "uid": pod_uid}));
    let mut status = json!({ "reservedFor": reserved });
    if let Some(a) = ours {
        status["allocation"] = a.clone();
    }
    json!({"metadata": {"uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version}, "status": status})
}

/// What PostFilter's deallocation does with the claim as read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum DeallocNext {
    /// Clear the allocation (conditional on what was read).
    Write,
    /// Leave the claim alone, for this reason.
    Skip(&'static str),
}

/// Decides the deallocation `d` on `claim` as read (upstream's PostFilter
/// condition): the same claim (uid), allocated, and reserved for no one or
/// only for the pod that could not be scheduled.
pub(super) fn dealloc_next(claim: &k8s_openapi::api::resource::v1::ResourceClaim, d: &berth_engine::framework::DeallocateClaim) -> DeallocNext {
    if claim.metadata.uid.as_deref() != Some(d.uid.as_str()) {
        return DeallocNext::Skip("the claim was re-created");
    }
    let status = claim.status.as_ref();
    if status.and_then(|s| s.allocation.as_ref()).is_none() {
        return DeallocNext::Skip("the claim is not allocated");
    }
    let reserved = status.and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
    if reserved.iter().any(|r| r.uid != d.pod_uid) {
        return DeallocNext::Skip("the claim is reserved for another consumer");
    }
    DeallocNext::Write
}

/// The deallocation: status.allocation, reservedFor and devices cleared,
/// under the claim's uid and resourceVersion (a claim changed since it was
/// read answers 409).
pub(super) fn dealloc_patch(claim: &k8s_openapi::api::resource::v1::ResourceClaim) -> serde_json::Value {
    json!({"metadata": {"uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version},
        "status": {"allocation": null, "reservedFor": null, "devices": null}})
}

/// The pod's status.extendedResourceClaimStatus.requestMappings: each
/// (container, resource, request) of `mappings` whose container is unnamed
/// (the engine sees the pod's summed requests) names every container (init
/// or regular) that asks for the resource. Upstream makes one request per
/// container; berth's claim has one request per resource, which each such
/// container maps to.
pub(super) fn request_mappings(pod: &core::Pod, mappings: &[(String, String, String)]) -> Vec<serde_json::Value> {
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()));
    let asks = |c: &core::Container, resource: &str| {
        let r = c.resources.as_ref();
        let nonzero = |l: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| l.and_then(|l| l.get(resource)).is_some_and(|q| q.0.chars().take_while(|c| c.is_ascii_digit() || *c == '.').any(|c| matches!(c, '1'..='9')));
        nonzero(r.and_then(|r| r.requests.as_ref())) || nonzero(r.and_then(|r| r.limits.as_ref()))
    };
    let mut out = Vec::new();
    for (container, resource, request) in mappings {
        let names: Vec<&str> = if container.is_empty() { containers.clone().filter(|c| asks(c, resource)).map(|c| c.name.as_str()).collect() } else { vec![container.as_str()] };
        for c in names {
            out.push(json!({"containerName": c, "resourceName": resource, "requestName": request}));
        }
    }
    out
}

/// The pod's extended-resource claim, when one exists and is not being
/// deleted: annotated, with the pod (`pod_uid`) as controller.
async fn find_extended_claim(claims: &Api<k8s_openapi::api::resource::v1::ResourceClaim>, pod_uid: &str) -> Result<Option<k8s_openapi::api::resource::v1::ResourceClaim>, kube::Error> {
    let all = claims.list(&kube::api::ListParams::default()).await?;
    Ok(all.items.into_iter().find(|c| {
        let m = &c.metadata;
        m.deletion_timestamp.is_none()
            && m.annotations.as_ref().is_some_and(|a| a.get(EXTENDED_CLAIM_ANNOTATION).is_some_and(|v| v == "true"))
            && m.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == pod_uid)
    }))
}

/// The reservedFor list without the pod `pod_uid` (None when nothing is
/// left), or None-of-None when the pod holds no entry (nothing to write).
pub(super) fn reserved_without(claim: &k8s_openapi::api::resource::v1::ResourceClaim, pod_uid: &str) -> Option<Option<Vec<serde_json::Value>>> {
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
    if !reserved.iter().any(|r| r.uid == pod_uid) {
        return None;
    }
    let rest: Vec<serde_json::Value> = reserved.iter().filter(|r| r.uid != pod_uid).map(|r| json!({"resource": r.resource, "name": r.name, "uid": r.uid, "apiGroup": r.api_group})).collect();
    Some((!rest.is_empty()).then_some(rest))
}

/// How one claim write ended.
enum ClaimWrite<T> {
    /// Written: the reply (None when the outcome was unknown and the
    /// write was found landed by reading it back).
    Done(Option<T>),
    /// Conflict, or an unknown outcome that did not land: read again.
    Again(String),
    /// Known not written, for this reason.
    Refused(String),
}

impl Writer {
    pub(super) fn observe_allocation(&self, what: &str, r: &Result<(), PreBindStop>, t: Instant) {
        let Some(m) = self.metrics.get() else { return };
        let result = match r {
            Ok(()) => what,
            Err(PreBindStop::Failed(_)) => "error",
            Err(PreBindStop::Gone) => "pod_gone",
            Err(PreBindStop::NotLeader) => "not_leader",
        };
        m.dra_allocation_attempts.with_label_values(&[result]).inc();
        m.dra_allocation_duration.with_label_values(&[result]).observe(t.elapsed().as_secs_f64());
    }

    /// One claim write, guarded ([`Writer::guarded`]); an unknown outcome
    /// is resolved by `landed` (reading the claim back).
    async fn claim_write<T, W, WFut, L, LFut>(&self, deadline: tokio::time::Instant, subject: &str, write: W, landed: L) -> Result<ClaimWrite<T>, PreBindStop>
    where
        W: FnOnce() -> WFut,
        WFut: std::future::Future<Output = Result<T, kube::Error>>,
        L: Fn() -> LFut,
        LFut: std::future::Future<Output = Result<bool, kube::Error>>,
    {
        Ok(match self.guarded(WriteKind::Claim, deadline, Patience::Until(deadline), Subject::Object(subject), write, landed).await? {
            Written::Done(reply) => ClaimWrite::Done(Some(reply)),
            Written::ReadBack { found: true, .. } => ClaimWrite::Done(None),
            Written::ReadBack { why, .. } => ClaimWrite::Again(why),
            Written::Refused(e) if api_code(&e) == Some(409) => ClaimWrite::Again(e.to_string()),
            Written::Refused(e) => ClaimWrite::Refused(e.to_string()),
            Written::NotLeader => return Err(PreBindStop::NotLeader),
        })
    }

    /// DynamicResources' PreBind for one claim (upstream `bindClaim`): the
    /// delete-protection finalizer when missing, then in one status update
    /// the allocation (when `allocation` is Some) and the pod's reservedFor
    /// entry, each conditional on the claim's uid and resourceVersion.
    ///
    /// The first write is made against `seen`, the claim as the scheduler's
    /// cache last showed it (upstream writes against its informer's claim
    /// too), and the status write against the finalizer write's reply: no
    /// read on the way when the cache is current. Only the API's answer
    /// decides that nothing is left to write or that PreBind fails: a
    /// verdict other than a write on `seen` is checked on a fresh read. A
    /// conflict (409), meaning the cache was behind or another writer came
    /// first, or a write whose outcome is unknown, is resolved by reading
    /// the claim back: allocated as decided and reserved for the pod, it is
    /// done; allocated otherwise, deleted or re-created, PreBind fails (the
    /// loop forgets the assumed devices and retries the pod).
    #[allow(clippy::too_many_arguments)] // the fields of ApiWrite::AllocateClaim, and the claim as seen
    pub(super) async fn allocate_claim(&self, ns: &str, name: &str, uid: &str, allocation: Option<&serde_json::Value>, pod_name: &str, pod_uid: &str, seen: Option<k8s_openapi::api::resource::v1::ResourceClaim>, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let key = format!("{ns}/{name}");
        let ours: Option<res::AllocationResult> = match allocation {
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| stop(format!("claim {key}: the allocation cannot be written: {e}")))?),
            None => None,
        };
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), ns);
        let pp = PatchParams::default();
        let judge = |c: &res::ResourceClaim| claim_next(c, &key, uid, ours.as_ref(), pod_uid);
        // Landed: the finalizer is there (`finalizer`), or the claim is
        // allocated as decided and reserved for the pod.
        let landed = |finalizer: bool| {
            let (claims, judge) = (&claims, &judge);
            move || async move {
                self.count(|c| c.claim_reads += 1);
                let c = claims.get_opt(name).await?;
                Ok::<bool, kube::Error>(c.as_ref().is_some_and(|c| {
                    let next = judge(c);
                    next == ClaimNext::Done || (finalizer && next == ClaimNext::Status)
                }))
            }
        };
        // The claim to judge next and whether the API just gave it (a read
        // or a write's reply); None: read it.
        let mut next: Option<(res::ResourceClaim, bool)> = seen.map(|c| (c, false));
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            let (claim, fresh) = match next.take() {
                Some(c) => c,
                None => match self.read(deadline, || {
                    self.count(|c| c.claim_reads += 1);
                    claims.get_opt(name)
                })
                .await?
                {
                    Some(c) => (c, true),
                    None => return Err(stop(format!("claim {key} got deleted in the meantime"))),
                },
            };
            match judge(&claim) {
                ClaimNext::Done if fresh => return Ok(()),
                ClaimNext::Fail(m) if fresh => return Err(stop(m)),
                // The cache may be behind the API: read before deciding.
                ClaimNext::Done | ClaimNext::Fail(_) => {}
                ClaimNext::Finalizer => {
                    let mut finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
                    finalizers.push(CLAIM_FINALIZER.to_string());
                    let patch = json!({"metadata": {"uid": uid, "resourceVersion": claim.metadata.resource_version, "finalizers": finalizers}});
                    let mp = Patch::Merge(&patch);
                    match self.claim_write(deadline, &key, || claims.patch(name, &pp, &mp), landed(true)).await? {
                        // The status is written against the reply (or, found
                        // landed after an unknown outcome, a fresh read).
                        ClaimWrite::Done(reply) => next = reply.map(|c| (c, true)),
                        ClaimWrite::Again(m) => last = m,
                        ClaimWrite::Refused(m) => return Err(stop(format!("add finalizer to claim {key}: {m}"))),
                    }
                }
                ClaimNext::Status => {
                    let patch = claim_status_patch(&claim, allocation, pod_name, pod_uid);
                    let mp = Patch::Merge(&patch);
                    match self.claim_write(deadline, &key, || claims.patch_status(name, &pp, &mp).map_ok(|_| ()), landed(false)).await? {
                        ClaimWrite::Done(_) => return Ok(()),
                        ClaimWrite::Again(m) => last = m,
                        ClaimWrite::Refused(m) if allocation.is_some() => return Err(stop(format!("add allocation and reservation to claim {key}: {m}"))),
                        ClaimWrite::Refused(m) => return Err(stop(format!("add reservation to claim {key}: {m}"))),
                    }
                }
            }
        }
        Err(stop(format!("claim {key}: {last}")))
    }

    /// DynamicResources' PostFilter write (leader only, through the lease
    /// permit): deallocates a claim allocated where the pod cannot go, so
    /// that the claim's update requeues the pod and it allocates anew. Each
    /// try reads the claim fresh and writes only when [`dealloc_next`]
    /// allows; a conflict or an unknown outcome is read back. Nothing waits
    /// for it: a failure is logged (the pod stays unschedulable until some
    /// other event).
    pub async fn deallocate_claim(&self, d: berth_engine::framework::DeallocateClaim) {
        let w = self.clone();
        self.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let key = format!("{}/{}", d.namespace, d.name);
            match w.deallocate(&d, deadline).await {
                Ok(Some(why)) => tracing::info!(claim = %key, %why, "claim left allocated"),
                Ok(None) => tracing::info!(claim = %key, "claim deallocated (usable by no node for its pod)"),
                Err(PreBindStop::NotLeader | PreBindStop::Gone) => {}
                Err(PreBindStop::Failed(e)) => tracing::warn!(claim = %key, error = %e, "claim deallocation failed"),
            }
        })
        .await;
    }

    /// [`Writer::deallocate_claim`]'s work: None when deallocated, else why not.
    async fn deallocate(&self, d: &berth_engine::framework::DeallocateClaim, deadline: tokio::time::Instant) -> Result<Option<&'static str>, PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), &d.namespace);
        let pp = PatchParams::default();
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            let Some(claim) = self.read(deadline, || claims.get_opt(&d.name)).await? else { return Ok(Some("the claim is gone")) };
            if let DeallocNext::Skip(why) = dealloc_next(&claim, d) {
                return Ok(Some(why));
            }
            let patch = dealloc_patch(&claim);
            let mp = Patch::Merge(&patch);
            // Landed: the claim (this uid) is no longer allocated.
            let landed = || async {
                let c = claims.get_opt(&d.name).await?;
                Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(d.uid.as_str()) || c.status.and_then(|s| s.allocation).is_none()))
            };
            match self.claim_write(deadline, &d.name, || claims.patch_status(&d.name, &pp, &mp).map_ok(|_| ()), landed).await? {
                ClaimWrite::Done(_) => return Ok(None),
                ClaimWrite::Again(m) => last = m,
                ClaimWrite::Refused(m) => return Err(stop(format!("deallocate claim {}/{}: {m}", d.namespace, d.name))),
            }
        }
        Err(stop(format!("deallocate claim {}/{}: {last}", d.namespace, d.name)))
    }

    /// Upstream's Unreserve for the extended-resource claim PreBind created,
    /// once the bind failed: the pod's reservedFor entry removed (so that the
    /// claim controller lets the claim go), then the claim deleted under its
    /// uid. Unknown outcomes are read back; failures are logged (the next
    /// attempt finds and reuses a claim left behind).
    pub(super) async fn delete_extended_claim(&self, pod: &PodInfo) {
        use k8s_openapi::api::resource::v1 as res;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), &pod.namespace);
        let pp = PatchParams::default();
        // The pod's reservedFor entry goes first, on a fresh read each try:
        // the claim controller may change the claim meanwhile (409).
        let mut tries = 0;
        let (name, uid) = loop {
            let Ok(Some(claim)) = self.read(deadline, || find_extended_claim(&claims, &pod.uid)).await else { return };
            let name = claim.metadata.name.clone().unwrap_or_default();
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            let Some(rest) = reserved_without(&claim, &pod.uid) else { break (name, uid) };
            let patch = json!({"metadata": {"uid": uid, "resourceVersion": claim.metadata.resource_version}, "status": {"reservedFor": rest}});
            let mp = Patch::Merge(&patch);
            let landed = || async {
                let c = claims.get_opt(&name).await?;
                Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()) || reserved_without(&c, &pod.uid).is_none()))
            };
            tries += 1;
            match self.claim_write(deadline, &name, || claims.patch_status(&name, &pp, &mp).map_ok(|_| ()), landed).await {
                Ok(ClaimWrite::Done(_)) => break (name, uid),
                Ok(ClaimWrite::Again(_)) if tries < CLAIM_WRITE_TRIES => continue,
                Ok(ClaimWrite::Again(m) | ClaimWrite::Refused(m)) => {
                    tracing::warn!(claim = %format!("{}/{name}", pod.namespace), error = %m, "extended-resource claim left behind: its reservation could not be removed");
                    return;
                }
                Err(_) => return,
            }
        };
        let key = format!("{}/{name}", pod.namespace);
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }), ..DeleteParams::default() };
        let landed = || async {
            let c = claims.get_opt(&name).await?;
            Ok::<bool, kube::Error>(c.is_none_or(|c| c.metadata.uid.as_deref() != Some(uid.as_str()) || c.metadata.deletion_timestamp.is_some()))
        };
        match self.claim_write(deadline, &name, || claims.delete(&name, &dp).map_ok(|_| ()), landed).await {
            Ok(ClaimWrite::Done(_)) => tracing::info!(claim = %key, pod = %pod.key(), "extended-resource claim deleted after a failed bind"),
            Ok(ClaimWrite::Again(m) | ClaimWrite::Refused(m)) => tracing::warn!(claim = %key, error = %m, "extended-resource claim left behind"),
            Err(_) => {}
        }
    }

    /// The claim of the pod's extended resources a DeviceClass backs
    /// (DRAExtendedResource): found when an earlier attempt created it (the
    /// annotation, the pod as controller), else created from `claim`
    /// (without its status); then allocated and reserved for the pod as any
    /// claim ([`Writer::allocate_claim`]), and recorded in the pod's
    /// status.extendedResourceClaimStatus.
    pub(super) async fn create_extended_claim(&self, ns: &str, pod_name: &str, pod_uid: &str, claim: &serde_json::Value, mappings: &[(String, String, String)], deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        use k8s_openapi::api::resource::v1 as res;
        let claims: Api<res::ResourceClaim> = Api::namespaced(self.client.clone(), ns);
        let find = || find_extended_claim(&claims, pod_uid);
        let mut body = claim.clone();
        let allocation = body.as_object_mut().and_then(|o| o.remove("status")).and_then(|mut st| st.get_mut("allocation").map(serde_json::Value::take));
        let body: res::ResourceClaim = serde_json::from_value(body).map_err(|e| stop(format!("the extended-resource claim cannot be written: {e}")))?;
        let mut created = self.read(deadline, find).await?;
        let mut last = String::new();
        for _ in 0..CLAIM_WRITE_TRIES {
            if created.is_some() {
                break;
            }
            let pp = PostParams::default();
            match self.guarded(WriteKind::Claim, deadline, Patience::Until(deadline), Subject::Object(pod_name), || claims.create(&pp, &body), find).await? {
                Written::Done(c) => created = Some(c),
                Written::Refused(e) => return Err(stop(format!("create claim for extended resources: {e}"))),
                // Found, an earlier try created it; not found, try again.
                Written::ReadBack { why, found } => {
                    last = why;
                    created = found;
                }
                Written::NotLeader => return Err(PreBindStop::NotLeader),
            }
        }
        let Some(c) = created else { return Err(stop(format!("create claim for extended resources: {last}"))) };
        let name = c.metadata.name.clone().unwrap_or_default();
        let uid = c.metadata.uid.clone().unwrap_or_default();
        self.allocate_claim(ns, &name, &uid, allocation.as_ref(), pod_name, pod_uid, Some(c), deadline).await?;
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), ns);
        let pod = self.read(deadline, || pods.get_opt(pod_name)).await?.filter(|p| p.metadata.uid.as_deref() == Some(pod_uid)).ok_or(PreBindStop::Gone)?;
        let mappings = request_mappings(&pod, mappings);
        let patch = json!({"status": {"extendedResourceClaimStatus": {"resourceClaimName": name, "requestMappings": mappings}}});
        let pp = PatchParams::default();
        let mp = Patch::Merge(&patch);
        let landed = || async {
            let p = pods.get_opt(pod_name).await?;
            let v = p.map(|p| serde_json::to_value(p.status).unwrap_or_default()).unwrap_or_default();
            Ok::<bool, kube::Error>(v.pointer("/extendedResourceClaimStatus/resourceClaimName").and_then(serde_json::Value::as_str) == Some(name.as_str()))
        };
        match self.claim_write(deadline, pod_name, || pods.patch_status(pod_name, &pp, &mp).map_ok(|_| ()), landed).await? {
            ClaimWrite::Done(_) => Ok(()),
            ClaimWrite::Again(m) | ClaimWrite::Refused(m) => Err(stop(format!("update pod {ns}/{pod_name} extended resource claim status: {m}"))),
        }
    }
}
