//! The scheduler runtime: registration, `start`/`stop`, and the instance that turns the
//! pure parts (slot math, options) and a store into runs. [B-11..B-21, B-30..B-39]
//!
//! One instance is a pure [`core`] (every decision: slots, claims, owned runs, backups,
//! catch-up, batching, bounds; inputs with the time passed in, effects out) inside a tokio
//! shell, the `driver` task, which owns the timers, the store calls (short tasks bounded by
//! `store_timeout`), the handler tasks and the channels, so a hung connection never stops
//! the loop; a watchdog thread reports a loop that stops turning.
//!
//! The files, from the bottom up: `mode` (the type markers), `clock`, `convert` (what the
//! builders take), `shared` (the state the handles and the driver share), `builder` and
//! `job_builder`, then `handle` (the public [`Scheduler`]) on top. The core (`core/`, with the
//! run machines `run` and `watch`) uses neither; the driver (with `exec`, `handler_task`,
//! `wake`, `watchdog`, `telemetry`) uses `shared`, `clock` and the core, never the handle;
//! the handle starts it.

mod builder;
mod clock;
mod convert;
mod core;
#[cfg(feature = "sim")]
pub(crate) use self::core::sim;
mod driver;
mod exec;
mod handle;
mod handler_task;
mod job_builder;
mod mode;
mod run;
mod shared;
mod telemetry;
mod wake;
mod watch;
mod watchdog;

pub use builder::SchedulerBuilder;
pub use clock::Clock;
pub use convert::{IntoAt, IntoInterval, IntoTimezone};
pub use handle::{Health, JobInfo, Scheduler};
pub use job_builder::JobBuilder;
pub use mode::{ClaimOnly, Leased, Mode, kind};
// The driver's names, at the paths it has always used (`super::Shared` ...).
pub(crate) use shared::{Backend, Command, DriverState, JobDef, Shared, driver_ended};

#[cfg(test)]
pub(crate) mod transition_tables {
    /// The table between `<!-- begin NAME -->` and `<!-- end NAME -->` in
    /// docs/architecture.md.
    fn documented(name: &str) -> Option<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
        let doc = std::fs::read_to_string(path).expect("docs/architecture.md");
        let begin = format!("<!-- begin {name} -->\n");
        let end = format!("<!-- end {name} -->");
        let from = doc.find(&begin)? + begin.len();
        let to = doc[from..].find(&end)? + from;
        Some(doc[from..to].to_owned())
    }

    /// Fails when the table differs from `rendered`; with `UPDATE_EXPECT=1` writes
    /// `rendered` into docs/architecture.md instead (the bless).
    pub(crate) fn check(name: &str, rendered: String) {
        if documented(name).as_ref() == Some(&rendered) {
            return;
        }
        if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
            let doc = std::fs::read_to_string(path).expect("docs/architecture.md");
            let begin = format!("<!-- begin {name} -->\n");
            let end = format!("<!-- end {name} -->");
            let from = doc
                .find(&begin)
                .map(|i| i + begin.len())
                .unwrap_or_else(|| {
                    panic!("docs/architecture.md has no `{begin}` marker: add the markers first")
                });
            let to = doc[from..].find(&end).expect("the end marker") + from;
            let updated = format!("{}{rendered}{}", &doc[..from], &doc[to..]);
            std::fs::write(path, updated).expect("write docs/architecture.md");
            return;
        }
        panic!(
            "docs/architecture.md's {name} table differs from the machine; bless it with \
             `UPDATE_EXPECT=1 cargo test -p anarchon-core --lib transition` after checking \
             the change. The machine says:\n{rendered}"
        );
    }

    #[test]
    fn every_owner_transition_is_as_documented() {
        check("owner-transitions", super::run::table::render());
    }

    #[test]
    fn every_claim_outcome_is_as_documented() {
        check("claim-outcomes", super::core::table::render());
    }

    #[test]
    fn every_backup_transition_is_as_documented() {
        check("backup-transitions", super::watch::table::render());
    }
}
