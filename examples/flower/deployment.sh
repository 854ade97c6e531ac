#!/usr/bin/env bash
# The app with `flwr run` on Flower's deployment engine: the Starfish parties, a SuperLink and
# four SuperNodes as real processes (TLS, loopback), each SuperNode one Starfish client with
# its own credential in its node config, then `flwr run .`.
#
#   examples/flower/deployment.sh DIR ["more run-config"]
set -euo pipefail
source "$(dirname "$0")/_env.sh" "$1"
start_parties 4
start_superlink
mkdir -p "$DIR/tokens"
for i in 0 1 2 3; do
  token="$DIR/tokens/client$i.token"
  (umask 077 && "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['clients'][sys.argv[2]])" \
    "$DIR/deployment/credentials.json" "client$i" >"$token")
  flower-supernode --superlink "$SUPERLINK" --root-certificates "$DIR/deployment/certs/ca.pem" \
    --host 127.0.0.1 --port "$(free_port)" \
    --node-config "partition-id=$i num-partitions=4 starfish-client-id='client$i' starfish-token-file='$token'" \
    >"$DIR/supernode$i.log" 2>&1 &
  PIDS+=($!)
done
cd "$HERE"
run_app --run-config "starfish-dir='$DIR/deployment' certificate-dir='$DIR' ${2:-}"
