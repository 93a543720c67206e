/*
 * memcg.h - a memory cgroup per engine child (bench/memcg.c, compiled once,
 * linked into flexdb_bench and ycsb_bench).
 *
 * The cgroup v1 memory controller counts a group's anonymous memory and
 * the page cache it brings in (reads and writes of its files) against one
 * limit, memory.limit_in_bytes: when the group reaches it, the kernel
 * reclaims the group's page cache first and kills a process of the group
 * (the OOM killer) only when what is left cannot be reclaimed.  So an
 * engine in its own group runs with the given total memory: its heap,
 * caches and memtables plus the page cache of its store.
 *
 * The groups are made below the group the program itself is in (so that
 * the limits of the groups above, if any, still apply), named
 * flexbench-<program pid>-<engine>; memory.memsw.limit_in_bytes (memory +
 * swap) is set to the same limit where it exists, so that swapping does
 * not extend it.  A child moves itself in (memcg_enter) before it opens
 * its store; pages it had touched before stay charged to the parent's
 * group (v1 does not move charges by default).  Needs root (or write
 * access to the controller) and the v1 controller: memcg_probe says why
 * not.
 */
#ifndef MEMCG_H
#define MEMCG_H

#include <stddef.h>
#include <stdint.h>

/* What a group's files say, in bytes (NaN where unavailable). */
struct memcg_stat {
	double usage;	  /* memory.usage_in_bytes */
	double max_usage; /* memory.max_usage_in_bytes: the peak since creation or reset */
	double cache;	  /* memory.stat total_cache: page cache charged to the group */
	double rss;	  /* memory.stat total_rss: anonymous memory */
	double mapped;	  /* memory.stat total_mapped_file: page cache mapped (LMDB) */
	double oom_kills; /* memory.oom_control oom_kill: processes the OOM killer killed */
};

/* Whether groups can be made here: finds the v1 memory controller and the
 * group this process is in, makes and removes a test group.  0 and the
 * directory new groups go in (parent), or -1 and the reason (why). */
int memcg_probe(char *parent, size_t pcap, char *why, size_t wcap);

/* Makes parent/flexbench-<getpid()>-<tag> with the limit; 0 and its path,
 * or -1 and why. */
int memcg_create(const char *parent, const char *tag, uint64_t limit_bytes, char *path,
		 size_t pcap, char *why, size_t wcap);

/* Moves the calling process into the group: 0 or -errno. */
int memcg_enter(const char *path);

/* Reads the group's figures (fields it cannot read are NaN). */
void memcg_read(const char *path, struct memcg_stat *st);

/* Starts memory.max_usage_in_bytes afresh from the current usage. */
void memcg_reset_peak(const char *path);

/* Removes the group (its processes must have exited): 0 or -errno. */
int memcg_remove(const char *path);

#endif
