"""Every role's argument spec and its defaults/main.yml say the same thing.

A default that differs between the two is a trap: argument validation fills in the spec's default
only where the variable is undefined, so the value a user gets depends on which file they read.
Rules checked for every role:
- every variable in defaults/main.yml is an option of the spec, and every option of the spec is in
  defaults/main.yml, except per-host inputs (listed below: read from other hosts through hostvars,
  where a role default would be invisible) and required options;
- a literal default is the spec's default, to the value;
- a default computed from other variables (a Jinja expression) is either the same expression in the
  spec or absent from it (then its description says what it is derived from).
"""
import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))

# Per-host inputs: set in host_vars of a source host and read by other hosts through hostvars, so a
# role default (which hostvars of another host does not show) would be wrong. No default anywhere.
PER_HOST_INPUTS = {
    "firewall": {"firewall_host_addresses"},
    "vllm_service": {"vllm_service_advertise_address"},
}


def load(role):
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    # Every entry point's options (a layer's component roles have install/configure/service, the
    # shared base packages/service).
    options = {}
    for entry in spec["argument_specs"].values():
        options.update(entry.get("options") or {})
    defaults_file = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text(encoding="utf-8")) if defaults_file.exists() else {}
    return options, defaults or {}


def templated(value):
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, list):
        return any(templated(v) for v in value)
    if isinstance(value, dict):
        return any(templated(v) for v in value.values())
    return False


def test_roles_found():
    assert len(ROLES) >= 10, ROLES


@pytest.mark.parametrize("role", ROLES)
def test_spec_and_defaults_name_the_same_variables(role):
    options, defaults = load(role)
    per_host = PER_HOST_INPUTS.get(role, set())
    only_defaults = sorted(set(defaults) - set(options))
    only_spec = sorted(k for k in set(options) - set(defaults)
                       if k not in per_host and not options[k].get("required", False))
    assert not only_defaults, f"{role}: in defaults/main.yml but not in meta/argument_specs.yml: {only_defaults}"
    assert not only_spec, f"{role}: in meta/argument_specs.yml but not in defaults/main.yml: {only_spec}"
    for name in per_host:
        assert name in options and "default" not in options[name], f"{role}: per-host input {name} must be typed, with no default"
        assert name not in defaults, f"{role}: per-host input {name} must not have a role default"


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_match(role):
    options, defaults = load(role)
    wrong = []
    for name, value in defaults.items():
        if name not in options:
            continue
        if "default" not in options[name]:
            if not templated(value):
                wrong.append(f"{name}: defaults/main.yml gives {value!r}; the spec gives no default")
        elif options[name]["default"] != value:
            wrong.append(f"{name}: spec default {options[name]['default']!r} != defaults/main.yml {value!r}")
    assert not wrong, f"{role}:\n  " + "\n  ".join(wrong)
