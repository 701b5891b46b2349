#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: file_set
short_description: Put a set of directories and files in place in one step, every changed file checked before it replaces the old one
version_added: 0.2.0
description:
  - Ensures, in the order given, directories (O(files[].state=directory)), files
    (O(files[].state=file)) and removed paths (O(files[].state=absent)) on one host with one module
    call, where the builtin C(template), C(copy) and C(file) modules need one or two calls per path.
    A role's files that change together are one task; its no-change run costs one remote call.
  - A file's content comes from a template of the role (O(files[].template), rendered on the
    controller like the C(template) module does, C(ansible_managed) included), a file of the role
    (O(files[].src)) or a string (O(files[].content)).
  - "Nothing is lost: every file whose content changed is first written, under its own name, to a
    private directory in the module's temporary directory (the destination's directory does not
    change, and no C(*.conf) or C(*.yml) include of it sees a candidate), given its owner, group and
    mode, and checked with its O(files[].validate) command. Only when every check of the set passed
    are the files moved into place (a rename in the destination's directory, so a reader sees the
    old file or the new one). A failed check changes nothing and names the file and what the check
    printed."
  - An unchanged file only has its owner, group and mode corrected.
  - O(files[].key) names an entry in the result, so a later task can ask whether one file changed
    (RV(changed_keys)).
author:
  - llmops.vllm_cluster developers (@llmops)
attributes:
  check_mode:
    support: full
    description: Reports what would change; writes nothing and runs no check.
  diff_mode:
    support: full
    description: Returns the text before and after for every changed file (up to 256 KiB each).
options:
  files:
    description:
      - The directories, files and removed paths, handled in this order.
    type: list
    elements: dict
    required: true
    suboptions:
      key:
        description:
          - Name of the entry in RV(files) and RV(changed_keys). Defaults to O(files[].dest).
        type: str
      dest:
        description:
          - Absolute path on the host.
        type: path
        required: true
      state:
        description:
          - V(file) writes the content, V(directory) creates a directory (and missing parents),
            V(absent) removes a file or a symbolic link (never a directory). An V(absent) entry's
            O(files[].template), O(files[].src) or O(files[].content) is not read, so one entry can be
            switched on and off by a variable.
        type: str
        choices: [file, directory, absent]
        default: file
      template:
        description:
          - Name of a template of the role (searched like the C(template) module's O(files[].src)),
            rendered on the controller. Exactly one of O(files[].template), O(files[].src) and
            O(files[].content) for a file.
        type: str
      vars:
        description:
          - Variables for this entry's O(files[].template) only (over the task's), for example the
            unit a drop-in is rendered for.
        type: dict
      src:
        description:
          - Name of a file of the role (searched like the C(copy) module's C(src)), sent as it is.
        type: str
      content:
        description:
          - The content of the file (text).
        type: str
      owner:
        description:
          - Owner of the file or directory.
        type: str
      group:
        description:
          - Group of the file or directory.
        type: str
      mode:
        description:
          - Mode, as an octal string such as V('0640') (or a symbolic mode).
        type: raw
      backup:
        description:
          - Keep a timestamped copy of a file it replaces.
        type: bool
        default: false
      validate:
        description:
          - Command that checks a changed file before it replaces the old one; V(%s) is the
            temporary file's path. Run without a shell. A non-zero exit status fails the task and
            replaces nothing.
        type: str
notes:
  - The action plugin reads O(files[].template) and O(files[].src) on the controller; the module
    receives their content.
  - Files are text (UTF-8).
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
'''

EXAMPLES = r'''
- name: Write the service's configuration, checked by the service before it replaces the old one
  llmops.vllm_cluster.file_set:
    files:
      - dest: /etc/myservice
        state: directory
        owner: root
        group: myservice
        mode: "0750"
      - key: config
        dest: /etc/myservice/config.yaml
        template: config.yaml.j2
        owner: root
        group: myservice
        mode: "0640"
        backup: true
        validate: /usr/local/bin/myservice --check-config %s
      - key: unit
        dest: /etc/systemd/system/myservice.service
        template: myservice.service.j2
        owner: root
        group: root
        mode: "0644"
      - dest: /etc/myservice/old.conf
        state: absent
  register: myservice_files

- name: Restart only when the configuration or the unit changed
  ansible.builtin.systemd_service:
    name: myservice
    state: restarted
    daemon_reload: "{{ 'unit' in myservice_files.changed_keys }}"
  when: myservice_files.changed_keys | intersect(['config', 'unit']) | length > 0
'''

RETURN = r'''
changed_keys:
  description: The keys (O(files[].key), else O(files[].dest)) of the entries that changed, in order.
  returned: always
  type: list
  elements: str
  sample: [config, unit]
files:
  description:
    - Per entry, by key, its O(files[].dest), O(files[].state), O(files[].owner), O(files[].group),
      O(files[].mode), whether it changed, and C(backup_file) (the copy of the file it replaced)
      when O(files[].backup) kept one.
  returned: always
  type: dict
  sample:
    config:
      dest: /etc/myservice/config.yaml
      state: file
      owner: root
      group: myservice
      mode: "0640"
      changed: true
      backup_file: /etc/myservice/config.yaml.12345.<date>@<time>~
    unit:
      dest: /etc/systemd/system/myservice.service
      state: file
      owner: root
      group: root
      mode: "0644"
      changed: false
'''

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

DIFF_LIMIT = 256 * 1024

FILE_SPEC = dict(
    key=dict(type='str', no_log=False),
    dest=dict(type='path', required=True),
    state=dict(type='str', choices=['file', 'directory', 'absent'], default='file'),
    template=dict(type='str'),
    vars=dict(type='dict'),
    src=dict(type='str'),
    content=dict(type='str', no_log=False),
    owner=dict(type='str'),
    group=dict(type='str'),
    mode=dict(type='raw'),
    backup=dict(type='bool', default=False),
    validate=dict(type='str'),
)


def _attrs(module, path, item):
    return module.load_file_common_arguments(dict(owner=item['owner'], group=item['group'], mode=item['mode']), path=path)


def _read(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _text_diff(key, before, after):
    if len(before or b'') > DIFF_LIMIT or len(after) > DIFF_LIMIT:
        return dict(before_header=key, after_header=key,
                    before='(over %d bytes: not shown)\n' % DIFF_LIMIT, after='')
    return dict(before_header=key, after_header=key,
                before=to_native(before or b'', errors='surrogate_or_replace'),
                after=to_native(after, errors='surrogate_or_replace'))


def check_items(items):
    """Every problem of the list (before anything is touched), one line each."""
    errors = []
    keys = set()
    for index, item in enumerate(items):
        where = 'files[%d] (%s)' % (index, item['dest'])
        if not os.path.isabs(item['dest']):
            errors.append('%s: dest must be an absolute path' % where)
        key = item['key'] or item['dest']
        if key in keys:
            errors.append('%s: key %r is used twice' % (where, key))
        keys.add(key)
        if item['template'] is not None or item['src'] is not None or item['vars'] is not None:
            errors.append('%s: template, vars and src are read by the action plugin; call the module '
                          'through the llmops.vllm_cluster.file_set action' % where)
        if item['state'] == 'file' and item['content'] is None:
            errors.append('%s: a file needs content (template, src or content)' % where)
        if item['state'] != 'file' and item['content'] is not None:
            errors.append('%s: state=%s takes no content' % (where, item['state']))
        if item['validate'] is not None and '%s' not in item['validate']:
            errors.append('%s: validate must contain %%s (the temporary file)' % where)
    return errors


class FileSet:
    """Applies the list: directories and removals at once, files staged, checked, then moved."""

    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.results = {}
        self.order = []
        self.diffs = []
        self.staged = []  # (key, item, temporary path, before)

    def _result(self, key, item, changed, **extra):
        self.results[key] = dict(dest=item['dest'], state=item['state'], changed=changed,
                                 owner=item['owner'], group=item['group'], mode=item['mode'], **extra)
        self.order.append(key)

    def directory(self, key, item):
        path = item['dest']
        if os.path.lexists(path) and not os.path.isdir(path):
            self.module.fail_json(msg='%s: %s exists and is not a directory' % (key, path))
        changed = False
        if not os.path.isdir(path):
            changed = True
            if self.check:
                self._result(key, item, True)
                return
            os.makedirs(path)
        changed = self.module.set_fs_attributes_if_different(_attrs(self.module, path, item), changed)
        self._result(key, item, changed)

    def absent(self, key, item):
        path = item['dest']
        if os.path.isdir(path) and not os.path.islink(path):
            self.module.fail_json(msg='%s: %s is a directory; file_set removes only files and links' % (key, path))
        changed = os.path.lexists(path)
        if changed and not self.check:
            os.unlink(path)
        self._result(key, item, changed)

    def file(self, key, item):
        path = item['dest']
        if os.path.isdir(path):
            self.module.fail_json(msg='%s: %s is a directory' % (key, path))
        new = to_bytes(item['content'], errors='surrogate_or_strict')
        before = _read(path)
        if before == new:
            changed = self.module.set_fs_attributes_if_different(_attrs(self.module, path, item), False)
            self._result(key, item, changed)
            return
        if self.module._diff:
            self.diffs.append(_text_diff(key, before, new))
        if self.check:
            self._result(key, item, True)
            return
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            self.module.fail_json(msg='%s: the directory %s does not exist (list it first with state=directory)'
                                  % (key, directory))
        # A private directory in the module's temporary directory: the destination's directory is
        # not touched before every check passed (no glob of it, *.conf or *.yml, sees a candidate),
        # and the candidate keeps the file's name (a check may read the extension).
        stage = tempfile.mkdtemp(dir=self.module.tmpdir, prefix='file_set-')
        tmp = os.path.join(stage, os.path.basename(path))
        self.staged.append((key, item, tmp, before))
        with open(tmp, 'wb') as out:
            out.write(new)
        self.module.set_fs_attributes_if_different(_attrs(self.module, tmp, item), True)

    def validate(self):
        """Every staged file through its check; the first failure removes every staged file and fails."""
        for key, item, tmp, dummy in self.staged:
            if item['validate'] is None:
                continue
            rc, out, err = self.module.run_command(item['validate'] % tmp)
            if rc != 0:
                self.discard()
                self.module.fail_json(
                    msg='%s: the check of the new %s failed (validate, rc=%d); nothing of this set was replaced: %s'
                        % (key, item['dest'], rc, (err or out).strip()[-2000:]),
                    key=key, dest=item['dest'], rc=rc, stdout=out, stderr=err,
                    changed_keys=[], files={})

    def discard(self):
        for dummy, dummy2, tmp, dummy3 in self.staged:
            shutil.rmtree(os.path.dirname(tmp), ignore_errors=True)

    def commit(self):
        for key, item, tmp, before in self.staged:
            extra = {}
            if item['backup'] and before is not None:
                extra['backup_file'] = self.module.backup_local(item['dest'])
            self.module.atomic_move(tmp, item['dest'], unsafe_writes=False)
            # atomic_move gives the new file the old one's owner and mode: set them again.
            self.module.set_fs_attributes_if_different(_attrs(self.module, item['dest'], item), True)
            self._result(key, item, True, **extra)


def main():
    module = AnsibleModule(
        argument_spec=dict(files=dict(type='list', elements='dict', required=True, options=FILE_SPEC)),
        supports_check_mode=True,
    )
    items = module.params['files']
    errors = check_items(items)
    if errors:
        module.fail_json(msg='file_set: ' + '; '.join(errors))

    run = FileSet(module)
    for item in items:
        key = item['key'] or item['dest']
        getattr(run, item['state'])(key, item)
    try:
        run.validate()
        run.commit()
    finally:
        run.discard()

    files = dict((key, run.results[key]) for key in run.order)
    ordered = [item['key'] or item['dest'] for item in items]
    changed_keys = [key for key in ordered if files[key]['changed']]
    result = dict(changed=bool(changed_keys), changed_keys=changed_keys, files=files)
    if module._diff and run.diffs:
        result['diff'] = run.diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
