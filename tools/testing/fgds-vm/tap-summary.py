#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Count TAP results over files; print failures and 'N passed, N failed, N skipped'.

A program whose plan (1..N) announced more results than it printed counts
the missing ones as failed: a test binary that crashed does not pass. A
failure is shown with the "# " lines around it (kselftest's come before the
result, check.sh's after it), so that the end of the output says why.
"""
import collections
import re
import sys

passed = failed = skipped = todo = 0
for path in sys.argv[1:]:
    plan = None
    seen = 0
    # The last diagnostic lines before a result; how many to show after a failure.
    before = collections.deque(maxlen=4)
    context = 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                if context and re.match(r"#\s+RUN\b", line):
                    context = 0
                if context:
                    print(f"    {line}")
                    context -= 1
                else:
                    before.append(line)
                continue
            context = 0
            m = re.match(r"^1\.\.(\d+)", line)
            if m and plan is None:
                plan = int(m.group(1))
                continue
            m = re.match(r"^(not ok|ok)\b\s*\d*\s*(.*)$", line)
            if not m:
                continue
            seen += 1
            name = m.group(2)
            earlier, before = list(before), collections.deque(maxlen=4)
            if re.search(r"#\s*SKIP", name, re.I):
                skipped += 1
            elif m.group(1) == "not ok" and re.search(r"#\s*TODO", name, re.I):
                # A known failure that someone is to fix (TAP's TODO): shown, not failed.
                todo += 1
                print(f"TODO: {path.rsplit('/', 1)[-1]}: {name}")
            elif m.group(1) == "ok":
                passed += 1
            else:
                failed += 1
                print(f"FAILED: {path.rsplit('/', 1)[-1]}: {name}")
                for b in earlier:
                    print(f"    {b}")
                context = 6
    if plan is not None and seen < plan:
        failed += plan - seen
        print(f"FAILED: {path.rsplit('/', 1)[-1]}: {plan - seen} planned results missing")
        for b in before:
            print(f"    {b}")
    if plan is None and seen == 0:
        failed += 1
        print(f"FAILED: {path.rsplit('/', 1)[-1]}: no TAP output")

line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
if todo:
    line += f", {todo} to do"
print(line)
sys.exit(1 if failed else 0)
