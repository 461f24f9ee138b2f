//! Text a record carries, made storable: any UTF-8 is kept as it is (Redis strings are
//! binary-safe: NUL and control characters come back unchanged); only an error text longer
//! than [`MAX_ERROR_BYTES`] is cut, and the record's text says so (the brokers' rule,
//! [`anarchon_core::claim_only::cap_text`]).

use std::borrow::Cow;

/// The most bytes of a handler's error text a record keeps (64 KiB).
pub(crate) const MAX_ERROR_BYTES: usize = 64 * 1024;

/// An error text cut to [`MAX_ERROR_BYTES`] with a note saying how much was left out.
pub(crate) fn cap(text: &str) -> Cow<'_, str> {
    anarchon_core::claim_only::cap_text(text, MAX_ERROR_BYTES, "Redis")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_fits_is_kept_byte_for_byte_and_a_long_one_is_cut_and_says_so() {
        assert_eq!(cap("short\0text"), "short\0text");
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = cap(&long);
        assert!(cut.len() < long.len() + 200, "{}", cut.len());
        assert!(cut.contains("more bytes cut"));
        assert!(cut.contains("Redis store"));
    }
}
