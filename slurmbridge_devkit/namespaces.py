"""Namespaces for tests: unique names, made and labelled as the tests' own, a user limited to
one of them, removed with their pods (no kubelet is there to finish them)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.core_v1 import NamespaceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

from slurmbridge_devkit.waiting import wait_for

if TYPE_CHECKING:
    from slurmbridge_devkit.kube import ControlPlane

TEST_LABEL = "slurmbridge.test/owner"
# The virtualenv's console scripts: pip put kubectl-slurmbridge beside this Python.
SCRIPTS = Path(sys.executable).parent


def unique_name(prefix: str, max_len: int = 40) -> str:
    """A DNS-label name unique across tests and concurrent sessions."""
    slug = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[: max_len - 7].strip("-")
    return f"{slug or 't'}-{uuid.uuid4().hex[:6]}"


async def create_namespace(
    client: AsyncClient, name: str, labels: dict[str, str] | None = None
) -> Namespace:
    """Create a namespace and wait for its `default` ServiceAccount.

    kube-controller-manager's serviceaccount controller creates it; the ServiceAccount
    admission plugin (on, as in any cluster) rejects pods until it exists. Labels are set
    in the create itself: a webhook's namespaceSelector reads namespaces from the API
    server's cache, which may not yet hold a label patched in just before a pod create.
    """
    ns = await client.create(
        Namespace(metadata=ObjectMeta(name=name, labels={TEST_LABEL: "1", **(labels or {})}))
    )

    async def default_account() -> bool:
        try:
            await client.get(ServiceAccount, "default", namespace=name)
        except ApiError as err:
            if err.status.code == 404:
                return False
            raise
        return True

    await wait_for(default_account, 30, interval=0.1, what=f"ServiceAccount {name}/default")
    return ns


async def namespace_user(
    client: AsyncClient, cp: ControlPlane, namespace: str, rules: list[PolicyRule],
    name: str = "researcher",
) -> dict[str, Any]:
    """A kubeconfig (as a dict) for a non-admin: a ServiceAccount of ``namespace`` bound to a
    Role with ``rules``, its token an hour long; its context's namespace is ``namespace``."""
    await client.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace=namespace)))
    await client.create(Role(metadata=ObjectMeta(name=name, namespace=namespace), rules=rules))
    await client.create(RoleBinding(
        metadata=ObjectMeta(name=name, namespace=namespace),
        roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[Subject(kind="ServiceAccount", name=name, namespace=namespace)],
    ))
    token = await client.create(ServiceAccount.Token(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=3600)), name, namespace=namespace)
    assert token.status is not None
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "local", "cluster": {"server": cp.server,
                                                  "certificate-authority": str(cp.ca_file)}}],
        "users": [{"name": name, "user": {"token": token.status.token}}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name,
                                                "namespace": namespace}}],
    }


def kubectl_plugin(cp: ControlPlane, kubeconfig: Path,
                   *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl slurmbridge ARGS`` as a user runs it: kubectl finds the plugin on PATH."""
    plugin = SCRIPTS / "kubectl-slurmbridge"
    assert os.access(plugin, os.X_OK), f"{plugin} missing: pip install -e . puts it there"
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([str(cp.bin_dir / "kubectl"), "slurmbridge", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


async def delete_namespace(client: AsyncClient, name: str, timeout: float = 60) -> None:  # noqa: ASYNC109
    """Delete the namespace and wait until no pod is left in it, playing the kubelet.

    No new pod may be created in a terminating namespace, so a ReplicaSet cannot bring its
    pods back; without a kubelet nobody confirms a pod has stopped, so the pods are deleted
    with grace 0 until none is left.  That is what the next test needs (the bridge releases
    their jobs).  The namespace itself is left to kube-controller-manager's namespace
    controller, which takes 5.4-7.0 s to remove even an empty one (measured here), and
    waiting for it cost the e2e tiers ~11 s a test.  One whose pods are still there after
    ``timeout`` is finalized, so no pod outlives the test.
    """
    await ignore_missing(client.delete(Namespace, name))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not await _delete_pods(client, name):
            return
        await asyncio.sleep(0.5)
    finalize = Namespace.Finalize(metadata=ObjectMeta(name=name), spec=NamespaceSpec(finalizers=[]))
    await ignore_missing(client.replace(finalize, name))


async def _delete_pods(client: AsyncClient, namespace: str) -> int:
    """Delete every pod of ``namespace`` at once; how many there were."""
    found = 0
    async for pod in client.list(Pod, namespace=namespace):
        assert pod.metadata is not None and pod.metadata.name is not None
        found += 1
        await ignore_missing(
            client.delete(Pod, pod.metadata.name, namespace=namespace, grace_period=0)
        )
    return found


async def ignore_missing(call: Awaitable[Any]) -> None:
    try:
        await call
    except ApiError as err:
        if err.status.code != 404:
            raise
