# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the network role: validate inventory network data and render it as netplan.

Only Python's standard library (ipaddress), so the collection needs no ansible.utils/netaddr.

  netplan_errors(interfaces, bonds, present, host)   -> [message, ...] (empty when valid)
  netplan_duplicates({host: [cidr, ...]})            -> [message, ...]
  netplan_config(interfaces, bonds, renderer)        -> netplan document (dict)
  netplan_host_addresses(interfaces, bonds, roles)   -> [address without prefix, ...]
  netplan_static_addresses(document)                 -> "IFACE CIDR ..." lines (links without DHCP)
  netplan_renderer(wanted, dgx_os, nm_active, host)  -> {renderer, error}: the host's own renderer kept
"""

from __future__ import annotations

import ipaddress
import re

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
# Keys the role models; anything else a user needs goes into an entry's `netplan` mapping.
MODELED = (
    "name", "role", "addresses", "dhcp4", "dhcp6", "link_local", "mtu", "gateway",
    "routes", "nameservers", "optional", "netplan", "interfaces", "parameters",
)
ROLES = ("management", "fabric", "other")
LINK_LOCAL = ("ipv4", "ipv6")


def _iface(cidr):
    """ip_interface for 'ADDR/PREFIX'; raises ValueError with a reason."""
    if not isinstance(cidr, str) or "/" not in cidr:
        raise ValueError("must be ADDRESS/PREFIX (for example 192.168.100.11/24)")
    addr, prefix = cidr.split("/", 1)
    if not prefix.isdigit():
        raise ValueError("prefix '%s' is not a number" % prefix)
    iface = ipaddress.ip_interface(cidr)  # raises ValueError: bad address or prefix
    if str(ipaddress.ip_address(addr)) != str(iface.ip):
        raise ValueError("address '%s' is not canonical" % addr)
    net = iface.network
    if net.version == 4 and net.prefixlen < 31 and iface.ip in (net.network_address, net.broadcast_address):
        raise ValueError("%s is the network or broadcast address of %s, not a host address" % (iface.ip, net))
    return iface


def _entries(interfaces, bonds):
    for kind, items in (("network_interfaces", interfaces or []), ("network_bonds", bonds or [])):
        for idx, item in enumerate(items):
            yield kind, idx, item


def netplan_errors(interfaces, bonds=None, present=None, host="this host"):
    """Every problem in one host's network data, each naming the variable and the valid values."""
    errors = []
    present = set(present or [])
    names = set()
    bond_members = set()
    for kind, idx, item in _entries(interfaces, bonds):
        where = "%s[%d]" % (kind, idx)
        if not isinstance(item, dict):
            errors.append("%s on %s must be a mapping, got %r" % (where, host, item))
            continue
        name = item.get("name")
        if not isinstance(name, str) or not IFNAME_RE.fullmatch(name):
            errors.append("%s.name on %s must be an interface name (1-15 of A-Z a-z 0-9 _ . : -), got %r"
                          % (where, host, name))
            continue
        where = "%s[%d] (%s)" % (kind, idx, name)
        if name in names:
            errors.append("%s on %s: interface '%s' is defined twice" % (where, host, name))
        names.add(name)
        unknown = sorted(set(item) - set(MODELED))
        if unknown:
            errors.append("%s on %s: unknown keys %s (valid: %s; put other netplan keys under 'netplan')"
                          % (where, host, unknown, ", ".join(MODELED)))
        role = item.get("role", "other")
        if role not in ROLES:
            errors.append("%s.role on %s must be one of %s, got %r" % (where, host, ", ".join(ROLES), role))
        if kind == "network_interfaces":
            if present and name not in present:
                errors.append("%s on %s: the host has no interface '%s' (it has: %s)"
                              % (where, host, name, ", ".join(sorted(present))))
        else:
            members = item.get("interfaces") or []
            if not isinstance(members, list) or not members:
                errors.append("%s.interfaces on %s must list the bond's member interfaces" % (where, host))
                members = []
            for member in members:
                if present and member not in present:
                    errors.append("%s on %s: bond member '%s' is not an interface of the host (it has: %s)"
                                  % (where, host, member, ", ".join(sorted(present))))
                bond_members.add(member)
        ifaces = []
        addresses = item.get("addresses") or []
        if not isinstance(addresses, list):
            errors.append("%s.addresses on %s must be a list of ADDRESS/PREFIX" % (where, host))
            addresses = []
        for cidr in addresses:
            try:
                ifaces.append(_iface(cidr))
            except ValueError as exc:
                errors.append("%s.addresses on %s: invalid address %r: %s" % (where, host, cidr, exc))
        mtu = item.get("mtu")
        if mtu is not None and (isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 65535):
            errors.append("%s.mtu on %s must be an integer 68-65535, got %r" % (where, host, mtu))
        ll = item.get("link_local")
        if ll is not None and (not isinstance(ll, list) or any(x not in LINK_LOCAL for x in ll)):
            errors.append("%s.link_local on %s must be a list of %s (or []), got %r"
                          % (where, host, ", ".join(LINK_LOCAL), ll))
        routes = list(item.get("routes") or [])
        if item.get("gateway") is not None:
            routes.append({"to": "default", "via": item["gateway"], "_key": "gateway"})
        for ridx, route in enumerate(routes):
            rwhere = "%s.%s" % (where, route.get("_key") or "routes[%d]" % ridx) if isinstance(route, dict) \
                else "%s.routes[%d]" % (where, ridx)
            if not isinstance(route, dict) or "via" not in route and "to" not in route:
                errors.append("%s on %s must be a mapping with 'to' and 'via'" % (rwhere, host))
                continue
            to = route.get("to", "default")
            if to != "default":
                try:
                    ipaddress.ip_network(to, strict=True)
                except ValueError as exc:
                    errors.append("%s.to on %s: invalid destination %r: %s" % (rwhere, host, to, exc))
            via = route.get("via")
            if via is None:
                continue
            try:
                gw = ipaddress.ip_address(via)
            except ValueError as exc:
                errors.append("%s on %s: invalid gateway %r: %s" % (rwhere, host, via, exc))
                continue
            if route.get("on_link") or route.get("on-link"):
                continue
            same = [i for i in ifaces if i.version == gw.version]
            if not any(gw in i.network for i in same):
                subnets = ", ".join(str(i.network) for i in same) or "none (no static address of that family)"
                errors.append("%s on %s: gateway %s is outside the interface's subnets (%s); "
                              "set on_link: true if that is deliberate" % (rwhere, host, gw, subnets))
            elif any(gw == i.ip for i in same):
                errors.append("%s on %s: gateway %s is the interface's own address" % (rwhere, host, gw))
        extra = item.get("netplan")
        if extra is not None and not isinstance(extra, dict):
            errors.append("%s.netplan on %s must be a mapping of extra netplan keys" % (where, host))
    for member in bond_members & names:
        errors.append("network_interfaces on %s: '%s' is a bond member and must not be configured "
                      "on its own as well" % (host, member))
    return errors


def netplan_host_addresses(interfaces, bonds=None, roles=None, prefix=False):
    """Static addresses of a host's entries (optionally only those whose role is in roles)."""
    out = []
    for _kind, _idx, item in _entries(interfaces, bonds):
        if not isinstance(item, dict):
            continue
        if roles and item.get("role", "other") not in roles:
            continue
        for cidr in item.get("addresses") or []:
            try:
                iface = _iface(cidr)
            except ValueError:
                continue
            out.append(str(iface) if prefix else str(iface.ip))
    return out


def netplan_duplicates(addresses_by_host):
    """{host: [cidr, ...]} -> messages for every address configured on more than one host/entry."""
    seen = {}
    for host in sorted(addresses_by_host or {}):
        for cidr in addresses_by_host[host] or []:
            try:
                ip = str(_iface(cidr).ip)
            except ValueError:
                continue  # reported by netplan_errors on its own host
            seen.setdefault(ip, []).append(host)
    return ["network_interfaces/network_bonds: address %s is configured more than once (on %s)"
            % (ip, ", ".join(hosts)) for ip, hosts in sorted(seen.items()) if len(hosts) > 1]


def _render(item):
    out = {}
    if item.get("addresses"):
        out["addresses"] = list(item["addresses"])
    out["dhcp4"] = bool(item.get("dhcp4", False))
    if "dhcp6" in item:
        out["dhcp6"] = bool(item["dhcp6"])
    if item.get("link_local") is not None:
        out["link-local"] = list(item["link_local"])
    if item.get("mtu") is not None:
        out["mtu"] = int(item["mtu"])
    routes = []
    if item.get("gateway") is not None:
        routes.append({"to": "default", "via": item["gateway"]})
    for route in item.get("routes") or []:
        r = {}
        for key, value in route.items():
            r["on-link" if key == "on_link" else key] = value
        r.setdefault("to", "default")
        routes.append(r)
    if routes:
        out["routes"] = routes
    if item.get("nameservers"):
        out["nameservers"] = dict(item["nameservers"])
    if "optional" in item:
        out["optional"] = bool(item["optional"])
    if item.get("interfaces"):
        out["interfaces"] = list(item["interfaces"])
    if item.get("parameters"):
        out["parameters"] = dict(item["parameters"])
    out.update(item.get("netplan") or {})
    return out


def netplan_config(interfaces, bonds=None, renderer="networkd"):
    """The netplan document for one host: ethernets (and bond members) plus bonds."""
    network = {"version": 2, "renderer": renderer}
    ethernets = {}
    for item in interfaces or []:
        ethernets[item["name"]] = _render(item)
    bond_docs = {}
    for bond in bonds or []:
        for member in bond.get("interfaces") or []:
            ethernets.setdefault(member, {"dhcp4": False})
        bond_docs[bond["name"]] = _render(bond)
    if ethernets:
        network["ethernets"] = ethernets
    if bond_docs:
        network["bonds"] = bond_docs
    return {"network": network}


def netplan_static_addresses(document):
    """The static addresses a netplan document puts on each link that uses no DHCP, one line per link
    ('IFACE CIDR CIDR ...'): what the role's rollback helper keeps when it removes addresses an
    earlier configuration left behind (netplan and networkd do not remove them on a re-apply)."""
    network = (document or {}).get("network") or {}
    lines = []
    for kind in ("ethernets", "bonds"):
        for name, cfg in sorted((network.get(kind) or {}).items()):
            cfg = cfg or {}
            if cfg.get("dhcp4") or cfg.get("dhcp6"):
                continue
            cidrs = []
            for addr in cfg.get("addresses") or []:
                # netplan also accepts {ADDRESS: {label: ..., lifetime: ...}}
                cidr = addr if isinstance(addr, str) else next(iter(addr))
                cidrs.append(str(ipaddress.ip_interface(cidr)))
            lines.append(" ".join([name] + cidrs))
    return "\n".join(lines) + ("\n" if lines else "")


def netplan_renderer(wanted, dgx_os=False, nm_active=False, host="this host"):
    """The renderer to write: the host's own. `auto` is NetworkManager where it runs (DGX OS ships it),
    else networkd; an explicit networkd where NetworkManager manages the interfaces is an error, since
    both would configure the same ports."""
    owner = "NetworkManager" if (dgx_os or nm_active) else "networkd"
    if wanted in (None, "", "auto"):
        return {"renderer": owner, "error": ""}
    if wanted == "networkd" and owner == "NetworkManager":
        why = "DGX OS (/etc/dgx-release) manages its network with NetworkManager" if dgx_os else \
            "NetworkManager is active"
        return {"renderer": wanted, "error": (
            "network_renderer=networkd on %s: %s, and a networkd file would fight it for the same ports; "
            "set network_renderer to auto or NetworkManager (valid: auto, networkd, NetworkManager), "
            "nothing was changed" % (host, why))}
    return {"renderer": wanted, "error": ""}


class FilterModule(object):
    """Netplan validation and rendering filters."""

    def filters(self):
        return {
            "netplan_errors": netplan_errors,
            "netplan_duplicates": netplan_duplicates,
            "netplan_config": netplan_config,
            "netplan_host_addresses": netplan_host_addresses,
            "netplan_static_addresses": netplan_static_addresses,
            "netplan_renderer": netplan_renderer,
        }
