//! The small runtime a blocking client runs its async one on, and the held grant every
//! blocking guard is made of.

use std::future::Future;
use std::sync::mpsc;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::lease::Lost;

/// How long dropping the last handle of a blocking client waits for the releases still under
/// way, and then for the runtime's threads.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The tokio runtime of one blocking client: one worker thread, which runs the client's
/// renewal and notification tasks while callers' threads block. Shared by the client and every
/// handle and guard made from it, and shut down when the last of them is dropped.
pub(crate) struct Runtime {
    /// Always `Some` until dropped: shutting down takes it.
    tokio: Option<tokio::runtime::Runtime>,
    /// Releases of guards dropped inside another runtime; shutting down waits for them.
    releases: StdMutex<JoinSet<()>>,
}

impl Runtime {
    /// Starts the worker thread.
    pub(crate) fn start() -> Result<Arc<Runtime>> {
        refuse_inside_runtime()?;
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fencelock-blocking")
            .enable_all()
            .build()
            .map_err(redis::RedisError::from)?;
        Ok(Arc::new(Runtime {
            tokio: Some(tokio),
            releases: StdMutex::new(JoinSet::new()),
        }))
    }

    fn tokio(&self) -> &tokio::runtime::Runtime {
        let Some(tokio) = &self.tokio else {
            unreachable!("the runtime is only taken when it is dropped")
        };
        tokio
    }

    /// Runs `future` to completion on the calling thread, the runtime's tasks going on beside
    /// it; refused inside a tokio runtime, where blocking would stall that runtime's threads
    /// (and tokio would panic). A refused future is dropped without being polled.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        refuse_inside_runtime()?;
        Ok(self.tokio().block_on(future))
    }

    /// Runs an acquire to completion, as [`block_on`](Runtime::block_on) does, and holds the
    /// grant it returns in its blocking guard.
    pub(crate) fn hold<B: BlockingGuard>(
        self: &Arc<Self>,
        acquire: impl Future<Output = Result<B::Async>>,
    ) -> Result<B> {
        let guard = self.block_on(acquire)??;
        Ok(B::from_held(Held::new(guard, Arc::clone(self))))
    }

    /// Runs a release on the runtime without waiting for it; shutting down waits for it.
    fn release_in_background(&self, release: impl Future<Output = ()> + Send + 'static) {
        let mut releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        while releases.try_join_next().is_some() {}
        releases.spawn_on(release, self.tokio().handle());
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(tokio) = self.tokio.take() else {
            return;
        };
        let releases = std::mem::take(self.releases.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !inside_runtime() {
            return shut_down(tokio, releases);
        }
        // Waiting is not allowed inside a runtime (tokio panics): wait on a thread of its own.
        let (hand_over, handed) = mpsc::channel();
        let waiting = std::thread::Builder::new()
            .name("fencelock-blocking-shutdown".into())
            .spawn(move || {
                if let Ok((tokio, releases)) = handed.recv() {
                    shut_down(tokio, releases);
                }
            });
        match waiting {
            Ok(_) => {
                let _ = hand_over.send((tokio, releases));
            }
            Err(_) => tokio.shutdown_background(),
        }
    }
}

/// Waits a little for the releases under way, then stops the runtime.
fn shut_down(tokio: tokio::runtime::Runtime, mut releases: JoinSet<()>) {
    tokio.block_on(async {
        let all_done = async { while releases.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, all_done).await;
    });
    tokio.shutdown_timeout(SHUTDOWN_GRACE);
}

fn inside_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_inside_runtime() -> Result<()> {
    if inside_runtime() {
        return Err(Error::BlockingInAsync);
    }
    Ok(())
}

/// An async guard a blocking guard can wrap.
pub(crate) trait AsyncGuard {
    /// Releases the grant and reports whether it was still held: the guard's `unlock` or
    /// `release`.
    fn release(self) -> impl Future<Output = Result<()>> + Send + 'static;
    /// Completes when the grant is lost.
    fn lost(&self) -> impl Future<Output = Lost>;
    /// Sets the lease to `lease` from now.
    fn extend(&self, lease: Duration) -> impl Future<Output = Result<()>>;
    fn valid_until(&self) -> Instant;
    fn is_held(&self) -> bool;
}

/// A blocking guard: one kind of async guard, held with the runtime to drive it.
pub(crate) trait BlockingGuard {
    type Async: AsyncGuard;
    fn from_held(held: Held<Self::Async>) -> Self;
}

/// An async guard with the runtime to drive it. Dropping it releases the grant before
/// returning, outside a runtime; inside one, in the background on the client's runtime.
pub(crate) struct Held<G: AsyncGuard> {
    /// Always `Some` until released or dropped.
    guard: Option<G>,
    runtime: Arc<Runtime>,
}

impl<G: AsyncGuard> Held<G> {
    pub(crate) fn new(guard: G, runtime: Arc<Runtime>) -> Self {
        Held {
            guard: Some(guard),
            runtime,
        }
    }

    pub(crate) fn guard(&self) -> &G {
        let Some(guard) = &self.guard else {
            unreachable!("the guard is only taken by release and drop, which consume it")
        };
        guard
    }

    /// The runtime that drives the guard, for what a guard does beyond the shared methods.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.guard().valid_until()
    }

    pub(crate) fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    /// Blocks until the grant is lost or `timeout` passes; `None` when it was still held.
    pub(crate) fn wait_lost(&self, timeout: Duration) -> Result<Option<Lost>> {
        self.runtime.block_on(async {
            tokio::time::timeout(timeout, self.guard().lost())
                .await
                .ok()
        })
    }

    pub(crate) fn extend(&self, lease: Duration) -> Result<()> {
        self.runtime.block_on(self.guard().extend(lease))?
    }

    /// Releases and reports whether the grant was still held; inside a runtime, refuses and
    /// releases in the background as a drop does.
    pub(crate) fn release(self) -> Result<()> {
        self.release_with(G::release)
    }

    /// Releases with `release`, one of the async guard's release methods, as
    /// [`release`](Held::release) does.
    pub(crate) fn release_with<F, Fut>(mut self, release: F) -> Result<()>
    where
        F: FnOnce(G) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        refuse_inside_runtime()?;
        match self.guard.take() {
            Some(guard) => self.runtime.block_on(release(guard))?,
            None => Ok(()),
        }
    }
}

impl<G: AsyncGuard> Drop for Held<G> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        if inside_runtime() {
            // On the client's runtime, which stays up until the release is done (within
            // the grace): the async guard's own drop would leave it to the renewal task,
            // which a shutdown stops at once.
            let release = guard.release();
            self.runtime.release_in_background(async {
                let _ = release.await;
            });
        } else {
            let _ = self.runtime.block_on(guard.release());
        }
    }
}

/// Implements [`AsyncGuard`] for an async guard whose release method is `$release`.
macro_rules! async_guard {
    ($guard:ty, $release:ident) => {
        impl $crate::blocking::runtime::AsyncGuard for $guard {
            fn release(
                self,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + Send + 'static {
                <$guard>::$release(self)
            }

            fn lost(&self) -> impl std::future::Future<Output = $crate::Lost> {
                <$guard>::lost(self)
            }

            fn extend(
                &self,
                lease: std::time::Duration,
            ) -> impl std::future::Future<Output = $crate::Result<()>> {
                <$guard>::extend(self, lease)
            }

            fn valid_until(&self) -> std::time::Instant {
                <$guard>::valid_until(self)
            }

            fn is_held(&self) -> bool {
                <$guard>::is_held(self)
            }
        }
    };
}

pub(crate) use async_guard;
