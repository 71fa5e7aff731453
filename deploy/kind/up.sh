#!/usr/bin/env bash
# slurmbridge on kind with the dockerized Slurm cluster, for machines with Docker.
#   deploy/kind/up.sh          create (or reuse) everything; idempotent
#   deploy/kind/up.sh down     delete the kind cluster and stop the Slurm container
# Steps: kind cluster (deploy/kind/cluster.yaml) → dockerized Slurm (deploy/slurm/compose.yaml)
# joined to kind's Docker network → bridge image built and loaded into kind → JWT Secret →
# helm upgrade --install of deploy/helm/slurmbridge → a demo namespace enrolled.
# Needs: docker (with compose v2), kind, kubectl, helm.  Untested on the project's machines
# (no Docker engine there); every piece it installs is tested there another way.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${KIND_CLUSTER:-slurmbridge}"
NAMESPACE="${SLURMBRIDGE_NAMESPACE:-slurmbridge-system}"
RELEASE="${SLURMBRIDGE_RELEASE:-slurmbridge}"
IMAGE="${SLURMBRIDGE_IMAGE:-slurmbridge:dev}"
DEMO_NS="${SLURMBRIDGE_DEMO_NAMESPACE:-slurm-demo}"
TOKEN_DIR="${SLURMBRIDGE_DOCKER_TOKEN_DIR:-/tmp/slurmbridge-docker}"
SLURM_CONTAINER=slurmbridge-slurm
compose=(docker compose -f "$repo/deploy/slurm/compose.yaml")
kubectl=(kubectl --context "kind-$CLUSTER")

log() { echo "[kind] $*" >&2; }
die() { echo "[kind] error: $*" >&2; exit 1; }

need() { for c in "$@"; do command -v "$c" >/dev/null || die "$c is missing"; done; }

down() {
  kind delete cluster --name "$CLUSTER" || true
  "${compose[@]}" down || true
}

up() {
  need docker kind kubectl helm
  docker compose version >/dev/null 2>&1 || die "docker compose (v2) is missing"

  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "kind cluster $CLUSTER exists"
  else
    log "creating kind cluster $CLUSTER (1 control plane + 4 managed workers)"
    kind create cluster --name "$CLUSTER" --config "$repo/deploy/kind/cluster.yaml" \
      ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
  fi
  # Make sure of the labels and taints even if this kind version ignored part of the config.
  local k=1 node
  for node in $("${kubectl[@]}" get nodes -o name | grep -- '-worker' | sort -V); do
    "${kubectl[@]}" label --overwrite "$node" "slurmbridge.io/slurm-node=node$k" >/dev/null
    "${kubectl[@]}" taint --overwrite "$node" slurmbridge.io/managed=true:NoSchedule >/dev/null
    k=$((k + 1))
  done
  "${kubectl[@]}" taint nodes -l node-role.kubernetes.io/control-plane \
    node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true

  log "starting the dockerized Slurm cluster"
  mkdir -p "$TOKEN_DIR"
  SLURMBRIDGE_DOCKER_TOKEN_DIR="$TOKEN_DIR" "${compose[@]}" up -d --build --wait
  docker network connect kind "$SLURM_CONTAINER" 2>/dev/null || true
  local slurm_ip
  slurm_ip="$(docker inspect -f '{{with index .NetworkSettings.Networks "kind"}}{{.IPAddress}}{{end}}' "$SLURM_CONTAINER")"
  [[ -n "$slurm_ip" ]] || die "$SLURM_CONTAINER has no address on the kind network"
  [[ -s "$TOKEN_DIR/token" ]] || die "no JWT in $TOKEN_DIR/token (docker logs $SLURM_CONTAINER)"
  log "slurmrestd for the pods: http://$slurm_ip:6820"

  log "building $IMAGE and loading it into kind"
  docker build -f "$repo/deploy/images/bridge.Dockerfile" -t "$IMAGE" "$repo"
  kind load docker-image "$IMAGE" --name "$CLUSTER"

  "${kubectl[@]}" create namespace "$NAMESPACE" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
  "${kubectl[@]}" -n "$NAMESPACE" create secret generic slurmbridge-slurm-jwt \
    --from-file=token="$TOKEN_DIR/token" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null

  # kube-scheduler must not be newer than the API server: run the cluster's own version.
  local server_version
  server_version="$("${kubectl[@]}" version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"].split("+")[0])')"
  log "installing the chart (kube-scheduler $server_version)"
  helm upgrade --install "$RELEASE" "$repo/deploy/helm/slurmbridge" \
    --kube-context "kind-$CLUSTER" --namespace "$NAMESPACE" \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
    --set slurm.url="http://$slurm_ip:6820" --set slurm.user=slurm \
    --set scheduler.image.tag="$server_version" \
    --set "admission.enrolledNamespaces={$DEMO_NS}" \
    "$@" --wait --timeout 5m

  "${kubectl[@]}" create namespace "$DEMO_NS" --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
  cat <<DONE
slurmbridge is up on kind-$CLUSTER.
  ${kubectl[*]} -n $DEMO_NS run demo --image=busybox --restart=Never -- sleep 300
  ${kubectl[*]} -n $DEMO_NS get pod demo -o wide        # on the worker Slurm chose
  ${compose[*]} exec -T slurm squeue                   # its placeholder job k8s:$DEMO_NS/demo
The JWT in the Secret lasts 7 days: re-run $0 to refresh it.
DONE
}

case "${1:-up}" in
  up) shift || true; up "$@" ;;
  down) down ;;
  *) echo "usage: $0 [up [extra helm flags...]] | down" >&2; exit 2 ;;
esac
