#!/usr/bin/env bash
# Installs Debian's chromium for the browser test (integration/browser_test.go)
# when /usr/bin/chromium is missing. Idempotent: nothing happens, and no
# network is used, when it is already there. Needs root and apt (Debian).
# Usage: .ci/install-chromium.sh
set -euo pipefail

log() { printf 'install-chromium: %s\n' "$*" >&2; }

if [[ -x /usr/bin/chromium ]]; then
	log "chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	log "apt-get not found; install chromium by hand (/usr/bin/chromium)"
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log "apt-get update && apt-get install -y chromium"
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium </dev/null
log "installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
