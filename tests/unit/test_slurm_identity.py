"""Who the bridge is to slurmrestd (fakes only; tests/integration/test_slurm_accounting.py
runs the same against real Slurm): tokens minted per user from the cluster's JWT key, the
single-token mode, rotation of either file without a restart, and which users' jobs may be
placeholders."""

import json
import os
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bridge import keys
from bridge.config import SlurmSettings
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.slurm import auth
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmAuthError
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange


class VerifyingRest:
    """slurmrestd as Slurm's auth/jwt judges a request: the token must verify with the key
    of the moment, and a token of user U may act as another user only if U is SlurmUser."""

    def __init__(self, key: bytes, slurm_user: str = "slurm") -> None:
        self.key = key
        self.slurm_user = slurm_user
        self.acted_as: list[tuple[str, str]] = []  # (path, user) of each accepted request
        self.jobs: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        name = request.headers["X-SLURM-USER-NAME"]
        try:
            claims = jwt.decode(request.headers["X-SLURM-USER-TOKEN"], self.key, ["HS256"])
        except jwt.InvalidTokenError:
            return httpx.Response(401)
        if claims["sun"] != name and claims["sun"] not in (self.slurm_user, "root"):
            return httpx.Response(401)
        path = request.url.path
        self.acted_as.append((path, name))
        if path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
        if path.endswith("/job/submit"):
            body = json.loads(request.content)["job"]
            self.jobs.append({
                "job_id": 10 + len(self.jobs), "name": body["name"], "user_name": name,
                "comment": body["comment"], "job_state": ["PENDING"],
            })
            return httpx.Response(200, json={"job_id": self.jobs[-1]["job_id"]})
        return httpx.Response(200, json={"jobs": self.jobs})


KEY = b"k" * 64


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # as a rotation does: a new file under the old name


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "jwt_hs256.key"
    _write(path, KEY)
    return path


def _req(user: str | None) -> JobRequest:
    placement = SlurmPlacement(user=user, account="team-a")
    return JobRequest(name="k8s:team-a/p", owner=PodOwner("uid-1"), placement=placement)


def test_minted_token_carries_the_claims_slurm_documents() -> None:
    token = auth.mint(b"secret" * 8, "alice", 300, now=1_000)
    claims = jwt.decode(token, b"secret" * 8, ["HS256"], options={"verify_exp": False})
    assert claims == {"iat": 1_000, "exp": 1_300, "sun": "alice"}


async def test_placeholder_runs_as_the_request_user_with_a_key(key_file: Path) -> None:
    rest = VerifyingRest(KEY)
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", jwt_key_file=key_file, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        await client.submit(_req("alice"))
        await client.submit(_req(None))
        await client.list_jobs()
    assert [u for p, u in rest.acted_as if p.endswith("/job/submit")] == ["alice", "slurm"]
    assert [u for p, u in rest.acted_as if p.endswith("/jobs/")] == ["slurm"]


async def test_key_rotated_on_disk_is_used_without_a_restart(key_file: Path) -> None:
    rest = VerifyingRest(KEY)
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", jwt_key_file=key_file, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        await client.submit(_req("alice"))
        rest.key = b"n" * 64  # slurmctld now verifies with a new key ...
        _write(key_file, rest.key)  # ... that the admin also rotated into the bridge's file
        await client.submit(_req("alice"))  # cached token refused once, the new key read
    assert [u for p, u in rest.acted_as if p.endswith("/job/submit")] == ["alice", "alice"]


async def test_token_file_rotated_on_disk_is_used_without_a_restart(tmp_path: Path) -> None:
    key = b"k" * 64
    rest = VerifyingRest(key)
    token_file = tmp_path / "token"
    _write(token_file, auth.mint(b"old" * 22, "slurm", 600).encode())  # not valid any more
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token_file=token_file, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        with pytest.raises(SlurmAuthError, match="scontrol token username=slurm"):
            await client.list_jobs()
        _write(token_file, auth.mint(key, "slurm", 600).encode())
        await client.list_jobs()  # read again after the refusal: works


async def test_single_token_acts_as_another_user_only_if_slurm_lets_it(tmp_path: Path) -> None:
    key = b"k" * 64
    token_file = tmp_path / "token"
    _write(token_file, auth.mint(key, "svc", 600).encode())
    rest = VerifyingRest(key, slurm_user="slurm")  # svc is not SlurmUser
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="svc", token_file=token_file, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest)) as client:
        await client.submit(_req(None))
        with pytest.raises(SlurmAuthError, match="jwt_key_file"):
            await client.submit(_req("alice"))


def test_no_credential_names_both_settings() -> None:
    with pytest.raises(SlurmAuthError, match=r"JWT_KEY_FILE.*TOKEN_FILE"):
        SlurmClient(SlurmSettings(url=MOCK_SLURM_URL, user="slurm"))


def _job(user: str, name: str) -> dict[str, Any]:
    return {"job_id": 7, "name": name, "user_name": user, "job_state": ["PENDING"],
            "comment": f"{keys.COMMENT_OWNER}uid-7"}


@pytest.mark.parametrize(("user", "name", "placeholder"), [
    ("slurm", "k8s:team-a/p", True),   # the bridge's own user
    ("alice", "k8s:team-a/p", True),   # the user team-a is mapped to
    ("alice", "k8s:team-b/p", False),  # alice forging a marker for another namespace
    ("mallory", "k8s:team-a/p", False),
])
async def test_placeholders_are_the_bridges_and_its_mapped_users_jobs(
    key_file: Path, user: str, name: str, placeholder: bool
) -> None:
    rest = VerifyingRest(KEY)
    rest.jobs = [_job(user, name)]
    mapped = {"team-a": "alice", "team-b": "bob"}

    def trust(job_user: str, job_name: str) -> bool:
        namespace = job_name.removeprefix("k8s:").split("/", 1)[0]
        return mapped.get(namespace) == job_user

    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", jwt_key_file=key_file, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest), trust=trust) as c:
        job = (await c.list_jobs())[0]
    assert (job.owner == PodOwner("uid-7")) is placeholder
