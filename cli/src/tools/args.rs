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
}

impl From<ConnArg> for rdma_direct::QpType {
    fn from(c: ConnArg) -> Self {
        match c {
            ConnArg::Rc => rdma_direct::QpType::Rc,
            ConnArg::Uc => rdma_direct::QpType::Uc,
            ConnArg::Ud => rdma_direct::QpType::Ud,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum AtomicArg {
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
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
