#!/usr/bin/env bash
# The app with `flwr run` on Flower's simulation engine: the Starfish parties, a SuperLink in
# simulation mode (TLS, loopback), then `flwr run .` with 4 simulated SuperNodes.
#
#   examples/flower/simulation.sh DIR ["more run-config"]
#
# DIR receives the deployment (certificates, credentials, stores, logs), Flower's home, and
# the verified erasure certificate of every unlearning job (JOB.json).
set -euo pipefail
source "$(dirname "$0")/_env.sh" "$1"
start_parties 4
start_superlink --simulation
cd "$HERE"
run_app \
  --federation-config "num-supernodes=4 client-resources-num-cpus=1 init-args-num-cpus=2" \
  --run-config "starfish-dir='$DIR/deployment' certificate-dir='$DIR' ${2:-}"
