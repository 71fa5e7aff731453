"""The archive krew downloads (plugins/slurmbridge.yaml): the launcher ``kubectl-slurmbridge``
alone, in a zip whose bytes depend on the launcher only (stored, fixed time and mode), so the
manifest's sha256 can be checked against a rebuild (tests/unit/test_krew_manifest.py).

    python3 plugins/archive.py OUT_DIR    # prints the archive's path and sha256
"""

import hashlib
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kubectl-slurmbridge"


def version() -> str:
    """The version the launcher installs (its ``version=`` line)."""
    for line in LAUNCHER.read_text().splitlines():
        if line.startswith("version="):
            return line.removeprefix("version=")
    raise SystemExit(f"{LAUNCHER}: no version= line")


def build(out_dir: Path) -> Path:
    archive = out_dir / f"kubectl-slurmbridge-v{version()}.zip"
    entry = zipfile.ZipInfo(LAUNCHER.name, date_time=(1980, 1, 1, 0, 0, 0))
    entry.external_attr = (0o100755 << 16)  # a regular file, executable
    entry.create_system = 3  # Unix: the mode above is read
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(entry, LAUNCHER.read_bytes())
    return archive


if __name__ == "__main__":
    built = build(Path(sys.argv[1]))
    print(built, hashlib.sha256(built.read_bytes()).hexdigest())
