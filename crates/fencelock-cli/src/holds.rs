//! `FENCELOCK_HOLDS`: the locks a command runs inside, handed down to the `fencelock` commands
//! it runs. A `fencelock run` (or `elect`) puts its own lock, after those it was handed, into
//! its command's environment; a `fencelock` started there records its waits as holding them
//! too, so that the wait-for graph and `--deadlock-check` see a cycle that runs through the
//! processes that started it: `fencelock run A -- sh -c 'fencelock run B -- …'` against
//! `fencelock run B -- sh -c 'fencelock run A -- …'`.

use fencelock::LockKind;

/// The variable's name.
pub(crate) const HOLDS_ENV: &str = "FENCELOCK_HOLDS";

/// The locks this process was handed: none without the variable; a JSON array of
/// `[kind, name]` pairs with it (kinds as `fencelock status` names them).
///
/// # Errors
///
/// A message naming the variable when it is set but not such an array.
pub(crate) fn handed() -> Result<Vec<(LockKind, String)>, String> {
    match std::env::var(HOLDS_ENV) {
        Ok(text) => parse(&text),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{HOLDS_ENV} is not UTF-8")),
    }
}

/// The variable's value for a command run inside `held` (the kind and name of the lock taken
/// for it), after what this process was handed.
pub(crate) fn handing_down(
    handed: &[(LockKind, String)],
    held: Option<(LockKind, &str)>,
) -> String {
    let pairs: Vec<[String; 2]> = handed
        .iter()
        .map(|(kind, name)| (*kind, name.as_str()))
        .chain(held)
        .map(|(kind, name)| [kind.to_string(), name.to_owned()])
        .collect();
    serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_owned())
}

fn parse(text: &str) -> Result<Vec<(LockKind, String)>, String> {
    let bad = || format!("{HOLDS_ENV} is not a JSON array of [kind, name] pairs: {text:?}");
    let pairs: Vec<(String, String)> = serde_json::from_str(text).map_err(|_| bad())?;
    pairs
        .into_iter()
        .map(|(kind, name)| Ok((kind.parse().map_err(|_| bad())?, name)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_handed_down_and_read_back() {
        let outer = handing_down(&[], Some((LockKind::Mutex, "A")));
        let handed = parse(&outer).expect("read back");
        assert_eq!(handed, [(LockKind::Mutex, "A".to_owned())]);
        let inner = handing_down(&handed, Some((LockKind::FairMutex, "B \"2\"")));
        assert_eq!(
            parse(&inner).expect("read back"),
            [
                (LockKind::Mutex, "A".to_owned()),
                (LockKind::FairMutex, "B \"2\"".to_owned())
            ]
        );
        for bad in ["", "A", "[[\"spinlock\", \"A\"]]", "[[\"mutex\"]]", "{}"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
