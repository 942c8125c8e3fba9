fn main() {
    println!("cargo:rerun-if-changed=oracle.c");
    println!("cargo:rerun-if-changed=driver.c");
    println!("cargo:rerun-if-changed=driver_ud_srq.c");
    println!("cargo:rerun-if-changed=driver_recv.c");
    println!("cargo:rerun-if-changed=driver_dc.c");
    cc::Build::new()
        .file("oracle.c")
        .file("driver.c")
        .file("driver_ud_srq.c")
        .file("driver_recv.c")
        .file("driver_dc.c")
        .warnings(false)
        .compile("mlx5dv_oracle");
}
