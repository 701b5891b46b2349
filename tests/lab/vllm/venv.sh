#!/usr/bin/env bash
# Controller-side vLLM CPU venv (the stand-in engine for integration tests on loopback and the
# interpreter that builds the tiny model): $LAB_CACHE/vllm-venv, installed offline from the
# wheelhouse (tests/lab/vllm/wheelhouse.sh, run first when needed).
#   bash tests/lab/vllm/venv.sh     idempotent: a stamp holds the wheelhouse's stamp; rebuilt on change
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
WH=$LAB_CACHE/wheelhouse
VENV=$LAB_CACHE/vllm-venv
log() { printf '[vllm-venv] %s\n' "$*"; }

bash "$here/wheelhouse.sh"
want="requirements.txt sha256 $(sha256sum "$WH/requirements.txt" | cut -c1-16)"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$want" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
  log "up to date: $VENV ($(du -sh "$VENV" | cut -f1))"
  exit 0
fi
start=$(date +%s)
log "creating $VENV from $WH"
# A venv cannot be moved (its scripts carry its path): build in place; the stamp, written last,
# marks it complete, so an interrupted build is redone on the next run.
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# Offline and exact: --no-index, --no-deps with the lock (the lock leaves out the broken CUDA
# torchvision/torchaudio/torchcodec and the unused triton). The machine's pip config (find-links,
# torch cap) is kept out: the wheelhouse is the whole source.
PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  --no-index --no-deps --find-links "$WH" -r "$WH/requirements.txt"
"$VENV/bin/python" -c 'import vllm, torch; print("[vllm-venv] vllm", vllm.__version__, "torch", torch.__version__)'
printf '%s\n' "$want" > "$VENV/.stamp"
log "ready: $VENV ($(du -sh "$VENV" | cut -f1)) in $(( $(date +%s) - start ))s"
