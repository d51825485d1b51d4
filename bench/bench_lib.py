"""Helpers shared by the benchmark scripts in bench/.

Measuring (decode_runs.py, sampled_run.py): dropping the page cache, a
process's block-layer read bytes, counting the token ids colibri prints, and
cutting the decode phase out of samples taken whenever a token arrives.

Reporting (mirror_report.py, pinning_report.py, drafting_report.py,
dsa_report.py, report.py): the command line `RUNS_DIR --json OUT.json --out
OUT.md`, loading a runs folder of sampled_run.py results, medians, and
writing the markdown and raw JSON. Nothing here formats a table: each report
keeps its own columns.
"""

import argparse
import glob
import json
import os
import re
import subprocess


# ---------------------------------------------------------------- measuring


def drop_caches():
    """`sync; echo 3 > /proc/sys/vm/drop_caches`; needs root."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def proc_read_bytes(pid):
    """Bytes this process (all its threads, io_uring workers included) had
    the block layer read for it: O_DIRECT and page-cache misses, not hits.
    None once the process is gone."""
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def count_tokens(text):
    """Tokens in colibri's stdout so far (bytes): with --tokens and no
    tokenizer it prints comma-separated ids."""
    body = text.strip()
    return body.count(b",") + 1 if body else 0


def decode_span(samples):
    """The decode phase of samples {t, tokens, ...} taken whenever a token
    arrived: (first sample with a token, first sample with the last count),
    or None when fewer than two tokens or no time passed in between. Each
    token after the first is one forward step."""
    with_tokens = [x for x in samples if x["tokens"] > 0]
    if len(with_tokens) < 2:
        return None
    first = with_tokens[0]
    last = next(x for x in with_tokens if x["tokens"] == with_tokens[-1]["tokens"])
    return (first, last) if last["t"] > first["t"] else None


# ---------------------------------------------------------------- reporting


def report_args(description=None):
    """The report scripts' command line: RUNS_DIR --json OUT.json --out OUT.md."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("runs")
    ap.add_argument("--json", required=True)
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def read_json(path):
    with open(path) as f:
        return json.load(f)


def sampled_runs(runs_dir, pattern, label_re):
    """(record, label groups) for each sampled_run.py result in runs_dir
    whose name matches the glob pattern (the .stats.json files beside them
    skipped), in name order. A label that label_re does not match raises:
    the runs folder is not what the report expects."""
    for p in sorted(glob.glob(os.path.join(runs_dir, pattern))):
        if p.endswith(".stats.json"):
            continue
        r = read_json(p)
        yield r, re.match(label_re, r["label"]).groups()


def median(values):
    """Median of the values that are not None; None when there are none."""
    v = sorted(x for x in values if x is not None)
    n = len(v)
    return None if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def write_report(args, md, raw, echo=True):
    """Writes the markdown to args.out and raw to args.json (indent 1);
    echo: the markdown to stdout too."""
    with open(args.out, "w") as fp:
        fp.write(md)
    with open(args.json, "w") as fp:
        json.dump(raw, fp, indent=1)
    if echo:
        print(md)
