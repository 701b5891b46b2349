# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Controller half of llmops.vllm_cluster.file_set: reads the role's templates and files, renders
the templates the way ansible.builtin.template does, and sends the whole set to the module in one
call (the module compares, checks and writes on the host)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

try:  # the variables ansible.builtin.template adds (ansible_managed, template_path, ...)
    from ansible._internal._templating import _template_vars
except ImportError:  # pragma: no cover - a later ansible-core that moved them
    _template_vars = None

SOURCES = ('template', 'src', 'content')
STATES = ('file', 'directory', 'absent')


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('files',))

    def _render(self, name, dest, task_vars, extra):
        try:
            source = self._find_needle('templates', name)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc))
        data = trust_as_template(self._loader.get_text_file_contents(source))
        searchpath = list(task_vars.get('ansible_search_path', [])) + [self._loader._basedir, os.path.dirname(source)]
        searchpath = [p for base in searchpath for p in (os.path.join(base, 'templates'), base)]
        variables = task_vars.copy()
        variables.update(extra)
        if _template_vars is not None:
            variables.update(_template_vars.generate_ansible_template_vars(
                path=name, fullpath=source, dest_path=dest,
                include_ansible_managed='ansible_managed' not in variables))
        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=variables)
        text = templar.template(data, escape_backslashes=False,
                                overrides=dict(trim_blocks=True, lstrip_blocks=False, newline_sequence='\n'))
        return '' if text is None else to_text(text)

    def _read(self, name):
        try:
            source = self._find_needle('files', name)
        except AnsibleError as exc:
            raise AnsibleActionFail(to_text(exc))
        return self._loader.get_text_file_contents(source)

    def _prepare(self, items, task_vars):
        if not isinstance(items, list) or not items:
            raise AnsibleActionFail('file_set: files must be a non-empty list of dicts')
        out = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise AnsibleActionFail('file_set: files[%d] must be a dict, got %s' % (index, type(item).__name__))
            item = dict(item)
            dest = item.get('dest')
            state = item.get('state', 'file')
            where = 'file_set: files[%d] (%s)' % (index, dest)
            if not isinstance(dest, str) or not dest.startswith('/'):
                raise AnsibleActionFail('%s: dest must be an absolute path' % where)
            if state not in STATES:
                raise AnsibleActionFail('%s: state must be one of %s, got %r' % (where, ', '.join(STATES), state))
            given = [name for name in SOURCES if item.get(name) is not None]
            extra = item.pop('vars', None) or {}
            if not isinstance(extra, dict):
                raise AnsibleActionFail('%s: vars must be a dict' % where)
            if extra and 'template' not in given:
                raise AnsibleActionFail('%s: vars is for a template entry' % where)
            if state == 'file' and len(given) != 1:
                raise AnsibleActionFail('%s: a file needs exactly one of template, src and content (got %s)'
                                        % (where, ', '.join(given) or 'none'))
            if state == 'directory' and given:
                raise AnsibleActionFail('%s: state=directory takes none of template, src and content' % where)
            if state == 'absent':
                # One entry can be switched on and off by a variable: its source is not read.
                item['content'] = None
            elif 'template' in given:
                item['content'] = self._render(item.pop('template'), dest, task_vars, extra)
            elif 'src' in given:
                item['content'] = self._read(item.pop('src'))
            elif 'content' in given:
                item['content'] = to_text(item['content'])
            item.pop('template', None)
            item.pop('src', None)
            out.append(item)
        return out

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        files = self._prepare(self._task.args.get('files'), task_vars)
        result.update(self._execute_module(module_name='llmops.vllm_cluster.file_set',
                                           module_args=dict(files=files), task_vars=task_vars))
        return result
