"""The serving path: two real vLLM CPU replicas (vllm_service) behind nginx (nginx_lb)."""
import collections
import re

import yaml

from conftest import EDGE_KEY, HEADS, LB, MODEL, VLLM_KEY
from lab_testinfra import exposure

# systemd-analyze's overall exposure (0 = fully sandboxed, 10 = none): the unit must stay below this.
EXPOSURE_THRESHOLD = 3.0


def main_pid(h):
    return h.check_output("systemctl show -p MainPID --value vllm")


def test_engine_runs_sandboxed_as_its_own_user(lab_host):
    for name in HEADS:
        h = lab_host(name)
        assert h.service("vllm").is_running and h.service("vllm").is_enabled
        pid = main_pid(h)
        assert h.check_output(f"ps -o user= -p {pid}") == "vllm"
        status = h.file(f"/proc/{pid}/status").content_string
        assert re.search(r"^CapBnd:\s+0+$", status, re.M), status  # CapabilityBoundingSet= (empty)
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
        mounts = h.file(f"/proc/{pid}/mountinfo").content_string
        assert re.search(r" /usr ro[, ]", mounts) or re.search(r" / ro[, ]", mounts), "ProtectSystem=strict"
        level = exposure(h, "vllm")
        print(f"\nexposure {name} vllm.service: {level}")
        assert level < EXPOSURE_THRESHOLD, level


def test_api_key_only_in_the_root_only_environment_file(lab_host):
    for name in HEADS:
        h = lab_host(name)
        env = h.file("/etc/vllm/vllm.env")
        assert env.mode == 0o600 and env.user == "root"
        assert VLLM_KEY in env.content_string
        for path in ("/etc/systemd/system/vllm.service", "/etc/vllm/config.yaml"):
            assert VLLM_KEY not in h.file(path).content_string, path
        assert VLLM_KEY not in h.check_output("ps -eo args")
        assert VLLM_KEY not in h.check_output("journalctl -u vllm --no-pager -o cat | tail -n 2000")
        assert h.run("ls /etc/vllm | grep -E '~$'").stdout == ""  # no backup copies left behind


def test_config_is_a_real_vllm_config_file(lab_host):
    cfg = yaml.safe_load(lab_host(HEADS[0]).file("/etc/vllm/config.yaml").content_string)
    assert cfg["model"] == "/var/lib/vllm/models/tiny-llama"
    assert cfg["served-model-name"] == MODEL
    assert cfg["speculative-config"] == {"method": "ngram", "num_speculative_tokens": 3,
                                         "prompt_lookup_max": 3, "prompt_lookup_min": 2}
    assert cfg["max-model-len"] == 512 and cfg["enforce-eager"] is True
    assert "metrics-port" not in cfg and "speculative_ratio" not in str(cfg)


def test_fabric_and_offline_environment_reach_the_engine(lab_host):
    h = lab_host(HEADS[0])
    environ = h.check_output(f"tr '\\0' '\\n' < /proc/{main_pid(h)}/environ").splitlines()
    for var in ("NCCL_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth0", "HF_HUB_OFFLINE=1",
                "VLLM_CACHE_ROOT=/var/cache/vllm/vllm", "VLLM_CPU_KVCACHE_SPACE=1"):
        assert var in environ, var


def test_replicas_require_their_key_and_answer(heads):
    for client in heads.values():
        assert client.complete(key="")[0] == 401
        status, _unused, body = client.complete()
        assert status == 200, body
        status, _unused, body = client.request("GET", "/metrics")
        assert status == 200 and b"vllm:num_requests_running" in body  # metrics on the API port


def test_edge_hides_the_replicas_internals(lb):
    assert lb.request("GET", "/lb-health", key="")[:1] == (200,)
    for path in ("/health", "/metrics", "/version", "/"):
        assert lb.request("GET", path)[0] == 404, path
    assert lb.complete(key="")[0] == 401
    status, headers, _unused = lb.complete()
    assert status == 200 and headers.get("Server") == "nginx"


def test_stream_first_token_arrives_through_nginx_before_the_end(lb):
    # A buffering proxy would deliver the first token together with the last (first == end within
    # milliseconds); streamed, the first arrives while hundreds of tokens are still to come. A CPU
    # engine starved by a busy machine can also send a whole stream in one burst (its API server
    # catches up at once), so up to 3 streams are tried: a buffering proxy fails all of them.
    seen = []
    for _attempt in range(3):
        status, headers, first, end, chunks = lb.stream(max_tokens=384)
        assert status == 200 and headers.get("X-Upstream")
        assert len("".join(chunks)) > 0 and len(chunks) >= 96, len(chunks)
        seen.append((first, end))
        if first is not None and first < 0.8 * end and end - first > 0.2:
            break
    else:
        raise AssertionError(f"every stream arrived in one burst (first token, end; seconds): {seen}")


def test_100_concurrent_requests_all_succeed_and_spread_evenly(run_module, heads):
    res = run_module(LB, "llmops.vllm_cluster.openai_load", {
        "base_url": "http://127.0.0.1", "api_key": EDGE_KEY, "model": MODEL, "api": "completion",
        "requests": 100, "concurrency": 100, "stream": False, "max_tokens": 16,
        "upstream_header": "X-Upstream", "min_success_ratio": 1.0, "deadline": 300})
    assert not res.get("failed"), res
    counts = {k.split(":")[0]: v for k, v in res["upstreams"].items()}
    assert sum(counts.values()) == 100 and set(counts) == {c.address for c in heads.values()}, counts
    # least_conn balances open connections, not counts: the replica that finishes sooner gets more.
    # Two CPU engines sharing 2 cores with another CI lane are unequal: 67/33 and 76/24 seen in CI.
    # Each must still take a real share (at most 9:1); a dead or skipped one gets 0.
    assert min(counts.values()) >= 10, counts


def test_unknown_flag_is_refused_and_the_running_engine_untouched(lab_host, heads, run_converge):
    before = {n: (main_pid(lab_host(n)), lab_host(n).file("/etc/vllm/config.yaml").sha256sum) for n in HEADS}
    rc, out = run_converge({"vllm_service_extra_args": {"enforce_eager": True, "no_such_flag": 1}}, one_line=True)
    assert rc != 0
    assert "unrecognized arguments: --no-such-flag" in out and "left untouched" in out, out[-4000:]
    for n in HEADS:
        assert (main_pid(lab_host(n)), lab_host(n).file("/etc/vllm/config.yaml").sha256sum) == before[n]
        assert heads[n].complete()[0] == 200


def test_seed_fields_are_refused_with_the_real_field_named(run_converge):
    seed_speculative = {"method": "dspark", "num_speculative_tokens": 5,
                        "speculative_ratio": 4, "verify_schedule": "smart"}
    rc, out = run_converge({"vllm_service_speculative": seed_speculative}, one_line=True)
    assert rc != 0 and "num_speculative_tokens" in out and "enable_adaptive_verification" in out, out[-3000:]
    rc, out = run_converge({"vllm_service_extra_args": {"metrics_port": 8001}}, one_line=True)
    assert rc != 0 and "no --metrics-port" in out and "/metrics" in out, out[-3000:]


def test_a_config_that_fails_at_start_is_rolled_back(lab_host, heads, run_converge):
    name = HEADS[1]
    h = lab_host(name)
    before = h.file("/etc/vllm/config.yaml").sha256sum
    # Valid for the parser, refused by the engine at start (the tiny model's context is 2048).
    rc, out = run_converge({"vllm_service_scheduler": {"max_model_len": 100000}, "vllm_service_ready_timeout": 60,
                            "vllm_service_recover_timeout": 420}, limit=name, timeout=1200, one_line=True)
    assert rc != 0, out[-4000:]
    assert "restored and restarted and serves again" in out, out[-4000:]
    assert "max_model_len" in out, out[-4000:]
    assert "lines of the journal of this start (journalctl -u vllm)" in out, out[-4000:]
    assert h.file("/etc/vllm/config.yaml").sha256sum == before
    assert heads[name].complete()[0] == 200


def test_a_stopped_replica_leaves_the_others_serving(lab_host, lb, heads):
    h2 = lab_host(HEADS[1])
    h2.check_output("systemctl stop vllm")
    try:
        served = collections.Counter()
        for _unused in range(20):
            status, headers, body = lb.complete()
            assert status == 200, body
            served[headers["X-Upstream"].split(", ")[-1].split(":")[0]] += 1
        assert set(served) == {heads[HEADS[0]].address}, served
    finally:
        # Started again for anyone looking at the lab afterwards; verify does not wait for it.
        h2.check_output("systemctl start vllm")
