#!/usr/bin/env bash
# Stand-in for a site's Python mirror for the vllm_router role: fills $LAB_CACHE/vllm-router-wheelhouse
# with vllm-router (pinned) and every dependency as wheels for the lab's balancers (Debian 13 trixie:
# CPython 3.13, x86_64), downloaded on this machine (lab hosts do not reach PyPI). Lab hosts see it at
# /srv/llmops-lab/vllm-router-wheelhouse (vllm_router_pip_offline + vllm_router_pip_find_links).
#   bash tests/lab/router_wheel.sh     idempotent: a stamp records the recipe; concurrent runs wait (flock)
# ROUTER_PYTHON_VERSION and ROUTER_ARCH (x86_64 | aarch64) select other hosts' wheels.
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
PYTHON=${PYTHON:-python3}
SPEC=${ROUTER_SPEC:-vllm-router==0.1.17}
PYVER=${ROUTER_PYTHON_VERSION:-3.13}
ARCH=${ROUTER_ARCH:-x86_64}
WH=$LAB_CACHE/vllm-router-wheelhouse
log() { printf '[router-wheel] %s\n' "$*"; }

mkdir -p "$LAB_CACHE"
exec 9>"$LAB_CACHE/.router-wheel.lock"
flock 9
recipe="spec: $SPEC; python: $PYVER; arch: $ARCH; v1"
if [ -f "$WH/.stamp" ] && [ "$(cat "$WH/.stamp")" = "$recipe" ]; then
  log "up to date: $WH ($(find "$WH" -name '*.whl' | wc -l) wheels)"
  exit 0
fi
start=$(date +%s)
part=$LAB_CACHE/.tmp/vllm-router-wheelhouse.partial
rm -rf "$part"
mkdir -p "$part"
abi="cp$(echo "$PYVER" | tr -d .)"
platforms=()
for p in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  platforms+=(--platform "${p}_$ARCH")
done
# Only PyPI (the machine's pip config, with its local indexes and constraints, is kept out); wheels for
# the target interpreter, not this machine's.
PIP_CONFIG_FILE=/dev/null "$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  --python-version "$PYVER" --implementation cp --abi "$abi" --abi abi3 --abi none "${platforms[@]}" --platform any \
  -d "$part" "$SPEC"
printf '%s\n' "$recipe" > "$part/.stamp"
rm -rf "$WH.old"
if [ -d "$WH" ]; then mv "$WH" "$WH.old"; fi
mv "$part" "$WH"
rm -rf "$WH.old"
chmod -R a+rX "$WH"
log "ready: $WH ($(find "$WH" -name '*.whl' | wc -l) wheels, $(du -sh "$WH" | cut -f1)) in $(( $(date +%s) - start ))s"
