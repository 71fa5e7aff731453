"""How ``kubectl slurmbridge`` reaches the API server: the user's kubeconfig, read as kubectl
reads it, and the session a command reads through."""

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from bridge.ports import KubePort
from slurmbridge_cli.failures import Failure


@dataclass(frozen=True)
class Session:
    """What a command reads through: the API server as the user, their default namespace."""

    kube: KubePort
    namespace: str
    server: str
    now: datetime


@dataclass(frozen=True)
class Target:
    """The connection options, as kubectl spells them."""

    kubeconfig: str | None = None
    context: str | None = None


Connect = Callable[[Target], AbstractAsyncContextManager[Session]]


def _merged(files: list[Path]) -> KubeConfig:
    """Several KUBECONFIG files merged as kubectl merges them: the first to name a cluster,
    user or context wins, and the first current-context set."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    current = None
    for path in files:
        conf = yaml.safe_load(path.read_text()) or {}
        for section in ("clusters", "users", "contexts"):
            have = {e.get("name") for e in merged[section]}
            merged[section] += [e for e in conf.get(section) or [] if e.get("name") not in have]
        current = current or conf.get("current-context")
    return KubeConfig.from_dict({**merged, "current-context": current}, fname=files[0])


def load_kubeconfig(target: Target) -> SingleConfig:
    """kubectl's order: --kubeconfig, $KUBECONFIG (a list of files), ~/.kube/config, the
    pod's service account; then --context, else the current context."""
    if target.kubeconfig:
        config = KubeConfig.from_file(target.kubeconfig)
    elif os.environ.get("KUBECONFIG"):
        listed = [Path(p).expanduser() for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
        files = [p for p in listed if p.is_file()]
        if not files:
            raise ConfigError(f"no file of KUBECONFIG exists: {os.environ['KUBECONFIG']}")
        config = KubeConfig.from_file(files[0]) if len(files) == 1 else _merged(files)
    elif Path("~/.kube/config").expanduser().is_file():
        config = KubeConfig.from_file("~/.kube/config")
    else:
        config = KubeConfig.from_service_account()
    single = config.get(target.context)
    if single is None:
        raise ConfigError("no current context: pass --context NAME")
    return single


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Session]:
    """The API server of the user's kubeconfig, as the user."""
    try:
        single = load_kubeconfig(target)
    except (ConfigError, KeyError, OSError, yaml.YAMLError) as exc:
        # KeyError: lightkube looks up what the context names (cluster, user) in the file.
        why = f"the context needs {exc}, which the file does not define" if isinstance(
            exc, KeyError) else exc
        raise Failure(
            f"kubeconfig: {why}. Pass --kubeconfig FILE and --context NAME, or set KUBECONFIG, "
            "as for kubectl."
        ) from exc
    client = AsyncClient(config=single, field_manager="kubectl-slurmbridge")
    try:
        yield Session(client, single.namespace, single.cluster.server, datetime.now(UTC))
    finally:
        await client.close()
