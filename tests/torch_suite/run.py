#!/usr/bin/env python3
"""run.py: runs torch's own distributed test suite (distributed_test, 2 ranks) over tutti and over
Gloo registered the same way (as a plugin backend, "gloo_plugin"), records pass / fail / skip per
test and backend, and prints every test Gloo passes that tutti does not, each with the reason
tutti gave. The tests tutti is known to fail are listed, one line of explanation each, in
expected.txt beside this file: the run fails (exit 1) on a failure not listed there, and says
which listed tests pass now (they should leave the list).

    .venv/bin/python tests/torch_suite/run.py              # both backends, ranks forked
    .venv/bin/python tests/torch_suite/run.py --spawn      # ranks spawned, as torch's CI does
    .venv/bin/python tests/torch_suite/run.py -k all_reduce --backends tutti

Each backend's tests run in suite.py processes (--jobs of them at once, the tests dealt out
among them), each under `timeout`; every test also has torch's own per-test deadline, set here
by DISTRIBUTED_TESTS_DEFAULT_TIMEOUT (--test-timeout). Results go to --out (default
build/torch-suite/): BACKEND.jsonl (one JSON object per test), BACKEND-N.log (the ranks' output),
summary.txt (what is printed). tutti_torch is imported from the Python path, else from
<repo>/build/python (scripts/build.sh).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join(HERE, "suite.py")
EXPECTED = os.path.join(HERE, "expected.txt")
REFERENCE = "gloo_plugin"
stuck_ranks = {}  # backend: suite.py's lines about rank processes it had to kill


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="tutti,%s" % REFERENCE,
                   help="comma-separated: tutti, gloo_plugin, gloo, tutti_as_gloo (default "
                        "tutti,gloo_plugin)")
    p.add_argument("-k", action="append", default=[],
                   help="only tests whose name contains this (repeatable)")
    p.add_argument("--jobs", type=int, default=1,
                   help="suite.py processes at once per backend (default 1; each test uses 2 "
                        "rank processes)")
    p.add_argument("--spawn", action="store_true",
                   help="spawn the ranks (torch's way: 2-3 s more per test) instead of forking")
    p.add_argument("--test-timeout", type=int, default=120,
                   help="seconds one test may take before torch kills its ranks (default 120)")
    p.add_argument("--timeout", type=int, default=3600,
                   help="seconds one suite.py process may take in all (default 3600)")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "torch-suite"),
                   help="directory for results and logs (default build/torch-suite)")
    p.add_argument("--expected", default=EXPECTED,
                   help="the known tutti failures, 'test_name  reason' per line")
    p.add_argument("--python", default=sys.executable, help="the Python with torch")
    a = p.parse_args()
    a.backends = [b for b in a.backends.split(",") if b]
    for b in a.backends:
        if b not in ("tutti", "gloo_plugin", "gloo", "tutti_as_gloo"):
            p.error("--backends: %r is not tutti, gloo_plugin, gloo or tutti_as_gloo" % b)
    if a.jobs < 1 or a.test_timeout < 1 or a.timeout < 1:
        p.error("--jobs, --test-timeout and --timeout must be positive")
    return a


def env_for(a, backend, tmp):
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE="2", TEMP_DIR=tmp,
               TORCH_SUITE_START="spawn" if a.spawn else "fork",
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(a.test_timeout),
               OMP_NUM_THREADS="1", PYTORCH_PRINT_REPRO_ON_FAILURE="0",
               PYTHONWARNINGS="ignore")
    build = os.path.join(ROOT, "build", "python")
    if os.path.isdir(os.path.join(build, "tutti_torch")):
        env["PYTHONPATH"] = build + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    for var in ("RANK", "LOCAL_RANK", "MASTER_PORT"):  # the tests choose their own
        env.pop(var, None)
    return env


def list_tests(a):
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "barrier"))
        p = subprocess.run(["timeout", "300", a.python, SUITE, "--list"], text=True,
                           env=env_for(a, REFERENCE, tmp), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("run.py: suite.py --list failed (exit %d):\n%s" % (p.returncode,
                                                                    p.stderr[-3000:]))
    names = p.stdout.split()
    if a.k:
        names = [n for n in names if any(k in n for k in a.k)]
    return names


def run_backend_tasks(a, names):
    """Starts every (backend, shard) suite.py, --jobs shards per backend at once, backends one
    after the other; returns {backend: {test: result}}."""
    os.makedirs(a.out, exist_ok=True)
    results = {}
    stuck_ranks.clear()
    for backend in a.backends:
        jsonl = os.path.join(a.out, backend + ".jsonl")
        open(jsonl, "w").close()
        t0 = time.monotonic()
        procs = []
        tmps = []  # the shards' scratch directories, removed once they are done
        shards = [names[i::a.jobs] for i in range(a.jobs)]
        for i, shard in enumerate(shards):
            if not shard:
                continue
            tmp = tempfile.mkdtemp(prefix="torch-suite-%s-" % backend)
            os.mkdir(os.path.join(tmp, "barrier"))
            listing = os.path.join(tmp, "tests.txt")
            with open(listing, "w") as f:
                f.write("\n".join(shard) + "\n")
            part = os.path.join(a.out, "%s-%d.jsonl" % (backend, i))
            open(part, "w").close()
            log = open(os.path.join(a.out, "%s-%d.log" % (backend, i)), "w")
            cmd = ["timeout", "-k", "10", str(a.timeout), a.python, SUITE, "--tests", listing,
                   "--out", part, "-v"]
            procs.append((subprocess.Popen(cmd, env=env_for(a, backend, tmp), stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True),
                          part, log, shard))
            tmps.append(tmp)
        got = {}
        stuck = []
        for p, part, log, shard in procs:
            rc = p.wait()
            log.close()
            tmp = tmps.pop(0)
            shutil.rmtree(tmp, ignore_errors=True)
            with open(log.name, errors="replace") as f:
                stuck += [ln.strip() for ln in f if "still alive" in ln]
            with open(part) as f:
                for line in f:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    got[r["test"]] = r
            for n in shard:  # a test the process never reported: it died or hung there
                if n not in got:
                    got[n] = {"test": n, "status": "fail", "seconds": 0.0,
                              "message": "not reported: suite.py exited %d before or during "
                                         "it (see %s)" % (rc, log.name)}
        with open(jsonl, "w") as f:
            for n in names:
                f.write(json.dumps(got[n]) + "\n")
        results[backend] = got
        stuck_ranks[backend] = stuck
        counts = {s: sum(1 for r in got.values() if r["status"] == s)
                  for s in ("pass", "fail", "skip", "xfail")}
        print("run.py: %-11s %3d pass %3d fail %3d skip %3d xfail  in %.0f s" %
              (backend, counts["pass"], counts["fail"], counts["skip"], counts["xfail"],
               time.monotonic() - t0), file=sys.stderr, flush=True)
    return results


def reason(message):
    """The last exception line of a failure's text, in one line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    pick = None
    for ln in lines:
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Timeout|Failure)\b.*:", ln) or \
                ln.startswith("AssertionError") or ln.startswith("not reported"):
            pick = ln
    if pick is None:
        pick = lines[-1] if lines else "(no message)"
    return " ".join(pick.split())[:300]


def read_expected(path):
    expected = {}
    if not os.path.exists(path):
        return expected
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            name, _, why = ln.partition(" ")
            expected[name] = why.strip()
    return expected


def main():
    a = parse_args()
    a.out = os.path.abspath(a.out)
    names = list_tests(a)
    if not names:
        sys.exit("run.py: no tests match %s" % a.k)
    t0 = time.monotonic()
    print("run.py: %d tests of torch.testing._internal.distributed.distributed_test, 2 ranks, "
          "ranks %s, backends %s" % (len(names), "spawned" if a.spawn else "forked",
                                     ", ".join(a.backends)), file=sys.stderr, flush=True)
    results = run_backend_tasks(a, names)
    out = []
    for b in a.backends:
        got = results[b]
        out.append("%-11s %s" % (b, "  ".join(
            "%s %d" % (s, sum(1 for r in got.values() if r["status"] == s))
            for s in ("pass", "fail", "skip", "xfail"))))
    for b in a.backends:
        if stuck_ranks.get(b):
            out.append("%s: %d rank processes outlived their test (SIGTERM did not end them) "
                       "and were killed:" % (b, len(stuck_ranks[b])))
            out += ["  " + ln for ln in stuck_ranks[b]]
    bad = False
    if "tutti" in results and REFERENCE in results:
        ref, tut = results[REFERENCE], results["tutti"]
        expected = read_expected(a.expected)
        gaps = [n for n in names if ref[n]["status"] == "pass" and tut[n]["status"] != "pass"]
        out.append("")
        out.append("tests %s passes that tutti does not: %d" % (REFERENCE, len(gaps)))
        unexpected = []
        for n in gaps:
            known = n in expected
            out.append("  %-60s %-5s %s%s" % (n, tut[n]["status"], reason(tut[n]["message"])
                                             if tut[n]["status"] == "fail" else
                                             tut[n]["message"][:200],
                                             "" if known else "  [NOT IN expected.txt]"))
            if not known:
                unexpected.append(n)
        fixed = [n for n in expected if n in tut and tut[n]["status"] == "pass"]
        only_tutti = [n for n in names if tut[n]["status"] == "pass" and
                      ref[n]["status"] != "pass"]
        if only_tutti:
            out.append("")
            out.append("tests tutti passes that %s does not: %d" % (REFERENCE, len(only_tutti)))
            for n in only_tutti:
                out.append("  %-60s %s: %s" % (n, ref[n]["status"],
                                                reason(ref[n]["message"])))
        if fixed:
            out.append("")
            out.append("listed in expected.txt but passing now (remove them): %s"
                       % ", ".join(fixed))
        if unexpected:
            bad = True
            out.append("")
            out.append("FAILED: %d tests fail over tutti that %s passes and expected.txt does "
                       "not explain: %s" % (len(unexpected), REFERENCE, ", ".join(unexpected)))
        else:
            out.append("")
            out.append("OK: every test %s passes passes over tutti, or is explained in %s"
                       % (REFERENCE, os.path.relpath(a.expected, ROOT)))
    if "gloo" in results and "tutti_as_gloo" in results:
        # for information: the tests run only when BACKEND is "gloo"
        ref, tut = results["gloo"], results["tutti_as_gloo"]
        extra = [n for n in names if ref[n]["status"] == "pass" and
                 REFERENCE in results and results[REFERENCE][n]["status"] == "skip"]
        out.append("")
        out.append("for information, the tests that run only when BACKEND is \"gloo\" (%d "
                   "that built-in Gloo passes and the plugins skip), over tutti told it is Gloo:"
                   % len(extra) if extra else "for information: tutti_as_gloo against gloo")
        for n in extra or [n for n in names if ref[n]["status"] == "pass"]:
            r = tut[n]
            out.append("  %-60s %-5s %s" % (n, r["status"], reason(r["message"])
                                           if r["status"] == "fail" else ""))
    out.append("")
    out.append("%.0f s in all; results and logs in %s" % (time.monotonic() - t0, a.out))
    text = "\n".join(out)
    print(text, flush=True)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
