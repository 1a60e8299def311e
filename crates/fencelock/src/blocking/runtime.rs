//! The small runtime a blocking client runs its async one on.

use std::future::Future;
use std::sync::mpsc;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::error::{Error, Result};

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

    /// Runs a release on the runtime without waiting for it; shutting down waits for it.
    pub(crate) fn release_in_background(&self, release: impl Future<Output = ()> + Send + 'static) {
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

pub(crate) fn inside_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

pub(crate) fn refuse_inside_runtime() -> Result<()> {
    if inside_runtime() {
        return Err(Error::BlockingInAsync);
    }
    Ok(())
}
