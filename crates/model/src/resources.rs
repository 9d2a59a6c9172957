//! Resource amounts as integers: milli-CPU, bytes, counts.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::quantity;

/// Name of the CPU resource.
pub const CPU: &str = "cpu";
/// Name of the memory resource.
pub const MEMORY: &str = "memory";
/// Name of the ephemeral-storage resource.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Name of the pod-count resource.
pub const PODS: &str = "pods";

/// Default CPU request assumed for scoring a container that names none
/// (upstream `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Default memory request assumed for scoring a container that names none
/// (upstream `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A set of resource amounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in milli-cores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Pod count (meaningful for node allocatable).
    pub pods: i64,
    /// Extended resources, hugepages and other scalar resources, sorted by name.
    pub scalar: Vec<(String, i64)>,
}

impl Resources {
    /// The amount of the named resource.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            _ => self.scalar(name),
        }
    }

    /// The amount of a scalar resource (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .map(|i| self.scalar[i].1)
            .unwrap_or(0)
    }

    /// Sets the amount of the named resource.
    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            CPU => self.milli_cpu = v,
            MEMORY => self.memory = v,
            EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            PODS => self.pods = v,
            _ => match self.scalar.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
                Ok(i) => self.scalar[i].1 = v,
                Err(i) => self.scalar.insert(i, (name.to_string(), v)),
            },
        }
    }

    /// Adds `o` into `self` (saturating).
    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.pods = self.pods.saturating_add(o.pods);
        for (n, v) in &o.scalar {
            let cur = self.scalar(n);
            self.set(n, cur.saturating_add(*v));
        }
    }

    /// Subtracts `o` from `self` (saturating).
    pub fn sub(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(o.milli_cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.pods = self.pods.saturating_sub(o.pods);
        for (n, v) in &o.scalar {
            let cur = self.scalar(n);
            self.set(n, cur.saturating_sub(*v));
        }
    }

    /// Raises every amount of `self` to at least that of `o`.
    pub fn max_with(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.pods = self.pods.max(o.pods);
        for (n, v) in &o.scalar {
            let cur = self.scalar(n);
            if *v > cur {
                self.set(n, *v);
            }
        }
    }

    /// Names of all resources with a non-zero amount, natives first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [
            (CPU, self.milli_cpu),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, _)| n)
        .chain(self.scalar.iter().map(|(n, _)| n.as_str()))
    }

    /// Parses a Kubernetes resource list; `path` names the field in errors.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>, path: &str) -> Result<Resources, String> {
        let mut r = Resources::default();
        let Some(list) = list else { return Ok(r) };
        for (name, q) in list {
            let v = if name == CPU {
                quantity::parse_milli(&q.0)
            } else {
                quantity::parse_value(&q.0)
            }
            .map_err(|e| format!("{path}[{name}]: {e}"))?;
            r.set(name, v);
        }
        Ok(r)
    }
}

/// True for resources the scheduler treats as scalar (extended resources,
/// hugepages, attachable volumes): everything but cpu, memory,
/// ephemeral-storage and pods.
pub fn is_scalar(name: &str) -> bool {
    !matches!(name, CPU | MEMORY | EPHEMERAL_STORAGE | PODS)
}

/// True for extended resources: a domain-qualified name outside kubernetes.io
/// (upstream `IsExtendedResourceName`), e.g. `example.com/gpu`.
pub fn is_extended(name: &str) -> bool {
    if name.starts_with("requests.") {
        return false;
    }
    match name.split_once('/') {
        Some((domain, _)) => {
            !(domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"))
        }
        None => false,
    }
}

/// True for hugepages resources (`hugepages-2Mi`).
pub fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sub_max() {
        let mut a = Resources { milli_cpu: 100, memory: 10, ..Default::default() };
        a.set("example.com/gpu", 2);
        let mut b = Resources { milli_cpu: 50, memory: 20, ..Default::default() };
        b.set("example.com/gpu", 3);
        let mut s = a.clone();
        s.add(&b);
        assert_eq!((s.milli_cpu, s.memory, s.scalar("example.com/gpu")), (150, 30, 5));
        s.sub(&b);
        assert_eq!(s, a);
        a.max_with(&b);
        assert_eq!((a.milli_cpu, a.memory, a.scalar("example.com/gpu")), (100, 20, 3));
    }

    #[test]
    fn extended_names() {
        assert!(is_extended("example.com/gpu"));
        assert!(!is_extended("kubernetes.io/foo"));
        assert!(!is_extended("cpu"));
        assert!(is_hugepages("hugepages-2Mi"));
    }
}
