"""The kind cluster of deploy/kind/up.sh, as the tests under tests/kind/ drive it.

Everything goes through the tools a user has: ``kubectl`` against the cluster, and Slurm's own
commands run in the Slurm controller container (``docker exec``), as a Slurm admin would.
"""

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.helm import reviews_per_create

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "deploy" / "kind" / "up.sh"
KIND_SLURMD_LABEL = "kind.slurmbridge.io/slurmd"  # deploy/kind/cluster.yaml
# The bridge image has a shell; test containers run it with their own command.
WORKLOAD_IMAGE = "slurmbridge:dev"

T = TypeVar("T")


def run(cmd: list[str], *, stdin: str | None = None, check: bool = True,
        timeout: float = 120) -> str:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def wait(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll until `predicate` returns something truthy; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def expand_indices(spec: str) -> list[int]:
    """Slurm's ``0-1,3`` → [0, 1, 3]."""
    out: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


@dataclass(frozen=True)
class Kind:
    kubeconfig: Path
    slurm_container: str
    namespace: str  # the bridge's
    release: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120) -> str:
        return run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
                   stdin=stdin, check=check, timeout=timeout)

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))


    def reviews_per_create(self) -> str:
        """"one" (``/admit``) or "two" (``/mutate``, then ``/validate``): the bridge's
        webhook configurations as the API server holds them (webhook.validateCreates)."""
        return reviews_per_create([config for plural in ("mutatingwebhookconfigurations",
                                                         "validatingwebhookconfigurations")
                                   for config in self.kubectl_json("get", plural)["items"]])
    def refused(self, *args: str, stdin: str | None = None) -> str:
        """kubectl's error for a request the API server must refuse; fails if it was done."""
        done = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
                              input=stdin, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode != 0, f"kubectl {' '.join(args)} was admitted: {done.stdout}"
        return done.stderr

    def events(self, kind: str, name: str, reason: str) -> dict[str, str]:
        """Event name → message, of the Events about ``kind`` ``name`` with ``reason`` (what
        ``kubectl describe`` lists), in every namespace."""
        found = self.kubectl_json("get", "events", "-A", "--field-selector",
                                  f"involvedObject.kind={kind},involvedObject.name={name},"
                                  f"reason={reason}")
        return {e["metadata"]["name"]: e.get("message", "") for e in found["items"]}

    def slurm(self, *args: str, check: bool = True) -> str:
        return run(["docker", "exec", self.slurm_container, *args], check=check)

    def node_exec(self, node: str, *args: str, check: bool = True) -> str:
        return run(["docker", "exec", node, *args], check=check)

    def workers(self) -> list[str]:
        """The hybrid workers: kubelet and slurmd, one Slurm node each."""
        return self._nodes("!node-role.kubernetes.io/control-plane,"
                           f"{KIND_SLURMD_LABEL}!=false")

    def external_workers(self) -> list[str]:
        """Workers without slurmd (deploy/kind/cluster.yaml): Slurm nodes only as EXTERNAL."""
        return self._nodes(f"{KIND_SLURMD_LABEL}=false")

    def _nodes(self, selector: str) -> list[str]:
        nodes = self.kubectl_json("get", "nodes", "-l", selector)
        return sorted(n["metadata"]["name"] for n in nodes["items"])

    # --- Slurm ------------------------------------------------------------------------

    def sbatch(self, *args: str) -> str:
        return self.slurm("sbatch", "--parsable", "-o", "/dev/null", *args).strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -d -o` as a dict; {} once Slurm forgot the job."""
        out = self.slurm("scontrol", "show", "job", "-d", "-o", job_id, check=False)
        fields: dict[str, str] = {}
        for word in out.split():
            key, sep, value = word.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def job_gpus(self, job_id: str) -> dict[str, list[int]]:
        """Node → GPU indices Slurm allocated to the job (``Nodes=x ... GRES=gpu:2(IDX:0-1)``)."""
        out = self.slurm("scontrol", "show", "job", "-d", job_id)
        found: dict[str, list[int]] = {}
        for nodes, idx in re.findall(r"Nodes=(\S+) .*?GRES=\S*?\(IDX:([0-9,-]+)\)", out):
            for node in self.slurm("scontrol", "show", "hostnames", nodes).split():
                found[node] = expand_indices(idx)
        return found

    def dra_devices(self, node: str) -> dict[str, int]:
        """device name → its index attribute, over the DRA driver's ResourceSlices of ``node``."""
        slices = self.kubectl_json("get", "resourceslices",
                                   f"--field-selector=spec.nodeName={node},spec.driver={DRA_DRIVER}")
        return {d["name"]: d["attributes"]["index"]["int"]
                for s in slices["items"] for d in s["spec"].get("devices", [])}

    def republish_dra_devices(self, node: str) -> None:
        """A Node deleted and registered again lost its ResourceSlices (they are owned by the
        Node) and the driver's kubelet plugin does not notice: restart it there, and wait for
        the devices its label says (``DRA_GPUS_LABEL``, set again by the kubelet)."""
        labels = self.kubectl_json("get", "node", node)["metadata"]["labels"]
        self.kubectl("-n", DRA_NAMESPACE, "delete", "pod", "-l", "app=dra-gpu-plugin",
                     f"--field-selector=spec.nodeName={node}", "--wait=true", timeout=120)
        want = {f"gpu-{i}": i for i in range(int(labels[DRA_GPUS_LABEL]))}
        wait(lambda: self.dra_devices(node) == want, 120,
             f"{node}'s ResourceSlice of {DRA_DRIVER} to list {sorted(want)} again")

    def hold_gpus(self, native: list[str], first_gpus: int) -> str:
        """Native jobs hold ``first_gpus`` of the first worker's GPUs and all of the second's
        (appended to ``native``, which the fixture cancels): the first worker, where a pod's
        GPUs can only be the rest."""
        first, second = self.workers()[:2]
        native.append(self.sbatch("-J", "native-part", "-w", first, f"--gres=gpu:{first_gpus}",
                                  "-c", "1", "--wrap", "sleep 600"))
        native.append(self.sbatch("-J", "native-full", "-w", second, "--gres=gpu:4", "-c", "1",
                                  "--wrap", "sleep 600"))
        wait(lambda: all(self.job_state(j) == "RUNNING" for j in native), 60,
             f"native jobs {native} RUNNING")
        return first

    def job_state(self, job_id: str) -> str:
        return self.job(job_id).get("JobState", "")

    def in_squeue(self, job_id: str) -> bool:
        return bool(self.slurm("squeue", "-h", "-j", job_id, "-o", "%i", check=False).strip())

    def jobs_named(self, name: str) -> list[str]:
        return self.slurm("squeue", "-h", "-n", name, "-o", "%i").split()

    # --- pods -------------------------------------------------------------------------

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        out = self.kubectl("-n", ns, "get", "pod", name, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def apply(self, ns: str, manifest: dict[str, Any]) -> None:
        self.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(manifest))

    def wait_running(self, ns: str, name: str, timeout: float = 180) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(ns, name)
            if pod and pod["status"].get("phase") == "Running":
                return pod
            return None
        try:
            return wait(running, timeout, f"pod {ns}/{name} Running")
        except AssertionError:
            print(self.kubectl("-n", ns, "describe", "pod", name, check=False))
            raise

    def logs(self, ns: str, selector: str) -> list[dict[str, Any]]:
        """The JSON log lines of every container of the pods ``selector`` picks in ``ns``."""
        out = self.kubectl("-n", ns, "logs", "-l", selector, "--all-containers",
                           "--tail=-1", "--prefix=false")
        lines = []
        for text in out.splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(text)
                if isinstance(line, dict):
                    lines.append(line)
        return lines

    def job_of(self, pod: dict[str, Any]) -> str:
        job = pod["metadata"].get("annotations", {}).get(keys.JOB_ID)
        assert job, f"pod {pod['metadata']['name']} carries no {keys.JOB_ID} annotation"
        return str(job)

    def container_running(self, node: str, container_id: str) -> bool:
        """Whether the node's containerd still runs the container (as kubelet's runtime sees it)."""
        cid = container_id.removeprefix("containerd://")
        tasks = self.node_exec(node, "ctr", "-n", "k8s.io", "tasks", "ls", check=False)
        return any(line.split()[:1] == [cid] and "RUNNING" in line for line in tasks.splitlines())


DRA_DRIVER = "gpu.example.com"  # deploy/kind/dra: its driver and DeviceClass
DRA_NAMESPACE = "slurmbridge-dra"
DRA_GPUS_LABEL = "kind.slurmbridge.io/gpus"  # how many GPUs the driver publishes on a node


def pod_manifest(name: str, command: str, *, gpus: int = 0, labels: dict[str, str] | None = None,
                 grace: int = 2) -> dict[str, Any]:
    """A pod running `command` in sh.  Its shell is PID 1 and ignores SIGTERM: unless the
    command traps it, deleting the pod takes `grace` seconds."""
    return workload_pod(name, command, gpus=gpus, labels=labels, grace=grace).manifest()


def workload_pod(name: str, command: str, *, gpus: int = 0, labels: dict[str, str] | None = None,
                 grace: int = 2) -> PodBuilder:
    """``pod_manifest``'s pod as a builder, for a test that adds to it."""
    pod = PodBuilder(name).bare().command("sh", "-c", command, image=WORKLOAD_IMAGE).pull("Never")
    pod.cpu("50m").memory("32Mi").requests_only().gpus(gpus).labels(labels or {})
    return pod.spec(restartPolicy="Never").grace(grace)
