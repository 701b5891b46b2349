"""The integration fixture itself: a real vLLM CPU engine answering on loopback, with ngram
speculative decoding producing real spec-decode metrics."""
import json
import re

from conftest import http


def metric(text, name):
    """Sum of a Prometheus counter/gauge over its label sets (0 when absent)."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if m:
            total += float(m.group(2))
            found = True
    return total if found else None


def test_completion_answered(vllm_server):
    status, body = vllm_server.complete("The cluster serves", max_tokens=8)
    assert status == 200, body
    data = json.loads(body)
    assert data["model"] == vllm_server.model
    assert data["usage"]["completion_tokens"] >= 1
    assert isinstance(data["choices"][0]["text"], str)


def test_api_key_enforced_on_v1(vllm_server):
    body = {"model": vllm_server.model, "prompt": "hi", "max_tokens": 2}
    status, _unused = http("POST", f"{vllm_server.base_url}/v1/completions", body)
    assert status == 401
    status, _unused = http("POST", f"{vllm_server.base_url}/v1/completions", body, api_key="wrong")
    assert status == 401


def test_chat_template_served(vllm_server):
    status, body = http("POST", f"{vllm_server.base_url}/v1/chat/completions",
                        {"model": vllm_server.model, "max_tokens": 4,
                         "messages": [{"role": "user", "content": "Hello"}]}, vllm_server.api_key)
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"


def test_spec_decode_metrics_count_drafts(vllm_server):
    before = metric(vllm_server.metrics(), "vllm:spec_decode_num_drafts_total") or 0.0
    # Repetitive prompts give the ngram proposer matches to draft from.
    prompt = "one two three four one two three four one two three four one two three"
    for _unused in range(5):
        status, body = vllm_server.complete(prompt, max_tokens=24)
        assert status == 200, body
    text = vllm_server.metrics()
    drafts = metric(text, "vllm:spec_decode_num_drafts_total")
    assert drafts is not None, "vllm:spec_decode_num_drafts_total missing from /metrics"
    assert drafts > before, (before, drafts)
    assert metric(text, "vllm:spec_decode_num_draft_tokens_total") >= drafts
    assert metric(text, "vllm:spec_decode_num_accepted_tokens_total") is not None
