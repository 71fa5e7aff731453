"""The running bridge: wires the parts around the Slurm and Kubernetes ports, starts their loops
(each in bridge/controllers/)."""

import asyncio
from datetime import datetime

import structlog
from lightkube.models.core_v1 import Pod as PodModel

from bridge import keys, metrics
from bridge.binding.binder import Binder
from bridge.cancelling import cancel_and_wait
from bridge.config import Settings
from bridge.controllers.external import ExternalNodes
from bridge.controllers.intake import Intake
from bridge.controllers.leader import LeaderElector
from bridge.controllers.lifecycle import Lifecycle
from bridge.controllers.nodesync import NodeSync
from bridge.controllers.poller import Poller
from bridge.controllers.prune import prune_forever
from bridge.controllers.reconcile import reconcile_forever
from bridge.devices.freeing import ClaimReleaser
from bridge.devices.pinning import ClaimPinner
from bridge.gpumap.exported import export_forever
from bridge.kube.nodecache import NodeCache
from bridge.kube.writes import set_slurm_condition
from bridge.link.podcache import PodCache
from bridge.placement.grace import GraceWarnings
from bridge.placement.index import JobIndex
from bridge.placement.job_events import JobEventFanout
from bridge.placement.notifier import PodNotifier
from bridge.placement.outcomes import Refused
from bridge.placement.placer import Placer
from bridge.placement.registry import SeenPods
from bridge.placement.release import Releaser
from bridge.placement.trust import JobTrust
from bridge.policy.check import SubmitRefused, for_submit
from bridge.policy.tenancy import TenancySource, owner_trust
from bridge.ports import BridgeKubePort, SlurmPort
from bridge.slurm.node_listing import SlurmNodeListing

log = structlog.get_logger(__name__)

REQUEUE_DELAY_SECONDS = 2.0
STOP_PATIENCE_SECONDS = 10.0  # > the leader's own: 2 s for its term, 5 s for the Lease


class Bridge:
    """The parts, wired; the clients come from the composition root (slurmbridge_cli/compose.py)
    or, in unit tests, are the fakes of slurmbridge_devkit/fakes.py."""

    def __init__(
        self, settings: Settings, *, slurm: SlurmPort, kube: BridgeKubePort, tenancy: TenancySource
    ) -> None:
        self.settings = settings
        self.tenancy = tenancy
        self.slurm = slurm
        self.kube = kube
        self.pod_cache = PodCache(self.kube)
        self.index = self._index()
        self.nodes = NodeCache(self.kube)
        self.seen = SeenPods()  # the pods filter and intake met, until their job is gone
        self.events = JobEventFanout()  # what happens to a job: listeners below, raisers take it
        self.grace = GraceWarnings(self.kube, self.slurm)
        self.notifier = PodNotifier(
            self.kube, self.seen, quiet_seconds=settings.placement.notify_quiet_seconds,
            estimate_moves_seconds=settings.placement.expected_start_moves_seconds)
        c = settings.controllers
        self.elector = LeaderElector(
            self.kube, namespace=c.lease_namespace, name=c.lease_name,
            identity=c.identity, lease_seconds=c.lease_seconds,
        )
        self.device_claims = ClaimReleaser(self.kube)  # DRA claims: pinned at release, freed after
        self.slurm_nodes = SlurmNodeListing(self.slurm)  # node sync lists, the submit reads
        self.placer = self._placer()
        p = settings.placement
        self.binder = Binder(self.kube, self.placer, cuda_numbering=p.cuda_visible_devices)
        self.releaser = self._releaser()
        self.intake = Intake(
            self.kube, self.pod_cache, self.placer, self.releaser, workers=p.submit_workers,
            events=self.events,
        )
        self.poller = Poller(
            self.slurm, self.index, self.events,
            interval=p.poll_interval_seconds, fast_interval=p.fast_poll_interval_seconds,
            fast_window=p.fast_poll_window_seconds,
            resync_interval=p.resync_interval_seconds,
            reasons_per_cycle=p.reasons_per_cycle, reason_interval=p.reason_refresh_seconds,
            watch_running=lambda job: self.grace.preemptable(job.qos),
        )
        self.events.listen(self.intake, self.notifier, self.grace, self.poller)
        self.lifecycle = Lifecycle(
            self.kube, self.slurm, self.index, self.seen, self.pod_cache,
            orphan_grace=c.orphan_grace_seconds,
            device_claims=self.device_claims if settings.device_classes else None,
        )
        self.nodesync = NodeSync(self.kube, self.slurm, self.nodes, self.pod_cache,
                                 self.slurm_nodes)
        self.external = ExternalNodes(self.kube, self.slurm, self.nodes, c.external_node_feature,
                                      self.slurm_nodes)
        self._tasks: list[asyncio.Task[None]] = []

    def _index(self) -> JobIndex:
        """Whose placeholder a job is: the tenancy's word, given the namespaces of the pods."""
        trust = owner_trust(self.tenancy, self.settings.slurm.user)
        return JobIndex(self.slurm, trust=JobTrust(trust, self.pod_cache))

    def _placer(self) -> Placer:
        """Filter's answers and the leader's submits, each group's seats."""
        return Placer(self.index, self.nodes, self.seen, self.events,
                      parked=self.notifier.parked, trouble=self.notifier.trouble,
                      admit=self._admit, members=self.kube, views=self.pod_cache.get,
                      slurm_nodes=self.slurm_nodes)

    def _releaser(self) -> Releaser:
        """The gated pods' release, their DRA claims written with Slurm's GPUs first."""
        return Releaser(
            self.kube, self.placer, self.index,
            cuda_numbering=self.settings.placement.cuda_visible_devices,
            pinner=ClaimPinner(self.kube, self.settings.device_classes, self.device_claims),
            events=self.events,
        )

    def _admit(self, pod: PodModel) -> PodModel:
        """The pod as its job is submitted: tenancy and policy as they are now."""
        try:
            return for_submit(pod, self.settings.admission, self.tenancy)
        except SubmitRefused as exc:
            raise Refused(str(exc)) from exc

    async def start(self) -> None:
        """Serve once the Nodes are known: until then no Slurm node maps to its Node.  Read
        Slurm once the pods are: the namespace of the pod a job's comment names says whose
        job it is (placement/trust.py)."""
        metrics.OLDEST_GATED_POD.set_function(self.pod_cache.oldest_gated_seconds)
        self._tasks = [
            asyncio.create_task(self.nodes.run(), name="nodes"),
            asyncio.create_task(self.pod_cache.run(), name="pods"),
            asyncio.create_task(
                prune_forever(self.seen, self.index, self.notifier, self.placer.seats),
                name="prune"),
            asyncio.create_task(export_forever(
                lambda: self.index.live().values(), self.pod_cache.views), name="gpumap"),
        ]
        await self.pod_cache.wait_synced()
        self._tasks.append(asyncio.create_task(self.poller.run(), name="poller"))
        await self.nodes.wait_synced()
        self._tasks.append(asyncio.create_task(self._requeue_waiting(), name="requeue"))
        if self.settings.controllers.enabled:
            self._tasks.append(asyncio.create_task(
                self.elector.run(self._lead, quiet=self.poller.list_again), name="leader"))

    async def _requeue_waiting(self) -> None:
        """kube-scheduler parks pods whose filter failed while we were down: nudge them back.

        Runs once, shortly after start so that the HTTP server is listening by then.
        """
        await asyncio.sleep(REQUEUE_DELAY_SECONDS)
        try:
            for pod in await self.pod_cache.current():
                # a gated pod is not in kube-scheduler's queue: the leader releases it
                if not (pod.node_name or pod.gated or pod.deleting):
                    await set_slurm_condition(
                        self.kube, pod.namespace, pod.name, allocated=False,
                        reason=keys.REASON_BRIDGE_STARTED,
                        message="slurmbridge (re)started: scheduling again",
                    )
        except Exception as exc:  # best effort: kube-scheduler retries on its own later
            log.warning("requeue.failed", error=repr(exc))

    async def _lead(self, quiet_since: datetime) -> None:
        """What only the lease holder runs: every submission and record, the controllers.
        ``quiet_since``: when the former holder stopped acting."""
        controllers = (("lifecycle", self.lifecycle), ("external", self.external),
                       ("nodesync", self.nodesync))
        tasks = [
            asyncio.create_task(self._intake(quiet_since), name="intake"),
            asyncio.create_task(reconcile_forever(
                self.poller, controllers, self.settings.controllers.interval_seconds,
            ), name="reconcile"),
        ]
        try:  # neither ends while we lead: one that does ends the term (the elector says why)
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            await cancel_and_wait(tasks)

    async def _intake(self, quiet_since: datetime) -> None:
        """Submit only once the index holds a listing of Slurm begun after ``quiet_since``:
        every job the former holder submitted is in it, so every pod's job is submitted by
        the leader alone, without a claim (asked for by the standby as that moment passed)."""
        await self.poller.listed_since(quiet_since)
        await self.intake.run()

    async def stop(self) -> None:
        # the leader's own stop (its controllers, then the Lease handed over) fits within
        await cancel_and_wait(self._tasks, patience=STOP_PATIENCE_SECONDS)
        await self.notifier.drain()
        await self.slurm.aclose()

    @property
    def ready(self) -> bool:
        """Able to answer filter: Slurm was read completely within ``unready_after_seconds``.
        Shorter outages keep it ready, so kube-scheduler keeps reaching a replica and pods
        read why they wait; a longer one (or a bridge stuck on unreadable answers) does not."""
        return self.poller.read_within(self.settings.placement.unready_after_seconds)

    @property
    def unready_reason(self) -> str:
        if not self.poller.synced:
            return "waiting for the first Slurm listing"
        seconds = self.settings.placement.unready_after_seconds
        return f"Slurm not read for over {seconds:.0f}s (see slurmbridge_poll_errors_total)"

    @property
    def slurm_reachable(self) -> bool:
        return self.poller.healthy
