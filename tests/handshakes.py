"""Connections as a client that keeps some alive opens them: the servers' TLS handshake
counters (B1 reports them per bound pod) must count one per connection, not per request."""

import ssl

import httpx


async def requests_on_four_connections(url: str, verify: ssl.SSLContext) -> int:
    """Three GETs of ``url`` on a connection each, then three on one kept alive; returns the
    connections opened (4)."""
    for _ in range(3):
        async with httpx.AsyncClient(verify=verify) as http:
            await http.get(url)
    async with httpx.AsyncClient(verify=verify) as http:
        for _ in range(3):
            await http.get(url)
    return 4
