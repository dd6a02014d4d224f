"""The chart's `values.schema.json`, generated so that it cannot drift from what it checks:
every key and its type come from `values.yaml` (the documented defaults), `example.spec`
is the CRD's own `spec` schema, and OVERRIDES says what a default cannot (free-form maps,
Kubernetes objects passed through). Every object with keys is closed
(`additionalProperties: false`), so a misspelt or misplaced key fails `helm install`,
`helm upgrade`, `helm lint` and `helm template` instead of being ignored.

    python -m weaseldb_operator.chartschema charts/weaseldb > charts/weaseldb/values.schema.json

tests/unit/test_chart_files.py compares the committed file with this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

#: Kubernetes objects handed to a template as they are (`toYaml`): their shape is the API
#: server's to check, and a default cannot list every field they may have.
_RESOURCES: Schema = {
    "type": "object",
    "properties": {
        "requests": {"type": "object"},
        "limits": {"type": "object"},
        "claims": {"type": "array"},
    },
    "additionalProperties": False,
}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
OVERRIDES: dict[str, Schema] = {
    "operator.resources": _RESOURCES,
    "operator.env": {"type": "array", "items": {"type": "object"}},
    "operator.nodeSelector": _STRING_MAP,
    "operator.tolerations": {"type": "array", "items": {"type": "object"}},
    "operator.affinity": {"type": "object"},
    "operator.podAnnotations": _STRING_MAP,
    "serviceAccount.annotations": _STRING_MAP,
    "imagePullSecrets": {"type": "array", "items": {"type": "object"}},
    "operator.image.pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
    "monitoring.scrapeFrom": {"type": "array", "items": {"type": "object"}},
    "monitoring.podMonitor.labels": _STRING_MAP,
    # A prometheus-operator SafeTLSConfig, passed through (its shape is the CRD's to check).
    "monitoring.podMonitor.tlsConfig": {"type": "object"},
    "monitoring.prometheusRule.labels": _STRING_MAP,
    "monitoring.grafanaDashboard.labels": _STRING_MAP,
}
#: The WeaselDB spec the chart installs with `example.enabled`: the CRD decides.
CRD_SPEC = "example.spec"
#: Helm passes `global` to every chart when this one is a subchart.
_GLOBAL: Schema = {"type": "object"}


def from_default(value: Any, path: str, crd_spec: Schema) -> Schema:
    """The schema of the key at `path` (dotted), whose default is `value`."""
    if path in OVERRIDES:
        return OVERRIDES[path]
    if path == CRD_SPEC:
        return crd_spec
    if isinstance(value, bool):  # before int: bool is an int in Python
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        return _object(value, path, crd_spec)
    raise ValueError(f"values.yaml: {path} has no type to infer (default {value!r})")


def _object(value: dict[str, Any], path: str, crd_spec: Schema) -> Schema:
    if not value:
        raise ValueError(f"values.yaml: {path} is an empty map: give it an entry in OVERRIDES")
    prefix = f"{path}." if path else ""
    properties = {k: from_default(v, prefix + k, crd_spec) for k, v in value.items()}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def crd_spec_schema(crd: dict[str, Any]) -> Schema:
    """The `spec` schema of the CRD's storage version, in JSON Schema (draft-07) terms."""
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    spec: Schema = json_schema(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    return spec


def json_schema(node: Any) -> Any:
    """An OpenAPI v3.0 schema (a CRD's) as JSON Schema: v3.0's boolean
    `exclusiveMinimum: true` beside `minimum: X` is draft-07's `exclusiveMinimum: X` (helm
    refuses the boolean form), and `nullable: true` admits null."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: json_schema(value) for key, value in node.items()}
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)
        elif out.get(exclusive) is False:
            del out[exclusive]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def render(chart: Path) -> str:
    values = yaml.safe_load((chart / "values.yaml").read_text())
    crd = yaml.safe_load((chart / "crds/weaseldb.io_weaseldbs.yaml").read_text())
    schema: Schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Values of the weaseldb chart (generated by weaseldb_operator.chartschema)",
        **_object(values, "", crd_spec_schema(crd)),
    }
    schema["properties"]["global"] = _GLOBAL
    return json.dumps(schema, indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(Path(sys.argv[1] if len(sys.argv) > 1 else "charts/weaseldb")))
