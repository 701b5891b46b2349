#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: cuda_check
short_description: Validate a node's NVIDIA GPU stack (driver, CUDA, toolkit, GPUs)
version_added: 0.1.0
description:
  - Reads the GPUs (count, name, UUID, memory, compute capability, persistence and MIG mode) and the
    driver version from C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), the CUDA version
    the driver supports from C(nvidia-smi --version) (or the C(nvidia-smi) banner), the C(nvcc)
    version when a CUDA toolkit is installed, and the loaded kernel module from
    C(/proc/driver/nvidia/version).
  - Checks the optional requirements and fails with every unmet one listed in one message.
  - Always checks the classic traps, a CUDA toolkit (C(nvcc)) newer than the CUDA version the driver
    supports, and a loaded kernel module that differs from the installed user-space driver.
  - Tells apart and explains a missing driver, C(nvidia-smi) failing (for example
    C(Driver/library version mismatch) after a driver upgrade without reboot), a driver that sees no
    GPU, and a missing C(nvcc) (only an error when O(min_nvcc_version) is set).
  - On unified-memory GPUs (NVIDIA GB10 / DGX Spark) C(nvidia-smi) reports memory as C([N/A]); the
    module then returns C(unified_memory=true) and checks O(min_memory_mib) against the host memory.
  - Read-only; runs the same in check mode.
author:
  - llmops.vllm_cluster developers (@llmops)
extends_documentation_fragment:
  - llmops.vllm_cluster.read_only
options:
  nvidia_smi_path:
    description:
      - Name or path of C(nvidia-smi). A bare name is looked up in E(PATH).
    type: str
    default: nvidia-smi
  nvcc_path:
    description:
      - Path of C(nvcc). When not set, E(PATH) is searched, then C(/usr/local/cuda/bin/nvcc).
    type: path
  min_driver_version:
    description:
      - Lowest acceptable driver version, for example V(580) or V(580.95.05).
    type: str
  min_cuda_version:
    description:
      - Lowest acceptable CUDA version supported by the driver (as C(nvidia-smi) reports it), for example V(13.0).
    type: str
  min_nvcc_version:
    description:
      - Lowest acceptable C(nvcc) version, for example V(13.0). When set, a missing C(nvcc) is an error.
    type: str
  compute_capabilities:
    description:
      - Compute capabilities every GPU must have one of, for example V(["9.0", "12.1"]) (H100/H200, GB10).
    type: list
    elements: str
  min_compute_capability:
    description:
      - Lowest acceptable compute capability for every GPU, for example V(8.0).
    type: str
  gpu_count:
    description:
      - Exact number of GPUs the node must show.
    type: int
  min_gpu_count:
    description:
      - Smallest number of GPUs the node must show.
    type: int
  min_memory_mib:
    description:
      - Smallest memory per GPU, in MiB. For unified-memory GPUs the host memory is used.
    type: int
  check_toolkit_compat:
    description:
      - Fail when the installed C(nvcc) is newer than the CUDA version the driver supports.
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check mode and return the same result without changing the target.
    support: full
    details: The module only reads; it gathers and checks in check mode too.
notes:
  - Needs the NVIDIA driver's C(nvidia-smi) (driver 510 or later for the C(compute_cap) field).
seealso:
  - name: nvidia-smi documentation
    description: The query fields and their meaning.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
'''

EXAMPLES = r'''
- name: An H200 server runs driver 580 and CUDA 13 with a matching toolkit
  llmops.vllm_cluster.cuda_check:
    min_driver_version: "580"
    min_cuda_version: "13.0"
    compute_capabilities: ["9.0"]
    gpu_count: 1

- name: A DGX Spark (GB10, sm_121, unified memory) is ready for vLLM
  llmops.vllm_cluster.cuda_check:
    min_driver_version: "580"
    compute_capabilities: ["12.1"]
    min_memory_mib: 100000
    min_nvcc_version: "13.0"
  register: gpu

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ gpu.gpu_count }} x {{ gpu.gpus[0].name }}, driver {{ gpu.driver_version }}, CUDA {{ gpu.cuda_version }}"
'''

RETURN = r'''
gpus:
  description: One entry per GPU; fields that C(nvidia-smi) reports as C([N/A]) or C([Not Supported]) are null.
  returned: when nvidia-smi answered
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    uuid:
      description: GPU UUID.
      type: str
    pci_bus_id:
      description: PCI bus id.
      type: str
    driver_version:
      description: Driver version reported for this GPU.
      type: str
    memory_total_mib:
      description: Total memory in MiB; null on unified-memory GPUs.
      type: int
      sample: 143771
    memory_used_mib:
      description: Used memory in MiB; null on unified-memory GPUs.
      type: int
    compute_capability:
      description: Compute capability.
      type: str
      sample: "9.0"
    persistence_mode:
      description: Whether persistence mode is on; null when not reported.
      type: bool
    mig_mode:
      description: Whether MIG mode is on; null when the GPU has no MIG.
      type: bool
  sample:
    - index: 0
      name: NVIDIA H200
      compute_capability: "9.0"
      memory_total_mib: 143771
gpu_count:
  description: Number of GPUs found.
  returned: when nvidia-smi answered
  type: int
  sample: 1
driver_version:
  description: Installed driver version.
  returned: when nvidia-smi answered
  type: str
  sample: 580.159.04
cuda_version:
  description: Highest CUDA version the driver supports, as C(nvidia-smi) reports it; null if not reported.
  returned: when nvidia-smi answered
  type: str
  sample: "13.0"
nvcc:
  description: The CUDA toolkit compiler found, or null.
  returned: always
  type: dict
  contains:
    path:
      description: Path of C(nvcc).
      type: str
    release:
      description: CUDA release of the toolkit.
      type: str
      sample: "13.0"
    version:
      description: Full C(nvcc) version.
      type: str
      sample: 13.0.88
  sample: {"path": "/usr/local/cuda/bin/nvcc", "release": "13.0", "version": "13.0.88"}
kernel_module:
  description: The loaded NVIDIA kernel module from C(/proc/driver/nvidia/version), or null when none is loaded.
  returned: always
  type: dict
  contains:
    version:
      description: Module version.
      type: str
    flavor:
      description: V(open) (open GPU kernel module) or V(proprietary).
      type: str
    description:
      description: The module's NVRM line.
      type: str
    gcc:
      description: Compiler the module was built with.
      type: str
  sample:
    version: 580.159.04
    flavor: open
    gcc: gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)
    description: 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build'
unified_memory:
  description: True when the GPUs report no memory of their own (GB10 / DGX Spark share host memory).
  returned: when nvidia-smi answered
  type: bool
  sample: false
host_memory_mib:
  description: Host memory in MiB (C(MemTotal)), used for unified-memory GPUs.
  returned: always
  type: int
  sample: 2063688
failed_requirements:
  description: Every unmet requirement, one sentence each; empty on success.
  returned: always
  type: list
  elements: str
  sample: ["compute capability 9.0 is below the required 12.1"]
failure_kind:
  description:
    - On failure, what kind of failure; one of V(no_driver), V(driver_not_loaded), V(driver_library_mismatch),
      V(no_gpu), V(unsupported_driver), V(nvidia_smi_failed), V(parse_error), V(requirements).
  returned: failure
  type: str
  sample: "driver_library_mismatch"
hint:
  description: On failure, what usually fixes it.
  returned: failure
  type: str
  sample: "the driver packages were upgraded but the loaded kernel module is older: reboot the node"
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._nvidia import (
    FORMAT_ARG,
    QUERY_ARG,
    NvidiaError,
    classify_smi_failure,
    evaluate,
    parse_cuda_version,
    parse_meminfo_mib,
    parse_nvcc_version,
    parse_proc_version,
    parse_query_gpu,
)
from ansible_collections.llmops.vllm_cluster.plugins.module_utils._versions import parse_version

PROC_VERSION = '/proc/driver/nvidia/version'
MEMINFO = '/proc/meminfo'
DEFAULT_NVCC = '/usr/local/cuda/bin/nvcc'
VERSION_OPTIONS = ('min_driver_version', 'min_cuda_version', 'min_nvcc_version', 'min_compute_capability')


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _validate(module):
    params = module.params
    problems = []
    for name in VERSION_OPTIONS:
        if params[name] is not None:
            try:
                parse_version(params[name])
            except ValueError as exc:
                problems.append('%s: %s' % (name, exc))
    for cap in params['compute_capabilities'] or []:
        try:
            if len(parse_version(cap)) != 2:
                raise ValueError('')
        except ValueError:
            problems.append("compute_capabilities: '%s' is not a compute capability such as 9.0 or 12.1" % cap)
    if params['compute_capabilities'] is not None and not params['compute_capabilities']:
        problems.append('compute_capabilities: an empty list allows no GPU; leave it unset to accept any')
    for name in ('gpu_count', 'min_gpu_count', 'min_memory_mib'):
        if params[name] is not None and params[name] < 0:
            problems.append('%s must be >= 0, got %d' % (name, params[name]))
    if problems:
        module.fail_json(msg='Invalid options: ' + '; '.join(problems), failure_kind='invalid_options')


def _find_nvcc(module):
    configured = module.params['nvcc_path']
    if configured:
        return (configured if os.path.isfile(configured) else None), configured
    found = module.get_bin_path('nvcc')
    if found:
        return found, 'PATH'
    if os.path.isfile(DEFAULT_NVCC):
        return DEFAULT_NVCC, 'PATH, %s' % DEFAULT_NVCC
    return None, 'PATH, %s' % DEFAULT_NVCC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            nvcc_path=dict(type='path'),
            min_driver_version=dict(type='str'),
            min_cuda_version=dict(type='str'),
            min_nvcc_version=dict(type='str'),
            compute_capabilities=dict(type='list', elements='str'),
            min_compute_capability=dict(type='str'),
            gpu_count=dict(type='int'),
            min_gpu_count=dict(type='int'),
            min_memory_mib=dict(type='int'),
            check_toolkit_compat=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    _validate(module)
    params = module.params

    proc_text = _read(PROC_VERSION)
    kernel_module = parse_proc_version(proc_text) if proc_text else None
    host_memory_mib = parse_meminfo_mib(_read(MEMINFO))
    result = dict(changed=False, nvcc=None, kernel_module=kernel_module, host_memory_mib=host_memory_mib,
                  failed_requirements=[])

    nvcc_bin, searched = _find_nvcc(module)
    nvcc = None
    if nvcc_bin:
        rc, out, err = module.run_command([nvcc_bin, '--version'])
        parsed = parse_nvcc_version(out) if rc == 0 else None
        if parsed:
            nvcc = dict(parsed, path=nvcc_bin)
        else:
            module.warn('%s --version failed (rc=%s): %s' % (nvcc_bin, rc, (err or out).strip()[:200]))
    result['nvcc'] = nvcc

    smi = params['nvidia_smi_path']
    smi_bin = smi if os.path.sep in smi else module.get_bin_path(smi)
    if not smi_bin or not os.path.isfile(smi_bin):
        if kernel_module:
            msg = ('%s not found, but NVIDIA kernel module %s is loaded: the driver\'s user-space tools are missing.'
                   % (smi, kernel_module['version']))
            hint = 'install the utilities of the same driver branch (for example nvidia-utils-580 or nvidia-driver-580-open).'
        else:
            msg = '%s not found and no NVIDIA kernel module is loaded (%s is absent): no NVIDIA driver is installed.' % (
                smi, PROC_VERSION)
            hint = 'install the NVIDIA driver (R580 or later for GB10 and CUDA 13), then reboot.'
        result['failed_requirements'] = [msg]
        module.fail_json(msg='%s Hint: %s' % (msg, hint), failure_kind='no_driver', hint=hint, **result)

    try:
        rc, out, err = module.run_command([smi_bin, QUERY_ARG, FORMAT_ARG])
        if rc != 0:
            raise classify_smi_failure(rc, out, err, proc_text)
        gpus = parse_query_gpu(out)
        if not gpus:
            raise classify_smi_failure(6, out or 'No devices were found', err, proc_text)
    except NvidiaError as exc:
        result['failed_requirements'] = [exc.message]
        module.fail_json(msg=str(exc), failure_kind=exc.kind, hint=exc.hint, **result)

    cuda_version = None
    rc, out, err = module.run_command([smi_bin, '--version'])
    if rc == 0:
        cuda_version = parse_cuda_version(out)
    if cuda_version is None:
        rc, out, err = module.run_command([smi_bin])
        cuda_version = parse_cuda_version(out) if rc == 0 else None

    result.update(
        gpus=gpus,
        gpu_count=len(gpus),
        driver_version=gpus[0]['driver_version'],
        cuda_version=cuda_version,
        unified_memory=all(g['memory_total_mib'] is None for g in gpus),
    )
    facts = dict(result, nvcc_searched=searched)
    problems = evaluate(facts, params)
    result['failed_requirements'] = problems
    if problems:
        module.fail_json(msg='GPU stack check failed (%d problem%s): %s' % (
            len(problems), '' if len(problems) == 1 else 's', '; '.join(problems)),
            failure_kind='requirements', hint='see failed_requirements', **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
