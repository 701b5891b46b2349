# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""The replicas of the cluster, worked out once from the inventory: one source of replica facts.

Only Python's standard library. Reads, for each host of the vLLM groups, its inventory variables:
vllm_service_replica, ansible_host, network_interfaces/network_bonds (the network role's data;
entries with role: fabric), vllm_service_advertise_address, vllm_service_fabric (socket_ifname,
ib_hca), vllm_service_distributed (master_addr, master_port) and vllm_service_api (port).

  cluster_replicas(hostvars, heads, workers, defaults, local) -> {replica: {...}} (see cluster_cases.yml)
  cluster_errors(hostvars, heads, workers, local)             -> [message, ...] (empty when valid)

local ({'name': host, 'vars': {...}}) puts the running host's effective values over its hostvars
entry: variables given to the role or task are not part of hostvars.
  cluster_rdma_device(ifname)                          -> the RDMA (RoCE) device of a netdev name, or ''
  cluster_address(hostvars, name, override='')         -> the address other hosts use for NAME
  cluster_api_url(hostvars, head)                      -> http://ADDRESS:PORT of a head's API
  cluster_endpoint(hostvars, balancers)                -> the address clients use (the pair's virtual one)
  cluster_engine_topology(log_text)                    -> what a node's engine log says it ran as
  cluster_join_errors(journals, replica, unit, tail, head_log)
                                                       -> [message, ...] per worker that did not join
  cluster_replica_report(replicas, engines, upstreams)  -> per replica: nodes, TP/world size, share
  cluster_scrape_jobs(hostvars, groups, settings)      -> Prometheus' targets per job (monitoring)
  cluster_roll_plan(replicas, hosts, rolling, chosen)  -> the order and batches of an engine change

Every address one host uses for another (nginx upstreams, Prometheus targets, the playbooks' URLs,
a replica's management address) comes from cluster_address: the host's OVERRIDE variable when set
(e.g. nginx_lb_backend_address), else its ansible_host. Without either it is the inventory name,
which only works where the name resolves: the shipped inventories give every host an ansible_host
(tests/unit/test_render_inventories.py fails on a name where an address belongs).
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.parsing.convert_bool import boolean

# rdma-core's udev naming (NAME_PCI) for a RoCE device follows the netdev's PCI path:
# enp1s0f1np1 -> rocep1s0f1, enP2p1s0f1np1 -> roceP2p1s0f1 (the two halves of a DGX Spark's
# ConnectX-7 port), ens1f0np0 -> roces1f0 is NOT derivable (slot names are not PCI paths).
_PCI_NETDEV = re.compile(r"^en(?P<domain>P[0-9]+)?(?P<path>p[0-9]+s[0-9]+(?:f[0-9]+)?)(?:np[0-9]+)?$")
DEFAULTS = {"master_port": 29501, "api_port": 8000}


def cluster_rdma_device(ifname):
    """The RDMA device name rdma-core gives the RoCE function of a PCI-path netdev name, else ''."""
    match = _PCI_NETDEV.match(ifname or "")
    if not match:
        return ""
    return "roce" + (match.group("domain") or "") + match.group("path")


def _get(mapping, key, default=None):
    try:
        value = mapping[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def _as_list(value):
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _fabric_entries(hv):
    out = []
    for kind in ("network_interfaces", "network_bonds"):
        for item in _get(hv, kind, []) or []:
            if isinstance(item, dict) and item.get("role", "other") == "fabric" and item.get("name"):
                out.append((kind, item))
    return out


def _first_address(item):
    for cidr in item.get("addresses") or []:
        try:
            return str(ipaddress.ip_interface(cidr).ip)
        except ValueError:
            continue
    return ""


def cluster_address(hostvars, name, override=""):
    """The address other hosts reach NAME at: hostvars[NAME][OVERRIDE], else ansible_host, else NAME."""
    hv = _get(hostvars, name, {})
    if override:
        value = _get(hv, override, "")
        if value:
            return str(value)
    return str(_get(hv, "ansible_host", name) or name)


def cluster_api_url(hostvars, head):
    """http://ADDRESS:PORT of HEAD's API (vllm_service_api.port, default 8000; IPv6 in brackets)."""
    api = _get(_get(hostvars, head, {}), "vllm_service_api", {}) or {}
    return "http://" + _host_port(cluster_address(hostvars, head), int(_get(api, "port", DEFAULTS["api_port"])))


def cluster_endpoint(hostvars, balancers):
    """The address clients reach the endpoint at, {address, virtual, balancers}: the balancers' virtual
    address (keepalived_virtual_ipv4 of the first balancer, without its prefix) where keepalived runs
    (keepalived_enabled, by default with two or more balancers, and a virtual address set), else the
    first balancer's own address (cluster_address); '' without a balancer."""
    members = [str(b) for b in (balancers or [])]
    if not members:
        return {"address": "", "virtual": False, "balancers": []}
    hv = _get(hostvars, members[0], {})
    enabled = _get(hv, "keepalived_enabled", None)
    enabled = len(members) > 1 if enabled is None or enabled == "" else bool(boolean(enabled, strict=False))
    vip = str(_get(hv, "keepalived_virtual_ipv4", "") or "").strip()
    if enabled and vip:
        try:
            return {"address": str(ipaddress.ip_interface(vip).ip), "virtual": True, "balancers": members}
        except ValueError:
            pass
    return {"address": cluster_address(hostvars, members[0]), "virtual": False, "balancers": members}


def cluster_backends(hostvars, hosts, explicit=None, override=""):
    """The balancer's upstream servers, [{address, port, name}]: the EXPLICIT entries when there are any
    (port 8000 and name = address unless given), else one per host of HOSTS (the replica heads): its
    address (cluster_address with OVERRIDE), its API port (vllm_service_api.port, 8000) and its
    replica's name (vllm_service_replica, else the host)."""
    if explicit:
        return [{"address": str(_get(b, "address", "")), "port": int(_get(b, "port", DEFAULTS["api_port"])),
                 "name": str(_get(b, "name", _get(b, "address", "")))} for b in explicit]
    out = []
    for name in hosts or []:
        hv = _get(hostvars, name, {})
        api = _get(hv, "vllm_service_api", {}) or {}
        out.append({"address": cluster_address(hostvars, name, override),
                    "port": int(_get(api, "port", DEFAULTS["api_port"])), "name": _replica_of(name, hv)})
    return out


def _host_port(address, port):
    """ADDRESS:PORT, an IPv6 address in brackets."""
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    return "%s:%s" % (address, port)


# What cluster_scrape_jobs reads from its settings (the monitoring role's variables, without the prefix).
SCRAPE_SETTINGS = {
    "vllm_targets": [], "vllm_heads_group": "vllm_heads", "vllm_default_port": 8000,
    "node_exporter_enabled": True, "node_exporter_group": "cluster", "node_exporter_port": 9100,
    "balancers_group": "balancers", "nginx_exporter_enabled": True, "nginx_exporter_port": 9113,
    "nginx_log_metrics_enabled": True, "mtail_port": 3903,
    "dcgm_exporter_enabled": True, "gpu_group": "gpu_nodes", "dcgm_exporter_port": 9400,
    "address_variable": "monitoring_scrape_address",
}


def cluster_scrape_jobs(hostvars, groups, settings=None):
    """Prometheus' scrape targets per job, {job: [{targets: [ADDRESS:PORT], labels: {...}}]}, from the
    inventory: vLLM on each head (its vllm_service_api.port, labels host and replica), node exporter on
    each host of its group, nginx exporter and mtail on each balancer, DCGM exporter on each GPU host
    whose cluster_has_gpu is not false. Each address is cluster_address's (settings' address_variable,
    else ansible_host). Explicit vllm_targets replace the heads'."""
    s = dict(SCRAPE_SETTINGS, **(settings or {}))
    jobs = {"vllm": [], "node": [], "nginx": [], "nginx_log": [], "dcgm": []}

    def members(group):
        return list(_get(groups, group, []) or [])

    def target(host, port):
        return _host_port(cluster_address(hostvars, host, s["address_variable"]), port)

    if s["vllm_targets"]:
        for item in s["vllm_targets"]:
            jobs["vllm"].append({"targets": [str(item["address"])], "labels": dict(item.get("labels") or {})})
    else:
        for host in members(s["vllm_heads_group"]):
            hv = _get(hostvars, host, {})
            port = _get(_get(hv, "vllm_service_api", {}) or {}, "port", s["vllm_default_port"])
            jobs["vllm"].append({"targets": [target(host, port)],
                                 "labels": {"host": host, "replica": str(_get(hv, "vllm_service_replica", host))}})
    if boolean(s["node_exporter_enabled"]):
        for host in members(s["node_exporter_group"]):
            jobs["node"].append({"targets": [target(host, s["node_exporter_port"])], "labels": {"host": host}})
    for host in members(s["balancers_group"]):
        if boolean(s["nginx_exporter_enabled"]):
            jobs["nginx"].append({"targets": [target(host, s["nginx_exporter_port"])], "labels": {"host": host}})
        if boolean(s["nginx_log_metrics_enabled"]):
            jobs["nginx_log"].append({"targets": [target(host, s["mtail_port"])], "labels": {"host": host}})
    if boolean(s["dcgm_exporter_enabled"]):
        for host in members(s["gpu_group"]):
            if boolean(_get(_get(hostvars, host, {}), "cluster_has_gpu", True)):
                jobs["dcgm"].append({"targets": [target(host, s["dcgm_exporter_port"])], "labels": {"host": host}})
    return jobs


# vLLM's own log lines: every rank's torch.distributed init, and the engine config on the head.
_WORLD = re.compile(r"world_size=(?P<world>[0-9]+) rank=(?P<rank>[0-9]+) local_rank=[0-9]+ "
                    r"distributed_init_method=(?P<init>\S+) backend=(?P<backend>\w+)")
_TP = re.compile(r"\btensor_parallel_size=(?P<tp>[0-9]+)")
# Logged by every rank once the world group is formed, i.e. once all ranks met (the world_size=
# line above comes before the rendezvous, so it does not prove that the rank joined).
_JOINED = re.compile(r"\brank (?P<rank>[0-9]+) in world size (?P<world>[0-9]+) is assigned as\b")


def cluster_engine_topology(text):
    """What an engine's log (one start of its unit) says: {world_size, ranks, joined,
    tensor_parallel_size, backend, init_method}; None where the log does not say (the last line of
    each kind counts). ranks: the ranks that started their rendezvous; joined: those that completed
    it (their place in the world group is logged only once every rank is there)."""
    out = {"world_size": None, "ranks": [], "joined": [], "tensor_parallel_size": None, "backend": None,
           "init_method": None}
    for line in (text or "").splitlines():
        match = _JOINED.search(line)
        if match and int(match.group("rank")) not in out["joined"]:
            out["joined"].append(int(match.group("rank")))
        match = _WORLD.search(line)
        if match:
            out["world_size"] = int(match.group("world"))
            out["backend"] = match.group("backend")
            out["init_method"] = match.group("init")
            rank = int(match.group("rank"))
            if rank not in out["ranks"]:
                out["ranks"].append(rank)
        match = _TP.search(line)
        if match:
            out["tensor_parallel_size"] = int(match.group("tp"))
    out["ranks"].sort()
    out["joined"].sort()
    return out


def cluster_join_errors(journals, replica, unit="vllm", tail=15, head_log=None):
    """One message per worker of REPLICA whose engine did not join its head's world group in this
    start, with the last TAIL lines of its journal. JOURNALS: the results of reading each worker's
    journal of this start (a registered loop: item = worker, stdout, rc; unreachable/msg).
    HEAD_LOG (the head's journal of this start), when given, says whether the workers are the cause
    at all: none is named when the head never began its rendezvous (its own error is the cause) or
    when its ranks joined (the world group formed, so every worker was there)."""
    if head_log is not None:
        head = cluster_engine_topology(head_log)
        if not head["ranks"] or head["joined"]:
            return []
    by_worker = {}
    for result in journals or []:
        if isinstance(result, dict) and result.get("item") is not None:
            by_worker[str(result["item"])] = result
    errors = []
    for worker in (replica or {}).get("workers", []):
        prefix = "replica %s not ready: worker %s did not join" % (replica.get("name", "?"), worker)
        result = by_worker.get(worker)
        if result is None:
            errors.append("%s (its journal was not read)" % prefix)
            continue
        if result.get("skipped"):
            continue  # not this host's to say (a worker's own rescue skips its peers' journals)
        if result.get("unreachable") or result.get("rc", 0) != 0:
            errors.append("%s (its journal could not be read: %s)" % (
                prefix, str(result.get("msg") or result.get("stderr") or "rc %s" % result.get("rc")).strip()))
            continue
        text = result.get("stdout") or ""
        if cluster_engine_topology(text)["joined"]:
            continue
        lines = [line for line in text.splitlines() if line.strip()][-int(tail):]
        if lines:
            errors.append("%s (last %d lines of its journal of this start, journalctl -u %s on %s): %s"
                          % (prefix, len(lines), unit, worker, " | ".join(lines)))
        else:
            errors.append("%s (its journal of this start is empty: the unit never logged; systemctl status %s on %s)"
                          % (prefix, unit, worker))
    return errors


def cluster_replica_report(replicas, engines, upstreams):
    """One row per replica (by name): head, workers, the TP size and world size its engine reported
    (the head's log; world size also the ranks every node reported), and the requests of the load
    that its head served (UPSTREAMS: {"ADDRESS:PORT": count}, nginx's upstream addresses)."""
    # nginx names every upstream it tried ("A:8000, B:8000"): the last one served the request.
    served_by = {}
    for value, count in (upstreams or {}).items():
        last = str(value).rsplit(",", maxsplit=1)[-1].strip()
        served_by[last] = served_by.get(last, 0) + int(count)
    total = sum(served_by.values())
    rows = []
    for name in sorted(replicas or {}):
        rep = replicas[name]
        head = rep["head"]
        nodes = [head] + list(rep.get("workers", []))
        head_engine = (engines or {}).get(head) or {}
        ranks = {}
        for node in nodes:
            for rank in ((engines or {}).get(node) or {}).get("ranks", []):
                ranks.setdefault(node, []).append(rank)
        address = rep.get("api_address", head)
        key = "%s:%s" % ("[%s]" % address if ":" in address else address, rep.get("api_port", DEFAULTS["api_port"]))
        served = served_by.get(key, 0)
        rows.append({
            "replica": name,
            "head": head,
            "workers": list(rep.get("workers", [])),
            "nnodes": len(nodes),
            "tensor_parallel_size": head_engine.get("tensor_parallel_size"),
            "world_size": head_engine.get("world_size"),
            "backend": head_engine.get("backend"),
            "ranks": ranks,
            "upstream": key,
            "requests": served,
            "share": (float(served) / total) if total else None,
        })
    return rows


def _node(name, hv):
    fabric = _get(hv, "vllm_service_fabric", {}) or {}
    entries = _fabric_entries(hv)
    address, ifname = "", ""
    for _kind, item in entries:
        address = _first_address(item)
        if address:
            ifname = item["name"]
            break
    advertise = _get(hv, "vllm_service_advertise_address", "")
    if advertise:
        address = str(advertise)
    if _get(fabric, "socket_ifname", ""):
        ifname = str(fabric["socket_ifname"])
    hcas = _as_list(_get(fabric, "ib_hca", ""))
    if not hcas:
        for kind, item in entries:
            dev = cluster_rdma_device(item["name"]) if kind == "network_interfaces" else ""
            if dev and dev not in hcas:
                hcas.append(dev)
    return {
        "name": name,
        "management_address": cluster_address({name: hv}, name),
        "fabric_address": address,
        "socket_ifname": ifname,
        "ib_hca": hcas,
    }


class _Overlay(object):
    """A host's inventory variables with the running host's own values on top: the vars a role or
    task was given (include_role vars, role params) are not in hostvars, but they are this node's."""

    def __init__(self, base, top):
        self._base, self._top = base, top

    def __getitem__(self, key):
        if key in self._top:
            return self._top[key]
        return self._base[key]


def _host(hostvars, name, local):
    hv = _get(hostvars, name, {})
    if local and name == local.get("name"):
        return _Overlay(hv, local.get("vars") or {})
    return hv


def _replica_of(name, hv):
    return str(_get(hv, "vllm_service_replica", name))


def cluster_errors(hostvars, heads, workers, local=None):
    """Topology problems: a host in both groups, a replica without exactly one head."""
    heads, workers = list(heads or []), list(workers or [])
    errors = []
    for name in sorted(set(heads) & set(workers)):
        errors.append("%s is in both vllm_heads and vllm_workers; a node is the head or a worker of its replica"
                      % name)
    by_replica = {}
    for name in heads:
        by_replica.setdefault(_replica_of(name, _host(hostvars, name, local)), []).append(name)
    for replica, names in sorted(by_replica.items()):
        if len(names) > 1:
            errors.append("replica '%s' (vllm_service_replica) has %d heads (%s); a replica has exactly one"
                          % (replica, len(names), ", ".join(names)))
    for name in workers:
        replica = _replica_of(name, _host(hostvars, name, local))
        if replica not in by_replica:
            errors.append("worker %s is in replica '%s' (vllm_service_replica), which has no head in vllm_heads; "
                          "set vllm_service_replica on each worker to its head's replica name" % (name, replica))
    return errors


def cluster_replicas(hostvars, heads, workers, defaults=None, local=None):
    """Each replica: its head, workers (rank order = inventory order), each node's management and
    fabric addresses, socket interface and HCAs, and the replica's rendezvous address and ports."""
    cfg = dict(DEFAULTS)
    cfg.update(defaults or {})
    out = {}
    for name in heads or []:
        hv = _host(hostvars, name, local)
        replica = _replica_of(name, hv)
        if replica in out:
            continue  # reported by cluster_errors
        head = _node(name, hv)
        head.update({"role": "head", "rank": 0})
        dist = _get(hv, "vllm_service_distributed", {}) or {}
        api = _get(hv, "vllm_service_api", {}) or {}
        out[replica] = {
            "name": replica,
            "head": name,
            "workers": [],
            "nodes": {name: head},
            "master_addr": str(_get(dist, "master_addr", "") or head["fabric_address"] or head["management_address"]),
            "master_port": int(_get(dist, "master_port", cfg["master_port"])),
            "api_port": int(_get(api, "port", cfg["api_port"])),
            "api_address": head["management_address"],
        }
    for name in workers or []:
        if name in (heads or []):
            continue
        hv = _host(hostvars, name, local)
        replica = out.get(_replica_of(name, hv))
        if replica is None:
            continue  # reported by cluster_errors
        node = _node(name, hv)
        replica["workers"].append(name)
        node.update({"role": "worker", "rank": len(replica["workers"])})
        replica["nodes"][name] = node
    for replica in out.values():
        replica["nnodes"] = len(replica["nodes"])
    return out


def cluster_roll_plan(replicas, hosts, rolling, chosen=None):
    """The order in which the engines of HOSTS change, and the play's batches (its serial).

    Nodes go replica by replica, each head before its workers (the order of cluster_replicas).
    ROLLING (a cluster that already serves, unless the operator asked for all at once): one batch
    per replica, so that each replica is drained, changed, ready and back before the next one
    starts; replicas of different sizes get batches of their own size. Not rolling: one batch.
    CHOSEN (a list of replica names, or None for every replica): only those replicas. HOSTS not in
    any replica come last, in a batch of their own (their own play then names what is wrong).
    NODES: each planned node of a replica with its replica's name and head, so that a task on any
    node of a batch (a worker of a --limit too) finds the replica it takes out of the balancers."""
    hosts = [str(h) for h in (hosts or [])]
    wanted = set(hosts)
    picked = None if chosen is None else set(str(c) for c in chosen)
    order, batches, names, members = [], [], [], {}
    for name, replica in (replicas or {}).items():
        if picked is not None and name not in picked:
            continue
        nodes = [n for n in replica.get("nodes", {}) if n in wanted]
        if not nodes:
            continue
        order.extend(nodes)
        batches.append(len(nodes))
        names.append(name)
        for node in nodes:
            members[node] = {"replica": name, "head": replica.get("head", nodes[0])}
    if picked is None:
        rest = [h for h in hosts if h not in order]
        if rest:
            order.extend(rest)
            batches.append(len(rest))
    rolling = bool(boolean(rolling, strict=False))
    if not rolling:
        batches = [len(order)] if order else []
    return {"order": order, "batches": batches or [1], "rolling": rolling, "replicas": names, "nodes": members}


class FilterModule(object):
    """Replica facts from the inventory."""

    def filters(self):
        return {
            "cluster_replicas": cluster_replicas,
            "cluster_errors": cluster_errors,
            "cluster_rdma_device": cluster_rdma_device,
            "cluster_address": cluster_address,
            "cluster_backends": cluster_backends,
            "cluster_endpoint": cluster_endpoint,
            "cluster_api_url": cluster_api_url,
            "cluster_engine_topology": cluster_engine_topology,
            "cluster_join_errors": cluster_join_errors,
            "cluster_replica_report": cluster_replica_report,
            "cluster_scrape_jobs": cluster_scrape_jobs,
            "cluster_roll_plan": cluster_roll_plan,
        }
