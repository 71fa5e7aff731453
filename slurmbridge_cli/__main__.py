"""``python -m slurmbridge_cli``: the ``slurmbridge`` command."""

from slurmbridge_cli.cli import main

main()
