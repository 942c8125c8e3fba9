/*
 * The C baseline of issue 29's receive rows, in the manner of driver.c
 * (which stays frozen) and driver_ud_srq.c: our own C on rdma-core's
 * <infiniband/mlx5dv.h>, doing what libmlx5 (rdma-core v59,
 * providers/mlx5/qp.c, srq.c, cq.c) does for the operation, without its
 * locks, WQE signatures (wq_sig) or resource lookup (the queue is passed,
 * as cb_poll's SQ is):
 *
 *   cb_post_recv: mlx5_post_recv on a QP's own RQ: per WR the overflow
 *       check (mlx5_wq_overflow), the SGE count check, the data segments
 *       at head & (wqe_cnt - 1) (zero-length SGEs skipped), an
 *       invalid-lkey (MLX5_INVALID_LKEY) segment ending a list shorter
 *       than the WQE holds, the wr_id; then head += WRs, the to-device
 *       barrier and the doorbell record dbrec[MLX5_RCV_DBR].
 *   cb_post_srq_recv: mlx5_post_srq_recv: per WR the SGE count check,
 *       the full check (head == tail), the wr_id at the list's head, the
 *       new head from that WQE's next segment, the data segments after
 *       it (and the invalid-lkey end); then counter += WRs, the barrier
 *       and the SRQ's doorbell record. (v59 looks for freed WQEs in a
 *       bitmap when head reaches tail; cb_poll_srq relinks each WQE at
 *       once, as v44 did, so head == tail is full here.)
 *   cb_poll_rq, cb_poll_ud_recv: mlx5_poll_one of one responder CQE of a
 *       QP's own RQ (RC and UD run the same code in libmlx5: one static
 *       function here): ownership, consumer index, from-device barrier,
 *       the opcode's dispatch, handle_responder's byte count, wr_id by
 *       wqe_counter & (wqe_cnt - 1) and ++tail, its inline-scatter tests,
 *       opcode, immediate, source QPN and GRH flag from flags_rqpn; the
 *       consumer index's doorbell record (update_cons_index). Of ibv_wc
 *       it fills the fields our Completion has (wr_id, status, opcode,
 *       wc_flags, imm, byte_len, qp_num, src_qp), not slid, sl,
 *       dlid_path_bits and pkey_index, which it has not.
 *   cb_poll_srq_recv: the same mlx5_poll_one for a QP on an SRQ: the wr_id
 *       by wqe_counter from the SRQ, the WQE relinked at the list's tail at
 *       once (mlx5_free_srq_wqe as v44 had it, without its lock), its
 *       inline-scatter tests (mlx5_copy_to_recv_srq), and the rest as
 *       cb_poll_rq. Not a frozen row: issue 15's cb_poll_srq
 *       (driver_ud_srq.c) is the SRQ row's baseline, and does less (no
 *       opcode dispatch, immediate, wc_flags, scatter tests or error
 *       case); this one shows what libmlx5's own path costs beside it.
 *
 * Entry points are noinline, so callgrind counts exactly their instructions
 * (scripts/insn-count, --toggle-collect).
 */
#include <stdint.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<infiniband/mlx5dv.h>)
#define HAVE_MLX5DV 1
#endif
#endif

/* The same layout as driver.c's. */
struct cb_cq {
	uint8_t *buf;
	uint32_t cqe_cnt;
	uint32_t ci;
	uint32_t *dbrec;
};

/* A QP's own RQ as libmlx5 keeps it (struct mlx5_wq, the QP's buffer and
 * doorbell record). */
struct cb_rq {
	uint8_t *buf;		/* wqe_cnt WQEs of 1 << wqe_shift bytes */
	uint32_t wqe_cnt;	/* a power of two */
	uint32_t wqe_shift;
	uint32_t max_gs;	/* data segments a WQE holds */
	uint32_t max_post;	/* WRs outstanding at most */
	uint32_t head;		/* WRs posted */
	uint32_t tail;		/* WRs completed */
	uint64_t *wrid;		/* per WQE */
	uint32_t *dbrec;	/* [0] RQ (MLX5_RCV_DBR), [1] SQ */
};

/* An SRQ as libmlx5 keeps it for posting (struct mlx5_srq). */
struct cb_post_srq {
	uint8_t *buf;		/* WQEs of 1 << wqe_shift bytes: next segment, data */
	uint32_t wqe_shift;
	uint32_t max_gs;
	uint32_t head;		/* the free list's first WQE */
	uint32_t tail;		/* and its last */
	uint32_t counter;	/* WRs posted (the doorbell record's value) */
	uint64_t *wrid;		/* per WQE */
	uint32_t *db;		/* the SRQ's doorbell record */
};

/* A receive completion: the ibv_wc fields our Completion has. */
struct cb_recv_wc {
	uint64_t wr_id;
	uint32_t status;	/* 0: success; else the syndrome */
	uint32_t opcode;	/* enum ibv_wc_opcode */
	uint32_t wc_flags;	/* IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV */
	uint32_t imm_data;	/* as the CQE has it (network order), or the invalidated rkey */
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t vendor_err;
};

#ifdef HAVE_MLX5DV
#include <endian.h>
#include <infiniband/mlx5dv.h>
#if defined(__x86_64__)
#define to_device_barrier() __asm__ volatile("" ::: "memory")
#define from_device_barrier() __asm__ volatile("lfence" ::: "memory")
#else
#define to_device_barrier() __atomic_thread_fence(__ATOMIC_RELEASE)
#define from_device_barrier() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#endif

/* providers/mlx5/wqe.h */
#define CB_INVALID_LKEY 0x100

int cb29_available(void) { return 1; }

/* mlx5_post_recv. Returns 0, or ENOMEM (the RQ is full) or EINVAL (too
 * many SGEs) with *bad_wr the WR refused; the WRs before it are posted. */
__attribute__((noinline)) int cb_post_recv(struct cb_rq *rq, struct ibv_recv_wr *wr,
					   struct ibv_recv_wr **bad_wr)
{
	struct mlx5_wqe_data_seg *scat;
	int err = 0, nreq, i, j;
	uint32_t ind = rq->head & (rq->wqe_cnt - 1);

	for (nreq = 0; wr; ++nreq, wr = wr->next) {
		/* mlx5_wq_overflow, without the CQ lock's second look. */
		if (rq->head - rq->tail + nreq >= rq->max_post) {
			err = 12 /* ENOMEM */;
			*bad_wr = wr;
			goto out;
		}
		if (wr->num_sge > (int)rq->max_gs) {
			err = 22 /* EINVAL */;
			*bad_wr = wr;
			goto out;
		}
		scat = (void *)(rq->buf + ((size_t)ind << rq->wqe_shift));
		for (i = 0, j = 0; i < wr->num_sge; ++i) {
			if (!wr->sg_list[i].length)
				continue;
			/* set_data_ptr_seg */
			scat[j].byte_count = htobe32(wr->sg_list[i].length);
			scat[j].lkey = htobe32(wr->sg_list[i].lkey);
			scat[j].addr = htobe64(wr->sg_list[i].addr);
			j++;
		}
		if (j < (int)rq->max_gs) {
			scat[j].byte_count = 0;
			scat[j].lkey = htobe32(CB_INVALID_LKEY);
			scat[j].addr = 0;
		}
		rq->wrid[ind] = wr->wr_id;
		ind = (ind + 1) & (rq->wqe_cnt - 1);
	}
out:
	if (nreq) {
		rq->head += nreq;
		to_device_barrier();
		rq->dbrec[MLX5_RCV_DBR] = htobe32(rq->head & 0xffff);
	}
	return err;
}

/* mlx5_post_srq_recv; returns as cb_post_recv. */
__attribute__((noinline)) int cb_post_srq_recv(struct cb_post_srq *srq, struct ibv_recv_wr *wr,
					       struct ibv_recv_wr **bad_wr)
{
	struct mlx5_wqe_srq_next_seg *next;
	struct mlx5_wqe_data_seg *scat;
	int err = 0, nreq, i;

	for (nreq = 0; wr; ++nreq, wr = wr->next) {
		if (wr->num_sge > (int)srq->max_gs) {
			err = 22 /* EINVAL */;
			*bad_wr = wr;
			break;
		}
		if (srq->head == srq->tail) {
			err = 12 /* ENOMEM */;
			*bad_wr = wr;
			break;
		}
		srq->wrid[srq->head] = wr->wr_id;
		next = (void *)(srq->buf + ((size_t)srq->head << srq->wqe_shift));
		srq->head = be16toh(next->next_wqe_index);
		scat = (struct mlx5_wqe_data_seg *)(next + 1);
		for (i = 0; i < wr->num_sge; ++i) {
			scat[i].byte_count = htobe32(wr->sg_list[i].length);
			scat[i].lkey = htobe32(wr->sg_list[i].lkey);
			scat[i].addr = htobe64(wr->sg_list[i].addr);
		}
		if (i < (int)srq->max_gs) {
			scat[i].byte_count = 0;
			scat[i].lkey = htobe32(CB_INVALID_LKEY);
			scat[i].addr = 0;
		}
	}
	if (nreq) {
		srq->counter += nreq;
		to_device_barrier();
		*srq->db = htobe32(srq->counter);
	}
	return err;
}

/* mlx5_copy_to_recv_wqe: data the device put in (or before) the CQE
 * instead of the WQE's buffers (scatter to CQE). */
static int copy_to_recv_wqe(struct cb_rq *rq, uint32_t idx, const uint8_t *buf, int size)
{
	struct mlx5_wqe_data_seg *scat = (void *)(rq->buf + ((size_t)idx << rq->wqe_shift));
	int max = 1 << (rq->wqe_shift - 4);

	for (int i = 0; i < max; ++i, ++scat) {
		int copy = be32toh(scat->byte_count);
		if (copy > size)
			copy = size;
		memcpy((void *)(uintptr_t)be64toh(scat->addr), buf, copy);
		size -= copy;
		if (size <= 0)
			return IBV_WC_SUCCESS;
		buf += copy;
	}
	return IBV_WC_LOC_LEN_ERR;
}

/* mlx5_copy_to_recv_srq: as copy_to_recv_wqe, for SRQ WQE `idx` (its
 * data segments after the 16-byte next segment). */
static int copy_to_recv_srq(struct cb_post_srq *srq, uint32_t idx, const uint8_t *buf, int size)
{
	struct mlx5_wqe_data_seg *scat =
		(void *)(srq->buf + ((size_t)idx << srq->wqe_shift) + sizeof(struct mlx5_wqe_srq_next_seg));
	int max = (1 << (srq->wqe_shift - 4)) - 1;

	for (int i = 0; i < max; ++i, ++scat) {
		int copy = be32toh(scat->byte_count);
		if (copy > size)
			copy = size;
		memcpy((void *)(uintptr_t)be64toh(scat->addr), buf, copy);
		size -= copy;
		if (size <= 0)
			return IBV_WC_SUCCESS;
		buf += copy;
	}
	return IBV_WC_LOC_LEN_ERR;
}

/* mlx5_free_srq_wqe (v44, without its lock): WQE `idx` to the list's tail. */
static inline void free_srq_wqe(struct cb_post_srq *srq, uint32_t idx)
{
	struct mlx5_wqe_srq_next_seg *next =
		(void *)(srq->buf + ((size_t)srq->tail << srq->wqe_shift));
	next->next_wqe_index = htobe16(idx);
	srq->tail = idx;
}

/* mlx5_poll_one of one responder CQE of `rq`'s QP (or, when `srq` is not
 * NULL, of a QP on `srq`), and update_cons_index: 1, 0 when the CQ holds
 * none, -1 for a CQE that is not a receive's. */
static inline __attribute__((always_inline)) int poll_recv(struct cb_cq *cq, struct cb_rq *rq,
							   struct cb_post_srq *srq,
							   struct cb_recv_wc *wc)
{
	/* mlx5_get_next_cqe */
	uint8_t *cqe = cq->buf + ((size_t)(cq->ci & (cq->cqe_cnt - 1)) << 6);
	struct mlx5_cqe64 *cqe64 = (void *)cqe;
	uint8_t opcode = mlx5dv_get_cqe_opcode(cqe64);
	if (opcode == MLX5_CQE_INVALID || (mlx5dv_get_cqe_owner(cqe64) ^ !!(cq->ci & cq->cqe_cnt)))
		return 0;
	++cq->ci;
	from_device_barrier();

	/* mlx5_parse_cqe */
	uint32_t qpn = be32toh(cqe64->sop_drop_qpn) & 0xffffff;
	uint16_t wqe_ctr = be16toh(cqe64->wqe_counter);
	int ret = 1;
	wc->wc_flags = 0;
	wc->qp_num = qpn;
	switch (opcode) {
	case MLX5_CQE_RESP_WR_IMM:
	case MLX5_CQE_RESP_SEND:
	case MLX5_CQE_RESP_SEND_IMM:
	case MLX5_CQE_RESP_SEND_INV: {
		/* handle_responder */
		int err = 0;
		wc->byte_len = be32toh(cqe64->byte_cnt);
		if (srq) {
			wc->wr_id = srq->wrid[wqe_ctr];
			free_srq_wqe(srq, wqe_ctr);
			if (cqe64->op_own & MLX5_INLINE_SCATTER_32)
				err = copy_to_recv_srq(srq, wqe_ctr, cqe, wc->byte_len);
			else if (cqe64->op_own & MLX5_INLINE_SCATTER_64)
				err = copy_to_recv_srq(srq, wqe_ctr, cqe - 64, wc->byte_len);
		} else {
			uint32_t idx = wqe_ctr & (rq->wqe_cnt - 1);
			wc->wr_id = rq->wrid[idx];
			++rq->tail;
			if (cqe64->op_own & MLX5_INLINE_SCATTER_32)
				err = copy_to_recv_wqe(rq, idx, cqe, wc->byte_len);
			else if (cqe64->op_own & MLX5_INLINE_SCATTER_64)
				err = copy_to_recv_wqe(rq, idx, cqe - 64, wc->byte_len);
		}
		if (err) {
			wc->status = err;
			break;
		}
		switch (cqe64->op_own >> 4) {
		case MLX5_CQE_RESP_WR_IMM:
			wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
			wc->wc_flags |= IBV_WC_WITH_IMM;
			wc->imm_data = cqe64->imm_inval_pkey;
			break;
		case MLX5_CQE_RESP_SEND:
			wc->opcode = IBV_WC_RECV;
			break;
		case MLX5_CQE_RESP_SEND_IMM:
			wc->opcode = IBV_WC_RECV;
			wc->wc_flags |= IBV_WC_WITH_IMM;
			wc->imm_data = cqe64->imm_inval_pkey;
			break;
		case MLX5_CQE_RESP_SEND_INV:
			wc->opcode = IBV_WC_RECV;
			wc->wc_flags |= IBV_WC_WITH_INV;
			wc->imm_data = be32toh(cqe64->imm_inval_pkey);
			break;
		}
		uint32_t f = be32toh(cqe64->flags_rqpn);
		wc->src_qp = f & 0xffffff;
		wc->wc_flags |= ((f >> 28) & 3) ? IBV_WC_GRH : 0;
		wc->status = IBV_WC_SUCCESS;
		break;
	}
	case MLX5_CQE_RESP_ERR: {
		const struct mlx5_err_cqe *ecqe = (const void *)cqe64;
		wc->status = ecqe->syndrome;
		wc->vendor_err = ecqe->vendor_err_synd;
		if (srq) {
			wc->wr_id = srq->wrid[wqe_ctr];
			free_srq_wqe(srq, wqe_ctr);
		} else {
			wc->wr_id = rq->wrid[wqe_ctr & (rq->wqe_cnt - 1)];
			++rq->tail;
		}
		break;
	}
	default: /* a send's (cb_poll's), or a CQE this baseline does not take */
		ret = -1;
		break;
	}
	cq->dbrec[0 /* MLX5_CQ_SET_CI */] = htobe32(cq->ci & 0xffffff);
	return ret;
}

/* One responder CQE of an RC QP's own RQ. */
__attribute__((noinline)) int cb_poll_rq(struct cb_cq *cq, struct cb_rq *rq, struct cb_recv_wc *wc)
{
	return poll_recv(cq, rq, NULL, wc);
}

/* One responder CQE of a UD QP's own RQ (libmlx5 runs the same code). */
__attribute__((noinline)) int cb_poll_ud_recv(struct cb_cq *cq, struct cb_rq *rq,
					      struct cb_recv_wc *wc)
{
	return poll_recv(cq, rq, NULL, wc);
}

/* One responder CQE of a QP on `srq`. */
__attribute__((noinline)) int cb_poll_srq_recv(struct cb_cq *cq, struct cb_post_srq *srq,
					       struct cb_recv_wc *wc)
{
	return poll_recv(cq, NULL, srq, wc);
}

#else

int cb29_available(void) { return 0; }
int cb_post_recv(struct cb_rq *rq, void *wr, void **bad_wr) { return -1; }
int cb_post_srq_recv(struct cb_post_srq *srq, void *wr, void **bad_wr) { return -1; }
int cb_poll_rq(struct cb_cq *cq, struct cb_rq *rq, struct cb_recv_wc *wc) { return 0; }
int cb_poll_ud_recv(struct cb_cq *cq, struct cb_rq *rq, struct cb_recv_wc *wc) { return 0; }
int cb_poll_srq_recv(struct cb_cq *cq, struct cb_post_srq *srq, struct cb_recv_wc *wc) { return 0; }

#endif
