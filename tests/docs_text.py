"""The project's Markdown as the doc tests read it: a section, the output blocks a marker names,
a table's columns.  One reader for the unit tier's checks and the chart's (tests/e2e)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `<!-- output: COMMAND -->` just before a fenced block: the block shows what COMMAND prints.
OUTPUT_MARKER = re.compile(r"<!-- output: (?P<command>.+?) -->\s*\n```[^\n]*\n(?P<block>.*?)^```",
                           re.M | re.S)


def section(path: Path, heading: str) -> str:
    """The text under the ``## `` heading that starts with ``heading``, up to the next one."""
    text = path.read_text()
    found = re.search(rf"^## {re.escape(heading)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"{path.relative_to(REPO)} has no section '## {heading}...'"
    return found[1]


def output_blocks(path: Path) -> list[tuple[str, str]]:
    """(command, block) for each fenced block after an output marker."""
    return [(m["command"], m["block"]) for m in OUTPUT_MARKER.finditer(path.read_text())]


def columns(line: str) -> list[str]:
    """A printed table's cells: separated by two spaces or more (a cell may hold one)."""
    return re.split(r"\s{2,}", line.strip())


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in ``text`` (header and rule excluded)."""
    rows: list[list[str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or re.fullmatch(r"\|[-| ]+\|", line):
            continue
        if i + 1 < len(lines) and re.fullmatch(r"\|[-| ]+\|", lines[i + 1]):
            continue  # the header: the rule follows it
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows
