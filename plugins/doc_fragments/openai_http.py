# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Options shared by the modules that talk HTTP to an OpenAI-compatible / vLLM server."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  base_url:
    description:
      - Root URL of the server, for example C(http://127.0.0.1:8000) or the balancer's URL.
      - A trailing C(/v1) is accepted and removed; the modules add C(/health), C(/v1/models),
        C(/v1/chat/completions), C(/v1/completions) and C(/metrics) themselves.
    type: str
    required: true
  api_key:
    description:
      - Bearer token sent as C(Authorization) to the server (vLLM C(--api-key) protects only C(/v1/*)).
      - Never returned and never written into a message.
    type: str
  headers:
    description:
      - Extra HTTP headers sent with every request.
    type: dict
    default: {}
  validate_certs:
    description:
      - Verify the server's TLS certificate for C(https) URLs.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of CA certificates to verify the server with (a private CA).
    type: path
  request_timeout:
    description:
      - Seconds one HTTP request may take (connect, and each read of a streamed answer).
    type: float
    default: 60
'''
