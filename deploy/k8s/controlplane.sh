#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for tests and development:
# etcd (Debian's etcd-server) + kube-apiserver + kube-controller-manager +
# kube-scheduler, no kubelet.
#   controlplane.sh up                     start (idempotent: healthy -> nothing to do)
#   controlplane.sh down                   stop every process it started, drop cluster state
#   controlplane.sh env                    print KUBECONFIG, server URL, bin dir (KEY=VALUE)
#   controlplane.sh status                 one line per component: running/stopped
#   controlplane.sh scheduler NAME CONFIG  (re)start an extra kube-scheduler with a
#                                          KubeSchedulerConfiguration; prints its port
#   controlplane.sh stop-scheduler NAME    stop that extra scheduler
#   controlplane.sh release HOLDER         forget holder HOLDER (a PID given to `up` via
#                                          SLURMBRIDGE_CP_HOLDER); `down` when none is left.
#                                          An `up` without that variable holds it until `down`.
# Fixed ports (all 127.0.0.1, clear of Slurm's 6817-6830 and 7817-7830, below the
# ephemeral range): etcd 12379 (peer 12380), kube-apiserver 16443,
# kube-controller-manager 16457, default kube-scheduler 16459, extra schedulers
# 16460-16479.  State: $CACHE/k8s/run/.
# SLURMBRIDGE_CP_INSTANCE=N (0-9) runs another control plane beside it: every port + 100*N,
# state in $CACHE/k8s/run-N/ (tests/run.sh gives each e2e tier its own).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../dev/prelude.sh" k8s

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
BIN="$CACHE/k8s-$K8S_VERSION/bin"
INSTANCE="${SLURMBRIDGE_CP_INSTANCE:-0}"
[[ "$INSTANCE" =~ ^[0-9]$ ]] || { echo "[k8s] error: SLURMBRIDGE_CP_INSTANCE must be 0-9, not '$INSTANCE'" >&2; exit 2; }
shift_=$((100 * INSTANCE))
RUN="$CACHE/k8s/run"; (( INSTANCE )) && RUN+="-$INSTANCE"
PKI="$RUN/pki"
LOGS="$RUN/logs"
ETCD_PORT="${SLURMBRIDGE_ETCD_PORT:-$((12379 + shift_))}"
ETCD_PEER_PORT="${SLURMBRIDGE_ETCD_PEER_PORT:-$((12380 + shift_))}"
APISERVER_PORT="${SLURMBRIDGE_APISERVER_PORT:-$((16443 + shift_))}"
SCHEDULER_PORT="${SLURMBRIDGE_SCHEDULER_PORT:-$((16459 + shift_))}"
CONTROLLER_MANAGER_PORT="${SLURMBRIDGE_CONTROLLER_MANAGER_PORT:-$((16457 + shift_))}"
mapfile -t EXTRA_PORTS < <(seq "${SLURMBRIDGE_EXTRA_SCHEDULER_PORT_MIN:-$((16460 + shift_))}" "${SLURMBRIDGE_EXTRA_SCHEDULER_PORT_MAX:-$((16479 + shift_))}")
SERVER="https://127.0.0.1:$APISERVER_PORT"
SERVICE_CIDR="10.96.0.0/12"
ETCD_SUITE_VERSION=26.05   # the Slurm chroot (Debian sid) that carries etcd-server
READY_TIMEOUT="${SLURMBRIDGE_CP_TIMEOUT:-90}"
# klog verbosity of the extra kube-schedulers (the bridge's): 2 logs each attempt and why a pod
# waits ("Unable to schedule pod; no fit"), which a pending pod's diagnosis needs; 0 for timing.
SCHEDULER_VERBOSITY="${SLURMBRIDGE_SCHEDULER_VERBOSITY:-0}"
# The Workload API (Workload + PodGroup, pod spec.schedulingGroup; off by default) and the
# Job controller creating them for Jobs (alpha): on in every component, as a cluster would
# set them.  Same gate names in both minors (pkg/features/kube_features.go of each); the API
# version differs: 1.37 serves it as scheduling.k8s.io/v1beta1 (gate beta), 1.36 as
# v1alpha2 (gate alpha).  1.37 adds CompositePodGroup (alpha: a group of PodGroups, served
# as v1alpha3 only), which needs TopologyAwareWorkloadScheduling (alpha) beside GenericWorkload.
FEATURE_GATES="GenericWorkload=true,WorkloadWithJob=true"
K8S_MINOR="${K8S_VERSION#1.}"; K8S_MINOR="${K8S_MINOR%%.*}"
case "$K8S_MINOR" in
  37) FEATURE_GATES+=",TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"
      RUNTIME_CONFIG="scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true" ;;
  36) RUNTIME_CONFIG="scheduling.k8s.io/v1alpha2=true" ;;
  *) echo "[k8s] error: K8S_VERSION $K8S_VERSION: only 1.36.x and 1.37.x are set up here" >&2; exit 2 ;;
esac
# kube-controller-manager: the default set minus node-lifecycle-controller.  Nodes
# here are API objects without a kubelet: nobody renews their heartbeat Lease or
# status, so that controller would mark every node NotReady after
# --node-monitor-grace-period (50 s), taint it node.kubernetes.io/unreachable
# (NoSchedule: nothing schedules; NoExecute: taint-eviction deletes the pods).
CONTROLLERS="*,-node-lifecycle-controller"

# --- processes ---------------------------------------------------------------

pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }

# Alive and really ours: every component's command line names $RUN, which
# guards against a recycled PID.
alive() {
  local pid; pid="$(pid_of "$1")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$RUN"
}

# Running this K8S_VERSION's binary with today's feature gates (and, for the API server,
# today's --runtime-config): one started by an older version of this script, or from another
# version's bin directory, is restarted by `up` rather than kept.  Whole flag values compared:
# 1.36's gates are a prefix of 1.37's.
current() {
  local cmdline
  alive "$1" && cmdline="$(tr '\0' ' ' < "/proc/$(pid_of "$1")/cmdline")" \
    && [[ "$cmdline" == "$BIN/"* && "$cmdline" == *" --feature-gates $FEATURE_GATES "* ]] \
    && [[ "$1" != kube-apiserver || "$cmdline" == *" --runtime-config $RUNTIME_CONFIG "* ]]
}

STARTED=()   # components this invocation started: stopped again if it fails

# start NAME CMD...: detached, own session, stdout+stderr to $LOGS/NAME.log.  Every
# inherited descriptor above 2 is closed first: a lock held by a caller (our own run/.lock
# on fd 9, or `flock LOCK controlplane.sh up`) must not live on in the daemons.
start() {
  local name="$1"; shift
  mkdir -p "$LOGS"
  ( for fd in /proc/self/fd/*; do fd="${fd##*/}"; (( fd > 2 )) && eval "exec $fd>&-"; done
    exec setsid "$@" ) >"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
  STARTED+=("$name")
}

# EXIT trap: a failed start leaves nothing half-up behind (logs stay).
rollback() {
  local status=$? name
  (( status == 0 )) && return
  for name in "${STARTED[@]}"; do stop "$name"; done
  return "$status"
}

stop() {
  local name="$1" pid
  pid="$(pid_of "$name")"
  if [[ -n "$pid" ]] && alive "$name"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && { log "$name (pid $pid) ignored SIGTERM, killing"; kill -9 "$pid" 2>/dev/null || true; }
  fi
  rm -rf "$RUN/$name.pid" "$RUN/$name.port" "$RUN/$name.holder" "$RUN/$name-certs"
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# fail NAME WHAT: name the log and show its tail, the first thing anyone needs.
fail() {
  local log_file="$LOGS/$1.log"
  { echo "[k8s] error: $1 $2; log: $log_file"; tail -n 25 "$log_file" 2>/dev/null | sed 's/^/    /'; } >&2
  exit 1
}

# wait_ready NAME CHECK...: poll CHECK until it succeeds, the process dies or time runs out.
wait_ready() {
  local name="$1"; shift
  local deadline=$((SECONDS + READY_TIMEOUT))
  local pid status; pid="$(pid_of "$name")"
  until "$@"; do
    # The pid this script started, gone or a zombie (not alive(): until the starting
    # subshell has exec'd, its command line does not name $RUN yet).  Its exit status
    # says how it ended.
    if [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)" =~ ^(Z|X|)$ ]]; then
      wait "$pid" 2>/dev/null && status=0 || status=$?
      fail "$name" "exited during startup (exit status $status)"
    fi
    (( SECONDS < deadline )) || fail "$name" "not ready after ${READY_TIMEOUT}s"
    sleep 0.3
  done
}

# --- health ------------------------------------------------------------------

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_healthy() { curl -fsS --max-time 3 --cacert "$PKI/ca.crt" "$SERVER/readyz" >/dev/null 2>&1; }
# Schedulers serve a self-signed cert; /readyz is open to anonymous callers.
scheduler_healthy() { curl -fsSk --max-time 3 "https://127.0.0.1:$1/readyz" >/dev/null 2>&1; }
# Same for kube-controller-manager's /healthz (it has no /readyz).
controller_manager_healthy() { curl -fsSk --max-time 3 "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz" >/dev/null 2>&1; }

# --- prerequisites -----------------------------------------------------------

require_binaries() {
  local t missing=()
  for t in kube-apiserver kube-controller-manager kube-scheduler kubectl; do [[ -x "$BIN/$t" ]] || missing+=("$BIN/$t"); done
  (( ${#missing[@]} == 0 )) || die "missing ${missing[*]}: build with K8S_VERSION=$K8S_VERSION $here/build.sh (first run ~10 min)"
  local c; for c in openssl curl flock; do command -v "$c" >/dev/null || die "$c is missing: apt-get install $c"; done
}

# etcd comes from Debian's etcd-server in the Slurm sid chroot.  It runs with
# that chroot's own dynamic loader and libc but with / as its root, so Slurm's
# `cluster.sh down` (which kills every process rooted in the chroot and
# unmounts its /dev) never takes the Kubernetes state with it.
ensure_etcd() {
  ETCD_ROOT="$CACHE/slurm/sid"
  if [[ ! -x "$ETCD_ROOT/usr/bin/etcd" ]]; then
    # Two instances starting at once install it once.
    mkdir -p "$CACHE/slurm"; exec 8>"$CACHE/slurm/.etcd-install.lock"; flock 8
    if [[ ! -x "$ETCD_ROOT/usr/bin/etcd" ]]; then
      ETCD_ROOT="$("$here/../slurm/cluster.sh" rootfs "$ETCD_SUITE_VERSION")"
      log "installing etcd-server into $ETCD_ROOT"
      chroot "$ETCD_ROOT" apt-get -o Acquire::Check-Valid-Until=false update >&2
      chroot "$ETCD_ROOT" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends etcd-server >&2
    fi
    exec 8>&-
  fi
  local libdir="$ETCD_ROOT/usr/lib/x86_64-linux-gnu"
  ETCD_CMD=("$libdir/ld-linux-x86-64.so.2" --library-path "$libdir" "$ETCD_ROOT/usr/bin/etcd")
  "${ETCD_CMD[@]}" --version >/dev/null || die "etcd from $ETCD_ROOT does not run"
}

# --- PKI and kubeconfigs -----------------------------------------------------

# new_ca NAME CN: a self-signed CA.
new_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/$1.key" -out "$PKI/$1.crt" -days 3650 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# sign CA NAME SUBJECT EXTENSIONS: key + cert signed by CA.
sign() {
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$2.key" -subj "$3" -out "$PKI/$2.csr" 2>/dev/null
  printf '%s\n' "$4" > "$PKI/$2.ext"
  openssl x509 -req -in "$PKI/$2.csr" -CA "$PKI/$1.crt" -CAkey "$PKI/$1.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$2.ext" -out "$PKI/$2.crt" 2>/dev/null
  rm -f "$PKI/$2.csr" "$PKI/$2.ext"
}

# Like kubeadm: cluster CA (serving + clients), front-proxy CA (aggregation
# request headers, which every component's delegated authn reads), SA keys.
ensure_pki() {
  if [[ -s "$PKI/ca.crt" && -s "$PKI/sa.key" && -s "$PKI/front-proxy-client.crt" ]]; then
    ensure_controller_manager_cert
    return
  fi
  log "generating CA, serving, client and service-account keys in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  new_ca ca slurmbridge-test-ca
  new_ca front-proxy-ca slurmbridge-test-front-proxy-ca
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign ca apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign ca admin "/O=system:masters/CN=kubernetes-admin" "$client"
  sign ca scheduler "/CN=system:kube-scheduler" "$client"
  ensure_controller_manager_cert
  sign front-proxy-ca front-proxy-client "/CN=front-proxy-client" "$client"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  rm -f "$RUN"/*.kubeconfig
}

# Added later than the rest: a PKI made before it gets the cert without starting over.
ensure_controller_manager_cert() {
  [[ -s "$PKI/controller-manager.crt" ]] && return
  sign ca controller-manager "/CN=system:kube-controller-manager" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  rm -f "$RUN/controller-manager.kubeconfig"
}

b64() { base64 -w0 < "$1"; }

# write_kubeconfig FILE CERT-NAME USER: certificates embedded, portable file.
write_kubeconfig() {
  cat > "$1.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: slurmbridge
  cluster:
    server: $SERVER
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(b64 "$PKI/$2.crt")
    client-key-data: $(b64 "$PKI/$2.key")
contexts:
- name: $3@slurmbridge
  context: {cluster: slurmbridge, user: $3}
current-context: $3@slurmbridge
KC
  chmod 600 "$1.tmp"; mv "$1.tmp" "$1"
}

ensure_kubeconfigs() {
  [[ -s "$RUN/admin.kubeconfig" ]] || write_kubeconfig "$RUN/admin.kubeconfig" admin kubernetes-admin
  [[ -s "$RUN/scheduler.kubeconfig" ]] || write_kubeconfig "$RUN/scheduler.kubeconfig" scheduler system:kube-scheduler
  [[ -s "$RUN/controller-manager.kubeconfig" ]] \
    || write_kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
}

# --- components --------------------------------------------------------------

start_etcd() {
  stop etcd
  listening "$ETCD_PORT" && die "port $ETCD_PORT is taken by another process (set SLURMBRIDGE_ETCD_PORT)"
  rm -rf "$RUN/etcd-data"   # a fresh etcd is a fresh cluster: no stale leases or objects
  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start etcd "${ETCD_CMD[@]}" --name slurmbridge --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "slurmbridge=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes 2147483648 --log-level warn
  wait_ready etcd etcd_healthy
}

# Flags as kubeadm sets them; admission: the default-on set (which includes
# MutatingAdmissionWebhook and ValidatingAdmissionWebhook) plus NodeRestriction,
# named explicitly so nobody mistakes them for off.  Nothing is disabled.
# The only departure: no endpoint reconciler, as it refuses a loopback
# advertise address; the `kubernetes` Service just has no endpoints.
start_apiserver() {
  stop kube-apiserver
  listening "$APISERVER_PORT" && die "port $APISERVER_PORT is taken by another process (set SLURMBRIDGE_APISERVER_PORT)"
  log "starting kube-apiserver on $SERVER"
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --cert-dir "$RUN/apiserver-certs" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
    --endpoint-reconciler-type none \
    --feature-gates "$FEATURE_GATES" --runtime-config "$RUNTIME_CONFIG" \
    --allow-privileged=true --profiling=true
  wait_ready kube-apiserver apiserver_healthy
}

# The default scheduler, profile default-scheduler, identity system:kube-scheduler.
# Leader election off: one instance per cluster here, and a restart must not
# wait out a stale lease.
start_default_scheduler() {
  stop scheduler-default
  listening "$SCHEDULER_PORT" && die "port $SCHEDULER_PORT is taken by another process (set SLURMBRIDGE_SCHEDULER_PORT)"
  log "starting kube-scheduler (default-scheduler) on port $SCHEDULER_PORT"
  start scheduler-default "$BIN/kube-scheduler" \
    --kubeconfig "$RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --cert-dir "$RUN/scheduler-default-certs" \
    --feature-gates "$FEATURE_GATES" --leader-elect=false
  echo "$SCHEDULER_PORT" > "$RUN/scheduler-default.port"
  wait_ready scheduler-default scheduler_healthy "$SCHEDULER_PORT"
}

# Identity system:kube-controller-manager (bootstrap RBAC); each controller then runs
# as its own kube-system ServiceAccount (--use-service-account-credentials), as
# kubeadm sets it.  The SA signing key makes the legacy token controller work and
# --root-ca-file is what it puts next to each token.  Leader election off: one instance.
start_controller_manager() {
  stop controller-manager
  listening "$CONTROLLER_MANAGER_PORT" && die "port $CONTROLLER_MANAGER_PORT is taken by another process (set SLURMBRIDGE_CONTROLLER_MANAGER_PORT)"
  log "starting kube-controller-manager on port $CONTROLLER_MANAGER_PORT (controllers $CONTROLLERS)"
  start controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$RUN/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$RUN/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" --cert-dir "$RUN/controller-manager-certs" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --client-ca-file "$PKI/ca.crt" \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --use-service-account-credentials --service-cluster-ip-range "$SERVICE_CIDR" \
    --controllers "$CONTROLLERS" --feature-gates "$FEATURE_GATES" \
    --leader-elect=false --profiling=false
  wait_ready controller-manager controller_manager_healthy
}

write_env() {
  cat > "$RUN/env" <<ENV
KUBECONFIG=$RUN/admin.kubeconfig
SLURMBRIDGE_KUBE_SERVER=$SERVER
SLURMBRIDGE_KUBE_CA=$PKI/ca.crt
SLURMBRIDGE_KUBE_BIN=$BIN
SLURMBRIDGE_KUBE_SCHEDULER_KUBECONFIG=$RUN/scheduler.kubeconfig
SLURMBRIDGE_KUBE_LOGS=$LOGS
ENV
}

# --- commands ----------------------------------------------------------------

with_lock() { mkdir -p "$RUN"; exec 9>"$RUN/.lock"; flock 9; }

# What a killed test run left behind (its holder gone): its extra kube-schedulers and the bridge
# processes it started in sessions of their own (logs/*.pid: "PID HOLDER"), which would place and
# cancel jobs beside the next run's bridge.
reap_orphans() {
  local f name pid holder
  for f in "$RUN"/scheduler-*.holder; do
    [[ -e "$f" ]] || continue
    holder="$(cat "$f")"; name="$(basename "$f" .holder)"
    if [[ "$holder" == manual ]] || kill -0 "$holder" 2>/dev/null; then continue; fi
    log "stopping $name, left by a run that ended (pid $holder)"; stop "$name"
  done
  for f in "$RUN"/logs/*.pid; do
    [[ -e "$f" ]] || continue
    read -r pid holder < "$f" || true
    if [[ -n "$holder" ]] && ! kill -0 "$holder" 2>/dev/null; then
      if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q slurmbridge_cli; then
        log "stopping bridge process $pid ($(basename "$f" .pid)), left by a run that ended (pid $holder)"
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -KILL -- "-$pid" 2>/dev/null || true
      fi
      rm -f "$f"
    fi
  done
}

cmd_up() {
  require_binaries
  with_lock
  trap rollback EXIT
  reap_orphans
  ensure_pki
  ensure_kubeconfigs
  if alive etcd && etcd_healthy && current kube-apiserver && apiserver_healthy \
      && current controller-manager && controller_manager_healthy \
      && current scheduler-default && scheduler_healthy "$SCHEDULER_PORT"; then
    log "control plane already up at $SERVER"
  else
    ensure_etcd
    if ! { alive etcd && etcd_healthy; }; then start_etcd; stop kube-apiserver; fi
    { current kube-apiserver && apiserver_healthy; } || start_apiserver
    { current controller-manager && controller_manager_healthy; } || start_controller_manager
    { current scheduler-default && scheduler_healthy "$SCHEDULER_PORT"; } || start_default_scheduler
    log "control plane up at $SERVER (kube-apiserver v$K8S_VERSION)"
  fi
  # Holder: the caller's PID, or "manual" for a person/CI script, which only `down` ends.
  mkdir -p "$RUN/holders"; : > "$RUN/holders/${SLURMBRIDGE_CP_HOLDER:-manual}"
  write_env
  cat "$RUN/env"
}

down_locked() {
  local f name
  for f in "$RUN"/scheduler-*.pid; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f" .pid)"; stop "$name"
  done
  stop controller-manager
  stop kube-apiserver
  stop etcd
  rm -rf "$RUN/etcd-data" "$RUN/holders" "$RUN/env" "$RUN"/scheduler-*.yaml "$RUN"/*-certs
  log "control plane stopped (logs kept in $LOGS)"
}

cmd_down() { with_lock; down_locked; }

# Several test sessions may share one control plane: each registers as a
# holder on `up`; the last one to release it stops it.
cmd_release() {
  local holder="${1:?usage: $0 release HOLDER}" f others=0
  with_lock
  rm -f "$RUN/holders/$holder"
  for f in "$RUN"/holders/*; do
    [[ -e "$f" ]] || continue
    f="$(basename "$f")"
    if [[ "$f" == manual ]] || kill -0 "$f" 2>/dev/null; then others=$((others + 1)); else rm -f "$RUN/holders/$f"; fi
  done
  if (( others )); then log "control plane kept: $others other holder(s) alive"; else down_locked; fi
}

cmd_env() {
  [[ -f "$RUN/env" ]] || die "control plane is not up: run $0 up"
  cat "$RUN/env"
}

cmd_status() {
  local f name port
  for name in etcd kube-apiserver controller-manager; do
    if alive "$name"; then echo "$name running (pid $(pid_of "$name"))"; else echo "$name stopped"; fi
  done
  for f in "$RUN"/scheduler-*.pid; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f" .pid)"; port="$(cat "$RUN/$name.port" 2>/dev/null || echo '?')"
    if alive "$name"; then echo "$name running (pid $(pid_of "$name"), port $port)"; else echo "$name stopped"; fi
  done
}

valid_name() {
  [[ "$1" =~ ^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$ && "$1" != default ]] \
    || die "scheduler name '$1' must be a short DNS label other than 'default'"
}

free_extra_port() {
  local p f taken
  for p in "${EXTRA_PORTS[@]}"; do
    taken=0
    for f in "$RUN"/scheduler-*.port; do [[ -e "$f" && "$(cat "$f")" == "$p" ]] && taken=1; done
    (( taken == 0 )) && ! listening "$p" && { echo "$p"; return; }
  done
  die "no free port in ${EXTRA_PORTS[0]}-${EXTRA_PORTS[-1]} for another scheduler"
}

# The scheduler reads its kubeconfig and leader election from --config only:
# fill in the control plane's scheduler identity and leader election off
# unless the file sets them.
prepare_scheduler_config() {
  python3 - "$1" "$2" "$RUN/scheduler.kubeconfig" <<'PY'
import sys, yaml
src, dst, kubeconfig = sys.argv[1:4]
with open(src) as f:
    cfg = yaml.safe_load(f) or {}
if cfg.get("kind") != "KubeSchedulerConfiguration":
    sys.exit(f"{src}: not a KubeSchedulerConfiguration")
cfg.setdefault("clientConnection", {}).setdefault("kubeconfig", kubeconfig)
cfg.setdefault("leaderElection", {}).setdefault("leaderElect", False)
with open(dst, "w") as f:
    yaml.safe_dump(cfg, f)
PY
}

cmd_scheduler() {
  local name="${1:-}" config="${2:-}" port
  [[ -n "$name" && -n "$config" ]] || die "usage: $0 scheduler NAME CONFIG_FILE"
  valid_name "$name"
  [[ -r "$config" ]] || die "cannot read scheduler config $config"
  require_binaries
  with_lock
  trap rollback EXIT
  alive kube-apiserver || die "control plane is not up: run $0 up"
  # A busy apiserver (a loaded machine: B6 starting 1,000 jobs) is slow, not down.
  wait_ready kube-apiserver apiserver_healthy
  stop "scheduler-$name"
  port="$(free_extra_port)"
  prepare_scheduler_config "$config" "$RUN/scheduler-$name.yaml" || die "bad scheduler config $config"
  log "starting kube-scheduler '$name' on port $port with $config"
  start "scheduler-$name" "$BIN/kube-scheduler" --config "$RUN/scheduler-$name.yaml" \
    --authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" --cert-dir "$RUN/scheduler-$name-certs" \
    --feature-gates "$FEATURE_GATES" --v "$SCHEDULER_VERBOSITY"
  echo "$port" > "$RUN/scheduler-$name.port"
  echo "${SLURMBRIDGE_CP_HOLDER:-manual}" > "$RUN/scheduler-$name.holder"
  wait_ready "scheduler-$name" scheduler_healthy "$port"
  echo "$port"
}

cmd_stop_scheduler() {
  local name="${1:-}"
  [[ -n "$name" ]] || die "usage: $0 stop-scheduler NAME"
  valid_name "$name"
  with_lock
  stop "scheduler-$name"
  rm -rf "$RUN/scheduler-$name.yaml" "$RUN/scheduler-$name-certs"
}

case "${1:-}" in
  up|down|env|status) "cmd_$1" ;;
  release) cmd_release "${2:-}" ;;
  scheduler) cmd_scheduler "${2:-}" "${3:-}" ;;
  stop-scheduler) cmd_stop_scheduler "${2:-}" ;;
  *) echo "usage: $0 up|down|env|status | scheduler NAME CONFIG_FILE | stop-scheduler NAME | release HOLDER" >&2; exit 2 ;;
esac
