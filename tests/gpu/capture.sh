#!/usr/bin/env bash
# Capture the real GPU stack output of this host for cuda_check's unit tests, and run cuda_check
# itself through ansible (local connection) twice: requirements that hold, and one that cannot.
# Run from the repository root on the GPU machine with OUT set to a writable directory and the
# ansible-core wheels in ./.whl (see tests/gpu/README.md). Reads only; changes nothing on the host
# beyond /tmp/site, /tmp/ac and /tmp/capture.
set -u
: "${OUT:?set OUT to the directory the capture goes to}"
ROOT=$(pwd)
CAP=/tmp/capture/h200
rm -rf /tmp/capture && mkdir -p "$CAP"

run() {  # run NAME CMD...: stdout to NAME, stderr to NAME.stderr (kept only when non-empty), rc to NAME.rc
    local name=$1; shift
    "$@" >"$CAP/$name" 2>"$CAP/$name.stderr"
    echo $? >"$CAP/$name.rc"
    [ -s "$CAP/$name.stderr" ] || rm -f "$CAP/$name.stderr"
}

# 1. The exact query cuda_check sends, taken from the module_utils so the two cannot drift.
QUERY=$(cd "$ROOT/plugins/module_utils" && python3 - <<'PY'
import re
text = open('_nvidia.py').read()
block = re.search(r'QUERY_FIELDS = \((.*?)\)', text, re.S).group(1)
print(','.join(re.findall(r"'([^']+)'", block)))
PY
)
echo "$QUERY" >"$CAP/query_fields.txt"

run nvidia-smi.txt nvidia-smi
run nvidia-smi-q.txt nvidia-smi -q
run query.csv nvidia-smi "--query-gpu=$QUERY" --format=csv,noheader,nounits
run nvidia-smi-version.txt nvidia-smi --version
if command -v nvcc >/dev/null 2>&1; then
    run nvcc.txt nvcc --version
    command -v nvcc >"$CAP/nvcc_path.txt"
elif [ -x /usr/local/cuda/bin/nvcc ]; then
    run nvcc.txt /usr/local/cuda/bin/nvcc --version
    echo /usr/local/cuda/bin/nvcc >"$CAP/nvcc_path.txt"
else
    echo "nvcc not found in PATH nor /usr/local/cuda/bin" >"$CAP/nvcc_path.txt"
fi
run proc_driver_nvidia_version.txt cat /proc/driver/nvidia/version
run uname.txt uname -a
run os-release.txt cat /etc/os-release

# 2. ansible-core from the carried wheels (the GPU host has no network and no ansible).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.whl/*.whl \
    >"$CAP/pip.log" 2>&1 || { echo "pip install of .whl failed, see pip.log"; }
export PYTHONPATH=/tmp/site
rm -rf /tmp/ac && mkdir -p /tmp/ac/ansible_collections/llmops/vllm_cluster
printf "[defaults]\n" >/tmp/capture/ansible.cfg
cp -r "$ROOT/plugins" "$ROOT/galaxy.yml" "$ROOT/meta" /tmp/ac/ansible_collections/llmops/vllm_cluster/
export ANSIBLE_COLLECTIONS_PATH=/tmp/ac ANSIBLE_CONFIG=/tmp/capture/ansible.cfg ANSIBLE_LOCALHOST_WARNING=false \
    ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_DEPRECATION_WARNINGS=false ANSIBLE_NOCOLOR=1 \
    ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.tree
if [ -x /tmp/site/bin/ansible ]; then ANSIBLE=(/tmp/site/bin/ansible); else
    ANSIBLE=(python3 -c 'import sys; from ansible.cli.adhoc import main; sys.argv[0] = "ansible"; main()'); fi
"${ANSIBLE[@]}" --version >"$CAP/ansible_version.txt" 2>&1

adhoc() {  # adhoc NAME ARGS_JSON: tree callback writes the module's JSON result
    local name=$1 args=$2
    rm -rf "/tmp/capture/tree_$name"
    ANSIBLE_CALLBACK_TREE_DIR="/tmp/capture/tree_$name" \
        "${ANSIBLE[@]}" localhost -c local -i localhost, -e ansible_python_interpreter="$(command -v python3)" \
        -m llmops.vllm_cluster.cuda_check -a "$args" >"$CAP/$name.log" 2>&1
    echo $? >"$CAP/$name.rc"
    if [ -f "/tmp/capture/tree_$name/localhost" ]; then
        python3 -m json.tool "/tmp/capture/tree_$name/localhost" >"$CAP/$name.json"
    fi
}
adhoc cuda_check_pass '{"min_driver_version": "580", "min_cuda_version": "13.0", "compute_capabilities": ["9.0"], "gpu_count": 1, "min_memory_mib": 100000}'
adhoc cuda_check_fail '{"min_driver_version": "999", "compute_capabilities": ["9.0"]}'

# 3. Back: one tarball (the device returns at most 8 files) and a readable summary.
tar -C /tmp/capture -czf "$OUT/h200-capture.tar.gz" h200
{
    for f in query_fields.txt query.csv nvidia-smi-version.txt nvcc.txt proc_driver_nvidia_version.txt \
             cuda_check_pass.rc cuda_check_pass.json cuda_check_fail.rc cuda_check_fail.json; do
        echo "=== $f"; cat "$CAP/$f" 2>/dev/null || echo "(missing)"
    done
    echo "=== nvidia-smi.txt"; cat "$CAP/nvidia-smi.txt"
    echo "=== cuda_check_fail.log"; cat "$CAP/cuda_check_fail.log"
} >"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
# The pass run must pass and the fail run must fail, else this capture shows a defect.
[ "$(cat "$CAP/cuda_check_pass.rc")" = 0 ] && [ "$(cat "$CAP/cuda_check_fail.rc")" != 0 ]
