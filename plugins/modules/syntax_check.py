#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: syntax_check
short_description: Check every variable of a role or playbook of this collection against its syntax class
version_added: 0.3.0
description:
  - Reads every variable of the role O(role), or of the playbook O(playbook) (its argument spec options, and the paths of the
    collection's syntax table) and checks each value, down to list items and mapping keys, against
    the syntax class the table gives it - a host name, an absolute path with no C(..), a systemd
    unit name, a POSIX user other than C(root), an environment variable name and a one-line value,
    an nginx size, a URL of an allowed scheme, a git ref that is not an option, an integer within the
    bounds its consumer has, and so on (the classes, in words, are in the collection's
    C(docs/variables.md) beside each variable).
  - Every refused value is reported at once, each with its full path (for example
    C(vllm_service_model.aliases[1])), the class in words and a valid example. The value of an
    option marked C(no_log) is never shown.
  - Runs on the controller only; it reads nothing from the host and changes nothing. Each role of
    the collection runs it as the first task of its preflight, and each playbook as its first task,
    so a bad value stops the role or the playbook before any task touches a host.
author:
  - llmops.vllm_cluster developers (@llmops)
options:
  role:
    description:
      - The role of this collection whose variables are checked.
      - One of O(role) and O(playbook) is required.
    type: str
  playbook:
    description:
      - The playbook of this collection whose own variables are checked (C(upgrade), C(tune_speculative), C(measure)
        for the measuring tasks they share, C(validate), C(maintenance), C(reset), C(monitoring_backup) for both
        monitoring backup playbooks), as the collection's C(playbooks/vars/argument_specs.yml) declares them.
    type: str
attributes:
  check_mode:
    support: full
    description: Checks the same way in check mode; it never changes anything.
  diff_mode:
    support: none
    description: Nothing to show; it changes nothing.
  platform:
    support: full
    platforms: all
    description: Runs on the controller only; the host is not contacted.
'''

EXAMPLES = r'''
- name: Check every variable of nginx_lb before any change
  llmops.vllm_cluster.syntax_check:
    role: nginx_lb

- name: Check the variables of upgrade.yml before its plan
  llmops.vllm_cluster.syntax_check:
    playbook: upgrade
'''

RETURN = r'''
checked:
  description: How many values (leaves, keys and list items) were checked.
  returned: always
  type: int
  sample: 112
errors:
  description: One line per refused value - its path, the value (hidden for no_log options), its class and an example.
  returned: failed
  type: list
  elements: str
  sample:
    - >-
      nginx_lb_server_name: 'llm.example; return 200 pwned' must be nginx server names separated by single
      spaces: host names, *.example, example.* or '_' (for example llm.internal.example)
'''
