"""The AdmissionReview v1 wire format, both directions, as one model family.

Input tolerates unknown fields (the API server adds new ones over releases);
output carries only what the API server reads.
"""

import base64
import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class GroupVersionKind(_Wire):
    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(_Wire):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Wire):
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


class AdmissionRequest(_Wire):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo)
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False


class Status(_Wire):
    code: int
    message: str


class AdmissionResponse(_Wire):
    uid: str
    allowed: bool
    status: Status | None = None
    patch: str | None = None
    patch_type: Literal["JSONPatch"] | None = None
    warnings: list[str] | None = None

    @classmethod
    def allow(
        cls, uid: str, patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None
    ) -> "AdmissionResponse":
        """Admit, with the JSON Patch (RFC 6902) to apply when there is one."""
        if not patch:
            return cls(uid=uid, allowed=True, warnings=warnings or None)
        encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
        return cls(
            uid=uid, allowed=True, patch=encoded, patch_type="JSONPatch", warnings=warnings or None
        )

    @classmethod
    def deny(cls, uid: str, code: int, message: str) -> "AdmissionResponse":
        """Reject; ``message`` is what ``kubectl`` shows the user."""
        return cls(uid=uid, allowed=False, status=Status(code=code, message=message))


class AdmissionReview(_Wire):
    api_version: Literal["admission.k8s.io/v1"] = API_VERSION
    kind: Literal["AdmissionReview"] = KIND
    request: AdmissionRequest | None = None
    response: AdmissionResponse | None = None

    def to_wire(self) -> dict[str, Any]:
        """The JSON body the API server expects (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
