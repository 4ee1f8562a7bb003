//! `bpf_get_stack` (user stacks) and `bpf_probe_read_user`: the host-only helpers, against
//! hand results. With an `Env::host` they reach the (here: fake) process; without one they
//! fail as a kernel without the feature would, zeroing their output.

use ebpf::interp::{Env, HostAccess, Vm};
use ebpf::program::Program;
use ebpf::verifier::{CtxKind, VerifyOptions, verify};

/// mem[0] = get_stack(ctx, stack-32, 32, mem[48]); mem[8..24] = the first two words;
/// mem[32] = probe_read_user(stack-40, 8, mem[24]); mem[40] = what it read.
const PROG: &str = "
r6 = r1
r2 = r10
r2 += -32
r3 = 32
r4 = *(u64 *)(r6 + 48)
call 67
*(u64 *)(r6 + 0) = r0
r1 = *(u64 *)(r10 - 32)
*(u64 *)(r6 + 8) = r1
r1 = *(u64 *)(r10 - 24)
*(u64 *)(r6 + 16) = r1
r1 = r10
r1 += -40
r2 = 8
r3 = *(u64 *)(r6 + 24)
call 112
*(u64 *)(r6 + 32) = r0
r1 = *(u64 *)(r10 - 40)
*(u64 *)(r6 + 40) = r1
r0 = 0
exit
";

fn fake_stack(out: &mut [u64]) -> usize {
    let s = [0x1111, 0x2222, 0x3333];
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s[..n]);
    n
}

fn fake_read(addr: u64, out: &mut [u8]) -> bool {
    if addr == 0 {
        return false;
    }
    // SAFETY: the test passes the address of a live u64.
    out.copy_from_slice(&unsafe { *(addr as *const u64) }.to_le_bytes());
    true
}

fn run(host: Option<HostAccess>, flags: u64, addr: u64) -> [u64; 7] {
    let insns = ebpf::asm::assemble(PROG).expect("asm");
    let prog = Program::from_insns("host", insns);
    verify(
        &prog,
        &VerifyOptions {
            ctx: CtxKind::Mem { len: 56 },
            ..VerifyOptions::default()
        },
    )
    .expect("verified");
    let vm = Vm::new(&prog, vec![]).expect("vm");
    let mut mem = [0u8; 56];
    mem[24..32].copy_from_slice(&addr.to_le_bytes());
    mem[48..56].copy_from_slice(&flags.to_le_bytes());
    let mut env = Env::new(0);
    env.host = host;
    vm.run_mem(&mut mem, &mut env).expect("runs");
    let mut w = [0u64; 7];
    for (i, c) in mem.chunks(8).enumerate() {
        w[i] = u64::from_le_bytes(c.try_into().unwrap());
    }
    w
}

#[test]
fn get_stack_and_probe_read_user_with_and_without_the_process() {
    let host = HostAccess {
        user_stack: fake_stack,
        read_user: fake_read,
    };
    let secret = 0xfeed_beef_u64;
    let addr = &secret as *const u64 as u64;
    const USER: u64 = 1 << 8;
    // Three frames into a 32-byte buffer: 24 bytes, the rest zeroed.
    let w = run(Some(host), USER, addr);
    assert_eq!(
        [w[0], w[1], w[2], w[4], w[5]],
        [24, 0x1111, 0x2222, 0, 0xfeed_beef]
    );
    // Skip one frame.
    assert_eq!(run(Some(host), USER | 1, addr)[..3], [16, 0x2222, 0x3333]);
    // Kernel stacks are not available; unknown flags are refused.
    assert_eq!(run(Some(host), 0, addr)[0], -22i64 as u64);
    assert_eq!(run(Some(host), USER | 1 << 12, addr)[0], -22i64 as u64);
    // An unreadable address: -EFAULT and a zeroed destination.
    assert_eq!(run(Some(host), USER, 0)[4..6], [-14i64 as u64, 0]);
    // No process (a GPU or offload context): -EOPNOTSUPP, -EFAULT.
    let w = run(None, USER, addr);
    assert_eq!(
        (w[0], w[1], w[4], w[5]),
        (-95i64 as u64, 0, -14i64 as u64, 0)
    );
}
