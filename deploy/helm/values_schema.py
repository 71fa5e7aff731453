"""Write deploy/helm/slurmbridge/values.schema.json, which Helm checks the values against on
install, upgrade, template and lint: a misspelt key or a value of the wrong kind fails there,
naming it, instead of as a CrashLoopBackOff.

The values the chart passes into the bridge's settings file take their schema from the
settings model (bridge/config.py), so the two cannot drift: tests/unit/test_values_schema.py
fails when the committed file is not what this script writes.  Run it after changing
values.yaml or the settings model:  python deploy/helm/values_schema.py
(--check: exit 1 when the committed file is out of date).
"""

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bridge.config import (
    AdmissionSettings,
    DeviceClassGres,
    ExtenderSettings,
    NamespacePolicy,
    Settings,
    SlurmSettings,
)
from bridge.tls_settings import DNS_NAME
from slurmbridge_cli.cli import LOG_LEVELS

SCHEMA_FILE = Path(__file__).parent / "slurmbridge" / "values.schema.json"

Schema = dict[str, Any]

# Kubernetes objects and maps the chart copies through unread: Kubernetes checks them.
ANY_OBJECT: Schema = {"type": "object"}
ANY_LIST: Schema = {"type": "array"}
STRING: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
STRINGS: Schema = {"type": "array", "items": STRING}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STRING}
COUNT: Schema = {"type": "integer", "minimum": 0}
POSITIVE: Schema = {"type": "integer", "minimum": 1}
PORT: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
DURATION: Schema = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
# pydantic's annotations that Helm's validator has no use for.
DROPPED = ("title", "format", "writeOnly")


def strict(properties: Schema) -> Schema:
    """An object of the chart's own: every key known, a typo refused naming it."""
    return {"type": "object", "additionalProperties": False, "properties": properties}


def inline(node: Any, defs: Schema) -> Any:
    """pydantic's schema with every $ref replaced by its definition and annotations dropped."""
    if isinstance(node, list):
        return [inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    return {key: inline(value, defs) for key, value in node.items()
            if key not in DROPPED and key != "$defs"}


def model(cls: type[BaseModel]) -> Schema:
    """The settings model's schema as the settings file takes it (snake_case), inlined."""
    full = cls.model_json_schema()
    result: Schema = inline(full, full.get("$defs", {}))
    return result


def field(cls: type[BaseModel], name: str) -> Schema:
    """One setting's schema, what its Helm value must be."""
    result: Schema = model(cls)["properties"][name]
    return result


def optional(schema: Any) -> Any:
    """The same schema with nothing required: values merged over what the chart renders."""
    if isinstance(schema, list):
        return [optional(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: optional(value) for key, value in schema.items() if key != "required"}


def camel(schema: Schema) -> Schema:
    """A settings section as the chart's values spell it (maxPriority for max_priority)."""
    def name(snake: str) -> str:
        head, *rest = snake.split("_")
        return head + "".join(part.title() for part in rest)
    return {**schema, "properties": {name(k): v for k, v in schema["properties"].items()}}


def slurm() -> Schema:
    url = {**field(SlurmSettings, "url"), "pattern": "^https?://[^/?#]+"}
    jwt = strict({"secretName": STRING, "key": {"type": "string", "minLength": 1},
                  "signingKey": BOOL, "create": BOOL, "token": STRING})
    server_name = {"anyOf": [{"const": ""}, {"type": "string", "pattern": DNS_NAME}]}
    tls = strict({"caSecret": STRING, "caKey": {"type": "string", "minLength": 1},
                  "clientSecret": STRING, "serverName": server_name})
    return strict({"url": url, "user": field(SlurmSettings, "user"),
                   "dataParser": field(SlurmSettings, "data_parser"), "jwt": jwt, "tls": tls})


def admission() -> Schema:
    return strict({
        "enrolledNamespaces": field(AdmissionSettings, "enrolled_namespaces"),
        "defaultPolicy": camel(model(NamespacePolicy)),
        "policies": field(AdmissionSettings, "policies"),
    })


def tenancy() -> Schema:
    entry: Schema = {"type": "object"}  # bridge/policy/tenancy.py checks each entry
    return strict({"namespaces": {"type": "object", "additionalProperties": entry},
                   "default": {"type": ["object", "null"]},
                   "priorityClasses": STRING_MAP})


def placement(extra: Schema) -> Schema:
    """Where a part's pods go and what they get: Kubernetes' own objects, copied through."""
    return {"resources": ANY_OBJECT, "nodeSelector": STRING_MAP, "tolerations": ANY_LIST,
            "affinity": ANY_OBJECT, "podAnnotations": STRING_MAP,
            "pdb": strict({"enabled": BOOL, "minAvailable": {"type": ["integer", "string"]}}),
            **extra}


def extender() -> Schema:
    return strict(placement({
        "replicas": POSITIVE, "port": field(ExtenderSettings, "port"),
        "healthPort": field(ExtenderSettings, "health_port"),
        "tls": strict({"validityDays": POSITIVE}),
        "networkPolicy": strict({"enabled": BOOL, "healthFrom": ANY_LIST}),
        "topologySpread": BOOL, "extraEnv": ANY_LIST,
    }))


def webhook() -> Schema:
    return strict(placement({
        "replicas": POSITIVE, "port": field(AdmissionSettings, "port"),
        "failurePolicy": {"enum": ["Fail", "Ignore"]},
        "enrolledFailurePolicy": {"enum": ["", "Fail", "Ignore"]},
        "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
        "validateCreates": {"enum": [True, False, "auto"], "description": (
            "check a created pod in the validating webhook, after every mutating webhook (two "
            "reviews per pod); false: in the mutating webhook's one review (/admit), once every "
            "webhook replica serves it; auto: false on a first install and on an upgrade from "
            "a rolled-out release that serves /admit, true elsewhere")},
        "excludeNamespaces": field(AdmissionSettings, "exclude_namespaces"),
        "topologySpread": BOOL, "extraEnv": ANY_LIST,
        "selfSigned": strict({"validityDays": POSITIVE}),
    }))


def scheduler() -> Schema:
    image = strict({"repository": STRING, "tag": STRING, "pullPolicy": pull_policy()})
    return strict(placement({
        "schedulerName": {"const": "slurmbridge"}, "image": image, "replicas": POSITIVE,
        "leaseName": STRING, "extenderTimeout": DURATION, "logVerbosity": COUNT,
        "authReaderBinding": BOOL,
    }))


def monitoring() -> Schema:
    service_monitor = strict({"enabled": BOOL, "labels": STRING_MAP, "interval": DURATION,
                              "scrapeTimeout": DURATION})
    slurmctld = strict({"enabled": BOOL, "address": STRING, "port": PORT,
                        "metrics": {"type": "array", "items":
                                    {"enum": ["jobs", "nodes", "partitions", "scheduler"]}}})
    rule = strict({"enabled": BOOL, "labels": STRING_MAP, "gatedMinutes": POSITIVE,
                   "tokenExpiryDays": POSITIVE, "webhookRefusalsPerMinute": COUNT})
    return strict({"serviceMonitor": service_monitor, "annotations": BOOL,
                   "slurmctld": slurmctld, "prometheusRule": rule})


def pull_policy() -> Schema:
    return {"enum": ["Always", "IfNotPresent", "Never"]}


def top_level() -> Schema:
    """Every value of values.yaml."""
    managed = strict({"daemonSets": STRINGS, "serviceAccounts": STRINGS,
                      "daemonSetControllers": STRINGS,
                      "validationActions": {"type": "array", "minItems": 1, "uniqueItems": True,
                                            "items": {"enum": ["Deny", "Warn", "Audit"]}}})
    cert_manager = strict({"enabled": BOOL, "issuerRef": strict(
        {"name": STRING, "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "group": STRING}),
        "duration": DURATION, "renewBefore": DURATION})
    drain = {**field(ExtenderSettings, "drain_seconds"), "type": "integer"}  # the chart: int
    return {
        "nameOverride": STRING, "fullnameOverride": STRING,
        "image": strict({"repository": STRING, "tag": STRING, "pullPolicy": pull_policy()}),
        "imagePullSecrets": ANY_LIST,
        "slurm": slurm(), "admission": admission(), "tenancy": tenancy(),
        "deviceClasses": {"type": "object", "additionalProperties": camel(model(DeviceClassGres))},
        "config": optional(model(Settings)),
        "logLevel": {"enum": list(LOG_LEVELS.choices)},
        "shutdownDelaySeconds": drain,
        "extender": extender(), "monitoring": monitoring(), "webhook": webhook(),
        "managedNodes": managed, "certManager": cert_manager, "scheduler": scheduler(),
        "uninstall": strict({"hook": BOOL, "keepGatedPods": BOOL, "keepRunningPods": BOOL,
                             "activeDeadlineSeconds": POSITIVE}),
        "serviceAccount": strict({"annotations": STRING_MAP, "extenderName": STRING,
                                  "webhookName": STRING, "schedulerName": STRING}),
        "podSecurityContext": ANY_OBJECT, "securityContext": ANY_OBJECT,
        "priorityClassName": STRING,
    }


def schema() -> Schema:
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "slurmbridge chart values (written by deploy/helm/values_schema.py)",
            **strict(top_level())}


def text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the schema; with --check, only say whether the committed one is current."""
    if argv == ["--check"]:
        if SCHEMA_FILE.read_text() == text():
            return 0
        sys.stderr.write(f"{SCHEMA_FILE} is not what the values and the settings model say: "
                         "run python deploy/helm/values_schema.py and commit it\n")
        return 1
    SCHEMA_FILE.write_text(text())
    sys.stdout.write(f"wrote {SCHEMA_FILE}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
