// Redisson's RLock as a Java service runs it, for a worker without a JVM: the Lua of Redisson
// 4.7.0 verbatim (RedissonLock.tryLockInnerAsync and unlockInnerAsync, renewal.LockTask), its key,
// field, channel and latch names (RedissonBaseLock, RedissonObject.prefixName), its unlock
// message (pubsub.LockPubSub) and its way of waiting (RedissonLock.lock: subscribe, try again,
// then wait for a message or the holder's remaining lease; a message 0 lets one waiter of the
// process go, 1 lets them all go, as RedissonLockEntry's semaphore does).
//
// What a single server gives Redisson is kept; what its configuration adds is left out:
// Cluster's sharded publish (SPUBLISH when the cluster supports it), WAIT for replicas
// (syncedEval), the batching of renewals across locks, virtual threads.
import { randomBytes, randomUUID } from "node:crypto";

export const REDISSON_VERSION = "4.7.0";

// RedissonLock.tryLockInnerAsync: KEYS[1] the lock's name, ARGV[1] the lease in ms, ARGV[2] the
// holder's field. Nil when acquired (or re-entered), else the lock's remaining lease (PTTL).
export const TRY_LOCK_INNER =
  "if ((redis.call('exists', KEYS[1]) == 0) " +
  "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "return redis.call('pttl', KEYS[1]);";

// RedissonLock.unlockInnerAsync: KEYS the lock's name, its channel, the request's unlock latch;
// ARGV the unlock message (0), the lease in ms, the holder's field, the publish command, the
// latch's lifetime in ms. Nil when the field does not hold the lock; 0 when a re-entry was
// undone; 1 when the lock was deleted and the channel told.
export const UNLOCK_INNER =
  "local val = redis.call('get', KEYS[3]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
  "return 0; " +
  "else " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
  "return 1; " +
  "end; ";

// renewal.LockTask (the watchdog): KEYS the locks' names, ARGV[1] the lease in ms, ARGV[i + 1]
// the holder's field of KEYS[i]. One 1 or 0 per lock: renewed, or no longer held.
export const RENEW =
  "local result = {} " +
  "for i = 1, #KEYS, 1 do " +
  "if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
  "redis.call('pexpire', KEYS[i], ARGV[1]); " +
  "table.insert(result, 1); " +
  "else " +
  "table.insert(result, 0); " +
  "end; " +
  "end; " +
  "return result;";

// LockPubSub.UNLOCK_MESSAGE and READ_UNLOCK_MESSAGE.
const UNLOCK_MESSAGE = "0";
const READ_UNLOCK_MESSAGE = "1";

// The unlock latch's lifetime: (timeout + retryDelay.calcDelay(retryAttempts)) * retryAttempts
// with BaseConfig's defaults, 3000 ms, EqualJitterDelay(1 s, 2 s) and 4 attempts: at most
// (3000 + 2000) * 4.
const UNLOCK_LATCH_MS = 20000;

// RedissonObject.prefixName.
export function prefixName(prefix, name) {
  if (name.includes("{")) {
    return `${prefix}:${name}`;
  }
  return `${prefix}:{${name}}`;
}

// One RedissonClient: its id (ServiceManager's random UUID), a connection for commands and
// one for subscriptions, and the process's waiters per lock (PublishSubscribe's entries).
export class Redisson {
  constructor(Redis, url, { lockWatchdogTimeout = 30000 } = {}) {
    this.id = randomUUID();
    this.lockWatchdogTimeout = lockWatchdogTimeout;
    this.redis = new Redis(url);
    this.subscriber = new Redis(url);
    this.entries = new Map();
    this.subscriber.on("message", (channel, message) => {
      const entry = this.entries.get(channel);
      if (entry) entry.onMessage(message);
    });
  }

  getLock(name, threadId = 1) {
    return new RLock(this, name, threadId);
  }

  async subscribe(channel) {
    let entry = this.entries.get(channel);
    if (!entry) {
      entry = new LockEntry();
      this.entries.set(channel, entry);
      entry.subscribed = this.subscriber.subscribe(channel);
    }
    entry.users += 1;
    await entry.subscribed;
    return entry;
  }

  async unsubscribe(channel, entry) {
    entry.users -= 1;
    if (entry.users === 0 && this.entries.get(channel) === entry) {
      this.entries.delete(channel);
      await this.subscriber.unsubscribe(channel);
    }
  }

  disconnect() {
    this.redis.disconnect();
    this.subscriber.disconnect();
  }
}

// RedissonLockEntry: a semaphore of permits that start at 0, released by unlock messages.
class LockEntry {
  constructor() {
    this.users = 0;
    this.permits = 0;
    this.waiters = [];
    this.subscribed = null;
  }

  onMessage(message) {
    if (message === UNLOCK_MESSAGE) {
      const waiter = this.waiters.shift();
      if (waiter) waiter();
      else this.permits += 1;
    } else if (message === READ_UNLOCK_MESSAGE) {
      const waiters = this.waiters.splice(0);
      for (const waiter of waiters) waiter();
    }
  }

  // Semaphore.tryAcquire(ms): a permit, or the time running out.
  wait(ms) {
    if (this.permits > 0) {
      this.permits -= 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      let timer = null;
      const waiter = () => {
        if (timer) clearTimeout(timer);
        resolve();
      };
      this.waiters.push(waiter);
      if (Number.isFinite(ms)) {
        timer = setTimeout(() => {
          this.waiters = this.waiters.filter((w) => w !== waiter);
          resolve();
        }, ms);
      }
    });
  }
}

// RLock (RedissonLock) taken without a lease time: held under the watchdog, which renews it to
// lockWatchdogTimeout every third of that.
export class RLock {
  constructor(redisson, name, threadId) {
    this.redisson = redisson;
    this.name = name;
    this.field = `${redisson.id}:${threadId}`;
    this.channel = prefixName("redisson_lock__channel", name);
    this.internalLockLeaseTime = redisson.lockWatchdogTimeout;
    this.renewal = null;
    this.onLost = () => {};
  }

  // The holder's remaining lease when someone else holds the lock, null once it is ours.
  async tryAcquire() {
    const ttl = await this.redisson.redis.eval(
      TRY_LOCK_INNER,
      1,
      this.name,
      this.internalLockLeaseTime,
      this.field,
    );
    if (ttl === null) this.scheduleRenewal();
    return ttl;
  }

  async tryLock() {
    return (await this.tryAcquire()) === null;
  }

  // RedissonLock.lock(): `onWaiting` is called once, when the lock was found held after the
  // subscription to its channel was in place, just before the first wait.
  async lock(onWaiting = () => {}) {
    if ((await this.tryAcquire()) === null) return;
    const entry = await this.redisson.subscribe(this.channel);
    let told = false;
    try {
      for (;;) {
        const ttl = await this.tryAcquire();
        if (ttl === null) return;
        if (!told) {
          told = true;
          onWaiting();
        }
        await entry.wait(ttl >= 0 ? ttl : Infinity);
      }
    } finally {
      await this.redisson.unsubscribe(this.channel, entry);
    }
  }

  async unlock() {
    const requestId = randomBytes(16).toString("hex");
    const latch = `${prefixName("redisson_unlock_latch", this.name)}:${requestId}`;
    const result = await this.redisson.redis.eval(
      UNLOCK_INNER,
      3,
      this.name,
      this.channel,
      latch,
      UNLOCK_MESSAGE,
      this.internalLockLeaseTime,
      this.field,
      "publish",
      UNLOCK_LATCH_MS,
    );
    await this.redisson.redis.del(latch);
    this.cancelRenewal();
    if (result === null) {
      throw new Error(
        `attempt to unlock lock, not locked by current thread by node id: ${this.field}`,
      );
    }
  }

  scheduleRenewal() {
    if (this.renewal) return;
    const renew = async () => {
      try {
        const [held] = await this.redisson.redis.eval(
          RENEW,
          1,
          this.name,
          this.internalLockLeaseTime,
          this.field,
        );
        if (!this.renewal) return;
        if (held === 1) {
          this.renewal = setTimeout(renew, this.internalLockLeaseTime / 3);
        } else {
          this.renewal = null;
          this.onLost();
        }
      } catch (e) {
        if (this.renewal) this.renewal = setTimeout(renew, this.internalLockLeaseTime / 3);
      }
    };
    this.renewal = setTimeout(renew, this.internalLockLeaseTime / 3);
  }

  cancelRenewal() {
    if (this.renewal) clearTimeout(this.renewal);
    this.renewal = null;
  }
}
