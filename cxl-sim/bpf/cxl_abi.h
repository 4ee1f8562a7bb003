/* Generated from cxl-sim/src/abi.rs by c_header(); do not edit.
 * BPFTIME_BLESS=1 cargo test -p cxl-sim abi rewrites it. */
#pragma once

#define CXL_MAGIC 0x01004d49534c5843ULL
#define CXL_VERSION 2
#define CXL_MAX_RANGES 64
#define CXL_HIST_SLOTS 65536
#define CXL_KERNEL_SLOTS 256
#define CXL_END_STRIPES 32
#define CXL_STRIPES 16
#define CXL_CACHE_SLOTS 524288
#define CXL_LINE_SHIFT 7
#define CXL_REFRESH_SHIFT 17
#define CXL_REFRESH_WINDOW_SHIFT 11
#define CXL_REFRESH_SLOTS 256
#define CXL_FLAG_ENABLED 1
#define CXL_FLAG_EVERYTHING 2
#define CXL_FLAG_SPIN 4
#define CXL_FLAG_NO_WAIT 8
#define CXL_FLAG_STATS 16
#define CXL_FLAG_REFRESH 32
#define CXL_FLAG_ACTIVE 64
#define CXL_FLAG_FIXED 128
#define CXL_PLACE_NONE 0
#define CXL_PLACE_SIZE 1
#define CXL_PLACE_LOCAL 2
#define CXL_PLACE_INTERLEAVE 3
#define CXL_PLACE_SITE 4
#define CXL_TIME_SHIFT 16
#define CXL_ONE 1024
#define CXL_RHO_MAX 972
#define CXL_WINDOW_SHIFT 16

struct cxl_range {
	__u64 base;
	__u64 len;
	__u32 interleave_local;
	__u32 interleave_cxl;
	__u32 page_shift;
	__u32 pad;
};

struct cxl_config {
	__u64 magic;
	__u64 version;
	__u64 flags;
	__u64 latency[3];
	__u64 byte_cost;
	__u64 burst;
	__u64 window_cap_bytes;
	__u64 queue_k;
	__u64 seq_stride;
	__u64 cache_lines;
	__u64 compensation;
	__u64 place_kind;
	__u64 place_arg;
	__u64 place_used;
	__u64 place_interleave;
	__u64 place_dropped;
	__u64 nranges;
	struct cxl_range ranges[CXL_MAX_RANGES];
};

struct cxl_state {
	__u64 tat;
	__u64 epoch;
	__u64 window[2];
	__u64 last_window;
	__u64 t0;
	__u64 queue_factor;
	__u64 pad;
};

struct cxl_hist {
	__u64 last;
	__u64 stride;
};

struct cxl_kernel {
	__u64 kernel_id;
	__u64 launches;
	__u64 total_ns;
	__u64 start;
};

struct cxl_stamp {
	__u64 t;
	__u64 corr;
	__u64 pad[14];
};

enum cxl_stat {
	CXL_STAT_BYTES = 0,
	CXL_STAT_DELAY_NS = 1,
	CXL_STAT_WAITED_NS = 2,
	CXL_STAT_SEQUENTIAL = 3,
	CXL_STAT_STRIDED = 4,
	CXL_STAT_RANDOM = 5,
	CXL_STAT_CACHED = 6,
	CXL_STATS = 7,
};
