#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| fencelock_fuzz::lock_name(input));
