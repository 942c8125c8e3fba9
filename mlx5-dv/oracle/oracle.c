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
#else
int oracle_available(void) { return 0; }
void oracle_set_ctrl_seg(uint8_t out[16], uint16_t pi, uint8_t opcode, uint8_t opmod,
                         uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature,
                         uint32_t imm) { memset(out, 0, 16); }
void oracle_set_data_seg(uint8_t out[16], uint32_t length, uint32_t lkey, uint64_t address) { memset(out, 0, 16); }
void oracle_cqe_fields(const uint8_t in[64], uint8_t out[4]) { memset(out, 0, 4); }
#endif
