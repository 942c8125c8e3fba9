/*
 * Wraps rdma-core's inline helpers from the system <infiniband/mlx5dv.h>
 * (package libibverbs-dev) so Rust tests can compare our encoder and decoder
 * with them. Without the header every function reports "unavailable".
 */
#include <stdint.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<infiniband/mlx5dv.h>)
#define HAVE_MLX5DV 1
#endif
#endif

#ifdef HAVE_MLX5DV
#include <infiniband/mlx5dv.h>

int oracle_available(void) { return 1; }

void oracle_set_ctrl_seg(uint8_t out[16], uint16_t pi, uint8_t opcode, uint8_t opmod,
                         uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature,
                         uint32_t imm)
{
	struct mlx5_wqe_ctrl_seg seg;
	memset(&seg, 0, sizeof(seg));
	mlx5dv_set_ctrl_seg(&seg, pi, opcode, opmod, qp_num, fm_ce_se, ds, signature, imm);
	memcpy(out, &seg, 16);
}

void oracle_set_data_seg(uint8_t out[16], uint32_t length, uint32_t lkey, uint64_t address)
{
	struct mlx5_wqe_data_seg seg;
	mlx5dv_set_data_seg(&seg, length, lkey, (uintptr_t)address);
	memcpy(out, &seg, 16);
}

/* op_own accessors: owner, solicited event, format, opcode (in that order). */
void oracle_cqe_fields(const uint8_t in[64], uint8_t out[4])
{
	struct mlx5_cqe64 cqe;
	memcpy(&cqe, in, 64);
	out[0] = mlx5dv_get_cqe_owner(&cqe);
	out[1] = mlx5dv_get_cqe_se(&cqe);
	out[2] = mlx5dv_get_cqe_format(&cqe);
	out[3] = mlx5dv_get_cqe_opcode(&cqe);
}

/*
 * The C baseline of the benchmarks: each operation as a C program writes it
 * with mlx5dv.h's helpers (no argument checks beyond what the hot path of
 * rdma-core's provider does), so our encoder and poller can be measured
 * against it (criterion, and instruction counts under callgrind).
 */
#include <endian.h>

/* A 1-SGE RDMA WRITE (ctrl, raddr, data: DS 3, one WQEBB) at `pi`. Returns WQEBBs. */
uint32_t baseline_write_sge(uint8_t *sq, uint32_t wqe_cnt, uint32_t pi, uint32_t qpn,
                            uint64_t raddr, uint32_t rkey, uint64_t addr, uint32_t len,
                            uint32_t lkey)
{
	uint8_t *wqe = sq + ((size_t)(pi & (wqe_cnt - 1)) << 6);
	struct mlx5_wqe_raddr_seg *r = (void *)(wqe + 16);

	mlx5dv_set_ctrl_seg((void *)wqe, pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn,
			    MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
	mlx5dv_set_data_seg((void *)(wqe + 32), len, lkey, (uintptr_t)addr);
	return 1;
}

/* An inline SEND of `len` bytes (ctrl, inline header, data; the copy wraps at
 * the end of the ring). Returns WQEBBs. */
uint32_t baseline_inline_send(uint8_t *sq, uint32_t wqe_cnt, uint32_t pi, uint32_t qpn,
                              const uint8_t *data, uint32_t len)
{
	uint8_t *end = sq + ((size_t)wqe_cnt << 6);
	uint8_t *wqe = sq + ((size_t)(pi & (wqe_cnt - 1)) << 6);
	struct mlx5_wqe_inl_data_seg *inl = (void *)(wqe + 16);
	uint8_t *dst = wqe + 20;
	uint32_t ds = (16 + 4 + len + 15) / 16;

	inl->byte_count = htobe32(len | MLX5_INLINE_SEG);
	if (dst + len > end) {
		size_t first = end - dst;
		memcpy(dst, data, first);
		memcpy(sq, data + first, len - first);
	} else {
		memcpy(dst, data, len);
	}
	mlx5dv_set_ctrl_seg((void *)wqe, pi, MLX5_OPCODE_SEND, 0, qpn,
			    MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
	return (ds * 16 + 63) / 64;
}

/* Ownership check of the CQE for consumer index `ci` and the fields a poller
 * reads: opcode, WQE counter, byte count, QPN, syndrome (error CQEs). Returns
 * 1 if software owns the CQE. The load barrier a poller needs after the
 * ownership check (one per poll batch) is left out, as in our codec bench. */
int baseline_poll_cqe(const uint8_t *bytes, uint32_t ci, uint32_t cqe_cnt, uint32_t out[5])
{
	const struct mlx5_cqe64 *cqe = (const void *)bytes;
	uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);

	if (opcode == MLX5_CQE_INVALID ||
	    (mlx5dv_get_cqe_owner(cqe) ^ !!(ci & cqe_cnt)))
		return 0;
	out[0] = opcode;
	out[1] = be16toh(cqe->wqe_counter);
	out[2] = be32toh(cqe->byte_cnt);
	out[3] = be32toh(cqe->sop_drop_qpn) & 0xffffff;
	out[4] = (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) ?
		((const struct mlx5_err_cqe *)cqe)->syndrome : 0;
	return 1;
}

/* Posts `batch` inline RDMA WRITEs of `len` bytes (the last with CQ_UPDATE)
 * at *pi and rings the doorbell as rdma-core's mlx5 provider does on x86:
 * a compiler barrier, the doorbell record, sfence, a BlueFlame copy of a
 * single WQE that fits (else the first 8 bytes of the last WQE's ctrl
 * segment), sfence; then the BlueFlame offset toggles. The ring must have
 * room (the caller drains it). */
void baseline_post_inline_writes(uint8_t *sq, uint32_t wqe_cnt, uint32_t *pi, uint32_t qpn,
                                 uint32_t *dbrec, uint8_t *bf_reg, uint32_t bf_size,
                                 uint32_t *bf_offset, uint64_t raddr, uint32_t rkey,
                                 const uint8_t *data, uint32_t len, uint32_t batch)
{
	uint8_t *end = sq + ((size_t)wqe_cnt << 6);
	uint32_t first = *pi, last = first, ds = (16 + 16 + 4 + len + 15) / 16;
	uint32_t wqebbs = (ds * 16 + 63) / 64;

	for (uint32_t k = 0; k < batch; k++) {
		uint8_t *wqe = sq + ((size_t)(*pi & (wqe_cnt - 1)) << 6);
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
			memcpy(sq, data + part, len - part);
		} else {
			memcpy(dst, data, len);
		}
		mlx5dv_set_ctrl_seg((void *)wqe, *pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn,
				    k + 1 == batch ? MLX5_WQE_CTRL_CQ_UPDATE : 0, ds, 0, 0);
		last = *pi;
		*pi += wqebbs;
	}
	__asm__ volatile("" ::: "memory");
	dbrec[MLX5_SND_DBR] = htobe32(*pi & 0xffff);
#if defined(__x86_64__)
	__asm__ volatile("sfence" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
	volatile uint64_t *reg = (volatile uint64_t *)(bf_reg + *bf_offset);
	uint32_t n = *pi - first;
	if (batch == 1 && n * 64 <= bf_size) {
		for (uint32_t i = 0; i < n; i++) {
			const uint64_t *src = (const uint64_t *)(sq + ((size_t)((first + i) & (wqe_cnt - 1)) << 6));
			for (int j = 0; j < 8; j++)
				reg[i * 8 + j] = src[j];
		}
	} else {
		reg[0] = *(const uint64_t *)(sq + ((size_t)(last & (wqe_cnt - 1)) << 6));
	}
#if defined(__x86_64__)
	__asm__ volatile("sfence" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
	*bf_offset ^= bf_size;
}
#else
int oracle_available(void) { return 0; }
void oracle_set_ctrl_seg(uint8_t out[16], uint16_t pi, uint8_t opcode, uint8_t opmod,
                         uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature,
                         uint32_t imm) { memset(out, 0, 16); }
void oracle_set_data_seg(uint8_t out[16], uint32_t length, uint32_t lkey, uint64_t address) { memset(out, 0, 16); }
void oracle_cqe_fields(const uint8_t in[64], uint8_t out[4]) { memset(out, 0, 4); }
uint32_t baseline_write_sge(uint8_t *sq, uint32_t wqe_cnt, uint32_t pi, uint32_t qpn,
                            uint64_t raddr, uint32_t rkey, uint64_t addr, uint32_t len,
                            uint32_t lkey) { return 0; }
uint32_t baseline_inline_send(uint8_t *sq, uint32_t wqe_cnt, uint32_t pi, uint32_t qpn,
                              const uint8_t *data, uint32_t len) { return 0; }
int baseline_poll_cqe(const uint8_t *bytes, uint32_t ci, uint32_t cqe_cnt, uint32_t out[5]) { return 0; }
void baseline_post_inline_writes(uint8_t *sq, uint32_t wqe_cnt, uint32_t *pi, uint32_t qpn,
                                 uint32_t *dbrec, uint8_t *bf_reg, uint32_t bf_size,
                                 uint32_t *bf_offset, uint64_t raddr, uint32_t rkey,
                                 const uint8_t *data, uint32_t len, uint32_t batch) {}
#endif
