//! Typed create, get and list (k8s-openapi types), for tests and setup.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::resources::{self as res, RESOURCES, ResId};
use crate::selector::Filter;

use super::obj::Obj;
use super::{Error, Result, Store};

/// The built-in resource of a k8s-openapi type.
pub(super) fn typed_id<K: k8s_openapi::Resource>() -> Result<ResId> {
    res::lookup_type::<K>().ok_or_else(|| Error::BadRequest(format!("unsupported kind {}", K::KIND)))
}

/// A stored object as resource `r` shows it (a core/v1 Event is a view
/// of the stored events.k8s.io/v1 one).
pub(super) fn shown<K: DeserializeOwned>(r: ResId, o: &Obj) -> Result<K> {
    if r != res::EVENTS {
        return o.decode();
    }
    let mut v: Value = o.decode()?;
    crate::eventview::to_core(&mut v);
    serde_json::from_value(v).map_err(|e| Error::Internal(e.to_string()))
}

impl Store {
    /// Create a typed object directly (tests, setup). Namespaced objects
    /// without a namespace go to "default".
    pub fn create_typed<K>(&self, obj: &K) -> Result<K>
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> + Serialize + DeserializeOwned,
    {
        let r = typed_id::<K>()?;
        let ns = if RESOURCES[r].namespaced { obj.metadata().namespace.clone().unwrap_or_else(|| "default".into()) } else { String::new() };
        let mut v = serde_json::to_value(obj).map_err(|e| Error::Internal(e.to_string()))?;
        if r == res::EVENTS {
            crate::eventview::to_stored(&mut v);
        }
        let created = self.create(self.registry.storage(r), &ns, v)?;
        shown(r, &created)
    }

    /// Get a typed object directly.
    pub fn get_typed<K: k8s_openapi::Resource + DeserializeOwned>(&self, ns: &str, name: &str) -> Result<K> {
        let r = typed_id::<K>()?;
        shown(r, &*self.get(self.registry.storage(r), ns, name)?)
    }

    /// List typed objects directly (all namespaces when `ns` is None).
    pub fn list_typed<K: k8s_openapi::Resource + DeserializeOwned>(&self, ns: Option<&str>) -> Result<Vec<K>> {
        let r = typed_id::<K>()?;
        let f = Filter { namespace: ns.map(str::to_string), ..Default::default() };
        self.list(self.registry.storage(r), &f, None, None)?.items.iter().map(|o| shown(r, o)).collect()
    }
}
