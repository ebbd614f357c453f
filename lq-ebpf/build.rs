use which::which;

/// Building this crate has an undeclared dependency on the `bpf-linker` binary. This would
/// be better expressed by [artifact-dependencies][bindeps] but issues such as
/// <https://github.com/rust-lang/cargo/issues/12385> make their use impractical for the time
/// being. `cargo xtask setup` builds it; this makes cargo rebuild us when it changes.
///
/// [bindeps]: https://doc.rust-lang.org/nightly/cargo/reference/unstable.html#artifact-dependencies
fn main() {
    match which("bpf-linker") {
        Ok(bpf_linker) => println!("cargo:rerun-if-changed={}", bpf_linker.display()),
        Err(_) => println!("cargo:warning=bpf-linker not found on PATH: run `cargo xtask setup`"),
    }
}
