"""Behaviour of the firewall role on lab hosts: real TCP connections between containers on the
podman network this molecule run created. Stand-in listeners (python3 -m http.server) run on the
head; the real vLLM engine behind these ports is exercised by the vllm_service scenario."""
import re
import subprocess
import time

import pytest
from lab_testinfra import role_play

HEAD, WORKER, BALANCER, THIRD = "firewall-head", "firewall-worker", "firewall-balancer", "firewall-third"
API, MASTER, NODE_EXPORTER, OPEN = 8010, 29501, 9100, 8080
LISTED, SSH_ALT, PRIVILEGED, PROMETHEUS, BALANCER_OPEN = 8088, 2022, 81, 9090, 8081
RULESET = "/etc/llmops/firewall/llmops.nft"
CONVERGE = role_play("firewall")

# curl exit codes: 0 answered, 7 refused (TCP reset), 28 timed out (dropped).
REFUSED = (7, 28)


def connect(lab_host, src, dst, port, timeout=4):
    """(curl exit code, HTTP status, seconds) for one HTTP GET from container src to dst:port. The
    seconds are curl's own (time_total), not the podman exec around it: a busy machine slows the
    exec, not the reset a reject rule sends."""
    res = lab_host(src).run(
        "curl -s -o /dev/null -w '%%{http_code} %%{time_total}' --connect-timeout %d --max-time %d http://%s:%d/"
        % (timeout, timeout + 2, dst, port))
    code, _sep, seconds = res.stdout.strip().partition(" ")
    return res.rc, code, float(seconds or "nan")


def assert_open(lab_host, src, dst, port, within=0):
    """src reaches dst:port, at once or, with `within`, in that many seconds; a failure after a
    wait also shows what the two hosts see (neighbours, addresses, listeners, ruleset)."""
    t0 = time.monotonic()
    while True:
        rc, code, _unused = connect(lab_host, src, dst, port)
        if (rc, code) == (0, "200") or time.monotonic() - t0 >= within:
            break
        time.sleep(2)
    assert (rc, code) == (0, "200"), "%s -> %s:%d should be answered, got curl rc=%s status=%s%s" % (
        src, dst, port, rc, code, "\n" + _diagnose(lab_host, src, dst) if within else "")


def assert_refused(lab_host, src, dst, port):
    rc, code, _unused = connect(lab_host, src, dst, port)
    assert rc in REFUSED, "%s -> %s:%d should be refused, got curl rc=%s status=%s" % (src, dst, port, rc, code)
    return rc


def table(lab_host, name="llmops", family="inet", host=HEAD):
    return lab_host(host).check_output("nft list table %s %s" % (family, name))


def sha(lab_host, path=RULESET, host=HEAD):
    return lab_host(host).check_output("sha256sum %s" % path).split()[0]


def test_standin_listeners_answer_locally(lab_host):
    # Loopback is always allowed: the engine's own readiness checks (127.0.0.1) keep working, and
    # a refusal below is the firewall, not a missing listener.
    for port in (API, MASTER, NODE_EXPORTER, OPEN, LISTED, SSH_ALT, PRIVILEGED):
        assert_open(lab_host, HEAD, "127.0.0.1", port)
    for port in (PROMETHEUS, BALANCER_OPEN):
        assert_open(lab_host, BALANCER, "127.0.0.1", port)


def test_engine_api_only_from_balancer_and_monitoring(lab_host):
    assert_open(lab_host, BALANCER, HEAD, API)
    rc = assert_refused(lab_host, THIRD, HEAD, API)
    assert rc == 7, "the default refuse_with=reject answers with a TCP reset (curl rc 7), got %s" % rc
    assert_refused(lab_host, WORKER, HEAD, API)


def test_refusal_is_immediate(lab_host):
    rc, _unused, seconds = connect(lab_host, THIRD, HEAD, API)
    assert rc == 7 and seconds < 2.5, (rc, seconds)


def test_exporter_port_only_from_monitoring(lab_host):
    assert_open(lab_host, BALANCER, HEAD, NODE_EXPORTER)
    assert_refused(lab_host, THIRD, HEAD, NODE_EXPORTER)
    assert_refused(lab_host, WORKER, HEAD, NODE_EXPORTER)


def test_master_port_only_from_the_replicas_peers(lab_host):
    assert_open(lab_host, WORKER, HEAD, MASTER)
    assert_refused(lab_host, THIRD, HEAD, MASTER)
    assert_refused(lab_host, BALANCER, HEAD, MASTER)


def test_privileged_ports_unchanged_by_default(lab_host):
    assert_open(lab_host, THIRD, HEAD, PRIVILEGED)


def test_unprivileged_ports_of_a_vllm_node_only_from_its_peers(lab_host):
    # NCCL, Gloo and vLLM's ZMQ sockets listen on ephemeral ports of every interface: with the
    # default accept policy only the replica's peers may open new connections to them.
    assert_open(lab_host, WORKER, HEAD, OPEN)
    rc = assert_refused(lab_host, THIRD, HEAD, OPEN)
    assert rc == 7, "refused with a TCP reset (firewall_refuse_with=reject), got curl rc %s" % rc
    assert_refused(lab_host, BALANCER, HEAD, OPEN)
    # ...without locking out the ports the inventory lists, nor SSH on an unprivileged port.
    assert_open(lab_host, THIRD, HEAD, LISTED)
    assert_open(lab_host, THIRD, HEAD, SSH_ALT)
    # The head's own connections keep working (the replies come back to its ephemeral ports).
    assert_open(lab_host, HEAD, BALANCER, BALANCER_OPEN)


def test_prometheus_port_only_from_the_monitoring_hosts(lab_host):
    assert_refused(lab_host, THIRD, BALANCER, PROMETHEUS)
    assert "tcp dport { 3000, 9090 } jump monitoring_ui" in table(lab_host, host=BALANCER)


def test_ruleset_lists_the_sources(lab_host):
    text = table(lab_host)
    assert "tcp dport 8010 jump engine_api" in text, text
    assert "tcp dport 29501 jump engine_distributed" in text, text
    assert "policy accept" in text, text
    head = lab_host(HEAD)
    balancer_ip = lab_host(BALANCER).check_output("hostname -I").split()[0]
    third_ip = lab_host(THIRD).check_output("hostname -I").split()[0]
    api_set = head.check_output("nft list set inet llmops engine_api_v4")
    assert balancer_ip in api_set and third_ip not in api_set, api_set
    ruleset = head.file(RULESET)
    assert ruleset.mode == 0o640 and ruleset.user == "root"
    assert "Ansible managed" in ruleset.content_string or "ansible" in ruleset.content_string.lower()


def test_foreign_tables_survive(lab_host):
    head = lab_host(HEAD)
    assert table(lab_host, "netavark") == head.check_output("cat /root/netavark.before")
    assert table(lab_host, "filter", "ip") == head.check_output("cat /root/ipfilter.before")
    # nftables is also installed by the role on the hosts prepare left bare
    for name in (WORKER, BALANCER, THIRD):
        assert lab_host(name).exists("nft"), name


def test_site_nftables_conf_untouched(lab_host):
    head = lab_host(HEAD)
    assert head.run("sha256sum -c /root/nftables.conf.sha256").rc == 0
    assert "tcp dport 2222" in table(lab_host, "site")
    assert head.service("nftables").is_enabled


def test_unit_enabled_and_hardened(lab_host):
    head = lab_host(HEAD)
    assert head.service("llmops-firewall").is_enabled
    assert head.check_output("systemctl show -p ActiveState --value llmops-firewall") == "active"
    unit = head.file("/etc/systemd/system/llmops-firewall.service").content_string
    assert "ExecStartPre=/usr/sbin/nft -c -f" in unit and "ExecReload=/usr/sbin/nft -c -f" in unit


def test_bad_ruleset_refused_old_one_kept(lab_host, run_play):
    before_table, before_sha = table(lab_host), sha(lab_host)
    res = run_play(CONVERGE, extra_vars={"firewall_extra_rules": ["this is not nft"]}, limit=HEAD)
    assert res.rc != 0, res
    assert "failed to validate" in res.output or "Error" in res.output, res
    assert sha(lab_host) == before_sha
    assert table(lab_host) == before_table
    assert_open(lab_host, BALANCER, HEAD, API)
    assert_refused(lab_host, THIRD, HEAD, API)


@pytest.mark.parametrize("extra, expected", [
    ({"firewall_allowed_cidrs": ["10.0.0.5/24"]}, "firewall_allowed_cidrs[0]: '10.0.0.5/24'"),
    ({"firewall_api_allowed_cidrs": ["10.0.0.300"]}, "firewall_api_allowed_cidrs[0]: '10.0.0.300'"),
    ({"firewall_exporter_allowed_cidrs": ["10.0.0.0/33"]}, "firewall_exporter_allowed_cidrs[0]"),
    ({"firewall_exporter_ports": [9100, 70000]}, "firewall_exporter_ports[1]: '70000'"),
    ({"firewall_exporter_ports": ["abc"]}, "firewall_exporter_ports"),
    ({"vllm_service_api": {"port": 0}}, "vllm_service_api.port: '0'"),
    ({"firewall_default_policy": "reject"}, "firewall_default_policy"),
    ({"firewall_exporter_ports": [8010]}, "tcp port 8010 is already protected by vllm_service_api.port"),
    ({"firewall_extra_services": [{"name": "Bad-Name", "ports": [7000]}]}, "service name 'Bad-Name'"),
    ({"firewall_extra_services": [{"name": "admin", "ports": [7000], "groups": ["nope"]}]},
     "firewall_extra_services[0].groups: no inventory group named nope"),
])
def test_bad_input_refused_before_any_change(lab_host, run_play, extra, expected):
    before_sha, before_table = sha(lab_host), table(lab_host)
    res = run_play(CONVERGE, extra_vars=extra, limit=HEAD)
    assert res.rc != 0, res
    assert expected in res.output, res
    assert "changed=0" in res.output, res
    assert sha(lab_host) == before_sha and table(lab_host) == before_table


def test_check_mode_reports_without_changing(lab_host, run_play):
    before_sha = sha(lab_host)
    res = run_play(CONVERGE, extra_vars={"firewall_allowed_cidrs": ["203.0.113.0/24"]}, limit=HEAD, check=True)
    assert res.rc == 0, res
    assert re.search(r"changed=[1-9]", res.output), res
    assert sha(lab_host) == before_sha
    assert "203.0.113.0/24" not in table(lab_host)


def test_extra_cidr_is_added_and_removed(lab_host, run_play):
    res = run_play(CONVERGE, extra_vars={"firewall_api_allowed_cidrs": ["203.0.113.0/24"]}, limit=HEAD)
    assert res.rc == 0, res
    assert "203.0.113.0/24" in lab_host(HEAD).check_output("nft list set inet llmops engine_api_v4")
    res = run_play(CONVERGE, limit=HEAD)
    assert res.rc == 0, res
    assert "203.0.113.0/24" not in table(lab_host)
    head = lab_host(HEAD)
    assert table(lab_host, "netavark") == head.check_output("cat /root/netavark.before")


def test_default_drop_is_opt_in(lab_host, run_play):
    res = run_play(CONVERGE, extra_vars={"firewall_default_policy": "drop"}, limit=HEAD)
    try:
        assert res.rc == 0, res
        assert_refused(lab_host, THIRD, HEAD, OPEN)
        assert_open(lab_host, BALANCER, HEAD, API)
        # peers: anything from the replica's other nodes (NCCL/Gloo use ephemeral ports)
        assert_open(lab_host, WORKER, HEAD, OPEN)
        assert_open(lab_host, HEAD, "127.0.0.1", OPEN)
    finally:
        res = run_play(CONVERGE, limit=HEAD)
    assert res.rc == 0, res
    assert_open(lab_host, THIRD, HEAD, PRIVILEGED)


def test_absent_removes_only_our_table(lab_host, run_play):
    res = run_play(CONVERGE, extra_vars={"firewall_state": "absent"}, limit=HEAD)
    try:
        assert res.rc == 0, res
        head = lab_host(HEAD)
        assert head.run("nft list table inet llmops").rc != 0
        assert not head.file(RULESET).exists
        assert_open(lab_host, THIRD, HEAD, API)
        assert table(lab_host, "netavark") == head.check_output("cat /root/netavark.before")
    finally:
        res = run_play(CONVERGE, limit=HEAD)
    assert res.rc == 0, res
    assert_refused(lab_host, THIRD, HEAD, API)


def _booted(lab_host):
    for _unused in range(90):
        state = subprocess.run(["podman", "exec", HEAD, "systemctl", "is-system-running"],
                               capture_output=True, text=True, check=False).stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    return state


def test_ruleset_persists_across_reboot(lab_host):
    subprocess.run(["podman", "restart", "-t", "10", HEAD], check=True, capture_output=True)
    assert _booted(lab_host) in ("running", "degraded")
    head = lab_host(HEAD)
    for _unused in range(30):
        if head.run("curl -s -o /dev/null --max-time 2 http://127.0.0.1:%d/" % API).rc == 0:
            break
        time.sleep(1)
    assert "jump engine_api" in table(lab_host)
    # nftables.service (flush ruleset + the site table) ran first at boot; both tables are there
    assert "tcp dport 2222" in table(lab_host, "site")
    assert_refused(lab_host, THIRD, HEAD, API)
    # The balancer must get through again. A host that has just booted on a busy machine may take a
    # few seconds (its listener, the peers' neighbour entries): up to 60 s.
    assert_open(lab_host, BALANCER, HEAD, API, within=60)


def _diagnose(lab_host, src, dst):
    cmds = {src: ["ip -4 neigh", "ip -4 -o addr show dev eth0", "getent hosts %s" % dst, "nft list ruleset"],
            dst: ["ip -4 neigh", "ip -4 -o addr show dev eth0", "ip link show eth0", "ss -ltn",
                  "nft list ruleset", "systemctl --failed --no-legend"]}
    out = []
    for host, lines in cmds.items():
        for cmd in lines:
            res = lab_host(host).run(cmd)
            out.append("[%s] $ %s\n%s%s" % (host, cmd, res.stdout, res.stderr))
    return "\n".join(out)


def test_table_back_after_nftables_service_restart(lab_host):
    # A restart of nftables.service flushes the whole ruleset (the site's nftables.conf says so);
    # PartOf= restarts our unit after it, which loads our table again.
    head = lab_host(HEAD)
    head.check_output("systemctl restart nftables")
    assert "tcp dport 2222" in table(lab_host, "site")
    assert "jump engine_api" in table(lab_host)
    assert_refused(lab_host, THIRD, HEAD, API)
    assert_open(lab_host, BALANCER, HEAD, API)
