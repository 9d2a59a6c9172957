#!/usr/bin/env python3
"""A cluster dump for timing `berth simulate` at scale.

    python3 tools/gen_sim_dump.py [NODES] [PODS] [OUT]

Writes NODES nodes (default 2,000; three zones; 32 CPU, 128Gi, 110 pods
each) and PODS pending pods (default 64,000) of four request shapes in
turn, as one multi-document YAML file (default dump.yaml), each document
in JSON's flow form. Every pod fits: the shapes average about 260m CPU
and 480Mi, 32 pods a node at the defaults.

    /usr/bin/time -v berth simulate --cluster dump.yaml --output json > placements.json
"""

import json
import sys

SHAPES = [("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("200m", "1Gi")]


def node(i):
    name = f"node-{i}"
    size = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
        "status": {"allocatable": size, "capacity": size, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(i):
    cpu, memory = SHAPES[i % len(SHAPES)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i}", "namespace": "default", "uid": f"u-{i}", "labels": {"app": f"s{i % len(SHAPES)}"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
    }


def main():
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    pods = int(sys.argv[2]) if len(sys.argv) > 2 else 64000
    out = sys.argv[3] if len(sys.argv) > 3 else "dump.yaml"
    with open(out, "w") as f:
        for i in range(nodes):
            f.write("---\n" + json.dumps(node(i)) + "\n")
        for i in range(pods):
            f.write("---\n" + json.dumps(pod(i)) + "\n")


if __name__ == "__main__":
    main()
