"""Size rules of the product code (issue 14): no module over 300 lines, no function over 50.

A module that grows past them has taken a second job; the failure names each offender so
the split goes where the seam is, not into a raised limit.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("bridge", "extender", "admission", "slurmbridge_cli")
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 50


def product_modules() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def long_modules(paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root)}: {lines} lines (max {MAX_MODULE_LINES})")
    return found


def long_functions(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Every function (methods and nested ones too) longer than the limit, decorators aside."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines "
                        f"(max {MAX_FUNCTION_LINES})"
                    )
    return found


def test_the_rules_look_at_every_product_package() -> None:
    modules = product_modules()
    for package in PRODUCT:
        assert any(p.is_relative_to(ROOT / package) for p in modules), f"no module in {package}/"


def test_no_product_module_is_over_300_lines() -> None:
    offenders = long_modules(product_modules())
    assert not offenders, "split along a seam (one job per module):\n" + "\n".join(offenders)


def test_no_product_function_is_over_50_lines() -> None:
    offenders = long_functions(product_modules())
    assert not offenders, "split the function:\n" + "\n".join(offenders)


def test_the_rules_name_what_is_one_line_over_and_pass_what_is_at_the_limit(
    tmp_path: Path,
) -> None:
    def function(name: str, lines: int) -> str:
        return f"def {name}() -> None:\n" + "".join(f"    x = {i}\n" for i in range(lines - 1))

    at_limit = tmp_path / "ok.py"
    at_limit.write_text(function("fits", MAX_FUNCTION_LINES) + "\n" * 200)
    over = tmp_path / "big.py"
    over.write_text(function("too_long", MAX_FUNCTION_LINES + 1) + "\n" * 250)
    paths = [at_limit, over]
    assert long_functions(paths, tmp_path) == [
        f"big.py:1 too_long: {MAX_FUNCTION_LINES + 1} lines (max {MAX_FUNCTION_LINES})"
    ]
    assert long_modules(paths, tmp_path) == [
        f"big.py: {MAX_FUNCTION_LINES + 251} lines (max {MAX_MODULE_LINES})"
    ]
