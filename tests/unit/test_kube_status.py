"""API error classification: the bridge treats 404, 409 and 429 differently from other errors."""

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status

from bridge.kube.apierrors import is_conflict, is_not_found, is_too_many_requests


def _error(code: int) -> ApiError:
    return ApiError(status=Status(code=code, status="Failure", message=f"status {code}"))


@pytest.mark.parametrize(
    ("code", "not_found", "conflict", "throttled"),
    [(404, True, False, False), (409, False, True, False), (429, False, False, True),
     (403, False, False, False), (500, False, False, False)],
)
def test_status_codes_are_told_apart(
    code: int, not_found: bool, conflict: bool, throttled: bool
) -> None:
    exc = _error(code)
    assert (is_not_found(exc), is_conflict(exc), is_too_many_requests(exc)) == (
        not_found, conflict, throttled
    )
