#!/usr/bin/env bash
# Build the kind node image without any image registry; prints its name.
#   deploy/kind/node-image.sh            build (or reuse) slurmbridge/kind-node:v$KIND_K8S_VERSION-kubelet-v$KIND_KUBELET_VERSION
# What goes in, all built here:
#   - kubeadm, kubectl and the control-plane commands from k8s.io/kubernetes
#     (deploy/k8s/build.sh, its wrapper module) at KIND_K8S_VERSION (default 1.37.2: the host
#     control plane's, so they are built once for both clusters);
#   - kubelet at KIND_KUBELET_VERSION (default 1.36.3): one minor older, as every node runs
#     during an upgrade (the version-skew policy allows kubelets three minors behind), so the
#     tests cover two minors while building only one binary of the second;
#   - the images kubeadm runs (`kubeadm config images list`): kube-apiserver,
#     kube-controller-manager, kube-scheduler (static binaries in an empty image), kube-proxy
#     (Debian + nftables), etcd and coredns at the versions kubeadm names, built from their Go
#     modules, pause compiled from k8s.io/kubernetes's build/pause/linux/pause.c;
#   - kind-net (images/kind-net.sh), the pod network, in place of kind's kindnetd;
#   - the node itself: kind's node base files from the sigs.k8s.io/kind module on Debian
#     trixie, containerd/runc/CNI plugins from Debian, slurmd 26.05 from Debian sid (node/).
# The images are imported into the node's containerd and committed, as `kind build
# node-image` does.  Cached: Go builds under the cache folder, the image in the engine,
# stamped with this recipe's files (a change rebuilds; the Docker layer cache keeps it quick).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" node-image

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="${KIND_K8S_VERSION:-1.37.2}"
KUBELET_VERSION="${KIND_KUBELET_VERSION:-1.36.3}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
IMAGE="${KIND_NODE_IMAGE:-slurmbridge/kind-node:v$K8S_VERSION-kubelet-v$KUBELET_VERSION}"
work="$CACHE/kind/node-$K8S_VERSION"
tools="$CACHE/kind/tools"
source "$(dirname "${BASH_SOURCE[0]}")/../dev/go.sh"   # Go new enough for Kubernetes
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}"

stamp="$( (echo "$K8S_VERSION $KUBELET_VERSION $KIND_VERSION"; cd "$here" && find node images node-image.sh -type f | sort | xargs sha256sum) \
  | sha256sum | cut -c1-12)"
if docker image inspect "$IMAGE" --format '{{index .Config.Labels "slurmbridge.stamp"}}' 2>/dev/null | grep -qx "$stamp"; then
  echo "$IMAGE"; exit 0
fi

bash "$repo/deploy/docker/engine.sh"
bash "$repo/deploy/docker/privileged.sh"
base="$(bash "$repo/deploy/docker/base-image.sh" trixie)"
mkdir -p "$work" "$tools"

# --- binaries -----------------------------------------------------------------

bin="$(K8S_VERSION="$K8S_VERSION" WITH_HELM=0 \
  K8S_TOOLS="kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy" \
  bash "$repo/deploy/k8s/build.sh")"
kubelet_bin="$(K8S_VERSION="$KUBELET_VERSION" WITH_HELM=0 K8S_TOOLS=kubelet bash "$repo/deploy/k8s/build.sh")"
module_dir() { go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'; }
kind_src="$(module_dir "sigs.k8s.io/kind@$KIND_VERSION")"
k8s_src="$(module_dir "k8s.io/kubernetes@v$K8S_VERSION")"

# The images this kubeadm deploys, e.g. registry.k8s.io/etcd:3.6.8-0.
mapfile -t wanted < <("$bin/kubeadm" config images list --kubernetes-version "v$K8S_VERSION")
ref_of() { printf '%s\n' "${wanted[@]}" | grep -E "/$1:" || die "kubeadm lists no $1 image"; }
tag_of() { local r; r="$(ref_of "$1")"; echo "${r##*:}"; }

# go_tool NAME MODULE VERSION: a main package built from its module (wrapper module, so
# replace/exclude directives in the tool's own go.mod do not matter), cached by version.
go_tool() {
  local name="$1" module="$2" version="$3" dir="$tools/$1-$3"
  if [[ ! -x "$dir/$name" ]]; then
    log "building $name $version from $module (first run: a few minutes)"
    mkdir -p "$dir/src"
    (
      cd "$dir/src"
      [[ -f go.mod ]] || printf 'module slurmbridge.local/%sbuild\n\ngo 1.25\n' "$name" > go.mod
      printf '//go:build tools\n\npackage build\n\nimport _ "%s"\n' "$module" > tools.go
      go mod edit -require="$module@$version"
      go mod tidy >&2
      nice go build -trimpath -ldflags "-s -w" -o "$dir/$name.tmp" "$module"
    )
    mv "$dir/$name.tmp" "$dir/$name"
  fi
  echo "$dir/$name"
}
etcd_tag="$(tag_of etcd)"; coredns_tag="$(tag_of coredns)"; pause_tag="$(tag_of pause)"
etcd="$(go_tool etcd go.etcd.io/etcd/server/v3 "v${etcd_tag%-*}")"
coredns="$(go_tool coredns github.com/coredns/coredns "$coredns_tag")"
pause="$tools/pause-$pause_tag/pause"
if [[ ! -x "$pause" ]]; then
  command -v gcc >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }
  mkdir -p "$(dirname "$pause")"
  gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag" -o "$pause.tmp" "$k8s_src/build/pause/linux/pause.c"
  mv "$pause.tmp" "$pause"
fi

# --- component images -----------------------------------------------------------

# static_image REF PATH-IN-IMAGE BINARY [ENTRYPOINT]: one static program, nothing else.
static_image() {
  local ref="$1" dest="$2" binary="$3" entry="${4:-}" root
  root="$(mktemp -d)"
  install -D -m 0755 "$binary" "$root$dest"
  mkdir -p "$root/tmp" "$root/etc/ssl/certs"; chmod 1777 "$root/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/" 2>/dev/null || true
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' > "$root/etc/passwd"
  local changes=(--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' --change "LABEL slurmbridge.stamp=$stamp")
  [[ -n "$entry" ]] && changes+=(--change "ENTRYPOINT [\"$entry\"]")
  tar -C "$root" -c . | docker import "${changes[@]}" - "$ref" >/dev/null
  rm -rf "$root"
}

log "component images for Kubernetes v$K8S_VERSION"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  static_image "$(ref_of "$c")" "/usr/local/bin/$c" "$bin/$c"
done
static_image "$(ref_of etcd)" /usr/local/bin/etcd "$etcd"
static_image "$(ref_of coredns)" /coredns "$coredns" /coredns
static_image "$(ref_of pause)" /pause "$pause" /pause
ctx="$(mktemp -d)"; trap 'rm -rf "$ctx"' EXIT
cp "$bin/kube-proxy" "$ctx/"
docker build -q --build-arg BASE="$base" -f "$here/images/kube-proxy.Dockerfile" -t "$(ref_of kube-proxy)" "$ctx" >/dev/null
net_tag="$(cd "$here/images" && cat kind-net.sh kind-net.Dockerfile | sha256sum | cut -c1-12)"
net_ref="docker.io/slurmbridge/kind-net:$net_tag"
rm -rf "${ctx:?}"/*; cp "$bin/kubectl" "$here/images/kind-net.sh" "$ctx/"
docker build -q --build-arg BASE="$base" -f "$here/images/kind-net.Dockerfile" -t "$net_ref" "$ctx" >/dev/null
log "saving ${#wanted[@]} kubeadm images + kind-net"
docker save -o "$work/images.tar" "${wanted[@]}" "$net_ref"

# --- node image ---------------------------------------------------------------------

rm -rf "${ctx:?}"/*; mkdir -p "$ctx/files" "$ctx/bin"
cp -r "$kind_src/images/base/files/." "$ctx/files/"
cp -r "$here/node/files/." "$ctx/files/"
chmod -R u+w "$ctx/files"
sed -i "s#KIND_NET_TAG#$net_tag#" "$ctx/files/kind/manifests/default-cni.yaml"
# restrict_oom_score_adj: the node cannot lower an OOM score (no CAP_SYS_RESOURCE on these
# hosts, see deploy/docker/privileged.sh); unrestricted, runc fails every pod sandbox with
# "can't get final child's PID from pipe: EOF".  Restricted, containerd keeps pods' scores at
# or above its own, as kind does for rootless nodes.
sed -i -e "s#sandbox_image = .*#sandbox_image = \"$(ref_of pause)\"#" \
  -e "s#restrict_oom_score_adj = false#restrict_oom_score_adj = true#" "$ctx/files/etc/containerd/config.toml"
cp "$kubelet_bin/kubelet" "$bin/kubeadm" "$bin/kubectl" "$ctx/bin/"
log "building the node image (Debian trixie + kind base + containerd + slurmd)"
docker build --build-arg BASE="$base" --build-arg K8S_VERSION="$K8S_VERSION" \
  -f "$here/node/Dockerfile" -t "$IMAGE-build" "$ctx" > "$work/docker-build.log" 2>&1 \
  || { tail -n 30 "$work/docker-build.log" >&2; die "node image build failed (log: $work/docker-build.log)"; }

log "importing the images into the node's containerd"
cid="$(docker run -d --privileged --entrypoint sleep "$IMAGE-build" infinity)"
trap 'docker rm -f "$cid" >/dev/null 2>&1 || true; rm -rf "$ctx"' EXIT
docker cp "$work/images.tar" "$cid:/kind/images.tar"
docker exec "$cid" bash -euc '
  containerd >/tmp/containerd.log 2>&1 &
  for _ in $(seq 1 50); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr -n k8s.io images import --all-platforms --no-unpack /kind/images.tar >/dev/null
  ctr -n k8s.io images ls -q | grep -v "^sha256:" | sort
  kill %1; wait || true
  rm -f /kind/images.tar' >&2
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
  --change "LABEL slurmbridge.stamp=$stamp" --change "LABEL slurmbridge.pause=$(ref_of pause)" \
  "$cid" "$IMAGE" >/dev/null
docker rmi "$IMAGE-build" >/dev/null 2>&1 || true
log "built $IMAGE"
echo "$IMAGE"
