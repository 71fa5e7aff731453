#!/usr/bin/env bash
# Install what slurmbridge's tests and demo need on a Debian machine (as root):
# debootstrap for the Slurm chroots, openssl for the control plane's certificates,
# and the Python package with its test extras.  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/../.."

need=()
for cmd in debootstrap:debootstrap openssl:openssl curl:curl; do
  command -v "${cmd%%:*}" >/dev/null || need+=("${cmd##*:}")
done
if (( ${#need[@]} )); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]] || {
  echo "Go is needed to build kube-apiserver/kube-scheduler: apt-get install golang-go (>= 1.25)" >&2
  exit 1
}
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
