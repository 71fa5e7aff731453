"""The bridge's signature on the owner marker of its placeholders' comments.

Any Slurm user can write ``slurmbridge.io/pod-uid=<owner>`` into a job's comment (pods' UIDs
show in ``squeue -o %k``), so the marker alone proves nothing.  The bridge adds an HMAC over
the job's name and the owner, keyed with a secret only it holds (``slurm.owner_key_file``;
the chart's Secret, shared by the replicas).  A marker whose signature does not verify is not
the bridge's: its job is no placeholder, whatever it names.  The name is signed too, so a
signed comment copied onto a job named in another namespace does not verify; a copy under the
very name the bridge gave it does (docs/operations.md, threat model: a tenant's own jobs).
"""

import hashlib
import hmac
from pathlib import Path

from bridge import keys
from bridge.jobs.owner import Owner, owner_text
from bridge.slurm.convert import comment_for, owner_from_comment

MIN_KEY_BYTES = 16
_SIGNATURE_HEX = 32  # 128 bits of HMAC-SHA256


class OwnerKeyError(ValueError):
    """The owner key is missing or unusable: the bridge cannot tell its jobs from forgeries."""


class OwnerSigner:
    """Signs the markers the bridge writes and verifies the ones it reads; without a key
    (a client that only reads, or submits as a tenant would) it signs nothing and verifies
    nothing."""

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and len(key) < MIN_KEY_BYTES:
            raise OwnerKeyError(f"the owner key has {len(key)} bytes, fewer than {MIN_KEY_BYTES}")
        self._key = key

    @classmethod
    def from_file(cls, path: Path | None) -> "OwnerSigner":
        """The bridge's signer from ``slurm.owner_key_file``: required, read once at start."""
        if path is None:
            raise OwnerKeyError(
                "no owner key configured: set SLURMBRIDGE_SLURM__OWNER_KEY_FILE (slurm."
                "owner_key_file) to a file of at least 16 random bytes, the same for every "
                "replica (the Helm chart makes one: Secret <release>-owner-key); the bridge "
                "signs its placeholders' comments with it"
            )
        try:
            return cls(path.read_bytes().strip())
        except OSError as exc:
            raise OwnerKeyError(f"owner key file {path} (slurm.owner_key_file): {exc}") from exc
        except OwnerKeyError as exc:
            raise OwnerKeyError(f"owner key file {path} (slurm.owner_key_file): {exc}; write "
                                "e.g. `openssl rand -hex 32` into it") from exc

    def comment(self, job_name: str, owner: Owner) -> str:
        """The comment of the bridge's placeholder ``job_name`` for ``owner``: marker and
        signature."""
        marker = comment_for(owner)
        if self._key is None:
            return marker
        return f"{marker} {keys.COMMENT_SIGNATURE}{self._signature(job_name, owner)}"

    def signed(self, job_name: str, comment: str) -> bool:
        """The owner marker in ``comment`` carries the bridge's signature for ``job_name``."""
        owner = owner_from_comment(comment)
        if self._key is None or owner is None:
            return False
        given = next((part.removeprefix(keys.COMMENT_SIGNATURE) for part in comment.split()
                      if part.startswith(keys.COMMENT_SIGNATURE)), "")
        return hmac.compare_digest(given.encode(), self._signature(job_name, owner).encode())

    def _signature(self, job_name: str, owner: Owner) -> str:
        assert self._key is not None
        text = f"{job_name}\n{owner_text(owner)}".encode()
        return hmac.new(self._key, text, hashlib.sha256).hexdigest()[:_SIGNATURE_HEX]
