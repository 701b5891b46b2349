"""The Markdown files in the collection tarball work for the user who installed it.

That user has the tarball's files only, runs the playbooks by FQCN and keeps an inventory of their own
copied out of the installed collection. The tarball is built here the way `ansible-galaxy collection
build` builds it (it is that command, into a temporary directory, under a second); its member list is
"shipped". A repository path is "unshipped" when the working tree has it (git's tracked and not ignored
files, plus the git-ignored build output directory `build/`) and the tarball holds nothing at or under
it: Makefile, tests/, molecule/, benchmarks/, requirements/, inventories/lab, .ci, ...

For every shipped Markdown file, outside its contributor part (below):
- every relative link `[text](path)` or `[text](path#anchor)` resolves to a shipped file or directory,
  and the anchor to a heading of that file (GitHub's slug: lower case, punctuation dropped, spaces to
  hyphens, -1, -2... for repeated headings); `(#anchor)` alone names a heading of the file itself;
- no text names an unshipped path (`tests/...`, `molecule/...`, `inventories/lab`, `Makefile`), in
  prose, an inline code span or a fenced code block, and no code span or block runs `make <target>`
  (any target of the Makefile; in prose "make" is a word);
- every `ansible-playbook` command names its playbook by FQCN (`llmops.vllm_cluster.site`, not
  `playbooks/site.yml`), and no `-i`/`--inventory` points into the collection's own `inventories/`
  (the user runs with the inventory they copied out of it).

Contributor parts, where all of that is allowed (links must still resolve):
- docs/development.md, whole: the contributor doc (shipped, but written for a checkout);
- README.md's first fenced code block (the project's rule: the README opens with `make demo` and
  `make test`) and its section headed "Development" (down to the next heading of the same or a higher
  level).

Fails listing file:line and the offending text for each offence.
"""
import fnmatch
import functools
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRIBUTOR_FILES = {"docs/development.md"}
README = "README.md"
README_CONTRIBUTOR_HEADING = "development"
# Git ignores the build output, but the Makefile writes it and a checkout's docs would name it.
UNTRACKED_UNSHIPPED = ["build"]
FQCN_PREFIX = "llmops.vllm_cluster."
# (file, the start of the line) let through: see the module docstring.

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _ansible_galaxy():
    beside = pathlib.Path(sys.executable).parent / "ansible-galaxy"
    return str(beside) if beside.exists() else (shutil.which("ansible-galaxy") or "ansible-galaxy")


@functools.lru_cache(maxsize=None)
def shipped():
    """Every member of the collection tarball (files and directories), relative, no trailing slash."""
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([_ansible_galaxy(), "collection", "build", "--force", "--output-path", out, str(ROOT)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (tarball,) = pathlib.Path(out).glob("*.tar.gz")
        with tarfile.open(tarball) as tar:
            names = {m.name.lstrip("./").rstrip("/") for m in tar.getmembers()}
    names.discard("")
    for name in list(names):
        parts = name.split("/")
        names.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def unshipped():
    """The shortest repository paths that the working tree has and the tarball holds nothing of."""
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    listed = proc.stdout.splitlines()
    found = {(name, True) for name in UNTRACKED_UNSHIPPED}
    for rel in listed:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix not in shipped():
                found.add((prefix, i < len(parts)))
                break
    return sorted(found)


@functools.lru_cache(maxsize=None)
def make_targets():
    text = (ROOT / "Makefile").read_text()
    return sorted(set(re.findall(r"^([A-Za-z][\w.%-]*)\s*:(?!=)", text, re.MULTILINE)))


def unshipped_patterns():
    patterns = []
    for prefix, is_dir in unshipped():
        name = re.escape(prefix)
        if is_dir and "/" not in prefix:
            # `tests/` is a path; `build` or `molecule` alone is a word (a role option, the tool).
            patterns.append(re.compile(r"(?<![\w./~$-])(?:\./)?" + name + r"/"))
        else:
            patterns.append(re.compile(r"(?<![\w./~$-])(?:\./)?" + name + r"(?![\w-])"))
    return patterns


MAKE = re.compile(r"(?<![\w./-])make(?:\s+-\S+)*(?:\s+[A-Z_][A-Z0-9_]*=\S*)*\s+([a-z][\w*.-]*)")
PLAYBOOK = re.compile(r"ansible-playbook((?:[ \t]+(?:\\\n[ \t]*)?[^\s\\]+)+)")
OPTIONS_WITH_VALUE = {"-i", "--inventory", "--inventory-file", "-e", "--extra-vars", "-t", "--tags", "--skip-tags",
                      "-l", "--limit", "-u", "--user", "-f", "--forks", "--vault-id", "--vault-password-file",
                      "--private-key", "--key-file", "-c", "--connection", "-T", "--timeout", "--start-at-task",
                      "-M", "--module-path", "--become-user", "--become-method"}


def slug(text):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def parse(text):
    """(prose with fenced blocks blanked, [(first line, fenced block text)], [(line, level, heading)]).

    Line numbers are kept: a blanked line stays a line."""
    prose, fences, headings = [], [], []
    lines = text.split("\n")
    open_fence, block, start = None, [], 0
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if open_fence is None:
            if match:
                open_fence, block, start = match.group("fence"), [], number + 1
                prose.append("")
                continue
            heading = HEADING.match(line)
            if heading:
                headings.append((number, len(heading.group(1)), heading.group(2)))
            prose.append(line)
        else:
            prose.append("")
            if match and match.group("fence")[0] == open_fence[0] and len(match.group("fence")) >= len(open_fence) \
                    and not line.strip()[len(match.group("fence")):].strip():
                fences.append((start, "\n".join(block)))
                open_fence = None
            else:
                block.append(line)
    if open_fence is not None:
        fences.append((start, "\n".join(block)))
    return "\n".join(prose), fences, headings


def anchors(rel):
    headings = parse((ROOT / rel).read_text(encoding="utf-8"))[2]
    seen, out = {}, set()
    for _line, _level, title in headings:
        base = slug(title)
        count = seen.get(base, 0)
        out.add(base if count == 0 else "%s-%d" % (base, count))
        seen[base] = count + 1
    return out


def contributor_lines(rel, text):
    """The line numbers of rel's contributor part (see the module docstring)."""
    lines = text.split("\n")
    if rel in CONTRIBUTOR_FILES:
        return set(range(1, len(lines) + 1))
    if rel != README:
        return set()
    found = set()
    fences, headings = parse(text)[1:]
    if fences:
        start, block = fences[0]
        found.update(range(start - 1, start + block.count("\n") + 2))
    for index, (number, level, title) in enumerate(headings):
        if title.strip().lower() == README_CONTRIBUTOR_HEADING:
            end = next((n for n, lvl, _title in headings[index + 1:] if lvl <= level), len(lines) + 1)
            found.update(range(number, end))
    return found


def playbook_offences(command):
    """What is wrong with one ansible-playbook command's arguments (a list of strings)."""
    command = command.replace("\\\n", " ")
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    # [--option] and [-e x=y] are a synopsis' optional parts.
    words = [w.strip("[]") for w in words if w.strip("[]")]
    out, index = [], 0
    while index < len(words):
        word = words[index]
        if word.startswith("#") or word in {"|", "&&", ";", "||", ">", "2>&1"}:
            break
        option, _sep, value = word.partition("=")
        if word.startswith("-"):
            if option in {"-i", "--inventory", "--inventory-file"}:
                if not value:
                    index += 1
                    value = words[index] if index < len(words) else ""
                if re.match(r"^(\./)?inventories(/|$)", value):
                    out.append("inventory in the collection's own inventories/ (%s): use the copied one" % value)
            elif option in OPTIONS_WITH_VALUE and not value:
                index += 1
        elif not word.startswith(FQCN_PREFIX) and not word.startswith("<"):
            out.append("playbook by path (%s): by FQCN, %s<name>" % (word, FQCN_PREFIX))
        index += 1
    return out


def offences_in_code(code):
    """[(offset in code, text, why)] for one code span or fenced block."""
    out = []
    for pattern in unshipped_patterns():
        for match in pattern.finditer(code):
            out.append((match.start(), match.group(0), "an unshipped path"))
    targets = make_targets()
    for match in MAKE.finditer(code):
        if any(fnmatch.fnmatchcase(t, match.group(1)) for t in targets):
            out.append((match.start(), match.group(0), "a make target (contributor material)"))
    for match in PLAYBOOK.finditer(code):
        for why in playbook_offences(match.group(1)):
            out.append((match.start(), match.group(0).split("\n")[0], why))
    return out


def link_offences(rel, target):
    """Why a link target of rel is broken, or None."""
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path, _sep, anchor = target.partition("#")
    if path:
        resolved = (pathlib.PurePosixPath(rel).parent / path).as_posix()
        parts = []
        for part in resolved.split("/"):
            if part == "..":
                if not parts:
                    return "points outside the collection"
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        resolved = "/".join(parts)
        if resolved not in shipped():
            return "not in the collection tarball"
    else:
        resolved = rel
    if anchor:
        if not resolved.endswith(".md") or (ROOT / resolved).is_dir():
            return "an anchor into something that is not a Markdown file"
        if anchor not in anchors(resolved):
            return "no heading #%s in %s" % (anchor, resolved)
    return None


def check(rel):
    """['file:line: why: text'] for one shipped Markdown file."""
    text = (ROOT / rel).read_text(encoding="utf-8")
    allowed = contributor_lines(rel, text)
    prose, fences = parse(text)[:2]
    found = []

    def line_of(offset, base_text, base_line):
        return base_line + base_text.count("\n", 0, offset)

    # Code spans cannot cross a blank line; links are read in the prose with code spans blanked.
    spans = []
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", prose):
        for match in CODE_SPAN.finditer(paragraph.group(0)):
            spans.append((paragraph.start() + match.start(2), match.group(2)))
    blanked = list(prose)
    for start, code in spans:
        for i in range(start, start + len(code)):
            if blanked[i] != "\n":
                blanked[i] = " "
    blanked = "".join(blanked)
    links = [(m.start(1), m.group(1)) for m in LINK.finditer(blanked)]
    links += [(m.start(1), m.group(1)) for m in REF_LINK.finditer(blanked)]
    for offset, target in links:
        why = link_offences(rel, target)
        if why:
            found.append((line_of(offset, prose, 1), "broken link: " + why, target))

    for pattern in unshipped_patterns():
        for match in pattern.finditer(blanked):
            found.append((line_of(match.start(), prose, 1), "an unshipped path", match.group(0)))
    for start, code in spans:
        for offset, what, why in offences_in_code(code):
            found.append((line_of(start + offset, prose, 1), why, what))
    for first, block in fences:
        for offset, what, why in offences_in_code(block):
            found.append((line_of(offset, block, first), why, what))
    return ["%s:%d: %s: %s" % (rel, line, why, what) for line, why, what in sorted(found)
            if why.startswith("broken link") or line not in allowed]


def shipped_markdown():
    return sorted(name for name in shipped() if name.endswith(".md") and (ROOT / name).is_file())


def test_the_rules_find_what_they_look_for():
    assert playbook_offences(" playbooks/site.yml -i inventories/dgx_spark --tags nginx_lb") == [
        "playbook by path (playbooks/site.yml): by FQCN, llmops.vllm_cluster.<name>",
        "inventory in the collection's own inventories/ (inventories/dgx_spark): use the copied one"]
    assert playbook_offences(" llmops.vllm_cluster.upgrade -i inventory/ -e upgrade_layer=x --ask-vault-pass") == []
    assert [why for _line, _text, why in offences_in_code("make demo; see tests/unit/x.py and inventories/lab_single")] == [
        "an unshipped path", "an unshipped path", "a make target (contributor material)"]
    assert offences_in_code("make sure dspark_build_method: build, the molecule tool, ./inventory/hosts.yml") == []
    assert slug("5. First `run` (by FQCN), Spark's ready-wait") == "5-first-run-by-fqcn-sparks-ready-wait"
    text = "# T\n```sh\nmake demo\n```\nx `make test`\n## Development\n`make lab-up`\n## Next\n"
    assert contributor_lines(README, text) == {2, 3, 4, 6, 7}


def test_the_shipped_docs_work_from_the_installed_collection():
    docs = shipped_markdown()
    assert "README.md" in docs and "docs/getting-started.md" in docs, docs
    offences = [line for rel in docs for line in check(rel)]
    assert not offences, "%d offences in the shipped docs (the tarball's user has no checkout):\n%s" % (
        len(offences), "\n".join(offences))
