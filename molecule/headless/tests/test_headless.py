"""Behaviour of the headless role on hosts that were prepared to boot into lightdm."""


def test_default_target_is_multi_user(host):
    assert host.check_output("systemctl get-default") == "multi-user.target"


def test_display_manager_is_stopped_disabled_and_masked(host):
    assert host.package("lightdm").is_installed  # the prepare step really installed it
    svc = host.service("lightdm")
    assert not svc.is_running
    state = host.run("systemctl is-enabled lightdm").stdout.strip()
    assert state == "masked", state


def test_no_gui_process_left(host):
    # prepare started a process named Xorg; the role must have ended it.
    assert host.run("pgrep -x Xorg").rc == 1
    assert host.run("pgrep -x lightdm").rc == 1


def test_masked_display_manager_cannot_be_started(host):
    res = host.run("systemctl start lightdm")
    assert res.rc != 0 and "masked" in (res.stderr + res.stdout), res
