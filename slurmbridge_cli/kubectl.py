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
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from importlib.metadata import version as installed_version
from typing import Any, TypeVar

import click
import httpx2
import yaml
from lightkube.core.exceptions import ApiError

from slurmbridge_cli import gpumap_text
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.kubeviews import gpu_holders
from slurmbridge_cli.kubeviews import nodes as node_views
from slurmbridge_cli.kubeviews import pods as pod_views
from slurmbridge_cli.kubeviews import text as render
from slurmbridge_cli.kubeviews import why as why_views
from slurmbridge_cli.kubeviews.session import Connect, Session, Target, connect, load_kubeconfig

__all__ = ["Session", "Target", "connect", "load_kubeconfig", "main"]

T = TypeVar("T")
OUTPUTS = click.Choice(["table", "json", "yaml"])
EXIT_OK, EXIT_WAITING = 0, 1
ALL_NAMESPACES = "*"
DISTRIBUTION = "slurmbridge-k8s"


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
    _emit(output, [r.as_dict() for r in rows], lambda: render.status_table(rows))


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
@_namespace
@_output
@_kubeconfig
@_context
@click.pass_context
def gpus(ctx: click.Context, namespace: str | None, output: str) -> None:
    """Who holds each GPU by the bridge's records on the pods you may read: your namespace's
    pods by name, any other's only as "another namespace"; two jobs on one GPU marked."""

    async def work(s: Session) -> tuple[str, gpu_holders.GpuMap]:
        mine = namespace or s.namespace
        return mine, await gpu_holders.read_map(s.kube, mine)

    mine, found = _run(ctx, _target(ctx), work)
    _emit(output, gpumap_text.as_data(found), lambda: gpumap_text.table(found, mine))


@main.command()
def version() -> None:
    """The plugin's version (the slurmbridge-k8s release it came with)."""
    click.echo(f"kubectl-slurmbridge {installed_version(DISTRIBUTION)}")


if __name__ == "__main__":  # python -m slurmbridge_cli.kubectl, as kubectl runs the plugin
    main()
