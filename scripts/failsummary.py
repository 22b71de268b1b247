#!/usr/bin/env python3
"""failsummary.py: prints, for each failed test in a meson testlog.json, the lines that say why
(check's failure lines, the harness's per-rank complaints, errors), at most a few per test, so
that the end of a long CI log, often all that is kept, names what failed and how."""
import json
import re
import sys

WHY = re.compile(r":[FE]:|^\[rank |not ok|FAIL|Error|error:|expected|ERROR: AddressSanitizer|"
                 r"runtime error|WARNING: ThreadSanitizer|Assertion|timed out|TIMEOUT")


def main(path, per_test=12):
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        print(f"failsummary: {e}")
        return
    for line in lines:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
            continue
        text = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
        hits = [s for s in text.splitlines() if WHY.search(s)]
        print(f"== {t.get('name')}: {t.get('result')} after {t.get('duration', 0):.1f} s, "
              f"exit {t.get('returncode')}")
        for s in (hits or text.splitlines())[-per_test:]:
            print("   " + s[:400])


if __name__ == "__main__":
    main(sys.argv[1])
