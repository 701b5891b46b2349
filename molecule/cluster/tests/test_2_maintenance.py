"""playbooks/maintenance.yml on the lab's serving cluster, under a constant load through the
balancer: every node rebooted (maintenance_action=reboot), one replica at a time. Each replica
leaves every balancer before any of its nodes goes down, its two hosts reboot (a lab host is a
system container whose restart policy starts it again, as a real host comes back), the engines
start by themselves at boot, the replica answers a real completion and goes back in, and only then
does the next replica start. Not one client request may fail. Then the same sequence from the
driver role: site.yml --tags nvidia_driver with a driver change that reboots every node (the
vllm_service role's maintain.yml, called by the nvidia_driver role on a serving cluster)."""
from conftest import FAULTS, REPO, one_line
from test_2_rolling import NODES, assert_one_replica_at_a_time, play_under_load, steps_order

MAINTENANCE = "- name: Maintenance\n  ansible.builtin.import_playbook: %s/playbooks/maintenance.yml\n" % REPO
# maintain.yml's tasks, matched by the start of their names.
STEPS = (("Drain from every balancer", "drain"), ("Reboot the node", "reboot"), ("Undrain in every balancer", "undrain"))
# PID 1's start, in ticks since the kernel booted: a new one after each host's reboot.
INIT_START = "cut -d' ' -f22 /proc/1/stat"


def test_rolling_reboot_under_load_loses_no_request(run_play, lab_host, load):
    booted = {n: lab_host(n).check_output(INIT_START) for n in NODES}
    res, results, seconds, _before = play_under_load(run_play, lab_host, load, MAINTENANCE,
                                                     ["-e", "maintenance_action=reboot"], None)
    out = one_line(res.output)
    assert res.rc == 0, out[-3000:]
    bad = [r for r in results if not r["ok"]]
    FAULTS.append(("rolling reboot of every node (maintenance.yml)", len(results), len(bad), seconds,
                   "one replica at a time: drained, both hosts rebooted, ready, put back"))
    assert "one replica at a time (r1, r2), each drained, rebooted" in out, out[-3000:]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in NODES:
        assert lab_host(name).check_output(INIT_START) != booted[name], f"{name} was not rebooted"
        assert lab_host(name).service("vllm").is_running, f"{name}: the engine did not start at boot"
    assert_one_replica_at_a_time(steps_order(res.output, STEPS), "reboot")


SITE = "- name: Site\n  ansible.builtin.import_playbook: %s/playbooks/site.yml\n" % REPO
# The driver layer as the nvidia_driver_packages-nomodule scenario runs it on a lab host: a real
# subset of Debian's non-free driver packages (no kernel module: the lab's kernel is the build
# machine's), forced on hosts without a GPU, rebooting after each change (always).
DRIVER = {"nvidia_driver_install": True, "nvidia_driver_packages": ["nvidia-smi", "nvidia-kernel-support"],
          "nvidia_driver_kernel_headers": False, "nvidia_driver_persistenced": False,
          "nvidia_driver_reboot": "always"}


def test_tagged_driver_run_on_a_serving_cluster_reboots_one_replica_at_a_time(run_play, lab_host, load):
    """site.yml --tags nvidia_driver whose driver change reboots every node, under load: the
    driver's play is planned one replica per batch and each replica is drained around its nodes'
    reboot; 0 failed requests."""
    booted = {n: lab_host(n).check_output(INIT_START) for n in NODES}
    res, results, seconds, _before = play_under_load(run_play, lab_host, load, SITE, ["--tags", "nvidia_driver"], DRIVER)
    out = one_line(res.output)
    assert res.rc == 0, out[-3000:]
    bad = [r for r in results if not r["ok"]]
    FAULTS.append(("driver change by site.yml --tags nvidia_driver", len(results), len(bad), seconds,
                   "one replica per batch, drained around its nodes' reboot"))
    assert "the cluster serves: one replica at a time (r1, r2), each drained, rebooted if its driver changed" in out, \
        out[-3000:]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in NODES:
        assert lab_host(name).check_output(INIT_START) != booted[name], f"{name} was not rebooted"
        assert lab_host(name).package("nvidia-smi").is_installed, name
    assert_one_replica_at_a_time(steps_order(res.output, STEPS), "reboot")
