/*
 * rdma-core's mlx5 provider data path, driven over memory we own.
 *
 * rdma-core's `providers/mlx5/{qp,cq,srq}.c`, compiled unchanged by
 * scripts/provider-oracle, are linked with this file. Here are the fake
 * provider objects those files read and write (a context, QPs, an SRQ, CQs,
 * a BlueFlame register), set up from fields the caller gives, and flat entry
 * points that Rust calls through FFI (`src/lib.rs` mirrors every struct
 * below; keep the two in step).
 *
 * Which fields the provider reads, and why each is set as it is:
 * ../shared/reference/provider-oracle.md and docs/prm.md ("The provider as
 * the oracle"). Everything not set here is zero, as calloc leaves it: then
 * `shut_up_bf` is 0, `dbg_fp` NULL and every spinlock single-threaded.
 *
 * The ibv_wr_* / mlx5dv_wr_* builders are dc.c's: a DCI of its own (its
 * `ibv_qp_ex` is the `struct mlx5_qp`'s, as here). Memory-window WRs go
 * through `mlx5_post_send` (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV: po_post_send_mw)
 * and `mlx5_bind_mw` (po_bind_mw), over a fake `ibv_mw` and `mlx5_mr`.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "wqe.h"

/* The two entry points of cq.c and qp.c/srq.c we call. */
int mlx5_poll_cq_v1(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc);

/* -- What Rust passes (mirrored in src/lib.rs) -------------------------- */

struct po_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct po_send_wr {
	uint64_t wr_id;
	const struct po_sge *sg_list;
	/* UD: the AH's 48-byte `struct mlx5_wqe_av`, or NULL. */
	const uint8_t *av;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;	/* enum ibv_wr_opcode */
	uint32_t send_flags;	/* IBV_SEND_* */
	uint32_t imm;		/* host order; stored big-endian as verbs wants;
				 * IBV_WR_SEND_WITH_INV: the invalidate_rkey */
	uint32_t num_sge;
	uint32_t rkey;
	uint32_t remote_qpn;	/* UD */
	uint32_t remote_qkey;	/* UD */
	uint32_t pad;
};

struct po_recv_wr {
	uint64_t wr_id;
	const struct po_sge *sg_list;
	uint32_t num_sge;
	uint32_t pad;
};

struct po_qp_cfg {
	void *sq_buf;		/* sq_wqe_cnt * 64 bytes */
	void *rq_buf;		/* rq_wqe_cnt << rq_wqe_shift bytes, or NULL */
	uint32_t *dbrec;	/* [0] RQ, [1] SQ, big-endian */
	void *bf_reg;		/* two registers of bf_size bytes */
	uint32_t sq_wqe_cnt;
	uint32_t sq_cur_post;	/* the producer index before the first post */
	uint32_t sq_max_post;	/* WRs, as verbs.c computes: wq_size / max_wqe_size */
	uint32_t sq_max_gs;
	uint32_t max_inline;
	uint32_t rq_wqe_cnt;
	uint32_t rq_wqe_shift;
	uint32_t rq_max_gs;
	uint32_t rq_max_post;
	uint32_t rq_head;	/* the RQ producer counter before the first post */
	uint32_t qpn;
	uint32_t qp_type;	/* enum ibv_qp_type: IBV_QPT_RC, _UC, _UD */
	uint32_t sq_sig_all;
	uint32_t wq_sig;
	uint32_t atomics;
	uint32_t prefer_bf;
	uint32_t bf_size;
	uint32_t bf_offset;
	uint32_t user_index;	/* the CQE's srqn_uidx for this QP (CQE v1) */
	uint32_t pad;
};

struct po_sq_state {
	uint32_t cur_post;
	uint32_t head;
	uint32_t tail;
	uint32_t bf_offset;
	uint32_t rq_head;
	uint32_t rq_tail;
};

struct po_srq_cfg {
	void *buf;		/* max << wqe_shift bytes, the next links set by po_srq_new */
	uint32_t *db;
	uint32_t max;		/* WQEs in the buffer */
	uint32_t wqe_shift;
	uint32_t max_gs;
	uint32_t srqn;
};

struct po_cq_cfg {
	void *buf;		/* cqe_cnt * cqe_sz bytes */
	uint32_t *dbrec;	/* [0] consumer index, [1] arm */
	uint32_t cqe_cnt;
	uint32_t cqe_sz;
	uint32_t cons_index;
	uint32_t cqn;
};

/* `struct ibv_wc`, flattened. */
struct po_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;		/* host order (ibv_wc's imm_data is big-endian) */
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint32_t pkey_index;
	uint32_t slid;
	uint32_t sl;
	uint32_t dlid_path_bits;
};

/* -- The fake objects ---------------------------------------------------- */

struct po_ctx {
	struct mlx5_context *mctx;
};

struct po_cq {
	struct mlx5_cq cq;
};

struct po_qp {
	struct mlx5_qp qp;
	struct mlx5_bf bf;
	struct po_ctx *ctx;
	struct po_cq *scq;	/* the send CQ mlx5_wq_overflow reads */
	uint32_t uidx;
};

struct po_srq {
	struct mlx5_srq srq;
	unsigned long *bitmap;
};

struct po_ctx *po_ctx_new(void)
{
	struct po_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->mctx = calloc(1, sizeof(*c->mctx));
	if (!c->mctx) {
		free(c);
		return NULL;
	}
	return c;
}

void po_ctx_free(struct po_ctx *c)
{
	int i;

	/* Tables whose last entry went (mlx5_clear_qp, po_qp_free) are freed. */
	for (i = 0; i < MLX5_QP_TABLE_SIZE; i++)
		if (c->mctx->qp_table[i].refcnt)
			free(c->mctx->qp_table[i].table);
	for (i = 0; i < MLX5_UIDX_TABLE_SIZE; i++)
		if (c->mctx->uidx_table[i].refcnt)
			free(c->mctx->uidx_table[i].table);
	free(c->mctx);
	free(c);
}

static struct ibv_context *ibctx(struct po_ctx *c)
{
	return &c->mctx->ibv_ctx.context;
}

struct po_cq *po_cq_new(struct po_ctx *c, const struct po_cq_cfg *cfg)
{
	struct po_cq *q;

	if (!cfg->cqe_cnt || (cfg->cqe_cnt & (cfg->cqe_cnt - 1)) ||
	    (cfg->cqe_sz != 64 && cfg->cqe_sz != 128))
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->cq.verbs_cq.cq.context = ibctx(c);
	q->cq.verbs_cq.cq.cqe = cfg->cqe_cnt - 1;
	q->cq.buf_a.buf = cfg->buf;
	q->cq.active_buf = &q->cq.buf_a;
	q->cq.cqe_sz = cfg->cqe_sz;
	q->cq.cons_index = cfg->cons_index;
	q->cq.dbrec = (__be32 *)cfg->dbrec;
	q->cq.cqn = cfg->cqn;
	return q;
}

void po_cq_free(struct po_cq *q)
{
	free(q);
}

uint32_t po_cq_cons_index(const struct po_cq *q)
{
	return q->cq.cons_index;
}

/* A user-index entry (mlx5_store_uidx lives in mlx5.c, not compiled). */
static int store_uidx(struct mlx5_context *m, uint32_t uidx, void *rsc)
{
	int t = uidx >> MLX5_UIDX_TABLE_SHIFT;

	if (!m->uidx_table[t].refcnt) {
		m->uidx_table[t].table =
			calloc(MLX5_UIDX_TABLE_MASK + 1, sizeof(void *));
		if (!m->uidx_table[t].table)
			return -1;
	}
	m->uidx_table[t].refcnt++;
	m->uidx_table[t].table[uidx & MLX5_UIDX_TABLE_MASK] = rsc;
	return 0;
}

static int ilog2u(uint32_t v)
{
	int r = 0;

	while ((1u << r) < v)
		r++;
	return r;
}

/*
 * A QP in RTS over the caller's rings; `scq` and `rcq` may be the same CQ,
 * `srq` NULL. The provider's own mlx5_store_qp puts it in the QP table (the
 * CQE v0 lookup), and its user index goes into the uidx table (CQE v1).
 */
struct po_qp *po_qp_new(struct po_ctx *c, const struct po_qp_cfg *cfg,
			struct po_cq *scq, struct po_cq *rcq, struct po_srq *srq)
{
	struct po_qp *p;
	struct mlx5_qp *qp;
	uint32_t n;

	if (!cfg->sq_wqe_cnt || (cfg->sq_wqe_cnt & (cfg->sq_wqe_cnt - 1)) ||
	    (cfg->rq_wqe_cnt & (cfg->rq_wqe_cnt - 1)))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->ctx = c;
	p->scq = scq;
	qp = &p->qp;
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = cfg->user_index;
	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->verbs_qp.qp.context = ibctx(c);
	qp->verbs_qp.qp.qp_num = cfg->qpn;
	qp->verbs_qp.qp.qp_type = cfg->qp_type;
	qp->verbs_qp.qp.state = IBV_QPS_RTS;
	qp->verbs_qp.qp.send_cq = &scq->cq.verbs_cq.cq;
	qp->verbs_qp.qp.recv_cq = &rcq->cq.verbs_cq.cq;
	if (srq)
		qp->verbs_qp.qp.srq = &srq->srq.vsrq.srq;

	/*
	 * The provider reaches the SQ through sq_start and the RQ only through
	 * get_recv_wqe (buf.buf + rq.offset): buf.buf is the RQ ring, offset 0,
	 * so the two rings may be anywhere (rq.offset is an int).
	 */
	qp->buf.buf = cfg->rq_buf ? cfg->rq_buf : cfg->sq_buf;
	qp->sq_start = cfg->sq_buf;
	qp->db = (__be32 *)cfg->dbrec;
	qp->max_inline_data = cfg->max_inline;
	qp->atomics_enabled = cfg->atomics;
	qp->sq_signal_bits = cfg->sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	qp->wq_sig = cfg->wq_sig;

	p->bf.reg = cfg->bf_reg;
	p->bf.buf_size = cfg->bf_size;
	p->bf.offset = cfg->bf_offset;
	p->bf.uuarn = 1;
	qp->bf = &p->bf;
	c->mctx->prefer_bf = cfg->prefer_bf;

	n = cfg->sq_wqe_cnt;
	qp->sq.wqe_cnt = n;
	qp->sq.wqe_shift = MLX5_SEND_WQE_SHIFT;
	qp->sq.offset = 0;
	qp->sq.max_post = cfg->sq_max_post;
	qp->sq.max_gs = cfg->sq_max_gs;
	qp->sq.qp_state_max_gs = cfg->sq_max_gs;
	qp->sq.qend = (char *)cfg->sq_buf + ((size_t)n << MLX5_SEND_WQE_SHIFT);
	qp->sq.cur_post = cfg->sq_cur_post;
	qp->sq.wrid = calloc(n, sizeof(*qp->sq.wrid));
	qp->sq.wqe_head = calloc(n, sizeof(*qp->sq.wqe_head));
	qp->sq.wr_data = calloc(n, sizeof(*qp->sq.wr_data));

	if (cfg->rq_wqe_cnt) {
		qp->rq.wqe_cnt = cfg->rq_wqe_cnt;
		qp->rq.wqe_shift = cfg->rq_wqe_shift;
		qp->rq.offset = 0;
		qp->rq.max_post = cfg->rq_max_post;
		qp->rq.max_gs = cfg->rq_max_gs;
		qp->rq.qp_state_max_gs = cfg->rq_max_gs;
		qp->rq.head = cfg->rq_head;
		qp->rq.tail = cfg->rq_head;
		qp->rq.wrid = calloc(cfg->rq_wqe_cnt, sizeof(*qp->rq.wrid));
	}
	if (!qp->sq.wrid || !qp->sq.wqe_head || !qp->sq.wr_data ||
	    (cfg->rq_wqe_cnt && !qp->rq.wrid))
		goto fail;
	(void)ilog2u;
	if (mlx5_store_qp(c->mctx, cfg->qpn, qp))
		goto fail;
	if (store_uidx(c->mctx, cfg->user_index, &qp->rsc))
		goto fail;
	p->uidx = cfg->user_index;
	return p;
fail:
	free(qp->sq.wrid);
	free(qp->sq.wqe_head);
	free(qp->sq.wr_data);
	free(qp->rq.wrid);
	free(p);
	return NULL;
}

void po_qp_free(struct po_qp *p)
{
	struct mlx5_context *m = p->ctx->mctx;
	int t = p->uidx >> MLX5_UIDX_TABLE_SHIFT;

	if (!--m->uidx_table[t].refcnt)
		free(m->uidx_table[t].table);
	else
		m->uidx_table[t].table[p->uidx & MLX5_UIDX_TABLE_MASK] = NULL;
	mlx5_clear_qp(m, p->qp.verbs_qp.qp.qp_num);
	free(p->qp.sq.wrid);
	free(p->qp.sq.wqe_head);
	free(p->qp.sq.wr_data);
	free(p->qp.rq.wrid);
	free(p);
}

void po_qp_state(const struct po_qp *p, struct po_sq_state *s)
{
	s->cur_post = p->qp.sq.cur_post;
	s->head = p->qp.sq.head;
	s->tail = p->qp.sq.tail;
	s->bf_offset = p->bf.offset;
	s->rq_head = p->qp.rq.head;
	s->rq_tail = p->qp.rq.tail;
}

/*
 * The SQ's WR accounting as a poll leaves it: `retired` WRs taken off
 * (mlx5_poll_one moves sq.tail to the completed WQE's wqe_head + 1).
 */
void po_qp_retire_sends(struct po_qp *p, uint32_t retired)
{
	p->qp.sq.tail += retired;
}

/* Up to 64 WRs per call; returns errno, *bad the index of the refused WR (n if none). */
/* A memory-window WR (mirrored in src/ffi.rs): IBV_WR_BIND_MW or
 * IBV_WR_LOCAL_INV at its place in a list of po_send_wr (`kind` 1), or a
 * plain WR (`kind` 0: the po_send_wr alone says it). For a bind: a fake
 * `ibv_mw` of `mw_type` whose rkey is `mw_rkey`, bound to a fake MR whose
 * lkey is `mr_lkey` (none if 0) over [addr, addr + length) with
 * `access` (`IBV_ACCESS_*`), its new rkey `new_rkey`. */
struct po_mw_wr {
	uint64_t addr;
	uint64_t length;
	uint32_t kind;
	uint32_t opcode;	/* IBV_WR_BIND_MW or IBV_WR_LOCAL_INV */
	uint32_t mw_type;	/* IBV_MW_TYPE_1 or IBV_MW_TYPE_2 */
	uint32_t mw_rkey;
	uint32_t new_rkey;
	uint32_t mr_lkey;
	uint32_t access;
	uint32_t invalidate_rkey;
};

/* The fake window and MR of one memory-window WR. */
struct po_mw_objs {
	struct ibv_mw mw;
	struct mlx5_mr mr;
};

static void fill_mw(struct ibv_send_wr *x, const struct po_mw_wr *m, struct po_mw_objs *o,
		    struct ibv_pd *pd)
{
	memset(o, 0, sizeof(*o));
	o->mw.pd = pd;
	o->mw.rkey = m->mw_rkey;
	o->mw.type = m->mw_type;
	o->mr.vmr.ibv_mr.pd = pd;
	o->mr.vmr.ibv_mr.lkey = m->mr_lkey;
	o->mr.vmr.mr_type = IBV_MR_TYPE_MR;
	x->opcode = m->opcode;
	x->num_sge = 0;
	if (m->opcode == IBV_WR_LOCAL_INV) {
		x->invalidate_rkey = m->invalidate_rkey;
		return;
	}
	x->bind_mw.mw = &o->mw;
	x->bind_mw.rkey = m->new_rkey;
	x->bind_mw.bind_info.mr = m->mr_lkey ? &o->mr.vmr.ibv_mr : NULL;
	x->bind_mw.bind_info.addr = m->addr;
	x->bind_mw.bind_info.length = m->length;
	x->bind_mw.bind_info.mw_access_flags = m->access;
}

/* mlx5_post_send of `n` WRs; `mw` (NULL, or `n` entries) turns the WRs
 * whose entry has `kind` 1 into memory-window WRs. */
int po_post_send_mw(struct po_qp *p, const struct po_send_wr *w,
		    const struct po_mw_wr *mw, uint32_t n, uint32_t *bad)
{
	struct ibv_send_wr wrs[64];
	struct ibv_sge sges[64][32];
	struct mlx5_ah ahs[64];
	struct po_mw_objs objs[64];
	struct ibv_send_wr *bad_wr = NULL;
	uint32_t i, j;
	int err;

	if (n == 0 || n > 64)
		return EINVAL;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		struct ibv_send_wr *x = &wrs[i];

		if (w[i].num_sge > 32)
			return EINVAL;
		x->wr_id = w[i].wr_id;
		x->next = i + 1 < n ? &wrs[i + 1] : NULL;
		x->send_flags = w[i].send_flags;
		if (mw && mw[i].kind == 1) {
			fill_mw(x, &mw[i], &objs[i], p->qp.verbs_qp.qp.pd);
			continue;
		}
		x->num_sge = (int)w[i].num_sge;
		for (j = 0; j < w[i].num_sge; j++) {
			sges[i][j].addr = w[i].sg_list[j].addr;
			sges[i][j].length = w[i].sg_list[j].length;
			sges[i][j].lkey = w[i].sg_list[j].lkey;
		}
		x->sg_list = sges[i];
		x->opcode = w[i].opcode;
		/* (One union: imm_data big-endian, invalidate_rkey host order.) */
		if (w[i].opcode == IBV_WR_SEND_WITH_INV)
			x->invalidate_rkey = w[i].imm;
		else
			x->imm_data = htobe32(w[i].imm);
		if (p->qp.verbs_qp.qp.qp_type == IBV_QPT_UD) {
			memset(&ahs[i], 0, sizeof(ahs[i]));
			if (w[i].av)
				memcpy(&ahs[i].av, w[i].av, sizeof(ahs[i].av));
			x->wr.ud.ah = &ahs[i].ibv_ah;
			x->wr.ud.remote_qpn = w[i].remote_qpn;
			x->wr.ud.remote_qkey = w[i].remote_qkey;
		} else if (w[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   w[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			x->wr.atomic.remote_addr = w[i].remote_addr;
			x->wr.atomic.rkey = w[i].rkey;
			x->wr.atomic.compare_add = w[i].compare_add;
			x->wr.atomic.swap = w[i].swap;
		} else {
			x->wr.rdma.remote_addr = w[i].remote_addr;
			x->wr.rdma.rkey = w[i].rkey;
		}
	}
	err = mlx5_post_send(&p->qp.verbs_qp.qp, wrs, &bad_wr);
	*bad = bad_wr ? (uint32_t)(bad_wr - wrs) : n;
	return err;
}

int po_post_send(struct po_qp *p, const struct po_send_wr *w, uint32_t n,
		 uint32_t *bad)
{
	return po_post_send_mw(p, w, NULL, n, bad);
}

/* mlx5_bind_mw (a type-1 bind or unbind through the QP): the window's
 * rkey after it in *rkey (ibv_inc_rkey of `mw_rkey` on success). */
int po_bind_mw(struct po_qp *p, const struct po_mw_wr *m, uint64_t wr_id,
	       uint32_t send_flags, uint32_t *rkey)
{
	struct po_mw_objs o;
	struct ibv_send_wr x;
	struct ibv_mw_bind bind;
	int err;

	memset(&x, 0, sizeof(x));
	fill_mw(&x, m, &o, p->qp.verbs_qp.qp.pd);
	memset(&bind, 0, sizeof(bind));
	bind.wr_id = wr_id;
	bind.send_flags = send_flags;
	bind.bind_info = x.bind_mw.bind_info;
	err = mlx5_bind_mw(&p->qp.verbs_qp.qp, &o.mw, &bind);
	*rkey = o.mw.rkey;
	return err;
}

static int recv_list(const struct po_recv_wr *w, uint32_t n,
		     struct ibv_recv_wr *wrs, struct ibv_sge (*sges)[32])
{
	uint32_t i, j;

	if (n == 0 || n > 64)
		return EINVAL;
	for (i = 0; i < n; i++) {
		if (w[i].num_sge > 32)
			return EINVAL;
		memset(&wrs[i], 0, sizeof(wrs[i]));
		wrs[i].wr_id = w[i].wr_id;
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		wrs[i].num_sge = (int)w[i].num_sge;
		for (j = 0; j < w[i].num_sge; j++) {
			sges[i][j].addr = w[i].sg_list[j].addr;
			sges[i][j].length = w[i].sg_list[j].length;
			sges[i][j].lkey = w[i].sg_list[j].lkey;
		}
		wrs[i].sg_list = sges[i];
	}
	return 0;
}

int po_post_recv(struct po_qp *p, const struct po_recv_wr *w, uint32_t n,
		 uint32_t *bad)
{
	struct ibv_recv_wr wrs[64];
	struct ibv_sge sges[64][32];
	struct ibv_recv_wr *bad_wr = NULL;
	int err = recv_list(w, n, wrs, sges);

	if (err)
		return err;
	err = mlx5_post_recv(&p->qp.verbs_qp.qp, wrs, &bad_wr);
	*bad = bad_wr ? (uint32_t)(bad_wr - wrs) : n;
	return err;
}

/*
 * An SRQ as mlx5_alloc_srq_buf leaves it without a wait queue: WQEs
 * 0 .. max-1 linked in order, head 0, tail max - 1 (one WQE the device
 * never owns, as the list's end), nothing posted.
 */
struct po_srq *po_srq_new(struct po_ctx *c, const struct po_srq_cfg *cfg)
{
	struct po_srq *s;
	struct mlx5_srq *q;
	uint32_t i;
	size_t words;

	if (cfg->max < 2 || cfg->max > 0x8000)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	q = &s->srq;
	q->rsc.type = MLX5_RSC_TYPE_SRQ;
	q->rsc.rsn = cfg->srqn;
	q->vsrq.srq.context = ibctx(c);
	q->buf.buf = cfg->buf;
	q->wqe_shift = (int)cfg->wqe_shift;
	q->max = (int)cfg->max;
	q->max_gs = (int)cfg->max_gs;
	q->head = 0;
	q->tail = (int)cfg->max - 1;
	q->nwqes = cfg->max;
	q->waitq_head = -1;
	q->waitq_tail = -1;
	q->db = (__be32 *)cfg->db;
	q->srqn = cfg->srqn;
	q->wrid = calloc(cfg->max, sizeof(*q->wrid));
	words = (cfg->max + 8 * sizeof(unsigned long) - 1) / (8 * sizeof(unsigned long));
	s->bitmap = calloc(words, sizeof(unsigned long));
	q->free_wqe_bitmap = s->bitmap;
	if (!q->wrid || !s->bitmap) {
		free(q->wrid);
		free(s->bitmap);
		free(s);
		return NULL;
	}
	for (i = 0; i + 1 < cfg->max; i++) {
		struct mlx5_wqe_srq_next_seg *next =
			(void *)((char *)cfg->buf + ((size_t)i << cfg->wqe_shift));
		next->next_wqe_index = htobe16(i + 1);
	}
	return s;
}

void po_srq_free(struct po_srq *s)
{
	free(s->srq.wrid);
	free(s->bitmap);
	free(s);
}

int po_post_srq_recv(struct po_srq *s, const struct po_recv_wr *w, uint32_t n,
		     uint32_t *bad)
{
	struct ibv_recv_wr wrs[64];
	struct ibv_sge sges[64][32];
	struct ibv_recv_wr *bad_wr = NULL;
	int err = recv_list(w, n, wrs, sges);

	if (err)
		return err;
	err = mlx5_post_srq_recv(&s->srq.vsrq.srq, wrs, &bad_wr);
	*bad = bad_wr ? (uint32_t)(bad_wr - wrs) : n;
	return err;
}

/* The SRQ's head and tail WQE indices and its doorbell counter. */
void po_srq_state(const struct po_srq *s, int32_t *head, int32_t *tail,
		  uint32_t *counter)
{
	*head = s->srq.head;
	*tail = s->srq.tail;
	*counter = s->srq.counter;
}

/* Whether WQE `i` is marked free (completed, not yet relinked) in v59's bitmap. */
int po_srq_marked_free(const struct po_srq *s, uint32_t i)
{
	unsigned long bits = 8 * sizeof(unsigned long);

	return (s->bitmap[i / bits] >> (i % bits)) & 1;
}

/* The wr_id the SRQ holds for WQE `i`. */
uint64_t po_srq_wrid(const struct po_srq *s, uint32_t i)
{
	return s->srq.wrid[i];
}

/*
 * The RQ's WR accounting as a poll leaves it: `n` receives completed, in
 * order (handle_responder moves rq.tail one per CQE).
 */
void po_qp_retire_recvs(struct po_qp *p, uint32_t n)
{
	p->qp.rq.tail += n;
}

/* WQE `i` of the SRQ completed, as a poll hands it back (mlx5_free_srq_wqe). */
void po_srq_complete(struct po_srq *s, uint32_t i)
{
	mlx5_free_srq_wqe(&s->srq, (int)i);
}

/* mlx5_poll_cq_v1 (CQE version 1, as ConnectX is asked for by libmlx5). */
int po_poll_cq(struct po_cq *q, int ne, struct po_wc *out)
{
	struct ibv_wc wc[64];
	int n, i;

	if (ne <= 0 || ne > 64)
		return -EINVAL;
	memset(wc, 0, sizeof(wc[0]) * ne);
	n = mlx5_poll_cq_v1(&q->cq.verbs_cq.cq, ne, wc);
	for (i = 0; i < n; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = be32toh(wc[i].imm_data);
		out[i].qp_num = wc[i].qp_num;
		out[i].src_qp = wc[i].src_qp;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].pkey_index = wc[i].pkey_index;
		out[i].slid = wc[i].slid;
		out[i].sl = wc[i].sl;
		out[i].dlid_path_bits = wc[i].dlid_path_bits;
	}
	return n;
}

/* The struct sizes, so that Rust can check its mirrors. */
uint32_t po_abi_size(int which)
{
	switch (which) {
	case 0: return sizeof(struct po_send_wr);
	case 1: return sizeof(struct po_recv_wr);
	case 2: return sizeof(struct po_qp_cfg);
	case 3: return sizeof(struct po_srq_cfg);
	case 4: return sizeof(struct po_cq_cfg);
	case 5: return sizeof(struct po_wc);
	case 6: return sizeof(struct po_sq_state);
	case 7: return sizeof(struct po_sge);
	case 8: return sizeof(struct po_mw_wr);
	default: return 0;
	}
}
