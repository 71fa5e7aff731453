"""DRA claims on a slurmbridge pod: what Slurm is asked for, and what the webhook refuses."""

from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import httpx
import pytest
from lightkube import AsyncClient
from lightkube.models.resource_v1 import ResourceClaimSpec
from lightkube.resources.resource_v1 import DeviceClass

from admission.dra import CLAIM, CLAIM_TEMPLATE, kube_extended_resources
from admission.owners import Kind
from admission.webhook import create_app
from bridge import keys
from bridge.config import DeviceClassGres
from bridge.devices.asks import UnmappableClaim, claim_asks
from slurmbridge_devkit.fake_kube import api_error
from tests.unit.test_admission import OPEN, SETTINGS, apply, lookups, make_pod, make_review, post

CLASSES = {
    "gpu.example.com": DeviceClassGres(),
    "slice.example.com": DeviceClassGres(type="1g.10gb"),
    "shard.example.com": DeviceClassGres(gres="shard"),
}


def spec(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"devices": {"requests": list(requests), **devices}}


def request(
    name: str = "gpu", device_class: str = "gpu.example.com", **exactly: Any
) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **exactly}}


def asks(raw: dict[str, Any]) -> list[tuple[str, str, int]]:
    parsed = cast(ResourceClaimSpec, ResourceClaimSpec.from_dict(raw))
    found = claim_asks("ResourceClaim ml/c", parsed, CLASSES)
    return [(a.request, a.device_class, a.count) for a in found]


def test_a_request_of_a_mapped_class_is_a_count_of_its_gres() -> None:
    assert asks(spec(request(count=2), request("one", "slice.example.com"))) == [
        ("gpu", "gpu.example.com", 2), ("one", "slice.example.com", 1),
    ]


@pytest.mark.parametrize(("raw", "words"), [
    (spec(request(device_class="nic.example.com")), "'nic.example.com' is not one Slurm"),
    (spec(request(allocationMode="All")), "allocationMode All"),
    (spec(request(selectors=[{"cel": {"expression": "device.attributes['x'].y"}}])), "CEL"),
    (spec({"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}),
     "firstAvailable"),
    (spec(request(), constraints=[{"matchAttribute": "pciRoot"}]), "constraints"),
    (spec(request(adminAccess=True)), "adminAccess"),
    (spec(request(device_class="shard.example.com")), "Slurm's GPU shards, which a claim"),
    ({"devices": {}}, "asks for no device"),
])
def test_what_slurm_cannot_express_is_refused_naming_the_claim(
    raw: dict[str, Any], words: str
) -> None:
    with pytest.raises(UnmappableClaim) as refused:
        asks(raw)
    assert "ResourceClaim ml/c" in str(refused.value)
    assert words in str(refused.value)


class Objects:
    """ResourceClaims and templates by (kind, namespace, name), as the API server holds them."""

    def __init__(self, **found: dict[str, Any]) -> None:
        self.found = found

    async def __call__(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return self.found.get(f"{kind.plural}/{name}")


def claim(name: str, raw: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": raw}
    return body | ({"status": status} if status else {})


def template(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"spec": raw}}


OBJECTS = Objects(**{
    f"{CLAIM_TEMPLATE.plural}/two": template("two", spec(request(count=2))),
    f"{CLAIM_TEMPLATE.plural}/slice": template(
        "slice", spec(request(device_class="slice.example.com"))
    ),
    f"{CLAIM.plural}/mine": claim("mine", spec(request())),
    f"{CLAIM.plural}/taken": claim("taken", spec(request()), {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "u"}],
    }),
})
POLICY = {keys.ACCOUNT: "physics", keys.QOS: "normal"}


class ExtendedClasses:
    """DeviceClasses by the extended resource they stand for; counts the listings."""

    def __init__(self) -> None:
        self.lists = 0

    async def __call__(self) -> Mapping[str, str]:
        self.lists += 1
        return {"example.com/gpu": "gpu.example.com", "example.com/slice": "slice.example.com",
                "example.com/nic": "nic.example.com", "example.com/shard": "shard.example.com"}


EXTENDED = ExtendedClasses()


async def review(endpoint: str, pod: dict[str, Any]) -> dict[str, Any]:
    app = create_app(SETTINGS, lookups(owners=OBJECTS, extended_resources=EXTENDED),
                     tenancy=OPEN, device_classes=CLASSES)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        return await post(c, endpoint, make_review(pod))


def with_claims(*refs: dict[str, str], **annotations: str) -> dict[str, Any]:
    return make_pod(annotations=POLICY | annotations, resourceClaims=list(refs))


async def test_the_claims_gpus_are_asked_of_slurm_and_the_pod_admitted() -> None:
    """A template's and a user-written claim's GPUs add up to the pod's Slurm ask; the pod
    the webhook made passes its own validation (translation included)."""
    pod = with_claims({"name": "a", "resourceClaimTemplateName": "two"},
                      {"name": "b", "resourceClaimName": "mine"})
    response = await review("mutate", pod)
    assert response["allowed"], response
    out = apply(pod, response)
    assert out["metadata"]["annotations"][keys.GPUS] == "3"
    assert keys.SLURM_GATE in [g["name"] for g in out["spec"]["schedulingGates"]]
    assert (await review("validate", out))["allowed"]


async def test_a_typed_class_asks_for_its_slurm_gpu_type() -> None:
    pod = with_claims({"name": "a", "resourceClaimTemplateName": "slice"})
    out = apply(pod, await review("mutate", pod))
    assert out["metadata"]["annotations"][keys.GPU_TYPE] == "1g.10gb"
    assert out["metadata"]["annotations"][keys.GPUS] == "1"


TWO = {"name": "a", "resourceClaimTemplateName": "two"}


@pytest.mark.parametrize(("refs", "annotations", "words"), [
    ([{"name": "a", "resourceClaimName": "taken"}], {},
     "ResourceClaim team-a/taken is in use by pods/other"),
    ([{"name": "a", "resourceClaimName": "nowhere"}], {},
     "ResourceClaim team-a/nowhere (spec.resourceClaims 'a') does not exist"),
    ([TWO, {"name": "b", "resourceClaimTemplateName": "slice"}], {}, "more than one Slurm type"),
    ([TWO], {keys.GPU_SHARDS: "2"}, "both through spec.resourceClaims"),
    ([TWO], {keys.GPU_TYPE: "3g.40gb"}, "GPU type any"),
])
async def test_claims_slurm_cannot_honour_are_refused_at_create(
    refs: list[dict[str, str]], annotations: dict[str, str], words: str
) -> None:
    response = await review("mutate", with_claims(*refs, **annotations))
    assert not response["allowed"]
    assert words in response["status"]["message"]


def extended_pod(limits: dict[str, str], **annotations: str) -> dict[str, Any]:
    return make_pod(annotations=POLICY | annotations, containers=[
        {"name": "main", "image": "busybox", "resources": {"limits": limits}}])


@pytest.mark.parametrize(("resource", "gpu_type"), [
    ("example.com/gpu", None),  # the mapped class's extendedResourceName
    ("example.com/slice", "1g.10gb"),
    ("deviceclass.resource.kubernetes.io/gpu.example.com", None),  # a class's implicit name
])
async def test_a_mapped_dra_extended_resource_is_asked_of_slurm_like_nvidia_gpus(
    resource: str, gpu_type: str | None
) -> None:
    """Left in the pod, kube-scheduler's DRA plugin would pick its devices; moved out, Slurm
    does, and the pod is told them as for nvidia.com/gpu."""
    pod = extended_pod({resource: "2", "cpu": "1"})
    out = apply(pod, await review("mutate", pod))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}
    annotations = out["metadata"]["annotations"]
    assert annotations[keys.GPUS] == "2"
    assert annotations.get(keys.GPU_TYPE) == gpu_type
    assert (await review("validate", out))["allowed"]


@pytest.mark.parametrize(("limits", "annotations", "words"), [
    ({"example.com/nic": "1"}, {},
     "container 'main' asks for example.com/nic, a DRA extended resource of DeviceClass "
     "nic.example.com, which is not one Slurm allocates"),
    ({"example.com/gpu": "1", "example.com/slice": "1"}, {}, "different Slurm kinds"),
    ({"example.com/slice": "1"}, {keys.GPU_TYPE: "3g.40gb"}, "say GPU type '1g.10gb'"),
    ({"example.com/shard": "2", "nvidia.com/gpu": "1"}, {}, "whole or shards"),
    ({"example.com/shard": "2"}, {keys.GPU_SHARDS: "3"}, "asks for 2 shards through"),
])
async def test_extended_resources_slurm_cannot_honour_are_refused(
    limits: dict[str, str], annotations: dict[str, str], words: str
) -> None:
    response = await review("mutate", extended_pod(limits, **annotations))
    assert not response["allowed"]
    assert words in response["status"]["message"]


async def test_the_classes_are_read_only_for_a_pod_asking_an_extended_resource() -> None:
    before = EXTENDED.lists
    pod = make_pod(annotations=POLICY, containers=[{"name": "main", "image": "busybox",
                   "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}])
    assert (await review("mutate", pod))["allowed"]
    assert EXTENDED.lists == before


async def test_a_shard_class_s_extended_resource_asks_slurm_for_shards() -> None:
    pod = extended_pod({"example.com/shard": "2"})
    out = apply(pod, await review("mutate", pod))
    annotations = out["metadata"]["annotations"]
    assert annotations[keys.GPU_SHARDS] == "2" and keys.GPUS not in annotations
    assert (await review("validate", out))["allowed"]


def test_a_shard_class_has_no_gpu_type() -> None:
    with pytest.raises(ValueError, match="a shard class has no GPU type"):
        DeviceClassGres(gres="shard", type="1g.10gb")


class ClassLister:
    """An API server answering DeviceClass lists (or 404: resource.k8s.io not served)."""

    def __init__(self, served: bool) -> None:
        self.served, self.lists = served, 0

    async def _items(self) -> AsyncIterator[DeviceClass]:
        yield cast(DeviceClass, DeviceClass.from_dict({
            "metadata": {"name": "gpu.example.com"},
            "spec": {"extendedResourceName": "example.com/gpu"}}))

    def list(self, res: Any) -> AsyncIterator[DeviceClass]:
        self.lists += 1
        if not self.served:
            raise api_error(404, "the server could not find the requested resource")
        return self._items()


async def test_the_classes_are_listed_once_per_burst_and_none_where_dra_is_not_served() -> None:
    now = [0.0]
    served = ClassLister(served=True)
    read = kube_extended_resources(cast(AsyncClient, served), clock=lambda: now[0])
    assert await read() == {"example.com/gpu": "gpu.example.com"}
    assert await read() == {"example.com/gpu": "gpu.example.com"} and served.lists == 1
    now[0] = 10.0
    await read()
    assert served.lists == 2
    old = ClassLister(served=False)
    assert await kube_extended_resources(cast(AsyncClient, old))() == {}
