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

/// Long run, seed 21591 on 9 instances (`cargo xtask simulate --seed 21591 --nodes 9 --hours
/// 1`), shrunk to 7 instances, 4 faults, 4 jobs and 17 s. The first slot of an `every 6s`
/// job was claimed by one instance only (its clock was behind: the others, started on the
/// slot, scheduled from the next one); it crashed 8 s later, and its run's lease expired
/// with nobody watching it, although every other instance swept the job each second and the
/// sweep listed the run. A sweep now adopts the unfinished runs it lists that the instance
/// did not know of (`backup.rs`, `watched`), so the run is continued within the bound.
#[test]
fn seed_21591_a_run_only_its_crashed_owner_knew_is_taken_over_through_the_sweep() {
    let mut cfg = SimConfig::new(21591, 7, 0.004722222222222222);
    cfg.faults = Faults::only(["crash", "skew-within", "skew-beyond", "handler-long"]).unwrap();
    cfg.jobs = Some(vec![1, 3, 4, 5]);
    run(&cfg);
}

/// Long run, seed 707050 on 9 instances (`cargo xtask simulate --seed 707050 --nodes 9 --hours
/// 1`), shrunk to 3 instances, 3 faults, 1 job and 10 s. A `*/15 s` cron slot came due between
/// the instances' starts (clocks apart): the instances that started after it did not claim it
/// (no catch-up) and did not watch it; the one that started before it claimed it and crashed,
/// and nobody continued the run before the job's next slot. An instance now backs up the
/// newest slot due before it scheduled a job while another may still claim it (`slots.rs`,
/// `back_up_unclaimed_slot`).
#[test]
fn seed_707050_a_slot_due_before_a_start_is_backed_up() {
    let mut cfg = SimConfig::new(707050, 3, 0.002777777777777778);
    cfg.faults = Faults::only(["crash", "skew-within", "skew-beyond"]).unwrap();
    cfg.jobs = Some(vec![2]);
    run(&cfg);
}

/// Long run, seed 908536 on 9 instances (`cargo xtask simulate --seed 908536 --nodes 9
/// --hours 1`), shrunk to 1 instance, one fault (handlers longer than the lease) and no job
/// of the mix. A claim was in flight when the idle check removed every job; it won after the
/// removal and the core started the handler of a job it no longer had, which heartbeated
/// through the ten idle minutes. A claim won after its job's removal is now handed straight
/// over (`slots.rs`, `claimed`), and the idle check waits for calls in flight to settle.
#[test]
fn seed_908536_a_claim_won_after_its_job_was_removed_is_handed_over() {
    let mut cfg = SimConfig::new(908536, 1, 1.0);
    cfg.faults = Faults::only(["handler-long"]).unwrap();
    cfg.jobs = Some(vec![0]);
    run(&cfg);
}

/// Long run, seed 6006644 on 9 instances (`cargo xtask simulate --seed 6006644 --nodes 9
/// --hours 1`; shrinking dropped only three fault kinds). Not a core bug: the simulator's
/// own liveness check was wrong. A store outage began 8 s before the end of the faults; a
/// lease expired during it; the end of the faults healed the store without marking the store
/// disturbed, so the check measured the lease's bound from the outage's start and called a
/// takeover due 1 s after the store came back late. The end of the faults now counts as the
/// store's last disturbance, as an outage's own end does.
#[test]
fn seed_6006644_a_lease_expired_in_an_outage_cut_short_by_the_end_is_judged_from_the_end() {
    let mut cfg = SimConfig::new(6006644, 9, 1.0);
    cfg.faults = Faults::only([
        "slow-call",
        "lost-request",
        "lost-answer",
        "outage",
        "release-lost",
        "release-late",
        "crash",
        "freeze",
        "stop",
        "skew-within",
        "skew-beyond",
        "handler-ignores-cancel",
        "handler-long",
    ])
    .unwrap();
    run(&cfg);
}
