//! Carving fuzzer bytes into the values a target needs.
//!
//! Fixed-size values come first (so libFuzzer's comparison tracing finds them), then text
//! fields separated by `\n` (so a corpus file is readable and a dictionary token lands in a
//! field), then the rest. A short input gives zeros and empty fields, never an error.

use std::borrow::Cow;

pub(crate) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// The next `N` bytes, zero-padded when the input runs out.
    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    pub(crate) fn byte(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub(crate) fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.array())
    }

    /// Bytes up to the next `\n` (consumed, not returned), or all that is left.
    pub(crate) fn field(&mut self) -> &'a [u8] {
        match self.data.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let field = &self.data[..i];
                self.data = &self.data[i + 1..];
                field
            }
            None => std::mem::take(&mut self.data),
        }
    }

    pub(crate) fn text_field(&mut self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.field())
    }

    pub(crate) fn rest(self) -> &'a [u8] {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_inputs_give_zeros_and_empty_fields() {
        let mut input = Input::new(b"\x01\x02");
        assert_eq!(input.i64(), 0x0201);
        assert_eq!(input.u32(), 0);
        assert_eq!(input.field(), b"");
        assert_eq!(input.rest(), b"");
    }

    #[test]
    fn fields_split_on_newlines_and_the_rest_keeps_them() {
        let mut input = Input::new(b"a\nb\nc\nd");
        assert_eq!(input.field(), b"a");
        assert_eq!(input.text_field(), "b");
        assert_eq!(input.rest(), b"c\nd");
    }
}
