/*
 * flex_brlock.c - the striped reader-writer lock (flex_brlock.h).
 */
#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "flex_brlock.h"
#include "flex_hg.h"

int flex_brlock_init(struct flex_brlock *b)
{
	pthread_rwlockattr_t a;
	int rc = pthread_rwlockattr_init(&a);
	if (rc)
		return -rc;
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	int i = 0;
	for (; i < FLEX_BRLOCK_STRIPES && !rc; i++)
		rc = pthread_rwlock_init(&b->s[i].l, &a);
	pthread_rwlockattr_destroy(&a);
	atomic_init(&b->spinning, 0);
	atomic_init(&b->want, 0);
	atomic_init(&b->watchers, 0);
	atomic_init(&b->waiting, 0);
	atomic_init(&b->passing, 0);
	FLEX_ATOMIC_OBJ(&b->spinning, 5 * sizeof(atomic_uint));
	b->spin = 0;
#ifndef FLEX_HELGRIND
	cpu_set_t set;
	long ncpu = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
								 : sysconf(_SC_NPROCESSORS_ONLN);
	b->spin = ncpu > 1 ? (unsigned)ncpu - 1 : 0;
#endif
	if (rc) {
		for (i -= 2; i >= 0; i--)
			pthread_rwlock_destroy(&b->s[i].l);
		return -rc;
	}
	return 0;
}

void flex_brlock_destroy(struct flex_brlock *b)
{
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++)
		pthread_rwlock_destroy(&b->s[i].l);
}

unsigned flex_thread_slot(void)
{
	static atomic_uint next;
	static _Thread_local unsigned mine; /* slot + 1; 0 until taken */
	if (!mine)
		mine = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1;
	return mine - 1;
}

static long futex(atomic_uint *w, int op, unsigned val, const struct timespec *ts)
{
	return syscall(SYS_futex, (unsigned *)w, op | FUTEX_PRIVATE_FLAG, val, ts, NULL, 0);
}

/* Whether the caller may watch for the lock instead of sleeping: at most
 * b->spin threads (one fewer than the CPUs) watch this lock at once,
 * readers and writers together, so that a thread holding it has a CPU to
 * finish on.  If so, the caller calls unwatch when done. */
static int watch(struct flex_brlock *b)
{
	if (!b->spin)
		return 0;
	if (atomic_fetch_add(&b->watchers, 1) < b->spin)
		return 1;
	atomic_fetch_sub(&b->watchers, 1);
	return 0;
}

static void unwatch(struct flex_brlock *b)
{
	atomic_fetch_sub(&b->watchers, 1);
}

void flex_brlock_rdlock(struct flex_brlock *b)
{
	pthread_rwlock_t *l = &b->s[flex_thread_slot() % FLEX_BRLOCK_STRIPES].l;
	if (!atomic_load_explicit(&b->want, memory_order_relaxed) && pthread_rwlock_tryrdlock(l) == 0)
		return;
	/* A writer holds it or waits for it.  Its hold is a burst of
	 * microseconds; a reader that slept through it would wait for a CPU
	 * once woken, on a busy machine far longer than the hold.  So it
	 * watches for up to FLEX_BRLOCK_SPIN_NS first, letting a waiting
	 * writer in before it, counted so that a writer passing the lock on
	 * (flex_brlock_wrpass) lets it in; then it sleeps, counted too, and
	 * tells a passing writer when the last sleeper is in. */
	if (watch(b)) {
		atomic_fetch_add(&b->spinning, 1);
		uint64_t until = flex_now_ns() + FLEX_BRLOCK_SPIN_NS;
		int in = 0;
		for (unsigned i = 1; !in; i++) {
			flex_cpu_relax();
			if (i % 8 == 0 && !atomic_load_explicit(&b->want, memory_order_relaxed))
				in = pthread_rwlock_tryrdlock(l) == 0;
			if (i % 64 == 0 && flex_now_ns() >= until)
				break;
		}
		if (!in)
			atomic_fetch_add(&b->waiting, 1); /* counted throughout */
		atomic_fetch_sub(&b->spinning, 1);
		unwatch(b);
		if (in)
			return;
	} else {
		atomic_fetch_add(&b->waiting, 1);
	}
	pthread_rwlock_rdlock(l);
	if (atomic_fetch_sub(&b->waiting, 1) == 1 && atomic_load(&b->passing))
		futex(&b->waiting, FUTEX_WAKE, 1, NULL);
}

void flex_brlock_rdunlock(struct flex_brlock *b)
{
	pthread_rwlock_unlock(&b->s[flex_thread_slot() % FLEX_BRLOCK_STRIPES].l);
}

void flex_brlock_wrlock(struct flex_brlock *b)
{
	/* Readers arriving now watch instead of entering (rdlock), and the
	 * writer watches for those inside to leave, for as long as a reader
	 * would: asleep in pthread_rwlock_wrlock it would hold every reader
	 * up until it is woken and has run. */
	int watching = watch(b);
	if (watching)
		atomic_fetch_add(&b->want, 1);
	uint64_t until = 0;
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++) {
		pthread_rwlock_t *l = &b->s[i].l;
		for (unsigned k = 1; watching && pthread_rwlock_trywrlock(l) != 0; k++) {
			flex_cpu_relax();
			if (k % 64 == 0) {
				uint64_t t = flex_now_ns();
				if (!until) {
					until = t + FLEX_BRLOCK_SPIN_NS;
				} else if (t >= until) {
					/* Asleep from here: readers may
					 * enter the stripes not taken yet. */
					watching = 0;
					atomic_fetch_sub(&b->want, 1);
					unwatch(b);
				}
			}
		}
		if (!watching)
			pthread_rwlock_wrlock(l);
	}
	if (watching) {
		atomic_fetch_sub(&b->want, 1);
		unwatch(b);
	}
}

void flex_brlock_wrpass(struct flex_brlock *b, unsigned max_ns)
{
	flex_brlock_wrunlock(b);
	uint64_t end = 0;
	for (unsigned i = 1;; i++) {
		unsigned sp = atomic_load(&b->spinning), w = atomic_load(&b->waiting);
		if (!sp && !w)
			break;
		uint64_t t = flex_now_ns();
		if (!end)
			end = t + max_ns;
		else if (t >= end)
			break;
		if (sp) {
			/* A reader watching takes it within a microsecond
			 * while it runs; one that does not may be waiting for
			 * this CPU. */
			if (i % 16 == 0)
				sched_yield();
			else
				for (int k = 0; k < 32; k++)
					flex_cpu_relax();
			continue;
		}
		/* Asleep until the sleepers are in, not spinning: a woken
		 * reader may need this CPU. */
		atomic_store(&b->passing, 1);
		struct timespec ts = {(time_t)((end - t) / 1000000000u),
				      (long)((end - t) % 1000000000u)};
		futex(&b->waiting, FUTEX_WAIT, w, &ts);
		atomic_store(&b->passing, 0);
	}
	flex_brlock_wrlock(b);
}

int flex_brlock_trywrlock(struct flex_brlock *b)
{
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++) {
		if (pthread_rwlock_trywrlock(&b->s[i].l) != 0) {
			while (--i >= 0)
				pthread_rwlock_unlock(&b->s[i].l);
			return EBUSY;
		}
	}
	return 0;
}

void flex_brlock_wrunlock(struct flex_brlock *b)
{
	for (int i = FLEX_BRLOCK_STRIPES - 1; i >= 0; i--)
		pthread_rwlock_unlock(&b->s[i].l);
}
