"""Typed failures of the Slurm side, each carrying Slurm's own words."""


class SlurmError(Exception):
    """Base: something about Slurm went wrong; ``str()`` says what and what to do."""


class SlurmUnavailable(SlurmError):
    """slurmrestd could not be reached or answered 5xx (after retries): transient."""


class SlurmAuthError(SlurmError):
    """slurmrestd refused the token: check the token file and the user name."""


class SlurmProtocolError(SlurmError):
    """slurmrestd answered something we cannot use (no common data parser, bad JSON)."""


class SlurmUnsupported(SlurmError):
    """This Slurm (its newest data parser) cannot do what was asked; the message names the
    version needed and what an admin does instead."""


class SlurmRejected(SlurmError):
    """Slurm refused the request itself, e.g. an unknown partition or account."""

    def __init__(self, operation: str, errors: list[str], status: int) -> None:
        self.operation = operation
        self.errors = errors
        self.status = status
        detail = "; ".join(errors) or f"HTTP {status} without an error text"
        super().__init__(f"Slurm rejected {operation}: {detail}")


class SlurmJobNotFound(SlurmError):
    """The job id is unknown to slurmctld (never existed, or purged after MinJobAge)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"Slurm job {job_id} not found")


class SlurmTLSError(SlurmError):
    """slurmrestd over https cannot work as set (``slurm.tls``): ``problem`` says what is
    wrong, ``fix`` which setting to change and how."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}: {fix}")


class SlurmTLSRefused(SlurmTLSError, SlurmUnavailable):
    """The TLS handshake with slurmrestd failed (its certificate not trusted or not for the
    name, the bridge's refused or missing): nothing was sent, and no retry helps until a
    certificate or a setting changes.  Unavailable, as an outage is, to the poller."""
