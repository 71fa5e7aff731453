"""The ``slurmbridge`` command's entry point.  ``pip install slurmbridge-k8s`` brings only what
``kubectl slurmbridge`` needs; the servers' stack comes with the ``[server]`` extra (the
image has it).  Without it, ``slurmbridge`` says what to install instead of a traceback."""

import sys

import click

from slurmbridge_cli.failures import EXIT_ERROR

OURS = ("slurmbridge_cli", "bridge", "extender", "admission")


def main() -> None:
    try:
        from slurmbridge_cli.cli import main as command  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in OURS:
            raise
        click.echo(f"Error: slurmbridge needs the server's dependencies ({exc.name} is not "
                   "installed): pip install 'slurmbridge-k8s[server]'", err=True)
        sys.exit(EXIT_ERROR)
    command(prog_name="slurmbridge")
