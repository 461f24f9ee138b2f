//! Human output: aligned tables, times and durations.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};

/// A table of left-aligned columns, two spaces apart.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub(crate) fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (one cell per header; line breaks and tabs become spaces, other
    /// control and bidi characters are escaped: see [`escape`]).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| escape(&c.replace(['\n', '\r', '\t'], " ")))
                .collect(),
        );
    }

    /// True when no row was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Writes the header line and the rows.
    pub(crate) fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut text = String::new();
            for (i, (cell, width)) in cells.zip(&widths).enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                text.push_str(cell);
                text.extend(std::iter::repeat_n(
                    ' ',
                    width.saturating_sub(cell.chars().count()),
                ));
            }
            text.trim_end().to_owned()
        };
        writeln!(out, "{}", line(&mut self.headers.iter().copied()))?;
        for row in &self.rows {
            writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
        }
        Ok(())
    }
}

/// Whether `c` must not reach a terminal as it is: C0 and C1 controls and DEL (ESC starts
/// colour, cursor, title and OSC 8 link sequences; BEL ends OSC), and the bidi controls
/// (U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069), which reorder what the operator sees.
pub(crate) fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every character [`is_unsafe`] written as `\u{..}` (lowercase hex), so store
/// text (instance ids, handler errors) is shown, never obeyed by the terminal. Table cells,
/// the lines around them and error messages all go through it; `--json` escapes by itself.
pub(crate) fn escape(text: &str) -> String {
    if !text.chars().any(is_unsafe) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// An instant as RFC 3339 in UTC with milliseconds: `2026-11-30T18:20:00.000Z`.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A length in milliseconds, short: `850ms`, `1.25s`, `2m03s`, `1h02m`, `3d04h`.
pub(crate) fn length_ms(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let text = match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.2}s", ms as f64 / 1_000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1_000 % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
        _ => format!("{}d{:02}h", ms / 86_400_000, ms / 3_600_000 % 24),
    };
    format!("{sign}{text}")
}

/// An optional cell: the value or `-`.
pub(crate) fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_trim_line_ends() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        t.row(vec!["b".into(), "multi\nline".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A          LONGER\nwide cell  x\nb          multi line\n"
        );
    }

    #[test]
    fn control_and_bidi_characters_are_escaped_in_cells() {
        let mut t = Table::new(&["A"]);
        t.row(vec![
            "\u{1b}]0;title\u{7}x\u{1b}[31m\u{9b}\u{202e}\u{2066}\u{200f}\u{7f}".into(),
        ]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "A\n\\u{1b}]0;title\\u{7}x\\u{1b}[31m\\u{9b}\\u{202e}\\u{2066}\\u{200f}\\u{7f}\n"
        );
        assert!(!text.chars().any(|c| is_unsafe(c) && c != '\n'), "{text:?}");
        assert_eq!(escape("plain ünïcode ✓"), "plain ünïcode ✓");
    }

    #[test]
    fn lengths_are_short() {
        assert_eq!(length_ms(850), "850ms");
        assert_eq!(length_ms(1_250), "1.25s");
        assert_eq!(length_ms(123_000), "2m03s");
        assert_eq!(length_ms(3_720_000), "1h02m");
        assert_eq!(length_ms(-2_000), "-2.00s");
    }
}
