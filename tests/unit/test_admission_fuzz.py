"""Property tests: no body makes the webhooks answer 5xx; valid pods round-trip idempotently."""

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.webhook import create_app
from bridge import keys
from tests.unit.test_admission import (
    BRIDGE_USER,
    OPEN,
    SETTINGS,
    FakeLabels,
    apply,
    lookups,
    make_pod,
    make_review,
)

ENDPOINTS = st.sampled_from(["/mutate", "/validate", "/admit"])
FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
# Keys of the real format (and one random) make random trees reach deeper into the parser.
json_keys = st.sampled_from(
    ["apiVersion", "kind", "request", "uid", "object", "spec", "containers", "metadata"]
) | st.text(max_size=4)
json_trees = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=8,
)

gpu_amounts = st.integers(0, 8) | st.integers(0, 8).map(str)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.fixed_dictionaries(
            {"cpu": st.just("1")}, optional={keys.GPU_RESOURCE: gpu_amounts}
        ),
        "limits": st.fixed_dictionaries({}, optional={keys.GPU_RESOURCE: gpu_amounts}),
    },
)
env_vars = st.lists(
    st.builds(
        lambda name, value: {"name": name, "value": value},
        st.sampled_from(["A", "B", *keys.GPU_ENV_VARS]),
        st.text(max_size=4),
    ),
    max_size=3,
)


def containers(min_size: int, sidecars: bool) -> st.SearchStrategy[list[dict[str, Any]]]:
    optional: dict[str, st.SearchStrategy[Any]] = {"resources": resources, "env": env_vars}
    if sidecars:
        optional["restartPolicy"] = st.just("Always")
    one = st.fixed_dictionaries({"image": st.just("img")}, optional=optional)
    return st.lists(one, min_size=min_size, max_size=3).map(
        lambda cs: [{"name": f"c{i}", **c} for i, c in enumerate(cs)]
    )


annotation_maps = st.dictionaries(
    st.sampled_from(["team", keys.GPUS, keys.ACCOUNT, keys.QOS, keys.PARTITION, keys.GPU_IDS]),
    st.sampled_from(["1", "physics", "normal", "x"]),
    max_size=4,
)
tolerations = st.lists(
    st.sampled_from(
        [
            {"key": keys.MANAGED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "gpu", "operator": "Equal", "value": "a", "effect": "NoExecute"},
        ]
    ),
    max_size=2,
)


@st.composite
def valid_pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "initContainers": containers(0, sidecars=True),
                "tolerations": tolerations,
                "schedulerName": st.sampled_from([keys.SCHEDULER_NAME, "default-scheduler"]),
            },
        )
    )
    return make_pod(
        name=draw(st.sampled_from(["a", "b-1"])),
        namespace=draw(st.sampled_from(["team-a", "labelled", "other", "kube-system"])),
        annotations=draw(st.none() | annotation_maps),
        containers=draw(containers(1, sidecars=False)),
        **spec,
    )


# Fixed starting points keep generation cheap, leaving the examples to the breakage.
TEMPLATES = [
    make_pod(),
    make_pod(namespace="labelled", annotations={keys.ACCOUNT: "physics"}, nodeName="n1"),
    make_pod(
        namespace="other",
        schedulerName=keys.SCHEDULER_NAME,
        containers=[{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "2"}}, "env": []}],
        initContainers=[{"name": "i", "restartPolicy": "Always"}],
        tolerations=[{"operator": "Exists"}],
    ),
]


@st.composite
def broken_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A valid review with one node deleted or replaced by random JSON."""
    pod = draw(st.sampled_from(TEMPLATES))
    operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
    review = copy.deepcopy(make_review(pod, operation=operation, old=pod, uid="u"))
    parents: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in list(children):
            parents.append((node, key))
            if isinstance(child, dict | list):
                walk(child)

    walk(review)
    parent, key = draw(st.sampled_from(parents))
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = draw(json_trees)
    return review


class Client:
    """Synchronous calls into the app on one private event loop.

    Cheaper per request than ``TestClient``'s thread portal, which matters at
    thousands of examples per test.
    """

    def __init__(self) -> None:
        labels = FakeLabels({"labelled": {keys.NAMESPACE_ENROLLED: "true"}})
        app = create_app(SETTINGS, lookups(labels), tenancy=OPEN)  # every ns mapped
        transport = httpx.ASGITransport(app=app)
        self.runner = asyncio.Runner()
        self.http = httpx.AsyncClient(transport=transport, base_url="http://webhook")

    def post(self, endpoint: str, **body: Any) -> dict[str, Any] | None:
        """POST; anything but 200 or 400 fails.  Returns the response of a 200."""
        reply = self.runner.run(self.http.post(endpoint, **body))
        assert reply.status_code in (200, 400), reply.text
        return reply.json()["response"] if reply.status_code == 200 else None

    def close(self) -> None:
        self.runner.run(self.http.aclose())
        self.runner.close()


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client()
    yield c
    c.close()


@FUZZ
@given(
    body=st.binary(max_size=64) | json_trees.map(lambda t: json.dumps(t).encode()),
    endpoint=ENDPOINTS,
)
def test_random_bodies_never_5xx(client: Client, body: bytes, endpoint: str) -> None:
    client.post(endpoint, content=body)


@FUZZ
@given(review=broken_reviews(), endpoint=ENDPOINTS)
def test_broken_reviews_never_5xx(client: Client, review: dict[str, Any], endpoint: str) -> None:
    """Whatever is admitted echoes the uid, and a patch always applies to the object sent."""
    response = client.post(endpoint, json=review)
    if response is not None:
        assert response["uid"] == review["request"]["uid"]
        apply(review["request"]["object"], response)


@settings(max_examples=300, deadline=None)
@given(pod=valid_pods(), uid=st.text(min_size=1, max_size=8))
def test_valid_pods_echo_uid_and_mutate_idempotently(
    client: Client, pod: dict[str, Any], uid: str
) -> None:
    validated = client.post("/validate", json=make_review(pod, uid=uid))
    assert validated is not None and validated["uid"] == uid
    response = client.post("/mutate", json=make_review(pod, uid=uid))
    assert response is not None and response["uid"] == uid and response["allowed"]
    once = apply(pod, response)
    again = client.post("/mutate", json=make_review(once, uid=uid))
    assert again is not None and "patch" not in again
    if "patch" in response:
        for container in once["spec"]["containers"] + once["spec"].get("initContainers", []):
            for amounts in container.get("resources", {}).values():
                assert keys.GPU_RESOURCE not in amounts


@settings(max_examples=300, deadline=None)
@given(pod=valid_pods(), username=st.sampled_from(["alice", BRIDGE_USER]))
def test_the_one_review_of_a_new_pod_answers_as_mutation_then_validation(
    client: Client, pod: dict[str, Any], username: str
) -> None:
    """``/admit`` (the chart's one review of a new pod) patches what ``/mutate`` patches and
    refuses, with the same code and message, what ``/validate`` refuses of the mutated pod."""
    one = client.post("/admit", json=make_review(pod, uid="u", username=username))
    mutation = client.post("/mutate", json=make_review(pod, uid="u", username=username))
    assert one is not None and mutation is not None
    if not mutation["allowed"]:
        assert one == mutation
        return
    mutated = apply(pod, mutation)
    validation = client.post("/validate", json=make_review(mutated, uid="u", username=username))
    assert validation is not None
    patch: dict[str, Any] = {k: mutation[k] for k in ("patch", "patchType") if k in mutation}
    assert one == ({**validation, **patch} if validation["allowed"] else validation)
