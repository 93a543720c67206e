/*
 * flextree_file.c - the copy-on-write tree file (paper section 4.2).
 *
 * The file is an array of 4 KiB slots.  Slots 0 and 1 hold two copies of
 * the header; every other slot holds one node.  A commit writes each node
 * changed since the previous commit to a slot that the committed version
 * does not use, syncs, and then writes the header copy that does not hold
 * the current version, with version + 1, and syncs again.  Slots released
 * since the previous commit (nodes freed by merges, and the old copies of
 * rewritten nodes) are reused only after that second sync, so a crash at
 * any point leaves the previous version intact and findable.
 *
 * Each child pointer carries the checksum of the child's image and the
 * header carries the root's, so a stale copy of a node (an old version of
 * the same slot) is detected just like a flipped bit.  Open picks the valid
 * header with the highest version and reads the internal nodes it names,
 * verifying each checksum.  Leaves are read by the leaf cache (ft_cache.c)
 * when first needed, from the slot their parent names, and verified the
 * same way plus against the range their parent gives them; by default
 * open reads each once through the cache to check the whole tree.  A clean
 * leaf's slot holds its current image: the slot is released only when the
 * leaf is rewritten or freed, and reused only after the next commit is
 * durable, so evicting and reading back never sees a newer or torn image.
 * The paper maps the file instead; reading slots keeps the nodes in one
 * representation and needs no SIGBUS handling on a full disk.
 * docs/FORMAT.md documents the layout byte by byte.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/flex_codec.h"
#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "flextree_int.h"

#define FT_SLOT 4096u
/* Format 3: packed leaves ("FTL2") of up to 336 entries of 12 bytes, the
 * partial offsets left out but the first (each is the one before plus its
 * length).  Formats 1 and 2 wrote "FTL1" leaves of 20-byte entries (at
 * most 128 and 200).  Every format is read, and a file's leaves may mix
 * both kinds: a commit rewrites only the leaves that changed.  Commits
 * write format 3, so that an older build refuses the file with
 * FLEX_EVERSION instead of calling its packed leaves corrupt. */
#define FT_FORMAT 3u
#define FT_FORMAT_OLDEST 1u
#define FT_MAGIC "FLEXTREE"
#define FT_LEAF_MAGIC 0x314c5446u     /* "FTL1": 20-byte entries */
#define FT_PACKED_MAGIC 0x324c5446u   /* "FTL2": first offset, 12-byte entries */
#define FT_INTERNAL_MAGIC 0x31495446u /* "FTI1" */
#define FT_NODE_HDR 32u
#define FT_LEAF_ENTRY 20u
#define FT_LEAF_MAX 200u /* "FTL1" leaves, format 2 (128 in format 1) */
#define FT_PACKED_ENTRY 12u
#define FT_PACKED_FIRST 8u /* the first partial offset, before the entries */
#define FT_PIVOT 8u
#define FT_CHILD_ENTRY 20u
/* Nodes written per batched write during a commit (1 MiB). */
#define FT_BATCH 256

_Static_assert(FT_NODE_HDR + FT_PACKED_FIRST + FT_LEAF_CAP * FT_PACKED_ENTRY <= FT_SLOT,
	       "leaf fits a slot");
_Static_assert(FT_NODE_HDR + FT_INTERNAL_CAP * FT_PIVOT +
			       (FT_INTERNAL_CAP + 1) * FT_CHILD_ENTRY <= FT_SLOT,
	       "internal node fits a slot");

/* Checksum of a slot image with its checksum field (at csum_at) zeroed. */
static uint64_t ft_slot_csum(uint8_t *buf, unsigned csum_at)
{
	uint8_t saved[8];
	memcpy(saved, buf + csum_at, 8);
	memset(buf + csum_at, 0, 8);
	uint64_t h = XXH3_64bits(buf, FT_SLOT);
	memcpy(buf + csum_at, saved, 8);
	return h;
}

/* ---- header ------------------------------------------------------------- */

struct ft_header {
	uint32_t format; /* decoded only */
	uint64_t version;
	uint32_t root_slot;
	uint32_t height;
	uint64_t root_csum;
	uint64_t size;
	uint64_t extents;
	uint32_t nslots;
	uint64_t leaves;
	uint64_t internals;
};

enum {
	H_MAGIC = 0,
	H_FORMAT = 8,
	H_SLOT = 12,
	H_VERSION = 16,
	H_ROOT = 24,
	H_HEIGHT = 28,
	H_ROOT_CSUM = 32,
	H_SIZE = 40,
	H_EXTENTS = 48,
	H_NSLOTS = 56,
	H_LEAVES = 64,
	H_INTERNALS = 72,
	H_CSUM = FT_SLOT - 8,
};

static void ft_header_encode(const struct ft_header *h, uint8_t *buf)
{
	memset(buf, 0, FT_SLOT);
	memcpy(buf + H_MAGIC, FT_MAGIC, 8);
	flex_put_le32(buf + H_FORMAT, FT_FORMAT);
	flex_put_le32(buf + H_SLOT, FT_SLOT);
	flex_put_le64(buf + H_VERSION, h->version);
	flex_put_le32(buf + H_ROOT, h->root_slot);
	flex_put_le32(buf + H_HEIGHT, h->height);
	flex_put_le64(buf + H_ROOT_CSUM, h->root_csum);
	flex_put_le64(buf + H_SIZE, h->size);
	flex_put_le64(buf + H_EXTENTS, h->extents);
	flex_put_le32(buf + H_NSLOTS, h->nslots);
	flex_put_le64(buf + H_LEAVES, h->leaves);
	flex_put_le64(buf + H_INTERNALS, h->internals);
	flex_put_le64(buf + H_CSUM, ft_slot_csum(buf, H_CSUM));
}

/* Returns 0 for a valid header, FLEX_EVERSION for a sound header of
 * another format version, FLEX_ECORRUPT otherwise. */
static int ft_header_decode(uint8_t *buf, struct ft_header *h)
{
	if (memcmp(buf + H_MAGIC, FT_MAGIC, 8) != 0)
		return FLEX_ECORRUPT;
	if (flex_get_le64(buf + H_CSUM) != ft_slot_csum(buf, H_CSUM))
		return FLEX_ECORRUPT;
	uint32_t format = flex_get_le32(buf + H_FORMAT);
	if (format < FT_FORMAT_OLDEST || format > FT_FORMAT || flex_get_le32(buf + H_SLOT) != FT_SLOT)
		return FLEX_EVERSION;
	h->format = format;
	h->version = flex_get_le64(buf + H_VERSION);
	h->root_slot = flex_get_le32(buf + H_ROOT);
	h->height = flex_get_le32(buf + H_HEIGHT);
	h->root_csum = flex_get_le64(buf + H_ROOT_CSUM);
	h->size = flex_get_le64(buf + H_SIZE);
	h->extents = flex_get_le64(buf + H_EXTENTS);
	h->nslots = flex_get_le32(buf + H_NSLOTS);
	h->leaves = flex_get_le64(buf + H_LEAVES);
	h->internals = flex_get_le64(buf + H_INTERNALS);
	if (h->height == 0 || h->height > FT_MAX_HEIGHT || h->root_slot < 2 ||
	    h->size > FLEXTREE_MAX_SIZE)
		return FLEX_ECORRUPT;
	return 0;
}

/* ---- nodes -------------------------------------------------------------- */

enum {
	N_MAGIC = 0,
	N_COUNT = 4,
	N_LEVEL = 6,
	N_SLOT = 8,
	N_VERSION = 16,
	N_CSUM = 24,
};

/* Encodes node n (whose dirty children already have their new slots) as
 * it will be stored in `slot`, and returns its checksum. */
static uint64_t ft_node_encode(const struct ft_node *n, unsigned level, uint32_t slot,
			       uint64_t version, uint8_t *buf)
{
	memset(buf, 0, FT_SLOT);
	flex_put_le32(buf + N_MAGIC, n->leaf ? FT_PACKED_MAGIC : FT_INTERNAL_MAGIC);
	flex_put_le16(buf + N_COUNT, n->count);
	buf[N_LEVEL] = (uint8_t)level;
	flex_put_le32(buf + N_SLOT, slot);
	flex_put_le64(buf + N_VERSION, version);
	uint8_t *p = buf + FT_NODE_HDR;
	if (n->leaf) {
		const struct ft_leaf *l = (const struct ft_leaf *)n;
		if (l->h.count)
			flex_put_le64(p, l->b->loff[0]);
		p += FT_PACKED_FIRST;
		for (int j = 0; j < l->h.count; j++, p += FT_PACKED_ENTRY) {
			flex_put_le64(p, l->b->pt[j]);
			flex_put_le32(p + 8, l->b->len[j]);
		}
	} else {
		const struct ft_internal *in = (const struct ft_internal *)n;
		for (int j = 0; j < in->h.count; j++, p += FT_PIVOT)
			flex_put_le64(p, (uint64_t)in->pivot[j]);
		for (int j = 0; j <= in->h.count; j++, p += FT_CHILD_ENTRY) {
			flex_put_le64(p, (uint64_t)in->shift[j]);
			flex_put_le32(p + 8, in->child[j]->slot);
			flex_put_le64(p + 12, in->child[j]->csum);
		}
	}
	uint64_t h = ft_slot_csum(buf, N_CSUM);
	flex_put_le64(buf + N_CSUM, h);
	return h;
}

/* ---- slot allocation ---------------------------------------------------- */

static int ft_free_push(struct flextree *t, uint32_t slot)
{
	if (flex_vec_reserve(&t->free_slots, &t->free_cap, (size_t)t->nfree + 1, 64))
		return -ENOMEM;
	t->free_slots[t->nfree++] = slot;
	return 0;
}

static int ft_cmp_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The free list is kept sorted high to low, so popping returns the lowest
 * free slot and the file stays compact. */
static uint32_t ft_alloc_slot(struct flextree *t)
{
	if (t->nfree)
		return t->free_slots[--t->nfree];
	/* Readers loading a leaf check its slot against nslots (cache_lock). */
	if (t->paged)
		pthread_mutex_lock(&t->cache_lock);
	uint32_t slot = t->nslots++;
	if (t->paged)
		pthread_mutex_unlock(&t->cache_lock);
	return slot;
}

/* ---- commit ------------------------------------------------------------- */

struct ft_writer {
	struct flextree *t;
	/* Nodes given their new slots, still marked dirty: a clean leaf may
	 * be evicted and read back from its slot, so none is marked clean
	 * before its image is written (ft_mark_clean). */
	struct ft_node **done;
	uint32_t ndone;
	size_t capdone;
	uint8_t *buf; /* FT_BATCH slots */
	struct flex_iovec iov[FT_BATCH];
	int n;
	uint64_t version;
};

static int ft_writer_flush(struct ft_writer *w)
{
	if (!w->n)
		return 0;
	int rc = w->t->io->write_batch(w->t->io, w->t->fd, w->iov, w->n);
	if (rc)
		return rc;
	w->t->bytes_written += (uint64_t)w->n * FT_SLOT;
	w->n = 0;
	return 0;
}

/* Writes the dirty nodes below and including n, children first, each to a
 * fresh slot; the old slot is released for reuse after this commit. */
static int ft_commit_node(struct ft_writer *w, struct ft_node *n, unsigned level)
{
	struct flextree *t = w->t;
	if (!n->dirty)
		return 0;
	if (!n->leaf) {
		struct ft_internal *in = (struct ft_internal *)n;
		for (int i = 0; i <= in->h.count; i++) {
			int rc = ft_commit_node(w, in->child[i], level - 1);
			if (rc)
				return rc;
		}
	}
	if (w->n == FT_BATCH) {
		int rc = ft_writer_flush(w);
		if (rc)
			return rc;
	}
	uint32_t slot = ft_alloc_slot(t);
	uint8_t *buf = w->buf + (size_t)w->n * FT_SLOT;
	uint64_t csum = ft_node_encode(n, level, slot, w->version, buf);
	w->iov[w->n++] = (struct flex_iovec){.buf = buf, .len = FT_SLOT, .off = (uint64_t)slot * FT_SLOT};
	/* A dirty leaf stays resident, so no reader loads it from its slot:
	 * the slot and checksum may change under readers; `dirty` may not. */
	if (flex_vec_reserve(&w->done, &w->capdone, (size_t)w->ndone + 1, 256))
		return -ENOMEM;
	w->done[w->ndone++] = n;
	ft_release_slot(t, n);
	n->slot = slot;
	n->csum = csum;
	return 0;
}

/* Once the commit is durable: the new version, and the committed nodes
 * become clean, so evictable, under the cache's lock, which eviction and
 * the loading of an evicted leaf (whose image must carry a version no
 * newer than the tree's) hold. */
static void ft_mark_clean(struct flextree *t, struct ft_node **v, uint32_t n)
{
	if (t->paged)
		pthread_mutex_lock(&t->cache_lock);
	t->version++;
	for (uint32_t i = 0; i < n; i++) {
		v[i]->dirty = 0;
		if (t->dirty_nodes)
			t->dirty_nodes--;
		if (t->paged && v[i]->leaf)
			ft_cache_clean_locked(t, (struct ft_leaf *)v[i]);
	}
	if (t->paged)
		pthread_mutex_unlock(&t->cache_lock);
}

/* Writes the header of `version` to its slot (version & 1), or with other
 * to the other one. */
static int ft_write_header(struct flextree *t, uint64_t version, int other)
{
	uint8_t *buf = malloc(FT_SLOT);
	if (!buf)
		return -ENOMEM;
	struct ft_header h = {
		.version = version,
		.root_slot = t->root->slot,
		.height = t->height,
		.root_csum = t->root->csum,
		.size = t->size,
		.extents = t->nextents,
		.nslots = t->nslots,
		.leaves = t->nleaves,
		.internals = t->ninternals,
	};
	ft_header_encode(&h, buf);
	int rc = flex_io_write_full(t->io, t->fd, buf, FT_SLOT, ((version & 1) ^ !!other) * FT_SLOT);
	free(buf);
	if (!rc)
		t->bytes_written += FT_SLOT;
	return rc;
}

/* After a durable commit: slots released since the previous one become
 * free; free slots at the end of the file are cut off. */
static void ft_recycle(struct flextree *t)
{
	for (uint32_t i = 0; i < t->npending; i++)
		if (ft_free_push(t, t->pending[i]))
			break; /* leaked until the next open; harmless */
	t->npending = 0;
	if (t->nfree > 1)
		qsort(t->free_slots, t->nfree, sizeof(uint32_t), ft_cmp_desc);
	uint32_t top = 0;
	while (top < t->nfree && t->free_slots[top] == t->nslots - 1 - top)
		top++;
	if (top && t->io->ftruncate(t->io, t->fd, (uint64_t)(t->nslots - top) * FT_SLOT) == 0) {
		if (t->paged)
			pthread_mutex_lock(&t->cache_lock);
		t->nslots -= top;
		if (t->paged)
			pthread_mutex_unlock(&t->cache_lock);
		memmove(t->free_slots, t->free_slots + top, (t->nfree - top) * sizeof(uint32_t));
		t->nfree -= top;
	}
}

int ft_file_commit(struct flextree *t)
{
	if (!t->root->dirty)
		return 0;
	struct ft_writer w = {.t = t, .version = t->version + 1};
	w.buf = malloc((size_t)FT_BATCH * FT_SLOT);
	if (!w.buf)
		return -ENOMEM;
	int rc = ft_commit_node(&w, t->root, t->height - 1);
	if (!rc)
		rc = ft_writer_flush(&w);
	free(w.buf);
	if (!rc) {
		FLEX_KILLPOINT("ft.nodes.sync.before");
		rc = t->io->fdatasync(t->io, t->fd);
	}
	if (!rc) {
		/* Mid-commit: the new nodes are durable, no header names them. */
		FLEX_KILLPOINT("ft.nodes.sync.after");
		rc = ft_write_header(t, t->version + 1, 0);
	}
	if (!rc) {
		FLEX_KILLPOINT("ft.header.sync.before");
		rc = t->io->fdatasync(t->io, t->fd);
	}
	if (!rc) {
		FLEX_KILLPOINT("ft.header.sync.after");
		/* The other slot still holds the version before, of an older
		 * format, which a build that knows only that format would open:
		 * one commit back, with slots that later commits reuse or cut
		 * off.  It gets a copy of this header too.  The commit is durable
		 * already; a failure here leaves that slot to the next one. */
		if (t->old_header && ft_write_header(t, t->version + 1, 1) == 0 &&
		    t->io->fdatasync(t->io, t->fd) == 0)
			t->old_header = 0;
	}
	if (rc) {
		/* Nodes may now claim slots whose images never reached the
		 * disk: this handle can no longer commit correctly (and
		 * evicts nothing). */
		if (t->paged)
			pthread_mutex_lock(&t->cache_lock);
		t->failed = rc;
		if (t->paged)
			pthread_mutex_unlock(&t->cache_lock);
		free(w.done);
		return rc;
	}
	ft_mark_clean(t, w.done, w.ndone);
	free(w.done);
	t->commits++;
	ft_recycle(t);
	ft_cache_trim(t);
	return 0;
}

/* ---- open --------------------------------------------------------------- */

struct ft_loader {
	struct flextree *t;
	uint8_t *buf;
	uint8_t *used; /* bitmap of referenced slots */
	uint64_t version;
};

/* Decodes and verifies the image in buf of a node read from `slot` whose
 * parent records checksum csum: checksum, magic, level, slot, version and
 * count.  Returns the count or FLEX_ECORRUPT. */
static int ft_node_verify(uint8_t *buf, uint32_t slot, uint64_t csum, unsigned level,
			  uint64_t version)
{
	if (flex_get_le64(buf + N_CSUM) != csum || ft_slot_csum(buf, N_CSUM) != csum)
		return FLEX_ECORRUPT;
	uint32_t magic = flex_get_le32(buf + N_MAGIC);
	unsigned count = flex_get_le16(buf + N_COUNT);
	if (buf[N_LEVEL] != level || flex_get_le32(buf + N_SLOT) != slot ||
	    flex_get_le64(buf + N_VERSION) > version)
		return FLEX_ECORRUPT;
	if (level > 0 ? magic != FT_INTERNAL_MAGIC || count > FT_INTERNAL_CAP
	    : magic == FT_PACKED_MAGIC ? count > FT_LEAF_CAP
	    : magic != FT_LEAF_MAGIC || count > FT_LEAF_CAP || count > FT_LEAF_MAX)
		return FLEX_ECORRUPT;
	return (int)count;
}

/* A hint, for the default table only: another table's descriptors need
 * not be the kernel's.  Slots next to each other go in one request. */
void ft_file_prefetch(const struct flextree *t, const struct ft_internal *in, int from)
{
	if (!t->paged || t->fd < 0 || t->io != flex_io_posix() || !in->child[0]->leaf)
		return;
	uint64_t lo = 0, hi = 0; /* the pending request, in slots */
	for (int i = from; i <= in->h.count + 1; i++) {
		uint32_t slot = FT_NOSLOT;
		if (i <= in->h.count) {
			const struct ft_leaf *l = (const struct ft_leaf *)in->child[i];
			if (!__atomic_load_n(&l->b, __ATOMIC_ACQUIRE))
				slot = l->h.slot;
		}
		if (slot != FT_NOSLOT && hi > lo && slot == hi) {
			hi++;
			continue;
		}
		if (hi > lo)
			posix_fadvise(t->fd, (off_t)(lo * FT_SLOT), (off_t)((hi - lo) * FT_SLOT),
				      POSIX_FADV_WILLNEED);
		lo = hi = 0;
		if (slot != FT_NOSLOT) {
			lo = slot;
			hi = (uint64_t)slot + 1;
		}
	}
}

/* Reads leaf l's committed image into b.  Besides the checksum the leaf
 * must be well formed on its own and cover exactly the span its parent
 * gives it, so that a lookup routed to it always finds its extent: the
 * file is hostile input even when its checksums match. */
int ft_file_read_leaf(const struct flextree *t, const struct ft_leaf_src *src,
		      const struct ft_span *sp, struct ft_leaf_body *b, uint16_t *count)
{
	uint8_t buf[FT_SLOT];
	uint32_t slot = src->slot;
	if (slot < 2 || slot >= src->nslots)
		return FLEX_ECORRUPT;
	int rc = flex_io_read_full(t->io, t->fd, buf, FT_SLOT, (uint64_t)slot * FT_SLOT);
	if (rc)
		return rc == -ENODATA ? FLEX_ECORRUPT : rc;
	int n = ft_node_verify(buf, slot, src->csum, 0, src->version);
	if (n < 0)
		return n;
	/* Only the root may be empty (flextree_int.h). */
	if (n == 0 && (sp->lo != sp->hi || t->height > 1))
		return FLEX_ECORRUPT;
	const uint8_t *p = buf + FT_NODE_HDR;
	int packed = flex_get_le32(buf + N_MAGIC) == FT_PACKED_MAGIC;
	uint64_t loff = 0;
	if (packed) {
		loff = flex_get_le64(p);
		p += FT_PACKED_FIRST;
	}
	uint64_t pos = sp->lo;
	for (int j = 0; j < n; j++) {
		if (packed) {
			b->loff[j] = loff;
			b->pt[j] = flex_get_le64(p);
			b->len[j] = flex_get_le32(p + 8);
			loff += b->len[j];
			p += FT_PACKED_ENTRY;
		} else {
			b->loff[j] = flex_get_le64(p);
			b->pt[j] = flex_get_le64(p + 8);
			b->len[j] = flex_get_le32(p + 16);
			p += FT_LEAF_ENTRY;
		}
		uint64_t poff = ft_pt_poff(b->pt[j]);
		if (b->len[j] == 0 || b->loff[j] > FT_PARTIAL_MAX ||
		    (uint64_t)sp->base + b->loff[j] != pos || pos >= sp->hi ||
		    b->len[j] > sp->hi - pos ||
		    (poff != FLEXTREE_HOLE && poff + b->len[j] > FLEXTREE_HOLE))
			return FLEX_ECORRUPT;
		pos += b->len[j];
	}
	if (pos != sp->hi)
		return FLEX_ECORRUPT;
	*count = (uint16_t)n;
	return 0;
}

/* Loads the internal nodes below and including the node in `slot`; a leaf
 * becomes a stub that the cache reads when it is first needed. */
static int ft_load_node(struct ft_loader *ld, uint32_t slot, uint64_t csum, unsigned level,
			struct ft_node **out)
{
	struct flextree *t = ld->t;
	*out = NULL;
	if (slot < 2 || slot >= t->nslots || (ld->used[slot / 8] & (1u << (slot % 8))))
		return FLEX_ECORRUPT;
	ld->used[slot / 8] |= (uint8_t)(1u << (slot % 8));
	if (level == 0) {
		struct ft_leaf *l = ft_leaf_stub_new();
		if (!l)
			return -ENOMEM;
		t->nleaves++;
		*out = &l->h;
	} else {
		uint8_t *buf = ld->buf + (size_t)level * FT_SLOT;
		int rc = flex_io_read_full(t->io, t->fd, buf, FT_SLOT, (uint64_t)slot * FT_SLOT);
		if (rc)
			return rc == -ENODATA ? FLEX_ECORRUPT : rc;
		int count = ft_node_verify(buf, slot, csum, level, ld->version);
		if (count < 0)
			return count;
		const uint8_t *p = buf + FT_NODE_HDR;
		struct ft_internal *in = (struct ft_internal *)ft_node_new(t, 0);
		if (!in)
			return -ENOMEM;
		t->ninternals++;
		*out = &in->h;
		/* Children are filled in as they load; the NULL ones left by
		 * a failure are skipped when the partial tree is freed. */
		in->h.count = (uint16_t)count;
		for (int j = 0; j < count; j++, p += FT_PIVOT)
			in->pivot[j] = (int64_t)flex_get_le64(p);
		for (int j = 0; j <= count; j++)
			in->child[j] = NULL;
		/* This level's buffer is reused only by deeper levels, so the
		 * child table stays readable while the children load. */
		for (int j = 0; j <= count; j++, p += FT_CHILD_ENTRY) {
			in->shift[j] = (int64_t)flex_get_le64(p);
			rc = ft_load_node(ld, flex_get_le32(p + 8), flex_get_le64(p + 12),
					  level - 1, &in->child[j]);
			if (rc)
				return rc;
		}
	}
	(*out)->dirty = 0;
	(*out)->slot = slot;
	(*out)->csum = csum;
	return 0;
}

/* Creating a file is durable only once its directory entry is. */
static int ft_sync_parent(const struct flex_io *io, const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	if (!dir)
		return -ENOMEM;
	int fd = io->open(io, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	free(dir);
	if (fd < 0)
		return fd;
	FLEX_KILLPOINT("ft.dir.sync.before");
	int rc = io->fsync(io, fd);
	io->close(io, fd);
	if (!rc)
		FLEX_KILLPOINT("ft.dir.sync.after");
	return rc;
}

static int ft_file_create(struct flextree *t, const char *path)
{
	t->root = ft_node_new(t, 1);
	if (!t->root)
		return -ENOMEM;
	ft_cache_add(t, (struct ft_leaf *)t->root);
	t->nleaves = 1;
	t->nslots = 2;
	t->dirty_nodes = 1;
	int rc = ft_file_commit(t);
	if (!rc) {
		FLEX_KILLPOINT("ft.create.sync.before");
		rc = t->io->fsync(t->io, t->fd);
	}
	if (!rc) {
		FLEX_KILLPOINT("ft.create.sync.after");
		rc = ft_sync_parent(t->io, path);
	}
	return rc;
}

int ft_file_open(struct flextree *t, const char *path, const struct flextree_options *opt)
{
	t->read_only = opt && opt->read_only;
	t->volatile_changes = t->read_only && opt->volatile_changes;
	t->lock_fd = -1;
	if (flex_io_check(t->io))
		return FLEX_EOPTION;
	int flags = (t->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC;
	int fd = t->io->open(t->io, path, flags, 0644);
	if (fd < 0)
		return fd;
	t->fd = fd;
	/* The lock lives on its own descriptor: after a SIGKILL the kernel
	 * drops io_uring's references to the I/O descriptor asynchronously,
	 * which would keep a lock on it held for a few milliseconds after
	 * the process is gone. */
	t->lock_fd = t->io->open(t->io, path, O_RDONLY | O_CLOEXEC, 0);
	if (t->lock_fd < 0)
		return t->lock_fd;
	int rc = t->io->lock(t->io, t->lock_fd, !t->read_only);
	if (rc)
		return rc == -EWOULDBLOCK ? FLEX_EBUSY : rc;
	uint64_t fsize;
	rc = t->io->fsize(t->io, fd, &fsize);
	if (rc)
		return rc;
	if (fsize == 0) {
		if (t->read_only)
			return FLEX_ECORRUPT;
		return ft_file_create(t, path);
	}
	if (fsize < 3 * FT_SLOT || fsize / FT_SLOT > UINT32_MAX)
		return FLEX_ECORRUPT;
	t->nslots = (uint32_t)((fsize + FT_SLOT - 1) / FT_SLOT);

	uint8_t *buf = malloc((size_t)(FT_MAX_HEIGHT + 1) * FT_SLOT);
	if (!buf)
		return -ENOMEM;
	struct ft_header h[2];
	int st[2];
	for (int i = 0; i < 2; i++) {
		rc = flex_io_read_full(t->io, fd, buf, FT_SLOT, (uint64_t)i * FT_SLOT);
		if (rc) {
			free(buf);
			return rc == -ENODATA ? FLEX_ECORRUPT : rc;
		}
		st[i] = ft_header_decode(buf, &h[i]);
	}
	int pick = -1;
	for (int i = 0; i < 2; i++)
		if (st[i] == 0 && (pick < 0 || h[i].version > h[pick].version))
			pick = i;
	if (pick < 0) {
		free(buf);
		return st[0] == FLEX_EVERSION || st[1] == FLEX_EVERSION ? FLEX_EVERSION
								       : FLEX_ECORRUPT;
	}
	struct ft_loader ld = {.t = t, .buf = buf, .version = h[pick].version};
	ld.used = calloc((t->nslots + 7) / 8, 1);
	if (!ld.used) {
		free(buf);
		return -ENOMEM;
	}
	t->version = h[pick].version;
	t->height = h[pick].height;
	for (int i = 0; i < 2; i++)
		t->old_header |= st[i] == 0 && h[i].format < FT_FORMAT;
	rc = ft_load_node(&ld, h[pick].root_slot, h[pick].root_csum, h[pick].height - 1, &t->root);
	if (!rc) {
		t->size = h[pick].size;
		t->nextents = h[pick].extents;
		if (t->nleaves != h[pick].leaves || t->ninternals != h[pick].internals)
			rc = FLEX_ECORRUPT;
	}
	/* The full check reads every leaf through the cache, which keeps
	 * within its budget; damage is FLEX_ECORRUPT whatever the check
	 * says about it, an I/O error stays one. */
	if (!rc && !(opt && opt->lazy_open)) {
		rc = flextree_check(t);
		if (rc == -EINVAL)
			rc = FLEX_ECORRUPT;
	}
	for (uint32_t s = t->nslots; rc == 0 && s-- > 2;)
		if (!(ld.used[s / 8] & (1u << (s % 8))))
			rc = ft_free_push(t, s);
	free(ld.used);
	free(buf);
	return rc;
}

void ft_file_close(struct flextree *t)
{
	t->io->close(t->io, t->fd);
	t->fd = -1;
	if (t->lock_fd >= 0)
		t->io->close(t->io, t->lock_fd);
	t->lock_fd = -1;
}

/* ---- check -------------------------------------------------------------- */

static int ft_mark(const struct ft_node *n, uint8_t *used, uint32_t nslots)
{
	if (n->slot != FT_NOSLOT) {
		if (n->slot < 2 || n->slot >= nslots || (used[n->slot / 8] & (1u << (n->slot % 8))))
			return FLEX_ECORRUPT;
		used[n->slot / 8] |= (uint8_t)(1u << (n->slot % 8));
	} else if (!n->dirty) {
		return FLEX_ECORRUPT;
	}
	if (!n->leaf) {
		const struct ft_internal *in = (const struct ft_internal *)n;
		for (int i = 0; i <= in->h.count; i++) {
			int rc = ft_mark(in->child[i], used, nslots);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Slot accounting: every slot of a live node, pending or free slot is
 * distinct and inside the file. */
int ft_file_check(const struct flextree *t)
{
	uint8_t *used = calloc((t->nslots + 7) / 8 + 1, 1);
	if (!used)
		return -ENOMEM;
	int rc = ft_mark(t->root, used, t->nslots);
	const uint32_t *lists[2] = {t->free_slots, t->pending};
	uint32_t counts[2] = {t->nfree, t->npending};
	for (int k = 0; k < 2 && !rc; k++)
		for (uint32_t i = 0; i < counts[k] && !rc; i++) {
			uint32_t s = lists[k][i];
			if (s < 2 || s >= t->nslots || (used[s / 8] & (1u << (s % 8))))
				rc = FLEX_ECORRUPT;
			else
				used[s / 8] |= (uint8_t)(1u << (s % 8));
		}
	free(used);
	return rc;
}

/* Closing without the closing commit: marking the handle read-only is
 * exactly what makes flextree_close skip it. */
void flextree_discard(struct flextree *t)
{
	if (!t)
		return;
	t->read_only = 1;
	flextree_close(t);
}
