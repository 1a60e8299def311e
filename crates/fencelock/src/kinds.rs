//! One module per kind of lock, each owning its storage: its keys, and how inspection reads them
//! and a forced release removes them (its `STORED`); its scripts (the `.lua` files in the
//! folder of its name); its handle; its grant (the [`Kind`](crate::core::kind::Kind) the core
//! runs); and its guard's own methods.

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod foreign;
#[cfg(test)]
mod handoff_model;
pub(crate) mod multi;
pub(crate) mod mutex;
pub(crate) mod reentrant;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod value;

use crate::core::stored::Stored;

/// What inspection reads and a forced release removes, for every kind that holds locks of its
/// own under the client's prefix: a [`MultiMutex`](crate::MultiMutex) holds mutexes, and a
/// [`ForeignMutex`](crate::ForeignMutex)'s key is another library's, read through its handle.
pub(crate) static STORED: [&Stored; 6] = [
    &mutex::STORED,
    &reentrant::STORED,
    &rwlock::STORED,
    &semaphore::STORED,
    &fair::STORED,
    &election::STORED,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_kinds_share_a_key_or_a_channel() {
        // An election's candidates wait on the mutex's channel of the same name, by design.
        let mut suffixes: Vec<&str> = STORED
            .iter()
            .filter(|s| s.key != election::LEADER_KEY)
            .flat_map(|s| s.suffixes())
            .collect();
        suffixes.extend([crate::keys::FENCE, election::LEADER_KEY, election::CHANGES]);
        let distinct: std::collections::HashSet<_> = suffixes.iter().collect();
        assert_eq!(distinct.len(), suffixes.len(), "{suffixes:?}");
    }
}
