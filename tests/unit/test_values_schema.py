"""The chart's values.schema.json: written from the settings model (so a setting the chart
passes through cannot be missing or typed differently), covering every value of values.yaml,
and closed at every level of the chart's own (a typo is refused, not ignored).  `helm lint`
and a refused typo: tests/e2e/test_helm_chart.py (they need helm)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.config import NamespacePolicy, Settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "slurmbridge"
GENERATOR = REPO / "deploy" / "helm" / "values_schema.py"


def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def _values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def test_the_committed_schema_is_what_the_generator_writes() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _check(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What of ``value`` the schema refuses (the subset of JSON Schema the chart's uses)."""
    if "anyOf" in schema:
        if any(not _check(value, option, path) for option in schema["anyOf"]):
            return []
        return [f"{path}: {value!r} matches no option"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not in {schema['enum']}"]
    kinds: dict[str, type | tuple[type, ...]] = {
        "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
        "integer": int, "number": (int, float)}
    wanted = schema.get("type")
    if wanted is not None:
        names = wanted if isinstance(wanted, list) else [wanted]
        if not any(isinstance(value, kinds[n]) for n in names) or (
                isinstance(value, bool) and "boolean" not in names):
            return [f"{path}: {value!r} is not {wanted}"]
    problems = []
    if isinstance(value, dict):
        known = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in known:
                problems += _check(item, known[key], f"{path}.{key}")
            elif extra is False:
                problems.append(f"{path}.{key}: not in the schema")
            elif isinstance(extra, dict):
                problems += _check(item, extra, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += _check(item, schema["items"], f"{path}[{i}]")
    return problems


def test_the_default_values_pass_the_schema() -> None:
    assert _check(_values(), _schema(), "values") == []


def _closed_objects(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object of the chart's own (it lists properties) in the schema, with its path."""
    found = []
    if "properties" in schema:
        found.append((path, schema))
        for key, sub in schema["properties"].items():
            found += _closed_objects(sub, f"{path}.{key}")
    for option in schema.get("anyOf", []):
        found += _closed_objects(option, path)
    if isinstance(schema.get("additionalProperties"), dict):
        found += _closed_objects(schema["additionalProperties"], f"{path}.*")
    return found


def test_every_object_of_the_chart_refuses_unknown_keys() -> None:
    open_ = [path for path, obj in _closed_objects(_schema(), "values")
             if obj.get("additionalProperties") is not False]
    assert open_ == []


def _value_paths(value: Any, path: str) -> set[str]:
    if not isinstance(value, dict) or not value:
        return {path}
    return {p for key, item in value.items() for p in _value_paths(item, f"{path}.{key}")}


def test_every_value_has_a_schema_and_every_schema_key_a_value() -> None:
    """Both ways: a value added to values.yaml without its schema fails the test above; a
    schema key values.yaml does not show (unless under an empty map such as issuerRef: {})
    fails here."""
    closed = dict(_closed_objects(_schema(), "values"))
    documented = _value_paths(_values(), "values")
    for path, obj in closed.items():
        if path.startswith(("values.config", "values.admission.defaultPolicy")) or "*" in path:
            continue  # the settings model's sections: every setting, set or not
        for key in obj["properties"]:
            assert any(p in (path, f"{path}.{key}") or p.startswith(f"{path}.{key}.")
                       for p in documented), f"{path}.{key} is in the schema, not in values.yaml"


@pytest.mark.parametrize(("values", "refused"), [
    ({"logLevel": "loud"}, "values.logLevel"),
    ({"monitoring": {"prometheusRule": {"tokenExpiryDayz": 3}}},
     "values.monitoring.prometheusRule.tokenExpiryDayz"),
    ({"config": {"placement": {"poll_interval_secondz": 1}}},
     "values.config.placement.poll_interval_secondz"),
    ({"config": {"placement": {"cuda_visible_devices": "all"}}},
     "values.config.placement.cuda_visible_devices"),
    ({"admission": {"defaultPolicy": {"max_priority": 10}}},
     "values.admission.defaultPolicy.max_priority"),
    ({"admission": {"policies": {"physics": {"maxPriority": 10}}}},
     "values.admission.policies.physics.maxPriority"),
    ({"deviceClasses": {"gpu.example.com": {"gres": "tpu"}}},
     "values.deviceClasses.gpu.example.com.gres"),
])
def test_a_typo_is_refused_naming_it(values: dict[str, Any], refused: str) -> None:
    problems = _check(values, _schema(), "values")
    assert problems and problems[0].startswith(refused), problems


def test_the_settings_sections_follow_the_model() -> None:
    """The chart's defaultPolicy is the model's NamespacePolicy in camelCase, and `config`
    has every section and setting of Settings."""
    schema = _schema()["properties"]
    policy = schema["admission"]["properties"]["defaultPolicy"]["properties"]
    assert {k.replace("_", "").lower() for k in NamespacePolicy.model_fields} \
        == {k.lower() for k in policy}
    config = schema["config"]["properties"]
    assert set(config) == set(Settings.model_fields)
    for name, info in Settings.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and hasattr(section, "model_fields"):
            assert set(config[name]["properties"]) == set(section.model_fields), name
