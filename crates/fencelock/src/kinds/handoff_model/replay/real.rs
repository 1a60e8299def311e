//! The real side of the replay: a master and its replica, the library's scripts run on the
//! master, time passed by ticks, and one listener per client where the model's connection is.

use std::time::Duration;

use fencelock_testkit::{RedisServer, ServerOptions};
use redis::aio::{MultiplexedConnection, PubSub};

use super::super::check::Step;
use super::super::config::{Config, Lock, MAX_CLIENTS};
use super::super::scripts::{Run, Script};
use super::super::state::{State, Sub};
use super::super::step::Action;
use super::compare::{self, Fences, Heard, Snapshot};
use super::names::{label, member, token, Lengths, Names};
use super::TICK_MS;
use crate::core::keeper::RENEW_BATCH;
use crate::testing::{conn, futures_next};
use crate::transport::script::Lua;

/// Moves time on by `ARGV[2]` ticks of `ARGV[1]` ms (0: only rounds every expiry and end to
/// whole ticks): the lock's value (`KEYS[1]`) expires that much sooner, deleted once no tick
/// is left, and every place (the sorted set `KEYS[2]`, scored by when each ends) ends that
/// much sooner, at the server's present time once no tick is left. A deletion is all a script
/// can tell of an expiry, and takes no waiting on the clock.
pub(super) const PASS_TIME: &str = r"
local tick, pass = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function left(ms)
  return math.max(math.ceil(ms / tick) - pass, 0)
end
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, 1) ~= '~' then
  local ticks = left(redis.call('PTTL', KEYS[1]))
  if ticks == 0 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('PEXPIRE', KEYS[1], ticks * tick)
  end
end
local places = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #places, 2 do
  redis.call('ZADD', KEYS[2], now + left(tonumber(places[i + 1]) - now) * tick, places[i])
end
";

static PASS: Lua = Lua::new(&[PASS_TIME]);

/// How long the replay waits for what it expects to hear before it calls it missing.
const HEARING: Duration = Duration::from_secs(5);

/// Published on every channel after a script, so that a listener knows it heard everything
/// the script published once it hears this.
const MARKER: &str = "replay:end";

/// Every pattern subscription's pattern: every key and channel of the replay.
const EVERY_CHANNEL: &str = "replay:{n}:*";

/// How long a released value keeps the name's last fence: longer than any replay.
const FENCE_MEMORY_MS: u64 = 100 * TICK_MS;

/// How a listener follows a client's pub/sub connection.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Listening {
    lock: Lock,
    on_master: bool,
    /// Read by the replay; a half-open connection is not.
    reading: bool,
}

impl Listening {
    fn of(sub: Sub, master: u8, lock: Lock) -> Option<Listening> {
        let (node, reading) = match sub {
            Sub::Off => return None,
            Sub::On(node) => (node, true),
            Sub::HalfOpen(node) => (node, false),
        };
        Some(Listening {
            lock,
            on_master: node == master,
            reading,
        })
    }
}

/// A real subscriber standing for a client's pub/sub connection.
struct Listener {
    listening: Listening,
    pubsub: PubSub,
    channels: [String; 2],
}

impl Listener {
    async fn open(server: &RedisServer, c: usize, listening: Listening) -> Listener {
        let names = Names::of(listening.lock);
        let channels = [names.channel_of(c), names.wake.to_owned()];
        let mut pubsub = pubsub(server).await;
        pubsub.subscribe(&channels).await.expect("subscribe");
        Listener {
            listening,
            pubsub,
            channels,
        }
    }

    /// Unsubscribed before it is dropped, so that no later PUBLISH counts it.
    async fn close(mut self) {
        self.pubsub
            .unsubscribe(&self.channels)
            .await
            .expect("unsubscribe");
    }
}

async fn pubsub(server: &RedisServer) -> PubSub {
    redis::Client::open(server.url().as_str())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub")
}

/// A master, its replica, and what the replay keeps connected to them.
pub(super) struct Deployment {
    master: RedisServer,
    replica: RedisServer,
    commands: MultiplexedConnection,
    /// On the replica, by pattern: hears every payload, and the master counts it nowhere.
    witness: PubSub,
    /// The tap: a pattern subscription on the master, which counts one for every PUBLISH.
    tap: Option<PubSub>,
    listeners: [Option<Listener>; MAX_CLIENTS],
    fences: Fences,
}

impl Deployment {
    pub(super) async fn start() -> Deployment {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(ServerOptions::default().replica_of(&master));
        replica.wait_replication_link_up(Duration::from_secs(10));
        master.wait_replicas_in_sync(1, Duration::from_secs(10));
        let commands = conn(&master).await;
        let mut witness = pubsub(&replica).await;
        witness.psubscribe(EVERY_CHANNEL).await.expect("psubscribe");
        Deployment {
            master,
            replica,
            commands,
            witness,
            tap: None,
            listeners: [None, None, None],
            fences: Fences::default(),
        }
    }

    /// Clears the lock's keys and sets up the listeners of `initial`, for a new trace.
    pub(super) async fn reset(&mut self, config: &Config, initial: &State) {
        for lock in [Lock::Mutex, Lock::Fair] {
            let names = Names::of(lock);
            let keys = [Some(names.lock), Some(names.places), names.line];
            redis::cmd("DEL")
                .arg(keys.iter().flatten().collect::<Vec<_>>())
                .exec_async(&mut self.commands)
                .await
                .expect("del");
        }
        // A listener that was half-open holds payloads nobody read: a new trace starts fresh.
        for slot in &mut self.listeners {
            if let Some(listener) = slot.take_if(|l| !l.listening.reading) {
                listener.close().await;
            }
        }
        self.fences = Fences::default();
        self.follow(config, initial).await;
    }

    /// Replays `step` of a trace of `config` from `before`: runs what it ran on the server,
    /// follows its connections, and compares.
    pub(super) async fn replay(
        &mut self,
        config: &Config,
        before: &State,
        step: &Step,
    ) -> Result<(), String> {
        let names = Names::of(config.lock);
        match step.action {
            Action::Run(..) => {
                let run = step.effects.run.ok_or("a run that ran no script")?;
                let answer = self.invoke(config, names, run).await;
                self.pass_time(names, 0).await;
                let heard = self.hear(names).await?;
                let snapshot = self.snapshot(names).await;
                compare::answer(config, run, &answer, snapshot.value.as_deref())?;
                compare::published(config, before, &step.effects, &heard)?;
                return compare::state(config, before, &step.after, &snapshot, &mut self.fences);
            }
            Action::Tick => self.pass_time(names, 1).await,
            Action::ExpirePlaces => {
                let keys = [Some(names.places), names.line];
                redis::cmd("DEL")
                    .arg(keys.iter().flatten().collect::<Vec<_>>())
                    .exec_async(&mut self.commands)
                    .await
                    .expect("del");
            }
            Action::DropConnection(_)
            | Action::Reconnect(_)
            | Action::Crash(..)
            | Action::Failover => self.follow(config, &step.after).await,
            _ => return Ok(()),
        }
        let snapshot = self.snapshot(names).await;
        compare::state(config, before, &step.after, &snapshot, &mut self.fences)
    }

    /// The script of `run`, by the library's own `Lua`, with the model's lengths.
    async fn invoke(&mut self, config: &Config, names: Names, run: Run) -> compare::Answer {
        let lengths = Lengths::of(config);
        let token = token(run.token);
        let label = label(run.token.client);
        let member = member(run.token, &lengths);
        let c = &mut self.commands;
        let invoked = match (config.lock, run.script) {
            (Lock::Mutex, Script::Acquire) => crate::kinds::mutex::ACQUIRE
                .plain()
                .key(names.lock)
                .key(names.places)
                .arg(&token)
                .arg(lengths.lease)
                .arg(&label)
                .arg(lengths.place)
                .arg(u8::from(run.refused_before))
                .arg(1)
                .invoke_async(c)
                .await
                .map(compare::Answer::Acquired),
            (Lock::Fair, Script::Acquire) => crate::kinds::fair::ACQUIRE
                .plain()
                .key(names.lock)
                .key(names.line.expect("a fair lock's line"))
                .key(names.places)
                .arg(&token)
                .arg(lengths.lease)
                .arg(&label)
                .arg(lengths.place)
                .arg(names.wake)
                .arg(lengths.window)
                .invoke_async(c)
                .await
                .map(compare::Answer::Acquired),
            (Lock::Mutex, Script::Release) => crate::kinds::mutex::RELEASE
                .plain()
                .key(names.lock)
                .key(names.places)
                .arg(&token)
                .arg(names.wake)
                .arg(FENCE_MEMORY_MS)
                .arg(&member)
                .arg(lengths.window)
                .invoke_async(c)
                .await
                .map(compare::Answer::Code),
            (Lock::Fair, Script::Release) => crate::kinds::fair::RELEASE
                .plain()
                .key(names.lock)
                .key(names.line.expect("a fair lock's line"))
                .key(names.places)
                .arg(&token)
                .arg(names.wake)
                .arg(FENCE_MEMORY_MS)
                .arg(&member)
                .arg(lengths.window)
                .invoke_async(c)
                .await
                .map(compare::Answer::Code),
            (_, Script::Extend) => renew_and_extend(c, names, &token, lengths.lease).await,
        };
        invoked.unwrap_or_else(|e| panic!("{:?} by {token}: {e}", run.script))
    }

    /// Time passes by `ticks` on the server (0: every expiry and end rounded to whole ticks).
    /// A FairMutex's line is ordered by arrival, which time leaves as it is.
    async fn pass_time(&mut self, names: Names, ticks: u8) {
        PASS.plain()
            .key(names.lock)
            .key(names.places)
            .arg(TICK_MS)
            .arg(ticks)
            .invoke_async::<()>(&mut self.commands)
            .await
            .expect("pass time");
    }

    /// What every listener heard of the last script: each reads up to the marker published on
    /// each of its channels after the script.
    async fn hear(&mut self, names: Names) -> Result<Heard, String> {
        let channels = names.channels();
        let mut markers = redis::pipe();
        for channel in &channels {
            markers.cmd("PUBLISH").arg(channel).arg(MARKER).ignore();
        }
        markers
            .exec_async(&mut self.commands)
            .await
            .expect("publish");
        let mut heard = Heard {
            witness: until_markers(&mut self.witness, channels.len(), "the replica").await?,
            ..Heard::default()
        };
        if let Some(tap) = &mut self.tap {
            heard.tap = Some(until_markers(tap, channels.len(), "the tap").await?);
        }
        for (c, slot) in self.listeners.iter_mut().enumerate() {
            if let Some(listener) = slot.as_mut().filter(|l| l.listening.reading) {
                let of = format!("client {c}'s listener");
                heard.clients[c] = Some(until_markers(&mut listener.pubsub, 2, &of).await?);
            }
        }
        Ok(heard)
    }

    /// Makes the listeners those of `state`: one per connection, on the node the model's is
    /// on, read unless half-open; and the tap when the run has one.
    async fn follow(&mut self, config: &Config, state: &State) {
        for c in 0..MAX_CLIENTS {
            let wanted = state
                .clients
                .get(c)
                .filter(|_| c < usize::from(config.clients))
                .and_then(|client| Listening::of(client.sub, state.server.master, config.lock));
            let slot = &mut self.listeners[c];
            let current = slot.as_ref().map(|l| l.listening);
            if current == wanted {
                continue;
            }
            if let (Some(listener), Some(wanted)) = (slot.as_mut(), wanted) {
                let stops_reading = Listening {
                    reading: true,
                    ..wanted
                } == listener.listening;
                if stops_reading {
                    listener.listening = wanted;
                    continue;
                }
            }
            if let Some(listener) = slot.take() {
                listener.close().await;
            }
            if let Some(wanted) = wanted {
                let server = if wanted.on_master {
                    &self.master
                } else {
                    &self.replica
                };
                *slot = Some(Listener::open(server, c, wanted).await);
            }
        }
        self.follow_tap(config.tap).await;
    }

    async fn follow_tap(&mut self, tap: bool) {
        match (self.tap.take(), tap) {
            (Some(pubsub), true) => self.tap = Some(pubsub),
            (Some(mut pubsub), false) => pubsub
                .punsubscribe(EVERY_CHANNEL)
                .await
                .expect("punsubscribe"),
            (None, true) => {
                let mut pubsub = pubsub(&self.master).await;
                pubsub.psubscribe(EVERY_CHANNEL).await.expect("psubscribe");
                self.tap = Some(pubsub);
            }
            (None, false) => {}
        }
    }

    /// What the master holds for the lock, and the listeners it counts.
    async fn snapshot(&mut self, names: Names) -> Snapshot {
        let channels = names.channels();
        let ((seconds, micros), value, pttl, places, line, numsub, numpat) = redis::pipe()
            .cmd("TIME")
            .cmd("GET")
            .arg(names.lock)
            .cmd("PTTL")
            .arg(names.lock)
            .cmd("ZRANGE")
            .arg(names.places)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("ZRANGE")
            .arg(names.line.unwrap_or(names.places))
            .arg(0)
            .arg(-1)
            .cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channels)
            .cmd("PUBSUB")
            .arg("NUMPAT")
            .query_async::<(
                (u64, u64),
                Option<String>,
                i64,
                Vec<(String, f64)>,
                Vec<String>,
                Vec<(String, i64)>,
                i64,
            )>(&mut self.commands)
            .await
            .expect("snapshot");
        Snapshot {
            now: seconds * 1000 + micros / 1000,
            value,
            pttl,
            places,
            line: names.line.map(|_| line),
            counted: numsub.into_iter().map(|(_, n)| n).collect(),
            patterns: numpat,
        }
    }
}

/// An extension as the keeper renews (`core/renew_batch.lua`, kind `v`), then as the guard
/// extends (`extend.lua`): both lengthen the same values, and each answers.
async fn renew_and_extend(
    c: &mut MultiplexedConnection,
    names: Names,
    token: &str,
    lease: u64,
) -> redis::RedisResult<compare::Answer> {
    let renewed: String = RENEW_BATCH
        .plain()
        .key(names.lock)
        .arg(lease)
        .arg(format!("v{token}"))
        .invoke_async(c)
        .await?;
    let extended: i64 = crate::kinds::value::EXTEND
        .plain()
        .key(names.lock)
        .arg(token)
        .arg(lease)
        .invoke_async(c)
        .await?;
    Ok(compare::Answer::Renewed { renewed, extended })
}

/// The payloads a subscriber heard, with their channels, up to `markers` markers.
async fn until_markers(
    pubsub: &mut PubSub,
    markers: usize,
    who: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut heard = Vec::new();
    let mut seen = 0;
    while seen < markers {
        let message = tokio::time::timeout(HEARING, futures_next(&mut pubsub.on_message()))
            .await
            .map_err(|_| format!("{who} heard {seen} of {markers} markers in {HEARING:?}"))?
            .ok_or_else(|| format!("{who}'s connection closed"))?;
        let payload: String = message.get_payload().expect("a text payload");
        if payload == MARKER {
            seen += 1;
        } else {
            heard.push((message.get_channel_name().to_owned(), payload));
        }
    }
    Ok(heard)
}
