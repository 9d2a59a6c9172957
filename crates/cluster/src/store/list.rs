//! Reads: get, exists, and lists with label and field selectors and
//! pages (limit, continue tokens).

use std::ops::Bound;
use std::sync::Arc;

use crate::resources::ResId;
use crate::selector::Filter;

use super::obj::Obj;
use super::{Error, Key, Result, Store, not_found};

/// Result of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Items, ordered by namespace then name.
    pub items: Vec<Arc<Obj>>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token, if more items exist.
    pub cont: Option<String>,
}

pub(super) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect();
    String::from_utf8(bytes?).ok()
}

pub(super) fn encode_continue(rv: u64, key: &Key) -> String {
    hex(&format!("{rv}\u{0}{}\u{0}{}", key.0, key.1))
}

pub(super) fn decode_continue(s: &str) -> Option<(u64, Key)> {
    let raw = unhex(s)?;
    let mut parts = raw.splitn(3, '\u{0}');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (ns, name)))
}

impl Store {
    /// Get one object.
    pub fn get(&self, r: ResId, ns: &str, name: &str) -> Result<Arc<Obj>> {
        // A lean copy is parsed back after the lock is let go.
        self.get_stored(r, ns, name).map(|o| o.full())
    }

    /// One object as stored: for a kind kept lean (pods), its bytes and
    /// what selectors read, without parsing it (see [`Obj::full`]).
    pub fn get_stored(&self, r: ResId, ns: &str, name: &str) -> Result<Arc<Obj>> {
        let found = self.lock().kinds[r].objects.get(&(ns.to_string(), name.to_string())).cloned();
        found.ok_or_else(|| not_found(&self.info(r), name))
    }

    /// Is there an object of resource `r` named `name` in `ns`? (Reads
    /// nothing of it.)
    pub fn exists(&self, r: ResId, ns: &str, name: &str) -> bool {
        self.lock().kinds[r].objects.contains_key(&(ns.to_string(), name.to_string()))
    }

    /// List objects matching a filter, with optional paging.
    pub fn list(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>) -> Result<ListResult> {
        self.list_with(r, filter, limit, cont, true)
    }

    /// [`Store::list`] for a reader of the bytes only: the items as stored
    /// (a kind kept lean comes lean; see [`Obj::full`]).
    pub fn list_bytes(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>) -> Result<ListResult> {
        self.list_with(r, filter, limit, cont, false)
    }

    pub(super) fn list_with(&self, r: ResId, filter: &Filter, limit: Option<usize>, cont: Option<&str>, whole: bool) -> Result<ListResult> {
        let (start_rv, after) = match cont {
            Some(c) if !c.is_empty() => {
                let (rv, key) = decode_continue(c).ok_or_else(|| Error::BadRequest("invalid continue token".into()))?;
                (Some(rv), Some(key))
            }
            _ => (None, None),
        };
        let inner = self.lock();
        let ks = &inner.kinds[r];
        let ns = filter.namespace.as_deref();
        let iter: Box<dyn Iterator<Item = (&Key, &Arc<Obj>)>> = match &after {
            None => ks.range_ns(ns),
            Some(k) => {
                let it = ks.objects.range::<Key, _>((Bound::Excluded(k.clone()), Bound::Unbounded));
                match ns {
                    Some(ns) => Box::new(it.take_while(move |(k, _)| k.0 == ns)),
                    None => Box::new(it),
                }
            }
        };
        let mut items = Vec::new();
        let mut cont_out = None;
        let rv = start_rv.unwrap_or(inner.rv);
        for (k, o) in iter {
            if !o.matches(filter) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                if let Some(last) = items.last().map(|o: &Arc<Obj>| (o.namespace().to_string(), o.name().to_string())) {
                    cont_out = Some(encode_continue(rv, &last));
                }
                let _ = k;
                break;
            }
            items.push(o.clone());
        }
        drop(inner);
        // Lean items are read back whole outside the lock: other requests
        // need not wait for a long list to parse.
        if whole {
            for o in &mut items {
                if o.is_lean() {
                    *o = o.full();
                }
            }
        }
        Ok(ListResult { items, rv, cont: cont_out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let k = ("ns".to_string(), "name".to_string());
        assert_eq!(decode_continue(&encode_continue(7, &k)), Some((7, k)));
        assert_eq!(decode_continue("zz"), None);
    }
}
