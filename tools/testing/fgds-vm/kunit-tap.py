#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""TAP for the KUnit Rust doctests the test kernel ran at boot.

Usage: kunit-tap.py CONSOLE_LOG KERNEL_CONFIG

Reads the rust_doctests_kernel suite's KTAP from the console log: one result
per doctest of the abstractions fgds adds or extends (rust/kernel/dma_buf.rs,
miscdevice.rs, pci.rs, pci/p2pdma.rs), one for all the
other kernel-crate doctests together (each failure named). A kernel built
without CONFIG_RUST_KERNEL_DOCTESTS gives one skipped result; one built with
it whose log has no suite result fails.
"""
import re
import sys

OURS = ("dma_buf_rs", "miscdevice_rs", "pci_rs", "pci_p2pdma_rs")

log, config = sys.argv[1], sys.argv[2]
try:
    with open(config, errors="replace") as f:
        enabled = "CONFIG_RUST_KERNEL_DOCTESTS=y\n" in f.read()
except OSError:
    enabled = False
if not enabled:
    print("1..1")
    print("ok 1 kunit: Rust doctests # SKIP kernel built without CONFIG_RUST_KERNEL_DOCTESTS")
    sys.exit(0)

ours, others, failed_others, suite = [], 0, [], None
with open(log, errors="replace") as f:
    for line in f:
        m = re.search(r"\]\s+(not ok|ok) \d+ (rust_doctest_kernel_\S+)(.*)$", line)
        if m:
            ok, name, rest = m.group(1) == "ok", m.group(2), m.group(3)
            if any(name.startswith(f"rust_doctest_kernel_{o}_") for o in OURS):
                ours.append((ok, name, rest.strip()))
            else:
                others += 1
                if not ok:
                    failed_others.append(name)
            continue
        m = re.search(r"\]\s+(not ok|ok) \d+ rust_doctests_kernel\b", line)
        if m:
            suite = m.group(1) == "ok"

results = [(ok, f"kunit: {name} {rest}".rstrip()) for ok, name, rest in ours]
if suite is None:
    results.append((False, "kunit: the rust_doctests_kernel suite did not finish"))
results.append((not failed_others and others > 0,
                f"kunit: {others} other kernel-crate doctests"
                + (f" ({len(failed_others)} failed: {' '.join(failed_others[:10])})"
                   if failed_others else "")))
if not ours:
    results.append((False, "kunit: no doctest of the fgds abstractions ran"))
print(f"1..{len(results)}")
for i, (ok, name) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} {name}")
