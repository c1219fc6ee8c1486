"""Checks deploy/inference-gateway/ (cli/tests/operations/replicas.rs): what Kubernetes' own API
schemas cover is valid for them (kubernetes-validate, strict; the extension's and the Gateway
API's kinds are not in them); the pool, its route and its endpoint picker name each other and the
replicas of deploy/kubernetes/ consistently; and every metric the picker reads is a gauge that a
live server's /metrics exposes, with values in range.

    inference_gateway.py REPO_ROOT BASE_URL
"""
import pathlib
import sys
import urllib.request

import kubernetes_validate
import yaml

root, base = pathlib.Path(sys.argv[1]), sys.argv[2]


def documents(folder):
    return [d for f in sorted((root / folder).glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


gateway, cluster = documents("deploy/inference-gateway"), documents("deploy/kubernetes")
objects = {(d["kind"], d["metadata"]["name"]): d for d in gateway + cluster}
CUSTOM_GROUPS = {"inference.networking.k8s.io", "gateway.networking.k8s.io"}
checked = 0
for d in gateway:
    if d["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
        continue
    kubernetes_validate.validate(d, "1.31.0", strict=True)
    checked += 1


def one(kind):
    found = [d for d in gateway if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def pod_labels(deployment):
    return deployment["spec"]["template"]["metadata"]["labels"]


def container(deployment):
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def selects(selector, labels):
    return selector.items() <= labels.items()


# the pool selects the replicas, on their HTTP port
pool = one("InferencePool")
assert pool["apiVersion"] == "inference.networking.k8s.io/v1", pool["apiVersion"]
replicas = objects[("Deployment", "engine")]
assert selects(pool["spec"]["selector"]["matchLabels"], pod_labels(replicas))
replica_ports = {p["containerPort"] for p in container(replicas)["ports"]}
assert [p["number"] for p in pool["spec"]["targetPorts"]] == [8080] and 8080 in replica_ports

# the route sends /v1 to the pool
route = one("HTTPRoute")
refs = [r for rule in route["spec"]["rules"] for r in rule["backendRefs"]]
assert refs == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}], refs

# the pool's picker reference reaches the picker's gRPC port
ref = pool["spec"]["endpointPickerRef"]
service = objects[("Service", ref["name"])]
(port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
picker = next(d for d in gateway if d["kind"] == "Deployment" and selects(service["spec"]["selector"], pod_labels(d)))
epp = container(picker)
named_ports = {p["name"]: p["containerPort"] for p in epp["ports"]}
assert named_ports[port["targetPort"]] == 9002, (port, named_ports)  # the picker's default --grpc-port

# the picker's flags: its pool, and the metrics it reads
args, flags = epp["args"], {}
for flag, value in zip(args[::2], args[1::2]):
    assert flag.startswith("--") and not value.startswith("--"), (flag, value)
    flags[flag] = value
assert flags["--pool-name"] == pool["metadata"]["name"], flags
assert flags["--lora-info-metric"] == "" and flags["--cache-info-metric"] == "", flags
config_map = objects[("ConfigMap", picker["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"])]
(mount,) = epp["volumeMounts"]
config_file = pathlib.PurePosixPath(flags["--config-file"])
assert str(config_file.parent) == mount["mountPath"], (config_file, mount)
config = yaml.safe_load(config_map["data"][config_file.name])
(extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
(engine,) = extractor["parameters"]["engineConfigs"]
assert engine["name"] == extractor["parameters"]["defaultEngine"], extractor
assert engine["loraSpec"] == "" and engine["cacheInfoSpec"] == "", engine
read = {
    "queued requests": (flags["--total-queued-requests-metric"], engine["queuedRequestsSpec"]),
    "running requests": (flags["--total-running-requests-metric"], engine["runningRequestsSpec"]),
    "KV-cache usage": (flags["--kv-cache-usage-percentage-metric"], engine["kvUsageSpec"]),
}
for what, (flag, spec) in read.items():
    assert flag == spec, f"{what}: the flag says {flag}, the configuration {spec}"
profile_refs = {p["pluginRef"] for profile in config["schedulingProfiles"] for p in profile["plugins"]}
assert profile_refs <= {p.get("name", p["type"]) for p in config["plugins"]}, profile_refs

# the picker's service account is bound to a role that watches the pool and the pods
account = {"kind": "ServiceAccount", "name": picker["spec"]["template"]["spec"]["serviceAccountName"]}
assert ("ServiceAccount", account["name"]) in objects, account
(binding,) = [d for d in gateway if d["kind"] == "RoleBinding" and account in d["subjects"]]
role = objects[("Role", binding["roleRef"]["name"])]
granted = {(g, r) for rule in role["rules"] if {"get", "list", "watch"} <= set(rule["verbs"]) for g in rule["apiGroups"] for r in rule["resources"]}
assert {("inference.networking.k8s.io", "inferencepools"), ("", "pods")} <= granted, granted

# every metric the picker reads is a gauge of the live server, in range
text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
types, samples = {}, {}
for line in text.splitlines():
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split()
        types[name] = kind
    elif line and not line.startswith("#"):
        series, value = line.rsplit(" ", 1)
        samples.setdefault(series.split("{")[0], []).append(float(value))
for what, (spec, _) in read.items():
    name = spec.split("{")[0]
    assert types.get(name) == "gauge", f"{what}: {name} is {types.get(name)!r} on {base}/metrics"
    assert samples.get(name), f"{what}: {name} has no series"
    assert all(v >= 0 for v in samples[name]), (name, samples[name])
assert all(v <= 1 for v in samples[read["KV-cache usage"][0]]), samples[read["KV-cache usage"][0]]

print(f"inference gateway: {checked} core objects valid, the pool, route and picker consistent with the replicas; "
      f"the picker reads {', '.join(spec for spec, _ in read.values())}: gauges of the live server")
