/*
 * bench_util.h - the helpers the benchmark programs share: error exits,
 * clocks, the splitmix64 stream, a latency histogram, medians, directory
 * sizes and removal, /proc readings of the process (write bytes, RSS, CPU),
 * the header lines every program prints (build mode, CPU model, date), CSV
 * and command-line helpers.
 *
 * Compiled once (bench_util.c) into the benchmarks' archive.  Error
 * messages begin with the program's name, and with its process id when
 * bench_msg_pid is set (the programs whose engines run in forked children).
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

/* ---- messages ------------------------------------------------------------------ */

/* Nonzero: error messages give the process id after the program's name. */
extern int bench_msg_pid;

void bench_msg_prefix(void);

/* Prints the message and exits with status 1 (atexit handlers run). */
__attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...);

/* snprintf that refuses to truncate (paths, commands). */
__attribute__((format(printf, 3, 4))) void xsnprintf(char *buf, size_t cap, const char *fmt, ...);

void *xmalloc(size_t n);
/* fork(), and in the child jemalloc's background thread started again
 * (malloc_conf in bench_util.c): a forked child inherits the setting but
 * not the thread.  Dies when fork fails. */
pid_t bench_fork(void);

/* ---- clocks -------------------------------------------------------------------- */

uint64_t now_ns(void);

double secs_since(uint64_t t0_ns);

double now_sec(void);

/* ---- random numbers -------------------------------------------------------------- */

/* splitmix64: fixed-seed, fast, good enough for choosing offsets and keys. */
static inline uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	return splitmix64(&r->s);
}

/* Uniform in [0, n); n > 0.  The modulo bias is below 2^-30 for n < 2^34. */
uint64_t rng_below(struct rng *r, uint64_t n);

/* ---- values --------------------------------------------------------------------- */

/* Random bytes the values are cut from. */
#define VALPOOL (1u << 20)

/* VALPOOL incompressible bytes: the splitmix64 stream of seed. */
char *valpool_new(uint64_t seed);

/* The value of key number keynum as written by version: size bytes, the
 * key number first (when there is room for it), then pool bytes at a
 * place that depends on both; size + 8 <= VALPOOL / 2. */
void make_value(char *v, uint32_t size, const char *pool, uint64_t keynum, uint64_t version);

/* Whether v could be make_value's for keynum: its size and key number. */
int value_ok(const char *v, size_t vlen, uint32_t size, uint64_t keynum);

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

void h_add(struct hist *h, uint64_t v);

void h_merge(struct hist *d, const struct hist *s);

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

void h_summary(const struct hist *h, uint64_t t_start, uint64_t t_end, struct lat_summary *l);

/* ---- medians and numbers ------------------------------------------------------------- */

/* Most values median() takes (repetitions of one measurement). */
#define BENCH_MAX_MEDIAN 16

int cmp_double(const void *a, const void *b);

/* Median of the values of v[0..n) that are not NaN; NaN if none. */
double median(const double *v, int n);

/* v with prec decimals and suffix, or "-" when NaN. */
void fmt_num(char *buf, size_t cap, int prec, const char *suffix, double v);

/* ---- directories ------------------------------------------------------------------------ */

/* Allocated bytes of the files below dir (du). */
uint64_t du(const char *dir);

/* rm -rf path (a directory or a file); a missing path is no error. */
void rmtree(const char *path);

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

struct pio proc_io(void);

/* Major page faults of the process (every thread): pages of mapped files
 * read from the disk (LMDB's reads), or swapped in. */
uint64_t major_faults(void);

/* Whether write_bytes follows buffered writes in dir (not on tmpfs, not
 * where /proc/self/io is hidden): writes and syncs 1 MiB of buf there. */
int probe_proc_io(const char *dir, const void *buf);

/* A field of /proc/self/status in MiB: VmRSS, VmHWM, RssAnon, RssFile... */
double vm_mib(const char *field);

/* Resident memory of the process in MiB (/proc/self/status): VmRSS, and
 * its anonymous (heap, stacks) and file-backed (mapped files: the
 * program's libraries, LMDB's data file) parts; NaN where missing. */
struct rss {
	double rss, anon, file;
};

struct rss rss_now(void);

/* ---- the header lines ------------------------------------------------------------------------ */

/* The "build:" line, and warnings when the numbers are not representative
 * (assertions on, optimisation off). */
void print_build_mode(void);

/* "model name" of /proc/cpuinfo, or "unknown". */
void cpu_model(char *buf, size_t cap);

/* The local date and time, e.g. "2024-05-01 12:00:00 UTC". */
void date_now(char *buf, size_t cap);

/* ---- CSV, options, signals ---------------------------------------------------------------------
 */

/* Creates the CSV file at path with its header line (ending in "\n"). */
FILE *csv_open(const char *path, const char *header);

/* An unsigned number (decimal, 0x hex or 0 octal) as the value of opt. */
uint64_t parse_u64(const char *opt, const char *s);

/* The value of option argv[*i], which is argv[*i + 1]; *i moves to it. */
const char *opt_value(int argc, char **argv, int *i);

/* The value of option argv[*i] as parse_u64's; *i moves to it. */
uint64_t opt_u64(int argc, char **argv, int *i);

/* Sets on[k] for every comma-separated item of list that is names[k]
 * (k < n); an item that is none of them is fatal ("unknown WHAT ITEM"). */
void mark_names(const char *list, const char *const *names, int n, int *on, const char *what);

/* An option no case took: --help or -h prints usage and exits with status
 * 0; anything else prints usage, then fails as an unknown option. */
__attribute__((noreturn)) void other_option(void (*usage)(void), const char *opt);

/* Exits after printing usage: to stdout with status 0 when help was
 * asked for, else (an unknown option) to stderr with status 2. */
void usage_exit(void (*usage)(FILE *), int help);

/* Set by SIGINT/SIGTERM where a program installs on_signal. */
extern volatile sig_atomic_t interrupted;

void on_signal(int sig);

#endif
