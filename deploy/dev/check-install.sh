#!/usr/bin/env bash
# Prove the README's install step on a stock Debian 12: in a fresh bookworm container
# (deploy/docker/base-image.sh, built here without a registry) with Debian's own Go 1.19,
# run deploy/dev/install.sh, then `slurmbridge --help` from the virtualenv it made and the
# Go toolchain the build scripts would use.  Called by tests/run.sh.
# Cached: a pass is recorded with a fingerprint of everything that goes into it (base image,
# install scripts, pyproject.toml, the package's sources); an unchanged tree is not checked
# again.  Downloads (apt archives, pip wheels, Go modules) are kept between runs under
# ${SLURMBRIDGE_CACHE:-~/.cache/slurmbridge}/install-check, so a re-check takes about a minute.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh" install-check
cache="$CACHE/install-check"   # its downloads, its last log and its record of the last pass

bash "$repo/deploy/docker/engine.sh"
image="$(bash "$repo/deploy/docker/base-image.sh" bookworm)"
inputs=(pyproject.toml README.md bridge extender admission slurmbridge_cli deploy/dev)
stamp="$( (docker image inspect "$image" --format '{{.Id}}'
  cd "$repo" && find "${inputs[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' | sort | xargs sha256sum) \
  | sha256sum | cut -c1-16)"
if [[ "$(cat "$cache/passed" 2>/dev/null)" == "$stamp" ]]; then
  log "unchanged since the last pass ($stamp)"; exit 0
fi

ctx="$(mktemp -d)"; trap 'rm -rf "$ctx"' EXIT
(cd "$repo" && cp -r --parents "${inputs[@]}" "$ctx/")
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$cache"/{apt,pip,gomod}
log "install step in a fresh $image container (log: $cache/last.log)"
# The apt lists are not kept: `apt-get update` runs as on a new machine.
if ! docker run --rm -v "$ctx:/src:ro" -v "$cache/apt:/var/cache/apt/archives" \
    -v "$cache/pip:/root/.cache/pip" -v "$cache/gomod:/root/go/pkg/mod" "$image" bash -euo pipefail -c '
  cp -r /src /repo && cd /repo
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null   # Debian 12: Go 1.19
  echo "Debian: $(go version)"
  venv_bin="$(bash deploy/dev/install.sh)"; export PATH="$venv_bin:$PATH"
  slurmbridge --help
  source deploy/dev/go.sh && echo "for the builds: $(go version)"
  ' > "$cache/last.log" 2>&1; then
  tail -n 40 "$cache/last.log" >&2
  die "the install step failed in a fresh Debian 12 container (log above: $cache/last.log)"
fi
grep -q "^Usage: slurmbridge" "$cache/last.log" || die "no 'slurmbridge --help' output in $cache/last.log"
grep "^Debian: \|^for the builds: " "$cache/last.log" | sed 's/^/[install-check] /' >&2
echo "$stamp" > "$cache/passed"
log "passed"
