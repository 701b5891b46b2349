# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Attributes shared by the collection's modules, which read and measure and change nothing."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r'''
attributes:
  diff_mode:
    description: Would report what changed in diff mode; these modules change nothing.
    support: none
'''
