//! Write slots handed out in order of a key, not of arrival.
//!
//! The writer's binds and PreBind writes share a fixed number of slots (the
//! write concurrency). Handed out first come, first served, a burst of pods
//! with claims queues every pod's first claim write before any pod's
//! binding, and no pod is bound until nearly the whole burst has been
//! written. Handed out by key (a binding's key is when its pod's cycle
//! started; a PreBind write's is its deadline, later than any binding's),
//! the slots go to bindings first and then to the pods closest to theirs,
//! so pods finish in about the order they were scheduled.
//!
//! Hand-written rather than a crate's: tokio's `Semaphore` is strictly
//! first come, first served, and no well-kept crate offers a keyed one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

/// `n` slots, handed out lowest key first (first come first among equal keys).
#[derive(Debug)]
pub struct Slots {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    seq: u64,
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
}

/// A slot held until dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
}

/// A waiter: gives back a slot it was handed and never took, and leaves
/// the queue if it was not handed one, when its future is dropped.
struct Waiting {
    slots: Arc<Slots>,
    key: (Instant, u64),
    rx: oneshot::Receiver<()>,
    taken: bool,
}

impl Slots {
    /// `n` slots (at least one).
    pub fn new(n: usize) -> Arc<Slots> {
        Arc::new(Slots { state: Mutex::new(State { free: n.max(1), seq: 0, waiting: BTreeMap::new() }) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic never happens with the lock held; if one did, the counts are still whole.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for a slot; among waiters, the lowest `key` gets the next one.
    pub async fn acquire(self: &Arc<Self>, key: Instant) -> Slot {
        let (id, rx) = {
            let mut s = self.lock();
            if s.free > 0 {
                s.free -= 1;
                return Slot { slots: self.clone() };
            }
            s.seq += 1;
            let id = (key, s.seq);
            let (tx, rx) = oneshot::channel();
            s.waiting.insert(id, tx);
            (id, rx)
        };
        let mut w = Waiting { slots: self.clone(), key: id, rx, taken: false };
        // The sender lives in the queue until it is used: an error cannot
        // come (the queue is dropped only with `self`).
        let _ = (&mut w.rx).await;
        w.taken = true;
        Slot { slots: self.clone() }
    }

    /// Slots free now.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.lock().free
    }

    /// A slot comes back: to the first waiter, or to the free count.
    fn release(&self) {
        let mut s = self.lock();
        // Under the lock, so that a waiter leaving cannot cross the hand-over.
        while let Some((_, tx)) = s.waiting.pop_first() {
            if tx.send(()).is_ok() {
                return;
            }
        }
        s.free += 1;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release();
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let queued = self.slots.lock().waiting.remove(&self.key).is_some();
        if !queued {
            // Handed a slot it will never take: pass it on.
            self.slots.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_lowest_key_gets_the_next_slot_whatever_the_arrival() {
        let slots = Slots::new(1);
        let held = slots.acquire(Instant::now()).await;
        let base = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Arrive in the order 3, 1, 2 (keys), each queued before the next arrives.
        for k in [3u64, 1, 2] {
            let (slots, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _s = slots.acquire(base + Duration::from_secs(k)).await;
                order.lock().map(|mut o| o.push(k)).ok();
            }));
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(held);
        for t in tasks {
            t.await.ok();
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn a_waiter_dropped_in_line_or_after_being_handed_a_slot_loses_none() {
        let slots = Slots::new(1);
        let held = slots.acquire(Instant::now()).await;
        // Dropped while in line.
        let gone = tokio::time::timeout(Duration::from_millis(5), slots.acquire(Instant::now())).await;
        assert!(gone.is_err());
        // Handed the slot, then dropped before taking it.
        let mut waiter = Box::pin(slots.acquire(Instant::now()));
        assert!(futures::poll!(&mut waiter).is_pending());
        drop(held);
        drop(waiter);
        assert_eq!(slots.free(), 1);
        let a = slots.acquire(Instant::now()).await;
        assert_eq!(slots.free(), 0);
        drop(a);
        assert_eq!(slots.free(), 1);
    }
}
