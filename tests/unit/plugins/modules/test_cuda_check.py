"""cuda_check end to end (main()) on this host and on replayed nvidia-smi/nvcc output.

The replay: a small shell script standing in for nvidia-smi/nvcc that prints a fixture file (a real
capture or a constructed one, see fixtures/nvidia/README.md) and exits with the fixture's code, so
the module's command lines, fallbacks and decisions run unchanged.
"""
from __future__ import annotations

import os
import shutil
import stat

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.modules import cuda_check

FIX = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures')
NV = os.path.join(FIX, 'nvidia')
H200 = os.path.join(FIX, 'h200')


def replay(tmp_path, name, query=None, query_rc=0, version=None, version_rc=0, banner=None, banner_rc=0):
    """Write an executable that answers like nvidia-smi from fixture files; return its path."""
    def cat(path, rc):
        if path is None:
            return 'echo "unexpected call" >&2; exit 99'
        return 'cat %s; exit %d' % (os.path.abspath(path), rc)
    script = tmp_path / name
    calls = tmp_path / (name + '.calls')
    lines = [
        '#!/bin/sh',
        'echo "$@" >> %s' % calls,
        'case "$1" in',
        '  --query-gpu=*) %s ;;' % cat(query, query_rc),
        '  --version) %s ;;' % cat(version, version_rc),
        '  "") %s ;;' % cat(banner, banner_rc),
        'esac',
        'echo "unexpected arguments: $*" >&2; exit 98',
    ]
    script.write_text('\n'.join(lines) + '\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def nvcc(tmp_path, fixture):
    script = tmp_path / 'nvcc'
    script.write_text('#!/bin/sh\n[ "$1" = --version ] && cat %s\n' % os.path.abspath(fixture))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture
def host(monkeypatch):
    """Point the module's /proc reads at fixture files (set per test)."""
    def set_host(proc_version=None, meminfo_mib=None, tmp=None):
        monkeypatch.setattr(cuda_check, 'PROC_VERSION', proc_version or '/nonexistent/nvidia/version')
        if meminfo_mib is not None:
            path = tmp / 'meminfo'
            path.write_text('MemTotal:       %d kB\n' % (meminfo_mib * 1024))
            monkeypatch.setattr(cuda_check, 'MEMINFO', str(path))
    return set_host


def test_h200_constructed_passes(tmp_path, run_module, host):
    host(os.path.join(NV, 'constructed_proc_version_open_x86_64.txt'))
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(NV, 'constructed_h200_query.csv'),
                 version=os.path.join(NV, 'constructed_version.txt'))
    result, failed = run_module(cuda_check, {
        'nvidia_smi_path': smi, 'nvcc_path': nvcc(tmp_path, os.path.join(NV, 'real_buildhost_nvcc_13.0.txt')),
        'min_driver_version': '580', 'min_cuda_version': '13.0', 'min_nvcc_version': '13.0',
        'compute_capabilities': ['9.0', '12.1'], 'gpu_count': 1, 'min_memory_mib': 140000})
    assert not failed, result
    assert result['gpu_count'] == 1 and result['gpus'][0]['name'] == 'NVIDIA H200'
    assert result['driver_version'] == '580.159.04' and result['cuda_version'] == '13.0'
    assert result['nvcc']['version'] == '13.0.88' and result['kernel_module']['flavor'] == 'open'
    assert result['unified_memory'] is False and result['failed_requirements'] == [] and not result['changed']
    calls = (tmp_path / 'nvidia-smi.calls').read_text().split('\n')
    assert calls[0] == '--query-gpu=%s --format=csv,noheader,nounits' % ','.join(cuda_check_fields())
    assert calls[1] == '--version'


def cuda_check_fields():
    from ansible_collections.llmops.vllm_cluster.plugins.module_utils._nvidia import QUERY_FIELDS
    return QUERY_FIELDS


def test_old_driver_without_version_flag_falls_back_to_banner(tmp_path, run_module, host):
    host(os.path.join(NV, 'constructed_proc_version_open_x86_64.txt'))
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(NV, 'constructed_h200_query.csv'),
                 version=os.path.join(NV, 'constructed_fail_invalid_field.txt'), version_rc=2,
                 banner=os.path.join(NV, 'constructed_h200_nvidia-smi.txt'))
    result, failed = run_module(cuda_check, {'nvidia_smi_path': smi, 'nvcc_path': str(tmp_path / 'none')})
    assert not failed and result['cuda_version'] == '13.0' and result['nvcc'] is None


def test_gb10_unified_memory(tmp_path, run_module, host):
    host(os.path.join(NV, 'constructed_proc_version_open_aarch64.txt'), meminfo_mib=124000, tmp=tmp_path)
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(NV, 'constructed_gb10_query.csv'),
                 version=os.path.join(NV, 'constructed_gb10_nvidia-smi.txt'))
    args = {'nvidia_smi_path': smi, 'nvcc_path': str(tmp_path / 'none'), 'compute_capabilities': ['12.1'],
            'min_driver_version': '580', 'min_memory_mib': 100000}
    result, failed = run_module(cuda_check, args)
    assert not failed, result
    assert result['unified_memory'] is True and result['host_memory_mib'] == 124000
    assert result['gpus'][0]['memory_total_mib'] is None and result['gpus'][0]['compute_capability'] == '12.1'
    result, failed = run_module(cuda_check, dict(args, min_memory_mib=128000, min_nvcc_version='13.0'))
    assert failed and result['failure_kind'] == 'requirements'
    assert len(result['failed_requirements']) == 2
    assert '124000 MiB unified (host) memory, required >= 128000 MiB' in result['msg']
    assert 'nvcc not found' in result['msg']


def test_every_unmet_requirement_in_one_message(tmp_path, run_module, host):
    host(os.path.join(NV, 'constructed_proc_version_open_x86_64.txt'))
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(NV, 'constructed_h200_query.csv'),
                 version=os.path.join(NV, 'constructed_version.txt'))
    result, failed = run_module(cuda_check, {
        'nvidia_smi_path': smi, 'nvcc_path': nvcc(tmp_path, os.path.join(NV, 'constructed_nvcc_13.1.txt')),
        'min_driver_version': '999', 'compute_capabilities': ['12.1'], 'gpu_count': 4})
    assert failed
    assert result['msg'].startswith('GPU stack check failed (4 problems): ')
    for needle in ('driver 580.159.04 is older than the required 999', 'allowed: 12.1',
                   'required exactly 4', 'toolkit newer than driver: nvcc 13.1.80'):
        assert needle in result['msg']
    assert result['gpus'][0]['uuid']  # facts still returned with the failure


@pytest.mark.parametrize('fixture, rc, kind, words', [
    ('constructed_fail_mismatch.txt', 18, 'driver_library_mismatch', 'reboot the node'),
    ('constructed_fail_no_devices.txt', 6, 'no_gpu', 'sees no device'),
    ('constructed_fail_no_driver_comm.txt', 9, 'driver_not_loaded', 'Secure Boot'),
])
def test_nvidia_smi_failures_are_explained(tmp_path, run_module, host, fixture, rc, kind, words):
    host(os.path.join(NV, 'constructed_proc_version_open_x86_64.txt'))
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(NV, fixture), query_rc=rc)
    result, failed = run_module(cuda_check, {'nvidia_smi_path': smi, 'nvcc_path': str(tmp_path / 'none')})
    assert failed and result['failure_kind'] == kind and words in result['msg'] and words in result['hint']


def test_empty_query_output_is_no_gpu(tmp_path, run_module, host):
    host()
    empty = tmp_path / 'empty.csv'
    empty.write_text('')
    smi = replay(tmp_path, 'nvidia-smi', query=str(empty))
    result, failed = run_module(cuda_check, {'nvidia_smi_path': smi, 'nvcc_path': str(tmp_path / 'none')})
    assert failed and result['failure_kind'] == 'no_gpu'


@pytest.mark.skipif(shutil.which('nvidia-smi') is not None or os.path.exists('/proc/driver/nvidia/version'),
                    reason='this host has an NVIDIA driver')
def test_this_host_has_no_driver(run_module, tmp_path):
    """Real: the build/CI machine has no NVIDIA driver; the module must say so."""
    result, failed = run_module(cuda_check, {'min_driver_version': '580', 'nvcc_path': str(tmp_path / 'none')})
    assert failed and result['failure_kind'] == 'no_driver'
    assert 'no NVIDIA driver is installed' in result['msg'] and 'install the NVIDIA driver' in result['hint']
    assert result['kernel_module'] is None and result['host_memory_mib'] > 0


def test_smi_present_but_module_missing_names_utils(tmp_path, run_module, host):
    host(os.path.join(NV, 'constructed_proc_version_open_x86_64.txt'))
    result, failed = run_module(cuda_check, {'nvidia_smi_path': str(tmp_path / 'nvidia-smi'),
                                             'nvcc_path': str(tmp_path / 'none')})
    assert failed and result['failure_kind'] == 'no_driver'
    assert 'kernel module 580.159.04 is loaded' in result['msg'] and 'nvidia-utils' in result['hint']


@pytest.mark.parametrize('args, words', [
    ({'min_driver_version': 'latest'}, "min_driver_version: 'latest' is not a dotted numeric version"),
    ({'min_cuda_version': '13.x'}, 'min_cuda_version'),
    ({'compute_capabilities': ['sm_90']}, "'sm_90' is not a compute capability"),
    ({'compute_capabilities': ['9']}, "'9' is not a compute capability"),
    ({'compute_capabilities': []}, 'an empty list allows no GPU'),
    ({'gpu_count': -1}, 'gpu_count must be >= 0'),
    ({'min_memory_mib': -5}, 'min_memory_mib must be >= 0'),
])
def test_bad_options_fail_before_running_anything(tmp_path, run_module, host, args, words):
    host()
    smi = replay(tmp_path, 'nvidia-smi')
    result, failed = run_module(cuda_check, dict(args, nvidia_smi_path=smi))
    assert failed and words in result['msg'] and result['failure_kind'] == 'invalid_options'
    assert not (tmp_path / 'nvidia-smi.calls').exists()


def test_unknown_option_rejected(run_module):
    result, failed = run_module(cuda_check, {'min_driver': '580'})
    assert failed and 'Unsupported parameters' in result['msg']


@pytest.mark.skipif(not os.path.isdir(H200), reason='real H200 capture not yet in tests/unit/fixtures/h200 (tests/gpu/capture.sh)')
def test_real_h200_replay_and_recorded_module_runs(tmp_path, run_module, host):
    host(os.path.join(H200, 'proc_driver_nvidia_version.txt'))
    smi = replay(tmp_path, 'nvidia-smi', query=os.path.join(H200, 'query.csv'),
                 version=os.path.join(H200, 'nvidia-smi-version.txt'), banner=os.path.join(H200, 'nvidia-smi.txt'))
    args = {'nvidia_smi_path': smi, 'nvcc_path': nvcc(tmp_path, os.path.join(H200, 'nvcc.txt')),
            'min_driver_version': '580', 'min_cuda_version': '13.0', 'compute_capabilities': ['9.0'], 'gpu_count': 1}
    result, failed = run_module(cuda_check, args)
    assert not failed, result
    assert result['gpus'][0]['name'] == 'NVIDIA H200' and result['cuda_version'] == '13.0'
    result, failed = run_module(cuda_check, dict(args, min_driver_version='999'))
    assert failed and 'is older than the required 999' in result['msg']
    # The module's own runs on the GPU host, through ansible (recorded by capture.sh).
    import json
    with open(os.path.join(H200, 'cuda_check_pass.json')) as handle:
        passed = json.load(handle)
    with open(os.path.join(H200, 'cuda_check_fail.json')) as handle:
        refused = json.load(handle)
    with open(os.path.join(H200, 'cuda_check_pass.rc')) as handle:
        assert handle.read().strip() == '0'
    with open(os.path.join(H200, 'cuda_check_fail.rc')) as handle:
        assert handle.read().strip() != '0'  # the tree callback stores the result without 'failed'
    assert passed['failed_requirements'] == [] and passed['gpus'][0]['compute_capability'] == '9.0'
    assert passed['kernel_module']['version'] == passed['driver_version'] == '580.159.04'
    assert passed['nvcc']['version'] == '13.0.88' and passed['unified_memory'] is False
    assert refused['failure_kind'] == 'requirements'
    assert refused['failed_requirements'] == ['min_driver_version: driver 580.159.04 is older than the required 999']
    # The replay of the captured output gives the very facts the module returned on the host.
    result, failed = run_module(cuda_check, args)
    for key in ('gpus', 'gpu_count', 'driver_version', 'cuda_version', 'kernel_module'):
        assert result[key] == passed[key], key
