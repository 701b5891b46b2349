# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Apply dspark_build's ordered patches to a scratch copy of the vLLM checkout, before any build.

Usage: patches.py JSON, where JSON has src (the checkout), dest (the scratch copy to make),
remote (git URL of the patch commits, may be empty) and patches ([{name, file} or {name, commit}]).
Each patch file is applied with `git apply --index` and committed, each commit cherry-picked, in
order. The first one that does not apply stops everything: dest is removed, the exit status is 1
and stdout is JSON naming the patch and git's own message. On success stdout is JSON with the
base commit, the patched head and each patch's name, kind and sha256 or commit.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

IDENTITY = ['-c', 'user.name=llmops dspark_build', '-c', 'user.email=dspark-build@llmops.invalid',
            '-c', 'commit.gpgsign=false']


def git(repo, *args, check=True):
    proc = subprocess.run(['git', '-C', repo] + IDENTITY + list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(message(proc))
    return proc


def message(proc):
    """git's own error, without its advice lines."""
    text = proc.stderr or proc.stdout
    return '\n'.join(line for line in text.splitlines() if not line.startswith('hint:')).strip()


def fail(dest, patch, message):
    shutil.rmtree(dest, ignore_errors=True)
    print(json.dumps({'failed': True, 'patch': patch, 'msg': message}))
    sys.exit(1)


def sha256(path):
    with open(path, 'rb') as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def fetch_commit(dest, remote, commit):
    """Resolve commit in dest, fetching the remote's branches and tags (then the commit itself) first."""
    found = git(dest, 'rev-parse', '--verify', '--quiet', commit + '^{commit}', check=False)
    if found.returncode == 0:
        return found.stdout.strip()
    if not remote:
        raise RuntimeError('dspark_build_patch_git_url is empty, so commit %s cannot be fetched' % commit)
    if not getattr(fetch_commit, 'fetched', False):
        git(dest, 'fetch', '--quiet', remote, '+refs/heads/*:refs/llmops-patches/heads/*',
            '+refs/tags/*:refs/llmops-patches/tags/*')
        fetch_commit.fetched = True
    found = git(dest, 'rev-parse', '--verify', '--quiet', commit + '^{commit}', check=False)
    if found.returncode != 0:
        git(dest, 'fetch', '--quiet', remote, commit, check=False)
        found = git(dest, 'rev-parse', '--verify', '--quiet', commit + '^{commit}', check=False)
    if found.returncode != 0:
        raise RuntimeError('commit %s is not in %s' % (commit, remote))
    return found.stdout.strip()


def main():
    args = json.loads(sys.argv[1])
    src, dest, remote = args['src'], args['dest'], args.get('remote') or ''
    shutil.rmtree(dest, ignore_errors=True)
    base = git(src, 'rev-parse', 'HEAD').stdout.strip()
    # The patched commits get the base commit's date: the same patches on the same base give the
    # same head, so an unchanged run builds nothing new.
    date = git(src, 'log', '-1', '--format=%cI', base).stdout.strip()
    os.environ.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    subprocess.run(['git', 'clone', '--quiet', '--shared', '--no-checkout', src, dest], check=True,
                   capture_output=True)
    git(dest, 'checkout', '--quiet', '--detach', base)
    # The release tag must stay visible to the build's version scheme (setuptools-scm).
    git(dest, 'fetch', '--quiet', '--tags', src)
    applied = []
    for patch in args['patches']:
        name = patch['name']
        try:
            if patch.get('file'):
                check = git(dest, 'apply', '--check', '--index', patch['file'], check=False)
                if check.returncode != 0:
                    raise RuntimeError(message(check))
                git(dest, 'apply', '--index', patch['file'])
                git(dest, 'commit', '--quiet', '--no-verify', '-m', 'dspark_build patch: ' + name)
                applied.append({'name': name, 'kind': 'file', 'sha256': sha256(patch['file'])})
            else:
                commit = fetch_commit(dest, remote, patch['commit'])
                pick = git(dest, 'cherry-pick', '-x', commit, check=False)
                if pick.returncode != 0:
                    git(dest, 'cherry-pick', '--abort', check=False)
                    raise RuntimeError(message(pick))
                applied.append({'name': name, 'kind': 'commit', 'commit': commit})
        except RuntimeError as exc:
            fail(dest, name, str(exc))
    head = git(dest, 'rev-parse', 'HEAD').stdout.strip()
    print(json.dumps({'failed': False, 'base': base, 'head': head, 'patches': applied}))


if __name__ == '__main__':
    main()
