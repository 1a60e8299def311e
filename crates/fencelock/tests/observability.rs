//! The `tracing` and `metrics` features against a real redis-server: the spans of acquire,
//! renewal and release, the lost-lease warning, and every metric with its labels.
//!
//! Each test runs on a single-threaded runtime of its own with its own subscriber and recorder
//! set for that thread only: the client's background tasks run on that thread too, so what
//! they report is captured, and tests running side by side do not see each other's.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::{client, eventually, ms, take_each_primitive};
use fencelock::{Error, Lease, LockOptions, Lost};
use fencelock_testkit::RedisServer;
use metrics::{SharedString, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span or event as captured: its name, level and fields as text.
#[derive(Clone, Debug)]
struct Captured {
    name: &'static str,
    level: Level,
    fields: BTreeMap<&'static str, String>,
}

impl Captured {
    /// A span or event of these metadata, before any field is recorded.
    fn new(metadata: &Metadata<'static>) -> Captured {
        Captured {
            name: metadata.name(),
            level: *metadata.level(),
            fields: BTreeMap::new(),
        }
    }

    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// A field holding a number of milliseconds.
    fn millis(&self, name: &str) -> f64 {
        let text = self
            .field(name)
            .unwrap_or_else(|| panic!("{name} in {self:?}"));
        text.parse()
            .unwrap_or_else(|_| panic!("{name} is a number in {self:?}"))
    }
}

impl Visit for Captured {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields.insert(field.name(), format!("{value:?}"));
    }
}

#[derive(Default)]
struct Trace {
    spans: Vec<Captured>,
    /// Where each open span is in `spans`; ids are reused once a span closes.
    open: HashMap<Id, usize>,
    events: Vec<Captured>,
}

/// A layer that keeps every span and event.
#[derive(Clone, Default)]
struct Capture(Arc<StdMutex<Trace>>);

impl Capture {
    fn trace(&self) -> std::sync::MutexGuard<'_, Trace> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut span = Captured::new(attrs.metadata());
        attrs.record(&mut span);
        let mut trace = self.trace();
        let at = trace.spans.len();
        trace.spans.push(span);
        trace.open.insert(id.clone(), at);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut trace = self.trace();
        if let Some(&at) = trace.open.get(id) {
            values.record(&mut trace.spans[at]);
        }
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut captured = Captured::new(event.metadata());
        event.record(&mut captured);
        self.trace().events.push(captured);
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.trace().open.remove(&id);
    }
}

/// One metric series as the recorder saw it: key, unit, description and value.
type Series = (CompositeKey, Option<Unit>, Option<SharedString>, DebugValue);

/// What one test reported.
struct Observed {
    trace: Trace,
    metrics: Vec<Series>,
}

/// Runs `test` on a single-threaded runtime, with a subscriber and a metrics recorder for it
/// alone.
fn observe<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> Observed {
    let capture = Capture::default();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    {
        let _subscriber =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
        metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    }
    drop(runtime);
    let trace = std::mem::take(&mut *capture.trace());
    Observed {
        trace,
        metrics: snapshotter.snapshot().into_vec(),
    }
}

impl Observed {
    /// The spans named `name` of the lock `lock`, in the order they began.
    fn spans(&self, name: &str, lock: &str) -> Vec<&Captured> {
        self.trace
            .spans
            .iter()
            .filter(|s| s.name == name && s.field("lock") == Some(lock))
            .collect()
    }

    /// The one span named `name` of the lock `lock`.
    fn span(&self, name: &str, lock: &str) -> &Captured {
        match self.spans(name, lock).as_slice() {
            [span] => span,
            spans => panic!("one {name} span of {lock}, got {spans:?}"),
        }
    }

    fn events(&self, level: Level) -> Vec<&Captured> {
        self.trace
            .events
            .iter()
            .filter(|e| e.level == level)
            .collect()
    }

    /// The values of the `metric` named `name` whose labels include `labels`.
    fn values(&self, metric: MetricKind, name: &str, labels: &[(&str, &str)]) -> Vec<&DebugValue> {
        self.metrics
            .iter()
            .filter(|(key, ..)| {
                key.kind() == metric
                    && key.key().name() == name
                    && labels.iter().all(|(k, v)| {
                        key.key()
                            .labels()
                            .any(|label| label.key() == *k && label.value() == *v)
                    })
            })
            .map(|(.., value)| value)
            .collect()
    }

    /// The sum of the counter `name` over its series whose labels include `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.values(MetricKind::Counter, name, labels)
            .into_iter()
            .map(|value| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is a counter, got {other:?}"),
            })
            .sum()
    }

    /// Every value recorded in the histogram `name` over its series whose labels include
    /// `labels`, in seconds.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.values(MetricKind::Histogram, name, labels)
            .into_iter()
            .flat_map(|value| match value {
                DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()),
                other => panic!("{name} is a histogram, got {other:?}"),
            })
            .collect()
    }

    /// The unit the metric `name` was described with.
    fn unit(&self, name: &str) -> Option<Unit> {
        self.metrics
            .iter()
            .find(|(key, ..)| key.key().name() == name)
            .and_then(|(_, unit, ..)| *unit)
    }

    /// Every label key the metrics carry.
    fn label_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .metrics
            .iter()
            .flat_map(|(key, ..)| {
                key.key()
                    .labels()
                    .map(|l| l.key().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

const MUTEX: (&str, &str) = ("kind", "mutex");

#[test]
fn uncontended_lock_is_granted_extended_and_released() {
    let server = RedisServer::start();
    let mut fence = None;
    let seen = observe(|| async {
        let c = client(&server).await;
        let guard = c.mutex("report").expect("name").lock().await.expect("lock");
        fence = Some(guard.fence());
        guard.extend(Duration::from_secs(30)).await.expect("extend");
        tokio::time::sleep(ms(50)).await;
        guard.unlock().await.expect("unlock");
    });
    let fence = fence.expect("granted").get().to_string();

    let acquire = seen.span("fencelock.acquire", "report");
    assert_eq!(acquire.level, Level::DEBUG);
    assert_eq!(acquire.field("kind"), Some("mutex"));
    assert_eq!(acquire.field("outcome"), Some("granted"));
    assert_eq!(acquire.field("fence"), Some(fence.as_str()));
    assert_eq!(acquire.field("contended"), Some("false"));
    assert!(acquire.millis("waited_ms") >= 0.0);
    let renew = seen.span("fencelock.renew", "report");
    assert_eq!(renew.field("outcome"), Some("renewed"));
    let release = seen.span("fencelock.release", "report");
    assert_eq!(release.field("outcome"), Some("released"));
    assert_eq!(release.field("fence"), Some(fence.as_str()));
    assert!(release.millis("held_ms") >= 50.0, "{release:?}");

    let granted = [MUTEX, ("outcome", "granted")];
    assert_eq!(seen.counter("fencelock_acquisitions_total", &granted), 1);
    assert_eq!(seen.counter("fencelock_acquisitions_total", &[]), 1);
    assert_eq!(seen.counter("fencelock_contended_total", &[]), 0);
    let renewed = [MUTEX, ("outcome", "renewed")];
    assert_eq!(seen.counter("fencelock_renewals_total", &renewed), 1);
    assert_eq!(seen.counter("fencelock_lost_total", &[]), 0);
    assert_eq!(seen.histogram("fencelock_wait_seconds", &[MUTEX]).len(), 1);
    let held = seen.histogram("fencelock_hold_seconds", &[MUTEX]);
    assert!(matches!(held.as_slice(), [h] if *h >= 0.05), "{held:?}");
    assert_eq!(seen.unit("fencelock_wait_seconds"), Some(Unit::Seconds));
    assert_eq!(seen.unit("fencelock_hold_seconds"), Some(Unit::Seconds));
    assert_eq!(
        seen.label_keys(),
        ["kind", "outcome"],
        "never the lock name"
    );
}

#[test]
fn a_waiter_is_counted_contended_and_its_wait_measured() {
    let server = RedisServer::start();
    let seen = observe(|| async {
        let c = client(&server).await;
        let mutex = c.mutex("queue").expect("name");
        let first = mutex.lock().await.expect("lock");
        let waiter = tokio::spawn({
            let mutex = mutex.clone();
            async move { mutex.lock().await.expect("granted after the release") }
        });
        tokio::time::sleep(ms(200)).await;
        first.unlock().await.expect("unlock");
        let second = waiter.await.expect("the waiter ran");
        second.unlock().await.expect("unlock");
    });

    assert_eq!(seen.counter("fencelock_contended_total", &[MUTEX]), 1);
    let granted = [MUTEX, ("outcome", "granted")];
    assert_eq!(seen.counter("fencelock_acquisitions_total", &granted), 2);
    let mut waits = seen.histogram("fencelock_wait_seconds", &[MUTEX]);
    waits.sort_by(f64::total_cmp);
    assert!(
        matches!(waits.as_slice(), [_, w] if *w >= 0.15),
        "the waiter waited for the release: {waits:?}"
    );
    let acquires = seen.spans("fencelock.acquire", "queue");
    assert_eq!(acquires.len(), 2);
    assert_eq!(acquires[1].field("contended"), Some("true"));
    assert_eq!(acquires[1].field("outcome"), Some("granted"));
    assert!(
        acquires[1].millis("waited_ms") >= 150.0,
        "{:?}",
        acquires[1]
    );
}

#[test]
fn try_lock_on_a_held_lock_counts_held() {
    let server = RedisServer::start();
    let seen = observe(|| async {
        let c = client(&server).await;
        let mutex = c.mutex("busy").expect("name");
        let guard = mutex.lock().await.expect("lock");
        assert!(matches!(mutex.try_lock().await, Err(Error::Held { .. })));
        guard.unlock().await.expect("unlock");
    });

    let held = [MUTEX, ("outcome", "held")];
    assert_eq!(seen.counter("fencelock_acquisitions_total", &held), 1);
    assert_eq!(seen.counter("fencelock_contended_total", &[MUTEX]), 1);
    assert_eq!(
        seen.histogram("fencelock_wait_seconds", &[]).len(),
        1,
        "only the grant waited"
    );
    let refused = seen.spans("fencelock.acquire", "busy");
    assert_eq!(refused[1].field("outcome"), Some("held"));
    assert!(refused[1].field("error").is_some());
}

#[test]
fn a_wait_past_its_timeout_counts_timeout() {
    let server = RedisServer::start();
    let seen = observe(|| async {
        let c = client(&server).await;
        let mutex = c.mutex("slow").expect("name");
        let guard = mutex.lock().await.expect("lock");
        assert!(matches!(
            mutex.lock_timeout(ms(100)).await,
            Err(Error::Timeout { .. })
        ));
        guard.unlock().await.expect("unlock");
    });

    let timeout = [MUTEX, ("outcome", "timeout")];
    assert_eq!(seen.counter("fencelock_acquisitions_total", &timeout), 1);
    assert_eq!(seen.counter("fencelock_contended_total", &[MUTEX]), 1);
    let timed_out = seen.spans("fencelock.acquire", "slow");
    assert_eq!(timed_out[1].field("outcome"), Some("timeout"));
    assert!(timed_out[1].millis("waited_ms") >= 100.0);
}

#[test]
fn a_lease_deleted_behind_the_holder_is_counted_lost() {
    let server = RedisServer::start();
    let lease = ms(600);
    let seen = observe(|| async {
        let c = client(&server).await;
        let options = LockOptions::default().lease(Lease::Renewed(lease));
        let guard = c
            .mutex_with_options("doomed", options)
            .expect("name")
            .lock()
            .await
            .expect("lock");
        let granted_until = guard.valid_until();
        let renewed = eventually(lease * 3, || guard.valid_until() > granted_until).await;
        assert!(renewed, "a renewal succeeds before the key goes");
        server.cli(&["DEL", "fencelock:{doomed}:mutex"]);
        let reason = tokio::time::timeout(lease * 3, guard.lost())
            .await
            .expect("the next renewal finds the lock gone");
        assert_eq!(reason, Lost::Revoked);
        drop(guard);
    });

    assert_eq!(seen.counter("fencelock_lost_total", &[MUTEX]), 1);
    assert_eq!(
        seen.label_keys(),
        ["kind", "outcome"],
        "never the lock name"
    );
    let renewed = [MUTEX, ("outcome", "renewed")];
    assert!(seen.counter("fencelock_renewals_total", &renewed) >= 1);
    let failed = [MUTEX, ("outcome", "failed")];
    assert_eq!(seen.counter("fencelock_renewals_total", &failed), 1);
    let held = seen.histogram("fencelock_hold_seconds", &[MUTEX]);
    assert!(
        // The first renewal goes out a quarter of the lease after the grant at the earliest.
        matches!(held.as_slice(), [h] if *h >= lease.as_secs_f64() / 4.0),
        "one hold, ended by the loss and not again by the drop: {held:?}"
    );
    let warnings = seen.events(Level::WARN);
    assert!(
        matches!(warnings.as_slice(), [w]
            if w.field("lock") == Some("doomed")
                && w.field("kind") == Some("mutex")
                && w.field("reason").is_some_and(|r| r.contains("removed"))),
        "{warnings:?}"
    );
    let renewals = seen.spans("fencelock.renew", "doomed");
    assert_eq!(
        renewals.last().and_then(|r| r.field("outcome")),
        Some("lost")
    );
    assert_eq!(
        seen.span("fencelock.release", "doomed").field("outcome"),
        Some("dropped")
    );
}

#[test]
fn a_hold_given_back_by_a_shutdown_is_a_release_not_a_loss() {
    let server = RedisServer::start();
    let seen = observe(|| async {
        let c = client(&server).await;
        let guard = c
            .mutex("closing")
            .expect("name")
            .lock()
            .await
            .expect("lock");
        c.shutdown().await.expect("shutdown");
        assert_eq!(guard.lost().await, Lost::Shutdown);
        drop(guard);
    });

    let release = seen.span("fencelock.release", "closing");
    assert_eq!(release.field("outcome"), Some("shutdown"));
    assert!(release.millis("held_ms") >= 0.0, "{release:?}");
    assert_eq!(seen.counter("fencelock_lost_total", &[]), 0);
    assert!(seen.events(Level::WARN).is_empty(), "no lease lost");
    let held = seen.histogram("fencelock_hold_seconds", &[MUTEX]);
    assert_eq!(held.len(), 1, "one hold, ended once: {held:?}");
}

#[test]
fn every_primitive_reports_its_kind() {
    let server = RedisServer::start();
    let seen = observe(|| async {
        let c = client(&server).await;
        let holder = c.holder().expect("holder");
        take_each_primitive(&c, &holder, "shelf").await;
        let reentrant = c.reentrant_mutex("again").expect("name");
        let guard = reentrant.lock(&holder).await.expect("lock");
        guard.unlock().await.expect("unlock");
    });

    for kind in [
        "rwlock_read",
        "rwlock_write",
        "semaphore",
        "multi_mutex",
        "fair_mutex",
        "reentrant_mutex",
    ] {
        let granted = [("kind", kind), ("outcome", "granted")];
        assert_eq!(
            seen.counter("fencelock_acquisitions_total", &granted),
            1,
            "{kind}"
        );
        assert_eq!(
            seen.histogram("fencelock_hold_seconds", &[("kind", kind)])
                .len(),
            1,
            "{kind}"
        );
    }
}
