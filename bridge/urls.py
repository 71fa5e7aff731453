"""What a URL setting accepts: http(s) with a host.  ``slurm-ctl:6820`` parses as a URL of
scheme ``slurm-ctl``; refused when the settings load, it cannot fail later as a request."""

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator


def _http_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL: write http://HOST:PORT or "
                         "https://HOST:PORT, e.g. https://slurmrestd.example.org:6820")
    return url


HttpURL = Annotated[str, AfterValidator(_http_url)]
