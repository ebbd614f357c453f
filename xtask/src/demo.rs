//! `cargo xtask demo`: the fabric demo of issue 7 (spines and leaves in network namespaces,
//! lqd on every node, traffic shifting with link quality). Not built yet: this module is
//! where it goes, behind `demo()`.

use anyhow::Result;

/// Runs the demo.
pub fn demo() -> Result<()> {
    println!("==> demo: the fabric demo (issue 7) is not built yet; nothing to run.");
    println!("    Try `cargo xtask test` for the privileged network-namespace tests instead.");
    Ok(())
}
