"""The GPU inventories from the inventory alone (every host runs with a local connection: the
inventories' addresses are never contacted). inventories/hgx_h200: the playbooks parse and list its
hosts; for it and the DGX Spark inventories, every role's argument spec accepts the variables, the
preflights that need no device pass (nvidia_driver and container_toolkit read only this machine),
and the decisions they take: on DGX OS (cluster_dgx_os) no driver install and the toolkit left to
NVIDIA (no pin, no downgrade, no hold); on the H200 servers both managed, and on an HGX baseboard
with Secure Boot (a constructed probe) the driver plan is Canonical's signed modules plus NVIDIA
Fabric Manager."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_run import ansible_env, applied_roles, inventory_groups, run_inventory_play, tls_standin  # tests/unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
INV = ROOT / "inventories" / "hgx_h200"
GPU_INVENTORIES = ["dgx_spark", "dgx_spark_single", "hgx_h200"]
# The roles a user applies (a main entry point); a layer's component roles take the layer's variables.
ROLES = applied_roles()

PLAY = """
- name: Preflight of inventories/hgx_h200 from the inventory alone
  hosts: all
  gather_facts: false
  tasks:
    - name: The facts an Ubuntu 24.04 x86_64 systemd host reports
      inventory_facts:
        facts: >-
          {{ ubuntu_facts | combine({'architecture': 'x86_64', 'kernel': '6.8.0-45-generic', 'processor_vcpus': 192,
                                     'memtotal_mb': 2063000, 'default_ipv4': {'address': ansible_host},
                                     'all_ipv4_addresses': [ansible_host]}) }}

    - name: Every role's argument spec accepts this host's variables of that role
      ansible.builtin.validate_argument_spec:
        argument_spec: "{{ role_specs[item] }}"
        provided_arguments: >-
          {% set d = {} %}{% for n in inventory_var_names if n.startswith(item ~ '_') and n in hostvars[inventory_hostname] %}{%
            set _ = d.update({n: lookup('ansible.builtin.vars', n)}) %}{% endfor %}{{ d }}
      loop: "{{ role_names_under_test }}"

    - name: The preflight of every role that needs no device, on the hosts of its play
      ansible.builtin.include_role:
        name: "llmops.vllm_cluster.{{ item.role }}"
        tasks_from: preflight
      loop:
        - {role: nvidia_driver, group: gpu_nodes}
        - {role: container_toolkit, group: gpu_nodes}
        - {role: dspark_build, group: vllm_nodes}
        - {role: vllm_service, group: vllm_nodes}
        - {role: nginx_lb, group: balancers}
        - {role: firewall, group: cluster}
        - {role: monitoring, group: monitoring}
      when: inventory_hostname in groups[item.group]

    - name: Write what the GPU roles decided for this host
      ansible.builtin.copy:
        content: >-
          {{ {'driver_install': nvidia_driver__do_install, 'dgx_os': nvidia_driver__dgx_os,
              'toolkit_vendor_managed': container_toolkit__vendor_managed} | to_json }}
        dest: "{{ out_dir }}/{{ inventory_hostname }}.decisions.json"
        mode: "0600"
      when: inventory_hostname in groups['gpu_nodes']
      delegate_to: localhost

    - name: The driver plan on an HGX H200 baseboard with Secure Boot
      ansible.builtin.copy:
        content: >-
          {{ {'distribution': 'Ubuntu', 'source': nvidia_driver_source, 'branch': nvidia_driver_branch,
              'flavor': 'open', 'packages': [], 'kernel_modules': nvidia_driver_kernel_modules,
              'secure_boot': hgx.secure_boot, 'kernel': ansible_facts.kernel, 'precompiled_kernel': '',
              'fabricmanager': nvidia_driver_fabricmanager, 'nvswitches': hgx.nvswitches | length,
              'fabricmanager_packages': []} | llmops.vllm_cluster.nvidia_driver_plan | to_json }}
        dest: "{{ out_dir }}/{{ inventory_hostname }}.plan.json"
        mode: "0600"
      vars:
        hgx: "{{ lookup('ansible.builtin.file', hgx_probe) | llmops.vllm_cluster.nvidia_host_facts }}"
      when: inventory_hostname in groups['gpu_nodes'] and nvidia_driver_source is defined
      delegate_to: localhost
"""

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _groups():
    return inventory_groups(INV)


def _failures(out):
    """The failed tasks' blocks of a play's output (the first lines of each)."""
    blocks = out.split("\n\n")
    return "\n\n".join(b[:1500] for b in blocks if "fatal:" in b or "FAILED!" in b)[:8000]


def _without_defaults(options):
    """A role's options without their defaults: the spec's defaults are templates of the role, checked
    by the role itself; here only what the inventory provides is validated."""
    out = {}
    for name, opt in options.items():
        opt = {k: v for k, v in opt.items() if k != "default"}
        if isinstance(opt.get("options"), dict):
            opt["options"] = _without_defaults(opt["options"])
        out[name] = opt
    return out


def _role_specs():
    return {role: _without_defaults(yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text(
        encoding="utf-8"))["argument_specs"]["main"]["options"]) for role in ROLES}


def _inventory_var_names(inv=INV):
    names = set()
    for path in inv.rglob("*.yml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if path.name == "hosts.yml":
            continue
        names |= set(data)
    return names


@pytest.mark.parametrize("playbook", ["site.yml", "validate.yml", "upgrade.yml", "tune_speculative.yml"])
def test_playbooks_parse_and_list_the_hosts(playbook):
    for flag in ("--syntax-check", "--list-hosts"):
        proc = subprocess.run(["ansible-playbook", "-i", str(INV), str(ROOT / "playbooks" / playbook), flag],
                              capture_output=True, text=True, env=ansible_env(), check=False, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if flag == "--list-hosts":
            assert "h200-1" in proc.stdout and "h200-2" in proc.stdout


def test_same_groups_as_the_spark_inventory_one_tp8_replica_per_server():
    groups, spark = _groups(), yaml.safe_load((ROOT / "inventories" / "dgx_spark" / "hosts.yml").read_text())
    spark_groups = set(spark["all"]["children"]["cluster"]["children"]) | {"vllm_heads", "vllm_workers"}
    assert spark_groups <= set(groups)
    assert groups["vllm_heads"] == ["h200-1", "h200-2"] and groups["vllm_workers"] == []
    heads = yaml.safe_load((INV / "hosts.yml").read_text())["all"]["children"]["cluster"]["children"][
        "vllm_nodes"]["children"]["vllm_heads"]["hosts"]
    assert sorted(h["vllm_service_replica"] for h in heads.values()) == ["r1", "r2"]
    nodes = yaml.safe_load((INV / "group_vars" / "vllm_nodes.yml").read_text())
    assert nodes["vllm_service_distributed"]["tensor_parallel_size"] == 8
    assert nodes["vllm_service_model"]["tokenizer_mode"] == "deepseek_v4"
    assert nodes["vllm_service_speculative"]["method"] == "dspark"
    gpu = yaml.safe_load((INV / "group_vars" / "gpu_nodes.yml").read_text())
    assert gpu["nvidia_driver_compute_capabilities"] == ["9.0"]


@pytest.mark.parametrize("inventory", GPU_INVENTORIES)
def test_every_role_spec_and_preflight_pass(inventory, tmp_path):
    inv = ROOT / "inventories" / inventory
    extra = {"repo_root": str(ROOT), "role_names_under_test": ROLES, "out_dir": str(tmp_path), "role_specs": _role_specs(),
             "inventory_var_names": sorted(_inventory_var_names(inv)),
             "hgx_probe": str(ROOT / "tests" / "unit" / "fixtures" / "nvidia" / "constructed_hgx_probe.txt"),
             "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
             "firewall_gather_facts": False, "vault_vllm_api_key": "preflight-test-engine-key-0001",
             "vault_edge_api_keys": ["preflight-test-edge-key-0001"], "vault_hf_token": "preflight-test-hf-token-0001",
             "vault_keepalived_auth_pass": "pf-vrrp1",
             # Asked to install, the driver role declines only for DGX OS.
             "nvidia_driver_install": True,
             # The engine unit's required firewall unit is looked up with systemctl on the node; this
             # machine has no systemd (the lookup is tested in molecule/vllm_service).
             "vllm_service_firewall_unit": "",
             # The certificate the inventory expects on its balancer: a stand-in for its server name.
             **tls_standin(tmp_path / "tls", "llm-internal.example.com")}
    if inventory.startswith("dgx_spark"):
        # No GPU to ask here: the Sparks' source build gets its arch list instead of cuda_check's.
        # (and the cores and memory MAX_JOBS is derived from, else the role would gather this machine's).
        extra.update(cluster_has_gpu=False, dspark_build_torch_cuda_arch_list="12.1a",
                     ansible_processor_vcpus=20, ansible_memtotal_mb=124000)
    proc = run_inventory_play(inv, PLAY, extra, tmp_path)
    assert proc.returncode == 0, _failures(proc.stdout) + proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "failed=0" in proc.stdout and "lb1" in proc.stdout
    decisions = {p.name.split(".")[0]: json.loads(p.read_text()) for p in tmp_path.glob("*.decisions.json")}
    assert decisions, proc.stdout[-3000:]
    for host, made in decisions.items():
        if inventory.startswith("dgx_spark"):
            # DGX OS: NVIDIA's driver is not installed over, its toolkit is neither pinned nor held.
            assert made == {"driver_install": False, "dgx_os": True, "toolkit_vendor_managed": True}, (host, made)
        else:
            assert made == {"driver_install": True, "dgx_os": False, "toolkit_vendor_managed": False}, (host, made)
    if inventory == "hgx_h200":
        assert sorted(decisions) == ["h200-1", "h200-2"]
        for host in ("h200-1", "h200-2"):
            plan = json.loads((tmp_path / f"{host}.plan.json").read_text())
            assert plan["errors"] == [] and plan["modules"] == "precompiled", plan
            assert plan["packages"][0] == "linux-modules-nvidia-580-server-open-6.8.0-45-generic", plan
            assert plan["fabricmanager"] is True and plan["fabricmanager_packages"] == ["nvidia-fabricmanager-580"]
