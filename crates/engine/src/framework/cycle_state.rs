//! Per-cycle state: typed data written by PreFilter/PreScore and read by
//! Filter/Score, cloneable so that preemption can try removals on a copy.

use std::any::{Any, TypeId};

use super::assume::Reservations;
use super::pre_bind::PreBindWork;

/// Data a plugin keeps in the cycle state. Blanket-implemented for every
/// `Clone + Send + Sync + 'static` type: a plugin stores its own state type,
/// and reads it back by that type, never by a string key.
pub trait StateData: Any + Send + Sync {
    /// Clones into a box.
    fn clone_box(&self) -> Box<dyn StateData>;
    /// As `Any`, for typed lookup.
    fn as_any(&self) -> &dyn Any;
    /// As mutable `Any`, for typed lookup.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The state of one scheduling cycle.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(TypeId, Box<dyn StateData>)>,
    /// Plugins whose PreFilter answered Skip: their Filter is not run.
    pub skip_filter: Vec<&'static str>,
    /// Plugins whose PreScore answered Skip: their Score is not run.
    pub skip_score: Vec<&'static str>,
    /// The Filter plugins to run (positions in the framework's Filter
    /// list), computed once after PreFilter.
    pub(crate) active_filters: Option<Vec<usize>>,
    /// The cycle's signature: the pod's with what plugins added after
    /// PreFilter ([`super::Plugin::sign_pod`]); 0 when the pod is unsigned.
    pub(crate) signature: u64,
    /// What Reserve plugins decided, for the framework's assume step.
    reservations: Reservations,
    /// PreBind's API work, for the binding cycle.
    pub(super) pre_bind: Vec<PreBindWork>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self.data.iter().map(|(t, d)| (*t, (**d).clone_box())).collect(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
            active_filters: self.active_filters.clone(),
            signature: self.signature,
            reservations: self.reservations.clone(),
            pre_bind: self.pre_bind.clone(),
        }
    }
}

impl CycleState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `v`, replacing any value of the same type.
    pub fn insert<T: StateData + 'static>(&mut self, v: T) {
        let id = TypeId::of::<T>();
        match self.data.iter_mut().find(|(t, _)| *t == id) {
            Some(slot) => slot.1 = Box::new(v),
            None => self.data.push((id, Box::new(v))),
        }
    }

    /// The stored value of type `T`.
    pub fn get<T: StateData + 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.data.iter().find(|(t, _)| *t == id).and_then(|(_, d)| (**d).as_any().downcast_ref())
    }

    /// The stored value of type `T`, mutably.
    pub fn get_mut<T: StateData + 'static>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.data.iter_mut().find(|(t, _)| *t == id).and_then(|(_, d)| (**d).as_any_mut().downcast_mut())
    }

    /// What Reserve plugins decided for the pod: assumed with it by the
    /// framework's one assume step ([`crate::framework::assume`]).
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// Where a Reserve plugin records its decision (and Unreserve clears it).
    pub fn reservations_mut(&mut self) -> &mut Reservations {
        &mut self.reservations
    }

    /// The cycle's signature (see [`super::Plugin::sign_pod`]; 0: unsigned).
    pub fn signature(&self) -> u64 {
        self.signature
    }

    /// Is the plugin's Filter skipped this cycle?
    pub fn filter_skipped(&self, plugin: &str) -> bool {
        self.skip_filter.contains(&plugin)
    }

    /// Is the plugin's Score skipped this cycle?
    pub fn score_skipped(&self, plugin: &str) -> bool {
        self.skip_score.contains(&plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct A(u32);

    #[test]
    fn typed_and_cloned() {
        let mut s = CycleState::new();
        s.insert(A(1));
        let mut c = s.clone();
        if let Some(a) = c.get_mut::<A>() {
            a.0 = 2;
        }
        assert_eq!(s.get::<A>(), Some(&A(1)));
        assert_eq!(c.get::<A>(), Some(&A(2)));
        assert_eq!(s.get::<u8>(), None);
    }
}
