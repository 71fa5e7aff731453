"""The JWT sent to slurmrestd, re-read when its file changes so tokens can rotate."""

import os
from pathlib import Path

from bridge.slurm.errors import SlurmAuthError


class TokenSource:
    """Gives the current token; cheap to call per request (one ``stat``)."""

    def __init__(self, token: str | None = None, token_file: Path | None = None) -> None:
        if token is None and token_file is None:
            raise SlurmAuthError(
                "no Slurm token configured: set SLURMBRIDGE_SLURM__TOKEN_FILE "
                "(or SLURMBRIDGE_SLURM__TOKEN) to a JWT from `scontrol token`"
            )
        self._fixed = token
        self._file = token_file
        self._stamp: tuple[int, int, int] | None = None
        self._cached = ""

    def current(self) -> str:
        if self._file is None:
            assert self._fixed is not None
            return self._fixed
        try:
            st = os.stat(self._file)
        except OSError as exc:
            raise SlurmAuthError(f"cannot read Slurm token file {self._file}: {exc}") from exc
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._cached = self._file.read_text().strip()
            self._stamp = stamp
        if not self._cached:
            raise SlurmAuthError(f"Slurm token file {self._file} is empty")
        return self._cached

    def invalidate(self) -> None:
        """Forget the cached token (after a 401): the next call re-reads the file."""
        self._stamp = None
