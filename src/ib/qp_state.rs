//! The RC QP state machine's states (IB spec 10.3.1): [`QpState`], defined in
//! `mlx5_dv::verbs` (one type for the library and the sim).

pub use mlx5_dv::verbs::QpState;
