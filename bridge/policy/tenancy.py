"""Tenancy: which Slurm account and user a namespace's pods run as, and where they may go.

One YAML file an admin controls (the chart mounts it from a ConfigMap), read by the
webhook (mutate fills the defaults in as annotations, validate refuses what the mapping
does not allow) and by the bridge right before it submits (it does not trust that
admission ran).  Both re-read the file when it changes: no restart.

::

    namespaces:
      team-a: {account: physics, user: alice, partitions: [gpu], qos: [normal, low]}
    default: {account: shared, user: slurm}   # optional: namespaces without an entry
    priority_classes: {high-priority: high}    # PriorityClass name -> QOS

A namespace with no entry and no ``default`` is refused, naming what to configure.
"""

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

import structlog
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from bridge import keys
from bridge.filestamp import FileStamp, file_stamp
from bridge.jobs.aliases import keys_set
from bridge.jobs.owner import GroupOwner, Owner

log = structlog.get_logger(__name__)

SlurmName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Tenant(BaseModel):
    """One namespace's Slurm identity and choices.  Empty lists allow any value."""

    model_config = ConfigDict(extra="forbid")

    account: SlurmName | None = Field(
        None, description="Slurm account of every job; unset: the user's default account"
    )
    user: SlurmName | None = Field(
        None, description="Slurm user the pods run as; unset: the bridge's own (slurm.user)"
    )
    partitions: list[SlurmName] = Field(
        default_factory=list, description="partitions pods may use; empty: any"
    )
    default_partition: SlurmName | None = Field(
        None, description="partition of pods that name none; default: the first allowed"
    )
    qos: list[SlurmName] = Field(default_factory=list, description="QOS pods may use; empty: any")
    default_qos: SlurmName | None = Field(
        None, description="QOS of pods that name none (and whose PriorityClass maps to none); "
        "default: the first allowed"
    )

    @model_validator(mode="after")
    def _defaults_allowed(self) -> "Tenant":
        for default, allowed, name in (
            (self.default_partition, self.partitions, "partition"),
            (self.default_qos, self.qos, "qos"),
        ):
            if default and allowed and default not in allowed:
                raise ValueError(f"default_{name} {default!r} is not among the allowed {allowed}")
        return self

    @property
    def partition(self) -> str | None:
        return self.default_partition or (self.partitions[0] if self.partitions else None)

    @property
    def default_qos_name(self) -> str | None:
        return self.default_qos or (self.qos[0] if self.qos else None)

    def allowed(self, annotation: str) -> list[str]:
        """The values this tenant allows for a user annotation (empty: not restricted here)."""
        by_key: dict[str, list[str]] = {
            keys.ACCOUNT: [self.account] if self.account else [],
            keys.SLURM_USER: [self.user] if self.user else [],
            keys.PARTITION: self.partitions,
            keys.QOS: self.qos,
        }
        return by_key.get(annotation, [])


# The annotation each tenant field guards, and its field name (for messages).
TENANT_FIELDS: Mapping[str, str] = {
    keys.ACCOUNT: "account", keys.SLURM_USER: "user",
    keys.PARTITION: "partitions", keys.QOS: "qos",
}


class TenancyMap(BaseModel):
    """The whole file: namespaces, an optional default, PriorityClass → QOS."""

    model_config = ConfigDict(extra="forbid")

    namespaces: dict[str, Tenant] = Field(default_factory=dict)
    default: Tenant | None = None
    priority_classes: dict[str, SlurmName] = Field(default_factory=dict)

    def tenant(self, namespace: str) -> Tenant | None:
        return self.namespaces.get(namespace, self.default)

    def setting(self, namespace: str) -> str:
        """Where ``namespace``'s tenant is written in the file: what refusals point to."""
        return f"namespaces.{namespace}" if namespace in self.namespaces else "default"

    def tenants(self) -> dict[str, Tenant]:
        """Every tenant by its place in the file (``namespaces.x``, ``default``)."""
        found = {f"namespaces.{ns}": t for ns, t in self.namespaces.items()}
        if self.default is not None:
            found["default"] = self.default
        return found

    def defaults(
        self, namespace: str, annotations: Mapping[str, str], priority_class: str | None
    ) -> dict[str, str]:
        """Annotations to fill in for a pod of ``namespace`` that does not set them.

        QOS: the pod's own, else its PriorityClass's, else the namespace's default.  Values
        are filled in even where the policy will then refuse them (a PriorityClass whose QOS
        the namespace may not use): the refusal names both.  A value set through
        slurm-bridge's alias of a key is the pod's own too (bridge/jobs/aliases.py).
        """
        own = keys_set(annotations)
        tenant = self.tenant(namespace)
        if tenant is None:
            return {}
        qos = self.priority_classes.get(priority_class or "") or tenant.default_qos_name
        wanted = {
            keys.ACCOUNT: tenant.account, keys.SLURM_USER: tenant.user,
            keys.PARTITION: tenant.partition, keys.QOS: qos,
        }
        return {k: v for k, v in wanted.items() if v and k not in own}


class TenancyError(ValueError):
    """The tenancy file cannot be read or is not a valid mapping; the message says where."""


def parse(text: str, source: str) -> TenancyMap:
    try:
        data = yaml.safe_load(text) or {}
        return TenancyMap.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise TenancyError(f"tenancy file {source}: {exc}") from exc


class TenancySource:
    """The mapping from a file, re-read when the file changes (a ConfigMap update swaps it).

    A change that does not parse keeps the last good mapping (logged, and shown by
    ``slurmbridge doctor``); a file that never parsed raises at start.  Without a file
    there is no mapping at all: every namespace is refused until an admin writes one.
    """

    def __init__(self, path: Path | None, *, fixed: TenancyMap | None = None) -> None:
        """``fixed``: the mapping when there is no file (embedding, tests)."""
        self.path = path
        self._lock = threading.Lock()
        self._stamp: FileStamp | None = None
        self._map = fixed or TenancyMap()
        self.error: str | None = None
        if path is not None:
            self._map = parse(self._read(path), str(path))
            self._stamp = self._stamp_of(path)
        # Each distinct namespace → user mapping in force since start (see ever_ran_as).
        self._runs_as: dict[_RunsAs, TenancyMap] = {_runs_as(self._map): self._map}

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text()
        except OSError as exc:
            raise TenancyError(f"tenancy file {path}: {exc}") from exc

    @staticmethod
    def _stamp_of(path: Path) -> FileStamp | None:
        try:
            return file_stamp(path)
        except OSError:
            return None

    @property
    def configured(self) -> bool:
        return self.path is not None

    def current(self) -> TenancyMap:
        """The mapping as the file says now (one stat per call; re-parsed on change)."""
        if self.path is None:
            return self._map
        stamp = self._stamp_of(self.path)
        if stamp == self._stamp:
            return self._map
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._map = parse(self._read(self.path), str(self.path))
                    self._runs_as.setdefault(_runs_as(self._map), self._map)
                    self.error = None
                    log.info("tenancy.reloaded", file=str(self.path),
                             namespaces=len(self._map.namespaces))
                except TenancyError as exc:
                    self.error = str(exc)
                    log.error("tenancy.invalid", file=str(self.path), error=str(exc),
                              hint="the last valid mapping stays in force")
                self._stamp = stamp
        return self._map

    def ever_ran_as(self, namespace: str, user: str) -> bool:
        """Some mapping in force since start ran ``namespace`` as ``user``: the jobs the bridge
        submitted then stay its own after an admin remaps or removes the namespace."""
        self.current()
        return any((t := m.tenant(namespace)) is not None and t.user == user
                   for m in self._runs_as.values())


_RunsAs = tuple[tuple[tuple[str, str | None], ...], str | None]


def _runs_as(mapping: TenancyMap) -> _RunsAs:
    """What a mapping says of users: namespace → user, and the default's user."""
    default = mapping.default.user if mapping.default else None
    return tuple(sorted((ns, t.user) for ns, t in mapping.namespaces.items())), default


def placeholder_trust(source: TenancySource) -> Callable[[str, str], bool]:
    """``(slurm_user, job_name) -> bool``, the Slurm client's first screen: a job named
    ``k8s:<namespace>/...`` may be a placeholder when the tenancy runs (or, since this process
    started, ran) that namespace as that user (others' jobs are not even parsed); whether the
    owner in its comment is believed, ``owner_trust`` decides."""

    def trusted(user: str, job_name: str) -> bool:
        namespace = _named_namespace(job_name)
        return namespace is not None and source.ever_ran_as(namespace, user)

    return trusted


OwnerTrust = Callable[[str, Owner, str, str | None], bool]  # (user, owner, job name, pod's ns)


def owner_trust(source: TenancySource, bridge_user: str) -> OwnerTrust:
    """May a job of ``slurm_user`` whose comment names ``owner`` be that owner's placeholder?
    The one place that decides (the job index asks it of every job it reads).  Yes for the
    bridge's own user; for another, only if the tenancy runs (or ran) as them the owner's
    namespace: a group's own, a pod's (``pod_namespace``); for a UID no known pod has (one
    deleted while the bridge was away) the job's name stands in: no known pod can be harmed.
    The name alone proves nothing: anyone may write another tenant's group, or a pod's UID
    (``squeue -o %k``), into the comment of a job named in their own namespace."""

    def trusted(user: str, owner: Owner, job_name: str, pod_namespace: str | None) -> bool:
        if user == bridge_user:
            return True
        namespace = (owner.namespace if isinstance(owner, GroupOwner)
                     else pod_namespace or _named_namespace(job_name))
        return namespace is not None and source.ever_ran_as(namespace, user)

    return trusted


def _named_namespace(job_name: str) -> str | None:
    """``<namespace>`` of a placeholder's name ``k8s:<namespace>/...``; None for other names."""
    named = job_name.startswith(keys.JOB_NAME_PREFIX)
    return job_name.removeprefix(keys.JOB_NAME_PREFIX).split("/", 1)[0] if named else None


def missing_tenant(namespace: str, source: TenancySource) -> str:
    """The refusal for a namespace the mapping does not cover, naming what to configure."""
    where = (
        f"the tenancy file {source.path}" if source.path is not None
        else "a tenancy file (setting admission.tenancy_file; none is configured)"
    )
    return (
        f"namespace {namespace!r} is not mapped to a Slurm account and user: an admin adds "
        f"namespaces.{namespace} (account, user, partitions, qos) to {where} "
        f"(Helm: tenancy.namespaces.{namespace}), or a default entry"
    )
