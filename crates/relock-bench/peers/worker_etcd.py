"""Workers of the etcd reference for relock-bench: W threads, each running `etcdctl lock NAME`
(which prints the lock's key once held and holds it until signalled), contend for one lock.

Usage: worker_etcd.py ENDPOINT NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
Prints "version ...", "start NS", one "grant WORKER ACQUIRED_NS RELEASED_NS" per grant
(CLOCK_MONOTONIC), then "end". A grant counts from the moment etcdctl printed the key; it
ends when etcdctl is signalled, and etcdctl releases the lock as it exits.
"""
import os
import signal
import subprocess
import sys
import threading
import time

endpoint, name, workers, mode, hold_ms, duration_ms = sys.argv[1:7]
workers = int(workers)
hold = float(hold_ms) / 1000.0
env = dict(os.environ, ETCDCTL_API="3")
etcdctl = ["etcdctl", "--endpoints", endpoint]

version = subprocess.run(etcdctl + ["version"], capture_output=True, text=True, env=env)
print("version " + version.stdout.splitlines()[0], flush=True)

cond = threading.Condition()
acquires = 0
grants = []
errors = []
start = time.monotonic_ns()
end = start + int(float(duration_ms) * 1_000_000)


def worker(index):
    try:
        work(index)
    except Exception as e:  # a worker's failure fails the run
        with cond:
            errors.append(repr(e))


def work(index):
    global acquires
    mine = []
    while time.monotonic_ns() < end:
        child = subprocess.Popen(
            etcdctl + ["lock", name], stdout=subprocess.PIPE, text=True, env=env
        )
        line = child.stdout.readline()
        acquired = time.monotonic_ns()
        if not line:
            raise RuntimeError(f"etcdctl lock exited with {child.wait()}")
        with cond:
            acquires += 1
            seq = acquires
            cond.notify_all()
        if mode == "handoff":
            time.sleep(hold)
        released = time.monotonic_ns()
        child.send_signal(signal.SIGTERM)
        child.wait()
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
for index, acquired, released in grants:
    print(f"grant {index} {acquired} {released}")
print("end", flush=True)
