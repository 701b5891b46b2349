"""Unit tests for plugins/filter/response_cache.py (the response_cache preflight's checks), cases in
response_cache_cases.yml."""
from __future__ import annotations

import os

import pytest
import yaml

from filter_cases import HERE as _HERE
from filter_cases import load_cases, load_filter

response_cache = load_filter("response_cache")
CASES = load_cases("response_cache_cases.yml")


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_errors(case):
    errors = response_cache.response_cache_errors(dict(CASES["valid"], **case["set"]))
    assert len(errors) == len(case["expect"]), errors
    for message, fragment in zip(errors, case["expect"]):
        assert fragment in message


def test_no_secret_is_in_a_message():
    secrets = {"response_cache_redis_password": "pw-shortish", "response_cache_master_key": "mk-shortish",
               "response_cache_metrics_key": "mx-shortish",
               "response_cache_tenants": [{"name": "a", "key": "tk-shortish"}, {"name": "b", "key": "tk-shortish"}]}
    errors = response_cache.response_cache_errors(dict(CASES["valid"], **secrets))
    assert len(errors) == 6, errors
    for message in errors:
        assert "shortish" not in message


def test_the_role_checks_every_setting_the_filter_reads():
    """vars/main.yml's response_cache__checked_settings is what the preflight passes to the filter."""
    role_vars = os.path.join(_HERE, "..", "..", "..", "..", "roles", "response_cache", "vars", "main.yml")
    with open(role_vars, encoding="utf-8") as fh:
        names = yaml.safe_load(fh)["response_cache__checked_settings"]
    assert sorted(names) == sorted(CASES["valid"])
