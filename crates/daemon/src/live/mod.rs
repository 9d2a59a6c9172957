//! Reading a cluster over the API, for `berth explain --kubeconfig`,
//! `berth simulate --kubeconfig` and `berth dump`: one paginated list
//! (`limit` and `continue`) per kind of the dump format (the conformance
//! FORMAT.md), no watches. Each listed object gets its `apiVersion` and
//! `kind` back (list items carry neither) and loses `metadata.managedFields`,
//! so the objects are exactly the documents of a dump: the offline engine
//! builds its cluster from them with `Cluster::from_documents`, and `dump`
//! writes them as multi-document YAML that `Cluster::load` reads back.
//!
//! Each kind is listed from one consistent snapshot of the server (the pages
//! of one list share a resourceVersion); different kinds are listed one
//! after the other, as `kubectl get` would, so an object that changes between
//! two lists may be seen twice or not at all, as in any dump.

pub mod anonymize;

use std::io::Write;
use std::path::{Path, PathBuf};

use kube::api::ListParams;
use serde_json::Value;
use thiserror::Error;

pub use self::anonymize::Anonymizer;

/// Why a cluster could not be read or dumped.
#[derive(Debug, Error)]
pub enum Error {
    /// The account may not list a kind (403).
    #[error("cannot list {resource}: forbidden (needs \"list\" on {plural} in API group \"{group}\")")]
    Forbidden {
        /// `plural.group`, e.g. `resourceslices.resource.k8s.io`.
        resource: String,
        /// The resource as RBAC names it.
        plural: &'static str,
        /// The API group ("" for the core group).
        group: &'static str,
    },
    /// A kind every cluster serves is not served (404).
    #[error("cannot list {resource}: the API server does not serve it (404 Not Found)")]
    NotServed {
        /// `plural.group`.
        resource: String,
    },
    /// The server refused the list for another reason.
    #[error("cannot list {resource}: the API server answered {code} {reason}: {message}")]
    Api {
        /// `plural.group`.
        resource: String,
        /// HTTP status.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
    /// The server could not be reached, or the connection broke.
    #[error("cannot list {resource}: the API server did not answer")]
    Unreachable {
        /// `plural.group`.
        resource: String,
        /// The cause.
        #[source]
        error: kube::Error,
    },
    /// The answer is not a list.
    #[error("cannot list {resource}: the answer is not a list ({message})")]
    NotAList {
        /// `plural.group`.
        resource: String,
        /// What is wrong with it.
        message: String,
    },
    /// The dump file could not be written.
    #[error("writing {path}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An object could not be written as YAML.
    #[error("writing {path}: {what}: {message}")]
    Yaml {
        /// The file.
        path: String,
        /// Kind and name of the object.
        what: String,
        /// The serializer's message.
        message: String,
    },
    /// Anonymization failed.
    #[error("anonymizing: {0}")]
    Anonymize(#[from] anonymize::Error),
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// One kind of the dump format and where the API serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// The kind, e.g. `ResourceSlice`.
    pub kind: &'static str,
    /// The API group ("" for the core group).
    pub group: &'static str,
    /// The version listed.
    pub version: &'static str,
    /// The resource (plural).
    pub plural: &'static str,
    /// A server may not serve it (DRA on an older cluster, a CRD that is
    /// not installed): a 404 skips it with a note instead of failing.
    pub optional: bool,
    /// The scheduler reads it (FORMAT.md); the others are only dumped.
    pub scheduler_reads: bool,
}

impl Kind {
    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `plural.group` (just `plural` for the core group), as kubectl and RBAC messages name it.
    pub fn resource(&self) -> String {
        if self.group.is_empty() { self.plural.to_string() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// The path that lists it in every namespace.
    pub fn path(&self) -> String {
        if self.group.is_empty() { format!("/api/{}/{}", self.version, self.plural) } else { format!("/apis/{}/{}/{}", self.group, self.version, self.plural) }
    }
}

const fn kind(kind: &'static str, group: &'static str, version: &'static str, plural: &'static str, optional: bool, scheduler_reads: bool) -> Kind {
    Kind { kind, group, version, plural, optional, scheduler_reads }
}

/// Every kind of the dump format, in the order they are listed and dumped.
/// Pods come before PersistentVolumeClaims: the anonymizer learns the names
/// of generic ephemeral volumes' claims from the pods.
pub const KINDS: &[Kind] = &[
    kind("Namespace", "", "v1", "namespaces", false, true),
    kind("Node", "", "v1", "nodes", false, true),
    kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", false, true),
    kind("Pod", "", "v1", "pods", false, true),
    kind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", false, true),
    kind("Service", "", "v1", "services", false, true),
    kind("ReplicationController", "", "v1", "replicationcontrollers", false, true),
    kind("ReplicaSet", "apps", "v1", "replicasets", false, true),
    kind("StatefulSet", "apps", "v1", "statefulsets", false, true),
    kind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", false, true),
    kind("PersistentVolume", "", "v1", "persistentvolumes", false, true),
    kind("StorageClass", "storage.k8s.io", "v1", "storageclasses", false, true),
    kind("CSINode", "storage.k8s.io", "v1", "csinodes", false, true),
    kind("CSIDriver", "storage.k8s.io", "v1", "csidrivers", false, true),
    kind("CSIStorageCapacity", "storage.k8s.io", "v1", "csistoragecapacities", false, true),
    kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", true, true),
    kind("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", true, false),
    kind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", true, true),
    kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", true, true),
    kind("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules", true, true),
    kind("PodGroup", "scheduling.k8s.io", "v1beta1", "podgroups", true, true),
    kind("Workload", "scheduling.k8s.io", "v1beta1", "workloads", true, false),
    kind("PodGroup", "scheduling.x-k8s.io", "v1alpha1", "podgroups", true, true),
];

/// Page size of the lists, as kubectl's default `--chunk-size`.
pub const DEFAULT_PAGE: u32 = 500;

/// The objects of a cluster, as a dump holds them.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every listed object, kind after kind in [`KINDS`] order, with
    /// apiVersion and kind set and managedFields removed.
    pub objects: Vec<Value>,
    /// Kinds skipped because the server does not serve them.
    pub notes: Vec<String>,
}

fn api_error(k: &Kind, s: &kube::core::Status) -> Error {
    match s.code {
        403 => Error::Forbidden { resource: k.resource(), plural: k.plural, group: k.group },
        404 => Error::NotServed { resource: k.resource() },
        code => Error::Api { resource: k.resource(), code, reason: s.reason.clone(), message: s.message.clone() },
    }
}

/// Lists every object of one kind, page by page. `Ok(None)`: an optional
/// kind the server does not serve.
pub async fn list_kind(client: &kube::Client, k: &Kind, page: u32) -> Result<Option<Vec<Value>>> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let api_version = k.api_version();
    loop {
        let mut lp = ListParams::default().limit(page.max(1));
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let req = kube::core::Request::new(k.path()).list(&lp).map_err(|e| Error::NotAList { resource: k.resource(), message: format!("building the request: {e}") })?;
        let list: Value = match client.request::<Value>(req).await {
            Ok(v) => v,
            Err(kube::Error::Api(s)) if s.code == 404 && k.optional && token.is_none() => return Ok(None),
            Err(kube::Error::Api(s)) => return Err(api_error(k, &s)),
            Err(error) => return Err(Error::Unreachable { resource: k.resource(), error }),
        };
        let Value::Object(mut list) = list else {
            return Err(Error::NotAList { resource: k.resource(), message: "not a JSON object".into() });
        };
        let items = match list.remove("items") {
            Some(Value::Array(a)) => a,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Err(Error::NotAList { resource: k.resource(), message: "items is not an array".into() }),
        };
        for item in items {
            let Value::Object(mut m) = item else {
                return Err(Error::NotAList { resource: k.resource(), message: "an item is not an object".into() });
            };
            if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                meta.remove("managedFields");
            }
            // apiVersion and kind first, as people write them.
            let mut o = serde_json::Map::new();
            o.insert("apiVersion".into(), Value::from(api_version.clone()));
            o.insert("kind".into(), Value::from(k.kind));
            m.remove("apiVersion");
            m.remove("kind");
            o.extend(m);
            out.push(Value::Object(o));
        }
        token = list.get("metadata").and_then(|m| m.get("continue")).and_then(Value::as_str).filter(|t| !t.is_empty()).map(String::from);
        if token.is_none() {
            return Ok(Some(out));
        }
    }
}

/// Lists `kinds` one after the other; `each` receives every kind's objects.
/// Returns the notes about kinds that are not served.
async fn list_each<F>(client: &kube::Client, kinds: &[Kind], page: u32, mut each: F) -> Result<Vec<String>>
where
    F: FnMut(&Kind, Vec<Value>) -> Result<()>,
{
    let mut notes = Vec::new();
    for k in kinds {
        match list_kind(client, k, page).await? {
            Some(objects) => each(k, objects)?,
            None => notes.push(format!("{} ({}) is not served by this API server: skipped", k.resource(), k.api_version())),
        }
    }
    Ok(notes)
}

/// Lists every kind the scheduler reads (`scheduler_reads`), for the live
/// `explain` and `simulate`.
pub async fn list_for_scheduler(client: &kube::Client, page: u32) -> Result<Listing> {
    let kinds: Vec<Kind> = KINDS.iter().filter(|k| k.scheduler_reads).copied().collect();
    let mut objects = Vec::new();
    let notes = list_each(client, &kinds, page, |_, o| {
        objects.extend(o);
        Ok(())
    })
    .await?;
    Ok(Listing { objects, notes })
}

/// What `dump` wrote.
#[derive(Debug, Default)]
pub struct DumpSummary {
    /// Objects written per kind (`plural.group`), in [`KINDS`] order.
    pub counts: Vec<(String, usize)>,
    /// Kinds skipped because the server does not serve them.
    pub notes: Vec<String>,
}

/// A file being written beside its destination, removed unless committed:
/// whatever fails (the server goes away, the disk fills up, a panic), no
/// partial file is left behind.
struct Partial {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl Partial {
    fn create(dest: &Path) -> Result<Partial> {
        let io = |source| Error::Io { path: dest.display().to_string(), source };
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "dump".into());
        let tmp = dir.join(format!(".{name}.partial-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io)?;
        Ok(Partial { tmp, dest: dest.to_path_buf(), file: Some(std::io::BufWriter::new(file)) })
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io { path: self.dest.display().to_string(), source }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let r = match self.file.as_mut() {
            Some(f) => f.write_all(bytes),
            None => Err(std::io::Error::other("already committed")),
        };
        r.map_err(|e| self.io(e))
    }

    /// Flushes, syncs and renames over the destination.
    fn commit(mut self) -> Result<()> {
        let Some(f) = self.file.take() else { return Err(self.io(std::io::Error::other("already committed"))) };
        let file = f.into_inner().map_err(|e| self.io(e.into_error()))?;
        file.sync_all().map_err(|e| self.io(e))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| self.io(e))?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        self.file = None;
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn what(o: &Value) -> String {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = s("/metadata/namespace");
    format!("{} {}{}{}", s("/kind"), ns, if ns.is_empty() { "" } else { "/" }, s("/metadata/name"))
}

/// Appends one YAML document (`---` and the object) to `out`.
pub fn yaml_document(o: &Value, out: &mut String) -> std::result::Result<(), String> {
    out.push_str("---\n");
    serde_saphyr::to_fmt_writer(out, o).map_err(|e| e.to_string())?;
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(())
}

/// Writes the dump the offline commands read: every kind of [`KINDS`] as
/// multi-document YAML into `path`, through a temporary file beside it that
/// is renamed at the end, so a failure leaves no file (and an existing
/// `path` untouched). With an anonymizer, every object is rewritten by it.
pub async fn dump(client: &kube::Client, path: &Path, page: u32, anonymizer: Option<&mut Anonymizer>) -> Result<DumpSummary> {
    dump_to(client, DumpTo::File(path), page, anonymizer).await
}

/// Where [`dump_to`] writes.
pub enum DumpTo<'a> {
    /// A file, whole or not at all (see [`dump`]).
    File(&'a Path),
    /// A stream (standard output), as the objects arrive.
    Writer {
        /// Its name in messages.
        name: &'a str,
        /// The stream.
        writer: &'a mut dyn Write,
    },
}

enum Sink<'a> {
    File(Partial),
    Writer(&'a str, &'a mut dyn Write),
}

impl Sink<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Sink::File(f) => f.write(bytes),
            Sink::Writer(name, w) => w.write_all(bytes).map_err(|source| Error::Io { path: (*name).to_string(), source }),
        }
    }

    fn commit(self) -> Result<()> {
        match self {
            Sink::File(f) => f.commit(),
            Sink::Writer(name, w) => w.flush().map_err(|source| Error::Io { path: name.to_string(), source }),
        }
    }
}

/// [`dump`] to a file or a stream.
pub async fn dump_to(client: &kube::Client, to: DumpTo<'_>, page: u32, mut anonymizer: Option<&mut Anonymizer>) -> Result<DumpSummary> {
    let (mut file, display) = match to {
        DumpTo::File(path) => (Sink::File(Partial::create(path)?), path.display().to_string()),
        DumpTo::Writer { name, writer } => (Sink::Writer(name, writer), name.to_string()),
    };
    let mut counts = Vec::new();
    let mut buf = String::new();
    let notes = list_each(client, KINDS, page, |k, mut objects| {
        if let Some(a) = anonymizer.as_deref_mut() {
            for o in &objects {
                a.observe(o)?;
            }
            for o in &mut objects {
                a.object(o)?;
            }
        }
        for o in &objects {
            buf.clear();
            yaml_document(o, &mut buf).map_err(|message| Error::Yaml { path: display.clone(), what: what(o), message })?;
            file.write(buf.as_bytes())?;
        }
        counts.push((k.resource(), objects.len()));
        Ok(())
    })
    .await?;
    file.commit()?;
    Ok(DumpSummary { counts, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        let pods = KINDS.iter().find(|k| k.kind == "Pod").copied();
        assert_eq!(pods.map(|k| (k.path(), k.resource(), k.api_version())), Some(("/api/v1/pods".into(), "pods".into(), "v1".into())));
        let rs = KINDS.iter().find(|k| k.kind == "ResourceSlice").copied();
        assert_eq!(rs.map(|k| (k.path(), k.resource())), Some(("/apis/resource.k8s.io/v1/resourceslices".into(), "resourceslices.resource.k8s.io".into())));
        let pos = |kind: &str| KINDS.iter().position(|k| k.kind == kind);
        assert!(pos("Pod") < pos("PersistentVolumeClaim"), "the anonymizer learns ephemeral claims from pods first");
    }

    #[test]
    fn forbidden_names_the_kind_and_the_verb() {
        let k = KINDS.iter().find(|k| k.kind == "ResourceSlice").copied();
        let e = k.map(|k| Error::Forbidden { resource: k.resource(), plural: k.plural, group: k.group }.to_string());
        assert_eq!(e.as_deref(), Some("cannot list resourceslices.resource.k8s.io: forbidden (needs \"list\" on resourceslices in API group \"resource.k8s.io\")"));
    }

    #[test]
    fn yaml_documents_read_back_as_the_same_values() {
        let o = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"a": "yes", "b": "1.0", "c": "0755", "d": "null", "e": "", "f": "true"},
                         "annotations": {"x": "line one\nline two: with colon", "y": "- not a list", "z": "{not: a map}"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.0", "resources": {"requests": {"cpu": "2", "memory": "1e3"}}}],
                     "priority": 10, "enableServiceLinks": false, "nodeSelector": {"k": "~"}},
        });
        let mut s = String::new();
        yaml_document(&o, &mut s).expect("serializes");
        yaml_document(&o, &mut s).expect("serializes");
        let back: Vec<Value> = serde_saphyr::from_multiple(&s).expect("parses");
        assert_eq!(back, vec![o.clone(), o]);
    }
}
