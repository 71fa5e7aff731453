#!/usr/bin/env bash
# Make `docker run --privileged` work on hosts whose root lacks a capability in its
# bounding set (these VMs lack CAP_SYS_RESOURCE: runc fails with "unable to apply caps:
# operation not permitted").  kind runs its nodes privileged, so deploy/kind needs this.
# Registers deploy/docker/runc-capfilter (runc minus the capabilities the host cannot
# grant) as the engine's default runtime through /etc/docker/daemon.json and reloads
# dockerd with SIGHUP: running containers are untouched.  Does nothing on a host whose
# bounding set is full, or when a privileged container already starts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" docker

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The image the check runs (no registry here: a local one, built when missing).
BASE="${1:-$(bash "$here/base-image.sh" trixie)}"
NAME=slurmbridge-runc
SHIM=/usr/local/libexec/slurmbridge/runc-capfilter
CONF=/etc/docker/daemon.json

privileged_ok() { docker run --rm --privileged --entrypoint true "$BASE" >/dev/null 2>&1; }

privileged_ok && exit 0
log "privileged containers fail here (capability bounding set $(awk '/CapBnd/ {print $2}' /proc/self/status)): installing $NAME"
install -D -m 0755 "$here/runc-capfilter" "$SHIM"
python3 - "$CONF" "$NAME" "$SHIM" "$(command -v runc)" <<'PY'
import json, os, sys
conf, name, shim, runc = sys.argv[1:]
data = json.load(open(conf)) if os.path.exists(conf) and os.path.getsize(conf) else {}
data.setdefault("runtimes", {})[name] = {"path": shim}
data["default-runtime"] = name
os.makedirs(os.path.dirname(conf), exist_ok=True)
json.dump(data, open(conf, "w"), indent=2)
PY
pid="$(pgrep -xo dockerd)" || die "no dockerd running"
kill -HUP "$pid"
for _ in $(seq 1 20); do
  docker info --format '{{.DefaultRuntime}}' 2>/dev/null | grep -qx "$NAME" && break; sleep 0.5
done
privileged_ok || die "privileged containers still fail with $NAME (see $CONF)"
log "privileged containers work ($NAME is the default runtime)"
