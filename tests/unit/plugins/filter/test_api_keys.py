"""Unit tests for plugins/filter/api_keys.py (the nginx_lb role's edge key checks)."""
from __future__ import annotations

import importlib.util
import os
import re
import secrets

import pytest
import yaml
from ansible.errors import AnsibleFilterError

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "api_keys.py")
_spec = importlib.util.spec_from_file_location("llmops_api_keys_filter", os.path.abspath(_PATH))
api_keys = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_keys)

_VARS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "nginx_lb", "vars", "main.yml")
with open(_VARS, encoding="utf-8") as _fh:
    ROLE = yaml.safe_load(_fh)
EDGE = {"min_length": ROLE["nginx_lb__key_min_length"], "min_distinct": ROLE["nginx_lb__key_min_distinct"],
        "placeholders": ROLE["nginx_lb__key_placeholders"]}


def edge_errors(keys):
    return api_keys.api_key_errors(keys, "nginx_lb_api_keys", **EDGE)


@pytest.mark.parametrize("key", [
    "lab-edge-key-000000000001",                      # the lab's keys
    "sk-" + "A1b2c3d4e5" * 19 + "f6g7h8i",            # 200 characters
    "Tm9+dGhlK2tleS9vZi9hbnlvbmU=",                   # base64 with + / =
    "a.b_c~d+e/f=g-h0123XYZ",
])
def test_good_keys_pass(key):
    assert edge_errors([key]) == []


@pytest.mark.parametrize("make", [lambda: secrets.token_urlsafe(32), lambda: secrets.token_hex(24)])
def test_random_keys_pass(make):
    # What the docs tell users to generate: 200 of them, none refused.
    assert [e for _unused in range(200) for e in edge_errors([make()])] == []


@pytest.mark.parametrize("key, rule", [
    ("short-Key-1234567", "20 to 1024 characters"),
    ("x" * 1025, "20 to 1024 characters"),
    ("lab-edge-key-0000000001 ", "character outside"),
    ('lab-edge-key-00000"00001', "character outside"),
    ("lab-edge-key;00000000001", "character outside"),
    ("lab-edge-key-0000000001\\", "character outside"),
    ("team-a-change-me-0000001", "placeholder word (change-me)"),
    ("TEAM-A-CHANGEME-00000001", "placeholder word (changeme)"),
    ("an-Example-key-Qz8472615", "placeholder word (example)"),
    ("my-secret-Qz8472615xyzw", "placeholder word (secret)"),
    ("Password1234567890Qzxy", "placeholder word (password)"),
    ("aaaaaaaaaaaaaaaaaaaaaaaa", "fewer than 8 different characters"),
    ("Qa1Qa1Qa1Qa1Qa1Qa1Qa1Qa1", "fewer than 8 different characters"),
    ("0000000000000000abcdefghij", "more than half one repeated character"),
    ("abcdefghijklmnopqrstuvwx", "run of consecutive characters"),
    ("12345678901234567890", "run of consecutive characters"),
    ("zyxwvutsrqponmlkjihgfedcba", "run of consecutive characters"),
])
def test_weak_or_malformed_key_is_named_by_rule_not_value(key, rule):
    errors = edge_errors(["lab-edge-key-000000000001", key])
    assert len(errors) >= 1 and all(e.startswith("nginx_lb_api_keys[1] ") for e in errors), errors
    assert any(rule in e for e in errors), errors
    text = " ".join(errors)
    assert key.strip() not in text and key.lower() not in text.lower(), "the key is in the message"


def test_duplicate_is_refused_with_positions_and_no_key():
    keys = ["lab-edge-key-000000000001", "lab-edge-key-000000000002", "lab-edge-key-000000000001"]
    errors = edge_errors(keys)
    assert errors == ["nginx_lb_api_keys[2] is the same key as nginx_lb_api_keys[0] (each key once)"]
    # Keys that differ in case are different keys (the edge compares them exactly).
    assert edge_errors(["lab-edge-key-000000000001", "LAB-EDGE-KEY-000000000001"]) == []


def test_single_string_and_empty():
    assert api_keys.api_key_errors("", "nginx_lb_backend_api_key") == []
    assert api_keys.api_key_errors("lab-backend-key-0000000001", "nginx_lb_backend_api_key") == []
    errors = api_keys.api_key_errors("change-me-engine-key", "nginx_lb_backend_api_key",
                                     placeholders=EDGE["placeholders"])
    assert len(errors) == 1 and errors[0].startswith("nginx_lb_backend_api_key contains a placeholder word")
    assert api_keys.api_key_errors([12345678901234567890], "k") == ["k[0] is not a string"]
    with pytest.raises(AnsibleFilterError):
        api_keys.api_key_errors({"a": 1}, "k")


@pytest.mark.parametrize("key, literal", [
    ("lab-edge-key-000000000001", "lab-edge-key-000000000001"),
    ("a.b+c/d=e~f_g", "a[.]b[+]c/d=e~f_g"),
])
def test_regex_literal_matches_only_the_key(key, literal):
    assert api_keys.nginx_regex_literal(key) == literal
    pattern = re.compile("^(?i:bearer) " + literal + "$")
    assert pattern.match("Bearer " + key) and pattern.match("bearer " + key)
    assert not pattern.match("Bearer " + key.upper()) or key.upper() == key
    assert not pattern.match("Bearer " + key + "x") and not pattern.match("Bearer x" + key)
    if "." in key:
        assert not pattern.match("Bearer " + key.replace(".", "X"))


@pytest.mark.parametrize("text", ['a"b', "a b", "a$b", "a\\b", "a(b", 5])
def test_regex_literal_refuses_other_characters(text):
    with pytest.raises(AnsibleFilterError):
        api_keys.nginx_regex_literal(text)
