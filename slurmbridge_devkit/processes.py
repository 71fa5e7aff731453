"""The bridge's processes as an operator runs them (``slurmbridge extender``, ``webhook``):
started, killed like a crashed pod, a second replica, and which one leads.

Shared by the e2e stack, the soak benchmark and the Prometheus stand-in (free ports,
stopping a subprocess).
"""

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

BRIDGE_NS = "slurmbridge-system"
LEASE_NAME = "slurmbridge-controllers"  # controllers.lease_name's default


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if ``proc`` is still there after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class BridgeProcess:
    """One ``slurmbridge`` subprocess; restartable, killable like a crashed pod."""

    command: str
    env: dict[str, str]
    log_file: Path
    health_url: str
    verify: ssl.SSLContext | bool = False
    log_level: str = "debug"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slurmbridge_cli", "--log-level", self.log_level, self.command],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        # Its own session outlives a killed test run: the next `controlplane.sh up` stops it
        # when this process (its holder) is gone, before it cancels a later run's jobs.
        self.pid_file.write_text(f"{self.proc.pid} {os.getpid()}\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"slurmbridge {self.command} exited: {self.log_file.read_text()[-3000:]}"
                )
            try:
                if httpx.get(self.health_url, verify=self.verify, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"slurmbridge {self.command} not ready: {self.log_file}")

    @property
    def pid_file(self) -> Path:
        """``<pid> <holder pid>`` beside the log, while the process runs."""
        return self.log_file.with_name(self.log_file.name + ".pid")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        self.pid_file.unlink(missing_ok=True)


def another_replica(first: BridgeProcess) -> BridgeProcess:
    """A second extender replica like ``first`` (same settings, its own protocol, health and
    metrics ports and log), not started: two replicas elect one leader through the Lease."""
    port = free_port()
    return replace(
        first, env={**first.env, "SLURMBRIDGE_EXTENDER__PORT": str(free_port()),
                    "SLURMBRIDGE_EXTENDER__HEALTH_PORT": str(port)},
        log_file=first.log_file.with_suffix(".second.log"),
        health_url=f"http://127.0.0.1:{port}/healthz", proc=None,
    )


async def leader_identity(kube: AsyncClient, name: str = LEASE_NAME) -> str:
    """The holder of the controllers' Lease ``name`` (``<host>_<pid>``; empty: none)."""
    lease = await kube.get(Lease, name, namespace=BRIDGE_NS)
    return (lease.spec.holderIdentity or "") if lease.spec else ""


def leads(identity: str, proc: BridgeProcess) -> bool:
    """``proc`` is the replica the Lease names."""
    return proc.proc is not None and identity.endswith(f"_{proc.proc.pid}")
