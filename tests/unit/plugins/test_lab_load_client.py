"""The lab's load client (tests/lab/lab_load.py: the cluster benchmark and the fault tests count
failed requests with it) judges a request the way the collection's own client does: a complete
stream is served even when its tokens decode to no text; a stream cut before [DONE] is a failure
even after text arrived. Run against the local stand-in server (conftest.openai_server)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'lab'))
import lab_load  # noqa: E402  pylint: disable=wrong-import-position


def test_complete_stream_is_served_with_upstream_and_key(openai_server):
    st = openai_server
    st.api_key, st.upstreams = 'k-lab', ['10.89.0.5:8000']
    res = lab_load.one_request(st.base_url, 'k-lab', st.model, 'hi', 4, timeout=5)
    assert res['ok'] and res['error'] is None and res['status'] == 200, res
    assert res['tokens'] == 4 and res['text_chunks'] == 4 and res['upstream'] == '10.89.0.5:8000'
    assert 0 < res['ttft'] <= res['latency'] and res['start'] < res['end']


def test_complete_stream_without_text_is_served_and_counted(openai_server):
    st = openai_server
    st.tokens = ['', '']
    res = lab_load.one_request(st.base_url, None, st.model, 'hi', 2, timeout=5)
    assert res['ok'] and res['text_chunks'] == 0 and res['tokens'] == 2 and res['ttft'] is not None, res


def test_stream_cut_after_text_is_a_failure(openai_server):
    st = openai_server
    st.break_stream = True
    res = lab_load.one_request(st.base_url, None, st.model, 'hi', 16, timeout=5)
    assert not res['ok'] and 'without data: [DONE]' in res['error'], res


def test_wrong_key_and_refused_connection_are_failures(openai_server):
    st = openai_server
    st.api_key = 'k-lab'
    res = lab_load.one_request(st.base_url, 'wrong', st.model, 'hi', 16, timeout=5)
    assert not res['ok'] and res['status'] == 401 and res['error'].startswith('HTTP 401'), res
    res = lab_load.one_request('http://127.0.0.1:9', None, st.model, 'hi', 16, timeout=5)
    assert not res['ok'] and res['status'] is None and res['error'], res


def test_stream_ended_early_is_a_failure(openai_server):
    # ignore_eos is set: fewer tokens than max_tokens means the engine ended the request early
    # (a stopping engine aborts it), even with a clean [DONE].
    res = lab_load.one_request(openai_server.base_url, None, openai_server.model, 'hi', 16, timeout=5)
    assert not res['ok'] and res['error'] == 'generated 4 of 16 tokens (finish_reason length)', res
