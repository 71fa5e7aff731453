"""``slurmbridge``: run the parts of the bridge and look at what it is doing."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import click
import yaml
from lightkube import ConfigError

from admission.webhook import TLSConfigError, serve
from bridge import logs
from bridge.config import Settings
from bridge.kube.connection import opened_kube
from bridge.kube.podwrites import BridgeClient
from bridge.policy.tenancy import OwnerTrust, TenancyError, TenancySource, owner_trust
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmError
from bridge.slurm.signing import OwnerKeyError
from extender.server import TLSConfigError as ExtenderTLSError
from extender.server import serve as serve_extender
from slurmbridge_cli import gpumap_text, gpumap_view, status_view
from slurmbridge_cli.compose import build_bridge, build_webhook, slurm_client
from slurmbridge_cli.config_reference import markdown
from slurmbridge_cli.doctor import Check
from slurmbridge_cli.doctor import run as run_doctor
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.settings_load import load_settings
from slurmbridge_cli.uninstall import Options, Uninstall
from slurmbridge_cli.uninstall_report import Report

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error", "critical"], case_sensitive=False)


@contextlib.contextmanager
def _as_failures() -> Iterator[None]:
    """What a command's inputs can get wrong (TLS files, tenancy, the Slurm credential, the
    kubeconfig), each one line naming the fix."""
    try:
        yield
    except ConfigError as exc:
        raise Failure(
            f"kubeconfig: {exc}. Set kube.kubeconfig (SLURMBRIDGE_KUBE__KUBECONFIG) or KUBECONFIG "
            "to a kubeconfig file, or run in a pod with a service account."
        ) from exc
    except (TLSConfigError, ExtenderTLSError, TenancyError, SlurmError, OwnerKeyError) as exc:
        raise Failure(str(exc)) from exc


@contextlib.asynccontextmanager
async def _admin_view(
    settings: Settings,
) -> AsyncIterator[tuple[BridgeClient, SlurmClient, OwnerTrust]]:
    """Slurm and the apiserver as an admin's views read them, and whose placeholder a job is
    as the bridge decides it (the tenancy and the owner signature; the kubeconfig is opened
    first, so a missing one is the error told)."""
    tenancy = TenancySource(settings.admission.tenancy_file)
    async with (opened_kube(settings.kube.kubeconfig) as kube,
                slurm_client(settings, tenancy) as slurm):
        yield kube, slurm, owner_trust(tenancy, settings.slurm.user)


class _Commands(click.Group):
    """Every command's input errors, one line each (click's own: usage errors)."""

    def invoke(self, ctx: click.Context) -> Any:
        with _as_failures():
            return super().invoke(ctx)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slurmbridge-k8s", prog_name="slurmbridge")
@click.option(
    "--config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings file (environment variables SLURMBRIDGE_* override it).",
)
@click.option("--log-level", type=LOG_LEVELS, default="info", show_default=True)
@click.pass_context
def main(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """Let a Slurm controller place selected Kubernetes pods.

    Exit codes: 0 done; 1 doctor: a check failed; 2 usage, settings, kubeconfig, TLS or
    credential errors (one line naming the fix).
    """
    logs.configure(log_level)
    ctx.obj = config


@main.command()
@click.pass_obj
def extender(config: Path | None) -> None:
    """Serve the kube-scheduler extender (mutual TLS), the Slurm poller and the controllers."""
    settings = load_settings(config)
    serve_extender(build_bridge(settings), settings.extender)


@main.command()
@click.pass_obj
def webhook(config: Path | None) -> None:
    """Serve the mutating and validating admission webhooks (HTTPS)."""
    settings = load_settings(config)
    serve(settings.admission, build_webhook(settings))


@main.command()
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_obj
def status(config: Path | None, output: str) -> None:
    """Bridged pods and their Slurm jobs: state, reason, expected start, account, user, QOS,
    node, GPUs, age."""
    settings = load_settings(config)

    async def run() -> list[status_view.Row]:
        async with _admin_view(settings) as (kube, slurm, believe):
            return await status_view.collect(kube, slurm, believe)

    rows = asyncio.run(run())
    if output == "json":
        click.echo(json.dumps(status_view.as_dicts(rows), indent=2))
    else:
        click.echo(status_view.render_table(rows))


@main.command()
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table")
@click.pass_obj
def gpus(config: Path | None, output: str) -> None:
    """Who holds each GPU: per Slurm node and index, the native job, the bridge's placeholder
    and its pods, a pinned DRA claim, or free; disagreements between Slurm and the bridge's
    records marked."""
    settings = load_settings(config)

    async def run() -> dict[str, Any] | str:
        async with _admin_view(settings) as (kube, slurm, believe):
            found = await gpumap_view.collect(
                kube, slurm, believe,
                {c.index_attribute for c in settings.device_classes.values()})
        return gpumap_text.table(found) if output == "table" else gpumap_text.as_data(found)

    shown = asyncio.run(run())
    if isinstance(shown, str):
        click.echo(shown)
    else:
        click.echo(json.dumps(shown, indent=2) if output == "json"
                   else yaml.safe_dump(shown, sort_keys=False), nl=output == "json")


@main.command()
@click.pass_obj
def doctor(config: Path | None) -> None:
    """Check slurmrestd, the token, the apiserver permissions and the wiring."""
    settings = load_settings(config)

    async def run() -> list[Check]:
        async with opened_kube(settings.kube.kubeconfig) as kube:
            return await run_doctor(settings, kube)

    checks = asyncio.run(run())
    for check in checks:
        click.echo(check.line())
    if not all(c.ok for c in checks):
        raise SystemExit(1)


@main.command()
@click.option("--dry-run", is_flag=True, help="Print what it would do; change nothing.")
@click.option("--keep-gated-pods", is_flag=True,
              help="Leave the pods still waiting for Slurm (gated) in place, instead of "
              "deleting them.")
@click.option("--keep-running-pods", is_flag=True,
              help="Leave the bridge's running pods and their Slurm jobs in place.")
@click.option("--extender-deployment", metavar="NAME",
              help="Scale this Deployment (in controllers.lease_namespace) to 0 first.")
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=120.0,
              show_default=True, help="Seconds to wait for the bridge's leader to stop.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (the chart's hook).")
@click.pass_obj
def uninstall(config: Path | None, /, dry_run: bool, yes: bool, **options: Any) -> None:
    """Release or delete what the bridge holds in Kubernetes and Slurm, one line per object."""
    settings = load_settings(config)
    if not (dry_run or yes):
        click.confirm("Delete the bridge's pods, cancel its Slurm jobs and undo its marks on "
                      "Nodes and in Slurm?", abort=True)
    report = Report(click.echo, dry_run=dry_run)

    async def run() -> None:
        async with _admin_view(settings) as (kube, slurm, believe):
            await Uninstall(settings, kube, slurm, believe, report=report,
                            options=Options(**options)).run()

    try:
        asyncio.run(run())
    finally:
        click.echo(report.summary())


@main.command("config-reference")
def config_reference() -> None:
    """Print the configuration reference (Markdown) generated from the settings models."""
    click.echo(markdown(), nl=False)

