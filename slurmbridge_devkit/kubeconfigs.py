"""A kubeconfig that parses but reaches nothing: for commands whose failure to reach the API
server is what a test looks at."""

from pathlib import Path

import yaml

UNREACHABLE_SERVER = "https://127.0.0.1:9"  # the discard port: nothing listens on it


def unreachable_kubeconfig(path: Path) -> Path:
    """``path``, written as a kubeconfig of one context whose server is never there."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": UNREACHABLE_SERVER,
                                                "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    return path
