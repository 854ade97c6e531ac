#!/usr/bin/env bash
# Install Debian's Chromium, which the report-page test renders pages with (headless).
# Needs root and apt-get; anywhere else it says so and the browser test is skipped.
# Never fails the set-up: the rest of the suite does not need a browser.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: Chromium is not installed and this user cannot install it (root and apt-get needed); the browser test will be skipped"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if apt-get install -y --no-install-recommends chromium >"$log" 2>&1 \
  || { apt-get update >>"$log" 2>&1 && apt-get install -y --no-install-recommends chromium >>"$log" 2>&1; }; then
  echo "installed $(chromium --version 2>/dev/null)"
else
  echo "note: apt-get could not install chromium (last lines below); the browser test will be skipped"
  tail -n 5 "$log"
fi
rm -f "$log"
