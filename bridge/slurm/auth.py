"""Who the bridge is to slurmrestd, per Slurm user: the two headers of each request.

Two credentials, both re-read when their file changes on disk (rotation needs no restart):

- ``SigningKey``: the cluster's JWT key (``AuthAltParameters=jwt_key=...``).  The bridge is
  a trusted service that mints a short-lived token for whichever user a placeholder runs
  as, with the claims Slurm documents for tokens made outside Slurm (``iat``, ``exp``,
  ``sun``; HS256; https://slurm.schedmd.com/jwt.html#compatibility).
- ``StaticToken``: one token (from ``scontrol token``) for the bridge's own user.  Slurm
  lets such a token act as another user only when it is SlurmUser's or root's.
"""

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from pathlib import Path

import jwt

from bridge import metrics
from bridge.filestamp import FileStamp, file_stamp
from bridge.slurm.errors import SlurmAuthError


class WatchedFile:
    """A small secret file, read again whenever it changes: one ``stat`` per use (metadata
    only, as cheap as a clock read), the read itself off the event loop."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self._what = what
        self.stamp: FileStamp | None = None  # of what was read
        self._value = b""

    async def read(self) -> bytes:
        try:
            stamp = file_stamp(self.path)
        except OSError as exc:
            raise SlurmAuthError(f"cannot read the {self._what} {self.path}: {exc}") from exc
        if stamp != self.stamp:
            self._value = await asyncio.to_thread(self._load)
            self.stamp = stamp
        return self._value

    def invalidate(self) -> None:
        """Read the file again on the next call (after slurmrestd refused what it gave)."""
        self.stamp = None

    def _load(self) -> bytes:
        try:
            value = self.path.read_bytes()
        except OSError as exc:
            raise SlurmAuthError(f"cannot read the {self._what} {self.path}: {exc}") from exc
        if not value.strip():
            raise SlurmAuthError(f"the {self._what} {self.path} is empty")
        return value


class Credentials(ABC):
    @abstractmethod
    async def headers(self, user: str) -> dict[str, str]:
        """Headers that make slurmrestd act as Slurm user ``user``."""

    @abstractmethod
    def invalidate(self) -> None:
        """Forget cached material: slurmrestd refused it (rotated file, expired token)."""

    @abstractmethod
    def hint(self, user: str) -> str:
        """What an admin does when slurmrestd refuses this credential for ``user``."""


def _headers(user: str, token: str) -> dict[str, str]:
    return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}


class StaticToken(Credentials):
    """One token of the bridge's own user, fixed or from a file."""

    def __init__(self, own_user: str, token: str | None, token_file: Path | None) -> None:
        if token is None and token_file is None:
            raise SlurmAuthError(
                "no Slurm credential configured: set SLURMBRIDGE_SLURM__JWT_KEY_FILE (the "
                "cluster's JWT key, to submit as each namespace's user) or "
                "SLURMBRIDGE_SLURM__TOKEN_FILE (a JWT from `scontrol token`)"
            )
        self._own = own_user
        self._fixed = token
        self._file = WatchedFile(token_file, "Slurm token file") if token_file else None
        self._shown: FileStamp | None = None  # the token file whose expiry the gauge shows
        if token is not None:
            _show_expiry(token)

    async def headers(self, user: str) -> dict[str, str]:
        if self._file is None:
            assert self._fixed is not None
            return _headers(user, self._fixed)
        token = (await self._file.read()).decode().strip()
        if self._file.stamp != self._shown:  # a new token: decoded once, not per request
            self._shown = self._file.stamp
            _show_expiry(token)
        return _headers(user, token)

    def invalidate(self) -> None:
        if self._file is not None:
            self._file.invalidate()

    def hint(self, user: str) -> str:
        where = f"the token file {self._file.path}" if self._file else "slurm.token"
        if user == self._own:
            return f"mint a new one with `scontrol token username={self._own}` into {where}"
        return (
            f"acting as {user!r} with {self._own!r}'s token needs {self._own!r} to be "
            f"SlurmUser or root; or give the bridge the JWT key (slurm.jwt_key_file)"
        )


class SigningKey(Credentials):
    """Mints a token per user with the cluster's JWT key; each is reused for half its life."""

    def __init__(self, key_file: Path, lifespan_seconds: int) -> None:
        self._key = WatchedFile(key_file, "Slurm JWT key file")
        self._lifespan = lifespan_seconds
        self._tokens: dict[str, tuple[str, float]] = {}  # user -> (token, reuse until)
        self._key_stamp: tuple[int, int, int] | None = None

    async def headers(self, user: str) -> dict[str, str]:
        key = await self._key.read()
        if self._key.stamp != self._key_stamp:  # rotated: no old token survives
            self._tokens.clear()
            self._key_stamp = self._key.stamp
        now = time.time()
        cached = self._tokens.get(user)
        if cached is None or now >= cached[1]:
            token = mint(key, user, self._lifespan, now=now)
            metrics.SLURM_TOKEN_EXPIRY.labels("jwt_key").set(self._lifespan)
            cached = (token, now + self._lifespan / 2)
            self._tokens[user] = cached
        return _headers(user, cached[0])

    def invalidate(self) -> None:
        self._key.invalidate()
        self._tokens.clear()

    def hint(self, user: str) -> str:
        return (
            f"check that {self._key.path} is the key slurmctld and slurmdbd read "
            f"(AuthAltParameters=jwt_key=...) and that user {user!r} exists on the Slurm hosts"
        )


def mint(key: bytes, user: str, lifespan_seconds: int, *, now: float | None = None) -> str:
    """An HS256 token Slurm accepts for ``user`` (the whole key file is the HMAC key)."""
    issued = int(now if now is not None else time.time())
    claims = {"iat": issued, "exp": issued + lifespan_seconds, "sun": user}
    return jwt.encode(claims, key, algorithm="HS256")


def token_expiry(token: str) -> float | None:
    """The JWT's ``exp`` claim (epoch seconds), read without verifying: the bridge holds no
    key for a token it was given.  None when it is no JWT or has no expiry."""
    try:
        expires = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.InvalidTokenError:
        return None
    return float(expires) if isinstance(expires, int | float) else None


def _show_expiry(token: str) -> None:
    """``slurmbridge_slurm_token_expiry_seconds{credential="token"}``, counted down at each
    scrape; no series when the token says no expiry."""
    expires = token_expiry(token)
    if expires is None:
        with contextlib.suppress(KeyError):
            metrics.SLURM_TOKEN_EXPIRY.remove("token")
        return
    metrics.SLURM_TOKEN_EXPIRY.labels("token").set_function(lambda: expires - time.time())


def credentials(
    own_user: str,
    *,
    jwt_key_file: Path | None,
    token: str | None,
    token_file: Path | None,
    lifespan_seconds: int,
) -> Credentials:
    """The key when one is configured (it can act as any user), else the single token."""
    if jwt_key_file is not None:
        return SigningKey(jwt_key_file, lifespan_seconds)
    return StaticToken(own_user, token, token_file)
