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
      - A redirect of a C(GET) to the same scheme, host and port is followed; a redirect to another
        one is refused (the request fails, nothing is sent there), so that O(api_key) and
        O(headers) never leave this origin.
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
      - Treated as secrets (an C(Authorization) or tenant header) - their values are hidden from the
        output and logs (C(no_log)), and like O(api_key) they are only sent to O(base_url)'s origin.
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
      - Seconds one HTTP request may take in all - connect, headers and the whole answer, a stream to
        its end included. A server that sends a byte now and then cannot stretch it (the connection
        is shut when the time is up).
    type: float
    default: 60
  max_response_size:
    description:
      - Largest answer read, in bytes (a whole stream counts as one answer); a larger one fails the
        request without reading further. At least 1024.
    type: int
    default: 33554432
'''
