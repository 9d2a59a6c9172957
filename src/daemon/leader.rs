//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's
//! leaderelection does it: the holder renews every retryPeriod; a replica
//! that cannot renew within renewDeadline stops leading at once; others take
//! the lease when its record has not changed for leaseDuration (judged by
//! their own clock, so clock skew between replicas does not matter). On
//! shutdown the holder releases the lease so a successor need not wait.

use std::time::Duration;

use k8s_openapi::api::coordination::v1 as coord;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// leaseDuration (15 s upstream).
    pub lease_duration: Duration,
    /// renewDeadline (10 s upstream).
    pub renew_deadline: Duration,
    /// retryPeriod (2 s upstream).
    pub retry_period: Duration,
}

#[derive(Default)]
struct Observed {
    record: Option<(Option<String>, Option<String>)>,
    at: Option<Instant>,
}

fn now_micro() -> meta::MicroTime {
    meta::MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn spec_for(cfg: &LeaderConfig, prev: Option<&coord::LeaseSpec>, taking_over: bool) -> coord::LeaseSpec {
    let transitions = prev.and_then(|s| s.lease_transitions).unwrap_or(0);
    coord::LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs().max(1) as i32),
        acquire_time: if taking_over { Some(now_micro()) } else { prev.and_then(|s| s.acquire_time.clone()).or_else(|| Some(now_micro())) },
        renew_time: Some(now_micro()),
        lease_transitions: Some(if taking_over { transitions + 1 } else { transitions }),
        ..Default::default()
    }
}

/// One attempt to acquire or renew. Ok(true): we hold the lease now.
async fn try_acquire_or_renew(api: &Api<coord::Lease>, cfg: &LeaderConfig, obs: &mut Observed) -> Result<bool, kube::Error> {
    let current = match api.get_opt(&cfg.name).await? {
        Some(l) => l,
        None => {
            let lease = coord::Lease {
                metadata: meta::ObjectMeta { name: Some(cfg.name.clone()), namespace: Some(cfg.namespace.clone()), ..Default::default() },
                spec: Some(spec_for(cfg, None, true)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let record = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0.to_string()));
    if obs.record.as_ref() != Some(&record) {
        obs.record = Some(record);
        obs.at = Some(Instant::now());
    }
    let mine = holder.as_deref() == Some(cfg.identity.as_str());
    if !mine && holder.is_some() {
        let duration = spec.lease_duration_seconds.map(|s| Duration::from_secs(s.max(1) as u64)).unwrap_or(cfg.lease_duration);
        let unchanged_for = obs.at.map(|t| t.elapsed()).unwrap_or_default();
        if unchanged_for < duration {
            return Ok(false);
        }
    }
    let mut lease = current;
    lease.spec = Some(spec_for(cfg, Some(&spec), !mine));
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn release(api: &Api<coord::Lease>, cfg: &LeaderConfig) {
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await {
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() == Some(cfg.identity.as_str()) {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now_micro());
            if let Err(e) = api.replace(&cfg.name, &PostParams::default(), &lease).await {
                tracing::warn!(error = %e, "releasing the lease failed");
            }
        }
    }
}

/// Runs the election until `stop` changes; `leading` tells whether we lead.
pub async fn run(client: kube::Client, cfg: LeaderConfig, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
    let api: Api<coord::Lease> = Api::namespaced(client, &cfg.namespace);
    let mut obs = Observed::default();
    let mut last_renew: Option<Instant> = None;
    loop {
        let attempt = tokio::time::timeout(cfg.retry_period.max(Duration::from_millis(100)), try_acquire_or_renew(&api, &cfg, &mut obs)).await;
        let ok = matches!(attempt, Ok(Ok(true)));
        if let Ok(Err(e)) = &attempt {
            tracing::warn!(error = %e, "lease update failed");
        }
        let was = *leading.borrow();
        if ok {
            last_renew = Some(Instant::now());
            if !was {
                tracing::info!(identity = %cfg.identity, lease = %format!("{}/{}", cfg.namespace, cfg.name), "became leader");
                let _ = leading.send(true);
            }
        } else if was && last_renew.is_none_or(|t| t.elapsed() >= cfg.renew_deadline) {
            tracing::warn!(identity = %cfg.identity, "lost the lease: could not renew within the renew deadline; stop scheduling");
            let _ = leading.send(false);
        } else if was && matches!(attempt, Ok(Ok(false))) {
            // Someone else holds it now.
            tracing::warn!(identity = %cfg.identity, "lease taken by another replica; stop scheduling");
            let _ = leading.send(false);
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.retry_period) => {}
            _ = stop.changed() => {
                if *leading.borrow() {
                    let _ = leading.send(false);
                    // Bounded: an unreachable API must not hold up shutdown.
                    if tokio::time::timeout(cfg.renew_deadline, release(&api, &cfg)).await.is_err() {
                        tracing::warn!("releasing the lease timed out; successors wait for it to expire");
                    }
                }
                return;
            }
        }
    }
}
