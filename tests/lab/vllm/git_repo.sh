#!/usr/bin/env bash
# Stand-in for github.com/vllm-project/vllm (unreachable here): vLLM's own source, from its PyPI
# sdist (checked against PyPI's sha256), committed into a local bare git repository with the
# release tag, at $LAB_CACHE/git/vllm.git (lab containers: file:///srv/llmops-lab/git/vllm.git).
#   bash tests/lab/vllm/git_repo.sh      idempotent: rebuilt when missing or the version changes
# The sdist is the same tree as the tag minus git metadata, so a build from this repository is a
# real source build of that release (dspark_build's source path, VLLM_TARGET_DEVICE=empty in CI).
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
VLLM_SRC_VERSION=${VLLM_SRC_VERSION:-0.32.0}
PYPI_SIMPLE=${PYPI_SIMPLE:-https://pypi.org/simple}
REPO=$LAB_CACHE/git/vllm.git
TAG=v$VLLM_SRC_VERSION
log() { printf '[git-repo] %s\n' "$*"; }

if git --git-dir="$REPO" rev-parse -q --verify "refs/tags/$TAG^{commit}" >/dev/null 2>&1; then
  log "up to date: $REPO has $TAG ($(git --git-dir="$REPO" rev-parse "$TAG^{commit}"))"
  exit 0
fi
start=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vllm-git.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# PyPI's simple index (JSON form, PEP 691): the sdist's URL and sha256.
read -r url sha < <(curl -fsSL -H 'Accept: application/vnd.pypi.simple.v1+json' "$PYPI_SIMPLE/vllm/" |
  python3 -c '
import json, sys
name = "vllm-" + sys.argv[1] + ".tar.gz"
f = [f for f in json.load(sys.stdin)["files"] if f["filename"] == name][0]
print(f["url"], f["hashes"]["sha256"])' "$VLLM_SRC_VERSION")
log "downloading $url"
curl -fsSL -o "$tmp/vllm.tar.gz" "$url"
echo "$sha  $tmp/vllm.tar.gz" | sha256sum -c --quiet
tar --no-same-owner -xzf "$tmp/vllm.tar.gz" -C "$tmp"
src=$tmp/vllm-$VLLM_SRC_VERSION
# sdist-only metadata: the version must come from the git tag, as in a GitHub checkout.
rm -rf "$src/PKG-INFO" "$src"/*.egg-info
git -C "$src" init -q -b main
git -C "$src" -c user.name="llmops lab" -c user.email=lab@llmops.invalid add -A
git -C "$src" -c user.name="llmops lab" -c user.email=lab@llmops.invalid commit -q \
  -m "vLLM $VLLM_SRC_VERSION source (PyPI sdist sha256 $sha; lab stand-in for github.com/vllm-project/vllm)"
git -C "$src" -c user.name="llmops lab" -c user.email=lab@llmops.invalid tag -a "$TAG" -m "vLLM $VLLM_SRC_VERSION"
mkdir -p "$LAB_CACHE/git"
if [ -d "$REPO" ]; then
  git -C "$src" push -q "$REPO" "main:refs/heads/v$VLLM_SRC_VERSION-src" "refs/tags/$TAG"
else
  git clone -q --bare "$src" "$REPO.partial" && mv "$REPO.partial" "$REPO"
fi
chmod -R a+rX "$LAB_CACHE/git"
log "ready: $REPO tag $TAG = $(git --git-dir="$REPO" rev-parse "$TAG^{commit}") ($(du -sh "$REPO" | cut -f1)) in $(( $(date +%s) - start ))s"
