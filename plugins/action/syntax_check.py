# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""llmops.vllm_cluster.syntax_check: every variable of a role (role=NAME), or of a playbook
(playbook=NAME: an entry of playbooks/vars/argument_specs.yml), checked against its syntax class, on
the controller, before any task of the role or the playbook touches a host (check mode included)."""

from __future__ import annotations

import os

import yaml

from ansible.errors import AnsibleUndefinedVariable
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax, _syntax_table

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPECS = {}
PLAYBOOK_SPECS = os.path.join(_ROOT, 'playbooks', 'vars', 'argument_specs.yml')


def role_options(role):
    """The merged argument spec options of a role of this collection."""
    if role not in _SPECS:
        path = os.path.join(_ROOT, 'roles', role, 'meta', 'argument_specs.yml')
        with open(path, encoding='utf-8') as handle:
            _SPECS[role] = _syntax.spec_options(yaml.safe_load(handle))
    return _SPECS[role]


def playbook_options(playbook):
    """The argument spec options of one playbook (its entry in playbooks/vars/argument_specs.yml)."""
    key = 'playbook:' + playbook
    if key not in _SPECS:
        with open(PLAYBOOK_SPECS, encoding='utf-8') as handle:
            specs = yaml.safe_load(handle)['argument_specs']
        _SPECS[key] = (specs.get(playbook) or {}).get('options') or {}
    return _SPECS[key]


def variable_names(role, table=None, options=None):
    """The top-level variables the table and the argument spec give the role (or playbook)."""
    names = set(role_options(role) if options is None else options)
    names.update(path.split('.')[0].split('[')[0] for path in (_syntax_table.TABLE[role] if table is None else table))
    return sorted(names)


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('role', 'playbook'))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        result['changed'] = False
        playbook = self._task.args.get('playbook')
        if playbook is not None:
            if playbook not in _syntax_table.PLAYBOOKS:
                result.update(failed=True, msg='syntax_check: playbook must be one of %s (got %r)' % (
                    ', '.join(sorted(_syntax_table.PLAYBOOKS)), playbook))
                return result
            role, table, options = playbook, _syntax_table.PLAYBOOKS[playbook], playbook_options(playbook)
        else:
            role = self._task.args.get('role')
            if role not in _syntax_table.TABLE:
                result.update(failed=True, msg='syntax_check: role must be one of %s (got %r)' % (
                    ', '.join(sorted(_syntax_table.TABLE)), role))
                return result
            table, options = _syntax_table.TABLE[role], role_options(role)
        values, errors = {}, []
        for name in variable_names(role, table, options):
            try:
                values[name] = self._templar.resolve_variable_expression(name)
            except AnsibleUndefinedVariable:
                continue
            except Exception as exc:  # a value that does not template is refused like a bad one
                errors.append('%s: does not template (%s)' % (name, to_text(exc).splitlines()[0][:200]))
        checker = _syntax.Checker(table, options, () if playbook is not None else _syntax_table.RULES.get(role, ()))
        errors += checker.run(values)
        result['checked'] = checker.checked
        if errors:
            result['failed'] = True
            result['errors'] = errors
            result['msg'] = '%s: %d value%s refused by %s syntax class; nothing was changed. %s' % (
                role, len(errors), '' if len(errors) == 1 else 's', 'its' if len(errors) == 1 else 'their',
                ' | '.join(errors))
        else:
            result['msg'] = '%s: %d values checked' % (role, checker.checked)
        return result
