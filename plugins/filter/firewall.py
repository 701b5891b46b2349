# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the firewall role: validate ports and address lists, and turn the inventory's
groups into nftables address sets.

Only Python's standard library (ipaddress), so the collection needs no ansible.utils/netaddr.

  firewall_port_errors(ports, name)          -> [message, ...] (empty when every port is 1..65535)
  firewall_cidr_errors(values, name)         -> [message, ...] (empty when every entry is an address or network)
  firewall_split(values)                     -> {'v4': [...], 'v6': [...]} (collapsed; non-addresses skipped)
  firewall_plan(services, addresses_by_host) -> {'services': [...], 'errors': [...]}
  firewall_ip_allow(services, names, extra)  -> ['10.0.0.10', '10.0.1.0/24', ...] for systemd IPAddressAllow=
  firewall_sources(hostvars, host, groups, settings)
                                             -> {'peer_hosts', 'source_hosts', 'services'}: who may reach which
                                                protected ports of host, from the inventory's groups
  firewall_source_addresses(hostvars, hosts) -> {host: [address, ...]} from the inventory (or gathered facts)
  firewall_address_errors(hostvars, groups, cidrs, extra_services)
                                             -> [message, ...] for every bad allowed address or network, extra
                                                service group and firewall_host_addresses entry
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.llmops.vllm_cluster.plugins.filter.netplan import netplan_host_addresses
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils._jinja_values import jinja_int as _int

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,23}$")
PROTOCOLS = ("tcp", "udp")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def firewall_port_errors(ports, name="ports"):
    """Messages naming the variable for every entry that is not a port number (1..65535)."""
    if ports is None:
        return []
    single = not isinstance(ports, (list, tuple))
    errors = []
    for idx, port in enumerate([ports] if single else ports):
        ok = _is_int(port) or (isinstance(port, str) and port.isdigit())
        if not ok or not 1 <= int(port) <= 65535:
            where = name if single else "%s[%d]" % (name, idx)
            errors.append("%s: '%s' is not a port number (an integer 1..65535)" % (where, port))
    return errors


def _network(value):
    """ip_network for an address or ADDRESS/PREFIX; raises ValueError with a reason."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be an IPv4/IPv6 address or network such as 10.0.0.0/24")
    text = value.strip()
    if "/" in text:
        addr, prefix = text.split("/", 1)
        if not prefix.isdigit():
            raise ValueError("prefix '%s' is not a number" % prefix)
        ipaddress.ip_address(addr)  # a clear reason for a bad address part
    return ipaddress.ip_network(text, strict=True)


def firewall_cidr_errors(values, name="cidrs"):
    """Messages naming the variable for every entry that is not an address or network (host bits refused)."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        return ["%s: must be a list of addresses or networks (for example ['10.0.0.0/24']), got '%s'" % (name, values)]
    errors = []
    for idx, value in enumerate(values):
        try:
            _network(value)
        except ValueError as exc:
            errors.append("%s[%d]: '%s' is not an IPv4/IPv6 address or network (%s)" % (name, idx, value, exc))
    return errors


def _addresses(values):
    """ip_network objects of the entries that are addresses or networks; host names and bad entries are skipped."""
    out = []
    for value in values or []:
        if not isinstance(value, str):
            continue
        text = value.strip().split("%", 1)[0]  # fe80::1%eth0: the zone is not part of the address
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return out


def firewall_split(values):
    """{'v4': [...], 'v6': [...]}: the addresses and networks of values, collapsed, as nft set elements."""
    nets = _addresses(values)
    out = {}
    for version, key in ((4, "v4"), (6, "v6")):
        group = [n for n in nets if n.version == version]
        out[key] = [str(n.network_address) if n.num_addresses == 1 else str(n)
                    for n in ipaddress.collapse_addresses(group)]
    return out


def firewall_plan(services, addresses_by_host):
    """Resolve each protected service's source hosts into address sets and check the plan.

    services: [{name, protocol, ports, hosts, cidrs, origin}] where hosts are inventory names,
    cidrs already validated, origin names the variable(s) the service comes from (for messages).
    addresses_by_host: {host: [address, ...]} (host names and bad entries are skipped).
    """
    errors = []
    out = []
    seen_ports = {}
    names = set()
    for svc in services or []:
        name = svc.get("name")
        origin = svc.get("origin", name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            errors.append("%s: service name '%s' must match %s" % (origin, name, NAME_RE.pattern))
            continue
        if name in names:
            errors.append("%s: service name '%s' is used twice" % (origin, name))
            continue
        names.add(name)
        protocol = svc.get("protocol", "tcp")
        if protocol not in PROTOCOLS:
            errors.append("%s: protocol '%s' must be one of %s" % (origin, protocol, ", ".join(PROTOCOLS)))
            continue
        port_errors = firewall_port_errors(list(svc.get("ports") or []), origin + ".ports")
        if port_errors:
            errors.extend(port_errors)
            continue
        ports = sorted(set(int(p) for p in svc.get("ports") or []))
        if not ports:
            errors.append("%s: no ports to protect" % origin)
            continue
        for port in ports:
            key = (protocol, port)
            if key in seen_ports:
                errors.append("%s: %s port %d is already protected by %s; a port belongs to one service"
                              % (origin, protocol, port, seen_ports[key]))
            else:
                seen_ports[key] = origin
        sources = list(svc.get("cidrs") or [])
        for host in sorted(set(svc.get("hosts") or [])):
            addrs = firewall_split((addresses_by_host or {}).get(host) or [])
            if not addrs["v4"] and not addrs["v6"]:
                errors.append("%s: no address is known for source host '%s'; set firewall_host_addresses for it "
                              "(host_vars) or let the role gather its facts (firewall_gather_facts)" % (origin, host))
            sources.extend(addrs["v4"] + addrs["v6"])
        split = firewall_split(sources)
        out.append({"name": name, "protocol": protocol, "ports": ports, "origin": origin,
                    "v4": split["v4"], "v6": split["v6"]})
    return {"services": out, "errors": errors}


def firewall_ip_allow(services, names=None, extra=None):
    """The sources of the planned services called `names`, plus `extra`, as one collapsed list.

    services: firewall_plan's services ({name, v4, v6, ...}); names: which of them (all when None);
    extra: more sources, each a list of addresses/networks or a {'v4': [...], 'v6': [...]} split.
    For a systemd unit's IPAddressAllow= (which filters the unit's own sockets in both directions),
    from the same plan as the nftables table.
    """
    values = []
    for svc in services or []:
        if names is None or svc.get("name") in names:
            values.extend(svc.get("v4") or [])
            values.extend(svc.get("v6") or [])
    for item in extra or []:
        if isinstance(item, dict):
            values.extend(item.get("v4") or [])
            values.extend(item.get("v6") or [])
        elif isinstance(item, (list, tuple)):
            values.extend(item)
        elif item:
            values.append(item)
    split = firewall_split(values)
    return split["v4"] + split["v6"]


def _var(hostvars, host, name, default=None):
    try:
        return hostvars[host][name]
    except (KeyError, TypeError):
        return default


def _members(groups, name):
    return list((groups or {}).get(name) or [])


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def firewall_sources(hostvars, host, groups, settings):
    """Who may reach which protected ports of `host`.

    settings: the firewall role's inputs - vllm_nodes (heads and workers), api_port, master_port,
    balancers_group, monitoring_group, allowed_cidrs, api_allowed_cidrs, distributed_extra_ports,
    exporter_ports, exporter_allowed_cidrs, monitoring_ui_ports, monitoring_ui_allowed_cidrs,
    extra_services. Returns peer_hosts (the other nodes of host's replica), source_hosts (every host
    whose addresses the plan needs) and services (firewall_plan's input, each with the variable it
    comes from).
    """
    s = settings
    vllm_nodes = list(s["vllm_nodes"] or [])
    balancers = _members(groups, s["balancers_group"])
    monitoring = _members(groups, s["monitoring_group"])
    allowed = list(s["allowed_cidrs"] or [])
    extra_services = list(s["extra_services"] or [])
    peers = []
    if host in vllm_nodes:
        replica = _var(hostvars, host, "vllm_service_replica", host)
        peers = [h for h in vllm_nodes if h != host and _var(hostvars, h, "vllm_service_replica", h) == replica]
    sources = balancers + monitoring + vllm_nodes
    for svc in extra_services:
        for group in svc.get("groups") or []:
            sources.extend(_members(groups, group))
    services = []
    if host in vllm_nodes:
        services.append({"name": "engine_api", "protocol": "tcp", "ports": [_int(s["api_port"])],
                         "hosts": _unique(balancers + monitoring), "cidrs": allowed + list(s["api_allowed_cidrs"] or []),
                         "origin": "vllm_service_api.port"})
        services.append({"name": "engine_distributed", "protocol": "tcp",
                         "ports": [_int(s["master_port"])] + [_int(p) for p in s["distributed_extra_ports"] or []],
                         "hosts": peers, "cidrs": allowed,
                         "origin": "vllm_service_distributed.master_port/firewall_distributed_extra_ports"})
    if s["exporter_ports"]:
        services.append({"name": "exporters", "protocol": "tcp", "ports": [_int(p) for p in s["exporter_ports"]],
                         "hosts": monitoring, "cidrs": allowed + list(s["exporter_allowed_cidrs"] or []),
                         "origin": "firewall_exporter_ports"})
    if host in monitoring and s["monitoring_ui_ports"]:
        services.append({"name": "monitoring_ui", "protocol": "tcp", "ports": [_int(p) for p in s["monitoring_ui_ports"]],
                         "hosts": monitoring, "cidrs": allowed + list(s["monitoring_ui_allowed_cidrs"] or []),
                         "origin": "firewall_monitoring_ui_ports"})
    for index, svc in enumerate(extra_services):
        hosts = []
        for group in svc.get("groups") or []:
            hosts.extend(_members(groups, group))
        services.append({"name": svc.get("name"), "protocol": svc.get("protocol", "tcp"), "ports": svc.get("ports"),
                         "hosts": hosts, "cidrs": allowed + list(svc.get("cidrs") or []),
                         "origin": "firewall_extra_services[%d]" % index})
    return {"peer_hosts": peers, "source_hosts": _unique(sources), "services": services}


def firewall_source_addresses(hostvars, hosts):
    """{host: [address, ...]}: firewall_host_addresses where a host sets it, else the static addresses of
    its network data (network_interfaces, network_bonds), its ansible_host, its
    vllm_service_advertise_address and its gathered addresses."""
    out = {}
    for host in hosts or []:
        pinned = _var(hostvars, host, "firewall_host_addresses") or []
        if len(pinned) > 0:
            out[host] = pinned
            continue
        facts = _var(hostvars, host, "ansible_facts") or {}
        advertise = _var(hostvars, host, "vllm_service_advertise_address", "")
        # A balancer's virtual address (keepalived) is on whichever balancer holds it now, and is no
        # source of its traffic: gathered there, it would change the plan at every failover.
        floating = _floating(hostvars, host)
        gathered = [a for a in list(facts.get("all_ipv4_addresses") or []) + list(facts.get("all_ipv6_addresses") or [])
                    if _plain(a) not in floating]
        out[host] = (netplan_host_addresses(_var(hostvars, host, "network_interfaces") or [],
                                            _var(hostvars, host, "network_bonds") or [])
                     + [_var(hostvars, host, "ansible_host", "")]
                     + ([advertise] if advertise else [])
                     + gathered)
    return out


FLOATING_VARS = ("keepalived_virtual_ipv4", "keepalived_virtual_ipv6")


def _plain(address):
    try:
        return str(ipaddress.ip_address(str(address).split("%", maxsplit=1)[0]))
    except ValueError:
        return str(address)


def _floating(hostvars, host):
    """The virtual addresses (without prefix) that move between the balancers."""
    out = set()
    for name in FLOATING_VARS:
        value = _var(hostvars, host, name, "") or ""
        try:
            out.add(str(ipaddress.ip_interface(str(value).strip()).ip))
        except ValueError:
            continue
    return out


_MISSING = object()


def firewall_address_errors(hostvars, groups, cidrs, extra_services):
    """Messages for every entry that is not an address or network, naming the variable.

    cidrs: {variable name: list} of the allowed-address variables; extra_services: firewall_extra_services
    (their cidrs, and groups that must exist); every inventory host's firewall_host_addresses, where set.
    """
    errors = []
    for name, values in (cidrs or {}).items():
        errors.extend(firewall_cidr_errors(values, name))
    for index, svc in enumerate(extra_services or []):
        errors.extend(firewall_cidr_errors(svc.get("cidrs") or [], "firewall_extra_services[%d].cidrs" % index))
        for group in svc.get("groups") or []:
            if group not in (groups or {}):
                errors.append("firewall_extra_services[%d].groups: no inventory group named %s" % (index, group))
    for host in _members(groups, "all"):
        pinned = _var(hostvars, host, "firewall_host_addresses", _MISSING)
        if pinned is not _MISSING:
            errors.extend(firewall_cidr_errors(pinned, "firewall_host_addresses of %s" % host))
    return errors


class FilterModule(object):
    """Firewall validation and planning filters."""

    def filters(self):
        return {
            "firewall_port_errors": firewall_port_errors,
            "firewall_cidr_errors": firewall_cidr_errors,
            "firewall_split": firewall_split,
            "firewall_plan": firewall_plan,
            "firewall_ip_allow": firewall_ip_allow,
            "firewall_sources": firewall_sources,
            "firewall_source_addresses": firewall_source_addresses,
            "firewall_address_errors": firewall_address_errors,
        }
