"""The playbooks' own variables (upgrade_*, tune_*, validate_*, maintenance_*, ...), by construction,
as the roles' (test_syntax.py):

- every leaf of every entry of playbooks/vars/argument_specs.yml has a class (bool and choices from
  the spec), every table path (_syntax_table.PLAYBOOKS) is a declared variable;
- every variable a playbook, its task files or its templates read in an expression, with a prefix
  of an entry and not set by the playbooks themselves (vars, set_fact, register, loop variables), is
  declared: a new -e knob cannot skip the check;
- each playbook checks every entry whose variables it reads with llmops.vllm_cluster.syntax_check,
  as its first tasks, before any task that contacts a host;
- every class refuses the hostile values generated for it, for every playbook variable of that
  class, naming the variable.
"""
from __future__ import annotations

import functools
import os
import re

import yaml

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax as S
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax_table as T
from test_syntax import REPO, _classed, _leaves, _needs_class, _value_at, hostile_values

PLAYBOOKS_DIR = os.path.join(REPO, 'playbooks')
# Each entry's variable prefix (the longest first when matching).
PREFIXES = {'upgrade': 'upgrade', 'tune_speculative': 'tune', 'measure': 'measure', 'validate': 'validate',
            'maintenance': 'maintenance', 'monitoring_backup': 'monitoring_backup|monitoring_restore',
            'reset': 'reset'}


@functools.lru_cache(maxsize=None)
def _specs():
    with open(os.path.join(PLAYBOOKS_DIR, 'vars', 'argument_specs.yml'), encoding='utf-8') as fh:
        return yaml.safe_load(fh)['argument_specs']


def _options(entry):
    return _specs()[entry].get('options') or {}


def _check(entry, values):
    return S.Checker(T.PLAYBOOKS[entry], _options(entry)).run(values)


def _texts():
    out = {}
    for dirpath, _dirs, files in os.walk(PLAYBOOKS_DIR):
        for name in files:
            path = os.path.join(dirpath, name)
            if path.endswith(os.path.join('vars', 'argument_specs.yml')):
                continue
            with open(path, encoding='utf-8') as fh:
                out[os.path.relpath(path, PLAYBOOKS_DIR)] = fh.read()
    return out


def _outputs(texts):
    """Names the playbooks set themselves: play and task vars, set_fact, register, loop variables,
    add_host groups, Jinja set and for."""
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == 'vars' and isinstance(value, dict):
                    names.update(value)
                elif key.endswith('set_fact') and isinstance(value, dict):
                    names.update(value)
                elif key == 'register' and isinstance(value, str):
                    names.add(value)
                elif key == 'loop_control' and isinstance(value, dict) and 'loop_var' in value:
                    names.add(value['loop_var'])
                elif key == 'vars' or (key.endswith('plan_group') and isinstance(value, str)):
                    names.add(value) if isinstance(value, str) else None
                elif key.endswith('add_host') and isinstance(value, dict):
                    names.update(str(value.get('groups', '')).split(','))
                    names.update(k for k in value if k not in ('name', 'groups'))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    for name, text in texts.items():
        if name.endswith('.yml'):
            data = yaml.safe_load(text)
            walk(data)
            if name.startswith('vars' + os.sep) and isinstance(data, dict):
                names.update(data)  # a vars_files file: the playbook sets these itself
        names.update(re.findall(r'\{%-?\s*set\s+(\w+)', text))
        for match in re.findall(r'\bfor\s+(\w+)(?:\s*,\s*(\w+))?\s+in\b', text):
            names.update(n for n in match if n)
    return names


def test_every_leaf_of_every_playbook_spec_has_a_class():
    missing, total = [], 0
    for entry in _specs():
        table = T.PLAYBOOKS.get(entry, {})
        for path, spec in _leaves(_options(entry)):
            if _needs_class(spec):
                total += 1
                if not _classed(table, path, spec):
                    missing.append('%s: %s' % (entry, path))
    print('classified playbook leaves: %d' % total)
    assert not missing, 'no syntax class (plugins/plugin_utils/_syntax_table.py, PLAYBOOKS): %s' % missing
    assert sorted(T.PLAYBOOKS) == sorted(_specs())
    assert total > 40


def test_every_playbook_table_path_is_a_declared_variable():
    wrong = ['%s: %s' % (entry, path) for entry, table in T.PLAYBOOKS.items() for path in table
             if path.split('.')[0].split('[')[0] not in _options(entry)]
    assert not wrong, wrong


def test_every_public_variable_a_playbook_reads_is_declared():
    texts = _texts()
    outputs = _outputs(texts)
    declared = set()
    for entry in _specs():
        declared.update(_options(entry))
    prefixes = '|'.join(sorted('|'.join(PREFIXES.values()).split('|'), key=len, reverse=True))
    # a variable (not a filter, an attribute, a quoted string, a task file name, or a placeholder
    # {name} of reset's layout, which reset_layout fills itself)
    pattern = re.compile(r'(?<![.\w\'"/])(?<![^{]\{)((?:%s)_[a-z0-9_]*[a-z0-9])\b(?!\s*\()(?!\.yml)' % prefixes)
    undeclared = set()
    for name, text in texts.items():
        exprs = re.findall(r'\{\{(.*?)\}\}|\{%(.*?)%\}|^\s*-?\s*(?:when|that|loop|until|failed_when|changed_when):([^\n]*)'
                           r'|^\s+- ([^\n]*)$', text, re.S | re.M)
        for expr in exprs:
            for word in pattern.findall(' '.join(expr)):
                if '__' in word or word in declared or word in outputs:
                    continue
                undeclared.add('%s (%s)' % (word, name))
    assert not undeclared, 'read by a playbook but not in playbooks/vars/argument_specs.yml:\n' + '\n'.join(
        sorted(undeclared))


def _reads(text, entry):
    names = set(re.findall(r'\b((?:%s)_[a-z0-9_]*[a-z0-9])\b' % PREFIXES[entry], text))
    return bool(names & set(_options(entry)))


def test_each_playbook_checks_the_variables_it_reads_first():
    """Every top-level playbook that reads variables of an entry (itself, or through its task files)
    has a syntax_check for that entry among the first tasks of a play that runs before any play that
    contacts a host for something else."""
    texts = _texts()
    wrong = []
    for name in sorted(n for n in texts if os.sep not in n and n.endswith('.yml')):
        book = yaml.safe_load(texts[name])
        if not isinstance(book, list) or not all(isinstance(p, dict) and 'hosts' in p for p in book):
            continue
        whole = texts[name] + ''.join(texts[t] for t in texts if t.startswith('tasks' + os.sep)
                                      and os.path.basename(t) in texts[name])
        whole += ''.join(texts[t] for t in texts if t.startswith('tasks' + os.sep) and 'measure' in t
                         and ('canary.yml' in texts[name] or 'tune_one.yml' in texts[name]))
        checked = set()
        for play in book:
            tasks = play.get('tasks') or []
            leading = []
            for task in tasks:
                args = task.get('llmops.vllm_cluster.syntax_check')
                if not args:
                    break
                leading.append(args.get('playbook'))
            checked.update(leading)
            # a play whose tasks do more than check (or that has roles) ends the window,
            # unless it only asserts on the controller (the --limit guards)
            if play.get('roles') or any(next(iter(k for k in t if k not in ('name', 'run_once', 'when', 'vars')), '')
                                        not in ('llmops.vllm_cluster.syntax_check', 'ansible.builtin.assert')
                                        for t in tasks):
                break
        for entry in _specs():
            if _reads(whole, entry) and entry not in checked:
                wrong.append('%s reads %s variables without checking them first' % (name, entry))
    assert not wrong, '\n'.join(wrong)


def test_hostile_values_refused_for_every_playbook_variable():
    cases, accepted = 0, []
    for entry, table in sorted(T.PLAYBOOKS.items()):
        for path, ref in sorted(table.items()):
            for value in hostile_values(ref):
                top, whole = _value_at(table, path, value)
                cases += 1
                errors = _check(entry, {top: whole})
                if not any(e.startswith(path.replace('[]', '[0]')) for e in errors):
                    accepted.append('%s %s=%r' % (entry, path, value))
    print('generated hostile cases for the playbooks: %d' % cases)
    assert not accepted, '\n'.join(accepted)
    assert cases > 300


def test_the_shipped_inventories_and_defaults_pass():
    """Each declared default, and each playbook value the shipped inventories set, passes its class."""
    wrong = []
    for entry in _specs():
        for name, spec in _options(entry).items():
            if 'default' in spec and _check(entry, {name: spec['default']}):
                wrong.append('%s default %s=%r' % (entry, name, spec['default']))
    inventories = os.path.join(REPO, 'inventories')
    for dirpath, _dirs, files in os.walk(inventories):
        for fname in files:
            if not fname.endswith('.yml'):
                continue
            with open(os.path.join(dirpath, fname), encoding='utf-8') as fh:
                data = yaml.safe_load(fh) or {}
            if not isinstance(data, dict):
                continue
            for entry in _specs():
                values = dict((k, v) for k, v in data.items() if k in _options(entry) and '{{' not in str(v))
                for error in _check(entry, values):
                    wrong.append('%s: %s' % (os.path.relpath(os.path.join(dirpath, fname), REPO), error))
    assert not wrong, '\n'.join(wrong)


def test_a_bad_playbook_value_is_named_with_its_class():
    errors = _check('upgrade', {'upgrade_canary_levels': '1,8;reboot', 'upgrade_canary_max_ttft_ratio': 'fast'})
    assert any(e.startswith('upgrade_canary_levels[1]') for e in errors), errors
    assert any(e.startswith('upgrade_canary_max_ttft_ratio') and 'a number' in e for e in errors), errors
    assert _check('maintenance', {'maintenance_replicas': 'r1, r2'}) == []
    assert _check('validate', {'validate_report_dir': '-rf'})


def test_reset_takes_a_bool_or_kinds_of_data_and_only_yes():
    """reset_remove_data is true or false, or a list or comma-separated string of kinds (Checker.walk
    reads a string its scalar class refuses as a list); reset_confirm is yes, a YAML yes, or empty."""
    for value in (True, False, 'true', 'no', 'all', 'models', 'models, builds', ['metrics', 'backups'], ['all'], ''):
        assert _check('reset', {'reset_remove_data': value}) == [], value
    for value in ('yes', True, '', None):
        assert _check('reset', {'reset_confirm': value}) == [], value
    errors = _check('reset', {'reset_remove_data': 'models,weights', 'reset_confirm': 'YES please',
                              'reset_remove_packages': 'maybe', 'reset_partial_replicas': 'sometimes'})
    assert sorted(e.split(':')[0] for e in errors) == [
        'reset_confirm', 'reset_partial_replicas', 'reset_remove_data[1]', 'reset_remove_packages'], errors
    assert any(e.startswith("reset_remove_data[1]: 'weights' must be one of models, caches, builds, metrics, backups, all")
               for e in errors), errors
    assert _check('reset', {'reset_confirm': False}) and _check('reset', {'reset_remove_data': 'a;b'})
    assert _check('reset', {'reset_remove_data': [True]})
    # the kinds the spec offers are the ones the reset knows
    from ansible_collections.llmops.vllm_cluster.plugins.filter import reset as R
    assert _options('reset')['reset_remove_data']['choices'] == list(R.KINDS) + ['all']
