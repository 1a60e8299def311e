"""The Python peers' worker: the peers' worker protocol (../README.md) on redis-py's Lock,
python-redis-lock's Lock or pottery's Redlock, used as their users use them.

Usage: worker.py PEER URL NAME COUNTER MODE ITERATIONS LEASE_MS [hold_ms=N] [gap_ms=N]
   or: worker.py PEER --version
PEER: redis-py, python-redis-lock or pottery.
"""
import logging
import math
import os
import select
import sys
import time
from importlib.metadata import version

import redis

DISTRIBUTIONS = {"redis-py": "redis", "python-redis-lock": "python-redis-lock", "pottery": "pottery"}


# python-redis-lock logs a failed non-blocking acquire as a warning: here it is the expected
# answer of a try.
logging.getLogger("redis_lock.acquire").setLevel(logging.ERROR)


def say(line):
    print(line, flush=True)


def fail(message):
    print(f"worker.py: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


class Stdin:
    """Lines from stdin, read straight from its descriptor so that a wait with a timeout
    (select) never misses a line already read into a buffer."""

    def __init__(self):
        self.buffer = b""
        self.closed = False

    def line(self, timeout=None):
        """The next line without its ending; None at the end of input; "" if none came
        within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([0], [], [], left)
            if not readable:
                return ""
            chunk = os.read(0, 4096)
            if not chunk:
                self.closed = True
                if self.buffer:
                    break
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode().rstrip("\r")


class Peer:
    """One peer's lock on NAME: acquire (waiting or once), renew, release, as its users
    write them."""

    def __init__(self, peer, conn, name, lease_ms):
        self.peer = peer
        self.conn = conn
        self.name = name
        self.lease_ms = lease_ms
        self.lock = None
        # The interval at which `renew` is called while holding; None where the library
        # renews by itself.
        self.renew_every = lease_ms / 3000.0

    def new_lock(self, hold):
        if self.peer == "redis-py":
            # The key is NAME as given; a token per acquire; SET NX PX, polling every 0.1 s.
            return self.conn.lock(self.name, timeout=self.lease_ms / 1000.0)
        if self.peer == "python-redis-lock":
            import redis_lock

            # The key is lock:NAME, the signal list lock-signal:NAME; the lease is in whole
            # seconds (SET NX EX). Held, its own thread renews it every 2/3 of the lease.
            if hold:
                self.renew_every = None
            return redis_lock.Lock(
                self.conn, self.name, expire=math.ceil(self.lease_ms / 1000.0), auto_renewal=hold
            )
        if self.peer == "pottery":
            from pottery import Redlock

            # The key is redlock:NAME; its retry delay is drawn from 0-0.2 s; it allows
            # `num_extensions` extensions per hold (3 by default).
            return Redlock(
                key=self.name,
                masters={self.conn},
                auto_release_time=self.lease_ms / 1000.0,
                num_extensions=sys.maxsize,
            )
        fail(f"unknown peer {self.peer!r}")

    def acquire(self, hold=False):
        self.lock = self.new_lock(hold)
        if not self.lock.acquire():
            fail("a blocking acquire returned without the lock")

    def try_acquire(self):
        self.lock = self.new_lock(False)
        return bool(self.lock.acquire(blocking=False))

    def renew(self):
        """Extends the lease back to its full length; False when the lock is no longer ours."""
        try:
            if self.peer == "redis-py":
                self.lock.reacquire()
            else:
                self.lock.extend()
            return True
        except Exception:
            return False

    def release(self):
        self.lock.release()


def critical_section(conn, counter, hold_ms):
    inside = conn.incr(f"{counter}:inside")
    if inside != 1:
        conn.incr(f"{counter}:overlaps")
        say(f"OVERLAP {inside}")
    value = int(conn.get(counter) or 0)
    time.sleep(hold_ms / 1000.0)
    conn.set(counter, value + 1)
    conn.decr(f"{counter}:inside")


def run_loop(peer, conn, counter, iterations, options):
    for _ in range(iterations):
        peer.acquire()
        enter = time.monotonic_ns()
        critical_section(conn, counter, options["hold_ms"])
        exit_ = time.monotonic_ns()
        peer.release()
        say(f"SECTION {enter} {exit_}")
        time.sleep(options["gap_ms"] / 1000.0)


def run_hold(peer, stdin):
    peer.acquire(hold=True)
    say(f"HELD {time.monotonic_ns()}")
    lost = False
    while True:
        line = stdin.line(None if lost else peer.renew_every)
        if line == "":
            if not peer.renew():
                lost = True
                say(f"LOST {time.monotonic_ns()}")
            continue
        if line in ("RELEASE", None):
            break
        fail(f"unexpected line {line!r}")
    try:
        peer.release()
    except Exception:
        if not lost:
            raise
    say(f"RELEASED {time.monotonic_ns()}")


def run_wait(peer):
    if not peer.try_acquire():
        say(f"WAITING {time.monotonic_ns()}")
        peer.acquire()
    say(f"ACQUIRED {time.monotonic_ns()}")
    peer.release()
    say(f"RELEASED {time.monotonic_ns()}")


def main(argv):
    if len(argv) == 2 and argv[1] == "--version" and argv[0] in DISTRIBUTIONS:
        say(f"{argv[0]} {version(DISTRIBUTIONS[argv[0]])}")
        return
    if len(argv) < 7:
        fail(__doc__.split("\n\n")[1])
    name_of_peer, url, name, counter, mode, iterations, lease_ms = argv[:7]
    options = {"hold_ms": 2, "gap_ms": 0}
    for option in argv[7:]:
        key, _, value = option.partition("=")
        if key not in options:
            fail(f"unknown option {option!r}")
        options[key] = int(value)
    conn = redis.Redis.from_url(url)
    peer = Peer(name_of_peer, conn, name, int(lease_ms))
    stdin = Stdin()
    say("READY")
    if stdin.line() != "GO":
        fail("expected GO")
    if mode == "loop":
        run_loop(peer, conn, counter, int(iterations), options)
    elif mode == "hold":
        run_hold(peer, stdin)
    elif mode == "wait":
        run_wait(peer)
    else:
        fail(f"unknown mode {mode!r}")
    say("DONE")


if __name__ == "__main__":
    main(sys.argv[1:])
