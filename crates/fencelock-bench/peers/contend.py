"""What the Python workers of fencelock-bench share: W threads contending for one lock under the
bench's handoff rule, and the lines the bench reads from them. Standard library only, so that a
worker run by the system's python3 (etcd) imports it as well as one run by the peers' venv.

Every worker prints "version ...", "start NS", "elapsed NS", one "cycles WORKER COUNT" per
worker of an uncontended run, one "grant WORKER ACQUIRED_NS RELEASED_NS" per grant
(CLOCK_MONOTONIC), then "end".
"""
import sys
import threading
import time


class Run:
    """One worker process: its workers, its window and what they recorded."""

    def __init__(self, workers, mode, hold_ms, duration_ms):
        self.workers = int(workers)
        self.mode = mode
        self.hold = float(hold_ms) / 1000.0
        self.cond = threading.Condition()
        self.acquires = 0
        self.grants = []
        self.cycles = []
        self.errors = []
        self.start = time.monotonic_ns()
        self.end = self.start + int(float(duration_ms) * 1_000_000)

    def running(self):
        """Whether the window is still open."""
        return time.monotonic_ns() < self.end

    def contend(self, index, acquire, release):
        """Worker `index` takes the lock until the window ends: `acquire()` returns once held,
        `release(held)` gives back what it returned. In handoff mode each holder holds for the
        hold time and, after releasing, waits until another worker has acquired."""
        mine = []
        while self.running():
            held = acquire()
            acquired = time.monotonic_ns()
            with self.cond:
                self.acquires += 1
                seq = self.acquires
                self.cond.notify_all()
            if self.mode == "handoff":
                time.sleep(self.hold)
            released = time.monotonic_ns()
            release(held)
            mine.append((index, acquired, released))
            if self.mode == "handoff":
                with self.cond:
                    self.cond.wait_for(
                        lambda: self.acquires > seq or not self.running(),
                        timeout=max(0.0, (self.end - time.monotonic_ns()) / 1e9),
                    )
        with self.cond:
            self.grants.extend(mine)

    def count_cycles(self, index, count):
        """Records the cycles worker `index` did in an uncontended run."""
        with self.cond:
            self.cycles.append((index, count))

    def run(self, work):
        """Runs `work(index)` on one thread per worker and prints what they recorded; a
        worker's failure fails the run."""

        def worker(index):
            try:
                work(index)
            except Exception as e:
                with self.cond:
                    self.errors.append(repr(e))

        threads = [
            threading.Thread(target=worker, args=(i,), daemon=True) for i in range(self.workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            print(f"worker failed: {self.errors[0]}", file=sys.stderr)
            sys.exit(1)
        print(f"start {self.start}")
        print(f"elapsed {time.monotonic_ns() - self.start}")
        for index, count in self.cycles:
            print(f"cycles {index} {count}")
        for index, acquired, released in self.grants:
            print(f"grant {index} {acquired} {released}")
        print("end", flush=True)
