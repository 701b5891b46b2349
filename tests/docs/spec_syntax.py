"""Writes each option's syntax class, in words, as the last line of its description in the roles'
meta/argument_specs.yml and in playbooks/vars/argument_specs.yml ("Syntax: ..."), from
plugins/plugin_utils/_syntax_table.py (TABLE for the roles, PLAYBOOKS per playbook entry).

    python tests/docs/spec_syntax.py          # rewrite the descriptions
    python tests/docs/spec_syntax.py --check  # exit 1 when one is stale (tests/unit/test_docs.py)

The files are edited in place, line by line, at the positions PyYAML reports: comments and layout stay.
"""
import argparse
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax, _syntax_table  # noqa: E402

PREFIX = "Syntax: "


def _item(text, indent):
    dumped = yaml.safe_dump([text], width=136 - indent, allow_unicode=True).rstrip("\n")
    return [(" " * indent) + line if i == 0 else (" " * (indent + 2)) + line.lstrip()
            for i, line in enumerate(dumped.splitlines())]


def _edits(node, table, lines, path_prefix, out):
    """Collects (start_line, end_line, new_lines) for every option mapping under an `options` node."""
    for key_node, opt_node in node.value:
        name = key_node.value
        path = path_prefix + name
        if not isinstance(opt_node, yaml.MappingNode):
            continue
        spec = yaml.safe_load(yaml.serialize(opt_node))
        words = _syntax.summary(table, path, spec)
        for k, v in opt_node.value:
            if k.value == "description" and words:
                text = PREFIX + words
                if isinstance(v, yaml.SequenceNode):
                    items = v.value
                    last = items[-1]
                    indent = last.start_mark.column - 2
                    if isinstance(last, yaml.ScalarNode) and last.value.startswith(PREFIX):
                        start = last.start_mark.line
                        end = last.end_mark.line if last.end_mark.column else last.end_mark.line - 1
                        out.append((start, end, _item(text, indent)))
                    else:
                        end = last.end_mark.line if last.end_mark.column else last.end_mark.line - 1
                        out.append((end + 1, end, _item(text, indent)))
                else:
                    indent = k.start_mark.column
                    start, end = k.start_mark.line, v.end_mark.line if v.end_mark.column else v.end_mark.line - 1
                    new = [" " * indent + "description:"] + _item(v.value, indent + 2) + _item(text, indent + 2)
                    out.append((start, end, new))
        for k, v in opt_node.value:
            if k.value == "options" and isinstance(v, yaml.MappingNode):
                sub = path + ("[]." if spec.get("type") == "list" else ".")
                _edits(v, table, lines, sub, out)


def rewrite(path, role):
    """The spec file at PATH with its syntax lines current; ROLE None: the playbooks' file (a table per entry)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    root = yaml.compose(text)
    edits = []
    for k, v in root.value:
        if k.value != "argument_specs":
            continue
        for ep, entry in v.value:
            table = _syntax_table.TABLE.get(role, {}) if role else _syntax_table.PLAYBOOKS.get(ep.value, {})
            for ek, ev in entry.value:
                if ek.value == "options":
                    _edits(ev, table, lines, "", edits)
    for start, end, new in sorted(edits, key=lambda e: -e[0]):
        lines[start:end + 1] = new
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    specs = [(spec, spec.parent.parent.name) for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml"))]
    specs.append((ROOT / "playbooks" / "vars" / "argument_specs.yml", None))
    for spec, role in specs:
        new = rewrite(spec, role)
        if new != spec.read_text(encoding="utf-8"):
            stale.append(str(spec.relative_to(ROOT)))
            if not args.check:
                spec.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("stale syntax lines in %s: run python tests/docs/spec_syntax.py" % ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
