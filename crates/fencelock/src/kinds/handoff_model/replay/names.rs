//! How the replay names what it writes, for the real scripts and the comparison alike: each
//! kind's keys and channels, the clients' tokens, labels and place members, and the lengths in
//! ms the model's ticks become.

use super::super::config::{Config, Lock, MAX_CLIENTS};
use super::super::state::Token;
use super::TICK_MS;

/// The keys and channels of one kind of lock.
#[derive(Clone, Copy)]
pub(super) struct Names {
    pub(super) lock: &'static str,
    pub(super) places: &'static str,
    /// A FairMutex's line.
    pub(super) line: Option<&'static str>,
    pub(super) wake: &'static str,
}

impl Names {
    pub(super) fn of(lock: Lock) -> Names {
        match lock {
            Lock::Mutex => Names {
                lock: "replay:{n}:mutex",
                places: "replay:{n}:mutex-waiters",
                line: None,
                wake: "replay:{n}:wake",
            },
            Lock::Fair => Names {
                lock: "replay:{n}:fair",
                places: "replay:{n}:fair-places",
                line: Some("replay:{n}:fair-line"),
                wake: "replay:{n}:fair-wake",
            },
        }
    }

    /// Client `c`'s own channel.
    pub(super) fn channel_of(self, c: usize) -> String {
        format!("{}:c{c}", self.wake)
    }

    /// Every channel a script of this kind publishes on: the name's, then each client's.
    pub(super) fn channels(self) -> Vec<String> {
        std::iter::once(self.wake.to_owned())
            .chain((0..MAX_CLIENTS).map(|c| self.channel_of(c)))
            .collect()
    }
}

/// The lengths the scripts are given, in ms: the model's ticks times [`TICK_MS`].
pub(super) struct Lengths {
    pub(super) lease: u64,
    pub(super) window: u64,
    pub(super) place: u64,
}

impl Lengths {
    pub(super) fn of(config: &Config) -> Lengths {
        let ms = |ticks: u8| u64::from(ticks) * TICK_MS;
        Lengths {
            lease: ms(config.times.lease),
            window: ms(config.times.window),
            place: ms(config.times.place),
        }
    }
}

/// A client's token, as the scripts read it: `c<client>.<generation>:`, whose client tag names its
/// channel.
pub(super) fn token(token: Token) -> String {
    token.to_string()
}

/// The label each client's holds and places carry.
pub(super) fn label(client: u8) -> String {
    format!("h{client}")
}

/// A waiter's place member: its token, the lease it asks for and its label.
pub(super) fn member(waiter: Token, lengths: &Lengths) -> String {
    format!("{waiter}{}:{}", lengths.lease, label(waiter.client))
}
