"""``slurmbridge``: run the parts of the bridge and look at what it is doing."""

import asyncio
import json
import os
from pathlib import Path

import click
import yaml
from pydantic import ValidationError

from admission.scope import kube_namespace_labels
from admission.webhook import TLSConfigError, serve
from bridge import logs
from bridge.config import CONFIG_FILE_ENV, Settings
from bridge.kube.connection import kube_client, opened_kube
from bridge.policy.tenancy import TenancyError, TenancySource, placeholder_trust
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmError
from extender.server import TLSConfigError as ExtenderTLSError
from extender.server import serve as serve_extender
from slurmbridge_cli import status_view
from slurmbridge_cli.compose import build_bridge
from slurmbridge_cli.config_reference import markdown
from slurmbridge_cli.doctor import Check
from slurmbridge_cli.doctor import run as run_doctor
from slurmbridge_cli.settings_errors import settings_problem


def load_settings(config: Path | None) -> Settings:
    if config is not None:
        os.environ[CONFIG_FILE_ENV] = str(config)
    try:
        return Settings()
    except ValidationError as exc:
        raise click.ClickException(settings_problem(Settings, exc)) from exc
    except (ValueError, yaml.YAMLError) as exc:  # no such file, or not YAML
        raise click.ClickException(f"invalid settings: {' '.join(str(exc).split())}") from exc


@click.group()
@click.option(
    "--config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML settings file (environment variables SLURMBRIDGE_* override it).",
)
@click.option("--log-level", default="info", show_default=True)
@click.pass_context
def main(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """Let a Slurm controller place selected Kubernetes pods."""
    logs.configure(log_level)
    ctx.obj = config


@main.command()
@click.pass_obj
def extender(config: Path | None) -> None:
    """Serve the kube-scheduler extender (mutual TLS), the Slurm poller and the controllers."""
    settings = load_settings(config)
    try:
        serve_extender(build_bridge(settings), settings.extender)
    except ExtenderTLSError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.pass_obj
def webhook(config: Path | None) -> None:
    """Serve the mutating and validating admission webhooks (HTTPS)."""
    settings = load_settings(config)
    try:
        labels = kube_namespace_labels(kube_client(settings.kube.kubeconfig))
        serve(settings.admission, namespace_lookup=labels, device_classes=settings.device_classes)
    except TLSConfigError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_obj
def status(config: Path | None, output: str) -> None:
    """Bridged pods and their Slurm jobs: state, reason, expected start, account, user, QOS,
    node, GPUs, age."""
    settings = load_settings(config)
    try:  # placeholders run as the namespaces' users: the tenancy says which jobs are ours
        trust = placeholder_trust(TenancySource(settings.admission.tenancy_file))
    except TenancyError as exc:
        raise click.ClickException(str(exc)) from exc

    async def run() -> list[status_view.Row]:
        async with (SlurmClient(settings.slurm, trust=trust) as slurm,
                    opened_kube(settings.kube.kubeconfig) as kube):
            return await status_view.collect(kube, slurm)

    try:
        rows = asyncio.run(run())
    except SlurmError as exc:
        raise click.ClickException(str(exc)) from exc
    if output == "json":
        click.echo(json.dumps(status_view.as_dicts(rows), indent=2))
    else:
        click.echo(status_view.render_table(rows))


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


@main.command("config-reference")
def config_reference() -> None:
    """Print the configuration reference (Markdown) generated from the settings models."""
    click.echo(markdown(), nl=False)

