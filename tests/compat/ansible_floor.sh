#!/usr/bin/env bash
# The collection on the oldest ansible-core that meta/runtime.yml's requires_ansible allows: a
# throwaway venv with that exact release, then --syntax-check of every playbook and ansible-doc of
# a module and a role, resolving the collection from the built tarball's install
# (build/collection/installed, made by `make build` just before).
#   tests/compat/ansible_floor.sh [VERSION]   (default: the floor in meta/runtime.yml)
# The wheels are cached in .cache/compat-wheels (one download per version); the venv is rebuilt
# each run (a few seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-$(sed -nE 's/^requires_ansible: *"?>=([0-9.]+).*/\1/p' meta/runtime.yml)}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "no floor version in meta/runtime.yml (got '$version')" >&2; exit 2; }
python=${COMPAT_PYTHON:-python3}
installed=$PWD/build/collection/installed
[[ -d $installed/ansible_collections/llmops/vllm_cluster ]] || { echo "run make build first ($installed is missing)" >&2; exit 2; }
wheels=$PWD/.cache/compat-wheels/ansible-core-$version
venv=$PWD/build/compat/ansible-core-$version
if [[ ! -f $wheels/.done ]]; then
  mkdir -p "$wheels"
  "$python" -m pip download -q --disable-pip-version-check -d "$wheels" "ansible-core==$version"
  touch "$wheels/.done"
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$wheels" "ansible-core==$version"
# A configuration of its own: the repository's ansible.cfg points at the working tree.
printf '[defaults]\ncollections_path = %s\n' "$installed" > "$venv/ansible.cfg"
export ANSIBLE_CONFIG=$venv/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$installed
got=$("$venv/bin/ansible" --version | sed -nE '1s/.*core ([0-9.]+).*/\1/p')
[[ $got == "$version" ]] || { echo "the venv runs ansible-core $got, not $version" >&2; exit 1; }
# The playbooks as a user runs them: by FQCN, from the installed collection, with a shipped inventory.
inv=$installed/ansible_collections/llmops/vllm_cluster/inventories/dgx_spark
for play in site validate upgrade; do
  "$venv/bin/ansible-playbook" --syntax-check -i "$inv" "llmops.vllm_cluster.$play" >/dev/null
done
"$venv/bin/ansible-doc" llmops.vllm_cluster.openai_load | grep -q "max_distribution_skew"
"$venv/bin/ansible-doc" -t role llmops.vllm_cluster.vllm_service | grep -q "vllm_service_model"
echo "ansible-core $version ($("$venv/bin/python" --version)): playbooks site, validate, upgrade pass --syntax-check by FQCN; ansible-doc reads a module and a role"
