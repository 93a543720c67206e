/*
 * flex_brlock.h - a reader-writer lock for paths that readers on many
 * threads take for every call (internal to the libraries; not installed).
 *
 * One pthread rwlock is one word that every reader writes twice, so two
 * threads reading at once pass its cache line back and forth on every
 * call.  A flex_brlock is FLEX_BRLOCK_STRIPES rwlocks on lines of their
 * own: a reader takes the stripe of its thread (threads take stripes in
 * turn), a writer takes every stripe in order.  Reads cost what they cost
 * with one rwlock; a write costs a lock per stripe.  The stripes prefer
 * writers, so a steady stream of readers does not starve one; as with
 * any rwlock, a thread must not take it again while it holds it.
 * Exported from libflextree for the layers above, not installed.
 */
#ifndef FLEX_BRLOCK_H
#define FLEX_BRLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "flex_common.h"

#define FLEX_BRLOCK_STRIPES 8

struct flex_brlock {
	struct {
		pthread_rwlock_t l;
		char pad[128 - sizeof(pthread_rwlock_t) % 128];
	} s[FLEX_BRLOCK_STRIPES];
	/* Threads behind a writer, after the stripes' padding: readers
	 * watching for it to end (spinning) and asleep (waiting, a futex
	 * word), which flex_brlock_wrpass waits for; writers watching for
	 * the readers inside to leave (want); readers and writers watching,
	 * at most spin of them (flex_brlock_init). */
	atomic_uint spinning;
	atomic_uint waiting;
	atomic_uint want;
	atomic_uint watchers;
	atomic_uint passing; /* a writer waits in flex_brlock_wrpass */
	unsigned spin;
};

/* For threads that watch for something instead of sleeping (here, and
 * FlexDB's writers): the monotonic clock in nanoseconds, and a pause
 * between two looks. */
static inline uint64_t flex_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void flex_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* The calling thread's slot: 0 for the first thread to ask, 1 for the
 * next, and so on; what spreads threads over stripes (here and for the
 * libraries' striped counters). */
FLEX_EXPORT unsigned flex_thread_slot(void);

/* 0 or -errno (then nothing needs destroying).  Readers behind a writer,
 * and a writer behind readers, watch for FLEX_BRLOCK_SPIN_NS before they
 * sleep when the process may run on more than one CPU, one fewer thread
 * than the CPUs at a time per lock (not under Helgrind, which runs one
 * thread at a time). */
#define FLEX_BRLOCK_SPIN_NS 50000
FLEX_EXPORT int flex_brlock_init(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_destroy(struct flex_brlock *b);
/* A thread unlocks the stripe it locked: its own. */
FLEX_EXPORT void flex_brlock_rdlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_rdunlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_wrlock(struct flex_brlock *b);
/* 0 with every stripe taken, or EBUSY (then none) without waiting. */
FLEX_EXPORT int flex_brlock_trywrlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_wrunlock(struct flex_brlock *b);
/* Held exclusively: lets the readers that queued meanwhile in, then takes
 * the lock again.  A writer that works in bursts calls it between them:
 * unlocking and locking again at once would leave the queued readers
 * asleep through the next burst, and the next (the lock prefers writers),
 * while they wake.  It waits for them to take the lock for up to
 * max_ns; they take it in the order the kernel wakes them. */
FLEX_EXPORT void flex_brlock_wrpass(struct flex_brlock *b, unsigned max_ns);

#endif /* FLEX_BRLOCK_H */
