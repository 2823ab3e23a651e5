#!/usr/bin/env python3
"""Validates the manifests `spark-launch export k8s` wrote, as far as no control plane is needed.

    k8s_validate.py DIR LWS_SCHEMA.json [LWS_SCHEMA.json ...]

- Built-in kinds (ConfigMap, Service, ...) against the Kubernetes JSON schemas that the pinned
  kubernetes-validate carries, strict (an unknown field is an error), for each version in
  KUBERNETES_VERSIONS.
- Each LeaderWorkerSet against the openAPIV3Schema of LWS's own CRD for each release given
  (tests/fixtures/k8s/), and for fields that schema does not know: the API server prunes
  those silently, so a manifest would lose them without a word; here they are errors.
- Each of its pod templates also as a core v1 PodTemplate, strict, against the Kubernetes
  schemas (the CRD's copy of the pod spec is the same API, without strictness).

Prints one line per object and check (`ok KIND/NAME k8s 1.37`); exit 1 on any failure.
Run by tests/k8s_export.rs with PYTHONPATH set to the site tests/standin/fetch-k8s-validate
prints.
"""
import json
import os
import sys

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSIONS = ["1.29.0", "1.37.0"]


def unknown_fields(schema, value, path):
    """Fields of `value` that the structural schema `schema` neither names nor keeps: what the
    API server would prune from the object it stores."""
    out = []
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if not path and k == "metadata":
                continue  # the root's metadata is the API server's, not the schema's
            if k in props:
                out += unknown_fields(props[k], v, path + [k])
            elif isinstance(extra, dict):
                out += unknown_fields(extra, v, path + [k])
            elif extra is not True:
                out.append(".".join(path + [k]))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += unknown_fields(schema.get("items", {}), v, path + [str(i)])
    return out


def main():
    folder, schemas = sys.argv[1], sys.argv[2:]
    failed = 0
    docs = []
    for name in sorted(os.listdir(folder)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(folder, name)) as f:
                docs += [(name, d) for d in yaml.safe_load_all(f) if d is not None]
    if not docs:
        print("no manifests in %s" % folder)
        return 1

    def report(ok, what, check, why=""):
        nonlocal failed
        if ok:
            print("ok %s %s" % (what, check))
        else:
            failed += 1
            print("FAIL %s %s: %s" % (what, check, why))

    for name, d in docs:
        what = "%s/%s" % (d.get("kind"), d.get("metadata", {}).get("name"))
        if d.get("kind") == "LeaderWorkerSet":
            for path in schemas:
                release = os.path.basename(path).split(".schema")[0]
                schema = json.load(open(path))
                errors = sorted(
                    jsonschema.Draft7Validator(schema).iter_errors(d), key=lambda e: list(e.path)
                )
                report(
                    not errors,
                    what,
                    release,
                    "; ".join("%s: %s" % (".".join(map(str, e.path)), e.message) for e in errors[:5]),
                )
                extra = unknown_fields(schema, d, [])
                report(not extra, what, release + " (fields the API server would prune)", ", ".join(extra))
            lwt = d["spec"]["leaderWorkerTemplate"]
            for side in ("leaderTemplate", "workerTemplate"):
                if side not in lwt:
                    continue
                pt = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": "%s-%s" % (d["metadata"]["name"], side)},
                    "template": lwt[side],
                }
                for v in KUBERNETES_VERSIONS:
                    try:
                        kubernetes_validate.validate(pt, v, strict=True)
                        report(True, what + " " + side, "as a PodTemplate, k8s " + v)
                    except Exception as e:  # noqa: BLE001 - every failure is reported
                        report(False, what + " " + side, "as a PodTemplate, k8s " + v, str(e).splitlines()[0])
        else:
            for v in KUBERNETES_VERSIONS:
                try:
                    kubernetes_validate.validate(d, v, strict=True)
                    report(True, what, "k8s " + v)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    report(False, what, "k8s " + v, str(e).splitlines()[0])
    print("%d objects, %d failed checks" % (len(docs), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
