"""The host example at the top of README.md runs as written."""

import contextlib
import io
import os
import re

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


def first_example():
    with open(README) as f:
        text = f.read()
    sec = text.split("## A first run", 1)
    assert len(sec) == 2, "README.md has no '## A first run' section"
    m = re.search(r"```python\n(.*?)```", sec[1], re.S)
    assert m, "no python block in '## A first run'"
    return m.group(1)


def test_readme_host_example_runs():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(first_example(), "README.md", "exec"), {"__name__": "__readme__"})
    line = out.getvalue().strip()
    assert re.fullmatch(r"\d+ bytes direct, 0 bounced", line), line
    assert int(line.split()[0]) >= 9 << 20  # 4 MiB written, 4 + 1 MiB read
