"""Shared fixtures for the unit tests of the collection's modules and module_utils.

- Makes `ansible_collections.llmops.vllm_cluster` importable from the working tree.
- `run_module`: runs a module's main() in-process with arguments, returns its JSON result.
- `openai_server`: a real HTTP server on 127.0.0.1 (a thread) that speaks enough of the OpenAI/vLLM
  API (health, models, chat and text completions with server-sent events, metrics) for the modules'
  HTTP logic, with switchable faults (503 at first, 401 without key, slow answers, broken streams,
  redirects, answers that trickle a byte at a time, huge answers).
  It is a local stand-in for the real vLLM engine that tests/integration runs against.
- `other_server`: a second one on another port (another origin), that records every request's
  headers: where a redirect must not take the key.
"""
from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures')


def _collection_root():
    linked = os.path.join(REPO, '.cache', 'collections')
    target = os.path.join(linked, 'ansible_collections', 'llmops', 'vllm_cluster')
    if os.path.isdir(os.path.join(target, 'plugins')) and os.path.samefile(target, REPO):
        return linked
    root = tempfile.mkdtemp(prefix='llmops-units-')
    os.makedirs(os.path.join(root, 'ansible_collections', 'llmops'))
    os.symlink(REPO, os.path.join(root, 'ansible_collections', 'llmops', 'vllm_cluster'))
    return root


if not any(os.path.isdir(os.path.join(p, 'ansible_collections', 'llmops', 'vllm_cluster', 'plugins'))
           for p in sys.path if p):
    sys.path.insert(0, _collection_root())


def fixture_text(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


@pytest.fixture
def run_module():
    """run_module(module, args) -> (result dict, failed bool)."""
    from ansible.module_utils.testing import patch_module_args

    def runner(module, args):
        out = io.StringIO()
        with patch_module_args(args), redirect_stdout(out):
            with pytest.raises(SystemExit) as exc:
                module.main()
        result = json.loads(out.getvalue())
        assert (exc.value.code != 0) == bool(result.get('failed')), result
        return result, bool(result.get('failed'))
    return runner


class ServerState:
    """Knobs of the stand-in server; tests change them between requests."""

    def __init__(self):
        self.model = 'tiny-llama'
        self.api_key = None
        self.health_failures = 0        # answer 503 to this many /health requests first
        self.models_failures = 0        # answer 503 to this many /v1/models requests first
        self.models_answered = None     # after this many /v1/models answers, hang (never answer) instead
        self.delay = 0.0                # seconds before answering a completion
        self.first_token_delay = 0.0    # seconds between the SSE headers and the first token
        self.token_delay = 0.0          # seconds between one streamed token and the next
        self.tokens = ['Hello', ',', ' world', '!']
        self.send_usage = True
        self.break_stream = False       # close the stream without data: [DONE]
        self.completion_status = 200
        self.metrics = ''
        self.upstreams = []             # cycle through these names in X-Upstream
        self.redirects = {}             # path -> Location (302 for GET, 307 for POST)
        self.trickle = 0.0              # > 0: /metrics and streams send one byte every this many seconds
        self.trickle_bytes = 400        # how many bytes a trickled answer has in all
        self.trickle_head = False       # trickle the status line and headers too
        self.chunked_metrics = False    # /metrics without Content-Length (read until the server closes)
        self.requests = []              # (method, path, body dict or None, headers)
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.counter = 0


class Handler(BaseHTTPRequestHandler):
    server_version = 'standin-openai/1'

    def log_message(self, *args):  # quiet
        pass

    @property
    def state(self):
        return self.server.state

    def _send(self, status, body, ctype='application/json', extra=None):
        data = body if isinstance(body, bytes) else (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        if self.state.api_key is None:
            return True
        return self.headers.get('Authorization') == 'Bearer %s' % self.state.api_key

    def _redirect(self, code):
        location = self.state.redirects.get(self.path)
        if location is None:
            return False
        self.send_response(code)
        self.send_header('Location', location)
        self.send_header('Content-Length', '0')
        self.end_headers()
        return True

    def _trickle(self, ctype, prefix=b''):
        """Headers at once, then the body one byte at a time (a slow or hostile server)."""
        st = self.state
        body = (prefix + b'x' * st.trickle_bytes)[:st.trickle_bytes]
        if st.trickle_head:
            body = (b'HTTP/1.1 200 OK\r\nContent-Type: %s\r\n' % ctype.encode()
                    + b'X-Padding: %s\r\n' % (b'p' * st.trickle_bytes) + b'\r\n' + body)
        else:
            self.send_response(200)
            self.send_header('Content-Type', ctype)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(st.trickle)
        except OSError:
            pass  # the client gave up: what a trickled client should do

    def do_GET(self):
        st = self.state
        st.requests.append(('GET', self.path, None, dict(self.headers)))
        if self._redirect(302):
            return None
        if st.trickle and self.path in ('/metrics', '/health'):
            return self._trickle('text/plain')
        if self.path == '/health':
            with st.lock:
                if st.health_failures > 0:
                    st.health_failures -= 1
                    return self._send(503, {'error': 'loading'})
            return self._send(200, b'', 'text/plain')
        if self.path == '/metrics':
            if st.chunked_metrics:
                self.send_response(200)
                self.send_header('Content-Type', 'text/plain; version=0.0.4')
                self.send_header('Connection', 'close')
                self.end_headers()
                try:
                    data = st.metrics.encode()
                    for i in range(0, len(data), 65536):
                        self.wfile.write(data[i:i + 65536])
                except OSError:
                    pass
                self.close_connection = True
                return None
            return self._send(200, st.metrics, 'text/plain; version=0.0.4')
        if self.path == '/v1/models':
            if not self._authorized():
                return self._send(401, {'error': 'Unauthorized'})
            with st.lock:
                if st.models_failures > 0:
                    st.models_failures -= 1
                    return self._send(503, {'error': 'starting'})
                hang = st.models_answered is not None and st.models_answered <= 0
                if st.models_answered is not None:
                    st.models_answered -= 1
            if hang:
                time.sleep(5)
                self.close_connection = True
                return None
            return self._send(200, {'object': 'list', 'data': [{'id': st.model, 'object': 'model'}]})
        return self._send(404, {'detail': 'Not Found'})

    def do_POST(self):
        st = self.state
        length = int(self.headers.get('Content-Length', '0'))
        body = json.loads(self.rfile.read(length) or b'{}')
        st.requests.append(('POST', self.path, body, dict(self.headers)))
        if self._redirect(307):
            return None
        if st.trickle:
            return self._trickle('text/event-stream', b'data: {"choices": [{"index": 0, "text": "')
        if self.path not in ('/v1/chat/completions', '/v1/completions'):
            return self._send(404, {'detail': 'Not Found'})
        if not self._authorized():
            return self._send(401, {'error': 'Unauthorized'})
        chat = self.path.endswith('chat/completions')
        if (chat and 'messages' not in body) or (not chat and 'prompt' not in body):
            return self._send(400, {'error': {'message': 'missing messages/prompt'}})
        if body.get('model') != st.model:
            return self._send(404, {'error': {'message': 'The model `%s` does not exist.' % body.get('model')}})
        with st.lock:
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            st.counter += 1
            upstream = st.upstreams[st.counter % len(st.upstreams)] if st.upstreams else None
        held = [True]

        def release():
            # Before the answer's last bytes: a client that read them may send its next request
            # before this thread runs again, and must not be counted twice.
            if held[0]:
                held[0] = False
                with st.lock:
                    st.in_flight -= 1
        try:
            time.sleep(st.delay)
            extra = {'X-Upstream': upstream} if upstream else {}
            if st.completion_status != 200:
                return self._send(st.completion_status, {'error': {'message': 'engine dead'}}, extra=extra)
            tokens = st.tokens[:body.get('max_tokens', 16)]
            usage = {'prompt_tokens': 7, 'completion_tokens': len(tokens), 'total_tokens': 7 + len(tokens)}
            if not body.get('stream'):
                choice = {'index': 0, 'finish_reason': 'length'}
                if chat:
                    choice['message'] = {'role': 'assistant', 'content': ''.join(tokens)}
                else:
                    choice['text'] = ''.join(tokens)
                release()
                return self._send(200, {'id': 'x', 'choices': [choice], 'usage': usage}, extra=extra)
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()

            def event(obj):
                self.wfile.write(('data: %s\n\n' % json.dumps(obj)).encode())
                self.wfile.flush()
            if chat:
                event({'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}}]})
            self.wfile.write(b': keep-alive\n\n')
            time.sleep(st.first_token_delay)
            for i, tok in enumerate(tokens):
                last = i == len(tokens) - 1
                if i:
                    time.sleep(st.token_delay)
                choice = {'index': 0, 'finish_reason': 'length' if last else None}
                if chat:
                    choice['delta'] = {'content': tok}
                else:
                    choice['text'] = tok
                event({'choices': [choice]})
            if st.break_stream:
                return None
            if st.send_usage and body.get('stream_options', {}).get('include_usage'):
                event({'choices': [], 'usage': usage})
            release()
            self.wfile.write(b'data: [DONE]\n\n')
            self.wfile.flush()
            return None
        finally:
            release()


class StandinServer(ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 drops bursts of concurrent connects (1 s SYN retry)
    daemon_threads = True


def _serve():
    server = StandinServer(('127.0.0.1', 0), Handler)
    server.state = ServerState()
    server.state.base_url = 'http://127.0.0.1:%d' % server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def openai_server():
    yield from _serve()


@pytest.fixture
def other_server():
    yield from _serve()
