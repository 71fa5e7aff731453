"""The docs say what is: the tiers CI runs and what each runs, the kind cluster, the tables the
commands print and the fast path are read here from the scripts, the cluster's config and the
renderers themselves, so a change there fails until the docs follow (issue 44, item 8).  The
RBAC table against the rendered chart: tests/e2e/test_install_rbac_table.py (it needs helm)."""

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from bridge.gpumap.model import GpuMap
from slurmbridge_cli.gpumap_text import table as gpu_table
from slurmbridge_cli.kubeviews.text import nodes_table, status_table
from slurmbridge_cli.status_view import render_table
from tests.docs_text import REPO, columns, output_blocks, section, table_rows

README = REPO / "README.md"
INSTALL = REPO / "docs" / "install.md"
OPERATIONS = REPO / "docs" / "operations.md"
CONTROL_PLANE = REPO / "docs" / "control-plane.md"
CI = REPO / ".ci" / "run"
RUN_SH = REPO / "tests" / "run.sh"
KIND = REPO / "deploy" / "kind"
TESTED = "What is tested"  # install.md's section on what CI runs
# Each command whose table the docs show, and its renderer's header (no rows).
RENDERERS: dict[str, Callable[[], str]] = {
    "slurmbridge status": lambda: render_table([]),
    "kubectl slurmbridge status": lambda: status_table([]),
    "kubectl slurmbridge nodes": lambda: nodes_table([]),
    "slurmbridge gpus": lambda: gpu_table(GpuMap([])).splitlines()[0],  # then bars, legend
    "kubectl slurmbridge gpus": lambda: gpu_table(GpuMap([]), mine="ns").splitlines()[0],
}
HEADER_LINE = re.compile(r"^(POD|NODE)\s{2,}[A-Z]", re.M)


def _run_sh() -> str:
    """What ``.ci/run`` runs, line continuations joined."""
    assert "bash tests/run.sh" in CI.read_text(), ".ci/run no longer runs tests/run.sh"
    return RUN_SH.read_text().replace("\\\n", " ")


def _ci_tiers() -> list[str]:
    """The tiers tests/run.sh reports, ``e2e-$v`` once per default Slurm version."""
    text = _run_sh()
    versions = re.search(r"SLURMBRIDGE_TEST_SLURM_VERSIONS:-([\d.,]+)\}", text)
    assert versions, "tests/run.sh names no default Slurm versions"
    tiers: list[str] = []
    for group in re.findall(r"\btiers\+?=\(([^)]*)\)", text):
        for tier in shlex.split(group):
            tiers += [tier.replace("$v", v) for v in versions[1].split(",")] if "$v" in tier \
                else [tier]
    return tiers


def _tier_tests(tier: str) -> list[str]:
    """The test files the tier's pytest runs (the tier's JUnit file names its command)."""
    junit = tier.removeprefix("integration-")
    for command in re.findall(r"python -m pytest ([^\n]*)", _run_sh()):
        args = shlex.split(command.replace("$v", "*"))
        target = next((a for a in args if a.startswith("--junitxml=")), "")
        if re.fullmatch(target.removeprefix("--junitxml=.ci/junit-").removesuffix(".xml")
                        .replace(".", r"\.").replace("*", r"[\d.]+"), junit):
            return [a.split("::")[0] for a in args if a.startswith("tests/")]
    raise AssertionError(f"tests/run.sh has no pytest writing .ci/junit-{junit}.xml")


def _tested_rows() -> dict[str, str]:
    """install.md's "What is tested" table: tier name → its row."""
    rows = {}
    for cells in table_rows(section(INSTALL, TESTED)):
        name = re.fullmatch(r"`([^`]+)`", cells[0])
        if name:
            rows[name[1]] = " | ".join(cells)
    return rows


def test_what_is_tested_lists_each_tier_ci_runs_and_no_other() -> None:
    tiers = _ci_tiers()
    assert {"unit", "kind", "e2e-k8s-1.36"} <= set(tiers), tiers  # the parse found them
    rows = _tested_rows()
    assert sorted(rows) == sorted(tiers), (
        f"docs/install.md '{TESTED}' lists tiers {sorted(rows)}; tests/run.sh runs {tiers}")
    for tier in tiers:
        for path in _tier_tests(tier):
            assert f"`{path}`" in rows[tier], (
                f"docs/install.md '{TESTED}': the {tier} row does not name {path}, which "
                f"tests/run.sh runs there")


def test_what_is_tested_names_the_versions_ci_runs() -> None:
    text = _run_sh()
    rows = _tested_rows()
    k8s = re.search(r'K8S_VERSION="\$\{K8S_VERSION:-([\d.]+)\}"',
                    (REPO / "deploy" / "k8s" / "build.sh").read_text())
    assert k8s
    for tier in (t for t in rows if t.startswith("e2e-") and t[4:5].isdigit()):
        assert tier[4:] in rows[tier] and k8s[1] in rows[tier], rows[tier]
    older = re.search(r"K8S_VERSION=([\d.]+) SLURMBRIDGE_CP_INSTANCE", text)
    assert older and older[1] in rows["e2e-k8s-1.36"], rows["e2e-k8s-1.36"]


def _kind_shape() -> tuple[int, int, int]:
    """(control planes, workers with slurmd, workers without) of deploy/kind/cluster.yaml."""
    nodes = yaml.safe_load((KIND / "cluster.yaml").read_text())["nodes"]
    workers = [n for n in nodes if n["role"] == "worker"]
    bare = [w for w in workers if w.get("labels", {}).get("kind.slurmbridge.io/slurmd") == "false"]
    return len(nodes) - len(workers), len(workers) - len(bare), len(bare)


@pytest.mark.parametrize("where", [README, INSTALL, CONTROL_PLANE], ids=lambda p: p.name)
def test_the_kind_cluster_is_described_as_cluster_yaml_makes_it(where: Path) -> None:
    text = where.read_text()
    said = re.findall(r"(\d+)\s+control\s+planes?\s+\+\s+(\d+)\s+hybrid\s+workers?\s+\+\s+"
                      r"(\d+)\s+workers?\s+without\s+slurmd", text)
    assert said, f"{where.name} does not say the kind cluster's shape"
    shape = _kind_shape()
    assert {tuple(map(int, s)) for s in said} == {shape}, (
        f"{where.name} says the kind cluster is {said}; deploy/kind/cluster.yaml makes {shape}")


def test_install_md_names_the_kind_versions_and_its_tier() -> None:
    kind = section(INSTALL, "kind")
    script = (KIND / "node-image.sh").read_text()
    for variable in ("KIND_K8S_VERSION", "KIND_KUBELET_VERSION"):
        version = re.search(rf"{variable}:-([\d.]+)\}}", script)
        assert version and version[1] in kind, f"install.md's kind section lacks {variable}"
    assert "Untested" not in kind and "untested" not in kind, "the kind tier runs it"


def test_the_fast_path_is_the_unit_tier() -> None:
    """The fast path keeps pyproject's ``-m 'not kind'``: it is the unit tier's command."""
    fast = re.search(r"^(python -m pytest [^#\n]*?)\s*# the fast path", README.read_text(), re.M)
    assert fast, "README has no fast-path command"
    unit = re.search(r"stage_start unit (python -m pytest [^\n]*)", _run_sh())
    assert unit
    drop = re.compile(r"--junitxml=\S+")
    assert shlex.split(fast[1]) == shlex.split(drop.sub("", unit[1])), (
        f"README's fast path {fast[1]!r} is not tests/run.sh's unit tier {unit[1]!r}")


def _header_at(lines: list[str], command: str, first: str) -> int | None:
    """Where ``command``'s table header is: after its ``$ command`` line, if the block has one."""
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"$ {command}")), 0)
    return next((i for i in range(start, len(lines)) if lines[i].split()[:1] == [first]), None)


@pytest.mark.parametrize("where", [README, OPERATIONS], ids=lambda p: p.name)
def test_each_table_the_docs_show_has_the_columns_its_command_prints(where: Path) -> None:
    """A block marked ``<!-- output: CMD[; CMD...] -->`` shows each CMD's table with the
    columns its renderer prints today, every row as many cells; no table goes unmarked."""
    text = where.read_text()
    blocks = output_blocks(where)
    for line in HEADER_LINE.finditer(text):
        header = text[line.start():].splitlines()[0]
        assert any(header in block for _, block in blocks), (
            f"{where.name}: the table {header!r} has no `<!-- output: COMMAND -->` marker")
    for commands, block in blocks:
        lines = block.splitlines()
        for command in (c.strip() for c in commands.split(";")):
            assert command in RENDERERS, f"{where.name}: no renderer known for {command!r}"
            want = columns(RENDERERS[command]())
            at = _header_at(lines, command, want[0])
            assert at is not None, f"{where.name}: the {command!r} block has no header line"
            assert columns(lines[at]) == want, (
                f"{where.name}: {command!r} prints {want}, the docs show {columns(lines[at])}")
            for row in lines[at + 1:]:
                if not row.strip() or row.startswith("$"):
                    break
                assert len(columns(row)) == len(want), f"{where.name}: {row!r} vs {want}"


def test_every_picture_the_readme_shows_exists() -> None:
    """README's pictures come from runs (a benchmark's plots, the demo's GPU map); a rerun that
    stops drawing one must not leave a broken image."""
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert len(shown) >= 2, "README shows the B1 curves and the demo's GPU map"
    for path in shown:
        assert (REPO / path).is_file(), f"README shows {path}, which does not exist"
