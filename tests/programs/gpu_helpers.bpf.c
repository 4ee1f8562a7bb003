// gpu_helpers.bpf.c: the GPU helpers 501..511. Out-parameters are stack slots; puts takes
// a string literal (in .rodata.str1.1).
// Expected r0 on the CPU reference interpreter (block/thread/grid indices all 0, dims 1,
// sm/warp/lane 0): bx + by + bz + tx + ty + tz + gx*gy*gz + dx*dy*dz + sm + warp + lane
// = 0 + 1 + 1 = 2.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpftime_super.h"

SEC("kprobe/vecadd")
int gpu_probe(struct bpftime_job_ctx *ctx)
{
	__u64 bx, by, bz, tx, ty, tz, gx, gy, gz, dx, dy, dz;
	__u64 t0 = bpf_get_globaltimer();
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_block_dim(&dx, &dy, &dz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_grid_dim(&gx, &gy, &gz);
	bpf_membar();
	bpf_puts("hello from the gpu");
	__u64 r = bx + by + bz + tx + ty + tz + gx * gy * gz + dx * dy * dz;
	r += bpf_get_sm_id() + bpf_get_warp_id() + bpf_get_lane_id();
	if (bpf_get_globaltimer() < t0)
		bpf_exit();
	return (int)r;
}

char LICENSE[] SEC("license") = "GPL";
