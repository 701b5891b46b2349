# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""HTTP for OpenAI-compatible servers: plain requests, and completions (streamed or not) with
time-to-first-token measurement.

Built on the standard library's urllib (the environment's proxies) with ansible.module_utils.urls'
TLS context (validate_certs, ca_path as every other Ansible HTTP module), and three guards:

- the API key and the extra headers go to base_url's origin only: a redirect to another scheme,
  host or port is refused, not followed (a same-origin redirect of a GET is followed);
- a response body (a whole stream included) is read up to a size limit, never further;
- every request has a deadline that holds for connect, headers, body and stream alike: a watchdog
  shuts the socket down when it passes, so a server that trickles a byte at a time cannot stretch it.

Nothing here ever puts the API key into a returned value or a message.
"""

from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.request

from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import make_context

BODY_LIMIT = 500
APIS = ('chat', 'completion')
API_PATHS = {'chat': '/v1/chat/completions', 'completion': '/v1/completions'}
# Largest response body read (bytes) unless the caller says otherwise: a stream counts as one body.
MAX_RESPONSE_SIZE = 32 * 1024 * 1024
_READ_SIZE = 65536


_CONTEXTS = {}
_CONTEXTS_LOCK = threading.Lock()


def _ssl_context(validate_certs, ca_path):
    """One TLS context per (validate_certs, ca_path), shared by every request and thread.

    Building a context loads the system CA store (about 0.2 s of CPU); doing it per request, as
    open_url does, would dominate the latency a load test measures.
    """
    key = (bool(validate_certs), ca_path)
    with _CONTEXTS_LOCK:
        if key not in _CONTEXTS:
            _CONTEXTS[key] = make_context(cafile=ca_path, validate_certs=validate_certs)
        return _CONTEXTS[key]


class ResponseTooLarge(Exception):
    """The server sent more than the size limit."""


class RedirectRefused(Exception):
    """The server redirected to another origin; the request was not sent there."""


def origin(url):
    """(scheme, host, port) of a URL, the port filled in from the scheme."""
    parts = urlsplit(url)
    scheme = (parts.scheme or '').lower()
    return scheme, (parts.hostname or '').lower(), parts.port or {'http': 80, 'https': 443}.get(scheme)


class Deadline:
    """The end of one request. A watchdog timer shuts the request's socket down when it passes:
    a read blocked on a server that sends a byte now and then returns at once."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._socks = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self):
        return self.end - time.monotonic()

    def watch(self, sock):
        with self._lock:
            self._socks.append(sock)
            expired = self.expired
        if expired:
            self._shutdown(sock)

    @staticmethod
    def _shutdown(sock):
        try:
            # The descriptor itself (for TLS too): a read blocked in another thread returns.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except (OSError, ValueError):
            pass

    def _fire(self):
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            self._shutdown(sock)

    def cancel(self):
        self._timer.cancel()


def _watched(base):
    class Watched(base):  # pylint: disable=too-few-public-methods
        def __init__(self, *args, **kwargs):
            self._llmops_deadline = kwargs.pop('deadline')
            super().__init__(*args, **kwargs)

        def connect(self):
            super().connect()
            self._llmops_deadline.watch(self.sock)
    return Watched


_WatchedHTTPConnection = _watched(http.client.HTTPConnection)
_WatchedHTTPSConnection = _watched(http.client.HTTPSConnection)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(functools.partial(_WatchedHTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline, context):
        super().__init__(context=context)
        self._deadline = deadline
        self._llmops_context = context

    def https_open(self, req):
        return self.do_open(functools.partial(_WatchedHTTPSConnection, deadline=self._deadline), req,
                            context=self._llmops_context)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows a redirect of a GET or HEAD to the same origin only; anything else is answered as it
    came (a POST's 3xx) or refused (another scheme, host or port: the key would go there too)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl) != origin(req.full_url):
            fp.close()
            target = urlsplit(newurl)
            raise RedirectRefused('redirect refused: HTTP %s to another origin (%s://%s); the API key and headers '
                                  'are only sent to base_url' % (code, target.scheme, target.netloc))
        if req.get_method() not in ('GET', 'HEAD'):
            raise HTTPError(req.full_url, code, msg, headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _open(url, data, headers, method, deadline, validate_certs, ca_path, read_timeout=None):
    """Send one request; returns the response (its socket watched by deadline). Raises HTTPError for
    an HTTP error status, RedirectRefused, or the connection's error."""
    context = _ssl_context(validate_certs, ca_path)
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline, context), _RedirectHandler())
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    timeout = max(min(read_timeout or deadline.seconds, deadline.remaining()), 0.001)
    return opener.open(request, timeout=timeout)


def _arm(resp, deadline, read_timeout):
    """Bound the next socket read by the time left (and by read_timeout)."""
    if deadline.remaining() <= 0:
        raise socket.timeout('timed out')
    sock = getattr(getattr(getattr(resp, 'fp', None), 'raw', None), '_sock', None)
    if sock is not None:
        try:
            sock.settimeout(max(min(read_timeout, deadline.remaining()), 0.001))
        except OSError:
            pass


def _chunks(resp, deadline, read_timeout, limit):
    """The body in pieces as they arrive; raises ResponseTooLarge past limit bytes, socket.timeout
    at the deadline."""
    length = resp.headers.get('Content-Length') if resp.headers is not None else None
    if length and length.isdigit() and int(length) > limit:
        raise ResponseTooLarge('the response is %s bytes, more than the limit of %d (max_response_size)'
                               % (length, limit))
    read = getattr(resp, 'read1', None) or resp.read
    total = 0
    while True:
        _arm(resp, deadline, read_timeout)
        try:
            data = read(_READ_SIZE)
        except (OSError, ValueError, http.client.HTTPException):
            if deadline.expired or deadline.remaining() <= 0:
                raise socket.timeout('timed out')
            raise
        if deadline.expired:
            raise socket.timeout('timed out')
        if not data:
            return
        total += len(data)
        if total > limit:
            raise ResponseTooLarge('the response is larger than the limit of %d bytes (max_response_size)' % limit)
        yield data


def read_body(resp, deadline, read_timeout, limit=MAX_RESPONSE_SIZE):
    return b''.join(_chunks(resp, deadline, read_timeout, limit))


def read_lines(resp, deadline, read_timeout, limit=MAX_RESPONSE_SIZE):
    """The body line by line (bytes, without the line end), within the same limits as read_body."""
    pending = b''
    for data in _chunks(resp, deadline, read_timeout, limit):
        pending += data
        *lines, pending = pending.split(b'\n')
        yield from lines
    if pending:
        yield pending


def _error_body(exc, deadline, read_timeout):
    """A little of an error answer's body (for the message), within the deadline."""
    try:
        pieces = []
        size = 0
        for data in _chunks(exc.fp if getattr(exc, 'fp', None) is not None else exc, deadline, read_timeout,
                            MAX_RESPONSE_SIZE):
            pieces.append(data)
            size += len(data)
            if size >= 4 * BODY_LIMIT:
                break
        return b''.join(pieces)
    except Exception:  # pylint: disable=broad-except
        return b''


def normalize_base_url(url):
    """Validate a base URL and return it without trailing '/' or '/v1'.

    'http://10.0.0.1:8000/v1/' -> 'http://10.0.0.1:8000'. Raises ValueError naming what is wrong.
    """
    if not isinstance(url, str) or not url.strip():
        raise ValueError('base_url must be a non-empty URL such as http://127.0.0.1:8000')
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a non-numeric port
    except ValueError as exc:
        raise ValueError("base_url '%s' is not a valid URL: %s" % (url, exc))
    if parts.scheme not in ('http', 'https'):
        raise ValueError("base_url '%s' must start with http:// or https://" % url)
    if not parts.hostname:
        raise ValueError("base_url '%s' has no host name" % url)
    if parts.query or parts.fragment:
        raise ValueError("base_url '%s' must not carry a query string or fragment" % url)
    if port is not None and not 0 < port < 65536:
        raise ValueError("base_url '%s' has an invalid port" % url)
    path = parts.path.rstrip('/')
    if path.endswith('/v1'):
        path = path[:-3]
    return '%s://%s%s' % (parts.scheme, parts.netloc, path)


def build_headers(api_key=None, headers=None, json_body=False):
    result = {'Accept': 'application/json'}
    for key, value in (headers or {}).items():
        result[str(key)] = str(value)
    if api_key:
        result['Authorization'] = 'Bearer %s' % api_key
    if json_body:
        result['Content-Type'] = 'application/json'
    return result


def truncate(data, limit=BODY_LIMIT):
    if data is None:
        return None
    if isinstance(data, bytes):
        data = data.decode('utf-8', 'replace')
    return data if len(data) <= limit else data[:limit] + '...(%d more characters)' % (len(data) - limit)


def _error_text(exc):
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return 'timeout'
    if isinstance(exc, (ResponseTooLarge, RedirectRefused)):
        return str(exc)
    if isinstance(exc, URLError):
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return 'timeout'
        if isinstance(reason, ConnectionRefusedError):
            return 'connection refused'
        return 'connection error: %s' % (reason,)
    if isinstance(exc, ssl.SSLError):
        return 'TLS error: %s' % (exc,)
    if isinstance(exc, ConnectionError):
        return 'connection error: %s' % (exc,)
    return '%s: %s' % (type(exc).__name__, exc)


def http_request(url, method='GET', body=None, headers=None, timeout=30.0, validate_certs=True, ca_path=None,
                 max_size=MAX_RESPONSE_SIZE, deadline=None):
    """One request. Returns {status, body (bytes), headers (lower-case keys), seconds, error}.

    status is None when no HTTP answer came back (error says why: 'timeout', 'connection refused',
    a refused redirect...). The whole request ends within timeout seconds (and by deadline, a
    time.monotonic() value, when given); a body over max_size bytes is an error.
    """
    data = None
    if body is not None:
        data = json.dumps(body).encode('utf-8')
    start = time.monotonic()
    if deadline is not None:
        timeout = min(timeout, deadline - start)
    watch = Deadline(timeout)
    result = {'status': None, 'body': b'', 'headers': {}, 'seconds': None, 'error': None}
    try:
        resp = _open(url, data, headers, method, watch, validate_certs, ca_path)
        try:
            result['status'] = resp.status if hasattr(resp, 'status') else resp.getcode()
            result['headers'] = dict((k.lower(), v) for k, v in resp.headers.items())
            result['body'] = read_body(resp, watch, timeout, max_size)
        finally:
            resp.close()
    except HTTPError as exc:
        result['status'] = exc.code
        result['headers'] = dict((k.lower(), v) for k, v in (exc.headers or {}).items())
        result['body'] = _error_body(exc, watch, timeout)
    except Exception as exc:  # pylint: disable=broad-except
        error = 'timeout' if watch.expired else _error_text(exc)
        if result['status'] is not None and error != 'timeout':
            # An answer that could not be read whole is no answer.
            error = 'the HTTP %s answer could not be read: %s' % (result['status'], error)
        result['status'] = None
        result['body'] = b''
        result['error'] = error
    finally:
        watch.cancel()
    result['seconds'] = round(time.monotonic() - start, 4)
    return result


def parse_json(data):
    try:
        return json.loads(data.decode('utf-8') if isinstance(data, bytes) else data)
    except (ValueError, UnicodeDecodeError):
        return None


def model_ids(models_body):
    """Model ids from a /v1/models response body; None when it is not an OpenAI model list."""
    doc = parse_json(models_body)
    if not isinstance(doc, dict) or not isinstance(doc.get('data'), list):
        return None
    return [m.get('id') for m in doc['data'] if isinstance(m, dict) and m.get('id')]


def completion_body(api, model, prompt, max_tokens, stream, extra_body=None):
    """Request body for chat (messages) or completion (prompt) — never messages to /v1/completions."""
    if api not in APIS:
        raise ValueError('api must be one of %s, got %r' % (', '.join(APIS), api))
    body = {'model': model, 'max_tokens': max_tokens, 'stream': bool(stream)}
    if api == 'chat':
        body['messages'] = [{'role': 'user', 'content': prompt}]
    else:
        body['prompt'] = prompt
    if stream:
        body['stream_options'] = {'include_usage': True}
    for key, value in (extra_body or {}).items():
        body[key] = value
    return body


def _choice_text(api, choice):
    if not isinstance(choice, dict):
        return ''
    if api == 'chat':
        delta = choice.get('delta') or choice.get('message') or {}
        if not isinstance(delta, dict):
            return ''
        parts = [delta.get('content'), delta.get('reasoning_content'), delta.get('reasoning')]
        return ''.join(p for p in parts if isinstance(p, str))
    text = choice.get('text')
    return text if isinstance(text, str) else ''


def _choice_role(choice):
    """The author role of a chat choice (its message, or a streamed delta that names it), else None."""
    if not isinstance(choice, dict):
        return None
    message = choice.get('delta') or choice.get('message') or {}
    role = message.get('role') if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def _new_result():
    return {
        'ok': False, 'status': None, 'error': None, 'ttft': None, 'latency': None,
        'output_tokens': 0, 'prompt_tokens': None, 'tokens_counted_from': None, 'text': '',
        'finish_reason': None, 'usage': None, 'upstream': None, 'body': None, 'chunks': 0, 'role': None,
    }


def _finish(result):
    latency = result['latency']
    tokens = result['output_tokens']
    result['tokens_per_second'] = round(tokens / latency, 2) if latency and tokens else None
    if result['ttft'] is not None and latency and tokens > 1 and latency > result['ttft']:
        result['decode_tokens_per_second'] = round((tokens - 1) / (latency - result['ttft']), 2)
    else:
        result['decode_tokens_per_second'] = None
    if result['ok'] and tokens < 1:
        result['ok'] = False
        result['error'] = 'the server answered %s but generated no tokens' % result['status']
    return result


def completion(base_url, api, model, prompt, max_tokens=16, stream=True, headers=None, timeout=60.0,
               validate_certs=True, ca_path=None, upstream_header=None, extra_body=None,
               max_size=MAX_RESPONSE_SIZE, deadline=None):
    """Send one completion and measure it.

    Returns a dict: ok, status, error, ttft (seconds to the first generated text, or to the finish of
    a completion without text; streaming only),
    latency (seconds to the last byte), output_tokens (from usage when the server sends it, else the
    number of streamed text chunks), prompt_tokens, text, role (the chat answer's author role, None
    for a plain completion), finish_reason, usage, upstream (value of
    upstream_header), body (truncated, on failure), tokens_per_second, decode_tokens_per_second.
    The whole request, a stream to its end included, ends within timeout seconds (and by deadline,
    a time.monotonic() value, when given); more than max_size bytes of answer is an error.
    """
    url = base_url + API_PATHS[api]
    body = completion_body(api, model, prompt, max_tokens, stream, extra_body)
    hdrs = dict(headers or {})
    hdrs['Content-Type'] = 'application/json'
    if stream:
        hdrs['Accept'] = 'text/event-stream'
    result = _new_result()
    start = time.monotonic()
    if not stream:
        resp = http_request(url, 'POST', body, hdrs, timeout, validate_certs, ca_path, max_size, deadline)
        result['latency'] = resp['seconds']
        result['status'] = resp['status']
        result['error'] = resp['error']
        if upstream_header:
            result['upstream'] = resp['headers'].get(upstream_header.lower())
        if resp['status'] != 200:
            result['body'] = truncate(resp['body'])
            if resp['status'] is not None:
                result['error'] = 'HTTP %s' % resp['status']
            return _finish(result)
        doc = parse_json(resp['body'])
        if not isinstance(doc, dict) or not isinstance(doc.get('choices'), list) or not doc['choices']:
            result['error'] = 'the response is not an OpenAI completion object'
            result['body'] = truncate(resp['body'])
            return _finish(result)
        choice = doc['choices'][0]
        result['text'] = _choice_text(api, choice)
        result['role'] = _choice_role(choice) if api == 'chat' else None
        result['finish_reason'] = choice.get('finish_reason') if isinstance(choice, dict) else None
        usage = doc.get('usage') if isinstance(doc.get('usage'), dict) else None
        result['usage'] = usage
        if usage and isinstance(usage.get('completion_tokens'), int):
            result['output_tokens'] = usage['completion_tokens']
            result['prompt_tokens'] = usage.get('prompt_tokens')
            result['tokens_counted_from'] = 'usage'
        result['ok'] = True
        return _finish(result)

    data = json.dumps(body).encode('utf-8')
    if deadline is not None:
        timeout = min(timeout, deadline - start)
    watch = Deadline(timeout)
    try:
        resp = _open(url, data, hdrs, 'POST', watch, validate_certs, ca_path)
    except HTTPError as exc:
        result['status'] = exc.code
        result['error'] = 'HTTP %s' % exc.code
        if upstream_header and exc.headers is not None:
            result['upstream'] = exc.headers.get(upstream_header)
        result['body'] = truncate(_error_body(exc, watch, timeout)) or None
        watch.cancel()
        result['latency'] = round(time.monotonic() - start, 4)
        return _finish(result)
    except Exception as exc:  # pylint: disable=broad-except
        result['error'] = 'timeout' if watch.expired else _error_text(exc)
        watch.cancel()
        result['latency'] = round(time.monotonic() - start, 4)
        return _finish(result)

    result['status'] = resp.status if hasattr(resp, 'status') else resp.getcode()
    if upstream_header:
        result['upstream'] = resp.headers.get(upstream_header)
    texts = []
    done = False
    raw_tail = []
    try:
        for line in read_lines(resp, watch, timeout, max_size):
            line = line.decode('utf-8', 'replace').strip()
            if not line or line.startswith(':'):
                continue  # blank separator or SSE comment (keep-alive)
            if not line.startswith('data:'):
                raw_tail.append(line)
                continue
            payload = line[5:].strip()
            if payload == '[DONE]':
                done = True
                break
            chunk = parse_json(payload)
            if not isinstance(chunk, dict):
                raw_tail.append(payload)
                continue
            if chunk.get('error'):
                result['error'] = 'error event in stream: %s' % truncate(json.dumps(chunk['error']), 200)
                break
            if isinstance(chunk.get('usage'), dict):
                result['usage'] = chunk['usage']
            for choice in chunk.get('choices') or []:
                piece = _choice_text(api, choice)
                if api == 'chat' and result['role'] is None:
                    result['role'] = _choice_role(choice)
                finish = choice.get('finish_reason') if isinstance(choice, dict) else None
                # The first generated output: text, or the end of a completion that has none (the
                # model's first token was its end-of-sequence token, or tokens that decode to nothing).
                if (piece or finish) and result['ttft'] is None:
                    result['ttft'] = round(time.monotonic() - start, 4)
                if piece:
                    result['chunks'] += 1
                    texts.append(piece)
                if finish:
                    result['finish_reason'] = finish
    except (socket.timeout, TimeoutError):
        result['error'] = 'timeout: the stream was still open after %ss' % round(timeout, 3)
    except ResponseTooLarge as exc:
        result['error'] = 'stream broken: %s' % exc
    except Exception as exc:  # pylint: disable=broad-except
        if watch.expired:
            result['error'] = 'timeout: the stream was still open after %ss' % round(timeout, 3)
        else:
            result['error'] = 'stream broken: %s' % _error_text(exc)
    finally:
        watch.cancel()
        resp.close()
    result['latency'] = round(time.monotonic() - start, 4)
    result['text'] = ''.join(texts)
    usage = result['usage']
    if usage and isinstance(usage.get('completion_tokens'), int):
        result['output_tokens'] = usage['completion_tokens']
        result['prompt_tokens'] = usage.get('prompt_tokens')
        result['tokens_counted_from'] = 'usage'
    else:
        result['output_tokens'] = result['chunks']
        result['tokens_counted_from'] = 'chunks'
    if result['error'] is None and not done:
        result['error'] = 'the stream ended without data: [DONE]'
        if raw_tail:
            result['body'] = truncate('\n'.join(raw_tail))
    result['ok'] = result['error'] is None and result['status'] == 200
    return _finish(result)


def http_argument_spec():
    """argument_spec entries matching doc_fragments/openai_http.py."""
    return dict(
        base_url=dict(type='str', required=True),
        api_key=dict(type='str', no_log=True),
        headers=dict(type='dict', default={}, no_log=True),
        validate_certs=dict(type='bool', default=True),
        ca_path=dict(type='path'),
        request_timeout=dict(type='float', default=60.0),
        max_response_size=dict(type='int', default=MAX_RESPONSE_SIZE),
    )


def start_module(argument_spec, validate):
    """The module (check mode supported) and its connection settings (http_options). Before any request
    it fails naming every invalid option: validate(params) returns the problems, an empty list when none."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    problems = validate(module.params)
    if problems:
        module.fail_json(msg='Invalid options: ' + '; '.join(problems))
    return module, http_options(module)


def http_options(module):
    """Validated connection settings from a module's params; fails the module on a bad base_url."""
    params = module.params
    try:
        base_url = normalize_base_url(params['base_url'])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if params['request_timeout'] <= 0:
        module.fail_json(msg='request_timeout must be > 0 seconds, got %s' % params['request_timeout'])
    if params['max_response_size'] < 1024:
        module.fail_json(msg='max_response_size must be >= 1024 bytes, got %s' % params['max_response_size'])
    return {
        'base_url': base_url,
        'headers': build_headers(params.get('api_key'), params.get('headers')),
        'timeout': params['request_timeout'],
        'validate_certs': params['validate_certs'],
        'ca_path': params.get('ca_path'),
        'max_size': params['max_response_size'],
    }
