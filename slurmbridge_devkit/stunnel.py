"""slurmrestd behind TLS: Debian's stunnel4 in front of a real slurmrestd, on 127.0.0.1, with
certificates made for the test (trustme): a site CA signing the server's certificate (for
``SERVER_NAMES`` only, not for 127.0.0.1), and mutual TLS with a client CA of its own.
stunnel is missing: the tests fail, naming the package (deploy/dev/install.sh installs it)."""

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

SERVER_NAMES = ("slurmrestd.test", "localhost")  # what the server's certificate holds
INSTALL = "apt-get install stunnel4 (bash deploy/dev/install.sh installs it)"


@dataclass(frozen=True)
class TlsFront:
    port: int  # stunnel's, on 127.0.0.1
    ca_file: Path  # the site CA that signed the server's certificate
    stranger_ca_file: Path  # a CA that signed nothing here
    cert_file: Path  # a client certificate the front trusts
    key_file: Path
    stranger_cert_file: Path  # a client certificate from a CA the front does not trust
    stranger_key_file: Path
    log: Path

    def url(self, host: str) -> str:
        return f"https://{host}:{self.port}"


def _write(path: Path, blob: trustme.Blob) -> Path:
    blob.write_to_path(str(path))
    path.chmod(0o600)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"stunnel4 exited ({proc.returncode}):\n{log.read_text()[-2000:]}",
                        pytrace=False)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    pytest.fail(f"stunnel4 not listening on 127.0.0.1:{port} after 15 s:\n"
                f"{log.read_text()[-2000:]}", pytrace=False)


@contextlib.contextmanager
def tls_front(slurmrestd_url: str, workdir: Path) -> Iterator[TlsFront]:
    """stunnel on a free port forwarding to ``slurmrestd_url``'s host and port, requiring a
    client certificate of its client CA; stopped afterwards."""
    binary = shutil.which("stunnel4") or shutil.which("stunnel")
    if binary is None:
        pytest.fail(f"stunnel4 is missing: {INSTALL}", pytrace=False)
    site_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server = site_ca.issue_cert(*SERVER_NAMES)
    client = client_ca.issue_cert("slurmbridge")
    stranger = stranger_ca.issue_cert("slurmbridge")
    target = urlsplit(slurmrestd_url)
    front = TlsFront(
        port=_free_port(),
        ca_file=_write(workdir / "site-ca.pem", site_ca.cert_pem),
        stranger_ca_file=_write(workdir / "stranger-ca.pem", stranger_ca.cert_pem),
        cert_file=_write(workdir / "client.crt", client.cert_chain_pems[0]),
        key_file=_write(workdir / "client.key", client.private_key_pem),
        stranger_cert_file=_write(workdir / "stranger.crt", stranger.cert_chain_pems[0]),
        stranger_key_file=_write(workdir / "stranger.key", stranger.private_key_pem),
        log=workdir / "stunnel.log",
    )
    conf = workdir / "stunnel.conf"
    conf.write_text("\n".join([
        "foreground = yes", "pid =", "debug = 5", f"output = {front.log}",
        "[slurmrestd]",
        f"accept = 127.0.0.1:{front.port}",
        f"connect = {target.hostname}:{target.port}",
        f"cert = {_write(workdir / 'server.pem', server.private_key_and_cert_chain_pem)}",
        f"CAfile = {_write(workdir / 'client-ca.pem', client_ca.cert_pem)}",
        "verifyChain = yes", "requireCert = yes", "",
    ]))
    proc = subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, front.port, front.log)
        yield front
    finally:
        proc.terminate()
        proc.wait(timeout=10)
