#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Make fgds's patch series against Linux 7.2 from the overlay, and check it.

  fgds-series.py plan-check   every overlay file and patches/ file is in
                              exactly one patch of the plan, patches/series
                              agrees with it
  fgds-series.py generate     write the series (build/series/, fixes in
                              build/series/fixes/), authored and signed off
                              by git's user.name/user.email
  fgds-series.py check        plan-check, then generate into a scratch
                              directory, checkpatch --strict --codespell
                              every patch, and check that the series applied
                              to pristine 7.2 gives exactly the overlay's tree

The pristine tree is imported once from the toolchain root's
linux-source-7.2 tarball into the git repository build/linux-7.2 (tag
fgds-pristine), and re-imported when the tarball changes. The plan is
tools/testing/fgds-series/plan; its header says how to read it.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TOP = os.path.realpath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PLAN = os.path.join(TOP, 'tools/testing/fgds-series/plan')
BUILD = os.environ.get('FGDS_BUILD', os.path.join(TOP, 'build'))
ROOT = os.environ.get('FGDS_ROOT', os.path.join(BUILD, 'root'))
PRISTINE = os.path.join(BUILD, 'linux-7.2')
PRISTINE_TAG = 'fgds-pristine'
SENDER_TOKEN = '@FGDS_SENDER@'
# The overlay's old placeholder; it must never reach a patch.
PLACEHOLDERS = ('fgds@example.org', 'fgds developers')
RESERVED_DOMAIN = re.compile(r'@(?:[^>]*\.)?(?:example(?:\.(?:com|net|org))?|invalid|test|localhost)$',
                             re.I)


class Error(Exception):
    """A failure with a sentence for the user."""


def die(msg):
    print(f'fgds-series: error: {msg}', file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(f'fgds-series: {msg}', file=sys.stderr)


def run(cmd, cwd=None, env=None, check=True, capture=True, stdin=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, text=True, stdin=stdin,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None)
    if check and r.returncode != 0:
        raise Error(f"{' '.join(cmd)} failed ({r.returncode}): "
                    f"{(r.stderr or '').strip()[-2000:]}")
    return r


# --- the plan -------------------------------------------------------------

class Entry:
    def __init__(self, patch, lineno):
        self.patch = patch          # file name in patches/
        self.adds = []              # overlay paths (files or DIR/)
        self.lineno = lineno
        self.files = []             # resolved overlay files
        self.todo = {}              # check -> (count, reason): known findings


class Series:
    def __init__(self, name, outdir, cover, lineno):
        self.name = name
        self.outdir = outdir
        self.cover = cover
        self.cc = []
        self.entries = []
        self.lineno = lineno


class Plan:
    def __init__(self, path=PLAN):
        self.path = path
        self.overlay = []
        self.series = []
        self.parse()

    def parse(self):
        cur = None
        entry = None
        with open(self.path) as f:
            for n, raw in enumerate(f, 1):
                line = raw.split('#', 1)[0].rstrip()
                if not line.strip():
                    continue
                words = line.split()
                where = f'{os.path.relpath(self.path, TOP)}:{n}'
                kw = words[0]
                if kw == 'overlay':
                    self.overlay += words[1:]
                elif kw == 'series':
                    if len(words) != 4:
                        raise Error(f'{where}: "series NAME DIR COVER" expected')
                    cur = Series(words[1], words[2], words[3], n)
                    self.series.append(cur)
                    entry = None
                elif kw == 'cc':
                    if cur is None:
                        raise Error(f'{where}: "cc" outside a series')
                    cur.cc += words[1:]
                elif kw == 'patch':
                    if cur is None or len(words) != 2:
                        raise Error(f'{where}: "patch FILE" inside a series expected')
                    entry = Entry(words[1], n)
                    cur.entries.append(entry)
                elif kw == 'todo':
                    if entry is None or len(words) < 4 or not words[2].isdigit() or \
                            words[1] not in ('checkpatch', 'identity'):
                        raise Error(f'{where}: "todo checkpatch|identity COUNT REASON" under a '
                                    '"patch" line expected')
                    reason = raw.split('#', 1)[0].split(None, 3)[3].strip()
                    entry.todo[words[1]] = (int(words[2]), reason)
                elif kw == 'add':
                    if entry is None or not raw.startswith((' ', '\t')):
                        raise Error(f'{where}: "add" must be indented under a "patch" line')
                    entry.adds += words[1:]
                else:
                    raise Error(f'{where}: unknown keyword "{kw}"')

    def entries(self):
        for s in self.series:
            yield from s.entries


def overlay_files(plan):
    """Files of the overlay: tracked or untracked-but-not-ignored, as build-kernel.sh sees them."""
    r = run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '--'] + plan.overlay,
            cwd=TOP)
    return sorted(f for f in r.stdout.splitlines() if os.path.isfile(os.path.join(TOP, f)))


def patch_files():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(TOP, 'patches', '*.patch')))


def series_file():
    path = os.path.join(TOP, 'patches', 'series')
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith('#')]


def plan_check(plan):
    """Returns a list of problems, empty when the plan covers the overlay."""
    problems = []
    files = overlay_files(plan)
    owner = {}
    for e in plan.entries():
        e.files = []
        if not os.path.isfile(os.path.join(TOP, 'patches', e.patch)):
            problems.append(f'plan line {e.lineno}: patches/{e.patch} does not exist')
        for a in e.adds:
            if a.endswith('/'):
                got = [f for f in files if f.startswith(a)]
                if not got:
                    problems.append(f'plan line {e.lineno}: no overlay file below {a}')
            else:
                got = [a] if a in files else []
                if not got:
                    problems.append(f'plan line {e.lineno}: {a} is not an overlay file')
            e.files += got
        for f in e.files:
            if f in owner:
                problems.append(f'{f} is in two patches: {owner[f]} and {e.patch}')
            owner[f] = e.patch
    for f in files:
        if f not in owner:
            problems.append(f'{f} is in no patch of the series: add it to '
                            f'{os.path.relpath(plan.path, TOP)} ("add" under a "patch")')
    planned = [e.patch for e in plan.entries()]
    for p in patch_files():
        n = planned.count(p)
        if n == 0:
            problems.append(f'patches/{p} is in no patch of the series: give it a "patch" line '
                            f'in {os.path.relpath(plan.path, TOP)}')
        elif n > 1:
            problems.append(f'patches/{p} is planned {n} times')
    if series_file() != planned:
        problems.append('patches/series does not list the plan\'s patches/ files in the plan\'s '
                        'order (build-kernel.sh applies patches/series; the series applies the '
                        'plan): make them the same')
    for s in plan.series:
        if not os.path.isfile(os.path.join(TOP, s.cover)):
            problems.append(f'plan line {s.lineno}: cover letter {s.cover} does not exist')
    return problems


# --- identity -------------------------------------------------------------

def identity():
    def conf(key):
        r = run(['git', 'config', '--get', key], cwd=TOP, check=False)
        return r.stdout.strip()
    name = os.environ.get('GIT_AUTHOR_NAME') or conf('user.name')
    email = os.environ.get('GIT_AUTHOR_EMAIL') or conf('user.email')
    if not name or not email:
        raise Error('no git identity: the patches are authored and signed off by whoever runs '
                    'this; set yours with git config user.name "Your Name" and '
                    'git config user.email you@example.net (or GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL)')
    if email.lower() in PLACEHOLDERS or name.lower() in PLACEHOLDERS:
        raise Error(f'"{name} <{email}>" is the overlay\'s placeholder identity, not a person: '
                    'set your own with git config user.name/user.email')
    if '<' in name or '>' in name or '<' in email or '>' in email or '@' not in email:
        raise Error(f'git identity "{name} <{email}>" is not "Name <address>"')
    return name, email


def git_env(name, email):
    env = dict(os.environ)
    env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
               GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
    return env


# --- the pristine tree ----------------------------------------------------

def tarball():
    t = os.environ.get('FGDS_LINUX_TARBALL')
    if t:
        return t
    got = sorted(glob.glob(os.path.join(ROOT, 'usr/src/linux-source-7.2.tar.*')))
    if not got:
        raise Error(f'no Linux 7.2 source in {ROOT}/usr/src (make toolchain installs it; '
                    'FGDS_ROOT names another toolchain root, FGDS_LINUX_TARBALL a tarball)')
    return got[0]


def pristine():
    """The git repository holding pristine 7.2; imported once per tarball."""
    tb = tarball()
    st = os.stat(tb)
    stamp = f'{os.path.basename(tb)} {st.st_size} {int(st.st_mtime)}\n'
    stamp_path = os.path.join(PRISTINE, '.git', 'fgds-pristine')
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        make_bare()
        return PRISTINE
    log(f'importing {os.path.basename(tb)} into {os.path.relpath(PRISTINE, TOP)} (once)')
    if os.path.exists(PRISTINE):
        if not os.path.exists(os.path.join(PRISTINE, '.git')):
            raise Error(f'{PRISTINE} exists and is not the pristine repository: remove it')
        run(['git', 'worktree', 'prune'], cwd=PRISTINE, check=False)
        shutil.rmtree(PRISTINE)
    os.makedirs(PRISTINE)
    env = dict(os.environ, GIT_AUTHOR_NAME='linux-source', GIT_AUTHOR_EMAIL='linux-source@localhost',
               GIT_COMMITTER_NAME='linux-source', GIT_COMMITTER_EMAIL='linux-source@localhost',
               GIT_AUTHOR_DATE='2000-01-01T00:00:00Z', GIT_COMMITTER_DATE='2000-01-01T00:00:00Z')
    run(['tar', '-xf', tb, '-C', PRISTINE, '--strip-components=1'])
    run(['git', 'init', '-q', '-b', 'pristine', '.'], cwd=PRISTINE)
    # Every file of the tarball, including those the tree's .gitignore files name.
    run(['git', 'add', '-f', '-A', '.'], cwd=PRISTINE, env=env)
    run(['git', 'commit', '-q', '-m', f'{os.path.basename(tb)}, unchanged'], cwd=PRISTINE, env=env)
    run(['git', 'tag', '-f', PRISTINE_TAG], cwd=PRISTINE)
    with open(stamp_path, 'w') as f:
        f.write(stamp)
    make_bare()
    return PRISTINE


def make_bare():
    """Keeps only the repository: its worktrees are where trees are checked out
    (disk is scarce: a checkout of 7.2 is 1.8 GB)."""
    if run(['git', 'config', '--get', 'core.bare'], cwd=PRISTINE, check=False).stdout.strip() == 'true':
        return
    for name in os.listdir(PRISTINE):
        if name != '.git':
            path = os.path.join(PRISTINE, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    run(['git', 'config', 'core.bare', 'true'], cwd=PRISTINE)


def worktree(path):
    """A worktree of the pristine repository at `path`, reset to the pristine commit."""
    repo = pristine()
    broken = os.path.exists(path) and run(['git', 'rev-parse', '--git-dir'], cwd=path,
                                          check=False).returncode != 0
    if broken or not os.path.exists(os.path.join(path, '.git')):
        if os.path.exists(path):
            shutil.rmtree(path)
        run(['git', 'worktree', 'prune'], cwd=repo)
        run(['git', 'worktree', 'add', '-q', '--detach', path, PRISTINE_TAG], cwd=repo)
    run(['git', 'am', '--abort'], cwd=path, check=False)
    run(['git', 'checkout', '-q', '-f', '--detach', PRISTINE_TAG], cwd=path)
    run(['git', 'clean', '-q', '-f', '-d', '-x'], cwd=path)
    return path


def drop_worktree(path):
    """Removes the worktree at `path`, if there is one, and git's record of it."""
    if os.path.exists(path):
        shutil.rmtree(path)
        run(['git', 'worktree', 'prune'], cwd=PRISTINE, check=False)


def kernel_version(tree):
    v = {}
    with open(os.path.join(tree, 'Makefile')) as f:
        for line in f:
            m = re.match(r'^(VERSION|PATCHLEVEL|SUBLEVEL) = (\d+)', line)
            if m:
                v[m.group(1)] = m.group(2)
            if len(v) == 3:
                break
    return f"{v['VERSION']}.{v['PATCHLEVEL']}.{v['SUBLEVEL']}"


# --- building the series --------------------------------------------------

def message(patch_path, name, email):
    """The commit message of a patches/ file: its header, signed off by the sender."""
    text = open(patch_path).read()
    head = re.split(r'^---$', text, maxsplit=1, flags=re.M)[0]
    lines = head.splitlines()
    subject = None
    body = []
    in_body = False
    for ln in lines:
        if not in_body:
            m = re.match(r'^Subject:\s*(?:\[PATCH[^\]]*\]\s*)?(.*)$', ln)
            if m:
                subject = m.group(1).strip()
                continue
            if re.match(r'^(From|Date):', ln):
                continue
            if ln.strip() == '':
                if subject is not None:
                    in_body = True
                continue
        if re.match(r'^Signed-off-by:', ln, re.I):
            continue
        body.append(ln)
    if not subject:
        raise Error(f'{os.path.relpath(patch_path, TOP)}: no "Subject:" line in its header')
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    sob = f'Signed-off-by: {name} <{email}>'
    trailer = re.compile(r'^[A-Za-z-]+: \S')
    last_par = []
    for ln in reversed(body):
        if not ln.strip():
            break
        last_par.append(ln)
    if body and last_par and all(trailer.match(x) for x in last_par):
        msg = '\n'.join([subject, ''] + body + [sob])
    else:
        msg = '\n'.join([subject, ''] + body + ([''] if body else []) + [sob])
    return msg + '\n'


def apply_patch(tree, patch_path):
    r = run(['patch', '-d', tree, '-p1', '-s', '--no-backup-if-mismatch', '-f', '-i', patch_path],
            check=False)
    if r.returncode != 0:
        raise Error(f'{os.path.relpath(patch_path, TOP)} does not apply: '
                    f'{(r.stdout + r.stderr).strip()[-1500:]}')


def touched(patch_path):
    """Paths a patches/ file edits (its "+++ b/PATH" lines)."""
    with open(patch_path) as f:
        return sorted({m.group(1) for m in re.finditer(r'^\+\+\+ b/(\S+)', f.read(), re.M)})


def copy_files(tree, files):
    for f in files:
        dst = os.path.join(tree, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(TOP, f), dst)


def substitute_sender(tree, name, email):
    path = os.path.join(tree, 'MAINTAINERS')
    s = open(path).read()
    if SENDER_TOKEN in s:
        with open(path, 'w') as f:
            f.write(s.replace(SENDER_TOKEN, f'{name} <{email}>'))


def build_commits(plan, tree, name, email):
    """Commits the plan's patches in `tree`; returns [(series, base, head)]."""
    env = git_env(name, email)
    out = []
    for s in plan.series:
        base = run(['git', 'rev-parse', 'HEAD'], cwd=tree).stdout.strip()
        for e in s.entries:
            p = os.path.join(TOP, 'patches', e.patch)
            apply_patch(tree, p)
            copy_files(tree, e.files)
            substitute_sender(tree, name, email)
            # Only what the patch touches (a whole-tree add stats 90,000
            # files); -f: Debian's linux-source tarball ships a .gitignore
            # that ignores every top-level path.
            run(['git', 'add', '-f', '-A', '--'] + touched(p) + e.files + ['MAINTAINERS'],
                cwd=tree)
            if not run(['git', 'diff', '--cached', '--quiet'], cwd=tree, check=False).returncode:
                raise Error(f'patches/{e.patch} changes nothing')
            subprocess.run(['git', 'commit', '-q', '--no-verify', '-F', '-'], cwd=tree, env=env,
                           input=message(p, name, email), text=True, check=True)
        head = run(['git', 'rev-parse', 'HEAD'], cwd=tree).stdout.strip()
        out.append((s, base, head))
    return out


def get_maintainers(tree, patch, sender_email, cache={}):
    """(to, cc) for one patch from scripts/get_maintainer.pl of the tree."""
    r = run(['perl', 'scripts/get_maintainer.pl', '--no-git', '--no-git-fallback', '--rolestats',
             '--nosubstatus', patch], cwd=tree)
    to, cc = [], []
    for ln in r.stdout.splitlines():
        m = re.match(r'^(.*?@[^\s>]*>?)\s+\((.*)\)\s*$', ln)
        addr, role = (m.group(1), m.group(2)) if m else (ln.strip(), '')
        if not addr or sender_email.lower() in addr.lower():
            continue
        if re.match(r'^(maintainer|supporter|odd fixer|chief penguin)', role):
            if addr not in to:
                to.append(addr)
        elif addr not in cc:
            cc.append(addr)
    return to, cc


def fill_cover(path, cover_file, to, cc, base_desc):
    text = open(path).read()
    lines = open(os.path.join(TOP, cover_file)).read().split('\n')
    subject = lines[0].strip()
    blurb = '\n'.join(lines[1:]).strip('\n').replace('@BASE@', base_desc)
    text = text.replace('*** SUBJECT HERE ***', subject).replace('*** BLURB HERE ***', blurb)
    write_with_recipients(path, text, to, cc)


def write_with_recipients(path, text, to, cc):
    head, sep, rest = text.partition('\n\n')
    hdr = head.split('\n')
    # After the Subject: header (and its continuation lines).
    i = next(n for n, ln in enumerate(hdr) if ln.startswith('Subject:')) + 1
    while i < len(hdr) and hdr[i].startswith((' ', '\t')):
        i += 1
    extra = []
    if to:
        extra.append('To: ' + ',\n    '.join(to))
    if cc:
        extra.append('Cc: ' + ',\n    '.join(cc))
    hdr[i:i] = extra
    with open(path, 'w') as f:
        f.write('\n'.join(hdr) + sep + rest)


def prepare_outdir(outdir):
    marker = os.path.join(outdir, '.fgds-series')
    if os.path.isdir(outdir) and os.listdir(outdir) and not os.path.exists(marker):
        raise Error(f'{outdir} exists and was not made by fgds-series.py: move it away')
    os.makedirs(outdir, exist_ok=True)
    for f in glob.glob(os.path.join(outdir, '[0-9][0-9][0-9][0-9]-*.patch')):
        os.unlink(f)
    open(marker, 'w').close()


def generate(plan, outroot, tree, name, email, quiet=False):
    """Writes every series; returns [(series, outdir, [patch files])]."""
    problems = plan_check(plan)
    if problems:
        raise Error('the plan does not match the overlay:\n  ' + '\n  '.join(problems))
    worktree(tree)
    version = kernel_version(tree)
    ranges = build_commits(plan, tree, name, email)
    prepare_outdir(outroot)
    written = []
    env = git_env(name, email)
    for n, (s, base, head) in enumerate(ranges):
        outdir = os.path.join(outroot, os.path.relpath(s.outdir, 'build/series')) \
            if s.outdir.startswith('build/series') else os.path.join(outroot, s.outdir)
        outdir = os.path.normpath(outdir)
        prepare_outdir(outdir)
        run(['git', 'format-patch', '-q', '--cover-letter', '--numbered', '--no-signature',
             '--subject-prefix=PATCH', '-o', outdir, f'{base}..{head}'], cwd=tree, env=env)
        files = sorted(glob.glob(os.path.join(outdir, '[0-9][0-9][0-9][0-9]-*.patch')))
        cover, patches = files[0], files[1:]
        all_to, all_cc = [], []
        for p in patches:
            to, cc = get_maintainers(tree, p, email)
            cc += [a for a in s.cc if a not in cc]
            cc = [a for a in cc if a not in to]
            write_with_recipients(p, open(p).read(), to, cc)
            all_to += [a for a in to if a not in all_to]
            all_cc += [a for a in cc if a not in all_cc]
        all_cc = [a for a in all_cc if a not in all_to]
        if n == 0:
            base_desc = f'Linux {version}'
        else:
            prev = ranges[n - 1][0]
            base_desc = (f'Linux {version} with the {prev.name} series\n'
                         f'({len(prev.entries)} patches) applied')
        fill_cover(cover, s.cover, all_to, all_cc, base_desc)
        written.append((s, outdir, patches, cover))
        if not quiet:
            log(f'{s.name}: {len(patches)} patches and a cover letter in '
                f'{os.path.relpath(outdir, TOP)}')
    return written


# --- checks ---------------------------------------------------------------

def codespell_dict():
    """codespell's dictionary, wherever a python3 on this machine has it."""
    cands = ['/usr/share/codespell/dictionary.txt']
    for py in ('python3', '/usr/bin/python3'):
        r = run([py, '-c', 'import codespell_lib, os; '
                 'print(os.path.join(os.path.dirname(codespell_lib.__file__), "data", '
                 '"dictionary.txt"))'], check=False)
        if r.returncode == 0:
            cands.append(r.stdout.strip())
    for c in cands:
        if os.path.isfile(c):
            return filtered_dict(c)
    raise Error('codespell is not installed (apt-get install codespell, or pip install '
                'codespell): checkpatch --codespell needs its dictionary')


def filtered_dict(path):
    """A copy of codespell's dictionary without the words of codespell-ignore."""
    ignore_path = os.path.join(TOP, 'tools/testing/fgds-series/codespell-ignore')
    with open(ignore_path) as f:
        ignore = {ln.strip().lower() for ln in f if ln.strip() and not ln.startswith('#')}
    out = os.path.join(BUILD, 'series-work', 'codespell-dictionary.txt')
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(path) as f:
        kept = [ln for ln in f if ln.split('->', 1)[0].strip().lower() not in ignore]
    with open(out + '.tmp', 'w') as f:
        f.writelines(kept)
    os.replace(out + '.tmp', out)
    return out


# Commit ids cannot be looked up: the pristine repository has the 7.2 tree
# but not its history. Fixes: tags are checked by hand (see their patches).
CHECKPATCH = ['--strict', '--codespell', '--color=never', '--ignore', 'UNKNOWN_COMMIT_ID']


def checkpatch_cached(tree, patch, dictionary):
    """checkpatch(), remembered by the patch's content (its headers aside) and
    the checker's own files, in build/series-work/checkpatch-cache/."""
    import hashlib
    h = hashlib.sha256()
    text = open(patch, 'rb').read()
    # Not the "From <commit>" and Date: lines, which change on every run.
    h.update(re.sub(rb'^(From [0-9a-f]{40} |Date: ).*$', b'', text, flags=re.M))
    for f in ('scripts/checkpatch.pl', 'scripts/spelling.txt', 'scripts/spdxcheck.py'):
        h.update(open(os.path.join(tree, f), 'rb').read())
    h.update(open(dictionary, 'rb').read())
    h.update(' '.join(CHECKPATCH).encode())
    cache = os.path.join(BUILD, 'series-work', 'checkpatch-cache', h.hexdigest())
    if os.path.exists(cache):
        e, w, c, out = open(cache).read().split('\n', 3)
        return int(e), int(w), int(c), out
    e, w, c, out = checkpatch(tree, patch, dictionary)
    if e is not None:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache + '.tmp', 'w') as f:
            f.write(f'{e}\n{w}\n{c}\n{out}')
        os.replace(cache + '.tmp', cache)
    return e, w, c, out


def checkpatch(tree, patch, dictionary=None):
    """(errors, warnings, checks, output) of checkpatch.pl --strict --codespell."""
    # scripts/spdxcheck.py needs python3's ply and git modules; the system's
    # python3 has them where a python3 earlier on PATH may not.
    env = dict(os.environ, PATH='/usr/bin:' + os.environ.get('PATH', ''))
    r = run(['perl', 'scripts/checkpatch.pl'] + CHECKPATCH +
            ['--codespellfile', dictionary or codespell_dict(), patch], cwd=tree, env=env,
            check=False)
    out = r.stdout + r.stderr
    if 'No codespell typos will be found' in out:
        raise Error(f'checkpatch found no codespell dictionary: {out.strip()[:300]}')
    m = re.search(r'total: (\d+) errors, (\d+) warnings, (\d+) checks', out)
    if not m:
        return None, None, None, out
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), out


def overlay_tree(plan, tree, name, email):
    """The tree object of pristine 7.2 + patches/series + every overlay file."""
    worktree(tree)
    paths = set(['MAINTAINERS'])
    for p in series_file():
        apply_patch(tree, os.path.join(TOP, 'patches', p))
        paths.update(touched(os.path.join(TOP, 'patches', p)))
    files = overlay_files(plan)
    copy_files(tree, files)
    substitute_sender(tree, name, email)
    run(['git', 'add', '-f', '-A', '--'] + sorted(paths | set(files)), cwd=tree)
    # Anything else the patches left (a file they create that no +++ names).
    if run(['git', 'status', '--porcelain', '--ignored', '--untracked-files=all'],
           cwd=tree).stdout.strip():
        run(['git', 'add', '-f', '-A', '.'], cwd=tree)
    return run(['git', 'write-tree'], cwd=tree).stdout.strip()


def applied_tree(written, tree, name, email):
    """The tree object of pristine 7.2 with every generated patch applied by git am."""
    worktree(tree)
    env = git_env(name, email)
    for s, outdir, patches, cover in written:
        r = run(['git', 'am', '-q', '--whitespace=nowarn'] + patches, cwd=tree, env=env,
                check=False)
        if r.returncode != 0:
            raise Error(f'the {s.name} series does not apply with git am: '
                        f'{(r.stdout + r.stderr).strip()[-1500:]}')
    return run(['git', 'rev-parse', 'HEAD^{tree}'], cwd=tree).stdout.strip()


def cmd_check(args):
    """CI's cheap part; prints "ok"/"not ok" lines, returns the number of failures."""
    fails = 0
    t0 = time.time()

    def report(ok, what, detail='', todo=None):
        """todo: (count, found, reason) of findings the plan knows of: a TAP TODO
        while there are no more of them than it says."""
        nonlocal fails
        if not ok and todo and todo[1] <= todo[0]:
            print(f'not ok {what} # TODO {todo[1]} known (the plan allows {todo[0]}): {todo[2]}')
            return
        print(f"{'ok' if ok else 'not ok'} {what}")
        if ok and todo and todo[0]:
            print(f'# the plan allows {todo[0]} known findings here and there are none: '
                  'remove its "todo" line')
        if not ok:
            fails += 1
            for ln in detail.rstrip().splitlines()[:60]:
                print(f'# {ln}')

    plan = Plan()
    problems = plan_check(plan)
    report(not problems, 'series: every overlay file and patches/ file is in one patch of the plan',
           '\n'.join(problems))
    if problems:
        return fails
    name, email = identity()
    work = os.path.join(BUILD, 'series-work')
    os.makedirs(work, exist_ok=True)
    out = tempfile.mkdtemp(prefix='check-', dir=work)
    try:
        t = time.time()
        written = generate(plan, out, os.path.join(work, 'gen'), name, email, quiet=True)
        log(f'generated in {time.time() - t:.0f} s')
        gen = os.path.join(work, 'gen')
        for s, outdir, patches, cover in written:
            todos = {p: e.todo for p, e in zip(patches, s.entries)}
            for p in patches + [cover]:
                text = open(p).read()
                # Headers as mail readers see them: continuation lines unfolded.
                text = re.sub(r'\n[ \t]+', ' ', text.split('\n\n', 1)[0]) + '\n\n' + \
                    text.split('\n\n', 1)[-1]
                bad = [x for x in PLACEHOLDERS + (SENDER_TOKEN,) if x.lower() in text.lower()]
                sob = f'Signed-off-by: {name} <{email}>'
                ok = not bad and (p == cover or (f'From: {name} <{email}>' in text and sob in text))
                t = todos.get(p, {}).get('identity')
                found = sum(text.lower().count(x.lower()) for x in bad)
                report(ok, f'series: {s.name}/{os.path.basename(p)}: from and signed off by the '
                       f'sender, no placeholder identity', f'found: {bad}' if bad else
                       'From:/Signed-off-by: of the sender missing',
                       (t[0], found, t[1]) if t and bad and f'From: {name} <{email}>' in text
                       else None)
            # Two at a time or as many as there are CPUs: checkpatch takes some
            # 40 s of CPU for the selftests' patch alone.
            from concurrent.futures import ThreadPoolExecutor
            dictionary = codespell_dict()
            with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
                results = list(pool.map(lambda p: checkpatch_cached(gen, p, dictionary), patches))
            for p, (e, w, c, txt) in zip(patches, results):
                t = todos.get(p, {}).get('checkpatch')
                report(e == 0 and w == 0 and c == 0,
                       f'series: {s.name}/{os.path.basename(p)}: checkpatch --strict --codespell: '
                       f'{e} errors, {w} warnings, {c} checks', txt,
                       (t[0], (e or 0) + (w or 0) + (c or 0), t[1]) if t and e is not None
                       else None)
        log(f'identity and checkpatch done at {time.time() - t0:.0f} s')
        # The same worktree for both: one checkout of 7.2 is 1.8 GB.
        t_series = applied_tree(written, gen, name, email)
        t_overlay = overlay_tree(plan, gen, name, email)
        log(f'trees compared at {time.time() - t0:.0f} s')
        diff = ''
        if t_series != t_overlay:
            diff = run(['git', 'diff', '--stat', t_overlay, t_series], cwd=gen).stdout
        report(t_series == t_overlay,
               'series: the series applied to pristine 7.2 gives exactly the overlay\'s tree',
               'overlay -> series:\n' + diff)
    except Error as err:
        report(False, 'series: generate and check', str(err))
    finally:
        shutil.rmtree(out, ignore_errors=True)
        # The checkout goes too: make check builds the kernel while this
        # runs, and 1.8 GB of disk is worth more than the next check's
        # checkout (a new worktree is some 30 s).
        drop_worktree(os.path.join(work, 'gen'))
    log(f'check took {time.time() - t0:.0f} s')
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    sub.add_parser('plan-check')
    g = sub.add_parser('generate')
    g.add_argument('--out', default=os.path.join(TOP, 'build', 'series'),
                   help='where build/series/ goes (default: build/series)')
    sub.add_parser('check')
    sub.add_parser('pristine', help='import the pristine tree if needed; print its path')
    sub.add_parser('codespell-dict', help='print the path of codespell\'s dictionary')
    sub.add_parser('todos', help='print "SERIES N CHECK COUNT" for the plan\'s known findings')
    args = ap.parse_args()
    try:
        if args.cmd == 'plan-check':
            problems = plan_check(Plan())
            for p in problems:
                print(f'fgds-series: {p}', file=sys.stderr)
            if problems:
                sys.exit(1)
            log('the plan covers every overlay file and patches/ file')
        elif args.cmd == 'generate':
            name, email = identity()
            if RESERVED_DOMAIN.search(email):
                log(f'warning: {email} is in a reserved domain: mail to it bounces; the series '
                    'cannot be sent as it is')
            generate(Plan(), os.path.abspath(args.out), os.path.join(BUILD, 'series-work', 'gen'),
                     name, email)
        elif args.cmd == 'check':
            sys.exit(1 if cmd_check(args) else 0)
        elif args.cmd == 'pristine':
            print(pristine())
        elif args.cmd == 'codespell-dict':
            print(codespell_dict())
        elif args.cmd == 'todos':
            for s in Plan().series:
                for n, e in enumerate(s.entries, 1):
                    for check, (count, _) in e.todo.items():
                        print(s.name, n, check, count)
    except Error as e:
        die(str(e))


if __name__ == '__main__':
    main()
