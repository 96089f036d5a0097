//! Rows in PostgreSQL's binary `COPY … FROM STDIN` format, for bulk writes that would
//! otherwise bind thousands of parameters per statement (each batch's statement text then
//! differs with its size, and is parsed and planned again). Values are encoded by sqlx's own
//! `Encode` impls, the same bytes as a bound parameter's; this adds only the format's framing
//! (a header, a field count per row, a length before each field, a trailer).

use sqlx::encode::IsNull;
use sqlx::postgres::PgArgumentBuffer;
use sqlx::{Encode, Postgres};

use crate::StoreError;

/// `PGCOPY\n\377\r\n\0`, then the flags field and the header extension's length (both 0).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// A binary COPY stream being built, row by row.
pub struct BinaryCopy {
    buf: PgArgumentBuffer,
}

impl Default for BinaryCopy {
    fn default() -> Self {
        let mut buf = PgArgumentBuffer::default();
        buf.extend_from_slice(HEADER);
        Self { buf }
    }
}

impl BinaryCopy {
    /// Starts a row of `fields` fields (each then added with [`BinaryCopy::field`]).
    pub fn row(&mut self, fields: i16) -> &mut Self {
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self
    }

    /// Adds a field: its length, then `value` as sqlx encodes it (a NULL has length -1).
    pub fn field<'q, T: Encode<'q, Postgres>>(&mut self, value: &T) -> Result<&mut Self, StoreError> {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        let null = value
            .encode_by_ref(&mut self.buf)
            .map_err(|e| StoreError::Invalid(format!("cannot encode a COPY field: {e}")))?;
        let len = match null {
            IsNull::Yes => {
                self.buf.truncate(at + 4);
                -1
            }
            IsNull::No => i32::try_from(self.buf.len() - at - 4)
                .map_err(|_| StoreError::Invalid("a COPY field over 2 GiB".into()))?,
        };
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        Ok(self)
    }

    /// The whole stream, with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        std::mem::take(&mut *self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_around_sqlx_encodings() {
        let mut copy = BinaryCopy::default();
        copy.row(3);
        copy.field(&7i32).unwrap();
        copy.field(&Option::<i32>::None).unwrap();
        copy.field(&"hé").unwrap();
        let bytes = copy.finish();
        let mut expected = HEADER.to_vec();
        expected.extend_from_slice(&3i16.to_be_bytes());
        expected.extend_from_slice(&4i32.to_be_bytes());
        expected.extend_from_slice(&7i32.to_be_bytes());
        expected.extend_from_slice(&(-1i32).to_be_bytes());
        expected.extend_from_slice(&3i32.to_be_bytes());
        expected.extend_from_slice("hé".as_bytes());
        expected.extend_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(HEADER.len(), 19);
    }
}
