"""The keepalived scenario's verify: two balancers, one virtual address, a client host.

Every check reads the hosts themselves (podman exec): which balancer holds the address (ip addr),
what keepalived logged (its journal, with timestamps), what the client gets over HTTP (curl on the
client host, through the virtual address). A failover test adds a row to the table printed at the end
of the run (and written beside the scenario's log, .cache/molecule-logs/keepalived-failover.txt):
the fault, the seconds until the other balancer entered MASTER, and the seconds the client had no
answer.
"""
import os
import time

import pytest
from lab_testinfra import report_table  # tests/lab, on the verifier's PYTHONPATH

LBS = ("keepalived-lb1", "keepalived-lb2")
ADDRESS = {"keepalived-lb1": "10.89.211.11", "keepalived-lb2": "10.89.211.12"}  # molecule.yml: ansible_host
CLIENT = "keepalived-client"
VIP = "10.89.211.100"  # molecule.yml: keepalived_virtual_ipv4
CONF = "/etc/keepalived/keepalived.conf"
DROPIN = "/etc/systemd/system/keepalived.service.d/llmops-restart.conf"
PROBE_LOG = "/run/keepalived-probe.log"
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MEASURES_FILE = os.path.join(REPO, ".cache", "molecule-logs", "keepalived-failover.txt")
MEASURES = []  # (fault, from, to, seconds to MASTER, seconds without answer at the client)


def pytest_terminal_summary(terminalreporter):
    if not MEASURES:
        return
    head = f"{'fault':44} {'from':15} {'to':15} {'to MASTER':>10} {'client outage':>14}"
    lines = [head, "-" * len(head)]
    for fault, src, dst, master, outage in MEASURES:
        lines.append(f"{fault:44} {src:15} {dst:15} {_secs(master):>10} {_secs(outage):>14}")
    report_table(terminalreporter, "keepalived failover (virtual address %s)" % VIP, lines, MEASURES_FILE)


def _secs(value):
    return "-" if value is None else "%.2f s" % value


def holders(lab_host):
    """The balancers that have the virtual address on an interface now."""
    out = []
    for name in LBS:
        res = lab_host(name).run("ip -4 -o addr show")
        if (" %s/" % VIP) in res.stdout:
            out.append(name)
    return out


def wait_holder(lab_host, want=None, not_on=None, timeout=30.0):
    """Waits until exactly one balancer holds the address (WANT, or not NOT_ON, when given); returns it.
    Fails naming what the balancers hold and keepalived's last words on each."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        seen = holders(lab_host)
        if len(seen) == 1 and (want is None or seen[0] == want) and (not_on is None or seen[0] != not_on):
            return seen[0]
        time.sleep(0.2)
    raise AssertionError("after %.0f s the address %s is on %s (wanted exactly one%s%s)\n%s" % (
        timeout, VIP, seen or "no balancer", ", " + want if want else "", ", not " + not_on if not_on else "",
        journals(lab_host)))


def journals(lab_host, lines=15):
    """keepalived's last journal lines on each balancer, for a failure's message."""
    command = "journalctl -u keepalived --no-pager -n %d -o short-precise" % lines
    return "\n".join("--- %s\n%s" % (n, lab_host(n).run(command).stdout) for n in LBS)


def other(name):
    return LBS[1] if name == LBS[0] else LBS[0]


def now(host):
    """The host's clock (every lab host shares this machine's), seconds since the epoch."""
    return float(host.check_output("date +%s.%N"))


def journal_times(host, unit, text, since):
    """Timestamps (epoch seconds) of UNIT's journal lines after SINCE that contain TEXT."""
    out = host.check_output("journalctl -u %s --no-pager -o short-unix --since @%d" % (unit, int(since) - 1))
    times = []
    for line in out.splitlines():
        stamp, _sep, rest = line.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            continue
        if when >= since and text in rest:
            times.append(when)
    return times


class Probe:
    """curl through the virtual address from the client host, every 0.1 s, in a unit of its own there
    (its clock and its ARP cache are the client's): the seconds without an answer after an event."""

    def __init__(self, lab_host):
        self.client = lab_host(CLIENT)

    def start(self, seconds=60):
        self.client.run("systemctl stop keepalived-probe 2>/dev/null; rm -f %s" % PROBE_LOG)
        # A file of its own: neither the exec's shell nor systemd-run's command line expands its $.
        script = ("end=$(( $(date +%%s) + %d ))\n"
                  "while [ \"$(date +%%s)\" -lt \"$end\" ]; do\n"
                  "  c=$(curl -s -o /dev/null -w '%%{http_code}' -m 0.5 http://%s/lb-health)\n"
                  "  echo \"$(date +%%s.%%N) $c\" >> %s\n"
                  "  sleep 0.1\n"
                  "done\n" % (seconds, VIP, PROBE_LOG))
        res = self.client.run("cat > /run/keepalived-probe.sh <<'PROBE'\n%sPROBE\n" % script)
        assert res.rc == 0, res.stderr
        res = self.client.run("systemd-run --unit keepalived-probe --collect --quiet /bin/sh /run/keepalived-probe.sh")
        assert res.rc == 0, res.stderr
        # Answered before the fault: the probe itself works.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if any(code == "200" for _t, code in self.samples()):
                return
            time.sleep(0.3)
        raise AssertionError("the client gets no answer through %s before the fault: %s" % (VIP, self.samples()[-5:]))

    def samples(self):
        res = self.client.run("cat %s" % PROBE_LOG)
        out = []
        for line in res.stdout.splitlines():
            stamp, _sep, code = line.partition(" ")
            try:
                out.append((float(stamp), code.strip()))
            except ValueError:
                continue
        return out

    def outage(self, since, timeout=30.0):
        """Seconds from the first failed request after SINCE to the first answer after it (0.0 when none
        failed); waits for that answer up to TIMEOUT, then stops the probe."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                after = [(t, c) for t, c in self.samples() if t >= since]
                failed = [t for t, c in after if c != "200"]
                if failed:
                    back = [t for t, c in after if c == "200" and t > failed[0]]
                    if back:
                        return back[0] - failed[0]
                elif len(after) >= 20:
                    return 0.0
                if time.monotonic() > deadline:
                    raise AssertionError("the client got no answer through %s for %.0f s after the fault: %s"
                                         % (VIP, timeout, after[-10:]))
                time.sleep(0.3)
        finally:
            self.client.run("systemctl stop keepalived-probe")


@pytest.fixture()
def probe(lab_host):
    return Probe(lab_host)


def record(fault, src, dst, master, outage):
    MEASURES.append((fault, src, dst, master, outage))
