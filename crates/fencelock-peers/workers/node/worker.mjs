// The Node peers' worker: the peers' worker protocol (../README.md) on node-redlock,
// redis-semaphore's Mutex, node-redisson's RLock, or Redisson's own scripts (./redisson.mjs),
// used as their users use them, each on ioredis.
//
// Usage: node worker.mjs PEER URL NAME COUNTER MODE ITERATIONS LEASE_MS [hold_ms=N] [gap_ms=N]
//    or: node worker.mjs PEER --version
// PEER: redlock, redis-semaphore, node-redisson or redisson.
// The packages are found through NODE_PATH (the node_modules that `cargo xtask setup` fills).
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";

import { Redisson, REDISSON_VERSION } from "./redisson.mjs";

const require = createRequire(import.meta.url);
const PACKAGES = {
  redlock: "redlock",
  "redis-semaphore": "redis-semaphore",
  "node-redisson": "node-redisson",
  redisson: null,
};

const say = (line) => process.stdout.write(`${line}\n`);
const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function fail(message) {
  process.stderr.write(`worker.mjs: ${message}\n`);
  process.exit(1);
}

// The version of the installed package `name`, read from its package.json (found from its entry
// point: some packages do not export their package.json).
function packageVersion(name) {
  let dir = dirname(require.resolve(name));
  for (;;) {
    const file = join(dir, "package.json");
    if (existsSync(file)) {
      const manifest = JSON.parse(readFileSync(file, "utf8"));
      if (manifest.name === name) return manifest.version.replace(/^v/, "");
    }
    if (dirname(dir) === dir) fail(`no package.json of ${name}`);
    dir = dirname(dir);
  }
}

// Lines from stdin, one at a time; null at the end of input.
class Stdin {
  constructor() {
    this.lines = [];
    this.readers = [];
    this.closed = false;
    const input = createInterface({ input: process.stdin });
    input.on("line", (line) => this.push(line));
    input.on("close", () => {
      this.closed = true;
      for (const reader of this.readers.splice(0)) reader(null);
    });
  }

  push(line) {
    const reader = this.readers.shift();
    if (reader) reader(line);
    else this.lines.push(line);
  }

  line() {
    if (this.lines.length > 0) return Promise.resolve(this.lines.shift());
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => this.readers.push(resolve));
  }
}

// One peer's lock on NAME: `acquire()` waits until held, `tryAcquire()` tries once,
// `hold(untilReleased)` holds, renewed as the library renews, until the promise it is given
// settles, then releases; `release()` gives back what `acquire` took. `onWaiting` is called
// once a waiter that found the lock held is set to be woken.
function makePeer(peer, Redis, url, name, lease) {
  if (peer === "redlock") {
    const { default: Redlock, ExecutionError } = require("redlock");
    const client = new Redis(url);
    // Defaults: 10 retries 200 ms apart with up to 100 ms of jitter, then ExecutionError.
    const redlock = new Redlock([client]);
    let lock = null;
    return {
      async acquire() {
        for (;;) {
          try {
            lock = await redlock.acquire([name], lease);
            return;
          } catch (e) {
            // Out of retries while another holds it: a user asks again.
            if (!(e instanceof ExecutionError)) throw e;
          }
        }
      },
      async tryAcquire() {
        try {
          lock = await redlock.acquire([name], lease, { retryCount: 0 });
          return true;
        } catch (e) {
          if (e instanceof ExecutionError) return false;
          throw e;
        }
      },
      async release() {
        await lock.release();
      },
      // `using` extends the lease 500 ms before it ends, for as long as the routine runs.
      async hold(untilReleased, onHeld, onLost) {
        let lost = false;
        try {
          await redlock.using([name], lease, async (signal) => {
            signal.addEventListener("abort", () => {
              lost = true;
              onLost();
            });
            onHeld();
            await untilReleased;
          });
        } catch (e) {
          if (!lost) throw e;
        }
      },
      close: () => client.disconnect(),
    };
  }
  if (peer === "redis-semaphore") {
    const { Mutex } = require("redis-semaphore");
    const client = new Redis(url);
    // The key is mutex:NAME. Defaults: a try every 10 ms, for 10 s at most (here: an hour),
    // and the lock refreshed every 0.8 of its lease while held.
    const options = { lockTimeout: lease, acquireTimeout: 3600000 };
    let mutex = null;
    return {
      async acquire() {
        mutex = new Mutex(client, name, options);
        await mutex.acquire();
      },
      async tryAcquire() {
        mutex = new Mutex(client, name, { ...options, acquireAttemptsLimit: 1 });
        return mutex.tryAcquire();
      },
      async release() {
        await mutex.release();
      },
      async hold(untilReleased, onHeld, onLost) {
        let lost = false;
        mutex = new Mutex(client, name, {
          ...options,
          onLockLost: () => {
            lost = true;
            onLost();
          },
        });
        await mutex.acquire();
        onHeld();
        await untilReleased;
        if (!lost) await mutex.release();
      },
      close: () => client.disconnect(),
    };
  }
  if (peer === "node-redisson" || peer === "redisson") {
    let redisson;
    let lock;
    let hookWaiting;
    if (peer === "node-redisson") {
      const { Redisson: NodeRedisson } = require("node-redisson");
      const { hostname, port } = new URL(url);
      // lock() without a lease time: the watchdog renews to lockWatchdogTimeout every third of it.
      redisson = new NodeRedisson({
        redis: { options: { host: hostname, port: Number(port || 6379) } },
        lockWatchdogTimeout: BigInt(lease),
      });
      lock = redisson.getLock(name);
      // node-redisson subscribes inside lock(); its executor's subscribeOnce is where the
      // subscription is in place.
      hookWaiting = (onWaiting) => {
        const executor = redisson.commandExecutor;
        const subscribeOnce = executor.subscribeOnce.bind(executor);
        let told = false;
        executor.subscribeOnce = async (...args) => {
          await subscribeOnce(...args);
          if (!told) {
            told = true;
            onWaiting();
          }
        };
      };
    } else {
      redisson = new Redisson(Redis, url, { lockWatchdogTimeout: lease });
      lock = redisson.getLock(name);
    }
    let onWaiting = () => {};
    return {
      async acquire() {
        if (peer === "node-redisson") await lock.lock();
        else await lock.lock(onWaiting);
      },
      async tryAcquire() {
        if (peer === "node-redisson") return lock.tryLock(0, true);
        return lock.tryLock();
      },
      setOnWaiting(callback) {
        if (hookWaiting) hookWaiting(callback);
        else onWaiting = callback;
      },
      async release() {
        await lock.unlock();
      },
      async hold(untilReleased, onHeld, onLost) {
        let lost = false;
        lock.onLost = () => {
          lost = true;
          onLost();
        };
        await this.acquire();
        onHeld();
        await untilReleased;
        try {
          await lock.unlock();
        } catch (e) {
          if (!lost) throw e;
        }
      },
      close: () => (peer === "node-redisson" ? redisson.quit() : redisson.disconnect()),
    };
  }
  fail(`unknown peer ${JSON.stringify(peer)}`);
}

async function criticalSection(redis, counter, holdMs) {
  const inside = await redis.incr(`${counter}:inside`);
  if (inside !== 1) {
    await redis.incr(`${counter}:overlaps`);
    say(`OVERLAP ${inside}`);
  }
  const value = Number((await redis.get(counter)) ?? 0);
  await sleep(holdMs);
  await redis.set(counter, value + 1);
  await redis.decr(`${counter}:inside`);
}

async function main(argv) {
  const peer = argv[0];
  if (!(peer in PACKAGES)) fail(`unknown peer ${JSON.stringify(peer)}`);
  if (argv.length === 2 && argv[1] === "--version") {
    if (peer === "redisson") {
      say(`redisson ${REDISSON_VERSION} (its scripts, on ioredis ${packageVersion("ioredis")})`);
    } else {
      say(`${peer} ${packageVersion(PACKAGES[peer])}`);
    }
    return;
  }
  if (argv.length < 7) {
    fail("usage: worker.mjs PEER URL NAME COUNTER MODE ITERATIONS LEASE_MS [hold_ms=N] [gap_ms=N]");
  }
  const [, url, name, counter, mode, iterationsText, leaseText] = argv;
  const options = { hold_ms: 2, gap_ms: 0 };
  for (const option of argv.slice(7)) {
    const [key, value] = option.split("=");
    if (!(key in options)) fail(`unknown option ${JSON.stringify(option)}`);
    options[key] = Number(value);
  }
  const Redis = require("ioredis");
  const redis = new Redis(url);
  const lock = makePeer(peer, Redis, url, name, Number(leaseText));
  const stdin = new Stdin();
  say("READY");
  if ((await stdin.line()) !== "GO") fail("expected GO");
  if (mode === "loop") {
    for (let i = 0; i < Number(iterationsText); i++) {
      await lock.acquire();
      const enter = now();
      await criticalSection(redis, counter, options.hold_ms);
      const exit = now();
      await lock.release();
      say(`SECTION ${enter} ${exit}`);
      await sleep(options.gap_ms);
    }
  } else if (mode === "hold") {
    const untilReleased = (async () => {
      for (;;) {
        const line = await stdin.line();
        if (line === "RELEASE" || line === null) return;
        fail(`unexpected line ${JSON.stringify(line)}`);
      }
    })();
    await lock.hold(
      untilReleased,
      () => say(`HELD ${now()}`),
      () => say(`LOST ${now()}`),
    );
    say(`RELEASED ${now()}`);
  } else if (mode === "wait") {
    if (!(await lock.tryAcquire())) {
      const waiting = () => say(`WAITING ${now()}`);
      // Where the library wakes its waiters, WAITING comes once that is set up; where it
      // polls, before the first poll.
      if (lock.setOnWaiting) lock.setOnWaiting(waiting);
      else waiting();
      await lock.acquire();
    }
    say(`ACQUIRED ${now()}`);
    await lock.release();
    say(`RELEASED ${now()}`);
  } else {
    fail(`unknown mode ${JSON.stringify(mode)}`);
  }
  say("DONE");
  await lock.close();
  redis.disconnect();
  process.exit(0);
}

main(process.argv.slice(2)).catch((e) => fail(e && e.stack ? e.stack : String(e)));
