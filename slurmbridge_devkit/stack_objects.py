"""What the e2e stack registers in the control plane: the bridge's ServiceAccount and its
kubeconfig, the Kubernetes nodes standing for Slurm's, the chart's webhook configurations
and admission policy, as shipped, and the bridge's kube-scheduler configuration, pointed at
the stack's processes."""

import base64
import contextlib
import json
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Node, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from bridge import keys
from slurmbridge_devkit.helm import render
from slurmbridge_devkit.kube import ControlPlane, scheduler_config
from slurmbridge_devkit.kubelet import create_node
from slurmbridge_devkit.namespaces import create_namespace
from slurmbridge_devkit.processes import BRIDGE_NS

BRIDGE_SA = "slurmbridge"
E2E_LABEL = "slurmbridge.test/e2e"
NODES = 4
# A DaemonSet of the bridge's namespace the stack's admission policy lets run on Slurm's nodes,
# as a site lists its node agents (chart values managedNodes.daemonSets).
NODE_AGENT = "node-agent"
WEBHOOK_CONFIG = "slurmbridge-e2e"

MutatingWebhookConfiguration = create_global_resource(
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
)
ValidatingWebhookConfiguration = create_global_resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
)
ValidatingAdmissionPolicy = create_global_resource(
    "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
)
ValidatingAdmissionPolicyBinding = create_global_resource(
    "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
)


async def bridge_kubeconfig(kube: AsyncClient, cp: ControlPlane, path: Path) -> None:
    """A kubeconfig with the bridge's own ServiceAccount token, as it would run in-cluster."""
    try:
        await create_namespace(kube, BRIDGE_NS)
    except ApiError as exc:
        if exc.status.code != 409:
            raise
    for obj in (
        ServiceAccount(metadata=ObjectMeta(name=BRIDGE_SA, namespace=BRIDGE_NS)),
        ClusterRoleBinding(
            metadata=ObjectMeta(name="slurmbridge-e2e"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole",
                            name="cluster-admin"),
            subjects=[Subject(kind="ServiceAccount", name=BRIDGE_SA, namespace=BRIDGE_NS)],
        ),
    ):
        try:
            await kube.create(obj)
        except ApiError as exc:
            if exc.status.code != 409:
                raise
    token = await kube.create(
        ServiceAccount.Token(
            metadata=ObjectMeta(name=BRIDGE_SA, namespace=BRIDGE_NS),
            spec=TokenRequestSpec(audiences=[], expirationSeconds=86400),
        ),
        BRIDGE_SA, namespace=BRIDGE_NS,
    )
    assert token.status is not None
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "bridge",
        "clusters": [{"name": "local", "cluster": {
            "server": cp.server, "certificate-authority": str(cp.ca_file)}}],
        "users": [{"name": "bridge", "user": {"token": token.status.token}}],
        "contexts": [{"name": "bridge", "context": {"cluster": "local", "user": "bridge"}}],
    }
    path.write_text(yaml.safe_dump(config))  # noqa: ASYNC240 - tiny, once per session


async def ensure_nodes(kube: AsyncClient) -> dict[str, str]:
    nodes = {}
    for k in range(1, NODES + 1):
        name = f"kube-node{k}"
        try:
            await kube.delete(Node, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        await create_node(
            kube, name, cpu="64", memory="256Gi", gpus=8,
            labels={keys.NODE_SLURM_NODE: f"node{k}", keys.MANAGED_NODE_LABEL: "true"},
            taints=[{"key": keys.MANAGED_TAINT, "effect": "NoSchedule"}],
        )
        nodes[name] = f"node{k}"
    return nodes


# The webhook configurations as a first `helm install` registers them: with no earlier webhook
# replica to answer, webhook.validateCreates auto reviews each created pod once (/admit).  The
# stack renders with `helm template`, which cannot read the cluster, so the demo and the
# benchmarks say it; the e2e tiers keep `helm template`'s two reviews (and test one apart).
FIRST_INSTALL = ("--set", "webhook.validateCreates=false")


def webhook_configs(url: str, ca_pem: bytes, *flags: str) -> list[Any]:
    """The chart's two webhook configurations as shipped (entries, rules, matchConditions,
    namespace selectors: the bridge's pods only; failure policy), pointed at the stack's
    webhook by URL and limited to the e2e namespaces; ``flags``: more chart values."""
    ca = base64.b64encode(ca_pem).decode()
    e2e_only = {"key": E2E_LABEL, "operator": "In", "values": ["true"]}
    docs = render("e2e", BRIDGE_NS, "--show-only", "templates/webhook-admission.yaml",
                  "--set", f"serviceAccount.extenderName={BRIDGE_SA}", *flags)
    kinds = {"MutatingWebhookConfiguration": MutatingWebhookConfiguration,
             "ValidatingWebhookConfiguration": ValidatingWebhookConfiguration}
    configs = []
    for doc in docs:
        if doc["kind"] not in kinds:
            continue  # the serving certificate's Secret: the stack brings its own
        doc["metadata"] = {"name": WEBHOOK_CONFIG}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca}
            hook["namespaceSelector"]["matchExpressions"].append(e2e_only)
        configs.append(kinds[doc["kind"]].from_dict(doc))
    return configs


def admission_policy() -> list[Any]:
    """The chart's ValidatingAdmissionPolicies (+ bindings), as shipped, for the e2e namespace,
    listing the stack's node agent as a site lists its DaemonSets."""
    agents = json.dumps(["kube-system/kube-proxy", f"{BRIDGE_NS}/{NODE_AGENT}"])
    docs = render("e2e", BRIDGE_NS, "--show-only", "templates/admission-policy.yaml",
                  "--set", f"serviceAccount.extenderName={BRIDGE_SA}",  # the bridge's identity
                  "--set-json", f"managedNodes.daemonSets={agents}")
    kinds = {"ValidatingAdmissionPolicy": ValidatingAdmissionPolicy,
             "ValidatingAdmissionPolicyBinding": ValidatingAdmissionPolicyBinding}
    return [kinds[doc["kind"]].from_dict(doc) for doc in docs]


async def replace_objects(kube: AsyncClient, objs: list[Any]) -> None:
    for obj in objs:
        with contextlib.suppress(ApiError):
            await kube.delete(type(obj), obj.metadata.name)
        await kube.create(obj)


async def remove_objects(kube: AsyncClient, objs: list[Any]) -> None:
    for obj in objs:
        with contextlib.suppress(ApiError):
            await kube.delete(type(obj), obj.metadata.name)


SCHEDULER_CERT, SCHEDULER_KEY = "scheduler-client.crt", "scheduler-client.key"
CLIENT_CA = "client-ca.crt"  # signs the scheduler's client certificate, nothing else


def bridge_scheduler_config(extender_port: int, work: Path, **extra: Any) -> dict[str, Any]:
    """The bridge's kube-scheduler: one profile ``slurmbridge`` calling the extender."""
    return scheduler_config(
        keys.SCHEDULER_NAME,
        percentageOfNodesToScore=100,
        extenders=[extender_config(extender_port, work)],
        **extra,
    )


def extender_config(port: int, work: Path) -> dict[str, Any]:
    """The extender stanza of the bridge's kube-scheduler (names only: nodeCacheCapable).

    HTTPS both ways: the scheduler checks the extender's certificate against ``ca.crt`` and
    presents its own client certificate, the only one the extender accepts.
    """
    return {
        "urlPrefix": f"https://127.0.0.1:{port}",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 1,
        "nodeCacheCapable": True,
        "enableHTTPS": True,
        "tlsConfig": {
            "certFile": str(work / SCHEDULER_CERT),
            "keyFile": str(work / SCHEDULER_KEY),
            "caFile": str(work / "ca.crt"),
        },
        "httpTimeout": "10s",
    }
