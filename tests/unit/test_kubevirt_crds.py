# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for tests/cluster/kubevirt_crds.py.

The CRDs stand in for KubeVirt's on the local control plane, so these tests pin
what the collection depends on: schemas the API server accepts as structural,
addedNodeSelector present on 1.6 and pruned on 1.5, the names kubectl and the
kubernetes.core modules resolve, and KubeVirt's status subresource layout.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "cluster" / "kubevirt_crds.py"
_SPEC = importlib.util.spec_from_file_location("kubevirt_crds", _PATH)
kc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(kc)

VERSIONS = ("1.6", "v1.6.3", "1.5", "v1.5.2")

# JSONSchemaProps keys a v1 CRD may use (no $ref, definitions, patternProperties...).
_ALLOWED_KEYS = {
    "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems",
    "multipleOf", "enum", "maxProperties", "minProperties", "required", "items", "allOf", "oneOf",
    "anyOf", "not", "properties", "additionalProperties", "externalDocs", "example", "nullable",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
}
_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
_PY_TYPES = {"string": str, "integer": int, "boolean": bool, "number": (int, float)}


def structural_errors(node, path="", root=True):
    """Violations of the structural-schema rules apiextensions.k8s.io/v1 enforces."""
    errors = []
    if not isinstance(node, dict):
        return [f"{path}: schema is not a mapping"]
    unknown = set(node) - _ALLOWED_KEYS
    if unknown:
        errors.append(f"{path}: keys not allowed in a v1 CRD schema: {sorted(unknown)}")
    kind = node.get("type")
    int_or_string = node.get("x-kubernetes-int-or-string")
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if preserve is not None and preserve is not True:
        errors.append(f"{path}: x-kubernetes-preserve-unknown-fields must be true or absent")
    if int_or_string is not None and int_or_string is not True:
        errors.append(f"{path}: x-kubernetes-int-or-string must be true or absent")
    if int_or_string:
        if kind is not None:
            errors.append(f"{path}: x-kubernetes-int-or-string with a type")
        if node.get("anyOf", [{"type": "integer"}, {"type": "string"}]) != [{"type": "integer"}, {"type": "string"}]:
            errors.append(f"{path}: int-or-string anyOf must be exactly integer, string")
    elif kind is None and not preserve:
        errors.append(f"{path}: no type (and neither int-or-string nor preserve-unknown-fields)")
    elif kind is not None and kind not in _TYPES:
        errors.append(f"{path}: unknown type {kind!r}")
    for junction in ("allOf", "oneOf", "not"):
        if junction in node:
            errors.append(f"{path}: {junction} is not used by these schemas and is easy to get non-structural")
    if "anyOf" in node and not int_or_string:
        errors.append(f"{path}: anyOf outside int-or-string")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties together")
    if ("properties" in node or "additionalProperties" in node) and kind != "object":
        errors.append(f"{path}: properties on a non-object")
    if "items" in node and kind != "array":
        errors.append(f"{path}: items on a non-array")
    if kind == "array" and not isinstance(node.get("items"), dict):
        errors.append(f"{path}: array without a single items schema")
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
        errors.append(f"{path}: additionalProperties must be a schema (false/true are not allowed)")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            errors.append(f"{path}: required {name!r} is not a property")
    if "enum" in node:
        expected = _PY_TYPES.get(kind)
        if not node["enum"] or (expected and not all(isinstance(v, expected) for v in node["enum"])):
            errors.append(f"{path}: enum values do not match type {kind}")
        if len(set(node["enum"])) != len(node["enum"]):
            errors.append(f"{path}: duplicate enum values")
    if "default" in node:
        errors.append(f"{path}: defaults are not used by these CRDs")
    if node.get("x-kubernetes-list-type") == "map":
        item = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []):
                errors.append(f"{path}: list-map key {key!r} must be required")
    if "x-kubernetes-list-map-keys" in node and node.get("x-kubernetes-list-type") != "map":
        errors.append(f"{path}: list-map-keys without list-type map")
    if root:
        if kind != "object":
            errors.append("root: type must be object")
        metadata = node.get("properties", {}).get("metadata")
        if metadata is not None and metadata != {"type": "object"}:
            errors.append("root: metadata may only be {type: object} here")
    for name, child in node.get("properties", {}).items():
        errors.extend(structural_errors(child, f"{path}.{name}", root=False))
    if isinstance(node.get("additionalProperties"), dict):
        errors.extend(structural_errors(node["additionalProperties"], f"{path}.<value>", root=False))
    if isinstance(node.get("items"), dict):
        errors.extend(structural_errors(node["items"], f"{path}[]", root=False))
    return errors


def prune(value, schema):
    """What the API server keeps of an object under a structural schema (pruning only)."""
    if isinstance(value, list):
        return [prune(v, schema.get("items", {"x-kubernetes-preserve-unknown-fields": True})) for v in value]
    if not isinstance(value, dict):
        return value
    if "additionalProperties" in schema:
        return {k: prune(v, schema["additionalProperties"]) for k, v in value.items()}
    props = schema.get("properties", {})
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields", False)
    return {k: prune(v, props.get(k, {"x-kubernetes-preserve-unknown-fields": True}))
            for k, v in value.items() if k in props or keep_unknown}


def by_kind(version):
    return {c["spec"]["names"]["kind"]: c for c in kc.crds(version)}


def schema_of(version, kind, api_version="v1"):
    for served in by_kind(version)[kind]["spec"]["versions"]:
        if served["name"] == api_version:
            return served["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{kind} does not serve {api_version}")


def walk(schema, *path):
    node = schema
    for name in path:
        node = node["items"] if name == "[]" else node["properties"][name]
    return node


@pytest.mark.parametrize("version", VERSIONS)
def test_schemas_are_structural(version):
    for item in kc.crds(version):
        for served in item["spec"]["versions"]:
            errors = structural_errors(served["schema"]["openAPIV3Schema"])
            assert not errors, f"{item['metadata']['name']} {served['name']}:\n" + "\n".join(errors)


def test_checker_catches_violations():
    assert structural_errors({"type": "object", "properties": {"a": {}}})
    assert structural_errors({"type": "object", "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}}})
    assert structural_errors({"type": "object", "properties": {"a": {"type": "array"}}})
    assert structural_errors({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}})
    assert structural_errors({"type": "object", "required": ["b"], "properties": {"a": {"type": "string"}}})
    assert structural_errors({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-preserve-unknown-fields": False}}})
    int_or_string = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert not structural_errors({"type": "object", "properties": {"a": int_or_string}})


@pytest.mark.parametrize("version", VERSIONS)
def test_names(version):
    expected = {
        "VirtualMachine": ("virtualmachines", "virtualmachine", ["vm", "vms"]),
        "VirtualMachineInstance": ("virtualmachineinstances", "virtualmachineinstance", ["vmi", "vmis"]),
        "VirtualMachineInstanceMigration": ("virtualmachineinstancemigrations", "virtualmachineinstancemigration", ["vmim", "vmims"]),
        "KubeVirt": ("kubevirts", "kubevirt", ["kv", "kvs"]),
    }
    found = by_kind(version)
    assert set(found) == set(expected)
    for kind, (plural, singular, short) in expected.items():
        item = found[kind]
        assert item["apiVersion"] == "apiextensions.k8s.io/v1"
        assert item["kind"] == "CustomResourceDefinition"
        assert item["metadata"]["name"] == f"{plural}.kubevirt.io"
        spec = item["spec"]
        assert spec["group"] == "kubevirt.io"
        assert spec["scope"] == "Namespaced"
        assert spec["names"]["plural"] == plural
        assert spec["names"]["singular"] == singular
        assert spec["names"]["shortNames"] == short
        assert spec["names"]["listKind"] == kind + "List"
        assert "all" in spec["names"]["categories"]


@pytest.mark.parametrize("version", VERSIONS)
def test_versions_and_subresources(version):
    for kind, item in by_kind(version).items():
        versions = {v["name"]: v for v in item["spec"]["versions"]}
        assert set(versions) == {"v1", "v1alpha3"}
        assert [v["name"] for v in item["spec"]["versions"] if v["storage"]] == ["v1"]
        assert all(v["served"] for v in versions.values())
        assert versions["v1alpha3"]["deprecated"] is True
        assert "conversion" not in item["spec"]
        # No conversion webhook: every served version must have the same schema.
        assert versions["v1"]["schema"] == versions["v1alpha3"]["schema"]
        for served in versions.values():
            assert ("status" in served.get("subresources", {})) is kc.STATUS_SUBRESOURCE[kind]
    assert kc.STATUS_SUBRESOURCE["VirtualMachineInstance"] is False
    assert kc.STATUS_SUBRESOURCE["VirtualMachineInstanceMigration"] is True


@pytest.mark.parametrize("version", VERSIONS)
def test_printer_columns(version):
    columns = {kind: [c["name"] for c in item["spec"]["versions"][0]["additionalPrinterColumns"]] for kind, item in by_kind(version).items()}
    assert columns["VirtualMachineInstance"][:5] == ["Age", "Phase", "IP", "NodeName", "Ready"]
    assert columns["VirtualMachineInstanceMigration"] == ["Phase", "VMI"]
    assert columns["VirtualMachine"] == ["Age", "Status", "Ready"]
    assert columns["KubeVirt"] == ["Age", "Phase"]


@pytest.mark.parametrize("version", ("1.6", "v1.6.3"))
def test_added_node_selector_on_1_6(version):
    spec = walk(schema_of(version, "VirtualMachineInstanceMigration"), "spec")
    assert spec["properties"]["addedNodeSelector"] == {"type": "object", "additionalProperties": {"type": "string"}}
    vmim = {"spec": {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node-2"}}}
    assert prune(vmim, schema_of(version, "VirtualMachineInstanceMigration")) == vmim


@pytest.mark.parametrize("version", ("1.5", "v1.5.2"))
def test_added_node_selector_pruned_on_1_5(version):
    schema = schema_of(version, "VirtualMachineInstanceMigration")
    assert "addedNodeSelector" not in walk(schema, "spec")["properties"]
    vmim = {"spec": {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node-2"}}}
    assert prune(vmim, schema) == {"spec": {"vmiName": "vm1"}}


@pytest.mark.parametrize("version", VERSIONS)
def test_vmim_spec_is_closed(version):
    spec = walk(schema_of(version, "VirtualMachineInstanceMigration"), "spec")
    assert "x-kubernetes-preserve-unknown-fields" not in spec
    assert spec["required"] == ["vmiName"]


def test_only_features_differ(monkeypatch):
    """1.5 and 1.6 differ by FEATURES and the release string, nothing else."""
    assert set(kc.FEATURES) == set(kc.RELEASES)
    assert kc.FEATURES["1.5"] < kc.FEATURES["1.6"]
    assert json.dumps(kc.crds("1.5")) != json.dumps(kc.crds("1.6"))
    monkeypatch.setitem(kc.FEATURES, "1.6", kc.FEATURES["1.5"])
    monkeypatch.setitem(kc.RELEASES, "1.6", kc.RELEASES["1.5"])
    assert kc.crds("1.6") == kc.crds("1.5")


def test_phases_per_version():
    vmim15 = walk(schema_of("1.5", "VirtualMachineInstanceMigration"), "status", "phase")["enum"]
    vmim16 = walk(schema_of("1.6", "VirtualMachineInstanceMigration"), "status", "phase")["enum"]
    base = ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded", "Failed"]
    assert vmim15 == base
    assert vmim16 == base + ["WaitingForSync", "Synchronizing"]
    vmi = walk(schema_of("1.6", "VirtualMachineInstance"), "status", "phase")["enum"]
    assert set(vmi) >= {"Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "Unknown"}
    assert "WaitAsReceiver" in walk(schema_of("1.6", "VirtualMachine"), "spec", "runStrategy")["enum"]
    assert "WaitAsReceiver" not in walk(schema_of("1.5", "VirtualMachine"), "spec", "runStrategy")["enum"]


@pytest.mark.parametrize("version", VERSIONS)
def test_fields_the_collection_uses(version):
    vm = schema_of(version, "VirtualMachine")
    template = walk(vm, "spec", "template", "spec")
    assert walk(vm, "spec", "running") == {"type": "boolean"}
    assert walk(vm, "spec", "template", "metadata", "annotations")["additionalProperties"] == {"type": "string"}
    assert walk(template, "schedulerName")["type"] == "string"
    assert walk(template, "nodeSelector")["additionalProperties"] == {"type": "string"}
    assert walk(template, "evictionStrategy")["enum"] == ["None", "LiveMigrate", "LiveMigrateIfPossible", "External"]
    term = walk(template, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "[]")
    assert set(walk(term, "matchExpressions", "[]")["properties"]) == {"key", "operator", "values"}
    assert "x-kubernetes-preserve-unknown-fields" not in walk(template, "affinity", "nodeAffinity")
    assert set(walk(template, "tolerations", "[]")["properties"]) == {"key", "operator", "value", "effect", "tolerationSeconds"}
    assert walk(template, "domain", "resources", "requests")["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert walk(template, "domain", "cpu", "cores")["type"] == "integer"
    assert walk(template, "domain", "memory", "guest")["x-kubernetes-int-or-string"] is True
    # The VMI spec is the VM template's spec.
    assert walk(schema_of(version, "VirtualMachineInstance"), "spec") == template

    vmi_status = walk(schema_of(version, "VirtualMachineInstance"), "status")
    for name in ("nodeName", "qosClass", "launcherContainerImageVersion", "evacuationNodeName", "migrationMethod"):
        assert walk(vmi_status, name)["type"] == "string"
    assert walk(vmi_status, "activePods")["additionalProperties"] == {"type": "string"}
    state = walk(vmi_status, "migrationState")
    for name in ("sourceNode", "targetNode", "targetPod", "migrationUid", "sourcePod", "abortStatus", "mode"):
        assert walk(state, name)["type"] == "string"
    assert walk(state, "completed") == walk(state, "failed") == {"type": "boolean"}
    assert walk(state, "startTimestamp")["format"] == "date-time"
    assert walk(schema_of(version, "VirtualMachineInstanceMigration"), "status", "migrationState") == state
    condition = walk(vmi_status, "conditions", "[]")
    assert set(condition["properties"]) == {"type", "status", "reason", "message", "lastProbeTime", "lastTransitionTime"}

    timestamps = walk(schema_of(version, "VirtualMachineInstanceMigration"), "status", "phaseTransitionTimestamps", "[]")
    assert set(timestamps["properties"]) == {"phase", "phaseTransitionTimestamp"}

    kv = schema_of(version, "KubeVirt")
    migrations = walk(kv, "spec", "configuration", "migrations")
    assert walk(migrations, "parallelMigrationsPerCluster")["type"] == "integer"
    assert walk(migrations, "bandwidthPerMigration")["x-kubernetes-int-or-string"] is True
    assert walk(kv, "spec", "configuration", "developerConfiguration", "featureGates") == {"type": "array", "items": {"type": "string"}}
    for name in ("phase", "observedKubeVirtVersion", "targetKubeVirtVersion", "observedKubeVirtRegistry"):
        assert walk(kv, "status", name)["type"] == "string"


def test_pruning_keeps_typed_and_open_parts():
    schema = schema_of("1.6", "VirtualMachine")
    vm = {"spec": {"runStrategy": "Always", "bogus": 1, "template": {
        "metadata": {"annotations": {"descheduler.alpha.kubernetes.io/evict": "true"}, "extra": "kept"},
        "spec": {"domain": {"devices": {"disks": [{"name": "root"}]}, "resources": {"requests": {"memory": "1Gi"}}},
                 "schedulerName": "vmsched", "typo": True}}}}
    pruned = prune(vm, schema)
    assert "bogus" not in pruned["spec"]
    assert "typo" not in pruned["spec"]["template"]["spec"]
    assert pruned["spec"]["template"]["metadata"]["extra"] == "kept"
    assert pruned["spec"]["template"]["spec"]["domain"]["devices"] == {"disks": [{"name": "root"}]}


@pytest.mark.parametrize("bad", ("1.7", "v1.4.0", "1", "", "latest", "v1.6.x", "2.6", "1.6.3.1"))
def test_bad_version_raises(bad):
    with pytest.raises(ValueError) as err:
        kc.crds(bad)
    assert "1.6" in str(err.value) and "1.5" in str(err.value)


def test_release_strings():
    assert set(kc.RELEASES) == {"1.6", "1.5"}
    assert kc.release("v1.6.3") == kc.RELEASES["1.6"]
    assert kc.release("1.5") == kc.RELEASES["1.5"]
    for minor, tag in kc.RELEASES.items():
        assert tag.startswith(f"v{minor}.")
    assert by_kind("1.5")["VirtualMachine"]["metadata"]["annotations"]["kubevirt.io/install-strategy-version"] == kc.RELEASES["1.5"]


def test_cli_yaml(capsys):
    yaml = pytest.importorskip("yaml")
    assert kc.main(["--kubevirt-version", "v1.5.2"]) == 0
    text = capsys.readouterr().out
    assert "&id" not in text  # no YAML anchors/aliases
    assert list(yaml.safe_load_all(text)) == kc.crds("1.5")


def test_dump_without_yaml(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)
    text = kc.dump(kc.crds("1.6"))
    docs = [json.loads(part) for part in text.split("---\n") if part.strip()]
    assert docs == kc.crds("1.6")


def test_cli_bad_version(capsys):
    with pytest.raises(SystemExit) as exc:
        kc.main(["--kubevirt-version", "0.59"])
    assert exc.value.code == 2
    assert "supported" in capsys.readouterr().err
