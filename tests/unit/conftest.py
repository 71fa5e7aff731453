"""Fixtures more than one unit-test module uses."""

from pathlib import Path

import pytest

from tests.unit.test_tenancy import MAPPING


@pytest.fixture
def tenancy_file(tmp_path: Path) -> Path:
    """The webhook's and the bridge's tenancy file: MAPPING, which a test may rewrite."""
    path = tmp_path / "tenancy.yaml"
    path.write_text(MAPPING)
    return path
