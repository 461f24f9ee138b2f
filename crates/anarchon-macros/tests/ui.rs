//! Misuse of `#[anarchon::jobs]` is a compile error pointing at the attribute or its
//! literal: each file under `tests/ui` must fail to compile with the `.stderr` beside it.
//! Refresh the expected output with `TRYBUILD=overwrite` after a deliberate change.

#[test]
fn b35_misuse_of_the_job_attributes_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
