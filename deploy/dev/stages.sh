# shellcheck shell=bash
# Sourced by tests/run.sh: named stages that run side by side.  Each stage is a command (or
# shell function) run in the background with its output in $STAGE_LOGS/NAME.log; when it
# ends, one line says how long it took.  A stage that fails stops every other stage and the
# run, naming its log and showing its tail.  A stage that needs another waits for it with
# `after NAME...` (it reads the marker files, so stages need not be each other's children).
#   stage_start NAME CMD...     start NAME in the background (CMD: a command or a function
#                               of the calling script; `after` works in functions only)
#   stage_wait NAME...          wait until each NAME has ended (any failure ends the run)
#   stage NAME CMD...           start and wait
#   after NAME...               (inside a stage) wait until each NAME has succeeded
STAGE_LOGS="${STAGE_LOGS:-$PWD/.ci/logs}"
declare -A STAGE_PID=() STAGE_NAME=() STAGE_T0=()
STAGE_RUN_T0=$SECONDS
mkdir -p "$STAGE_LOGS"
rm -f "$STAGE_LOGS"/*.ok "$STAGE_LOGS"/*.failed "$STAGE_LOGS"/*.waited
set -m   # each stage in a process group of its own: a failure stops a stage's whole tree

stage_start() {
  local name="$1"; shift
  STAGE_T0[$name]=$SECONDS
  (
    set +m
    # shellcheck disable=SC2030  # the stage's own subshell: what `after` reads inside it
    STAGE_CURRENT=$name
    trap ': > "$STAGE_LOGS/'"$name"'.failed"' EXIT   # unless it gets to the end
    "$@"
    trap - EXIT
    : > "$STAGE_LOGS/$name.ok"
  ) > "$STAGE_LOGS/$name.log" 2>&1 < /dev/null &
  STAGE_PID[$name]=$!
  STAGE_NAME[$!]=$name
}

_stage_report() {  # NAME RC
  local name="$1" rc="$2" took=$((SECONDS - STAGE_T0[$1]))
  if ((rc)); then
    printf '[stage] %-16s FAILED after %5d s (exit %d); log: %s\n' "$name" "$took" "$rc" "$STAGE_LOGS/$name.log"
    tail -n 40 "$STAGE_LOGS/$name.log" | sed 's/^/    /'
    stage_stop_all
    printf '[stage] run failed after %d s\n' "$((SECONDS - STAGE_RUN_T0))"
    exit 1
  fi
  local waited; waited="$(cat "$STAGE_LOGS/$name.waited" 2>/dev/null || echo 0)"
  printf '[stage] %-16s %5d s  (ended at %d s%s)\n' "$name" "$((took - waited))" \
    "$((SECONDS - STAGE_RUN_T0))" "$( ((waited)) && echo ", after waiting $waited s")"
}

stage_wait() {
  local name pid rc pending
  while :; do
    pending=()
    for name in "$@"; do [[ -n "${STAGE_PID[$name]:-}" ]] && pending+=("$name"); done
    ((${#pending[@]})) || return 0
    rc=0
    wait -n -p pid "${STAGE_PID[@]}" || rc=$?
    [[ -n "${pid:-}" ]] || { echo "[stage] lost track of: ${pending[*]}" >&2; exit 1; }
    name="${STAGE_NAME[$pid]}"
    unset "STAGE_PID[$name]" "STAGE_NAME[$pid]"
    _stage_report "$name" "$rc"
  done
}

stage() { stage_start "$@"; stage_wait "$1"; }

stage_stop_all() {
  local name
  for name in "${!STAGE_PID[@]}"; do
    kill -- "-${STAGE_PID[$name]}" 2>/dev/null || true
    printf '[stage] %-16s stopped\n' "$name"
  done
  STAGE_PID=()
}

after() {
  local name t0=$SECONDS
  for name in "$@"; do
    until [[ -e "$STAGE_LOGS/$name.ok" ]]; do
      [[ -e "$STAGE_LOGS/$name.failed" ]] && { echo "[stage] $name failed: not going on" >&2; exit 1; }
      sleep 1
    done
  done
  # shellcheck disable=SC2031  # `after` runs inside the stage's subshell, which set it
  echo "$((SECONDS - t0))" > "$STAGE_LOGS/$STAGE_CURRENT.waited"
}
