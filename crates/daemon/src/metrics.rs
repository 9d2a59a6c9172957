//! Prometheus metrics with upstream kube-scheduler's names, types and labels.

use prometheus::{Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

/// All of berth's metrics, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    /// The registry served on /metrics.
    pub registry: Registry,
    /// scheduler_schedule_attempts_total{result, profile}.
    pub schedule_attempts: IntCounterVec,
    /// scheduler_scheduling_attempt_duration_seconds{result, profile}.
    pub attempt_duration: HistogramVec,
    /// scheduler_pending_pods{queue}.
    pub pending_pods: IntGaugeVec,
    /// scheduler_preemption_attempts_total.
    pub preemption_attempts: IntCounter,
    /// scheduler_preemption_victims.
    pub preemption_victims: Histogram,
    /// scheduler_framework_extension_point_duration_seconds{extension_point, status, profile}.
    pub extension_point_duration: HistogramVec,
    /// scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}.
    pub plugin_duration: HistogramVec,
    /// scheduler_pod_scheduling_sli_duration_seconds{attempts}.
    pub sli_duration: HistogramVec,
    /// scheduler_queue_incoming_pods_total{queue, event}.
    pub incoming_pods: IntCounterVec,
    /// scheduler_unschedulable_pods{plugin, profile}.
    pub unschedulable_pods: IntGaugeVec,
    /// berth_watch_state{kind, state}: 1 for each watched kind's state, 0 for
    /// its other states (set at scrape time from the watches' health).
    pub watch_state: IntGaugeVec,
    /// berth_shadow_decisions_total{profile, verdict}: shadow mode's verdicts
    /// on another scheduler's bindings (same, tie, lower, infeasible, unschedulable).
    pub shadow_decisions: IntCounterVec,
    /// berth_shadow_score_gap{profile}: berth's best total minus the bound
    /// node's total, for the `lower` and `tie` verdicts.
    pub shadow_score_gap: HistogramVec,
    /// berth_dra_allocation_attempts_total{result}: DynamicResources' PreBind
    /// writes of one claim (allocated, reserved, error, pod_gone, not_leader).
    pub dra_allocation_attempts: IntCounterVec,
    /// berth_dra_allocation_duration_seconds{result}: how long they took,
    /// conflicts and read-backs included.
    pub dra_allocation_duration: HistogramVec,
    /// berth_shadow_pending_pods{profile, view}: shadow mode's view of the
    /// pods the other scheduler leaves Pending (placeable, unplaceable).
    pub shadow_pending: IntGaugeVec,
    /// berth_leader_election_waiting: 1 while another identity holds the
    /// Lease and this replica waits for it (set at scrape time).
    pub leader_waiting: IntGauge,
}

fn exp(start: f64, factor: f64, n: usize) -> Vec<f64> {
    prometheus::exponential_buckets(start, factor, n).unwrap_or_else(|_| vec![start])
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let m = Metrics {
            schedule_attempts: IntCounterVec::new(Opts::new("scheduler_schedule_attempts_total", "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem."), &["result", "profile"])?,
            attempt_duration: HistogramVec::new(HistogramOpts::new("scheduler_scheduling_attempt_duration_seconds", "Scheduling attempt latency in seconds (scheduling algorithm + binding)").buckets(exp(0.001, 2.0, 15)), &["result", "profile"])?,
            pending_pods: IntGaugeVec::new(Opts::new("scheduler_pending_pods", "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated."), &["queue"])?,
            preemption_attempts: IntCounter::new("scheduler_preemption_attempts_total", "Total preemption attempts in the cluster till now")?,
            preemption_victims: Histogram::with_opts(HistogramOpts::new("scheduler_preemption_victims", "Number of selected preemption victims").buckets(exp(1.0, 2.0, 7)))?,
            extension_point_duration: HistogramVec::new(HistogramOpts::new("scheduler_framework_extension_point_duration_seconds", "Latency for running all plugins of a specific extension point.").buckets(exp(0.0001, 2.0, 12)), &["extension_point", "status", "profile"])?,
            plugin_duration: HistogramVec::new(HistogramOpts::new("scheduler_plugin_execution_duration_seconds", "Duration for running a plugin at a specific extension point.").buckets(exp(0.00001, 1.5, 20)), &["plugin", "extension_point", "status"])?,
            sli_duration: HistogramVec::new(HistogramOpts::new("scheduler_pod_scheduling_sli_duration_seconds", "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.").buckets(exp(0.01, 2.0, 20)), &["attempts"])?,
            incoming_pods: IntCounterVec::new(Opts::new("scheduler_queue_incoming_pods_total", "Number of pods added to scheduling queues by event and queue type."), &["queue", "event"])?,
            unschedulable_pods: IntGaugeVec::new(Opts::new("scheduler_unschedulable_pods", "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin."), &["plugin", "profile"])?,
            watch_state: IntGaugeVec::new(Opts::new("berth_watch_state", "State of each watched kind (starting, synced, retrying, not_served): 1 for the current state, 0 for the others."), &["kind", "state"])?,
            shadow_decisions: IntCounterVec::new(Opts::new("berth_shadow_decisions_total", "Shadow mode: verdicts on bindings made by another scheduler for a judged profile. 'same': berth selects the bound node; 'tie': the bound node has berth's best total but berth picked another; 'lower': feasible for berth with a lower total; 'infeasible': a berth Filter rejects the node; 'unschedulable': berth finds no node."), &["profile", "verdict"])?,
            shadow_score_gap: HistogramVec::new(HistogramOpts::new("berth_shadow_score_gap", "Shadow mode: berth's best total score minus the bound node's total, for the 'lower' and 'tie' verdicts.").buckets(vec![0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]), &["profile"])?,
            dra_allocation_attempts: IntCounterVec::new(Opts::new("berth_dra_allocation_attempts_total", "ResourceClaim allocations written by PreBind, by result. 'allocated': the claim's allocation and the pod's reservation were written (or found written); 'reserved': the claim was allocated already and the pod was added to reservedFor; 'error': PreBind failed (allocated elsewhere, deleted, refused); 'pod_gone' and 'not_leader': given up."), &["result"])?,
            dra_allocation_duration: HistogramVec::new(HistogramOpts::new("berth_dra_allocation_duration_seconds", "Duration of the ResourceClaim writes of PreBind for one claim (finalizer, allocation and reservation, read-backs), by result.").buckets(exp(0.001, 2.0, 15)), &["result"])?,
            shadow_pending: IntGaugeVec::new(Opts::new("berth_shadow_pending_pods", "Shadow mode: pods of a judged profile that the other scheduler leaves Pending (pending 10 s or more), by berth's view: 'placeable' means berth would place the pod, 'unplaceable' that berth cannot place it either (preemption aside)."), &["profile", "view"])?,
            leader_waiting: IntGauge::new("berth_leader_election_waiting", "1 while another identity holds the leader-election Lease and this replica waits for it (schedules nothing); 0 while it leads, before the Lease is read, or without leader election.")?,
            registry,
        };
        m.registry.register(Box::new(m.schedule_attempts.clone()))?;
        m.registry.register(Box::new(m.attempt_duration.clone()))?;
        m.registry.register(Box::new(m.pending_pods.clone()))?;
        m.registry.register(Box::new(m.preemption_attempts.clone()))?;
        m.registry.register(Box::new(m.preemption_victims.clone()))?;
        m.registry.register(Box::new(m.extension_point_duration.clone()))?;
        m.registry.register(Box::new(m.plugin_duration.clone()))?;
        m.registry.register(Box::new(m.sli_duration.clone()))?;
        m.registry.register(Box::new(m.incoming_pods.clone()))?;
        m.registry.register(Box::new(m.unschedulable_pods.clone()))?;
        m.registry.register(Box::new(m.watch_state.clone()))?;
        m.registry.register(Box::new(m.shadow_decisions.clone()))?;
        m.registry.register(Box::new(m.shadow_score_gap.clone()))?;
        m.registry.register(Box::new(m.dra_allocation_attempts.clone()))?;
        m.registry.register(Box::new(m.dra_allocation_duration.clone()))?;
        m.registry.register(Box::new(m.shadow_pending.clone()))?;
        m.registry.register(Box::new(m.leader_waiting.clone()))?;
        for q in ["active", "backoff", "unschedulable", "gated"] {
            m.pending_pods.with_label_values(&[q]).set(0);
        }
        Ok(m)
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let enc = TextEncoder::new();
        if enc.encode(&self.registry.gather(), &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_are_exposed() {
        let m = Metrics::new().expect("metrics register");
        m.schedule_attempts.with_label_values(&["scheduled", "default-scheduler"]).inc();
        m.attempt_duration.with_label_values(&["scheduled", "default-scheduler"]).observe(0.01);
        m.preemption_victims.observe(2.0);
        m.extension_point_duration.with_label_values(&["Filter", "Success", "default-scheduler"]).observe(0.001);
        m.plugin_duration.with_label_values(&["NodeResourcesFit", "Filter", "Success"]).observe(0.0001);
        m.sli_duration.with_label_values(&["1"]).observe(0.1);
        m.incoming_pods.with_label_values(&["active", "PodAdd"]).inc();
        m.unschedulable_pods.with_label_values(&["NodeResourcesFit", "default-scheduler"]).set(1);
        m.preemption_attempts.inc();
        m.watch_state.with_label_values(&["pods", "synced"]).set(1);
        m.shadow_decisions.with_label_values(&["default-scheduler", "same"]).inc();
        m.shadow_score_gap.with_label_values(&["default-scheduler"]).observe(3.0);
        m.dra_allocation_attempts.with_label_values(&["allocated"]).inc();
        m.dra_allocation_duration.with_label_values(&["allocated"]).observe(0.01);
        m.shadow_pending.with_label_values(&["default-scheduler", "placeable"]).set(1);
        let text = m.render();
        for name in [
            "scheduler_schedule_attempts_total",
            "scheduler_scheduling_attempt_duration_seconds",
            "scheduler_pending_pods",
            "scheduler_preemption_attempts_total",
            "scheduler_preemption_victims",
            "scheduler_framework_extension_point_duration_seconds",
            "scheduler_plugin_execution_duration_seconds",
            "scheduler_pod_scheduling_sli_duration_seconds",
            "scheduler_queue_incoming_pods_total",
            "scheduler_unschedulable_pods",
            "berth_watch_state",
            "berth_shadow_decisions_total",
            "berth_shadow_score_gap",
            "berth_dra_allocation_attempts_total",
            "berth_dra_allocation_duration_seconds",
            "berth_shadow_pending_pods",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
    }
}
