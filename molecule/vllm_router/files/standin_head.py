"""Stand-in for a vLLM replica head in the vllm_router scenario (not vLLM: a stdlib HTTP server).

    python3 standin_head.py NAME PORT

Answers where vLLM's router depends on it, the way vLLM's OpenAI server does: /health (503 while the
file /run/standin-head/NAME.down exists), /v1/models, the render routes the router's cache_aware policy
asks every worker for a request's token ids (/v1/chat/completions/render, /v1/completions/render:
{"token_ids": [...]}, one token per character of the rendered prompt, so two prompts share as many
leading tokens as leading characters), /tokenize (the router's fallback), and /v1/chat/completions and
/v1/completions (JSON naming this stand-in; an X-Standin-Delay header holds the answer that many
seconds, at most 5, so that requests overlap and the router sees load).

It names itself in every answer (the "backend" field and the X-Standin-Backend header) and counts what
it was asked: GET /standin/stats -> {"name", "generations", "renders", "tokenize", "health", "sessions":
{X-Session-ID: count}}, POST /standin/reset sets the counts to zero.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME, PORT = sys.argv[1], int(sys.argv[2])
DOWN = "/run/standin-head/%s.down" % NAME
LOCK = threading.Lock()
COUNTS = {}


def _zero():
    COUNTS.clear()
    COUNTS.update({"generations": 0, "renders": 0, "tokenize": 0, "health": 0, "sessions": {}})


_zero()


def _count(key, session=None):
    with LOCK:
        COUNTS[key] += 1
        if session:
            COUNTS["sessions"][session] = COUNTS["sessions"].get(session, 0) + 1


def _text(body):
    """The prompt as the stand-in renders it: a completion's prompt, or each chat message as ROLE: CONTENT."""
    if "messages" in body:
        return "".join("%s: %s\n" % (m.get("role", ""), m.get("content", "")) for m in body.get("messages") or [])
    prompt = body.get("prompt", "")
    return " ".join(prompt) if isinstance(prompt, list) else str(prompt)


def _tokens(text):
    return [ord(ch) % 50000 + 1 for ch in text] or [1]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # to the journal
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Standin-Backend", NAME)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/health":
            _count("health")
            self._send(503 if os.path.exists(DOWN) else 200, {})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "standin", "object": "model"}]})
        elif path == "/standin/stats":
            with LOCK:
                self._send(200, dict(COUNTS, name=NAME))
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"detail": "invalid JSON"})
            return
        if path == "/standin/reset":
            with LOCK:
                _zero()
            self._send(200, {"name": NAME})
        elif path in ("/v1/chat/completions/render", "/v1/completions/render"):
            _count("renders")
            self._send(200, {"token_ids": _tokens(_text(body))})
        elif path == "/tokenize":
            _count("tokenize")
            tokens = _tokens(_text(body))
            self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 1000000})
        elif path in ("/v1/chat/completions", "/v1/completions"):
            _count("generations", self.headers.get("X-Session-ID"))
            try:
                delay = min(max(float(self.headers.get("X-Standin-Delay") or 0), 0.0), 5.0)
            except ValueError:
                delay = 0.0
            time.sleep(delay)
            self._send(200, {"object": "text_completion", "backend": NAME,
                             "choices": [{"index": 0, "text": " hi", "finish_reason": "length"}]})
        else:
            self._send(404, {"detail": "Not Found"})


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
