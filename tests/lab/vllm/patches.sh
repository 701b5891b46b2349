#!/usr/bin/env bash
# Stand-ins for the patches a GB10 build applies on top of upstream vLLM (dspark_build_patches):
#   $LAB_CACHE/patches/0001-lab-file-patch.patch  a patch file (git diff) adding vllm/llmops_lab_patch.py
#   $LAB_CACHE/git/vllm-patches.git               a second git remote (a fork's stand-in), branch
#                                                 lab-fixes, whose head commit extends that file:
#                                                 it applies only after the patch file (order matters)
#   $LAB_CACHE/patches/commit.sha                 that commit's id (what an inventory would name)
#   $LAB_CACHE/patches/0002-does-not-apply.patch  a patch whose context is not in vLLM 0.32.0
# Built on the local vLLM repository (git_repo.sh) at its release tag; rebuilt when this script or
# that tag changes. Lab containers see them under /srv/llmops-lab.
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
TAG=${VLLM_TAG:-v0.32.0}
REPO=$LAB_CACHE/git/vllm.git
REMOTE=$LAB_CACHE/git/vllm-patches.git
PDIR=$LAB_CACHE/patches
base=$(git --git-dir="$REPO" rev-parse "$TAG^{commit}")
stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16) $base"
if [ "$(cat "$PDIR/.recipe" 2>/dev/null)" = "$stamp" ] && [ -d "$REMOTE" ]; then
  echo "[patches] up to date: $PDIR, $REMOTE (commit $(cat "$PDIR/commit.sha"))"
  exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vllm-patches.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GIT_AUTHOR_NAME="llmops lab" GIT_AUTHOR_EMAIL=lab@llmops.invalid GIT_COMMITTER_NAME="llmops lab" \
  GIT_COMMITTER_EMAIL=lab@llmops.invalid GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
git clone -q --no-checkout "$REPO" "$tmp/w"
git -C "$tmp/w" checkout -q --detach "$base"
rm -rf "$PDIR.new" && mkdir -p "$PDIR.new"
printf '"""Lab stand-in for a source patch (dspark_build_patches: file)."""\nFILE_PATCH = "applied"\n' \
  > "$tmp/w/vllm/llmops_lab_patch.py"
git -C "$tmp/w" add vllm/llmops_lab_patch.py
git -C "$tmp/w" diff --cached > "$PDIR.new/0001-lab-file-patch.patch"
git -C "$tmp/w" commit -q -m "lab: the file patch"
printf 'COMMIT_PATCH = "applied"\n' >> "$tmp/w/vllm/llmops_lab_patch.py"
git -C "$tmp/w" commit -q -am "lab: a fork's fix on top of the file patch"
git -C "$tmp/w" rev-parse HEAD > "$PDIR.new/commit.sha"
cat > "$PDIR.new/0002-does-not-apply.patch" <<'PATCH'
diff --git a/vllm/__init__.py b/vllm/__init__.py
--- a/vllm/__init__.py
+++ b/vllm/__init__.py
@@ -1,3 +1,3 @@
-# This line is not in vLLM 0.32.0, so the patch does not apply.
+# Nor is this one.
 # SPDX-License-Identifier: Apache-2.0
 # SPDX-FileCopyrightText: Copyright contributors to the vLLM project
PATCH
rm -rf "$REMOTE.partial" "$REMOTE"
git init -q --bare "$REMOTE.partial"
git -C "$tmp/w" push -q "$REMOTE.partial" HEAD:refs/heads/lab-fixes
mv "$REMOTE.partial" "$REMOTE"
echo "$stamp" > "$PDIR.new/.recipe"
rm -rf "$PDIR" && mv "$PDIR.new" "$PDIR"
chmod -R a+rX "$PDIR" "$REMOTE"
echo "[patches] ready: $PDIR, $REMOTE branch lab-fixes at $(cat "$PDIR/commit.sha")"
