//! `cargo xtask`: project tasks (test servers, tests, scenarios, benches).

fn main() -> anyhow::Result<()> {
    anyhow::bail!("no subcommands yet")
}
