"""The harness's own checks and its output, kept free of the peers'
libraries (standard library only) so that test_check.py runs anywhere:

- check_images: a run delivered what the pipeline promises (every sample
  once per epoch with its own label, [B,224,224,3] uint8 or [B,3,224,224]
  float32 batches);
- compare_means: every run's per-channel mean is the others' (a system
  that swaps channels, forgets to normalize or hands back zeros differs);
- check_tokens: the LM runs of one tokenizer produced the same ids;
- figures, pick_best, format_table, to_json: the numbers and how they
  print.
"""

import json
import statistics

SIZE = 224
# How far one run's per-channel mean may sit from the median run's: the
# crops are random, so means differ by a little between runs of one system
# too (about 1 of 255 over 2,000 images here); a channel swap or a missing
# normalization is 10 or more.
MEAN_TOLERANCE = {"uint8": 6.0, "f32": 0.1}


def batch_shape_ok(shape, dtype, batch):
    if len(shape) != 4 or not 0 < shape[0] <= batch:
        return False
    return shape[1:] == ([SIZE, SIZE, 3] if dtype == "uint8" else [3, SIZE, SIZE])


def check_images(result, manifest, epochs, batch, dtype):
    """Problems with one run's output (empty: none)."""
    problems = []
    want_dtype = "uint8" if dtype == "uint8" else "float32"
    if result.get("dtypes") != [want_dtype]:
        problems.append(f"dtype {result.get('dtypes')}, want [{want_dtype}]")
    full = 0
    for s, n in result.get("shapes", {}).items():
        shape = json.loads(s)
        if not batch_shape_ok(shape, dtype, batch):
            problems.append(f"{n} batch(es) of shape {shape}")
        elif shape[0] == batch:
            full += n
    keys = [int(k) for k in manifest["keys"]]
    label_of = dict(zip(keys, manifest["labels"]))
    want = sorted(keys)
    # Most batches full: a system that cuts many short batches did not
    # batch as asked. (tf.data service batches on each worker, so each
    # worker's last batch of an epoch may be short: not all but one.)
    per_epoch_full = len(keys) // batch
    if full * 2 < per_epoch_full * epochs:
        problems.append(f"{full} full batches of {batch}, want at least {(per_epoch_full * epochs + 1) // 2}")
    got_keys = result.get("keys", [])
    got_labels = result.get("labels", [])
    if len(got_keys) != epochs:
        problems.append(f"{len(got_keys)} epochs, want {epochs}")
    for e, ks in enumerate(got_keys):
        if sorted(ks) != want:
            seen = set(ks)
            missing = len(set(want) - seen)
            dup = len(ks) - len(seen)
            problems.append(f"epoch {e}: {len(ks)} samples, {missing} missing, {dup} repeated (want each of {len(want)} once)")
        labels = got_labels[e] if e < len(got_labels) else []
        wrong = sum(1 for k, y in zip(ks, labels) if label_of.get(k) != y)
        if wrong or len(labels) != len(ks):
            problems.append(f"epoch {e}: {wrong} labels not the sample's, {len(labels)} labels for {len(ks)} keys")
    return problems


def compare_means(rows):
    """Adds a problem to each ok row whose channel means are off the median
    of the ok rows of its dtype."""
    for dtype, tol in MEAN_TOLERANCE.items():
        ok = [r for r in rows if r["dtype"] == dtype and r.get("ok") and r.get("channel_means")]
        if len(ok) < 2:
            continue
        med = [statistics.median(r["channel_means"][c] for r in ok) for c in range(3)]
        for r in ok:
            off = max(abs(r["channel_means"][c] - med[c]) for c in range(3))
            if off > tol:
                r["ok"] = False
                r.setdefault("problems", []).append(
                    "channel means %s, others' median %s" % ([round(x, 3) for x in r["channel_means"]],
                                                             [round(x, 3) for x in med]))


def check_tokens(runs):
    """runs: [{system, tokenizer, ok, digest, rows, tokens}]. Marks a run
    whose ids differ from the first ok run of the same tokenizer."""
    first = {}
    for r in runs:
        if not r.get("ok"):
            continue
        ref = first.setdefault(r["tokenizer"], r)
        if ref is r:
            continue
        if (r["digest"], r["rows"], r["tokens"]) != (ref["digest"], ref["rows"], ref["tokens"]):
            r["ok"] = False
            r.setdefault("problems", []).append(
                f"ids differ from {ref['system']}'s: {r['rows']} rows, {r['tokens']} tokens, digest {r['digest'][:12]} "
                f"against {ref['rows']}, {ref['tokens']}, {ref['digest'][:12]}")


def figures(m):
    """The table's numbers from one run's measures: m has images,
    first_batch_images, t_start, t_first, t_end (s), tree_cpu_first,
    tree_cpu_end (CPU-s of every process of the run, sampled at the first
    and the last batch), trainer_cpu_s (the training process's own, first
    to last batch), peak_mem_mb."""
    n = m["images"] - m["first_batch_images"]
    wall = m["t_end"] - m["t_first"]
    if n <= 0 or wall <= 0:
        return {"images_per_s": None, "cpu_s_per_1k": None, "trainer_cpu_s_per_1k": None,
                "first_batch_s": round(m["t_first"] - m["t_start"], 2), "peak_mem_mb": m["peak_mem_mb"]}
    return {
        "images_per_s": round(n / wall, 1),
        "cpu_s_per_1k": round((m["tree_cpu_end"] - m["tree_cpu_first"]) / n * 1000, 2),
        "trainer_cpu_s_per_1k": round(m["trainer_cpu_s"] / n * 1000, 3),
        "first_batch_s": round(m["t_first"] - m["t_start"], 2),
        "peak_mem_mb": round(m["peak_mem_mb"]),
    }


def pick_best(rows):
    """One row per (system, dtype): the ok run with the most images/s (the
    grid's winner, its 'grid' listing every setting tried and its rate), or
    the first failure when none ran."""
    groups = {}
    for r in rows:
        groups.setdefault((r["system"], r["dtype"]), []).append(r)
    best = []
    for (_, _), rs in groups.items():
        ok = [r for r in rs if r.get("ok") and r.get("images_per_s")]
        pick = dict(max(ok, key=lambda r: r["images_per_s"]) if ok else rs[0])
        # Each setting's best rate over the passes, "failed" where none ran.
        grid = {}
        for r in rs:
            k = str(r["setting"])
            v = r["images_per_s"] if r.get("ok") and r.get("images_per_s") else None
            if v is not None and not isinstance(grid.get(k), float):
                grid[k] = v
            elif v is not None:
                grid[k] = max(grid[k], v)
            else:
                grid.setdefault(k, "failed")
        pick["grid"] = grid
        best.append(pick)
    return best


def _fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


IMAGE_COLUMNS = [
    ("system", "system", None), ("dtype", "output", None), ("setting", "won at", None),
    ("images_per_s", "img/s", 1), ("cpu_s_per_1k", "CPU-s/1k all", 2),
    ("trainer_cpu_s_per_1k", "CPU-s/1k trainer", 3), ("first_batch_s", "1st batch s", 2),
    ("peak_mem_mb", "peak MB", 0),
]


def format_table(rows, columns=IMAGE_COLUMNS):
    """A plain-text table; a failed row shows its error instead of figures
    (never a blank: every system tried is listed)."""
    head = [c[1] for c in columns] + ["notes"]
    body = []
    for r in rows:
        line = []
        for key, _, nd in columns:
            v = r.get(key)
            if key == "setting" and r.get("setting_name"):
                # A system with no grid (tf.data's AUTOTUNE) shows its name.
                v = r["setting_name"] if not v else f"{r['setting_name']}={v}"
            line.append(_fmt(v, nd) if nd is not None else ("-" if v is None else str(v)))
        if r.get("ok"):
            note = "ok"
        else:
            note = "FAILED: " + "; ".join(r.get("problems") or [r.get("error") or "no result"])
            for i, (key, _, nd) in enumerate(columns):
                if nd is not None:
                    line[i] = "-"
        body.append(line + [note])
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) if body else len(head[i]) for i in range(len(head))]
    out = []
    for line in [head] + body:
        cells = []
        for i, cell in enumerate(line):
            numeric = i < len(columns) and columns[i][2] is not None
            cells.append(cell.rjust(widths[i]) if numeric else cell.ljust(widths[i]))
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def to_json(report):
    """The report as JSON: its keys are snake_case already (test_check
    holds them to it)."""
    return json.dumps(report, indent=1, sort_keys=True)


def snake_case_keys(obj, path="$"):
    """Keys that are not snake_case, with where they are."""
    bad = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not (isinstance(k, str) and k == k.lower() and " " not in k and "-" not in k):
                # Grid keys are the settings' values (numbers as text).
                if not (isinstance(k, str) and k.replace(".", "").isdigit()):
                    bad.append(f"{path}.{k}")
            bad += snake_case_keys(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad += snake_case_keys(v, f"{path}[{i}]")
    return bad


def targets(best, lm_runs):
    """Issue 32's targets, from the same run: Sluice's best build against
    the best peer, per output dtype. Lines of text; a target with nothing
    to compare says so."""
    out = []
    for dtype in ("uint8", "f32"):
        ok = [r for r in best if r["dtype"] == dtype and r.get("ok") and r.get("cpu_s_per_1k")]
        ours = [r for r in ok if r["system"].startswith("sluice")]
        peers = [r for r in ok if not r["system"].startswith("sluice")]
        if not ours or not peers:
            out.append(f"{dtype}: nothing to compare (Sluice ran: {bool(ours)}, a peer ran: {bool(peers)})")
            continue
        s = min(ours, key=lambda r: r["cpu_s_per_1k"])
        p = min(peers, key=lambda r: r["cpu_s_per_1k"])
        ratio = p["cpu_s_per_1k"] / s["cpu_s_per_1k"]
        out.append(f"{dtype}: images per CPU-second {s['system']} {1000 / s['cpu_s_per_1k']:.0f}, best peer "
                   f"{p['system']} {1000 / p['cpu_s_per_1k']:.0f}: {ratio:.2f}x (target 1.5x: {'met' if ratio >= 1.5 else 'NOT met'})")
        pt = min(peers, key=lambda r: r["trainer_cpu_s_per_1k"])
        tr = s["trainer_cpu_s_per_1k"] / pt["trainer_cpu_s_per_1k"] if pt["trainer_cpu_s_per_1k"] else float("inf")
        out.append(f"{dtype}: trainer CPU-s/1k {s['system']} {s['trainer_cpu_s_per_1k']:.3f}, lowest peer {pt['system']} "
                   f"{pt['trainer_cpu_s_per_1k']:.3f}: {tr:.2f}x (target <= 0.5x: {'met' if tr <= 0.5 else 'NOT met'})")
        pf = min(peers, key=lambda r: r["first_batch_s"])
        out.append(f"{dtype}: first batch {s['system']} {s['first_batch_s']:.2f}s, earliest peer {pf['system']} "
                   f"{pf['first_batch_s']:.2f}s (target no later: {'met' if s['first_batch_s'] <= pf['first_batch_s'] else 'NOT met'})")
        pr = max(peers, key=lambda r: r["images_per_s"])
        sr = max(ours, key=lambda r: r["images_per_s"])
        out.append(f"{dtype}: images/s {sr['system']} {sr['images_per_s']:.0f}, fastest peer {pr['system']} "
                   f"{pr['images_per_s']:.0f}: {sr['images_per_s'] / pr['images_per_s']:.2f}x (no target; the cores were shared)")
    for tok in sorted({r["tokenizer"] for r in lm_runs}):
        rs = [r for r in lm_runs if r["tokenizer"] == tok and r.get("ok") and r.get("tokens_per_cpu_s")]
        ours = [r for r in rs if r["system"] == "sluice"]
        peers = [r for r in rs if r["system"] != "sluice"]
        if not ours or not peers:
            out.append(f"lm {tok}: nothing to compare")
            continue
        p = max(peers, key=lambda r: r["tokens_per_cpu_s"])
        ratio = ours[0]["tokens_per_cpu_s"] / p["tokens_per_cpu_s"]
        out.append(f"lm {tok}: tokens per CPU-second sluice {ours[0]['tokens_per_cpu_s'] / 1e6:.2f}M, best peer {p['system']} "
                   f"{p['tokens_per_cpu_s'] / 1e6:.2f}M: {ratio:.2f}x (target 2x: {'met' if ratio >= 2 else 'NOT met'})")
    return out
