/*
 * memcg.c - memory cgroups for the engine children (contract: memcg.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memcg.h"

#define CG_PATH (PATH_MAX + 128)

/* The mount point of the v1 memory controller (a cgroup file system with
 * the "memory" option) from /proc/self/mountinfo; whether cgroup2 is
 * mounted goes to *v2. */
static int find_mount(char *mnt, size_t cap, int *v2)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	int found = 0;

	*v2 = 0;
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		/* id parent maj:min root mountpoint options ... - fstype source superopts */
		char *sep = strstr(line, " - ");
		char point[PATH_MAX], fstype[64], source[256], super[1024];
		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1)
			continue;
		if (sscanf(sep + 3, "%63s %255s %1023s", fstype, source, super) != 3)
			continue;
		if (!strcmp(fstype, "cgroup2")) {
			*v2 = 1;
			continue;
		}
		if (strcmp(fstype, "cgroup"))
			continue;
		for (char *save = NULL, *o = strtok_r(super, ",", &save); o;
		     o = strtok_r(NULL, ",", &save))
			if (!strcmp(o, "memory")) {
				snprintf(mnt, cap, "%s", point);
				found = 1;
			}
	}
	fclose(f);
	return found;
}

/* The group of this process in the v1 memory hierarchy, from
 * /proc/self/cgroup ("4:memory:/a/b" -> "/a/b"). */
static int own_group(char *grp, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		for (char *save = NULL, *o = strtok_r(c1 + 1, ",", &save); o;
		     o = strtok_r(NULL, ",", &save))
			if (!strcmp(o, "memory")) {
				char *p = c2 + 1;
				p[strcspn(p, "\n")] = 0;
				snprintf(grp, cap, "%s", strcmp(p, "/") ? p : "");
				found = 1;
			}
	}
	fclose(f);
	return found;
}

static int write_file(const char *dir, const char *file, const char *val)
{
	char path[CG_PATH + 64];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if ((fd = open(path, O_WRONLY)) < 0)
		return -errno;
	size_t n = strlen(val);
	if (write(fd, val, n) != (ssize_t)n)
		rc = -errno;
	if (close(fd) && !rc)
		rc = -errno;
	return rc;
}

static double read_num(const char *dir, const char *file)
{
	char path[CG_PATH + 64];
	unsigned long long v;
	double r = NAN;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *f = fopen(path, "r");
	if (!f)
		return r;
	if (fscanf(f, "%llu", &v) == 1)
		r = (double)v;
	fclose(f);
	return r;
}

int memcg_create(const char *parent, const char *tag, uint64_t limit_bytes, char *path,
		 size_t pcap, char *why, size_t wcap)
{
	char val[32], mem[CG_PATH + 64];
	int rc;

	if ((size_t)snprintf(path, pcap, "%s/flexbench-%d-%s", parent, (int)getpid(), tag) >= pcap) {
		snprintf(why, wcap, "cgroup path too long");
		return -1;
	}
	if (mkdir(path, 0755) && errno != EEXIST) {
		snprintf(why, wcap, "mkdir %s: %s", path, strerror(errno));
		return -1;
	}
	snprintf(val, sizeof(val), "%llu", (unsigned long long)limit_bytes);
	if ((rc = write_file(path, "memory.limit_in_bytes", val))) {
		snprintf(why, wcap, "%s/memory.limit_in_bytes: %s", path, strerror(-rc));
		rmdir(path);
		return -1;
	}
	snprintf(mem, sizeof(mem), "%s/memory.memsw.limit_in_bytes", path);
	if (access(mem, F_OK) == 0 && (rc = write_file(path, "memory.memsw.limit_in_bytes", val))) {
		snprintf(why, wcap, "%s: %s", mem, strerror(-rc));
		rmdir(path);
		return -1;
	}
	return 0;
}

int memcg_probe(char *parent, size_t pcap, char *why, size_t wcap)
{
	char mnt[PATH_MAX], grp[PATH_MAX], test[CG_PATH];
	int v2;

	if (!find_mount(mnt, sizeof(mnt), &v2)) {
		snprintf(why, wcap,
			 "no cgroup v1 memory controller is mounted%s (--cgroup-mb needs one, "
			 "e.g. at /sys/fs/cgroup/memory)",
			 v2 ? " (only cgroup v2, which this program does not drive)" : "");
		return -1;
	}
	if (!own_group(grp, sizeof(grp))) {
		snprintf(why, wcap, "/proc/self/cgroup names no memory group");
		return -1;
	}
	if ((size_t)snprintf(parent, pcap, "%s%s", mnt, grp) >= pcap) {
		snprintf(why, wcap, "cgroup path too long");
		return -1;
	}
	if (access(parent, W_OK)) {
		snprintf(why, wcap, "cannot make groups in %s: %s (needs root, or write access to "
			 "the memory controller)", parent, strerror(errno));
		return -1;
	}
	if (memcg_create(parent, "probe", (uint64_t)64 << 20, test, sizeof(test), why, wcap))
		return -1;
	if (rmdir(test)) {
		snprintf(why, wcap, "rmdir %s: %s", test, strerror(errno));
		return -1;
	}
	return 0;
}

int memcg_enter(const char *path)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	return write_file(path, "cgroup.procs", pid);
}

void memcg_read(const char *path, struct memcg_stat *st)
{
	char file[CG_PATH + 64], line[256];
	FILE *f;

	st->usage = read_num(path, "memory.usage_in_bytes");
	st->max_usage = read_num(path, "memory.max_usage_in_bytes");
	st->cache = st->rss = st->mapped = st->oom_kills = NAN;
	snprintf(file, sizeof(file), "%s/memory.stat", path);
	if ((f = fopen(file, "r"))) {
		while (fgets(line, sizeof(line), f)) {
			unsigned long long v;
			if (sscanf(line, "total_cache %llu", &v) == 1)
				st->cache = (double)v;
			else if (sscanf(line, "total_rss %llu", &v) == 1)
				st->rss = (double)v;
			else if (sscanf(line, "total_mapped_file %llu", &v) == 1)
				st->mapped = (double)v;
		}
		fclose(f);
	}
	snprintf(file, sizeof(file), "%s/memory.oom_control", path);
	if ((f = fopen(file, "r"))) {
		while (fgets(line, sizeof(line), f)) {
			unsigned long long v;
			if (sscanf(line, "oom_kill %llu", &v) == 1)
				st->oom_kills = (double)v;
		}
		fclose(f);
	}
}

void memcg_reset_peak(const char *path)
{
	(void)write_file(path, "memory.max_usage_in_bytes", "0");
}

int memcg_remove(const char *path)
{
	/* The group may stay busy for a moment after its last process was
	 * reaped. */
	for (int i = 0; i < 200; i++) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		usleep(10000);
	}
	return -EBUSY;
}
