"""keepalived on the pair as converged: the rendered VRRP instance (unicast to the peer, no multicast),
the track script as an unprivileged user, the restart drop-in, one holder of the address, HTTP through
it from the client host; then runs of the role: bad input refused before any change, check mode and a
configuration change that reload without moving the address, a lone balancer skipped.
The failovers are in test_zz_failover.py (last: they stop and kill services)."""
import re

import pytest
from conftest import ADDRESS, CLIENT, CONF, DROPIN, LBS, VIP, holders, journals, wait_holder
from lab_testinfra import role_play

CONVERGE = role_play("keepalived", hosts="balancers")


def sha(host, path=CONF):
    return host.check_output("sha256sum %s" % path).split()[0]


def changed_counts(output):
    return dict((h, int(c)) for h, c in re.findall(r"(keepalived-[a-z0-9]+)\s*:\s*ok=\d+\s+changed=(\d+)", output))


@pytest.mark.parametrize("name", LBS)
def test_the_instance_is_unicast_to_the_peer_and_never_multicast(lab_host, name):
    host = lab_host(name)
    peer = ADDRESS[LBS[1] if name == LBS[0] else LBS[0]]
    conf = host.file(CONF)
    assert conf.user == "root" and conf.group == "root" and conf.mode == 0o640, "the file holds the VRRP password"
    text = conf.content_string
    block = re.search(r"unicast_peer \{([^}]*)\}", text)
    assert block and block.group(1).split() == [peer], text
    assert "unicast_src_ip %s" % ADDRESS[name] in text
    assert "state BACKUP" in text and "nopreempt" in text and "state MASTER" not in text
    assert "interface eth0" in text and "%s/24 dev eth0" % VIP in text
    assert "mcast" not in text and "vrrp_strict" not in text
    # What keepalived does, not only what it was told: no multicast group joined, no fallback logged.
    assert "224.0.0.18" not in host.check_output("ip maddr show dev eth0")
    journal = host.check_output("journalctl -u keepalived --no-pager -o cat")
    assert "multicast" not in journal.lower(), journal[-3000:]


@pytest.mark.parametrize("name", LBS)
def test_the_track_script_runs_unprivileged_and_is_accepted(lab_host, name):
    host = lab_host(name)
    user = host.user("keepalived_script")
    assert user.exists and user.uid != 0 and user.shell == "/usr/sbin/nologin"
    text = host.file(CONF).content_string
    assert "enable_script_security" in text and "script_user keepalived_script" in text
    script = host.file("/usr/local/libexec/llmops/keepalived-check-nginx")
    assert script.user == "root" and script.mode == 0o644
    journal = host.check_output("journalctl -u keepalived --no-pager -o cat")
    assert "VRRP_Script(llmops_nginx) succeeded" in journal
    assert "insecure" not in journal.lower() and "Disabling track script" not in journal, journal[-3000:]
    # Caught running (a tenth of a second every second): as the script user, never root, whether
    # keepalived or the metrics timer runs it. The pattern (the interpreter, then the script) matches
    # neither this loop's own command line nor the metrics script, which names the check as an argument.
    seen = host.check_output(
        "end=$(( $(date +%s) + 30 )); n=0; while [ $(date +%s) -lt $end ] && [ $n -lt 3 ]; do "
        "for p in $(pgrep -f '^/usr/bin/python3 -I /usr/local/libexec/llmops/[k]eepalived-check-nginx'); do "
        "u=$(ps -o user= -p $p); "
        "[ -n \"$u\" ] && echo \"$u\" && n=$((n + 1)); done; sleep 0.05; done")
    assert seen, "the track script was not seen running in 30 s"
    assert set(seen.split()) == {"keepalived_script"}, seen


@pytest.mark.parametrize("name", LBS)
def test_keepalived_restarts_itself_when_it_fails(lab_host, name):
    host = lab_host(name)
    text = host.file(DROPIN).content_string
    assert "Restart=on-failure" in text and "RestartSec=2" in text
    assert "StartLimitBurst=5" in text and "StartLimitIntervalSec=60" in text
    show = host.check_output("systemctl show keepalived -p Restart -p RestartUSec -p StartLimitBurst -p ActiveState")
    assert "Restart=on-failure" in show and "RestartUSec=2s" in show and "StartLimitBurst=5" in show, show
    assert "ActiveState=active" in show and host.service("keepalived").is_enabled


def test_exactly_one_balancer_holds_the_address(lab_host):
    assert len(holders(lab_host)) == 1, holders(lab_host)


def test_the_client_reaches_nginx_and_the_backend_through_the_address(lab_host):
    client = lab_host(CLIENT)
    health = client.run("curl -s -m 5 -w ' %%{http_code}' http://%s/lb-health" % VIP)
    assert health.rc == 0 and health.stdout.split() == ["ok", "200"], health.stdout
    # Through nginx_lb to the stand-in backend on the client host (it names itself in a header).
    models = client.run("curl -s -m 10 -D - -o /dev/null http://%s/v1/models" % VIP)
    assert models.rc == 0 and " 200" in models.stdout.splitlines()[0], models.stdout
    assert "X-Standin-Backend: keepalived-client" in models.stdout, models.stdout


@pytest.mark.parametrize("extra, expected", [
    ({"keepalived_auth_pass": "longer-than-8"},
     "keepalived_auth_pass has 13 characters: keepalived uses only the first 8"),
    ({"keepalived_virtual_router_id": 300}, "keepalived_virtual_router_id"),
    ({"keepalived_virtual_ipv4": "10.89.211.100"}, "keepalived_virtual_ipv4"),
    ({"keepalived_virtual_ipv4": "10.89.211.11/24"},
     "keepalived_virtual_ipv4: 10.89.211.11 is the unicast address of keepalived-lb1"),
    ({"keepalived_check_url": "http://10.89.211.100/lb-health"},
     "keepalived_check_url: 10.89.211.100 is the virtual address"),
    ({"keepalived_auth_type": "NONE"}, "keepalived_auth_type"),
    ({"keepalived_interface": "lo"}, "keepalived_interface is 'lo', but 10.89.211.11 (ansible_host) is on eth0"),
    ({"nginx_lb_listen_address": "10.89.211.11"}, "nginx_lb_listen_address is '10.89.211.11'"),
])
def test_bad_input_is_refused_before_any_change(lab_host, run_converge, extra, expected):
    before = {n: sha(lab_host(n)) for n in LBS}
    holder = wait_holder(lab_host)
    rc, out = run_converge(extra, one_line=True)
    assert rc != 0, out[-3000:]
    assert expected in out, out[-3000:]
    assert all(c == 0 for c in changed_counts(out).values()), out[-3000:]
    assert "longer-than-8" not in out and "lab-vrrp" not in out, "a VRRP password in the output"
    assert {n: sha(lab_host(n)) for n in LBS} == before
    assert holders(lab_host) == [holder], journals(lab_host)


def test_check_mode_after_converge_changes_nothing(run_play):
    res = run_play(CONVERGE, check=True)
    assert res.rc == 0, res
    counts = changed_counts(res.output)
    assert sorted(counts) == sorted(LBS) and all(c == 0 for c in counts.values()), res


def test_a_change_is_applied_by_a_reload_and_the_address_stays(lab_host, run_converge):
    holder = wait_holder(lab_host)
    pids = {n: lab_host(n).check_output("systemctl show -p MainPID --value keepalived") for n in LBS}
    try:
        rc, out = run_converge({"keepalived_check_rise": 3})
        assert rc == 0, out[-3000:]
        assert changed_counts(out) and all(c >= 1 for c in changed_counts(out).values()), out[-3000:]
        for name in LBS:
            host = lab_host(name)
            assert "rise 3" in host.file(CONF).content_string
            assert "Reloading" in host.check_output("journalctl -u keepalived --no-pager -n 40 -o cat")
            assert host.check_output("systemctl show -p MainPID --value keepalived") == pids[name], "restarted"
        assert holders(lab_host) == [holder], "a reload moved the address\n" + journals(lab_host, 40)
    finally:
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]
    assert holders(lab_host) == [holder], journals(lab_host, 40)


def test_a_lone_balancer_is_skipped_and_says_so(lab_host, run_play):
    # The client host alone in its group stands in for a site with one balancer.
    res = run_play(role_play("keepalived", hosts="clients"), extra_vars={"keepalived_group": "clients"})
    assert res.rc == 0, res
    text = " ".join(res.output.split())
    assert "with one balancer there is no peer to move the virtual address to" in text, res
    assert "keepalived is not installed on keepalived-client" in text, res
    assert changed_counts(res.output).get(CLIENT) == 0, res
    assert not lab_host(CLIENT).package("keepalived").is_installed
