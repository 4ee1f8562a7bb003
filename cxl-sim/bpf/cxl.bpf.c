// cxl-sim's delay probe: runs at every global memory access of every kernel with PTX
// (`memprobe/*`). Accesses to the emulated tier wait out
//     Δt = latency[pattern] + queueing(bandwidth of the last window)
// or until the tier's token bucket lets their bytes through, whichever is later.
// Kernel times come from a second object, cxl_time.bpf.c.
// The integers are those of cxl-sim/src/model.rs (the reference this program is tested
// against in cxl-sim/tests/probe_vs_model.rs). Built by scripts/build-builtin-probes and
// embedded in bpftime-super-cxl, which writes `cxl_config` before the application starts.
//
// One lane per warp (the leader) does the work: it decides for the warp by its own address,
// and the other lanes wait for it where the probe's branch reconverges.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpftime_super.h"
#include "cxl_abi.h"

/* The link's atomics (the bucket, the window's claim) publish nothing: relaxed ones, without
 * a fence at each (runs 39-40 of bench/results/cxl_gpu.md). */
BPFTIME_RELAXED_ATOMICS;

/* A tuning knob: the refresh's fence (bpf_membar to compare). */
#ifndef CXL_REFRESH_FENCE
#define CXL_REFRESH_FENCE bpf_membar_gpu
#endif

/* The parameters and the tier's ranges: a global, so the host sets them in the object's
 * bytes (flags 0 here: the probe does nothing until the host enables it). */
struct cxl_config cxl_config SEC(".data.cxl_config") = {
	.magic = CXL_MAGIC,
	.version = CXL_VERSION,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_STRIPES);
	__type(key, __u32);
	__type(value, struct cxl_state);
} cxl_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_HIST_SLOTS);
	__type(key, __u32);
	__type(value, struct cxl_hist);
} cxl_hist SEC(".maps");

/* The emulated GPU cache in front of the tier: a direct-mapped array of line tags. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} cxl_tags SEC(".maps");

/* Each SM's last configuration refresh (below). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_REFRESH_SLOTS);
	__type(key, __u32);
	__type(value, struct cxl_stamp);
} cxl_refresh SEC(".maps");

/* Counters (only ever added to: the shim stripes them per SM). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CXL_STATS);
	__type(key, __u32);
	__type(value, __u64);
} cxl_stats SEC(".maps");

static __attribute__((always_inline)) inline void stat_add(__u64 flags, __u32 k, __u64 v)
{
	if (!(flags & CXL_FLAG_STATS))
		return;
	__u64 *p = bpf_map_lookup_elem(&cxl_stats, &k);
	if (p)
		__sync_fetch_and_add(p, v);
}

/* FNV-1a over 64-bit words: site, block and thread of the warp's leader. */
static __attribute__((always_inline)) inline __u32 hist_slot(const struct bpftime_mem_ctx *m)
{
	__u64 x = 0xcbf29ce484222325ull;
	x = (x ^ m->site_id) * 0x100000001b3ull;
	x = (x ^ m->block_idx[0]) * 0x100000001b3ull;
	x = (x ^ m->block_idx[1]) * 0x100000001b3ull;
	x = (x ^ m->block_idx[2]) * 0x100000001b3ull;
	x = (x ^ m->thread_idx[0]) * 0x100000001b3ull;
	x = (x ^ m->thread_idx[1]) * 0x100000001b3ull;
	x = (x ^ m->thread_idx[2]) * 0x100000001b3ull;
	x ^= x >> 32;
	return x & (CXL_HIST_SLOTS - 1);
}

SEC("memprobe/*")
int cxl_delay(void *ctx)
{
	const struct bpftime_mem_ctx *m = bpftime_mem_ctx(ctx);
	struct cxl_config *c = &cxl_config;
	/* The first decision reads one word: CXL_FLAG_ACTIVE, which the host derives from the
	 * others (enabled, and a delay, a cap, statistics or the refresh). In the common case
	 * (Δt = 0, no cap, no statistics) every access pays this one load and a branch. */
	__u64 flags = c->flags;
	if (!(flags & CXL_FLAG_ACTIVE))
		return 0;
	__u64 busy = c->latency[0] | c->latency[1] | c->latency[2] | c->byte_cost;

	/* The configuration came through this SM's L1, which the host's uploads do not
	 * invalidate: a kernel whose working set never evicts it would keep its launch's
	 * parameters. With CXL_FLAG_REFRESH (set when parameters change at run time), in the
	 * first 2^CXL_REFRESH_WINDOW_SHIFT ns of every 2^CXL_REFRESH_SHIFT ns, an SM's first
	 * access stamps the SM's slot and fences, which drops the SM's L1: from then on the
	 * SM reads what the host last uploaded. Outside the window this costs a compare;
	 * inside, a lookup. It reads the timer and the SM through helpers, not the ctx, so
	 * that it runs before the ctx point below. */
	if (flags & CXL_FLAG_REFRESH) {
		__u64 tnow = bpf_get_globaltimer();
		if (((tnow >> CXL_REFRESH_WINDOW_SHIFT) &
		     ((1ull << (CXL_REFRESH_SHIFT - CXL_REFRESH_WINDOW_SHIFT)) - 1)) == 0) {
			__u32 sm = bpf_get_sm_id() & (CXL_REFRESH_SLOTS - 1);
			struct cxl_stamp *fresh = bpf_map_lookup_elem(&cxl_refresh, &sm);
			if (fresh && tnow - fresh->t >= (1ull << CXL_REFRESH_WINDOW_SHIFT)) {
				fresh->t = tnow;
				CXL_REFRESH_FENCE();
			}
		}
	}

	/* Nothing to delay (Δt = 0, no cap): the emulated cache and the pattern decide only
	 * delays, so neither is kept, and the data's arrival is not waited for (that wait
	 * alone serialised a warp's loads); with statistics the bytes are counted, else
	 * nothing is left to do. This is decided on the configuration alone, before the
	 * first read of the ctx: the memory pass computes the ctx words (the warp's lanes and
	 * sectors among them, warp collectives) only where the program first reads them.
	 * cxl-sim's model does the same (model.rs). */
	int idle = !busy;
	if (idle && !(flags & CXL_FLAG_STATS))
		return 0;

	if (!m->leader || m->space != BPFTIME_MEM_GLOBAL)
		return 0;
	__u64 addr = m->addr;
	if (!(flags & CXL_FLAG_EVERYTHING)) {
		__u64 n = c->nranges;
		int hit = 0;
#pragma clang loop unroll(disable)
		for (__u32 i = 0; i < CXL_MAX_RANGES; i++) {
			if (i >= n)
				break;
			struct cxl_range *r = &c->ranges[i];
			__u64 off = addr - r->base;
			if (off >= r->len)
				continue;
			__u64 group = (__u64)r->interleave_local + r->interleave_cxl;
			if (group == 0 || ((off >> (r->page_shift & 63)) % group) >= r->interleave_local) {
				hit = 1;
				break;
			}
		}
		if (!hit)
			return 0;
	}

	if (idle) {
		stat_add(flags, CXL_STAT_BYTES, (__u64)m->warp_sectors * 32);
		return 0;
	}

	/* One Δt for every load and nothing else (CXL_FLAG_FIXED: no cache, no cap, no
	 * statistics, the same latency in every class): wait it out from the data's arrival,
	 * with none of the lookups below (on a one-thread chain they are most of the
	 * probe's path, run 32 of bench/results/cxl_gpu.md). Stores pay only a link. The
	 * wait is Δt less the probe's own cost (`compensation`, from `cxl calibrate`),
	 * computed before the data arrives. */
	if (flags & CXL_FLAG_FIXED) {
		if (m->op == BPFTIME_MEM_STORE || (flags & CXL_FLAG_NO_WAIT))
			return 0;
		__u64 lat = c->latency[2], own = c->compensation;
		__u64 wait = lat > own ? lat - own : 0;
		__u64 at;
		if (m->value != 0x5bd1e9955bd1e995ull)
			at = bpf_get_globaltimer();
		else
			at = bpf_ktime_get_ns();
		bpf_wait_until(at + wait, (flags & CXL_FLAG_SPIN) ? 1 : 0);
		return 0;
	}

	/* A load's delay runs from when its data arrived: the timer is read on a branch of
	 * the loaded value, so it waits for the data (the ctx's timer was read when the load
	 * issued). The two arms call different helpers so that they cannot be merged. The
	 * probe's own work below then runs inside the delay: an access costs its load, then
	 * the longer of that work and the delay. */
	__u64 arrived;
	if (m->op == BPFTIME_MEM_STORE || m->value != 0x5bd1e9955bd1e995ull)
		arrived = bpf_get_globaltimer();
	else
		arrived = bpf_ktime_get_ns();
	/* Everything this access needs from memory is looked up first, with no branch on
	 * what comes back in between, so that the loads are in flight together (and with the
	 * application's own load). */
	__u64 active = __builtin_popcount(m->warp_active);
	__u64 bytes = (__u64)m->warp_sectors * 32;
	int coalesced = active > 1 && bytes <= 2 * active * m->size;
	__u64 lines = c->cache_lines, cost_unit = c->byte_cost;
	__u64 line = addr >> CXL_LINE_SHIFT;
	__u32 ts = (line & (lines - 1)) & (CXL_CACHE_SLOTS - 1);
	__u64 *tag = 0;
	if (lines) {
		tag = bpf_map_lookup_elem(&cxl_tags, &ts);
		if (!tag)
			return 0;
	}
	struct cxl_hist *h = 0;
	if (!coalesced) {
		__u32 slot = hist_slot(m);
		h = bpf_map_lookup_elem(&cxl_hist, &slot);
		if (!h)
			return 0;
	}
	struct cxl_state *st = 0;
	if (cost_unit) {
		__u32 stripe = m->sm_id & (CXL_STRIPES - 1);
		st = bpf_map_lookup_elem(&cxl_state, &stripe);
		if (!st)
			return 0;
	}
	__u64 tagv = tag ? *tag : 0;
	__u64 last = h ? h->last : 0, last_stride = h ? h->stride : 0;
	__u64 ep = st ? st->epoch : 0, t0 = st ? st->t0 : 0, qf = st ? st->queue_factor : 0;

	/* The emulated cache: a hit never reaches the tier. */
	if (tag) {
		if (tagv == line + 1) {
			stat_add(flags, CXL_STAT_CACHED, 1);
			return 0;
		}
		*tag = line + 1;
	}

	/* The pattern: a coalesced request is sequential; otherwise the stride since the
	 * warp's last access at this site decides. */
	__u32 pat;
	if (!h) {
		pat = 0;
	} else {
		__u64 stride = addr - last;
		__u64 dist = (__s64)stride < 0 ? -stride : stride;
		if (last != 0 && dist <= c->seq_stride)
			pat = 0;
		else if (last != 0 && stride == last_stride)
			pat = 1;
		else
			pat = 2;
		h->last = addr;
		h->stride = stride;
	}
	__u32 op = m->op;
	__u64 base = op == BPFTIME_MEM_STORE ? 0 :
		     pat == 0		     ? c->latency[0] :
		     pat == 1		     ? c->latency[1] :
					       c->latency[2];

	/* With a cap: the bandwidth of the last window, then this access into the current
	 * one (the queueing term), and the link's token bucket (GCRA) on the transfer's bytes,
	 * in ns since t0 << 16. */
	__u64 now = m->timer;
	__u64 deadline = now + base;
	if (st) {
		if (t0 == 0) {
			__u64 prev = __sync_val_compare_and_swap(&st->t0, 0, now);
			t0 = prev ? prev : now;
		}
		/* The access that starts a window computes the queueing term's factor from the
		 * last one's bytes (three divisions, once a window); every access multiplies. */
		__u64 e = now >> CXL_WINDOW_SHIFT;
		if (e != ep && __sync_val_compare_and_swap(&st->epoch, ep, e) == ep) {
			__u64 lw = e == ep + 1 ? st->window[ep & 1] : 0;
			st->last_window = lw;
			st->window[e & 1] = 0;
			qf = 0;
			if (c->queue_k && c->window_cap_bytes) {
				__u64 rho = lw * CXL_ONE / c->window_cap_bytes;
				if (rho > CXL_RHO_MAX)
					rho = CXL_RHO_MAX;
				qf = c->queue_k * rho / (CXL_ONE - rho);
			}
			st->queue_factor = qf;
		}
		__sync_fetch_and_add(&st->window[e & 1], bytes);
		deadline += base * qf / CXL_ONE;
		__u64 cost = bytes * cost_unit, burst = c->burst;
		__u64 old = __sync_fetch_and_add(&st->tat, cost);
		__u64 now_fp = (now > t0 ? now - t0 : 0) << CXL_TIME_SHIFT;
		if (old < now_fp) {
			/* The link was idle: it starts now; the burst is all the credit there is.
			 * When many accesses meet an idle link at once, one restart swap takes and
			 * the others pass on the old word. On an H200 that stayed within the burst
			 * credit (short launches, `--cache-mib 0`, run 20 of
			 * bench/results/cxl_gpu.md); raising the word to now before adding
			 * (run20_raise.patch) kept every burst queued but ran up to 16% under the
			 * cap, its swaps piling up on one word at a launch's start. */
			if (__sync_val_compare_and_swap(&st->tat, old + cost, now_fp + cost) == old + cost)
				old = now_fp;
		}
		__u64 end = old + cost;
		end = (end > burst ? (end - burst) >> CXL_TIME_SHIFT : 0) + t0;
		if (end > deadline)
			deadline = end;
	}

	/* The wait: the delay less the probe's own cost (`compensation`). */
	__u64 delay = deadline - now, own = c->compensation;
	__u64 wait = delay > own ? delay - own : 0;
	stat_add(flags, CXL_STAT_BYTES, bytes);
	stat_add(flags, CXL_STAT_DELAY_NS, delay);
	stat_add(flags, CXL_STAT_SEQUENTIAL + pat, 1);
	if (wait && !(flags & CXL_FLAG_NO_WAIT)) {
		__u64 t = bpf_wait_until(arrived + wait, (flags & CXL_FLAG_SPIN) ? 1 : 0);
		stat_add(flags, CXL_STAT_WAITED_NS, t - arrived);
	}
	return 0;
}

/* Placement, on the host: probes on the driver's allocator (in the application's thread)
 * put each new allocation in the tier or not, as `place_kind` says, and append it to
 * `cxl_config.ranges`. The memory probe above only reads the configuration, so the shim
 * uploads it to the GPU whenever it changes, before cuMemAlloc returns. */
struct cxl_pending {
	__u64 dptr;
	__u64 size;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cxl_pending);
} cxl_pending SEC(".maps");

/* Live local allocations (PLACE_LOCAL), by address: their size, returned at cuMemFree. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} cxl_local SEC(".maps");

/* Live `site=FUNC` placement: how deep each thread is in the site function (its entries
 * less its returns), by pid_tgid. The two programs' section names are placeholders of a
 * kind the attach side skips; `cxl run --placement site=FUNC` rewrites them in the
 * object's bytes to `uprobe/APP:FUNC` and `uretprobe/APP:FUNC` (cxl_sim::probe::with_site),
 * so they attach only then. */
#define CXL_SITE_PAD \
	"________________________________________________________________________________" \
	"________________________________________________________________________________" \
	"________________________________________________________________________________"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} cxl_site_depth SEC(".maps");

SEC("cxl.site.enter/" CXL_SITE_PAD)
int BPF_KPROBE(cxl_site_enter)
{
	__u64 tid = bpf_get_current_pid_tgid();
	__u64 *d = bpf_map_lookup_elem(&cxl_site_depth, &tid);
	if (d) {
		*d += 1;
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&cxl_site_depth, &tid, &one, BPF_ANY);
	}
	return 0;
}

SEC("cxl.site.exit/" CXL_SITE_PAD)
int BPF_KRETPROBE(cxl_site_exit)
{
	__u64 tid = bpf_get_current_pid_tgid();
	__u64 *d = bpf_map_lookup_elem(&cxl_site_depth, &tid);
	if (d && *d > 1)
		*d -= 1;
	else if (d)
		bpf_map_delete_elem(&cxl_site_depth, &tid);
	return 0;
}

SEC("uprobe/libcuda.so:cuMemAlloc_v2")
int BPF_KPROBE(cxl_alloc, __u64 *dptr, __u64 size)
{
	__u32 zero = 0;
	struct cxl_pending *p = bpf_map_lookup_elem(&cxl_pending, &zero);
	if (p) {
		p->dptr = (__u64)dptr;
		p->size = size;
	}
	return 0;
}

SEC("uretprobe/libcuda.so:cuMemAlloc_v2")
int BPF_KRETPROBE(cxl_alloc_done, int rc)
{
	struct cxl_config *c = &cxl_config;
	__u64 kind = c->place_kind;
	__u32 zero = 0;
	struct cxl_pending *p = bpf_map_lookup_elem(&cxl_pending, &zero);
	if (rc != 0 || kind == CXL_PLACE_NONE || !p)
		return 0;
	__u64 addr = 0, size = p->size;
	if (bpf_probe_read_user(&addr, sizeof(addr), (void *)p->dptr) || !addr)
		return 0;
	__u64 il = 0;
	if (kind == CXL_PLACE_SIZE) {
		if (size < c->place_arg)
			return 0;
	} else if (kind == CXL_PLACE_LOCAL) {
		if (c->place_used + size <= c->place_arg) {
			c->place_used += size;
			bpf_map_update_elem(&cxl_local, &addr, &size, BPF_ANY);
			return 0;
		}
	} else if (kind == CXL_PLACE_INTERLEAVE) {
		il = c->place_interleave;
	} else if (kind == CXL_PLACE_SITE) {
		__u64 tid = bpf_get_current_pid_tgid();
		__u64 *d = bpf_map_lookup_elem(&cxl_site_depth, &tid);
		if (!d || !*d)
			return 0;
	} else {
		return 0;
	}
	__u64 i = __sync_fetch_and_add(&c->nranges, 1);
	if (i >= CXL_MAX_RANGES) {
		__sync_fetch_and_add(&c->nranges, -1);
		c->place_dropped += 1;
		return 0;
	}
	struct cxl_range *r = &c->ranges[i & (CXL_MAX_RANGES - 1)];
	r->interleave_local = il & 0xffff;
	r->interleave_cxl = (il >> 16) & 0xffff;
	r->page_shift = (il >> 32) & 0xffff;
	r->base = addr;
	r->len = size;
	return 0;
}

SEC("uprobe/libcuda.so:cuMemFree_v2")
int BPF_KPROBE(cxl_free, __u64 addr)
{
	struct cxl_config *c = &cxl_config;
	__u64 *local = bpf_map_lookup_elem(&cxl_local, &addr);
	if (local) {
		c->place_used -= *local;
		bpf_map_delete_elem(&cxl_local, &addr);
		return 0;
	}
	/* A freed tier range stops matching (its slot is not reused: ranges are few). */
	__u64 n = c->nranges;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < CXL_MAX_RANGES; i++) {
		if (i >= n)
			break;
		if (c->ranges[i].base == addr && c->ranges[i].len) {
			c->ranges[i].len = 0;
			break;
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
