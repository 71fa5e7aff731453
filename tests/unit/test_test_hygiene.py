"""Tests use what the code offers, not its insides (issue 27): no test imports a private
name (``_x``) from the product, the dev kit, the benchmarks or another test module.

A private name is free to change; a test that imports one breaks on a rename that changes no
behaviour, and a helper two test files need is a shared helper (the dev kit, or a tests/unit
module with public names).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ("bridge", "extender", "admission", "slurmbridge_cli", "slurmbridge_devkit", "tests",
        "benchmarks")


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def private_imports(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Every ``from ours import _x`` and ``import ours._x`` in ``paths``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno} {name}" for name in names
                      if name.split(".")[0] in OURS and _private(name)]
    return found


def test_no_test_imports_a_private_name() -> None:
    offenders = private_imports(sorted((ROOT / "tests").rglob("*.py")))
    assert not offenders, (
        "test through the public function, or share the helper under a public name:\n"
        + "\n".join(offenders))


def test_the_check_names_private_imports_and_passes_public_ones(tmp_path: Path) -> None:
    test = tmp_path / "test_x.py"
    test.write_text("from bridge.status import _row, render_table\n"
                    "import tests.unit._helpers\n"
                    "from bridge.doctor import Check\n"
                    "from os import _exit\n"
                    "from tests.unit.test_x import __doc__\n")
    assert private_imports([test], tmp_path) == [
        "test_x.py:1 bridge.status._row", "test_x.py:2 tests.unit._helpers"]
