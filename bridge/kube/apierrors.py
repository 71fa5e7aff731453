"""What an apiserver error means, by HTTP status: one place instead of bare 404/409 numbers."""

from http import HTTPStatus

from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status


def api_error(code: int, message: str, reason: str | None = None) -> ApiError:
    """An ``ApiError`` as lightkube raises it for an apiserver answer of ``code``."""
    return ApiError(status=Status(code=code, status="Failure", message=message, reason=reason))


def is_not_found(exc: ApiError) -> bool:
    """The object does not exist (404): already deleted, or never created."""
    return exc.status.code == HTTPStatus.NOT_FOUND


def is_conflict(exc: ApiError) -> bool:
    """The write lost a race (409): the object exists already or moved to a newer version."""
    return exc.status.code == HTTPStatus.CONFLICT


def is_too_many_requests(exc: ApiError) -> bool:
    """Not now (429): rate limited, or an eviction a PodDisruptionBudget blocks."""
    return exc.status.code == HTTPStatus.TOO_MANY_REQUESTS


def is_unprocessable(exc: ApiError) -> bool:
    """The request cannot apply to the object as it is (422): a JSON Patch ``test`` failed,
    or the result would be invalid."""
    return exc.status.code == HTTPStatus.UNPROCESSABLE_ENTITY
