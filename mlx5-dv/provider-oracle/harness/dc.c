/*
 * A DC initiator (DCI) of rdma-core's mlx5 provider, driven through the
 * `ibv_wr_*` / `mlx5dv_wr_*` builders: the only way libmlx5 writes a DC
 * WQE (`mlx5_send_wr_set_dc_addr`, providers/mlx5/qp.c).
 *
 * A fake `struct mlx5_qp` as verbs.c's `create_qp` leaves a DCI
 * (`IBV_QPT_DRIVER`, `dc_type = MLX5DV_DCTYPE_DCI`, in RTS), over rings the
 * caller owns, whose `ibv_qp_ex` / `mlx5dv_qp_ex` function pointers are
 * installed by the provider's own `mlx5_qp_fill_wr_pfns` (qp.c, called as
 * verbs.c calls it for a DCI with `send_ops_flags`). Its own context and
 * send CQ (the CQ only for `mlx5_wq_overflow`'s lock); nothing of
 * harness.c's objects. `src/dc.rs` mirrors the structs below: keep the
 * two in step.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "wqe.h"

/* One SGE, or one inline buffer (addr, length), as Rust passes it. */
struct po_dc_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* How the WR's data is given to the builders. */
enum po_dc_setter {
	PO_DC_SGE = 0,		/* ibv_wr_set_sge (num_sge == 1) */
	PO_DC_SGE_LIST = 1,	/* ibv_wr_set_sge_list */
	PO_DC_INLINE = 2,	/* ibv_wr_set_inline_data (num_sge == 1) */
	PO_DC_INLINE_LIST = 3,	/* ibv_wr_set_inline_data_list */
};

/* One DC work request (mirrored in src/dc.rs). */
struct po_dc_wr {
	uint64_t wr_id;
	const struct po_dc_sge *sg_list;
	const uint8_t *av;	/* the AH's 48-byte `struct mlx5_wqe_av` */
	uint64_t remote_addr;
	uint64_t compare_add;	/* CMP_SWP's compare, FETCH_ADD's add */
	uint64_t swap;
	uint64_t dc_key;
	uint32_t opcode;	/* enum ibv_wr_opcode: SEND .. ATOMIC_FETCH_AND_ADD */
	uint32_t wr_flags;	/* IBV_SEND_FENCE / _SIGNALED / _SOLICITED */
	uint32_t imm;		/* host order; given big-endian as verbs wants */
	uint32_t num_sge;
	uint32_t rkey;
	uint32_t dctn;
	uint32_t setter;	/* enum po_dc_setter */
	uint32_t addr_first;	/* 1: mlx5dv_wr_set_dc_addr before the data setter */
};

struct po_dci_cfg {
	void *sq_buf;		/* sq_wqe_cnt * 64 bytes */
	uint32_t *dbrec;	/* [1] SQ, big-endian */
	void *bf_reg;		/* two registers of bf_size bytes */
	uint32_t sq_wqe_cnt;
	uint32_t sq_cur_post;	/* the producer index before the first post */
	uint32_t sq_max_post;	/* WRs, as verbs.c computes: wq_size / max_wqe_size */
	uint32_t sq_max_gs;
	uint32_t max_inline;
	uint32_t qpn;
	uint32_t sq_sig_all;
	uint32_t prefer_bf;
	uint32_t bf_size;
	uint32_t pad;
};

struct po_dci {
	struct mlx5_qp qp;
	struct mlx5_bf bf;
	struct mlx5_context *mctx;
	struct mlx5_cq *scq;
};

/* The send ops a DCI is created with: every one the oracle drives. */
#define PO_DCI_SEND_OPS                                                     \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |               \
	 IBV_QP_EX_WITH_SEND_WITH_INV |                                     \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |   \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |     \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

void po_dci_free(struct po_dci *d)
{
	if (!d)
		return;
	free(d->qp.sq.wrid);
	free(d->qp.sq.wqe_head);
	free(d->qp.sq.wr_data);
	free(d->scq);
	free(d->mctx);
	free(d);
}

/*
 * A DCI in RTS over the caller's ring, doorbell record and BlueFlame
 * registers; NULL if the geometry is not one (or mlx5_qp_fill_wr_pfns
 * refuses the DCI: it should not).
 */
struct po_dci *po_dci_new(const struct po_dci_cfg *cfg)
{
	struct ibv_qp_init_attr_ex attr = {};
	struct mlx5dv_qp_init_attr dv_attr = {};
	struct po_dci *d;
	struct mlx5_qp *qp;
	uint32_t n = cfg->sq_wqe_cnt;

	if (!n || (n & (n - 1)))
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->mctx = calloc(1, sizeof(*d->mctx));
	d->scq = calloc(1, sizeof(*d->scq));
	qp = &d->qp;
	qp->sq.wrid = calloc(n, sizeof(*qp->sq.wrid));
	qp->sq.wqe_head = calloc(n, sizeof(*qp->sq.wqe_head));
	qp->sq.wr_data = calloc(n, sizeof(*qp->sq.wr_data));
	if (!d->mctx || !d->scq || !qp->sq.wrid || !qp->sq.wqe_head ||
	    !qp->sq.wr_data)
		goto fail;
	d->mctx->prefer_bf = cfg->prefer_bf;
	d->scq->verbs_cq.cq.context = &d->mctx->ibv_ctx.context;

	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = cfg->qpn;
	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->verbs_qp.qp.context = &d->mctx->ibv_ctx.context;
	qp->verbs_qp.qp.qp_num = cfg->qpn;
	qp->verbs_qp.qp.qp_type = IBV_QPT_DRIVER;
	qp->verbs_qp.qp.state = IBV_QPS_RTS;
	qp->verbs_qp.qp.send_cq = &d->scq->verbs_cq.cq;
	qp->verbs_qp.comp_mask = VERBS_QP_EX;
	qp->dc_type = MLX5DV_DCTYPE_DCI;
	qp->buf.buf = cfg->sq_buf;
	qp->sq_start = cfg->sq_buf;
	qp->db = (__be32 *)cfg->dbrec;
	qp->max_inline_data = cfg->max_inline;
	qp->atomics_enabled = 1;
	qp->sq_signal_bits = cfg->sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;

	d->bf.reg = cfg->bf_reg;
	d->bf.buf_size = cfg->bf_size;
	d->bf.uuarn = 1;
	qp->bf = &d->bf;

	qp->sq.wqe_cnt = n;
	qp->sq.wqe_shift = MLX5_SEND_WQE_SHIFT;
	qp->sq.max_post = cfg->sq_max_post;
	qp->sq.max_gs = cfg->sq_max_gs;
	qp->sq.qp_state_max_gs = cfg->sq_max_gs;
	qp->sq.qend = (char *)cfg->sq_buf + ((size_t)n << MLX5_SEND_WQE_SHIFT);
	qp->sq.cur_post = cfg->sq_cur_post;

	/* As verbs.c's create_qp for a DCI created with send_ops_flags. */
	attr.qp_type = IBV_QPT_DRIVER;
	attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	attr.send_ops_flags = PO_DCI_SEND_OPS;
	dv_attr.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
	dv_attr.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
	if (mlx5_qp_fill_wr_pfns(qp, &attr, &dv_attr))
		goto fail;
	return d;
fail:
	po_dci_free(d);
	return NULL;
}

/* The builder calls of one WR, between ibv_wr_start and ibv_wr_complete. */
static int build_one(struct po_dci *d, const struct po_dc_wr *w,
		     struct mlx5_ah *ah)
{
	struct ibv_qp_ex *qpx = &d->qp.verbs_qp.qp_ex;
	struct mlx5dv_qp_ex *dvqp = &d->qp.dv_qp;
	struct ibv_sge sges[64];
	struct ibv_data_buf bufs[64];
	uint32_t j;

	if (w->num_sge > 64)
		return EINVAL;
	memset(ah, 0, sizeof(*ah));
	memcpy(&ah->av, w->av, sizeof(ah->av));
	qpx->wr_id = w->wr_id;
	qpx->wr_flags = w->wr_flags;
	switch (w->opcode) {
	case IBV_WR_SEND:
		ibv_wr_send(qpx);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(qpx, htobe32(w->imm));
		break;
	case IBV_WR_SEND_WITH_INV:
		/* `imm` is the invalidate_rkey, host order. */
		ibv_wr_send_inv(qpx, w->imm);
		break;
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(qpx, w->rkey, w->remote_addr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(qpx, w->rkey, w->remote_addr,
				      htobe32(w->imm));
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(qpx, w->rkey, w->remote_addr);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(qpx, w->rkey, w->remote_addr,
				      w->compare_add, w->swap);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(qpx, w->rkey, w->remote_addr,
					w->compare_add);
		break;
	default:
		return EINVAL;
	}
	if (w->addr_first)
		mlx5dv_wr_set_dc_addr(dvqp, &ah->ibv_ah, w->dctn, w->dc_key);
	for (j = 0; j < w->num_sge; j++) {
		sges[j].addr = w->sg_list[j].addr;
		sges[j].length = w->sg_list[j].length;
		sges[j].lkey = w->sg_list[j].lkey;
		bufs[j].addr = (void *)(uintptr_t)w->sg_list[j].addr;
		bufs[j].length = w->sg_list[j].length;
	}
	switch (w->setter) {
	case PO_DC_SGE:
		if (w->num_sge != 1)
			return EINVAL;
		ibv_wr_set_sge(qpx, sges[0].lkey, sges[0].addr, sges[0].length);
		break;
	case PO_DC_SGE_LIST:
		ibv_wr_set_sge_list(qpx, w->num_sge, sges);
		break;
	case PO_DC_INLINE:
		if (w->num_sge != 1)
			return EINVAL;
		ibv_wr_set_inline_data(qpx, bufs[0].addr, bufs[0].length);
		break;
	case PO_DC_INLINE_LIST:
		ibv_wr_set_inline_data_list(qpx, w->num_sge, bufs);
		break;
	default:
		return EINVAL;
	}
	if (!w->addr_first)
		mlx5dv_wr_set_dc_addr(dvqp, &ah->ibv_ah, w->dctn, w->dc_key);
	return 0;
}

/*
 * Posts `n` WRs (at most 64) as one ibv_wr_start .. ibv_wr_complete
 * batch: returns what ibv_wr_complete returns (0, or the errno a builder
 * set: then nothing of the batch counts, the producer index rolls back,
 * no doorbell; the bytes written stay in the ring). EINVAL before the
 * batch starts if a WR is malformed for the harness.
 */
int po_dci_post(struct po_dci *d, const struct po_dc_wr *w, uint32_t n)
{
	struct ibv_qp_ex *qpx = &d->qp.verbs_qp.qp_ex;
	/* Each WR's AH (the builder copies the AV when called). */
	struct mlx5_ah ahs[64];
	uint32_t i;

	if (n == 0 || n > 64)
		return EINVAL;
	for (i = 0; i < n; i++)
		if (w[i].num_sge > 64 || !w[i].av ||
		    (w[i].num_sge && !w[i].sg_list))
			return EINVAL;
	ibv_wr_start(qpx);
	for (i = 0; i < n; i++)
		if (build_one(d, &w[i], &ahs[i])) {
			ibv_wr_abort(qpx);
			return EINVAL;
		}
	return ibv_wr_complete(qpx);
}

/* The producer index, the SQ's WR head and the BlueFlame offset. */
void po_dci_state(const struct po_dci *d, uint32_t *cur_post, uint32_t *head,
		  uint32_t *bf_offset)
{
	*cur_post = d->qp.sq.cur_post;
	*head = d->qp.sq.head;
	*bf_offset = d->bf.offset;
}

/* The wr_id the SQ holds for WQEBB `i` (what a completion would return). */
uint64_t po_dci_wrid(const struct po_dci *d, uint32_t i)
{
	return d->qp.sq.wrid[i & (d->qp.sq.wqe_cnt - 1)];
}

/* The struct sizes, so that Rust can check its mirrors. */
uint32_t po_dc_abi_size(int which)
{
	switch (which) {
	case 0: return sizeof(struct po_dc_sge);
	case 1: return sizeof(struct po_dc_wr);
	case 2: return sizeof(struct po_dci_cfg);
	default: return 0;
	}
}
