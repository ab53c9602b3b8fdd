"""Stand-in for `python -m reliable.supervisor.child CONFIG_JSON`, to test the supervisor's loop alone.

Speaks the child's protocol (writes "ready" to its ready fd; TERM: stop after FAKE_STOP_DELAY s, more
TERMs change nothing; SIGUSR1, the hard stop: exit 1) and logs one line per step to $FAKE_LOG:
"<pid> <slot> <what> <unix time>". FAKE_BOOT_<slot> (or FAKE_BOOT): seconds before ready;
FAKE_STOP_DELAY: seconds between the TERM and the exit ("inf": never); FAKE_IGNORE_HARD_<slot>=1:
ignore the hard stop (only SIGKILL ends it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

config = json.loads(sys.argv[-1])
slot = config["slot"]
boot = float(os.environ.get(f"FAKE_BOOT_{slot}", os.environ.get("FAKE_BOOT", "0")))
stop_delay = float(os.environ.get("FAKE_STOP_DELAY", "0"))
terms: list[int] = []


def note(what: str) -> None:
    with open(os.environ["FAKE_LOG"], "a", encoding="ascii") as log:
        log.write(f"{os.getpid()} {slot} {what} {time.time():.3f}\n")


def on_term(signum: int, frame: Any) -> None:
    terms.append(signum)
    note(f"term{len(terms)}")


def on_hard_stop(signum: int, frame: Any) -> None:
    note("hard")
    if not os.environ.get(f"FAKE_IGNORE_HARD_{slot}"):
        os._exit(1)


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, on_hard_stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
note("start")
end = time.time() + boot
while time.time() < end:
    time.sleep(0.01)
note("ready")  # before the supervisor can react to it: the log's order is the order of events
os.write(config["ready_fd"], b"ready\n")
os.close(config["ready_fd"])
while not terms:
    time.sleep(0.01)
end = time.time() + stop_delay
while time.time() < end:
    time.sleep(0.01)
note("exit")
os._exit(0)
