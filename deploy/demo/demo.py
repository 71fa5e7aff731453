"""The demo: pods and a native Slurm job sharing GPUs, placed by Slurm.

Runs on the local Slurm 26.05 and control plane that deploy/demo.sh starts,
reusing the dev kit (slurmbridge_devkit) to start the bridge the way the
tests do.  `demo.py up` leaves everything running; `demo.py down` stops it.
`demo.py kind-manifests IMAGE GROUP` prints the same pods, sized for kind, for
deploy/kind/up.sh's demo.
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_picture import draw as draw_gpu_map  # beside this script
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Pod

from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod
from slurmbridge_devkit.kube import ControlPlane, cache_dir, parse_env, run_controlplane
from slurmbridge_devkit.namespaces import delete_namespace
from slurmbridge_devkit.slurm import local_target
from slurmbridge_devkit.stack import OWNER_KEY_FILE, make_e2e_namespace, start_stack
from slurmbridge_devkit.stack_objects import FIRST_INSTALL
from slurmbridge_devkit.waiting import wait_for

STATE = cache_dir() / "demo"
NAMESPACE = "demo"


def demo_pods(*, on_kind: bool = False, group: str = "allreduce") -> list[PodBuilder]:
    """The demo's pods, one list for both demos: here, on nodes of 64 CPUs and 8 GPUs, and on
    kind (deploy/kind/up.sh), whose workers have 2 real cores for their kubelets and 4 GPUs,
    2 of the first held by the native job: there each asks a tenth of a CPU and 1 GPU at most.
    The first two leave schedulerName to the webhook (the namespace is enrolled)."""
    def sized(pod: PodBuilder, cpu: str, memory: str, gpus: int) -> PodBuilder:
        if on_kind:
            return pod.cpu("100m").memory(None).gpus(min(gpus, 1))
        return pod.cpu(cpu).memory(memory).gpus(gpus)

    return [
        sized(PodBuilder("notebook-cpu").scheduler(None), "2", "4Gi", 0),
        sized(PodBuilder("train-gpu").scheduler(None), "8", "32Gi", 2),
        *(sized(PodBuilder(f"worker-{i}").group(group, 2), "4", "1Gi", 1) for i in range(2)),
    ]


def kind_manifests(image: str, group: str) -> str:
    """The pods for deploy/kind/up.sh's demo, a List for ``kubectl create -f -``: each runs
    /pause of ``image`` (the pause image kind's nodes hold), never restarted."""
    pods = [pod.command("/pause", image=image).spec(restartPolicy="Never").manifest()
            for pod in demo_pods(on_kind=True, group=group)]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}, indent=1)


async def up() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    slurm = local_target("26.05")
    env = parse_env(run_controlplane("env"))
    cp = ControlPlane(
        kubeconfig=Path(env["KUBECONFIG"]), server=env["SLURMBRIDGE_KUBE_SERVER"],
        ca_file=Path(env["SLURMBRIDGE_KUBE_CA"]), bin_dir=Path(env["SLURMBRIDGE_KUBE_BIN"]),
    )
    kube = AsyncClient(config=KubeConfig.from_file(cp.kubeconfig))
    stack = await start_stack(slurm, cp, kube, STATE, extender_port=18888, webhook_port=18443,
                              chart_flags=FIRST_INSTALL)
    (STATE / "pids").write_text(json.dumps({
        "extender": stack.extender.proc.pid if stack.extender.proc else None,
        "webhook": stack.webhook.proc.pid if stack.webhook.proc else None,
        "scheduler": stack.scheduler_name,
    }))
    print(f"bridge running: extender :18888, webhook :18443, scheduler {stack.scheduler_name}")

    native = slurm.admin(
        "sbatch", "--parsable", "-J", "native-gpu-training", "--gres=gpu:4", "-c", "8",
        "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 3600",
    ).strip()
    print(f"native sbatch job {native}: 4 GPUs on node1")
    await delete_namespace(kube, NAMESPACE)  # a previous demo's pods
    await make_e2e_namespace(kube, NAMESPACE, name=NAMESPACE, enrolled=True)
    for pod in demo_pods():
        await create_pod(kube, NAMESPACE, pod.build())

    async def all_bound() -> bool:
        listed = [p async for p in kube.list(Pod, namespace=NAMESPACE)]
        return all(p.spec and p.spec.nodeName for p in listed)

    await wait_for(all_bound, 120, interval=0.5, what="demo pods bound")
    env_vars = {**os.environ, "SLURMBRIDGE_SLURM__URL": slurm.url,
                "SLURMBRIDGE_SLURM__TOKEN_FILE": str(slurm.token_file),
                "SLURMBRIDGE_SLURM__OWNER_KEY_FILE": str(STATE / OWNER_KEY_FILE),
                "SLURMBRIDGE_KUBE__KUBECONFIG": str(cp.kubeconfig)}
    print("\n$ slurmbridge status")
    status = [sys.executable, "-m", "slurmbridge_cli", "--log-level", "warning", "status"]
    await asyncio.to_thread(subprocess.run, status, env=env_vars, check=True)
    print("\n$ slurmbridge gpus")
    await asyncio.to_thread(subprocess.run, [*status[:-1], "gpus"], env=env_vars, check=True)
    if picture := os.environ.get("SLURMBRIDGE_DEMO_PICTURE"):  # README's, from this run
        drawn = await asyncio.to_thread(
            subprocess.run, [*status[:-1], "gpus", "-o", "json"], env=env_vars, check=True,
            capture_output=True, text=True)
        draw_gpu_map(json.loads(drawn.stdout), Path(picture))
        print(f"(the GPU map drawn to {picture})")
    print("\n$ squeue")
    print(slurm.admin("squeue", "-o", "%.6i %.28j %.9T %.8N %.12b"))
    print("$ scontrol show job -d (GPU indices per job)")
    for line in slurm.admin("scontrol", "show", "job", "-d", "-o").splitlines():
        if "JobState=RUNNING" in line:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            gres = [f for f in line.split() if f.startswith("GRES=")]
            print(f"  {fields['JobId']:>5} {fields['JobName']:<28} {fields['NodeList']:<8} "
                  f"{' '.join(gres) or 'GRES=-'}")
    print("\nTear down with: bash deploy/demo.sh down")


def down() -> None:
    pids_file = STATE / "pids"
    if pids_file.exists():
        pids = json.loads(pids_file.read_text())
        for key in ("extender", "webhook"):
            if pids.get(key):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pids[key], signal.SIGTERM)
        if pids.get("scheduler"):
            run_controlplane("stop-scheduler", pids["scheduler"])
        pids_file.unlink()
        time.sleep(1)


if __name__ == "__main__":
    if sys.argv[1:] == ["down"]:
        down()
    elif sys.argv[1:2] == ["kind-manifests"] and len(sys.argv) == 4:
        print(kind_manifests(image=sys.argv[2], group=sys.argv[3]))
    else:
        asyncio.run(up())
