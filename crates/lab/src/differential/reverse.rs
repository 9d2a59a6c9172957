//! The reverse direction: berth decides, the judged scheduler checks.
//!
//! Every pod is created behind a scheduling gate. While it waits, and once
//! the claims its templates generate exist, berth explains it on a listing
//! of the cluster as it is then (the gate taken off the listing's copy), so
//! both schedulers decide on the same state. Then:
//!
//! - **berth places it on node X**: the gate is removed and, in the same
//!   update, the pod's node selector narrowed to X (`kubernetes.io/hostname`;
//!   the API allows narrowing a gated pod's node selection). The judged
//!   scheduler can bind it to X only, and does exactly when its own Filter
//!   plugins accept X for the pod: `accepted`. Left Pending, or preempted
//!   for: `refused`. For a pod with claims, the devices the judged
//!   scheduler allocated are compared with those berth would (per claim and
//!   request).
//! - **berth would preempt on X**: the same narrowing; the judged scheduler
//!   agrees when it also binds the pod to X only after evicting pods, and
//!   the pods it evicted are compared with berth's victims.
//! - **berth leaves it Pending**: the gate is removed without narrowing;
//!   the judged scheduler agrees when it leaves it Pending too (without
//!   preempting), and its message is compared with berth's word for word.
//!
//! In this direction the pods' spread constraints ignore node affinity
//! (`nodeAffinityPolicy: Ignore`, for both schedulers): with the default
//! (`Honor`) the narrowing would shrink the domains a constraint counts to
//! X's own, and every placement would pass it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use berth_engine::config::Config;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

use super::{
    Error, Options, Workload, api, clean_up, client_of, decided, default_profile, generate, prepare,
};

/// The gate every pod is created behind in the reverse direction.
pub const GATE: &str = "berth.dev/differential";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The reverse direction's counts for one seed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReverseCounts {
    /// Pods berth places directly.
    pub placed: u64,
    /// Of those, bound to berth's node by the judged scheduler.
    pub accepted: u64,
    /// Pods berth would preempt for.
    pub preempting: u64,
    /// Of those, bound to berth's node after evictions by the judged scheduler.
    pub preempting_same_node: u64,
    /// Of those, with exactly berth's victims evicted.
    pub preempting_same_victims: u64,
    /// Pods berth leaves Pending.
    pub pending: u64,
    /// Of those, left Pending by the judged scheduler too.
    pub pending_agreed: u64,
    /// Of those, with berth's message word for word.
    pub pending_same_message: u64,
    /// Claims allocated in a placement both agreed on, compared.
    pub claims: u64,
    /// Of those, given the same devices by both.
    pub claims_same_devices: u64,
}

impl ReverseCounts {
    /// Pods whose outcome the judged scheduler agreed with (placement,
    /// preemption's node, or Pending).
    pub fn agreed(&self) -> u64 {
        self.accepted + self.preempting_same_node + self.pending_agreed
    }

    /// Pods decided.
    pub fn decided(&self) -> u64 {
        self.placed + self.preempting + self.pending
    }
}

/// One pod whose outcome differed, or whose message or devices did.
#[derive(Clone, Debug, Serialize)]
pub struct ReverseDisagreement {
    /// "ns/name".
    pub pod: String,
    /// What berth decided.
    pub berth: String,
    /// What the judged scheduler did.
    pub judged: String,
}

/// One seed's report in the reverse direction.
#[derive(Clone, Debug, Serialize)]
pub struct ReverseReport {
    /// The seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// Pods created.
    pub pods: usize,
    /// The counts.
    pub counts: ReverseCounts,
    /// Each disagreement.
    pub disagreements: Vec<ReverseDisagreement>,
    /// Wall time of the run.
    pub seconds: f64,
}

impl ReverseReport {
    /// One line: `seed S reverse: P pods on N nodes; placed B: accepted A, refused R; preempting K: same node K1, same victims K2; pending Q: agreed Q1, messages same M; claims C: devices same D in T s`.
    pub fn line(&self) -> String {
        let c = &self.counts;
        format!(
            "seed {} reverse: {} pods on {} nodes; placed {}: accepted {}, refused {}; preempting {}: same node {}, same victims {}; pending {}: agreed {}, messages same {}; claims {}: devices same {} in {:.0} s",
            self.seed,
            self.pods,
            self.nodes,
            c.placed,
            c.accepted,
            c.placed - c.accepted,
            c.preempting,
            c.preempting_same_node,
            c.preempting_same_victims,
            c.pending,
            c.pending_agreed,
            c.pending_same_message,
            c.claims,
            c.claims_same_devices,
            self.seconds
        )
    }
}

/// berth's decision on a pod.
#[derive(Clone, Debug)]
enum Decision {
    /// Bind to this node, these devices for its claims ((claim, request) → device).
    Place(String, BTreeMap<(String, String), String>),
    /// Preempt on this node, evicting these pods ("ns/name").
    Preempt(String, BTreeSet<String>),
    /// Leave it Pending with this message.
    Pending(String),
}

/// What the judged scheduler did with the ungated pod.
#[derive(Clone, Debug)]
struct Outcome {
    /// The node it bound the pod to; None: it left the pod Pending.
    bound: Option<String>,
    /// Its PodScheduled message, when it left the pod Pending.
    message: String,
    /// The pods it evicted meanwhile ("ns/name"; none without preemption).
    /// Preemption shows here: a nomination alone does not say it
    /// (kube-scheduler also nominates a pod whose PreBind has work to do,
    /// such as allocating its claims).
    evicted: BTreeSet<String>,
}

/// A pod as the reverse direction creates it: behind [`GATE`], its spread
/// constraints ignoring node affinity.
pub fn gated(pod: &Value) -> Value {
    let mut p = pod.clone();
    p["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    // get_mut, not indexing: indexing a missing key would add it as null.
    if let Some(cs) = p["spec"]
        .get_mut("topologySpreadConstraints")
        .and_then(Value::as_array_mut)
    {
        for c in cs {
            c["nodeAffinityPolicy"] = json!("Ignore");
        }
    }
    p
}

/// Runs one seed in the reverse direction.
pub async fn run_reverse(o: &Options) -> Result<ReverseReport, Error> {
    let t0 = Instant::now();
    let client = client_of(&o.kubeconfig).await?;
    let w = generate(o.seed, o.nodes, o.pods, &o.scheduler_name);
    let ns = format!("differential-{}", o.seed);
    let r = reverse_in(o, &client, &w, &ns).await;
    clean_up(o, &client, &w, &ns).await;
    let mut report = r?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

async fn reverse_in(
    o: &Options,
    client: &kube::Client,
    w: &Workload,
    ns: &str,
) -> Result<ReverseReport, Error> {
    prepare(client, w, ns).await?;
    let cfg = default_profile(&o.scheduler_name)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut counts = ReverseCounts::default();
    let mut disagreements = Vec::new();
    for v in &w.pods {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = format!("{ns}/{name}");
        let pod: Pod = serde_json::from_value(gated(v))
            .map_err(|e| api(format!("pod {name}"))(kube::Error::SerdeError(e)))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(api(format!("creating pod {name}")))?;
        wait_claims(&pods, &name, o.per_pod_timeout).await?;
        let decision = match decide(client, &cfg, ns, &name).await? {
            Ok(d) => d,
            Err(why) => {
                // berth could not explain it: the judged scheduler decides alone.
                disagreements.push(ReverseDisagreement {
                    pod: key.clone(),
                    berth: why.clone(),
                    judged: String::new(),
                });
                Decision::Pending(why)
            }
        };
        let before = pod_names(&pods).await?;
        let narrow = match &decision {
            Decision::Place(node, _) | Decision::Preempt(node, _) => Some(node.as_str()),
            Decision::Pending(_) => None,
        };
        ungate(&pods, &name, narrow).await?;
        let (bound, message) = match wait_outcome(&pods, &name, o).await? {
            Ok(node) => (Some(node), String::new()),
            Err(message) => (None, message),
        };
        let after = pod_names(&pods).await?;
        let evicted = before
            .difference(&after)
            .map(|n| format!("{ns}/{n}"))
            .collect();
        let outcome = Outcome {
            bound,
            message,
            evicted,
        };
        let mut disagree = |judged: String, berth: String| {
            disagreements.push(ReverseDisagreement {
                pod: key.clone(),
                berth,
                judged,
            })
        };
        match &decision {
            Decision::Place(node, devices)
                if outcome.bound.as_ref() == Some(node) && outcome.evicted.is_empty() =>
            {
                counts.placed += 1;
                counts.accepted += 1;
                if !devices.is_empty() {
                    let judged = allocated(client, ns, &pods, &name).await?;
                    for claim in devices.keys().map(|(c, _)| c).collect::<BTreeSet<_>>() {
                        counts.claims += 1;
                        let of = |m: &BTreeMap<(String, String), String>| {
                            m.iter()
                                .filter(|((c, _), _)| c == claim)
                                .map(|(k, d)| (k.1.clone(), d.clone()))
                                .collect::<Vec<_>>()
                        };
                        if of(devices) == of(&judged) {
                            counts.claims_same_devices += 1;
                        } else {
                            disagree(
                                format!("allocated {claim} {:?}", of(&judged)),
                                format!("allocates {claim} {:?}", of(devices)),
                            );
                        }
                    }
                }
            }
            Decision::Place(node, _) => {
                counts.placed += 1;
                disagree(describe(&outcome), format!("places it on {node}"));
            }
            // Narrowed to berth's node, the judged scheduler can only evict
            // there: evicting at all is preempting on the same node. It may
            // then still leave the pod Pending, which is no disagreement:
            // seen with a pod whose claim found no free device on the node
            // once the victim was gone, where kube-scheduler's dry run had
            // let the node through as berth's had.
            Decision::Preempt(node, victims) => {
                counts.preempting += 1;
                if outcome.evicted.is_empty() {
                    disagree(
                        describe(&outcome),
                        format!("preempts on {node}, evicting {victims:?}"),
                    );
                } else {
                    counts.preempting_same_node += 1;
                    if &outcome.evicted == victims {
                        counts.preempting_same_victims += 1;
                    } else {
                        disagree(describe(&outcome), format!("evicts {victims:?} on {node}"));
                    }
                }
            }
            Decision::Pending(message) if outcome.bound.is_none() && outcome.evicted.is_empty() => {
                counts.pending += 1;
                counts.pending_agreed += 1;
                if *message == outcome.message {
                    counts.pending_same_message += 1;
                } else {
                    disagree(
                        format!("says {:?}", outcome.message),
                        format!("says {message:?}"),
                    );
                }
            }
            Decision::Pending(message) => {
                counts.pending += 1;
                disagree(
                    describe(&outcome),
                    format!("leaves it Pending: {message:?}"),
                );
            }
        }
    }
    Ok(ReverseReport {
        seed: o.seed,
        nodes: w.nodes.len(),
        pods: w.pods.len(),
        counts,
        disagreements,
        seconds: 0.0,
    })
}

fn describe(o: &Outcome) -> String {
    let what = match &o.bound {
        Some(n) => format!("bound it to {n}"),
        None => format!("left it Pending: {:?}", o.message),
    };
    if o.evicted.is_empty() {
        what
    } else {
        format!("{what} after evicting {:?}", o.evicted)
    }
}

/// Waits until every claim the pod's templates generate exists (the
/// cluster's resourceclaim controller makes them, gate or not).
async fn wait_claims(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let p = pods
            .get(name)
            .await
            .map_err(api(format!("reading pod {name}")))?;
        let wanted = p
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter(|c| c.resource_claim_template_name.is_some())
                    .count()
            })
            .unwrap_or(0);
        let made = p
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .map(|ss| {
                ss.iter()
                    .filter(|s| s.resource_claim_name.is_some())
                    .count()
            })
            .unwrap_or(0);
        if made >= wanted {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "the claims of pod {name} were not generated within {timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// berth's decision on the gated pod, on the cluster as it is now; Err
/// (inner) when berth could not explain it.
async fn decide(
    client: &kube::Client,
    cfg: &Config,
    ns: &str,
    name: &str,
) -> Result<Result<Decision, String>, Error> {
    let mut listing = berth_daemon::live::list_for_scheduler(client, 500)
        .await
        .map_err(|e| Error::Shadow(e.to_string()))?;
    for o in &mut listing.objects {
        if o["kind"] == "Pod"
            && o["metadata"]["namespace"] == ns
            && o["metadata"]["name"] == name
            && let Some(spec) = o["spec"].as_object_mut()
        {
            spec.remove("schedulingGates");
        }
    }
    let cluster = berth_engine::offline::Cluster::from_documents(listing.objects, "the API server")
        .map_err(|e| Error::Shadow(e.to_string()))?;
    let engine = berth_engine::offline::Engine::new(cfg, cluster, 0);
    let e = match engine.explain(&format!("{ns}/{name}")) {
        Ok(e) => e,
        Err(e) => return Ok(Err(format!("berth could not explain it: {e}"))),
    };
    Ok(Ok(if let Some(node) = e.selected.clone() {
        Decision::Place(
            node,
            e.allocations
                .iter()
                .map(|a| ((a.claim.clone(), a.request.clone()), a.device.clone()))
                .collect(),
        )
    } else if let Some(p) = &e.preemption {
        Decision::Preempt(
            p.nominated_node.clone(),
            p.victims.iter().cloned().collect(),
        )
    } else {
        Decision::Pending(e.message.clone().unwrap_or_default())
    }))
}

/// The names of the namespace's pods.
async fn pod_names(pods: &Api<Pod>) -> Result<BTreeSet<String>, Error> {
    let list = pods
        .list_metadata(&ListParams::default())
        .await
        .map_err(api("listing the pods"))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Removes the gate; with `node`, narrows the pod's node selector to it in
/// the same update.
async fn ungate(pods: &Api<Pod>, name: &str, node: Option<&str>) -> Result<(), Error> {
    let mut patch = json!({"spec": {"schedulingGates": null}});
    if let Some(n) = node {
        patch["spec"]["nodeSelector"] = json!({HOSTNAME: n});
    }
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api(format!("ungating pod {name}")))?;
    Ok(())
}

/// Waits for the judged scheduler's decision on the ungated pod: the node
/// it bound it to, or its message when it left it Pending.
async fn wait_outcome(
    pods: &Api<Pod>,
    name: &str,
    o: &Options,
) -> Result<Result<String, String>, Error> {
    let deadline = Instant::now() + o.per_pod_timeout;
    loop {
        let p = pods
            .get(name)
            .await
            .map_err(api(format!("reading pod {name}")))?;
        match decided(&p) {
            Some(Ok(node)) => return Ok(Ok(node)),
            Some(Err((_, message))) => return Ok(Err(message)),
            None if Instant::now() > deadline => {
                return Err(Error::Stuck(format!(
                    "{} did not decide pod {name} within {:?}",
                    o.scheduler_name, o.per_pod_timeout
                )));
            }
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The devices allocated to the pod's claims: (claim "ns/name", request) → `driver/pool/device`.
async fn allocated(
    client: &kube::Client,
    ns: &str,
    pods: &Api<Pod>,
    name: &str,
) -> Result<BTreeMap<(String, String), String>, Error> {
    let p = pods
        .get(name)
        .await
        .map_err(api(format!("reading pod {name}")))?;
    let mut claims: Vec<String> = p
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| s.resource_claim_name.clone())
        .collect();
    claims.extend(
        p.spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.resource_claim_name.clone()),
    );
    let api_claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let mut out = BTreeMap::new();
    for c in claims {
        let claim = api_claims
            .get(&c)
            .await
            .map_err(api(format!("reading claim {c}")))?;
        let results = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default();
        for r in results {
            out.insert(
                (format!("{ns}/{c}"), r.request),
                format!("{}/{}/{}", r.driver, r.pool, r.device),
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reverse_pod_is_gated_and_its_spread_ignores_node_affinity() {
        let w = generate(1, 30, 200, "default-scheduler");
        let spread = w
            .pods
            .iter()
            .find(|p| p["spec"]["topologySpreadConstraints"].is_array())
            .cloned()
            .unwrap_or_default();
        let g = gated(&spread);
        assert_eq!(g["spec"]["schedulingGates"], json!([{"name": GATE}]));
        for c in g["spec"]["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(c["nodeAffinityPolicy"], "Ignore");
        }
        assert!(serde_json::from_value::<Pod>(g).is_ok());
        // The rest of the pod as generated.
        let plain = w
            .pods
            .iter()
            .find(|p| !p["spec"]["topologySpreadConstraints"].is_array())
            .cloned()
            .unwrap_or_default();
        let mut g = gated(&plain);
        if let Some(s) = g["spec"].as_object_mut() {
            s.remove("schedulingGates");
        }
        assert_eq!(g, plain);
    }

    #[test]
    fn agreement_counts_placements_preemptions_and_pending_pods() {
        let c = ReverseCounts {
            placed: 10,
            accepted: 9,
            preempting: 2,
            preempting_same_node: 1,
            pending: 3,
            pending_agreed: 3,
            ..Default::default()
        };
        assert_eq!(c.agreed(), 13);
        assert_eq!(c.decided(), 15);
        let r = ReverseReport {
            seed: 4,
            nodes: 5,
            pods: 15,
            counts: c,
            disagreements: vec![],
            seconds: 1.0,
        };
        assert!(r.line().starts_with("seed 4 reverse: 15 pods on 5 nodes; placed 10: accepted 9, refused 1; preempting 2: same node 1"), "{}", r.line());
    }
}
