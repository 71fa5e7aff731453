#!/bin/bash
# Pod networking for the kind cluster, in the manner of kind's kindnetd (whose source is not
# published as a Go module): every node gets a ptp + host-local CNI config for its own
# podCIDR, and a route to every other node's podCIDR through that node's address on the
# Docker network.  Pods reaching beyond the cluster (the Slurm container) are masqueraded
# by ptp's ipMasq.  Runs as a DaemonSet (host network, NET_ADMIN), re-checks every 10 s.
set -uo pipefail

: "${NODE_NAME:?}" "${CONTROL_PLANE_ENDPOINT:?}"
sa=/var/run/secrets/kubernetes.io/serviceaccount
# The API server directly (kube-proxy may not be up yet), with the service account's token
# file, which client-go re-reads as kubelet rotates it.
export KUBECONFIG=/tmp/kind-net.kubeconfig
cat > "$KUBECONFIG" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "https://$CONTROL_PLANE_ENDPOINT", certificate-authority: $sa/ca.crt}}]
users: [{name: kind-net, user: {tokenFile: $sa/token}}]
contexts: [{name: kind, context: {cluster: kind, user: kind-net}}]
current-context: kind
KUBECONFIG
conf=/etc/cni/net.d/10-kindnet.conflist
trap 'exit 0' TERM INT   # PID 1 of its container: no default action on SIGTERM

write_conf() {
  local cidr="$1" want
  want=$(cat <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kindnet",
  "plugins": [
    {"type": "ptp", "ipMasq": true, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
              "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "$cidr"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
)
  [[ -f "$conf" && "$(cat "$conf")" == "$want" ]] && return
  printf '%s\n' "$want" > "$conf.tmp" && mv "$conf.tmp" "$conf"
  echo "wrote $conf for $cidr"
}

while true; do
  nodes=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}') || { sleep 2; continue; }
  while read -r name cidr addr; do
    [[ -n "$cidr" && -n "$addr" ]] || continue
    if [[ "$name" == "$NODE_NAME" ]]; then
      write_conf "$cidr"
    elif ! ip route show "$cidr" | grep -q "via $addr "; then
      ip route replace "$cidr" via "$addr" && echo "route $cidr via $addr ($name)"
    fi
  done <<< "$nodes"
  sleep 10 & wait $!
done
