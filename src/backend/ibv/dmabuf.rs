//! DMA-BUF memory registration on an ibverbs device: `ibv_reg_dmabuf_mr`
//! (libibverbs 1.12, rdma-core v34 on; `rdma-sys` 0.3 has no binding, so
//! it is declared here).

use super::{errno, Pd};
use crate::ib::error::{Error, Feature, Result};
use crate::ib::mem::{Access, Buffer};
use crate::ib::mr::{MrInner, Registration};
use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_pd};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

extern "C" {
    // `/usr/include/infiniband/verbs.h`:
    // struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
    //                                  size_t length, uint64_t iova, int fd,
    //                                  int access);
    // (u64, usize = size_t, u64, i32 = int, i32 = int on every Linux ABI;
    // NULL with errno set on failure.)
    fn ibv_reg_dmabuf_mr(
        pd: *mut ibv_pd,
        offset: u64,
        length: usize,
        iova: u64,
        fd: libc::c_int,
        access: libc::c_int,
    ) -> *mut ibv_mr;
}

/// Deregisters a DMA-BUF MR when dropped (`ibv_dereg_mr`).
struct DmabufReg {
    raw: *mut ibv_mr,
    _pd: Arc<Pd>,
}

// SAFETY: an ibv_mr handle is only deregistered, once, on drop.
unsafe impl Send for DmabufReg {}
// SAFETY: `&DmabufReg` gives no access to the handle: only `drop` uses it.
unsafe impl Sync for DmabufReg {}
impl Registration for DmabufReg {}

impl Drop for DmabufReg {
    fn drop(&mut self) {
        // SAFETY: registered in `reg_dmabuf`, deregistered once, here.
        unsafe { ibv_dereg_mr(self.raw) };
    }
}

/// Registers bytes `[offset, offset + len)` of the dma-buf `fd` at
/// `[iova, iova + len)` (`ibv_reg_dmabuf_mr`; the caller checked access,
/// lengths and page offsets). The kernel takes its own reference to the
/// dma-buf, so `fd` may be closed afterwards. The `MrInner`'s buffer is the
/// IOVA range, with no CPU mapping (`ibv_mr.addr` is the offset, not an
/// address: libibverbs `verbs.c`).
///
/// Errors: [`Error::Unsupported`] ([`Feature::DmaBuf`]) for `EOPNOTSUPP`
/// (the provider or the kernel driver has no DMA-BUF registration: rxe in
/// Linux 6.1 has no `reg_user_mr_dmabuf`); any other errno as
/// [`Error::Verbs`] naming `ibv_reg_dmabuf_mr` (`EINVAL` for a range past
/// the dma-buf's end, or an fd that is not a dma-buf, `EBADF`).
pub(crate) fn reg_dmabuf(
    pd: &Arc<Pd>,
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    iova: u64,
    access: Access,
) -> Result<MrInner> {
    // SAFETY: a live PD; the kernel checks the descriptor and the range.
    let raw = unsafe {
        ibv_reg_dmabuf_mr(
            pd.raw,
            offset,
            len,
            iova,
            fd.as_raw_fd(),
            access.bits() as i32,
        )
    };
    if raw.is_null() {
        let errno = errno();
        if errno == libc::EOPNOTSUPP {
            return Err(Error::Unsupported {
                device: pd.ctx.name.clone(),
                feature: Feature::DmaBuf,
            });
        }
        return Err(Error::Verbs {
            call: "ibv_reg_dmabuf_mr",
            errno,
            detail: format!(
                " ({len} bytes at offset {offset:#x} of fd {}, iova {iova:#x}, access {access:?})",
                fd.as_raw_fd()
            ),
        });
    }
    // SAFETY: non-null ibv_mr returned by rdma-core.
    let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
    Ok(MrInner {
        reg: Box::new(DmabufReg {
            raw,
            _pd: pd.clone(),
        }),
        live: None,
        pd: 0,
        buf: Buffer::device(iova, len),
        lkey,
        rkey,
        access,
    })
}
