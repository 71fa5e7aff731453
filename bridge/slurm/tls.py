"""slurmrestd over https: what ``slurm.tls`` gives the HTTP client (``http.py``), read and
checked once when the client is built, and a refused handshake told as the setting to change.

The files are checked with the standard library's ``ssl`` (reqwest ignores a CA file that
holds no certificate, and reports a bad client key only as "builder error").  The server-name
override keeps connecting to slurm.url's host: the URL is rewritten to the name, which the
client resolves to that host's address (reqwest has no per-connection name of its own).
"""

import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bridge.slurm.errors import SlurmTLSError, SlurmTLSRefused, SlurmUnavailable
from bridge.tls_settings import SlurmTlsSettings

CA = "slurm.tls.ca_file (Helm: slurm.tls.caSecret)"
CLIENT = "slurm.tls.cert_file and key_file (Helm: slurm.tls.clientSecret)"
NAME = "slurm.tls.server_name (Helm: slurm.tls.serverName)"
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    base_url: str  # slurm.url, its host replaced by the server-name override
    roots: tuple[bytes, ...] = ()  # PEM certificates trusted besides the system's
    identity: bytes | None = None  # the client certificate (chain) and its key, PEM
    pin: tuple[str, str, int] | None = None  # (name, address, port): where the name goes


def material(url: str, tls: SlurmTlsSettings) -> TlsMaterial:
    """What the client of ``url`` needs from ``tls``; a file that cannot be used, or TLS
    settings for an http:// URL, is a ``SlurmTLSError`` naming the setting."""
    parts = urlsplit(url)
    if not tls.configured:
        return TlsMaterial(url)
    if parts.scheme != "https":
        raise SlurmTLSError(f"slurm.tls is set but slurm.url {url} is not https",
                            "write https://HOST:PORT in slurm.url (Helm: slurm.url)")
    roots = _roots(tls.ca_file) if tls.ca_file else ()
    identity = _identity(tls.cert_file, tls.key_file) if tls.cert_file and tls.key_file else None
    if tls.server_name is None:
        return TlsMaterial(url, roots, identity)
    port = parts.port or 443
    netloc = f"{tls.server_name}:{port}"
    pinned = (tls.server_name, _address(parts.hostname or "", port), port)
    return TlsMaterial(urlunsplit(parts._replace(netloc=netloc)), roots, identity, pinned)


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SlurmTLSError(f"{setting}: {path}: {exc.strerror}",
                            "mount the file there or fix the path") from exc


def _roots(path: Path) -> tuple[bytes, ...]:
    certs = tuple(_PEM_CERT.findall(_read(path, CA)))
    fix = "give it the PEM certificate(s) of the CA"
    if not certs:
        raise SlurmTLSError(f"{CA}: {path} holds no PEM certificate", fix)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=b"\n".join(certs).decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise SlurmTLSError(f"{CA}: {path} is not a PEM CA bundle ({exc.reason})", fix) from exc
    return certs


def _identity(cert: Path, key: Path) -> bytes:
    chain, private = _read(cert, CLIENT), _read(key, CLIENT)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise SlurmTLSError(f"{CLIENT}: {cert} and {key} are not a PEM certificate and its "
                            f"key ({exc.reason})", "give the pair tls.crt and tls.key") from exc
    return chain.rstrip(b"\n") + b"\n" + private


def _address(host: str, port: int) -> str:
    """The address behind slurm.url's host, which the override name is sent to."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as exc:
        raise SlurmUnavailable(f"slurm.url's host {host} cannot be looked up for "
                               f"{NAME}: {exc}") from exc


def refusal(cause: str, url: str, tls: SlurmTlsSettings) -> SlurmTLSRefused | None:
    """``cause`` (the TLS library's words for a failed connection) as the setting to change,
    or None when the failure is not TLS's."""
    where = f"slurmrestd at {url}"
    if "certificate not valid for name" in cause:
        return SlurmTLSRefused(
            f"{where}: its certificate is not for the name the bridge checks ({cause})",
            f"set {NAME} to a name the certificate holds, or write that name in slurm.url")
    if "UnknownIssuer" in cause:
        fix = (f"give {CA} the CA that signed it: {tls.ca_file}'s did not" if tls.ca_file
               else f"set {CA} to the CA bundle that signed it")
        return SlurmTLSRefused(f"{where}: its certificate is not trusted ({cause})", fix)
    if "invalid peer certificate" in cause:
        return SlurmTLSRefused(f"{where}: its certificate is refused ({cause})",
                               "renew slurmrestd's certificate, or check " + CA)
    if "CertificateRequired" in cause or ("HandshakeFailure" in cause and not tls.cert_file):
        return SlurmTLSRefused(f"{where} asks for a client certificate ({cause})", f"set {CLIENT}")
    if "received fatal alert" in cause:
        return SlurmTLSRefused(f"{where} refused the TLS connection ({cause})",
                               f"is the client certificate of {CLIENT} one it trusts?")
    if "InvalidContentType" in cause:
        return SlurmTLSRefused(f"{where} does not answer TLS ({cause})",
                               "write http:// in slurm.url if slurmrestd serves plain HTTP")
    return None
