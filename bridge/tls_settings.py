"""``slurm.tls``: how the bridge checks slurmrestd's certificate and proves itself to it, for
a slurmrestd served over https (its own TLS, or a terminator in front of it).  The files are
read when the Slurm client is built (bridge/slurm/tls.py), so the webhook, which never talks
to Slurm, loads the same settings without them."""

from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from bridge.section import Section

DNS_NAME = r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$"


class SlurmTlsSettings(Section):
    ca_file: Path | None = Field(
        None,
        description="PEM bundle of the CA(s) that signed slurmrestd's certificate, trusted "
        "besides the system's (Helm: slurm.tls.caSecret)",
    )
    cert_file: Path | None = Field(
        None,
        description="client certificate (PEM) presented to a slurmrestd or TLS terminator "
        "that requires one (mutual TLS); with key_file (Helm: slurm.tls.clientSecret)",
    )
    key_file: Path | None = Field(None, description="the client certificate's private key (PEM)")
    server_name: str | None = Field(
        None, pattern=DNS_NAME,
        description="name slurmrestd's certificate is checked against and sent as SNI, when "
        "slurm.url's host is not in it (an IP address, an alias); the bridge still connects "
        "to slurm.url's host, looked up once at start (Helm: slurm.tls.serverName)",
    )

    @model_validator(mode="after")
    def _client_pair(self) -> Self:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: the client certificate and "
                             "its private key (Helm: slurm.tls.clientSecret, tls.crt and tls.key)")
        return self

    @property
    def configured(self) -> bool:
        return any(v is not None for v in (self.ca_file, self.cert_file, self.server_name))
