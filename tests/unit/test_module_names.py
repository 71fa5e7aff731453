"""A file's name says what it holds (issue 27): no two modules of the product share one, so a
name in a log line, a traceback or a review points at one file."""

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("bridge", "extender", "admission", "slurmbridge_cli")


def shared_names(paths: list[Path], root: Path = ROOT) -> list[str]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        if path.name != "__init__.py":
            by_name[path.name].append(str(path.relative_to(root)))
    return [f"{name}: {', '.join(sorted(where))}"
            for name, where in sorted(by_name.items()) if len(where) > 1]


def test_no_two_product_modules_share_a_name() -> None:
    paths = [p for package in PRODUCT for p in (ROOT / package).rglob("*.py")]
    assert len(paths) > 100, "the product's modules were not found"
    clashes = shared_names(paths)
    assert not clashes, "name each file for what it holds:\n" + "\n".join(clashes)


def test_a_clash_names_both_files_and_packages_may_share_init(tmp_path: Path) -> None:
    for rel in ("a/events.py", "b/c/events.py", "a/__init__.py", "b/__init__.py", "a/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert shared_names(sorted(tmp_path.rglob("*.py")), tmp_path) == [
        "events.py: a/events.py, b/c/events.py"
    ]
