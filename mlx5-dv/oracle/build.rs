fn main() {
    println!("cargo:rerun-if-changed=oracle.c");
    cc::Build::new()
        .file("oracle.c")
        .warnings(false)
        .compile("mlx5dv_oracle");
}
