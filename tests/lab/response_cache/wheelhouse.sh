#!/usr/bin/env bash
# Stand-in for a site's offline Python mirror for the response_cache role: fills
# $LAB_CACHE/litellm-wheelhouse with litellm[proxy] (pinned) and prometheus_client plus every
# dependency as CPython 3.11 x86_64 wheels (the lab images are Debian bookworm: python3.11). Lab
# hosts see it at /srv/llmops-lab/litellm-wheelhouse (response_cache_pip_offline +
# response_cache_pip_find_links).
#   bash tests/lab/response_cache/wheelhouse.sh    idempotent: a stamp records the recipe
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
PYTHON=${PYTHON:-python3.11}
# async-timeout: redis needs it on CPython < 3.11.3 (bookworm has 3.11.2; the controller may not).
SPECS=${SPECS:-litellm[proxy]==1.108.7 prometheus_client==0.26.0 async-timeout==5.0.1}
WH=$LAB_CACHE/litellm-wheelhouse
log() { printf '[litellm-wheelhouse] %s\n' "$*"; }

command -v "$PYTHON" >/dev/null || PYTHON=python3
want="specs: $SPECS; python: $("$PYTHON" -c 'import sys,platform;print(f"{sys.version_info[0]}.{sys.version_info[1]}-{platform.machine()}")')"
if [ -f "$WH/.stamp" ] && [ "$(cat "$WH/.stamp")" = "$want" ]; then
  log "up to date: $WH ($(ls "$WH"/*.whl | wc -l) wheels)"
  exit 0
fi
start=$(date +%s)
mkdir -p "$WH"
rm -f "$WH/.stamp"
# Only PyPI (the machine's pip config, with its local find-links, is kept out).
# shellcheck disable=SC2086
PIP_CONFIG_FILE=/dev/null "$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  -d "$WH" $SPECS
printf '%s\n' "$want" > "$WH/.stamp"
log "ready: $WH ($(ls "$WH"/*.whl | wc -l) wheels, $(du -sh "$WH" | cut -f1)) in $(( $(date +%s) - start ))s"
