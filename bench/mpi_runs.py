#!/usr/bin/python3
"""The measured runs of bench/mpi.sh: colibri over 1, 2, 3 ... MPI ranks.

    mpi_runs.py --setup SETUP.json --runs DIR [--ranks 1,2,3] [--repeat 2] [--timeout S]

SETUP.json (written by mpi.sh) names, per rank R, its container copy on its
own loop device, that device's MAJ:MIN and the rank's cgroup v1 memory and
blkio groups, plus the settings (tokens, prompt, --ram, --threads,
--placement, btl). Rank counts alternate: for each repeat, every count of
--ranks in order (1,2,3,1,2,3 ...), so that a drift of the machine shows in
every count alike and ratios are taken within one repeat.

Before each run: usage.json is removed from every rank's container (no
learned pinning carried from the previous run), the page cache is dropped,
each rank's groups are reset (memory.max_usage_in_bytes, memory.failcnt,
blkio.reset_stats; the blkio byte counter is read before and after, as
reset_stats does not clear it on this kernel). The run is

    mpirun --allow-run-as-root --oversubscribe [--mca btl BTL]
        -n 1 sh -c 'echo $$ > MEM0/cgroup.procs && echo $$ > BLK0/cgroup.procs
                    && exec colibri run --model DIR0 ... --stats-json FILE' :
        -n 1 sh -c '... exec colibri run --model DIR1 ...' : ...

(one rank: the same line with one part). After it: rank 0's --stats-json,
each group's peak memory, failcnt, OOM kills and the bytes the block layer
read for it from the rank's device.

Writes DIR/run-NN.json for each run ({label, ranks, repeat, argv, rc,
wall_s, output, stats, cgroups: [...], stderr_tail}); exit 1 when any run
failed (the others still run).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from bench_lib import drop_caches


def read_text(path):
    with open(path) as f:
        return f.read()


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def oom_kills(mem_cg):
    """memory.oom_control's oom_kill counter (kernels >= 4.13), else None."""
    for line in read_text(os.path.join(mem_cg, "memory.oom_control")).splitlines():
        k, _, v = line.partition(" ")
        if k == "oom_kill":
            return int(v)
    return None


def blkio_read_bytes(blk_cg, majmin):
    """Bytes the block layer read from device MAJ:MIN for this group since
    its last reset (blkio.throttle.io_service_bytes, "MAJ:MIN Read N")."""
    for line in read_text(os.path.join(blk_cg, "blkio.throttle.io_service_bytes")).splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == majmin and f[1] == "Read":
            return int(f[2])
    return 0


def reset_groups(rank):
    write_text(os.path.join(rank["mem_cgroup"], "memory.max_usage_in_bytes"), "0\n")
    write_text(os.path.join(rank["mem_cgroup"], "memory.failcnt"), "0\n")
    write_text(os.path.join(rank["blkio_cgroup"], "blkio.reset_stats"), "1\n")


def group_counters(rank):
    m = rank["mem_cgroup"]
    return {
        "rank": rank["rank"],
        "mem_limit_bytes": int(read_text(os.path.join(m, "memory.limit_in_bytes"))),
        "mem_peak_bytes": int(read_text(os.path.join(m, "memory.max_usage_in_bytes"))),
        "mem_failcnt": int(read_text(os.path.join(m, "memory.failcnt"))),
        "oom_kills": oom_kills(m),
        "blkio_read_bytes": blkio_read_bytes(rank["blkio_cgroup"], rank["majmin"]),
    }


def rank_argv(setup, rank, stats_path, options):
    """The argv of one rank: sh enters the rank's groups, then execs colibri."""
    cmd = [setup["colibri"], "run", "--model", rank["model"], "--tokens", setup["prompt"],
           "-n", str(setup["tokens"]), "--temp", "0", "--threads", str(setup["threads"]),
           "--ram", setup["ram"], "--io-depth", str(setup["io_depth"])]
    if "--placement" in options:
        cmd += ["--placement", setup["placement"]]
    if stats_path:
        cmd += ["--stats-json", stats_path]
    enter = 'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
    return ["sh", "-c", enter, rank["mem_cgroup"], rank["blkio_cgroup"]] + cmd


def mpirun_argv(setup, n, stats_path, options):
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    if setup["btl"]:
        argv += ["--mca", "btl", setup["btl"]]
    for r in range(n):
        if r:
            argv.append(":")
        argv += ["-n", "1"] + rank_argv(setup, setup["ranks"][r], stats_path if r == 0 else None,
                                        options)
    return argv


def run_once(setup, n, repeat, index, runs_dir, options, timeout_s):
    label = "ranks%d-r%d" % (n, repeat)
    stats_path = os.path.join(runs_dir, "run-%02d.stats.json" % index)
    if os.path.exists(stats_path):
        os.unlink(stats_path)
    for rank in setup["ranks"]:
        usage = os.path.join(rank["model"], "usage.json")
        if os.path.exists(usage):
            os.unlink(usage)
    used = setup["ranks"][:n]
    for rank in used:
        reset_groups(rank)
    oom_before = [oom_kills(r["mem_cgroup"]) for r in used]
    # blkio.reset_stats does not clear io_service_bytes on this kernel: take differences.
    blk_before = [blkio_read_bytes(r["blkio_cgroup"], r["majmin"]) for r in used]
    drop_caches()
    argv = mpirun_argv(setup, n, stats_path, options)
    print("mpi_runs: %s: %s" % (label, " ".join(argv)), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
    wall = time.monotonic() - t0
    groups = [group_counters(r) for r in used]
    for g, before, blk in zip(groups, oom_before, blk_before):
        if g["oom_kills"] is not None and before is not None:
            g["oom_kills"] -= before
        g["blkio_read_bytes_before"] = blk
        g["blkio_read_bytes"] -= blk
    stats = None
    if os.path.exists(stats_path):
        try:
            with open(stats_path) as f:
                stats = json.load(f)
        except ValueError as e:
            print("mpi_runs: %s: %s is not JSON: %s" % (label, stats_path, e), file=sys.stderr)
    rc = p.returncode
    rec = {"label": label, "ranks": n, "repeat": repeat, "argv": argv, "rc": rc,
           "timed_out": timed_out, "wall_s": wall,
           "output": out.decode("utf-8", "replace").strip(), "stats": stats,
           "cgroups": groups, "stderr_tail": err.decode("utf-8", "replace")[-4000:]}
    with open(os.path.join(runs_dir, "run-%02d.json" % index), "w") as f:
        json.dump(rec, f, indent=1)
    ok = rc == 0 and stats is not None
    tok_s = stats.get("decode_tok_s") if stats else None
    print("mpi_runs: %s: rc %s%s, %.1f s, decode %s tok/s" %
          (label, rc, " (timed out)" if timed_out else "", wall,
           "%.2f" % tok_s if isinstance(tok_s, (int, float)) else "?"),
          file=sys.stderr, flush=True)
    if not ok:
        print("mpi_runs: %s failed; stderr ends:\n%s" % (label, rec["stderr_tail"][-1500:]),
              file=sys.stderr)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setup", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--ranks", default="1,2,3")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    with open(a.setup) as f:
        setup = json.load(f)
    counts = [int(x) for x in a.ranks.split(",") if x]
    if not counts or min(counts) < 1 or max(counts) > len(setup["ranks"]):
        sys.exit("mpi_runs: --ranks %s: each count must be 1..%d (the ranks %s sets up)" %
                 (a.ranks, len(setup["ranks"]), a.setup))
    # Options this binary knows: --placement is new with issue 23.
    helptext = subprocess.run([setup["colibri"], "run", "--help"], capture_output=True, text=True)
    options = helptext.stdout + helptext.stderr
    if "--placement" not in options:
        print("mpi_runs: %s run --help has no --placement: running without it" % setup["colibri"],
              file=sys.stderr)
    setup["placement_passed"] = "--placement" in options
    with open(a.setup, "w") as f:
        json.dump(setup, f, indent=1)
    failed = 0
    index = 0
    for rep in range(1, a.repeat + 1):
        for n in counts:
            index += 1
            if not run_once(setup, n, rep, index, a.runs, options, a.timeout):
                failed += 1
    if failed:
        print("mpi_runs: %d of %d runs failed" % (failed, index), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
