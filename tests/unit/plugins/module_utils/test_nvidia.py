"""_nvidia: parsers and decisions on nvidia-smi / nvcc / kernel module output.

Fixtures named constructed_* are hand-made from NVIDIA's documented formats (see the fixtures'
README); real_* and ../h200/ are real captures.
"""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _nvidia as nv

FIX = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures')


def text(*parts):
    with open(os.path.join(FIX, *parts)) as handle:
        return handle.read()


def test_query_fields_and_args():
    assert nv.QUERY_ARG.startswith('--query-gpu=index,name,uuid,')
    assert 'compute_cap' in nv.QUERY_FIELDS and 'mig.mode.current' in nv.QUERY_FIELDS
    assert nv.FORMAT_ARG == '--format=csv,noheader,nounits'


def test_parse_h200_query():
    gpus = nv.parse_query_gpu(text('nvidia', 'constructed_h200_query.csv'))
    assert gpus == [{
        'index': 0, 'name': 'NVIDIA H200', 'uuid': 'GPU-3b1f6c2e-8d4a-4f0e-9a57-2c6d1e8b7f10',
        'pci_bus_id': '00000000:18:00.0', 'driver_version': '580.159.04', 'memory_total_mib': 143771,
        'memory_used_mib': 0, 'compute_capability': '9.0', 'persistence_mode': True, 'mig_mode': False,
    }]


def test_parse_gb10_query_unified_memory():
    gpu, = nv.parse_query_gpu(text('nvidia', 'constructed_gb10_query.csv'))
    assert gpu['name'] == 'NVIDIA GB10'
    assert gpu['compute_capability'] == '12.1'
    assert gpu['memory_total_mib'] is None and gpu['memory_used_mib'] is None  # [N/A]
    assert gpu['mig_mode'] is None


def test_parse_eight_gpus():
    gpus = nv.parse_query_gpu(text('nvidia', 'constructed_8xh100_query.csv'))
    assert [g['index'] for g in gpus] == list(range(8))
    assert gpus[4]['mig_mode'] is True and gpus[6]['persistence_mode'] is False
    assert {g['memory_total_mib'] for g in gpus} == {81559}


@pytest.mark.parametrize('value', ['[Not Supported]', '[N/A]', 'N/A', ''])
def test_not_available_values_become_none(value):
    line = '0, NVIDIA X, GPU-1, 0:1:0.0, 580.1, %s, %s, 9.0, %s, %s\n' % (value, value, value, value)
    gpu, = nv.parse_query_gpu(line)
    assert gpu['memory_total_mib'] is None and gpu['persistence_mode'] is None and gpu['mig_mode'] is None


@pytest.mark.parametrize('garbage', [
    '0, NVIDIA H200, GPU-1\n',                                        # too few fields
    '0, NVIDIA H200, GPU-1, b, 580, lots, 0, 9.0, Enabled, Disabled\n',  # memory not a number
    '0, NVIDIA H200, GPU-1, b, 580, 1, 0, sm90, Enabled, Disabled\n',    # bad compute capability
])
def test_parse_query_garbage(garbage):
    with pytest.raises(nv.NvidiaError) as exc:
        nv.parse_query_gpu(garbage)
    assert exc.value.kind == 'parse_error'


def test_parse_empty_query_is_no_gpu_list():
    assert nv.parse_query_gpu('\n') == []


@pytest.mark.parametrize('name, expected', [
    ('constructed_h200_nvidia-smi.txt', '13.0'),
    ('constructed_gb10_nvidia-smi.txt', '13.0'),
    ('constructed_version.txt', '13.0'),
    ('constructed_fail_no_devices.txt', None),
])
def test_parse_cuda_version(name, expected):
    assert nv.parse_cuda_version(text('nvidia', name)) == expected


def test_parse_smi_driver_version():
    assert nv.parse_smi_driver_version(text('nvidia', 'constructed_h200_nvidia-smi.txt')) == '580.159.04'


def test_parse_nvcc_real_capture():
    assert nv.parse_nvcc_version(text('nvidia', 'real_buildhost_nvcc_13.0.txt')) == {'release': '13.0', 'version': '13.0.88'}
    assert nv.parse_nvcc_version(text('nvidia', 'constructed_nvcc_13.1.txt')) == {'release': '13.1', 'version': '13.1.80'}
    assert nv.parse_nvcc_version('bash: nvcc: command not found') is None


@pytest.mark.parametrize('name, version, flavor', [
    ('constructed_proc_version_open_x86_64.txt', '580.159.04', 'open'),
    ('constructed_proc_version_open_aarch64.txt', '580.95.05', 'open'),
    ('constructed_proc_version_proprietary_550.txt', '550.127.05', 'proprietary'),
])
def test_parse_proc_version(name, version, flavor):
    parsed = nv.parse_proc_version(text('nvidia', name))
    assert parsed['version'] == version and parsed['flavor'] == flavor
    assert parsed['gcc'].startswith('gcc version')


def test_parse_proc_version_garbage():
    assert nv.parse_proc_version('hello') is None


@pytest.mark.parametrize('name, rc, kind, hint_word', [
    ('constructed_fail_mismatch.txt', 18, 'driver_library_mismatch', 'reboot'),
    ('constructed_fail_no_devices.txt', 6, 'no_gpu', 'lspci'),
    ('constructed_fail_no_driver_comm.txt', 9, 'driver_not_loaded', 'dkms'),
    ('constructed_fail_invalid_field.txt', 2, 'unsupported_driver', '510'),
])
def test_classify_failures(name, rc, kind, hint_word):
    err = nv.classify_smi_failure(rc, text('nvidia', name), '')
    assert err.kind == kind
    assert hint_word in err.hint
    assert 'Hint:' in str(err)


def test_mismatch_names_both_versions():
    err = nv.classify_smi_failure(18, text('nvidia', 'constructed_fail_mismatch.txt'), '',
                                  text('nvidia', 'constructed_proc_version_proprietary_550.txt'))
    assert 'NVML 580.159' in err.message and 'kernel module 550.127.05' in err.message


def test_classify_unknown_failure_keeps_first_line():
    err = nv.classify_smi_failure(255, '', 'Segmentation fault\nmore')
    assert err.kind == 'nvidia_smi_failed' and 'rc=255' in err.message and 'Segmentation fault' in err.message


def facts(query='constructed_h200_query.csv', cuda='13.0', nvcc='real_buildhost_nvcc_13.0.txt',
          proc='constructed_proc_version_open_x86_64.txt', host=2048000):
    gpus = nv.parse_query_gpu(text('nvidia', query))
    return {
        'gpus': gpus, 'driver_version': gpus[0]['driver_version'], 'cuda_version': cuda,
        'nvcc': nv.parse_nvcc_version(text('nvidia', nvcc)) if nvcc else None,
        'kernel_module': nv.parse_proc_version(text('nvidia', proc)) if proc else None,
        'host_memory_mib': host,
    }


def test_evaluate_h200_all_good():
    req = {'min_driver_version': '580', 'min_cuda_version': '13.0', 'min_nvcc_version': '13.0',
           'compute_capabilities': ['9.0', '12.1'], 'gpu_count': 1, 'min_memory_mib': 140000,
           'min_compute_capability': '8.0', 'check_toolkit_compat': True}
    assert nv.evaluate(facts(), req) == []


def test_evaluate_lists_every_failure():
    req = {'min_driver_version': '999', 'min_cuda_version': '13.1', 'compute_capabilities': ['12.1'],
           'gpu_count': 2, 'min_memory_mib': 200000, 'min_compute_capability': '10.0'}
    problems = nv.evaluate(facts(), req)
    joined = '\n'.join(problems)
    assert len(problems) == 6, problems
    for needle in ('driver 580.159.04 is older than the required 999', 'supports CUDA 13.0, required >= 13.1',
                   'compute capability 9.0, allowed: 12.1', 'found 1 GPU(s), required exactly 2',
                   '143771 MiB memory, required >= 200000', 'required >= 10.0'):
        assert needle in joined


def test_evaluate_toolkit_newer_than_driver():
    problems = nv.evaluate(facts(nvcc='constructed_nvcc_13.1.txt'), {'check_toolkit_compat': True})
    assert len(problems) == 1 and 'toolkit newer than driver' in problems[0] and 'CUDA 13.0' in problems[0]
    assert nv.evaluate(facts(nvcc='constructed_nvcc_13.1.txt'), {'check_toolkit_compat': False}) == []


def test_evaluate_nvcc_missing_only_matters_when_required():
    assert nv.evaluate(facts(nvcc=None), {}) == []
    problems = nv.evaluate(dict(facts(nvcc=None), nvcc_searched='PATH, /usr/local/cuda/bin/nvcc'),
                           {'min_nvcc_version': '12.4'})
    assert problems == ['min_nvcc_version: nvcc not found (PATH, /usr/local/cuda/bin/nvcc), required >= 12.4: '
                        'install the CUDA toolkit or set nvcc_path']


def test_evaluate_kernel_module_differs_from_driver():
    problems = nv.evaluate(facts(proc='constructed_proc_version_proprietary_550.txt'), {})
    assert problems == ['kernel module 550.127.05 differs from the user-space driver 580.159.04: '
                        'reboot to load the installed driver']


def test_evaluate_gb10_uses_host_memory():
    f = facts(query='constructed_gb10_query.csv', proc='constructed_proc_version_open_aarch64.txt', host=124000)
    assert nv.evaluate(f, {'min_memory_mib': 100000, 'compute_capabilities': ['12.1'], 'min_driver_version': '580'}) == []
    problems = nv.evaluate(f, {'min_memory_mib': 130000})
    assert problems == ['min_memory_mib: GPU 0 (NVIDIA GB10) has 124000 MiB unified (host) memory, required >= 130000 MiB']


def test_parse_meminfo():
    assert nv.parse_meminfo_mib('MemTotal:       24683520 kB\nMemFree: 1 kB\n') == 24105
    assert nv.parse_meminfo_mib('garbage') is None


REAL = os.path.join(FIX, 'h200')


@pytest.mark.skipif(not os.path.isdir(REAL), reason='real H200 capture not yet in tests/unit/fixtures/h200 (tests/gpu/capture.sh)')
def test_real_h200_capture_parses():
    gpus = nv.parse_query_gpu(text('h200', 'query.csv'))
    assert len(gpus) >= 1
    assert all(g['name'].startswith('NVIDIA H200') and g['compute_capability'] == '9.0' for g in gpus)
    assert all(g['memory_total_mib'] > 140000 for g in gpus)
    assert gpus[0]['driver_version'].startswith('580.')
    assert nv.parse_cuda_version(text('h200', 'nvidia-smi.txt')) == '13.0'
    assert nv.parse_cuda_version(text('h200', 'nvidia-smi-q.txt')) == '13.0'
    kmod = nv.parse_proc_version(text('h200', 'proc_driver_nvidia_version.txt'))
    assert kmod['version'] == gpus[0]['driver_version']
    nvcc = nv.parse_nvcc_version(text('h200', 'nvcc.txt'))
    assert nvcc['release'] == '13.0'
    f = {'gpus': gpus, 'driver_version': gpus[0]['driver_version'], 'cuda_version': '13.0', 'nvcc': nvcc,
         'kernel_module': kmod}
    assert nv.evaluate(f, {'min_driver_version': '580', 'compute_capabilities': ['9.0'], 'min_nvcc_version': '13.0'}) == []
    assert nv.evaluate(f, {'min_driver_version': '999'})[0].startswith('min_driver_version: driver 580.')
