//! The Lua scripts, one per operation: each is the shared prelude plus its body, hashed once
//! and called by SHA (`EVALSHA`, reloaded on `NOSCRIPT`).

use std::sync::LazyLock;

use fred::types::scripts::Script;

macro_rules! script {
    ($name:ident, $($file:literal),+) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::from_lua(concat!(include_str!("lua/prelude.lua"), $(include_str!($file)),+))
        });
    };
}

script!(CLAIM, "lua/prune.lua", "lua/claim.lua", "lua/claim_one.lua");
script!(
    CLAIM_MANY,
    "lua/prune.lua",
    "lua/claim.lua",
    "lua/claim_many.lua"
);
script!(HEARTBEAT, "lua/heartbeat.lua");
script!(
    FINISH,
    "lua/prune.lua",
    "lua/finish.lua",
    "lua/finish_one.lua"
);
script!(
    FINISH_MANY,
    "lua/prune.lua",
    "lua/finish.lua",
    "lua/finish_many.lua"
);
script!(RELEASE, "lua/release.lua");
script!(TAKEOVER, "lua/takeover.lua");
script!(RUNS, "lua/runs.lua");
script!(UNFINISHED, "lua/unfinished.lua");
script!(HISTORY, "lua/history.lua");
script!(PUT_ROW, "lua/prune.lua", "lua/put_row.lua");
script!(SLOT_CLAIM, "lua/slot_claim.lua");

/// Every script the lease strategy uses (loaded once when the store connects).
pub(crate) fn lease_scripts() -> [&'static Script; 11] {
    [
        &CLAIM,
        &CLAIM_MANY,
        &HEARTBEAT,
        &FINISH,
        &FINISH_MANY,
        &RELEASE,
        &TAKEOVER,
        &RUNS,
        &UNFINISHED,
        &HISTORY,
        &PUT_ROW,
    ]
}

/// Every script the claim-only strategies use.
pub(crate) fn claim_scripts() -> [&'static Script; 3] {
    [&HISTORY, &PUT_ROW, &SLOT_CLAIM]
}

#[cfg(test)]
mod tests {
    use anarchon_core::history::MAX_PRUNE_PERIOD;

    /// `claim.lua` prunes on one fence in 16 at the residue the store sends
    /// (`pruning_fence_residue(job, MAX_PRUNE_PERIOD)`): the literal in the script must be
    /// that period, or the residues the store computes would miss (never prune) or repeat.
    #[test]
    fn the_claim_script_prunes_on_the_period_the_store_computes_its_phase_for() {
        let script = include_str!("lua/claim.lua");
        let rule = format!("if fence % {MAX_PRUNE_PERIOD} == tonumber(ARGV[a + 10]) then");
        assert!(script.contains(&rule), "claim.lua no longer holds `{rule}`");
        assert_eq!(script.matches("fence %").count(), 1, "one pruning rule");
    }
}
