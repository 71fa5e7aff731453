"""The AdmissionReview v1 wire format: the request as the fields the webhook reads, the
response as the API server reads it, both through msgspec structs (a third of pydantic's cost
per review).

The request's unknown fields are skipped (the API server adds new ones over releases); the
pod itself stays a dict, shaped by pod.py once the review is about a pod at all.
"""

import base64
from typing import Annotated, Any, Final, Literal

import msgspec

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"


class GroupVersionResource(msgspec.Struct, frozen=True):
    group: str = ""
    resource: str = ""


class UserInfo(msgspec.Struct, frozen=True):
    username: str = ""
    groups: list[str] = msgspec.field(default_factory=list)


class AdmissionRequest(msgspec.Struct, frozen=True, rename="camel"):
    uid: Annotated[str, msgspec.Meta(min_length=1)]
    resource: GroupVersionResource
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    user_info: UserInfo = msgspec.field(default_factory=UserInfo)
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False


class _Review(msgspec.Struct, frozen=True, rename="camel"):
    api_version: Literal["admission.k8s.io/v1"] = API_VERSION
    kind: Literal["AdmissionReview"] = KIND
    request: AdmissionRequest | None = None


_DECODER = msgspec.json.Decoder(_Review)


def decode_request(body: bytes) -> AdmissionRequest | None:
    """The request of an AdmissionReview v1 (None: it has none); raises msgspec.DecodeError
    (not JSON, or not the shape, naming where)."""
    return _DECODER.decode(body).request


class Status(msgspec.Struct, frozen=True):
    code: int
    message: str


class AdmissionResponse(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
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
        encoded = base64.b64encode(msgspec.json.encode(patch)).decode()
        return cls(
            uid=uid, allowed=True, patch=encoded, patch_type="JSONPatch", warnings=warnings or None
        )

    @classmethod
    def deny(cls, uid: str, code: int, message: str) -> "AdmissionResponse":
        """Reject; ``message`` is what ``kubectl`` shows the user."""
        return cls(uid=uid, allowed=False, status=Status(code=code, message=message))


class _Answer(msgspec.Struct, frozen=True, rename="camel"):
    response: AdmissionResponse
    api_version: str = API_VERSION
    kind: str = KIND


def encode_response(response: AdmissionResponse) -> bytes:
    """The AdmissionReview answering with ``response``: the JSON the API server expects
    (camelCase, no nulls)."""
    return msgspec.json.encode(_Answer(response))
