//! Facts the verifier reports about an accepted program, for the JIT and the attach side:
//! which maps are only ever added to (counters that may be striped), and which it only
//! reads (contents the host owns).

use ebpf::asm::assemble;
use ebpf::program::{MapDef, MapKind, MapOrigin, Program};
use ebpf::verifier::{VerifyOptions, verify};

fn array(name: &str) -> MapDef {
    MapDef {
        name: name.into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 16,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        init: None,
    }
}

/// Looks up key 0 of map 0 and of map 1, then runs `body0` on map 0's value (r6) and
/// `body1` on map 1's value (r7).
fn prog(body0: &str, body1: &str) -> Program {
    let src = format!(
        "r1 = 0
*(u32 *)(r10 - 4) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto out
r6 = r0
r1 = map_idx[1] ll
r2 = r10
r2 += -4
call map_lookup_elem
if r0 == 0 goto out
r7 = r0
r1 = 1
{body0}
{body1}
out:
r0 = 0
exit"
    );
    let mut p = Program::from_insns("facts", assemble(&src).unwrap());
    p.maps = vec![array("a"), array("b")];
    p
}

fn add_only(p: &Program) -> u64 {
    verify(p, &VerifyOptions::default()).unwrap().maps_add_only
}

#[test]
fn maps_only_added_to_are_reported() {
    let add = |r: u8| format!("lock *(u64 *)(r{r} + 8) += r1");
    assert_eq!(add_only(&prog(&add(6), &add(7))), 0b11);
    // A read, a plain store, a fetching add, a 32-bit add: each makes its map "other".
    for other in [
        "r2 = *(u64 *)(r7 + 0)",
        "*(u64 *)(r7 + 0) = r1",
        "r1 = atomic_fetch_add((u64 *)(r7 + 0), r1)",
        "lock *(u32 *)(r7 + 0) += w1",
        "lock *(u64 *)(r7 + 0) |= r1",
    ] {
        assert_eq!(add_only(&prog(&add(6), other)), 0b01, "{other}");
    }
    // The value pointer given to a helper, or the map to one besides lookup.
    // map_update_elem(map 0, key, map 1's value): map 0 given to a helper, map 1's value
    // read by one.
    let update = "r1 = map_idx[0] ll\nr2 = r10\nr2 += -4\nr3 = r7\nr4 = 0\ncall map_update_elem";
    assert_eq!(add_only(&prog(&add(6), update)), 0b00);
    let delete = "r1 = map_idx[1] ll\nr2 = r10\nr2 += -4\ncall map_delete_elem";
    assert_eq!(add_only(&prog(&add(6), delete)), 0b01);
}

fn written(p: &Program) -> u64 {
    verify(p, &VerifyOptions::default()).unwrap().maps_written
}

#[test]
fn maps_the_program_only_reads_are_reported() {
    let read = |r: u8| format!("r2 = *(u64 *)(r{r} + 8)");
    assert_eq!(written(&prog(&read(6), &read(7))), 0b00);
    // Every kind of write marks its map: a store, any atomic (fetching or not), a helper
    // that changes the map.
    for w in [
        "*(u64 *)(r7 + 0) = r1",
        "lock *(u64 *)(r7 + 8) += r1",
        "r1 = atomic_fetch_add((u64 *)(r7 + 0), r1)",
        "r1 = map_idx[1] ll\nr2 = r10\nr2 += -4\ncall map_delete_elem",
    ] {
        assert_eq!(written(&prog(&read(6), w)), 0b10, "{w}");
    }
    // map_update_elem(map 0, key, map 1's value): map 0 written, map 1 only read.
    let update = "r1 = map_idx[0] ll\nr2 = r10\nr2 += -4\nr3 = r7\nr4 = 0\ncall map_update_elem";
    assert_eq!(written(&prog(&read(7), update)), 0b01);
}

fn atomic(p: &Program) -> u64 {
    verify(p, &VerifyOptions::default()).unwrap().maps_atomic
}

#[test]
fn maps_changed_by_read_modify_writes_are_reported() {
    // What a multi-GPU service without host-native atomics refuses on a shared map.
    let read = |r: u8| format!("r2 = *(u64 *)(r{r} + 8)");
    assert_eq!(atomic(&prog(&read(6), &read(7))), 0b00);
    // A plain store writes the map but is no read-modify-write.
    assert_eq!(atomic(&prog(&read(6), "*(u64 *)(r7 + 0) = r1")), 0b00);
    for w in [
        "lock *(u64 *)(r7 + 8) += r1",
        "r1 = atomic_fetch_add((u64 *)(r7 + 0), r1)",
        "r1 = map_idx[1] ll\nr2 = r10\nr2 += -4\ncall map_delete_elem",
    ] {
        assert_eq!(atomic(&prog(&read(6), w)), 0b10, "{w}");
    }
    // map_update_elem(map 0, key, map 1's value): map 0 changed under its locks, map 1 read.
    let update = "r1 = map_idx[0] ll\nr2 = r10\nr2 += -4\nr3 = r7\nr4 = 0\ncall map_update_elem";
    assert_eq!(atomic(&prog(&read(7), update)), 0b01);
}

/// The frame offsets `stack_registers` gives for `src`, by pc.
fn slots(src: &str) -> Vec<(usize, i64)> {
    let mut p = Program::from_insns("slots", assemble(src).unwrap());
    p.maps = vec![array("a")];
    let v = verify(&p, &VerifyOptions::default()).unwrap();
    v.stack_registers().into_iter().collect()
}

#[test]
fn frame_slots_reached_only_by_plain_constant_accesses_may_live_in_registers() {
    // pc 1/3: a 64-bit spill and its reload at -16; pc 2/4: a 32-bit slot at -24.
    let plain = "r1 = 5
*(u64 *)(r10 - 16) = r1
*(u32 *)(r10 - 24) = 7
r2 = *(u64 *)(r10 - 16)
r3 = *(u32 *)(r10 - 24)
r0 = 0
exit";
    assert_eq!(slots(plain), vec![(1, -16), (2, -24), (3, -16), (4, -24)]);

    // A map key (a helper reads it through a pointer), an atomic, and a slot read at
    // another width than it was written: none of those three slots, but -16 still.
    let shared = "r1 = 0
*(u32 *)(r10 - 4) = r1
*(u64 *)(r10 - 16) = r1
*(u64 *)(r10 - 32) = r1
*(u64 *)(r10 - 40) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
r1 = 1
lock *(u64 *)(r10 - 32) += r1
r4 = *(u32 *)(r10 - 40)
r5 = *(u64 *)(r10 - 16)
r0 = 0
exit";
    assert_eq!(slots(shared), vec![(2, -16), (13, -16)]);

    // A pointer reaching the frame at two offsets (by path) shares both slots.
    // (r5: a random number, unknown to the verifier.)
    let two = "call get_prandom_u32
r5 = r0
r1 = 0
*(u64 *)(r10 - 8) = r1
*(u64 *)(r10 - 16) = r1
*(u64 *)(r10 - 24) = r1
r2 = r10
r2 += -8
if r5 == 0 goto skip
r2 += -8
skip:
r3 = *(u64 *)(r2 + 0)
r4 = *(u64 *)(r10 - 24)
r0 = 0
exit";
    assert_eq!(slots(two), vec![(5, -24), (11, -24)]);

    // One store through a map value on one path and the frame on the other
    // (`v = lookup(); if (!v) v = &local; *v = 42`): -16 stays in memory.
    let mixed = "r1 = 0
*(u32 *)(r10 - 4) = r1
*(u64 *)(r10 - 16) = r1
*(u64 *)(r10 - 24) = r1
r1 = map_idx[0] ll
r2 = r10
r2 += -4
call map_lookup_elem
r2 = r10
r2 += -16
if r0 == 0 goto s
r2 = r0
s:
r1 = 42
*(u64 *)(r2 + 0) = r1
r0 = *(u64 *)(r10 - 16)
r3 = *(u64 *)(r10 - 24)
r0 += r3
exit";
    assert_eq!(slots(mixed), vec![(3, -24), (16, -24)]);

    // A second function: nothing (a callee may reach its caller's frame).
    let call = "r1 = 0
*(u64 *)(r10 - 8) = r1
call f
r0 = *(u64 *)(r10 - 8)
exit
f:
r0 = 0
exit";
    assert_eq!(slots(call), vec![]);
}
