//! What Reserve plugins decided for assumed pods, as the snapshot applies
//! and reverts it: the data of the framework's one assume step
//! ([`crate::framework::assume`]), kept here so that the cache, which keeps
//! each assumed pod's reservations by uid, needs nothing from the framework.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::Snapshot;

/// A decision a Reserve plugin made for one pod that later cycles must see
/// before the API shows it (upstream's assume caches: PV bindings, claim
/// allocations).
pub trait Reservation: Any + fmt::Debug + Send + Sync {
    /// Applies the decision to the cluster view, on behalf of pod `pod_uid`.
    fn assume(&self, snap: &mut Snapshot, pod_uid: &str);

    /// Reverts what [`Reservation::assume`] applied for pod `pod_uid`. It may
    /// find it gone already (the API's objects supersede an assumption).
    fn forget(&self, snap: &mut Snapshot, pod_uid: &str);
}

/// The reservations of one pod, at most one per Reserve plugin, in the order
/// they were recorded.
#[derive(Clone, Debug, Default)]
pub struct Reservations(Vec<(&'static str, Arc<dyn Reservation>)>);

impl Reservations {
    /// Records `plugin`'s decision, replacing the one it recorded before.
    pub fn record<R: Reservation>(&mut self, plugin: &'static str, r: R) {
        self.put(plugin, Arc::new(r));
    }

    fn put(&mut self, plugin: &'static str, r: Arc<dyn Reservation>) {
        match self.0.iter_mut().find(|(p, _)| *p == plugin) {
            Some(slot) => slot.1 = r,
            None => self.0.push((plugin, r)),
        }
    }

    /// Drops `plugin`'s decision (its Unreserve).
    pub fn clear(&mut self, plugin: &str) {
        self.0.retain(|(p, _)| *p != plugin);
    }

    /// `plugin`'s decision, when it recorded one of type `R`.
    pub fn get<R: Reservation>(&self, plugin: &str) -> Option<&R> {
        self.0.iter().find(|(p, _)| *p == plugin).and_then(|(_, r)| (&**r as &dyn Any).downcast_ref())
    }

    /// True when no plugin recorded anything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Applies each decision to `snap` for pod `pod_uid`.
    pub(crate) fn assume_all(&self, snap: &mut Snapshot, pod_uid: &str) {
        for (_, r) in &self.0 {
            r.assume(snap, pod_uid);
        }
    }

    /// Reverts each decision in `snap` for pod `pod_uid`, the last first.
    pub(crate) fn forget_all(&self, snap: &mut Snapshot, pod_uid: &str) {
        for (_, r) in self.0.iter().rev() {
            r.forget(snap, pod_uid);
        }
    }

    /// Adds `other`'s decisions (each replacing the same plugin's).
    pub(crate) fn merge(&mut self, other: &Reservations) {
        for (p, r) in &other.0 {
            self.put(p, r.clone());
        }
    }
}
