"""Shared pytest wiring: the fixtures live in the dev kit (slurmbridge_devkit/), one module
per real component."""

pytest_plugins = [
    "slurmbridge_devkit.slurm",
    "slurmbridge_devkit.kube",
    "slurmbridge_devkit.stack",
]
