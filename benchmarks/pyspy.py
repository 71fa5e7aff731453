"""Where a running bridge process spends its CPU, sampled from outside with py-spy.

py-spy reads another process's Python stacks through ptrace (no code in the bridge, no
restart), so B1 can say where the extender's CPU per pod goes in the real end-to-end
round, which cProfile inside B3's offline server cannot.  Recording runs in an extra
round, never in a measured one: sampling costs the machine a few percent.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import REPO, package_of

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
PRODUCT = ("bridge", "extender", "admission", "slurmbridge_cli")  # the product's packages


def _binary() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise RuntimeError("py-spy is not installed: bash deploy/dev/install.sh installs it")
    return found


@contextlib.contextmanager
def recording(pid: int, out: Path, rate: int = 100) -> Iterator[None]:
    """Samples of ``pid`` (active threads only) into ``out`` (py-spy's raw collapsed
    stacks) while the block runs."""
    proc = subprocess.Popen(
        [_binary(), "record", "--pid", str(pid), "--format", "raw", "--full-filenames",
         "--output", str(out), "--rate", str(rate), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")


def _product_module(file: str) -> str | None:
    """``bridge/placement/placer.py`` for a file of the product in this checkout, else None."""
    path = Path(file)
    if not path.is_relative_to(REPO):
        return None
    relative = path.relative_to(REPO)
    return str(relative) if relative.parts and relative.parts[0] in PRODUCT else None


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    for frame in stack.split(";"):
        m = _FRAME.match(frame.strip())
        out.append((m["func"], m["file"]) if m else (frame.strip(), ""))
    return out


def summary(raw: Path, top: int = 12) -> str:
    """Own time per package, the repository's functions by inclusive time, and the ``top``
    functions by own time, as shares of all samples."""
    own_pkg: Counter[str] = Counter()
    own_fn: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = _frames(stack)
        func, file = frames[-1]
        own_pkg[package_of(file, func)] += n
        own_fn[f"{func} ({Path(file).name})"] += n
        for name in {f"{f} ({module})" for f, fl in frames
                     if (module := _product_module(fl)) is not None}:
            ours[name] += n
    if not total:
        return "(no samples)"

    def share(n: int) -> str:
        return f"{100 * n / total:5.1f} %"

    lines = [f"{total:,} samples of the extender's active threads; own time per package:"]
    lines += [f"  {share(n)}  {name}" for name, n in own_pkg.most_common(top)]
    lines += ["", "This repository's functions, inclusive (on the stack):"]
    lines += [f"  {share(n)}  {name}" for name, n in ours.most_common(top)]
    lines += ["", f"Top {top} functions by own time:"]
    lines += [f"  {share(n)}  {name}" for name, n in own_fn.most_common(top)]
    return "\n".join(lines)
