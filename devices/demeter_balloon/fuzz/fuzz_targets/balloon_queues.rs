//! Fuzzes the balloon's queue handlers (inflate/deflate on both tiers and
//! statistics) with guest-controlled rings and buffers. See
//! `demeter_balloon::fuzzing` for the input layout.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = demeter_balloon::fuzzing::run(data);
});
