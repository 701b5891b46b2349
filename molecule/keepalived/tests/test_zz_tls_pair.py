"""The pair with TLS and a self-signed certificate (nginx_lb_tls_self_signed): both balancers serve the
same certificate, made by the first one, so a client that trusts it finds it on whichever balancer holds
the virtual address. The real nginx_lb role on both balancers; a second run changes nothing. Runs last
(the name): with TLS on, the plain port only redirects, which the pair's http track check counts as a
failure."""
from conftest import LBS
from lab_testinfra import role_play

TLS = {"nginx_lb_tls": True, "nginx_lb_tls_self_signed": True}
CERT = "/etc/nginx/llmops/tls/vllm-lb.crt"  # nginx_lb_tls_cert's default


def served_fingerprint(host):
    return host.check_output(
        "echo | openssl s_client -connect 127.0.0.1:443 -servername localhost 2>/dev/null"
        " | openssl x509 -noout -fingerprint -sha256").strip()


def test_both_balancers_serve_the_first_ones_self_signed_certificate(lab_host, run_play):
    res = run_play(role_play("nginx_lb", hosts="balancers"), extra_vars=TLS)
    assert res.rc == 0, res
    first, second = (lab_host(name) for name in LBS)
    made = first.check_output("openssl x509 -in %s -noout -fingerprint -sha256" % CERT).strip()
    assert made.startswith("sha256 Fingerprint=") or made.startswith("SHA256 Fingerprint="), made
    assert served_fingerprint(first) == made
    assert served_fingerprint(second) == made
    # The copy's key is root-only, as the first balancer's.
    assert second.check_output("stat -c %%a:%%U %s" % CERT.replace(".crt", ".key")) == "600:root"
    again = run_play(role_play("nginx_lb", hosts="balancers"), extra_vars=TLS)
    assert again.rc == 0, again
    assert "changed=0" in again.output.split("PLAY RECAP")[-1], again.output[-1500:]
