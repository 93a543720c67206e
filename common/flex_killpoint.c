/*
 * flex_killpoint.c - the hook behind FLEX_KILLPOINT (flex_killpoint.h):
 * kills the process at the n-th hit of a named crash point when the
 * environment asks for it.  Compiled only into builds with assertions.
 *
 * Why a hook in the library: a test that kills a process after a random
 * delay (test_*_crash.c) mostly lands in the long, boring stretches of a
 * workload; the moments recovery has to get right -- between a write and
 * its fsync, between a commit's node writes and its header, after a WAL
 * is unlinked but before the directory is synced -- last microseconds and
 * are rarely hit.  A named point reached exactly is hit every time.
 *
 * The specification is parsed on the first hit in each process under a
 * mutex, then read through one atomic state, so a disarmed point costs a
 * load and a compare.  A pthread_atfork child handler forgets it: a forked
 * test child sets FLEX_KILLPOINT after fork, and its hits count from zero.
 */
#ifndef NDEBUG

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flex_killpoint.h"

enum { KP_UNREAD = 0, KP_OFF, KP_ARMED };

/* The longest pattern kept; longer ones disarm (point names are short). */
#define KP_PATTERN_MAX 128

static pthread_mutex_t kp_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int kp_state;
static atomic_long kp_hits;
static int kp_atfork_done;
static char kp_pattern[KP_PATTERN_MAX];
static size_t kp_plen;
static int kp_prefix; /* pattern ended in '*': match names starting with it */
static long kp_at;

static void kp_after_fork_child(void)
{
	/* Only the forking thread exists in the child; a mutex another parent
	 * thread held at the fork is reinitialised rather than waited for. */
	pthread_mutex_init(&kp_mu, NULL);
	atomic_store(&kp_hits, 0);
	atomic_store(&kp_state, KP_UNREAD);
}

/* Parses FLEX_KILLPOINT; returns the new state. */
static int kp_load(void)
{
	pthread_mutex_lock(&kp_mu);
	int s = atomic_load(&kp_state);
	if (s != KP_UNREAD) {
		pthread_mutex_unlock(&kp_mu);
		return s;
	}
	if (!kp_atfork_done)
		kp_atfork_done = pthread_atfork(NULL, NULL, kp_after_fork_child) == 0;
	s = KP_OFF;
	const char *spec = getenv("FLEX_KILLPOINT");
	const char *colon = spec ? strrchr(spec, ':') : NULL;
	if (colon && colon > spec && (size_t)(colon - spec) < KP_PATTERN_MAX) {
		char *end;
		long at = strtol(colon + 1, &end, 10);
		if (*end == '\0' && at > 0) {
			kp_plen = (size_t)(colon - spec);
			memcpy(kp_pattern, spec, kp_plen);
			kp_pattern[kp_plen] = '\0';
			kp_prefix = kp_pattern[kp_plen - 1] == '*';
			if (kp_prefix)
				kp_plen--;
			kp_at = at;
			s = KP_ARMED;
		}
	}
	atomic_store_explicit(&kp_state, s, memory_order_release);
	pthread_mutex_unlock(&kp_mu);
	return s;
}

static int kp_match(const char *name)
{
	if (kp_prefix)
		return strncmp(name, kp_pattern, kp_plen) == 0;
	return strcmp(name, kp_pattern) == 0;
}

/* Appends "<name> <n>" to FLEX_KILLPOINT_REPORT.  One write(2) of a
 * short line with O_APPEND: the line is whole or absent, and it is in
 * the page cache before the kill, which a SIGKILL does not undo. */
static void kp_report(const char *name, long n)
{
	const char *path = getenv("FLEX_KILLPOINT_REPORT");
	if (!path || !*path)
		return;
	char line[KP_PATTERN_MAX + 32];
	int len = snprintf(line, sizeof(line), "%s %ld\n", name, n);
	if (len <= 0 || (size_t)len >= sizeof(line))
		return;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	ssize_t w = write(fd, line, (size_t)len);
	(void)w;
	close(fd);
}

FLEX_EXPORT void flex_killpoint(const char *name)
{
	int s = atomic_load_explicit(&kp_state, memory_order_acquire);
	if (s == KP_UNREAD)
		s = kp_load();
	if (s != KP_ARMED || !name || !kp_match(name))
		return;
	long n = atomic_fetch_add(&kp_hits, 1) + 1;
	if (n != kp_at)
		return;
	kp_report(name, n);
	kill(getpid(), SIGKILL);
	/* SIGKILL cannot be blocked or caught: the process is gone before
	 * kill returns.  Never continue past a point that was asked to
	 * crash, whatever happens. */
	for (;;)
		pause();
}

#else
/* A release build has no kill points; ISO C wants a declaration here. */
typedef int flex_killpoint_unused;
#endif
