/*
 * The C baseline of the in-place DC post, in the manner of driver_ud_srq.c
 * (driver.c stays frozen): written with rdma-core's <infiniband/mlx5dv.h>
 * helpers, doing the work a WR costs and nothing else.
 *
 *   cb_post_dc_write: one signaled RDMA WRITE of one SGE on a DCI: the SQ
 *       room check; ctrl, the 48-byte datagram segment (the AH's AV copied,
 *       then dqp_dct |= htobe32(dctn | MLX5_EXTENDED_UD_AV) and
 *       key.dc_key = htobe64(dc_key), as rdma-core's
 *       mlx5_send_wr_set_dc_addr), the remote-address segment and the data
 *       segment (both in the second WQEBB, which may be the ring's first);
 *       wr_id bookkeeping; barrier, doorbell record, and the BlueFlame copy
 *       of its 2 WQEBBs. 6 DS.
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

/* The same layout as driver.c's. */
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

#ifdef HAVE_MLX5DV
#include <endian.h>
#include <infiniband/mlx5dv.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#define to_device_barrier() __asm__ volatile("" ::: "memory")
#define wc_barrier() __asm__ volatile("sfence" ::: "memory")
#else
#define to_device_barrier() __atomic_thread_fence(__ATOMIC_RELEASE)
#define wc_barrier() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

int cb_dc_available(void) { return 1; }

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

/* One signaled RDMA WRITE of one SGE to DCT `dctn` with access key
 * `dc_key`, through the AH whose AV is `av` (48 bytes): 6 DS, 2 WQEBBs.
 * Returns 0, or -1 (nothing written) when `max_post` WRs are
 * outstanding. */
__attribute__((noinline)) int cb_post_dc_write(struct cb_sq *sq, const struct mlx5_wqe_av *av,
					       uint32_t dctn, uint64_t dc_key, uint64_t wr_id,
					       uint64_t raddr, uint32_t rkey, uint64_t addr,
					       uint32_t lkey, uint32_t len)
{
	if (sq->head - sq->tail >= sq->max_post)
		return -1;
	uint32_t first = sq->cur_post, mask = sq->wqe_cnt - 1;
	uint8_t *wqe = sq->buf + ((size_t)(first & mask) << 6);
	struct mlx5_wqe_datagram_seg *dg = (void *)(wqe + 16);
	/* mlx5_send_wr_set_dc_addr: the AV, then the DCT and the key. */
	memcpy(&dg->av, av, sizeof(dg->av));
	dg->av.dqp_dct |= htobe32(dctn | MLX5_EXTENDED_UD_AV);
	dg->av.key.dc_key = htobe64(dc_key);
	/* raddr and data: the second WQEBB (it wraps). */
	uint8_t *second = sq->buf + ((size_t)((first + 1) & mask) << 6);
	struct mlx5_wqe_raddr_seg *rs = (void *)second;
	rs->raddr = htobe64(raddr);
	rs->rkey = htobe32(rkey);
	rs->reserved = 0;
	mlx5dv_set_data_seg((void *)(second + 16), len, lkey, addr);
	mlx5dv_set_ctrl_seg((void *)wqe, first, MLX5_OPCODE_RDMA_WRITE, 0, sq->qpn,
			    MLX5_WQE_CTRL_CQ_UPDATE, 6, 0, 0);
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

#else

int cb_dc_available(void) { return 0; }
int cb_post_dc_write(struct cb_sq *sq, const void *av, uint32_t dctn, uint64_t dc_key,
		     uint64_t wr_id, uint64_t raddr, uint32_t rkey, uint64_t addr, uint32_t lkey,
		     uint32_t len) { return -1; }

#endif
