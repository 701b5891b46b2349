"""A certificate the operator brings (nginx_lb_tls without nginx_lb_tls_self_signed) is checked on the
balancer before any change: there, its key matching it, naming the server. The scenario's own
self-signed files stand for a certificate brought in: accepted as they are, refused when one is
missing, the key is another one's, or the server name is not in the certificate."""
from conftest import CONF, LB, recap_changed

BRING = {"nginx_lb_tls_self_signed": False}
NEXT = "Put the certificate (with its chain) and its key at those paths on the balancer, or set nginx_lb_tls_self_signed: true"


def test_a_matching_certificate_you_bring_is_accepted(lab_host, run_converge):
    rc, out = run_converge(BRING, one_line=True)
    assert rc == 0, out[-3000:]
    assert recap_changed(out) == 0, out[-1500:]


def test_a_certificate_you_bring_is_checked_before_any_change(lab_host, lb, run_converge):
    lb1 = lab_host(LB)
    before = lb1.file(CONF).sha256sum
    cases = [
        ({"nginx_lb_tls_cert": "/etc/ssl/llm/missing.crt", "nginx_lb_tls_key": "/etc/ssl/llm/missing.key"},
         ["nginx_lb_tls_cert /etc/ssl/llm/missing.crt is not there", "nginx_lb_tls_key /etc/ssl/llm/missing.key is not there"]),
        ({"nginx_lb_tls_key": "/root/tls-preflight-other.key"},
         ["nginx_lb_tls_key /root/tls-preflight-other.key is not the key of"]),
        ({"nginx_lb_server_name": "other.lab.invalid"},
         ["does not name nginx_lb_server_name other.lab.invalid"]),
    ]
    assert lb1.run("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out /root/tls-preflight-other.key").rc == 0
    try:
        for extra, words in cases:
            rc, out = run_converge(dict(BRING, **extra), one_line=True)
            assert rc != 0, (extra, out[-3000:])
            for word in words + [NEXT, "Nothing was changed"]:
                assert word in out, (extra, word, out[-3000:])
            assert "nginx -t" not in out, "refused by nginx, not by the preflight"
            assert recap_changed(out) == 0, out[-1500:]
    finally:
        lb1.run("rm -f /root/tls-preflight-other.key")
    assert lb1.file(CONF).sha256sum == before
    assert lb.request("POST", "/v1/completions", {"model": "standin", "prompt": "Hello", "max_tokens": 4})[0] == 200
