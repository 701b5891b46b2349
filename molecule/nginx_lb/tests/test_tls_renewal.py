"""TLS renewal (docs/operations.md, "Renew the TLS certificate") under constant streaming load through
TLS (tests/lab/lab_load.py, the stand-in backends of this scenario): nginx reads its certificate at
start and reload only, so a renewed pair must be reloaded into it, never by a restart.

1. The self-signed certificate is close to its end (a pair valid for 2 days is put at the served
   paths): a converge makes a new one (nginx_lb_tls_self_signed_renew_days), nginx reloads, and the
   new one is what clients get.
2. A pair renewed outside the role (by hand or by certbot, at the same paths): a converge sees the
   pair changed and reloads; clients get the new one.

Each time: not one request fails, the nginx master is the same process (a reload), and a converge
with nothing renewed changes nothing."""
import hashlib
import ssl
import time

from conftest import EDGE_KEY, LB, recap_changed
from lab_load import Load  # tests/lab, on the verifier's PYTHONPATH
from lab_testinfra import wait_until

CERT = "/etc/nginx/llmops/tls/vllm-lb.crt"
KEY = "/etc/nginx/llmops/tls/vllm-lb.key"
NAME = "llm.lab.invalid"  # the scenario's nginx_lb_server_name
MODEL = "standin"


def served(lb):
    """The sha256 of the certificate the balancer presents."""
    pem = ssl.get_server_certificate((lb.address, lb.port), timeout=10)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def on_disk(lb_host):
    """The sha256 of the certificate file (DER), as served() reads it."""
    der = lb_host.check_output("openssl x509 -in %s -outform DER | sha256sum | cut -d' ' -f1", CERT)
    return der.strip()


def make_pair(lb_host, days):
    """A new self-signed pair naming the server, valid for DAYS, put at the served paths (as a renewal
    outside the role would)."""
    lb_host.check_output(
        "openssl req -x509 -nodes -newkey rsa:2048 -days %s -subj /CN=%s -addext subjectAltName=DNS:%s,DNS:localhost "
        "-keyout %s.t -out %s.t 2>/dev/null && mv -f %s.t %s && mv -f %s.t %s",
        str(days), NAME, NAME, KEY, CERT, KEY, KEY, CERT, CERT)


def renewed_under_load(lb, lb_host, master_pid, run_converge, renew):
    """RENEW(), then a converge, under the load: (results, the certificate served before, after)."""
    url = f"https://{lb.address}:{lb.port}"
    master = master_pid()
    before = served(lb)
    load = Load(url, EDGE_KEY, MODEL, concurrency=3, max_tokens=5, cap=1500, timeout=60, pause=0.2, max_seconds=600)
    load.start()
    try:
        wait_until(lambda: len(load.snapshot()) >= 3, timeout=60, what="the first requests")
        renew()
        assert served(lb) == before, "the pair on disk is served before any reload: the test proves nothing"
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]
        done = time.monotonic()
        wait_until(lambda: sum(r["start"] > done for r in load.snapshot()) >= 3, timeout=60,
                   what="requests after the reload")
    finally:
        results = load.take()
    assert master_pid() == master, "nginx was restarted, not reloaded"
    return results, before, served(lb)


def failed(results):
    return [(r["status"], r["error"]) for r in results if not r["ok"]]


def test_an_expiring_self_signed_certificate_is_renewed_and_reloaded_under_load(lb, lb_host, master_pid, run_converge):
    results, before, after = renewed_under_load(lb, lb_host, master_pid, run_converge, lambda: make_pair(lb_host, 2))
    assert failed(results) == [], failed(results)
    assert after != before and after == on_disk(lb_host)
    # the new one is the role's: valid past the renewal window (30 days by default)
    assert lb_host.run("openssl x509 -in %s -noout -checkend %s", CERT, str(60 * 86400)).rc == 0
    assert lb_host.file(KEY).mode == 0o600
    rc, out = run_converge({})
    assert rc == 0 and recap_changed(out, LB) == 0, out[-3000:]
    assert served(lb) == after


def test_a_pair_renewed_outside_the_role_is_reloaded_under_load(lb, lb_host, master_pid, run_converge):
    results, before, after = renewed_under_load(lb, lb_host, master_pid, run_converge, lambda: make_pair(lb_host, 400))
    assert failed(results) == [], failed(results)
    assert after != before and after == on_disk(lb_host), "the renewed pair is not served"
    rc, out = run_converge({})
    assert rc == 0 and recap_changed(out, LB) == 0, out[-3000:]
