//! The CLI's value enums (clap `ValueEnum`) and what they stand for in
//! the library: `-c` (connection type), `-A` (atomic), `--backend`.

use clap::ValueEnum;

/// perftest's `-c`.
#[derive(Clone, Copy, ValueEnum)]
pub enum ConnArg {
    #[value(name = "RC")]
    Rc,
    #[value(name = "UC")]
    Uc,
    #[value(name = "UD")]
    Ud,
    /// Dynamically connected (mlx5): DCIs post to a DCT on an SRQ.
    #[value(name = "DC")]
    Dc,
}

impl From<ConnArg> for rdma_direct::QpType {
    fn from(c: ConnArg) -> Self {
        match c {
            ConnArg::Rc => rdma_direct::QpType::Rc,
            ConnArg::Uc => rdma_direct::QpType::Uc,
            ConnArg::Ud => rdma_direct::QpType::Ud,
            // A run's `-c DC` is kept as the initiator's type; the bench
            // makes the DCTs it needs (`bench::transport`).
            ConnArg::Dc => rdma_direct::QpType::Dci,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum AtomicArg {
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// Ours: a masked (extended) compare-and-swap, direct path only.
    #[value(name = "MASKED_CMP_AND_SWAP")]
    MaskedCmpAndSwap,
    /// Ours: a masked (extended) fetch-and-add, direct path only.
    #[value(name = "MASKED_FETCH_AND_ADD")]
    MaskedFetchAndAdd,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum BackendArg {
    Auto,
    Direct,
    Verbs,
}

impl From<BackendArg> for rdma_direct::Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Auto => rdma_direct::Backend::Auto,
            BackendArg::Direct => rdma_direct::Backend::Direct,
            BackendArg::Verbs => rdma_direct::Backend::Verbs,
        }
    }
}
