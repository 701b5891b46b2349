"""Every bad inventory value in cases.yml is refused before any host changes, with a
message naming the variable (and the valid values of a choice).

All cases run in ONE ansible-playbook: one play, one block/rescue per case (include_role of the role
with the case's variables, or a call of the module with the case's arguments). The rescue records
the failed task and its message; a last play writes the records to a file on this machine. Around
the run the host is snapshotted (files newer than a stamp, packages, systemd units, users, groups,
addresses): nothing may differ.
"""
import json
import os
import re

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
HOST = "bad-inputs-node"
CASES = yaml.safe_load(open(os.path.join(HERE, "cases.yml"), encoding="utf-8"))
COLLECTION = "llmops.vllm_cluster"
ARGSPEC_TASK = "Validating arguments against arg spec"
STAMP = "/run/bad-inputs.stamp"
# What an ansible run over the podman connection leaves, whatever the play does.
NOISE = (re.compile(r"^/root/\.ansible(/|$)"), re.compile(r"^/var/lib/systemd/timers/"),
         re.compile(r"^/root$"))
SNAPSHOT = {
    "packages": "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | sort",
    "unit files": "systemctl list-unit-files --no-legend --no-pager | sort",
    "units": "systemctl list-units --all --no-legend --no-pager --plain | awk '{print $1}' | sort",
    "/etc/systemd/system": "find /etc/systemd/system /run/systemd/system -printf '%p %y %l\\n' 2>/dev/null | sort",
    "users": "getent passwd | sort",
    "groups": "getent group | sort",
    "addresses": "ip -o addr show | awk '{print $2, $3, $4}' | sort",
    "apt sources": "find /etc/apt -type f -printf '%p %s\\n' | sort",
    "holds": "apt-mark showhold | sort",
}


def _target(case):
    return case.get("role") or case.get("module")


def _case_tasks(case):
    """The block/rescue of one case (a list with one task)."""
    record = ("{{ bad_inputs_results | default({}) | combine({%s: {'refused': %s, 'task': %s, 'action': %s, "
              "'msg': %s, 'items': %s}}) }}")
    cid = json.dumps(case["id"])
    if "role" in case:
        body = {
            "name": "Apply %s with the bad input" % case["role"],
            "ansible.builtin.include_role": {"name": "%s.%s" % (COLLECTION, case["role"])},
            "vars": dict(CASES.get("base_vars", {}).get(case["role"], {}), **case.get("vars", {})),
        }
    else:
        body = {"name": "Call %s with the bad input" % case["module"],
                "%s.%s" % (COLLECTION, case["module"]): case.get("args", {})}
    return [{
        "name": "Case %s" % case["id"],
        "block": [
            body,
            {"name": "Record that %s was accepted" % case["id"],
             "ansible.builtin.set_fact": {"bad_inputs_results": record % (cid, "false", "''", "''", "''", "[]")}},
        ],
        "rescue": [
            {"name": "Record how %s was refused" % case["id"],
             "ansible.builtin.set_fact": {"bad_inputs_results": record % (
                 cid, "true", "ansible_failed_task.name | default('')", "ansible_failed_task.action | default('')",
                 "ansible_failed_result.msg | default('')",
                 "ansible_failed_result.results | default([]) | selectattr('failed', 'defined') "
                 "| selectattr('failed') | map(attribute='msg') | list")}},
        ],
    }]


def _playbook(out_file):
    tasks = []
    for case in CASES["cases"]:
        tasks += _case_tasks(case)
    plays = [
        {"name": "Bad inputs, each in its own block/rescue", "hosts": HOST, "gather_facts": False, "tasks": tasks},
        {"name": "Write what each case did", "hosts": "localhost", "connection": "local", "gather_facts": False,
         "tasks": [{"name": "Write the records", "ansible.builtin.copy": {
             "content": "{{ hostvars['%s'].bad_inputs_results | default({}) | to_nice_json }}" % HOST,
             "dest": out_file, "mode": "0600"}}]},
    ]
    return yaml.safe_dump(plays, sort_keys=False, width=1000)


def _snapshot(host):
    snap = {}
    for name, cmd in SNAPSHOT.items():
        res = host.run(cmd)
        assert res.rc == 0, (name, res.stderr)
        snap[name] = res.stdout.splitlines()
    return snap


def _preflight_names(role):
    names = set()

    def walk(tasks):
        for t in tasks or []:
            if t.get("name"):
                names.add(t["name"])
            for key in ("block", "rescue", "always"):
                walk(t.get(key))
            imported = t.get("ansible.builtin.import_tasks")
            if imported:  # a static import is part of the preflight (vllm_service's facts.yml)
                with open(os.path.join(REPO, "roles", role, "tasks", imported), encoding="utf-8") as fh:
                    walk(yaml.safe_load(fh))

    with open(os.path.join(REPO, "roles", role, "tasks", "preflight.yml"), encoding="utf-8") as fh:
        walk(yaml.safe_load(fh))
    return names


def _text(rec):
    msg = rec.get("msg")
    parts = msg if isinstance(msg, list) else [msg or ""]
    parts = [str(p) for p in parts] + [str(i) for i in rec.get("items") or []]
    return " ".join(" ".join(parts).split())


def _excerpt(text, case, width=100):
    """The part of the message about the case's variable (messages of a combined check name several)."""
    start = max(0, text.find(case["variable"]) - 15)
    cut = text[start:start + width]
    return ("..." if start else "") + cut + ("..." if start + width < len(text) else "")


def _refused_by(case, rec):
    task = re.sub(r"^[^:]+ : ", "", rec.get("task") or "")
    if task.startswith(ARGSPEC_TASK):
        return "argument_spec"
    if "role" in case and task in _preflight_names(case["role"]):
        return "preflight"
    if "module" in case and rec.get("action", "").split(".")[-1] == case["module"]:
        return "module"
    return "other: %s" % task


@pytest.fixture(scope="module")
def outcome(lab_host, run_play, tmp_path_factory, request):
    host = lab_host(HOST)
    assert host.run("touch %s && sleep 1.1" % STAMP).rc == 0
    before = _snapshot(host)
    out_file = str(tmp_path_factory.mktemp("bad_inputs") / "results.json")
    result = run_play(_playbook(out_file))
    assert result.rc == 0, result
    after = _snapshot(host)
    changed = host.run("find /etc /opt /usr /srv /var /home /root -xdev -newer %s "
                       "-not -path '/var/log/*' -not -path '/var/tmp/*' -not -path '/var/cache/*' 2>/dev/null" % STAMP)
    newer = [p for p in changed.stdout.splitlines() if not any(n.match(p) for n in NOISE)]
    with open(out_file, encoding="utf-8") as fh:
        records = json.load(fh)

    rows, ok = [], 0
    for case in CASES["cases"]:
        rec = records.get(case["id"], {})
        text = _text(rec)
        by = _refused_by(case, rec) if rec.get("refused") else "NOT REFUSED"
        good = (by == case["refused_by"] and all(s in text for s in [case["variable"]] + case.get("expect", []))
                and not any(s in json.dumps(rec) or s in result.output for s in case.get("absent", [])))
        ok += good
        rows.append((case["id"], _target(case), case["variable"], by if good else "FAIL " + by, _excerpt(text, case)))
    roles = sorted({c["role"] for c in CASES["cases"] if "role" in c})
    modules = sorted({c["module"] for c in CASES["cases"] if "module" in c})
    data = getattr(request.config, "_bad_inputs_rows")
    data["rows"] = rows
    data["summary"] = "bad inputs refused before any change: %d/%d (%d roles, %d modules)%s" % (
        ok if not newer and before == after else 0, len(CASES["cases"]), len(roles), len(modules),
        "" if not newer and before == after else " - BUT THE HOST CHANGED")
    return {"records": records, "before": before, "after": after, "newer": newer}


def test_cases_cover_every_role_and_module():
    # Every role a user applies (an argument spec with a main entry point); a layer's component roles
    # and their shared base take the layer's variables, checked by the layer's cases.
    roles = sorted(r for r in os.listdir(os.path.join(REPO, "roles"))
                   if "main" in yaml.safe_load(open(os.path.join(REPO, "roles", r, "meta", "argument_specs.yml"),
                                                    encoding="utf-8"))["argument_specs"])
    modules = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "plugins", "modules")) if f.endswith(".py"))
    ids = [c["id"] for c in CASES["cases"]]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(ids) >= 36
    assert sorted({c["role"] for c in CASES["cases"] if "role" in c}) == roles
    assert sorted({c["module"] for c in CASES["cases"] if "module" in c}) == modules
    for c in CASES["cases"]:
        assert c["refused_by"] in ("argument_spec", "preflight", "module"), c["id"]


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["id"] for c in CASES["cases"]])
def test_refused_naming_the_variable(outcome, case):
    rec = outcome["records"].get(case["id"])
    assert rec is not None, "the case did not run"
    assert rec["refused"], "%s=%s was accepted" % (case["variable"], case.get("vars") or case.get("args"))
    text = _text(rec)
    assert _refused_by(case, rec) == case["refused_by"], (rec["task"], text)
    assert case["variable"] in text, text
    for expected in case.get("expect", []):
        assert expected in text, (expected, text)


def test_nothing_on_the_host_changed(outcome):
    assert outcome["newer"] == [], outcome["newer"]
    for name in SNAPSHOT:
        assert outcome["before"][name] == outcome["after"][name], name
