"""Unit tests for plugins/filter/vllm_service.py (the deny-list of risky vLLM switches), with the
role's own table (roles/vllm_service/vars/main.yml)."""
from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("llmops_vllm_service_filter",
                                               os.path.join(_ROOT, "plugins", "filter", "vllm_service.py"))
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)

with open(os.path.join(_ROOT, "roles", "vllm_service", "vars", "main.yml"), encoding="utf-8") as fh:
    TABLE = yaml.safe_load(fh)["vllm_service__risky_switches"]


def risky(environment=None, extra_args=None, engine=None, api=None, allowed=None):
    return vs.vllm_risky_switches(environment or {}, {"vllm_service_extra_args": extra_args or {},
                                                      "vllm_service_engine": engine or {},
                                                      "vllm_service_api": api or {}}, TABLE, allowed)


@pytest.mark.parametrize("environment, name, opens", [
    ({"VLLM_SERVER_DEV_MODE": "1"}, "VLLM_SERVER_DEV_MODE", "/collective_rpc"),
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "/v1/load_lora_adapter"),
    ({"VLLM_DEBUG_LOG_API_SERVER_RESPONSE": "true"}, "VLLM_DEBUG_LOG_API_SERVER_RESPONSE", "journal"),
    ({"VLLM_ALLOW_INSECURE_SERIALIZATION": 1}, "VLLM_ALLOW_INSECURE_SERIALIZATION", "pickle"),
    ({"VLLM_TORCH_PROFILER_DIR": "/var/cache/vllm/traces"}, "VLLM_TORCH_PROFILER_DIR", "/start_profile"),
])
def test_risky_environment_is_refused_naming_variable_and_endpoint(environment, name, opens):
    errors = risky(environment)
    assert len(errors) == 1, errors
    assert errors[0].startswith("vllm_service_environment.%s=" % name), errors
    assert opens in errors[0] and "vllm_service_allow_risky lists '%s'" % name in errors[0], errors


@pytest.mark.parametrize("args, text", [
    ({"enable_log_requests": True}, "vllm_service_extra_args.enable_log_requests=True (--enable-log-requests)"),
    ({"enable-log-requests": True}, "vllm_service_extra_args.enable-log-requests=True (--enable-log-requests)"),
    ({"--enable-log-outputs": True}, "(--enable-log-outputs) opens every generated output"),
    ({"profiler_config": {"profiler": "torch", "torch_profiler_dir": "/tmp/p"}}, "/start_profile"),
    ({"enable_tokenizer_info_endpoint": True}, "/tokenizer_info"),
    ({"trust_request_chat_template": True}, "chat templates sent by clients"),
    ({"allowed_local_media_path": "/srv"}, "files under that host path"),
    ({"tool_server": "demo"}, "model-generated Python"),
])
def test_risky_engine_args_are_refused(args, text):
    errors = risky(extra_args=args)
    assert len(errors) == 1 and text in errors[0], errors


def test_the_variable_the_flag_came_from_is_named():
    errors = risky(engine={"enable_log_requests": True})
    assert errors and errors[0].startswith("vllm_service_engine.enable_log_requests=True"), errors


@pytest.mark.parametrize("environment, args", [
    ({"VLLM_SERVER_DEV_MODE": "0"}, {}),
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "false"}, {}),
    ({"VLLM_TORCH_PROFILER_DIR": ""}, {}),
    ({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "600"}, {}),
    ({}, {"enable_log_requests": False, "enable_log_outputs": False, "profiler_config": {}}),
    ({}, {"enforce_eager": True, "disable_log_stats": False}),
    # the table's names mean one place: a flag named like an environment variable is not it
    ({}, {"VLLM_SERVER_DEV_MODE": True}),
])
def test_off_or_harmless_settings_pass(environment, args):
    assert risky(environment, args) == []


def test_override_accepts_only_what_it_names():
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    errors = risky(env, {"enable-log-requests": True}, allowed=["VLLM_SERVER_DEV_MODE", "enable-log-requests"])
    assert len(errors) == 1 and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in errors[0], errors


def test_unknown_override_is_reported():
    errors = risky(allowed=["VLLM_SERVER_DEV_MOD"])
    assert len(errors) == 1 and "vllm_service_allow_risky: 'VLLM_SERVER_DEV_MOD' is not one of" in errors[0]


def test_registered():
    assert vs.FilterModule().filters() == {"vllm_risky_switches": vs.vllm_risky_switches,
                                           "vllm_adaptive_verification_errors": vs.vllm_adaptive_verification_errors}


with open(os.path.join(_ROOT, "roles", "vllm_service", "vars", "main.yml"), encoding="utf-8") as fh:
    AV_TABLE = yaml.safe_load(fh)["vllm_service__adaptive_verification"]
DSV4_MODELS = [({"tokenizer_mode": "deepseek_v4"}, {"method": "mtp"}), ({}, {"method": "dspark"}),
               ({"tokenizer_mode": "deepseek_v4"}, {"method": "dspark"})]


def av(model, speculative, caps):
    return vs.vllm_adaptive_verification_errors(speculative, model, caps, AV_TABLE)


# Every capability major.minor a node may report, for every way the profile names DeepSeek-V4:
# refused exactly off 9.x/10.x (DeepseekV4IndexerBackend), with the reason and the way out.
@pytest.mark.parametrize("model, speculative", DSV4_MODELS)
@pytest.mark.parametrize("cap", ["%d.%d" % (major, minor) for major in range(7, 13) for minor in (0, 1, 3, 7, 9)])
def test_adaptive_verification_refused_exactly_off_hopper_and_datacenter_blackwell(model, speculative, cap):
    errors = av(model, dict(speculative, enable_adaptive_verification=True), [cap])
    if cap.split(".")[0] in ("9", "10"):
        assert errors == []
    else:
        assert len(errors) == 1, errors
        assert cap in errors[0] and "DEEPSEEK_V4_INDEXER" in errors[0] and "enable_adaptive_verification: false" in errors[0]


@pytest.mark.parametrize("on", [True, "true", "yes", 1])
def test_adaptive_verification_on_gb10_is_refused_whatever_the_spelling(on):
    assert av({"tokenizer_mode": "deepseek_v4"}, {"method": "dspark", "enable_adaptive_verification": on}, ["12.1"])


@pytest.mark.parametrize("off", [False, "false", "no", 0, None, ""])
def test_adaptive_verification_off_is_never_refused(off):
    assert av({"tokenizer_mode": "deepseek_v4"}, {"method": "dspark", "enable_adaptive_verification": off}, ["12.1"]) == []


def test_mixed_nodes_name_the_ones_that_cannot():
    errors = av({}, {"method": "dspark", "enable_adaptive_verification": True}, ["9.0", "12.1"])
    assert len(errors) == 1 and "12.1" in errors[0] and "9.0," not in errors[0]


def test_other_models_and_unknown_gpus_are_not_refused():
    assert av({"tokenizer_mode": "auto"}, {"method": "eagle3", "enable_adaptive_verification": True}, ["12.1"]) == []
    assert av({"tokenizer_mode": "deepseek_v4"}, {"method": "dspark", "enable_adaptive_verification": True}, []) == []
