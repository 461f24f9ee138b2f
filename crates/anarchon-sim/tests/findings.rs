//! Violations the simulator found, each replayed from its shrunk configuration after its fix
//! (the core's own regression test, named after the seed, sits beside the core's tests).

use anarchon_sim::{Faults, SimConfig, run};

/// Long run, seed 3948 on 9 instances (`cargo xtask simulate --seed 3948 --nodes 9 --hours
/// 1`), shrunk to 5 instances, 9 faults and 4 jobs. A handler whose instance had fenced
/// itself (lease not renewed) ignored the cancellation and returned an error after every
/// instance had removed its job (the idle check removes every job); its instance handed the
/// run over (`run.rs`: an error after a cause that hands over is `Write::Release`), and with
/// the job registered nowhere no backup takes it: the record stays `running` with no owner
/// while the job is registered nowhere (by design: an instance may still have the job), and
/// registering the job again now continues it at once (the simulator's idle check does so
/// and fails if it is not continued).
#[test]
fn seed_3948_a_handed_over_run_of_a_removed_job_is_continued_when_the_job_returns() {
    let mut cfg = SimConfig::new(3948, 5, 1.0);
    cfg.faults = Faults::only([
        "lost-answer",
        "outage",
        "release-late",
        "crash",
        "freeze",
        "stop",
        "skew-beyond",
        "handler-error",
        "handler-ignores-cancel",
    ])
    .unwrap();
    cfg.jobs = Some(vec![1, 2, 4, 5]);
    run(&cfg);
}
