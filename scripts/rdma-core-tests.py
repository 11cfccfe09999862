#!/usr/bin/env python3
"""rdma-core's own Python tests over ndverbs, counted per module.

Runs rdma-core 44's `tests/run_tests.py` (from an rdma-core v44.0 source
tree) against device ndv0 through `ndv run`, in a network namespace of its
own so the device is `lo` alone, and prints TESTING.md's table: tests, pass,
skip, fail per module, with the skip reasons and the failed tests. Needs
root (or an unprivileged user namespace), Debian's python3-pyverbs and a
release build (cargo build --release -p ndv).

  scripts/rdma-core-tests.py RDMA_CORE_DIR [LOG]    (LOG: keep the output)
  scripts/rdma-core-tests.py --parse LOG            (count an earlier run)

unittest's verbose output names each test `test_NAME (tests.MODULE.CLASS.
test_NAME)` and gives its result (`ok`, `skipped 'why'`, `FAIL`, `ERROR`)
at the end of that line or, after a docstring, of a later one.
"""
import collections
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = re.compile(r"^(test_\w+) \((tests\.(\w+)\.[\w.]+)\)", re.M)
RESULT = re.compile(
    r"(?: \.\.\. |^)(ok|skipped (?:'(.*?)'|\"(.*?)\")|FAIL|ERROR|expected failure)$", re.M
)


def run(tree, log):
    ndv = os.environ.get("NDV", os.path.join(HERE, "target/release/ndv"))
    inner = f"ip link set lo up && exec {ndv} run -- /usr/bin/python3 tests/run_tests.py --dev ndv0 -v"
    cmd = ["unshare", "-rn", "sh", "-c", inner] if os.geteuid() else ["unshare", "-n", "sh", "-c", inner]
    out = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    text = out.stdout + out.stderr
    if log:
        with open(log, "w") as f:
            f.write(text)
    return text


def table(text):
    mods = collections.OrderedDict()
    for m in TEST.finditer(text):
        r = RESULT.search(text, m.end())
        if r is None:
            continue
        d = mods.setdefault(
            m.group(3), {"n": 0, "ok": 0, "skip": 0, "fail": 0, "why": collections.Counter(), "failed": []}
        )
        d["n"] += 1
        if r.group(1) == "ok":
            d["ok"] += 1
        elif r.group(1).startswith("skipped"):
            d["skip"] += 1
            d["why"][r.group(2) or r.group(3)] += 1
        else:
            d["fail"] += 1
            d["failed"].append(m.group(1))
    total = [0, 0, 0, 0]
    print("| module | tests | pass | skip | fail | why the skips |")
    print("|---|---|---|---|---|---|")
    for mod in sorted(mods):
        d = mods[mod]
        why = "; ".join(f"{k} ({v})" for k, v in d["why"].items())
        failed = f" failed: {', '.join(d['failed'])}" if d["failed"] else ""
        print(f"| `{mod}` | {d['n']} | {d['ok']} | {d['skip']} | {d['fail']} | {why}{failed} |")
        total = [t + x for t, x in zip(total, (d["n"], d["ok"], d["skip"], d["fail"]))]
    print(f"\n{total[0]} tests, {total[1]} pass, {total[2]} skip, {total[3]} fail")
    return total[3]


def main(argv):
    if len(argv) == 3 and argv[1] == "--parse":
        with open(argv[2]) as f:
            return 1 if table(f.read()) else 0
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if table(run(argv[1], argv[2] if len(argv) == 3 else None)) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
