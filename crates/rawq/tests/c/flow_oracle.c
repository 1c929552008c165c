/*
 * Oracle for rawq's flow::verbs::compile: builds the ibv_create_flow buffer for a rule with
 * rdma-core's own structs from <infiniband/verbs.h>, independently of the Rust code, and prints
 * it in hex. The Rust test (tests/flow/verbs_oracle.rs) compares the two byte for byte.
 *
 * Input: one rule per line, whitespace-separated key=value fields, all optional except action:
 *   prio=N port=N dmac=MAC/MASK smac=MAC/MASK vlan=N ethertype=N ip=4|6 src=ADDR/LEN
 *   dst=ADDR/LEN proto=N l4=udp|tcp sport=N dport=N tag=N action=queue|rss|drop
 * Numbers are decimal (strtol base 0, so 0x.. works too). MACs are xx:xx:xx:xx:xx:xx.
 * Output: one line per input line, the buffer as lower-case hex, or "error <why>".
 *
 * The mapping is the one documented in src/flow/verbs.rs: an eth spec first (MACs, ethertype
 * with mask 0xffff, explicit or implied by the IP version, VLAN id with mask 0x0fff), then
 * ipv4 / ipv4_ext (when a protocol has no L4 spec to carry it) / ipv6, then tcp/udp, then a
 * drop action, or a flow tag action (tag=N) on a rule that does not drop; values ANDed with masks;
 * DONT_TRAP for a multicast destination unless dropping.
 */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct net {
	int set;
	int len;
	uint8_t addr[16];
};

struct rule {
	int prio, port;
	int has_dmac, has_smac;
	uint8_t dmac[6], dmask[6], smac[6], smask[6];
	long vlan, ethertype, proto, sport, dport;
	int ip, l4; /* ip: 0, 4, 6; l4: 0, 6 (tcp), 17 (udp) */
	struct net src, dst;
	int drop;
	long tag;
};

static int parse_mac(const char *s, uint8_t out[6])
{
	unsigned v[6];
	int n = 0;
	if (sscanf(s, "%x:%x:%x:%x:%x:%x%n", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &n) != 6)
		return -1;
	for (int i = 0; i < 6; i++)
		out[i] = (uint8_t)v[i];
	return n;
}

static int parse_mac_mask(const char *s, uint8_t addr[6], uint8_t mask[6])
{
	int n = parse_mac(s, addr);
	if (n < 0 || s[n] != '/')
		return -1;
	return parse_mac(s + n + 1, mask) < 0 ? -1 : 0;
}

static int parse_net(const char *s, int family, struct net *out)
{
	char buf[128];
	char *slash;
	snprintf(buf, sizeof(buf), "%s", s);
	slash = strchr(buf, '/');
	if (!slash)
		return -1;
	*slash = 0;
	out->len = atoi(slash + 1);
	out->set = 1;
	return inet_pton(family, buf, out->addr) == 1 ? 0 : -1;
}

/* Writes address bytes ANDed with the prefix mask, and the mask itself. */
static void put_prefix(const struct net *n, int bytes, uint8_t *val, uint8_t *mask)
{
	for (int i = 0; i < bytes; i++) {
		int bits = n->len - 8 * i;
		uint8_t m = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));
		mask[i] = m;
		val[i] = n->addr[i] & m;
	}
}

static void emit(const struct rule *r)
{
	static uint8_t buf[1024] __attribute__((aligned(8)));
	struct ibv_flow_attr *attr = (struct ibv_flow_attr *)buf;
	size_t off = sizeof(*attr);
	int nspecs = 0;
	long et = r->ethertype;
	long lone = r->l4 ? -1 : r->proto;
	int ip = r->ip;
	int proto_done = 0;

	memset(buf, 0, sizeof(buf));
	attr->comp_mask = 0;
	attr->type = IBV_FLOW_ATTR_NORMAL;
	attr->priority = (uint16_t)r->prio;
	attr->port = (uint8_t)r->port;
	if (r->has_dmac && (r->dmac[0] & r->dmask[0] & 1) && !r->drop)
		attr->flags = IBV_FLOW_ATTR_FLAGS_DONT_TRAP;

	/* L2 */
	struct ibv_flow_spec_eth *eth = (struct ibv_flow_spec_eth *)(buf + off);
	eth->type = IBV_FLOW_SPEC_ETH;
	eth->size = sizeof(*eth);
	for (int i = 0; i < 6; i++) {
		if (r->has_dmac) {
			eth->val.dst_mac[i] = r->dmac[i] & r->dmask[i];
			eth->mask.dst_mac[i] = r->dmask[i];
		}
		if (r->has_smac) {
			eth->val.src_mac[i] = r->smac[i] & r->smask[i];
			eth->mask.src_mac[i] = r->smask[i];
		}
	}
	if (et < 0 && r->ip == 4)
		et = 0x0800;
	if (et < 0 && r->ip == 6)
		et = 0x86dd;
	if (et >= 0) {
		eth->val.ether_type = htons((uint16_t)et);
		eth->mask.ether_type = htons(0xffff);
	}
	if (r->vlan >= 0) {
		eth->val.vlan_tag = htons((uint16_t)r->vlan & 0x0fff);
		eth->mask.vlan_tag = htons(0x0fff);
	}
	off += sizeof(*eth);
	nspecs++;

	/* L3 */
	if (!ip && lone >= 0 && r->ethertype == 0x0800)
		ip = 4;
	if (!ip && lone >= 0 && r->ethertype == 0x86dd)
		ip = 6;
	if (ip == 4 && lone >= 0) {
		struct ibv_flow_spec_ipv4_ext *s = (struct ibv_flow_spec_ipv4_ext *)(buf + off);
		s->type = IBV_FLOW_SPEC_IPV4_EXT;
		s->size = sizeof(*s);
		if (r->src.set)
			put_prefix(&r->src, 4, (uint8_t *)&s->val.src_ip, (uint8_t *)&s->mask.src_ip);
		if (r->dst.set)
			put_prefix(&r->dst, 4, (uint8_t *)&s->val.dst_ip, (uint8_t *)&s->mask.dst_ip);
		s->val.proto = (uint8_t)lone;
		s->mask.proto = 0xff;
		proto_done = 1;
		off += sizeof(*s);
		nspecs++;
	} else if (ip == 4) {
		struct ibv_flow_spec_ipv4 *s = (struct ibv_flow_spec_ipv4 *)(buf + off);
		s->type = IBV_FLOW_SPEC_IPV4;
		s->size = sizeof(*s);
		if (r->src.set)
			put_prefix(&r->src, 4, (uint8_t *)&s->val.src_ip, (uint8_t *)&s->mask.src_ip);
		if (r->dst.set)
			put_prefix(&r->dst, 4, (uint8_t *)&s->val.dst_ip, (uint8_t *)&s->mask.dst_ip);
		off += sizeof(*s);
		nspecs++;
	} else if (ip == 6) {
		struct ibv_flow_spec_ipv6 *s = (struct ibv_flow_spec_ipv6 *)(buf + off);
		s->type = IBV_FLOW_SPEC_IPV6;
		s->size = sizeof(*s);
		if (r->src.set)
			put_prefix(&r->src, 16, s->val.src_ip, s->mask.src_ip);
		if (r->dst.set)
			put_prefix(&r->dst, 16, s->val.dst_ip, s->mask.dst_ip);
		if (lone >= 0) {
			s->val.next_hdr = (uint8_t)lone;
			s->mask.next_hdr = 0xff;
			proto_done = 1;
		}
		off += sizeof(*s);
		nspecs++;
	}

	/* L4 */
	int l4 = r->l4;
	if (!l4 && lone >= 0 && !proto_done) {
		if (lone != 6 && lone != 17) {
			printf("error protocol %ld needs an IP version\n", lone);
			return;
		}
		l4 = (int)lone;
	}
	if (l4) {
		struct ibv_flow_spec_tcp_udp *s = (struct ibv_flow_spec_tcp_udp *)(buf + off);
		s->type = l4 == 6 ? IBV_FLOW_SPEC_TCP : IBV_FLOW_SPEC_UDP;
		s->size = sizeof(*s);
		if (r->sport >= 0) {
			s->val.src_port = htons((uint16_t)r->sport);
			s->mask.src_port = htons(0xffff);
		}
		if (r->dport >= 0) {
			s->val.dst_port = htons((uint16_t)r->dport);
			s->mask.dst_port = htons(0xffff);
		}
		off += sizeof(*s);
		nspecs++;
	}

	if (r->tag >= 0 && !r->drop) {
		struct ibv_flow_spec_action_tag *s = (struct ibv_flow_spec_action_tag *)(buf + off);
		s->type = IBV_FLOW_SPEC_ACTION_TAG;
		s->size = sizeof(*s);
		s->tag_id = (uint32_t)r->tag;
		off += sizeof(*s);
		nspecs++;
	}
	if (r->drop) {
		struct ibv_flow_spec_action_drop *s = (struct ibv_flow_spec_action_drop *)(buf + off);
		s->type = IBV_FLOW_SPEC_ACTION_DROP;
		s->size = sizeof(*s);
		off += sizeof(*s);
		nspecs++;
	}

	attr->size = (uint16_t)off;
	attr->num_of_specs = (uint8_t)nspecs;
	for (size_t i = 0; i < off; i++)
		printf("%02x", buf[i]);
	printf("\n");
}

int main(void)
{
	char line[4096];

	while (fgets(line, sizeof(line), stdin)) {
		struct rule r;
		const char *bad = NULL;
		memset(&r, 0, sizeof(r));
		r.vlan = r.ethertype = r.proto = r.sport = r.dport = r.tag = -1;
		r.port = 1;
		for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
			char *eq = strchr(tok, '=');
			if (!eq) {
				bad = tok;
				break;
			}
			*eq = 0;
			const char *k = tok, *v = eq + 1;
			if (!strcmp(k, "prio"))
				r.prio = (int)strtol(v, NULL, 0);
			else if (!strcmp(k, "port"))
				r.port = (int)strtol(v, NULL, 0);
			else if (!strcmp(k, "dmac")) {
				r.has_dmac = 1;
				if (parse_mac_mask(v, r.dmac, r.dmask))
					bad = v;
			} else if (!strcmp(k, "smac")) {
				r.has_smac = 1;
				if (parse_mac_mask(v, r.smac, r.smask))
					bad = v;
			} else if (!strcmp(k, "vlan"))
				r.vlan = strtol(v, NULL, 0);
			else if (!strcmp(k, "ethertype"))
				r.ethertype = strtol(v, NULL, 0);
			else if (!strcmp(k, "ip"))
				r.ip = atoi(v);
			else if (!strcmp(k, "src")) {
				if (parse_net(v, r.ip == 6 ? AF_INET6 : AF_INET, &r.src))
					bad = v;
			} else if (!strcmp(k, "dst")) {
				if (parse_net(v, r.ip == 6 ? AF_INET6 : AF_INET, &r.dst))
					bad = v;
			} else if (!strcmp(k, "proto"))
				r.proto = strtol(v, NULL, 0);
			else if (!strcmp(k, "l4"))
				r.l4 = !strcmp(v, "tcp") ? 6 : 17;
			else if (!strcmp(k, "sport"))
				r.sport = strtol(v, NULL, 0);
			else if (!strcmp(k, "dport"))
				r.dport = strtol(v, NULL, 0);
			else if (!strcmp(k, "tag"))
				r.tag = strtol(v, NULL, 0);
			else if (!strcmp(k, "action"))
				r.drop = !strcmp(v, "drop");
			else
				bad = k;
			if (bad)
				break;
		}
		if (bad)
			printf("error bad field %s\n", bad);
		else
			emit(&r);
		fflush(stdout);
	}
	return 0;
}
