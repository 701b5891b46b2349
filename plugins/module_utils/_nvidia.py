# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Parsing of nvidia-smi, nvcc and /proc/driver/nvidia/version output, and the GPU stack checks.

Pure functions over text: the module runs the commands, these functions read their output, so the
unit tests run on captured output (tests/unit/fixtures/).
"""

from __future__ import annotations

import re

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._versions import (
    compare_versions,
    major_minor,
    parse_version,
)

# The exact fields cuda_check asks nvidia-smi for, in this order (tests/gpu/capture.sh uses the same).
QUERY_FIELDS = (
    'index',
    'name',
    'uuid',
    'pci.bus_id',
    'driver_version',
    'memory.total',
    'memory.used',
    'compute_cap',
    'persistence_mode',
    'mig.mode.current',
)
QUERY_ARG = '--query-gpu=' + ','.join(QUERY_FIELDS)
FORMAT_ARG = '--format=csv,noheader,nounits'

# nvidia-smi prints these instead of a value when a field does not apply (GB10 unified memory, no
# MIG on consumer parts) or the driver cannot read it.
NOT_AVAILABLE = ('[N/A]', 'N/A', '[Not Supported]', 'Not Supported', '[Unknown Error]', '[Insufficient Permissions]', '')

_CUDA_RE = re.compile(r'CUDA Version\s*:\s*(\d+\.\d+)', re.IGNORECASE)
_SMI_DRIVER_RE = re.compile(r'Driver Version\s*:\s*(\d+(?:\.\d+)+)', re.IGNORECASE)
_NVCC_RE = re.compile(r'release\s+(\d+\.\d+),\s*V(\d+(?:\.\d+)+)')
_NVRM_RE = re.compile(r'^NVRM version:\s*(?P<desc>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)*)\s+(?P<rest>.*)$', re.MULTILINE)
_GCC_RE = re.compile(r'^GCC version:\s*(.*)$', re.MULTILINE)


class NvidiaError(Exception):
    """A failure of the GPU stack with a kind (machine readable) and a hint (what fixes it)."""

    def __init__(self, kind, message, hint=None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint

    def __str__(self):
        if self.hint:
            return '%s Hint: %s' % (self.message, self.hint)
        return self.message


def _na(value):
    return value is None or value.strip() in NOT_AVAILABLE


def _int_or_none(value):
    if _na(value):
        return None
    try:
        return int(float(value.strip()))
    except ValueError:
        raise NvidiaError('parse_error', "nvidia-smi returned '%s' where a number was expected" % value.strip())


def _str_or_none(value):
    return None if _na(value) else value.strip()


def _mode(value):
    """'Enabled'/'Disabled' -> True/False; N/A -> None."""
    if _na(value):
        return None
    lowered = value.strip().lower()
    if lowered in ('enabled', 'enable', 'on', '1'):
        return True
    if lowered in ('disabled', 'disable', 'off', '0'):
        return False
    return None


def parse_query_gpu(text, fields=QUERY_FIELDS):
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` into a list of dicts."""
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(',')]
        if len(cells) != len(fields):
            # A GPU name never holds a comma in NVIDIA's naming, so a count mismatch is a format error.
            raise NvidiaError(
                'parse_error',
                'nvidia-smi --query-gpu line %d has %d fields, expected %d (%s): %r'
                % (lineno, len(cells), len(fields), ','.join(fields), line[:200]))
        row = dict(zip(fields, cells))
        cap = _str_or_none(row.get('compute_cap'))
        if cap is not None:
            try:
                parse_version(cap)
            except ValueError:
                raise NvidiaError('parse_error', "nvidia-smi returned compute capability '%s'" % cap)
        gpus.append({
            'index': _int_or_none(row.get('index')),
            'name': _str_or_none(row.get('name')),
            'uuid': _str_or_none(row.get('uuid')),
            'pci_bus_id': _str_or_none(row.get('pci.bus_id')),
            'driver_version': _str_or_none(row.get('driver_version')),
            'memory_total_mib': _int_or_none(row.get('memory.total')),
            'memory_used_mib': _int_or_none(row.get('memory.used')),
            'compute_capability': cap,
            'persistence_mode': _mode(row.get('persistence_mode')),
            'mig_mode': _mode(row.get('mig.mode.current')),
        })
    return gpus


def parse_cuda_version(text):
    """The CUDA version the driver supports, from `nvidia-smi`, `nvidia-smi -q` or `nvidia-smi --version`."""
    match = _CUDA_RE.search(text or '')
    return match.group(1) if match else None


def parse_smi_driver_version(text):
    match = _SMI_DRIVER_RE.search(text or '')
    return match.group(1) if match else None


def parse_nvcc_version(text):
    """`nvcc --version` -> {'release': '13.0', 'version': '13.0.88'} or None."""
    match = _NVCC_RE.search(text or '')
    if not match:
        return None
    return {'release': match.group(1), 'version': match.group(2)}


def parse_proc_version(text):
    """/proc/driver/nvidia/version -> {'version', 'flavor' (open|proprietary), 'description', 'gcc'}."""
    match = _NVRM_RE.search(text or '')
    if not match:
        return None
    desc = match.group('desc')
    gcc = _GCC_RE.search(text)
    return {
        'version': match.group('version'),
        'flavor': 'open' if 'open kernel module' in desc.lower() else 'proprietary',
        'description': ('%s %s' % (desc, match.group('version'))).strip(),
        'gcc': gcc.group(1).strip() if gcc else None,
    }


def classify_smi_failure(rc, stdout, stderr, proc_version_text=None):
    """Turn a failed nvidia-smi run into an NvidiaError that says what is wrong and what fixes it."""
    text = '%s\n%s' % (stdout or '', stderr or '')
    first = next((line.strip() for line in text.splitlines() if line.strip()), '')
    lowered = text.lower()
    if 'driver/library version mismatch' in lowered:
        nvml = re.search(r'NVML library version:\s*([\d.]+)', text)
        kmod = parse_proc_version(proc_version_text) if proc_version_text else None
        detail = ''
        if nvml and kmod:
            detail = ' (user-space NVML %s, loaded kernel module %s)' % (nvml.group(1), kmod['version'])
        elif kmod:
            detail = ' (loaded kernel module %s)' % kmod['version']
        return NvidiaError(
            'driver_library_mismatch',
            'nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch%s.' % detail,
            'the driver packages were upgraded but the old kernel module is still loaded: reboot the node '
            '(or unload and reload the nvidia modules when no process uses the GPU).')
    if "couldn't communicate with the nvidia driver" in lowered or 'could not communicate with the nvidia driver' in lowered:
        hint = ('the nvidia kernel module is not loaded: check that a module was built for the running kernel '
                '(dkms status, uname -r), that Secure Boot did not refuse an unsigned module (dmesg | grep -i nvidia), '
                'then modprobe nvidia or reboot.')
        return NvidiaError('driver_not_loaded', 'nvidia-smi failed: it could not communicate with the NVIDIA driver.', hint)
    if 'no devices were found' in lowered:
        return NvidiaError(
            'no_gpu',
            'nvidia-smi found no GPU (No devices were found).',
            'the driver is loaded but sees no device: check lspci | grep -i nvidia, that the GPU is passed '
            'through to this VM/container, and dmesg for NVRM errors.')
    if 'is not a valid field to query' in lowered:
        return NvidiaError(
            'unsupported_driver',
            'nvidia-smi refused a query field: %s' % first,
            'this driver is too old for the fields cuda_check reads (compute_cap needs driver >= 510); upgrade the driver.')
    return NvidiaError('nvidia_smi_failed', 'nvidia-smi exited with rc=%s: %s' % (rc, first[:300] or '(no output)'))


def _cap_key(cap):
    return parse_version(cap)


def evaluate(facts, requirements):
    """Check gathered facts against requirements; return a list of human-readable failures.

    facts: dict with gpus, gpu_count, driver_version, cuda_version, nvcc (dict or None),
    kernel_module (dict or None), host_memory_mib.
    requirements: dict with the module's options (None = not required).
    """
    problems = []
    gpus = facts.get('gpus') or []
    driver = facts.get('driver_version')
    cuda = facts.get('cuda_version')
    nvcc = facts.get('nvcc')

    want = requirements.get('gpu_count')
    if want is not None and len(gpus) != want:
        problems.append('gpu_count: found %d GPU(s), required exactly %d' % (len(gpus), want))
    want = requirements.get('min_gpu_count')
    if want is not None and len(gpus) < want:
        problems.append('min_gpu_count: found %d GPU(s), required at least %d' % (len(gpus), want))

    want = requirements.get('min_driver_version')
    if want is not None:
        if driver is None:
            problems.append('min_driver_version: driver version unknown, required >= %s' % want)
        elif compare_versions(driver, want) < 0:
            problems.append('min_driver_version: driver %s is older than the required %s' % (driver, want))

    want = requirements.get('min_cuda_version')
    if want is not None:
        if cuda is None:
            problems.append('min_cuda_version: the driver did not report a CUDA version, required >= %s' % want)
        elif compare_versions(cuda, want) < 0:
            problems.append('min_cuda_version: the driver supports CUDA %s, required >= %s (upgrade the driver)' % (cuda, want))

    want = requirements.get('min_nvcc_version')
    if want is not None:
        if nvcc is None:
            problems.append('min_nvcc_version: nvcc not found (%s), required >= %s: install the CUDA toolkit or set nvcc_path'
                            % (facts.get('nvcc_searched') or 'PATH', want))
        elif compare_versions(nvcc['version'], want) < 0:
            problems.append('min_nvcc_version: nvcc %s is older than the required %s' % (nvcc['version'], want))

    if requirements.get('check_toolkit_compat', True) and nvcc is not None and cuda is not None:
        if compare_versions(major_minor(nvcc['release']), cuda) > 0:
            problems.append(
                'toolkit newer than driver: nvcc %s (CUDA %s) builds code the driver cannot run (it supports CUDA %s): '
                'upgrade the driver or install a toolkit <= %s' % (nvcc['version'], nvcc['release'], cuda, cuda))

    kmod = facts.get('kernel_module')
    if kmod and driver and kmod.get('version') and compare_versions(kmod['version'], driver) != 0:
        problems.append('kernel module %s differs from the user-space driver %s: reboot to load the installed driver'
                        % (kmod['version'], driver))

    allowed = requirements.get('compute_capabilities')
    minimum = requirements.get('min_compute_capability')
    for gpu in gpus:
        cap = gpu.get('compute_capability')
        label = 'GPU %s (%s)' % (gpu.get('index'), gpu.get('name'))
        if allowed:
            if cap is None or all(compare_versions(cap, a) != 0 for a in allowed):
                problems.append('compute_capabilities: %s has compute capability %s, allowed: %s'
                                % (label, cap, ', '.join(allowed)))
        if minimum is not None:
            if cap is None or compare_versions(cap, minimum) < 0:
                problems.append('min_compute_capability: %s has compute capability %s, required >= %s' % (label, cap, minimum))

    want = requirements.get('min_memory_mib')
    if want is not None:
        for gpu in gpus:
            mem = gpu.get('memory_total_mib')
            source = 'memory'
            if mem is None:
                # Unified memory (GB10/DGX Spark): nvidia-smi reports [N/A]; the GPU shares host RAM.
                mem = facts.get('host_memory_mib')
                source = 'unified (host) memory'
            label = 'GPU %s (%s)' % (gpu.get('index'), gpu.get('name'))
            if mem is None:
                problems.append('min_memory_mib: %s memory size unknown, required >= %d MiB' % (label, want))
            elif mem < want:
                problems.append('min_memory_mib: %s has %d MiB %s, required >= %d MiB' % (label, mem, source, want))
    return problems


def parse_meminfo_mib(text):
    match = re.search(r'^MemTotal:\s*(\d+)\s*kB', text or '', re.MULTILINE)
    return int(match.group(1)) // 1024 if match else None
