# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Syntax classes: what a value may look like before it reaches a configuration file, an
environment file, a command line or a path (controller side, standard library only).

A class is a name with a check, a description in words, a valid example, and the hostile values
that break the syntax it guards (the generic ones in HOSTILE are tried against every class).
The table that gives every role variable its class is _syntax_table.TABLE (and PLAYBOOKS, the
playbooks' own variables); check() applies it.

A class reference in the table is a string:
  NAME            the class
  ?NAME           the class, or empty ("" / none)
  int LO..HI      an integer within bounds (HI may be omitted)
  float LO..HI    a number within bounds; LO< or <HI makes the bound open
  choice          one of the option's choices in the argument spec
  bool            a boolean as Ansible reads one
A variable with a class of its own and one for its items (`var` and `var[]`) takes either: a value of
the first, or a list (or a comma-separated string) of the second.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

MAX_LEN = 4096
_CTRL = re.compile(r'[\x00-\x1f\x7f]')
_SHELL = set(';|&$`<>(){}\'"\\!*?[]#~')


def _re(pattern):
    rx = re.compile(pattern)
    return lambda v: rx.fullmatch(v) is not None


def _no_dotdot(v):
    return '..' not in v.split('/')


def _is_ip(v):
    try:
        ipaddress.ip_address(v)
        return True
    except ValueError:
        return False


def _is_cidr(v):
    try:
        ipaddress.ip_network(v, strict=False)
        return '/' in v or _is_ip(v)
    except ValueError:
        return False


def _is_iface_addr(v):
    try:
        ipaddress.ip_interface(v)
        return '/' in v
    except ValueError:
        return False


_HOSTNAME = re.compile(r'(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?')


def _is_hostname(v):
    return _HOSTNAME.fullmatch(v) is not None and not v.startswith('-')


def _is_host(v):
    return _is_ip(v) or _is_hostname(v)


def _is_host_port(v):
    m = re.fullmatch(r'\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})|([^:\[\]]+):([0-9]{1,5})', v)
    if not m:
        return False
    host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return 1 <= int(port) <= 65535 and (_is_ip(host) or _is_hostname(host))


def _url(schemes, path_ok=False):
    def check(v):
        if path_ok and v.startswith('/'):
            return _re(r'/[A-Za-z0-9._~+@%:=,/-]*')(v) and _no_dotdot(v)
        if any(c in v for c in ' \t"\'`<>\\{}|^') or v.startswith('-'):
            return False
        try:
            parts = urlsplit(v)
        except ValueError:
            return False
        if parts.scheme not in schemes:
            return False
        if parts.scheme == 'file':
            return parts.path.startswith('/') and _no_dotdot(parts.path)
        return bool(parts.hostname) and _is_host(parts.hostname)
    return check


def _is_git_url(v):
    if _url(('https', 'http', 'ssh', 'git', 'file'))(v):
        return True
    if v.startswith('/'):
        return _re(r'/[A-Za-z0-9._+@%=,/-]*')(v) and _no_dotdot(v)
    # scp-like: user@host:path
    return _re(r'[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/-]+')(v)


def _is_git_ref(v):
    # git check-ref-format's rules, and never an option
    if v.startswith(('-', '/')) or v.endswith(('/', '.', '.lock')) or '..' in v or '@{' in v or '//' in v:
        return False
    if any(part.startswith('.') for part in v.split('/')):
        return False
    return _re(r'[A-Za-z0-9._/+-]+')(v)


def _is_abs_path(v):
    return _re(r'/[A-Za-z0-9._+@%:=,/-]*')(v) and _no_dotdot(v)


# Directories a role may create, own, chown or clean: never one the system or other software owns.
SYSTEM_DIRS = frozenset((
    '/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/libx32', '/media', '/mnt',
    '/opt', '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/usr/bin', '/usr/lib',
    '/usr/local', '/usr/local/bin', '/usr/local/lib', '/usr/local/libexec', '/usr/local/sbin', '/usr/sbin',
    '/usr/share', '/usr/libexec', '/var/lib', '/var/cache', '/var/log', '/var/tmp', '/var/spool', '/etc/systemd',
    '/etc/systemd/system', '/etc/nginx', '/etc/apt', '/etc/default', '/etc/ssl', '/etc/ssl/private',
))


def _is_owned_dir(v):
    return _is_abs_path(v) and v.rstrip('/') not in SYSTEM_DIRS and v not in SYSTEM_DIRS


def _is_pip_req(v):
    return (not v.startswith('-') and _re(
        r'[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?'
        r'( ?(===|==|>=|<=|!=|~=|>|<) ?[A-Za-z0-9.*+!_-]+( ?, ?(===|==|>=|<=|!=|~=|>|<) ?[A-Za-z0-9.*+!_-]+)*)?')(v))


def _is_one_line(v):
    return _CTRL.search(v) is None


def _is_cli_arg(v):
    return _re(r'[\x21-\x7e]+')(v) and not any(c in _SHELL for c in v)


def _is_shell_line(v):
    # An operator's own command line, run by sh -c: one line, no command substitution or redirection.
    return _is_one_line(v) and not any(c in v for c in '`$<>') and not v.startswith('-')


def _is_nft_rule(v):
    if not _is_one_line(v) or any(c in v for c in ';#`$\\'):
        return False
    depth = 0
    for c in v:
        depth += {'{': 1, '}': -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def _is_secret(v):
    return _re(r'[A-Za-z0-9._~+/=:@%^,-]{1,1024}')(v)


_HUB_ID = _re(r'[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._-]{0,127})?')
_ONE_SERVER_NAME = _re(r'_|\*\.[A-Za-z0-9.-]+|[A-Za-z0-9.-]+\.\*|[A-Za-z0-9_][A-Za-z0-9._-]{0,252}')


def _is_model_ref(v):
    return (_is_abs_path(v) or _HUB_ID(v)) and _no_dotdot(v)


def _is_server_name(v):
    return len(v) <= 1024 and all(_ONE_SERVER_NAME(n) for n in v.split(' '))


def _is_arch_list(v):
    return _re(r'[0-9]+\.[0-9]+[af]?(\+PTX)?([ ;][0-9]+\.[0-9]+[af]?(\+PTX)?)*')(v)


class Class(object):
    """One syntax class."""

    def __init__(self, name, check, words, example, hostile=()):
        self.name = name
        self.check = check
        self.words = words
        self.example = example
        self.hostile = tuple(hostile)


_C = [
    # names and tokens
    Class('name', _re(r'[A-Za-z0-9][A-Za-z0-9._-]{0,127}'),
          "a name: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128", 'llmops-vllm'),
    Class('identifier', _re(r'[A-Za-z_][A-Za-z0-9_]{0,63}'),
          "an identifier: letters, digits and '_', not starting with a digit", 'vllm_replicas'),
    Class('nginx_name', _re(r'[A-Za-z_][A-Za-z0-9_.-]{0,63}'),
          "an nginx name: letters, digits, '_', '.' and '-', starting with a letter or '_'", 'vllm_replicas'),
    Class('group', _re(r'[A-Za-z_][A-Za-z0-9_]{0,63}'),
          "an inventory group name: letters, digits and '_'", 'vllm_heads'),
    Class('inventory_host', _re(r'[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}'),
          "an inventory host or replica name: letters, digits, '_', '.' and '-'", 'dgx1'),
    Class('unit', _re(r'[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}'),
          "a systemd unit name (letters, digits, '_', '.', '@', '-')", 'vllm'),
    Class('posix_name', _re(r'[a-z_][a-z0-9_-]{0,30}'),
          "a POSIX user or group name: lower-case letters, digits, '_' and '-', at most 31, not starting with a digit",
          'vllm', ['Root', '0day']),
    Class('owner', _re(r'[a-z_][a-z0-9_-]{0,30}:[a-z_][a-z0-9_-]{0,30}'),
          "USER:GROUP, each a POSIX name (lower-case letters, digits, '_' and '-')", 'prometheus:prometheus',
          ['root', 'a:b:c']),
    Class('service_user', lambda v: _re(r'[a-z_][a-z0-9_-]{0,30}')(v) and v != 'root',
          "a POSIX user or group name other than root (the service runs unprivileged)", 'vllm', ['root']),
    Class('package', _re(r'[a-z0-9][a-z0-9+.-]{1,127}'),
          "a Debian package name: lower-case letters, digits, '+', '-' and '.'", 'nginx'),
    Class('package_spec', _re(r'[a-z0-9][a-z0-9+.-]{1,127}(=[0-9][A-Za-z0-9.+~:-]*)?'),
          "a Debian package name, optionally =VERSION", 'nginx=1.22.1-9'),
    Class('deb_version', _re(r'([0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,127}'),
          "a Debian package version (apt-cache policy), such as 1.22.1-9 or 1:2.3-1", '1.22.1-9'),
    Class('version', _re(r'[0-9][A-Za-z0-9.+_-]{0,63}'),
          "a version: starts with a digit, then letters, digits, '.', '+', '_' and '-'", '0.34.0'),
    Class('nvidia_branch', _re(r'[0-9]{3}(-server|-open)?'),
          "an NVIDIA driver branch: three digits, optionally -server or -open", '580'),
    Class('compute_capability', _re(r'[0-9]{1,2}\.[0-9]{1,2}'), "a CUDA compute capability MAJOR.MINOR", '12.1'),
    Class('arch_list', _is_arch_list,
          "a CUDA architecture list: MAJOR.MINOR with an optional a/f suffix or +PTX, separated by spaces or ';'",
          '12.1a'),
    Class('pip_requirement', _is_pip_req,
          "a pip requirement NAME[extras] with optional version specifiers (never an option: no leading '-')",
          'torch==2.14.0', ['--index-url=https://evil.example', 'pkg @ file:///etc']),
    Class('python', _re(r'python3(\.[0-9]{1,2})?|/[A-Za-z0-9._/-]*python3(\.[0-9]{1,2})?'),
          "python3, python3.N, or an absolute path to one", 'python3'),
    Class('container_image', _re(r'[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9._-]{1,128})?(@sha256:[0-9a-f]{64})?'),
          "a container image reference REGISTRY/NAME:TAG (lower-case name, optional @sha256 digest)",
          'nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04'),
    Class('model_name', lambda v: _re(r'[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._:-]{0,127})?')(v)
          and _no_dotdot(v),
          "a served model name: letters, digits, '.', '_', ':' and '-', optionally ORG/NAME", 'deepseek-v4-flash'),
    Class('model_ref', _is_model_ref,
          "an absolute path on the node (no '..') or a hub id ORG/NAME", '/var/lib/vllm/models/qwen'),
    Class('hf_repo', _re(r'[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}'),
          "a Hugging Face repository id ORG/NAME", 'deepseek-ai/DeepSeek-V4-Flash'),
    Class('hf_revision', _re(r'[0-9a-f]{40}'), "a full 40-character commit hash (lower-case hex)",
          '0123456789abcdef0123456789abcdef01234567'),
    Class('git_commit', _re(r'[0-9a-f]{7,40}'), "a git commit hash (7 to 40 lower-case hex digits)", '3b386b4'),
    Class('git_ref', _is_git_ref,
          "a git ref (tag, branch or hash; git check-ref-format rules, no leading '-')", 'v0.34.0',
          ['--upload-pack=touch /tmp/x', 'v1..v2', 'main.lock']),
    Class('git_url', _is_git_url,
          "a git URL: https, http, ssh, git or file, user@host:path, or an absolute path (no ext::, no leading '-')",
          'https://github.com/vllm-project/vllm.git', ['ext::sh -c touch% /tmp/x', '-uhttps://x', 'fd::17']),
    Class('glob', _re(r'[A-Za-z0-9*?._/\[\]-]{1,256}'),
          "a file name pattern: letters, digits, '*', '?', '[]', '.', '_', '/' and '-'", '*.safetensors'),
    Class('checksum', _re(r'(sha1|sha224|sha256|sha384|sha512|md5):[0-9a-fA-F]{32,128}'),
          "a checksum ALGORITHM:HEX (sha256:...)", 'sha256:' + '0' * 64),
    # network
    Class('host', _is_host, "an IP address or a host name", 'llm.internal.example', ['0.0.0.0 --x']),
    Class('address', _is_ip, "an IPv4 or IPv6 address", '10.0.0.11', ['10.0.0.300', '0.0.0.0 --x']),
    Class('host_port', _is_host_port, "HOST:PORT or [IPV6]:PORT", '127.0.0.1:9090', ['127.0.0.1:99999']),
    Class('cidr', _is_cidr, "an IP network in CIDR notation (or a single address)", '10.0.0.0/24',
          ['10.0.0.0/33', '10.0.0.0/24 accept']),
    Class('iface_address', _is_iface_addr, "an interface address ADDRESS/PREFIX", '192.168.100.11/24',
          ['192.168.77.300/24', '10.0.0.1']),
    Class('nginx_allow', lambda v: v == 'all' or _is_cidr(v),
          "an address, a CIDR network or 'all' (nginx allow)", '127.0.0.1'),
    Class('iface', _re(r'[A-Za-z0-9][A-Za-z0-9_.:@-]{0,14}'),
          "a Linux interface name (at most 15 characters: letters, digits, '_', '.', ':', '@', '-')", 'enp1s0f1np1'),
    Class('rdma_device', _re(r'[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(:[0-9]{1,2})?'),
          "an RDMA device name, optionally :PORT", 'rocep1s0f1'),
    Class('server_name', _is_server_name,
          "nginx server names separated by single spaces: host names, *.example, example.* or '_'",
          'llm.internal.example', ['llm.example; return 200 pwned']),
    Class('url', _url(('https', 'http', 'file')), "a URL with scheme https, http or file", 'https://mirror.example/deb',
          ['javascript:alert(1)', 'ext::sh']),
    Class('http_url', _url(('https', 'http')), "a URL with scheme https or http", 'https://hub.internal.example',
          ['file:///etc/shadow']),
    Class('link_url', _url(('https', 'http', 'file'), path_ok=True),
          "a URL (https, http or file) or an absolute directory path", '/srv/wheelhouse'),
    Class('url_path', lambda v: _re(r'/[A-Za-z0-9._~/-]{0,255}')(v) and _no_dotdot(v),
          "a URL path starting with '/': letters, digits, '.', '_', '~', '-' and '/'", '/v1/'),
    Class('http_header', _re(r'[A-Za-z0-9][A-Za-z0-9-]{0,63}'), "an HTTP header name: letters, digits and '-'",
          'X-Upstream'),
    # sizes and durations
    Class('nginx_size', _re(r'[0-9]{1,12}[kKmMgG]?'), "an nginx size: digits with an optional k, m or g", '16m'),
    Class('redis_size', _re(r'[0-9]{1,15}([kmg]b?|[KMG]B?)?'), "a Redis size: digits with an optional kb, mb or gb",
          '256mb'),
    Class('prom_duration', _re(r'([0-9]{1,9}(ms|s|m|h|d|w|y)){1,7}'),
          "a Prometheus duration: digits with ms, s, m, h, d, w or y, such as 30s, 5m, 1h30m or 15d", '5m'),
    Class('prom_size', _re(r'[0-9]{1,9}(B|KB|MB|GB|TB|PB|EB)'),
          "a Prometheus size: digits with B, KB, MB, GB, TB, PB or EB", '50GB'),
    Class('redis_save', _re(r'[0-9]{1,9} [0-9]{1,12}'), "a Redis save point: SECONDS CHANGES", '900 1'),
    # paths
    Class('path', _is_abs_path,
          "an absolute path: letters, digits and . _ + @ % : = , / - (no spaces, no '..')", '/etc/vllm',
          ['etc/vllm', '/etc/../root']),
    Class('local_path', _re(r'[A-Za-z0-9._+@%:=,/][A-Za-z0-9._+@%:=,/-]{0,4095}'),
          "a path on the controller, absolute or from the current directory: letters, digits and . _ + @ % : = , / - "
          "(no spaces, not starting with '-')", 'reports/canary', ['-rf', 'a b']),
    Class('owned_dir', _is_owned_dir,
          "an absolute directory the role owns: no '..', and not a system directory such as /, /etc, /usr or /var/lib",
          '/opt/vllm', ['/', '/etc', '/usr', '/var/lib']),
    Class('netplan_file', _re(r'/etc/netplan/[0-9]{2}-[A-Za-z0-9_-]{1,64}\.yaml'),
          "a netplan file /etc/netplan/NN-name.yaml", '/etc/netplan/40-llmops.yaml'),
    # command lines and free text
    Class('cli_arg', _is_cli_arg,
          "one command-line argument: no spaces, quotes, shell characters or control characters",
          '--storage.tsdb.wal-compression'),
    Class('shell_line', _is_shell_line,
          "one shell command line (run by sh -c): no newline, control characters, '$', '`', '<' or '>'",
          'netplan apply'),
    Class('nft_rule', _is_nft_rule,
          "one nftables rule statement: one line, no ';', '#', '$', '`' or '\\', balanced braces",
          'ip saddr 10.0.0.0/24 tcp dport 5201 accept', ['accept; flush ruleset']),
    Class('text', lambda v: _is_one_line(v) and len(v) <= 1024,
          "one line of text, at most 1024 characters, no control characters", 'Hello'),
    Class('prompt', lambda v: re.search(r'[\x00-\x08\x0b-\x1f\x7f]', v) is None and 0 < len(v) <= 65536,
          "a prompt: 1 to 65536 characters, no NUL or other control character but newline and tab (sent as JSON)",
          'Explain a rolling upgrade in two sentences.'),
    Class('env_name', _re(r'[A-Za-z_][A-Za-z0-9_]{0,127}'),
          "an environment variable name: letters, digits and '_', not starting with a digit", 'VLLM_LOGGING_LEVEL',
          ['A B', 'A=B']),
    Class('env_value', lambda v: _is_one_line(v) and len(v) <= MAX_LEN,
          "one line (no newline, NUL or other control character), at most 4096 characters", 'INFO'),
    Class('secret', _is_secret,
          "a secret of 1 to 1024 characters: letters, digits and . _ ~ + / = : @ % ^ , -", '(hidden)'),
    Class('password_hash', _re(r'\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}'), "a bcrypt hash ($2b$...)", '(hidden)'),
    Class('label_name', _re(r'[A-Za-z_][A-Za-z0-9_]{0,127}'),
          "a Prometheus label name: letters, digits and '_', not starting with a digit", 'cluster'),
    Class('flag_name', _re(r'[a-z][a-z0-9_-]{0,127}'),
          "a vLLM option name: lower-case letters, digits, '_' and '-' (no leading dashes)", 'max_num_seqs',
          ['--trust-remote-code', 'a b']),
    Class('flag_value', None, "a number, a boolean, one line of text, or a list or mapping of them",
          'auto'),
    Class('data', None, "structured data written as YAML or JSON: one-line strings without control characters",
          '{to: default, via: 10.0.0.1}'),
    Class('rule_data', None,
          "Prometheus rule groups as YAML data (multi-line strings allowed, no NUL or other control character but "
          "newline and tab), checked by promtool before use", '[{name: extra, rules: []}]'),
    Class('flag_word', _re(r'[A-Za-z0-9][A-Za-z0-9._+-]{0,63}'),
          "one word of a vLLM setting: letters, digits, '.', '_', '+' and '-'", 'auto'),
    Class('flag_name_any', _re(r'[A-Za-z_][A-Za-z0-9_-]{0,127}'),
          "a vLLM option or environment variable name: letters, digits, '_' and '-'", 'VLLM_SERVER_DEV_MODE'),
    Class('link_local', _re(r'ipv4|ipv6'), "ipv4 or ipv6", 'ipv4'),
    Class('gid_index', _re(r'auto|[0-9]{1,3}'), "auto or a GID index (a number)", 'auto'),
    Class('roce_version', _re(r'[12]'), "1 or 2", '2'),
    Class('sd_key', _re(r'[A-Za-z][A-Za-z0-9]{0,63}'), "a systemd directive name (letters and digits)", 'MemoryMax'),
    Class('arch', _re(r'[a-z0-9_]{1,32}'), "a machine or package architecture (lower-case letters, digits, '_')",
          'aarch64'),
    Class('kernel_flavour', _re(r'[a-z0-9][a-z0-9.-]{0,63}'), "a kernel flavour: lower-case letters, digits, '.', '-'",
          'nvidia'),
]

CLASSES = dict((c.name, c) for c in _C)

# The values every class is tried with (tests/unit/test_syntax_hostile.py): each breaks some target syntax.
HOSTILE = ('a\nb', 'a\x00b', 'a;b', 'a{b', 'a}b', 'a"b', "a'b", '-a', '../a', 'a b', '$a', 'a`b`', 'x' * 10240,
           'a\u00e9\u4e2d', 'a\rb', 'a\tb')

# Classes that hold structured data (lists and mappings are checked whole, an empty one is valid).
STRUCTURED = ('flag_value', 'data', 'rule_data')


def _flag_value_ok(v, depth=0):
    if depth > 8:
        return False
    if isinstance(v, bool) or v is None or isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        return _is_one_line(v) and len(v) <= MAX_LEN
    if isinstance(v, (list, tuple)):
        return all(_flag_value_ok(i, depth + 1) for i in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _re(r'[A-Za-z0-9_.:-]{1,128}')(k) and _flag_value_ok(i, depth + 1)
                   for k, i in v.items())
    return False


CLASSES['flag_value'].check = _flag_value_ok
CLASSES['data'].check = _flag_value_ok


def _rule_data_ok(v, depth=0):
    if depth > 16:
        return False
    if isinstance(v, str):
        return re.search(r'[\x00-\x08\x0b-\x1f\x7f]', v) is None and len(v) <= 65536
    if isinstance(v, (list, tuple)):
        return all(_rule_data_ok(i, depth + 1) for i in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _re(r'[A-Za-z0-9_]{1,64}')(k) and _rule_data_ok(i, depth + 1)
                   for k, i in v.items())
    return isinstance(v, (bool, int, float)) or v is None


CLASSES['rule_data'].check = _rule_data_ok

_NUM = re.compile(r'(int|float) (-?[0-9.]+)?(<)?\.\.(<)?(-?[0-9.]+)?')
TRUE = ('yes', 'on', '1', 'true', 1, True)
FALSE = ('no', 'off', '0', 'false', 0, False)


def parse_ref(ref):
    """(optional, kind, detail) of a class reference."""
    optional = ref.startswith('?')
    ref = ref.lstrip('?')
    m = _NUM.fullmatch(ref)
    if m:
        kind, lo, lo_open, hi_open, hi = m.groups()
        num = int if kind == 'int' else float
        return optional, kind, (num(lo) if lo else None, bool(lo_open), bool(hi_open), num(hi) if hi else None)
    if ref in ('bool', 'choice'):
        return optional, ref, None
    if ref not in CLASSES:
        raise KeyError('unknown syntax class %r' % ref)
    return optional, 'class', CLASSES[ref]


def describe(ref, choices=None):
    """The class in words."""
    optional, kind, detail = parse_ref(ref)
    if kind in ('int', 'float'):
        lo, lo_open, hi_open, hi = detail
        if kind == 'int':
            text = 'an integer in %s..%s' % ('' if lo is None else lo, '' if hi is None else hi)
        else:
            left = '(' if lo_open or lo is None else '['
            right = ')' if hi_open or hi is None else ']'
            text = 'a number in %s%s, %s%s' % (left, '-inf' if lo is None else '%g' % lo,
                                               'inf' if hi is None else '%g' % hi, right)
    elif kind == 'bool':
        text = 'true or false'
    elif kind == 'choice':
        text = 'one of %s' % ', '.join(str(c) for c in (choices or []))
    else:
        text = detail.words
    return text + ('; or empty' if optional else '')


def example(ref, choices=None):
    optional, kind, detail = parse_ref(ref)
    if kind in ('int', 'float'):
        lo, lo_open, hi_open, hi = detail
        if lo is not None:
            return str(lo + 1 if lo_open else lo) if kind == 'int' else '%g' % (hi if hi is not None and lo_open else lo)
        return str(hi)
    if kind == 'bool':
        return 'true'
    if kind == 'choice':
        return str((choices or [''])[0])
    return detail.example


def _number(kind, value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if kind == 'int' and isinstance(value, float) and not value.is_integer():
            return None
        return int(value) if kind == 'int' else float(value)
    if isinstance(value, str) and _re(r'-?[0-9]{1,18}' if kind == 'int' else r'-?[0-9]{1,18}(\.[0-9]{1,18})?')(
            value.strip()):
        return int(value) if kind == 'int' else float(value)
    return None


def is_empty(value):
    return value is None or value == '' or value == [] or value == {}


def check_value(ref, value, choices=None):
    """None when value belongs to the class, else False."""
    optional, kind, detail = parse_ref(ref)
    if is_empty(value):
        if optional or kind == 'bool' or (kind == 'class' and detail.name in STRUCTURED):
            return None
        return False
    if kind in ('int', 'float'):
        num = _number(kind, value)
        if num is None:
            return False
        lo, lo_open, hi_open, hi = detail
        if lo is not None and (num < lo or (lo_open and num == lo)):
            return False
        if hi is not None and (num > hi or (hi_open and num == hi)):
            return False
        return None
    if kind == 'bool':
        return None if (value in TRUE or value in FALSE or
                        (isinstance(value, str) and value.lower() in TRUE + FALSE)) else False
    if kind == 'choice':
        if isinstance(value, bool) and not any(c is value for c in choices or []):
            # YAML reads yes and no as booleans: like Ansible, the one choice the boolean can mean
            words = TRUE if value else FALSE
            return None if len([c for c in choices or [] if isinstance(c, str) and c.lower() in words]) == 1 else False
        return None if value in (choices or []) else False
    if detail.name in STRUCTURED:
        return None if detail.check(value) else False
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    text = str(value)
    if len(text) > MAX_LEN or _CTRL.search(text):
        return False
    return None if detail.check(text) else False


def _show(value, hidden):
    """The value as the roles' own messages quote it: 'text' (a scalar as a string, escapes shown)."""
    if hidden:
        return '(value hidden)'
    text = repr(str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value)
    if not text.startswith("'"):
        text = "'%s'" % text.strip('"')
    return text if len(text) <= 80 else text[:76] + "...'"


class Checker(object):
    """Checks the values of one role's variables against the table (_syntax_table.TABLE[role]) and the
    role's argument spec options (for types, choices and no_log)."""

    def __init__(self, table, options, rules=()):
        self.table = table
        self.options = options or {}
        self.rules = rules
        self.errors = []
        self.checked = 0

    def _ref(self, pat, spec):
        ref = self.table.get(pat)
        if ref is None and spec.get('type', 'str') != 'list':
            if spec.get('choices'):
                return 'choice'
            if spec.get('type') == 'bool':
                return 'bool'
        return ref

    def _fail(self, disp, value, ref, choices, hidden, what=None):
        ex = example(ref, choices)
        self.errors.append('%s%s: %s must be %s%s' % (
            disp, ' (%s)' % what if what else '', _show(value, hidden), describe(ref, choices),
            '' if hidden or ex == '(hidden)' else ' (for example %s)' % ex))

    def _has_below(self, pat):
        return any(k.startswith(pat + '.') or k.startswith(pat + '[]') for k in self.table)

    def walk(self, pat, disp, value, spec, hidden=False):
        spec = spec or {}
        hidden = hidden or bool(spec.get('no_log'))
        ref = self._ref(pat, spec)
        kind, detail = parse_ref(ref)[1:] if ref is not None else (None, None)
        structured = kind == 'class' and detail.name in STRUCTURED
        # A variable with both a scalar class and an item class (reset_remove_data: true, or
        # models,caches): a string its scalar class refuses is read as a comma-separated list.
        as_list = (ref is not None and isinstance(value, str) and pat + '[]' in self.table
                   and check_value(ref, value, spec.get('choices')) is False)
        if ref is not None and not as_list and (structured or not isinstance(value, (list, tuple, dict))):
            self.checked += 1
            if check_value(ref, value, spec.get('choices')) is False:
                self._fail(disp, value, ref, spec.get('choices'), hidden)
            return
        if isinstance(value, (list, tuple)) or (isinstance(value, str) and value and pat + '[]' in self.table):
            items = value if isinstance(value, (list, tuple)) else [v.strip() for v in value.split(',')]
            elem = {'no_log': spec.get('no_log'), 'choices': spec.get('choices'), 'type': spec.get('elements'),
                    'options': spec.get('options')}
            for i, item in enumerate(items):
                self.walk(pat + '[]', '%s[%d]' % (disp, i), item, elem, hidden)
            return
        if isinstance(value, dict):
            subs = spec.get('options') or {}
            keyref = self.table.get(pat + '.<key>')
            for key, item in value.items():
                if keyref is not None:
                    self.checked += 1
                    if check_value(keyref, key) is False:
                        self._fail(disp, key, keyref, None, False, what='a key')
                        continue
                sub = '%s.%s' % (pat, key)
                if sub in self.table or key in subs or self._has_below(sub):
                    self.walk(sub, '%s.%s' % (disp, key), item, subs.get(key), hidden)
                elif pat + '.*' in self.table:
                    self.walk(pat + '.*', '%s.%s' % (disp, key), item, None, hidden)
                # any other key: not this check's (the argument spec or the role refuses unknown keys)
            return
        if ref is None and not is_empty(value):
            self.errors.append('%s has no syntax class (a collection defect: report it)' % disp)

    def run(self, values):
        for name in sorted(values):
            self.walk(name, name, values[name], self.options.get(name))

        def get(path):
            cur = values
            for part in path:
                if not isinstance(cur, dict) or part not in cur:
                    return None
                cur = cur[part]
            return cur

        for _names, rule in self.rules:
            msg = rule(get)
            if msg:
                self.errors.append(msg)
        return self.errors


def spec_options(argument_specs):
    """Every entry point's options of one role's argument_specs.yml, merged."""
    options = {}
    for entry in (argument_specs or {}).get('argument_specs', {}).values():
        options.update(entry.get('options') or {})
    return options


def summary(table, path, spec):
    """The syntax of the option at path (and what lies under it), in words, for its description; None
    for a bool or a choice (the type and choices say it)."""
    spec = spec or {}
    own = dict((k, v) for k, v in table.items() if k == path or k.startswith(path + '.') or k.startswith(path + '['))
    if not own:
        return None
    if sorted(own) == [path, path + '[]']:
        # a scalar or a list (Checker.walk reads a string its scalar class refuses as a list)
        return '%s; or a list or comma-separated string, each item %s.' % (
            describe(own[path], spec.get('choices')), describe(own[path + '[]'], spec.get('choices')))
    subs = spec.get('options') or {}
    parts = []
    items = all(k[len(path):].startswith('[]') for k in own)
    for key in sorted(own, key=lambda k: ('<key>' in k or k.endswith('*'), k.count('.'), k)):
        rest = key[len(path):]
        if items:
            rest = rest[2:]
        first = rest.lstrip('.').split('.')[0].split('[')[0]
        if first and first in subs:
            continue  # a documented sub-option says its own
        words = [w.replace('[]', ' items').replace('<key>', 'keys').replace('*', 'other values')
                 for w in rest.lstrip('.').split('.') if w]
        label = ' '.join(words)
        parts.append((label + ' - ' if label else '') + describe(own[key], spec.get('choices') if key in (
            path, path + '[]') else None))
    if items and parts:
        parts[0] = 'each item: ' + parts[0]
    return '; '.join(parts) + '.' if parts else None
