#!/usr/bin/python3
"""Runs the Criterion test binaries of one build and says what ran.

    tools/run_tests.py BUILD [--pass opt|asan] [--jobs N] [--fixtures DIR] [TEST...]

For each binary BUILD/tests/test_* (or only the TEST names given) it prints
one line "BUILD/test_x: N passed, N failed, N skipped (W s wall, C s CPU)",
every skipped test with the reason the test gave, and at the end the plain
closing line

    BUILD: N passed, N failed, N skipped

What counts.  A test's result is read from Criterion's TAP report
(--tap=FILE), line by line: "ok", "not ok", and "ok ... # SKIP reason".  A
binary that exits non-zero with no failing test in its report (it crashed
between tests, or its report was cut short) counts as one failure.

Skips are bounded.  Every skip must match an entry of tests/skips.allow: the
binary, a glob over suite::test, and the reason it may skip on CI's machine
(a SIMD level the CPU lacks, a kernel that gives tmpfs O_DIRECT).  A skip
that matches no entry is a failure, so a test that silently stopped running
(a missing npm package, io_uring blocked, no root) turns the suite red instead
of green.

The ASan pass.  With --pass asan the tests named in tests/asan_subset.txt are
left out (each entry says why: a family whose blocks another family already
runs under the sanitizers); they are passed to Criterion as a --filter and
counted as "not run in this pass", apart from the skips.

Two binaries run at a time (--jobs, default 2), each with Criterion's
--jobs 2, except binaries that hold a resource another may not share while
they run: RESOURCES below names them and why.  The longest binaries start
first (LONG_FIRST), so the pass ends with short ones filling the gaps.

Environment for the tests: COLIBRI_REPO, COLIBRI_FIXTURES (the fixtures of
tools/make_fixtures.sh, made first), COLIBRI_BIN (BUILD/colibri unless set),
COLIBRI_CONTAINERS (BUILD/containers: the containers the tests convert from
the fixtures, made once per build and shared; tests/test_util.h).
"""

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Binaries that must not run beside others holding the same resource.
# "alone": measures time or bandwidth, or holds timeouts that a loaded
# machine could trip, so it runs with no other binary.
RESOURCES = {
    # Throttled loop disks measured against their cgroup blkio limits: another
    # binary's disk traffic would move the measured bandwidth.
    "test_plan_hosts": {"alone"},
    # iobench measures the disk; others' reads would be in its figures.
    "test_iobench": {"alone"},
    # mpirun ranks with --dist-timeout of 2-3 s and a stopped rank that must
    # be caught within a window: a second binary's load could delay a
    # healthy rank past its timeout.
    "test_mpi": {"alone"},
}

# Started first: the long ones, so that short binaries fill in at the end.
LONG_FIRST = ["test_mpi", "test_forward", "test_gguf_convert", "test_tokenizer", "test_serve_tools",
              "test_constrain", "test_gguf_meta_tok", "test_serve_batch", "test_run", "test_plan_hosts"]

TAP_LINE = re.compile(r"^(ok|not ok) - (\S+)(.*)$")


def read_allow(path):
    """tests/skips.allow: lines 'BINARY GLOB REASON...', '#' comments."""
    allow = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                sys.exit(f"{path}:{n}: expected 'binary suite::test-glob reason', got: {line}")
            allow.append((parts[0], parts[1], parts[2]))
    return allow


def read_subset(path):
    """tests/asan_subset.txt: lines 'BINARY GLOB' (over suite::test), '#' comments."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                sys.exit(f"{path}:{n}: expected 'binary suite::test-glob', got: {line}")
            out.append((parts[0], parts[1]))
    return out


def list_tests(binary):
    """suite::test names of a Criterion binary, from --list."""
    r = subprocess.run([binary, "--list"], capture_output=True, text=True)
    names, suite = [], None
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+): \d+ tests?$", line)
        if m:
            suite = m.group(1)
            continue
        m = re.match(r"^[├└]── (\S+)", line)
        if m and suite:
            names.append(f"{suite}::{m.group(1)}")
    return names


class Run:
    """One binary's run: the process, its log and TAP files, its result."""

    def __init__(self, build, name, deselect):
        self.name = name
        self.binary = os.path.join(build, "tests", name)
        self.log = os.path.join(build, "tests", name + ".log")
        self.tap = os.path.join(build, "tests", name + ".tap")
        self.deselect = deselect
        self.passed, self.failed, self.skipped = [], [], []
        self.notes = []

    def start(self, env):
        cmd = [self.binary, "--jobs", "2", "--tap=" + self.tap]
        if self.deselect:
            # Criterion's filter takes suite/test with extended globs.
            cmd.append("--filter=!(" + "|".join(t.replace("::", "/") for t in self.deselect) + ")")
        if os.path.exists(self.tap):
            os.unlink(self.tap)
        self.logf = open(self.log, "w")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=env)

    def finish(self, status, usage):
        self.wall = time.monotonic() - self.t0
        self.cpu = usage.ru_utime + usage.ru_stime
        self.logf.close()
        self.rc = os.waitstatus_to_exitcode(status)
        try:
            with open(self.tap, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        deselected = set(self.deselect)
        for line in lines:
            m = TAP_LINE.match(line)
            if not m:
                continue
            ok, test, rest = m.group(1) == "ok", m.group(2), m.group(3)
            if ok and "# SKIP" in rest:
                if test in deselected:
                    continue
                self.skipped.append((test, rest.split("# SKIP", 1)[1].strip()))
            elif ok:
                self.passed.append(test)
            else:
                self.failed.append(test)
        if self.rc != 0 and not self.failed:
            why = f"signal {-self.rc}" if self.rc < 0 else f"exit {self.rc}"
            self.failed.append(f"(the binary: {why} with no failing test in its report)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("tests", nargs="*", help="binary names (test_x); all by default")
    ap.add_argument("--pass", dest="pass_", choices=("opt", "asan"), default="opt")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("COLIBRI_TEST_JOBS", "2")))
    ap.add_argument("--fixtures", default=os.path.join(REPO, "build", "fixtures"))
    a = ap.parse_intermixed_args()

    build = a.build if os.path.isabs(a.build) else os.path.join(REPO, a.build)
    label = os.path.relpath(build, REPO)
    env = dict(os.environ)
    env["COLIBRI_REPO"] = REPO
    env["COLIBRI_FIXTURES"] = a.fixtures
    env.setdefault("COLIBRI_BIN", os.path.join(build, "colibri"))
    if "COLIBRI_CONTAINERS" not in env:
        # A run starts with an empty cache (tests/fixture_cache.h), so the
        # containers of earlier builds do not pile up.
        env["COLIBRI_CONTAINERS"] = os.path.join(build, "containers")
        shutil.rmtree(env["COLIBRI_CONTAINERS"], ignore_errors=True)

    if subprocess.run([os.path.join(HERE, "make_fixtures.sh"), a.fixtures], env=env).returncode != 0:
        print("fixtures: generation failed", file=sys.stderr)
        return 1

    allow = []
    for b, g, w in read_allow(os.path.join(REPO, "tests", "skips.allow")):
        if b.startswith("asan:"):
            if a.pass_ != "asan":
                continue
            b = b[len("asan:"):]
        allow.append((b, g, w))
    subset = read_subset(os.path.join(REPO, "tests", "asan_subset.txt")) if a.pass_ == "asan" else []

    names = sorted(n for n in os.listdir(os.path.join(build, "tests"))
                   if n.startswith("test_") and "." not in n
                   and os.access(os.path.join(build, "tests", n), os.X_OK))
    if a.tests:
        missing = [t for t in a.tests if t not in names]
        if missing:
            print(f"{label}: no test binary {' '.join(missing)}", file=sys.stderr)
            return 1
        names = a.tests
    if not names:
        print(f"{label}: no test binaries in {label}/tests", file=sys.stderr)
        return 1
    order = [n for n in LONG_FIRST if n in names] + [n for n in names if n not in LONG_FIRST]

    runs = []
    for n in order:
        pats = [g for b, g in subset if b == n]
        deselect = [t for t in list_tests(os.path.join(build, "tests", n))
                    if any(fnmatch.fnmatchcase(t, g) for g in pats)] if pats else []
        runs.append(Run(build, n, deselect))

    t0 = time.monotonic()
    queue, running, done = list(runs), {}, []
    while queue or running:
        held = set().union(*(RESOURCES.get(r.name, set()) for r in running.values())) if running else set()
        started = True
        while started and queue and len(running) < a.jobs:
            started = False
            for r in queue:
                mine = RESOURCES.get(r.name, set())
                if "alone" in mine and running:
                    continue
                if "alone" in held or mine & held:
                    continue
                r.start(env)
                running[r.proc.pid] = r
                held |= mine
                queue.remove(r)
                started = True
                break
            if "alone" in held:
                break
        pid, status, usage = os.wait4(-1, 0)
        r = running.pop(pid, None)
        if r is None:
            continue
        r.finish(status, usage)
        done.append(r)
        line = (f"{label}/{r.name}: {len(r.passed)} passed, {len(r.failed)} failed, {len(r.skipped)} skipped"
                f" ({r.wall:.0f} s wall, {r.cpu:.0f} s CPU)")
        if r.deselect:
            line += f", {len(r.deselect)} not run in this pass"
        print(line, flush=True)
        for test, why in r.skipped:
            ok = [w for b, g, w in allow if b == r.name and fnmatch.fnmatchcase(test, g)]
            if ok:
                print(f"  skip {test}: {why} (allowed: {ok[0]})")
            else:
                print(f"  SKIP NOT ALLOWED {test}: {why} (no entry in tests/skips.allow)")
                r.notes.append(test)
        for test in r.failed:
            print(f"  FAIL {test}")
        if r.failed:
            with open(r.log, errors="replace") as f:
                tail = [x for x in f.read().splitlines() if not x.startswith("[----]")][-40:]
            print("\n".join("    " + x for x in tail))

    passed = sum(len(r.passed) for r in done)
    failed = sum(len(r.failed) for r in done)
    skipped = sum(len(r.skipped) for r in done)
    unallowed = sum(len(r.notes) for r in done)
    deselected = sum(len(r.deselect) for r in done)
    wall = time.monotonic() - t0
    slow = sorted(done, key=lambda r: -r.wall)[:5]
    print(f"{label}: slowest " + ", ".join(f"{r.name} {r.wall:.0f} s" for r in slow) +
          f"; {wall:.0f} s in all")
    if unallowed:
        print(f"{label}: {unallowed} skipped tests have no entry in tests/skips.allow: they count as failures")
    tail = f", {deselected} not run in this pass (tests/asan_subset.txt)" if deselected else ""
    print(f"{label}: {passed} passed, {failed + unallowed} failed, {skipped} skipped{tail}")
    return 0 if failed + unallowed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
