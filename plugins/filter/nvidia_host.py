# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the nvidia_driver role: what a GPU host is (Secure Boot, NVSwitches, fabric state) and
which driver packages it gets.

  nvidia_host_facts(probe_text)         -> {secure_boot, efi, nvidia_pci, nvswitches}
  nvidia_fabric_states(nvidia_smi_q)    -> [{gpu, state, status}, ...]
  nvidia_driver_plan(settings)          -> {packages, modules, fabricmanager, fabricmanager_packages, errors}

The probe text is the output of the role's read-only probe: sections `## mokutil` (`mokutil --sb-state`
output and `rc=N`, or `missing`), `## efi` (`present`/`absent`), `## efivar` (`od -An -t u1` of the
SecureBoot EFI variable: 4 attribute bytes, then the value) and `## pci` (one line per NVIDIA PCI
function: `ADDRESS VENDOR DEVICE CLASS` from sysfs).
"""

from __future__ import annotations

import re

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0680 ("Bridge: other"): how NVSwitch chips (HGX/DGX baseboards) enumerate; GPUs are
# 0x0300 (VGA) or 0x0302 (3D controller).
NVSWITCH_CLASS = "0x0680"


def _sections(text):
    out, current = {}, None
    for line in (text or "").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line.rstrip())
    return out


def nvidia_host_facts(probe_text):
    """Secure Boot state (enabled, disabled, unknown, legacy-bios) and the NVIDIA PCI functions."""
    sec = _sections(probe_text)
    mok = [line for line in sec.get("mokutil", []) if line.strip()]
    efi = "present" in [line.strip() for line in sec.get("efi", [])]
    state = None
    text = " ".join(mok)
    if re.search(r"SecureBoot enabled", text, re.I):
        state = "enabled"
    elif re.search(r"SecureBoot disabled", text, re.I):
        state = "disabled"
    if state is None and efi:
        values = " ".join(sec.get("efivar", [])).split()
        # The variable is 4 attribute bytes followed by one data byte: 1 = enabled.
        if len(values) >= 5 and values[4].isdigit():
            state = "enabled" if values[4] == "1" else "disabled"
        else:
            state = "unknown"
    if state is None:
        state = "legacy-bios"
    pci = []
    for line in sec.get("pci", []):
        parts = line.split()
        if len(parts) == 4 and parts[1].lower() == NVIDIA_VENDOR:
            pci.append({"address": parts[0], "device": parts[2].lower(), "class": parts[3].lower()})
    nvswitches = [p["address"] for p in pci if p["class"].startswith(NVSWITCH_CLASS)]
    return {"secure_boot": state, "efi": efi, "nvidia_pci": pci, "nvswitches": nvswitches}


def nvidia_fabric_states(text):
    """Each GPU's fabric State/Status from `nvidia-smi -q` (N/A on a GPU without NVSwitch fabric)."""
    states, gpu, in_fabric, cur = [], None, False, None
    for line in (text or "").splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", line)
        if m:
            gpu, in_fabric = m.group(1), False
            continue
        if re.match(r"^    Fabric\s*$", line):
            in_fabric = True
            cur = {"gpu": gpu, "state": "", "status": ""}
            states.append(cur)
            continue
        if in_fabric:
            m = re.match(r"^        (State|Status)\s*:\s*(.*)$", line)
            if m:
                cur[m.group(1).lower()] = m.group(2).strip()
            elif re.match(r"^    \S", line):
                in_fabric = False
    return states


def nvidia_driver_plan(settings):
    """Packages and kernel-module source for the driver, and the fabric manager decision.

    settings: distribution, source (distribution|cuda_repo), branch, flavor (open|proprietary),
    packages (the user's override), kernel_modules (auto|dkms|precompiled), secure_boot, kernel,
    precompiled_kernel ('' = the running kernel), fabricmanager (auto|always|never), nvswitches (count),
    fabricmanager_packages (the user's override).
    """
    s = dict(settings)
    dist, source, b = s.get("distribution"), s.get("source"), str(s.get("branch"))
    is_open = s.get("flavor", "open") == "open"
    errors = []
    mode = s.get("kernel_modules", "auto")
    ubuntu_archive = dist == "Ubuntu" and source == "distribution"
    if mode == "auto":
        modules = "precompiled" if (ubuntu_archive and s.get("secure_boot") == "enabled") else "dkms"
    else:
        modules = mode
    if modules == "precompiled" and not ubuntu_archive:
        errors.append("nvidia_driver_kernel_modules=precompiled needs Ubuntu with nvidia_driver_source=distribution "
                      "(Canonical's signed linux-modules-nvidia packages); this host is %s with source %s "
                      "(valid: auto, dkms)" % (dist, source))
    kernel = s.get("precompiled_kernel") or s.get("kernel") or ""
    if s.get("packages"):
        packages = list(s["packages"])
    elif source == "cuda_repo":
        packages = ["nvidia-driver-pinning-" + b, "nvidia-open" if is_open else "cuda-drivers"]
    elif dist == "Ubuntu" and modules == "precompiled":
        flavor = "-open" if is_open else ""
        packages = ["linux-modules-nvidia-%s-server%s-%s" % (b, flavor, kernel),
                    "nvidia-headless-no-dkms-%s-server%s" % (b, flavor), "nvidia-utils-%s-server" % b]
    elif dist == "Ubuntu":
        packages = ["nvidia-headless-%s-server%s" % (b, "-open" if is_open else ""), "nvidia-utils-%s-server" % b]
    else:
        packages = ["nvidia-open-kernel-dkms" if is_open else "nvidia-kernel-dkms", "firmware-nvidia-gsp",
                    "nvidia-smi", "libcuda1", "nvidia-persistenced"]
    fm = s.get("fabricmanager", "auto")
    count = int(s.get("nvswitches") or 0)
    fabricmanager = count > 0 if fm == "auto" else fm == "always"
    fm_packages = []
    if fabricmanager:
        if s.get("fabricmanager_packages"):
            fm_packages = list(s["fabricmanager_packages"])
        elif source == "cuda_repo":
            fm_packages = ["nvidia-fabricmanager"]
        elif dist == "Ubuntu":
            fm_packages = ["nvidia-fabricmanager-" + b]
        else:
            errors.append("nvidia_driver_fabricmanager: %s's own archive has no NVIDIA Fabric Manager for this host's "
                          "%d NVSwitch(es); set nvidia_driver_source=cuda_repo or list the packages in "
                          "nvidia_driver_fabricmanager_packages" % (dist, count))
    return {"packages": packages, "modules": modules, "fabricmanager": fabricmanager,
            "fabricmanager_packages": fm_packages, "errors": errors}


class FilterModule(object):
    """nvidia_driver host filters."""

    def filters(self):
        return {
            "nvidia_host_facts": nvidia_host_facts,
            "nvidia_fabric_states": nvidia_fabric_states,
            "nvidia_driver_plan": nvidia_driver_plan,
        }
