# shellcheck shell=bash disable=SC2034  # CACHE and repo: for the scripts that source this
# Sourced first by every deploy/ script that runs on the host, each with its log tag:
#   source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" TAG
# Not by those that run inside a container or chroot, where this file is not
# (slurm/recipe.sh, slurm/docker-entrypoint.sh, kind/slurmctld.sh, kind/images/kind-net.sh).
# It lives in deploy/dev/ because dev/check-install.sh copies only that folder into its container.
#   log MESSAGE...   "[TAG] MESSAGE" on stderr: stdout is what a script prints for its caller
#   die MESSAGE...   "[TAG] error: MESSAGE" on stderr, then exit 1
#   CACHE            the cache folder, ${SLURMBRIDGE_CACHE:-~/.cache/slurmbridge}
#   repo             the checkout's root, whatever the working directory
LOG_TAG="${1:?usage: source prelude.sh TAG}"
CACHE="${SLURMBRIDGE_CACHE:-$HOME/.cache/slurmbridge}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

log() { echo "[$LOG_TAG] $*" >&2; }
die() { echo "[$LOG_TAG] error: $*" >&2; exit 1; }
