//! Admission: the defaults and checks the API server applies to writes of
//! particular kinds (its admission plugins, and its registry strategies'
//! PrepareForCreate, PrepareForUpdate and Validate), one module per kind
//! or family of kinds.
//!
//! The store runs them through the hooks of the kind table
//! ([`Admission`], in each [`ResourceInfo`](crate::resources::ResourceInfo)),
//! which [`rules`] fills when the store builds its
//! [`Registry`](crate::resources::Registry): the store branches on no kind
//! for admission and knows nothing of the components whose rules these
//! are (the kubelet's Ready condition, the storage controllers'
//! finalizers). Hooks read the cluster through a
//! [`View`](crate::resources::View) and refuse with
//! [`resources::Error`](crate::resources::Error)'s `Invalid` (422) or
//! `Forbidden` (403), which the store words as the API server does.
//!
//! Imports point one way: admission reads the kind table and the CRD
//! rules; the store, the kubelet and the storage controllers import
//! admission, never the reverse.

pub mod configmaps;
pub mod crds;
pub mod names;
pub mod namespaces;
pub mod pdbs;
pub mod pods;
pub mod priority;
pub mod secrets;
pub mod storage;
pub mod validation;
pub mod workloads;

use crate::resources::{self as res, Admission, ResId};

/// The admission rules of built-in resource `r` (none for most kinds).
pub fn rules(r: ResId) -> Admission {
    match r {
        res::CONFIGMAPS => configmaps::ADMISSION,
        res::CRDS => crds::ADMISSION,
        res::NAMESPACES => namespaces::ADMISSION,
        res::PDBS => pdbs::ADMISSION,
        res::PODS => pods::ADMISSION,
        res::PRIORITY_CLASSES => priority::ADMISSION,
        res::SECRETS => secrets::ADMISSION,
        res::PVCS => storage::CLAIMS,
        res::PVS => storage::VOLUMES,
        res::STORAGE_CLASSES => storage::CLASSES,
        res::DEPLOYMENTS => workloads::DEPLOYMENTS,
        res::STATEFULSETS => workloads::STATEFULSETS,
        res::DAEMONSETS => workloads::DAEMONSETS,
        _ => Admission::NONE,
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A [`View`] over a few objects, for the rules' tests.

    use serde_json::Value;

    use crate::jsonptr::Pointer as _;
    use crate::resources::{ResId, View};

    /// Objects by resource, and the storage-protection switch.
    #[derive(Default)]
    pub(crate) struct Objects {
        pub(crate) objects: Vec<(ResId, Value)>,
        pub(crate) storage_protection: bool,
    }

    impl View for Objects {
        fn get(&self, r: ResId, ns: &str, name: &str) -> Option<&Value> {
            let text = |v: &Value, p: &str| v.at(p).and_then(Value::as_str).unwrap_or("").to_string();
            self.each(r).find(|v| text(v, "/metadata/namespace") == ns && text(v, "/metadata/name") == name)
        }

        fn each(&self, r: ResId) -> Box<dyn Iterator<Item = &Value> + '_> {
            Box::new(self.objects.iter().filter(move |(k, _)| *k == r).map(|(_, v)| v))
        }

        fn storage_protection(&self) -> bool {
            self.storage_protection
        }
    }
}
