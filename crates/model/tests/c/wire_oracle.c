/*
 * Oracle for the device model's ring formats (model/src/wire/oracle.rs): the vendor's own
 * mlx5dv.h (rdma-core) writes what the model reads (send WQE segments) and reads what the model
 * writes (CQEs), on cases read from stdin, one per line; one output line per case.
 *
 *   C pi opcode opmod qpn fm_ce_se ds signature imm -> mlx5dv_set_ctrl_seg, 16 bytes in hex
 *   D len lkey addr                                  -> mlx5dv_set_data_seg, 16 bytes in hex
 *   E cs_flags mss inline_sz <hex inline bytes|->    -> mlx5dv_set_eth_seg, 32 bytes in hex
 *   Q <128 hex digits>   -> a CQE as struct mlx5_cqe64 and the mlx5dv_get_cqe_* accessors
 *   R <128 hex digits>   -> an error CQE as struct mlx5_err_cqe
 *
 * With the argument "layout" it prints `name value` lines instead: the offsets and sizes of the
 * vendor structs and the values of the vendor constants the model uses.
 * All numbers are decimal. Unknown lines print "?".
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

static void hex(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int unhex(const char *s, uint8_t *out, size_t max)
{
	size_t n = strlen(s);
	if (n % 2 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return (int)(n / 2);
}

#define N(name, v) printf("%s %lu\n", name, (unsigned long)(v))
#define OFF(s, f) N(#s "." #f, offsetof(struct s, f))

static void layout(void)
{
	N("sizeof.mlx5_cqe64", sizeof(struct mlx5_cqe64));
	OFF(mlx5_cqe64, wqe_id);
	OFF(mlx5_cqe64, hds_ip_ext);
	OFF(mlx5_cqe64, l4_hdr_type_etc);
	OFF(mlx5_cqe64, vlan_info);
	OFF(mlx5_cqe64, srqn_uidx);
	OFF(mlx5_cqe64, byte_cnt);
	OFF(mlx5_cqe64, timestamp);
	OFF(mlx5_cqe64, sop_drop_qpn);
	OFF(mlx5_cqe64, wqe_counter);
	OFF(mlx5_cqe64, op_own);
	OFF(mlx5_err_cqe, vendor_err_synd);
	OFF(mlx5_err_cqe, syndrome);
	N("sizeof.mlx5_wqe_ctrl_seg", sizeof(struct mlx5_wqe_ctrl_seg));
	OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
	OFF(mlx5_wqe_ctrl_seg, qpn_ds);
	OFF(mlx5_wqe_ctrl_seg, fm_ce_se);
	N("sizeof.mlx5_wqe_data_seg", sizeof(struct mlx5_wqe_data_seg));
	OFF(mlx5_wqe_data_seg, byte_count);
	OFF(mlx5_wqe_data_seg, lkey);
	OFF(mlx5_wqe_data_seg, addr);
	OFF(mlx5_wqe_eth_seg, cs_flags);
	OFF(mlx5_wqe_eth_seg, mss);
	OFF(mlx5_wqe_eth_seg, inline_hdr_sz);
	OFF(mlx5_wqe_eth_seg, inline_hdr_start);
	OFF(mlx5_wqe_eth_seg, inline_hdr);
	N("sizeof.mlx5_wqe_inl_data_seg", sizeof(struct mlx5_wqe_inl_data_seg));
	N("MLX5_CQE_REQ", MLX5_CQE_REQ);
	N("MLX5_CQE_RESP_SEND", MLX5_CQE_RESP_SEND);
	N("MLX5_CQE_REQ_ERR", MLX5_CQE_REQ_ERR);
	N("MLX5_CQE_RESP_ERR", MLX5_CQE_RESP_ERR);
	N("MLX5_CQE_INVALID", MLX5_CQE_INVALID);
	N("MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR", MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	N("MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR", MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	N("MLX5_CQE_SYNDROME_LOCAL_PROT_ERR", MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	N("MLX5_CQE_SYNDROME_WR_FLUSH_ERR", MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	N("MLX5_CQE_L2_OK", MLX5_CQE_L2_OK);
	N("MLX5_CQE_L3_OK", MLX5_CQE_L3_OK);
	N("MLX5_CQE_L4_OK", MLX5_CQE_L4_OK);
	N("MLX5_CQE_L3_HDR_TYPE_IPV6", MLX5_CQE_L3_HDR_TYPE_IPV6);
	N("MLX5_CQE_L3_HDR_TYPE_IPV4", MLX5_CQE_L3_HDR_TYPE_IPV4);
	N("MLX5_OPCODE_NOP", MLX5_OPCODE_NOP);
	N("MLX5_OPCODE_SEND", MLX5_OPCODE_SEND);
	N("MLX5_OPCODE_TSO", MLX5_OPCODE_TSO);
	N("MLX5_INVALID_LKEY", MLX5_INVALID_LKEY);
	N("MLX5_WQE_CTRL_CQ_UPDATE", MLX5_WQE_CTRL_CQ_UPDATE);
	N("MLX5_INLINE_SEG", MLX5_INLINE_SEG);
	N("MLX5_ETH_WQE_L3_CSUM", MLX5_ETH_WQE_L3_CSUM);
	N("MLX5_ETH_WQE_L4_CSUM", MLX5_ETH_WQE_L4_CSUM);
}

int main(int argc, char **argv)
{
	char line[512];
	if (argc > 1 && strcmp(argv[1], "layout") == 0) {
		layout();
		return 0;
	}
	while (fgets(line, sizeof line, stdin)) {
		char kind = line[0];
		if (kind == 'C') {
			unsigned long pi, opcode, opmod, qpn, fm, ds, sig, imm;
			struct mlx5_wqe_ctrl_seg seg;
			memset(&seg, 0, sizeof seg);
			sscanf(line + 1, "%lu %lu %lu %lu %lu %lu %lu %lu", &pi, &opcode, &opmod, &qpn,
			       &fm, &ds, &sig, &imm);
			mlx5dv_set_ctrl_seg(&seg, (uint16_t)pi, (uint8_t)opcode, (uint8_t)opmod,
					    (uint32_t)qpn, (uint8_t)fm, (uint8_t)ds, (uint8_t)sig,
					    (uint32_t)imm);
			hex(&seg, sizeof seg);
		} else if (kind == 'D') {
			unsigned long len, lkey;
			unsigned long long addr;
			struct mlx5_wqe_data_seg seg;
			sscanf(line + 1, "%lu %lu %llu", &len, &lkey, &addr);
			mlx5dv_set_data_seg(&seg, (uint32_t)len, (uint32_t)lkey, (uintptr_t)addr);
			hex(&seg, sizeof seg);
		} else if (kind == 'E') {
			unsigned long cs, mss, sz;
			char bytes[128];
			uint8_t inl[18] = {0};
			struct mlx5_wqe_eth_seg seg;
			memset(&seg, 0, sizeof seg);
			sscanf(line + 1, "%lu %lu %lu %127s", &cs, &mss, &sz, bytes);
			if (bytes[0] != '-')
				unhex(bytes, inl, sizeof inl);
			mlx5dv_set_eth_seg(&seg, (uint8_t)cs, (uint16_t)mss, (uint16_t)sz, inl);
			hex(&seg, sizeof seg);
		} else if (kind == 'Q' || kind == 'R') {
			char digits[256];
			uint8_t raw[64];
			struct mlx5_cqe64 cqe;
			struct mlx5_err_cqe err;
			sscanf(line + 1, "%255s", digits);
			if (unhex(digits, raw, sizeof raw) != 64) {
				printf("?\n");
				continue;
			}
			memcpy(&cqe, raw, 64);
			memcpy(&err, raw, 64);
			printf("%u %u %u %u %u %u %u ", mlx5dv_get_cqe_owner(&cqe),
			       mlx5dv_get_cqe_se(&cqe), mlx5dv_get_cqe_format(&cqe),
			       mlx5dv_get_cqe_opcode(&cqe), be16toh(cqe.wqe_counter),
			       be32toh(cqe.sop_drop_qpn), be32toh(cqe.srqn_uidx));
			if (kind == 'Q')
				printf("%u %u %u %u %u %llu", be16toh(cqe.wqe_id), be32toh(cqe.byte_cnt),
				       be16toh(cqe.vlan_info), cqe.hds_ip_ext, cqe.l4_hdr_type_etc,
				       (unsigned long long)be64toh(cqe.timestamp));
			else
				printf("%u %u", err.syndrome, err.vendor_err_synd);
		} else {
			printf("?");
		}
		printf("\n");
	}
	return 0;
}
