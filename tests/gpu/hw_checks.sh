#!/usr/bin/env bash
# The collection's read-only GPU checks on a real GPU host, over a local connection, and the raw
# outputs the hardware detections read (Secure Boot, NVSwitches, DGX OS, NVIDIA packages).
# Run from the repository root with OUT set and ansible-core's wheels in ./.whl (tests/gpu/README.md).
# Reads only: nothing is installed, no service is touched; writes /tmp/site, /tmp/ac, /tmp/hw.
#   1. nvidia_driver's read-only path (tests/gpu/nvidia_driver_check.yml): defaults must pass,
#      nvidia_driver_min_version=999 must fail naming the requirement.
#   2. dspark_build's preflight (tests/gpu/dspark_build_probe.yml): the CUDA toolchain probe.
#   3. the raw files under $OUT/hw-capture.tar.gz (folder hw/), unit-test fixtures.
set -u
: "${OUT:?set OUT to the directory the capture goes to}"
ROOT=$(pwd)
CAP=/tmp/hw/hw
rm -rf /tmp/hw && mkdir -p "$CAP"

run() {  # run NAME CMD...: stdout to NAME, stderr to NAME.stderr (when not empty), rc to NAME.rc
    local name=$1; shift
    "$@" >"$CAP/$name" 2>"$CAP/$name.stderr"
    echo $? >"$CAP/$name.rc"
    [ -s "$CAP/$name.stderr" ] || rm -f "$CAP/$name.stderr"
}

# Raw inputs of the detections (Secure Boot, NVSwitch, DGX OS, packages).
run mokutil-sb-state.txt mokutil --sb-state
run efivars-secureboot.txt sh -c 'ls -1 /sys/firmware/efi/efivars/ 2>&1 | grep -i -e secureboot -e setupmode; for f in /sys/firmware/efi/efivars/SecureBoot-*; do [ -e "$f" ] && od -An -t u1 "$f"; done; [ -d /sys/firmware/efi ] && echo efi || echo no-efi'
run pci-nvidia.txt sh -c 'for d in /sys/bus/pci/devices/*; do v=$(cat $d/vendor); [ "$v" = 0x10de ] && echo "$(basename $d) $v $(cat $d/device) $(cat $d/class)"; done; true'
run lspci-nvidia.txt lspci -nn -d 10de:
run nvidia-smi-topo.txt nvidia-smi topo -m
run nvidia-smi-nvlink.txt nvidia-smi nvlink --status
run nvidia-smi-fabric.txt nvidia-smi -q -d FABRIC
run dev-nvswitch.txt sh -c 'ls -1 /dev | grep -i -e nvswitch -e nvidia; true'
run dgx-release.txt cat /etc/dgx-release
run dpkg-nvidia.txt sh -c "dpkg-query -W -f='\${Package} \${Version} \${db:Status-Abbrev}\n' 'nvidia*' 'libnvidia*' 'linux-modules-nvidia*' 'cuda-drivers*' 2>/dev/null; true"
run dpkg-selections-nvidia.txt sh -c 'dpkg --get-selections | grep -i nvidia; true'
run pid1.txt sh -c 'cat /proc/1/comm; uname -r'
run netplan.txt sh -c 'ls -l /etc/netplan 2>&1; command -v netplan nmcli networkctl 2>&1; true'

# ansible-core from the carried wheels; the collection from this tree.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$ROOT"/.whl/*.whl \
    >"$CAP/pip.log" 2>&1 || echo "pip install of .whl failed, see pip.log"
export PYTHONPATH=/tmp/site
rm -rf /tmp/ac && mkdir -p /tmp/ac/ansible_collections/llmops/vllm_cluster
cp -r "$ROOT/plugins" "$ROOT/roles" "$ROOT/galaxy.yml" "$ROOT/meta" /tmp/ac/ansible_collections/llmops/vllm_cluster/
printf "[defaults]\n" >/tmp/hw/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH=/tmp/ac ANSIBLE_CONFIG=/tmp/hw/ansible.cfg ANSIBLE_LOCALHOST_WARNING=false \
    ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_DEPRECATION_WARNINGS=false ANSIBLE_NOCOLOR=1
if [ -x /tmp/site/bin/ansible-playbook ]; then PLAYBOOK=(/tmp/site/bin/ansible-playbook); else
    PLAYBOOK=(python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0] = "ansible-playbook"; main()'); fi

play() {  # play NAME PLAYBOOK ARGS...: the run's output and rc
    local name=$1; shift
    "${PLAYBOOK[@]}" -i localhost, -c local -e ansible_python_interpreter="$(command -v python3)" "$@" \
        >"$CAP/$name.log" 2>&1
    echo $? >"$CAP/$name.rc"
}
NVIDIA_PROBE_DIR=$CAP play nvidia_driver_check tests/gpu/nvidia_driver_check.yml
play nvidia_driver_check_999 tests/gpu/nvidia_driver_check.yml -e nvidia_driver_min_version=999
play dspark_build_probe tests/gpu/dspark_build_probe.yml --tags dspark_build_preflight

tar -C /tmp/hw -czf "$OUT/hw-capture.tar.gz" hw
{
    for f in "$CAP"/*; do
        case $f in *.log) continue ;; esac
        echo "=== ${f##*/}"; head -c 4000 "$f"
    done
    for f in "$CAP"/*.log; do echo "=== ${f##*/}"; tail -n 40 "$f"; done
} >"$OUT/hw-summary.txt" 2>&1
# The defaults must pass, the impossible minimum must fail, the probe must pass.
[ "$(cat "$CAP/nvidia_driver_check.rc")" = 0 ] && [ "$(cat "$CAP/nvidia_driver_check_999.rc")" != 0 ] \
    && [ "$(cat "$CAP/dspark_build_probe.rc")" = 0 ]
