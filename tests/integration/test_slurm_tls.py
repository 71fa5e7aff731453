"""slurmrestd over TLS (issue 44, item 2): the bridge's Slurm client through a real TLS
terminator (Debian's stunnel4) in front of the real slurmrestd, with a site CA, mutual TLS and
a certificate that does not hold the address slurm.url names.  A refusal says which
setting to change, in the client's error and in ``slurmbridge doctor``."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.config import Settings, SlurmSettings
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmTLSRefused
from bridge.slurm.types import JobState
from slurmbridge_cli.doctor import slurm_checks
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stunnel import TlsFront, tls_front

pytestmark = pytest.mark.integration


@pytest.fixture
def front(slurm: SlurmTarget, tmp_path: Path) -> Iterator[TlsFront]:
    with tls_front(slurm.url, tmp_path) as running:
        yield running


def _tls(slurm: SlurmTarget, front: TlsFront, host: str, **tls: object) -> SlurmSettings:
    """The settings of a bridge reaching slurmrestd through ``front`` at ``host``; the
    client certificate unless ``tls`` says otherwise."""
    given = {"ca_file": front.ca_file, "cert_file": front.cert_file,
             "key_file": front.key_file} | tls
    return slurm.settings(url=front.url(host), retries=0, tls=given)


async def test_lists_and_submits_through_tls_with_the_sites_ca(
    slurm: SlurmTarget, front: TlsFront
) -> None:
    async with SlurmClient(_tls(slurm, front, "localhost")) as client:
        assert await client.list_nodes()
        uid = str(uuid.uuid4())
        request = JobRequest(name=f"k8s:itest/tls-{uid[:8]}", owner=PodOwner(uid), cpus=1)
        job_id = await client.submit(request)
        try:
            job = await client.get_job(job_id)
            assert (job.name, job.owner) == (request.name, request.owner)
        finally:
            await client.cancel(job_id)
        assert (await client.get_job(job_id)).state in (JobState.CANCELLED, JobState.COMPLETING)
    assert "Certificate accepted at depth=0" in front.log.read_text()  # stunnel checked ours


async def test_a_certificate_from_another_ca_is_refused_naming_the_ca_setting(
    slurm: SlurmTarget, front: TlsFront
) -> None:
    settings = _tls(slurm, front, "localhost", ca_file=front.stranger_ca_file)
    async with SlurmClient(settings) as client:
        with pytest.raises(SlurmTLSRefused) as refused:
            await client.list_nodes()
    message = str(refused.value)
    assert "certificate is not trusted" in message, message
    assert "slurm.tls.ca_file (Helm: slurm.tls.caSecret)" in message, message
    # doctor: one FAIL line saying what, the setting to fix as its hint.
    (check,) = [c async for c in slurm_checks(Settings.model_construct(slurm=settings))]
    assert not check.ok
    assert "certificate is not trusted" in check.line()
    assert "(hint: give slurm.tls.ca_file (Helm: slurm.tls.caSecret) the CA" in check.line(), \
        check.line()


async def test_mutual_tls_wants_the_clients_certificate(
    slurm: SlurmTarget, front: TlsFront
) -> None:
    without = _tls(slurm, front, "localhost", cert_file=None, key_file=None)
    async with SlurmClient(without) as client:
        with pytest.raises(SlurmTLSRefused, match=r"asks for a client certificate.*"
                           r"slurm\.tls\.cert_file and key_file"):
            await client.list_nodes()
    stranger = _tls(slurm, front, "localhost", cert_file=front.stranger_cert_file,
                    key_file=front.stranger_key_file)
    async with SlurmClient(stranger) as client:
        with pytest.raises(SlurmTLSRefused, match=r"refused the TLS connection.*UnknownCA"):
            await client.list_nodes()


async def test_server_name_override_checks_the_certificate_against_that_name(
    slurm: SlurmTarget, front: TlsFront
) -> None:
    """slurm.url names 127.0.0.1, which the certificate does not hold: refused, naming
    slurm.tls.server_name; with it set to a name the certificate holds (one no DNS knows),
    the bridge still connects to 127.0.0.1 and works."""
    async with SlurmClient(_tls(slurm, front, "127.0.0.1")) as client:
        with pytest.raises(SlurmTLSRefused) as refused:
            await client.list_nodes()
    assert "not for the name" in str(refused.value)
    assert "slurm.tls.server_name (Helm: slurm.tls.serverName)" in str(refused.value)
    named = _tls(slurm, front, "127.0.0.1", server_name="slurmrestd.test")
    async with SlurmClient(named) as client:
        assert await client.list_nodes()
    wrong = _tls(slurm, front, "127.0.0.1", server_name="elsewhere.test")
    (check,) = [c async for c in slurm_checks(Settings.model_construct(slurm=wrong))]
    assert not check.ok and "elsewhere.test" in check.what, check.line()
    assert "hint: set slurm.tls.server_name" in check.line(), check.line()

