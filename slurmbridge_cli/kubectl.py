"""``kubectl slurmbridge``: what Slurm does with your pods, read from Kubernetes alone.

kubectl runs any executable named ``kubectl-<name>`` on PATH as ``kubectl <name>``;
``pip install slurmbridge-k8s`` installs this one.  It needs the user's kubeconfig and RBAC to
read pods and events in their namespaces (``nodes``: to list nodes), never Slurm credentials:
everything it prints about Slurm, the bridge wrote onto pods, events and nodes
(slurmbridge_cli/kubeviews/ says where).

Exit codes (scripts can rely on them):
  0  done; for ``why``: the pod is placed (bound to the node Slurm chose, running, or succeeded)
  1  ``why`` only: the pod waits (pending, refused), failed, is being evicted or deleted,
     does not exist, or is not scheduled by slurmbridge
  2  usage errors, no usable kubeconfig, API server unreachable, credentials or RBAC refused
"""

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx2
import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError

from bridge.ports import KubePort
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.kubeviews import nodes as node_views
from slurmbridge_cli.kubeviews import pods as pod_views
from slurmbridge_cli.kubeviews import text as render
from slurmbridge_cli.kubeviews import why as why_views

T = TypeVar("T")
OUTPUTS = click.Choice(["table", "json", "yaml"])
EXIT_OK, EXIT_WAITING = 0, 1
ALL_NAMESPACES = "*"
DISTRIBUTION = "slurmbridge-k8s"


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


def _run(ctx: click.Context, target: Target, work: Callable[[Session], Awaitable[T]]) -> T:
    """Run ``work`` in a session; the API server's refusals become errors that say what to do."""
    connect_to: Connect = ctx.obj or connect
    server = "the API server"

    async def go() -> T:
        nonlocal server
        async with connect_to(target) as session:
            server = f"the API server at {session.server}"
            return await work(session)

    try:
        return asyncio.run(go())
    except ApiError as exc:
        code, message = exc.status.code, exc.status.message or str(exc)
        if code == 401:
            raise Failure(f"{server} refused your credentials (401): {message}. Log in again "
                          "or renew the token of your kubeconfig (`kubectl auth whoami`).") from exc
        if code == 403:
            raise Failure(
                f"forbidden by {server}: {message}. kubectl slurmbridge needs RBAC to get and "
                "list pods and list events in the namespace (nodes: list nodes): ask your "
                "cluster admin, or check with `kubectl auth can-i list pods -n <namespace>`."
            ) from exc
        raise Failure(f"{server} answered {code}: {message}") from exc
    except (httpx2.TransportError, OSError) as exc:
        raise Failure(f"cannot reach {server}: {exc!r}. Check the kubeconfig's server and "
                      "your network (`kubectl cluster-info`).") from exc


def _emit(output: str, data: Any, text: Callable[[], str]) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        click.echo(text())


_TARGET = "slurmbridge.target"


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--kubeconfig and --context go before or after the subcommand, as with kubectl."""
    if value is not None:
        ctx.meta[_TARGET] = Target(**{**asdict(ctx.meta.get(_TARGET, Target())),
                                      str(param.name): value})


def _target(ctx: click.Context) -> Target:
    target: Target = ctx.meta.get(_TARGET, Target())
    return target


_kubeconfig = click.option(
    "--kubeconfig", expose_value=False, callback=_remember,
    help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).",
)
_context = click.option("--context", expose_value=False, callback=_remember,
                        help="kubeconfig context (default: the current one).")
_output = click.option("-o", "--output", type=OUTPUTS, default="table", show_default=True)
_namespace = click.option("-n", "--namespace",
                          help="namespace (default: the kubeconfig context's).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION, prog_name="kubectl-slurmbridge")
@_kubeconfig
@_context
def main() -> None:
    """What Slurm does with your pods (the slurmbridge scheduler), read from Kubernetes alone.

    \b
    Exit codes: 0 ok (why: the pod is placed: bound, running or succeeded);
    1 why: the pod waits, was refused, failed, is being evicted, does not exist,
      or is not slurmbridge's;
    2 usage, kubeconfig, connection or permission errors.
    """


@main.command()
@_namespace
@click.option("-A", "--all-namespaces", is_flag=True, help="every namespace you may read.")
@_output
@_kubeconfig
@_context
@click.pass_context
def status(ctx: click.Context, namespace: str | None, all_namespaces: bool, output: str) -> None:
    """Your pods and their Slurm jobs: job id, state (pending with Slurm's reason, refused,
    bound, running, finished, terminating), node, GPUs, age."""
    if namespace and all_namespaces:
        raise click.UsageError("-n and -A exclude each other")

    async def work(s: Session) -> tuple[str, list[pod_views.PodRow]]:
        where = ALL_NAMESPACES if all_namespaces else namespace or s.namespace
        return where, await pod_views.read_status(s.kube, where, s.now)

    where, rows = _run(ctx, _target(ctx), work)
    if output == "table" and not rows:
        scope = "any namespace" if where == ALL_NAMESPACES else f"namespace {where}"
        click.echo(f"No pods of slurmbridge in {scope}.", err=True)
        return
    _emit(output, [asdict(r) for r in rows], lambda: render.status_table(rows))


@main.command()
@click.argument("pod")
@_namespace
@click.option("--events", "shown", type=click.IntRange(0), default=why_views.EVENTS_SHOWN,
              show_default=True, help="how many of the pod's last events to show.")
@_output
@_kubeconfig
@_context
@click.pass_context
def why(ctx: click.Context, pod: str, namespace: str | None, shown: int, output: str) -> None:
    """Why POD waits or where it runs: its Slurm job, state and reason as the bridge recorded
    them, what it asked for, its last events, and what to do next.  Exit code 0 when the pod
    is placed, 1 otherwise (waiting, refused, failed, not found, not slurmbridge's)."""
    name = pod.removeprefix("pod/").removeprefix("pods/")

    async def work(s: Session) -> why_views.Why:
        return await why_views.read_why(s.kube, namespace or s.namespace, name, s.now, shown=shown)

    found = _run(ctx, _target(ctx), work)
    _emit(output, found.as_dict(), lambda: render.why_text(found))
    ctx.exit(EXIT_OK if found.placed else EXIT_WAITING)


@main.command()
@_output
@_kubeconfig
@_context
@click.pass_context
def nodes(ctx: click.Context, output: str) -> None:
    """Kubernetes nodes and the Slurm nodes behind them: Slurm's state, drains and who set
    them (slurmbridge: its own reason prefix; slurm-admin: any other drain), cordons and
    taints and who set them."""

    async def work(s: Session) -> list[node_views.NodeRow]:
        return await node_views.read_nodes(s.kube)

    rows = _run(ctx, _target(ctx), work)
    _emit(output, [asdict(r) for r in rows], lambda: render.nodes_table(rows))


@main.command()
def version() -> None:
    """The plugin's version (the slurmbridge-k8s release it came with)."""
    click.echo(f"kubectl-slurmbridge {installed_version(DISTRIBUTION)}")


if __name__ == "__main__":  # python -m slurmbridge_cli.kubectl, as kubectl runs the plugin
    main()
