#!/usr/bin/env bash
# STAND-IN for NVIDIA's apt repositories, which this build machine cannot reach.
#
# Builds, under $LAB_CACHE/apt/nvidia-standin/ (mounted read-only in every lab host at
# /srv/llmops-lab/apt/nvidia-standin/, used there through file:// URLs):
#   libnvidia-container/gpgkey                         armored public key (like NVIDIA's gpgkey URL)
#   libnvidia-container/stable/deb/{amd64,arm64}/      flat repos (Packages, Release, InRelease)
#       nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools,
#       libnvidia-container1 at versions 1.17.7-1, 1.17.8-1, 1.18.0-1 (dependencies pinned like NVIDIA's)
#   cuda/{debian12,debian13}/{x86_64,sbsa}/            flat repos like the CUDA repository's
#       (x86_64 and sbsa, NOT arm64): nvidia-driver-pinning-580, nvidia-open (empty stand-ins)
#       and 3bf863cc.pub (the key, named like NVIDIA's CUDA repository key)
# Packages are built with dpkg-deb and named like NVIDIA's, but they are stand-ins: the
# nvidia-ctk inside is a small Python script implementing `runtime configure` (merges the runtime
# into the daemon JSON like the real one) and `cdi generate` (writes a CDI spec header, no devices),
# and prints "(stand-in)" in its version. Signed with a throwaway key generated per build.
# Rebuilt only when this script changes (hash stamp). Usage: nvidia_apt_repos.sh [--force]
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
out=$LAB_CACHE/apt/nvidia-standin
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
if [ "${1:-}" != --force ] && [ "$(cat "$out/.recipe" 2>/dev/null)" = "$stamp" ]; then
  echo "[standin] $out is current ($stamp)" >&2
  exit 0
fi
command -v dpkg-deb >/dev/null && command -v gpg >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg gnupg >/dev/null; }
work=$(mktemp -d "${TMPDIR:-/tmp}/llmops-standin.XXXXXX")
trap 'gpgconf --homedir "$work/gnupg" --kill all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export GNUPGHOME=$work/gnupg
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
  --quick-gen-key 'llmops-lab stand-in NVIDIA repository signing key (throwaway) <standin@llmops-lab.invalid>' \
  ed25519 sign 1d
rm -rf "$out.new" && mkdir -p "$out.new"

# --- the stand-in nvidia-ctk ----------------------------------------------------------------------
cat > "$work/nvidia-ctk" <<'PY'
#!/usr/bin/python3
"""STAND-IN nvidia-ctk (llmops.vllm_cluster lab): `runtime configure` and `cdi generate` only."""
import argparse, json, os, sys
VERSION = "@VERSION@"
p = argparse.ArgumentParser(prog="nvidia-ctk")
p.add_argument("--version", action="store_true")
sub = p.add_subparsers(dest="cmd")
rt = sub.add_parser("runtime").add_subparsers(dest="sub")
c = rt.add_parser("configure")
c.add_argument("--runtime", default="docker", choices=["docker", "containerd", "crio"])
c.add_argument("--config", default=None)
c.add_argument("--set-as-default", action="store_true")
c.add_argument("--nvidia-runtime-name", default="nvidia")
cdi = sub.add_parser("cdi").add_subparsers(dest="sub")
g = cdi.add_parser("generate")
g.add_argument("--output", default=None)
a = p.parse_args()
if a.version:
    print("NVIDIA Container Toolkit CLI version %s (llmops-lab stand-in)" % VERSION)
    sys.exit(0)
if a.cmd == "runtime" and a.sub == "configure":
    if a.runtime != "docker":
        sys.exit("stand-in nvidia-ctk implements --runtime=docker only")
    path = a.config or "/etc/docker/daemon.json"
    cfg = {}
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path) as fh:
            cfg = json.load(fh)   # invalid JSON: fail like the real one, change nothing
    cfg.setdefault("runtimes", {})[a.nvidia_runtime_name] = {"args": [], "path": "nvidia-container-runtime"}
    if a.set_as_default:
        cfg["default-runtime"] = a.nvidia_runtime_name
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(cfg, fh, indent=4)
        fh.write("\n")
    os.replace(tmp, path)
    print('INFO[0000] Wrote updated config to %s' % path)
    print("INFO[0000] It is recommended that docker daemon be restarted.")
    sys.exit(0)
if a.cmd == "cdi" and a.sub == "generate":
    if not os.path.exists("/dev/nvidiactl"):
        sys.exit("ERROR: failed to generate CDI spec: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND (stand-in: no GPU)")
    spec = "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\ncontainerEdits: {}\n"
    if a.output:
        os.makedirs(os.path.dirname(a.output), exist_ok=True)
        with open(a.output, "w") as fh:
            fh.write(spec)
    else:
        sys.stdout.write(spec)
    sys.exit(0)
p.print_help()
sys.exit(2)
PY

# build_deb NAME VERSION ARCH DEPENDS [FILE_SRC:DEST ...]
build_deb() {
  local name=$1 ver=$2 arch=$3 deps=$4; shift 4
  local root=$work/pkg/$name-$ver-$arch spec src dest
  rm -rf "$root"; mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
  {
    echo "Package: $name"; echo "Version: $ver"; echo "Architecture: $arch"
    echo "Maintainer: llmops-lab stand-in <standin@llmops-lab.invalid>"
    [ -z "$deps" ] || echo "Depends: $deps"
    echo "Section: utils"; echo "Priority: optional"
    echo "Description: STAND-IN for NVIDIA's $name (llmops.vllm_cluster lab, not the real package)"
  } > "$root/DEBIAN/control"
  echo "llmops-lab stand-in for $name $ver" > "$root/usr/share/doc/$name/README.standin"
  for spec in "$@"; do
    src=${spec%%:*}; dest=${spec#*:}
    mkdir -p "$root$(dirname "$dest")"
    sed "s/@VERSION@/${ver%-*}/" "$src" > "$root$dest"; chmod 0755 "$root$dest"
  done
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$pool/${name}_${ver}_${arch}.deb" >/dev/null
}

# make_flat_repo DIR: Packages, Release, InRelease (signed), Release.gpg, indexed by apt-ftparchive
# (apt-utils, installed by `tests/lab/lab.sh setup`).
make_flat_repo() {
  local dir=$1
  (cd "$dir" && apt-ftparchive packages . > Packages &&
    apt-ftparchive -o APT::FTPArchive::Release::Origin="llmops-lab stand-in" \
      -o APT::FTPArchive::Release::Label="llmops-lab stand-in" -o APT::FTPArchive::Release::Suite=stable \
      -o APT::FTPArchive::Release::Codename=stable release . > Release.new && mv Release.new Release)
  gpg --batch --yes --quiet --clearsign -o "$dir/InRelease" "$dir/Release"
  gpg --batch --yes --quiet -abs -o "$dir/Release.gpg" "$dir/Release"
}

# --- libnvidia-container (NVIDIA Container Toolkit) -------------------------------------------------
mkdir -p "$out.new/libnvidia-container"
gpg --batch --armor --export > "$out.new/libnvidia-container/gpgkey"
for arch in amd64 arm64; do
  pool=$out.new/libnvidia-container/stable/deb/$arch
  mkdir -p "$pool"
  for ver in 1.17.7-1 1.17.8-1 1.18.0-1; do
    build_deb libnvidia-container1 "$ver" "$arch" ""
    build_deb libnvidia-container-tools "$ver" "$arch" "libnvidia-container1 (>= $ver)"
    build_deb nvidia-container-toolkit-base "$ver" "$arch" "" "$work/nvidia-ctk:/usr/bin/nvidia-ctk"
    build_deb nvidia-container-toolkit "$ver" "$arch" \
      "nvidia-container-toolkit-base (= $ver), libnvidia-container-tools (>= $ver), libnvidia-container-tools (<< 2.0.0)" \
      "$work/nvidia-ctk:/usr/bin/nvidia-container-runtime"
  done
  make_flat_repo "$pool"
done

# --- CUDA repository layout: x86_64 and sbsa directories ------------------------------------------------
for distro in debian12 debian13 ubuntu2204 ubuntu2404; do
  for dir in x86_64 sbsa; do
    arch=amd64; [ "$dir" = sbsa ] && arch=arm64
    pool=$out.new/cuda/$distro/$dir
    mkdir -p "$pool"
    gpg --batch --armor --export > "$pool/3bf863cc.pub"
    build_deb nvidia-driver-pinning-580 580.95.05-1 all ""
    build_deb nvidia-open 580.95.05-1 "$arch" "nvidia-driver-pinning-580"
    make_flat_repo "$pool"
  done
done

echo "$stamp" > "$out.new/.recipe"
chmod -R a+rX "$out.new"
rm -rf "$out" && mv "$out.new" "$out"
echo "[standin] built $out ($stamp)" >&2
