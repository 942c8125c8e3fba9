/*
 * The C baseline of the public API's post and poll (issue 14): a small mlx5
 * driver written with rdma-core's <infiniband/mlx5dv.h> helpers, doing the
 * work a WR costs on the direct path and nothing else:
 *
 *   post: SQ room check (rdma-core's mlx5_wq_overflow); ctrl, remote-address
 *         and data (or inline) segments; wr_id and WQEBB bookkeeping; the
 *         to-device barrier; the doorbell record; a BlueFlame copy of the
 *         WQE in 64-byte blocks (rdma-core's mlx5_bf_copy / mmio_memcpy_x64:
 *         four 16-byte stores per block, the source wrapping at the SQ end),
 *         or for a batch the 8-byte doorbell of the last WQE's ctrl segment;
 *         the write-combining flushes; the BlueFlame offset toggle.
 *   poll: ownership test, from-device barrier, decode, wr_id by
 *         wqe_counter (retiring every WQE up to it), consumer index and its
 *         doorbell record.
 *
 * Entry points are noinline, so callgrind counts exactly their instructions
 * (scripts/insn-count, --toggle-collect).
 *
 * FROZEN (2026-12-01, before any optimisation of ours): a change that claims
 * a ratio against this baseline does not touch this file.
 */
#include <stdint.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<infiniband/mlx5dv.h>)
#define HAVE_MLX5DV 1
#endif
#endif

struct cb_sq {
	uint8_t *buf;		/* wqe_cnt WQEBBs of 64 bytes */
	uint32_t wqe_cnt;	/* a power of two */
	uint32_t qpn;
	uint32_t *dbrec;	/* [0] RQ, [1] SQ (MLX5_SND_DBR) */
	uint8_t *bf_reg;	/* BlueFlame registers: 2 x bf_size bytes */
	uint32_t bf_size;
	uint32_t bf_offset;
	uint32_t cur_post;	/* next WQEBB index */
	uint32_t head;		/* WRs posted */
	uint32_t tail;		/* WRs retired */
	uint32_t max_post;	/* WRs outstanding at most */
	uint64_t *wrid;		/* per WQEBB slot: the wr_id of the WQE starting there */
	uint32_t *wqe_head;	/* per WQEBB slot: `head` when that WQE was posted */
};

struct cb_cq {
	uint8_t *buf;		/* cqe_cnt CQEs of 64 bytes */
	uint32_t cqe_cnt;	/* a power of two */
	uint32_t ci;		/* consumer index */
	uint32_t *dbrec;	/* [0] the consumer index (MLX5_CQ_SET_CI) */
};

struct cb_wc {
	uint64_t wr_id;
	uint32_t status;	/* 0: success; else the syndrome */
	uint32_t opcode;	/* the CQE opcode */
	uint32_t byte_len;
	uint32_t qp_num;
};

/* One WR of a batch: a 1-SGE RDMA WRITE. */
struct cb_write {
	uint64_t wr_id;
	uint64_t raddr;
	uint64_t addr;
	uint32_t rkey;
	uint32_t lkey;
	uint32_t len;
	uint32_t signaled;
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

int cb_available(void) { return 1; }

/* rdma-core's mmio_memcpy_x64 for one 64-byte block. */
static inline void copy_x64(void *dst, const void *src)
{
#if defined(__x86_64__)
	const __m128i *s = src;
	__m128i *d = dst;
	_mm_store_si128(d + 0, _mm_load_si128(s + 0));
	_mm_store_si128(d + 1, _mm_load_si128(s + 1));
	_mm_store_si128(d + 2, _mm_load_si128(s + 2));
	_mm_store_si128(d + 3, _mm_load_si128(s + 3));
#else
	volatile uint64_t *d = dst;
	const uint64_t *s = src;
	for (int i = 0; i < 8; i++)
		d[i] = s[i];
#endif
}

static inline uint8_t *wqe_at(struct cb_sq *sq, uint32_t idx)
{
	return sq->buf + ((size_t)(idx & (sq->wqe_cnt - 1)) << 6);
}

static inline void remember(struct cb_sq *sq, uint32_t idx, uint64_t wr_id)
{
	uint32_t slot = idx & (sq->wqe_cnt - 1);
	sq->wrid[slot] = wr_id;
	sq->wqe_head[slot] = sq->head;
	sq->head++;
}

/* Doorbell record, then a BlueFlame copy of `wqebbs` WQEBBs starting at
 * `first` (the source wraps at the SQ end), as rdma-core's post_send_db
 * with mlx5_bf_copy. */
static inline void ring_bf(struct cb_sq *sq, uint32_t first, uint32_t wqebbs)
{
	to_device_barrier();
	sq->dbrec[MLX5_SND_DBR] = htobe32(sq->cur_post & 0xffff);
	wc_barrier();
	uint8_t *dst = sq->bf_reg + sq->bf_offset;
	for (uint32_t i = 0; i < wqebbs; i++)
		copy_x64(dst + 64 * i, wqe_at(sq, first + i));
	wc_barrier();
	sq->bf_offset ^= sq->bf_size;
}

/* Doorbell record, then the 8-byte doorbell: the first 8 bytes of the last
 * WQE's ctrl segment (rdma-core for more than one WQE). */
static inline void ring_db(struct cb_sq *sq, uint32_t last)
{
	to_device_barrier();
	sq->dbrec[MLX5_SND_DBR] = htobe32(sq->cur_post & 0xffff);
	wc_barrier();
	*(volatile uint64_t *)(sq->bf_reg + sq->bf_offset) = *(const uint64_t *)wqe_at(sq, last);
	wc_barrier();
	sq->bf_offset ^= sq->bf_size;
}

static inline void write_sge_wqe(struct cb_sq *sq, const struct cb_write *w)
{
	uint8_t *wqe = wqe_at(sq, sq->cur_post);
	struct mlx5_wqe_raddr_seg *r = (void *)(wqe + 16);

	mlx5dv_set_ctrl_seg((void *)wqe, sq->cur_post, MLX5_OPCODE_RDMA_WRITE, 0, sq->qpn,
			    w->signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0, 3, 0, 0);
	r->raddr = htobe64(w->raddr);
	r->rkey = htobe32(w->rkey);
	r->reserved = 0;
	mlx5dv_set_data_seg((void *)(wqe + 32), w->len, w->lkey, (uintptr_t)w->addr);
	remember(sq, sq->cur_post, w->wr_id);
	sq->cur_post += 1;
}

/* One 1-SGE RDMA WRITE, its doorbell and its BlueFlame copy. Returns 0, or
 * -1 (nothing written) when `max_post` WRs are outstanding. */
__attribute__((noinline)) int cb_post_write(struct cb_sq *sq, const struct cb_write *w)
{
	if (sq->head - sq->tail >= sq->max_post)
		return -1;
	uint32_t first = sq->cur_post;
	write_sge_wqe(sq, w);
	ring_bf(sq, first, 1);
	return 0;
}

/* One RDMA WRITE of `len` (at most 64 here) inline bytes: ctrl, raddr,
 * inline header and data (2 WQEBBs for 64 bytes; the copy wraps at the SQ
 * end), its doorbell and BlueFlame copy. */
__attribute__((noinline)) int cb_post_inline_write(struct cb_sq *sq, uint64_t wr_id,
						   uint64_t raddr, uint32_t rkey,
						   const uint8_t *data, uint32_t len, int signaled)
{
	if (sq->head - sq->tail >= sq->max_post)
		return -1;
	uint32_t ds = (16 + 16 + 4 + len + 15) / 16, wqebbs = (ds * 16 + 63) / 64;
	uint32_t first = sq->cur_post;
	uint8_t *end = sq->buf + ((size_t)sq->wqe_cnt << 6);
	uint8_t *wqe = wqe_at(sq, first);
	struct mlx5_wqe_raddr_seg *r = (void *)(wqe + 16);
	struct mlx5_wqe_inl_data_seg *inl = (void *)(wqe + 32);
	uint8_t *dst = wqe + 36;

	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
	inl->byte_count = htobe32(len | MLX5_INLINE_SEG);
	if (dst + len > end) {
		size_t part = end - dst;
		memcpy(dst, data, part);
		memcpy(sq->buf, data + part, len - part);
	} else {
		memcpy(dst, data, len);
	}
	mlx5dv_set_ctrl_seg((void *)wqe, first, MLX5_OPCODE_RDMA_WRITE, 0, sq->qpn,
			    signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0, ds, 0, 0);
	remember(sq, first, wr_id);
	sq->cur_post += wqebbs;
	ring_bf(sq, first, wqebbs);
	return 0;
}

/* `n` 1-SGE RDMA WRITEs with one doorbell (the 8-byte one, for the last
 * WQE). Returns 0, or -1 (nothing written) when they do not all fit. */
__attribute__((noinline)) int cb_post_write_batch(struct cb_sq *sq, const struct cb_write *w,
						  uint32_t n)
{
	if (sq->head - sq->tail + n > sq->max_post)
		return -1;
	for (uint32_t i = 0; i < n; i++)
		write_sge_wqe(sq, &w[i]);
	ring_db(sq, sq->cur_post - 1);
	return 0;
}

/* Up to `max` completions of `sq`'s WRs from `cq`; returns how many. */
__attribute__((noinline)) int cb_poll(struct cb_cq *cq, struct cb_sq *sq, struct cb_wc *wc,
				      int max)
{
	int n = 0;
	for (; n < max; n++) {
		const struct mlx5_cqe64 *cqe =
			(const void *)(cq->buf + ((size_t)(cq->ci & (cq->cqe_cnt - 1)) << 6));
		uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);
		if (opcode == MLX5_CQE_INVALID ||
		    (mlx5dv_get_cqe_owner(cqe) ^ !!(cq->ci & cq->cqe_cnt)))
			break;
		from_device_barrier();
		uint16_t counter = be16toh(cqe->wqe_counter);
		uint32_t slot = counter & (sq->wqe_cnt - 1);
		wc[n].wr_id = sq->wrid[slot];
		sq->tail = sq->wqe_head[slot] + 1;
		wc[n].opcode = opcode;
		wc[n].byte_len = be32toh(cqe->byte_cnt);
		wc[n].qp_num = be32toh(cqe->sop_drop_qpn) & 0xffffff;
		wc[n].status = (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) ?
			((const struct mlx5_err_cqe *)cqe)->syndrome : 0;
		cq->ci++;
	}
	if (n)
		cq->dbrec[0 /* consumer index (providers/mlx5: MLX5_CQ_SET_CI) */] = htobe32(cq->ci & 0xffffff);
	return n;
}

#else /* no mlx5dv.h: every entry point reports "unavailable" */

int cb_available(void) { return 0; }
int cb_post_write(struct cb_sq *sq, const struct cb_write *w) { return -1; }
int cb_post_inline_write(struct cb_sq *sq, uint64_t wr_id, uint64_t raddr, uint32_t rkey,
			 const uint8_t *data, uint32_t len, int signaled) { return -1; }
int cb_post_write_batch(struct cb_sq *sq, const struct cb_write *w, uint32_t n) { return -1; }
int cb_poll(struct cb_cq *cq, struct cb_sq *sq, struct cb_wc *wc, int max) { return 0; }

#endif
