"""The code and its docs say what and why, never when: no reference to an issue number, a named
run ("run E"), a working session or a calendar date in roles, plugins, playbooks, scenarios, tests,
docs, the Makefile or the README. History belongs in git and in changelogs/fragments; dated
measurements in benchmarks/results.

Fails naming every file:line that matches, with the text that matched.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ["roles", "plugins", "playbooks", "molecule", "tests", "docs", "Makefile", "README.md"]
# docs/seed-corrections.md quotes the seed articles it corrects (their dates included).
# This file names examples of what it looks for.
EXCLUDED = ["docs/seed-corrections.md", "changelogs", "tests/unit/test_no_history.py"]
TEXT_SUFFIXES = {"", ".py", ".yml", ".yaml", ".md", ".j2", ".sh", ".cfg", ".ini", ".txt", ".toml", ".json", ".service", ".conf"}

HISTORY = re.compile(
    r"(?P<issue>\bissues?[ _-]?#?\d+(?:\s*(?:,|and)\s*\d+)*)"
    r"|(?P<run>\b[Rr]uns? [A-Z]\b(?![(\w]))"
    r"|(?P<session>\b(?:this|last|previous|earlier|next|that|same|a later) session\b|\bsession \d+\b)"
    r"|(?P<date>\b20[2-9]\d-[01]\d-[0-3]\d\b)",
    re.IGNORECASE,
)
# Not history: a fixed commit date that makes the lab's stand-in git repository reproducible.
ALLOWED_LINE = re.compile(r"GIT_(?:AUTHOR|COMMITTER)_DATE=")


def scanned_files():
    for entry in SCANNED:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            if any(rel == e or rel.startswith(e + "/") for e in EXCLUDED):
                continue
            if f.suffix not in TEXT_SUFFIXES or "/fixtures/" in rel or "__pycache__" in rel:
                continue
            yield rel, f


def find_history(text):
    """[(line number, matched text)] for every reference to history in text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if ALLOWED_LINE.search(line):
            continue
        for match in HISTORY.finditer(line):
            # "Run A" must be a capital letter: "run a check" is not a run's name.
            if match.group("run") and not match.group("run")[-1].isupper():
                continue
            found.append((number, match.group(0)))
    return found


def test_the_pattern_finds_history_and_leaves_ordinary_words():
    assert find_history("# fixed in issue 8\nRun E passed\n(issues 6, 8)\nthis session\nmeasured 2026-12-03") == [
        (1, "issue 8"), (2, "Run E"), (3, "issues 6, 8"), (4, "this session"), (5, "2026-12-03")]
    assert find_history('@pytest.fixture(scope="session")\nRun C(docker run --rm)\nrun a check\n'
                        'a GUI session\ntouch -d 2000-01-01\nGIT_AUTHOR_DATE="2026-01-01T00:00:00Z"\n') == []


def test_no_history_in_the_code_or_docs():
    hits = []
    for rel, path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{rel}:{number}: {found!r}" for number, found in find_history(text)]
    assert not hits, "history in the code (belongs in git and changelogs/fragments):\n" + "\n".join(hits)
