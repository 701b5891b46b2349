"""Behaviour of the headless role on hosts that were prepared to boot into lightdm."""
from lab_testinfra import role_play


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


BOGUS_PLAY = role_play("headless")


def test_bad_target_refused_before_any_change(host, run_play):
    before = host.check_output("systemctl get-default")
    res = run_play(BOGUS_PLAY, {"headless_default_target": "bogus.target"}, limit=host.backend.get_hostname())
    assert res.rc != 0, res
    # The argument spec names the variable and the valid values.
    assert "headless_default_target" in res.output, res
    assert "multi-user.target" in res.output and "graphical.target" in res.output, res
    assert "changed=0" in res.output, res
    assert host.check_output("systemctl get-default") == before
