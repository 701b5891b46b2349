# shellcheck shell=bash
# Source this from the repository root to use the project's toolchain by hand:
#   make venv collection && . tests/env.sh
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$_root/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$_root/.cache/collections"
export ANSIBLE_CONFIG="$_root/ansible.cfg"
export PYTHONUNBUFFERED=1
unset _root
