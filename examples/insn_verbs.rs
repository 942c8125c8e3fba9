//! The public API's post and poll on the verbs backend, run `N` times on a
//! verbs device (rxe0 in the soft-RoCE guest) for instruction counts under
//! callgrind (`scripts/insn-count-verbs`, which counts only inside the
//! `#[inline(never)]` entry points below with `--toggle-collect`: user
//! space only, rxe's own work runs in the kernel). Not an example of use:
//! a measurement harness, the counterpart of `scripts/insn-verbs.c`.
//!
//! `insn_verbs <N> [DEVICE]` (DEVICE: rxe0 unless given): on a loopback RC
//! pair of one device, each iteration arms the CQ (`Qp::arm_cq`), posts one
//! signaled 1-SGE RDMA WRITE of 64 bytes through `api_verbs_post`
//! (`Qp::post_send`), sleeps on the completion channel
//! (`Qp::wait_cq_event`: no polling), then polls once through
//! `api_verbs_poll` (`Qp::poll` into a 1-entry slice), which must return
//! exactly that WRITE's successful completion. The QP posts through the
//! extended verbs (`ibv_wr_*`, `ibv_start_poll`) unless
//! `RDMA_DIRECT_VERBS_OLD_POST=1` forces `ibv_post_send` / `ibv_poll_cq`;
//! the program checks it got the path asked for. Exits 1 with a message on
//! any failure.

use rdma_direct::testing::QpHooks;
use rdma_direct::{Access, Completion, Context, Qp, QpConfig, RemoteAddr, SendFlags, SendWr, Sge};
use std::time::Duration;

#[no_mangle]
#[inline(never)]
pub fn api_verbs_post(qp: &mut Qp, wrs: &[SendWr<'_>]) -> rdma_direct::Result<()> {
    qp.post_send(wrs)
}

#[no_mangle]
#[inline(never)]
pub fn api_verbs_poll(qp: &mut Qp, out: &mut [Completion]) -> rdma_direct::Result<usize> {
    qp.poll(out)
}

fn fail(msg: String) -> ! {
    eprintln!("insn_verbs: {msg}");
    std::process::exit(1);
}

fn main() -> rdma_direct::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(n) = args.get(1).and_then(|n| n.parse::<u64>().ok()) else {
        eprintln!("usage: insn_verbs <N> [DEVICE]");
        std::process::exit(2);
    };
    let dev = args.get(2).map_or("rxe0", String::as_str);
    let old = std::env::var("RDMA_DIRECT_VERBS_OLD_POST").is_ok_and(|v| v == "1");
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    let cfg = QpConfig {
        max_send_wr: 64,
        ..QpConfig::default()
    };
    let (mut a, _b) = pd.create_connected_pair(&cfg)?;
    if a.verbs_extended() != Some((!old, !old)) {
        fail(format!(
            "{dev}: the QP's path is {:?} (extended post, extended poll), not the {} calls asked for",
            a.verbs_extended(),
            if old { "old" } else { "extended" }
        ));
    }
    let src = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let dst = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    src.write(0, &[0x5a; 4096])?;
    let mut out = [Completion::default(); 1];
    for i in 0..n {
        let off = (i % 64) as usize * 64;
        let sge = [Sge::new(&src, off, 64)?];
        let to = RemoteAddr {
            addr: dst.addr() + off as u64,
            rkey: dst.rkey(),
        };
        let wr = [SendWr::rdma_write(i, &sge, to).with_flags(SendFlags::SIGNALED)];
        a.arm_cq(false)?;
        api_verbs_post(&mut a, &wr)?;
        if !a.wait_cq_event(Duration::from_secs(30))? {
            fail(format!("iteration {i}: no completion event in 30 s"));
        }
        let k = api_verbs_poll(&mut a, &mut out)?;
        if k != 1 || out[0].wr_id != i || !out[0].status.is_ok() {
            fail(format!(
                "iteration {i}: the poll after the event returned {k} ({:?}), not one successful completion",
                out[0]
            ));
        }
        out[0] = Completion::default();
    }
    let mut got = vec![0u8; 4096.min(n as usize * 64)];
    dst.read(0, &mut got)?;
    if got.iter().any(|&b| b != 0x5a) {
        fail("the WRITEs did not land".into());
    }
    println!(
        "insn_verbs {}: {n} WRITEs posted and polled on {dev}",
        if old { "old" } else { "ex" }
    );
    Ok(())
}
