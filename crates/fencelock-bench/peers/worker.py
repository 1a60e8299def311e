"""Workers of the Python peers for fencelock-bench: W threads contend for one lock.

Usage: worker.py URL NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
VARIANT: redis-py, redis-py-1ms, python-redis-lock, pottery, pottery-1ms.
MODE: handoff (hold HOLD_MS, then wait until another worker acquired), immediate, or
uncontended (each worker locks and unlocks names of its own, one after another).
Prints what contend.py says, after "version ...".
"""
import sys
from importlib.metadata import version

import redis

from contend import Run

url, name, workers, mode, hold_ms, duration_ms, variant = sys.argv[1:8]
LEASE_S = 30


def make_lock(conn, name):
    """A lock object with acquire() and release(), as each library's users write it."""
    if variant.startswith("redis-py"):
        sleep = 0.001 if variant.endswith("1ms") else 0.1  # 0.1 s is redis-py's default
        return conn.lock(name, timeout=LEASE_S, sleep=sleep)
    if variant == "python-redis-lock":
        import redis_lock

        return redis_lock.Lock(conn, name, expire=LEASE_S)
    if variant.startswith("pottery"):
        from pottery import Redlock

        class FastRedlock(Redlock):
            # The retry delay is drawn from 0..this; the default is 0.2 s.
            _RETRY_DELAY = 0.001

        kind = FastRedlock if variant.endswith("1ms") else Redlock
        return kind(key=name, masters={conn}, auto_release_time=LEASE_S)
    raise SystemExit(f"unknown variant {variant}")


def package():
    if variant.startswith("redis-py"):
        return "redis"
    if variant == "python-redis-lock":
        return "python-redis-lock"
    return "pottery"


print(f"version {package()} {version(package())} (redis-py {version('redis')})", flush=True)

run = Run(workers, mode, hold_ms, duration_ms)


def uncontended(index):
    conn = redis.Redis.from_url(url)
    count = 0
    while run.running():
        lock = make_lock(conn, f"{name}:{index}:{count}")
        lock.acquire(blocking=True)
        lock.release()
        count += 1
    run.count_cycles(index, count)


def work(index):
    if mode == "uncontended":
        return uncontended(index)
    lock = make_lock(redis.Redis.from_url(url), name)
    run.contend(index, lambda: lock.acquire(blocking=True), lambda _: lock.release())


run.run(work)
