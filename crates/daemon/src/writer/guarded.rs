//! The one guarded write, and the one read-back loop.
//!
//! Every write of a pod's binding cycle (the binding itself, VolumeBinding's
//! PV and claim writes, DynamicResources' claim writes, and the claim
//! writes that undo them) goes through [`Writer::guarded`]:
//!
//! 1. a write slot, handed out by key (a binding's key is its cycle's start,
//!    a PreBind write's its deadline: see [`crate::slots`]);
//! 2. the bind budget's rate limiter;
//! 3. the lease, checked after both waits, right before sending: only the
//!    leader writes, at the moment it writes;
//! 4. the write, bounded by [`WRITE_TIMEOUT`];
//! 5. the error sorted: an answer refusing the write (any 4xx, 409
//!    included) is known not written; a transport error, a 5xx or the
//!    timeout may hide a commit whose reply was lost: the outcome is
//!    unknown, and the object is read back ([`read_back`]) before anyone
//!    acts on it.
//!
//! The caller says what its write came to in its own words (a binding's
//! `BindOutcome`, a claim write's retry after a conflict); what it is
//! guarded by, and how, is said here once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use berth_model::PodInfo;

use super::{outcome_unknown, api_code, PreBindStop, Verified, WriteCounts, Writer};

/// How long one write may take before its outcome counts as unknown.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one read of a read-back may take before it is tried again.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What a guarded write is, for its counters and its log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteKind {
    /// A pod's binding (`pods/binding`).
    Binding,
    /// VolumeBinding's PreBind write: a PV's claimRef, a claim's selected node.
    Volume,
    /// DynamicResources' claim writes (and the pod status write that records
    /// the extended-resource claim).
    Claim,
}

impl WriteKind {
    /// How the logs name it.
    fn what(self) -> &'static str {
        match self {
            WriteKind::Binding => "binding",
            WriteKind::Volume => "PreBind write",
            WriteKind::Claim => "claim write",
        }
    }

    /// What timed out, in the message of a write that did.
    fn timed_out(self) -> &'static str {
        match self {
            WriteKind::Binding => "binding",
            WriteKind::Volume | WriteKind::Claim => "write",
        }
    }

    /// A write that reached the API (answered, or found landed when read back).
    fn written(self, c: &mut WriteCounts) {
        match self {
            // Counted once the bind's outcome is known (`Writer::run_bind`):
            // a binding found made by someone else is not one of ours.
            WriteKind::Binding => {}
            WriteKind::Volume => c.volume_writes += 1,
            WriteKind::Claim => c.claim_writes += 1,
        }
    }

    /// A write whose outcome was unknown and had to be read back.
    fn unknown(self, c: &mut WriteCounts) {
        match self {
            WriteKind::Binding => c.binds_unknown += 1,
            WriteKind::Volume => c.volume_writes_unknown += 1,
            WriteKind::Claim => c.claim_writes_unknown += 1,
        }
    }

    /// A write answered 409.
    fn conflict(self, c: &mut WriteCounts) {
        if self == WriteKind::Claim {
            c.claim_conflicts += 1;
        }
    }
}

/// What a guarded write came to.
#[derive(Debug)]
pub(super) enum Written<T, V> {
    /// The API took it: its reply.
    Done(T),
    /// The API refused it (any 4xx, 409 included): known not written.
    Refused(kube::Error),
    /// The reply was lost (`why`: a transport error, a 5xx, the timeout),
    /// and reading back found `found`.
    ReadBack {
        /// Why the outcome was unknown.
        why: String,
        /// What reading back found.
        found: V,
    },
    /// This replica may not write now: nothing was sent.
    NotLeader,
}

/// What a read-back found says of the write: landed or not.
pub(super) trait Landed {
    /// The write is there.
    fn landed(&self) -> bool;
}

impl Landed for bool {
    fn landed(&self) -> bool {
        *self
    }
}

/// An object the write was to create: found, it landed.
impl<T> Landed for Option<T> {
    fn landed(&self) -> bool {
        self.is_some()
    }
}

impl Landed for Verified {
    fn landed(&self) -> bool {
        *self == Verified::BoundHere
    }
}

/// How long a read-back goes on.
#[derive(Clone, Copy, Debug)]
pub(super) enum Patience {
    /// Until the API answers, whatever it takes: the scheduling loop must
    /// know whether a pod holds a node before it acts. Every error is
    /// retried (a refused read says nothing of the binding).
    Forever,
    /// Until the deadline (PreBind's); an answer refusing the read (4xx)
    /// ends it too.
    Until(Instant),
}

/// Why a read-back ended without an answer.
#[derive(Debug)]
pub(super) enum ReadFailed {
    /// The API refused the read.
    Refused(kube::Error),
    /// The deadline came first.
    Deadline,
}

impl From<ReadFailed> for PreBindStop {
    fn from(e: ReadFailed) -> PreBindStop {
        match e {
            ReadFailed::Refused(e) => PreBindStop::Failed(e.to_string()),
            // Upstream's words for PreBind's context running out.
            ReadFailed::Deadline => PreBindStop::Failed("binding volumes: context deadline exceeded".into()),
        }
    }
}

/// Reads until the API answers: transport errors, 5xx and timeouts are
/// retried with backoff (50 ms doubling to 2 s), for as long as `patience`
/// allows. Reads need no leadership. The one read-back loop: a write whose
/// outcome is unknown, a binding answered 409 and PreBind's reads all use it.
pub(super) async fn read_back<T, F, Fut>(patience: Patience, f: F) -> Result<T, ReadFailed>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut pause = Duration::from_millis(50);
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        match tokio::time::timeout(READ_TIMEOUT, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if matches!(patience, Patience::Until(_)) && !outcome_unknown(&e) => return Err(ReadFailed::Refused(e)),
            Ok(Err(e)) => tracing::debug!(error = %e, attempt, "read failed; retrying"),
            Err(_) => tracing::debug!(attempt, "read timed out; retrying"),
        }
        if let Patience::Until(deadline) = patience
            && Instant::now() + pause > deadline
        {
            return Err(ReadFailed::Deadline);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// What a guarded write is about, for its log line: a binding names its
/// pod and node (`pod=`, `node=`, as every other line about one pod), a
/// PreBind write the object it writes (`object=`).
#[derive(Clone, Copy)]
pub(super) enum Subject<'a> {
    PodOn(&'a PodInfo, &'a str),
    Object(&'a str),
}

impl Writer {
    /// PreBind's reads: [`read_back`] until `deadline`.
    pub(super) async fn read<T, F, Fut>(&self, deadline: tokio::time::Instant, f: F) -> Result<T, PreBindStop>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        Ok(read_back(Patience::Until(deadline), f).await?)
    }

    /// One guarded write (see the module's documentation): `write` through
    /// a slot keyed `key`, the bind budget's limiter and the lease permit,
    /// bounded by [`WRITE_TIMEOUT`]; when its outcome is unknown,
    /// `read_back` is read until the API answers (as `patience` allows) and
    /// what it found is returned. `subject` names the object in the log.
    ///
    /// Errors only when reading back failed (the deadline came, or the read
    /// was refused): the outcome is still unknown.
    #[allow(clippy::too_many_arguments)] // what, when, how long, about what, and the two calls
    pub(super) async fn guarded<T, W, WFut, V, R, RFut>(&self, kind: WriteKind, key: Instant, patience: Patience, subject: Subject<'_>, write: W, read: R) -> Result<Written<T, V>, ReadFailed>
    where
        W: FnOnce() -> WFut,
        WFut: Future<Output = Result<T, kube::Error>>,
        V: Landed,
        R: Fn() -> RFut,
        RFut: Future<Output = Result<V, kube::Error>>,
    {
        let r = {
            let _slot = self.bind_slots.acquire(key).await;
            self.bind_limiter.acquire().await;
            // After both waits: a write queued while this replica led is
            // not sent once it no longer does.
            let Some(_permit) = self.lease.write_permit().await else {
                self.count(|c| c.refused_not_leader += 1);
                return Ok(Written::NotLeader);
            };
            tokio::time::timeout(WRITE_TIMEOUT, write()).await
        };
        let why = match r {
            Ok(Ok(reply)) => {
                self.count(|c| kind.written(c));
                return Ok(Written::Done(reply));
            }
            Ok(Err(e)) if !outcome_unknown(&e) => {
                if api_code(&e) == Some(409) {
                    self.count(|c| kind.conflict(c));
                }
                return Ok(Written::Refused(e));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("{} timed out after {}s", kind.timed_out(), WRITE_TIMEOUT.as_secs()),
        };
        self.count(|c| kind.unknown(c));
        match subject {
            Subject::PodOn(pod, node) => tracing::info!(write = kind.what(), pod = %format_args!("{}/{}", pod.namespace, pod.name), %node, error = %why, "write outcome unknown; reading it back"),
            Subject::Object(object) => tracing::info!(write = kind.what(), %object, error = %why, "write outcome unknown; reading it back"),
        }
        let found = read_back(patience, read).await?;
        if found.landed() {
            self.count(|c| kind.written(c));
        }
        Ok(Written::ReadBack { why, found })
    }
}
