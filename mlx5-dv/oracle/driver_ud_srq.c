/*
 * The C baseline of issue 15's two new rows, in the manner of driver.c
 * (which stays frozen): written with rdma-core's <infiniband/mlx5dv.h>
 * helpers, doing the work a WR costs and nothing else.
 *
 *   cb_post_ud_send: one UD SEND of one SGE: the SQ room check; ctrl, the
 *       48-byte datagram segment (the AH's AV copied, the remote QPN with
 *       MLX5_EXTENDED_UD_AV and the qkey patched in, as rdma-core's
 *       set_datagram_seg), the data segment; wr_id bookkeeping; barrier,
 *       doorbell record, and the BlueFlame copy of its 2 WQEBBs.
 *   cb_poll_srq: one responder CQE of a QP on an SRQ: ownership, barrier,
 *       wr_id by wqe_counter from the SRQ, the WQE relinked at the SRQ's
 *       tail at once (rdma-core 44's mlx5_free_srq_wqe, without its lock),
 *       byte count, QPN, source QPN and GRH flag; consumer index and its
 *       doorbell record.
 *
 * Entry points are noinline, so callgrind counts exactly their instructions.
 */
#include <stdint.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<infiniband/mlx5dv.h>)
#define HAVE_MLX5DV 1
#endif
#endif

/* The same layouts as driver.c's. */
struct cb_sq {
	uint8_t *buf;
	uint32_t wqe_cnt;
	uint32_t qpn;
	uint32_t *dbrec;
	uint8_t *bf_reg;
	uint32_t bf_size;
	uint32_t bf_offset;
	uint32_t cur_post;
	uint32_t head;
	uint32_t tail;
	uint32_t max_post;
	uint64_t *wrid;
	uint32_t *wqe_head;
};

struct cb_cq {
	uint8_t *buf;
	uint32_t cqe_cnt;
	uint32_t ci;
	uint32_t *dbrec;
};

/* An SRQ as libmlx5 keeps it: the ring, its stride, the list's tail, and
 * the wr_id of each WQE. */
struct cb_srq {
	uint8_t *buf;
	uint32_t stride;
	uint32_t tail;
	uint64_t *wrid;
};

struct cb_rwc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t grh;
};

#ifdef HAVE_MLX5DV
#include <endian.h>
#include <infiniband/mlx5dv.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#define to_device_barrier() __asm__ volatile("" ::: "memory")
#define from_device_barrier() __asm__ volatile("lfence" ::: "memory")
#define wc_barrier() __asm__ volatile("sfence" ::: "memory")
#else
#define to_device_barrier() __atomic_thread_fence(__ATOMIC_RELEASE)
#define from_device_barrier() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define wc_barrier() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

int cb15_available(void) { return 1; }

static inline void copy_x64(void *dst, const void *src)
{
#if defined(__x86_64__)
	__m128i *d = dst;
	const __m128i *s = src;
	_mm_store_si128(d, _mm_load_si128(s));
	_mm_store_si128(d + 1, _mm_load_si128(s + 1));
	_mm_store_si128(d + 2, _mm_load_si128(s + 2));
	_mm_store_si128(d + 3, _mm_load_si128(s + 3));
#else
	memcpy(dst, src, 64);
#endif
}

/* One UD SEND of one SGE to `remote_qpn` with `qkey`, through the AH
 * whose AV is `av` (48 bytes): 5 DS, 2 WQEBBs. Returns 0, or -1 (nothing
 * written) when `max_post` WRs are outstanding. */
__attribute__((noinline)) int cb_post_ud_send(struct cb_sq *sq, const struct mlx5_wqe_av *av,
					      uint32_t remote_qpn, uint32_t qkey, uint64_t wr_id,
					      uint64_t addr, uint32_t lkey, uint32_t len)
{
	if (sq->head - sq->tail >= sq->max_post)
		return -1;
	uint32_t first = sq->cur_post, mask = sq->wqe_cnt - 1;
	uint8_t *wqe = sq->buf + ((size_t)(first & mask) << 6);
	struct mlx5_wqe_datagram_seg *dg = (void *)(wqe + 16);
	memcpy(&dg->av, av, sizeof(dg->av));
	dg->av.dqp_dct = htobe32(remote_qpn | MLX5_EXTENDED_UD_AV);
	dg->av.key.qkey.qkey = htobe32(qkey);
	/* The data segment: the second WQEBB's first 16 bytes (it wraps). */
	uint8_t *second = sq->buf + ((size_t)((first + 1) & mask) << 6);
	mlx5dv_set_data_seg((void *)second, len, lkey, addr);
	mlx5dv_set_ctrl_seg((void *)wqe, first, MLX5_OPCODE_SEND, 0, sq->qpn,
			    MLX5_WQE_CTRL_CQ_UPDATE, 5, 0, 0);
	uint32_t slot = first & mask;
	sq->wrid[slot] = wr_id;
	sq->wqe_head[slot] = sq->head;
	sq->head++;
	sq->cur_post += 2;
	to_device_barrier();
	sq->dbrec[MLX5_SND_DBR] = htobe32(sq->cur_post & 0xffff);
	wc_barrier();
	uint8_t *bf = sq->bf_reg + sq->bf_offset;
	copy_x64(bf, wqe);
	copy_x64(bf + 64, second);
	wc_barrier();
	sq->bf_offset ^= sq->bf_size;
	return 0;
}

/* One responder CQE of a QP on `srq`, if the CQ holds one: 1, else 0. */
__attribute__((noinline)) int cb_poll_srq(struct cb_cq *cq, struct cb_srq *srq,
					  struct cb_rwc *wc)
{
	const struct mlx5_cqe64 *cqe =
		(const void *)(cq->buf + ((size_t)(cq->ci & (cq->cqe_cnt - 1)) << 6));
	uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);
	if (opcode == MLX5_CQE_INVALID || (mlx5dv_get_cqe_owner(cqe) ^ !!(cq->ci & cq->cqe_cnt)))
		return 0;
	from_device_barrier();
	uint16_t idx = be16toh(cqe->wqe_counter);
	wc->wr_id = srq->wrid[idx];
	/* mlx5_free_srq_wqe: the completed WQE goes to the list's tail. */
	struct mlx5_wqe_srq_next_seg *tail = (void *)(srq->buf + (size_t)srq->tail * srq->stride);
	tail->next_wqe_index = htobe16(idx);
	srq->tail = idx;
	wc->status = opcode == MLX5_CQE_RESP_ERR ? ((const struct mlx5_err_cqe *)cqe)->syndrome : 0;
	wc->byte_len = be32toh(cqe->byte_cnt);
	wc->qp_num = be32toh(cqe->sop_drop_qpn) & 0xffffff;
	uint32_t f = be32toh(cqe->flags_rqpn);
	wc->src_qp = f & 0xffffff;
	wc->grh = (f >> 28) & 3;
	cq->ci++;
	cq->dbrec[0] = htobe32(cq->ci & 0xffffff);
	return 1;
}

#else

int cb15_available(void) { return 0; }
int cb_post_ud_send(struct cb_sq *sq, const void *av, uint32_t remote_qpn, uint32_t qkey,
		    uint64_t wr_id, uint64_t addr, uint32_t lkey, uint32_t len) { return -1; }
int cb_poll_srq(struct cb_cq *cq, struct cb_srq *srq, struct cb_rwc *wc) { return 0; }

#endif
