#!/usr/bin/python3
"""One measured colibri run: the command, sampled whenever a token arrives.

    sampled_run.py --out RUN.json [--label NAME] [--dev NAME]... [--blkio-cgroup DIR]
                   [--drop-caches] -- COMMAND ARGS...

Used by bench/mirror.sh, bench/pinning.sh and bench/drafting.sh.

- --drop-caches: `sync; echo 3 > /proc/sys/vm/drop_caches` first (root).
- --blkio-cgroup DIR: the command runs inside that cgroup v1 blkio group
  (its pid is written to DIR/cgroup.procs before exec), and the group's
  per-device byte counter (blkio.throttle.io_service_bytes) is read before
  and after: what the block layer served the run, per device.
- --dev NAME (repeatable, e.g. loop3): /sys/block/NAME/stat is sampled at
  start, whenever a token arrives on stdout (colibri flushes each one) and
  at the end, so the decode phase (first token to last) is cut out exactly.
- The command's --stats-json FILE, when present, is loaded into the result.

RUN.json: {label, argv, rc, wall_s, output, stats, decode: {tokens, seconds,
dev: {NAME: {read_bytes, busy_s}}, proc_read_bytes}, whole: {dev, proc_read_bytes},
cgroup_read_bytes: {MAJ:MIN: bytes}, stderr_tail}.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench_lib import count_tokens, decode_span, drop_caches, proc_read_bytes


def diskstat(name):
    with open("/sys/class/block/%s/stat" % name) as f:
        v = [int(x) for x in f.read().split()]
    return {"read_bytes": v[2] * 512, "busy_ms": v[9]}


def cgroup_bytes(cg):
    """MAJ:MIN -> bytes read, from blkio.throttle.io_service_bytes."""
    out = {}
    if not cg:
        return out
    with open(os.path.join(cg, "blkio.throttle.io_service_bytes")) as f:
        for line in f:
            p = line.split()
            if len(p) == 3 and p[1] == "Read":
                out[p[0]] = int(p[2])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--dev", action="append", default=[])
    ap.add_argument("--blkio-cgroup")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")
    stats_path = cmd[cmd.index("--stats-json") + 1] if "--stats-json" in cmd else None
    if stats_path and os.path.exists(stats_path):
        os.unlink(stats_path)
    if a.drop_caches:
        drop_caches()

    def preexec():
        if a.blkio_cgroup:
            with open(os.path.join(a.blkio_cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def sample(t, tokens, pid):
        return {"t": t, "tokens": tokens, "dev": {d: diskstat(d) for d in a.dev},
                "proc_read": proc_read_bytes(pid)}

    cg0 = cgroup_bytes(a.blkio_cgroup)
    err_path = a.out + ".stderr"
    with open(err_path, "w+") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, preexec_fn=preexec)
        samples = [sample(0.0, 0, p.pid)]
        text = b""
        fd = p.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk
            samples.append(sample(time.monotonic() - t0, count_tokens(text), p.pid))
            if samples[-1]["proc_read"] is None:
                samples[-1]["proc_read"] = samples[-2]["proc_read"]
        rc = p.wait()
        wall = time.monotonic() - t0
        end = sample(wall, count_tokens(text), -1)
        end["proc_read"] = samples[-1]["proc_read"]
        samples.append(end)
        err.seek(0)
        stderr = err.read()
    os.unlink(err_path)
    cg1 = cgroup_bytes(a.blkio_cgroup)

    def window(s0, s1):
        return {"tokens": s1["tokens"] - s0["tokens"], "seconds": s1["t"] - s0["t"],
                "dev": {d: {"read_bytes": s1["dev"][d]["read_bytes"] - s0["dev"][d]["read_bytes"],
                            "busy_s": (s1["dev"][d]["busy_ms"] - s0["dev"][d]["busy_ms"]) / 1000.0}
                        for d in a.dev},
                "proc_read_bytes": (s1["proc_read"] or 0) - (s0["proc_read"] or 0)}

    span = decode_span(samples)
    decode = window(*span) if span else None
    stats = None
    if stats_path and os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
    res = {"label": a.label, "argv": cmd, "rc": rc, "wall_s": wall,
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "output": text.decode(errors="replace").strip(),
           "stats": stats, "decode": decode, "whole": window(samples[0], samples[-1]),
           "cgroup_read_bytes": {k: cg1.get(k, 0) - cg0.get(k, 0) for k in cg1},
           "stderr_tail": stderr[-3000:]}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if rc != 0:
        sys.stderr.write(stderr[-2000:])
        print("sampled_run: %s exited with %d" % (cmd[0], rc), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
