"""playbooks/maintenance.yml: its settings are checked before any host is touched (each bad value
named with the valid ones), and its maintenance play takes one replica per batch, head first, also
on a cluster that does not serve (maintenance always rolls), only the chosen replicas when
maintenance_replicas is given. Runs the playbook's own plan play and its maintenance play's
keywords with the tasks replaced by a recorder; every host has a local connection and is never
reached."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from test_site_roll_plan import ROOT, _inventory

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _run(tmp_path, *extra, record=True):
    book = yaml.safe_load((ROOT / "playbooks" / "maintenance.yml").read_text(encoding="utf-8"))
    plan, play = book
    play = {k: v for k, v in play.items() if k != "tasks"}
    play["tasks"] = [{"name": "Record the batch", "ansible.builtin.debug": {
        "msg": "BATCH={{ ansible_play_batch | join(',') }}"}, "run_once": True}]
    (tmp_path / "m.yml").write_text(yaml.safe_dump([plan, play] if record else book, sort_keys=False), encoding="utf-8")
    (tmp_path / "hosts.json").write_text(json.dumps(_inventory([2, 2, 1])), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "m.yml"), *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc, [b.split(",") for b in re.findall(r'msg: BATCH=([\w,]+)', proc.stdout)]


@pytest.mark.parametrize("extra, named", [
    (["-e", "maintenance_action=bogus"], "maintenance_action: 'bogus' must be one of reboot, os_upgrade, nvidia_driver"),
    (["-e", "maintenance_action=reboot", "-e", "maintenance_replicas=r1;reboot"], "maintenance_replicas[0]: 'r1;reboot' must be"),
    ([], "maintenance_action must be one of reboot, os_upgrade, nvidia_driver (got '')"),
    (["-e", "maintenance_action=reboot", "-e", "maintenance_reboot=sometimes"],
     "maintenance_reboot: 'sometimes' must be one of always, if_needed, never"),
    (["-e", "maintenance_action=reboot", "-e", "maintenance_replicas=r1,r9"], "unknown: r9"),
])
def test_bad_settings_stop_before_any_host_changes(tmp_path, extra, named):
    # The whole playbook: a bad value must stop it in its first task, before the maintenance play.
    proc, batches = _run(tmp_path, *extra, record=False)
    assert proc.returncode != 0
    assert named in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert "nothing was changed" in proc.stdout.lower()
    assert "Maintain the nodes" not in proc.stdout and batches == []


def test_every_replica_in_turn_head_first(tmp_path):
    proc, batches = _run(tmp_path, "-e", "maintenance_action=reboot")
    assert proc.returncode == 0, proc.stdout[-3000:]
    # Replicas in vllm_heads order (reversed by _inventory): r3 (one node), r2, r1.
    assert batches == [["h3"], ["h2", "w2_1"], ["h1", "w1_1"]], proc.stdout[-3000:]
    assert "one replica at a time (r3, r2, r1), each drained, rebooted, ready and put back" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("chosen", ["r1", "r2,r1", "[r1, r2]"])
def test_only_the_chosen_replicas(tmp_path, chosen):
    value = json.dumps({"maintenance_replicas": yaml.safe_load(chosen)}) if chosen.startswith("[") else \
        "maintenance_replicas=" + chosen
    proc, batches = _run(tmp_path, "-e", "maintenance_action=os_upgrade", "-e", value)
    assert proc.returncode == 0, proc.stdout[-3000:]
    want = {"r1": ["h1", "w1_1"], "r2": ["h2", "w2_1"]}
    names = chosen.strip("[]").replace(" ", "").split(",")
    assert sorted(map(tuple, batches)) == sorted(tuple(want[n]) for n in names), proc.stdout[-3000:]
