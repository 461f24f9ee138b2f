//! Logs a test reads back: the process's global `tracing` subscriber writing into a buffer.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything the process logs from [`CapturedLogs::install`] on, every level, as text.
///
/// The subscriber is global, so threads the test does not own (a store's connection or
/// checkpoint thread, a client's background tasks) are captured too; a test binary can
/// install it once.
///
/// ```no_run
/// use anarchon_test_support::CapturedLogs;
///
/// let logs = CapturedLogs::install();
/// tracing::info!("hello");
/// assert!(logs.text().contains("hello"));
/// ```
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Installs a TRACE subscriber (no colours) that writes into the returned buffer; panics
    /// when the process already has a global subscriber.
    pub fn install() -> CapturedLogs {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init()
            .expect("the only subscriber of this test binary");
        logs
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
