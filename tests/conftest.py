"""Shared pytest wiring: fixtures live in tests/fixtures/, one module per real component."""

pytest_plugins = [
    "tests.fixtures.slurm",
    "tests.fixtures.kube",
    "tests.fixtures.bridge",
]
