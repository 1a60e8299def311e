//! `lock_name`: lock names (any bytes, up to a megabyte and beyond), key prefixes, and the keys
//! inspection reads names back from.
//!
//! Input: a first line with the key prefix, a second with the key's suffix (the kind of
//! key: `mutex`, `fence`, …), and the rest is the name, taken byte for byte.

use fencelock::fuzzing::{lock_key, name_in_key, scan_pattern};
use fencelock::{Error, MAX_NAME_LEN};

use crate::text::first_line;

/// The longest name tried: a megabyte.
const MEGABYTE: usize = 1 << 20;

/// Makes the name's key and checks what the key module documents: every key of a name lies in
/// one hash slot, names read back from keys byte for byte, oversized names are refused, and a
/// status pattern without glob characters names exactly the key of that name. Then reads the
/// name's bytes as a key found in Redis.
pub fn lock_name(input: &[u8]) {
    let (prefix, rest) = first_line(input);
    let (suffix, name) = first_line(rest);
    let prefix = String::from_utf8_lossy(prefix);
    let suffix = String::from_utf8_lossy(suffix);
    if let Ok(key) = lock_key(&prefix, name, &suffix) {
        key_is_well_formed(&prefix, name, &suffix, &key);
    }
    if !name.is_empty() {
        let huge = name.repeat(MEGABYTE.div_ceil(name.len()));
        assert!(matches!(
            lock_key("fencelock:", &huge, &suffix),
            Err(Error::InvalidName { .. })
        ));
    }
    read_back_as_key(&prefix, name, &suffix);
}

fn key_is_well_formed(prefix: &str, name: &[u8], suffix: &str, key: &[u8]) {
    assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN);
    assert!(key.starts_with(prefix.as_bytes()));
    assert_eq!(
        name_in_key(prefix, key, suffix).as_deref(),
        Some(name),
        "the name reads back from its key"
    );
    let fence = lock_key(prefix, name, "fence").expect("the same name, another suffix");
    let tag = hash_tag(key);
    assert!(
        !tag.is_empty() && tag.len() < key.len(),
        "a hash tag of its own"
    );
    assert_eq!(tag, hash_tag(&fence), "one slot for every key of a name");
    let globs = |s: &[u8]| s.iter().any(|b| b"*?[]\\".contains(b));
    if let Ok(literal) = std::str::from_utf8(name) {
        if ![prefix.as_bytes(), name, suffix.as_bytes()]
            .into_iter()
            .any(globs)
        {
            assert_eq!(scan_pattern(prefix, literal, suffix), key, "{literal:?}");
        }
    }
}

/// Reads `key` as inspection reads the keys `SCAN` lists: a name it finds there is one whose
/// key is exactly `key`, so that inspection never lists a name it cannot then read. (Under
/// a prefix that a client refuses, nothing is ever read.)
fn read_back_as_key(prefix: &str, key: &[u8], suffix: &str) {
    let Some(name) = name_in_key(prefix, key, suffix) else {
        return;
    };
    match lock_key(prefix, &name, suffix) {
        Err(Error::InvalidOption { .. }) => {}
        own => assert_eq!(
            own.ok().as_deref(),
            Some(key),
            "{name:?} was read from a key that is not its own"
        ),
    }
}

/// The part of `key` Redis Cluster hashes: between the first `{` and the first `}` after it
/// when that is not empty, else the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}
