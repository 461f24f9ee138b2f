//! Text a record carries, made storable: any UTF-8 is kept as it is (JSON escapes NUL and
//! control characters and gives them back unchanged); only an error text longer than
//! [`MAX_ERROR_BYTES`], or than what the server's `max_payload` leaves room for, is cut, and
//! the record's text says so.
//!
//! A later issue merges this with the RabbitMQ store's copy (`anarchon-amqp/src/text.rs`).

use std::borrow::Cow;

use anarchon_core::store::RunRecord;

/// The most bytes of a handler's error text a record keeps (64 KiB).
pub(crate) const MAX_ERROR_BYTES: usize = 64 * 1024;

/// `text` cut to at most `max` bytes (at a character boundary) followed by a note saying
/// how many bytes were left out; unchanged when it fits.
pub(crate) fn cap<'a>(text: &'a str, max: usize, store: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… [anarchon: {} more bytes cut; the {store} store keeps at most {max} bytes of an \
         error text]",
        &text[..end],
        text.len() - end
    ))
}

/// The record as it is stored: its error text capped by [`cap`] at `max` bytes.
pub(crate) fn storable<'a>(record: &'a RunRecord, store: &str, max: usize) -> Cow<'a, RunRecord> {
    match record.error.as_deref().map(|e| cap(e, max, store)) {
        Some(Cow::Owned(capped)) => {
            let mut r = record.clone();
            r.error = Some(capped);
            Cow::Owned(r)
        }
        _ => Cow::Borrowed(record),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_char_boundary_and_says_so() {
        assert_eq!(cap("short\0text", 64, "x"), "short\0text");
        let long = "é".repeat(100); // 200 bytes
        let cut = cap(&long, 51, "x");
        assert!(cut.starts_with(&"é".repeat(25)), "{cut}");
        assert!(cut.contains("150 more bytes cut"), "{cut}");
        assert!(cut.contains("at most 51 bytes"), "{cut}");
    }
}
