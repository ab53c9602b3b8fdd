"""bench/throughput.py on two checkouts of reliable, alternating run by run: is a change slower?

    .venv/bin/python bench/versus.py --before ../before --after . [--runs 5] [--jobs 4000]
        [--configs 1x8,2x32] [--modes plain,reliable-pg]

Each checkout runs with its own virtualenv (`<checkout>/.venv/bin/python`, made by scripts/bootstrap),
so each measures its own code. Every run of every checkout also measures plain Dramatiq, so each
ratio is against plain Dramatiq in the same minute: load from elsewhere on the machine moves both
sides of a ratio. Prints each run as it ends, then the medians per checkout, config and mode.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
from pathlib import Path

_RUN = re.compile(r"^-p (\d+) -t (\d+) run \d+/\d+\s+(\S+): +(\d+) jobs/s +worker ([\d.]+) ms CPU/job +postgres "
                  r"([\d.]+) ms CPU/job")


def run_checkout(checkout: Path, config: str, modes: str, jobs: int) -> list[tuple[str, float, float, float]]:
    """One alternating run of every mode in `checkout`: (mode, jobs/s, worker ms/job, postgres ms/job) each."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run {checkout}/scripts/bootstrap first")
    out = subprocess.run([str(python), str(checkout / "bench" / "throughput.py"), "--runs", "1", "--jobs", str(jobs),
                          "--configs", config, "--modes", modes], capture_output=True, text=True, check=True,
                         timeout=900).stdout
    return [(m.group(3), float(m.group(4)), float(m.group(5)), float(m.group(6)))
            for m in map(_RUN.match, out.splitlines()) if m]


def main() -> None:
    """Parse the arguments, alternate the checkouts, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--configs", default="1x8,2x32")
    parser.add_argument("--modes", default="plain,reliable-pg")
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    for config in args.configs.split(","):
        rows: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
        for run in range(args.runs):
            for side, checkout in checkouts.items():
                results = run_checkout(checkout, config, args.modes, args.jobs)
                plain = next((rate for mode, rate, _, _ in results if mode == "plain"), None)
                for mode, rate, worker_ms, pg_ms in results:
                    ratio = rate / plain if plain else float("nan")
                    rows.setdefault((side, mode), []).append((rate, ratio, worker_ms, pg_ms))
                    print(f"{config} run {run + 1}/{args.runs} {side:>6} {mode:>18}: {rate:7.0f} jobs/s "
                          f"{ratio:5.2f}x  worker {worker_ms:.2f} ms/job  postgres {pg_ms:.2f} ms/job", flush=True)
        print(f"\n{config}: medians of {args.runs} alternating runs, {args.jobs} no-op jobs")
        print(f"{'checkout':>8} {'mode':>18} {'jobs/s':>8} {'ratio':>7} {'worker ms/job':>14} {'postgres ms/job':>16}")
        for (side, mode), values in rows.items():
            rate, ratio, worker_ms, pg_ms = (statistics.median(column) for column in zip(*values, strict=True))
            print(f"{side:>8} {mode:>18} {rate:8.0f} {ratio:6.2f}x {worker_ms:14.2f} {pg_ms:16.2f}")
        print(flush=True)


if __name__ == "__main__":
    main()
