# Sourced by simulation.sh and deployment.sh: the environment Flower runs in, and helpers.
#
# * FLWR_HOME inside DIR: Flower writes its config, installed apps and state there, not in ~;
# * FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1: Flower installs nothing when the app runs
#   (the project's environment holds everything the app imports);
# * no telemetry, no update check, no usage statistics: nothing leaves the machine;
# * PYTHONPATH = this checkout, and Flower's commands (flwr, flower-superlink, …) bound to
#   the project's interpreter in DIR/bin, so every process Flower starts imports this code.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
export FLWR_HOME="$DIR/flwr-home" FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0 \
  FLWR_DISABLE_UPDATE_CHECK=1 RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
  PYTHONPATH="$ROOT" STARFISH_OUTBOX="$DIR/outbox"
mkdir -p "$FLWR_HOME" "$DIR/bin"
"$PY" - "$DIR/bin" <<'PY'
import os, sys
from importlib.metadata import distribution
for ep in distribution("flwr").entry_points:
    if ep.group == "console_scripts":
        path = os.path.join(sys.argv[1], ep.name)
        with open(path, "w") as fh:
            fh.write(f"#!{sys.executable}\nimport sys\nfrom {ep.module} import {ep.attr}\nsys.exit({ep.attr}())\n")
        os.chmod(path, 0o755)
PY
export PATH="$DIR/bin:$PATH"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait
}
trap cleanup EXIT

free_port() { "$PY" -c "from mpc.ports import free_port; print(free_port())"; }

# wait_for FILE PATTERN SECONDS WHAT: until FILE holds PATTERN; fails after SECONDS, naming WHAT
wait_for() {
  for _ in $(seq "$3"); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 1
  done
  echo "waited $3 s for $4 (no '$2' in $1)" >&2
  tail -20 "$1" >&2
  return 1
}

# start_parties N: dealer, party0 and party1 with credentials for client0…client(N-1), rounds opened on
# request; a round deadline of 600 s (the strategy closes a round as soon as its clients uploaded: the
# deadline only bounds a round whose clients are slow, e.g. a SuperNode starting a ClientApp process per round)
start_parties() {
  "$PY" -m starfish_cli up --dir "$DIR/deployment" --clients "$1" --opening on_request --deadline 600 >"$DIR/starfish-up.log" 2>&1 &
  PIDS+=($!)
  wait_for "$DIR/starfish-up.log" "party0 (leader" 300 "the Starfish parties"
}

# start_superlink [--simulation]: a SuperLink with TLS (certificate from the deployment's CA) on a free
# loopback port, and the Flower connection "starfish" to it in FLWR_HOME/config.toml
start_superlink() {
  local port certs="$DIR/deployment/certs"
  port=$(free_port)
  "$PY" -m starfish_cli certs --out "$certs" --issue superlink >/dev/null
  flower-superlink "$@" --host 127.0.0.1 --port "$port" --database "$DIR/superlink.db" \
    --ssl-ca-certfile "$certs/ca.pem" --ssl-certfile "$certs/superlink.pem" --ssl-keyfile "$certs/superlink.key" \
    >"$DIR/superlink.log" 2>&1 &
  PIDS+=($!)
  wait_for "$DIR/superlink.log" "Application startup complete" 120 "the SuperLink"
  SUPERLINK="127.0.0.1:$port"
  cat >"$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "starfish"

[superlink.starfish]
address = "$SUPERLINK"
root-certificates = "$certs/ca.pem"
TOML
}

# run_app ARGS…: `flwr run . starfish --stream ARGS…` (output also in DIR/flwr-run.log); fails when the
# run failed — `flwr run --stream` exits 0 then, and prints Flower's failure lines
run_app() {
  flwr run . starfish --stream "$@" 2>&1 | tee "$DIR/flwr-run.log"
  if grep -q -e "Exit Code" -e "raised an exception" -e "Traceback" "$DIR/flwr-run.log"; then
    echo "the Flower run failed: see $DIR/flwr-run.log" >&2
    return 1
  fi
}
