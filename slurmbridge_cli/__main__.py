"""``python -m slurmbridge_cli``: the ``slurmbridge`` command."""

from slurmbridge_cli.launch import main

main()
