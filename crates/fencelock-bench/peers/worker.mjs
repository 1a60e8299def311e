// Workers of the Node peers for fencelock-bench: W async workers, each with its own ioredis
// connection, contend for one lock in one process.
//
// Usage: node worker.mjs URL NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
// VARIANT: redlock, redlock-1ms, redis-semaphore, redis-semaphore-1ms.
// MODE: handoff, immediate or uncontended (each worker locks names of its own).
// Prints "version ...", "start NS", one "grant WORKER ACQUIRED_NS RELEASED_NS" per grant or,
// uncontended, one "cycles WORKER COUNT" per worker and "elapsed NS", then "end".
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const Redis = require("ioredis");
const [url, name, workersText, mode, holdText, durationText, variant] = process.argv.slice(2);
const workers = Number(workersText);
const hold = Number(holdText);
const LEASE_MS = 30000;
const best = variant.endsWith("-1ms");
const pkg = variant.startsWith("redlock") ? "redlock" : "redis-semaphore";
const version = (p) => require(`${p}/package.json`).version;
console.log(`version ${pkg} ${version(pkg)} (ioredis ${version("ioredis")})`);

const now = () => process.hrtime.bigint();
const start = now();
const end = start + BigInt(Math.round(Number(durationText) * 1e6));
let acquires = 0;
let waiting = [];
const grants = [];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function counted() {
  acquires += 1;
  const ready = waiting.filter((w) => acquires > w.seq);
  waiting = waiting.filter((w) => acquires <= w.seq);
  for (const w of ready) w.resolve();
  return acquires;
}

function otherAcquired(seq) {
  if (acquires > seq) return Promise.resolve();
  const left = Number(end - now()) / 1e6;
  return Promise.race([
    new Promise((resolve) => waiting.push({ seq, resolve })),
    sleep(Math.max(0, left)),
  ]);
}

function makeLock(client, name) {
  if (pkg === "redlock") {
    const Redlock = require("redlock");
    // Defaults: 10 retries, 200 ms apart with 100 ms of jitter; -1 retries for ever.
    const options = best ? { retryCount: -1, retryDelay: 1, retryJitter: 0 } : {};
    const redlock = new Redlock([client], options);
    redlock.on("clientError", () => {});
    return {
      acquire: async () => {
        for (;;) {
          try {
            return await redlock.lock(name, LEASE_MS);
          } catch (e) {
            // Out of retries under contention: a user asks again.
          }
        }
      },
      release: (lock) => lock.unlock(),
    };
  }
  const { Mutex } = require("redis-semaphore");
  // Defaults: retry every 10 ms, give up after 10 s.
  const options = { lockTimeout: LEASE_MS, acquireTimeout: 3600000 };
  if (best) options.retryInterval = 1;
  return {
    acquire: async () => {
      const mutex = new Mutex(client, name, options);
      await mutex.acquire();
      return mutex;
    },
    release: (mutex) => mutex.release(),
  };
}

const cycles = [];

async function uncontended(index) {
  const client = new Redis(url);
  let count = 0;
  while (now() < end) {
    const lock = makeLock(client, `${name}:${index}:${count}`);
    await lock.release(await lock.acquire());
    count += 1;
  }
  cycles.push([index, count]);
  client.disconnect();
}

async function worker(index) {
  if (mode === "uncontended") return uncontended(index);
  const client = new Redis(url);
  const lock = makeLock(client, name);
  while (now() < end) {
    const held = await lock.acquire();
    const acquired = now();
    const seq = counted();
    if (mode === "handoff") await sleep(hold);
    const released = now();
    await lock.release(held);
    grants.push([index, acquired, released]);
    if (mode === "handoff") await otherAcquired(seq);
  }
  client.disconnect();
}

await Promise.all(Array.from({ length: workers }, (_, i) => worker(i)));
const lines = [`start ${start}`, `elapsed ${now() - start}`];
for (const [i, c] of cycles) lines.push(`cycles ${i} ${c}`);
for (const [i, a, r] of grants) lines.push(`grant ${i} ${a} ${r}`);
lines.push("end");
console.log(lines.join("\n"));
