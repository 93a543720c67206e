/*
 * flexspace_bench.c - FlexSpace against a regular file on the same file
 * system: the data-I/O experiments of the FlexSpace paper (section 6.2,
 * Table 2) reproduced on this machine.
 *
 * For each I/O size (4 KB and 64 KB blocks) and each write pattern, a
 * fresh space is written, made durable, and then read back:
 *
 *   rand-insert  start empty; op i inserts one block at a uniformly random
 *                block boundary in [0, i] blocks.  FlexSpace:
 *                flexspace_insert.  File: fallocate(FALLOC_FL_INSERT_RANGE)
 *                of one block followed by a pwrite of the block into the
 *                gap (a pwrite alone when the offset is the end of file,
 *                where insert-range is not allowed).
 *   rand-write   every block written exactly once, in shuffled order, over
 *                a range prepared before the clock starts: the file is
 *                preallocated with fallocate(mode 0); the space is given
 *                the same logical size as a hole (flexspace_truncate).
 *                FlexSpace: flexspace_write; file: pwrite.
 *   seq-write    start empty; blocks appended in order (flexspace_write /
 *                pwrite at the end).
 *
 * Every write phase ends with the I/O barrier inside the timing:
 * flexspace_sync, or fsync on the file.  Then four read passes, each
 * reading every block of the space once, one block per call
 * (flexspace_read / pread):
 *
 *   seq-cold   page cache emptied for the files first, then in order
 *   seq-warm   in order again, after a full untimed pass (which also
 *              checks every block's content)
 *   rand-cold  page cache emptied, then in a shuffled order
 *   rand-warm  the same shuffled order again, after a full untimed pass
 *
 * The cache is emptied with posix_fadvise(POSIX_FADV_DONTNEED) on the
 * files (for FlexSpace the data file DATA in the space's directory; the
 * extent tree is in memory) and checked with mincore; only if pages stay
 * resident is /proc/sys/vm/drop_caches used (when writable).  The output
 * says which was used.
 *
 * Write amplification is reported from three sources: "lib" is FlexSpace's
 * own count of bytes written to DATA, LOG and TREE during the phase
 * (flexspace_stats; none for the file); "proc" is the growth of
 * write_bytes in /proc/self/io (bytes this process dirtied for the block
 * layer; file-system metadata and journal writes done by kernel threads
 * are not in it); "dev" is the growth of the sectors written by the
 * underlying block device (/sys/dev/block/M:m/stat) from a syncfs before
 * the phase to a syncfs after it: this includes journal and metadata
 * writes, as the paper's SMART figures do, but it is device-wide, so
 * anything else writing to the same disk at that time is counted too.
 * The tree commit that FlexSpace does at close (after the read passes) is
 * not in the phase; its bytes are shown in the notes.
 *
 * ext4's insert-range gets slower as the file's extent count grows (every
 * insert shifts every later extent), so its phase is bounded by time: it
 * stops after INSERT_CAP_SEC and the throughput of what was done (the
 * average from an empty file up to the fill reached, which favours the
 * file) is reported together with the fill level and the rate over the
 * last tenth of its ops.  FlexSpace always inserts the whole space.  Cold
 * read passes are bounded the same way (COLD_CAP_SEC).
 *
 * Both systems live in the same directory, so they share the file system
 * and the disk.  If that file system refuses insert-range (tmpfs, overlay),
 * the program looks for one that accepts it among /work, /tmp and
 * /dev/shm, and failing that makes a loop-mounted ext4 image under /tmp
 * (needs root and mkfs.ext4); the output says where it ran.
 *
 * The machine is shared and noisy, so each line also shows the fraction
 * of the phase during which some task (anyone's, ours included) was
 * stalled on I/O and on CPU, from /proc/pressure: a measurement taken
 * with high stall is suspect.
 *
 * Each workload is repeated up to MAX_REPS times while the time budget
 * allows (the order of the two systems alternates between repetitions and
 * patterns) and the median is reported; ratios are the median of the
 * flex/file ratios within each repetition.  The same offsets are used by
 * both systems within a repetition, and for the insert pattern the
 * sequence of block tags read back is compared between the systems when
 * both did the same number of ops.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/falloc.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "flexspace.h"

#include "bench_util.h"

/* ---- configuration ---------------------------------------------------------- */

/* Space sizes: the issue asks for >= 256 MB at 4 KB and 1 GB at 64 KB (the
 * paper used 2^18 blocks; 1 GB and 16 GB do not fit this machine's time
 * budget with ext4's insert-range). */
#define SPACE_4K ((uint64_t)256 << 20)
#define SPACE_64K ((uint64_t)1 << 30)
#define QUICK_SPACE ((uint64_t)32 << 20)
/* Smallest space the disk-space check may scale down to. */
#define MIN_SPACE ((uint64_t)16 << 20)

/* Time bound of the file's insert-range phase and of each cold pass. */
#define INSERT_CAP_SEC 25.0
#define QUICK_INSERT_CAP_SEC 4.0
#define COLD_CAP_SEC 5.0
#define QUICK_COLD_CAP_SEC 1.5

/* Repetitions (median reported) and the default time budget of a run; a
 * further repetition of a size starts only if its longest repetition so
 * far still fits in the budget. */
#define MAX_REPS 5
#define BUDGET_SEC 540.0
#define QUICK_BUDGET_SEC 12.0

/* A cache drop counts as done when at most this fraction of the file's
 * pages is still resident. */
#define COLD_RESIDENT_MAX 0.02

/* Every block starts with its tag (op number or block index) xor this. */
#define TAG_MAGIC 0x5a17e5a17e5a17e5ULL

enum sys { SYS_FLEX, SYS_FILE, NSYS };
enum pat { PAT_INSERT, PAT_RWRITE, PAT_SWRITE, NPAT };
enum phase { PH_WRITE, PH_SEQ_COLD, PH_SEQ_WARM, PH_RAND_COLD, PH_RAND_WARM, NPHASE };

static const char *const pat_name[NPAT] = {"rand-insert", "rand-write", "seq-write"};
static const char *const phase_name[NPHASE] = {"write", "seq-cold", "seq-warm", "rand-cold",
					       "rand-warm"};

/* ---- small helpers -------------------------------------------------------- */

static void cleanup(void);

static void shuffle(uint32_t *v, uint64_t n, uint64_t seed)
{
	struct rng r = {seed};
	uint64_t i;

	for (i = 0; i < n; i++)
		v[i] = (uint32_t)i;
	for (i = n; i > 1; i--) {
		uint64_t j = rng_below(&r, i);
		uint32_t t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

static double mb(uint64_t bytes)
{
	return (double)bytes / 1e6;
}

static void size_label(uint64_t bytes, char *buf, size_t cap)
{
	if (bytes >= ((uint64_t)1 << 30) && bytes % ((uint64_t)1 << 30) == 0)
		snprintf(buf, cap, "%" PRIu64 " GiB", bytes >> 30);
	else if (bytes >= ((uint64_t)1 << 20))
		snprintf(buf, cap, "%" PRIu64 " MiB", bytes >> 20);
	else
		snprintf(buf, cap, "%" PRIu64 " KiB", bytes >> 10);
}

/* Ops that would be absorbed by a pure loop get their results summed in. */
static volatile uint64_t sink;

/* ---- state ------------------------------------------------------------------ */

struct meas {
	int have;
	double mbps;
	double opsps;
	double usop;	       /* wall time per op, barrier included */
	double p50, p99, p999; /* per-op latency, us, barrier excluded */
	uint64_t ops;
	uint64_t bytes;
	int capped;	  /* a time bound stopped it before the whole space */
	double stall;	  /* fraction of the phase some task waited on I/O (PSI) */
	double cpu_stall; /* ... waited for a CPU */
};

/* One (size, pattern, system). */
struct cell {
	struct meas m[NPHASE][MAX_REPS];
	double wa_lib[MAX_REPS], wa_proc[MAX_REPS], wa_dev[MAX_REPS];
	double fill[MAX_REPS];	    /* bytes in the space after the write phase */
	double tail_mbps[MAX_REPS]; /* capped insert: rate over the last tenth */
	double sync_ms[MAX_REPS];
	double close_mb[MAX_REPS]; /* /proc/self/io bytes written by close */
	int nreps;
};

struct size_cfg {
	uint32_t bsize;
	uint64_t nblocks;
	double insert_cap;
	double cold_cap;
	char note[160];
};

struct bench {
	int quick;
	uint64_t seed;
	double budget;
	const char *user_dir;
	FILE *csv;
	double t0;

	/* Where the files go. */
	char work[PATH_MAX]; /* our directory, removed at the end */
	int work_made;
	char loop_img[PATH_MAX];
	char loop_mnt[PATH_MAX];
	int loop_mounted;
	int have_insert_range;
	char fsname[32];
	char where[2 * PATH_MAX + 256]; /* why + work + fsname */
	char devstat[PATH_MAX];
	int have_dev;
	int work_fd;

	int nsizes;
	struct size_cfg sz[2];
	struct cell cell[2][NPAT][NSYS];
	int reps_done[2];

	/* Cold-cache bookkeeping. */
	int cold_fadvise, cold_drop, cold_failed;
	double cold_worst_resident;

	/* Cross-check of insert contents between the systems. */
	uint64_t tag_hash[NSYS];
	uint64_t tag_ops[NSYS];
	int hash_compared, hash_skipped;

	/* Scratch. */
	uint8_t *buf;
	float *lat;
	uint32_t *offs;	 /* write offsets in blocks, per op */
	uint32_t *order; /* random read order */
	uint8_t *seen;
};

static struct bench B;

static const char *sys_label(enum sys s)
{
	return s == SYS_FLEX ? "flex" : (B.fsname[0] ? B.fsname : "file");
}

/* ---- files and the environment --------------------------------------------------- */

static void cleanup(void)
{
	if (B.work_fd > 0) {
		close(B.work_fd);
		B.work_fd = -1;
	}
	if (B.work_made) {
		rmtree(B.work);
		B.work_made = 0;
	}
	if (B.loop_mounted) {
		char cmd[2 * PATH_MAX + 64];

		int n = snprintf(cmd, sizeof(cmd), "umount '%s'", B.loop_mnt);

		if (n < 0 || (size_t)n >= sizeof(cmd) || system(cmd) != 0)
			fprintf(stderr, "flexspace_bench: could not unmount %s\n", B.loop_mnt);
		else
			rmdir(B.loop_mnt);
		B.loop_mounted = 0;
	}
	if (B.loop_img[0]) {
		unlink(B.loop_img);
		B.loop_img[0] = '\0';
	}
}

/* Microseconds during which some task was stalled on a resource
 * (/proc/pressure/{io,cpu}, "some" line): how contended the disk or the
 * CPUs were, by anyone, ours included.  0 when PSI is unavailable. */
static uint64_t psi_some_us(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[256];
	uint64_t v = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "total=");

		if (!strncmp(line, "some", 4) && p) {
			v = strtoull(p + 6, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

static uint64_t io_stall_us(void)
{
	return psi_some_us("/proc/pressure/io");
}

static uint64_t cpu_stall_us(void)
{
	return psi_some_us("/proc/pressure/cpu");
}

/* Sectors (512 B) written by the device holding the work directory. */
static uint64_t dev_sectors_written(void)
{
	FILE *f;
	uint64_t v[7] = {0};

	if (!B.have_dev)
		return 0;
	f = fopen(B.devstat, "r");
	if (!f)
		return 0;
	if (fscanf(f,
		   "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
		   " %" SCNu64,
		   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) != 7)
		v[6] = 0;
	fclose(f);
	return v[6];
}

static void sync_work_fs(void)
{
	if (B.work_fd > 0)
		syncfs(B.work_fd);
}

static const char *fs_type_name(long type)
{
	switch ((unsigned long)type) {
	case 0xEF53:
		return "ext4";
	case 0x58465342:
		return "xfs";
	case 0x9123683E:
		return "btrfs";
	case 0xF2F52010:
		return "f2fs";
	case 0x01021994:
		return "tmpfs";
	case 0x794C7630:
		return "overlay";
	default:
		return "unknown";
	}
}

/* 1 if dir's file system does insert-range on a small file, 0 if it
 * refuses, -1 if dir is unusable. */
static int probe_insert_range(const char *dir)
{
	char path[PATH_MAX];
	static uint8_t blk[2 * 65536];
	int fd, ok;

	xsnprintf(path, sizeof(path), "%s/.flexspace_bench_probe.%d", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ok = pwrite(fd, blk, sizeof(blk), 0) == (ssize_t)sizeof(blk) &&
	     fallocate(fd, FALLOC_FL_INSERT_RANGE, 65536, 65536) == 0;
	close(fd);
	unlink(path);
	return ok;
}

static uint64_t free_bytes(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) != 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

static int make_loop_ext4(uint64_t bytes)
{
	char cmd[3 * PATH_MAX];

	if (geteuid() != 0)
		return 0;
	snprintf(B.loop_img, sizeof(B.loop_img), "/tmp/flexspace_bench.%d.img", (int)getpid());
	snprintf(B.loop_mnt, sizeof(B.loop_mnt), "/tmp/flexspace_bench.%d.mnt", (int)getpid());
	xsnprintf(cmd, sizeof(cmd),
		  "truncate -s %" PRIu64 " '%s' && mkfs.ext4 -q -F '%s' >/dev/null 2>&1 && "
		  "mkdir -p '%s' && mount -o loop '%s' '%s'",
		  bytes, B.loop_img, B.loop_img, B.loop_mnt, B.loop_img, B.loop_mnt);
	if (system(cmd) != 0) {
		rmdir(B.loop_mnt);
		unlink(B.loop_img);
		B.loop_img[0] = '\0';
		return 0;
	}
	B.loop_mounted = 1;
	return probe_insert_range(B.loop_mnt) == 1;
}

/* Picks the directory: the user's (or /tmp), else the first of /work,
 * /tmp, /dev/shm whose file system does insert-range, else a loop-mounted
 * ext4 image.  Both systems always use the same directory. */
static void choose_dir(uint64_t need)
{
	const char *cands[] = {"/work", "/tmp", "/dev/shm"};
	const char *first = B.user_dir ? B.user_dir : "/tmp";
	const char *dir = NULL;
	char why[PATH_MAX + 128] = "";
	struct statfs sf;
	struct stat st;
	int r = probe_insert_range(first);

	if (r < 0)
		die("cannot create files in %s: %s", first, strerror(errno));
	if (r == 1) {
		dir = first;
	} else {
		snprintf(why, sizeof(why), "%s refuses FALLOC_FL_INSERT_RANGE; ", first);
		for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]) && !dir; i++)
			if (strcmp(cands[i], first) != 0 && free_bytes(cands[i]) > need &&
			    probe_insert_range(cands[i]) == 1)
				dir = cands[i];
		if (!dir && make_loop_ext4(need)) {
			dir = B.loop_mnt;
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
				 "using a loop-mounted ext4 image %s; ", B.loop_img);
		}
		if (!dir) {
			if (B.loop_mounted)
				cleanup();
			dir = first;
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
				 "ext4 insert-range unavailable; ");
		}
	}
	B.have_insert_range = probe_insert_range(dir) == 1;
	xsnprintf(B.work, sizeof(B.work), "%s/flexspace_bench.%d", dir, (int)getpid());
	if (mkdir(B.work, 0755) != 0)
		die("mkdir %s: %s", B.work, strerror(errno));
	B.work_made = 1;
	B.work_fd = open(B.work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (B.work_fd < 0)
		die("open %s: %s", B.work, strerror(errno));
	if (statfs(B.work, &sf) == 0)
		snprintf(B.fsname, sizeof(B.fsname), "%s", fs_type_name(sf.f_type));
	if (stat(B.work, &st) == 0 && major(st.st_dev) != 0) {
		snprintf(B.devstat, sizeof(B.devstat), "/sys/dev/block/%u:%u/stat",
			 major(st.st_dev), minor(st.st_dev));
		B.have_dev = access(B.devstat, R_OK) == 0;
	}
	snprintf(B.where, sizeof(B.where), "%s%s (%s, insert-range %s)", why, B.work, B.fsname,
		 B.have_insert_range ? "supported" : "NOT supported");
}

static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	uint64_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

/* ---- the two systems behind one interface ---------------------------------------- */

struct target {
	enum sys sys;
	char path[PATH_MAX]; /* the file, or the space's directory */
	int fd;
	struct flexspace *fs;
	uint64_t size;
};

static void t_create(struct target *t, enum sys s, const char *name)
{
	memset(t, 0, sizeof(*t));
	t->sys = s;
	t->fd = -1;
	xsnprintf(t->path, sizeof(t->path), "%s/%s", B.work, name);
	rmtree(t->path);
	if (s == SYS_FLEX) {
		struct flexspace_options o = {0};
		int rc = flexspace_open(t->path, &o, &t->fs);

		if (rc)
			die("flexspace_open %s: %s", t->path, flex_strerror(rc));
	} else {
		t->fd = open(t->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (t->fd < 0)
			die("open %s: %s", t->path, strerror(errno));
	}
}

static void t_pwrite_full(struct target *t, const void *buf, uint64_t off, size_t len)
{
	ssize_t n = pwrite(t->fd, buf, len, (off_t)off);

	if (n != (ssize_t)len)
		die("pwrite %zu at %" PRIu64 ": %s", len, off, n < 0 ? strerror(errno) : "short");
}

static void t_insert(struct target *t, const void *buf, uint64_t off, size_t len)
{
	if (t->sys == SYS_FLEX) {
		ssize_t n = flexspace_insert(t->fs, buf, off, len);

		if (n != (ssize_t)len)
			die("flexspace_insert at %" PRIu64 ": %s", off, flex_strerror((int)n));
	} else {
		if (off < t->size &&
		    fallocate(t->fd, FALLOC_FL_INSERT_RANGE, (off_t)off, (off_t)len) != 0)
			die("fallocate(INSERT_RANGE) at %" PRIu64 ": %s", off, strerror(errno));
		t_pwrite_full(t, buf, off, len);
	}
	t->size += len;
}

static void t_write(struct target *t, const void *buf, uint64_t off, size_t len)
{
	if (t->sys == SYS_FLEX) {
		ssize_t n = flexspace_write(t->fs, buf, off, len);

		if (n != (ssize_t)len)
			die("flexspace_write at %" PRIu64 ": %s", off, flex_strerror((int)n));
	} else {
		t_pwrite_full(t, buf, off, len);
	}
	if (off + len > t->size)
		t->size = off + len;
}

static void t_read(struct target *t, void *buf, uint64_t off, size_t len)
{
	ssize_t n;

	if (t->sys == SYS_FLEX)
		n = flexspace_read(t->fs, buf, off, len);
	else
		n = pread(t->fd, buf, len, (off_t)off);
	if (n != (ssize_t)len)
		die("%s read at %" PRIu64 ": %s", sys_label(t->sys), off,
		    n < 0 ? (t->sys == SYS_FLEX ? flex_strerror((int)n) : strerror(errno))
			  : "short");
}

static void t_sync(struct target *t)
{
	if (t->sys == SYS_FLEX) {
		int rc = flexspace_sync(t->fs);

		if (rc)
			die("flexspace_sync: %s", flex_strerror(rc));
	} else if (fsync(t->fd) != 0) {
		die("fsync: %s", strerror(errno));
	}
}

/* Gives the space its full logical size before a random-write phase:
 * allocated (unwritten) blocks for the file, a hole for FlexSpace. */
static void t_prepare(struct target *t, uint64_t size)
{
	if (t->sys == SYS_FLEX) {
		int rc = flexspace_truncate(t->fs, size);

		if (rc)
			die("flexspace_truncate: %s", flex_strerror(rc));
	} else if (fallocate(t->fd, 0, 0, (off_t)size) != 0) {
		die("fallocate %" PRIu64 ": %s", size, strerror(errno));
	}
	t->size = size;
	t_sync(t);
}

static uint64_t t_lib_bytes(struct target *t)
{
	struct flexspace_stats st;

	if (t->sys != SYS_FLEX || flexspace_stats(t->fs, &st) != 0)
		return 0;
	return st.data_bytes_written + st.log_bytes_written + st.tree_bytes_written;
}

/* Closes (FlexSpace commits its tree here) and reports the bytes the
 * close wrote according to /proc/self/io. */
static uint64_t t_close(struct target *t)
{
	uint64_t w0 = proc_io().wb;

	if (t->sys == SYS_FLEX) {
		int rc = flexspace_close(t->fs);

		t->fs = NULL;
		if (rc)
			die("flexspace_close: %s", flex_strerror(rc));
	} else {
		close(t->fd);
		t->fd = -1;
	}
	return proc_io().wb - w0;
}

/* Fraction of the file's pages in the page cache. */
static double resident_fraction(int fd)
{
	struct stat st;
	long pg = sysconf(_SC_PAGESIZE);
	size_t npages, res = 0;
	unsigned char *vec;
	void *map;

	if (fstat(fd, &st) != 0 || st.st_size == 0)
		return 0;
	npages = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -1;
	vec = xmalloc(npages);
	if (mincore(map, (size_t)st.st_size, vec) != 0) {
		free(vec);
		munmap(map, (size_t)st.st_size);
		return -1;
	}
	for (size_t i = 0; i < npages; i++)
		res += vec[i] & 1;
	free(vec);
	munmap(map, (size_t)st.st_size);
	return (double)res / (double)npages;
}

/* Empties the page cache of the target's data: fadvise first, the global
 * drop_caches only if pages stay resident. */
static void t_make_cold(struct target *t)
{
	char path[PATH_MAX + 8];
	int fd = t->fd;
	double res;

	if (t->sys == SYS_FLEX) {
		xsnprintf(path, sizeof(path), "%s/DATA", t->path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open %s: %s", path, strerror(errno));
	}
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	res = resident_fraction(fd);
	if (res >= 0 && res <= COLD_RESIDENT_MAX) {
		B.cold_fadvise++;
	} else {
		FILE *f;

		sync();
		f = fopen("/proc/sys/vm/drop_caches", "w");
		if (f && fputs("1\n", f) >= 0 && fclose(f) == 0) {
			B.cold_drop++;
		} else {
			if (f)
				fclose(f);
			B.cold_failed++;
		}
		res = resident_fraction(fd);
	}
	if (res > B.cold_worst_resident)
		B.cold_worst_resident = res;
	if (t->sys == SYS_FLEX)
		close(fd);
}

/* ---- measurement ------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

/* Fills the latency percentiles (sorts lat). */
static void lat_stats(struct meas *m, float *lat, uint64_t n)
{
	if (!n)
		return;
	qsort(lat, n, sizeof(*lat), cmp_float);
	m->p50 = lat[(n - 1) * 50 / 100];
	m->p99 = lat[(n - 1) * 99 / 100];
	m->p999 = lat[(n - 1) * 999 / 1000];
}

static void finish_meas(struct meas *m, uint64_t ops, uint32_t bsize, double sec)
{
	m->have = 1;
	m->ops = ops;
	m->bytes = ops * bsize;
	m->mbps = sec > 0 ? mb(m->bytes) / sec : 0;
	m->opsps = sec > 0 ? (double)ops / sec : 0;
	m->usop = ops ? sec * 1e6 / (double)ops : 0;
}

static void put_tag(uint8_t *blk, uint64_t tag)
{
	uint64_t v = tag ^ TAG_MAGIC;

	memcpy(blk, &v, sizeof(v));
}

static uint64_t get_tag(const uint8_t *blk)
{
	uint64_t v;

	memcpy(&v, blk, sizeof(v));
	return v ^ TAG_MAGIC;
}

/* The write phase; returns the ops done (blocks in the space). */
static uint64_t run_write(struct target *t, struct cell *c, int si, enum pat p, int rep)
{
	const struct size_cfg *z = &B.sz[si];
	const uint64_t n = z->nblocks, bs = z->bsize;
	const double cap = t->sys == SYS_FILE && p == PAT_INSERT ? z->insert_cap : 0;
	struct meas *m = &c->m[PH_WRITE][rep];
	uint64_t i, ops = n, lib0, proc0, dev0, psi0, cpu0;
	double t0, tl, ts, te;

	if (p == PAT_RWRITE)
		t_prepare(t, n * bs);
	sync_work_fs();
	lib0 = t_lib_bytes(t);
	proc0 = proc_io().wb;
	dev0 = dev_sectors_written();

	psi0 = io_stall_us();
	cpu0 = cpu_stall_us();
	t0 = tl = now_sec();
	for (i = 0; i < n; i++) {
		uint64_t off = (uint64_t)B.offs[i] * bs;
		double t1;

		put_tag(B.buf, p == PAT_INSERT ? i : B.offs[i]);
		if (p == PAT_INSERT)
			t_insert(t, B.buf, off, bs);
		else
			t_write(t, B.buf, off, bs);
		t1 = now_sec();
		B.lat[i] = (float)((t1 - tl) * 1e6);
		tl = t1;
		if (interrupted)
			die("interrupted");
		if (cap > 0 && t1 - t0 >= cap) {
			ops = i + 1;
			break;
		}
	}
	ts = now_sec();
	t_sync(t);
	te = now_sec();

	finish_meas(m, ops, z->bsize, te - t0);
	m->capped = ops < n;
	m->stall = (double)(io_stall_us() - psi0) / 1e6 / (te - t0);
	m->cpu_stall = (double)(cpu_stall_us() - cpu0) / 1e6 / (te - t0);
	c->sync_ms[rep] = (te - ts) * 1e3;
	c->fill[rep] = (double)(ops * bs);
	c->wa_proc[rep] = (double)(proc_io().wb - proc0) / (double)(ops * bs);
	c->wa_lib[rep] =
	    t->sys == SYS_FLEX ? (double)(t_lib_bytes(t) - lib0) / (double)(ops * bs) : NAN;
	sync_work_fs();
	c->wa_dev[rep] =
	    B.have_dev ? (double)(dev_sectors_written() - dev0) * 512.0 / (double)(ops * bs) : NAN;
	c->tail_mbps[rep] = NAN;
	if (ops < n && ops >= 10) {
		uint64_t k = ops / 10;
		double s = 0;

		for (i = ops - k; i < ops; i++)
			s += B.lat[i];
		c->tail_mbps[rep] = s > 0 ? (double)(k * bs) / s : NAN; /* bytes/us = MB/s */
	}
	lat_stats(m, B.lat, ops);
	return ops;
}

/* One timed read pass over nb blocks: in order, or in B.order. */
static void read_pass(struct target *t, struct meas *m, uint32_t bsize, uint64_t nb,
		      const uint32_t *order, double cap)
{
	uint64_t i, ops = nb, acc = 0, psi0 = io_stall_us(), cpu0 = cpu_stall_us();
	double t0, tl, te;

	t0 = tl = now_sec();
	for (i = 0; i < nb; i++) {
		uint64_t blk = order ? order[i] : i;
		double t1;

		t_read(t, B.buf, blk * bsize, bsize);
		acc += B.buf[bsize - 1];
		t1 = now_sec();
		B.lat[i] = (float)((t1 - tl) * 1e6);
		tl = t1;
		if (interrupted)
			die("interrupted");
		if (cap > 0 && t1 - t0 >= cap) {
			ops = i + 1;
			break;
		}
	}
	te = now_sec();
	finish_meas(m, ops, bsize, te - t0);
	m->capped = ops < nb;
	m->stall = (double)(io_stall_us() - psi0) / 1e6 / (te - t0);
	m->cpu_stall = (double)(cpu_stall_us() - cpu0) / 1e6 / (te - t0);
	sink += acc;
	lat_stats(m, B.lat, ops);
}

/* Untimed full pass in order that warms the cache and checks every
 * block's tag: block index for the write patterns, a distinct op number
 * for inserts (whose tag sequence is hashed for the cross-check). */
static uint64_t warm_and_check(struct target *t, uint32_t bsize, uint64_t nb, enum pat p, int check)
{
	uint64_t h = 0x243F6A8885A308D3ULL;

	if (check && p == PAT_INSERT)
		memset(B.seen, 0, nb);
	for (uint64_t i = 0; i < nb; i++) {
		uint64_t tag;

		t_read(t, B.buf, i * bsize, bsize);
		if (!check)
			continue;
		tag = get_tag(B.buf);
		if (p == PAT_INSERT) {
			if (tag >= nb || B.seen[tag])
				die("%s %s: block %" PRIu64 " has tag %" PRIu64
				    " (duplicate or out of range)",
				    sys_label(t->sys), pat_name[p], i, tag);
			B.seen[tag] = 1;
			h = (h ^ tag) * 0x100000001B3ULL;
		} else if (tag != i) {
			die("%s %s: block %" PRIu64 " has tag %" PRIu64, sys_label(t->sys),
			    pat_name[p], i, tag);
		}
	}
	return h;
}

static void run_reads(struct target *t, struct cell *c, int si, enum pat p, int rep, uint64_t nb)
{
	const struct size_cfg *z = &B.sz[si];

	t_make_cold(t);
	read_pass(t, &c->m[PH_SEQ_COLD][rep], z->bsize, nb, NULL, z->cold_cap);
	B.tag_hash[t->sys] = warm_and_check(t, z->bsize, nb, p, 1);
	B.tag_ops[t->sys] = nb;
	read_pass(t, &c->m[PH_SEQ_WARM][rep], z->bsize, nb, NULL, 0);

	shuffle(B.order, nb, B.seed ^ 0xC0FFEEULL ^ ((uint64_t)rep << 32) ^ nb);
	t_make_cold(t);
	read_pass(t, &c->m[PH_RAND_COLD][rep], z->bsize, nb, B.order, z->cold_cap);
	warm_and_check(t, z->bsize, nb, p, 0);
	read_pass(t, &c->m[PH_RAND_WARM][rep], z->bsize, nb, B.order, 0);
}

static void progress(const struct cell *c, int si, enum pat p, enum sys s, int rep)
{
	const struct meas *m = c->m[0] + rep;

	fprintf(stderr,
		"  [%5.0fs] %2uK %-11s %-5s rep %d: write %.1f MB/s%s (stall io %.0f%% cpu "
		"%.0f%%)",
		now_sec() - B.t0, B.sz[si].bsize >> 10, pat_name[p], sys_label(s), rep + 1, m->mbps,
		m->capped ? " capped" : "", 100 * m->stall, 100 * m->cpu_stall);
	for (int ph = 1; ph < NPHASE; ph++)
		fprintf(stderr, "  %s %.0f (%.0f%% %.0f%%)", phase_name[ph], c->m[ph][rep].mbps,
			100 * c->m[ph][rep].stall, 100 * c->m[ph][rep].cpu_stall);
	fputc('\n', stderr);
}

static void run_one(int si, enum pat p, enum sys s, int rep)
{
	struct cell *c = &B.cell[si][p][s];
	struct target t;
	uint64_t nb;

	t_create(&t, s, s == SYS_FLEX ? "space" : "file");
	nb = run_write(&t, c, si, p, rep);
	run_reads(&t, c, si, p, rep, nb);
	c->close_mb[rep] = mb(t_close(&t));
	rmtree(t.path);
	sync_work_fs(); /* the unlink's work (and discards) before the next phase */
	c->nreps = rep + 1;
	progress(c, si, p, s, rep);
}

static void run_rep(int si, int rep)
{
	const struct size_cfg *z = &B.sz[si];

	for (int p = 0; p < NPAT; p++) {
		struct rng r = {B.seed ^ ((uint64_t)si << 48) ^ ((uint64_t)p << 40) ^
				((uint64_t)rep << 32)};

		if (p == PAT_INSERT)
			for (uint64_t i = 0; i < z->nblocks; i++)
				B.offs[i] = (uint32_t)rng_below(&r, i + 1);
		else if (p == PAT_RWRITE)
			shuffle(B.offs, z->nblocks, rng_next(&r));
		else
			for (uint64_t i = 0; i < z->nblocks; i++)
				B.offs[i] = (uint32_t)i;
		for (int k = 0; k < NSYS; k++) {
			enum sys s = (enum sys)((k + rep + p) % 2);

			if (s == SYS_FILE && p == PAT_INSERT && !B.have_insert_range) {
				B.tag_ops[s] = UINT64_MAX;
				continue;
			}
			run_one(si, (enum pat)p, s, rep);
		}
		if (p == PAT_INSERT && B.tag_ops[SYS_FILE] != UINT64_MAX) {
			if (B.tag_ops[SYS_FLEX] == B.tag_ops[SYS_FILE]) {
				if (B.tag_hash[SYS_FLEX] != B.tag_hash[SYS_FILE])
					die("insert contents differ between flex and %s",
					    sys_label(SYS_FILE));
				B.hash_compared++;
			} else {
				B.hash_skipped++;
			}
		}
	}
	B.reps_done[si] = rep + 1;
}

/* ---- report ----------------------------------------------------------------------- */

enum field { F_MBPS, F_OPSPS, F_USOP, F_P50, F_P99, F_P999, F_BYTES, F_STALL, F_CPU_STALL };

static double field_of(const struct meas *m, enum field f)
{
	switch (f) {
	case F_MBPS:
		return m->mbps;
	case F_OPSPS:
		return m->opsps;
	case F_USOP:
		return m->usop;
	case F_P50:
		return m->p50;
	case F_P99:
		return m->p99;
	case F_P999:
		return m->p999;
	case F_STALL:
		return m->stall;
	case F_CPU_STALL:
		return m->cpu_stall;
	default:
		return (double)m->bytes;
	}
}

/* Median of one field of a phase over a cell's reps. */
static double med_field(const struct cell *c, enum phase ph, enum field f)
{
	double v[MAX_REPS];

	for (int r = 0; r < c->nreps; r++)
		v[r] = c->m[ph][r].have ? field_of(&c->m[ph][r], f) : NAN;
	return median(v, c->nreps);
}

static void print_line(int si, enum pat p, enum sys s, enum phase ph)
{
	const struct cell *c = &B.cell[si][p][s];
	char wl[16], wp[16], wd[16], reps[64] = "", note[256] = "";
	int capped = 0;
	double minfill = INFINITY;

	if (!c->nreps)
		return;
	for (int r = 0; r < c->nreps; r++) {
		size_t l = strlen(reps);

		snprintf(reps + l, sizeof(reps) - l, "%s%.1f", r ? " " : "", c->m[ph][r].mbps);
		capped += c->m[ph][r].capped;
		if (c->fill[r] < minfill)
			minfill = c->fill[r];
	}
	if (ph == PH_WRITE) {
		fmt_num(wl, sizeof(wl), 3, "", median(c->wa_lib, c->nreps));
		fmt_num(wp, sizeof(wp), 3, "", median(c->wa_proc, c->nreps));
		fmt_num(wd, sizeof(wd), 3, "", median(c->wa_dev, c->nreps));
	} else {
		snprintf(wl, sizeof(wl), "-");
		snprintf(wp, sizeof(wp), "-");
		snprintf(wd, sizeof(wd), "-");
	}
	if (ph == PH_WRITE) {
		size_t l;

		snprintf(note, sizeof(note), "sync %.1f ms", median(c->sync_ms, c->nreps));
		l = strlen(note);
		if (capped)
			snprintf(note + l, sizeof(note) - l,
				 "; time-bounded at %.0f s: filled %.1f MB of %.1f (%.0f%%), "
				 "last-10%% rate %.2f MB/s",
				 B.sz[si].insert_cap, mb((uint64_t)minfill),
				 mb(B.sz[si].nblocks * B.sz[si].bsize),
				 100.0 * minfill / (double)(B.sz[si].nblocks * B.sz[si].bsize),
				 median(c->tail_mbps, c->nreps));
		l = strlen(note);
		if (s == SYS_FLEX)
			snprintf(note + l, sizeof(note) - l, "; close commit %.2f MB",
				 median(c->close_mb, c->nreps));
	} else if (capped) {
		snprintf(note, sizeof(note),
			 "time-bounded at %.1f s in %d of %d reps (%.0f%% read)", B.sz[si].cold_cap,
			 capped, c->nreps, 100.0 * med_field(c, ph, F_BYTES) / minfill);
	}
	printf("%3uK %-11s %-9s %-5s %9.2f MB/s %10.0f ops/s %9.2f us/op  p50 %8.2f p99 %8.2f "
	       "p99.9 %9.2f  wa lib %-5s proc %-5s dev %-5s  stall io %3.0f%% cpu %3.0f%%  "
	       "reps %s%s%s\n",
	       B.sz[si].bsize >> 10, pat_name[p], phase_name[ph], sys_label(s),
	       med_field(c, ph, F_MBPS), med_field(c, ph, F_OPSPS), med_field(c, ph, F_USOP),
	       med_field(c, ph, F_P50), med_field(c, ph, F_P99), med_field(c, ph, F_P999), wl, wp,
	       wd, 100 * med_field(c, ph, F_STALL), 100 * med_field(c, ph, F_CPU_STALL), reps,
	       note[0] ? "  " : "", note);
	if (B.csv) {
		for (int r = 0; r < c->nreps; r++) {
			const struct meas *m = &c->m[ph][r];

			fprintf(B.csv,
				"%u,%s,%s,%s,%d,%.4f,%.1f,%.4f,%.3f,%.3f,%.3f,%" PRIu64
				",%.4f,%.4f,"
				"%.4f,%.0f,%d,%.4f,%.4f,\"%s\"\n",
				B.sz[si].bsize, pat_name[p], phase_name[ph], sys_label(s), r + 1,
				m->mbps, m->opsps, m->usop, m->p50, m->p99, m->p999, m->bytes,
				ph == PH_WRITE ? c->wa_lib[r] : NAN,
				ph == PH_WRITE ? c->wa_proc[r] : NAN,
				ph == PH_WRITE ? c->wa_dev[r] : NAN, c->fill[r], m->capped,
				m->stall, m->cpu_stall, note);
		}
	}
}

static void print_table(void)
{
	static const char *const rows[] = {"Write (MB/s)", "W.A. lib",	"W.A. proc", "W.A. dev",
					   "Seq cold",	   "Rand cold", "Seq warm",  "Rand warm"};
	static const enum phase row_ph[] = {PH_WRITE,	 PH_WRITE,     PH_WRITE,    PH_WRITE,
					    PH_SEQ_COLD, PH_RAND_COLD, PH_SEQ_WARM, PH_RAND_WARM};
	char sl[32];

	printf("\nTable 2 on this machine (MB/s = 1e6 B/s, medians; reads in MB/s)\n%-13s", "");
	for (int si = 0; si < B.nsizes; si++) {
		size_label(B.sz[si].nblocks * B.sz[si].bsize, sl, sizeof(sl));
		printf("| %-2uK blocks, %-8s %-34s", B.sz[si].bsize >> 10, sl, "");
	}
	printf("\n%-13s", "");
	for (int si = 0; si < B.nsizes; si++)
		for (int p = 0; p < NPAT; p++)
			printf("| %-16s", pat_name[p]);
	printf("\n%-13s", "");
	for (int si = 0; si < B.nsizes; si++)
		for (int p = 0; p < NPAT; p++)
			printf("| %7s %7s ", "flex", sys_label(SYS_FILE));
	printf("\n");
	for (size_t row = 0; row < sizeof(rows) / sizeof(rows[0]); row++) {
		printf("%-13s", rows[row]);
		for (int si = 0; si < B.nsizes; si++) {
			for (int p = 0; p < NPAT; p++) {
				printf("|");
				for (int s = 0; s < NSYS; s++) {
					const struct cell *c = &B.cell[si][p][s];
					double v = NAN;
					char b[16];

					if (c->nreps) {
						if (row == 1)
							v = median(c->wa_lib, c->nreps);
						else if (row == 2)
							v = median(c->wa_proc, c->nreps);
						else if (row == 3)
							v = median(c->wa_dev, c->nreps);
						else
							v = med_field(c, row_ph[row], F_MBPS);
					}
					fmt_num(b, sizeof(b), row >= 1 && row <= 3 ? 3 : 1, "", v);
					printf(" %7s", b);
				}
				printf(" ");
			}
		}
		printf("\n");
	}
}

static int n_pass, n_miss;

/* flex/file for one phase: the median over reps of the ratio within each
 * rep (the two ran back to back, so slow drifts in the machine's load
 * cancel), with the per-rep ratios listed in reps. */
static double paired_ratio(int si, enum pat p, enum phase ph, char *reps, size_t cap)
{
	const struct cell *f = &B.cell[si][p][SYS_FLEX], *g = &B.cell[si][p][SYS_FILE];
	int n = f->nreps < g->nreps ? f->nreps : g->nreps;
	double v[MAX_REPS];

	reps[0] = '\0';
	for (int r = 0; r < n; r++) {
		size_t l = strlen(reps);

		v[r] = f->m[ph][r].have && g->m[ph][r].have && g->m[ph][r].mbps > 0
			   ? f->m[ph][r].mbps / g->m[ph][r].mbps
			   : NAN;
		snprintf(reps + l, cap - l, "%s%.3g", r ? " " : "", v[r]);
	}
	return median(v, n);
}

/* One ratio line: value, target (when there is one) and PASS/MISS. */
static void ratio_line(int si, enum pat p, enum phase ph, const char *op, double target,
		       int applies, const char *why)
{
	char label[128], reps[96], tg[32], st[64];
	double v = paired_ratio(si, p, ph, reps, sizeof(reps));
	int ok;

	snprintf(label, sizeof(label), "%uK %s %s flex/%s", B.sz[si].bsize >> 10, pat_name[p],
		 phase_name[ph], sys_label(SYS_FILE));
	if (op)
		snprintf(tg, sizeof(tg), "target %s %gx", op, target);
	if (!op) {
		snprintf(tg, sizeof(tg), "(no target)");
		st[0] = '\0';
	} else if (isnan(v)) {
		snprintf(st, sizeof(st), "n/a (not measured)");
	} else if (!applies) {
		snprintf(st, sizeof(st), "n/a (%s)", why);
	} else {
		ok = op[0] == '>' ? v >= target : v <= target;
		snprintf(st, sizeof(st), "%s", ok ? "PASS" : "MISS");
		n_pass += ok;
		n_miss += !ok;
	}
	printf("  %-38s %8.3fx  %-16s %-24s ", label, v, tg, st);
	printf("per rep: %s\n", reps);
}

static void wa_line(int si, enum pat p)
{
	const struct cell *c = &B.cell[si][p][SYS_FLEX];
	char label[128], reps[96] = "";
	double v = c->nreps ? median(c->wa_lib, c->nreps) : NAN;
	int ok = v <= 1.05;

	for (int r = 0; r < c->nreps; r++) {
		size_t l = strlen(reps);

		snprintf(reps + l, sizeof(reps) - l, "%s%.4g", r ? " " : "", c->wa_lib[r]);
	}
	snprintf(label, sizeof(label), "%uK %s flex write ampl. (lib)", B.sz[si].bsize >> 10,
		 pat_name[p]);
	printf("  %-38s %8.3f   %-16s %-24s per rep: %s\n", label, v, "target <= 1.05",
	       isnan(v) ? "n/a (not measured)"
	       : ok	? "PASS"
			: "MISS",
	       reps);
	if (!isnan(v)) {
		n_pass += ok;
		n_miss += !ok;
	}
}

static void print_targets(void)
{
	printf("\nRatios flex/%s (median over reps of the within-rep ratio) and the issue's "
	       "targets\n",
	       sys_label(SYS_FILE));
	for (int si = 0; si < B.nsizes; si++) {
		const struct size_cfg *z = &B.sz[si];
		uint64_t space = z->nblocks * z->bsize;

		if (z->bsize == 4096)
			ratio_line(si, PAT_INSERT, PH_WRITE, ">=", 100, space >= SPACE_4K,
				   "space < 256 MiB");
		else
			ratio_line(si, PAT_INSERT, PH_WRITE, NULL, 0, 0, "");
		for (int p = PAT_RWRITE; p < NPAT; p++)
			ratio_line(si, (enum pat)p, PH_WRITE, ">=", 0.8, 1, "");
		for (int p = 0; p < NPAT; p++)
			wa_line(si, (enum pat)p);
		for (int p = 0; p < NPAT; p++)
			for (int ph = PH_SEQ_WARM; ph <= PH_RAND_WARM; ph += 2)
				ratio_line(si, (enum pat)p, (enum phase)ph, ">=", 0.7, 1, "");
		for (int p = 0; p < NPAT; p++)
			for (int ph = PH_SEQ_COLD; ph <= PH_RAND_COLD; ph += 2)
				ratio_line(si, (enum pat)p, (enum phase)ph, NULL, 0, 0, "");
	}
	printf("targets: %d PASS, %d MISS\n", n_pass, n_miss);
}

/* ---- header, main ----------------------------------------------------------------- */

static void print_header(void)
{
	char cpu[256], date[64], sl[32];

	cpu_model(cpu, sizeof(cpu));
	date_now(date, sizeof(date));
	printf("flexspace_bench: FlexSpace vs a regular file (FlexSpace paper, section 6.2, "
	       "Table 2)\n");
	print_build_mode();
	printf("library:  flex %s, io_uring %s\n", flex_version(NULL, NULL, NULL),
	       flex_io_uring_active() ? "active" : "off (pread/pwrite fallback)");
	printf("cpu:      %s (%ld online)\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
	printf("date:     %s\n", date);
	printf("files:    %s\n", B.where);
	if (!B.have_insert_range)
		printf("WARNING:  ext4 insert-range unavailable: rand-insert is FlexSpace only\n");
	printf("device:   %s\n", B.have_dev ? B.devstat : "none (no dev write amplification)");
	for (int si = 0; si < B.nsizes; si++) {
		size_label(B.sz[si].nblocks * B.sz[si].bsize, sl, sizeof(sl));
		printf("config:   %uK blocks x %" PRIu64 " = %s; file insert-range bounded at %.0f "
		       "s, cold passes at %.1f s%s%s\n",
		       B.sz[si].bsize >> 10, B.sz[si].nblocks, sl, B.sz[si].insert_cap,
		       B.sz[si].cold_cap, B.sz[si].note[0] ? "; " : "", B.sz[si].note);
	}
	printf("          seed %" PRIu64 ", up to %d reps (median) within a %.0f s budget, "
	       "FlexSpace default options (4 MiB segments)\n",
	       B.seed, MAX_REPS, B.budget);
	printf("          write phases end with fsync / flexspace_sync inside the timing; "
	       "latency percentiles exclude it\n\n");
	fflush(stdout);
}

static void setup_sizes(void)
{
	static const uint32_t bs[2] = {4096, 65536};
	const uint64_t want[2] = {B.quick ? QUICK_SPACE : SPACE_4K, SPACE_64K};
	uint64_t free_b = free_bytes(B.work), avail = mem_available();
	uint64_t maxn = 0;

	B.nsizes = B.quick ? 1 : 2;
	for (int si = 0; si < B.nsizes; si++) {
		struct size_cfg *z = &B.sz[si];
		uint64_t space = want[si];

		/* One space at a time is on disk: it, its segment slack, and a
		 * margin of 1 GiB for everyone else. */
		while (space > MIN_SPACE && free_b < space + space / 8 + ((uint64_t)1 << 30))
			space /= 2;
		/* Warm reads need the space to fit in the page cache. */
		while (space > MIN_SPACE && avail && avail < space * 2)
			space /= 2;
		if (space != want[si]) {
			char a[32], b[32];

			size_label(want[si], a, sizeof(a));
			size_label(space, b, sizeof(b));
			snprintf(z->note, sizeof(z->note),
				 "SCALED DOWN from %s to %s (free disk %.1f GB, available memory "
				 "%.1f GB)",
				 a, b, (double)free_b / 1e9, (double)avail / 1e9);
		}
		z->bsize = bs[si];
		z->nblocks = space / bs[si];
		z->insert_cap = B.quick ? QUICK_INSERT_CAP_SEC : INSERT_CAP_SEC;
		z->cold_cap = B.quick ? QUICK_COLD_CAP_SEC : COLD_CAP_SEC;
		if (z->nblocks > maxn)
			maxn = z->nblocks;
	}
	B.buf = xmalloc(65536);
	for (size_t i = 0; i < 65536; i++)
		B.buf[i] = (uint8_t)(i * 131 + 7);
	B.lat = xmalloc(maxn * sizeof(*B.lat));
	B.offs = xmalloc(maxn * sizeof(*B.offs));
	B.order = xmalloc(maxn * sizeof(*B.order));
	B.seen = xmalloc(maxn);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: flexspace_bench [--quick] [--dir DIR] [--csv FILE] [--seed N] "
		"[--budget SEC]\n"
		"  --quick       32 MiB of 4 KiB blocks only, %.0f s budget (< 20 s in all)\n"
		"  --dir DIR     where the files go (default /tmp; must allow insert-range,\n"
		"                else /work, /tmp, /dev/shm or a loop-mounted ext4 image)\n"
		"  --csv FILE    also write one row per workload and repetition as CSV\n"
		"  --seed N      random seed (default 1)\n"
		"  --budget SEC  time budget for repetitions (default %.0f)\n",
		QUICK_BUDGET_SEC, BUDGET_SEC);
}

int main(int argc, char **argv)
{
	const char *csv = NULL;
	double rep_sec[2] = {0, 0};
	struct sigaction sa;

	B.t0 = now_sec();
	B.seed = 1;
	B.budget = -1;
	B.work_fd = -1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			B.quick = 1;
		} else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
			B.user_dir = argv[++i];
		} else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
			csv = argv[++i];
		} else if ((!strcmp(argv[i], "--seed") || !strcmp(argv[i], "--budget")) &&
			   i + 1 < argc) {
			const char *opt = argv[i];
			char *end;

			errno = 0;
			if (!strcmp(opt, "--seed"))
				B.seed = strtoull(argv[++i], &end, 0);
			else
				B.budget = strtod(argv[++i], &end);
			if (errno || *end)
				die("bad value '%s' for %s", argv[i], opt);
		} else {
			usage_exit(usage, !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"));
		}
	}

	if (B.budget < 0)
		B.budget = B.quick ? QUICK_BUDGET_SEC : BUDGET_SEC;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	atexit(cleanup);

	choose_dir((B.quick ? QUICK_SPACE : SPACE_64K) * 2 + ((uint64_t)512 << 20));
	setup_sizes();
	if (csv) {
		B.csv = csv_open(
		    csv, "io_size,pattern,phase,system,rep,mbps,ops_per_s,us_per_op,p50_us,"
			 "p99_us,p999_us,bytes,wa_lib,wa_proc,wa_dev,fill_bytes,capped,io_stall,"
			 "cpu_stall,"
			 "note\n");
	}
	print_header();

	/* Repetitions interleave the sizes; each further one must fit. */
	for (int rep = 0; rep < MAX_REPS; rep++) {
		for (int si = 0; si < B.nsizes; si++) {
			double t;

			if (rep > 0 && now_sec() - B.t0 + rep_sec[si] > B.budget)
				continue;
			t = now_sec();
			run_rep(si, rep);
			if (now_sec() - t > rep_sec[si])
				rep_sec[si] = now_sec() - t;
		}
	}

	printf("Results (median over reps; MB/s = 1e6 B/s; us/op = wall time per op including "
	       "the final barrier; p50/p99/p99.9 per-op latency in us without it)\n");
	for (int si = 0; si < B.nsizes; si++)
		for (int p = 0; p < NPAT; p++)
			for (int ph = 0; ph < NPHASE; ph++)
				for (int s = 0; s < NSYS; s++)
					print_line(si, (enum pat)p, (enum sys)s, (enum phase)ph);
	print_table();
	print_targets();

	printf("\nreps:     ");
	for (int si = 0; si < B.nsizes; si++)
		printf("%uK: %d  ", B.sz[si].bsize >> 10, B.reps_done[si]);
	printf("\ncold:     %d drops by posix_fadvise(DONTNEED) (verified with mincore), %d by "
	       "/proc/sys/vm/drop_caches, %d failed; worst residency after a drop %.1f%%\n",
	       B.cold_fadvise, B.cold_drop, B.cold_failed, 100.0 * B.cold_worst_resident);
	printf("wa:       lib = FlexSpace's bytes written to DATA+LOG+TREE during the phase "
	       "(flexspace_stats);\n"
	       "          proc = write_bytes growth in /proc/self/io (page-cache bytes this "
	       "process dirtied; no fs metadata/journal);\n"
	       "          dev = sectors written by %s between syncfs calls (journal and "
	       "metadata included; device-wide, other processes add noise)\n",
	       B.have_dev ? B.devstat : "(no device)");
	printf("check:    every block's tag verified after each write phase; insert contents "
	       "compared between systems in %d rep(s) (%d skipped: different op counts)\n",
	       B.hash_compared, B.hash_skipped);
	printf("total %.1f s\n", now_sec() - B.t0);
	if (B.csv && fclose(B.csv))
		die("writing %s failed", csv);
	B.csv = NULL;
	return 0;
}
