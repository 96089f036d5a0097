#!/usr/bin/env python3
"""Checks on a rendered Hookstream chart that a schema cannot make (used by helm.sh).

Usage: helm_checks.py RENDERED.yaml [BIN_DIR]

- every ConfigMap TOML file parses (tomllib);
- the KEDA trigger's topic and consumerGroup are the events topic and group_id of the
  rendered dispatcher.toml, and maxReplicaCount (or the HPA's maxReplicas) is at most the
  events topic's partitions;
- each pod gets more termination grace than its process drains for;
- every file a config names under /etc/hookstream is mounted in the pod that reads it;
- security context, probes, commands and the config checksum of every workload;
- a NetworkPolicy open to the internet excepts the private and link-local ranges;
- TriggerAuthentication (no offline schema for it) has the shape KEDA expects;
- a PrometheusRule carries exactly the rules of the chart's alerts/*.yml (the file promtool
  tests), less the disabled ones, runbook links prefixed; a dashboards ConfigMap carries
  every dashboards/*.json byte for byte;
- with BIN_DIR (the built dispatcher, outbox-relay and hookstream), every rendered config
  file is loaded by the real configuration loader: unknown keys or values that cannot work
  make the binary exit 2 with "invalid configuration".

Prints one line per failure and exits 1 if there was any.
"""

import math
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import yaml

failures = []


def fail(msg):
    failures.append(msg)
    print(f"  FAIL: {msg}")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def configmaps(docs):
    """file name -> (ConfigMap name, parsed TOML, raw text)."""
    files = {}
    for d in docs:
        if d["kind"] != "ConfigMap" or not d["metadata"]["name"].endswith(("-config", "-hooks")):
            continue
        for name, text in (d.get("data") or {}).items():
            if not name.endswith(".toml"):
                continue
            try:
                files[name] = (d["metadata"]["name"], tomllib.loads(text), text)
            except tomllib.TOMLDecodeError as e:
                fail(f"{d['metadata']['name']}/{name} is not valid TOML: {e}")
    return files


def drain_seconds(binary, cfg):
    if binary == "dispatcher":
        return math.ceil(cfg.get("dispatcher", {}).get("shutdown_grace_ms", 20000) / 1000) + 10
    if binary == "outbox-relay":
        return math.ceil(cfg.get("relay", {}).get("produce_timeout_ms", 30000) / 1000) + 15
    if binary == "hookstream-api":
        return math.ceil(2 * cfg.get("api", {}).get("shutdown_grace_ms", 10000) / 1000) + 5
    return 0


def config_arg(container):
    args = container.get("args") or []
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            return os.path.basename(args[i + 1])
    return None


def paths_in(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from paths_in(v)
    elif isinstance(value, str) and value.startswith("/etc/hookstream/"):
        yield value


def check_workloads(docs, files):
    for d in docs:
        if d["kind"] not in ("Deployment", "Job"):
            continue
        name = f"{d['kind']} {d['metadata']['name']}"
        pod = d["spec"]["template"]["spec"]
        psc = pod.get("securityContext", {})
        if not (psc.get("runAsNonRoot") and psc.get("runAsUser") == 65532
                and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault"):
            fail(f"{name}: pod securityContext is not non-root 65532 with seccomp RuntimeDefault")
        for c in pod["containers"]:
            sc = c.get("securityContext", {})
            if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
                    and sc.get("capabilities", {}).get("drop") == ["ALL"] and sc.get("runAsNonRoot")):
                fail(f"{name}/{c['name']}: container securityContext is not locked down")
            cmd = (c.get("command") or [""])[0]
            binary = os.path.basename(cmd)
            if cmd not in ("/usr/local/bin/dispatcher", "/usr/local/bin/outbox-relay", "/usr/local/bin/hookstream",
                           "/usr/local/bin/hookstream-api"):
                fail(f"{name}/{c['name']}: unexpected command {cmd!r}")
            cfile = config_arg(c)
            if cfile not in files:
                fail(f"{name}/{c['name']}: its config file {cfile!r} is not in a rendered ConfigMap")
                continue
            cfg = files[cfile][1]
            mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
            for m in mounts:
                for other in mounts:
                    if m != other and m.startswith(other.rstrip("/") + "/"):
                        fail(f"{name}/{c['name']}: volume mounted at {m} is nested inside the one at {other}")
            for p in paths_in(cfg):
                if not any(p.startswith(m.rstrip("/") + "/") for m in mounts if m != "/etc/hookstream/config"):
                    fail(f"{name}/{c['name']}: {cfile} names {p}, which no secret volume provides")
            if d["kind"] == "Deployment":
                if "checksum/config" not in d["spec"]["template"]["metadata"].get("annotations", {}):
                    fail(f"{name}: no checksum/config pod annotation")
                for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                    if c.get(probe, {}).get("httpGet", {}).get("path") != path:
                        fail(f"{name}/{c['name']}: {probe} is not on {path}")
                grace = pod.get("terminationGracePeriodSeconds", 30)
                drain = drain_seconds(binary, cfg)
                if grace <= drain:
                    fail(f"{name}: terminationGracePeriodSeconds {grace} is not above the drain deadline {drain} s")
                if not c.get("resources", {}).get("requests"):
                    fail(f"{name}/{c['name']}: no resource requests")


def check_scaling(docs, files):
    if "dispatcher.toml" not in files:
        fail("no dispatcher.toml rendered")
        return
    cfg = files["dispatcher.toml"][1]
    kafka = cfg.get("kafka", {})
    topic = kafka.get("topics", {}).get("events", "hookstream.events")
    group = kafka.get("group_id", "hookstream-dispatcher")
    partitions = kafka.get("topic_settings", {}).get("partitions", 6)
    brokers = kafka.get("brokers")
    scaled = 0
    for d in docs:
        if d["kind"] == "ScaledObject":
            scaled += 1
            spec = d["spec"]
            for t in spec["triggers"]:
                if t["type"] != "kafka":
                    continue
                md = t["metadata"]
                if md.get("topic") != topic:
                    fail(f"ScaledObject trigger topic {md.get('topic')!r} != dispatcher.toml events topic {topic!r}")
                if md.get("consumerGroup") != group:
                    fail(f"ScaledObject consumerGroup {md.get('consumerGroup')!r} != dispatcher.toml group_id {group!r}")
                if md.get("bootstrapServers") != brokers:
                    fail(f"ScaledObject bootstrapServers {md.get('bootstrapServers')!r} != dispatcher.toml brokers {brokers!r}")
                for key in ("lagThreshold", "activationLagThreshold"):
                    if not re.fullmatch(r"[0-9]+", md.get(key, "")):
                        fail(f"ScaledObject {key} {md.get(key)!r} is not a whole number")
            if spec.get("maxReplicaCount", 100) > partitions:
                fail(f"ScaledObject maxReplicaCount {spec.get('maxReplicaCount')} > events partitions {partitions}")
            down = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {}).get("scaleDown", {})
            if down.get("stabilizationWindowSeconds", 300) < 300:
                fail("ScaledObject scales in with a stabilization window under 300 s")
            target = spec["scaleTargetRef"]["name"]
            dep = [x for x in docs if x["kind"] == "Deployment" and x["metadata"]["name"] == target]
            if not dep:
                fail(f"ScaledObject targets {target}, which is not rendered")
            elif "replicas" in dep[0]["spec"]:
                fail(f"{target} sets replicas although KEDA scales it")
            else:
                env = {e["name"]: e.get("value") for e in dep[0]["spec"]["template"]["spec"]["containers"][0].get("env", [])}
                if "events" not in env.get("HOOKSTREAM_DISPATCHER__ROLES", ""):
                    fail(f"the Deployment KEDA scales ({target}) does not run the events role")
                if "retry" in env.get("HOOKSTREAM_DISPATCHER__ROLES", "") and any(
                        x["kind"] == "Deployment" and x["metadata"]["name"].endswith("-dispatcher-retry") for x in docs):
                    fail("the retry role is scaled on lag")
        if d["kind"] == "HorizontalPodAutoscaler" and d["spec"]["maxReplicas"] > partitions:
            fail(f"HPA maxReplicas {d['spec']['maxReplicas']} > events partitions {partitions}")
        if d["kind"] == "TriggerAuthentication":
            refs = d["spec"].get("secretTargetRef")
            if not refs or any(set(r) != {"parameter", "name", "key"} for r in refs):
                fail("TriggerAuthentication secretTargetRef entries must be {parameter, name, key}")
            allowed = {"username", "password", "ca", "cert", "key", "oauthTokenEndpointUri", "scopes"}
            for r in refs or []:
                if r["parameter"] not in allowed:
                    fail(f"TriggerAuthentication parameter {r['parameter']!r} is not a Kafka scaler parameter")
    return scaled


PRIVATE = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8"}


def check_network_policy(docs):
    """An egress rule open to the internet must except the private and link-local ranges."""
    for d in docs:
        if d["kind"] != "NetworkPolicy":
            continue
        for rule in d["spec"].get("egress", []):
            for peer in rule.get("to", []):
                block = peer.get("ipBlock", {})
                if block.get("cidr") == "0.0.0.0/0":
                    missing = PRIVATE - set(block.get("except", []))
                    if missing:
                        fail(f"NetworkPolicy {d['metadata']['name']}: egress to 0.0.0.0/0 does not except {sorted(missing)}")
                if block.get("cidr") == "::/0" and not {"fc00::/7", "fe80::/10", "::1/128"} <= set(block.get("except", [])):
                    fail(f"NetworkPolicy {d['metadata']['name']}: egress to ::/0 does not except fc00::/7, fe80::/10, ::1/128")


def check_with_binaries(files, bin_dir):
    """Loads each rendered file with the real services' configuration loaders."""
    with tempfile.TemporaryDirectory() as tmp:
        key = "k1:" + "ab" * 32 + "\n"
        runs = {
            "dispatcher.toml": ["dispatcher", "--config"],
            "relay.toml": ["outbox-relay", "--config"],
            "migrate.toml": ["hookstream", "secrets", "generate-key", "--config"],
            "topics.toml": ["hookstream", "secrets", "generate-key", "--config"],
            "api.toml": ["hookstream-api", "--config"],
        }
        for name, (_, _, text) in files.items():
            if name not in runs:
                continue
            if not os.path.exists(os.path.join(bin_dir, runs[name][0])):
                print(f"  {runs[name][0]} not built: {name} not loaded")
                continue
            # The mounted files, as dummies under tmp; the admin listener on a free port.
            for p in set(re.findall(r'"(/etc/hookstream/[^"]+)"', text)):
                local = os.path.join(tmp, p.lstrip("/"))
                os.makedirs(os.path.dirname(local), exist_ok=True)
                with open(local, "w") as f:
                    f.write(key if "sealing" in p else "dummy\n")
                text = text.replace(f'"{p}"', f'"{local}"')
            text = re.sub(r'^listen = ".*"$', 'listen = "127.0.0.1:0"', text, flags=re.M)
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            binary, *args = runs[name]
            env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
            env.update(HOOKSTREAM_DATABASE__URL="postgres://x@127.0.0.1:1/x",
                       HOOKSTREAM_DISPATCHER__ROLES='["events"]')
            try:
                out = subprocess.run([os.path.join(bin_dir, binary), *args, path], env=env,
                                     capture_output=True, text=True, timeout=2)
                err, code = out.stderr, out.returncode
            except subprocess.TimeoutExpired as e:
                # Still running: past the configuration, trying to connect.
                err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
                code = None
            if "invalid configuration" in err:
                fail(f"{binary} refuses {name}: {err.strip().splitlines()[-1]}")
            else:
                print(f"  {binary} accepts {name} (exit {code if code is not None else 'none: still connecting'})")


CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "helm", "hookstream")


def check_monitoring(docs):
    for doc in docs:
        if doc.get("kind") == "PrometheusRule":
            rendered = {(g["name"], r.get("alert"), r["expr"]): r for g in doc["spec"]["groups"] for r in g["rules"]}
            alerts_dir = os.path.join(CHART, "alerts")
            for name in sorted(os.listdir(alerts_dir)):
                with open(os.path.join(alerts_dir, name)) as f:
                    source = yaml.safe_load(f)
                for group in source["groups"]:
                    for rule in group["rules"]:
                        got = rendered.get((group["name"], rule.get("alert"), rule["expr"]))
                        if got is None:
                            # Left out on purpose (prometheusRule.disabledAlerts) or lost.
                            print(f"  note: {rule.get('alert')} of {group['name']} not rendered (disabledAlerts?)")
                            continue
                        want = dict(rule)
                        ann, got_ann = dict(want.get("annotations", {})), dict(got.get("annotations", {}))
                        url = ann.pop("runbook_url", None)
                        got_url = got_ann.pop("runbook_url", None)
                        if url and not (got_url or "").endswith(url.removeprefix("docs/runbooks.md")):
                            fail(f"PrometheusRule {rule.get('alert')}: runbook_url {got_url!r} does not end in {url!r}")
                        want.pop("annotations", None)
                        got = {k: v for k, v in got.items() if k != "annotations"}
                        if got != want or got_ann != ann:
                            fail(f"PrometheusRule {rule.get('alert')} differs from alerts/{name}")
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboards"):
            for key, text in doc.get("data", {}).items():
                with open(os.path.join(CHART, "dashboards", key)) as f:
                    if f.read().rstrip("\n") != text.rstrip("\n"):
                        fail(f"dashboards ConfigMap: {key} differs from dashboards/{key}")


def main():
    docs = load(sys.argv[1])
    files = configmaps(docs)
    check_workloads(docs, files)
    check_scaling(docs, files)
    check_network_policy(docs)
    check_monitoring(docs)
    if len(sys.argv) > 2:
        check_with_binaries(files, sys.argv[2])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
