//! The StatefulSet controller (upstream `pkg/controller/statefulset`), in
//! short: pods `<set>-<ordinal>` for the ordinals `start..start+replicas`
//! (`spec.ordinals.start`), each with the labels
//! `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//! `controller-revision-hash`, hostname = its name and subdomain =
//! `serviceName`, and one claim per `volumeClaimTemplates` entry named
//! `<template>-<set>-<ordinal>` (labelled with the selector's matchLabels
//! over the template's), created before the pod and mounted in place of the
//! template's volume of the same name.
//!
//! `OrderedReady` (the default) creates ordinal i+1 only once 0..i are
//! Running and Ready, and removes surplus pods from the highest ordinal,
//! one at a time, only while all others are healthy; `Parallel` creates and
//! deletes without waiting. A terminal pod is deleted and recreated.
//! `RollingUpdate` (the default) replaces pods of an older revision from
//! the highest ordinal down to `partition`, one at a time while all pods
//! are healthy; `OnDelete` waits for the user. Claims stay unless
//! `persistentVolumeClaimRetentionPolicy` says Delete: `whenScaled` deletes
//! a surplus ordinal's claims once its pod is gone, `whenDeleted` the set's
//! claims when the set goes.
//!
//! Beyond `revisionHistoryLimit` (default 10) ControllerRevisions that
//! are neither the current nor the update revision nor used by a pod, the
//! oldest are deleted (upstream's `truncateHistory`).
//!
//! Simplified: no `minReadySeconds` (ready is available), no
//! `maxUnavailable` above one, no `collisionCount` (the template hash is
//! not salted).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::jsonptr::Pointer as _;
use serde_json::{Value, json};

use super::{CONTROLLER_REVISION_HASH, Owned, active, delete_obj, ensure_revision, history_limit, is_deleting, list, meta_map, pod_from_template, revision_template, revisions_oldest_first, s, template_hash, write_status};
use crate::resources::{CONTROLLERREVISIONS, PODS, PVCS, STATEFULSETS};
use crate::store::{Obj, Store};

/// The label naming a StatefulSet pod (its own name).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label carrying a StatefulSet pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of `pod` if it is named `<set>-<n>`.
fn ordinal(set: &str, pod: &str) -> Option<i64> {
    let n = pod.strip_prefix(set)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

/// The names of the claim templates.
fn claim_templates(set: &Value) -> Vec<&Value> {
    set.at("/spec/volumeClaimTemplates").and_then(Value::as_array).map(|a| a.iter().filter(|t| !s(t, "/metadata/name").is_empty()).collect()).unwrap_or_default()
}

fn claim_name(template: &Value, set: &str, ordinal: i64) -> String {
    format!("{}-{set}-{ordinal}", s(template, "/metadata/name"))
}

/// The claims of one ordinal, as upstream `getPersistentVolumeClaims` makes them.
fn claims_for(set: &Obj, ordinal: i64) -> Vec<Value> {
    let match_labels = set.value.at("/spec/selector/matchLabels").and_then(Value::as_object).cloned().unwrap_or_default();
    claim_templates(&set.value)
        .into_iter()
        .map(|t| {
            let mut meta = t.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
            meta.insert("name".into(), json!(claim_name(t, set.name(), ordinal)));
            meta.insert("namespace".into(), json!(set.namespace()));
            meta.remove("resourceVersion");
            meta.remove("uid");
            let mut labels = meta.get("labels").and_then(Value::as_object).cloned().unwrap_or_default();
            for (k, v) in &match_labels {
                labels.insert(k.clone(), v.clone());
            }
            meta.insert("labels".into(), Value::Object(labels));
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": t.get("spec").cloned().unwrap_or_else(|| json!({}))})
        })
        .collect()
}

/// The pod of one ordinal from `template` of `revision`.
fn new_pod(set: &Obj, template: &Value, revision: &str, ordinal: i64) -> Value {
    let name = format!("{}-{ordinal}", set.name());
    let mut pod = pod_from_template(template, "StatefulSet", set, Some(&name));
    if let Some(l) = meta_map(&mut pod, "labels") {
        l.insert(POD_NAME_LABEL.into(), json!(name));
        l.insert(POD_INDEX_LABEL.into(), json!(ordinal.to_string()));
        l.insert(CONTROLLER_REVISION_HASH.into(), json!(revision));
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("hostname".into(), json!(name));
        let service = s(&set.value, "/spec/serviceName");
        if !service.is_empty() {
            spec.insert("subdomain".into(), json!(service));
        }
        let templates = claim_templates(&set.value);
        if !templates.is_empty() {
            let vols = spec.entry("volumes").or_insert_with(|| json!([]));
            if !vols.is_array() {
                *vols = json!([]);
            }
            if let Some(vols) = vols.as_array_mut() {
                for t in templates {
                    let vname = s(t, "/metadata/name");
                    vols.retain(|v| s(v, "/name") != vname);
                    vols.push(json!({"name": vname, "persistentVolumeClaim": {"claimName": claim_name(t, set.name(), ordinal)}}));
                }
            }
        }
    }
    pod
}

/// Create the ordinal's claims that do not exist yet. False when one could
/// not be created (the pod must wait) or one is being deleted.
fn ensure_claims(store: &Store, set: &Obj, ordinal: i64) -> bool {
    for claim in claims_for(set, ordinal) {
        let name = s(&claim, "/metadata/name").to_string();
        match store.get(PVCS, set.namespace(), &name) {
            Ok(existing) => {
                if is_deleting(&existing.value) {
                    return false;
                }
            }
            Err(_) => {
                if let Err(e) = store.create(PVCS, set.namespace(), claim)
                    && e.code() != 409
                {
                    tracing::debug!(statefulset = set.name(), claim = name, error = %e, "creating a claim failed");
                    return false;
                }
            }
        }
    }
    true
}

fn retention(set: &Value, when: &str) -> bool {
    s(set, &format!("/spec/persistentVolumeClaimRetentionPolicy/{when}")) == "Delete"
}

fn healthy(p: &Value) -> bool {
    crate::resources::pod_healthy(p)
}

fn revision_of(p: &Value) -> &str {
    s(p, &format!("/metadata/labels/{CONTROLLER_REVISION_HASH}"))
}

/// The set is gone: with `whenDeleted: Delete`, its claims go too (its pods
/// and revisions go through their ownerReferences).
pub(super) fn deleted(store: &Store, set: &Obj) {
    if !retention(&set.value, "whenDeleted") {
        return;
    }
    let templates = claim_templates(&set.value);
    for c in list(store, PVCS, Some(set.namespace())) {
        let owned = templates.iter().any(|t| {
            c.name().strip_prefix(s(t, "/metadata/name")).and_then(|rest| rest.strip_prefix('-')).and_then(|rest| ordinal(set.name(), rest)).is_some()
        });
        if owned && !is_deleting(&c.value) {
            delete_obj(store, PVCS, &c);
        }
    }
}

/// One pass over every StatefulSet.
pub(super) fn sync(store: &Store, pods: &Owned, burst: usize) {
    let revisions = Owned::of(store, CONTROLLERREVISIONS);
    for set in list(store, STATEFULSETS, None) {
        if !is_deleting(&set.value) {
            sync_one(store, pods, &revisions, &set, burst);
        }
    }
}

fn sync_one(store: &Store, pods: &Owned, revisions: &Owned, set: &Arc<Obj>, burst: usize) {
    let v = &set.value;
    let replicas = v.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0);
    let start = v.at("/spec/ordinals/start").and_then(Value::as_i64).unwrap_or(0).max(0);
    let parallel = s(v, "/spec/podManagementPolicy") == "Parallel";
    let on_delete = s(v, "/spec/updateStrategy/type") == "OnDelete";
    let partition = v.at("/spec/updateStrategy/rollingUpdate/partition").and_then(Value::as_i64).unwrap_or(0).max(0);
    let template = v.at("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let Some(update_revision) = ensure_revision(store, revisions, "StatefulSet", set, &template_hash(&template), &template) else { return };
    let current_revision = match s(v, "/status/currentRevision") {
        "" => update_revision.clone(),
        r => r.to_string(),
    };
    // Pods by ordinal; pods of other names are surplus too.
    let mut in_range: BTreeMap<i64, &Arc<Obj>> = BTreeMap::new();
    let mut condemned: Vec<(i64, &Arc<Obj>)> = Vec::new();
    for p in pods.of_owner(set) {
        match ordinal(set.name(), p.name()) {
            Some(o) if o >= start && o < start + replicas => {
                in_range.insert(o, p);
            }
            o => condemned.push((o.unwrap_or(i64::MAX), p)),
        }
    }
    condemned.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
    let mut budget = burst;
    let mut blocked = false;
    let mut all_healthy = true;
    for ord in start..start + replicas {
        if budget == 0 {
            blocked = true;
            break;
        }
        match in_range.get(&ord) {
            None => {
                // A pod below the partition keeps the current revision.
                let (tmpl, rev) = if ord < start + partition && current_revision != update_revision {
                    match revision_template(store, set.namespace(), &current_revision) {
                        Some(t) => (t, current_revision.clone()),
                        None => (template.clone(), update_revision.clone()),
                    }
                } else {
                    (template.clone(), update_revision.clone())
                };
                all_healthy = false;
                if !ensure_claims(store, set, ord) {
                    blocked = true;
                    if parallel {
                        continue;
                    }
                    break;
                }
                budget -= 1;
                if let Err(e) = store.create(PODS, set.namespace(), new_pod(set, &tmpl, &rev, ord)) {
                    tracing::debug!(statefulset = set.name(), ordinal = ord, error = %e, "creating a pod failed");
                }
                if !parallel {
                    blocked = true;
                    break;
                }
            }
            Some(p) if !active(&p.value) => {
                // Terminal: delete it, recreate it on a later pass.
                all_healthy = false;
                if !is_deleting(&p.value) {
                    budget -= 1;
                    delete_obj(store, PODS, p);
                }
                if !parallel {
                    blocked = true;
                    break;
                }
            }
            Some(p) if !healthy(&p.value) => {
                all_healthy = false;
                if !parallel {
                    blocked = true;
                    break;
                }
            }
            Some(_) => {}
        }
    }
    // Surplus pods, from the highest ordinal.
    if !blocked {
        for (_, p) in &condemned {
            if budget == 0 {
                break;
            }
            if is_deleting(&p.value) {
                if parallel {
                    continue;
                }
                blocked = true;
                break;
            }
            budget -= 1;
            delete_obj(store, PODS, p);
            if !parallel {
                blocked = true;
                break;
            }
        }
    }
    // Rolling update: the highest outdated ordinal, one at a time while all are healthy.
    if !blocked && !on_delete && all_healthy && condemned.is_empty() {
        let outdated = in_range.iter().rev().filter(|(o, _)| **o >= start + partition).find(|(_, p)| revision_of(&p.value) != update_revision);
        if let Some((_, p)) = outdated {
            delete_obj(store, PODS, p);
        }
    }
    // whenScaled: Delete: a surplus ordinal's claims go once its pod is gone.
    if retention(v, "whenScaled") && !claim_templates(v).is_empty() {
        let live: HashSet<i64> = pods.of_owner(set).filter_map(|p| ordinal(set.name(), p.name())).collect();
        for c in list(store, PVCS, Some(set.namespace())) {
            let ord = claim_templates(v).iter().find_map(|t| c.name().strip_prefix(s(t, "/metadata/name")).and_then(|r| r.strip_prefix('-')).and_then(|r| ordinal(set.name(), r)));
            if let Some(o) = ord
                && (o < start || o >= start + replicas)
                && !live.contains(&o)
                && !is_deleting(&c.value)
            {
                delete_obj(store, PVCS, &c);
            }
        }
    }
    // Status, from the pods seen at the start of this pass (as upstream).
    let counted: Vec<&Arc<Obj>> = pods.of_owner(set).filter(|p| !is_deleting(&p.value)).collect();
    let ready = counted.iter().filter(|p| healthy(&p.value)).count() as i64;
    let updated = counted.iter().filter(|p| revision_of(&p.value) == update_revision).count() as i64;
    let mut current = counted.iter().filter(|p| revision_of(&p.value) == current_revision).count() as i64;
    let total = counted.len() as i64;
    let mut current_revision = current_revision;
    if !on_delete && updated == replicas && total == replicas && ready == replicas {
        current_revision = update_revision.clone();
        current = updated;
    }
    let status = json!({
        "observedGeneration": v.at("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": total,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    });
    write_status(store, STATEFULSETS, set, status);
    truncate_history(store, pods, revisions, set, &current_revision, &update_revision);
}

/// Upstream's `truncateHistory`: the revisions that are neither `current`
/// nor `update` nor named by a pod's `controller-revision-hash` are the
/// history; beyond `revisionHistoryLimit` of them, the oldest are deleted.
fn truncate_history(store: &Store, pods: &Owned, revisions: &Owned, set: &Obj, current: &str, update: &str) {
    let live: HashSet<&str> = pods.of_owner(set).map(|p| revision_of(&p.value)).chain([current, update]).collect();
    let history: Vec<&Arc<Obj>> = revisions_oldest_first(revisions, set).into_iter().filter(|r| !live.contains(r.name())).collect();
    let excess = history.len().saturating_sub(history_limit(&set.value));
    for r in &history[..excess] {
        delete_obj(store, CONTROLLERREVISIONS, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::test_store;

    #[test]
    fn ordinals_parse_only_canonical_names() {
        assert_eq!(ordinal("web", "web-0"), Some(0));
        assert_eq!(ordinal("web", "web-12"), Some(12));
        assert_eq!(ordinal("web", "web-01"), None);
        assert_eq!(ordinal("web", "web-x"), None);
        assert_eq!(ordinal("web", "webby-1"), None);
        assert_eq!(ordinal("web", "web-"), None);
    }

    #[test]
    fn pods_get_identity_claims_and_revision() {
        let store = test_store();
        let set = store
            .create(
                STATEFULSETS,
                "default",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
                    "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"schedulerName": "berth", "containers": [{"name": "c", "image": "x"}],
                            "volumes": [{"name": "data", "emptyDir": {}}]}},
                        "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "x"}}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let pod = new_pod(&set, &set.value["spec"]["template"], "db-abc", 2);
        assert_eq!(s(&pod, "/metadata/name"), "db-2");
        assert_eq!(s(&pod, "/metadata/labels/statefulset.kubernetes.io~1pod-name"), "db-2");
        assert_eq!(s(&pod, "/metadata/labels/apps.kubernetes.io~1pod-index"), "2");
        assert_eq!(s(&pod, "/metadata/labels/controller-revision-hash"), "db-abc");
        assert_eq!(s(&pod, "/spec/hostname"), "db-2");
        assert_eq!(s(&pod, "/spec/subdomain"), "db");
        assert_eq!(s(&pod, "/spec/schedulerName"), "berth");
        assert_eq!(pod["spec"]["volumes"], json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-2"}}]));
        let claims = claims_for(&set, 2);
        assert_eq!(claims.len(), 1);
        assert_eq!(s(&claims[0], "/metadata/name"), "data-db-2");
        assert_eq!(claims[0]["metadata"]["labels"], json!({"tier": "x", "app": "db"}));
    }

    /// Template changes beyond `revisionHistoryLimit`: the oldest unused
    /// revisions go; the current one, still used by the pod (OnDelete
    /// replaces no pod), stays.
    #[test]
    fn history_beyond_the_limit_is_truncated_but_live_revisions_stay() {
        let store = test_store();
        let set = |image: &str| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
                "spec": {"replicas": 1, "serviceName": "db", "revisionHistoryLimit": 1, "updateStrategy": {"type": "OnDelete"},
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": image}]}}}})
        };
        store.create(STATEFULSETS, "default", set("db:1")).unwrap_or_else(|e| panic!("{e}"));
        let pass = || sync(&store, &Owned::of(&store, PODS), 500);
        pass();
        pass();
        let first = revision_of(&store.get(PODS, "default", "db-0").unwrap_or_else(|e| panic!("{e}")).value).to_string();
        for image in ["db:2", "db:3", "db:4"] {
            let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}).to_string();
            store.patch(STATEFULSETS, "default", "db", crate::store::PatchType::Merge, patch.as_bytes(), false).unwrap_or_else(|e| panic!("{e}"));
            pass();
            pass();
        }
        let numbers = || {
            let mut n: Vec<(i64, String)> = list(&store, CONTROLLERREVISIONS, None).iter().map(|r| (r.value["revision"].as_i64().unwrap_or(0), r.name().to_string())).collect();
            n.sort();
            n
        };
        let left = numbers();
        // db:1 (the pod's and the current revision), db:3 (the one old
        // revision the limit keeps) and db:4 (the update revision).
        assert_eq!(left.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3, 4], "{left:?}");
        assert_eq!(left[0].1, first);
    }

    #[test]
    fn ordered_ready_creates_one_pod_at_a_time() {
        let store = test_store();
        store
            .create(
                STATEFULSETS,
                "default",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"replicas": 3, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3 {
            sync(&store, &Owned::of(&store, PODS), 500);
        }
        let names: Vec<String> = list(&store, PODS, None).iter().map(|p| p.name().to_string()).collect();
        assert_eq!(names, ["web-0"], "web-1 waits for web-0 to be Running and Ready");
    }
}
