#!/usr/bin/env bash
# slurmbridge on kind, with real kubelets and hybrid nodes, on a machine with Docker (as root
# on Debian it installs and starts the engine itself) and without any image registry.
#   deploy/kind/up.sh          create (or reuse) everything, run the demo pods, print the table
#   deploy/kind/up.sh down     delete the kind cluster and the Slurm controller container
#   deploy/kind/up.sh env      print KUBECONFIG, Slurm URL, token file, ... (KEY=VALUE)
#   deploy/kind/up.sh demo-clean   remove the demo's pods and native job (tests/kind want idle nodes)
#   deploy/kind/up.sh build    only build what `up` needs (tools and images), start nothing
#   deploy/kind/up.sh install [extra helm flags...]   only helm upgrade --install the bridge
#     (on a cluster `up` made; SLURMBRIDGE_KIND_CHART and SLURMBRIDGE_IMAGE pick another chart
#     directory and image, e.g. an older release's: tests/kind/test_upgrade.py)
#   deploy/kind/up.sh demo     only run the demo pods (and the native job) on the installed bridge
# Steps: Docker engine → kind (built from sigs.k8s.io/kind) and the node image
# (deploy/kind/node-image.sh: control plane $KIND_K8S_VERSION, kubelet $KIND_KUBELET_VERSION,
# containerd, slurmd 26.05) → kind
# cluster (deploy/kind/cluster.yaml: 1 control plane + 2 hybrid workers + 1 without slurmd) → Slurm controller container
# (slurmctld + slurmrestd, deploy/kind/slurmctld.sh) on kind's network → slurmd on each worker,
# registered with it (the Slurm node and the Kubernetes node are one host, same name) → the
# DRA GPU driver (deploy/kind/dra: each worker's GPUs as DRA devices, index = Slurm's) → bridge
# image built and loaded into kind → JWT Secret → helm install of deploy/helm/slurmbridge (its
# own RBAC; the second kube-scheduler, the extender and the webhook as pods) → demo pods next to
# a native sbatch job → the pod ↔ job table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" kind

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="${KIND_CLUSTER:-slurmbridge}"
K8S_VERSION="${KIND_K8S_VERSION:-1.37.2}"   # the control plane's; kubelets: node-image.sh
HELM_VERSION="${HELM_VERSION:-3.22.0}"
NAMESPACE="${SLURMBRIDGE_NAMESPACE:-slurmbridge-system}"
RELEASE="${SLURMBRIDGE_RELEASE:-slurmbridge}"
IMAGE="${SLURMBRIDGE_IMAGE:-slurmbridge:dev}"
CHART="${SLURMBRIDGE_KIND_CHART:-$repo/deploy/helm/slurmbridge}"
DEMO_NS="${SLURMBRIDGE_DEMO_NAMESPACE:-slurm-demo}"
REST_PORT="${KIND_SLURM_REST_PORT:-6850}"   # slurmrestd on 127.0.0.1, clear of the chroot clusters' ports
STATE="$CACHE/kind/$CLUSTER"
KUBECONFIG="${KIND_KUBECONFIG:-$STATE/kubeconfig}"
SLURM="$CLUSTER-slurm"                        # the Slurm controller container
SLURM_IMAGE=slurmbridge/slurm-dev:sid          # deploy/slurm/Dockerfile (slurmctld, slurmrestd, JWT)
export KUBECONFIG
log() { echo "[kind] $(date +%T) $*" >&2; }   # the prelude's, with the time: steps take minutes

tools() {
  local kind_bin k8s_bin
  kind_bin="$(bash "$here/kind.sh")"
  k8s_bin="$(K8S_VERSION="$K8S_VERSION" K8S_TOOLS=kubectl HELM_VERSION="$HELM_VERSION" bash "$repo/deploy/k8s/build.sh")"
  export PATH="$kind_bin:$k8s_bin:$CACHE/helm-$HELM_VERSION/bin:$PATH"
}

# Workers with slurmd (hybrid), and those without (cluster.yaml's kind.slurmbridge.io/slurmd=false:
# the tests make them EXTERNAL Slurm nodes).  Node name = container name.
workers() { kubectl get nodes -l '!node-role.kubernetes.io/control-plane,kind.slurmbridge.io/slurmd!=false' -o name | sed 's|^node/||' | sort -V; }
external_workers() { kubectl get nodes -l 'kind.slurmbridge.io/slurmd=false' -o name | sed 's|^node/||' | sort -V; }
slurm_ip() { docker inspect -f '{{with index .NetworkSettings.Networks "kind"}}{{.IPAddress}}{{end}}' "$SLURM" 2>/dev/null; }

env_out() {
  cat <<ENV
KUBECONFIG=$KUBECONFIG
KIND_CLUSTER=$CLUSTER
SLURMBRIDGE_KIND_SLURM_CONTAINER=$SLURM
SLURMBRIDGE_KIND_SLURM_URL=http://127.0.0.1:$REST_PORT
SLURMBRIDGE_KIND_TOKEN_FILE=$STATE/slurm/token/token
SLURMBRIDGE_KIND_NAMESPACE=$NAMESPACE
SLURMBRIDGE_KIND_RELEASE=$RELEASE
ENV
}

down() {
  tools
  kind delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" || true
  docker rm -f "$SLURM" >/dev/null 2>&1 || true
}

node_images() {
  NODE_IMAGE="$(bash "$here/node-image.sh")"
  # The pause image the node's kubeadm names: the demo's containers run it.
  PAUSE_IMAGE="$(docker image inspect -f '{{index .Config.Labels "slurmbridge.pause"}}' "$NODE_IMAGE")"
}

# Every image `up` runs, built here (each cached; an unchanged recipe rebuilds nothing).
build() {
  bash "$repo/deploy/docker/engine.sh"
  bash "$repo/deploy/docker/privileged.sh"
  tools
  node_images
  if ! docker image inspect "$SLURM_IMAGE" >/dev/null 2>&1; then
    log "building $SLURM_IMAGE (deploy/slurm/Dockerfile)"
    docker build -q --build-arg BASE="$(bash "$repo/deploy/docker/base-image.sh" sid)" \
      -t "$SLURM_IMAGE" "$repo/deploy/slurm" >/dev/null
  fi
  bash "$repo/deploy/images/build.sh" "$IMAGE" >/dev/null
  DRA_IMAGE="$(bash "$here/dra/build.sh")"
}

create_cluster() {
  local node_image="$NODE_IMAGE"
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    local stopped image_id
    image_id="$(docker image inspect -f '{{.Id}}' "$node_image")"
    # Stopped nodes, or nodes of an older node image (its recipe changed since).
    stopped="$(kind get nodes --name "$CLUSTER" | xargs docker inspect -f '{{.Name}} {{.State.Running}} {{.Image}}' \
      | grep -v " true $image_id\$" || true)"
    # Made from another cluster.yaml (its nodes, labels, containerd settings): not this one.
    [[ "$(cat "$STATE/cluster.yaml.sha256" 2>/dev/null)" == "$(sha256sum < "$here/cluster.yaml")" ]] \
      || stopped+=" made from another cluster.yaml"
    if [[ -z "$stopped" ]]; then
      kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1
      # Nodes restarted with the engine may come back broken (e.g. other addresses).
      if kubectl wait --for=condition=Ready nodes --all --timeout=120s >/dev/null 2>&1; then
        log "kind cluster $CLUSTER exists"
        return
      fi
      stopped="nodes not Ready"
    fi
    log "kind cluster $CLUSTER is not usable (${stopped//$'\n'/, }): creating it again"
    kind delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" >/dev/null
  fi
  log "creating kind cluster $CLUSTER from $node_image (deploy/kind/cluster.yaml: 1 control plane + 3 workers)"
  mkdir -p "$STATE"
  rm -f "$STATE/cluster.yaml.sha256"
  kind create cluster --name "$CLUSTER" --config "$here/cluster.yaml" --image "$node_image" \
    --kubeconfig "$KUBECONFIG" --wait 5m
  sha256sum < "$here/cluster.yaml" > "$STATE/cluster.yaml.sha256"
}

# The Slurm controller on kind's network; its node list is the kind workers.
start_slurm() {
  local nodes external config; nodes="$(workers | xargs)"; external="$(external_workers | xargs)"
  [[ -n "$nodes" ]] || die "no kind workers found for cluster $CLUSTER"
  # The container is made again when its nodes or its scripts change, or the cluster was made
  # again (its state holds the old nodes' addresses and jobs).
  config="$(cat "$here/slurmctld.sh" "$repo/deploy/slurm/recipe.sh" | sha256sum | cut -c1-12) $nodes / $external"
  config+=" cluster $(docker inspect -f '{{.Id}}' "$CLUSTER-control-plane" | cut -c1-12)"
  mkdir -p "$STATE/slurm/keys" "$STATE/slurm/token"
  [[ -s "$STATE/slurm/keys/slurm.key" ]] || head -c 1024 /dev/urandom > "$STATE/slurm/keys/slurm.key"
  [[ -s "$STATE/slurm/keys/jwt_hs256.key" ]] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/slurm/keys/jwt_hs256.key"
  if [[ "$(docker inspect -f '{{.State.Running}} {{index .Config.Labels "slurmbridge.config"}}' "$SLURM" 2>/dev/null)" != "true $config" ]]; then
    docker rm -f "$SLURM" >/dev/null 2>&1 || true
    rm -f "$STATE/slurm/token/token"
    log "starting the Slurm controller $SLURM for nodes: $nodes (without slurmd: ${external:-none})"
    docker run -d --name "$SLURM" --hostname "$SLURM" --network kind --init \
      --label "slurmbridge.config=$config" -e "SLURM_NODES=$nodes" -e "EXTERNAL_NODES=$external" \
      -p "127.0.0.1:$REST_PORT:6820" \
      -v "$here/slurmctld.sh:/usr/local/sbin/kind-slurmctld:ro" \
      -v "$repo/deploy/slurm/recipe.sh:/usr/local/sbin/slurmbridge-recipe:ro" \
      -v "$STATE/slurm/keys:/keys:ro" -v "$STATE/slurm/token:/var/lib/slurmbridge" \
      --entrypoint /usr/local/sbin/kind-slurmctld "$SLURM_IMAGE" run >/dev/null
  fi
  for _ in $(seq 1 60); do [[ -s "$STATE/slurm/token/token" ]] && break; sleep 1; done
  [[ -s "$STATE/slurm/token/token" ]] || { docker logs "$SLURM" | tail -n 20 >&2; die "the Slurm controller did not come up"; }
}

# slurmd on each worker, configless from the controller: same key, same node name.
start_slurmd() {
  local node
  for node in $(workers); do
    docker cp "$STATE/slurm/keys/slurm.key" "$node:/etc/slurm/slurm.key"
    docker exec "$node" bash -euc "
      chown slurm:slurm /etc/slurm/slurm.key; chmod 600 /etc/slurm/slurm.key
      printf 'SLURM_CONF_SERVER=$SLURM:6817\nSLURMD_OPTIONS=\n' > /etc/default/slurmbridge-slurmd
      systemctl enable slurmbridge-slurmd >/dev/null 2>&1
      systemctl restart slurmbridge-slurmd"
  done
  local want; want="$(workers | wc -l)"
  for _ in $(seq 1 60); do
    [[ "$(docker exec "$SLURM" sinfo -h -N -o '%N %t' | awk '$2 ~ /^(idle|mix|alloc)/' | wc -l)" -ge "$want" ]] && break
    sleep 1
  done
  docker exec "$SLURM" sinfo -N -o '%N %t %c %m %G' >&2
  [[ "$(docker exec "$SLURM" sinfo -h -N -o '%N %t' | awk '$2 ~ /^(idle|mix|alloc)/' | wc -l)" -ge "$want" ]] \
    || die "not every worker's slurmd registered (docker exec <worker> journalctl -u slurmbridge-slurmd)"
}

# Images into every node that lacks them.  kind load checks for an image with crictl, which
# these nodes lack: check with ctr.
load_images() {
  local node image missing=()
  for node in $(kind get nodes --name "$CLUSTER"); do
    for image in "$@"; do
      [[ "$image" == */* ]] || image="library/$image"
      docker exec "$node" ctr -n k8s.io images ls -q | grep -qx "docker.io/$image" || { missing+=("$node"); break; }
    done
  done
  if (( ${#missing[@]} )); then
    kind load docker-image "$@" --name "$CLUSTER" --nodes "$(IFS=,; echo "${missing[*]}")" >/dev/null
  fi
}

# The DRA GPU driver (deploy/kind/dra): each worker's GPUs, as its gres.conf declares them.
install_dra() {
  log "installing the DRA GPU driver ($DRA_IMAGE)"
  load_images "$DRA_IMAGE"
  sed "s|DRA_IMAGE|$DRA_IMAGE|" "$here/dra/driver.yaml" | kubectl apply -f - >/dev/null
  kubectl -n slurmbridge-dra rollout status daemonset/dra-gpu-plugin --timeout=180s >/dev/null \
    || die "the DRA GPU driver did not start (kubectl -n slurmbridge-dra logs daemonset/dra-gpu-plugin)"
  local node
  for node in $(kubectl get nodes -l kind.slurmbridge.io/gpus -o jsonpath='{.items[*].metadata.name}'); do
    dra_published "$node" 20 && continue
    # A Node deleted and registered again lost its ResourceSlices with it (they are owned by
    # the Node), and the plugin there does not notice: restart it.
    log "restarting the DRA GPU plugin on $node (its ResourceSlices are gone)"
    kubectl -n slurmbridge-dra delete pod -l app=dra-gpu-plugin \
      --field-selector "spec.nodeName=$node" --wait=true >/dev/null
    dra_published "$node" 90 \
      || die "the DRA GPU driver publishes no devices on $node (kubectl get resourceslices)"
  done
}

# Whether $1's ResourceSlices of the kind driver appear within $2 seconds.
dra_published() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    [[ -n "$(kubectl get resourceslices -o name \
      --field-selector "spec.nodeName=$1,spec.driver=gpu.example.com")" ]] && return 0
    sleep 1
  done
  return 1
}

install_bridge() {
  log "loading $IMAGE into kind"
  # Also tagged by content: a rebuilt image changes the chart's pods, so helm rolls them.
  local tagged; tagged="${IMAGE%:*}:$(docker image inspect "$IMAGE" --format '{{.Id}}' | cut -c8-19)"
  docker tag "$IMAGE" "$tagged"
  load_images "$tagged" "$IMAGE"   # $IMAGE too: the tests' containers run it
  kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$NAMESPACE" create secret generic slurmbridge-slurm-jwt \
    --from-file=token="$STATE/slurm/token/token" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # Slurm's nodes, as docs/install.md has an admin mark them (a kubelet cannot set this label).
  # managedNodes below: what else runs on them, the DaemonSets of every node (CNI, kube-proxy,
  # the DRA driver) and the driver's own check (tests/kind/test_dra_driver.py: a pod of the
  # default scheduler with a claim, from namespace kind-driver-check).
  kubectl label node -l kind.slurmbridge.io/gpus --overwrite \
    node-restriction.kubernetes.io/slurmbridge-managed=true >/dev/null
  log "helm upgrade --install $RELEASE (slurmrestd http://$(slurm_ip):6820, kube-scheduler v$K8S_VERSION)"
  helm upgrade --install "$RELEASE" "$CHART" \
    --namespace "$NAMESPACE" \
    --set image.repository="${tagged%:*}" --set-string image.tag="${tagged##*:}" --set image.pullPolicy=Never \
    --set slurm.url="http://$(slurm_ip):6820" --set slurm.user=slurm \
    --set scheduler.image.tag="v$K8S_VERSION" \
    --set "admission.enrolledNamespaces={$DEMO_NS}" \
    --set-json 'tenancy.default={}' \
    --set-json 'deviceClasses={"gpu.example.com": {}}' \
    --set-json 'managedNodes.daemonSets=["kube-system/kube-proxy","kube-system/kindnet","slurmbridge-dra/dra-gpu-plugin"]' \
    --set-json 'managedNodes.serviceAccounts=["kind-driver-check/default"]' \
    "$@" --wait --timeout 5m >/dev/null
  demo_namespace
  wait_admission
}

demo_namespace() {
  kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# helm's --wait ends when the webhook's pods are Ready; the Service rules on the nodes follow
# a moment later.  Until a pod is admitted the demo's would be refused: wait for one.
wait_admission() {
  local err
  for _ in $(seq 1 60); do
    err="$(kubectl -n "$DEMO_NS" run admission-probe --image="$PAUSE_IMAGE" --restart=Never \
      --dry-run=server -o name 2>&1 >/dev/null)" && return
    sleep 1
  done
  die "the admission webhook refuses pods after 60 s: $err"
}

# As deploy/demo: a native job holding 2 of a worker's 4 GPUs, and next to it demo.py's pods: a
# CPU pod, a GPU pod and a 2-pod group (one GPU on each worker).  Re-running keeps the pods
# that exist.
demo() {
  local first; first="$(workers | head -n 1)"
  if ! docker exec "$SLURM" squeue -h -n native-gpu-training -o %i | grep -q .; then
    docker exec "$SLURM" sbatch --parsable -J native-gpu-training --gres=gpu:2 -c 2 -w "$first" \
      -o /dev/null --wrap 'sleep 3600' >/dev/null
  fi
  # A group name of its own each run: a group created again under an ended group's name,
  # while Slurm still lists that job (MinJobAge), is tied to it (bridge bug, reported).
  local group; group="allreduce-$(date +%H%M%S)"
  # The pods of deploy/demo/demo.py (its kind-manifests: sized for these workers).  create, not
  # apply: the webhook rewrote the existing pods' GPU requests.
  local python manifests err
  python="$(bash "$repo/deploy/dev/install.sh")/python"
  manifests="$(PYTHONPATH="$repo" "$python" "$repo/deploy/demo/demo.py" kind-manifests "$PAUSE_IMAGE" "$group")"
  err="$(kubectl -n "$DEMO_NS" create -f - 2>&1 >/dev/null <<< "$manifests")" \
    || { grep -v AlreadyExists <<< "$err" >&2 && die "could not create the demo pods"; }
  kubectl -n "$DEMO_NS" wait --for=condition=Ready pod --all --timeout=180s >/dev/null \
    || { kubectl -n "$DEMO_NS" get pods -o wide >&2; die "demo pods did not start"; }
  echo
  echo "\$ kubectl -n $DEMO_NS get pods -o wide"
  kubectl -n "$DEMO_NS" get pods -o wide
  echo
  echo "\$ slurmbridge status        (in the extender pod)"
  kubectl -n "$NAMESPACE" exec "deploy/$RELEASE-extender" -- slurmbridge --log-level warning status
  echo
  echo "\$ squeue"
  docker exec "$SLURM" squeue -o '%.6i %.34j %.9T %.40N %.12b'
  echo "\$ scontrol show job -d (GPU indices per job)"
  docker exec "$SLURM" scontrol show job -d -o | awk '/JobState=RUNNING/ {
    id = name = nodes = gres = ""
    for (i = 1; i <= NF; i++) {
      if ($i ~ /^JobId=/) id = substr($i, 7)
      else if ($i ~ /^JobName=/) name = substr($i, 9)
      else if ($i ~ /^NodeList=/) nodes = substr($i, 10)
      else if ($i ~ /^Nodes=/) node = substr($i, 7)
      else if ($i ~ /^GRES=./) gres = gres " " node ":" substr($i, 6)
    }
    printf "  %5s %-34s %-40s %s\n", id, name, nodes, (gres == "" ? " -" : gres) }'
}

up() {
  local t0=$SECONDS
  build
  create_cluster
  start_slurm
  start_slurmd
  install_dra
  install_bridge "$@"
  demo
  cat <<DONE

slurmbridge is up on kind-$CLUSTER ($((SECONDS - t0)) s).
  export KUBECONFIG=$KUBECONFIG
  kubectl -n $DEMO_NS run demo --image=$PAUSE_IMAGE --restart=Never   # placed by Slurm
  docker exec $SLURM squeue                                                      # its job k8s:$DEMO_NS/demo
  bash $0 down                                                                    # remove it all
DONE
}

# The kind tests want idle nodes: remove the demo's pods and its native job.
demo_clean() {
  tools
  kubectl delete namespace "$DEMO_NS" --ignore-not-found --wait=true --timeout=120s >/dev/null
  docker exec "$SLURM" scancel -n native-gpu-training 2>/dev/null || true
  for _ in $(seq 1 60); do
    [[ -z "$(docker exec "$SLURM" squeue -h -o %i 2>/dev/null)" ]] && return; sleep 1
  done
  docker exec "$SLURM" squeue >&2; die "Slurm jobs left after removing the demo"
}

case "${1:-up}" in
  up) shift || true; up "$@" ;;
  build) build ;;
  install) shift; tools; node_images; install_bridge "$@" ;;
  demo) tools; node_images; demo_namespace; demo ;;
  down) down ;;
  env) env_out ;;
  demo-clean) demo_clean ;;
  *) echo "usage: $0 [up [extra helm flags...]] | build | install [extra helm flags...] | demo | down | env | demo-clean" >&2; exit 2 ;;
esac
