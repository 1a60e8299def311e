"""Workers of the etcd reference for fencelock-bench: W threads, each running `etcdctl lock NAME`
(which prints the lock's key once held and holds it until signalled), contend for one lock.

Usage: worker_etcd.py ENDPOINT NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
Prints what contend.py says, after "version ...". A grant counts from the moment etcdctl
printed the key; it ends when etcdctl is signalled, and etcdctl releases the lock as it exits.
"""
import os
import signal
import subprocess
import sys

from contend import Run

endpoint, name, workers, mode, hold_ms, duration_ms = sys.argv[1:7]
env = dict(os.environ, ETCDCTL_API="3")
etcdctl = ["etcdctl", "--endpoints", endpoint]

version = subprocess.run(etcdctl + ["version"], capture_output=True, text=True, env=env)
print("version " + version.stdout.splitlines()[0], flush=True)

run = Run(workers, mode, hold_ms, duration_ms)


def acquire():
    child = subprocess.Popen(etcdctl + ["lock", name], stdout=subprocess.PIPE, text=True, env=env)
    if not child.stdout.readline():
        raise RuntimeError(f"etcdctl lock exited with {child.wait()}")
    return child


def release(child):
    child.send_signal(signal.SIGTERM)
    child.wait()


run.run(lambda index: run.contend(index, acquire, release))
