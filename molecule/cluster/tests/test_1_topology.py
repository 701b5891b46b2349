"""The two-node replicas as they run: no host resolves another's name, each worker is a --headless
rank 1 whose connections to its head go over the fabric network, and nginx and Prometheus reach
the heads by the inventory's addresses."""
import pytest
import testinfra

from conftest import HEADS, LB, WORKERS

FABRIC = "10.89.241."  # molecule.yml: vllm_service_advertise_address of each vLLM host
MANAGEMENT = "10.89.218."  # molecule.yml: ansible_host


def host(name):
    return testinfra.get_host("podman://" + name)


@pytest.mark.parametrize("name", ["dgx1", "dgx2", "cluster-dgx1", "cluster-dgx2", "cluster-dgx4"])
def test_the_balancer_resolves_no_other_host(name):
    """As on a real cluster where the nodes are not in DNS: only addresses work."""
    res = host(LB).run("getent hosts %s", name)
    assert res.rc != 0 and res.stdout.strip() == "", res.stdout


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_the_worker_is_headless_and_meets_its_head_on_the_fabric(worker):
    head = WORKERS[worker]
    w = host(worker)
    head_fabric = host(head).check_output("ip -4 -o addr show dev eth1 | awk '{print $4}'").split("/")[0]
    own_fabric = w.check_output("ip -4 -o addr show dev eth1 | awk '{print $4}'").split("/")[0]
    assert head_fabric.startswith(FABRIC) and own_fabric.startswith(FABRIC), (head_fabric, own_fabric)
    # The unit runs `vllm serve --config FILE` (the CLI the metadata shim makes work) and the file
    # makes it the headless rank 1 of a two-node replica meeting at the head's fabric address.
    unit = w.check_output("systemctl show -p ExecStart --value vllm")
    assert "bin/vllm serve --config /etc/vllm/config.yaml" in unit, unit
    assert w.service("vllm").is_running
    conf = w.check_output("cat /etc/vllm/config.yaml")
    for line in ("headless: true", f"master-addr: {head_fabric}", "node-rank: 1", "nnodes: 2"):
        assert line in conf, (line, conf)
    env = w.check_output("cat /etc/vllm/vllm.env /run/vllm/fabric.env")
    assert f"VLLM_HOST_IP={own_fabric}" in env and "GLOO_SOCKET_IFNAME=eth1" in env, env
    # The worker's established TCP connections (the engine's sockets are not attributed to it from
    # here: its unit is sandboxed): to its head only over the fabric, the rendezvous on the master
    # port among them, none to the head's management address.
    ss = w.check_output("ss -Htn state established")
    conns = []
    for line in ss.splitlines():
        cols = line.split()
        if len(cols) >= 4:
            # ADDRESS:PORT or [V6]:PORT; an IPv4-mapped IPv6 address counts as its IPv4 address.
            local, peer = (c.rsplit(":", 1) for c in cols[2:4])
            conns.append((local[0].strip("[]").replace("::ffff:", ""), peer[0].strip("[]").replace("::ffff:", ""), peer[1]))
    to_head = [c for c in conns if c[1] == head_fabric]
    assert to_head and all(c[0] == own_fabric for c in to_head), f"{worker} -> {head} {head_fabric}:\n{ss}"
    assert any(c[2] == "29501" for c in to_head), f"no rendezvous on {head_fabric}:29501 from {worker}:\n{ss}"
    head_mgmt = host(head).check_output("ip -4 -o addr show dev eth0 | awk '{print $4}'").split("/")[0]
    assert head_mgmt.startswith(MANAGEMENT) and not [c for c in conns if c[1] == head_mgmt], ss


def test_nginx_and_prometheus_use_the_heads_addresses():
    lb = host(LB)
    conf = lb.check_output("nginx -T 2>/dev/null")
    for head in HEADS:
        address = host(head).check_output("ip -4 -o addr show dev eth0 | awk '{print $4}'").split("/")[0]
        assert f"server {address}:8000" in conf, conf
        assert head not in conf.split("upstream", 1)[1].split("}", 1)[0]


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_the_worker_started_before_its_head(worker):
    """The head's rendezvous waits for its workers: site.yml starts workers first (the containers
    share the kernel's monotonic clock, so the two units' start times compare)."""
    def started(name):
        return int(host(name).check_output("systemctl show -p ExecMainStartTimestampMonotonic --value vllm"))
    w, h = started(worker), started(WORKERS[worker])
    assert 0 < w < h, (worker, w, WORKERS[worker], h)


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_each_worker_and_no_head_runs_the_head_watch(worker):
    """The watch that restarts a worker whose head went away (vllm_service_head_watch) runs on
    workers only, watches the head's fabric address, and saw its worker join (the faults of
    test_2_faults.py show it acting)."""
    w, head = host(worker), WORKERS[worker]
    head_fabric = host(head).check_output("ip -4 -o addr show dev eth1 | awk '{print $4}'").split("/")[0]
    assert w.service("vllm-head-watch").is_running and w.service("vllm-head-watch").is_enabled
    cmd = w.check_output("systemctl show -p ExecStart --value vllm-head-watch")
    assert f"--master-addr {head_fabric} --master-port 29501" in cmd, cmd
    journal = w.check_output("journalctl -u vllm-head-watch -o cat")
    assert f"joined its head at {head_fabric} port 29501" in journal, journal
    assert not host(head).file("/etc/systemd/system/vllm-head-watch.service").exists
