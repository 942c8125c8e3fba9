fn main() {
    println!("cargo:rerun-if-changed=oracle.c");
    println!("cargo:rerun-if-changed=driver.c");
    cc::Build::new()
        .file("oracle.c")
        .file("driver.c")
        .warnings(false)
        .compile("mlx5dv_oracle");
}
