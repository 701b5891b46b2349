"""Prometheus' web UI and API have no authentication of their own: the role keeps them on loopback by
default, and serves other hosts only behind basic auth (monitoring_prometheus_web_*: a vaulted
password, its bcrypt hash in Prometheus' web config). Real HTTP from this machine to the monitoring
host, on the podman network this molecule run created."""
import base64
import http.client
import socket

import pytest
from lab_testinfra import container_ip

PORT = 9090
USER = "llmops-lab"
# Lab-only credentials: the password and its bcrypt hash (cost 10), made for this test.
PASSWORD = "lab-prometheus-password-0001"
PASSWORD_HASH = "$2b$10$AvtiUGNFtau7Wy.mcx/3rOS2ROZW.8KfCYBbgu5ZancVahcRpo22m"
AUTH_VARS = {"monitoring_prometheus_listen_address": "0.0.0.0:%d" % PORT,
             "monitoring_prometheus_web_username": USER,
             "monitoring_prometheus_web_password": PASSWORD,
             "monitoring_prometheus_web_password_hash": PASSWORD_HASH}


@pytest.fixture(scope="module")
def mon_name(lab_groups):
    return lab_groups["monitoring"][0]


def listeners(h):
    return h.check_output("ss -Hltn 'sport = :%d'" % PORT)


def get(address, path="/api/v1/status/runtimeinfo", user=None, password=None):
    c = http.client.HTTPConnection(address, PORT, timeout=10)
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def test_prometheus_listens_on_loopback_by_default(lab_host, mon_name):
    h = lab_host(mon_name)
    out = listeners(h)
    assert "127.0.0.1:%d" % PORT in out, out
    assert "0.0.0.0:%d" % PORT not in out and "*:%d" % PORT not in out and "[::]:%d" % PORT not in out, out
    # From another host (this machine, on the scenario's network) the port is closed.
    with pytest.raises(OSError):
        socket.create_connection((container_ip(mon_name), PORT), timeout=5).close()


def test_basic_auth_when_served_to_other_hosts(lab_host, mon_name, run_converge):
    h = lab_host(mon_name)
    rc, out = run_converge(AUTH_VARS, limit=mon_name)
    try:
        assert rc == 0, out[-4000:]
        # The role's own readiness check used the credentials; neither secret reached the output.
        assert PASSWORD not in out and PASSWORD_HASH not in out
        address = container_ip(mon_name)
        assert get(address) == 401
        assert get(address, user=USER, password="wrong-password") == 401
        assert get(address, user=USER, password=PASSWORD) == 200
        web = h.file("/etc/prometheus/web.yml")
        assert web.mode == 0o640 and web.user == "root" and web.group == "prometheus"
        assert PASSWORD_HASH in web.content_string and PASSWORD not in web.content_string
        assert PASSWORD not in h.check_output("ps -eo args")
    finally:
        rc, out = run_converge({}, limit=mon_name)
    assert rc == 0, out[-4000:]
    assert not h.file("/etc/prometheus/web.yml").exists
    assert "127.0.0.1:%d" % PORT in listeners(h)
    with pytest.raises(OSError):
        socket.create_connection((container_ip(mon_name), PORT), timeout=5).close()
