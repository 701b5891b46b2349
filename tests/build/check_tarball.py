"""The built collection tarball holds what a user runs, nothing from the development tree.

    python tests/build/check_tarball.py build/collection/llmops-vllm_cluster-*.tar.gz

Fails (exit 1, naming each offending member) on: a private key or certificate file, a report, a
lab file (the lab inventory and its throwaway keys, the lab scripts), molecule scenarios, tests or
their caches, a virtualenv, build output or a nested tarball; and when a file a user needs is missing.
"""
import re
import sys
import tarfile

FORBIDDEN = [
    (re.compile(r"(^|/)(id_(rsa|ecdsa|ed25519)(\.pub)?|[^/]*\.(key|pem|crt|p12|pfx|retry|log|pyc))$"), "a key, certificate or stray file"),
    (re.compile(r"(^|/)vault\.yml$"), "a vault file (only vault.yml.example ships)"),
    (re.compile(r"^reports(/|$)"), "a report"),
    (re.compile(r"^inventories/lab(_single)?(/|$)|^tests/lab(/|$)|(^|/)\.lab(/|$)"), "a lab file"),
    (re.compile(r"^(molecule|tests|benchmarks|requirements|build)(/|$)"), "a development tree"),
    (re.compile(r"(^|/)(\.pytest_cache|__pycache__|\.cache|\.venv|venv|\.git|ansible_collections)(/|$)"), "a cache or venv"),
    (re.compile(r"\.tar\.gz$|\.whl$"), "a nested archive"),
]
# Private-key blocks and the lab's throwaway API keys, in any shipped file.
SECRET_TEXT = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----|lab-(vllm|edge)-key-[0-9]+")
REQUIRED = ["LICENSE", "README.md", "meta/runtime.yml", "playbooks/site.yml", "playbooks/validate.yml",
            "playbooks/upgrade.yml", "inventories/dgx_spark/hosts.yml", "docs/validate.md",
            "docs/getting-started.md", "plugins/modules/openai_load.py"]


def problems(path):
    out = []
    with tarfile.open(path) as tar:
        names = []
        for member in tar.getmembers():
            name = member.name.lstrip("./")
            names.append(name)
            for pattern, what in FORBIDDEN:
                if pattern.search(name):
                    out.append(f"{name}: {what}")
            if member.isfile():
                data = tar.extractfile(member).read()
                if SECRET_TEXT.search(data):
                    out.append(f"{name}: holds a private key or a lab API key")
        for need in REQUIRED:
            if need not in names:
                out.append(f"{need}: missing")
    return out, len(names)


def main(paths):
    if len(paths) != 1:
        print("usage: check_tarball.py TARBALL", file=sys.stderr)
        return 2
    found, count = problems(paths[0])
    for line in found:
        print("tarball: " + line, file=sys.stderr)
    if found:
        return 1
    print(f"{paths[0]}: {count} members, no key, report, lab file, test cache or venv")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
