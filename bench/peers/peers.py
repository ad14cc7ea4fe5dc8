"""Sluice beside the systems users would run instead, on one dataset and
the same two cores: `make bench-peers` (install.sh, then this, with the
cached venv's python).

    peers.py [--images 2048] [--epochs 2] [--systems a,b] [--dtypes uint8,f32]
             [--json FILE] [--png FILE] [--skip-lm] [--skip-images]

For each image system and each setting of its grid (workers, threads,
replicas) it starts systems.py in a process of its own, pinned to the
cores, samples the process tree (every process it starts, however
deep: this process is their subreaper, so even daemons stay in it), and
checks the output (check.py). The float32 pass runs each system at the
setting that won its uint8 grid. Then the LM part (lm.py). It prints the
tables, writes --json (snake_case) and --png.
"""

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check  # noqa: E402

CACHE = os.environ.get("SLUICE_PEERS_DIR", os.path.expanduser("~/.cache/sluice/peers"))
VENVS = {"main": os.path.join(CACHE, "main", "bin", "python"), "tf": os.path.join(CACHE, "tf", "bin", "python")}

# system -> (venv, grid of settings, what the setting is)
GRID = {
    "torch-pil": ("main", [2, 3], "DataLoader num_workers"),
    "torch-decode_jpeg": ("main", [2, 3], "DataLoader num_workers"),
    "torchdata-nodes": ("main", [2, 4], "ParallelMapper threads"),
    "tf-local": ("tf", [0], "AUTOTUNE"),
    "tf-service": ("tf", [1, 2], "workers"),
    "ray-data": ("main", [1, 2], "map_batches actors"),
    "dali-cpu": ("main", [2, 3], "num_threads"),
    "spdl": ("main", [2, 4], "threads"),
    # REPLICASxCONCURRENCY: each replica one core, taking that many shards
    # at once (the controller's --replica-concurrency).
    "sluice-go": ("main", ["1", "2", "2x2"], "replicas"),
    "sluice-turbo": ("main", ["1", "2", "2x2"], "replicas"),
}
CORES = sorted(os.sched_getaffinity(0))[:2]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --- the dataset ------------------------------------------------------------------------------

def prepare_images(n, shards, out):
    """n ImageNet-like JPEGs (bench/genimages: synth's images, sides
    375-500 px, quality 90) as files (files/KEY.jpg) and as WebDataset
    shards (KEY.jpg, KEY.cls, KEY.idx: the key again, for readers that
    cannot hand the key through), and manifest.json."""
    man = os.path.join(out, "manifest.json")
    if os.path.exists(man):
        return json.load(open(man))
    files = os.path.join(out, "files")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "shards"))
    subprocess.run(["go", "run", "./bench/genimages", "--out", files, "--samples", str(n),
                    "--min-side", "375", "--max-side", "500", "--quality", "90"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    keys = sorted(f[:-4] for f in os.listdir(files) if f.endswith(".jpg"))
    labels = [int(open(os.path.join(files, k + ".cls")).read().strip()) for k in keys]
    names = []
    per = (len(keys) + shards - 1) // shards
    for s in range(shards):
        name = f"shard-{s:06d}.tar"
        names.append(name)
        with tarfile.open(os.path.join(out, "shards", name), "w", format=tarfile.USTAR_FORMAT) as t:
            for k in keys[s * per:(s + 1) * per]:
                t.add(os.path.join(files, k + ".jpg"), arcname=k + ".jpg")
                t.add(os.path.join(files, k + ".cls"), arcname=k + ".cls")
                idx = os.path.join(out, "idx.tmp")
                with open(idx, "w") as f:
                    f.write(k)
                t.add(idx, arcname=k + ".idx")
    os.remove(os.path.join(out, "idx.tmp"))
    size = sum(os.path.getsize(os.path.join(files, k + ".jpg")) for k in keys)
    m = {"keys": keys, "labels": labels, "shards": names, "jpeg_bytes": size}
    json.dump(m, open(man, "w"))
    return m


def build_sluice(out):
    """Both decoder builds, and the stack helper."""
    bins = {"sluice-go": os.path.join(out, "sluice-go"), "sluice-turbo": os.path.join(out, "sluice-turbo"),
            "stack": os.path.join(out, "stack")}
    errors = {}
    for name, args in [("sluice-go", ["./cmd/sluice"]), ("sluice-turbo", ["-tags", "turbojpeg", "./cmd/sluice"]),
                       ("stack", ["./bench/peers/stack"])]:
        tags, pkg = args[:-1], args[-1]
        r = subprocess.run(["go", "build"] + tags + ["-o", bins[name], pkg], cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            errors[name] = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"go build exit {r.returncode}"
    return bins, errors


# --- running one system, measured --------------------------------------------------------------

def become_subreaper():
    # PR_SET_CHILD_SUBREAPER: orphans of the run (daemonized servers) are
    # reparented to this process, so they stay in its tree and get counted.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except OSError:
        pass


class TreeMeter:
    """Samples every descendant of this process.

    CPU, two ways, the larger counted: (a) each listed process's own user +
    system time plus its reaped children's (psutil's children_user/system),
    plus what this process reaped since the meter started (orphans given to
    it): exact while every parent waits for its children; (b) the last
    value seen of each process's own time, summed over every process seen:
    short by what a process spent after its last sample, but it keeps the
    children of a parent that does not wait for them (auto-reaped: Ray's
    workers), which (a) loses. The breakdown by process is (b)'s.

    Memory: the peak of the summed PSS (RSS where PSS is unreadable), since
    forked workers share pages that RSS would count once per worker."""

    def __init__(self, interval=0.15):
        import psutil
        self.psutil = psutil
        self.me = psutil.Process()
        t = os.times()
        self.base = t.children_user + t.children_system
        self.peak_mb = 0.0
        self.own = {}  # (pid, start time) -> [name, last own CPU seen]
        self.by_name = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.interval = interval
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def sample(self):
        ps = self.psutil
        exact = mem = 0.0
        with self.lock:
            try:
                kids = self.me.children(recursive=True)
            except ps.Error:
                kids = []
            for p in kids:
                try:
                    c = p.cpu_times()
                    key = (p.pid, p.create_time())
                except ps.Error:
                    continue
                exact += c.user + c.system + c.children_user + c.children_system
                if key not in self.own:
                    self.own[key] = [proc_name(p), 0.0]
                self.own[key][1] = c.user + c.system
                try:
                    mem += p.memory_full_info().pss
                except ps.Error:
                    try:
                        mem += p.memory_info().rss
                    except ps.Error:
                        pass
            t = os.times()
            exact += t.children_user + t.children_system - self.base
            seen = 0.0
            by = {}
            for name, cpu in self.own.values():
                seen += cpu
                by[name] = by.get(name, 0.0) + cpu
            self.by_name = by
            self.peak_mb = max(self.peak_mb, mem / 2 ** 20)
            return max(exact, seen)

    def loop(self):
        while not self.stop.wait(self.interval):
            self.sample()

    def close(self):
        self.stop.set()
        self.t.join()


def proc_name(p):
    """What a process is, for the CPU breakdown: the command and, for
    Sluice's binary and Python scripts, what it runs."""
    try:
        cmd = p.cmdline()
    except Exception:
        cmd = []
    if not cmd:
        return p.name()
    base = os.path.basename(cmd[0])
    if base.startswith("sluice"):
        return "sluice " + " ".join(cmd[1:3] if cmd[1:2] == ["fn"] else cmd[1:2])
    if base.startswith("python") and len(cmd) > 1:
        arg = cmd[1] if cmd[1] != "-c" else "-c"
        if arg.endswith(".py"):
            return os.path.basename(arg)
        return p.name()
    return p.name()


def breakdown(first, end):
    """CPU-s per kind of process between two samples, largest first."""
    names = set(first) | set(end)
    out = [[n, round(end.get(n, 0.0) - first.get(n, 0.0), 2)] for n in names]
    return sorted([x for x in out if x[1] > 0.005], key=lambda x: -x[1])


def kill_tree():
    import psutil
    kids = psutil.Process().children(recursive=True)
    for p in kids:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(kids, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def reap_all(root_pid, deadline):
    """Reaps every child (the root and the orphans given to this
    subreaper); returns the root's exit status and the CPU-seconds of all
    reaped (rusage counts each process's waited-for descendants too)."""
    status, cpu = None, 0.0
    while True:
        try:
            pid, st, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if status is not None or time.time() > deadline:
                import psutil
                if not psutil.Process().children():
                    break
                if time.time() > deadline:
                    kill_tree()
            time.sleep(0.05)
            continue
        cpu += ru.ru_utime + ru.ru_stime
        if pid == root_pid:
            status = os.waitstatus_to_exitcode(st)
            # The rest: whatever it left running is stopped now.
            kill_tree()
    return status, cpu


def run_one(system, setting, dtype, args, bins, manifest, data):
    venv = GRID[system][0]
    py = VENVS[venv]
    row = {"system": system, "dtype": dtype, "setting": setting, "setting_name": GRID[system][2], "ok": False}
    if not os.path.exists(py):
        row["error"] = f"no venv at {os.path.dirname(os.path.dirname(py))}: run bench/peers/install.sh"
        return row
    if system.startswith("sluice") and (system in args.build_errors or "stack" in args.build_errors):
        row["error"] = "build: " + args.build_errors.get(system, args.build_errors.get("stack", ""))
        return row
    work = os.path.join(args.workdir, f"{system}-{dtype}-{setting}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cmd = [py, os.path.join(HERE, "systems.py"), system, "--data", data, "--setting", str(setting),
           "--dtype", dtype, "--epochs", str(args.epochs), "--batch", str(args.batch),
           "--sluice-bin", bins.get(system, ""), "--stack-bin", bins["stack"], "--work", work]
    env = dict(os.environ, OMP_NUM_THREADS="2", TF_CPP_MIN_LOG_LEVEL="2", RAY_DISABLE_USAGE_STATS="1",
               PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    errf = open(os.path.join(work, "stderr.log"), "w")
    meter = TreeMeter()
    m = {"t_start": time.time(), "first_batch_images": 0}
    events = {}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, env=env,
                         preexec_fn=lambda: os.sched_setaffinity(0, CORES))

    def reader():
        for line in p.stdout:
            if not line.startswith("PEERS "):
                continue
            ev = json.loads(line[6:])
            if ev["event"] in ("mark", "end"):
                # Sampled at once: every process is alive at the marks.
                sample = (time.time(), meter.sample(), dict(meter.by_name), ev.get("images_before"))
                if ev["event"] == "end":
                    events["end"] = sample
                else:
                    events.setdefault("marks", {})[ev["epoch"]] = sample
            else:
                events["result"] = ev
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    status, total_cpu = reap_all(p.pid, time.time() + args.timeout)
    rt.join(10)
    meter.close()
    errf.close()
    row["total_cpu_s"] = round(total_cpu, 1)
    res = events.get("result")
    marks = events.get("marks", {})
    if status != 0 or not res or 0 not in marks or "end" not in events:
        tail = [ln.strip() for ln in open(os.path.join(work, "stderr.log"), errors="replace") if ln.strip()]
        why = "timed out after %ds" % args.timeout if status is None else f"exit {status}"
        # The last lines that say something (tracebacks end with the error).
        msg = " | ".join(tail[-2:])[-400:] if tail else ""
        row["error"] = f"{why}: {msg}" if msg else why
        return row
    if "decoder" in res:
        row["decoder"] = res["decoder"]
    # The window: one whole epoch, from the first batch of epoch 1 to the
    # first of epoch 2, so that what the system had made ahead at its start
    # (prefetch, buffers) is about what it has made ahead at its end, and
    # startup is left out. With fewer epochs: the first batch to the last.
    tm = res.get("trainer_cpu_at_marks", {})
    if 1 in marks and 2 in marks:
        a, b = marks[1], marks[2]
        m.update(images=b[3] - a[3], first_batch_images=0, trainer_cpu_s=tm["2"] - tm["1"], window="epoch 1")
    else:
        a, b = marks[0], events["end"]
        m.update(images=res["images"], first_batch_images=res.get("first_batch_images", 0),
                 trainer_cpu_s=res["trainer_cpu_s"], window="first batch to last")
    m.update(t_first=a[0], t_end=b[0], tree_cpu_first=a[1], tree_cpu_end=b[1], peak_mem_mb=meter.peak_mb)
    m["t_start"] = m.pop("t_start")
    row.update(check.figures(m))
    row["first_batch_s"] = round(marks[0][0] - m["t_start"], 2)
    row["window"] = m["window"]
    row["channel_means"] = res["channel_means"]
    row["cpu_by_process"] = breakdown(a[2], b[2])
    row["problems"] = check.check_images(res, manifest, args.epochs, args.batch, dtype)
    row["ok"] = not row["problems"]
    return row


def versions():
    out = {"python": platform.python_version()}
    for venv in VENVS:
        path = os.path.join(CACHE, f"freeze-{venv}.txt")
        if os.path.exists(path):
            for line in open(path):
                name, _, ver = line.strip().partition("==")
                if name.lower() in ("torch", "torchvision", "torchdata", "tensorflow-cpu", "ray", "nvidia-dali-cuda120",
                                    "spdl-io", "spdl-core", "spdl", "tokenizers", "tiktoken", "datasets", "pillow", "numpy"):
                    out[f"{name.lower().replace('-', '_')}_{venv}" if venv != "main" else name.lower().replace("-", "_")] = ver
    r = subprocess.run(["go", "version"], capture_output=True, text=True)
    out["go"] = r.stdout.split()[2] if r.returncode == 0 else None
    return out


def install_costs():
    path = os.path.join(CACHE, "costs.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3, help="3 or more: the figures are epoch 1's")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--systems", default=",".join(GRID))
    ap.add_argument("--dtypes", default="uint8,f32")
    ap.add_argument("--grid", default="", help="override every grid, e.g. 2")
    ap.add_argument("--timeout", type=int, default=600, help="seconds one run may take")
    ap.add_argument("--workdir", default=os.path.join(CACHE, "runs"))
    ap.add_argument("--json", default="", help="write the report here (- for stdout)")
    ap.add_argument("--png", default="", help="write the chart here")
    ap.add_argument("--lm-repeats", type=int, default=16, help="times the 1.8 MB corpus is taken (shuffled anew each time)")
    ap.add_argument("--merge", default="", help="a report of an earlier pass (--json): its image runs join this "
                    "pass's before each system's best is picked (best of both: on shared cores one pass is noisy)")
    ap.add_argument("--replace", action="store_true", help="with --merge: the merged report's runs of the systems "
                    "this pass runs are dropped, not joined (a rerun after a fix)")
    ap.add_argument("--skip-lm", action="store_true")
    ap.add_argument("--skip-images", action="store_true")
    ap.add_argument("--report", default="", help="print the tables of a report written with --json (and --png), run nothing")
    args = ap.parse_args()
    if args.report:
        report = json.load(open(args.report))
        print_report(report)
        if args.png:
            import chart
            chart.write(report, args.png)
        return
    become_subreaper()
    load = os.getloadavg()
    report = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_at_start": list(load),
              "cores": CORES, "cpu_model": cpu_model(), "versions": versions(), "install_costs": install_costs(),
              "images": {}, "lm": {}}
    log(f"peers: load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on cores {CORES}")
    os.makedirs(args.workdir, exist_ok=True)
    bins, args.build_errors = build_sluice(os.path.join(CACHE, "bin"))
    report["build_errors"] = args.build_errors
    if not args.skip_images:
        data = os.path.join(CACHE, f"data-images-{args.images}-{args.shards}")
        manifest = prepare_images(args.images, args.shards, data)
        if "stack" not in args.build_errors:
            # Sluice's S3 store of the shards, untimed, as the files are.
            subprocess.run([bins["stack"], "--shards", os.path.join(data, "shards"), "--s3-dir", os.path.join(data, "s3"),
                            "--prepare"], check=True)
        systems = [s for s in args.systems.split(",") if s]
        rows = []
        dtypes = args.dtypes.split(",")
        best = {}
        for dtype in dtypes:
            for s in systems:
                grid = GRID[s][1] if dtype == dtypes[0] else [best.get(s, GRID[s][1][-1])]
                if args.grid:
                    grid = args.grid.split(",")
                for setting in grid:
                    log(f"peers: {s} {dtype} {GRID[s][2]}={setting} ...")
                    r = run_one(s, setting, dtype, args, bins, manifest, data)
                    log("peers:   " + (f"{r.get('images_per_s')} img/s" if r["ok"] else
                                       "FAILED " + "; ".join(r.get("problems") or [r.get("error", "")])))
                    rows.append(r)
                if dtype == dtypes[0]:
                    ok = [r for r in rows if r["system"] == s and r["ok"]]
                    if ok:
                        best[s] = max(ok, key=lambda r: r["images_per_s"])["setting"]
        passes = 1
        for r in rows:
            r["pass"] = 1
        if args.merge:
            prev = json.load(open(args.merge))
            passes = 1 + max((r.get("pass", 1) for r in prev["images"]["runs"]), default=1)
            for r in rows:
                r["pass"] = passes
            kept = [r for r in prev["images"]["runs"] if not (args.replace and r["system"] in systems)]
            rows = kept + rows
            report["merged_from"] = {"file": args.merge, "started_utc": prev.get("started_utc"),
                                     "load_avg_at_start": prev.get("load_avg_at_start"),
                                     "replaced_systems": sorted({r["system"] for r in prev["images"]["runs"]} - {r["system"] for r in kept}),
                                     "merged_from": prev.get("merged_from")}
            if args.skip_lm and prev.get("lm"):
                report["lm"] = prev["lm"]
        check.compare_means(rows)
        report["images"] = {"dataset": {"images": len(manifest["keys"]), "shards": len(manifest["shards"]),
                                        "mean_jpeg_kib": round(manifest["jpeg_bytes"] / len(manifest["keys"]) / 1024, 1),
                                        "epochs": args.epochs, "batch": args.batch},
                            "runs": rows, "best": check.pick_best(rows)}
        report["images"]["passes"] = passes
    if not args.skip_lm:
        import lm
        report["lm"] = lm.run_all(args, CACHE, VENVS, run_measured, bins)
    report["load_avg_at_end"] = list(os.getloadavg())
    print_report(report)
    bad = check.snake_case_keys(report)
    if bad:
        log("peers: keys not snake_case: " + ", ".join(bad[:5]))
    if args.json:
        text = check.to_json(report)
        if args.json == "-":
            print(text)
        else:
            open(args.json, "w").write(text + "\n")
    if args.png and report["images"]:
        import chart
        chart.write(report, args.png)
        log(f"peers: chart in {args.png}")


def merged_note(m):
    out = ""
    while m:
        out += (f"; merged with the pass of {m['started_utc']} (load average {m['load_avg_at_start'][0]:.2f} at its start"
                + (f"; its runs of {', '.join(m['replaced_systems'])} replaced by this pass's" if m.get("replaced_systems") else "")
                + ")")
        m = m.get("merged_from")
    return out


def print_report(report):
    """The tables, the targets and the install costs, from a report (this
    run's, or one --report reads back)."""
    load = report["load_avg_at_start"]
    print(f"bench/peers {report['started_utc']}: {report.get('cpu_model')}, cores {report['cores']}, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, {report['load_avg_at_end'][0]:.2f} at end"
          + merged_note(report.get("merged_from")))
    v = report["versions"]
    print("versions: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)))
    im = report.get("images") or {}
    if im:
        d, passes = im["dataset"], im.get("passes", 1)
        print(f"\nImages ({'best of %d passes; ' % passes if passes > 1 else ''}figures of epoch 1 of {d['epochs']}): "
              f"{d['images']} JPEGs (~{d['mean_jpeg_kib']} KiB), batches of {d['batch']}")
        print(check.format_table(im["best"]))
        print("grids (img/s per setting): " + "; ".join(
            f"{r['system']} {r['dtype']} {r['grid']}" for r in im["best"]))
    if report.get("lm"):
        import lm
        print()
        print(lm.format_report(report["lm"]))
    print("\nagainst the targets:")
    for line in check.targets(im.get("best", []), (report.get("lm") or {}).get("runs", [])):
        print("  " + line)
    print("\ninstall costs (MB on disk, minutes): " + ", ".join(
        f"{k} {c['mb']:.0f} MB {c['minutes']:.1f} min" + ("" if c.get("rc") == 0 else " (FAILED)")
        for k, c in sorted(report["install_costs"].items())))


def run_measured(cmd, env, timeout, work):
    """Runs cmd as run_one does (pinned, its tree sampled); returns (exit
    status, the result event or None, peak MB, CPU-s of every process from
    the start to the "end" event (the teardown left out; the whole run
    where no end came), stderr tail, wall s)."""
    os.makedirs(work, exist_ok=True)
    errf = open(os.path.join(work, "stderr.log"), "w")
    meter = TreeMeter()
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, env=env,
                         preexec_fn=lambda: os.sched_setaffinity(0, CORES))
    res = {}

    def reader():
        for line in p.stdout:
            if line.startswith("PEERS "):
                ev = json.loads(line[6:])
                if ev["event"] == "end":
                    res["cpu_at_end"] = meter.sample()
                    res["by_name"] = breakdown({}, meter.by_name)
                else:
                    res["result"] = ev
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    status, cpu = reap_all(p.pid, time.time() + timeout)
    rt.join(10)
    meter.close()
    errf.close()
    tail = [ln.strip() for ln in open(os.path.join(work, "stderr.log"), errors="replace") if ln.strip()]
    if res.get("result") is not None:
        res["result"]["cpu_by_process"] = res.get("by_name")
    return (status, res.get("result"), meter.peak_mb, res.get("cpu_at_end", cpu), " | ".join(tail[-2:])[-400:],
            time.time() - t0)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
