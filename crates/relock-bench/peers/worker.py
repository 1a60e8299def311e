"""Workers of the Python peers for relock-bench: W threads contend for one lock.

Usage: worker.py URL NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
VARIANT: redis-py, redis-py-1ms, python-redis-lock, pottery, pottery-1ms.
MODE: handoff (hold HOLD_MS, then wait until another worker acquired), immediate, or
uncontended (each worker locks and unlocks names of its own, one after another).
Prints "version ...", "start NS", one "grant WORKER ACQUIRED_NS RELEASED_NS" per grant
(CLOCK_MONOTONIC) or, uncontended, one "cycles WORKER COUNT" per worker and "elapsed NS",
then "end".
"""
import sys
import threading
import time
from importlib.metadata import version

import redis

url, name, workers, mode, hold_ms, duration_ms, variant = sys.argv[1:8]
workers = int(workers)
hold = float(hold_ms) / 1000.0
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

cond = threading.Condition()
acquires = 0
grants = []
cycles = []
errors = []
start = time.monotonic_ns()
end = start + int(float(duration_ms) * 1_000_000)


def worker(index):
    try:
        work(index)
    except Exception as e:  # a worker's failure fails the run
        with cond:
            errors.append(repr(e))


def uncontended(index):
    conn = redis.Redis.from_url(url)
    count = 0
    while time.monotonic_ns() < end:
        lock = make_lock(conn, f"{name}:{index}:{count}")
        lock.acquire(blocking=True)
        lock.release()
        count += 1
    with cond:
        cycles.append((index, count))


def work(index):
    global acquires
    if mode == "uncontended":
        return uncontended(index)
    conn = redis.Redis.from_url(url)
    lock = make_lock(conn, name)
    mine = []
    while time.monotonic_ns() < end:
        lock.acquire(blocking=True)
        acquired = time.monotonic_ns()
        with cond:
            acquires += 1
            seq = acquires
            cond.notify_all()
        if mode == "handoff":
            time.sleep(hold)
        released = time.monotonic_ns()
        lock.release()
        mine.append((index, acquired, released))
        if mode == "handoff":
            with cond:
                cond.wait_for(
                    lambda: acquires > seq or time.monotonic_ns() >= end,
                    timeout=max(0.0, (end - time.monotonic_ns()) / 1e9),
                )
    with cond:
        grants.extend(mine)


threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    print(f"worker failed: {errors[0]}", file=sys.stderr)
    sys.exit(1)
print(f"start {start}")
print(f"elapsed {time.monotonic_ns() - start}")
for index, count in cycles:
    print(f"cycles {index} {count}")
for index, acquired, released in grants:
    print(f"grant {index} {acquired} {released}")
print("end", flush=True)
