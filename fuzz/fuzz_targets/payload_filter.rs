#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookstream_fuzz::payload_filter(data));
