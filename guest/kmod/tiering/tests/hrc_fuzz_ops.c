// SPDX-License-Identifier: GPL-2.0
/*
 * Fuzz operations.  Setup bytes pick the granularity (4 KiB .. 1 GiB),
 * storage capacity, tunables and 1-4 initial intervals; the rest is a
 * sequence of ops: sample inside a range, sample anywhere, sample burst,
 * weighted sample, epoch, select, change params.  After every op the
 * structural invariants (hrc_validate) and the conservation of the
 * covered address space are checked; select results are checked too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hrc_fuzz_ops.h"
#include "../hrc_internal.h"

#define FZ_MAX_CAP	64
#define FZ_MAX_OPS	4096

struct fz {
	const uint8_t *d;
	size_t n, pos;
};

static u64 fz_bytes(struct fz *f, unsigned int nbytes)
{
	u64 v = 0;
	unsigned int i;

	for (i = 0; i < nbytes && f->pos < f->n; i++)
		v |= (u64)f->d[f->pos++] << (8 * i);
	return v;
}

static u64 fz_below(struct fz *f, unsigned int nbytes, u64 n)
{
	return n ? fz_bytes(f, nbytes) % n : 0;
}

struct fz_state {
	struct hrc c;
	struct hrc_range ranges[FZ_MAX_CAP];
	u32 order[FZ_MAX_CAP];
	u64 covered, lo, hi;
};

#define FAIL(...)							\
	do {								\
		fprintf(stderr, "hrc fuzz: " __VA_ARGS__);		\
		fprintf(stderr, " (epoch %llu, nr %u)\n",		\
			(unsigned long long)s->c.epoch, s->c.nr);	\
		return -1;						\
	} while (0)

static u64 fz_covered(const struct hrc *c)
{
	u64 sum = 0;
	u32 i;

	for (i = 0; i < c->nr; i++)
		sum += c->ranges[i].end - c->ranges[i].start;
	return sum;
}

static int fz_check(struct fz_state *s)
{
	const struct hrc *c = &s->c;

	if (hrc_validate(c))
		FAIL("hrc_validate failed");
	if (fz_covered(c) != s->covered)
		FAIL("covered bytes changed");
	if (c->ranges[0].start != s->lo || c->ranges[c->nr - 1].end != s->hi)
		FAIL("outer bounds changed");
	return 0;
}

static int fz_in(const struct hrc_interval *v, u32 n, u64 start)
{
	u32 i;

	for (i = 0; i < n; i++)
		if (v[i].start == start)
			return 1;
	return 0;
}

static int fz_select(struct fz_state *s, struct fz *f)
{
	struct hrc_interval pro[FZ_MAX_CAP], dem[FZ_MAX_CAP];
	struct hrc_selection sel = {
		.promo = pro, .demo = dem,
		.promo_max = (u32)fz_below(f, 1, FZ_MAX_CAP + 1),
		.demo_max = (u32)fz_below(f, 1, FZ_MAX_CAP + 1),
	};
	u64 pages = fz_bytes(f, 8) >> fz_below(f, 1, 64);
	u64 cap = pages > (U64_MAX >> 12) ? U64_MAX : pages << 12;
	struct hrc *c = &s->c;
	static bool hot[FZ_MAX_CAP];
	u64 sum = 0, used = 0, acc = 0, fp = 0;
	u32 i, nh = 0, np = 0, nd = 0;

	/* sometimes measure residency (then the footprint is resident pages) */
	if (c->nr && fz_below(f, 1, 2)) {
		for (i = 0; i < c->nr; i++) {
			u64 size = (c->ranges[i].end - c->ranges[i].start) >> 12;
			u64 res = fz_below(f, 1, 3) ? size >> fz_below(f, 1, 12) :
				  fz_bytes(f, 8);

			hrc_set_resident(c, i, res, res >> fz_below(f, 1, 4));
			if (c->ranges[i].nr_resident > size ||
			    c->ranges[i].nr_fast > c->ranges[i].nr_resident)
				FAIL("residency not clamped");
		}
	}
	hrc_select(c, pages, &sel);
	if (sel.nr_promo > sel.promo_max || sel.nr_demo > sel.demo_max)
		FAIL("select overflowed an output array");
	if (sel.nr_hot > c->nr || sel.nr_promo > sel.nr_hot)
		FAIL("select nr_hot inconsistent");
	if (sel.hot_bytes > cap)
		FAIL("hot set exceeds capacity");
	for (i = 0; i < sel.nr_promo; i++) {
		int k = hrc_find(c, pro[i].start);

		if (k < 0 || c->ranges[k].end != pro[i].end)
			FAIL("promo interval is not a range");
		if (!c->ranges[k].nr_access)
			FAIL("promoted a range without accesses");
		if (fz_in(dem, sel.nr_demo, pro[i].start))
			FAIL("range both promoted and demoted");
		sum += hrc_footprint_pages(c, &c->ranges[k]) << 12;
	}
	if (sum > cap || sum > sel.hot_bytes)
		FAIL("promo footprint exceeds capacity");
	if (sel.nr_demo != (sel.demo_max < c->nr - sel.nr_hot ?
			    sel.demo_max : c->nr - sel.nr_hot))
		FAIL("demotion list has the wrong length");
	for (i = 0; i + 1 < c->nr; i++)
		if (hrc_hotter(&c->ranges[c->order[i + 1]],
			       &c->ranges[c->order[i]]))
			FAIL("ranking not sorted at %u", i);
	for (i = 0; i < c->nr; i++)
		if (c->ranges[i].flags)
			FAIL("select left flags set");
	/*
	 * Oracle: in ranking order, every range with accesses that is at
	 * least hot_pct % of the footprint's mean density and whose footprint
	 * still fits is hot (others are passed over, not a stop); the first
	 * range without accesses ends the hot set.  The floor is checked in
	 * 128-bit arithmetic, independently of hrc_cmp_prod().
	 */
	for (i = 0; i < c->nr; i++) {
		acc += c->ranges[i].nr_access;
		fp += hrc_footprint_pages(c, &c->ranges[i]);
	}
	for (i = 0; i < c->nr; i++) {
		const struct hrc_range *r = &c->ranges[c->order[i]];
		u64 need = hrc_footprint_pages(c, r);
		unsigned __int128 lhs = (unsigned __int128)r->nr_access * 100 * fp;
		unsigned __int128 scaled = (unsigned __int128)need * c->p.hot_pct;
		unsigned __int128 rhs;

		if (scaled > U64_MAX)	/* documented saturation */
			scaled = U64_MAX;
		rhs = (unsigned __int128)acc * scaled;

		hot[i] = false;
		if (!r->nr_access) {
			for (; i < c->nr; i++)
				hot[i] = false;
			break;
		}
		if (c->p.hot_pct && lhs < rhs)
			continue;
		if (need <= pages - used) {
			used += need;
			hot[i] = true;
			nh++;
		}
	}
	if (nh != sel.nr_hot)
		FAIL("hot set size %u, expected %u", sel.nr_hot, nh);
	for (i = 0; i < c->nr && np < sel.nr_promo; i++)
		if (hot[i] && pro[np++].start != c->ranges[c->order[i]].start)
			FAIL("promotion list not the hot set hottest first");
	for (i = c->nr; i > 0 && nd < sel.nr_demo; i--)
		if (!hot[i - 1] &&
		    dem[nd++].start != c->ranges[c->order[i - 1]].start)
			FAIL("demotion list not the others coldest first");
	return 0;
}

static int fz_params(struct fz_state *s, struct fz *f)
{
	struct hrc_params old = s->c.p, p = s->c.p;
	int ret;

	switch (fz_below(f, 1, 9)) {
	case 0:
		p.max_ranges = (u32)fz_below(f, 1, FZ_MAX_CAP + 2);
		break;
	case 1:
		p.split_thresh = (u32)fz_below(f, 1, 40);
		break;
	case 2:
		p.nr_cpus = (u32)fz_below(f, 1, 5);
		break;
	case 3:
		p.significance_pct = (u32)fz_below(f, 2, 1200);
		break;
	case 4:
		p.merge_epochs = (u32)fz_below(f, 1, 10);
		break;
	case 5:
		p.decay_shift = (u32)fz_below(f, 1, 18);
		break;
	case 6:
		p.granularity = 1ULL << fz_below(f, 1, 64);
		break;
	case 7:
		p.hot_pct = (u32)fz_bytes(f, 4) % (HRC_MAX_HOT_PCT + 2);
		break;
	default:
		p.split_period_ms = (u32)fz_bytes(f, 4);
		p.half_split = (u32)fz_below(f, 1, 3);	/* 2 is invalid */
		p.edge_split = (u32)fz_below(f, 1, 3);
		break;
	}
	ret = hrc_set_params(&s->c, &p);
	if (ret && ret != -EINVAL && ret != -EBUSY)
		FAIL("set_params returned %d", ret);
	if (ret && memcmp(&old, &s->c.p, sizeof(old)))
		FAIL("failed set_params changed parameters");
	if (!ret && memcmp(&p, &s->c.p, sizeof(p)))
		FAIL("set_params did not apply");
	if (!ret != !hrc_params_validate(&p, s->c.capacity) &&
	    p.granularity == old.granularity && p.max_ranges >= s->c.nr)
		FAIL("set_params disagrees with validation");
	return 0;
}

static int fz_setup(struct fz_state *s, struct fz *f)
{
	struct hrc_interval iv[4];
	struct hrc_params p;
	u32 cap, n, i;
	u64 gran, cur;
	int ret;

	hrc_default_params(&p);
	gran = 1ULL << (12 + fz_below(f, 1, 19));
	cap = 2 + (u32)fz_below(f, 1, FZ_MAX_CAP - 1);
	p.granularity = gran;
	p.max_ranges = 2 + (u32)fz_below(f, 1, cap - 1);
	p.split_thresh = 1 + (u32)fz_below(f, 1, 20);
	p.nr_cpus = 1 + (u32)fz_below(f, 1, 4);
	p.significance_pct = 100 + (u32)fz_below(f, 1, 256) * 4;
	p.hot_pct = fz_below(f, 1, 2) ? 0 : (u32)fz_below(f, 1, 1024);
	p.merge_epochs = (u32)fz_below(f, 1, 6);
	p.decay_shift = 1 + (u32)fz_below(f, 1, 3);

	n = 1 + (u32)fz_below(f, 1, p.max_ranges < 4 ? p.max_ranges : 4);
	/* Base below 2^56, so 4 intervals of <= 2^46 bytes cannot wrap. */
	cur = (fz_bytes(f, 6) * gran) & ((1ULL << 56) - 1);
	for (i = 0; i < n; i++) {
		cur += fz_below(f, 1, 3) * gran;		/* gap or not */
		iv[i].start = cur;
		cur += (1 + fz_below(f, 2, 1ULL << 16)) * gran;
		iv[i].end = cur;
	}
	ret = hrc_init(&s->c, s->ranges, s->order, cap, &p, iv, n);
	if (ret) {
		fprintf(stderr, "hrc fuzz: init failed %d\n", ret);
		return -1;
	}
	s->covered = fz_covered(&s->c);
	s->lo = iv[0].start;
	s->hi = iv[n - 1].end;
	return fz_check(s);
}

static int fz_op(struct fz_state *s, struct fz *f)
{
	struct hrc *c = &s->c;
	const struct hrc_range *r;
	u64 addr, n;
	u32 k;

	switch (fz_below(f, 1, 8)) {
	case 0:
	case 1:		/* sample inside a range */
		r = &c->ranges[fz_below(f, 2, c->nr)];
		addr = r->start + fz_below(f, 8, r->end - r->start);
		if (!hrc_record(c, addr))
			FAIL("sample inside a range counted as outside");
		break;
	case 2:		/* sample anywhere */
		addr = fz_bytes(f, 8);
		if (hrc_record(c, addr) != (hrc_find(c, addr) >= 0))
			FAIL("record and find disagree");
		break;
	case 3:		/* burst into one granule-sized window */
		r = &c->ranges[fz_below(f, 2, c->nr)];
		addr = r->start + (fz_below(f, 8, r->end - r->start) &
				   ~(c->p.granularity - 1));
		n = 1 + fz_below(f, 1, 256) * 4;
		for (k = 0; k < n; k++)
			hrc_record(c, addr + k % c->p.granularity);
		break;
	case 4:		/* weighted sample, possibly huge */
		r = &c->ranges[fz_below(f, 2, c->nr)];
		hrc_record_n(c, r->start, fz_bytes(f, 8));
		break;
	case 5:
		k = c->nr;
		n = hrc_epoch(c);
		if (n > c->p.max_ranges || c->nr > k + n)
			FAIL("epoch split count inconsistent");
		break;
	case 6:
		return fz_select(s, f);
	default:
		return fz_params(s, f);
	}
	return 0;
}

int hrc_fuzz_run(const uint8_t *data, size_t size)
{
	struct fz f = { .d = data, .n = size };
	struct fz_state *s;
	unsigned int ops = 0;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -1;
	ret = fz_setup(s, &f);
	while (!ret && f.pos < f.n && ops++ < FZ_MAX_OPS) {
		ret = fz_op(s, &f);
		if (!ret)
			ret = fz_check(s);
	}
	free(s);
	return ret;
}
