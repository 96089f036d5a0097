#!/usr/bin/env python3
"""Writes (to stdout, as one JSON `List`) the CustomResourceDefinitions the chart's objects need
on a real API server that has neither KEDA nor the Prometheus operator installed:

  scaledobjects.keda.sh           v1alpha1  schema: <schemas>/crds/keda.sh/scaledobject_v1alpha1.json
  triggerauthentications.keda.sh  v1alpha1  schema: written here (no published schema in <schemas>)
  servicemonitors.monitoring.coreos.com  v1 schema: <schemas>/crds/monitoring.coreos.com/servicemonitor_v1.json
  prometheusrules.monitoring.coreos.com  v1 schema: <schemas>/crds/monitoring.coreos.com/prometheusrule_v1.json

The JSON schemas in ../shared/schemas come from the CRDs' own openAPIV3Schema, with
`additionalProperties: false` added beside every `properties` for kubeconform's strict mode. A
CRD's structural schema may not have both, so those are taken out again: with field
validation Strict the API server refuses unknown fields itself (and prunes them otherwise).

usage: crds.py SCHEMAS_DIR > crds.json
"""
import json
import sys


def structural(node):
    """The schema with the `additionalProperties: false` that kubeconform needs removed."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "additionalProperties" and value is False:
                continue
            out[key] = structural(value)
        return out
    if isinstance(node, list):
        return [structural(v) for v in node]
    return node


def crd(group, kind, plural, version, schema, status=True, short=None):
    names = {"kind": kind, "listKind": kind + "List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    ver = {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if status:
        ver["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {"app.kubernetes.io/part-of": "hookstream-k8s-test"},
        },
        "spec": {"group": group, "scope": "Namespaced", "names": names, "versions": [ver]},
    }


def load(schemas, rel):
    with open(f"{schemas}/crds/{rel}", encoding="utf-8") as f:
        schema = structural(json.load(f))
    schema.pop("$schema", None)
    return schema


def secret_ref_list(required):
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": required,
            "properties": {k: {"type": "string"} for k in ("parameter", "name", "key")},
        },
    }


# KEDA's TriggerAuthentication (keda.sh/v1alpha1): secretTargetRef, which the chart uses, in
# full (parameter, name and key, all required, as in KEDA's CRD); KEDA's other sources only as
# opaque objects/lists, since nothing in the chart renders them.
TRIGGER_AUTH = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "secretTargetRef": secret_ref_list(["parameter", "name", "key"]),
                "configMapTargetRef": secret_ref_list(["parameter", "name", "key"]),
                "env": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["parameter", "name"],
                        "properties": {k: {"type": "string"} for k in ("parameter", "name", "containerName")},
                    },
                },
                **{
                    k: {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    for k in ("podIdentity", "hashiCorpVault", "azureKeyVault", "awsSecretManager",
                              "gcpSecretManager", "bearer")
                },
                "boundServiceAccountToken": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    schemas = sys.argv[1]
    items = [
        crd("keda.sh", "ScaledObject", "scaledobjects", "v1alpha1",
            load(schemas, "keda.sh/scaledobject_v1alpha1.json"), short=["so"]),
        crd("keda.sh", "TriggerAuthentication", "triggerauthentications", "v1alpha1", TRIGGER_AUTH,
            short=["ta"]),
        crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors", "v1",
            load(schemas, "monitoring.coreos.com/servicemonitor_v1.json"), status=False, short=["smon"]),
        crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules", "v1",
            load(schemas, "monitoring.coreos.com/prometheusrule_v1.json"), status=False, short=["promrule"]),
    ]
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
