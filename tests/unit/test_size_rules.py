"""Size rules (issue 14, extended by issue 27): no module over 300 lines, no function over 50,
in the product and in the dev kit (slurmbridge_devkit/, which every test reads).

A module that grows past them has taken a second job; the failure names each offender so
the split goes where the seam is, not into a raised limit.

benchmarks/ has its own, looser limits: modules up to 800 lines, functions up to 80.  Its
longest module (b7_kube.py, 783 lines) and function (b7_exchanges.job_record, 76 lines: one
slurmrestd job record, built field by field) meet them without a split; a benchmark can only
be checked by running it against real Slurm and Kubernetes, so no split is made that nobody
could check.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("bridge", "extender", "admission", "slurmbridge_cli")
DEV_KIT = "slurmbridge_devkit"
BENCHMARKS = "benchmarks"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 50
BENCHMARK_MAX_MODULE_LINES = 800
BENCHMARK_MAX_FUNCTION_LINES = 80


def modules(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def product_modules() -> list[Path]:
    return modules(*PRODUCT)


def long_modules(paths: list[Path], root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    found = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(root)}: {lines} lines (max {limit})")
    return found


def long_functions(
    paths: list[Path], root: Path = ROOT, limit: int = MAX_FUNCTION_LINES
) -> list[str]:
    """Every function (methods and nested ones too) longer than the limit, decorators aside."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines "
                        f"(max {limit})"
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


def test_no_dev_kit_module_is_over_300_lines() -> None:
    offenders = long_modules(modules(DEV_KIT))
    assert modules(DEV_KIT) and not offenders, "split along a seam:\n" + "\n".join(offenders)


def test_no_dev_kit_function_is_over_50_lines() -> None:
    offenders = long_functions(modules(DEV_KIT))
    assert not offenders, "split the function:\n" + "\n".join(offenders)


def test_no_benchmark_module_is_over_800_lines() -> None:
    offenders = long_modules(modules(BENCHMARKS), limit=BENCHMARK_MAX_MODULE_LINES)
    assert modules(BENCHMARKS) and not offenders, (
        "split along a seam:\n" + "\n".join(offenders))


def test_no_benchmark_function_is_over_80_lines() -> None:
    offenders = long_functions(modules(BENCHMARKS), limit=BENCHMARK_MAX_FUNCTION_LINES)
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
