#!/usr/bin/python3
"""Measured decode runs of one colibri container, with fio as the yardstick.

    decode_runs.py --model DIR --out RAW.json [--colibri BIN] [--label NAME]
                   [--tokens N] [--prompt ID] [--budgets min,25,50,100]
                   [--modes cold,warm] [--io-depth D] [--threads T]
                   [--fio-seconds S] [--cgroup-limit SIZE --cgroup-ram SIZE]

For each RAM budget and mode, one run is:

  1. fio on the container's expert files, at the expert record size, random
     reads with O_DIRECT through io_uring, at the engine's io depth and at
     top-k (what one layer's misses can keep in flight): the bandwidth the
     disk gives right now (it drifts), read-only.
  2. cold: `sync; echo 3 > /proc/sys/vm/drop_caches` and the container's
     learned usage (usage.json) removed, so nothing of an earlier run helps;
     warm: the same run again at once (page cache and usage.json kept).
  3. colibri run --stats-json (under --cgroup-limit: inside a cgroup v1
     memory group with that limit). Whenever a token arrives on stdout the
     clock, the block device's counters (/sys/dev/block/M:m/stat) and the
     process's read bytes (/proc/PID/io) are sampled, which cuts out the
     decode phase exactly, independently of the engine's own statistics.
  4. fio again at the engine's depth, to show the drift during the run.

Budgets are `min` (one step's experts), or a percentage of the expert bytes
on top of the resident weights, KV cache and scratch. Every run goes to
RAW.json with the exact commands; bench/report.py turns it into tables.
Needs root for drop_caches and cgroups (runs without them are marked).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from bench_lib import count_tokens, decode_span, drop_caches, proc_read_bytes

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_NAME = "colibri-bench"
SCRATCH_BYTES = 64 << 20     # session.c: fixed scratch beside resident + KV
BUDGET_MARGIN_BYTES = 16 << 20


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def parse_size(s):
    """24G, 512M, 1.5G, 100K or bytes -> bytes."""
    mul = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("ib")
    if s and s[-1] in mul:
        return int(float(s[:-1]) * mul[s[-1]])
    return int(s)


def quote(argv):
    return " ".join(shlex.quote(a) for a in argv)


# ---------------------------------------------------------------- container


class Container:
    def __init__(self, path):
        with open(os.path.join(path, "manifest.json")) as f:
            man = json.load(f)
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        self.path = path
        self.resident_bytes = man["resident"]["bytes"]
        layers = man["experts"]["layers"]
        self.n_experts = man["experts"]["n_experts"]
        self.files = [os.path.join(path, lay["file"]) for lay in layers]
        self.record_bytes = max(lay["record_bytes"] for lay in layers)
        self.expert_bytes = sum(lay["record_bytes"] * self.n_experts for lay in layers)
        self.quant = man.get("quant")
        self.model_type = man.get("model_type")
        # A vision-language checkpoint (Qwen3.5) keeps the text model's
        # fields in text_config; a hybrid keeps K and V in its
        # full-attention layers only.
        cfg = cfg.get("text_config", cfg)
        self.top_k = cfg["num_experts_per_tok"]
        self.n_layers = cfg["num_hidden_layers"]
        types = cfg.get("layer_types")
        if types:
            self.n_kv_layers = sum(t in ("full_attention", "attention") for t in types)
        elif "linear_num_value_heads" in cfg:
            self.n_kv_layers = self.n_layers // cfg.get("full_attention_interval", 4)
        else:
            self.n_kv_layers = self.n_layers
        heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or heads
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        self.bytes_on_disk = sum(os.path.getsize(os.path.join(dp, f))
                                 for dp, _, fs in os.walk(path) for f in fs)

    def kv_bytes(self, ctx):
        return 2 * self.n_kv_layers * ctx * self.kv_heads * self.head_dim * 4

    def ram_for(self, budget, ctx):
        """--ram value for a budget: 'min' or a percentage of the expert
        bytes on top of what the session sets aside (session.c)."""
        if budget == "min":
            return "min", None
        cache = int(self.expert_bytes * float(budget) / 100.0)
        total = self.resident_bytes + self.kv_bytes(ctx) + SCRATCH_BYTES + BUDGET_MARGIN_BYTES + cache
        return "%dM" % -(-total // (1 << 20)), cache


# ---------------------------------------------------------------- devices


def block_device(path):
    """(name, major:minor of the whole disk, stat path) holding path."""
    st = os.stat(path)
    mm = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    sys_dir = os.path.realpath("/sys/dev/block/" + mm)
    stat = os.path.join(sys_dir, "stat")
    disk_dir = os.path.dirname(sys_dir) if os.path.exists(os.path.join(sys_dir, "partition")) else sys_dir
    with open(os.path.join(disk_dir, "dev")) as f:
        disk_mm = f.read().strip()
    return os.path.basename(sys_dir), disk_mm, stat


def read_diskstat(stat_path):
    with open(stat_path) as f:
        v = [int(x) for x in f.read().split()]
    # Fields: read I/Os, merges, sectors, ticks; write ...; in flight;
    # io_ticks (ms with at least one request in flight); time in queue.
    return {"read_ios": v[0], "read_bytes": v[2] * 512, "io_ticks_ms": v[9],
            "write_bytes": v[6] * 512}


def diskstat_delta(a, b):
    return {k: b[k] - a[k] for k in a}


# ---------------------------------------------------------------- cgroups


class Cgroups:
    """A cgroup v1 memory controller group with a limit, created before the
    run and removed after; the child joins it before exec, so the engine,
    and the page cache it fills, are charged to it."""

    def __init__(self, limit_bytes):
        self.limit = limit_bytes
        self.dir = os.path.join(CGROUP_ROOT, "memory", CGROUP_NAME)

    def __enter__(self):
        if os.path.isdir(self.dir):
            self._remove(self.dir)
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, "memory.limit_in_bytes"), "w") as f:
            f.write("%d\n" % self.limit)
        return self

    def join(self):
        """Runs in the child before exec."""
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write("%d\n" % os.getpid())

    def read(self):
        out = {}
        for key in ("limit_in_bytes", "max_usage_in_bytes", "failcnt"):
            with open(os.path.join(self.dir, "memory." + key)) as f:
                out["memcg_" + key] = int(f.read())
        with open(os.path.join(self.dir, "memory.stat")) as f:
            stat = dict(line.split() for line in f)
        out["memcg_cache_bytes_after"] = int(stat.get("cache", 0))
        return out

    @staticmethod
    def _remove(d):
        # Move stragglers (none once our child exited) to the root, then
        # rmdir (cgroup v1 moves the remaining page-cache charges up).
        with open(os.path.join(d, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            with open(os.path.join(os.path.dirname(d), "cgroup.procs"), "w") as f:
                f.write(pid + "\n")
        for _ in range(50):
            try:
                os.rmdir(d)
                return
            except OSError:
                time.sleep(0.1)
        os.rmdir(d)

    def __exit__(self, *exc):
        try:
            self._remove(self.dir)
        except OSError as e:
            sys.stderr.write("decode_runs: warning: cannot remove %s: %s\n" % (self.dir, e))
        return False


# ---------------------------------------------------------------- fio


def fio(container, iodepth, seconds):
    argv = ["fio", "--name=expert-read",
            "--filename=" + ":".join(f.replace(":", "\\:") for f in container.files),
            "--readonly", "--ioengine=io_uring", "--direct=1", "--rw=randread",
            "--bs=%d" % container.record_bytes, "--iodepth=%d" % iodepth,
            "--size=%d" % container.expert_bytes, "--runtime=%d" % seconds, "--time_based",
            "--numjobs=1", "--output-format=json"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("decode_runs: fio failed (%d): %s" % (p.returncode, p.stderr.strip()))
    # fio may print warnings before the JSON.
    j = json.loads(p.stdout[p.stdout.index("{"):])
    r = j["jobs"][0]["read"]
    return {"iodepth": iodepth, "bs": container.record_bytes, "seconds": seconds,
            "gbps": r["bw_bytes"] / 1e9, "iops": r["iops"],
            "lat_ms_mean": r["clat_ns"]["mean"] / 1e6,
            "lat_ms_p99": r["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e6,
            "cmd": quote(argv)}


# ---------------------------------------------------------------- one run


def read_cpu_busy_s():
    """Seconds of non-idle CPU time of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_sampled(argv, preexec, stat_path, scratch):
    """Runs colibri, sampling the clock, the block device counters and the
    process's read bytes whenever a token arrives on stdout (colibri flushes
    each one), so the decode phase can be cut out exactly. Returns (process,
    samples, stderr text, cpu use); a sample is {t, tokens, text, dev,
    proc_read}."""
    err_path = os.path.join(scratch, "stderr.txt")
    with open(err_path, "w+") as err:
        t0 = time.monotonic()
        cpu0 = read_cpu_busy_s()
        dev0 = read_diskstat(stat_path)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, preexec_fn=preexec)
        samples = [{"t": 0.0, "tokens": 0, "text": "", "dev": dev0, "proc_read": 0}]
        text, last_read = b"", 0
        fd = p.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk
            read = proc_read_bytes(p.pid)
            last_read = read if read is not None else last_read
            samples.append({"t": time.monotonic() - t0, "tokens": count_tokens(text),
                            "text": text.strip().decode(errors="replace"),
                            "dev": read_diskstat(stat_path), "proc_read": last_read})
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        cpu1 = read_cpu_busy_s()
        samples.append(dict(samples[-1], t=wall, dev=read_diskstat(stat_path)))
        err.seek(0)
        own = ru.ru_utime + ru.ru_stime
        cpu = {"engine_cpu_s": own, "engine_max_rss_bytes": ru.ru_maxrss * 1024,
               "machine_cpu_busy_s": cpu1 - cpu0,
               # CPU time of everything else (other users, kernel threads)
               # while the engine ran, as a share of the machine.
               "others_cpu_share": max(0.0, (cpu1 - cpu0 - own) / (wall * os.cpu_count()))}
        return p, samples, err.read(), cpu


def decode_window(samples):
    """The decode phase: from the first token on stdout to the last one.
    Each token after the first is one forward step, so steps / seconds is
    the decode rate; bytes and device busy time are what the disk did in
    between (device counters include any other process's I/O)."""
    span = decode_span(samples)
    if not span:
        return None
    first, last = span
    secs = last["t"] - first["t"]
    dev = diskstat_delta(first["dev"], last["dev"])
    return {"steps": last["tokens"] - first["tokens"], "seconds": secs,
            "process_read_bytes": last["proc_read"] - first["proc_read"],
            "device_read_bytes": dev["read_bytes"], "device_write_bytes": dev["write_bytes"],
            "device_busy_s": dev["io_ticks_ms"] / 1000.0}


def engine_run(args, container, name, budget, mode, direct, limit, ram_override=None):
    ctx = 1 + args.tokens
    if ram_override:
        ram, cache = ram_override, None
    else:
        ram, cache = container.ram_for(budget, ctx)
    label = budget if budget in ("min", "cap") else budget + "%"
    rec = {"name": name, "budget": label, "mode": mode, "direct": direct,
           "ram_arg": ram, "expert_cache_target_bytes": cache,
           "cgroup_limit_bytes": limit, "started": now_iso()}
    sys.stderr.write("decode_runs: %s: fio ..." % name)
    sys.stderr.flush()
    rec["fio"] = [fio(container, args.io_depth, args.fio_seconds)]
    if container.top_k != args.io_depth:
        rec["fio"].append(fio(container, container.top_k, args.fio_seconds))
    usage = os.path.join(container.path, "usage.json")
    if mode == "cold":
        if os.path.exists(usage):
            os.remove(usage)
        if args.root:
            drop_caches()
    rec["usage_json_before"] = os.path.exists(usage)
    rec["caches_dropped"] = mode == "cold" and args.root
    stats_path = os.path.join(args.scratch, "stats.json")
    if os.path.exists(stats_path):
        os.remove(stats_path)
    argv = [args.colibri, "run", "--model", container.path, "--tokens", str(args.prompt),
            "-n", str(args.tokens), "--temp", "0", "--ram", ram, "--io-depth", str(args.io_depth),
            "--stats", "--stats-json", stats_path]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if not direct:
        argv.append("--no-direct")
    rec["cmd"] = quote(argv)
    sys.stderr.write(" colibri ...")
    sys.stderr.flush()
    dev_name, _, stat_path = block_device(container.files[0])
    with Cgroups(limit) if (args.root and limit) else _NoCgroups() as cg:
        p, samples, err, cpu = run_sampled(argv, cg.join, stat_path, args.scratch)
        rec.update(cpu)
        rec.update(cg.read())
    rec["exit"] = p.returncode
    rec["stderr"] = err
    rec["tokens_out"] = samples[-1]["text"] if samples else ""
    rec["process_wall_s"] = samples[-1]["t"] if samples else None
    rec["device"] = dict(diskstat_delta(samples[0]["dev"], samples[-1]["dev"]), name=dev_name)
    rec["process_read_bytes"] = samples[-1]["proc_read"]
    rec["decode_window"] = decode_window(samples)
    with open("/proc/loadavg") as f:
        rec["loadavg_after"] = f.read().split()[0]
    if p.returncode == 0:
        with open(stats_path) as f:
            rec["stats"] = json.load(f)
    else:
        sys.stderr.write(" FAILED (exit %d)\n%s" % (p.returncode, err))
    sys.stderr.write(" fio ...")
    sys.stderr.flush()
    rec["fio_after"] = fio(container, args.io_depth, args.fio_seconds)
    s = rec.get("stats", {})
    sys.stderr.write(" %.2f tok/s, hit %.0f%%, %.2f GB read, fio %.2f GB/s\n"
                     % (s.get("decode_tok_s", 0), 100 * s.get("hit_rate", 0),
                        s.get("bytes_read", 0) / 1e9, rec["fio"][0]["gbps"]))
    return rec


class _NoCgroups:
    """Stands in for Cgroups when not root."""

    def __enter__(self):
        return self

    def join(self):
        pass

    def read(self):
        return {}

    def __exit__(self, *exc):
        return False


def store_version(root):
    """Which expert store was measured: the last commit touching storage/,
    whether storage/ has uncommitted changes, and expert_store.c's opening
    comment line."""
    def git(*a):
        p = subprocess.run(["git", "-C", root] + list(a), capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else ""
    head = ""
    try:
        with open(os.path.join(root, "storage", "expert_store.c")) as f:
            for line in f:
                line = line.strip(" */\n")
                if line:
                    head = line
                    break
    except OSError:
        pass
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "storage_last_commit": git("log", "-1", "--format=%h %ad %s", "--date=short", "--", "storage/"),
            "storage_dirty": bool(git("status", "--porcelain", "--", "storage/")),
            "engine_dirty": bool(git("status", "--porcelain", "--", "engine/", "compute/")),
            "expert_store_c": head}


def machine():
    info = {"kernel": platform.release(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["ram_bytes"] = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="colibri container")
    ap.add_argument("--out", required=True, help="raw results (JSON), overwritten")
    ap.add_argument("--label", help="model name in the report")
    ap.add_argument("--colibri", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "colibri"))
    ap.add_argument("--tokens", type=int, default=32, help="tokens to generate per run")
    ap.add_argument("--prompt", type=int, default=1000, help="the one prompt token id")
    ap.add_argument("--budgets", default="min,25,50,100",
                    help="comma list: min, or percent of the expert bytes")
    ap.add_argument("--modes", default="cold,warm")
    ap.add_argument("--io-depth", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--fio-seconds", type=int, default=5)
    ap.add_argument("--cgroup-limit", help="also run under a memory cgroup of this size (e.g. 2G)")
    ap.add_argument("--cgroup-ram", help="--ram for the capped runs (default: limit - 512M)")
    ap.add_argument("--cgroup-only", action="store_true", help="only the capped runs")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole matrix this many times")
    ap.add_argument("--fio-sweep", default="1,2,4,8,16,32,64",
                    help="io depths of the reference fio sweep at the start ('' for none)")
    ap.add_argument("--scratch", help="folder for the run's stats and stderr (default: a temporary one)")
    ap.add_argument("--command", default="", help="the command line that started the benchmark")
    args = ap.parse_args(argv)
    args.colibri = os.path.abspath(args.colibri)
    args.root = os.geteuid() == 0
    if not os.access(args.colibri, os.X_OK):
        ap.error("%s is not an executable colibri (run make)" % args.colibri)
    container = Container(args.model)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    own_scratch = not args.scratch
    args.scratch = args.scratch or tempfile.mkdtemp(prefix="colibri-bench-")

    # SIGTERM / SIGHUP unwind like Ctrl-C, so the cgroups are removed.
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dev_name, disk_mm, _ = block_device(container.files[0])
    meta = {"label": args.label or os.path.basename(os.path.abspath(args.model)),
            "date": now_iso(), "command": args.command or quote(sys.argv),
            "model_dir": os.path.abspath(args.model), "model_type": container.model_type,
            "quant": container.quant, "n_layers": container.n_layers,
            "n_experts": container.n_experts, "top_k": container.top_k,
            "record_bytes": container.record_bytes, "expert_bytes": container.expert_bytes,
            "resident_bytes": container.resident_bytes, "container_bytes": container.bytes_on_disk,
            "tokens": args.tokens, "prompt": args.prompt, "io_depth": args.io_depth,
            "fio_seconds": args.fio_seconds, "device": dev_name, "device_mm": disk_mm,
            "root": args.root, "store": store_version(root), "machine": machine(),
            "colibri": args.colibri}
    if not args.root:
        sys.stderr.write("decode_runs: not root: no drop_caches, no cgroups; 'cold' runs keep "
                         "the page cache\n")
    runs = []
    result = {"meta": meta, "runs": runs}

    def save():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.out)

    modes = [m for m in args.modes.split(",") if m]
    meta["fio_sweep"] = []
    try:
        for depth in [int(d) for d in args.fio_sweep.split(",") if d]:
            meta["fio_sweep"].append(fio(container, depth, args.fio_seconds))
            sys.stderr.write("decode_runs: fio depth %d: %.2f GB/s\n"
                             % (depth, meta["fio_sweep"][-1]["gbps"]))
        for rep in range(1, args.repeat + 1):
            def add(name, *a, **kw):
                rec = engine_run(args, container, name, *a, **kw)
                rec["repeat"] = rep
                runs.append(rec)
                save()
            if not args.cgroup_only:
                for budget in [b for b in args.budgets.split(",") if b]:
                    label = "min" if budget == "min" else budget + "%"
                    for mode in modes:
                        add("ram %s, %s" % (label, mode), budget, mode, True, None)
            if args.cgroup_limit and args.root:
                limit = parse_size(args.cgroup_limit)
                ram = args.cgroup_ram or "%dM" % ((limit >> 20) - 512)
                for direct in (True, False):
                    for mode in modes:
                        add("cgroup %s, ram %s, %s, %s"
                            % (args.cgroup_limit, ram, "O_DIRECT" if direct else "buffered", mode),
                            "cap", mode, direct, limit, ram_override=ram)
            elif args.cgroup_limit and rep == 1:
                sys.stderr.write("decode_runs: not root: skipping the memory-capped runs\n")
    finally:
        save()
        for f in ("stats.json", "stderr.txt"):
            if os.path.exists(os.path.join(args.scratch, f)):
                os.remove(os.path.join(args.scratch, f))
        if own_scratch:
            os.rmdir(args.scratch)
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
