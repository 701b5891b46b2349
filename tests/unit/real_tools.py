"""Real tools for the unit tests: Debian-packaged binaries (installed with apt-get when missing)
and Ansible itself, to render a role's template with the role's own defaults."""
import os
import shutil
import subprocess
import sys

import pytest


def apt_tool(binary, package):
    """Path of a Debian-packaged tool, installing the package with apt-get when it is missing."""
    found = shutil.which(binary) or (f"/usr/bin/{binary}" if os.path.exists(f"/usr/bin/{binary}") else None)
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip(f"{binary} is not installed and apt-get is not available to install Debian's '{package}' package")
    if os.geteuid() != 0:
        pytest.skip(f"{binary} is not installed; installing Debian's '{package}' package needs root (apt-get install {package})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]
    install = subprocess.run(apt + ["install", "--no-install-recommends", package], env=env,
                             capture_output=True, text=True, check=False)
    if install.returncode != 0:
        subprocess.run(apt + ["update"], env=env, capture_output=True, text=True, check=False)
        install = subprocess.run(apt + ["install", "--no-install-recommends", package], env=env,
                                 capture_output=True, text=True, check=False)
    assert install.returncode == 0, f"apt-get install {package} failed:\n{install.stdout[-2000:]}\n{install.stderr[-2000:]}"
    found = shutil.which(binary) or f"/usr/bin/{binary}"
    assert os.path.exists(found), f"Debian's {package} package did not provide {binary}"
    return found


def ansible_bin():
    local = os.path.join(os.path.dirname(sys.executable), "ansible")
    return local if os.path.exists(local) else shutil.which("ansible")
