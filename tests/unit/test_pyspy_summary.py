"""B1's profile section: py-spy's raw stacks read into shares (benchmarks/pyspy.py)."""

from pathlib import Path

from benchmarks.common import REPO
from benchmarks.pyspy import summary

SITE = "/venv/lib/python3.11/site-packages"


def test_shares_per_package_product_function_and_leaf(tmp_path: Path) -> None:
    placer = f"{REPO}/bridge/placement/placer.py"
    raw = tmp_path / "raw.txt"
    raw.write_text(
        f"run (/usr/lib/python3.11/asyncio/events.py:80);filter ({placer}:60);"
        f"model_validate_json ({SITE}/pydantic/main.py:700) 30\n"
        f"run (/usr/lib/python3.11/asyncio/events.py:80);filter ({placer}:61) 10\n"
        f"run (/usr/lib/python3.11/asyncio/events.py:80);send ({SITE}/uvicorn/h.py:9) 60\n"
        "garbage line without a count\n"
    )
    text = summary(raw, top=3)
    assert text.startswith("100 samples")
    assert "   60.0 %  uvicorn" in text and "   30.0 %  pydantic" in text
    assert "   10.0 %  bridge (this repo)" in text
    assert "   40.0 %  filter (bridge/placement/placer.py)" in text  # inclusive, counted once
    assert "   60.0 %  send (h.py)" in text


def test_no_samples_says_so(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("")
    assert summary(raw) == "(no samples)"
