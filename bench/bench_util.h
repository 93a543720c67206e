/*
 * bench_util.h - the helpers the benchmark programs share: error exits,
 * clocks, the splitmix64 stream, a latency histogram, medians, directory
 * sizes and removal, /proc readings of the process (write bytes, RSS, CPU),
 * the header lines every program prints (build mode, CPU model, date), CSV
 * and command-line helpers.
 *
 * The Makefile builds every bench/NAME_bench.c as its own program and
 * compiles nothing else, so shared code lives here as static functions;
 * BENCH_UNUSED keeps a program that does not call one of them quiet.
 *
 * The including file first defines BENCH_NAME, the program's name (a
 * string, or an expression such as program_invocation_short_name in the
 * objects several programs link), which prefixes every error message;
 * with BENCH_PID_IN_MESSAGES the process id follows it in brackets
 * (the programs whose engines run in forked children).
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_util.h"
#endif

#define BENCH_UNUSED __attribute__((unused))

/* ---- messages ------------------------------------------------------------------ */

BENCH_UNUSED static void bench_msg_prefix(void)
{
#ifdef BENCH_PID_IN_MESSAGES
	fprintf(stderr, "%s[%d]: ", BENCH_NAME, (int)getpid());
#else
	fprintf(stderr, "%s: ", BENCH_NAME);
#endif
}

/* Prints the message and exits with status 1 (atexit handlers run). */
__attribute__((noreturn, format(printf, 1, 2))) BENCH_UNUSED static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	bench_msg_prefix();
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* snprintf that refuses to truncate (paths, commands). */
__attribute__((format(printf, 3, 4))) BENCH_UNUSED static void xsnprintf(char *buf, size_t cap,
									 const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap)
		die("path or command too long");
}

BENCH_UNUSED static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

/* ---- clocks -------------------------------------------------------------------- */

BENCH_UNUSED static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

BENCH_UNUSED static double secs_since(uint64_t t0_ns)
{
	return (double)(now_ns() - t0_ns) / 1e9;
}

BENCH_UNUSED static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- random numbers -------------------------------------------------------------- */

/* splitmix64: fixed-seed, fast, good enough for choosing offsets and keys. */
BENCH_UNUSED static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

struct rng {
	uint64_t s;
};

BENCH_UNUSED static uint64_t rng_next(struct rng *r)
{
	return splitmix64(&r->s);
}

/* Uniform in [0, n); n > 0.  The modulo bias is below 2^-30 for n < 2^34. */
BENCH_UNUSED static uint64_t rng_below(struct rng *r, uint64_t n)
{
	return rng_next(r) % n;
}

/* ---- values --------------------------------------------------------------------- */

/* Random bytes the values are cut from. */
#define VALPOOL (1u << 20)

/* VALPOOL incompressible bytes: the splitmix64 stream of seed. */
BENCH_UNUSED static char *valpool_new(uint64_t seed)
{
	char *pool = malloc(VALPOOL);

	if (!pool)
		die("out of memory");
	for (size_t i = 0; i < VALPOOL; i += 8) {
		uint64_t x = splitmix64(&seed);
		memcpy(pool + i, &x, 8);
	}
	return pool;
}

/* The value of key number keynum as written by version: size bytes, the
 * key number first (when there is room for it), then pool bytes at a
 * place that depends on both; size + 8 <= VALPOOL / 2. */
BENCH_UNUSED static void make_value(char *v, uint32_t size, const char *pool, uint64_t keynum,
				    uint64_t version)
{
	uint32_t n = size;

	if (n >= 8) {
		memcpy(v, &keynum, 8);
		v += 8;
		n -= 8;
	}
	size_t off = (size_t)((keynum * 2654435761u + version * 977u) % (VALPOOL - n));
	memcpy(v, pool + off, n);
}

/* Whether v could be make_value's for keynum: its size and key number. */
BENCH_UNUSED static int value_ok(const char *v, size_t vlen, uint32_t size, uint64_t keynum)
{
	if (vlen != size)
		return 0;
	if (vlen >= 8) {
		uint64_t got;

		memcpy(&got, v, 8);
		return got == keynum;
	}
	return 1;
}

/* ---- latency histogram ------------------------------------------------------------ */

/* Log-linear: values below H_LINEAR ns exactly, then 32 sub-buckets per
 * power of two (~3% resolution); percentiles are bucket midpoints. */
#define H_SUB_BITS 5
#define H_SUB (1 << H_SUB_BITS)
#define H_LINEAR (2 * H_SUB)
#define H_N (H_LINEAR + (64 - H_SUB_BITS - 1) * H_SUB)

struct hist {
	uint64_t b[H_N];
	uint64_t n, max;
	double sum;
};

BENCH_UNUSED static int h_idx(uint64_t v)
{
	if (v < H_LINEAR)
		return (int)v;
	int e = 63 - __builtin_clzll(v);
	return H_LINEAR + (e - H_SUB_BITS - 1) * H_SUB +
	       (int)((v >> (e - H_SUB_BITS)) & (H_SUB - 1));
}

/* Midpoint of bucket i in ns. */
BENCH_UNUSED static double h_mid(int i)
{
	if (i < H_LINEAR)
		return i;
	int e = (i - H_LINEAR) / H_SUB + H_SUB_BITS + 1;
	int sub = (i - H_LINEAR) % H_SUB;
	double lo = (double)((uint64_t)(H_SUB + sub) << (e - H_SUB_BITS));
	return lo + (double)((uint64_t)1 << (e - H_SUB_BITS)) / 2;
}

BENCH_UNUSED static inline void h_add(struct hist *h, uint64_t v)
{
	h->b[h_idx(v)]++;
	h->n++;
	h->sum += (double)v;
	if (v > h->max)
		h->max = v;
}

BENCH_UNUSED static void h_merge(struct hist *d, const struct hist *s)
{
	for (int i = 0; i < H_N; i++)
		d->b[i] += s->b[i];
	d->n += s->n;
	d->sum += s->sum;
	if (s->max > d->max)
		d->max = s->max;
}

/* Percentile in microseconds. */
BENCH_UNUSED static double h_pct(const struct hist *h, double p)
{
	if (!h->n)
		return NAN;
	uint64_t want = (uint64_t)ceil(p * (double)h->n), acc = 0;

	if (want < 1)
		want = 1;
	for (int i = 0; i < H_N; i++) {
		acc += h->b[i];
		if (acc >= want)
			return h_mid(i) / 1000.0;
	}
	return (double)h->max / 1000.0;
}

/* What the merged histogram of a timed loop and its wall time (t_start to
 * t_end, ns) say: operations, seconds, ops/s, then microseconds: the mean
 * latency, p50, p99, p99.9 and the maximum. */
#define LAT_SUMMARY_FIELDS double ops, secs, opsps, usop, p50, p99, p999, maxus

struct lat_summary {
	LAT_SUMMARY_FIELDS;
};

/* A struct lat_summary member named lat whose fields are also members of
 * the enclosing struct (m->lat for h_summary, m->p99 everywhere else). */
#define LAT_SUMMARY_MEMBER                                                                         \
	union {                                                                                    \
		struct lat_summary lat;                                                            \
		struct {                                                                           \
			LAT_SUMMARY_FIELDS;                                                        \
		};                                                                                 \
	}

BENCH_UNUSED static void h_summary(const struct hist *h, uint64_t t_start, uint64_t t_end,
				   struct lat_summary *l)
{
	l->ops = (double)h->n;
	l->secs = (double)(t_end - t_start) / 1e9;
	l->opsps = l->ops / l->secs;
	l->usop = h->n ? h->sum / (double)h->n / 1000.0 : NAN;
	l->p50 = h_pct(h, 0.50);
	l->p99 = h_pct(h, 0.99);
	l->p999 = h_pct(h, 0.999);
	l->maxus = (double)h->max / 1000.0;
}

/* ---- medians and numbers ------------------------------------------------------------- */

/* Most values median() takes (repetitions of one measurement). */
#define BENCH_MAX_MEDIAN 16

BENCH_UNUSED static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of the values of v[0..n) that are not NaN; NaN if none. */
BENCH_UNUSED static double median(const double *v, int n)
{
	double t[BENCH_MAX_MEDIAN];
	int k = 0;

	if (n > BENCH_MAX_MEDIAN)
		die("internal: median of %d values", n);
	for (int i = 0; i < n; i++)
		if (!isnan(v[i]))
			t[k++] = v[i];
	if (!k)
		return NAN;
	qsort(t, (size_t)k, sizeof(t[0]), cmp_double);
	return k % 2 ? t[k / 2] : (t[k / 2 - 1] + t[k / 2]) / 2;
}

/* v with prec decimals and suffix, or "-" when NaN. */
BENCH_UNUSED static void fmt_num(char *buf, size_t cap, int prec, const char *suffix, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%.*f%s", prec, v, suffix);
}

/* ---- directories ------------------------------------------------------------------------ */

static uint64_t du_acc;

static int du_fn(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)p;
	(void)f;
	if (flag == FTW_F)
		du_acc += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* Allocated bytes of the files below dir (du). */
BENCH_UNUSED static uint64_t du(const char *dir)
{
	du_acc = 0;
	nftw(dir, du_fn, 16, FTW_PHYS);
	return du_acc;
}

static int rm_fn(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(p);
	return 0;
}

/* rm -rf path (a directory or a file); a missing path is no error. */
BENCH_UNUSED static void rmtree(const char *path)
{
	nftw(path, rm_fn, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the process, from /proc --------------------------------------------------------------- */

/* /proc/self/io of the process (every thread, exited ones included):
 * rchar and syscr, bytes and calls of read system calls (page-cache hits
 * included; io_uring reads and page faults of mapped files are not read
 * calls); read_bytes, bytes this process made the block layer read
 * (page-cache misses, readahead included, faults of mapped files too);
 * write_bytes, bytes it dirtied for the block layer, and
 * cancelled_write_bytes, those of them that were dropped (files deleted
 * or truncated before writeback). */
struct pio {
	uint64_t rchar, syscr, rb, wb, cwb;
};

BENCH_UNUSED static struct pio proc_io(void)
{
	struct pio r = {0, 0, 0, 0, 0};
	char line[128];
	FILE *f = fopen("/proc/self/io", "r");

	if (!f)
		return r;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;

		if (sscanf(line, "rchar: %llu", &v) == 1)
			r.rchar = v;
		else if (sscanf(line, "syscr: %llu", &v) == 1)
			r.syscr = v;
		else if (sscanf(line, "read_bytes: %llu", &v) == 1)
			r.rb = v;
		else if (sscanf(line, "write_bytes: %llu", &v) == 1)
			r.wb = v;
		else if (sscanf(line, "cancelled_write_bytes: %llu", &v) == 1)
			r.cwb = v;
	}
	fclose(f);
	return r;
}

/* Major page faults of the process (every thread): pages of mapped files
 * read from the disk (LMDB's reads), or swapped in. */
BENCH_UNUSED static uint64_t major_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_majflt;
}

/* Whether write_bytes follows buffered writes in dir (not on tmpfs, not
 * where /proc/self/io is hidden): writes and syncs 1 MiB of buf there. */
BENCH_UNUSED static int probe_proc_io(const char *dir, const void *buf)
{
	char path[PATH_MAX + 16];
	struct pio a = proc_io();

	snprintf(path, sizeof(path), "%s/probe", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 0;
	size_t len = 1 << 20;
	ssize_t w = write(fd, buf, len);
	fsync(fd);
	close(fd);
	unlink(path);
	struct pio b = proc_io();
	return w == (ssize_t)len && b.wb - a.wb >= len;
}

/* A field of /proc/self/status in MiB: VmRSS, VmHWM, RssAnon, RssFile... */
BENCH_UNUSED static double vm_mib(const char *field)
{
	char line[128];
	size_t fl = strlen(field);
	double r = NAN;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return r;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;
		if (!strncmp(line, field, fl) && line[fl] == ':' &&
		    sscanf(line + fl + 1, "%llu", &kb) == 1) {
			r = (double)kb / 1024.0;
			break;
		}
	}
	fclose(f);
	return r;
}

/* Resident memory of the process in MiB (/proc/self/status): VmRSS, and
 * its anonymous (heap, stacks) and file-backed (mapped files: the
 * program's libraries, LMDB's data file) parts; NaN where missing. */
struct rss {
	double rss, anon, file;
};

BENCH_UNUSED static struct rss rss_now(void)
{
	struct rss r = {NAN, NAN, NAN};
	char line[128];
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return r;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;
		if (sscanf(line, "VmRSS: %llu", &kb) == 1)
			r.rss = (double)kb / 1024.0;
		else if (sscanf(line, "RssAnon: %llu", &kb) == 1)
			r.anon = (double)kb / 1024.0;
		else if (sscanf(line, "RssFile: %llu", &kb) == 1)
			r.file = (double)kb / 1024.0;
	}
	fclose(f);
	return r;
}

/* Resets VmHWM to the current RSS ("5" to clear_refs, Linux >= 4.0). */
BENCH_UNUSED static int reset_hwm(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);

	if (fd < 0)
		return 0;
	int ok = write(fd, "5", 1) == 1;
	close(fd);
	return ok;
}

/* User + system CPU seconds of the process, every thread. */
BENCH_UNUSED static double cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- the header lines ------------------------------------------------------------------------ */

/* The "build:" line, and warnings when the numbers are not representative
 * (assertions on, optimisation off). */
BENCH_UNUSED static void print_build_mode(void)
{
#if defined(NDEBUG) && defined(__OPTIMIZE__)
	printf("build:    release (optimised, assertions off)\n");
#else
	printf("build:    NOT a release build\n");
#endif
#ifndef NDEBUG
	printf("WARNING:  assertions are enabled (built without -DNDEBUG): numbers are not "
	       "representative\n");
#endif
#ifndef __OPTIMIZE__
	printf("WARNING:  compiler optimisation is off: numbers are not representative\n");
#endif
}

/* "model name" of /proc/cpuinfo, or "unknown". */
BENCH_UNUSED static void cpu_model(char *buf, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, cap, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			colon++;
			while (*colon == ' ' || *colon == '\t')
				colon++;
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(buf, cap, "%s", colon);
			break;
		}
	}
	fclose(f);
}

/* The local date and time, e.g. "2024-05-01 12:00:00 UTC". */
BENCH_UNUSED static void date_now(char *buf, size_t cap)
{
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(buf, cap, "%Y-%m-%d %H:%M:%S %Z", &tm);
}

/* ---- CSV, options, signals ---------------------------------------------------------------------
 */

/* Creates the CSV file at path with its header line (ending in "\n"). */
BENCH_UNUSED static FILE *csv_open(const char *path, const char *header)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("cannot open %s: %s", path, strerror(errno));
	fputs(header, f);
	return f;
}

/* An unsigned number (decimal, 0x hex or 0 octal) as the value of opt. */
BENCH_UNUSED static uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || !*s)
		die("bad value for %s: %s", opt, s);
	return v;
}

/* The value of option argv[*i], which is argv[*i + 1]; *i moves to it. */
BENCH_UNUSED static const char *opt_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc)
		die("%s needs a value", argv[*i]);
	return argv[++*i];
}

/* The value of option argv[*i] as parse_u64's; *i moves to it. */
BENCH_UNUSED static uint64_t opt_u64(int argc, char **argv, int *i)
{
	const char *opt = argv[*i];

	return parse_u64(opt, opt_value(argc, argv, i));
}

/* Sets on[k] for every comma-separated item of list that is names[k]
 * (k < n); an item that is none of them is fatal ("unknown WHAT ITEM"). */
BENCH_UNUSED static void mark_names(const char *list, const char *const *names, int n, int *on,
				    const char *what)
{
	char *copy = strdup(list), *save = NULL;

	if (!copy)
		die("out of memory");
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k;
		for (k = 0; k < n && strcmp(t, names[k]); k++)
			;
		if (k == n)
			die("unknown %s %s", what, t);
		on[k] = 1;
	}
	free(copy);
}

/* An option no case took: --help or -h prints usage and exits with status
 * 0; anything else prints usage, then fails as an unknown option. */
__attribute__((noreturn)) BENCH_UNUSED static void other_option(void (*usage)(void),
								const char *opt)
{
	usage();
	if (!strcmp(opt, "--help") || !strcmp(opt, "-h"))
		exit(0);
	die("unknown option %s", opt);
}

/* Exits after printing usage: to stdout with status 0 when help was
 * asked for, else (an unknown option) to stderr with status 2. */
BENCH_UNUSED static void usage_exit(void (*usage)(FILE *), int help)
{
	usage(help ? stdout : stderr);
	exit(help ? 0 : 2);
}

/* Set by SIGINT/SIGTERM where a program installs on_signal. */
BENCH_UNUSED static volatile sig_atomic_t interrupted;

BENCH_UNUSED static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

#endif
