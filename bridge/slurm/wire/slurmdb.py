"""slurmdbd through slurmrestd (``/slurmdb/v0.0.4x/``): accounts, associations, QOS.

The fields the bridge reads have the same shape from v0.0.40 to v0.0.45, so one family
serves every parser; only ``/slurmdb/`` paths use it (they need slurmrestd's
``openapi/slurmdbd`` plugin and a slurmdbd behind slurmctld).
"""

from typing import Any

from pydantic import Field, field_validator

from bridge.slurm.wire.base import Envelope, NoVal, WireModel


class Account(WireModel):
    name: str


class AccountsResponse(Envelope):
    accounts: list[Account] = Field(default_factory=list)


class Association(WireModel):
    account: str = ""
    user: str = ""
    cluster: str = ""
    partition: str = ""
    qos: list[str] = Field(default_factory=list)


class AssociationsResponse(Envelope):
    associations: list[Association] = Field(default_factory=list)


class QosPreempt(WireModel):
    qos: list[str] = Field(default_factory=list, alias="list")  # the QOS it may preempt
    mode: list[str] = Field(default_factory=list)


class QosLimits(WireModel):
    grace_time: int = 0  # seconds a preempted job keeps running after it is signalled

    @field_validator("grace_time", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        """A plain integer in most parsers, Slurm's ``{set, number}`` in some."""
        if isinstance(value, dict):
            no_val = NoVal.model_validate(value)
            return no_val.number if no_val.set else 0
        return value


class Qos(WireModel):
    name: str
    limits: QosLimits = QosLimits()
    preempt: QosPreempt = QosPreempt()


class QosResponse(Envelope):
    qos: list[Qos] = Field(default_factory=list)
