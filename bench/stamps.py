"""Time stamps the benchmark's worker processes write, so bench/throughput.py times the messages themselves.

Each worker process keeps three numbers in a shared mapping of the file `<BENCH_STAMPS>/<pid>`: when
its first message started (`before_process_message`), when its last ack was handed to RabbitMQ
(`after_ack`) and how many acks it sent. Clocks are `time.monotonic()`, one clock for every process
of the machine, so the driver compares stamps across processes. Writing them costs one struct pack
per ack (about a microsecond), not a file write.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

#: first start, last ack (monotonic seconds, 0.0 = not yet) and the number of acks.
STAMP = struct.Struct("=ddq")


class Stamps(dramatiq.Middleware):
    """Writes the process's first start, last ack and ack count to `<directory>/<pid>`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.view: mmap.mmap | None = None
        self.first = 0.0
        self.last = 0.0
        self.acks = 0

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Map this process's stamp file (in the worker process, after the fork and, as the first middleware,
        after every other middleware's `after_worker_boot`: the file's appearance marks the end of the boot).
        Dramatiq's consumers may already run by then: what they stamped so far is written now."""
        with open(os.path.join(self.directory, str(os.getpid())), "w+b") as file:
            file.truncate(STAMP.size)
            self.view = mmap.mmap(file.fileno(), STAMP.size)
        STAMP.pack_into(self.view, 0, self.first, self.last, self.acks)

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        """Stamp the first message's start (the window's start is the earliest over the processes)."""
        if not self.first:
            self.first = time.monotonic()
            if self.view is not None:
                STAMP.pack_into(self.view, 0, self.first, self.last, self.acks)

    def after_ack(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        """Count and stamp the ack (acks run on the consumer thread, one writer), even before the file is
        mapped: a run counts every ack."""
        self.acks += 1
        self.last = time.monotonic()
        if self.view is not None:
            STAMP.pack_into(self.view, 0, self.first, self.last, self.acks)


def read_stamps(directory: Path) -> dict[int, tuple[float, float, int]]:
    """pid -> (first start, last ack, acks) of every worker process that has booted so far."""
    stamps = {}
    for path in directory.iterdir():
        data = path.read_bytes()
        if len(data) == STAMP.size:
            stamps[int(path.name)] = STAMP.unpack(data)
    return stamps
