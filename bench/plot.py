"""The curves behind docs/performance.md, drawn from the benches' JSON (PNG).

  startup_vs_workers.png   bench/startup.py: TonY-py's and distributed shell's time to all
                           processes running, by worker count
  am_cpu_vs_executors.png  bench/scale.py: the AM's CPU (cores) and spec p99 by executor count,
                           one line per machine the JSON came from

Usage: bench/plot.py --startup S.json --scale A.json [B.json …] [--out bench/results]
       (needs matplotlib: pip install -e .[bench])
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def startup_plot(data: dict, out: Path) -> Path:
    rows = sorted(data["results"], key=lambda r: r["workers"])
    workers = [r["workers"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(workers, [r["floor_all_running_s"] for r in rows], "o-", label="YARN distributed shell (floor)")
    ax.plot(workers, [r["all_running_s"] for r in rows], "s-", label="TonY-py")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.set_ylabel("command start → all processes running (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Startup on a local YARN cluster ({data.get('cpu_count')} cores, median of {data.get('runs')})")
    ax.grid(alpha=0.3)
    ax.legend()
    path = out / "startup_vs_workers.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scale_plot(datasets: list[dict], out: Path) -> Path:
    fig, (cpu, spec) = plt.subplots(1, 2, figsize=(10, 4))
    for data in datasets:
        rows = sorted(data["results"], key=lambda r: r["executors"])
        n = [r["executors"] for r in rows]
        label = f"{data.get('cpu_count')} cores"
        cpu.plot(n, [r["am_cpu_cores"] * 100 for r in rows], "o-", label=label)
        spec.plot(n, [r["spec_all_p99_s"] for r in rows], "o-", label=label)
    cpu.axhline(25, color="grey", ls="--", lw=1, label="goal at 2,000: 25 %")
    spec.axhline(2, color="grey", ls="--", lw=1, label="goal at 2,000: 2 s")
    cpu.set_ylabel("AM CPU at steady heartbeat (% of one core)")
    spec.set_ylabel("last registration → all specs, p99 (s)")
    for ax in (cpu, spec):
        ax.set_xlabel("executors (1 heartbeat/s each)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("One AM, many executors (bench/scale.py)")
    path = out / "am_cpu_vs_executors.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startup", type=Path, required=True)
    parser.add_argument("--scale", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(startup_plot(json.loads(args.startup.read_text()), args.out))
    print(scale_plot([json.loads(p.read_text()) for p in args.scale], args.out))


if __name__ == "__main__":
    main()
