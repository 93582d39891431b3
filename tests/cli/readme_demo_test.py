#!/usr/bin/env python3
"""The README's quick-start report is what `modelgate scan examples/models/`
prints today: run it from the source tree and compare with the README block
that follows "`ci/demo.sh` ends with the scan's report".

usage: readme_demo_test.py PATH/TO/modelgate SOURCE_DIR
"""
import os
import subprocess
import sys

mg, src = os.path.abspath(sys.argv[1]), sys.argv[2]
with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
    readme = f.read()
anchor = readme.index("`ci/demo.sh` ends with the scan's report")
start = readme.index("```\n", anchor) + 4
block = readme[start:readme.index("```\n", start)]
p = subprocess.run([mg, "scan", "examples/models/"], cwd=src, capture_output=True, text=True)
if p.returncode != 1:
    sys.exit(f"demo scan exited {p.returncode}, want 1 (one file is rejected)\n{p.stderr}")
if p.stdout != block:
    sys.exit("README demo block is stale.\n--- README\n" + block + "--- modelgate prints\n" + p.stdout)
print("README demo block matches")
