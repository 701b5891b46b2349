"""vllm_service's `hf` staging method, run on this machine (local connection) against the local
hub STAND-IN (tests/lab/standins/hf_hub.py on loopback), with the lab vLLM venv's own `hf` CLI:
the pinned revision is staged byte for byte, a second run changes nothing, the token reaches the
stand-in but never Ansible's output (even at -vvv), and a refused download fails with what hf said.
The molecule scenario vllm_service runs the same method on a lab host behind a real engine.
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import MODEL_DIR, REPO, VENV, free_port

COMMIT = "5eed1ab5eed1ab5eed1ab5eed1ab5eed1ab5eed1"
TOKEN = "hf_integrationToken0000000001"
PLAY = """
- name: Stage only
  hosts: local1
  gather_facts: false
  tasks:
    - name: Facts
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: facts, public: true}
    - name: Directories
      ansible.builtin.file: {path: "{{ vllm_service_models_dir }}", state: directory, mode: "0755"}
    - name: Stage
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: stage}
"""
INVENTORY = "all:\n  children:\n    vllm_nodes:\n      children:\n        vllm_heads:\n          hosts:\n" \
            "            local1: {ansible_connection: local}\n"

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "hf").exists() or not MODEL_DIR.exists(),
                                reason="the lab vLLM venv (with hf) and tiny model are not built")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("hub") / "hub.log"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests/lab/standins/hf_hub.py"), "--dir", str(MODEL_DIR),
                             "--repo", "lab/tiny-llama", "--commit", COMMIT, "--bind", "127.0.0.1",
                             "--port", str(port), "--token", TOKEN, "--log", str(log)])
    url = f"http://127.0.0.1:{port}"
    for _attempt in range(50):
        try:
            urllib.request.urlopen(url + "/", timeout=2)  # noqa: S310 - loopback
        except urllib.error.HTTPError:
            break  # the stand-in answers (401 without the token)
        except OSError:
            time.sleep(0.2)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


def stage(tmp_path, endpoint, token, verbose=False):
    (tmp_path / "inv.yml").write_text(INVENTORY, encoding="utf-8")
    (tmp_path / "play.yml").write_text(PLAY, encoding="utf-8")
    extra = {"ansible_python_interpreter": sys.executable, "vllm_service_venv": str(VENV),
             "vllm_service_models_dir": str(tmp_path / "models"), "vllm_service_model": {"name": "tiny-llama"},
             "vllm_service_model_stage": {"method": "hf", "repo": "lab/tiny-llama", "revision": COMMIT,
                                          "token": token, "endpoint": endpoint}}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = ["ansible-playbook", "-i", str(tmp_path / "inv.yml"), str(tmp_path / "play.yml"), "-e", json.dumps(extra)]
    proc = subprocess.run(cmd + (["-vvv"] if verbose else []), capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def files(root):
    out = {}
    for base, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".cache"]
        for name in names:
            path = os.path.join(base, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def test_hf_stages_the_pinned_revision_once_and_never_shows_the_token(hub, tmp_path):
    url, log = hub
    rc, out = stage(tmp_path, url, TOKEN, verbose=True)
    assert rc == 0, out[-4000:]
    assert TOKEN not in out
    staged = tmp_path / "models" / "tiny-llama"
    assert files(staged) == files(MODEL_DIR)
    assert (staged / ".cache" / "llmops-staged").read_text().strip() == f"lab/tiny-llama@{COMMIT}"
    progress = tmp_path / "models" / ".tiny-llama.hf-download.log"
    assert str(progress) in out and f"hf download lab/tiny-llama@{COMMIT}" in progress.read_text()
    assert TOKEN not in progress.read_text()
    assert f"/lab/tiny-llama/resolve/{COMMIT}/model.safetensors HTTP/1.1\" 200" in log.read_text()
    rc, out = stage(tmp_path, url, TOKEN)
    assert rc == 0 and " changed=0 " in out, out[-3000:]


def test_a_refused_download_fails_with_what_hf_said(hub, tmp_path):
    url, _log = hub
    rc, out = stage(tmp_path, url, "hf_wrongToken00000000000001", verbose=True)
    flat = " ".join(out.split())
    assert rc != 0
    assert f"hf download of lab/tiny-llama@{COMMIT}" in flat and "rerun to resume" in flat, flat[-3000:]
    assert "401 Unauthorized" in flat and "Invalid credentials" in flat
    assert "hf_wrongToken00000000000001" not in out
    assert not (tmp_path / "models" / "tiny-llama" / ".cache" / "llmops-staged").exists()
