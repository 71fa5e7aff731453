"""``slurm.tls`` before any connection: each file that cannot be used is one line naming the
setting and its Helm value, and the server-name override still connects to slurm.url's host.
The handshakes themselves: tests/integration/test_slurm_tls.py, against a real slurmrestd."""

from pathlib import Path

import pytest
import trustme
from pydantic import ValidationError

from bridge.config import SlurmSettings
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmTLSError
from bridge.slurm.tls import material, refusal
from bridge.tls_settings import SlurmTlsSettings


def _settings(**tls: object) -> SlurmSettings:
    return SlurmSettings.model_validate(
        {"url": "https://127.0.0.1:6820", "token": "t", "tls": tls})


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    issued = trustme.CA().issue_cert("slurmbridge")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


def test_a_missing_ca_file_names_the_setting_and_helm_value(tmp_path: Path) -> None:
    with pytest.raises(SlurmTLSError) as failed:
        SlurmClient(_settings(ca_file=tmp_path / "ca.pem"))
    assert str(failed.value) == (
        f"slurm.tls.ca_file (Helm: slurm.tls.caSecret): {tmp_path}/ca.pem: No such file or "
        "directory: mount the file there or fix the path")


def test_a_ca_file_without_a_certificate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(SlurmTLSError, match=r"slurm\.tls\.ca_file .* holds no PEM certificate"):
        SlurmClient(_settings(ca_file=tmp_path / "ca.pem"))


def test_a_client_key_that_is_not_the_certificates_is_refused(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other.key"
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(other))
    with pytest.raises(SlurmTLSError, match=r"slurm\.tls\.cert_file and key_file \(Helm: "
                       r"slurm\.tls\.clientSecret\): .* not a PEM certificate and its key"):
        SlurmClient(_settings(cert_file=pair[0], key_file=other))


def test_a_certificate_without_its_key_is_refused_when_the_settings_load(
    pair: tuple[Path, Path]
) -> None:
    with pytest.raises(ValidationError, match="cert_file and key_file go together"):
        _settings(cert_file=pair[0])


def test_tls_settings_for_a_plain_http_url_are_refused() -> None:
    with pytest.raises(SlurmTLSError, match=r"slurm\.url http://slurm:6820 is not https"):
        material("http://slurm:6820", SlurmTlsSettings(server_name="slurm.example"))


def test_server_name_override_connects_to_the_urls_host() -> None:
    given = material("https://127.0.0.1:6820/rest", SlurmTlsSettings(server_name="slurm.test"))
    assert given.base_url == "https://slurm.test:6820/rest"
    assert given.pin == ("slurm.test", "127.0.0.1", 6820)
    by_name = material("https://localhost", SlurmTlsSettings(server_name="slurm.test"))
    assert by_name.pin is not None and by_name.pin[1] in ("127.0.0.1", "::1")
    assert by_name.pin[2] == 443
    assert material("https://h:1", SlurmTlsSettings()).base_url == "https://h:1"


def test_a_server_name_is_a_dns_name() -> None:
    with pytest.raises(ValidationError, match="server_name"):
        SlurmTlsSettings(server_name="https://slurm.example")


def test_a_connection_failure_that_is_not_tls_is_not_explained_as_tls() -> None:
    assert refusal("Connection refused (os error 111)", "https://h", SlurmTlsSettings()) is None
