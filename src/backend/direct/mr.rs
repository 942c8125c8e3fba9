//! Memory registration on the sim: the `MrInner` of a buffer registered in
//! a sim PD, deregistered when dropped.

use crate::ib::error::Result;
use crate::ib::mem::{Access, Buffer};
use crate::ib::mr::{MrInner, Registration};
use mlx5_dv::sim;

/// Deregisters a sim MR when dropped.
struct SimReg {
    dev: sim::Device,
    lkey: u32,
}
impl Registration for SimReg {}
impl Drop for SimReg {
    fn drop(&mut self) {
        let _ = self.dev.dereg_mr(self.lkey);
    }
}

/// Registers `buf` on the sim in PD `pdn` (access flags as given: the
/// caller checked them); the `MrInner` returned owns both, and its field
/// order deregisters before it frees the buffer.
///
/// Errors: the sim's refusal ([`Error::Sim`]: no such PD, key space full).
pub(crate) fn reg_sim_mr(
    dev: &sim::Device,
    pdn: u32,
    buf: Buffer,
    access: Access,
    owned: bool,
) -> Result<MrInner> {
    // SAFETY: `buf` moves into the MrInner returned, whose field order drops
    // this registration (dereg) before the buffer: the memory stays valid
    // until `dereg_mr` returns for its key. `owned`: the MR becomes a
    // `LocalMr`, which moves into the QP with each WR naming it, so nothing
    // else touches it while one is outstanding (and no other registration
    // covers a LocalMr's memory: the crate's are separate allocations,
    // `Pd::register_raw`'s contract excludes it).
    let k = unsafe {
        if owned {
            dev.reg_mr_owned(pdn, buf.ptr(), buf.len(), access)
        } else {
            dev.reg_mr(pdn, buf.ptr(), buf.len(), access)
        }
    }?;
    Ok(MrInner {
        reg: Box::new(SimReg {
            dev: dev.clone(),
            lkey: k.lkey,
        }),
        live: None,
        pd: 0,
        buf,
        lkey: k.lkey,
        rkey: k.rkey,
        access,
    })
}
