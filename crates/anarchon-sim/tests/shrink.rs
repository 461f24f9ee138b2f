//! The shrinker, proved on a bug planted on purpose: the harness drops the self-fencing of an
//! instance that cannot renew its leases (`Planted::NoSelfFencing`), the simulator catches a
//! second handler beside one that was never told, and the shrinker finds a smaller run
//! (fewer instances, faults, jobs, a shorter horizon) that still breaks that invariant and
//! passes without the bug.

use std::panic::{AssertUnwindSafe, catch_unwind};

use anarchon_sim::{Faults, Planted, SimConfig, run, shrink};

const INVARIANT: &str = "two handlers of one slot at once";

fn fails(cfg: &SimConfig) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| run(cfg)))
        .err()
        .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
}

#[test]
fn a_planted_bug_shrinks_to_a_smaller_run_that_still_fails() {
    let template = SimConfig {
        planted: Some(Planted::NoSelfFencing),
        ..SimConfig::new(1, 5, 0.5)
    };
    // The first seed the planted bug breaks (each seed passes without it: the CI seeds).
    let (failing, message) = (1..=20)
        .find_map(|seed| {
            let cfg = SimConfig {
                seed,
                ..template.clone()
            };
            fails(&cfg).map(|m| (cfg, m))
        })
        .expect("the planted bug breaks one of seeds 1-20");
    assert!(message.contains(INVARIANT), "{message}");

    let s = shrink(&failing, 300).expect("the failing seed fails again");
    let (big, small) = (&failing, &s.config);
    println!(
        "seed {}: {} -> {} in {} runs\n{}",
        big.seed,
        anarchon_sim::command_of(big),
        s.command(),
        s.tries,
        s.as_test()
    );
    assert_eq!(s.failure.invariant, INVARIANT);
    assert!(small.nodes < big.nodes, "{small:?}");
    assert!(small.hours < big.hours, "{small:?}");
    assert!(
        small.faults.on().len() < big.faults.on().len(),
        "{:?}",
        small.faults.on()
    );
    assert!(
        small
            .jobs
            .as_ref()
            .is_some_and(|j| j.len() < anarchon_sim::jobs_drawn(big.seed)),
        "{:?}",
        small.jobs
    );
    // The timeline of the slot, with detail (every input and effect).
    assert!(
        s.failure.message.contains("StartHandler"),
        "{}",
        s.failure.message
    );

    // The shrunk configuration replays: it fails the same way every time...
    let again = fails(small).expect("the shrunk run fails");
    assert!(again.contains(INVARIANT), "{again}");
    assert_eq!(fails(small), Some(again));
    // ...and only through the planted bug.
    let fixed = SimConfig {
        planted: None,
        ..small.clone()
    };
    assert_eq!(fails(&fixed), None, "the shrunk run fails without the bug");
    // Its command line names what differs from the defaults.
    let command = s.command();
    assert!(
        command.starts_with(&format!(
            "cargo xtask simulate --seed {} --nodes {} --hours ",
            small.seed, small.nodes
        )),
        "{command}"
    );
    assert!(
        command.contains(" --faults ") && command.contains(" --jobs "),
        "{command}"
    );
    assert!(
        command.ends_with(" --plant-bug no-self-fencing"),
        "{command}"
    );
    assert_ne!(small.faults, Faults::default());
}

/// The shrinker cuts the horizon just past a violation: a run's first hours must not depend
/// on how many follow (the seed's `at` jobs fall in its first hour whatever the horizon).
#[test]
fn a_horizon_cut_past_a_violation_keeps_it_as_it_was() {
    let long = SimConfig {
        planted: Some(Planted::NoSelfFencing),
        ..SimConfig::new(5, 5, 0.5)
    };
    let first = |m: String| m.lines().next().unwrap_or_default().to_owned();
    let whole = first(fails(&long).expect("seed 5 breaks with the planted bug"));
    let at: f64 = anarchon_sim::Failure::parse(&whole)
        .at_secs
        .expect("a violation's time");
    let cut = SimConfig {
        hours: (at.ceil() + 1.0) / 3_600.0,
        ..long.clone()
    };
    assert!(cut.hours < long.hours, "{at}");
    assert_eq!(first(fails(&cut).expect("the cut run breaks")), whole);
}

/// The test the shrinker printed for the planted bug above, pasted as it was: it compiles and
/// breaks the same invariant.
#[test]
#[should_panic(expected = "two handlers of one slot at once")]
fn seed_2_shrunk() {
    let mut cfg = SimConfig::new(2, 2, 0.1);
    cfg.faults = Faults::only(["outage", "skew-beyond"]).unwrap();
    cfg.jobs = Some(vec![0, 1]);
    cfg.planted = Some(Planted::NoSelfFencing);
    run(&cfg);
}
