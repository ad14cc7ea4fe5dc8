"""The PNG for docs/performance.md: per system (its grid's winner), images/s
reaching the loop and CPU-seconds per 1,000 images over all its
processes, uint8 and float32 side by side; failed systems are named on
the axis with "failed" rather than left out."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def write(report, path):
    best = report["images"]["best"]
    systems = []
    for r in best:
        if r["system"] not in systems:
            systems.append(r["system"])
    dtypes = ["uint8", "f32"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(systems) + 1.8))
    for ax, key, title in ((axes[0], "images_per_s", "images/s reaching the loop (more is better)"),
                           (axes[1], "cpu_s_per_1k", "CPU-s per 1,000 images, all processes (less is better)")):
        h = 0.38
        for j, dt in enumerate(dtypes):
            vals, labels = [], []
            for s in systems:
                r = next((x for x in best if x["system"] == s and x["dtype"] == dt), None)
                v = r.get(key) if r and r.get("ok") else None
                vals.append(v or 0)
                labels.append("failed" if r and not r.get("ok") else "")
            ys = [i + (j - 0.5) * h for i in range(len(systems))]
            bars = ax.barh(ys, vals, height=h, label=dt, color=("#4477aa" if dt == "uint8" else "#ee7733"))
            for b, v, lab in zip(bars, vals, labels):
                txt = (f" {v:,.0f}" if key == "images_per_s" else f" {v:.2f}") if v else " " + lab
                ax.text(b.get_width(), b.get_y() + h / 2, txt, va="center", fontsize=7)
        ax.set_yticks(range(len(systems)))
        ax.set_yticklabels(systems, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    load = report.get("load_avg_at_start", [0])[0]
    passes = report["images"].get("passes", 1)
    fig.suptitle(f"bench/peers: {report['images']['dataset']['images']} JPEGs, epoch 1 of 3, each system's best setting"
                 f"{' of %d passes' % passes if passes > 1 else ''}, 2 shared cores, load average {load:.1f} at start "
                 f"({report['started_utc']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
