//! mlx5 (ConnectX) data-path formats and a raw ring driver.
//!
//! - [`prm`]: opcodes, flags and syndromes from the PRM / rdma-core `mlx5dv.h`.
//! - [`wqe`]: send WQE segments and the SQ writer (where a work request becomes ring bytes).
//! - [`cqe`]: CQE ownership and decoding (where a CQE is read).
//! - [`mini_cqe`]: CQE compression (basic layout): mini-CQEs, sessions, their expansion in place.
//! - [`doorbell`]: doorbell-record values.
//! - [`dv`]: `#[repr(C)]` `mlx5dv_qp` / `mlx5dv_cq`, and (feature `rdma-core`) libmlx5 FFI.
//! - [`driver`]: send queue and CQ poller over those descriptions (where the doorbell rings).
//! - [`mmio`]: the only code that touches doorbell records, UAR registers and CQE ownership bytes.
//! - [`trace`]: `RDMA_DIRECT_TRACE=1` prints every WQE posted and CQE polled, decoded.
//! - [`verbs`]: access flags, QP types and QP states (`verbs.h`), shared by the sim and rdma-direct.
//! - [`sim`] (feature `sim`): a software mlx5 device that executes the rings.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

pub mod cqe;
pub mod doorbell;
pub mod driver;
pub mod dv;
pub mod mini_cqe;
pub mod mmio;
pub mod prm;
pub mod ring;
pub mod shared;
pub mod trace;
pub mod verbs;
pub mod wqe;

#[cfg(feature = "sim")]
pub mod sim;
