"""The worker's head watch (roles/vllm_service/files/vllm-head-watch): reads a worker's link to its
head from /proc/net/tcp{,6} and restarts the worker once its head went away.

The /proc/net fixtures are captured from the cluster lab (tests/unit/fixtures/vllm/head_watch): a
worker joined to its head at 10.89.241.11:29501 (the connection of uid 999, the engine's user, is
ESTABLISHED, an IPv4-mapped address in tcp6), and a worker whose head was SIGKILLed and restarted
(its connection to 10.89.241.13:29501 is left in CLOSE_WAIT: the worker never leaves by itself).
"""
import importlib.machinery
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "unit" / "fixtures" / "vllm" / "head_watch"
SCRIPT = ROOT / "roles" / "vllm_service" / "files" / "vllm-head-watch"
ENGINE_UID = 999


def load():
    loader = importlib.machinery.SourceFileLoader("vllm_head_watch", str(SCRIPT))
    spec = importlib.util.spec_from_loader("vllm_head_watch", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


watch = load()


def tables(which):
    return [(FIX / f"proc_net_tcp.{which}").read_text(encoding="ascii"), (FIX / f"proc_net_tcp6.{which}").read_text(encoding="ascii")]


def test_reads_a_joined_worker_from_captured_proc_net():
    texts = tables("joined")
    assert watch.joined(texts, ["10.89.241.11"], 29501, ENGINE_UID)
    # the same address written as IPv4-mapped IPv6, or another head, port or user: not this link
    assert watch.joined(texts, ["::ffff:10.89.241.11"], 29501, ENGINE_UID)
    assert not watch.joined(texts, ["10.89.241.13"], 29501, ENGINE_UID)
    assert not watch.joined(texts, ["10.89.241.11"], 29502, ENGINE_UID)
    assert not watch.joined(texts, ["10.89.241.11"], 29501, 0)


def test_a_connection_left_in_close_wait_is_not_a_link():
    texts = tables("lost")
    states = {state for addr, port, state, uid in watch.connections("\n".join(texts))
              if str(addr) == "10.89.241.13" and port == 29501}
    assert states == {"08"}  # CLOSE_WAIT: the head closed its end
    assert not watch.joined(texts, ["10.89.241.13"], 29501, ENGINE_UID)


def test_parses_ipv4_and_ipv6_addresses():
    four = "  sl  local rem st\n   0: 0100007F:1F90 0BF1590A:737D 01 0:0 0:0 0 999 0 1\n"
    assert watch.connections(four) == [(watch.ipaddress.IPv4Address("10.89.241.11"), 29565, "01", 999)]
    # fd00::10 in /proc/net/tcp6's four host-order words
    six = "  sl  local rem st\n   0: 0:0 000000FD000000000000000010000000:7531 01 0:0 0:0 0 5 0 1\n"
    assert watch.connections(six) == [(watch.ipaddress.IPv6Address("fd00::10"), 30001, "01", 5)]
    assert watch.connections("header only\n   0: garbage\n") == []


def run(steps, failures=3):
    """Feed (pid, linked, reachable) checks through step(); the indexes of the checks that restart."""
    state, restarts = {"pid": 0, "joined": False, "misses": 0}, []
    for i, (pid, linked, reachable) in enumerate(steps):
        state, restart = watch.step(state, pid, linked, reachable, failures)
        if restart:
            restarts.append(i)
    return restarts


def test_a_worker_waiting_for_its_head_is_left_alone():
    # first start: the worker runs before its head listens; no link, no store, for as long as it takes
    assert run([(100, False, False)] * 50) == []


def test_the_head_killed_restarts_the_worker_after_the_failures_in_a_row():
    joined = [(100, True, True)] * 3
    # the head died: its connection closed; its next start (systemd's) already listens again
    assert run(joined + [(100, False, True)] * 3) == [5]
    # two bad checks then the link again (a slow check): no restart
    assert run(joined + [(100, False, True)] * 2 + [(100, True, True)] + [(100, False, True)] * 2) == []


def test_a_lost_head_host_restarts_the_worker_though_its_socket_looks_established():
    # a host that lost power sends no FIN: the worker's socket stays ESTABLISHED, the store is gone
    assert run([(100, True, True)] * 2 + [(100, True, False)] * 4, failures=4) == [5]


def test_one_restart_per_worker_process_and_a_new_one_must_join_first():
    lost = [(100, False, False)] * 10  # the restart is under way: the same pid is not restarted again
    assert run([(100, True, True)] + lost) == [3]
    # the new process (pid 200) waits for the head, joins, and is watched again
    assert run([(100, True, True)] + [(100, False, False)] * 3 + [(200, False, False)] * 20
               + [(200, True, True)] + [(200, False, True)] * 3) == [3, 27]


def test_a_stopped_worker_is_left_alone():
    assert run([(100, True, True), (0, False, False), (0, False, False), (0, False, False), (0, False, False)]) == []


@pytest.mark.parametrize("argv", [
    ["--unit", "vllm", "--user", "vllm", "--master-addr", "10.0.0.1", "--master-port", "29501", "--interval", "0"],
    ["--unit", "vllm", "--user", "vllm", "--master-addr", "10.0.0.1", "--master-port", "29501", "--failures", "0"],
    ["--unit", "vllm", "--user", "vllm", "--master-addr", "10.0.0.1", "--master-port", "x"],
    ["--unit", "vllm", "--master-addr", "10.0.0.1", "--master-port", "29501"],
])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        watch.parse_args(argv)
    assert exc.value.code == 2
    assert "vllm-head-watch" in capsys.readouterr().err


def test_an_address_is_used_as_it_is_and_never_resolved(monkeypatch):
    def no_resolver(*args, **kwargs):
        raise AssertionError("resolver asked for an address")
    monkeypatch.setattr(watch.socket, "getaddrinfo", no_resolver)
    assert watch.resolve("10.89.241.11", 1) == ["10.89.241.11"]
    assert watch.resolve("::ffff:10.89.241.11", 1) == ["10.89.241.11"]
    assert watch.resolve("fd00::10", 1) == ["fd00::10"]


def test_the_store_probe_tells_an_open_port_from_a_closed_one():
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert watch.store_reachable("127.0.0.1", port, 2)
    finally:
        server.close()
    assert not watch.store_reachable("127.0.0.1", port, 2)


def test_runs_on_the_hosts_python_without_third_party_modules():
    imported = [line.split()[1] for line in SCRIPT.read_text(encoding="utf-8").splitlines()
                if line.startswith(("import ", "from "))]
    assert set(imported) <= set(sys.stdlib_module_names), imported
