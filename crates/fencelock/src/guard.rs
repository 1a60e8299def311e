//! What every guard does, written once. Each public guard wraps a `Held` (`grant.rs`) and
//! forwards to it; [`guard!`] writes those forwarding methods, and the guard's `Debug`, for a
//! guard type, with the docs the type passes in: each guard keeps its own words and examples,
//! while the code behind them is this one.
//!
//! A guard names what it has (`fence` and `name` for one name; a multi-lock has its own),
//! its release (`unlock`, `release`, `resign`), and whether it offers a release no earlier
//! than a point and `using`.

/// Writes a guard's methods over its `held: Held<_>` field, each with the docs given:
///
/// ```text
/// guard! {
///     MutexGuard {
///         fence: /// …
///         name: /// …
///         valid_until: /// …
///         is_held: /// …
///         lost: /// …
///         extend: /// …
///         release unlock: /// …
///         release_no_earlier_than unlock_no_earlier_than: /// …
///         using: /// …
///         debug: [permits]
///     }
/// }
/// ```
///
/// `fence`, `name`, `release_no_earlier_than`, `using` and `debug` may be left out; `debug`
/// lists the guard's own fields shown between its name and its fence.
macro_rules! guard {
    (
        $guard:ident {
            $( fence: $(#[$fence:meta])* )?
            $( name: $(#[$name:meta])* )?
            valid_until: $(#[$valid_until:meta])*
            is_held: $(#[$is_held:meta])*
            lost: $(#[$lost:meta])*
            extend: $(#[$extend:meta])*
            release $release:ident: $(#[$release_doc:meta])*
            $( release_no_earlier_than $later:ident: $(#[$later_doc:meta])* )?
            $( using: $(#[$using:meta])* )?
            $( debug: [$($field:ident),*] )?
        }
    ) => {
        impl $guard {
            $(
                $(#[$fence])*
                pub fn fence(&self) -> $crate::token::Fence {
                    self.held.fence()
                }
            )?

            $(
                $(#[$name])*
                pub fn name(&self) -> &str {
                    $crate::grant::Resource::name(self.held.resource())
                }
            )?

            $(#[$valid_until])*
            pub fn valid_until(&self) -> ::std::time::Instant {
                self.held.valid_until()
            }

            $(#[$is_held])*
            pub fn is_held(&self) -> bool {
                self.held.is_held()
            }

            $(#[$lost])*
            pub async fn lost(&self) -> $crate::lease::Lost {
                self.held.lost().await
            }

            $(#[$extend])*
            pub async fn extend(&self, lease: ::std::time::Duration) -> $crate::error::Result<()> {
                self.held.extend(lease).await
            }

            $(#[$release_doc])*
            pub async fn $release(self) -> $crate::error::Result<()> {
                self.held.unlock().await
            }

            $(
                $(#[$later_doc])*
                pub fn $later(
                    self,
                    at: ::std::time::Instant,
                ) -> impl ::std::future::Future<Output = $crate::error::Result<()>> + Send + 'static {
                    self.held.unlock_no_earlier_than(at)
                }
            )?

            $(
                $(#[$using])*
                pub async fn using<F, Fut, T>(self, work: F) -> $crate::error::Result<T>
                where
                    F: FnOnce($crate::token::Fence) -> Fut,
                    Fut: ::std::future::Future<Output = T>,
                {
                    self.held.using(work).await
                }
            )?
        }

        $(
            impl ::std::fmt::Debug for $guard {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    f.debug_struct(stringify!($guard))
                        .field("name", &self.name())
                        $(.field(stringify!($field), &self.$field()))*
                        .field("fence", &self.fence())
                        .field("held", &self.is_held())
                        .finish()
                }
            }
        )?
    };
}
pub(crate) use guard;
