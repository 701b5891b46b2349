"""A value with a trailing newline passes a `^...$` pattern under re.match (`$` also matches before a
final newline): every filter check of a value that reaches a configuration file or a command line
must refuse it. One case per checked field, valid without the newline and refused with it."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.filter import api_keys, dspark_build, file_set
from ansible_collections.llmops.vllm_cluster.plugins.filter import firewall, netplan, response_cache

KEY = "abcdefghijklmnopqrstuvwxyz012345"


def response_cache_settings(**over):
    base = {"response_cache_redis_maxmemory": "256mb", "response_cache_bypass_header": "X-No-Cache",
            "response_cache_gateway_address": "127.0.0.1", "response_cache_listen_address": "",
            "response_cache_client_max_body_size": "16m"}
    base.update(over)
    return base


def rc_errors(**over):
    """response_cache_errors' messages about the fields of this test (other settings may be missing)."""
    settings = {"response_cache_redis_password": "p" * 16, "response_cache_master_key": "m" * 16}
    settings.update({"response_cache_tenants": [], "response_cache_metrics_key": "", "response_cache_models": ["m"],
                     "response_cache_redis_bind": ["127.0.0.1"], "response_cache_redis_port": 6379,
                     "response_cache_port": 8080, "response_cache_gateway_port": 4000, "response_cache_rate_limit": 0,
                     "response_cache_rate_limit_burst": 0, "response_cache_tls": False, "response_cache_tls_cert": "",
                     "response_cache_tls_key": "", "response_cache_ttl": 600})
    settings.update(response_cache_settings(**over))
    errors = response_cache.response_cache_errors(settings)
    return [e for e in errors if any(k in e for k in over)]


CASES = {
    "api key": lambda v: api_keys.api_key_errors([v]),
    "dspark patch name": lambda v: dspark_build.dspark_patch_errors([{"name": v, "commit": "0123456789abcdef"}], remote="file:///r"),
    "dspark patch commit": lambda v: dspark_build.dspark_patch_errors([{"name": "p", "commit": v}], remote="file:///r"),
    "dspark active release": lambda v: dspark_build.dspark_patch_errors([], active_release=v),
    "netplan interface name": lambda v: [e for e in netplan.netplan_errors([{"name": v, "addresses": ["10.0.0.1/24"]}])
                                         if ".name on" in e],
    "firewall service name": lambda v: firewall.firewall_plan([{"name": v, "ports": [9000], "cidrs": ["10.0.0.0/8"]}], {})["errors"],
    "redis maxmemory": lambda v: rc_errors(response_cache_redis_maxmemory=v),
    "bypass header": lambda v: rc_errors(response_cache_bypass_header=v),
    "gateway address": lambda v: rc_errors(response_cache_gateway_address=v),
    "listen address": lambda v: rc_errors(response_cache_listen_address=v),
    "client body size": lambda v: rc_errors(response_cache_client_max_body_size=v),
}
VALID = {"api key": KEY, "dspark patch name": "p1", "dspark patch commit": "0123456789abcdef",
         "dspark active release": "vllm-0123456789ab", "netplan interface name": "enp1s0",
         "firewall service name": "api", "redis maxmemory": "256mb", "bypass header": "X-No-Cache",
         "gateway address": "127.0.0.1", "listen address": "10.0.0.1", "client body size": "16m"}


@pytest.mark.parametrize("field", sorted(CASES))
def test_valid_value_passes_and_the_same_with_a_newline_is_refused(field):
    check = CASES[field]
    assert check(VALID[field]) == [], field
    assert check(VALID[field] + "\n") != [], field


@pytest.mark.parametrize("name", ["x.conf\n", "x\n.conf"])
def test_dropin_name_with_a_newline(name):
    with pytest.raises(Exception):
        file_set.systemd_dropin_files(["u"], name, "t.j2")
