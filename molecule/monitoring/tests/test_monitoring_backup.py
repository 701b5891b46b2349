"""The backup runbook (docs/operations.md, "Back up and restore the monitoring data"):
playbooks/monitoring_backup.yml and playbooks/monitoring_restore.yml on the monitoring host.

Prometheus' own samples of the last minutes are read, backed up, wiped (Prometheus stopped, its data
directory emptied, started again: the samples are gone), restored, and read back identical. Grafana
is not installable in the lab (vendor repository): its part runs against a stand-in, a
`grafana-server` unit that only sleeps and an SQLite database at Grafana's path, named as such."""
import os
import time

import pytest
from test_monitoring import api, eventually

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BACKUP = os.path.join(ROOT, "playbooks", "monitoring_backup.yml")
RESTORE = os.path.join(ROOT, "playbooks", "monitoring_restore.yml")
DATA = "/var/lib/prometheus/metrics2"
GRAFANA_DB = "/var/lib/grafana/grafana.db"
SQL = "python3 -c 'import sqlite3,sys; c=sqlite3.connect(\"%s\"); %%s; c.commit()'" % GRAFANA_DB
SERIES = 'up{job=~"prometheus|node|nginx"}'


@pytest.fixture(scope="module")
def mon(lab_host, lab_groups):
    return lab_host(lab_groups["monitoring"][0])


def _samples(mon, start, end):
    """{series labels: [(time, value), ...]} of SERIES between start and end (server times)."""
    res = api(mon, "/api/v1/query_range", query=SERIES, start=start, end=end, step="5")["result"]
    return {tuple(sorted(r["metric"].items())): [tuple(v) for v in r["values"]] for r in res}


def _ready(mon):
    def check():
        assert mon.run("curl -sf http://127.0.0.1:9090/-/ready").rc == 0
    eventually(check, timeout=180, interval=2)


def _grafana_standin(mon):
    mon.check_output("mkdir -p /var/lib/grafana && printf '%s\\n' '[Unit]' 'Description=stand-in for grafana-server "
                     "(molecule monitoring: Grafana is not installable in the lab)' '[Service]' "
                     "'ExecStart=/bin/sleep infinity' > /etc/systemd/system/grafana-server.service "
                     "&& systemctl daemon-reload && systemctl start grafana-server")
    mon.check_output(SQL % "c.execute(\"create table dashboard (title text)\"); "
                           "c.execute(\"insert into dashboard values (\\\"saved in the UI\\\")\")")


def _grafana_titles(mon):
    out = mon.run("python3 -c 'import sqlite3; print([r[0] for r in sqlite3.connect(\"%s\").execute("
                  "\"select title from dashboard\")])'" % GRAFANA_DB)
    return out.stdout.strip() if out.rc == 0 else "error: " + out.stderr.strip()


def test_back_up_wipe_restore_and_read_the_samples_back(mon, lab_groups, run_converge, tmp_path):
    _ready(mon)
    _grafana_standin(mon)
    try:
        # Samples Prometheus scraped in the minute before now (its own clock).
        end = float(mon.check_output("date +%s")) - 10
        before = eventually(lambda: _samples(mon, end - 60, end) or _fail("no samples yet"), timeout=120)
        assert sum(len(v) for v in before.values()) >= 10, before

        rc, out = run_converge({"monitoring_backup_local_dir": str(tmp_path)}, playbook=BACKUP)
        assert rc == 0, out[-3000:]
        host = lab_groups["monitoring"][0]
        fetched = sorted(os.listdir(tmp_path / host))
        assert [f.split("-")[0] for f in fetched] == ["grafana", "prometheus"], fetched
        archive = {f.split("-")[0]: str(tmp_path / host / f) for f in fetched}
        assert os.path.getsize(archive["prometheus"]) > 1000
        _ready(mon)
        assert _samples(mon, end - 60, end) == before  # the backup took nothing away

        # Wipe: the TSDB emptied while Prometheus is stopped, Grafana's database gone.
        mon.check_output(f"systemctl stop prometheus && rm -rf {DATA}/* && systemctl start prometheus && rm -f {GRAFANA_DB}")
        _ready(mon)
        assert _samples(mon, end - 60, end) == {}, "the wipe left samples behind"
        assert _grafana_titles(mon).startswith("error")

        rc, out = run_converge({"monitoring_restore_prometheus_archive": archive["prometheus"],
                                "monitoring_restore_grafana_archive": archive["grafana"],
                                "monitoring_backup_grafana_owner": "root:root"}, playbook=RESTORE)
        assert rc == 0, out[-3000:]
        _ready(mon)
        assert _samples(mon, end - 60, end) == before
        assert _grafana_titles(mon) == "['saved in the UI']"
        # The data from before the restore is kept aside; Prometheus scrapes on.
        assert mon.run(f"ls -d {DATA}.before-restore-*").rc == 0
        assert mon.check_output(f"stat -c %U {DATA}") == "prometheus"
        eventually(lambda: api(mon, "/api/v1/query", query='up{job="prometheus"}', time=time.time())["result"]
                   or _fail("not scraping"), timeout=60)
    finally:
        mon.run("systemctl stop grafana-server; rm -f /etc/systemd/system/grafana-server.service; "
                "systemctl daemon-reload; rm -rf /var/lib/grafana")


def test_a_restore_refuses_bad_requests_before_any_change(mon, run_converge, tmp_path):
    pid = mon.check_output("systemctl show -p MainPID --value prometheus")
    rc, out = run_converge({"monitoring_restore_prometheus_archive": str(tmp_path / "missing.tar.gz")},
                           playbook=RESTORE, one_line=True)
    assert rc != 0 and "monitoring_restore_prometheus_archive" in out, out[-2000:]
    bogus = tmp_path / "not-a-backup.tar.gz"
    mon.check_output("tar -C /etc -czf /tmp/not-a-backup.tar.gz hostname")
    bogus.write_bytes(mon.file("/tmp/not-a-backup.tar.gz").content)
    rc, out = run_converge({"monitoring_restore_prometheus_archive": str(bogus)}, playbook=RESTORE, one_line=True)
    assert rc != 0 and "is not an archive of metrics2" in out and "Nothing was changed" in out, out[-2000:]
    assert mon.check_output("systemctl show -p MainPID --value prometheus") == pid


def _fail(what):
    raise AssertionError(what)
