/*
 * crashio.c - the code of crashio.h.
 */
#include <dirent.h>

#include "crashio.h"

uint64_t test_seed(const char *name)
{
	const char *s = getenv("FLEX_TEST_SEED");
	uint64_t seed;
	if (s && *s) {
		seed = strtoull(s, NULL, 0);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
		       ((uint64_t)getpid() << 40);
	}
	fprintf(stderr, "%s: seed %" PRIu64 " (FLEX_TEST_SEED=%" PRIu64 " replays)\n", name, seed,
		seed);
	return seed;
}

double test_scale(void)
{
	const char *s = getenv("FLEX_TEST_SCALE");
	double v = s && *s ? strtod(s, NULL) : 1.0;
	return v > 0 ? v : 1.0;
}

long scaled(long n)
{
	double v = (double)n * test_scale();
	return v < 1 ? 1 : (long)v;
}

uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t rnd_below(uint64_t *s, uint64_t n)
{
	return n ? rnd(s) % n : 0;
}

double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int within_budget(double t0, long done)
{
	return done == 0 || now_sec() - t0 < TEST_TIME_BUDGET;
}

int tmp_make(char *out, size_t n, const char *tag)
{
	struct stat st;
	const char *base =
	    stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
		? "/dev/shm"
		: "/tmp";
	snprintf(out, n, "%s/flexspace_%s_XXXXXX", base, tag);
	return mkdtemp(out) ? 0 : -errno;
}

static int tmp_rm_one(const char *path, const struct stat *sb, int type, struct FTW *f)
{
	(void)sb;
	(void)type;
	(void)f;
	remove(path);
	return 0;
}

void tmp_remove(const char *dir)
{
	if (dir && *dir)
		nftw(dir, tmp_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tmp_clear(const char *dir)
{
	tmp_remove(dir);
	mkdir(dir, 0755);
}

static struct dir_snap *dir_snap_cur;

static int dir_snap_one(const char *path, const struct stat *sb, int type, struct FTW *f)
{
	(void)f;
	struct dir_snap *d = dir_snap_cur;
	uint64_t h = 0;
	if (type == FTW_F && S_ISREG(sb->st_mode)) {
		FILE *fp = fopen(path, "rb");
		XXH3_state_t *st = XXH3_createState();
		XXH3_64bits_reset(st);
		char buf[65536];
		size_t n;
		while (fp && (n = fread(buf, 1, sizeof(buf), fp)) > 0)
			XXH3_64bits_update(st, buf, n);
		h = XXH3_64bits_digest(st);
		XXH3_freeState(st);
		if (fp)
			fclose(fp);
	}
	char line[PATH_MAX + 160];
	int n = snprintf(line, sizeof(line), "%s %o %lld %lld.%09ld %016" PRIx64 "\n", path,
			 (unsigned)sb->st_mode, (long long)sb->st_size,
			 (long long)sb->st_mtim.tv_sec, sb->st_mtim.tv_nsec, h);
	if (n < 0)
		return 0;
	if (d->len + (size_t)n + 1 > d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4096;
		while (cap < d->len + (size_t)n + 1)
			cap *= 2;
		d->s = realloc(d->s, cap);
		d->cap = cap;
	}
	memcpy(d->s + d->len, line, (size_t)n + 1);
	d->len += (size_t)n;
	return 0;
}

char *dir_snapshot(const char *dir)
{
	struct dir_snap d = {0};
	struct stat st;
	if (lstat(dir, &st) != 0)
		return strdup("(missing)");
	dir_snap_cur = &d;
	nftw(dir, dir_snap_one, 16, FTW_PHYS);
	dir_snap_cur = NULL;
	return d.s ? d.s : strdup("");
}

int failf(struct why *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
	va_end(ap);
	return 1;
}

static void model_reserve(struct model *m, uint64_t n)
{
	if (n <= m->cap)
		return;
	uint64_t cap = m->cap ? m->cap : 1 << 16;
	while (cap < n)
		cap *= 2;
	uint8_t *p = realloc(m->b, cap);
	if (!p)
		abort();
	m->b = p;
	m->cap = cap;
}

void model_free(struct model *m)
{
	free(m->b);
	memset(m, 0, sizeof(*m));
}

void model_copy(struct model *dst, const struct model *src)
{
	model_reserve(dst, src->size);
	if (src->size)
		memcpy(dst->b, src->b, src->size);
	dst->size = src->size;
}

void model_truncate(struct model *m, uint64_t size)
{
	if (size > m->size) {
		model_reserve(m, size);
		memset(m->b + m->size, 0, size - m->size);
	}
	m->size = size;
}

void model_write(struct model *m, const uint8_t *d, uint64_t off, uint64_t len)
{
	if (off + len > m->size) {
		if (off > m->size)
			model_truncate(m, off);
		model_reserve(m, off + len);
		m->size = off + len;
	}
	memcpy(m->b + off, d, len);
}

void model_insert(struct model *m, const uint8_t *d, uint64_t off, uint64_t len)
{
	if (off > m->size)
		model_truncate(m, off);
	model_reserve(m, m->size + len);
	memmove(m->b + off + len, m->b + off, m->size - off);
	memcpy(m->b + off, d, len);
	m->size += len;
}

void model_collapse(struct model *m, uint64_t off, uint64_t len)
{
	if (!len)
		return;
	memmove(m->b + off, m->b + off + len, m->size - off - len);
	m->size -= len;
}

uint64_t content_hash(const uint8_t *b, uint64_t size)
{
	return XXH3_64bits_withSeed(size ? (const void *)b : (const void *)"", size, size);
}

uint64_t model_hash(const struct model *m)
{
	return content_hash(m->b, m->size);
}

const char *const op_names[OP_NTYPES] = {"write", "insert", "collapse", "truncate", "defrag",
					 "apply", "sync",   "reopen",	"read"};

static uint64_t gen_len(uint64_t *r, const struct gen_cfg *g)
{
	uint64_t k = rnd_below(r, 100);
	if (k < 55)
		return 1 + rnd_below(r, 2048);
	if (k < 85)
		return 1 + rnd_below(r, 16384);
	if (k < 97)
		return 1 + rnd_below(r, 65536);
	return 1 + rnd_below(r, g->big_len);
}

void gen_op(uint64_t *r, uint64_t size, const struct gen_cfg *g, struct op *op)
{
	memset(op, 0, sizeof(*op));
	op->dseed = rnd(r);
	int k = (int)rnd_below(r, 100);
	int big = size > g->target_size;
	int c = 0;
	if (k < (c += g->sync_pct))
		op->type = OP_SYNC;
	else if (k < (c += g->reopen_pct))
		op->type = OP_REOPEN;
	else if (k < (c += g->read_pct))
		op->type = OP_READ;
	else if (k < (c += g->insert_pct))
		op->type = big ? OP_COLLAPSE : OP_INSERT;
	else if (k < (c += g->collapse_pct))
		op->type = OP_COLLAPSE;
	else if (k < (c += g->truncate_pct))
		op->type = OP_TRUNCATE;
	else if (k < (c += g->defrag_pct))
		op->type = OP_DEFRAG;
	else if (k < (c += g->apply_pct))
		op->type = OP_APPLY;
	else
		op->type = OP_WRITE;

	switch (op->type) {
	case OP_WRITE: {
		uint64_t w = rnd_below(r, 100);
		op->len = gen_len(r, g);
		if (w < 5)
			op->off = size + rnd_below(r, 65536); /* past the end: a hole */
		else if (w < 15 || !size)
			op->off = size -
				  (op->len < size ? rnd_below(r, op->len) : rnd_below(r, size + 1));
		else
			op->off = rnd_below(r, size);
		if (big && op->off + op->len > size)
			op->off = size > op->len ? size - op->len : 0;
		break;
	}
	case OP_INSERT:
		op->len = gen_len(r, g);
		op->off =
		    rnd_below(r, 100) < 3 ? size + rnd_below(r, 8192) : rnd_below(r, size + 1);
		break;
	case OP_COLLAPSE:
		op->off = rnd_below(r, size + 1);
		op->len = rnd_below(r, 100) < 10 && size > g->target_size / 2 ? size - op->off
									      : gen_len(r, g);
		if (op->len > size - op->off)
			op->len = size - op->off;
		if (big && op->len < size / 8 && size - op->off >= size / 8)
			op->len = size / 8;
		break;
	case OP_TRUNCATE:
		if (big || rnd_below(r, 2))
			op->len = rnd_below(r, size + 1);
		else
			op->len = size + rnd_below(r, 65536);
		break;
	case OP_DEFRAG:
	case OP_READ:
		op->off = rnd_below(r, size + 1);
		op->len = rnd_below(r, size - op->off + 1);
		if (op->type == OP_READ && rnd_below(r, 10) == 0)
			op->len += rnd_below(r, 4096); /* reads past the end */
		if (op->type == OP_DEFRAG && op->len > (1u << 20))
			op->len = 1u << 20;
		break;
	case OP_APPLY:
		/* every batch size from 1 to 16, now and then a long one */
		op->len = rnd_below(r, 16) == 0 ? 17 + rnd_below(r, BATCH_MAX_OPS - 16)
						: 1 + rnd_below(r, 16);
		break;
	default:
		break;
	}
}

void op_data(uint64_t dseed, uint8_t *buf, uint64_t len)
{
	uint64_t s = dseed;
	uint64_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = rnd(&s);
		memcpy(buf + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = rnd(&s);
		memcpy(buf + i, &v, len - i);
	}
}

/* The ops of an OP_APPLY (op->len of them) for a space of the given
 * size, each on the space the ones before it leave, with their bytes in
 * buf (at most BATCH_BYTES): they depend only on op->dseed and the size,
 * so the model and the space get the same ops. */
static size_t batch_ops(const struct op *op, uint64_t size, struct flexspace_op *o, uint8_t *buf)
{
	uint64_t r = op->dseed, per = BATCH_BYTES / op->len, used = 0;
	for (uint64_t j = 0; j < op->len; j++) {
		struct flexspace_op *x = &o[j];
		memset(x, 0, sizeof(*x));
		uint64_t k = rnd_below(&r, 100);
		x->type = !size	   ? FLEXSPACE_OP_INSERT
			  : k < 30 ? FLEXSPACE_OP_WRITE
			  : k < 55 ? FLEXSPACE_OP_INSERT
			  : k < 70 ? FLEXSPACE_OP_COLLAPSE
			  : k < 90 ? FLEXSPACE_OP_REPLACE
				   : FLEXSPACE_OP_TAG;
		x->off = rnd_below(&r, x->type == FLEXSPACE_OP_TAG ? size : size + 1);
		if (x->type == FLEXSPACE_OP_COLLAPSE || x->type == FLEXSPACE_OP_REPLACE) {
			uint64_t room = size - x->off < 8192 ? size - x->off : 8192;
			x->len = rnd_below(&r, room + 1);
			size -= x->len;
		}
		if (x->type == FLEXSPACE_OP_TAG) {
			x->tag = (uint16_t)(1 + rnd_below(&r, 1000));
			continue;
		}
		if (x->type == FLEXSPACE_OP_COLLAPSE)
			continue;
		x->buf_len = 1 + rnd_below(&r, per);
		x->buf = buf + used;
		op_data(rnd(&r), buf + used, x->buf_len);
		used += x->buf_len;
		if (x->type != FLEXSPACE_OP_WRITE)
			size += x->buf_len;
		else if (x->off + x->buf_len > size)
			size = x->off + x->buf_len;
	}
	return (size_t)op->len;
}

void model_apply(struct model *m, const struct op *op, uint8_t *buf)
{
	switch (op->type) {
	case OP_WRITE:
		op_data(op->dseed, buf, op->len);
		model_write(m, buf, op->off, op->len);
		break;
	case OP_INSERT:
		op_data(op->dseed, buf, op->len);
		model_insert(m, buf, op->off, op->len);
		break;
	case OP_COLLAPSE:
		model_collapse(m, op->off, op->len);
		break;
	case OP_TRUNCATE:
		model_truncate(m, op->len);
		break;
	case OP_APPLY: {
		struct flexspace_op o[BATCH_MAX_OPS];
		size_t n = batch_ops(op, m->size, o, buf);
		for (size_t j = 0; j < n; j++) {
			if (o[j].type == FLEXSPACE_OP_COLLAPSE || o[j].type == FLEXSPACE_OP_REPLACE)
				model_collapse(m, o[j].off, o[j].len);
			if (o[j].type == FLEXSPACE_OP_WRITE)
				model_write(m, o[j].buf, o[j].off, o[j].buf_len);
			else if (o[j].type == FLEXSPACE_OP_INSERT || o[j].type == FLEXSPACE_OP_REPLACE)
				model_insert(m, o[j].buf, o[j].off, o[j].buf_len);
		}
		break;
	}
	default:
		break;
	}
}

int space_apply(struct flexspace *fs, const struct op *op, uint8_t *buf)
{
	ssize_t n;
	switch (op->type) {
	case OP_WRITE:
		op_data(op->dseed, buf, op->len);
		n = flexspace_write(fs, buf, op->off, op->len);
		return n == (ssize_t)op->len ? 0 : n < 0 ? (int)n : -EPROTO;
	case OP_INSERT:
		op_data(op->dseed, buf, op->len);
		n = flexspace_insert(fs, buf, op->off, op->len);
		return n == (ssize_t)op->len ? 0 : n < 0 ? (int)n : -EPROTO;
	case OP_COLLAPSE:
		return flexspace_collapse(fs, op->off, op->len);
	case OP_TRUNCATE:
		return flexspace_truncate(fs, op->len);
	case OP_DEFRAG:
		return flexspace_defrag(fs, op->off, op->len);
	case OP_APPLY: {
		struct flexspace_op o[BATCH_MAX_OPS];
		return flexspace_apply(fs, o, batch_ops(op, flexspace_size(fs), o, buf));
	}
	case OP_SYNC:
		return flexspace_sync(fs);
	default:
		return 0;
	}
}

int space_read_all(struct flexspace *fs, uint8_t **out, uint64_t *size)
{
	uint64_t sz = flexspace_size(fs);
	uint8_t *b = malloc(sz ? sz : 1);
	if (!b)
		return -ENOMEM;
	uint64_t done = 0;
	while (done < sz) {
		size_t want = sz - done > (8u << 20) ? (8u << 20) : (size_t)(sz - done);
		ssize_t n = flexspace_read(fs, b + done, done, want);
		if (n <= 0) {
			free(b);
			return n < 0 ? (int)n : -EPROTO;
		}
		done += (uint64_t)n;
	}
	*out = b;
	*size = sz;
	return 0;
}

int verify_recovered(const char *dir, const struct flexspace_options *opt, const uint64_t *sizes,
		     const uint64_t *hashes, long lo, long hi, long *k, struct why *w)
{
	struct flexspace *fs;
	int rc = flexspace_open(dir, opt, &fs);
	if (rc)
		return failf(w, "reopen after the crash: %s (%d)", flex_strerror(rc), rc);
	if ((rc = flexspace_check(fs)) != 0) {
		flexspace_close(fs);
		return failf(w, "flexspace_check after recovery: %s", flex_strerror(rc));
	}
	uint8_t *b = NULL;
	uint64_t sz = 0;
	if ((rc = space_read_all(fs, &b, &sz)) != 0) {
		flexspace_close(fs);
		return failf(w, "reading the recovered space: %s", flex_strerror(rc));
	}
	uint64_t h = content_hash(b, sz);
	free(b);
	*k = -1;
	for (long i = hi; i >= lo; i--) {
		if (sizes[i] == sz && hashes[i] == h) {
			*k = i;
			break;
		}
	}
	rc = flexspace_close(fs);
	if (*k < 0) {
		long older = -1;
		for (long i = lo - 1; i >= 0 && older < 0; i--)
			if (sizes[i] == sz && hashes[i] == h)
				older = i;
		if (older >= 0)
			return failf(
			    w,
			    "recovered content (size %" PRIu64 ") is state %ld, older than "
			    "the last acknowledged state %ld: acknowledged changes were lost",
			    sz, older, lo);
		return failf(w,
			     "recovered content (size %" PRIu64 ") is no state in [%ld, %ld] "
			     "(sizes there: %" PRIu64 " .. %" PRIu64 "): a mix of states or "
			     "damaged data",
			     sz, lo, hi, sizes[lo], sizes[hi]);
	}
	if (rc)
		return failf(w, "close after recovery: %s", flex_strerror(rc));
	return 0;
}

static struct cio *cio_of(const struct flex_io *io)
{
	return (struct cio *)io->ctx;
}

/* 0, or the fault for this call (an -errno or CIO_SHORT). */
static int cio_fault(struct cio *c, int op)
{
	int f = 0;
	pthread_mutex_lock(&c->mu);
	if (c->fault_class & op) {
		c->ncalls++;
		if ((c->tripped && c->fault_perm) || (c->fault_at && c->ncalls == c->fault_at)) {
			if (!c->tripped)
				c->first_fault_op = op;
			c->tripped = 1;
			f = c->fault_err;
			if (f == CIO_SHORT && !(op & CIO_WRITES))
				f = 0;
			if (f)
				c->nfaults++;
			if (f && c->verbose)
				fprintf(stderr, "  cio: fault %d on op 0x%x (call %ld)\n", f, op,
					c->ncalls);
		}
	}
	pthread_mutex_unlock(&c->mu);
	return f;
}

static struct cio_file *cio_file_of(struct cio *c, int fd)
{
	if (!c->track || fd < 0 || fd >= CIO_MAXFD || !c->fdmap[fd])
		return NULL;
	return &c->files[c->fdmap[fd] - 1];
}

static void cio_img_resize(struct cio_file *f, uint64_t size)
{
	if (size > f->img_cap) {
		uint64_t cap = f->img_cap ? f->img_cap : 4096;
		while (cap < size)
			cap *= 2;
		uint8_t *p = realloc(f->img, cap);
		if (!p)
			abort();
		f->img = p;
		f->img_cap = cap;
	}
	if (size > f->img_size)
		memset(f->img + f->img_size, 0, size - f->img_size);
	f->img_size = size;
}

static void cio_img_write(struct cio_file *f, const uint8_t *d, uint64_t off, uint64_t len)
{
	if (off + len > f->img_size)
		cio_img_resize(f, off + len);
	memcpy(f->img + off, d, len);
}

static void cio_record_locked(struct cio_file *f, int trunc, const void *data, uint64_t off,
			      uint64_t len)
{
	if (f->nch == f->chcap) {
		size_t cap = f->chcap ? f->chcap * 2 : 64;
		struct cio_change *p = realloc(f->ch, cap * sizeof(*p));
		if (!p)
			abort();
		f->ch = p;
		f->chcap = cap;
	}
	struct cio_change *ch = &f->ch[f->nch++];
	ch->trunc = trunc;
	ch->off = off;
	ch->len = len;
	ch->data = NULL;
	if (!trunc && len) {
		ch->data = malloc(len);
		if (!ch->data)
			abort();
		memcpy(ch->data, data, len);
	}
}

static void cio_record(struct cio *c, int fd, int trunc, const void *data, uint64_t off,
		       uint64_t len)
{
	pthread_mutex_lock(&c->mu);
	struct cio_file *f = cio_file_of(c, fd);
	if (f)
		cio_record_locked(f, trunc, data, off, len);
	pthread_mutex_unlock(&c->mu);
}

/* Changes recorded for the file so far (where a sync begins). */
static size_t cio_pending(struct cio *c, int fd)
{
	pthread_mutex_lock(&c->mu);
	struct cio_file *f = cio_file_of(c, fd);
	size_t n = f ? f->nch : 0;
	pthread_mutex_unlock(&c->mu);
	return n;
}

/* A sync made the first upto changes recorded for the file durable (those
 * recorded before it began); later ones stay in play. */
static void cio_synced(struct cio *c, int fd, size_t upto)
{
	pthread_mutex_lock(&c->mu);
	struct cio_file *f = cio_file_of(c, fd);
	if (f) {
		if (upto > f->nch)
			upto = f->nch;
		for (size_t i = 0; i < upto; i++) {
			struct cio_change *ch = &f->ch[i];
			if (ch->trunc)
				cio_img_resize(f, ch->off);
			else
				cio_img_write(f, ch->data, ch->off, ch->len);
			free(ch->data);
		}
		memmove(f->ch, f->ch + upto, (f->nch - upto) * sizeof(*f->ch));
		f->nch -= upto;
	}
	pthread_mutex_unlock(&c->mu);
}

/* ---- names ---------------------------------------------------------------- */

static char *cio_strdup(const char *s)
{
	char *d = strdup(s);
	if (!d)
		abort();
	return d;
}

/* path without repeated or trailing slashes (malloc'd). */
static char *cio_norm(const char *path)
{
	char *s = cio_strdup(path), *q = s;
	for (const char *p = path; *p; p++)
		if (!(*p == '/' && q > s && q[-1] == '/'))
			*q++ = *p;
	while (q > s + 1 && q[-1] == '/')
		q--;
	*q = 0;
	return s;
}

/* The directory holding a normalised path (malloc'd). */
static char *cio_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return cio_strdup(".");
	if (slash == path)
		return cio_strdup("/");
	char *d = strndup(path, (size_t)(slash - path));
	if (!d)
		abort();
	return d;
}

/* Whether path is dir or lies below it. */
static int cio_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && (path[n] == 0 || path[n] == '/');
}

static struct cio_name *cio_name_find(struct cio_name *v, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].path, path))
			return &v[i];
	return NULL;
}

static void cio_name_set(struct cio_name **v, size_t *n, size_t *cap, const char *path, int file)
{
	struct cio_name *e = cio_name_find(*v, *n, path);
	if (e) {
		e->file = file;
		return;
	}
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		*v = realloc(*v, *cap * sizeof(**v));
		if (!*v)
			abort();
	}
	(*v)[(*n)++] = (struct cio_name){cio_strdup(path), file};
}

/* Removes path and, with subtree, everything below it. */
static void cio_name_del(struct cio_name *v, size_t *n, const char *path, int subtree)
{
	for (size_t i = 0; i < *n;) {
		if (subtree ? cio_under(v[i].path, path) : !strcmp(v[i].path, path)) {
			free(v[i].path);
			v[i] = v[--*n];
		} else {
			i++;
		}
	}
}

/* rename(2) over a set of names: `to` (and what is below it) goes, and
 * `from` and everything below it move there. */
static void cio_name_rename(struct cio_name *v, size_t *n, const char *from, const char *to)
{
	if (!cio_name_find(v, *n, from))
		return; /* its creation is not in the image */
	cio_name_del(v, n, to, 1);
	size_t fl = strlen(from), tl = strlen(to);
	for (size_t i = 0; i < *n; i++) {
		if (!cio_under(v[i].path, from))
			continue;
		char *p = malloc(tl + strlen(v[i].path) - fl + 1);
		if (!p)
			abort();
		memcpy(p, to, tl);
		strcpy(p + tl, v[i].path + fl);
		free(v[i].path);
		v[i].path = p;
	}
}

static void cio_name_apply(struct cio_name **v, size_t *n, size_t *cap, const struct cio_nsop *op)
{
	if (op->kind == CIO_NS_ADD)
		cio_name_set(v, n, cap, op->path, op->file);
	else if (op->kind == CIO_NS_DEL)
		cio_name_del(*v, n, op->path, 0);
	else
		cio_name_rename(*v, n, op->path, op->to);
}

/* The tracked file that has this name now, or -1. */
static int cio_file_at(struct cio *c, const char *path)
{
	for (size_t i = 0; i < c->nfiles; i++)
		if (c->files[i].path && !strcmp(c->files[i].path, path))
			return (int)i;
	return -1;
}

static int cio_file_new(struct cio *c, const char *path)
{
	if (c->nfiles == c->fcap) {
		size_t cap = c->fcap ? c->fcap * 2 : 8;
		struct cio_file *nf = realloc(c->files, cap * sizeof(*nf));
		if (!nf)
			abort();
		c->files = nf;
		c->fcap = cap;
	}
	struct cio_file *nf = &c->files[c->nfiles];
	memset(nf, 0, sizeof(*nf));
	nf->path = cio_strdup(path);
	return (int)c->nfiles++;
}

/* Whether the table has met the name: a tracked file's name now, a
 * durable name, or one a pending change names. */
static int cio_known(struct cio *c, const char *path)
{
	if (cio_file_at(c, path) >= 0 || cio_name_find(c->names, c->nnames, path))
		return 1;
	for (size_t i = 0; i < c->nops; i++)
		if (!strcmp(c->ops[i].path, path) || (c->ops[i].to && !strcmp(c->ops[i].to, path)))
			return 1;
	return 0;
}

/* A name the table meets for the first time was there before it began
 * to watch: durable, and a file's content with it. */
static void cio_seed(struct cio *c, const char *path)
{
	struct stat st;
	if (cio_known(c, path) || lstat(path, &st) != 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		cio_name_set(&c->names, &c->nnames, &c->namecap, path, CIO_DIR);
		return;
	}
	if (!S_ISREG(st.st_mode))
		return;
	int i = cio_file_new(c, path);
	struct cio_file *f = &c->files[i];
	cio_img_resize(f, (uint64_t)st.st_size);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || (st.st_size && pread(fd, f->img, (size_t)st.st_size, 0) != st.st_size))
		abort();
	close(fd);
	cio_name_set(&c->names, &c->nnames, &c->namecap, path, i);
}

static void cio_nsop_add(struct cio *c, int kind, const char *path, const char *to, int file)
{
	if (c->nops == c->opcap) {
		c->opcap = c->opcap ? c->opcap * 2 : 16;
		c->ops = realloc(c->ops, c->opcap * sizeof(*c->ops));
		if (!c->ops)
			abort();
	}
	c->ops[c->nops++] = (struct cio_nsop){.kind = kind,
					      .path = cio_strdup(path),
					      .to = to ? cio_strdup(to) : NULL,
					      .dir = cio_parent(to ? to : path),
					      .file = file,
					      .seq = c->opseq++};
}

static void cio_nsop_free(struct cio_nsop *op)
{
	free(op->path);
	free(op->to);
	free(op->dir);
}

/* An fsync of directory dir made durable the changes of its names made
 * before the sync began (sequence numbers below seq). */
static void cio_names_synced(struct cio *c, const char *dir, long seq)
{
	pthread_mutex_lock(&c->mu);
	size_t k = 0;
	for (size_t i = 0; i < c->nops; i++) {
		struct cio_nsop *op = &c->ops[i];
		if (op->seq < seq && !strcmp(op->dir, dir)) {
			cio_name_apply(&c->names, &c->nnames, &c->namecap, op);
			cio_nsop_free(op);
		} else {
			c->ops[k++] = *op;
		}
	}
	c->nops = k;
	pthread_mutex_unlock(&c->mu);
}

/* ---- the table ------------------------------------------------------------- */

static int cio_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_OPEN);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	if (!c->track)
		return p->open(p, path, flags, mode);
	pthread_mutex_lock(&c->mu);
	char *np = cio_norm(path);
	struct stat st;
	int existed = stat(np, &st) == 0;
	if (existed && S_ISREG(st.st_mode))
		cio_seed(c, np);
	int fd = p->open(p, path, flags, mode);
	if (fd >= 0 && fd < CIO_MAXFD && fstat(fd, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			free(c->dirfd[fd]);
			c->dirfd[fd] = np;
			np = NULL;
		} else if (S_ISREG(st.st_mode)) {
			int i = cio_file_at(c, np);
			if (i < 0) { /* made by this open */
				i = cio_file_new(c, np);
				cio_nsop_add(c, CIO_NS_ADD, np, NULL, i);
			} else if (existed && (flags & O_TRUNC)) {
				cio_record_locked(&c->files[i], 1, NULL, 0, 0);
			}
			c->fdmap[fd] = i + 1;
		}
	}
	free(np);
	pthread_mutex_unlock(&c->mu);
	return fd;
}

static int cio_close(const struct flex_io *io, int fd)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_CLOSE);
	pthread_mutex_lock(&c->mu);
	if (fd >= 0 && fd < CIO_MAXFD) {
		c->fdmap[fd] = 0;
		free(c->dirfd[fd]);
		c->dirfd[fd] = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	const struct flex_io *p = flex_io_posix();
	int rc = p->close(p, fd); /* the descriptor goes whatever the fault */
	return f < 0 ? f : rc;
}

static ssize_t cio_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	int f = cio_fault(cio_of(io), CIO_PREAD);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	return p->pread(p, fd, buf, len, off);
}

static ssize_t cio_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
			  uint64_t off)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_PWRITE);
	if (f < 0)
		return f;
	if (f == CIO_SHORT && len > 1)
		len = len / 2;
	const struct flex_io *p = flex_io_posix();
	ssize_t n = p->pwrite(p, fd, buf, len, off);
	if (n > 0)
		cio_record(c, fd, 0, buf, off, (uint64_t)n);
	return n;
}

static int cio_sync_common(const struct flex_io *io, int fd, int op)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, op);
	if (f < 0)
		return f;
	pthread_mutex_lock(&c->mu);
	c->nsyncs++;
	pthread_mutex_unlock(&c->mu);
	if (c->before_sync)
		c->before_sync(c, c->hook_arg);
	size_t upto = cio_pending(c, fd);
	pthread_mutex_lock(&c->mu);
	char *dir = fd >= 0 && fd < CIO_MAXFD && c->dirfd[fd] ? cio_strdup(c->dirfd[fd]) : NULL;
	long seq = c->opseq;
	pthread_mutex_unlock(&c->mu);
	const struct flex_io *p = flex_io_posix();
	int rc = op == CIO_FSYNC ? p->fsync(p, fd) : p->fdatasync(p, fd);
	if (!rc)
		cio_synced(c, fd, upto);
	if (!rc && dir)
		cio_names_synced(c, dir, seq);
	free(dir);
	return rc;
}

static int cio_fsync(const struct flex_io *io, int fd)
{
	return cio_sync_common(io, fd, CIO_FSYNC);
}

static int cio_fdatasync(const struct flex_io *io, int fd)
{
	return cio_sync_common(io, fd, CIO_FDATASYNC);
}

static int cio_ftruncate(const struct flex_io *io, int fd, uint64_t size)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_FTRUNCATE);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	int rc = p->ftruncate(p, fd, size);
	if (!rc)
		cio_record(c, fd, 1, NULL, size, 0);
	return rc;
}

static int cio_fallocate(const struct flex_io *io, int fd, int mode, uint64_t off, uint64_t len)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_FALLOCATE);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	uint64_t before = 0;
	p->fsize(p, fd, &before);
	int rc = p->fallocate(p, fd, mode, off, len);
	uint64_t after = before;
	if (!rc && p->fsize(p, fd, &after) == 0 && after != before)
		cio_record(c, fd, 1, NULL, after, 0);
	return rc;
}

static int cio_fsize(const struct flex_io *io, int fd, uint64_t *size)
{
	int f = cio_fault(cio_of(io), CIO_FSIZE);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	return p->fsize(p, fd, size);
}

static int cio_write_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_WRITE_BATCH);
	int upto = n;
	if (f)
		upto = n / 2; /* a prefix of the elements lands, then the error */
	const struct flex_io *p = flex_io_posix();
	int rc = upto ? p->write_batch(p, fd, v, upto) : 0;
	if (!rc) {
		for (int i = 0; i < upto; i++)
			cio_record(c, fd, 0, v[i].buf, v[i].off, v[i].len);
	}
	if (!rc && f)
		rc = f < 0 ? f : -EIO;
	return rc;
}

static int cio_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	int f = cio_fault(cio_of(io), CIO_READ_BATCH);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	return p->read_batch(p, fd, v, n);
}

static int cio_mkdir(const struct flex_io *io, const char *path, mode_t mode)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_MKDIR);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	pthread_mutex_lock(&c->mu);
	int rc = p->mkdir(p, path, mode);
	if (!rc && c->track) {
		char *np = cio_norm(path);
		cio_nsop_add(c, CIO_NS_ADD, np, NULL, CIO_DIR);
		free(np);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* unlink and rmdir: the name goes, and comes back in an image that drops
 * the change. */
static int cio_remove(const struct flex_io *io, const char *path, int op)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, op);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	pthread_mutex_lock(&c->mu);
	char *np = cio_norm(path);
	if (c->track)
		cio_seed(c, np);
	int rc = op == CIO_UNLINK ? p->unlink(p, path) : p->rmdir(p, path);
	if (!rc && c->track) {
		int i = cio_file_at(c, np);
		if (i >= 0) {
			free(c->files[i].path);
			c->files[i].path = NULL;
		}
		cio_nsop_add(c, CIO_NS_DEL, np, NULL, 0);
	}
	free(np);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int cio_unlink(const struct flex_io *io, const char *path)
{
	return cio_remove(io, path, CIO_UNLINK);
}

static int cio_rmdir(const struct flex_io *io, const char *path)
{
	return cio_remove(io, path, CIO_RMDIR);
}

static int cio_rename(const struct flex_io *io, const char *from, const char *to)
{
	struct cio *c = cio_of(io);
	int f = cio_fault(c, CIO_RENAME);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	pthread_mutex_lock(&c->mu);
	char *nf = cio_norm(from), *nt = cio_norm(to);
	if (c->track) {
		cio_seed(c, nf);
		cio_seed(c, nt);
	}
	int rc = p->rename(p, from, to);
	if (!rc && c->track) {
		size_t fl = strlen(nf), tl = strlen(nt);
		for (size_t i = 0; i < c->nfiles; i++) {
			char **q = &c->files[i].path;
			if (*q && cio_under(*q, nt) && !cio_under(*q, nf)) {
				free(*q); /* replaced */
				*q = NULL;
			}
		}
		for (size_t i = 0; i < c->nfiles + CIO_MAXFD; i++) {
			char **q = i < c->nfiles ? &c->files[i].path : &c->dirfd[i - c->nfiles];
			if (!*q || !cio_under(*q, nf))
				continue;
			char *np = malloc(tl + strlen(*q) - fl + 1);
			if (!np)
				abort();
			memcpy(np, nt, tl);
			strcpy(np + tl, *q + fl);
			free(*q);
			*q = np;
		}
		cio_nsop_add(c, CIO_NS_RENAME, nf, nt, 0);
	}
	free(nf);
	free(nt);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int cio_list(const struct flex_io *io, const char *dir,
		    int (*fn)(void *arg, const char *name), void *arg)
{
	int f = cio_fault(cio_of(io), CIO_LIST);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	return p->list(p, dir, fn, arg);
}

static int cio_lock(const struct flex_io *io, int fd, int exclusive)
{
	int f = cio_fault(cio_of(io), CIO_LOCK);
	if (f < 0)
		return f;
	const struct flex_io *p = flex_io_posix();
	return p->lock(p, fd, exclusive);
}

void cio_init(struct cio *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	c->io = (struct flex_io){.open = cio_open,
				 .close = cio_close,
				 .pread = cio_pread,
				 .pwrite = cio_pwrite,
				 .fsync = cio_fsync,
				 .fdatasync = cio_fdatasync,
				 .ftruncate = cio_ftruncate,
				 .fallocate = cio_fallocate,
				 .fsize = cio_fsize,
				 .write_batch = cio_write_batch,
				 .read_batch = cio_read_batch,
				 .mkdir = cio_mkdir,
				 .rmdir = cio_rmdir,
				 .unlink = cio_unlink,
				 .rename = cio_rename,
				 .list = cio_list,
				 .lock = cio_lock,
				 .ctx = c};
}

void cio_destroy(struct cio *c)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		struct cio_file *f = &c->files[i];
		for (size_t j = 0; j < f->nch; j++)
			free(f->ch[j].data);
		free(f->ch);
		free(f->img);
		free(f->path);
	}
	free(c->files);
	for (size_t i = 0; i < c->nnames; i++)
		free(c->names[i].path);
	free(c->names);
	for (size_t i = 0; i < c->nops; i++)
		cio_nsop_free(&c->ops[i]);
	free(c->ops);
	for (int fd = 0; fd < CIO_MAXFD; fd++)
		free(c->dirfd[fd]);
	pthread_mutex_destroy(&c->mu);
	memset(c, 0, sizeof(*c));
}

/* The names of a power-loss image: the durable ones, then a prefix of
 * each directory's pending changes, in order. */
static struct cio_name *cio_image_names(struct cio *c, uint64_t *r, int how, size_t *n)
{
	size_t cap = 0;
	struct cio_name *v = NULL;
	*n = 0;
	for (size_t i = 0; i < c->nnames; i++)
		cio_name_set(&v, n, &cap, c->names[i].path, c->names[i].file);
	size_t *keep = calloc(c->nops + 1, sizeof(*keep));
	size_t *first = calloc(c->nops + 1, sizeof(*first)); /* the op opening its directory's run */
	if (!keep || !first)
		abort();
	for (size_t i = 0; i < c->nops; i++) {
		size_t j = 0;
		while (j < i && strcmp(c->ops[j].dir, c->ops[i].dir))
			j++;
		first[i] = j;
		keep[j]++; /* first count the directory's changes */
	}
	for (size_t i = 0; i < c->nops; i++)
		if (first[i] == i)
			keep[i] = how == CIO_ALL_APPLIED    ? keep[i]
				  : how == CIO_NONE_APPLIED ? 0
							    : (size_t)rnd_below(r, keep[i] + 1);
	for (size_t i = 0; i < c->nops; i++) {
		size_t *k = &keep[first[i]];
		if (*k) { /* within its directory's prefix */
			cio_name_apply(&v, n, &cap, &c->ops[i]);
			(*k)--;
		}
	}
	free(keep);
	free(first);
	return v;
}

/* Whether every directory between srcroot and path that the table has
 * seen made or named is in the image. */
static int cio_parents_in(struct cio *c, const struct cio_name *v, size_t n, const char *path,
			  const char *srcroot)
{
	char *p = cio_strdup(path);
	size_t rl = strlen(srcroot);
	int ok = 1;
	for (char *s = strrchr(p, '/'); ok && s && (size_t)(s - p) > rl; s = strrchr(p, '/')) {
		*s = 0;
		if (cio_known(c, p)) {
			const struct cio_name *e = cio_name_find((struct cio_name *)v, n, p);
			ok = e && e->file == CIO_DIR;
		}
	}
	free(p);
	return ok;
}

static int cio_write_file(const char *path, const uint8_t *b, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = 0;
	uint64_t done = 0;
	while (done < size) {
		ssize_t k = write(fd, b + done, size - done);
		if (k <= 0) {
			rc = -EIO;
			break;
		}
		done += (uint64_t)k;
	}
	close(fd);
	return rc;
}

/* dst, the place of src under dstdir, with its directories made. */
static int cio_dst_path(char *dst, size_t cap, const char *src, const char *srcroot,
			const char *dstdir)
{
	int pn;
	if (srcroot) {
		pn = snprintf(dst, cap, "%s%s", dstdir, src + strlen(srcroot));
	} else {
		const char *base = strrchr(src, '/');
		pn = snprintf(dst, cap, "%s/%s", dstdir, base ? base + 1 : src);
	}
	if (pn < 0 || (size_t)pn >= cap)
		return -ENAMETOOLONG;
	for (char *q = dst + strlen(dstdir) + 1; srcroot && (q = strchr(q, '/')); q++) {
		*q = 0;
		mkdir(dst, 0755);
		*q = '/';
	}
	return 0;
}

/* Copies, as they are, the files under dir the table never met. */
static int cio_copy_unseen(struct cio *c, const struct cio_name *v, size_t n, const char *dir,
			   const char *srcroot, const char *dstdir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char path[PATH_MAX], dst[PATH_MAX];
		struct stat st;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
		    lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			rc = cio_copy_unseen(c, v, n, path, srcroot, dstdir);
			continue;
		}
		if (!S_ISREG(st.st_mode) || cio_known(c, path) ||
		    !cio_parents_in(c, v, n, path, srcroot))
			continue;
		uint8_t *b = malloc(st.st_size ? (size_t)st.st_size : 1);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (!b || fd < 0 || pread(fd, b, (size_t)st.st_size, 0) != st.st_size)
			rc = -EIO;
		if (fd >= 0)
			close(fd);
		if (!rc)
			rc = cio_dst_path(dst, sizeof(dst), path, srcroot, dstdir);
		if (!rc)
			rc = cio_write_file(dst, b, (uint64_t)st.st_size);
		free(b);
	}
	closedir(d);
	return rc;
}

int cio_materialise(struct cio *c, const char *srcroot, const char *dstdir, uint64_t *r, int how,
		    long *changes)
{
	int rc = 0;
	mkdir(dstdir, 0755);
	pthread_mutex_lock(&c->mu);
	char *root = srcroot ? cio_norm(srcroot) : NULL;
	size_t nn;
	struct cio_name *v = cio_image_names(c, r, how, &nn);
	long nch = (long)c->nops;
	for (size_t i = 0; i < nn && !rc; i++) {
		const struct cio_name *e = &v[i];
		char path[PATH_MAX];
		if (root && (!cio_under(e->path, root) || !strcmp(e->path, root) ||
			     !cio_parents_in(c, v, nn, e->path, root)))
			continue;
		if (e->file == CIO_DIR) {
			if (root && !(rc = cio_dst_path(path, sizeof(path), e->path, root, dstdir)))
				mkdir(path, 0755);
			continue;
		}
		struct cio_file *f = &c->files[e->file];
		struct cio_file t = {0};
		cio_img_resize(&t, f->img_size);
		if (f->img_size)
			memcpy(t.img, f->img, f->img_size);
		nch += (long)f->nch;
		for (size_t j = 0; j < f->nch; j++) {
			const struct cio_change *ch = &f->ch[j];
			/* 0-3 applied, 4-5 dropped, 6-7 torn */
			int fate = how == CIO_ALL_APPLIED    ? 0
				   : how == CIO_NONE_APPLIED ? 4
							     : (int)rnd_below(r, 8);
			if (fate >= 4 && fate < 6)
				continue; /* dropped */
			if (ch->trunc) {
				if (fate < 4 || rnd_below(r, 2))
					cio_img_resize(&t, ch->off);
				continue;
			}
			uint64_t len = ch->len;
			if (fate >= 6) { /* torn */
				if (rnd_below(r, 2) && len > 512)
					len = rnd_below(r, len / 512 + 1) * 512;
				else
					len = rnd_below(r, len + 1);
			}
			if (len)
				cio_img_write(&t, ch->data, ch->off, len);
		}
		rc = cio_dst_path(path, sizeof(path), e->path, root, dstdir);
		if (!rc)
			rc = cio_write_file(path, t.img, t.img_size);
		free(t.img);
	}
	if (!rc && root)
		rc = cio_copy_unseen(c, v, nn, root, root, dstdir);
	for (size_t i = 0; i < nn; i++)
		free(v[i].path);
	free(v);
	free(root);
	pthread_mutex_unlock(&c->mu);
	if (changes)
		*changes = nch;
	return rc;
}

static void roio_note(const struct flex_io *io, const char *what, const char *path)
{
	struct roio *r = io->ctx;
	if (atomic_fetch_add(&r->changes, 1) == 0)
		snprintf(r->bad, sizeof(r->bad), "%s%s%s", what, path ? " " : "", path ? path : "");
}

static int roio_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC))) {
		roio_note(io, "open for writing", path);
		return -EROFS;
	}
	atomic_fetch_add(&((struct roio *)io->ctx)->opens, 1);
	const struct flex_io *p = flex_io_posix();
	return p->open(p, path, flags, mode);
}

static int roio_close(const struct flex_io *io, int fd)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	return p->close(p, fd);
}

static ssize_t roio_pread(const struct flex_io *io, int fd, void *buf, size_t len, uint64_t off)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	return p->pread(p, fd, buf, len, off);
}

static ssize_t roio_pwrite(const struct flex_io *io, int fd, const void *buf, size_t len,
			   uint64_t off)
{
	(void)fd, (void)buf, (void)len, (void)off;
	roio_note(io, "pwrite", NULL);
	return -EROFS;
}

static int roio_fsync(const struct flex_io *io, int fd)
{
	(void)fd;
	roio_note(io, "fsync", NULL);
	return -EROFS;
}

static int roio_fdatasync(const struct flex_io *io, int fd)
{
	(void)fd;
	roio_note(io, "fdatasync", NULL);
	return -EROFS;
}

static int roio_ftruncate(const struct flex_io *io, int fd, uint64_t size)
{
	(void)fd, (void)size;
	roio_note(io, "ftruncate", NULL);
	return -EROFS;
}

static int roio_fallocate(const struct flex_io *io, int fd, int mode, uint64_t off, uint64_t len)
{
	(void)fd, (void)mode, (void)off, (void)len;
	roio_note(io, "fallocate", NULL);
	return -EROFS;
}

static int roio_fsize(const struct flex_io *io, int fd, uint64_t *size)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	return p->fsize(p, fd, size);
}

static int roio_write_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)fd, (void)v, (void)n;
	roio_note(io, "write_batch", NULL);
	return -EROFS;
}

static int roio_read_batch(const struct flex_io *io, int fd, const struct flex_iovec *v, int n)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	return p->read_batch(p, fd, v, n);
}

static int roio_mkdir(const struct flex_io *io, const char *path, mode_t mode)
{
	(void)mode;
	roio_note(io, "mkdir", path);
	return -EROFS;
}

static int roio_rmdir(const struct flex_io *io, const char *path)
{
	roio_note(io, "rmdir", path);
	return -EROFS;
}

static int roio_unlink(const struct flex_io *io, const char *path)
{
	roio_note(io, "unlink", path);
	return -EROFS;
}

static int roio_rename(const struct flex_io *io, const char *from, const char *to)
{
	(void)to;
	roio_note(io, "rename", from);
	return -EROFS;
}

static int roio_list(const struct flex_io *io, const char *dir,
		     int (*fn)(void *arg, const char *name), void *arg)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	return p->list(p, dir, fn, arg);
}

/* A shared lock changes nothing; an exclusive one is a writer's. */
static int roio_lock(const struct flex_io *io, int fd, int exclusive)
{
	if (exclusive) {
		roio_note(io, "exclusive lock", NULL);
		return -EROFS;
	}
	const struct flex_io *p = flex_io_posix();
	return p->lock(p, fd, 0);
}

void roio_init(struct roio *r)
{
	memset(r, 0, sizeof(*r));
	r->io = (struct flex_io){.open = roio_open,
				 .close = roio_close,
				 .pread = roio_pread,
				 .pwrite = roio_pwrite,
				 .fsync = roio_fsync,
				 .fdatasync = roio_fdatasync,
				 .ftruncate = roio_ftruncate,
				 .fallocate = roio_fallocate,
				 .fsize = roio_fsize,
				 .write_batch = roio_write_batch,
				 .read_batch = roio_read_batch,
				 .mkdir = roio_mkdir,
				 .rmdir = roio_rmdir,
				 .unlink = roio_unlink,
				 .rename = roio_rename,
				 .list = roio_list,
				 .lock = roio_lock,
				 .ctx = r};
}

struct flexspace_options tiny_options(void)
{
	return (struct flexspace_options){.segment_size = 64u << 10, .log_limit = 64u << 10};
}
