"""Generate docs/variables.md from every role's meta/argument_specs.yml and from the playbooks' own
variables (playbooks/vars/argument_specs.yml).

    python tests/docs/gen_variables.py          # rewrite docs/variables.md
    python tests/docs/gen_variables.py --check  # exit 1 when docs/variables.md is stale

tests/unit/test_docs.py runs the check, so the reference never drifts from the specs.
"""
import argparse
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "variables.md"
ORDER = ["headless", "network", "firewall", "nvidia_driver", "container_toolkit", "dspark_build",
         "vllm_service", "nginx_lb", "vllm_router", "keepalived", "monitoring", "response_cache"]


# Ansible's documentation markup (ansible-doc's own syntax) as Markdown. C() code, V() a value,
# O() an option, RV() a return value, E() an environment variable, P() a plugin, M() a module:
# code; I() italic, B() bold; U(url) a link; L(text, url) a named link. V(), O(), RV(), E() and P()
# may escape ")" and "\\" with a backslash.
_MARKUP = re.compile(r"(?<![A-Za-z0-9_])(?:(L)\(([^,)]*),\s*([^)]*)\)"
                     r"|(RV|C|V|O|E|P|M|I|B|U)\(((?:\\.|[^\\)])*)\))")


def _code(text):
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return fence + pad + text + pad + fence


def markdown(text):
    """Ansible markup in TEXT rendered as Markdown."""
    def one(match):
        if match.group(1):
            return "[%s](%s)" % (match.group(2).strip(), match.group(3).strip())
        kind, body = match.group(4), match.group(5)
        if kind in ("V", "O", "RV", "E", "P"):
            body = re.sub(r"\\(.)", r"\1", body)
        if kind == "I":
            return "*%s*" % body
        if kind == "B":
            return "**%s**" % body
        if kind == "U":
            return "<%s>" % body
        return _code(body)
    return _MARKUP.sub(one, text).replace("HORIZONTALLINE", "---")


def _text(value):
    if isinstance(value, list):
        return " ".join(markdown(str(v).strip()) for v in value)
    return markdown(str(value or "").strip())


def _cell(value):
    return _text(value).replace("|", "\\|").replace("\n", " ")


def _default(opt):
    if "default" not in opt:
        return "*required*" if opt.get("required") else ""
    val = opt["default"]
    dumped = yaml.safe_dump(val, default_flow_style=True, width=10000).strip()
    if dumped.endswith("\n..."):
        dumped = dumped[:-4]
    dumped = dumped.replace("\n...", "").strip()
    if len(dumped) > 80:
        dumped = dumped[:77] + "..."
    return "`%s`" % dumped.replace("|", "\\|")


def _type(opt):
    kind = opt.get("type", "str")
    if kind == "list" and opt.get("elements"):
        kind = "list of %s" % opt["elements"]
    return kind


def _rows(options, prefix=""):
    for name in sorted(options):
        opt = options[name] or {}
        choices = opt.get("choices")
        desc = _cell(opt.get("description"))
        if choices:
            desc += " Choices: %s." % ", ".join("`%s`" % c for c in choices)
        yield "| `%s%s` | %s | %s | %s |" % (prefix, name, _type(opt), _default(opt), desc)
        if opt.get("options"):
            yield from _rows(opt["options"], prefix="%s%s." % (prefix, name))


def render():
    roles = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))
    roles.sort(key=lambda r: (ORDER.index(r) if r in ORDER else len(ORDER), r))
    out = [
        "# Role variables",
        "",
        "Generated from each role's `meta/argument_specs.yml` (the same text as `ansible-doc -t role`).",
        "Ansible validates these types and choices before a role changes anything: a bad",
        "value fails with the variable's name and the valid values. Then the first task of every role,",
        "`llmops.vllm_cluster.syntax_check`, checks every value (down to list items and mapping keys)",
        "against its syntax class, stated as the description's last sentence (\"Syntax: ...\"): every",
        "refused value is reported at once, with its full path, its class and a valid example, before any",
        "task touches a host (check mode too). A secret's value is never shown.",
        "",
    ]
    for role in roles:
        spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
        if "main" not in spec["argument_specs"]:
            # A layer's component role or its shared base: run by the layer, with the layer's variables.
            continue
        main = spec["argument_specs"]["main"]
        out += ["## %s" % role, "", _text(main.get("short_description")), ""]
        for para in main.get("description") or []:
            out += [_text(para), ""]
        out += ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
        out += list(_rows(main.get("options") or {}))
        out.append("")
    books = yaml.safe_load((ROOT / "playbooks" / "vars" / "argument_specs.yml").read_text())["argument_specs"]
    out += ["# Playbook variables", "",
            "The variables the playbooks take themselves (with `-e`, or in the inventory). The first task of",
            "each playbook checks them against their syntax classes, as a role's preflight does, before any",
            "host is contacted.", ""]
    for name, entry in books.items():
        out += ["## %s" % name, "", _text(entry.get("short_description")), ""]
        out += ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
        out += list(_rows(entry.get("options") or {}))
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("docs/variables.md is stale: run python tests/docs/gen_variables.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
