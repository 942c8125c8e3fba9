//! Layer 1: the types every other layer shares: work requests, completions,
//! keys, access flags and registered memory, errors, QP states and
//! attributes, configurations, device facts. Nothing here names a backend
//! or a handle of the front end.

pub mod ah;
pub mod completion;
pub mod config;
pub mod device;
pub mod error;
pub mod event;
pub mod keys;
pub mod mem;
pub mod mr;
pub mod mw;
pub mod progress;
pub mod qp_attr;
pub mod qp_state;
pub mod wr;
