//! `berth cluster --data-dir`: the store's objects on disk, in a redb
//! database (`<dir>/berth.redb`: pure Rust, ACID, copy-on-write B-trees
//! with checksummed commits, so a crash leaves the last commit whole).
//!
//! What is kept: every current object of every resource (built-in kinds,
//! CRDs and custom resources, nodes, secrets, service accounts...) as its
//! bytes, keyed by its resource (`plural.group`), namespace and name; the
//! tokens issued through `serviceaccounts/token`; and a *ceiling* above
//! every resourceVersion handed out. The watch history is not kept.
//!
//! When: every change the store commits (under its lock, in
//! resourceVersion order) is queued here; one writer thread takes all that
//! is queued and writes it in one transaction, committed with an fsync
//! (group commit: concurrent writes share one fsync). A request that wrote
//! is answered only once the transaction holding its changes is committed
//! ([`Store::synced`], awaited by the HTTP layer), so an object
//! acknowledged with 201 survives `kill -9`. Each change gets a sequence
//! number, and a commit makes durable exactly the numbers of the changes
//! it held; once the writer stops (closed, halted as by a crash, or a
//! commit failed), changes are still numbered but never written, so a
//! request that made one is answered with an error, never 201 (a server
//! still answering on open connections after a crash must not
//! acknowledge what it can no longer keep). Readers and watchers see a
//! change as soon as it is in memory, as before: after a crash, changes
//! that were seen but never acknowledged may be missing.
//!
//! The ceiling: before the store hands out a resourceVersion above the
//! persisted ceiling, it writes a new ceiling ([`RESERVE`] further)
//! synchronously. On restart the store starts above the ceiling, so every
//! resourceVersion served after a restart is above every one served
//! before (even those of changes lost in a crash), and the history starts
//! empty there: a watch resumed from before the restart gets 410 Gone and
//! its client relists.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use axum::body::Bytes;
use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};
use serde_json::Value;
use tokio::sync::watch;

use crate::jsonptr::Pointer as _;
use crate::resources::{self as res, PODS};

use super::obj::{Obj, kept_lean, lean_fields};
use super::tokens::IssuedToken;
use super::{Inner, KubeletMsg, Store, StoreConfig, get_str, is_deleting, qualified};

/// Objects: `<plural.group>\0<namespace>\0<name>` → the object's bytes.
const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
/// Issued ServiceAccount tokens: token → its JSON.
const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");
/// Counters: [`CEILING`].
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Objects that could not be read back when the directory was opened,
/// kept aside: the same key as in [`OBJECTS`] → the bytes as they were
/// (see [`Store::open`]).
const QUARANTINE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("quarantine");
/// The key of the resourceVersion ceiling in [`META`].
const CEILING: &str = "resource-version-ceiling";
/// The database file in the data directory.
pub const FILE: &str = "berth.redb";

/// How many resourceVersions one ceiling reservation covers: one
/// synchronous commit per this many writes.
pub(super) const RESERVE: u64 = 100_000;

/// Errors of the data directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory cannot be made.
    #[error("cannot create the data directory {path}: {source}")]
    Dir {
        /// The directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The database cannot be opened, read or written.
    #[error("data directory {path}: {message}")]
    Db {
        /// The database file.
        path: String,
        /// What redb said.
        message: String,
    },
    /// A stored object does not read back (reported, then kept aside:
    /// see [`Store::open`]).
    #[error("data directory {path}: object {key}: {message}")]
    Corrupt {
        /// The database file.
        path: String,
        /// The object's key (`plural.group/namespace/name`).
        key: String,
        /// Why.
        message: String,
    },
    /// The writer has stopped (closed, or a commit failed).
    #[error("data directory: {0}")]
    Stopped(String),
}

/// One queued change.
enum Op {
    Put { key: Vec<u8>, bytes: Bytes },
    Delete { key: Vec<u8> },
    Token { token: String, json: Vec<u8> },
}

/// The key of an object in [`OBJECTS`].
fn object_key(resource: &str, ns: &str, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(resource.len() + ns.len() + name.len() + 2);
    k.extend_from_slice(resource.as_bytes());
    k.push(0);
    k.extend_from_slice(ns.as_bytes());
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

#[derive(Default)]
struct Queue {
    ops: Vec<Op>,
    /// Changes made so far: queued, or refused once closed. A change
    /// refused is counted too, so that a request that made one waits for
    /// a sequence number no commit reaches and is never acknowledged.
    seq: u64,
    /// The sequence number of the last change in `ops` (what a commit of
    /// `ops` makes durable; never a refused change's).
    queued: u64,
    closed: bool,
    /// Closed as by a crash: what is queued is dropped.
    discard: bool,
}

/// How far the writer got: changes committed, or why it failed.
#[derive(Debug, Clone, Default)]
struct Durable {
    seq: u64,
    failed: Option<Arc<str>>,
}

struct Shared {
    path: PathBuf,
    /// `None` once closed (the file is released).
    db: Mutex<Option<Database>>,
    queue: Mutex<Queue>,
    wake: Condvar,
    durable: watch::Sender<Durable>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The store's data directory: the database, the queue of changes and
/// the writer thread.
pub(super) struct Persist {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A stored object as read: (resource, namespace, name, bytes, the key as stored).
type StoredObject = (String, String, String, Vec<u8>, Vec<u8>);

/// What a data directory held when it was opened.
#[derive(Default)]
struct Restored {
    /// The ceiling, if the directory was used before.
    ceiling: Option<u64>,
    objects: Vec<StoredObject>,
    tokens: Vec<(String, Vec<u8>)>,
}

/// Moves the objects at `keys` from [`OBJECTS`] to [`QUARANTINE`], in one
/// transaction: kept aside, they are not read at the next start.
fn quarantine(db: &Database, keys: &[(Vec<u8>, Vec<u8>)]) -> Result<(), redb::Error> {
    let tx = db.begin_write()?;
    {
        let mut objects = tx.open_table(OBJECTS)?;
        let mut aside = tx.open_table(QUARANTINE)?;
        for (key, bytes) in keys {
            aside.insert(key.as_slice(), bytes.as_slice())?;
            objects.remove(key.as_slice())?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// One batch in one transaction, committed (durably) when it returns.
fn write_ops(db: &Database, ops: Vec<Op>) -> Result<(), redb::Error> {
    let tx = db.begin_write()?;
    {
        let mut objects = tx.open_table(OBJECTS)?;
        let mut tokens = tx.open_table(TOKENS)?;
        for op in ops {
            match op {
                Op::Put { key, bytes } => {
                    objects.insert(key.as_slice(), &bytes[..])?;
                }
                Op::Delete { key } => {
                    objects.remove(key.as_slice())?;
                }
                Op::Token { token, json } => {
                    tokens.insert(token.as_str(), json.as_slice())?;
                }
            }
        }
    }
    tx.commit()?;
    Ok(())
}

impl Shared {
    fn db_error(&self, e: impl Into<redb::Error>) -> Error {
        Error::Db { path: self.path.display().to_string(), message: e.into().to_string() }
    }

    /// Write one batch in one transaction (durable when it returns).
    fn write(&self, ops: Vec<Op>) -> Result<(), String> {
        let db = lock(&self.db);
        let Some(db) = db.as_ref() else { return Err("closed".into()) };
        write_ops(db, ops).map_err(|e| e.to_string())
    }

    fn run(&self) {
        loop {
            let (ops, seq) = {
                let mut q = lock(&self.queue);
                while q.ops.is_empty() && !q.closed {
                    q = match self.wake.wait(q) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                }
                if q.discard || q.ops.is_empty() {
                    break;
                }
                (std::mem::take(&mut q.ops), q.queued)
            };
            match self.write(ops) {
                Ok(()) => self.durable.send_modify(|d| d.seq = seq),
                Err(e) => {
                    // The batch is lost: nothing after it may be
                    // acknowledged either (a later commit would otherwise
                    // cover the lost changes' sequence numbers).
                    tracing::error!(error = %e, path = %self.path.display(), "data directory commit failed; writes are no longer acknowledged");
                    {
                        let mut q = lock(&self.queue);
                        q.closed = true;
                        q.discard = true;
                        q.ops.clear();
                    }
                    self.durable.send_modify(|d| d.failed = Some(e.into()));
                    break;
                }
            }
        }
        lock(&self.db).take();
        self.durable.send_modify(|d| {
            if d.failed.is_none() {
                d.failed = Some("closed".into());
            }
        });
    }
}

impl Persist {
    /// Open (or create) the database in `dir` and read what it holds.
    fn open(dir: &Path) -> Result<(Persist, Restored), Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Dir { path: dir.display().to_string(), source })?;
        let path = dir.join(FILE);
        let db_err = |e: redb::Error| Error::Db { path: path.display().to_string(), message: e.to_string() };
        let db = Database::create(&path).map_err(|e| db_err(e.into()))?;
        let restored = read_all(&db).map_err(db_err)?;
        let shared = Arc::new(Shared {
            path,
            db: Mutex::new(Some(db)),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            durable: watch::channel(Durable::default()).0,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("berth-data-dir".into())
            .spawn(move || worker.run())
            .map_err(|source| Error::Dir { path: dir.display().to_string(), source })?;
        Ok((Persist { shared, thread: Mutex::new(Some(thread)) }, restored))
    }

    fn push(&self, op: Op) {
        let mut q = lock(&self.shared.queue);
        // Counted even when refused (closed): the change is in memory
        // only, and whoever made it must not be told it is durable.
        q.seq += 1;
        if q.closed {
            return;
        }
        q.ops.push(op);
        q.queued = q.seq;
        drop(q);
        self.shared.wake.notify_one();
    }

    /// Persist `ceiling` now (synchronously, durable when it returns).
    fn reserve(&self, ceiling: u64) -> Result<(), Error> {
        let db = lock(&self.shared.db);
        let db = db.as_ref().ok_or_else(|| Error::Stopped("closed".into()))?;
        let write = || -> Result<(), redb::Error> {
            let tx = db.begin_write()?;
            tx.open_table(META)?.insert(CEILING, ceiling)?;
            tx.commit()?;
            Ok(())
        };
        write().map_err(|e| self.shared.db_error(e))
    }

    /// Wait until every change made so far is committed: `Ok` only once
    /// a commit that held the last of them returned `Ok`. A change made
    /// after the writer stopped (closed, halted, or a failed commit) is
    /// never committed, so this then fails.
    async fn synced(&self) -> Result<(), Error> {
        let target = lock(&self.shared.queue).seq;
        let mut rx = self.shared.durable.subscribe();
        let d = rx.wait_for(|d| d.seq >= target || d.failed.is_some()).await.map_err(|_| Error::Stopped("closed".into()))?;
        match (&d.failed, d.seq >= target) {
            (_, true) => Ok(()),
            (Some(why), false) => Err(Error::Stopped(why.to_string())),
            (None, false) => Err(Error::Stopped("closed".into())),
        }
    }

    /// Stop the writer: after committing what is queued, or (`discard`,
    /// as a crash would) dropping it; the database file is released.
    fn close(&self, discard: bool) {
        {
            let mut q = lock(&self.shared.queue);
            q.closed = true;
            q.discard |= discard;
            if discard {
                q.ops.clear();
            }
        }
        self.shared.wake.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Persist {
    fn drop(&mut self) {
        self.close(false);
    }
}

fn read_all(db: &Database) -> Result<Restored, redb::Error> {
    // Make the tables, so that a read of a new database finds them.
    let tx = db.begin_write()?;
    tx.open_table(OBJECTS)?;
    tx.open_table(TOKENS)?;
    tx.open_table(META)?;
    tx.open_table(QUARANTINE)?;
    tx.commit()?;
    let tx = db.begin_read()?;
    let mut out = Restored { ceiling: tx.open_table(META)?.get(CEILING)?.map(|v| v.value()), ..Default::default() };
    for entry in tx.open_table(OBJECTS)?.iter()? {
        let (k, v) = entry?;
        let key = String::from_utf8_lossy(k.value()).into_owned();
        let mut parts = key.splitn(3, '\0');
        let (Some(r), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else { continue };
        out.objects.push((r.to_string(), ns.to_string(), name.to_string(), v.value().to_vec(), k.value().to_vec()));
    }
    for entry in tx.open_table(TOKENS)?.iter()? {
        let (k, v) = entry?;
        out.tokens.push((k.value().to_string(), v.value().to_vec()));
    }
    Ok(out)
}

/// Writes `bytes` as the object `resource/namespace/name` of the data
/// directory `dir`, which no store holds open (tests of unreadable objects).
#[cfg(feature = "testing")]
pub fn plant_object(dir: &Path, resource: &str, namespace: &str, name: &str, bytes: &[u8]) -> Result<(), Error> {
    let path = dir.join(FILE);
    let db_err = |e: redb::Error| Error::Db { path: path.display().to_string(), message: e.to_string() };
    let db = Database::create(&path).map_err(|e| db_err(e.into()))?;
    write_ops(&db, vec![Op::Put { key: object_key(resource, namespace, name), bytes: Bytes::copy_from_slice(bytes) }]).map_err(db_err)
}

impl Store {
    /// A store kept in the data directory `dir` (see the module's doc):
    /// what it holds is read back, and every change is written there.
    /// Returns the store and whether the directory held a store already
    /// (then nothing should be seeded: the cluster's namespaces, nodes
    /// and classes are those it kept).
    pub fn open(cfg: StoreConfig, dir: &Path) -> Result<(Store, bool), Error> {
        let started = Instant::now();
        let (persist, restored) = Persist::open(dir)?;
        let path = persist.shared.path.display().to_string();
        let mut store = Store::new(cfg);
        let existing = restored.ceiling.is_some();
        let count = restored.objects.len();
        let mut inner = store.lock();
        let unreadable = store.restore(&mut inner, restored, &path);
        // One object that does not read back never stops the cluster: it
        // is named, moved aside (the `quarantine` table, the same key, the
        // bytes as they were) and left out; the rest is served.
        if !unreadable.is_empty() {
            let keys: Vec<_> = unreadable.iter().map(|(k, b, _)| (k.clone(), b.clone())).collect();
            let db = lock(&persist.shared.db);
            if let Some(db) = db.as_ref() {
                quarantine(db, &keys).map_err(|e| Error::Db { path: path.clone(), message: e.to_string() })?;
            }
        }
        for (_, _, e) in &unreadable {
            tracing::error!(error = %e, "data directory: an object that cannot be read back is left out and kept aside in the quarantine table");
        }
        // Above every resourceVersion handed out before; the history
        // starts here (older resumes get 410 Gone).
        let start = inner.ceiling.max(inner.rv) + 1;
        inner.rv = start;
        for ks in &mut inner.kinds {
            ks.compacted_rv = start;
        }
        inner.ceiling = start + RESERVE;
        persist.reserve(inner.ceiling)?;
        drop(inner);
        store.persist = Some(persist);
        store.quarantined = unreadable.into_iter().map(|(_, _, e)| e).collect();
        tracing::info!(objects = count, rv = start, took = ?started.elapsed(), path, "data directory opened");
        Ok((store, existing))
    }

    /// Reads back what the directory held; returns the objects that do not
    /// read back (their stored key, their bytes, why), which are left out.
    fn restore(&self, inner: &mut Inner, restored: Restored, path: &str) -> Vec<(Vec<u8>, Vec<u8>, Error)> {
        let corrupt = |key: String, message: String| Error::Corrupt { path: path.to_string(), key, message };
        let mut unreadable = Vec::new();
        inner.ceiling = restored.ceiling.unwrap_or(0);
        // CRDs first: their resources must be served before their objects are read.
        let crds = qualified(&self.info(res::CRDS));
        let (crd_objects, objects): (Vec<_>, Vec<_>) = restored.objects.into_iter().partition(|o| o.0 == crds);
        let mut ids: HashMap<String, Option<usize>> = HashMap::new();
        for (r, ns, name, bytes, stored_key) in crd_objects.into_iter().chain(objects) {
            let id = *ids.entry(r.clone()).or_insert_with(|| self.storage_id(&r));
            let Some(id) = id else {
                tracing::warn!(resource = %r, namespace = %ns, name = %name, "data directory: an object of a resource no longer served is left out");
                continue;
            };
            let mut value: Value = match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    unreadable.push((stored_key, bytes, corrupt(format!("{r}/{ns}/{name}"), e.to_string())));
                    continue;
                }
            };
            // managedFields are held as their JSON text (see `managed`).
            if let Some(m) = value.at_mut("/metadata/managedFields")
                && m.is_array()
            {
                *m = Value::String(m.to_string());
            }
            let rv = get_str(&value, "/metadata/resourceVersion").parse::<u64>().unwrap_or(0);
            let obj = match Obj::new(value, rv) {
                Ok(o) => o,
                Err(e) => {
                    unreadable.push((stored_key, bytes, corrupt(format!("{r}/{ns}/{name}"), e.to_string())));
                    continue;
                }
            };
            inner.rv = inner.rv.max(rv);
            if id == res::CRDS {
                self.define_crd(inner, &obj.value);
            } else if id == res::PDBS {
                *inner.pdbs_per_ns.entry(ns.clone()).or_default() += 1;
            } else if id == res::NAMESPACES && is_deleting(&obj.value) {
                inner.terminating_ns.insert(name.clone());
            }
            let stored = if kept_lean(id) { obj.lean(lean_fields(id, &self.info(id))) } else { obj };
            inner.kinds[id].objects.insert((ns, name), stored);
        }
        let now = chrono::Utc::now();
        let mut tokens = lock(&self.tokens);
        for (token, json) in restored.tokens {
            if let Some(t) = IssuedToken::from_json(&json).filter(|t| t.expires > now) {
                tokens.insert(token, t);
            }
        }
        unreadable
    }

    /// The objects of the data directory that could not be read back when
    /// it was opened: each names the object and why; they were left out
    /// and kept aside in the database's `quarantine` table.
    pub fn quarantined(&self) -> &[Error] {
        &self.quarantined
    }

    /// The id whose store holds the objects of resource `plural.group`.
    fn storage_id(&self, qualified_name: &str) -> Option<usize> {
        let reg = self.registry();
        reg.all().iter().enumerate().map(|(i, _)| i).find(|i| reg.storage(*i) == *i && qualified(&self.info(*i)) == qualified_name)
    }

    /// Queue a committed change of resource `r` (its storage id) for the
    /// data directory, if there is one; `obj` is the new version (for a
    /// deletion, the last one).
    pub(super) fn persist_change(&self, r: usize, deleted: bool, obj: &Obj) {
        let Some(p) = &self.persist else { return };
        let key = object_key(&qualified(&self.info(r)), obj.namespace(), obj.name());
        p.push(if deleted { Op::Delete { key } } else { Op::Put { key, bytes: obj.bytes.clone() } });
    }

    /// Queue an issued token for the data directory, if there is one.
    pub(super) fn persist_token(&self, token: &str, t: &IssuedToken) {
        let Some(p) = &self.persist else { return };
        p.push(Op::Token { token: token.to_string(), json: t.to_json() });
    }

    /// Make resourceVersion `rv` available: with a data directory, a
    /// resourceVersion above the persisted ceiling is handed out only
    /// once a higher ceiling is committed.
    pub(super) fn reserve_rv(&self, inner: &mut Inner, rv: u64) -> super::Result<()> {
        let Some(p) = &self.persist else { return Ok(()) };
        if rv <= inner.ceiling {
            return Ok(());
        }
        let ceiling = rv + RESERVE;
        p.reserve(ceiling).map_err(|e| super::Error::Internal(e.to_string()))?;
        inner.ceiling = ceiling;
        Ok(())
    }

    /// Does the store keep its objects in a data directory?
    pub fn is_persistent(&self) -> bool {
        self.persist.is_some()
    }

    /// Wait until every change made so far is committed to the data
    /// directory (at once without one). A request that wrote is answered
    /// only after this.
    pub async fn synced(&self) -> Result<(), Error> {
        match &self.persist {
            Some(p) => p.synced().await,
            None => Ok(()),
        }
    }

    /// Stop writing to the data directory and release it, as a crash
    /// would: changes not yet committed are dropped (acknowledged ones
    /// are committed already). For tests of durability; the store keeps
    /// serving from memory.
    pub fn halt_persistence(&self) {
        if let Some(p) = &self.persist {
            p.close(true);
        }
    }

    /// Commit what is queued and release the data directory (graceful
    /// shutdown).
    pub fn close_persistence(&self) {
        if let Some(p) = &self.persist {
            p.close(false);
        }
    }

    /// Tell the kubelets about the pods read back from a data directory:
    /// bound pods not started yet start, terminating ones are removed
    /// at their deadline.
    pub fn resume_kubelets(&self) {
        let pods: Vec<_> = {
            let inner = self.lock();
            inner.kinds[PODS].objects.values().map(|o| o.full()).collect()
        };
        let now = chrono::Utc::now();
        for p in pods {
            let v = &p.value;
            let (ns, name, uid) = (p.namespace().to_string(), p.name().to_string(), p.uid().to_string());
            if is_deleting(v) {
                let deadline = v
                    .at("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map_or(0, |t| (t.with_timezone(&chrono::Utc) - now).num_milliseconds().max(0).unsigned_abs());
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(deadline);
                self.notify(KubeletMsg::Terminate { ns, name, uid, deadline });
            } else if !get_str(v, "/spec/nodeName").is_empty() && get_str(v, "/status/phase") == "Pending" {
                self.notify(KubeletMsg::Bound { ns, name, uid });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("berth-persist-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A change made once the writer has stopped is never acknowledged,
    /// even when every change before it was committed (the queue then
    /// looks caught up): the defect that lost an acknowledged ConfigMap
    /// when a cluster was aborted mid-burst (a connection still open
    /// served one more create after the halt, and it was answered 201).
    #[tokio::test]
    async fn a_change_after_a_halt_is_never_acknowledged() {
        let d = dir("halt");
        let (store, _) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        let cms = res::lookup("", "v1", "configmaps").unwrap_or_else(|| panic!("configmaps"));
        let cm = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "default"}});
        store.create(res::NAMESPACES, "", json!({"metadata": {"name": "default"}})).unwrap_or_else(|e| panic!("{e}"));
        store.create(cms, "default", cm("before")).unwrap_or_else(|e| panic!("{e}"));
        store.synced().await.unwrap_or_else(|e| panic!("{e}"));
        store.halt_persistence();
        // Nothing is pending, and what was acknowledged stays so.
        assert!(store.synced().await.is_ok());
        store.create(cms, "default", cm("after")).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(store.synced().await, Err(Error::Stopped(_))), "a change made after the halt was acknowledged");
        drop(store);
        let (store, _) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.exists(cms, "default", "before"));
        assert!(!store.exists(cms, "default", "after"));
        // The same after a graceful close.
        store.close_persistence();
        store.create(cms, "default", cm("closed")).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.synced().await.is_err());
        drop(store);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Objects, deletions and the resourceVersion survive a reopen; the
    /// first resourceVersion after it is above every one before.
    #[tokio::test]
    async fn an_unreadable_object_is_named_kept_aside_and_left_out() {
        let d = dir("quarantine");
        let (store, _) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        let cms = res::lookup("", "v1", "configmaps").unwrap_or_else(|| panic!("configmaps"));
        let cm = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "default"}, "data": {"a": n}});
        store.create(res::NAMESPACES, "", json!({"metadata": {"name": "default"}})).unwrap_or_else(|e| panic!("{e}"));
        store.create(cms, "default", cm("good")).unwrap_or_else(|e| panic!("{e}"));
        store.synced().await.unwrap_or_else(|e| panic!("{e}"));
        let resource = qualified(&store.info(cms));
        drop(store);
        // One object that does not read back (nested past serde_json's
        // limit, as an older berth could store through a JSON patch).
        let key = object_key(&resource, "default", "bad");
        let deep = format!("{{\"metadata\":{{\"name\":\"bad\"}},\"data\":{}{}}}", "[".repeat(200), "]".repeat(200));
        write_ops(&Database::create(d.join(FILE)).unwrap_or_else(|e| panic!("{e}")), vec![Op::Put { key: key.clone(), bytes: Bytes::from(deep) }]).unwrap_or_else(|e| panic!("{e}"));

        let (store, existing) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("one unreadable object stopped the start: {e}"));
        assert!(existing);
        let named: Vec<String> = store.quarantined().iter().map(ToString::to_string).collect();
        assert_eq!(named.len(), 1, "{named:?}");
        assert!(named[0].contains("object configmaps/default/bad: recursion limit exceeded"), "{named:?}");
        assert!(store.exists(cms, "default", "good"), "the rest is served");
        assert!(!store.exists(cms, "default", "bad"));
        drop(store);
        // Kept aside, not read again.
        {
            let db = Database::create(d.join(FILE)).unwrap_or_else(|e| panic!("{e}"));
            let tx = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
            let aside = tx.open_table(QUARANTINE).unwrap_or_else(|e| panic!("{e}"));
            assert!(aside.get(key.as_slice()).unwrap_or_else(|e| panic!("{e}")).is_some(), "the bytes are kept in the quarantine table");
            let objects = tx.open_table(OBJECTS).unwrap_or_else(|e| panic!("{e}"));
            assert!(objects.get(key.as_slice()).unwrap_or_else(|e| panic!("{e}")).is_none());
        }
        let (store, _) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.quarantined().is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_store_reads_back_what_it_wrote() {
        let d = dir("roundtrip");
        let (store, existing) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        assert!(!existing);
        let cms = res::lookup("", "v1", "configmaps").unwrap_or_else(|| panic!("configmaps"));
        let cm = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "default"}, "data": {"a": n}});
        store.create(res::NAMESPACES, "", json!({"metadata": {"name": "default"}})).unwrap_or_else(|e| panic!("{e}"));
        let kept = store.create(cms, "default", cm("kept")).unwrap_or_else(|e| panic!("{e}"));
        store.create(cms, "default", cm("gone")).unwrap_or_else(|e| panic!("{e}"));
        store.delete(cms, "default", "gone", &super::super::DeleteOpts::default()).unwrap_or_else(|e| panic!("{e}"));
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "default"}});
        store.create(res::SERVICE_ACCOUNTS, "default", sa).unwrap_or_else(|e| panic!("{e}"));
        let issued = store.request_token("default", "robot", json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).unwrap_or_else(|e| panic!("{e}"));
        let token = issued["status"]["token"].as_str().unwrap_or_default().to_string();
        store.synced().await.unwrap_or_else(|e| panic!("{e}"));
        let last = store.current_rv();
        drop(store);
        let (store, existing) = Store::open(StoreConfig::default(), &d).unwrap_or_else(|e| panic!("{e}"));
        assert!(existing);
        let back = store.get(cms, "default", "kept").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.value, kept.value);
        assert_eq!(back.bytes, kept.bytes);
        assert!(!store.exists(cms, "default", "gone"));
        // The issued token still authenticates its account.
        assert_eq!(store.review_token(&token).map(|u| u.username), Some("system:serviceaccount:default:robot".to_string()));
        assert!(store.current_rv() > last);
        assert!(matches!(store.watch(cms, super::super::WatchStart::After(last)), Err(super::super::Error::Gone(_))));
        // A second open of the same directory is refused while it is open.
        assert!(Store::open(StoreConfig::default(), &d).is_err());
        drop(store);
        let _ = std::fs::remove_dir_all(&d);
    }
}
