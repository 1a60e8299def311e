//! The blocking fair mutex and its guard.

super::mutex::mutex_type! {
    /// A distributed mutex for blocking code that serves waiters in the order they arrived.
    ///
    /// The blocking counterpart of [`fencelock::FairMutex`](crate::FairMutex): when the lock is
    /// released it goes to the waiter that has waited longest, across every process, whichever
    /// thread it waits on. The handle is cheap to clone and to send to other threads.
    FairMutex, FairMutexGuard, made by fair_mutex;
    lock: "The caller takes a place in line and is woken when its turn comes,",
    try_lock: "Tries once to take the lock, without waiting: granted only when it is free and nobody waits for it.",
    held: "when another owner holds it or others wait for it;",
    unlock: ": the first waiter is woken",
}
