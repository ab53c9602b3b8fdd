"""How evenly a hash of the job id spreads one second of jobs over N store shards.

    .venv/bin/python bench/shard_balance.py [--shards 2,4,8,16] [--per-shard 1000,2700] [--windows 50]

A fleet of N shards saturates when its busiest shard does: the fleet's limit is
N x (one shard's limit) / (max/mean load). For each N and per-shard rate, this draws `windows`
one-second windows of random job ids (uuid4, as reliable makes them), places each with
`store_scaling.shard_of` and prints the median and worst max/mean. docs/scaling.md reads it.
"""

from __future__ import annotations

import argparse
import statistics
import uuid

from store_scaling import shard_of


def imbalance(shards: int, per_shard: int) -> float:
    """max/mean jobs per shard over one window of `shards * per_shard` new jobs."""
    counts = [0] * shards
    for _ in range(shards * per_shard):
        counts[shard_of(uuid.uuid4().hex, shards)] += 1
    return max(counts) / per_shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="2,4,8,16")
    parser.add_argument("--per-shard", default="1000,2700", help="jobs per shard per one-second window")
    parser.add_argument("--windows", type=int, default=50)
    args = parser.parse_args()
    print(f"{'shards':>6} {'jobs/s/shard':>12} {'median max/mean':>15} {'worst':>7} {'fleet efficiency':>16}")
    for shards in (int(s) for s in args.shards.split(",")):
        for per_shard in (int(p) for p in args.per_shard.split(",")):
            ratios = [imbalance(shards, per_shard) for _ in range(args.windows)]
            worst = max(ratios)
            print(f"{shards:>6} {per_shard:>12} {statistics.median(ratios):15.3f} {worst:7.3f} {1 / worst:16.1%}")


if __name__ == "__main__":
    main()
