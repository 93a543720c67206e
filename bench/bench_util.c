/*
 * bench_util.c - the helpers the benchmark programs share (bench_util.h).
 */
#include "bench_util.h"

#include <dlfcn.h>

/* The benchmarks' allocator, jemalloc, for every engine alike: a
 * background thread returns freed pages to the kernel within about a
 * second, whichever thread freed them.  With jemalloc's defaults, pages
 * freed into the arena of a thread that then goes idle (a closed store's
 * background thread, a writer after the load) stay resident until that
 * arena allocates again, and the RSS the benchmarks report would count
 * them.  Sanitizer builds do not link jemalloc; the string is unused there.
 * Visible: jemalloc looks the symbol up in the program. */
__attribute__((visibility("default"))) const char *malloc_conf =
	"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

int bench_msg_pid;

pid_t bench_fork(void)
{
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* looked up, not linked: sanitizer builds have no jemalloc */
		int (*ctl)(const char *, void *, size_t *, void *, size_t);
		*(void **)&ctl = dlsym(RTLD_DEFAULT, "mallctl");
		_Bool on = 1;
		if (ctl)
			ctl("background_thread", NULL, NULL, &on, sizeof(on));
	}
	return pid;
}

void bench_msg_prefix(void)
{
	if (bench_msg_pid)
		fprintf(stderr, "%s[%d]: ", program_invocation_short_name, (int)getpid());
	else
		fprintf(stderr, "%s: ", program_invocation_short_name);
}

__attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
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

__attribute__((format(printf, 3, 4))) void xsnprintf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap)
		die("path or command too long");
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double secs_since(uint64_t t0_ns)
{
	return (double)(now_ns() - t0_ns) / 1e9;
}

double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
	return rng_next(r) % n;
}

char *valpool_new(uint64_t seed)
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

void make_value(char *v, uint32_t size, const char *pool, uint64_t keynum, uint64_t version)
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

int value_ok(const char *v, size_t vlen, uint32_t size, uint64_t keynum)
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

static int h_idx(uint64_t v)
{
	if (v < H_LINEAR)
		return (int)v;
	int e = 63 - __builtin_clzll(v);
	return H_LINEAR + (e - H_SUB_BITS - 1) * H_SUB +
	       (int)((v >> (e - H_SUB_BITS)) & (H_SUB - 1));
}

/* Midpoint of bucket i in ns. */
static double h_mid(int i)
{
	if (i < H_LINEAR)
		return i;
	int e = (i - H_LINEAR) / H_SUB + H_SUB_BITS + 1;
	int sub = (i - H_LINEAR) % H_SUB;
	double lo = (double)((uint64_t)(H_SUB + sub) << (e - H_SUB_BITS));
	return lo + (double)((uint64_t)1 << (e - H_SUB_BITS)) / 2;
}

void h_add(struct hist *h, uint64_t v)
{
	h->b[h_idx(v)]++;
	h->n++;
	h->sum += (double)v;
	if (v > h->max)
		h->max = v;
}

void h_merge(struct hist *d, const struct hist *s)
{
	for (int i = 0; i < H_N; i++)
		d->b[i] += s->b[i];
	d->n += s->n;
	d->sum += s->sum;
	if (s->max > d->max)
		d->max = s->max;
}

/* Percentile in microseconds. */
static double h_pct(const struct hist *h, double p)
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

void h_summary(const struct hist *h, uint64_t t_start, uint64_t t_end, struct lat_summary *l)
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

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double median(const double *v, int n)
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

void fmt_num(char *buf, size_t cap, int prec, const char *suffix, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%.*f%s", prec, v, suffix);
}

static uint64_t du_acc;

static int du_fn(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)p;
	(void)f;
	if (flag == FTW_F)
		du_acc += (uint64_t)st->st_blocks * 512;
	return 0;
}

uint64_t du(const char *dir)
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

void rmtree(const char *path)
{
	nftw(path, rm_fn, 16, FTW_DEPTH | FTW_PHYS);
}

struct pio proc_io(void)
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

uint64_t major_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_majflt;
}

int probe_proc_io(const char *dir, const void *buf)
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

double vm_mib(const char *field)
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

struct rss rss_now(void)
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

void print_build_mode(void)
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

void cpu_model(char *buf, size_t cap)
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

void date_now(char *buf, size_t cap)
{
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(buf, cap, "%Y-%m-%d %H:%M:%S %Z", &tm);
}

FILE *csv_open(const char *path, const char *header)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("cannot open %s: %s", path, strerror(errno));
	fputs(header, f);
	return f;
}

uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || !*s)
		die("bad value for %s: %s", opt, s);
	return v;
}

const char *opt_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc)
		die("%s needs a value", argv[*i]);
	return argv[++*i];
}

uint64_t opt_u64(int argc, char **argv, int *i)
{
	const char *opt = argv[*i];

	return parse_u64(opt, opt_value(argc, argv, i));
}

void mark_names(const char *list, const char *const *names, int n, int *on, const char *what)
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

__attribute__((noreturn)) void other_option(void (*usage)(void), const char *opt)
{
	usage();
	if (!strcmp(opt, "--help") || !strcmp(opt, "-h"))
		exit(0);
	die("unknown option %s", opt);
}

void usage_exit(void (*usage)(FILE *), int help)
{
	usage(help ? stdout : stderr);
	exit(help ? 0 : 2);
}

volatile sig_atomic_t interrupted;

void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}
