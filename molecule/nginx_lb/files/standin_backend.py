"""Stand-in for a vLLM head in the nginx_lb scenario (the vllm_service scenario uses real engines).

A stdlib HTTP server on port 8000 that answers like vLLM's OpenAI server where the balancer's
behaviour depends on it: /v1/models, /v1/completions (JSON, or server-sent events with a pause
between chunks so that a buffering proxy would be caught), /health and /metrics (which the edge must
not expose). It requires the backend key the balancer substitutes, and names itself in every answer.
Like vLLM (a Starlette app), it routes on the percent-decoded path without resolving dot segments,
and serves /metrics as a mount: every path under /metrics/ is the metrics page, so a path trick that
the edge forwards raw (/metrics/../v1/) reaches it. Every request line it receives (method, raw
path, version) is appended to STANDIN_REQUEST_LOG, so a test can prove that a request never got this far.
"""
import json
import os
import socket
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = os.environ.get("STANDIN_API_KEY", "")
NAME = socket.gethostname()
CHUNKS = 5
PAUSE = float(os.environ.get("STANDIN_CHUNK_PAUSE", "0.4"))
REQUEST_LOG = os.environ.get("STANDIN_REQUEST_LOG", "/var/log/standin-requests.log")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # to the journal
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def parse_request(self):
        ok = super().parse_request()
        with open(REQUEST_LOG, "a", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(self.requestline + "\n")
        return ok

    def _route(self):
        """The path as Starlette routes it: the query cut off, percent-decoded, dot segments kept."""
        return urllib.parse.unquote(self.path.split("?", 1)[0])

    def _send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Standin-Backend", NAME)
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self):
        if KEY and self.headers.get("Authorization", "") != "Bearer " + KEY:
            self._send(401, json.dumps({"error": "invalid api key", "backend": NAME}))
            return False
        return True

    def do_GET(self):
        path = self._route()
        if path == "/health":
            self._send(200, "")
        elif path == "/metrics" or path.startswith("/metrics/"):
            self._send(200, "vllm:num_requests_running 0\n", "text/plain")
        elif path == "/v1/models":
            if self._authorised():
                self._send(200, json.dumps({"object": "list", "data": [{"id": "standin", "object": "model"}]}))
        else:
            self._send(404, json.dumps({"detail": "Not Found"}))

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self._route().startswith("/v1/"):
            self._send(404, json.dumps({"detail": "Not Found"}))
            return
        if not self._authorised():
            return
        if not body.get("stream"):
            self._send(200, json.dumps({"object": "text_completion", "backend": NAME,
                                        "choices": [{"index": 0, "text": " hi", "finish_reason": "length"}]}))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Standin-Backend", NAME)
        self.end_headers()
        pause = min(float(body.get("standin_pause", PAUSE)), 5.0)  # a test may hold a stream longer
        for i in range(CHUNKS):
            event = "data: " + json.dumps({"choices": [{"index": 0, "text": " t%d" % i}]}) + "\n\n"
            self._chunk(event.encode())
            time.sleep(pause)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
