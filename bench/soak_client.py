#!/usr/bin/env python3
"""The soak of bench/soak.sh: one colibri serve, killed and restarted, under
a bounded mix of clients for a fixed time; a markdown report and raw JSON.

    soak_client.py --colibri BIN --model DIR --sessions DIR --log FILE
                   --out REPORT.md [--minutes 30] [--ram 64M] [--parallel 4]
                   [--clients 6] [--restart-every S] [--cgroup DIR]
                   [--note TEXT] [--rev TEXT] [--command TEXT] [--seed 1]

The server runs with --parallel slots and --sessions DIR, inside the memory
cgroup DIR when given (the child writes its pid into cgroup.procs before it
execs colibri). The clients are threads of this process on loopback; each
picks a kind of request from a fixed weighted mix (seeded, so two soaks of
the same length send the same mix): chat completions streamed and not,
streams the client closes after a few tokens, long prompts a little under
the context (and a few a little over it, which must be refused with 400),
tools with tool_choice required, response_format json_schema, Ollama's
/api/chat and llama-server's /completion, streamed and not. An answer with
status 200 is also checked: a forced call names the tool and its arguments
parse, a schema answer parses and has its required keys (unless cut by
max_tokens).

Every --restart-every seconds (jittered +-30%) the server gets SIGKILL with
requests in flight and is started again on the same --sessions folder.
Right after each start, with the mix held back:

  1. sessions: one conversation per slot, each on its own slot through
     llama-server's /completion with id_slot (the OpenAI routes put a
     request on the free slot sharing the longest prefix, which for a new
     conversation is another conversation's slot), prompts as token ids so
     that the slot's history is an exact prefix of the next turn. Its
     timings.cache_n (what usage.prompt_tokens_details.cached_tokens counts
     on /v1) must reach the n_past that slot had when it was saved (POST
     /slots/K?action=save into the file the server loads at start,
     <model id>-slot<K>.session, since the server itself saves only at a
     clean shutdown). A turn below it is a lost session.
  2. the fixed greedy request, whose text must equal the first start's.

Half way through, when the model has a mirror, one byte in every expert
record of one of the mirror's layer files is flipped (restored at exit):
the primary stays whole, so answers must not change, and the server's log
should warn. RSS (VmRSS of the server) and the cgroup's usage are sampled
every 2 s. At the end the mix stops, the greedy request runs once more, and
the server gets SIGTERM (a clean stop must exit 0).
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import vs_llama_runs  # noqa: E402  (host_cpu)

PROBE = {"messages": [{"role": "user", "content": "And God said unto Moses"}],
         "temperature": 0, "max_tokens": 48}

TOOLS = [{"type": "function", "function": {
    "name": "find_verse", "description": "Finds a verse by book and chapter",
    "parameters": {"type": "object", "properties": {
        "book": {"type": "string", "enum": ["Genesis", "Exodus", "Psalms", "John"]},
        "chapter": {"type": "integer"}},
        "required": ["book", "chapter"]}}}]

SCHEMA = {"type": "object", "properties": {
    "book": {"type": "string", "enum": ["Genesis", "Exodus", "Psalms", "John"]},
    "chapter": {"type": "integer"},
    "blessed": {"type": "boolean"}},
    "required": ["book", "chapter", "blessed"], "additionalProperties": False}

QUESTIONS = ["And the LORD said", "In the beginning", "Blessed is the man", "And it came to pass",
             "Then Jesus said unto them", "Praise ye the LORD", "And Moses went up", "The LORD is my shepherd",
             "Hear, O Israel", "And David said", "Thus saith the LORD", "And the angel answered"]

KINDS = [("chat", 2), ("chat_stream", 3), ("cancel", 1), ("long", 1), ("tools", 1), ("schema", 1),
         ("ollama", 1), ("ollama_stream", 1), ("llama", 1), ("llama_stream", 1)]


def say(msg):
    sys.stderr.write("soak: %s\n" % msg)
    sys.stderr.flush()


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)B?", s)
    if not m:
        raise SystemExit("soak: bad size %s" % s)
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class Server:
    """colibri serve as a child (in the cgroup when given); its output goes
    to one log for all its lives, and each start remembers where its part
    of the log begins."""

    def __init__(self, a):
        self.a = a
        self.proc = None
        self.port = None
        self.log_at = 0

    def start(self):
        a = self.a
        cmd = [a.colibri, "serve", "--model", a.model, "--port", "0", "--parallel", str(a.parallel),
               "--ram", a.ram, "--sessions", a.sessions, "--timeout", "300", "--no-ui"]
        if a.cgroup:
            cmd = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', a.cgroup] + cmd
        self.log_at = os.path.getsize(a.log) if os.path.exists(a.log) else 0
        log = open(a.log, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        while True:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.segment())
            if m:
                self.port = int(m.group(1))
                return time.monotonic() - t0
            if self.proc.poll() is not None:
                raise RuntimeError("colibri serve exited %d at start: see %s" % (self.proc.returncode, a.log))
            if time.monotonic() - t0 > 300:
                raise RuntimeError("colibri serve did not listen within 300 s")
            time.sleep(0.05)

    def segment(self):
        with open(self.a.log, "rb") as f:
            f.seek(self.log_at)
            return f.read().decode("utf-8", "replace")

    def stop(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait() if self.proc else None
        return rc


def request(port, path, body, timeout=300, method="POST"):
    """One request read whole: (status, parsed JSON or None, headers)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        return r.status, obj, dict(r.getheaders())
    finally:
        c.close()


def has_token(kind, ev):
    """Whether a stream event carries generated output (for time to first
    token; role-only deltas and the closing events do not)."""
    if kind.startswith("ollama"):
        m = ev.get("message") or {}
        return bool(m.get("content") or m.get("thinking") or m.get("tool_calls"))
    if kind.startswith("llama"):
        return bool(ev.get("content") or ev.get("tokens"))
    for ch in ev.get("choices") or []:
        d = ch.get("delta") or {}
        if d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
            return True
    return False


def stream(port, path, body, kind, cancel_after=None, timeout=300):
    """A streamed request: (status, ttft_s, events, how) with how one of
    done, cancelled, error_event, cut (the stream ended without its end)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            return r.status, None, [], "refused"
        ndjson = kind.startswith("ollama")
        ttft, n, events = None, 0, []
        while True:
            line = r.readline()
            if not line:
                return 200, ttft, events, "cut"
            line = line.strip()
            if not line:
                continue
            if not ndjson:
                if not line.startswith(b"data:"):
                    continue
                line = line[5:].strip()
                if line == b"[DONE]":
                    return 200, ttft, events, "done"
            ev = json.loads(line)
            events.append(ev)
            if "error" in ev:
                return 200, ttft, events, "error_event"
            if has_token(kind, ev):
                n += 1
                if ttft is None:
                    ttft = time.monotonic() - t0
            if cancel_after and n >= cancel_after:
                return 200, ttft, events, "cancelled"
            if (ndjson and ev.get("done")) or (kind.startswith("llama") and ev.get("stop")):
                return 200, ttft, events, "done"
    finally:
        c.close()


class Soak:
    def __init__(self, a):
        self.a = a
        self.srv = Server(a)
        self.lock = threading.Lock()
        self.mix_on = False
        self.epoch = 0
        self.inflight = 0
        self.stop_all = threading.Event()
        self.records = []        # (t, kind, outcome, ttft, valid)
        self.samples = []        # (t, rss_kb, cgroup_bytes)
        self.restarts = []
        self.session_checks = []
        self.probes = []
        self.damage = None
        self.t0 = time.monotonic()
        self.model_id = None
        self.ctx = None
        self.long_ids = []
        self.q_ids = {}
        self.sessions = []       # per slot: {"ids": [...], "bound": n_past saved or 0, "resets": n}

    # ------------------------------------------------------------ set-up

    def calibrate(self):
        port = self.srv.port
        _, tags, _ = request(port, "/api/tags", None, method="GET")
        self.model_id = tags["models"][0]["digest"]
        self.model_name = tags["models"][0]["name"].split(":")[0]
        _, props, _ = request(port, "/props", None, method="GET")
        self.ctx = props["default_generation_settings"]["n_ctx"]
        text = " ".join(QUESTIONS) + ". "
        _, t, _ = request(port, "/tokenize", {"content": text * (4 * self.ctx // 40 + 1)})
        self.long_ids = t["tokens"]
        if len(self.long_ids) < self.ctx:
            raise RuntimeError("the long text has %d tokens, under the context %d" % (len(self.long_ids), self.ctx))
        for q in QUESTIONS:
            _, t, _ = request(port, "/tokenize", {"content": "\nQ: %s.\nA:" % q})
            self.q_ids[q] = t["tokens"]

    def long_text(self, n):
        _, d, _ = request(self.srv.port, "/detokenize", {"tokens": self.long_ids[:n]})
        return d["content"]

    # ------------------------------------------------------------ the mix

    def one(self, kind, rng, port):
        """Sends one request of the kind; returns (outcome, ttft, valid)."""
        seed = rng.randrange(1 << 30)
        temp = rng.choice([0, 0.7, 1.0])
        q = rng.choice(QUESTIONS)
        msgs = [{"role": "user", "content": q}]
        n = rng.randint(16, 96)
        if kind in ("chat", "chat_stream", "cancel"):
            body = {"messages": msgs, "max_tokens": 200 if kind == "cancel" else n, "temperature": temp,
                    "seed": seed}
            if kind == "chat":
                st, obj, _ = request(port, "/v1/chat/completions", body)
                return str(st), None, st != 200 or bool(obj["choices"][0]["message"].get("content") is not None)
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            st, ttft, ev, how = stream(port, "/v1/chat/completions", body, kind,
                                       cancel_after=rng.randint(1, 8) if kind == "cancel" else None)
            return (str(st) if how in ("done", "refused") else how), ttft, True
        if kind == "long":
            over = rng.random() < 0.2
            max_t = 24
            # The chat template adds a few tokens: a prompt of ctx - 40
            # leaves it room and max_tokens; ctx + 8 is over on any template.
            size = self.ctx + 8 if over else self.ctx - max_t - 40
            body = {"messages": [{"role": "user", "content": self.long_cache(size)}], "max_tokens": max_t,
                    "temperature": 0, "stream": True}
            st, ttft, ev, how = stream(port, "/v1/chat/completions", body, kind)
            if over and how in ("done", "refused"):
                return "%d (over the context)" % st, None, st == 400
            return (str(st) if how in ("done", "refused") else how), ttft, True
        if kind == "tools":
            body = {"messages": [{"role": "user", "content": "Find the verse: " + q}], "tools": TOOLS,
                    "tool_choice": "required", "max_tokens": 96, "temperature": temp, "seed": seed}
            st, obj, _ = request(port, "/v1/chat/completions", body)
            if st != 200:
                return str(st), None, True
            ch = obj["choices"][0]
            calls = ch["message"].get("tool_calls") or []
            if ch.get("finish_reason") == "length" and not calls:
                return "200 (cut by max_tokens)", None, True
            ok = bool(calls) and calls[0]["function"]["name"] == "find_verse"
            try:
                ok = ok and isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
            except ValueError:
                ok = False
            return "200", None, ok
        if kind == "schema":
            body = {"messages": [{"role": "user", "content": "Name a verse: " + q}], "max_tokens": 320,
                    "temperature": temp, "seed": seed,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "verse", "schema": SCHEMA, "strict": True}}}
            st, obj, _ = request(port, "/v1/chat/completions", body)
            if st != 200:
                return str(st), None, True
            ch = obj["choices"][0]
            try:
                v = json.loads(ch["message"]["content"])
                ok = isinstance(v, dict) and all(k in v for k in SCHEMA["required"])
            except (ValueError, TypeError):
                if ch.get("finish_reason") == "length":
                    return "200 (cut by max_tokens)", None, True
                ok = False
            return "200", None, ok
        if kind.startswith("ollama"):
            body = {"model": self.model_name, "messages": msgs, "stream": kind == "ollama_stream",
                    "options": {"temperature": temp, "seed": seed, "num_predict": n}}
            if kind == "ollama":
                st, obj, _ = request(port, "/api/chat", body)
                return str(st), None, st != 200 or bool(obj.get("done"))
            st, ttft, ev, how = stream(port, "/api/chat", body, kind)
            return (str(st) if how in ("done", "refused") else how), ttft, True
        body = {"prompt": q, "n_predict": n, "temperature": temp, "seed": seed, "stream": kind == "llama_stream"}
        if kind == "llama":
            st, obj, _ = request(port, "/completion", body)
            return str(st), None, st != 200 or "content" in obj
        st, ttft, ev, how = stream(port, "/completion", body, kind)
        return (str(st) if how in ("done", "refused") else how), ttft, True

    def long_cache(self, n):
        key = "long%d" % n
        if key not in self.q_ids:
            self.q_ids[key] = self.long_text(n)
        return self.q_ids[key]

    def worker(self, i):
        rng = random.Random(self.a.seed * 1000 + i)
        names = [k for k, _ in KINDS]
        weights = [w for _, w in KINDS]
        while not self.stop_all.is_set():
            with self.lock:
                go = self.mix_on
                if go:
                    port, epoch = self.srv.port, self.epoch
                    self.inflight += 1
            if not go:
                time.sleep(0.05)
                continue
            kind = rng.choices(names, weights)[0]
            t = time.monotonic() - self.t0
            try:
                outcome, ttft, valid = self.one(kind, rng, port)
            except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
                outcome, ttft, valid = "client error: %s" % type(e).__name__, None, True
            # A request the kill interrupted fails or ends early; the same
            # failure while the server lives is the server's fault.
            if outcome.startswith("client error") or outcome == "cut":
                with self.lock:
                    if epoch != self.epoch:
                        outcome, valid = "cut by SIGKILL", True
            with self.lock:
                self.inflight -= 1
                self.records.append((t, kind, outcome, ttft, valid))

    def hold_mix(self):
        with self.lock:
            self.mix_on = False
        while True:
            with self.lock:
                if self.inflight == 0:
                    return
            time.sleep(0.05)

    # ------------------------------------------------------------ checks

    def sessions_turn(self, restart):
        """One turn of every slot's conversation (slot k on slot k), checked
        against what the slot held when it was last saved; then each slot
        is saved again where the server loads it at start."""
        port = self.srv.port
        out = [None] * self.a.parallel

        def turn(k):
            s = self.sessions[k]
            q = QUESTIONS[(k + len(s["ids"])) % len(QUESTIONS)]
            prompt = s["ids"] + self.q_ids[q]
            st, obj, _ = request(port, "/completion", {"prompt": prompt, "id_slot": k, "n_predict": 12,
                                                       "temperature": 0, "return_tokens": True,
                                                       "cache_prompt": True})
            out[k] = (st, obj, prompt)

        ths = [threading.Thread(target=turn, args=(k,)) for k in range(self.a.parallel)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        check = {"restart": restart, "checked": 0, "found": 0, "lost": 0, "detail": []}
        for k, (st, obj, prompt) in enumerate(out):
            s = self.sessions[k]
            if st != 200:
                check["detail"].append("slot %d: status %d" % (k, st))
                if s["bound"]:
                    check["checked"] += 1
                    check["lost"] += 1
                s["bound"] = 0
                continue
            cached = obj["timings"]["cache_n"]
            if s["bound"]:
                check["checked"] += 1
                if cached >= s["bound"]:
                    check["found"] += 1
                else:
                    check["lost"] += 1
                    check["detail"].append("slot %d: %d cached of %d saved" % (k, cached, s["bound"]))
            s["ids"] = prompt + obj["tokens"]
            if len(s["ids"]) > self.ctx // 2:
                s["ids"] = self.session_head(k, s["resets"] + 1)
                s["resets"] += 1
        _, slots, _ = request(port, "/slots", None, method="GET")
        for k in range(self.a.parallel):
            name = "%s-slot%d.session" % (self.model_id, k)
            st, obj, _ = request(port, "/slots/%d?action=save" % k, {"filename": name})
            n_past = slots[k].get("n_past", 0)
            if st == 200 and obj.get("n_saved", 0) > 0:
                self.sessions[k]["bound"] = n_past
            else:
                self.sessions[k]["bound"] = 0
                check["detail"].append("slot %d: save answered %d %s" % (k, st, obj))
        self.session_checks.append(check)
        return check

    def session_head(self, k, reset):
        r = random.Random(self.a.seed * 7919 + k * 31 + reset)
        start = r.randrange(len(self.long_ids) - 64)
        return self.long_ids[start:start + 48]

    def probe(self, label):
        st, obj, _ = request(self.srv.port, "/v1/chat/completions", PROBE)
        text = obj["choices"][0]["message"]["content"] if st == 200 else "status %d" % st
        self.probes.append({"at": label, "t": time.monotonic() - self.t0, "text": text})
        return text

    def sampler(self):
        cg = self.a.cgroup
        while not self.stop_all.wait(self.a.sample_s):
            p = self.srv.proc
            rss = None
            try:
                with open("/proc/%d/status" % p.pid) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss = int(line.split()[1])
            except (OSError, AttributeError):
                pass
            use = None
            if cg:
                try:
                    with open(os.path.join(cg, "memory.usage_in_bytes")) as f:
                        use = int(f.read())
                except OSError:
                    pass
            self.samples.append((time.monotonic() - self.t0, rss, use))

    # ------------------------------------------------------------ the mirror

    def damage_mirror(self):
        with open(os.path.join(self.a.model, "manifest.json")) as f:
            man = json.load(f)
        mirrors = man.get("mirrors") or []
        if not mirrors:
            self.damage = {"done": False, "why": "the model has no mirror"}
            return
        mdir = mirrors[0]["dir"]
        if not os.path.isabs(mdir):
            mdir = os.path.join(self.a.model, mdir)
        layers = man["experts"]["layers"]
        held = [l for l in layers if l["layer"] in mirrors[0].get("layers", [l["layer"] for l in layers])]
        lay = held[len(held) // 2]
        path = os.path.join(mdir, lay["file"])
        rec = lay["record_bytes"]
        flips = []
        with open(path, "r+b") as f:
            for e in range(man["experts"]["n_experts"]):
                off = e * rec + rec // 2
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ 0x5A]))
                flips.append((off, b[0]))
            f.flush()
            os.fsync(f.fileno())
        self.damage = {"done": True, "file": path, "flips": flips, "t": time.monotonic() - self.t0,
                       "log_at": os.path.getsize(self.a.log)}
        say("flipped a byte in each of %d expert records of %s" % (len(flips), path))

    def restore_mirror(self):
        d = self.damage
        if not d or not d.get("done") or d.get("restored"):
            return
        with open(d["file"], "r+b") as f:
            for off, b in d["flips"]:
                f.seek(off)
                f.write(bytes([b]))
        d["restored"] = True

    # ------------------------------------------------------------ the run

    def count_files(self):
        return len([f for f in os.listdir(self.a.sessions) if f.endswith(".session")])

    def restart(self, n):
        with self.lock:
            inflight = self.inflight
        files_before = self.count_files()
        t_kill = time.monotonic() - self.t0
        with self.lock:
            self.epoch += 1
            self.mix_on = False
        self.srv.stop(signal.SIGKILL)
        self.hold_mix()
        up_s = self.srv.start()
        seg = self.srv.segment()
        loaded = len(re.findall(r"slot \d+: \d+ tokens from", seg))
        refused = len(re.findall(r"starts empty", seg))
        check = self.sessions_turn(n)
        text = self.probe("restart %d" % n)
        self.restarts.append({"n": n, "t": t_kill, "inflight": inflight, "files_before": files_before,
                              "files_after": self.count_files(), "loaded": loaded, "refused": refused,
                              "up_s": up_s, "lost": check["lost"], "checked": check["checked"],
                              "same": text == self.probes[0]["text"]})
        say("restart %d at %.0f s: %d in flight, %d slot files, %d loaded, %d of %d sessions found"
            % (n, t_kill, inflight, files_before, loaded, check["found"], check["checked"]))
        with self.lock:
            self.mix_on = True

    def run(self):
        a = self.a
        self.srv.start()
        self.calibrate()
        self.sessions = [{"ids": self.session_head(k, 0), "bound": 0, "resets": 0} for k in range(a.parallel)]
        self.sessions_turn(0)
        self.probe("start")
        threading.Thread(target=self.sampler, daemon=True).start()
        workers = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(a.clients)]
        for w in workers:
            w.start()
        with self.lock:
            self.mix_on = True
        rng = random.Random(a.seed)
        end = self.t0 + a.minutes * 60
        half = self.t0 + a.minutes * 30
        next_kill = time.monotonic() + a.restart_every * rng.uniform(0.7, 1.3)
        n = 0
        while time.monotonic() < end:
            time.sleep(0.2)
            now = time.monotonic()
            if self.damage is None and now >= half:
                self.damage_mirror()
            if now >= next_kill and now + 20 < end:
                n += 1
                self.restart(n)
                next_kill = time.monotonic() + a.restart_every * rng.uniform(0.7, 1.3)
        self.hold_mix()
        self.stop_all.set()
        self.probe("end")
        files = self.count_files()
        t = time.monotonic()
        rc = self.srv.stop(signal.SIGTERM)
        self.final = {"rc": rc, "stop_s": time.monotonic() - t, "files_before": files,
                      "files_after": self.count_files()}
        self.elapsed = time.monotonic() - self.t0


def cgroup_read(cg):
    out = {}
    if not cg:
        return out
    for key in ("limit_in_bytes", "max_usage_in_bytes", "failcnt"):
        try:
            with open(os.path.join(cg, "memory." + key)) as f:
                out[key] = int(f.read())
        except OSError:
            pass
    try:
        with open(os.path.join(cg, "memory.oom_control")) as f:
            for line in f:
                k, v = line.split()
                out["oom_" + k] = int(v)
    except (OSError, ValueError):
        pass
    return out


def report(s, a):
    recs = s.records
    status = {}
    for _, kind, outcome, _, valid in recs:
        status[outcome] = status.get(outcome, 0) + 1
    kinds = {}
    for _, kind, outcome, ttft, valid in recs:
        k = kinds.setdefault(kind, {"n": 0, "ok": 0, "invalid": 0, "other": {}})
        k["n"] += 1
        if outcome == "200":
            k["ok"] += 1
        else:
            k["other"][outcome] = k["other"].get(outcome, 0) + 1
        if not valid:
            k["invalid"] += 1
    ttfts = [r[3] for r in recs if r[3] is not None and r[1] != "long"]
    ttft_long = [r[3] for r in recs if r[3] is not None and r[1] == "long"]
    rss = [x[1] for x in s.samples if x[1] is not None]
    cgu = [x[2] for x in s.samples if x[2] is not None]
    budget = parse_size(a.ram)
    cg = cgroup_read(a.cgroup)
    lost = sum(c["lost"] for c in s.session_checks)
    checked = sum(c["checked"] for c in s.session_checks)
    same = s.probes[0]["text"] == s.probes[-1]["text"]
    differ = [p for p in s.probes if p["text"] != s.probes[0]["text"]]
    log = open(a.log, encoding="utf-8", errors="replace").read()
    warn_all = [l for l in log.splitlines() if "warning" in l]
    warn_damage = []
    if s.damage and s.damage.get("done"):
        with open(a.log, "rb") as f:
            f.seek(s.damage["log_at"])
            warn_damage = [l for l in f.read().decode("utf-8", "replace").splitlines() if "warning" in l]
    model, flags = vs_llama_runs.host_cpu()
    ident = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k.strip() in ("cpu family", "model") and k.strip() not in ident:
                ident[k.strip()] = v.strip()
    model += " (family %s model %s)" % (ident.get("cpu family", "?"), ident.get("model", "?"))
    mb = lambda v: "%.1f MiB" % (v / (1 << 20)) if v is not None else "-"  # noqa: E731

    md = ["# colibri serve soak", ""]
    md.append("`%s` on %s: %.1f minutes, `serve --parallel %d --ram %s --sessions DIR`%s, %d clients on loopback, "
              "SIGKILL about every %d s, model `%s` (context %d)."
              % (a.command, time.strftime("%Y-%m-%dT%H:%M:%S%z"), s.elapsed / 60, a.parallel, a.ram,
                 " in a cgroup v1 memory group of %s" % mb(cg.get("limit_in_bytes")) if a.cgroup else
                 " (no cgroup: not root)", a.clients, a.restart_every, a.model, s.ctx))
    md.append("")
    md.append("Host: %s, %d CPUs; flags: %s (AMX, where listed, is never used). colibri: %s."
              % (model, os.cpu_count(), flags, a.rev))
    if a.note:
        md += ["", a.note]
    md += ["", "## Summary", "",
           "| what | result |", "| --- | --- |",
           "| requests | %d |" % len(recs),
           "| per outcome | %s |" % ", ".join("%s: %d" % (k, v) for k, v in sorted(status.items())),
           "| answers that failed their check | %d |" % sum(1 for r in recs if not r[4]),
           "| time to first token, streams (n=%d) | p50 %s, p99 %s |"
           % (len(ttfts), fmt_s(pct(ttfts, 0.5)), fmt_s(pct(ttfts, 0.99))),
           "| time to first token, long prompts (n=%d) | p50 %s, p99 %s |"
           % (len(ttft_long), fmt_s(pct(ttft_long, 0.5)), fmt_s(pct(ttft_long, 0.99))),
           "| max VmRSS / --ram budget | %s / %s (%.0f%%) |"
           % (mb(max(rss) * 1024 if rss else None), mb(budget), 100.0 * max(rss or [0]) * 1024 / budget),
           "| cgroup peak (max_usage_in_bytes, page cache included) / limit | %s / %s, failcnt %s, OOM kills %s |"
           % (mb(cg.get("max_usage_in_bytes")), mb(cg.get("limit_in_bytes")), cg.get("failcnt", "-"),
              cg.get("oom_oom_kill", "-")),
           "| restarts (SIGKILL) | %d |" % len(s.restarts),
           "| sessions lost | %d of %d checked |" % (lost, checked),
           "| fixed greedy request, end = start | %s (%d of %d probes differ) |"
           % ("yes" if same else "NO", len(differ), len(s.probes)),
           "| mirror damage | %s |" % damage_line(s.damage, warn_damage),
           "| final SIGTERM | exit %s after %.1f s, slot files %d before, %d after |"
           % (s.final["rc"], s.final["stop_s"], s.final["files_before"], s.final["files_after"]),
           "| server warnings (whole log) | %d |" % len(warn_all)]
    md += ["", "Outcomes: a status is the HTTP answer read to its end; `cancelled`: the client closed the "
           "stream after 1-8 tokens, as meant; `cut by SIGKILL`: in flight when the server was killed; "
           "`cut`: a stream that ended without its last event while the server lived; `error_event`: an "
           "error inside a stream; `400 (over the context)`: a prompt a little over the context, which "
           "must be refused; `200 (cut by max_tokens)`: a schema or forced call whose answer had not closed "
           "when max_tokens ran out (not checked); `client error: X`: the connection failed while the server "
           "lived. Time to first token is the client's, from sending the request to the first event with "
           "output, queueing behind other requests included. VmRSS counts the pages of the binary and "
           "libraries, which the cgroup charges to whoever read them first, so it can exceed the group's "
           "usage."]
    md += ["", "## Requests per kind", "", "| kind | sent | 200 | other outcomes | failed check |",
           "| --- | ---: | ---: | --- | ---: |"]
    for k in [k for k, _ in KINDS]:
        v = kinds.get(k)
        if v:
            md.append("| %s | %d | %d | %s | %d |" % (k, v["n"], v["ok"],
                      ", ".join("%s: %d" % x for x in sorted(v["other"].items())) or "-", v["invalid"]))
    md += ["", "## Restarts", "",
           "| # | at | requests in flight | slot files before | after | slots loaded | refused | up in | sessions found | greedy text same |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in s.restarts:
        md.append("| %d | %.0f s | %d | %d | %d | %d | %d | %.2f s | %d of %d | %s |"
                  % (r["n"], r["t"], r["inflight"], r["files_before"], r["files_after"], r["loaded"],
                     r["refused"], r["up_s"], r["checked"] - r["lost"], r["checked"], "yes" if r["same"] else "NO"))
    details = [d for c in s.session_checks for d in c["detail"]]
    if details:
        md += ["", "Session details: " + "; ".join(details)]
    md += ["", "## Memory over time", "", "| window | max VmRSS | max cgroup usage |", "| --- | ---: | ---: |"]
    span = max(60.0, s.elapsed / 10)
    w = 0.0
    while w < s.elapsed:
        xs = [x for x in s.samples if w <= x[0] < w + span]
        r = [x[1] for x in xs if x[1] is not None]
        u = [x[2] for x in xs if x[2] is not None]
        if xs:
                md.append("| %.0f-%.0f s | %s | %s |" % (w, min(w + span, s.elapsed), mb(max(r) * 1024 if r else None),
                                                    mb(max(u) if u else None)))
        w += span
    md += ["", "## The fixed greedy request", "", "`%s`" % json.dumps(PROBE), "",
           "At start: %s" % json.dumps(s.probes[0]["text"]), ""]
    for p in differ:
        md.append("Differs at %s: %s" % (p["at"], json.dumps(p["text"])))
    if warn_damage:
        md += ["", "Warnings after the mirror damage (first 3 distinct):", ""]
        seen = []
        for l in warn_damage:
            l = re.sub(r"\d+(\.\d+)? s\b", "N s", l)
            if l not in seen:
                seen.append(l)
        md += ["    " + l for l in seen[:3]]
    text = "\n".join(md) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    raw = os.path.splitext(a.out)[0] + ".json"
    with open(raw, "w") as f:
        json.dump({"args": vars(a), "records": recs, "samples": s.samples, "restarts": s.restarts,
                   "session_checks": s.session_checks, "probes": s.probes, "cgroup": cg,
                   "damage": {k: v for k, v in (s.damage or {}).items()}, "final": s.final}, f)
    summary = ["soak: %.1f min, %d requests (%s)" % (s.elapsed / 60, len(recs),
               ", ".join("%s: %d" % (k, v) for k, v in sorted(status.items()))),
               "soak: TTFT p50 %s p99 %s (streams), long prompts p50 %s p99 %s"
               % (fmt_s(pct(ttfts, 0.5)), fmt_s(pct(ttfts, 0.99)), fmt_s(pct(ttft_long, 0.5)),
                  fmt_s(pct(ttft_long, 0.99))),
               "soak: max RSS %s of a %s budget; cgroup peak %s" % (mb(max(rss or [0]) * 1024), mb(budget),
                                                                    mb(cg.get("max_usage_in_bytes"))),
               "soak: %d restarts, sessions lost %d of %d, greedy text end = start: %s"
               % (len(s.restarts), lost, checked, "yes" if same else "NO"),
               "soak: report %s" % a.out]
    print("\n".join(summary))
    return 0 if lost == 0 and same and not differ and s.final["rc"] == 0 else 1


def damage_line(d, warns):
    if not d:
        return "not reached"
    if not d.get("done"):
        return "none: %s" % d["why"]
    return "%d bytes flipped in %s at %.0f s; %d warning lines after" % (len(d["flips"]), d["file"], d["t"],
                                                                       len(warns))


def fmt_s(v):
    return "-" if v is None else ("%.0f ms" % (v * 1000))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--colibri", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--ram", default="64M")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--restart-every", type=float, default=0,
                    help="seconds between kills (default: 180, or a fifth of a soak under 15 minutes)")
    ap.add_argument("--sample-s", type=float, default=2)
    ap.add_argument("--cgroup", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rev", default="unknown")
    ap.add_argument("--note", default="")
    ap.add_argument("--command", default="bench/soak.sh")
    a = ap.parse_args()
    a.restart_every = a.restart_every or min(180.0, a.minutes * 12)
    s = Soak(a)

    def on_signal(sig, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        s.run()
    except BaseException:
        s.stop_all.set()
        if s.srv.proc and s.srv.proc.poll() is None:
            s.srv.proc.kill()
            s.srv.proc.wait()
        raise
    finally:
        s.restore_mirror()
    return report(s, a)


if __name__ == "__main__":
    sys.exit(main())
