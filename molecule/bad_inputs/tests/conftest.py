"""Terminal summary of the bad-inputs scenario: one row per case and the final count."""

ROWS_KEY = "_bad_inputs_rows"


def pytest_configure(config):
    setattr(config, ROWS_KEY, {"rows": [], "summary": None})


def pytest_terminal_summary(terminalreporter, config):
    data = getattr(config, ROWS_KEY, None)
    if not data or not data["rows"]:
        return
    rows = data["rows"]
    heads = ("case", "role/module", "variable", "refused by", "message excerpt")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads[:-1])]
    tr = terminalreporter
    tr.write_sep("=", "bad inputs (molecule/bad_inputs/tests/cases.yml)")
    fmt = "  ".join("%%-%ds" % w for w in widths) + "  %s"
    tr.write_line(fmt % heads)
    for r in rows:
        tr.write_line(fmt % r)
    if data["summary"]:
        tr.write_line("")
        tr.write_line(data["summary"])
