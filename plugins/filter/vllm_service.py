# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the vllm_service role.

  vllm_risky_switches(environment, args, table, allowed) -> [message, ...]
      one message per risky vLLM switch that is on and not listed in allowed
  vllm_adaptive_verification_errors(speculative, model, capabilities, table) -> [message, ...]
      adaptive verification asked for on GPUs whose attention backend cannot trim on device

Only Python's standard library.
"""

from __future__ import annotations

# Values that leave a switch off: vLLM reads these variables as 0/1, true/false or a path.
_OFF = ("", "0", "false", "no", "off", "none")


def _is_on(value, values=None):
    """Whether a setting turns the switch on (values: only these (lower-case) strings count)."""
    if values:
        return str(value).strip().lower() in [str(v).lower() for v in values]
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, (dict, list, tuple)):
        return len(value) > 0
    return str(value).strip().lower() not in _OFF


def _arg_name(key):
    return str(key).strip().lstrip("-").replace("-", "_")


def vllm_risky_switches(environment, args, table, allowed=None):
    """Messages for every risky switch of `table` that `environment` or `args` turns on.

    environment: {VARIABLE: value} (vllm_service_environment).
    args: {inventory variable: {flag: value}}, for example {'vllm_service_extra_args': {...}} (flag
    names are compared without leading dashes and with '-' read as '_').
    table: {name: {where: environment|args, opens: text, values: [...] (optional)}}.
    allowed: names the inventory accepts (vllm_service_allow_risky).
    A message names the variable the switch was set in, its value and what it opens; an allowed
    name that is not in the table is reported too (a typo would otherwise hide a refusal).
    """
    table = table or {}
    allowed = [str(a) if str(a).isupper() else _arg_name(a) for a in (allowed or [])]
    errors = []
    for name in allowed:
        if name not in table:
            errors.append("vllm_service_allow_risky: '%s' is not one of the switches this role refuses (%s)"
                          % (name, ", ".join(sorted(table))))
    settings = []  # (name, text naming the variable)
    for key, value in (environment or {}).items():
        settings.append((str(key), value, "vllm_service_environment.%s=%s" % (key, value), "environment"))
    for variable in sorted(args or {}):
        for key, value in (args[variable] or {}).items():
            name = _arg_name(key)
            settings.append((name, value, "%s.%s=%s (--%s)" % (variable, key, value, name.replace("_", "-")), "args"))
    for name, value, text, where in settings:
        spec = table.get(name)
        if spec is None or spec.get("where", "args") != where or name in allowed:
            continue
        if not _is_on(value, spec.get("values")):
            continue
        errors.append("%s opens %s; refused unless vllm_service_allow_risky lists '%s'"
                      % (text, spec.get("opens", "an endpoint or log the role does not allow"), name))
    return errors


def _major(capability):
    text = str(capability).strip()
    head = text.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def vllm_adaptive_verification_errors(speculative, model, capabilities, table):
    """Why adaptive verification cannot run on these GPUs with this model (empty list: it can, or unknown).

    speculative: vllm_service_speculative; model: vllm_service_model (tokenizer_mode names the family).
    capabilities: the nodes' compute capabilities ("9.0", "12.1"; empty: not known, nothing refused).
    table: {family: {tokenizer_modes: [...], methods: [...], capability_majors: [...], backend: text,
    needs: text}} (vllm_service__adaptive_verification): models that hard-wire an attention backend
    which trims verification requests on device only on those CUDA capability majors.
    """
    speculative = speculative or {}
    if not _is_on(speculative.get("enable_adaptive_verification", False)):
        return []
    model = model or {}
    errors = []
    for family in sorted(table or {}):
        spec = table[family]
        if (model.get("tokenizer_mode") not in (spec.get("tokenizer_modes") or [])
                and speculative.get("method") not in (spec.get("methods") or [])):
            continue
        majors = [int(m) for m in spec.get("capability_majors") or []]
        bad = sorted({str(c) for c in capabilities or [] if _major(c) not in majors})
        if bad:
            errors.append(
                "vllm_service_speculative.enable_adaptive_verification is true, but %s models use the %s "
                "attention backend, which trims verification requests on device only on compute capability "
                "%s.x (%s); these nodes are %s (nvidia_driver_compute_capabilities), where vLLM refuses to "
                "start. Set enable_adaptive_verification: false."
                % (family, spec.get("backend", "its own"), ".x or ".join(str(m) for m in majors),
                   spec.get("needs", ""), ", ".join(bad)))
    return errors


class FilterModule(object):
    """vllm_service validation filters."""

    def filters(self):
        return {"vllm_risky_switches": vllm_risky_switches,
                "vllm_adaptive_verification_errors": vllm_adaptive_verification_errors}
