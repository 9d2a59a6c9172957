//! `metadata.managedFields` on writes (upstream's field manager): the
//! writer's entry, apply conflicts, and Events' entries in the stored
//! form's names.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::eventview;
use crate::jsonptr::Pointer as _;
use crate::managed;
use crate::object::now_rfc3339;
use crate::resources::ResourceInfo;

use super::{Error, Result, Store, meta_mut};

/// Who writes and how: the field manager recorded in
/// `metadata.managedFields` (None for the cluster's own writes, which keep
/// the object's entries as they are), the apiVersion of the request,
/// apply's `force`, and `dryRun=All`.
#[derive(Debug, Clone, Default)]
pub struct WriteCtx {
    /// The field manager (`fieldManager`, else from the User-Agent).
    pub manager: Option<String>,
    /// The request's apiVersion (`v1`, `apps/v1`); the resource's when empty.
    pub api_version: String,
    /// Apply's `force=true`.
    pub force: bool,
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// Set by [`Store::patch_with`] for an apply: the fields applied.
    pub(super) applied: Option<managed::FieldSet>,
}

impl WriteCtx {
    /// A write by `manager` through apiVersion `api_version`.
    pub fn new(manager: impl Into<String>, api_version: impl Into<String>) -> Self {
        WriteCtx { manager: Some(manager.into()), api_version: api_version.into(), ..Default::default() }
    }
}

/// A request's or a stored object's managedFields as the store tracks
/// them: for Events, every entry's fields in the stored form's names (see
/// [`eventview::entries_to`]).
pub(super) fn decode_fields(info: &ResourceInfo, list: &Value) -> std::result::Result<Vec<managed::Entry>, managed::Error> {
    let mut entries = managed::decode(list)?;
    if eventview::is_events(info) {
        eventview::entries_to(&mut entries, true);
    }
    Ok(entries)
}

/// managedFields' stored form (see `managed::encode`): for Events, an entry
/// written through core/v1 names its fields as core/v1 does.
pub(super) fn encode_fields(info: &ResourceInfo, entries: &[managed::Entry]) -> Value {
    if eventview::is_events(info) && entries.iter().any(|e| e.api_version == eventview::CORE) {
        let mut shown = entries.to_vec();
        eventview::entries_to(&mut shown, false);
        return managed::encode(&shown);
    }
    managed::encode(entries)
}

impl Store {
    /// Record a write in `new`'s `metadata.managedFields` (upstream's field
    /// manager): the entries come from the request object when it sets
    /// them (`[]` or `[{}]` resets them; never through a subresource), else
    /// from the live object; the writer's entry gets what it applied, or
    /// what it changed. Apply conflicts are refused here.
    pub(super) fn record_fields(&self, info: &ResourceInfo, old: Option<&Value>, new: &mut Value, ctx: &WriteCtx, status_only: bool) -> Result<()> {
        let Some(manager) = ctx.manager.clone() else { return Ok(()) };
        let schema = info.custom.as_ref().and_then(|c| c.schema.as_ref());
        let shape = schema.map_or(managed::Shape::Builtin, managed::Shape::Custom);
        let live = old.and_then(|o| o.at("/metadata/managedFields"));
        let live_entries = live.and_then(|m| decode_fields(info, m).ok()).unwrap_or_default();
        let mut entries = match new.at("/metadata/managedFields") {
            Some(m) if !status_only && managed::is_reset(m) => Vec::new(),
            Some(m) if !status_only && Some(m) != live => match decode_fields(info, m) {
                Ok(e) if !e.is_empty() => e,
                _ => live_entries,
            },
            _ => live_entries,
        };
        let api_version = if ctx.api_version.is_empty() { info.api_version() } else { ctx.api_version.clone() };
        let subresource = if status_only { "status" } else { "" };
        // A plain create (an Update by one manager, no entries of its own):
        // its one entry is written from what the create changed, shared by
        // every create of the same shape.
        // (Not for an Event written through core/v1: its entry names the
        // fields as core/v1 does, see `encode_fields`.)
        if old.is_none() && entries.is_empty() && ctx.applied.is_none() && !(eventview::is_events(info) && api_version == eventview::CORE) {
            let cmp = managed::created_shared(new, info.has_status, status_only, shape);
            let list = managed::encode_created(&manager, &api_version, subresource, &now_rfc3339(), &cmp);
            let meta = meta_mut(new)?;
            match list {
                Some(list) => meta.insert("managedFields".into(), list),
                None => meta.remove("managedFields"),
            };
            return Ok(());
        }
        let (operation, set) = match &ctx.applied {
            Some(s) => (managed::Operation::Apply, s.clone()),
            None => (managed::Operation::Update, managed::FieldSet::default()),
        };
        let me = managed::Entry {
            manager,
            operation,
            api_version,
            subresource: subresource.into(),
            time: Some(now_rfc3339()),
            set,
        };
        let cmp = match old {
            Some(o) => Arc::new(managed::compare(&managed::tracked(o, info.has_status, status_only), &managed::tracked(new, info.has_status, status_only), shape)),
            None => managed::created_shared(new, info.has_status, status_only, shape),
        };
        if let Err(conflicts) = managed::record(&mut entries, me, &cmp, ctx.force) {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"type": "FieldManagerConflict", "message": format!("conflict with {}", c.manager), "field": c.field}))
                .collect();
            return Err(Error::ApplyConflict { message: managed::conflict_message(&conflicts), causes: Value::Array(causes) });
        }
        let meta = meta_mut(new)?;
        if entries.iter().all(|e| e.set.is_empty()) {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), encode_fields(info, &entries));
        }
        Ok(())
    }
}
