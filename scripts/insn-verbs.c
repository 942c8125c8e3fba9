/*
 * The C baseline of scripts/insn-count-verbs: a plain rdma-core program
 * that posts one signaled 1-SGE RDMA WRITE and polls its completion, N
 * times, on a loopback RC pair of one verbs device (rxe0 in the soft-RoCE
 * guest), through the old calls or the extended verbs. The script counts
 * only the instructions inside the four noinline entry points below
 * (valgrind --toggle-collect), in user space: rxe's own work runs in the
 * kernel and is not counted. Not an example of use: a measurement harness,
 * the counterpart of examples/insn_verbs.rs (the same setup and the same
 * wait, so the entry points do the same work).
 *
 * Usage: insn-verbs old|ex N [DEVICE]   (DEVICE: rxe0 unless given)
 *   old: c_old_post (ibv_post_send of one ibv_send_wr built there) and
 *        c_old_poll (ibv_poll_cq of one ibv_wc);
 *   ex:  c_ex_post (ibv_wr_start, qpx->wr_id/wr_flags, ibv_wr_rdma_write,
 *        ibv_wr_set_sge, ibv_wr_complete) and c_ex_poll (ibv_start_poll,
 *        the fields our Completion carries read with ibv_wc_read_*,
 *        ibv_end_poll; never ibv_next_poll: rdma-core 44's rxe ends the
 *        poll itself when ibv_next_poll finds the CQ empty, as
 *        src/backend/ibv/cq.rs says).
 * Each iteration: ibv_req_notify_cq, the post, ibv_get_cq_event and
 * ibv_ack_cq_events (blocking on the completion channel, not polling),
 * then one poll, which must return exactly one successful completion.
 * Exits 1 with a message on any failure.
 *
 * Build: cc -O2 -o insn-verbs scripts/insn-verbs.c -libverbs
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF 4096
#define PORT 1

static void die(const char *what, int err)
{
	fprintf(stderr, "insn-verbs: %s failed: %s\n", what, strerror(err));
	exit(1);
}

/* What c_ex_poll reads: the fields of our Completion. */
struct comp {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, qp_num, src_qp;
	uint32_t imm;
	unsigned int wc_flags;
};

__attribute__((noinline)) int c_old_post(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr,
					 uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, &wr, &bad);
}

__attribute__((noinline)) int c_old_poll(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

__attribute__((noinline)) int c_ex_post(struct ibv_qp_ex *qpx, uint64_t wr_id, uint64_t addr,
					uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	ibv_wr_start(qpx);
	qpx->wr_id = wr_id;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, rkey, raddr);
	ibv_wr_set_sge(qpx, lkey, addr, len);
	return ibv_wr_complete(qpx);
}

/* One completion: 1, 0 when none, -errno on an error. */
__attribute__((noinline)) int c_ex_poll(struct ibv_cq_ex *cq, struct comp *c)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	int rc = ibv_start_poll(cq, &attr);

	if (rc == ENOENT)
		return 0;
	if (rc)
		return -rc;
	c->wr_id = cq->wr_id;
	c->status = cq->status;
	c->opcode = ibv_wc_read_opcode(cq);
	c->vendor_err = ibv_wc_read_vendor_err(cq);
	c->wc_flags = ibv_wc_read_wc_flags(cq);
	c->byte_len = ibv_wc_read_byte_len(cq);
	c->qp_num = ibv_wc_read_qp_num(cq);
	c->src_qp = ibv_wc_read_src_qp(cq);
	if (c->wc_flags & IBV_WC_WITH_IMM)
		c->imm = ibv_wc_read_imm_data(cq);
	ibv_end_poll(cq);
	return 1;
}

/* The port's first RoCE v2 GID (IPv4-mapped preferred), as our
 * Context::choose_gid picks one. */
static int roce_v2_gid(struct ibv_context *ctx, int tbl_len, union ibv_gid *gid)
{
	struct ibv_gid_entry e;
	int found = -1;

	for (int i = 0; i < tbl_len; i++) {
		if (ibv_query_gid_ex(ctx, PORT, i, &e, 0) || e.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		int v4 = !memcmp(e.gid.raw, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
		if (found < 0 || v4) {
			*gid = e.gid;
			found = i;
		}
		if (v4)
			break;
	}
	return found;
}

static void connect_to(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = PORT,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS);
	if (rc)
		die("ibv_modify_qp to INIT", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = PORT;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER);
	if (rc)
		die("ibv_modify_qp to RTR", rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		die("ibv_modify_qp to RTS", rc);
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "old") && strcmp(argv[1], "ex")) || atol(argv[2]) <= 0) {
		fprintf(stderr, "usage: insn-verbs old|ex N [DEVICE]\n");
		return 2;
	}
	int ex = !strcmp(argv[1], "ex");
	long n = atol(argv[2]);
	const char *name = argc > 3 ? argv[3] : "rxe0";

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "insn-verbs: no verbs device %s (or it did not open)\n", name);
		return 1;
	}
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, PORT, &port))
		die("ibv_query_port", errno);
	union ibv_gid gid;
	int gid_index = roce_v2_gid(ctx, port.gid_tbl_len, &gid);
	if (gid_index < 0) {
		fprintf(stderr, "insn-verbs: %s port %d has no RoCE v2 GID\n", name, PORT);
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd", errno);
	void *src = aligned_alloc(BUF, BUF), *dst = aligned_alloc(BUF, BUF);
	memset(src, 0x5a, BUF);
	memset(dst, 0, BUF);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!smr || !dmr)
		die("ibv_reg_mr", errno);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch)
		die("ibv_create_comp_channel", errno);

	/* A's CQ (the one polled: on the channel), B's (never polled). */
	struct ibv_cq *cq_a, *cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq_ex *cqx = NULL;
	if (ex) {
		struct ibv_cq_init_attr_ex ca = {
			.cqe = 64,
			.channel = ch,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
				    IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP,
		};
		cqx = ibv_create_cq_ex(ctx, &ca);
		if (!cqx)
			die("ibv_create_cq_ex", errno);
		cq_a = ibv_cq_ex_to_cq(cqx);
	} else {
		cq_a = ibv_create_cq(ctx, 64, NULL, ch, 0);
	}
	if (!cq_a || !cq_b)
		die("ibv_create_cq", errno);

	struct ibv_qp_init_attr_ex qa = {
		.send_cq = cq_a,
		.recv_cq = cq_a,
		.cap = { .max_send_wr = 64, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	if (ex) {
		qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	}
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
	qa.send_cq = qa.recv_cq = cq_b;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;
	struct ibv_qp *b = ibv_create_qp_ex(ctx, &qa);
	if (!a || !b)
		die("ibv_create_qp_ex", errno);
	struct ibv_qp_ex *qpx = ex ? ibv_qp_to_qp_ex(a) : NULL;
	if (ex && !qpx)
		die("ibv_qp_to_qp_ex", errno);
	connect_to(a, b->qp_num, &gid, gid_index);
	connect_to(b, a->qp_num, &gid, gid_index);

	for (long i = 0; i < n; i++) {
		int rc = ibv_req_notify_cq(cq_a, 0);
		if (rc)
			die("ibv_req_notify_cq", rc);
		uint64_t off = (uint64_t)(i % 64) * 64;
		rc = ex ? c_ex_post(qpx, i, (uintptr_t)src + off, 64, smr->lkey,
				    (uintptr_t)dst + off, dmr->rkey)
			: c_old_post(a, i, (uintptr_t)src + off, 64, smr->lkey, (uintptr_t)dst + off,
				     dmr->rkey);
		if (rc)
			die(ex ? "ibv_wr_complete" : "ibv_post_send", rc);
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
			die("ibv_get_cq_event", errno);
		ibv_ack_cq_events(ev_cq, 1);
		uint64_t wr_id;
		int status;
		if (ex) {
			struct comp c = { .wr_id = UINT64_MAX };
			rc = c_ex_poll(cqx, &c);
			wr_id = c.wr_id, status = c.status;
		} else {
			struct ibv_wc wc = { .wr_id = UINT64_MAX };
			rc = c_old_poll(cq_a, &wc);
			wr_id = wc.wr_id, status = wc.status;
		}
		if (rc != 1 || wr_id != (uint64_t)i || status != IBV_WC_SUCCESS) {
			fprintf(stderr,
				"insn-verbs: iteration %ld: the poll after the event returned %d (wr_id %lu, status %d), not one successful completion\n",
				i, rc, (unsigned long)wr_id, status);
			return 1;
		}
	}
	if (memcmp(src, dst, n < 64 ? (size_t)n * 64 : BUF)) {
		fprintf(stderr, "insn-verbs: the WRITEs did not land\n");
		return 1;
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq_a);
	ibv_destroy_cq(cq_b);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("insn-verbs %s: %ld WRITEs posted and polled on %s\n", argv[1], n, name);
	return 0;
}
