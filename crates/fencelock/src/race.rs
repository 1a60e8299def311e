//! Waiting for the first of several futures, as `tokio::select!` does, without tokio's macros,
//! which the library would otherwise need for its two background loops alone.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
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

/// Which of two futures completed first.
#[derive(Debug)]
pub(crate) enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Completes with the first of `left` and `right` to complete, polling `left` first each time,
/// so that `left` wins a tie. For futures that need not be `Send` (a caller's work), or where
/// one of the two must win a tie; nest it for more than two.
pub(crate) async fn biased<A: Future, B: Future>(
    left: A,
    right: B,
) -> Either<A::Output, B::Output> {
    let mut left = pin!(left);
    let mut right = pin!(right);
    poll_fn(|cx| {
        if let Poll::Ready(output) = left.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(output));
        }
        right.as_mut().poll(cx).map(Either::Right)
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
    async fn biased_lets_the_left_win_a_tie() {
        assert!(matches!(
            biased(async { 0 }, async { 1 }).await,
            Either::Left(0)
        ));
        assert!(matches!(
            biased(std::future::pending::<()>(), async { 1 }).await,
            Either::Right(1)
        ));
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
