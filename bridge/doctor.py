"""``slurmbridge doctor``: one pass/fail line per prerequisite, each failure with a hint."""

from collections.abc import AsyncIterator
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.generic_resource import create_global_resource
from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Node

from bridge import keys
from bridge.config import Settings
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmUnavailable


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    what: str
    hint: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.what}" + (
            "" if self.ok else f"  (hint: {self.hint})"
        )


# (verb, resource, subresource, group): what the extender and its controllers do.
NEEDED = [
    ("list", "pods", "", ""), ("patch", "pods", "", ""), ("patch", "pods", "status", ""),
    ("create", "pods", "binding", ""), ("create", "pods", "eviction", ""),
    ("list", "nodes", "", ""), ("patch", "nodes", "", ""), ("patch", "nodes", "status", ""),
    ("create", "events", "", ""), ("update", "leases", "", "coordination.k8s.io"),
]

_WEBHOOK_KINDS = {
    "mutating": create_global_resource(
        "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    ),
    "validating": create_global_resource(
        "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    ),
}


async def slurm_checks(settings: Settings) -> AsyncIterator[Check]:
    url = settings.slurm.url
    try:
        async with SlurmClient(settings.slurm.model_copy(update={"retries": 0})) as client:
            parser = await client.connect()
            yield Check(True, f"slurmrestd at {url} answers; data parser {parser} "
                              f"({client.family.placeholder} placeholders)")
            nodes = await client.list_nodes()
            yield Check(True, f"token for Slurm user {settings.slurm.user!r} works "
                              f"({len(nodes)} Slurm nodes)")
    except SlurmUnavailable as exc:
        yield Check(False, f"slurmrestd at {url} unreachable: {exc}",
                    "is slurmrestd running and is slurm.url right?")
    except SlurmAuthError as exc:
        yield Check(False, f"slurmrestd at {url} refused the token: {exc}",
                    "mint a JWT with `scontrol token` into slurm.token_file")
    except SlurmError as exc:
        yield Check(False, f"slurmrestd at {url}: {exc}", "see docs/operations.md")


async def kube_checks(kube: AsyncClient) -> AsyncIterator[Check]:
    try:
        missing = []
        for verb, resource, sub, group in NEEDED:
            review = SelfSubjectAccessReview(spec=SelfSubjectAccessReviewSpec(
                resourceAttributes=ResourceAttributes(
                    verb=verb, resource=resource, subresource=sub or None, group=group
                )))
            answer = await kube.create(review)
            if not (answer.status and answer.status.allowed):
                missing.append(f"{verb} {resource}{'/' + sub if sub else ''}")
        yield Check(not missing, "apiserver permissions of the bridge"
                    + (f": missing {', '.join(missing)}" if missing else ""),
                    "apply the chart's RBAC (deploy/helm/slurmbridge/templates/rbac.yaml)")
        for kind, config_res in _WEBHOOK_KINDS.items():
            names = [str(c.metadata.name) async for c in kube.list(config_res)
                     if c.metadata and "slurmbridge" in str(c.metadata.name)]
            yield Check(bool(names), f"{kind} webhook configuration: {', '.join(names) or 'none'}",
                        "install the chart, or register the webhook with its caBundle")
        managed = [n.metadata.name async for n in kube.list(Node) if n.metadata and any(
            t.key == keys.MANAGED_TAINT for t in (n.spec.taints if n.spec else None) or [])]
        yield Check(bool(managed), f"nodes tainted {keys.MANAGED_TAINT}: {len(managed)}",
                    "the controllers taint nodes that map to Slurm nodes; is the bridge running?")
    except Exception as exc:  # apiserver unreachable or kubeconfig broken
        yield Check(False, f"apiserver: {exc!r}", "check kube.kubeconfig / in-cluster config")


async def run(settings: Settings, kube: AsyncClient) -> list[Check]:
    return [c async for c in slurm_checks(settings)] + [c async for c in kube_checks(kube)]
