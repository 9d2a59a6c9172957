//! The OpenAPI documents of the local cluster (`/openapi/v2`, `/openapi/v3`
//! and one OpenAPI 3.0 document per group-version), generated from
//! k8s-openapi's `schemars` schemas of the kinds the cluster serves and
//! from the served CustomResourceDefinitions' `openAPIV3Schema`s.
//!
//! Documents are built on first request and cached; a group-version's
//! document is rebuilt when its custom resources change (the cache key is a
//! hash of their definitions). Each document has the ETag upstream gives it
//! (the upper-case hex SHA-512 of its JSON); the v3 root lists every
//! group-version as `/openapi/v3/<gv>?hash=<etag>`, and a request with the
//! current hash is answered `Cache-Control: public, immutable` (an old hash
//! is redirected, 301, to the current one), as kube-openapi's handler does.
//!
//! Operations carry `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind`, and writes list the `dryRun`,
//! `fieldManager` and `fieldValidation` query parameters: kubectl reads
//! them to decide that the server validates fields itself. Top-level
//! kinds' schemas carry `x-kubernetes-group-version-kind` (what
//! `kubectl explain` looks up).
//!
//! The same schemas drive strict field validation ([`unknown_fields`],
//! [`duplicate_fields`]): see `http.rs` for the `fieldValidation`
//! directive.
//!
//! Simplifications: `/openapi/v2` is served as JSON only (no gnostic
//! protobuf; a client asking only for protobuf gets 406 Not Acceptable, as
//! kube-openapi answers an unsupported Accept); the v3 documents are JSON
//! only; k8s-openapi's schemas have no `x-kubernetes-patch-merge-key` /
//! `x-kubernetes-patch-strategy`, so a client computing a strategic merge
//! patch from these documents treats lists as atomic.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex};

use axum::body::Bytes;
use k8s_openapi::Resource;
use k8s_openapi::api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use super::jsonptr::Pointer as _;
use serde_json::{Map, Value, json};

use super::resources::ResourceInfo;

/// Errors of document generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No served resource in this group-version.
    #[error("no OpenAPI document for group-version {0:?}")]
    NotFound(String),
}

/// One rendered document.
#[derive(Clone)]
pub struct Doc {
    /// The JSON bytes served.
    pub bytes: Bytes,
    /// Upper-case hex SHA-512 of `bytes` (unquoted).
    pub etag: String,
    /// The parsed document (schemas for validation).
    pub value: Arc<Value>,
}

impl Doc {
    fn new(value: Value) -> Doc {
        let bytes = Bytes::from(value.to_string());
        let etag = etag_of(&bytes);
        Doc { bytes, etag, value: Arc::new(value) }
    }
}

fn etag_of(b: &[u8]) -> String {
    use std::fmt::Write;
    let d = ring::digest::digest(&ring::digest::SHA512, b);
    let mut s = String::with_capacity(128);
    for byte in d.as_ref() {
        let _ = write!(s, "{byte:02X}");
    }
    s
}

/// The documents of one cluster, built lazily. They are cached process
/// wide by (group-version, hash of its resources' definitions): every
/// cluster in a process serves the same built-in kinds, so they share
/// those documents, and a changed CRD gives its group-version a new key.
#[derive(Default)]
pub struct Documents {
    _private: (),
}

/// Documents built so far, by (group-version path or "" for v2, key).
static BUILT: LazyLock<Mutex<HashMap<(String, u64), Doc>>> = LazyLock::new(Mutex::default);

/// Past this many documents the cache starts over (CRD churn in a
/// long-running cluster).
const BUILT_MAX: usize = 256;

fn cached(gv: &str, key: u64, build: impl FnOnce() -> Value) -> Doc {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = built.get(&(gv.to_string(), key)) {
        return d.clone();
    }
    let doc = Doc::new(build());
    if built.len() >= BUILT_MAX {
        built.clear();
    }
    built.insert((gv.to_string(), key), doc.clone());
    doc
}

/// The path of a group-version below `/openapi/v3/` (`api/v1`, `apis/g/v`).
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// A hash of what a set of served resources puts into a document: the
/// built-in ones are fixed, custom ones hash their definitions.
fn key_of<'a>(served: impl Iterator<Item = &'a Arc<ResourceInfo>>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in served {
        (r.group, r.version, r.plural, r.kind, r.namespaced).hash(&mut h);
        if let Some(c) = &r.custom {
            c.crd.hash(&mut h);
            c.list_kind.hash(&mut h);
            c.schema.as_ref().map(Value::to_string).hash(&mut h);
            r.subresources.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().hash(&mut h);
        }
    }
    h.finish()
}

impl Documents {
    /// The document of one group-version (`api/v1`, `apis/apps/v1`).
    pub fn v3(&self, served: &[Arc<ResourceInfo>], gv: &str) -> Result<Doc, Error> {
        let mine: Vec<&Arc<ResourceInfo>> = served.iter().filter(|r| gv_path(r.group, r.version) == gv).collect();
        let Some(first) = mine.first() else {
            return Err(Error::NotFound(gv.to_string()));
        };
        let key = key_of(mine.iter().copied());
        Ok(cached(gv, key, || v3_document(first.group, first.version, &mine)))
    }

    /// The v3 root: `{"paths": {"api/v1": {"serverRelativeURL": ...}}}`.
    pub fn v3_root(&self, served: &[Arc<ResourceInfo>]) -> Doc {
        let mut gvs: Vec<String> = served.iter().map(|r| gv_path(r.group, r.version)).collect();
        gvs.sort();
        gvs.dedup();
        let mut paths = Map::new();
        for gv in gvs {
            if let Ok(d) = self.v3(served, &gv) {
                paths.insert(gv.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", d.etag)}));
            }
        }
        Doc::new(json!({"paths": paths}))
    }

    /// The Swagger 2.0 document of everything served.
    pub fn v2(&self, served: &[Arc<ResourceInfo>]) -> Doc {
        let key = key_of(served.iter());
        let refs: Vec<&Arc<ResourceInfo>> = served.iter().collect();
        cached("", key, || v2_document(&refs))
    }

    /// The schema of a kind served in a group-version, with the document
    /// holding its definitions (for [`unknown_fields`]).
    /// `served` is asked for only when the schema is not known yet: a
    /// built-in kind's definition never changes, so it is found once (the
    /// write path asks on every request).
    pub fn schema_for(&self, served: impl FnOnce() -> Vec<Arc<ResourceInfo>>, info: &ResourceInfo) -> Option<(Arc<Value>, String)> {
        type Found = Option<(Arc<Value>, String)>;
        type Kind = (&'static str, &'static str, &'static str);
        static BUILTIN: LazyLock<Mutex<HashMap<Kind, Found>>> = LazyLock::new(Mutex::default);
        let key = (info.group, info.version, info.kind);
        if info.custom.is_none()
            && let Some(found) = BUILTIN.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
        {
            return found.clone();
        }
        let found = self.v3(&served(), &gv_path(info.group, info.version)).ok().and_then(|doc| {
            let name = definition_name(info);
            doc.value.at(&pointer_to(&name))?;
            Some((doc.value.clone(), name))
        });
        if info.custom.is_none() {
            BUILTIN.lock().unwrap_or_else(|e| e.into_inner()).insert(key, found.clone());
        }
        found
    }
}

/// The definition name of a kind: k8s-openapi's schema name for the
/// built-in kinds, `<reversed group>.<version>.<Kind>` for custom ones (as
/// the API server names them).
pub fn definition_name(info: &ResourceInfo) -> String {
    if info.custom.is_none()
        && let Some(n) = builtin_name(info.group, info.version, info.kind)
    {
        return n;
    }
    let mut rev: Vec<&str> = info.group.split('.').collect();
    rev.reverse();
    format!("{}.{}.{}", rev.join("."), info.version, info.kind)
}

fn ref_name(r: &str) -> &str {
    r.rsplit('/').next().unwrap_or(r)
}

fn generator(defs: &str) -> SchemaGenerator {
    let defs = defs.to_string();
    SchemaSettings::openapi3()
        .with(|s| {
            s.meta_schema = None;
            s.definitions_path = defs.into();
        })
        .into_generator()
}

/// Calls `$m!(args; T1, T2, ...)` over every built-in kind (and the
/// subresource kinds) the cluster serves.
macro_rules! with_builtin_kinds {
    ($m:ident!($($a:expr),*)) => {
        $m!($($a),*;
            api::core::v1::Namespace,
            api::core::v1::Node,
            api::core::v1::Pod,
            api::core::v1::Binding,
            api::core::v1::Event,
            api::core::v1::Service,
            api::core::v1::PersistentVolume,
            api::core::v1::PersistentVolumeClaim,
            api::core::v1::ReplicationController,
            api::core::v1::ConfigMap,
            api::core::v1::ServiceAccount,
            api::core::v1::Secret,
            api::core::v1::Endpoints,
            api::core::v1::LimitRange,
            api::core::v1::ResourceQuota,
            api::core::v1::PodTemplate,
            api::events::v1::Event,
            api::coordination::v1::Lease,
            api::scheduling::v1::PriorityClass,
            api::scheduling::v1beta1::PodGroup,
            api::scheduling::v1beta1::Workload,
            api::policy::v1::PodDisruptionBudget,
            api::policy::v1::Eviction,
            api::authentication::v1::TokenRequest,
            api::apps::v1::ReplicaSet,
            api::apps::v1::StatefulSet,
            api::apps::v1::Deployment,
            api::apps::v1::DaemonSet,
            api::apps::v1::ControllerRevision,
            api::storage::v1::StorageClass,
            api::storage::v1::CSINode,
            api::storage::v1::CSIDriver,
            api::storage::v1::CSIStorageCapacity,
            api::storage::v1::VolumeAttachment,
            api::storage::v1::VolumeAttributesClass,
            api::resource::v1::ResourceClaim,
            api::resource::v1::ResourceClaimTemplate,
            api::resource::v1::DeviceClass,
            api::resource::v1::ResourceSlice,
            api::resource::v1::DeviceTaintRule,
            api::rbac::v1::Role,
            api::rbac::v1::RoleBinding,
            api::rbac::v1::ClusterRole,
            api::rbac::v1::ClusterRoleBinding,
            api::discovery::v1::EndpointSlice,
            api::batch::v1::Job,
            api::batch::v1::CronJob,
            api::autoscaling::v2::HorizontalPodAutoscaler,
            api::autoscaling::v1::Scale,
            api::networking::v1::Ingress,
            api::networking::v1::IngressClass,
            api::networking::v1::NetworkPolicy,
            api::networking::v1::IPAddress,
            api::networking::v1::ServiceCIDR,
            api::node::v1::RuntimeClass,
            api::admissionregistration::v1::MutatingWebhookConfiguration,
            api::admissionregistration::v1::ValidatingWebhookConfiguration,
            api::admissionregistration::v1::ValidatingAdmissionPolicy,
            api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            api::admissionregistration::v1::MutatingAdmissionPolicy,
            api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
            api::certificates::v1::CertificateSigningRequest,
            api::certificates::v1::ClusterTrustBundle,
            api::flowcontrol::v1::FlowSchema,
            api::flowcontrol::v1::PriorityLevelConfiguration,
            CustomResourceDefinition,
            APIService,
        )
    };
}

macro_rules! find_schema {
    ($g:expr, $group:expr, $version:expr, $kind:expr; $($ty:ty),* $(,)?) => {
        $(
            if <$ty as Resource>::GROUP == $group && <$ty as Resource>::VERSION == $version && <$ty as Resource>::KIND == $kind {
                return Some($g.subschema_for::<$ty>());
            }
        )*
    };
}

macro_rules! find_name {
    ($group:expr, $version:expr, $kind:expr; $($ty:ty),* $(,)?) => {
        $(
            if <$ty as Resource>::GROUP == $group && <$ty as Resource>::VERSION == $version && <$ty as Resource>::KIND == $kind {
                return Some(<$ty as schemars::JsonSchema>::schema_name().into_owned());
            }
        )*
    };
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

/// `$ref` to a built-in kind's schema (adding its definitions to `g`).
fn builtin_schema(g: &mut SchemaGenerator, group: &str, version: &str, kind: &str) -> Option<schemars::Schema> {
    with_builtin_kinds!(find_schema!(g, group, version, kind));
    None
}

/// A built-in kind's definition name (k8s-openapi's schema name).
fn builtin_name(group: &str, version: &str, kind: &str) -> Option<String> {
    with_builtin_kinds!(find_name!(group, version, kind));
    None
}

/// The kind a subresource takes and answers, as (group, version, kind).
fn subresource_gvk<'a>(info: &'a ResourceInfo, sub: &str, kind: &'a str) -> (&'a str, &'a str, &'a str) {
    match sub {
        "eviction" => ("policy", "v1", "Eviction"),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
        "scale" => ("autoscaling", "v1", "Scale"),
        _ => (info.group, info.version, kind),
    }
}

fn gvk_json(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// The schemas (components) of some served kinds, their list kinds and
/// the meta.k8s.io types operations use, top-level kinds marked with
/// `x-kubernetes-group-version-kind`.
fn definitions(defs_path: &str, served: &[&Arc<ResourceInfo>]) -> Map<String, Value> {
    let mut g = generator(defs_path);
    let mut gvks: Vec<(String, Value)> = Vec::new();
    let mut customs: Vec<(String, Value)> = Vec::new();
    for r in served {
        match &r.custom {
            None => {
                if let Some(s) = builtin_schema(&mut g, r.group, r.version, r.kind)
                    && let Some(name) = s.get("$ref").and_then(Value::as_str).map(|s| ref_name(s).to_string())
                {
                    gvks.push((name, gvk_json(r.group, r.version, r.kind)));
                }
                for (sub, kind, _) in r.subresources {
                    let (sg, sv, sk) = subresource_gvk(r, sub, kind);
                    if let Some(s) = builtin_schema(&mut g, sg, sv, sk)
                        && let Some(name) = s.get("$ref").and_then(Value::as_str).map(|s| ref_name(s).to_string())
                    {
                        gvks.push((name, gvk_json(sg, sv, sk)));
                    }
                }
            }
            Some(c) => {
                let name = definition_name(r);
                let mut schema = c.schema.clone().unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
                let meta_ref = g.subschema_for::<meta::ObjectMeta>();
                if let Some(m) = schema.as_object_mut() {
                    let props = m.entry("properties").or_insert_with(|| json!({}));
                    if let Some(p) = props.as_object_mut() {
                        p.insert("apiVersion".into(), json!({"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}));
                        p.insert("kind".into(), json!({"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}));
                        p.insert("metadata".into(), json!({"allOf": [meta_ref.as_value()], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
                    }
                    m.insert("x-kubernetes-group-version-kind".into(), json!([gvk_json(r.group, r.version, r.kind)]));
                }
                customs.push((name, schema));
            }
        }
    }
    // Answered and taken by every group-version's operations.
    g.subschema_for::<meta::Status>();
    g.subschema_for::<meta::DeleteOptions>();
    g.subschema_for::<meta::Patch>();
    g.subschema_for::<meta::ListMeta>();
    let mut defs = g.take_definitions(true);
    for (name, gvk) in gvks {
        if let Some(Value::Object(m)) = defs.get_mut(&name) {
            m.remove("required");
            m.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
    }
    // meta.k8s.io Status and DeleteOptions are answered and taken by every group.
    if let Some(Value::Object(m)) = defs.get_mut("io.k8s.apimachinery.pkg.apis.meta.v1.Status") {
        m.insert("x-kubernetes-group-version-kind".into(), json!([gvk_json("", "v1", "Status")]));
    }
    for (name, schema) in customs {
        defs.insert(name, schema);
    }
    // The list kinds.
    for r in served {
        let list_kind = match &r.custom {
            Some(c) if !c.list_kind.is_empty() => c.list_kind.clone(),
            _ => format!("{}List", r.kind),
        };
        let item = definition_name(r);
        if !defs.contains_key(&item) {
            continue;
        }
        let list_name = format!("{item}List");
        let list_name = match list_name.rsplit_once('.') {
            Some((prefix, _)) => format!("{prefix}.{list_kind}"),
            None => list_name,
        };
        defs.insert(
            list_name,
            json!({
                "description": format!("{list_kind} is a list of {}.", r.kind),
                "type": "object",
                "properties": {
                    "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
                    "items": {"description": format!("List of {}.", r.plural), "type": "array", "items": {"$ref": format!("{defs_path}/{item}")}},
                    "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
                    "metadata": {"allOf": [{"$ref": format!("{defs_path}/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")}], "description": "Standard list metadata."},
                },
                "required": ["items"],
                "x-kubernetes-group-version-kind": [gvk_json(r.group, r.version, &list_kind)],
            }),
        );
    }
    defs
}

/// The query parameters of an operation, by verb.
fn query_params(action: &str, v2: bool) -> Vec<Value> {
    let p = |name: &str, desc: &str, ty: &str| -> Value {
        if v2 {
            json!({"name": name, "in": "query", "description": desc, "type": ty, "uniqueItems": true})
        } else {
            json!({"name": name, "in": "query", "description": desc, "schema": {"type": ty, "uniqueItems": true}})
        }
    };
    let dry_run = p("dryRun", "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed", "string");
    let field_manager = p("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.", "string");
    let field_validation = p("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.", "string");
    match action {
        "post" | "put" => vec![dry_run, field_manager, field_validation],
        "patch" => vec![
            dry_run,
            field_manager,
            field_validation,
            p("force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.", "boolean"),
        ],
        "delete" => vec![
            dry_run,
            p("gracePeriodSeconds", "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.", "integer"),
            p("propagationPolicy", "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both.", "string"),
        ],
        "list" | "deletecollection" | "watchlist" => vec![
            p("allowWatchBookmarks", "allowWatchBookmarks requests watch events with type \"BOOKMARK\".", "boolean"),
            p("continue", "The continue option should be set when retrieving more results from the server.", "string"),
            p("fieldSelector", "A selector to restrict the list of returned objects by their fields. Defaults to everything.", "string"),
            p("labelSelector", "A selector to restrict the list of returned objects by their labels. Defaults to everything.", "string"),
            p("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
            p("resourceVersion", "resourceVersion sets a constraint on what resource versions a request may be served from.", "string"),
            p("sendInitialEvents", "`sendInitialEvents=true` may be set together with `watch=true`.", "boolean"),
            p("timeoutSeconds", "Timeout for the list/watch call.", "integer"),
            p("watch", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.", "boolean"),
        ],
        _ => vec![],
    }
}

/// One operation: (HTTP method, action, kind of the body/answer).
struct Op<'a> {
    method: &'static str,
    action: &'static str,
    gvk: (&'a str, &'a str, &'a str),
    body: Option<String>,
    answer: String,
    op_id: String,
}

fn camel(s: &str) -> String {
    let mut out = String::new();
    let mut up = true;
    for ch in s.chars() {
        if ch == '.' || ch == '-' || ch == '/' {
            up = true;
            continue;
        }
        if up {
            out.extend(ch.to_uppercase());
            up = false;
        } else {
            out.push(ch);
        }
    }
    out
}

/// The paths of one resource: path -> operations.
fn resource_paths<'a>(r: &'a ResourceInfo, defs: &Map<String, Value>) -> Vec<(String, Vec<Op<'a>>)> {
    let prefix = if r.group.is_empty() { format!("/api/{}", r.version) } else { format!("/apis/{}/{}", r.group, r.version) };
    let item = definition_name(r);
    if !defs.contains_key(&item) {
        return Vec::new();
    }
    let list_kind = match &r.custom {
        Some(c) if !c.list_kind.is_empty() => c.list_kind.clone(),
        _ => format!("{}List", r.kind),
    };
    let list = match item.rsplit_once('.') {
        Some((p, _)) => format!("{p}.{list_kind}"),
        None => list_kind.clone(),
    };
    let gvk = (r.group, r.version, r.kind);
    let gv_tag = camel(&format!("{}{}", if r.group.is_empty() { "core" } else { r.group.split('.').next().unwrap_or(r.group) }, camel(r.version)));
    let ns = if r.namespaced { "Namespaced" } else { "" };
    let (coll, one) = if r.namespaced {
        (format!("{prefix}/namespaces/{{namespace}}/{}", r.plural), format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural))
    } else {
        (format!("{prefix}/{}", r.plural), format!("{prefix}/{}/{{name}}", r.plural))
    };
    let status = "io.k8s.apimachinery.pkg.apis.meta.v1.Status".to_string();
    let op = |method, action, body: Option<&String>, answer: &String, verb: &str, suffix: &str| Op {
        method,
        action,
        gvk,
        body: body.cloned(),
        answer: answer.clone(),
        op_id: format!("{verb}{gv_tag}{ns}{}{suffix}", r.kind),
    };
    let mut out = vec![
        (
            coll.clone(),
            vec![
                op("get", "list", None, &list, "list", ""),
                op("post", "post", Some(&item), &item, "create", ""),
                op("delete", "deletecollection", None, &status, "deleteCollection", ""),
            ],
        ),
        (
            one.clone(),
            vec![
                op("get", "get", None, &item, "read", ""),
                op("put", "put", Some(&item), &item, "replace", ""),
                op("patch", "patch", Some(&"io.k8s.apimachinery.pkg.apis.meta.v1.Patch".to_string()), &item, "patch", ""),
                op("delete", "delete", None, &item, "delete", ""),
            ],
        ),
    ];
    if r.namespaced {
        out.push((format!("{prefix}/{}", r.plural), vec![Op { op_id: format!("list{gv_tag}{}ForAllNamespaces", r.kind), ..op("get", "list", None, &list, "list", "") }]));
    }
    for (sub, kind, verbs) in r.subresources {
        let (sg, sv, sk) = subresource_gvk(r, sub, kind);
        let sub_name = if sg == r.group && sv == r.version && sk == r.kind {
            item.clone()
        } else {
            match builtin_name(sg, sv, sk) {
                Some(n) => n,
                None => continue,
            }
        };
        let suffix = camel(sub);
        let mut ops = Vec::new();
        for verb in *verbs {
            let o = match *verb {
                "get" => op("get", "get", None, &sub_name, "read", &suffix),
                "update" => op("put", "put", Some(&sub_name), &sub_name, "replace", &suffix),
                "patch" => op("patch", "patch", Some(&"io.k8s.apimachinery.pkg.apis.meta.v1.Patch".to_string()), &sub_name, "patch", &suffix),
                "create" => op("post", "post", Some(&sub_name), &sub_name, "create", &suffix),
                _ => continue,
            };
            ops.push(Op { gvk: (sg, sv, sk), ..o });
        }
        out.push((format!("{one}/{sub}"), ops));
    }
    out
}

fn patch_types(custom: bool) -> Vec<&'static str> {
    let mut v = vec!["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];
    if !custom {
        v.push("application/strategic-merge-patch+json");
    }
    v
}

fn path_params(path: &str, v2: bool) -> Vec<Value> {
    let mut out = Vec::new();
    let p = |name: &str, desc: &str| {
        if v2 {
            json!({"name": name, "in": "path", "required": true, "description": desc, "type": "string", "uniqueItems": true})
        } else {
            json!({"name": name, "in": "path", "required": true, "description": desc, "schema": {"type": "string", "uniqueItems": true}})
        }
    };
    if path.contains("{name}") {
        out.push(p("name", "name of the object"));
    }
    if path.contains("{namespace}") {
        out.push(p("namespace", "object name and auth scope, such as for teams and projects"));
    }
    out.push(if v2 {
        json!({"name": "pretty", "in": "query", "description": "If 'true', then the output is pretty printed. Defaults to 'false' unless the user agent indicates a browser or command-line HTTP tool (curl and wget).", "type": "string", "uniqueItems": true})
    } else {
        json!({"name": "pretty", "in": "query", "description": "If 'true', then the output is pretty printed. Defaults to 'false' unless the user agent indicates a browser or command-line HTTP tool (curl and wget).", "schema": {"type": "string", "uniqueItems": true}})
    });
    out
}

const ANSWER_TYPES: &[&str] = &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];

fn v3_operation(o: &Op<'_>, custom: bool, tag: &str) -> Value {
    let reference = |n: &str| json!({"$ref": format!("#/components/schemas/{n}")});
    let content = |n: &str| {
        let mut m = Map::new();
        for t in ANSWER_TYPES {
            m.insert((*t).into(), json!({"schema": reference(n)}));
        }
        Value::Object(m)
    };
    let mut responses = Map::new();
    responses.insert("200".into(), json!({"description": "OK", "content": content(&o.answer)}));
    if matches!(o.action, "post" | "put" | "patch") {
        responses.insert("201".into(), json!({"description": "Created", "content": content(&o.answer)}));
    }
    if matches!(o.action, "post" | "delete") {
        responses.insert("202".into(), json!({"description": "Accepted", "content": content(&o.answer)}));
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    let mut v = json!({
        "tags": [tag],
        "description": format!("{} {}", o.action, o.gvk.2),
        "operationId": o.op_id,
        "responses": responses,
        "x-kubernetes-action": o.action,
        "x-kubernetes-group-version-kind": gvk_json(o.gvk.0, o.gvk.1, o.gvk.2),
    });
    let params = query_params(if o.method == "get" && o.action == "list" { "list" } else { o.action }, false);
    if !params.is_empty() {
        v["parameters"] = Value::Array(params);
    }
    if let Some(b) = &o.body {
        let mut c = Map::new();
        if o.method == "patch" {
            for t in patch_types(custom) {
                c.insert(t.into(), json!({"schema": reference(b)}));
            }
        } else {
            c.insert("*/*".into(), json!({"schema": reference(b)}));
        }
        v["requestBody"] = json!({"content": c, "required": true});
    }
    v
}

fn tag_of(group: &str, version: &str) -> String {
    let g = if group.is_empty() { "core".to_string() } else { group.replace(".k8s.io", "").replace('.', "_") };
    format!("{g}_{version}")
}

/// The OpenAPI 3.0 document of one group-version.
fn v3_document(group: &str, version: &str, served: &[&Arc<ResourceInfo>]) -> Value {
    let defs = definitions("#/components/schemas", served);
    let tag = tag_of(group, version);
    let mut paths: BTreeMap<String, Value> = BTreeMap::new();
    for r in served {
        let custom = r.custom.is_some();
        for (path, ops) in resource_paths(r, &defs) {
            let mut item = Map::new();
            for o in &ops {
                item.insert(o.method.into(), v3_operation(o, custom, &tag));
            }
            item.insert("parameters".into(), Value::Array(path_params(&path, false)));
            paths.insert(path, Value::Object(item));
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0-berth"},
        "paths": paths,
        "components": {"schemas": defs},
    })
}

/// The Swagger 2.0 document of every served kind.
fn v2_document(served: &[&Arc<ResourceInfo>]) -> Value {
    let mut defs = definitions("#/definitions", served);
    // Swagger 2.0 keeps `$ref` with siblings as upstream's v2 does.
    for d in defs.values_mut() {
        unwrap_single_all_of(d);
    }
    let reference = |n: &str| json!({"$ref": format!("#/definitions/{n}")});
    let mut paths: BTreeMap<String, Value> = BTreeMap::new();
    for r in served {
        let custom = r.custom.is_some();
        let tag = tag_of(r.group, r.version);
        for (path, ops) in resource_paths(r, &defs) {
            let mut item = Map::new();
            for o in &ops {
                let mut params = query_params(if o.action == "list" { "list" } else { o.action }, true);
                if let Some(b) = &o.body {
                    params.insert(0, json!({"name": "body", "in": "body", "required": true, "schema": reference(b)}));
                }
                let mut responses = Map::new();
                responses.insert("200".into(), json!({"description": "OK", "schema": reference(&o.answer)}));
                if matches!(o.action, "post" | "put" | "patch") {
                    responses.insert("201".into(), json!({"description": "Created", "schema": reference(&o.answer)}));
                }
                responses.insert("401".into(), json!({"description": "Unauthorized"}));
                let consumes: Vec<&str> = if o.method == "patch" { patch_types(custom) } else { vec!["*/*"] };
                item.insert(
                    o.method.into(),
                    json!({
                        "tags": [tag],
                        "description": format!("{} {}", o.action, o.gvk.2),
                        "operationId": o.op_id,
                        "consumes": consumes,
                        "produces": ANSWER_TYPES,
                        "schemes": ["https"],
                        "parameters": params,
                        "responses": responses,
                        "x-kubernetes-action": o.action,
                        "x-kubernetes-group-version-kind": gvk_json(o.gvk.0, o.gvk.1, o.gvk.2),
                    }),
                );
            }
            item.insert("parameters".into(), Value::Array(path_params(&path, true)));
            paths.insert(path, Value::Object(item));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0-berth"},
        "paths": paths,
        "definitions": defs,
    })
}

/// `{"allOf": [{"$ref": x}], ...}` back into `{"$ref": x, ...}` (v2 style).
fn unwrap_single_all_of(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let single = m.get("allOf").and_then(Value::as_array).filter(|a| a.len() == 1).and_then(|a| a[0].get("$ref")).cloned();
            if let Some(r) = single {
                m.remove("allOf");
                m.insert("$ref".into(), r);
            }
            for (_, c) in m.iter_mut() {
                unwrap_single_all_of(c);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(unwrap_single_all_of),
        _ => {}
    }
}

// ---------------------------------------------------------------------
// Strict field validation.

/// Follow `$ref` / single `allOf` to the schema they name.
fn resolve<'a>(doc: &'a Value, mut s: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            match definition(doc, ref_name(r)) {
                Some(t) => s = t,
                None => return s,
            }
        } else if let Some(a) = s.get("allOf").and_then(Value::as_array).filter(|a| a.len() == 1)
            && s.get("properties").is_none()
        {
            s = &a[0];
        } else {
            return s;
        }
    }
    s
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

/// The schema `components.schemas.<name>` of `doc` (what
/// `doc.at(&pointer_to(name))` finds, without building the pointer).
fn definition<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc.get("components")?.get("schemas")?.get(name)
}

fn pointer_to(definition: &str) -> String {
    format!("/components/schemas/{}", definition.replace('~', "~0").replace('/', "~1"))
}

/// The schema a value meets: `$ref`s and single `allOf`s followed, the
/// alternative of the value's type among `oneOf`/`anyOf`
/// (JSONSchemaPropsOrBool, ...). `custom` stays on only inside a
/// CustomResourceDefinition's own schema (a `$ref` leads into a built-in
/// type, ObjectMeta of a custom resource). None: nothing to check.
fn shape<'a>(doc: &'a Value, schema: &'a Value, custom: bool, object: bool) -> Option<(&'a Value, bool)> {
    let custom = custom && schema.get("$ref").is_none() && schema.get("allOf").is_none();
    let s = resolve(doc, schema);
    if s.get("properties").is_none()
        && let Some(alts) = s.get("oneOf").or_else(|| s.get("anyOf")).and_then(Value::as_array)
    {
        let want = if object { "object" } else { "array" };
        let alt = alts.iter().find(|a| resolve(doc, a).get("type").and_then(Value::as_str) == Some(want))?;
        return shape(doc, alt, false, object);
    }
    Some((s, custom))
}

/// How an object schema takes its field `k`.
enum Field<'a> {
    /// Checked against this schema.
    Schema(&'a Value),
    /// Kept as it is (free-form, preserved).
    Free,
    /// Unknown: dropped by the decoder (pruned for custom resources).
    Unknown,
}

/// `custom`: a CRD's structural schema (an object schema without
/// properties admits no fields unless it preserves unknown ones); for
/// built-in kinds an object schema without properties is free-form.
fn field<'a>(s: &'a Value, k: &str, custom: bool, root: bool) -> Field<'a> {
    let props = s.get("properties").and_then(Value::as_object);
    if let Some(ps) = props.and_then(|p| p.get(k)) {
        return Field::Schema(ps);
    }
    if flag(s, "x-kubernetes-preserve-unknown-fields") || flag(s, "x-kubernetes-int-or-string") {
        return Field::Free;
    }
    if let Some(ap) = s.get("additionalProperties") {
        return if ap.is_object() { Field::Schema(ap) } else { Field::Free };
    }
    if props.is_none() && !custom {
        return Field::Free;
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if (root || embedded) && matches!(k, "apiVersion" | "kind") || embedded && k == "metadata" {
        return Field::Free;
    }
    Field::Unknown
}

/// The fields of `obj` its kind's schema does not know, as dotted paths
/// (`spec.containers[0].bogus`); `custom`: the kind is a custom resource.
pub fn unknown_fields(doc: &Value, definition: &str, obj: &Value, custom: bool) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(root) = doc.at(&pointer_to(definition)) {
        walk(doc, root, obj, "", custom, true, &mut out);
    }
    out
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_string() } else { format!("{path}.{field}") }
}

fn walk(doc: &Value, schema: &Value, v: &Value, path: &str, custom: bool, root: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let Some((s, custom)) = shape(doc, schema, custom, true) else { return };
            for (k, child) in m {
                match field(s, k, custom, root) {
                    Field::Schema(cs) => walk(doc, cs, child, &join(path, k), custom, false, out),
                    Field::Free => {}
                    Field::Unknown => out.push(join(path, k)),
                }
            }
        }
        Value::Array(a) => {
            let Some((s, custom)) = shape(doc, schema, custom, false) else { return };
            if let Some(items) = s.get("items") {
                for (i, child) in a.iter().enumerate() {
                    walk(doc, items, child, &format!("{path}[{i}]"), custom, false, out);
                }
            }
        }
        _ => {}
    }
}

/// The strict-decoding errors of a JSON body, in the order the fields
/// appear (as upstream's decoder reports them): `duplicate field
/// "metadata.name"`, `unknown field "spec.bogus"`. With no schema, only
/// duplicates. Not JSON: nothing (the store answers the syntax error).
pub fn strict_errors_json(body: &[u8], schema: Option<(&Value, &str)>, custom: bool) -> Vec<String> {
    strict_walk(body, schema, custom).0
}

/// [`strict_errors_json`], and whether the body was one whole JSON value
/// (the walk reached its end).
fn strict_walk(body: &[u8], schema: Option<(&Value, &str)>, custom: bool) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let root = schema.and_then(|(doc, def)| Some((doc, doc.at(&pointer_to(def))?)));
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = StrictSeed { doc: root.map(|(d, _)| d), schema: root.map(|(_, s)| s), custom, root: true, path: &Seg::Root, out: &mut out };
    let whole = seed.deserialize(&mut de).is_ok() && de.end().is_ok();
    (out, whole)
}

/// How many clean skeletons [`strict_errors_json_shared`] remembers per
/// thread (then it starts over).
const CLEAN_KEPT: usize = 256;

thread_local! {
    static CLEAN: std::cell::RefCell<std::collections::HashSet<Vec<u8>>> = std::cell::RefCell::new(std::collections::HashSet::new());
}

/// [`strict_errors_json`] for a built-in kind's schema (`def`, which never
/// changes while the process runs), remembering which bodies were clean
/// by their skeleton ([`skeleton`]: keys and nesting, no scalar values).
///
/// What the walk finds depends only on the keys, where they sit and their
/// order, never on a scalar, so a body whose skeleton is that of a whole,
/// clean body is clean too. Only whole bodies are remembered: a body that
/// is not valid JSON may share a clean body's skeleton, and its walk, which
/// stops at the error, finds in the part it reads what the clean body's
/// found there (nothing). Replicas of one template (every pod of a
/// ReplicaSet, every event of a reason) are checked once.
pub fn strict_errors_json_shared(body: &[u8], schema: Option<(&Value, &str)>) -> Vec<String> {
    let mut key = schema.map_or("", |(_, def)| def).as_bytes().to_vec();
    key.push(0);
    if !skeleton(body, &mut key) {
        return strict_errors_json(body, schema, false);
    }
    if CLEAN.with(|c| c.try_borrow().is_ok_and(|set| set.contains(&key))) {
        return Vec::new();
    }
    let (found, whole) = strict_walk(body, schema, false);
    if whole && found.is_empty() {
        CLEAN.with(|c| {
            if let Ok(mut set) = c.try_borrow_mut() {
                if set.len() >= CLEAN_KEPT {
                    set.clear();
                }
                set.insert(key);
            }
        });
    }
    found
}

/// How deep [`skeleton`] follows nesting before giving up.
const SKELETON_DEPTH: usize = 64;

/// Append the skeleton of the JSON text `body` to `out`: each object as its
/// keys (length-prefixed, as written) and their values' skeletons, each
/// array as its items' skeletons, each scalar as one byte of its kind.
/// False when the text is not read as one JSON value (or nests too deep):
/// the caller then walks it in full.
fn skeleton(body: &[u8], out: &mut Vec<u8>) -> bool {
    let mut i = 0;
    skeleton_value(body, &mut i, out, 0) && {
        skip_ws(body, &mut i);
        i == body.len()
    }
}

fn skip_ws(b: &[u8], i: &mut usize) {
    while b.get(*i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
        *i += 1;
    }
}

/// The string starting at `b[*i]` (a quote): its raw text, escapes as written.
fn skeleton_string<'b>(b: &'b [u8], i: &mut usize) -> Option<&'b [u8]> {
    let start = *i + 1;
    let mut j = start;
    loop {
        match *b.get(j)? {
            b'"' => break,
            b'\\' => j += 2,
            c if c < 0x20 => return None,
            _ => j += 1,
        }
    }
    *i = j + 1;
    b.get(start..j)
}

/// An object or array whose opening byte `open` is at `b[*i]`: that byte,
/// then `item` for each member up to `close`, members separated by commas.
fn skeleton_items(b: &[u8], i: &mut usize, out: &mut Vec<u8>, (open, close): (u8, u8), mut item: impl FnMut(&[u8], &mut usize, &mut Vec<u8>) -> bool) -> bool {
    out.push(open);
    *i += 1;
    skip_ws(b, i);
    if b.get(*i) == Some(&close) {
        *i += 1;
        out.push(close);
        return true;
    }
    loop {
        if !item(b, i, out) {
            return false;
        }
        skip_ws(b, i);
        match b.get(*i) {
            Some(b',') => *i += 1,
            Some(&c) if c == close => {
                *i += 1;
                out.push(close);
                return true;
            }
            _ => return false,
        }
    }
}

fn skeleton_value(b: &[u8], i: &mut usize, out: &mut Vec<u8>, depth: usize) -> bool {
    if depth > SKELETON_DEPTH {
        return false;
    }
    skip_ws(b, i);
    let Some(&c) = b.get(*i) else { return false };
    match c {
        b'{' => skeleton_items(b, i, out, (b'{', b'}'), |b, i, out| {
            skip_ws(b, i);
            if b.get(*i) != Some(&b'"') {
                return false;
            }
            let Some(k) = skeleton_string(b, i) else { return false };
            out.extend_from_slice(&(k.len() as u64).to_le_bytes());
            out.extend_from_slice(k);
            skip_ws(b, i);
            if b.get(*i) != Some(&b':') {
                return false;
            }
            *i += 1;
            skeleton_value(b, i, out, depth + 1)
        }),
        b'[' => skeleton_items(b, i, out, (b'[', b']'), |b, i, out| skeleton_value(b, i, out, depth + 1)),
        b'"' => {
            out.push(b's');
            skeleton_string(b, i).is_some()
        }
        b't' | b'f' | b'n' => {
            let lit: &[u8] = match c {
                b't' => b"true",
                b'f' => b"false",
                _ => b"null",
            };
            out.push(b'l');
            let ok = b.get(*i..*i + lit.len()) == Some(lit);
            *i += lit.len();
            ok
        }
        b'-' | b'0'..=b'9' => {
            out.push(b'd');
            while b.get(*i).is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')) {
                *i += 1;
            }
            true
        }
        _ => false,
    }
}

/// The fields that appear twice in one JSON object of `body`, as dotted
/// paths (`metadata.name`), in document order.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    strict_errors_json(body, None, false).into_iter().filter_map(|e| e.strip_prefix("duplicate field \"").and_then(|p| p.strip_suffix('"')).map(str::to_string)).collect()
}

/// Where a value sits in the body, rendered (`spec.containers[0].name`)
/// only when a finding names it.
enum Seg<'p> {
    Root,
    Key(&'p Seg<'p>, &'p str),
    Index(&'p Seg<'p>, usize),
}

impl Seg<'_> {
    fn render(&self, out: &mut String) {
        match self {
            Seg::Root => {}
            Seg::Key(parent, k) => {
                parent.render(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(parent, i) => {
                parent.render(out);
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        out
    }
}

/// A map key, borrowed from the body unless it has escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Walks raw JSON with the schema of the value at hand.
struct StrictSeed<'a, 'o, 'p> {
    doc: Option<&'a Value>,
    schema: Option<&'a Value>,
    custom: bool,
    root: bool,
    path: &'p Seg<'p>,
    out: &'o mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_, '_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let shaped = match (self.doc, self.schema) {
            (Some(doc), Some(schema)) => shape(doc, schema, self.custom, false),
            _ => None,
        };
        let items = shaped.and_then(|(s, _)| s.get("items"));
        let custom = shaped.is_some_and(|(_, c)| c);
        let mut i = 0usize;
        loop {
            let path = Seg::Index(self.path, i);
            let seed = StrictSeed { doc: self.doc, schema: items, custom, root: false, path: &path, out: &mut *self.out };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let shaped = match (self.doc, self.schema) {
            (Some(doc), Some(schema)) => shape(doc, schema, self.custom, true),
            _ => None,
        };
        // Keys seen so far: a short list scanned in order (objects are
        // small); a set once it grows.
        let mut seen: Vec<std::borrow::Cow<'de, str>> = Vec::new();
        let mut seen_set: std::collections::HashSet<std::borrow::Cow<'de, str>> = std::collections::HashSet::new();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let mut child = None;
            let mut custom = false;
            let duplicate = if seen_set.is_empty() && seen.len() < 32 {
                let dup = seen.contains(&k);
                if !dup {
                    seen.push(k.clone());
                }
                dup
            } else {
                seen_set.extend(seen.drain(..));
                !seen_set.insert(k.clone())
            };
            let path = Seg::Key(self.path, &k);
            if duplicate {
                self.out.push(format!("duplicate field \"{}\"", path.text()));
            } else if let Some((s, c)) = shaped {
                custom = c;
                match field(s, &k, c, self.root) {
                    Field::Schema(cs) => child = Some(cs),
                    Field::Free => {}
                    Field::Unknown => self.out.push(format!("unknown field \"{}\"", path.text())),
                }
            }
            map.next_value_seed(StrictSeed { doc: self.doc, schema: child, custom, root: false, path: &path, out: &mut *self.out })?;
        }
        Ok(())
    }
}

/// The `fieldValidation` directive of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// Refuse unknown and duplicate fields.
    Strict,
    /// Accept, with a warning per field (the default).
    Warn,
    /// Accept silently.
    Ignore,
}

impl Directive {
    /// From the query value (`None`: the default, Warn). An unknown value
    /// is refused as the API server refuses it.
    pub fn parse(v: Option<&str>) -> Result<Directive, String> {
        match v {
            None | Some("") | Some("Warn") => Ok(Directive::Warn),
            Some("Strict") => Ok(Directive::Strict),
            Some("Ignore") => Ok(Directive::Ignore),
            Some(other) => Err(format!("fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\"")),
        }
    }
}

/// The strict-decoding errors of a body, upstream's words: `unknown field
/// "spec.bogus"`, `duplicate field "metadata.name"`.
pub fn strict_errors(unknown: &[String], duplicate: &[String]) -> Vec<String> {
    let mut v: Vec<String> = duplicate.iter().map(|p| format!("duplicate field \"{p}\"")).collect();
    v.extend(unknown.iter().map(|p| format!("unknown field \"{p}\"")));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;

    fn served() -> Vec<Arc<ResourceInfo>> {
        RESOURCES.iter().cloned().map(Arc::new).collect()
    }

    #[test]
    fn core_v1_document_has_pod_with_gvk_and_field_validation() {
        let docs = Documents::default();
        let s = served();
        let d = docs.v3(&s, "api/v1").unwrap_or_else(|e| panic!("{e}"));
        let pod = &d.value["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "kind": "Pod", "version": "v1"}]));
        let patch = &d.value["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-action"], "patch");
        let names: Vec<&str> = patch["parameters"].as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
        assert!(names.contains(&"fieldValidation") && names.contains(&"dryRun") && names.contains(&"fieldManager"), "{names:?}");
        assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
        assert!(d.value["components"]["schemas"]["io.k8s.api.core.v1.PodList"].is_object());
        assert!(d.value["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"].is_object());
        assert_eq!(d.etag.len(), 128);
        // Cached: the same bytes come back.
        let again = docs.v3(&s, "api/v1").unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(&d.value, &again.value));
    }

    #[test]
    fn root_lists_group_versions_with_hashes() {
        let docs = Documents::default();
        let s = served();
        let root = docs.v3_root(&s);
        let url = root.value["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap_or_default().to_string();
        let apps = docs.v3(&s, "apis/apps/v1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url, format!("/openapi/v3/apis/apps/v1?hash={}", apps.etag));
        assert!(root.value["paths"].get("api/v1").is_some());
    }

    /// A remembered clean skeleton answers as the walk does: for clean
    /// bodies, for bodies with unknown or duplicate fields, and for bodies
    /// that are not JSON, before and after a clean body of the same
    /// skeleton was seen.
    #[test]
    fn a_shared_strict_check_is_the_strict_check() {
        let docs = Documents::default();
        let s = served();
        let pods = RESOURCES.iter().find(|r| r.kind == "Pod").unwrap_or_else(|| panic!("no pods"));
        let (doc, def) = docs.schema_for(|| s.clone(), pods).unwrap_or_else(|| panic!("no schema"));
        let schema = Some((doc.as_ref(), def.as_str()));
        let pod = |name: &str, extra: &str| {
            format!(r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}", "labels": {{"a": "b"}}{extra}}},
                "spec": {{"containers": [{{"name": "c", "image": "i", "args": ["x", 1, true, null, -2.5e3]}}], "priority": 7}}}}"#)
        };
        let bodies = [
            pod("a", ""),
            pod("b", ""),
            pod("a", r#", "bogus": 1"#),
            pod("a", r#", "name": "again""#),
            pod("a", r#", "\u006eame": "escaped duplicate""#),
            pod("esc\"aped", ""),
            // Not JSON, with the skeleton of a clean body or close to it.
            pod("a", "").replace("7}", "07}"),
            pod("a", "").replace("true", "tru"),
            pod("a", "").replace("\"a\": \"b\"", "\"a\": \"b\" \"c\""),
            format!("{} trailing", pod("a", "")),
            pod("a", "")[..40].to_string(),
            pod("c", r#", "bogus": 01"#),
            pod("c", r#", "bogus": 1"#),
            r#"{"metadata": {"name": "p"}, "metadata": {"name": "q"}}"#.to_string(),
            r#"[{"a": 1}]"#.to_string(),
            "".to_string(),
            "{".repeat(100) + &"}".repeat(100),
        ];
        for round in 0..2 {
            for b in &bodies {
                assert_eq!(strict_errors_json_shared(b.as_bytes(), schema), strict_errors_json(b.as_bytes(), schema, false), "round {round}: {b}");
                assert_eq!(strict_errors_json_shared(b.as_bytes(), None), strict_errors_json(b.as_bytes(), None, false), "round {round}: {b}");
            }
        }
        // The skeleton keeps keys and nesting, not scalars.
        let (mut x, mut y) = (Vec::new(), Vec::new());
        assert!(skeleton(pod("a", "").as_bytes(), &mut x) && skeleton(pod("zzz", "").as_bytes(), &mut y));
        assert_eq!(x, y);
        y.clear();
        assert!(skeleton(pod("a", r#", "bogus": 1"#).as_bytes(), &mut y));
        assert_ne!(x, y);
    }

    #[test]
    fn unknown_fields_are_named_with_their_paths() {
        let docs = Documents::default();
        let s = served();
        let pods = RESOURCES.iter().find(|r| r.kind == "Pod").unwrap_or_else(|| panic!("no pods"));
        let (doc, def) = docs.schema_for(|| s.clone(), pods).unwrap_or_else(|| panic!("no schema"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"bogus": true, "nodeSelector": {"x": "y"}, "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}, "extra": 1}]}});
        assert_eq!(unknown_fields(&doc, &def, &pod, false), vec!["metadata.bogus", "spec.bogus", "spec.containers[0].extra"]);
    }

    #[test]
    fn unknown_fields_inside_one_of_alternatives() {
        let docs = Documents::default();
        let s = served();
        let crds = RESOURCES.iter().find(|r| r.kind == "CustomResourceDefinition").unwrap_or_else(|| panic!("no crds"));
        let (doc, def) = docs.schema_for(|| s.clone(), crds).unwrap_or_else(|| panic!("no schema"));
        let crd = json!({"metadata": {"name": "a.b"}, "spec": {"group": "b", "names": {"plural": "a", "kind": "A"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "typo": 1, "additionalProperties": {"type": "string", "oops": true}}},
                "default": {"anything": 1}}}}]}});
        assert_eq!(
            unknown_fields(&doc, &def, &crd, false),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties.spec.additionalProperties.oops",
                "spec.versions[0].schema.openAPIV3Schema.properties.spec.typo"
            ]
        );
    }

    #[test]
    fn strict_errors_come_in_document_order() {
        let docs = Documents::default();
        let s = served();
        let pods = RESOURCES.iter().find(|r| r.kind == "Pod").unwrap_or_else(|| panic!("no pods"));
        let (doc, def) = docs.schema_for(|| s.clone(), pods).unwrap_or_else(|| panic!("no schema"));
        let body = br#"{"spec":{"zeta":1,"containers":[{"name":"c","name":"d","x":{"deep":1}}],"alpha":{"b":2}},"metadata":{"labels":{"any":"v"},"q":1}}"#;
        assert_eq!(
            strict_errors_json(body, Some((&doc, &def)), false),
            vec![
                r#"unknown field "spec.zeta""#,
                r#"duplicate field "spec.containers[0].name""#,
                r#"unknown field "spec.containers[0].x""#,
                r#"unknown field "spec.alpha""#,
                r#"unknown field "metadata.q""#
            ]
        );
    }

    #[test]
    fn duplicate_fields_are_found() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"x","image":"y"}]}}"#;
        assert_eq!(duplicate_fields(body), vec!["metadata.name", "spec.containers[0].image"]);
        assert!(duplicate_fields(b"not json").is_empty());
    }

    #[test]
    fn duplicate_fields_with_escaped_keys_and_many_keys() {
        // An escaped key is the same field as its plain spelling.
        let body = br#"{"metadata":{"name":"a","na\u006de":"b"}}"#;
        assert_eq!(duplicate_fields(body), vec!["metadata.name"]);
        // Past the short list of seen keys, duplicates are still found.
        let mut body = String::from("{\"metadata\":{\"labels\":{");
        for i in 0..40 {
            body.push_str(&format!("\"k{i}\":\"v\","));
        }
        body.push_str("\"k3\":\"w\",\"k39\":\"w\"}}}");
        assert_eq!(duplicate_fields(body.as_bytes()), vec!["metadata.labels.k3", "metadata.labels.k39"]);
        let body = br#"{"spec":{"containers":[{"name":"a"},{"name":"b","ports":[{"x":1,"x":2}]}]}}"#;
        assert_eq!(duplicate_fields(body), vec!["spec.containers[1].ports[0].x"]);
    }

    #[test]
    fn definitions_are_found_without_pointers() {
        let doc = json!({"components": {"schemas": {"a/b~c": {"type": "object"}}}});
        assert_eq!(definition(&doc, "a/b~c"), doc.pointer(&pointer_to("a/b~c")));
        assert!(definition(&doc, "missing").is_none());
    }

    #[test]
    fn custom_schemas_prune_unless_preserved() {
        let doc = json!({"components": {"schemas": {"x": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}, "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "e": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}}}}}}}});
        let obj = json!({"apiVersion": "x/v1", "kind": "X", "spec": {"a": "1", "b": 2, "free": {"z": 1}, "m": {"one": {"k": "v", "q": 1}},
            "e": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"w": 1}}}});
        assert_eq!(unknown_fields(&doc, "x", &obj, true), vec!["spec.b", "spec.e.spec.w", "spec.m.one.q"]);
    }

    #[test]
    fn directive_parses() {
        assert_eq!(Directive::parse(None), Ok(Directive::Warn));
        assert_eq!(Directive::parse(Some("Strict")), Ok(Directive::Strict));
        assert!(Directive::parse(Some("strict")).is_err());
    }
}
