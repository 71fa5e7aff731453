"""``slurmbridge doctor``: one pass/fail line per prerequisite, each failure with a hint."""

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from lightkube import AsyncClient
from lightkube.generic_resource import create_global_resource
from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from bridge.config import Settings
from bridge.controllers.nodesync import topology_labels
from bridge.kube.nodecache import node_view
from bridge.placement.grace import grace_warning
from bridge.policy.tenancy import TenancyError, TenancySource, Tenant
from bridge.slurm.auth import token_expiry
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmTLSError, SlurmUnavailable
from bridge.slurm.types import Accounting, SlurmNode


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    what: str
    hint: str = ""
    warning: bool = False  # ok, but something a person should look at

    def line(self) -> str:
        label = "WARN" if self.warning else "PASS" if self.ok else "FAIL"
        return f"{label}  {self.what}" + (
            f"  (hint: {self.hint})" if self.hint and (self.warning or not self.ok) else ""
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


async def slurm_checks(settings: Settings,
                       nodes: list[SlurmNode] | None = None) -> AsyncIterator[Check]:
    """``nodes``: filled with Slurm's nodes as read here (the topology checks use them)."""
    url = settings.slurm.url
    try:
        async with SlurmClient(settings.slurm.model_copy(update={"retries": 0})) as client:
            parser = await client.connect()
            yield Check(True, f"slurmrestd at {url} answers; data parser {parser} "
                              f"({client.family.placeholder} placeholders)")
            listed = await client.list_nodes()
            if nodes is not None:
                nodes.extend(listed)
            credential = "JWT key" if settings.slurm.jwt_key_file else "token"
            yield Check(True, f"{credential} for Slurm user {settings.slurm.user!r} works "
                              f"({len(listed)} Slurm nodes)")
    except SlurmTLSError as exc:  # before SlurmUnavailable: a refused handshake is both
        yield Check(False, f"TLS: {exc.problem}", exc.fix)
    except SlurmUnavailable as exc:
        yield Check(False, f"slurmrestd at {url} unreachable: {exc}",
                    "is slurmrestd running and is slurm.url right?")
    except SlurmAuthError as exc:
        yield Check(False, f"slurmrestd at {url} refused the credential: {exc}",
                    "mint a JWT with `scontrol token` into slurm.token_file, or set "
                    "slurm.jwt_key_file to the key of AuthAltParameters=jwt_key=")
    except SlurmError as exc:
        yield Check(False, f"slurmrestd at {url}: {exc}", "see docs/operations.md")


TOKEN_WARN_DAYS = 7


def token_check(settings: Settings) -> Check:
    """When the Slurm token the bridge sends expires: a warning within a week, so the next one
    is minted before slurmrestd starts refusing (tokens minted with the JWT key renew)."""
    slurm = settings.slurm
    if slurm.jwt_key_file is not None:
        return Check(True, f"Slurm tokens minted with the JWT key {slurm.jwt_key_file} expire "
                           f"after {slurm.token_lifespan_seconds} s and are renewed")
    where = f"Slurm token file {slurm.token_file}" if slurm.token_file else "slurm.token"
    hint = (f"mint the next one with `scontrol token username={slurm.user} lifespan=<seconds>` "
            f"into {where}, or give the bridge the JWT key (slurm.jwt_key_file)")
    try:
        token = (slurm.token_file.read_text().strip() if slurm.token_file
                 else slurm.token.get_secret_value() if slurm.token else "")
    except OSError as exc:
        return Check(False, f"{where}: cannot be read to see when it expires: {exc}", hint)
    expires = token_expiry(token) if token else None
    if expires is None:
        return Check(True, f"{where}: no expiry readable (not a JWT with exp)", hint, warning=True)
    left = expires - time.time()
    when = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%d %H:%M UTC")
    if left <= 0:
        return Check(False, f"{where} expired at {when}", hint)
    span = f"{left / 86400:.1f} days" if left >= 86400 else f"{left / 3600:.1f} hours"
    return Check(True, f"{where} expires in {span} ({when})", hint,
                 warning=left < TOKEN_WARN_DAYS * 86400)


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


async def tenancy_checks(settings: Settings, kube: AsyncClient) -> AsyncIterator[Check]:
    """The tenancy file parses, and every account, user and QOS it names exists in slurmdbd;
    pods whose grace period outlasts the GraceTime of their preemptable QOS are named."""
    try:
        source = TenancySource(settings.admission.tenancy_file)
    except TenancyError as exc:
        yield Check(False, f"tenancy: {exc}", "fix the file (docs/operations.md, Tenancy)")
        return
    mapping = source.current()
    if not source.configured or not mapping.tenants():
        yield Check(False, "tenancy: no namespace is mapped to a Slurm account and user: every "
                    "pod is refused", "set admission.tenancy_file (Helm: tenancy.namespaces)")
        return
    try:
        async with SlurmClient(settings.slurm.model_copy(update={"retries": 0})) as client:
            known = await client.accounting()
    except SlurmError as exc:
        yield Check(False, f"tenancy: slurmdbd cannot be read through slurmrestd: {exc}",
                    "slurmdbd must run and slurmrestd load openapi/slurmdbd (-s ...)")
        return
    for place, tenant in mapping.tenants().items():
        yield _tenant_check(place, tenant, known, settings.slurm.user)
    unknown = sorted(q for q in mapping.priority_classes.values() if q not in known.qos)
    if unknown:
        yield Check(False, f"tenancy priority_classes: QOS {', '.join(unknown)} not in slurmdbd",
                    "sacctmgr add qos ..., or fix priority_classes")
    async for check in _grace_checks(kube, known):
        yield check


def _tenant_check(place: str, tenant: Tenant, known: Accounting, bridge_user: str) -> Check:
    user = tenant.user or bridge_user
    missing = []
    if tenant.account and tenant.account not in known.accounts:
        missing.append(f"account {tenant.account!r}")
    elif tenant.account and (user, tenant.account) not in known.associations:
        missing.append(f"user {user!r} in account {tenant.account!r}")
    if not tenant.account and not any(u == user for u, _ in known.associations):
        missing.append(f"user {user!r}")
    qos = [*tenant.qos, *([tenant.default_qos] if tenant.default_qos else [])]
    missing += [f"QOS {q!r}" for q in dict.fromkeys(qos) if q not in known.qos]
    what = (f"tenancy {place}: account {tenant.account or '(default)'}, user {user}, "
            f"QOS {','.join(tenant.qos) or '(any)'}")
    if missing:
        return Check(False, f"{what}: missing in slurmdbd: {', '.join(missing)}",
                     "sacctmgr add account/user/qos, or fix the tenancy file")
    return Check(True, f"{what}: in slurmdbd")


async def _grace_checks(kube: AsyncClient, known: Accounting) -> AsyncIterator[Check]:
    async for pod in kube.list(Pod, namespace="*",
                               fields={"spec.schedulerName": keys.SCHEDULER_NAME}):
        warning = grace_warning(pod, known)
        if warning and pod.metadata:
            yield Check(True, f"pod {pod.metadata.namespace}/{pod.metadata.name}: {warning}",
                        "lower terminationGracePeriodSeconds or raise the QOS GraceTime",
                        warning=True)


async def topology_checks(nodes: list[SlurmNode], kube: AsyncClient) -> AsyncIterator[Check]:
    """The topologies Slurm's nodes name (what slurmrestd shows of them), and each Node whose
    ``slurmbridge.io/topology-*`` labels disagree.  No ``nodes``: slurm_checks said why."""
    if not nodes:
        return
    slurm_nodes = {n.name: n for n in nodes}
    named = [n for n in slurm_nodes.values() if n.topology]
    if not named:
        yield Check(True, "Slurm topology: no node names a unit; Nodes get no topology labels",
                    "on Slurm 25.05+ name each node's units on its NodeName line "
                    "(Topology=tree:leaf1,...): slurmrestd shows no other form", warning=True)
        return
    topologies = sorted({name for n in named for name, _ in n.topology})
    yield Check(True, f"Slurm topology: {', '.join(topologies)} on {len(named)} of "
                      f"{len(slurm_nodes)} Slurm nodes")
    async for node in kube.list(Node):
        view = node_view(node)
        sn = slurm_nodes.get(view.slurm_name) if view else None
        if view is not None and sn is not None and topology_labels(view, sn):
            yield Check(True, f"node {view.name}: topology labels {dict(view.topology)} are not "
                              f"Slurm's units {dict(sn.topology)}",
                        "node sync sets them each round: is the bridge's leader running?",
                        warning=True)


async def run(settings: Settings, kube: AsyncClient) -> list[Check]:
    nodes: list[SlurmNode] = []
    return (
        [c async for c in slurm_checks(settings, nodes)] + [token_check(settings)]
        + [c async for c in kube_checks(kube)]
        + [c async for c in tenancy_checks(settings, kube)]
        + [c async for c in topology_checks(nodes, kube)]
    )
