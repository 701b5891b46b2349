"""The syntax classes and their table (plugins/plugin_utils/_syntax*.py), by construction:

- every leaf of every role's argument spec has a class (bool and choices come from the spec); every
  table path is a real variable; every class is used; every role with a preflight checks first;
- every class refuses the hostile values generated for it (the generic list plus its own), naming the
  variable's full path, for every variable of that class: the variable x value count is printed;
- every class's example is valid; numbers are checked against their bounds;
- the issue's hostile examples and cross-field rules are refused, a no_log value is never shown;
- every molecule/bad_inputs case that the syntax check refuses still finds its expected words.
"""
from __future__ import annotations

import functools
import os
import re

import pytest
import yaml

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax as S
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax_table as T

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ROLES = sorted(os.listdir(os.path.join(REPO, 'roles')))

# Generic hostile values a class may legitimately hold (its target syntax quotes or ignores them).
ALLOWS = {
    'text': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'a\u00e9\u4e2d'},
    'env_value': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'a\u00e9\u4e2d'},
    'flag_value': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'a\u00e9\u4e2d'},
    'data': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'a\u00e9\u4e2d'},
    'rule_data': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'a\u00e9\u4e2d',
                  'a\nb', 'a\tb', 'x' * 10240},
    'shell_line': {'a;b', 'a{b', 'a}b', 'a"b', "a'b", '../a', 'a b', 'a\u00e9\u4e2d'},
    'nft_rule': {'a"b', "a'b", '-a', '../a', 'a b', 'a\u00e9\u4e2d'},
    'secret': {'-a', '../a'},
    'cli_arg': {'-a', '../a'},
    'glob': {'-a', '../a'},
    'server_name': {'a b'},
    # sent JSON-encoded in a request body: any text but NUL and control characters
    'prompt': {'a\nb', 'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'x' * 10240,
               'a\u00e9\u4e2d', 'a\tb'},
    # the operator's own path on the controller (relative to the current directory allowed)
    'local_path': {'../a'},
}


@functools.lru_cache(maxsize=None)
def _options(role):
    with open(os.path.join(REPO, 'roles', role, 'meta', 'argument_specs.yml'), encoding='utf-8') as fh:
        return S.spec_options(yaml.safe_load(fh))


def _leaves(options, prefix=''):
    """(path, spec) of every leaf of an argument spec."""
    for name, spec in options.items():
        path = prefix + name
        typ = spec.get('type', 'str')
        if spec.get('options'):
            sub = path + ('[].' if typ == 'list' else '.')
            yield from _leaves(spec['options'], sub)
        else:
            yield path, spec


def _needs_class(spec):
    typ = spec.get('type', 'str')
    return not (typ == 'bool' or spec.get('choices') or (typ == 'list' and spec.get('elements') == 'bool'))


def _classed(table, path, spec):
    typ = spec.get('type', 'str')
    if typ == 'list' and spec.get('elements') != 'dict':
        return path + '[]' in table
    if typ in ('dict', 'list', 'raw') and not spec.get('options'):
        sub = path + ('[]' if typ == 'list' else '')
        return path in table or any(k.startswith(sub + '.') for k in table)
    return path in table


def test_every_leaf_of_every_argument_spec_has_a_class():
    missing, total = [], 0
    for role in ROLES:
        table = T.TABLE.get(role, {})
        for path, spec in _leaves(_options(role)):
            if _needs_class(spec):
                total += 1
                if not _classed(table, path, spec):
                    missing.append('%s: %s' % (role, path))
    print('classified leaves: %d, unclassed: %d' % (total, len(missing)))
    assert not missing, 'no syntax class (plugins/plugin_utils/_syntax_table.py): %s' % missing
    assert total > 300


def test_every_table_path_is_a_variable_of_its_role():
    wrong = []
    for role, table in T.TABLE.items():
        options = _options(role)
        for path in table:
            top = path.split('.')[0].split('[')[0]
            if top not in options:
                wrong.append('%s: %s' % (role, path))
    assert not wrong, wrong
    assert sorted(T.TABLE) == sorted(r for r in ROLES if list(_leaves(_options(r)))), 'a role without a table'


def test_every_class_is_used_and_every_reference_parses():
    used = set()
    for table in list(T.TABLE.values()) + list(T.PLAYBOOKS.values()):
        for ref in table.values():
            optional, kind, detail = S.parse_ref(ref)
            if kind == 'class':
                used.add(detail.name)
    assert sorted(set(S.CLASSES) - used) == []


@pytest.mark.parametrize('name', sorted(S.CLASSES))
def test_each_class_example_is_valid_and_named_in_words(name):
    cls = S.CLASSES[name]
    assert cls.words and cls.example
    if cls.example != '(hidden)':
        value = yaml.safe_load(cls.example) if name in ('data', 'rule_data') else cls.example
        assert S.check_value(name, value) is None, (name, cls.example)


def test_every_role_with_a_preflight_checks_syntax_first():
    for role in ROLES:
        pre = os.path.join(REPO, 'roles', role, 'tasks', 'preflight.yml')
        if not os.path.isfile(pre):
            continue
        with open(pre, encoding='utf-8') as fh:
            first = yaml.safe_load(fh)[0]
        assert first.get('llmops.vllm_cluster.syntax_check') == {'role': role}, role


def _check(role, values):
    return S.Checker(T.TABLE[role], _options(role), T.RULES.get(role, ())).run(values)


def _sample_key(table, path):
    """A key the table's key class for the mapping at path accepts."""
    ref = table.get(path + '.<key>')
    return S.parse_ref(ref)[2].example if ref else 'sample_key'


def _value_at(table, path, leaf):
    """{top: value} with leaf placed at path (lists get one item, free keys a sample key)."""
    parts = path.replace('[]', '.[]').split('.')
    key = _sample_key(table, path[:-2]) if path.endswith('.*') else 'sample_key'
    top = parts[0]

    def build(rest):
        if not rest:
            return leaf
        head = rest[0]
        if head == '[]':
            return [build(rest[1:])]
        if head == '*':
            return {key: build(rest[1:])}
        return {head: build(rest[1:])}
    return top, build(parts[1:])


def _hostile_for(name):
    cls = S.CLASSES[name]
    return [v for v in S.HOSTILE if v not in ALLOWS.get(name, set())] + list(cls.hostile)


def hostile_values(ref):
    """The values a variable of class reference REF must refuse: its class's hostile values, or for
    a number the out-of-bounds and non-numeric ones; none for a bool or a choice (the spec checks)."""
    optional, kind, detail = S.parse_ref(ref)
    if kind == 'class':
        return _hostile_for(detail.name)
    if kind in ('int', 'float'):
        lo, lo_open, hi_open, hi = detail
        values = ['1; reboot', '9' * 30, 'x', True]
        values += [lo - 1] if lo is not None else []
        values += [hi + 1] if hi is not None else []
        values += [lo] if lo is not None and lo_open else []
        return values
    return []


def test_hostile_values_refused_for_every_variable_of_every_class():
    cases = refused = 0
    accepted = []
    for role, table in sorted(T.TABLE.items()):
        for path, ref in sorted(table.items()):
            if path.endswith('.<key>'):
                continue
            values = hostile_values(ref)
            for value in values:
                top, whole = _value_at(table, path, value)
                cases += 1
                errors = _check(role, {top: whole})
                display = path.replace('[]', '[0]')
                if display.endswith('.*'):
                    display = display[:-1] + _sample_key(table, path[:-2])
                if any(e.startswith(display) for e in errors):
                    refused += 1
                else:
                    accepted.append('%s %s=%r' % (role, path, value))
    print('generated hostile cases: %d variables x values, %d refused' % (cases, refused))
    assert not accepted, "\n".join(accepted)
    assert cases > 3000


with open(os.path.join(REPO, 'tests', 'unit', 'fixtures', 'syntax_examples.yml'), encoding='utf-8') as _fh:
    EXAMPLES = [(e['role'], e['values'], e['variable']) for e in yaml.safe_load(_fh)]


@pytest.mark.parametrize('role,values,path', EXAMPLES)
def test_the_reported_examples_are_refused_naming_the_variable(role, values, path):
    errors = _check(role, values)
    assert errors and any(path in e for e in errors), errors


def test_a_no_log_value_is_never_shown():
    secret = 'sk-very secret;value'
    for role, values in (('nginx_lb', {'nginx_lb_api_keys': [secret]}),
                         ('vllm_service', {'vllm_service_api_key': secret}),
                         ('vllm_service', {'vllm_service_model_stage': {'method': 'hf', 'token': secret}}),
                         ('response_cache', {'response_cache_tenants': [{'name': 'a', 'key': secret}]})):
        errors = _check(role, values)
        assert errors, values
        assert not any('very secret' in e for e in errors), errors
        assert all('(value hidden)' in e for e in errors), errors


def test_every_bad_value_is_reported_at_once():
    errors = _check('nginx_lb', {'nginx_lb_server_name': 'a;b', 'nginx_lb_listen_port': 0,
                                 'nginx_lb_allowed_paths': ['/v1/', 'v2 x']})
    assert len(errors) == 3, errors
    assert any(e.startswith('nginx_lb_allowed_paths[1]') for e in errors)


def test_strings_as_ansible_reads_them_pass():
    assert _check('nginx_lb', {'nginx_lb_listen_port': '8080', 'nginx_lb_hold': 'yes',
                               'nginx_lb_balance': 'least_conn', 'nginx_lb_packages': 'nginx'}) == []
    assert _check('nginx_lb', {'nginx_lb_balance': 'fastest'})


def test_molecule_bad_inputs_cases_refused_by_the_syntax_check_keep_their_words():
    """The preflight's first task is the syntax check: a bad_inputs case it refuses must find its
    variable and expected words in the check's message (as molecule/bad_inputs asserts on a host)."""
    with open(os.path.join(REPO, 'molecule', 'bad_inputs', 'tests', 'cases.yml'), encoding='utf-8') as fh:
        data = yaml.safe_load(fh)
    wrong, seen = [], 0
    for case in data['cases']:
        role = case.get('role')
        if not role or role not in T.TABLE or case['refused_by'] != 'preflight':
            continue
        values = dict(data.get('base_vars', {}).get(role, {}), **case.get('vars', {}))
        options = _options(role)
        errors = _check(role, dict((k, v) for k, v in values.items() if k in options))
        if not errors:
            continue
        seen += 1
        text = ' '.join(' '.join(errors).split())
        missing = [s for s in [case['variable']] + case.get('expect', []) if s not in text]
        if missing:
            wrong.append('%s: %s not in %s' % (case['id'], missing, text[:300]))
    print('bad_inputs cases refused by the syntax check: %d' % seen)
    assert not wrong, '\n'.join(wrong)


# Variables a role reads from other hosts' hostvars, set per host in the inventory; each is checked
# where it is read (the cluster filter's address check), not by a role's own preflight.
HOST_ADDRESS_VARIABLES = ('nginx_lb_backend_address', 'monitoring_scrape_address')


def _tag_names():
    names = set()
    for role in ROLES:
        main = os.path.join(REPO, 'roles', role, 'tasks', 'main.yml')
        if os.path.isfile(main):
            with open(main, encoding='utf-8') as fh:
                names.update(re.findall(r'\b%s_[a-z]+\b' % role, fh.read()))
    return names


def test_every_public_variable_a_template_or_task_reads_is_checked():
    """A role-prefixed variable (not an internal `role__x`, a filter, a tag or a registered result) that
    a template or task file reads in an expression is an option of that role's argument spec, so the
    coverage test above gives it a class and the role's preflight checks it."""
    prefixes = sorted(ROLES, key=len, reverse=True)
    known = set()
    for role in ROLES:
        known.update(_options(role))
    pattern = re.compile(r'(?<![.\w\'"])((?:%s)_[a-z0-9_]*[a-z0-9])\b(?!\s*\()' % '|'.join(prefixes))
    skip = _tag_names() | set(HOST_ADDRESS_VARIABLES)
    unchecked = set()
    for role in ROLES:
        texts = {}
        for sub in ('templates', 'tasks', 'handlers'):
            for dirpath, _dirs, files in os.walk(os.path.join(REPO, 'roles', role, sub)):
                for name in files:
                    with open(os.path.join(dirpath, name), encoding='utf-8') as fh:
                        texts[name] = fh.read()
        # results the role publishes (register, or a fact it sets) are outputs, not inputs
        outputs = set()
        for text in texts.values():
            outputs.update(re.findall(r'^\s*register:\s*(\w+)', text, re.M))
            outputs.update(re.findall(r'^\s+(%s_[a-z0-9_]+):\s' % role, text, re.M))
        for name, text in texts.items():
            exprs = re.findall(r'\{\{(.*?)\}\}|\{%(.*?)%\}|^\s*(?:when|that|loop|until):(.*)$', text, re.S | re.M)
            for expr in exprs:
                for word in pattern.findall(' '.join(expr)):
                    owner = next(r for r in prefixes if word.startswith(r + '_'))
                    if word.startswith(owner + '__') or word in known or word in skip or word in outputs:
                        continue
                    unchecked.add('%s (%s/%s)' % (word, role, name))
    assert not unchecked, '\n'.join(sorted(unchecked))


def test_a_renewal_window_as_long_as_the_validity_is_refused():
    errors = _check('nginx_lb', {'nginx_lb_tls_self_signed_days': 30, 'nginx_lb_tls_self_signed_renew_days': 30})
    assert errors == ['nginx_lb_tls_self_signed_renew_days (30) must be below nginx_lb_tls_self_signed_days (30)']
    assert _check('nginx_lb', {'nginx_lb_tls_self_signed_days': 825, 'nginx_lb_tls_self_signed_renew_days': 30}) == []
