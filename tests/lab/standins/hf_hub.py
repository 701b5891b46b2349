# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""A local STAND-IN for the Hugging Face Hub, for lab tests of `hf download` (the vllm_service
role's `hf` staging method). It is not the Hub: it serves one directory as one model repository at
one fixed commit, over plain HTTP, standard library only, and answers just the endpoints
huggingface_hub's `snapshot_download` uses:

  GET  /api/models/{repo}/revision/{rev}        repository info (sha, siblings)
  GET  /api/models/{repo}/tree/{rev}[/{path}]   file listing (type, path, size, oid)
  HEAD /{repo}/resolve/{rev}/{file}             metadata: X-Repo-Commit, ETag, Content-Length
  GET  /{repo}/resolve/{rev}/{file}             the bytes (Range honoured, so downloads resume)

{rev} is the commit or "main". With --token, every request must carry `Authorization: Bearer TOKEN`
(401 otherwise), so a test proves the token reached the hub. Each request is logged to --log
(method, path, status, whether it was authorised; never the token).

  hf_hub.py --dir MODEL_DIR --repo ORG/NAME --commit SHA40 [--port 8080] [--token T] [--log FILE]
"""

import argparse
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def _files(root):
    out = []
    for base, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(base, name)
            out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return out


def _etag(path):
    digest = hashlib.sha1()  # noqa: S324 - a git-blob-like id for the stand-in, not security
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Hub(BaseHTTPRequestHandler):
    server_version = "hf-hub-standin/1"
    cfg = None
    lock = threading.Lock()

    def log_message(self, fmt, *args):  # one line per request to the log file
        if self.cfg.log:
            with self.lock, open(self.cfg.log, "a", encoding="utf-8") as fh:
                fh.write("%s %s\n" % (self.address_string(), fmt % args))

    def _authorised(self):
        if not self.cfg.token:
            return True
        return self.headers.get("Authorization", "") == "Bearer " + self.cfg.token

    def _send_json(self, status, body, head=False):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Repo-Commit", self.cfg.commit)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _error(self, status, message, head=False):
        self.send_response(status)
        data = json.dumps({"error": message}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Error-Message", message)
        if status == 404:
            self.send_header("X-Error-Code", "RepoNotFound" if "repository" in message else "EntryNotFound")
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _rev_ok(self, rev):
        return rev in (self.cfg.commit, "main")

    def _handle(self, head):
        path = unquote(urlsplit(self.path).path)
        if not self._authorised():
            return self._error(401, "Invalid credentials in Authorization header", head)
        repo = self.cfg.repo
        files = _files(self.cfg.dir)
        api = "/api/models/%s/" % repo
        if path.startswith(api + "revision/"):
            rev = path[len(api + "revision/"):]
            if not self._rev_ok(rev):
                return self._error(404, "Revision Not Found for url %s" % path, head)
            siblings = [{"rfilename": f} for f in files]
            return self._send_json(200, {"id": repo, "modelId": repo, "sha": self.cfg.commit,
                                         "private": True, "siblings": siblings}, head)
        if path.startswith(api + "tree/"):
            rest = path[len(api + "tree/"):]
            rev, _sep, sub = rest.partition("/")
            if not self._rev_ok(rev):
                return self._error(404, "Revision Not Found for url %s" % path, head)
            entries = []
            for f in files:
                if sub and not f.startswith(sub.rstrip("/") + "/"):
                    continue
                full = os.path.join(self.cfg.dir, f)
                entries.append({"type": "file", "path": f, "size": os.path.getsize(full), "oid": _etag(full)})
            return self._send_json(200, entries, head)
        prefix = "/%s/resolve/" % repo
        if path.startswith(prefix):
            rev, _sep, name = path[len(prefix):].partition("/")
            if not self._rev_ok(rev):
                return self._error(404, "Revision Not Found for url %s" % path, head)
            if name not in files:
                return self._error(404, "Entry not found", head)
            return self._send_file(os.path.join(self.cfg.dir, name), head)
        return self._error(404, "repository not found: %s" % path, head)

    def _send_file(self, full, head):
        size = os.path.getsize(full)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes=") and not head:
            first, _sep, last = rng[len("bytes="):].partition("-")
            start = int(first or 0)
            end = int(last) if last else size - 1
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1 if size else 0))
        self.send_header("ETag", '"%s"' % _etag(full))
        self.send_header("X-Repo-Commit", self.cfg.commit)
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if head or not size:
            return
        with open(full, "rb") as fh:
            fh.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._handle(head=False)

    def do_HEAD(self):  # noqa: N802
        self._handle(head=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - a lab container's own network
    parser.add_argument("--token", default=os.environ.get("HF_STANDIN_TOKEN", ""))
    parser.add_argument("--log", default="")
    cfg = parser.parse_args(argv)
    Hub.cfg = cfg
    server = ThreadingHTTPServer((cfg.bind, cfg.port), Hub)
    sys.stderr.write("hf hub stand-in: %s at %s on %s:%d\n" % (cfg.repo, cfg.commit, cfg.bind, cfg.port))
    server.serve_forever()


if __name__ == "__main__":
    main()
