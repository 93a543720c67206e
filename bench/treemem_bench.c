/*
 * treemem_bench.c - the memory and lookup cost of a persistent FlexTree's
 * leaf cache (flextree_options.cache_size) at several budgets.
 *
 * One tree file of N extents is built first (random insert positions, the
 * fragmentation a random load leaves in FlexDB: one extent per pair, the
 * leaves about 70 % full; built in a child with an unbounded cache and
 * committed once).  Then, for each budget, a forked child (so that every budget
 * starts from a fresh heap) opens the file and measures:
 *
 *   open      wall time of flextree_open, lazy (internal nodes only) and,
 *             for the first budget, the full verifying open as well
 *   rss-open  VmRSS after the lazy open
 *   uniform   random byte lookups over the whole space: ops/s, mean, p50,
 *             p99 and p99.9 in microseconds, leaves read back per lookup
 *   hot       the same over a random 1 % of the space (fits most budgets)
 *   rss       VmRSS after both passes, and the cached leaves reported by
 *             flextree_stats
 *
 * Every budget's child reads the same file, whose pages the kernel keeps
 * after the first: a miss here is a pread from the page cache plus a
 * checksum, not a disk read.  RSS includes the program and the tree's
 * internal nodes and leaf stubs (about 75 bytes per leaf); the allocator
 * may keep freed leaf bodies mapped for a while, which shows as RSS above
 * the budget.  One line per budget:
 *
 *   budget  open-ms  rss-open-MiB  uniform: ops/s us/op p50 p99 p99.9 reads/op
 *           hot: ops/s us/op p50 p99 reads/op  rss-MiB cached-leaves
 *
 * Options: --extents N (default 1000000), --lookups N (1000000),
 * --budgets-mb a,b,... (1,4,16,64,1024), --dir D (default /tmp), --quick
 * (100000 extents, 200000 lookups).
 */
#include <inttypes.h>
#include <sys/wait.h>

#include "bench_util.h"
#include "flextree.h"

#define EXT_LEN 100u

struct result {
	double open_ms, full_open_ms, rss_open, rss_end;
	double u_opsps, u_us, u_p50, u_p99, u_p999, u_reads;
	double h_opsps, h_us, h_p50, h_p99, h_reads;
	uint64_t cached, leaves, cache_leaves;
};

static char path[PATH_MAX];

static void usage(FILE *f)
{
	fprintf(f, "usage: treemem_bench [--extents N] [--lookups N] [--budgets-mb a,b,...] "
		   "[--dir D] [--quick]\n");
}

static void build(uint64_t n)
{
	struct flextree_options o = {.cache_size = (uint64_t)1 << 40};
	struct flextree *t;
	int rc = flextree_open(path, &o, &t);
	if (rc)
		die("open %s: %s", path, flex_strerror(rc));
	struct rng r = {42};
	double t0 = now_sec();
	for (uint64_t i = 0; i < n; i++) {
		uint64_t at = rng_below(&r, i + 1) * EXT_LEN;
		/* Never physically contiguous: no merging. */
		if ((rc = flextree_insert(t, at, 2 * EXT_LEN * i, EXT_LEN)) != 0)
			die("insert: %s", flex_strerror(rc));
	}
	if ((rc = flextree_close(t)) != 0)
		die("commit: %s", flex_strerror(rc));
	struct stat sb;
	stat(path, &sb);
	printf("tree:     %" PRIu64 " extents of %u B inserted at random positions in %.1f s, "
	       "file %.1f MiB\n",
	       n, EXT_LEN, now_sec() - t0, (double)sb.st_size / 1048576.0);
}

/* Lookups of random offsets within [0, span): fills the latency fields. */
static void lookups(struct flextree *t, uint64_t span, uint64_t base, uint64_t n, double *opsps,
		    double *us, double *p50, double *p99, double *p999, double *reads)
{
	struct hist h;
	memset(&h, 0, sizeof(h));
	struct rng r = {7 + span};
	struct flextree_stats a, b;
	flextree_stats(t, &a);
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint64_t x = base + rng_below(&r, span), p, run;
		uint64_t s = now_ns();
		int rc = flextree_lookup(t, x, &p, &run);
		h_add(&h, now_ns() - s);
		if (rc)
			die("lookup(%" PRIu64 "): %s", x, flex_strerror(rc));
	}
	uint64_t t1 = now_ns();
	flextree_stats(t, &b);
	struct lat_summary l;
	h_summary(&h, t0, t1, &l);
	*opsps = l.opsps;
	*us = l.usop;
	*p50 = l.p50;
	*p99 = l.p99;
	if (p999)
		*p999 = l.p999;
	*reads = (double)(b.leaf_reads - a.leaf_reads) / (double)n;
}

static void run_budget(uint64_t budget, uint64_t nlook, int full, struct result *res)
{
	struct flextree_options o = {.cache_size = budget, .read_only = 1};
	struct flextree *t;
	int rc;
	if (full) {
		double t0 = now_sec();
		if ((rc = flextree_open(path, &o, &t)) != 0)
			die("open: %s", flex_strerror(rc));
		res->full_open_ms = (now_sec() - t0) * 1e3;
		flextree_close(t);
	}
	o.lazy_open = 1;
	double t0 = now_sec();
	if ((rc = flextree_open(path, &o, &t)) != 0)
		die("open: %s", flex_strerror(rc));
	res->open_ms = (now_sec() - t0) * 1e3;
	res->rss_open = rss_now().rss;
	uint64_t size = flextree_size(t);
	lookups(t, size, 0, nlook, &res->u_opsps, &res->u_us, &res->u_p50, &res->u_p99,
		&res->u_p999, &res->u_reads);
	struct rng r = {99};
	uint64_t hot = size / 100 ? size / 100 : 1;
	lookups(t, hot, rng_below(&r, size - hot + 1), nlook, &res->h_opsps, &res->h_us,
		&res->h_p50, &res->h_p99, NULL, &res->h_reads);
	res->rss_end = rss_now().rss;
	struct flextree_stats st;
	flextree_stats(t, &st);
	res->cached = st.cached_leaves;
	res->leaves = st.leaves;
	res->cache_leaves = st.cache_leaves;
	flextree_close(t);
}

int main(int argc, char **argv)
{
	uint64_t n = 1000000, nlook = 1000000;
	const char *budgets = "1,4,16,64,1024", *dir = "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--extents"))
			n = opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--lookups"))
			nlook = opt_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--budgets-mb"))
			budgets = opt_value(argc, argv, &i);
		else if (!strcmp(argv[i], "--dir"))
			dir = opt_value(argc, argv, &i);
		else if (!strcmp(argv[i], "--quick")) {
			n = 100000;
			nlook = 200000;
		} else
			usage_exit(usage, !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"));
	}
	char cpu[256], date[64];
	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	printf("treemem_bench: a persistent FlexTree's leaf cache, memory and lookups per budget\n");
	print_build_mode();
	printf("library:  flex %s\n", flex_version(NULL, NULL, NULL));
	printf("cpu:      %s\n", cpu);
	printf("date:     %s\n", date);
	printf("config:   %" PRIu64 " extents, %" PRIu64 " lookups per pass, budgets %s MiB\n", n,
	       nlook, budgets);
	xsnprintf(path, sizeof(path), "%s/treemem_bench.%d", dir, (int)getpid());
	unlink(path);
	/* In a child, so that the budgets' children do not inherit the heap
	 * the build left. */
	pid_t bp = bench_fork();
	if (bp == 0) {
		build(n);
		fflush(stdout);
		_exit(0);
	}
	int bst;
	waitpid(bp, &bst, 0);
	if (!WIFEXITED(bst) || WEXITSTATUS(bst))
		die("building the tree failed");
	printf("%-9s %8s %9s | %-44s | %-33s | %8s %8s\n", "budget", "open-ms", "rss-open",
	       "uniform: ops/s  us/op   p50   p99 p99.9 rd/op", "hot 1%: ops/s  us/op   p50   p99 rd/op",
	       "rss-MiB", "cached");
	char *list = strdup(budgets);
	int first = 1;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		uint64_t mb = parse_u64("--budgets-mb", tok);
		int fds[2];
		if (pipe(fds))
			die("pipe: %s", strerror(errno));
		pid_t pid = bench_fork();
		if (pid == 0) {
			close(fds[0]);
			struct result res = {0};
			run_budget(mb << 20, nlook, first, &res);
			if (write(fds[1], &res, sizeof(res)) != (ssize_t)sizeof(res))
				_exit(3);
			_exit(0);
		}
		close(fds[1]);
		struct result res;
		ssize_t got = read(fds[0], &res, sizeof(res));
		close(fds[0]);
		int status;
		waitpid(pid, &status, 0);
		if (got != (ssize_t)sizeof(res) || !WIFEXITED(status) || WEXITSTATUS(status))
			die("budget %" PRIu64 " MiB: child failed", mb);
		if (first)
			printf("full verifying open: %.0f ms (reads every leaf)\n", res.full_open_ms);
		char lab[32];
		xsnprintf(lab, sizeof(lab), "%" PRIu64 "MiB", mb);
		printf("%-9s %8.1f %9.1f | %12.0f %6.2f %5.2f %5.2f %5.2f %5.3f | %12.0f %6.2f %5.2f "
		       "%5.2f %5.3f | %8.1f %8" PRIu64 "\n",
		       lab, res.open_ms, res.rss_open, res.u_opsps, res.u_us, res.u_p50, res.u_p99,
		       res.u_p999, res.u_reads, res.h_opsps, res.h_us, res.h_p50, res.h_p99,
		       res.h_reads, res.rss_end, res.cached);
		if (first)
			printf("          (%" PRIu64 " leaves in the tree)\n", res.leaves);
		first = 0;
		fflush(stdout);
	}
	free(list);
	unlink(path);
	return 0;
}
