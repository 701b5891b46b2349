"""Where a secret could leak on lab hosts, searched after a run that rotated it (molecule verify steps
of the cluster and response_cache scenarios).

leaks(lab_host, hosts, words, allowed, stamp) -> {host: [(where, detail)]} for every place a word
shows up, outside the files allowed to hold it:
  - every file written since STAMP was touched (/, /run, /tmp; /proc, /sys, /dev left out): a word
    may sit only in a file of ALLOWED ({path: "mode owner group"}, e.g. "600 root root") with
    exactly that mode and ownership;
  - the systemd journal;
  - every process's command line (a key passed as an argument shows in `ps`).

The words never go on a command line here (the search's own grep would find itself in
/proc/*/cmdline): they travel base64-encoded into a root-only file in /dev/shm (outside the search)
that grep reads with -f.
"""
import base64


def touch_stamp(lab_host, hosts, stamp):
    """Marks the start of a run: files newer than STAMP are searched."""
    for name in hosts:
        lab_host(name).check_output("touch %s", stamp)


def leaks(lab_host, hosts, words, allowed, stamp):
    encoded = base64.b64encode("\n".join(words).encode()).decode()

    def search(h, command):
        return h.run('w=$(mktemp /dev/shm/leak-words.XXXXXX) && echo %s | base64 -d > "$w" && { %s; }; rm -f "$w"'
                     % (encoded, command)).stdout

    found = {}
    for name in hosts:
        h = lab_host(name)
        hits = []
        files = search(h, "find / /run /tmp -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o "
                          "-type f -newer %s -print0 | xargs -0 -r grep -l -a -F -f \"$w\" || true" % stamp).split()
        for path in files:
            st = " ".join(h.run("stat -c '%%a %%U %%G' %s", path).stdout.split())
            if allowed.get(path) != st:
                hits.append(("file", f"{path} ({st})"))
        journal = search(h, "journalctl --no-pager -o cat | grep -c -a -F -f \"$w\" || true").strip()
        if journal not in ("", "0"):
            hits.append(("journal", f"{journal} lines"))
        cmdlines = search(h, "grep -l -a -F -f \"$w\" /proc/[0-9]*/cmdline 2>/dev/null || true").split()
        for path in cmdlines:
            # Name the process: its command line, the key shown only by its length.
            shown = h.run("tr '\\0' ' ' < %s", path).stdout
            for word in words:
                shown = shown.replace(word, f"<key:{len(word)}>")
            hits.append(("command line", f"{path}: {shown[:200]}"))
        if hits:
            found[name] = hits
    return found
