/*
 * Oracle for tests/dv/oracle.rs: evaluates the vendor's own mlx5dv.h helpers and struct layouts
 * on cases read from stdin, one per line, and prints the results in hex, one line per case.
 *
 *   C pi opcode opmod qpn fm_ce_se ds signature imm  -> mlx5dv_set_ctrl_seg, 16 bytes
 *   D len lkey addr                                   -> mlx5dv_set_data_seg, 16 bytes
 *   E cs_flags mss inline_sz <hex inline bytes|->     -> mlx5dv_set_eth_seg, 32 bytes
 *   N next_wqe_index                                  -> struct mlx5_wqe_srq_next_seg, 16 bytes
 *   Q <128 hex digits>                                -> CQE accessors and fields
 * All numbers are decimal. Unknown lines print "?".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <endian.h>
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

int main(void)
{
	char line[512];
	while (fgets(line, sizeof line, stdin)) {
		char kind = line[0];
		if (kind == 'C') {
			unsigned long pi, opcode, opmod, qpn, fm, ds, sig, imm;
			struct mlx5_wqe_ctrl_seg seg;
			memset(&seg, 0, sizeof seg);
			sscanf(line + 1, "%lu %lu %lu %lu %lu %lu %lu %lu", &pi, &opcode, &opmod, &qpn,
			       &fm, &ds, &sig, &imm);
			/* imm is stored as given: pass it already big-endian, as for SEND_WITH_IMM. */
			mlx5dv_set_ctrl_seg(&seg, (uint16_t)pi, (uint8_t)opcode, (uint8_t)opmod,
					    (uint32_t)qpn, (uint8_t)fm, (uint8_t)ds, (uint8_t)sig,
					    htobe32((uint32_t)imm));
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
		} else if (kind == 'N') {
			unsigned long next;
			struct mlx5_wqe_srq_next_seg seg;
			memset(&seg, 0, sizeof seg);
			sscanf(line + 1, "%lu", &next);
			seg.next_wqe_index = htobe16((uint16_t)next);
			hex(&seg, sizeof seg);
		} else if (kind == 'Q') {
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
			printf("%u %u %u %u %u %u %u %u %u %u %u %u %llu %u %u",
			       mlx5dv_get_cqe_owner(&cqe), mlx5dv_get_cqe_se(&cqe),
			       mlx5dv_get_cqe_format(&cqe), mlx5dv_get_cqe_opcode(&cqe),
			       be16toh(cqe.wqe_id), be16toh(cqe.wqe_counter), be32toh(cqe.byte_cnt),
			       be32toh(cqe.sop_drop_qpn), be16toh(cqe.vlan_info), cqe.hds_ip_ext,
			       cqe.l4_hdr_type_etc, be32toh(cqe.srqn_uidx),
			       (unsigned long long)be64toh(cqe.timestamp), err.syndrome,
			       err.vendor_err_synd);
		} else {
			printf("?");
		}
		printf("\n");
	}
	return 0;
}
