"""The variable reference in docs/ is generated from the argument specs and must be current."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_variables_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "tests/docs/gen_variables.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_role_has_a_typed_spec_and_a_doc():
    for role in sorted((ROOT / "roles").iterdir()):
        assert (role / "meta" / "argument_specs.yml").is_file(), role.name
        assert (ROOT / "docs" / "roles" / (role.name + ".md")).is_file(), role.name
