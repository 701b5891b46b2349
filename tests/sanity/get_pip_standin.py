"""Stand-in for ansible-test's pip bootstrap script (get-pip-<version>.py).

ansible-test downloads get-pip from ci-files.testing.ansible.com to bootstrap pip in the
virtual environments of its sanity tests; that host is unreachable here. `make sanity` places this
file where ansible-test caches the download (~/.ansible/test/cache/get_pip_<ver>.py). Like get-pip,
it takes `pip install` arguments; it bootstraps pip from the standard library's ensurepip and then
installs the requested pip release from the package index (PyPI is reachable).
"""
import subprocess
import sys


def main():
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    # In a child process: ensurepip disables pip's configuration (PIP_CONFIG_FILE=/dev/null) in the
    # environment of the process that runs it, and the install below needs the site's pip config.
    rc = subprocess.call([sys.executable, "-m", "ensurepip", "--upgrade"], stdout=subprocess.DEVNULL)
    if rc:
        return rc
    return subprocess.call([sys.executable, "-m", "pip", "install"] + args)


if __name__ == "__main__":
    sys.exit(main())
