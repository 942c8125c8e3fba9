//! Links the oracle that `scripts/provider-oracle` built, when
//! `RDMA_DIRECT_PROVIDER_ORACLE` names its folder; downloads and compiles
//! nothing. Without it the crate builds with `cfg(provider_oracle)` unset
//! and every test says loudly that it skips (`src/lib.rs` `oracle_or_skip`).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=RDMA_DIRECT_PROVIDER_ORACLE");
    println!("cargo::rustc-check-cfg=cfg(provider_oracle)");
    let Some(dir) = std::env::var_os("RDMA_DIRECT_PROVIDER_ORACLE") else {
        return;
    };
    let dir = Path::new(&dir);
    let lib = dir.join("libmlx5_provider_oracle.a");
    println!("cargo:rerun-if-changed={}", lib.display());
    if !lib.is_file() {
        println!(
            "cargo:warning=RDMA_DIRECT_PROVIDER_ORACLE={} holds no libmlx5_provider_oracle.a \
             (run scripts/provider-oracle): the oracle tests will skip",
            dir.display()
        );
        return;
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static=mlx5_provider_oracle");
    println!("cargo:rustc-cfg=provider_oracle");
}
