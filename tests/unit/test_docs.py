"""The variable reference in docs/ is generated from the argument specs and must be current."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_variables_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "tests/docs/gen_variables.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_option_states_its_syntax_class():
    proc = subprocess.run([sys.executable, str(ROOT / "tests/docs/spec_syntax.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_role_has_a_typed_spec_and_a_doc():
    for role in sorted((ROOT / "roles").iterdir()):
        assert (role / "meta" / "argument_specs.yml").is_file(), role.name
        assert (ROOT / "docs" / "roles" / (role.name + ".md")).is_file(), role.name


def _gen():
    sys.path.insert(0, str(ROOT / "tests" / "docs"))
    try:
        import gen_variables
    finally:
        sys.path.pop(0)
    return gen_variables


def test_ansible_markup_renders_as_markdown():
    md = _gen().markdown
    cases = [
        ("C(--flag) and C(a|b)", "`--flag` and `a|b`"),
        ("V(true) -> C(--x), O(vllm_service_model.name=x), RV(figures)", "`true` -> `--x`, `vllm_service_model.name=x`, `figures`"),
        ("I(i mod n), B(never), E(HF_TOKEN), M(llmops.vllm_cluster.openai_load)",
         "*i mod n*, **never**, `HF_TOKEN`, `llmops.vllm_cluster.openai_load`"),
        ("U(https://docs.vllm.ai) or L(the docs, https://docs.vllm.ai/en/latest)",
         "<https://docs.vllm.ai> or [the docs](https://docs.vllm.ai/en/latest)"),
        ("V(a\\)b) and C(x`y)", "`a)b` and `` x`y ``"),
        ("ABC(x) stays, f(C(y))", "ABC(x) stays, f(`y`)"),
    ]
    for text, want in cases:
        assert md(text) == want, (text, md(text))


def test_the_variable_reference_holds_no_raw_markup():
    text = (ROOT / "docs" / "variables.md").read_text()
    import re
    raw = re.findall(r"(?<![A-Za-z0-9_])(?:C|V|O|I|B|U|L|M|RV|E)\([^)]*\)", text)
    assert not raw, raw[:10]


def test_every_relative_link_in_the_docs_resolves():
    import re
    broken = []
    for md in [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text()):
            if not re.match(r"^[a-z]+://", target) and not (md.parent / target).exists():
                broken.append("%s -> %s" % (md.relative_to(ROOT), target))
    assert not broken, broken


def test_the_collection_never_points_at_files_outside_it():
    """The builders' facts page and the seed articles are not part of the collection: the facts users
    need are in docs/. The name is assembled here so that this file does not hold it either."""
    name = "FACTS" + ".md"
    proc = subprocess.run(["git", "grep", "-n", "-I", name, "--", "."],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and not proc.stdout, proc.stdout
