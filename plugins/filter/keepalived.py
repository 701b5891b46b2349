# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the keepalived role: the VRRP peers of a balancer from the inventory, its default
priority, the interface that holds an address, and every reason to refuse the settings.

  keepalived_priority(members, host, top=150, step=10)
      -> top - step * (index of host in members), at least 1 (top for a host outside members)
  keepalived_peers(members, hostvars, address_var='keepalived_unicast_address')
      -> [{'name', 'address', 'source'}] for every member, in the group's order: the address from
         address_var where the host sets it, else its ansible_host; source names the variable
  keepalived_interface(facts, address)
      -> the device of the gathered network facts that holds address ('' when none does)
  keepalived_errors(peers, host, settings, hostvars=None)
      -> [message, ...]: every setting keepalived would refuse or misread, named by its variable;
         a password is never shown

Only Python's standard library (ipaddress).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils._jinja_values import strict_int as _int

# keepalived reads at most 8 characters of auth_pass (PASS and AH alike) and truncates the rest.
AUTH_PASS_MAX = 8
AUTH_TYPES = ("PASS", "AH")
# Settings every balancer of the pair must share: a difference splits the pair (two holders, or
# adverts the peer discards). Compared where a peer's inventory sets them.
SHARED = ("keepalived_virtual_ipv4", "keepalived_virtual_ipv6", "keepalived_virtual_router_id",
          "keepalived_auth_type", "keepalived_auth_pass")
SECRET = ("keepalived_auth_pass",)


def keepalived_priority(members, host, top=150, step=10):
    """The default VRRP priority of host: the first member top, each next one step lower, at least 1."""
    members = list(members or [])
    try:
        top, step = _int(top), _int(step)
    except (TypeError, ValueError):
        raise AnsibleFilterError("keepalived_priority: top and step must be integers, got %r" % ((top, step),))
    if host not in members:
        return top
    return max(1, top - step * members.index(host))


def _var(hostvars, host, name, default=None):
    try:
        value = hostvars[host][name]
    except (KeyError, TypeError, AttributeError, AnsibleUndefinedVariable):
        return default
    return default if value is None else value


def keepalived_peers(members, hostvars, address_var="keepalived_unicast_address"):
    """Every member with the address its VRRP adverts use, and the variable it came from."""
    out = []
    for name in list(members or []):
        address = _var(hostvars, name, address_var, "")
        source = address_var
        if address in ("", None):
            address = _var(hostvars, name, "ansible_host", "")
            source = "ansible_host" if address else ""
        out.append({"name": name, "address": str(address).strip(), "source": source})
    return out


def _addresses(block):
    if isinstance(block, dict):
        block = [block]
    return [str(entry.get("address", "")) for entry in (block or []) if isinstance(entry, dict)]


def keepalived_interface(facts, address):
    """The device (as the kernel names it) of the gathered facts that holds address, '' when none does."""
    try:
        wanted = ipaddress.ip_address(str(address).strip())
    except ValueError:
        return ""
    for name in sorted((facts or {}).get("interfaces") or []):
        key = str(name).replace("-", "_").replace(".", "_").replace(":", "_")
        info = facts.get(key) or facts.get(name)
        if not isinstance(info, dict):
            continue
        found = _addresses(info.get("ipv4")) + _addresses(info.get("ipv4_secondaries")) + _addresses(info.get("ipv6"))
        for value in found:
            try:
                if ipaddress.ip_address(value.split("%")[0]) == wanted:
                    return str(info.get("device") or name)
            except ValueError:
                continue
    return ""


def _vip(value, name, version, errors, required):
    """The interface address of a virtual address setting, or None (with a message when it is wrong)."""
    text = "" if value is None else str(value).strip()
    family = "IPv%d" % version
    example = "10.0.0.100/24" if version == 4 else "fd00::100/64"
    if not text:
        if required:
            errors.append("%s is empty: set the virtual address clients use, as ADDRESS/PREFIX such as %s"
                          % (name, example))
        return None
    try:
        iface = ipaddress.ip_interface(text)
    except ValueError:
        iface = None
    if iface is None or "/" not in text or iface.version != version:
        errors.append("%s: '%s' is not an %s ADDRESS/PREFIX (such as %s)" % (name, text, family, example))
        return None
    net = iface.network
    if version == 4 and net.prefixlen <= 30 and iface.ip in (net.network_address, net.broadcast_address):
        errors.append("%s: %s is the %s address of %s, not a host address"
                      % (name, iface.ip, "network" if iface.ip == net.network_address else "broadcast", net))
        return None
    return iface


def _url_host(url):
    try:
        parts = urlsplit(str(url))
        return parts.scheme, parts.hostname or "", parts.path
    except ValueError:
        return "", "", ""


def keepalived_errors(peers, host, settings, hostvars=None):
    """Messages for every setting keepalived would refuse or misread (see the module docstring).

    settings: {variable name: value} of keepalived_virtual_ipv4, keepalived_virtual_ipv6,
    keepalived_virtual_router_id, keepalived_priority, keepalived_auth_type, keepalived_auth_pass,
    keepalived_check_url, keepalived_check_upstream_url (optional). peers: keepalived_peers' answer. hostvars: where the other members'
    inventory is compared with this host's settings (SHARED)."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("keepalived_errors: settings must be a mapping, got %r" % (settings,))
    peers = list(peers or [])
    errors = []
    names = [p.get("name") for p in peers]
    if host not in names:
        errors.append("%s is not in the balancers' group (keepalived_group): the role runs only on its members"
                      % host)

    seen = {}
    for peer in peers:
        name, address, source = peer.get("name"), peer.get("address", ""), peer.get("source", "")
        if not address:
            errors.append("%s has no unicast address: set keepalived_unicast_address in its host_vars, or "
                          "ansible_host to an IPv4 address" % name)
            continue
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            ip = None
        if ip is None or ip.version != 4:
            errors.append("%s: %s '%s' is not an IPv4 address (keepalived's unicast_src_ip and unicast_peer take "
                          "IPv4 addresses, not names): set keepalived_unicast_address in its host_vars"
                          % (name, source or "keepalived_unicast_address", address))
            continue
        if str(ip) in seen:
            errors.append("%s and %s have the same unicast address %s" % (seen[str(ip)], name, ip))
        seen.setdefault(str(ip), name)

    vip4 = _vip(settings.get("keepalived_virtual_ipv4"), "keepalived_virtual_ipv4", 4, errors, True)
    vip6 = _vip(settings.get("keepalived_virtual_ipv6"), "keepalived_virtual_ipv6", 6, errors, False)
    if vip4 is not None and str(vip4.ip) in seen:
        errors.append("keepalived_virtual_ipv4: %s is the unicast address of %s; the virtual address must be one "
                      "no host has" % (vip4.ip, seen[str(vip4.ip)]))

    try:
        vrid = _int(settings.get("keepalived_virtual_router_id"))
    except (TypeError, ValueError):
        vrid = None
    if vrid is None or not 1 <= vrid <= 255:
        errors.append("keepalived_virtual_router_id: '%s' is not an integer 1..255"
                      % settings.get("keepalived_virtual_router_id"))
    try:
        priority = _int(settings.get("keepalived_priority"))
    except (TypeError, ValueError):
        priority = None
    if priority is None or not 1 <= priority <= 254:
        errors.append("keepalived_priority: '%s' is not an integer 1..254 (255 is the address owner's, which no "
                      "balancer is)" % settings.get("keepalived_priority"))

    auth_type = settings.get("keepalived_auth_type")
    if auth_type not in AUTH_TYPES:
        errors.append("keepalived_auth_type: '%s' is not one of %s" % (auth_type, ", ".join(AUTH_TYPES)))
    password = settings.get("keepalived_auth_pass")
    password = "" if password is None else str(password)
    if not password:
        errors.append("keepalived_auth_pass is empty: set 1 to %d characters, the same on every balancer "
                      "(keep it in a vault)" % AUTH_PASS_MAX)
    elif len(password) > AUTH_PASS_MAX:
        errors.append("keepalived_auth_pass has %d characters: keepalived uses only the first %d (for PASS and AH "
                      "alike) and drops the rest, so the role refuses it; use 1 to %d characters (the value is not "
                      "shown)" % (len(password), AUTH_PASS_MAX, AUTH_PASS_MAX))

    others = dict((a, n) for a, n in seen.items() if n != host)
    for var, example, optional in (("keepalived_check_url", "http://127.0.0.1:80/lb-health", False),
                                   ("keepalived_check_upstream_url", "http://127.0.0.1:8081/upstream-health", True)):
        value = settings.get(var, "")
        if optional and value in ("", None):
            continue
        scheme, url_host, path = _url_host(value)
        if scheme not in ("http", "https") or not url_host or not path.startswith("/"):
            errors.append("%s: '%s' is not an http:// or https:// URL with a path (such as %s)" % (var, value, example))
        elif (vip4 is not None and url_host == str(vip4.ip)) or (vip6 is not None and url_host == str(vip6.ip)):
            errors.append("%s: %s is the virtual address: the check must reach this host's own "
                          "nginx (use 127.0.0.1), not whichever balancer holds the address" % (var, url_host))
        elif url_host in others:
            errors.append("%s: %s is the address of %s: the check must reach this host's own "
                          "nginx (use 127.0.0.1)" % (var, url_host, others[url_host]))

    if hostvars is not None:
        for peer in names:
            if peer == host:
                continue
            for var in SHARED:
                mine = settings.get(var)
                theirs = _var(hostvars, peer, var, None)
                if theirs is None or mine is None or str(theirs).strip() == str(mine).strip():
                    continue
                if var in SECRET:
                    errors.append("%s differs between %s and %s (the values are not shown): every balancer of the "
                                  "pair needs the same" % (var, host, peer))
                else:
                    errors.append("%s differs between %s ('%s') and %s ('%s'): every balancer of the pair needs the "
                                  "same" % (var, host, mine, peer, theirs))
    return errors


class FilterModule(object):
    def filters(self):
        return {"keepalived_priority": keepalived_priority, "keepalived_peers": keepalived_peers,
                "keepalived_interface": keepalived_interface, "keepalived_errors": keepalived_errors}
