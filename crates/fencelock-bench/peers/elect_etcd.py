"""An etcd election candidate for fencelock-bench, speaking the protocol of the bench's fencelock
candidate: it reads commands on stdin and answers on stdout.

Usage: elect_etcd.py ENDPOINT NAME LEASE_MS

`campaign VALUE` prints "campaigning", then "leading <unix ns>" once elected; `resign`
resigns and prints "resigned <unix ns>". It runs etcd's own election (the Election service of
the v3 API, which `etcdctl elect` runs through its client library) through etcd's JSON gateway,
on a lease of its own: `etcdctl elect` has no TTL flag and always takes a 60 s session, where
the bench compares the same lease on both sides. The lease is kept alive every third of its
TTL, as etcd's client library does; a candidate killed with SIGKILL leaves it to expire.
"""
import base64
import json
import math
import sys
import threading
import time
import urllib.request

endpoint, name, lease_ms = sys.argv[1:4]
# etcd leases are whole seconds.
ttl = max(1, math.ceil(int(lease_ms) / 1000))


def call(path, body):
    request = urllib.request.Request(
        endpoint + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)


def b64(text):
    return base64.b64encode(text.encode()).decode()


lease = call("/v3/lease/grant", {"TTL": ttl})["ID"]


def keep_alive():
    while True:
        time.sleep(ttl / 3)
        call("/v3/lease/keepalive", {"ID": lease})


threading.Thread(target=keep_alive, daemon=True).start()

leader = None
for line in sys.stdin:
    command, _, value = line.strip().partition(" ")
    if command == "campaign":
        print("campaigning", flush=True)
        body = {"name": b64(name), "lease": lease, "value": b64(value)}
        leader = call("/v3/election/campaign", body)["leader"]
        print(f"leading {time.time_ns()}", flush=True)
    elif command == "resign":
        call("/v3/election/resign", {"leader": leader})
        print(f"resigned {time.time_ns()}", flush=True)
    else:
        sys.exit(f"unknown command {line!r}")
