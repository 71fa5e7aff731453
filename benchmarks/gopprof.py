"""Where kube-apiserver spends its CPU in a B1 round: a CPU profile from its own pprof.

kube-apiserver is the biggest CPU user of a bridge round and costs 2-3x what the default
scheduler's round costs it (RESULTS.md, B1).  Its ``/debug/pprof/profile`` (on by default,
``--profiling``; cluster admin may read it) says on what: admission webhooks, watch fan-out,
the writes themselves.  Recorded in B1's extra round beside py-spy; read with ``go tool
pprof``, whose profiles carry their own symbols.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from slurmbridge_devkit.kube import ControlPlane

# A ``go tool pprof -top`` row: flat flat% sum% cum cum% function.
_ROW = re.compile(r"^\s*(\S+)\s+([\d.]+)%\s+[\d.]+%\s+(\S+)\s+([\d.]+)%\s+(.+)$")
# Frames that say what the apiserver was doing (its own packages), not how (runtime, net)...
_OURS = ("k8s.io/apiserver/", "k8s.io/kubernetes/", "k8s.io/apimachinery/", "go.etcd.io/")
# ...leaving out the handler chain every request passes through (authn, flow control, ...).
_CHAIN = re.compile(r"filterlatency|DefaultBuildHandlerChain|/filters[./]|server/filters|"
                    r"impersonation|server\.director|server/mux|flowcontrol|finisher\.|"
                    r"responsewriter|APIServerHandler")


class ApiserverProfile:
    """kube-apiserver's CPU profile of the first ``seconds`` of the block into ``out``.  A
    profile that cannot be had never fails the round: ``summary`` says why it is missing."""

    def __init__(self, cp: ControlPlane, out: Path, seconds: int) -> None:
        self._cmd = [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "get",
                     "--raw", f"/debug/pprof/profile?seconds={seconds}",
                     "--request-timeout", f"{seconds + 30}s"]
        self._out, self._seconds = out, seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._error = ""

    def __enter__(self) -> ApiserverProfile:
        with self._out.open("wb") as sink:
            self._proc = subprocess.Popen(self._cmd, stdout=sink, stderr=subprocess.PIPE)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        try:
            err = self._proc.communicate(timeout=self._seconds + 60)[1]
        except subprocess.TimeoutExpired:
            self._proc.kill()
            err = self._proc.communicate()[1]
        if self._proc.returncode != 0:
            self._error = err.decode(errors="replace").strip()[-300:]

    def summary(self, top: int = 15) -> str:
        try:
            if self._error:
                raise RuntimeError(self._error)
            return summary(self._out, top)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            return f"kube-apiserver's CPU profile: none ({exc})"


def _top(profile: Path, *flags: str) -> list[tuple[float, float, str]]:
    """(flat %, cum %, function) rows of ``go tool pprof -top``."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("go is not on PATH: deploy/dev/go.sh puts it there")
    text = subprocess.run(
        [go, "tool", "pprof", "-top", "-nodecount=400", *flags, str(profile)],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout
    return [(float(m[2]), float(m[4]), m[5].strip())
            for line in text.splitlines() if (m := _ROW.match(line))]


def summary(profile: Path, top: int = 15) -> str:
    """The apiserver's own functions by inclusive share, and the top functions by own share."""
    by_cum = [row for row in _top(profile, "-cum")
              if row[2].startswith(_OURS) and not _CHAIN.search(row[2])]
    by_flat = _top(profile)
    lines = ["kube-apiserver's CPU profile (pprof), its own functions past the handler chain, "
             "inclusive:"]
    lines += [f"  {cum:5.1f} %  {name}" for _, cum, name in by_cum[:top]]
    lines += ["", f"Top {top} functions by own time:"]
    lines += [f"  {flat:5.1f} %  {name}" for flat, _, name in by_flat[:top]]
    return "\n".join(lines)
