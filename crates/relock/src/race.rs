//! Waiting for the first of several futures, as `tokio::select!` does, without tokio's macros,
//! which the library would otherwise need for its two background loops alone.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;

/// A future of one branch of [`first`], pinned where the caller keeps it.
pub(crate) type Branch<'a, T> = Pin<&'a mut (dyn Future<Output = T> + Send)>;

/// Completes with the output of the first of `branches` to complete; the caller drops the
/// others. Each call starts polling at another branch, as `select!` does, so that a branch
/// that is always ready cannot starve the others.
pub(crate) async fn first<T, const N: usize>(mut branches: [Branch<'_, T>; N]) -> T {
    thread_local! {
        static TURN: Cell<usize> = const { Cell::new(0) };
    }
    let start = TURN.with(|turn| turn.replace(turn.get().wrapping_add(1)));
    poll_fn(|cx| {
        for i in 0..N {
            if let Poll::Ready(output) = branches[(start + i) % N].as_mut().poll(cx) {
                return Poll::Ready(output);
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    #[tokio::test]
    async fn the_branch_that_completes_wins() {
        for _ in 0..3 {
            let never = pin!(std::future::pending::<&str>());
            let ready = pin!(async { "ready" });
            assert_eq!(first([never as Branch<'_, _>, ready]).await, "ready");
        }
    }

    #[tokio::test]
    async fn a_branch_always_ready_does_not_starve_another() {
        let mut won = [0; 2];
        for _ in 0..4 {
            let a = pin!(async { 0_usize });
            let b = pin!(async { 1_usize });
            won[first([a as Branch<'_, _>, b]).await] += 1;
        }
        assert_eq!(won, [2, 2]);
    }
}
