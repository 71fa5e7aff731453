#!/usr/bin/env bash
# Install what slurmbridge's tests and demo need on a Debian machine (as root) and print
# the virtualenv's bin directory (callers put it first on PATH):
#   export PATH="$(bash deploy/dev/install.sh):$PATH"
# - Debian packages: debootstrap (Slurm chroots), openssl (certificates), curl, shellcheck
#   (the test command's lint), stunnel4 (the TLS terminator the tests put in front of
#   slurmrestd; it configures no service), prometheus (its promtool checks the chart's alert
#   rules; its service is not left running), and python3-venv when Python cannot create a
#   virtualenv (stock Debian 12);
# - Go new enough for Kubernetes (deploy/dev/go.sh: Go's toolchain mechanism);
# - the package with its server and test extras, editable, into a virtualenv
#   (${SLURMBRIDGE_VENV:-.venv}): Debian's python3 refuses system-wide pip (PEP 668).
# Safe to run again: the virtualenv is only re-synced when pyproject.toml changed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh" install
cd "$repo"

VENV="${SLURMBRIDGE_VENV:-$PWD/.venv}"
PYTHON="${SLURMBRIDGE_PYTHON:-python3}"

need=()
for cmd in debootstrap:debootstrap openssl:openssl curl:curl shellcheck:shellcheck stunnel4:stunnel4 promtool:prometheus "$PYTHON":python3; do
  command -v "${cmd%%:*}" >/dev/null || need+=("${cmd##*:}")
done
if [[ ! -x "$VENV/bin/python" ]] && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  need+=(python3-venv)
fi
if (( ${#need[@]} )); then
  log "apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  if [[ " ${need[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
    systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
  fi
fi

# shellcheck source=go.sh
source deploy/dev/go.sh
log "$(go version)"

stamp="$(cat pyproject.toml "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if [[ ! -x "$VENV/bin/slurmbridge" || "$(cat "$VENV/.slurmbridge-stamp" 2>/dev/null)" != "$stamp" ]]; then
  [[ -x "$VENV/bin/python" ]] || { log "creating virtualenv $VENV"; "$PYTHON" -m venv "$VENV"; }
  log "installing the package and its server and test extras into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[server,test]' >&2
  echo "$stamp" > "$VENV/.slurmbridge-stamp"
fi
echo "$VENV/bin"
