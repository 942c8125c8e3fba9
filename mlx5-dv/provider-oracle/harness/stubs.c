/*
 * The two symbols of rdma-core's providers/mlx5/mlx5.c (not compiled) that
 * the data-path files still reach once the linker has dropped every
 * unreferenced section: both only for signature-error CQEs, which the
 * oracle never feeds it. The flag stays 0 (no freeze); reaching the lookup
 * is a harness bug: abort.
 */
#include <stdlib.h>

#include "mlx5.h"

int mlx5_freeze_on_error_cqe;

struct mlx5_mkey *mlx5_find_mkey(struct mlx5_context *ctx, uint32_t mkey)
{
	(void)ctx;
	(void)mkey;
	abort();
}

/*
 * libibverbs' ibv_qp_to_qp_ex (libibverbs/verbs.c, not linked), as it is
 * there: reached from qp.c only by mlx5_wr_raw_wqe, which
 * mlx5_qp_fill_wr_pfns installs for a DCI (harness/dc.c) and the oracle
 * never calls.
 */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct verbs_qp *vqp = (struct verbs_qp *)qp;

	if (vqp->comp_mask & VERBS_QP_EX)
		return &vqp->qp_ex;
	return NULL;
}
