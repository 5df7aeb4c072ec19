#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::config(data));
