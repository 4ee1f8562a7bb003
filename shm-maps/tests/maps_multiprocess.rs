//! Real multi-process tests of the shared-memory maps.
//!
//! Each test creates a region, then re-executes this test binary (`current_exe()` with
//! `--exact <test> --nocapture`) with `BPFTIME_MAPS_ROLE` set, so that the child runs the
//! same test function in the role named there, on the same region, at the same time as
//! the parent and its siblings.

#![cfg(not(loom))]

use ebpf::maps::{BPF_ANY, BPF_EXIST, BPF_NOEXIST, MapError, MapOps};
use ebpf::program::{MapDef, MapKind, MapOrigin};
use shm_maps::maps::{self, ShmMap};
use shm_maps::{RegionConfig, ShmRegion};
use std::collections::{HashMap, HashSet};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROLE: &str = "BPFTIME_MAPS_ROLE";
const REGION: &str = "BPFTIME_MAPS_REGION";
const ID: &str = "BPFTIME_MAPS_ID";

/// Arena offset of the control words (start flag, per-child results), after the map.
const CTL_OFF: u64 = 1 << 20;

struct Role {
    name: String,
    region: Arc<ShmRegion>,
    id: u64,
}

/// The role this process plays, when it is a child.
fn child_role() -> Option<Role> {
    let name = std::env::var(ROLE).ok()?;
    let region = std::env::var(REGION).expect("child without a region name");
    let id = std::env::var(ID)
        .expect("child without an id")
        .parse()
        .unwrap();
    Some(Role {
        name,
        region: Arc::new(ShmRegion::open(&region).expect("child cannot open the region")),
        id,
    })
}

/// A region that is unlinked when the test ends, however it ends.
struct TestRegion(Arc<ShmRegion>);

impl Drop for TestRegion {
    fn drop(&mut self) {
        let _ = self.0.unlink();
    }
}

fn region(tag: &str) -> TestRegion {
    let name = format!("bpftime-test-{}-{tag}", std::process::id());
    let cfg = RegionConfig {
        arena_size: 2 << 20,
        queue_capacity: 2,
        max_clients: 1,
        completions_per_client: 1,
        message_slots: 1,
        max_maps: 1,
        ..Default::default()
    };
    let r = ShmRegion::create(&name, &cfg, 0o600, shm_maps::region::OnStale::Replace).unwrap();
    r.set_ready();
    TestRegion(Arc::new(r))
}

/// Child processes that are killed and reaped when the test ends, however it ends, so a
/// failing test leaves no process spinning on the region.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Kids {
    /// Waits for every child and asserts that each exited successfully.
    fn wait_ok(&mut self) {
        self.wait_ok_from(0);
    }

    /// As `wait_ok`, for the children from index `i` on.
    fn wait_ok_from(&mut self, i: usize) {
        for c in &mut self.0[i..] {
            let st = c.wait().unwrap();
            assert!(st.success(), "child {} failed: {st}", c.id());
        }
    }
}

fn spawn(test: &str, role: &str, region: &ShmRegion, id: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(REGION, region.name())
        .env(ID, id.to_string())
        .spawn()
        .unwrap()
}

/// The control word `i` (u64) after the map.
fn ctl(region: &ShmRegion, i: u64) -> &AtomicU64 {
    let p = region.arena_ptr(CTL_OFF + 8 * i, 8).unwrap();
    // SAFETY: an 8-aligned word inside the arena, used only atomically by these tests.
    unsafe { AtomicU64::from_ptr(p.as_ptr().cast()) }
}

/// Control word counting the children that are ready to start.
const READY: u64 = 4095;

/// Children report ready and wait for the parent's start signal (control word 0), so
/// that all of them run at once.
fn wait_start(region: &ShmRegion) {
    ctl(region, READY).fetch_add(1, Ordering::Relaxed);
    while ctl(region, 0).load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
}

/// The parent waits for `n` children to be ready, then starts them.
fn start(region: &ShmRegion, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while ctl(region, READY).load(Ordering::Relaxed) < n {
        assert!(Instant::now() < deadline, "children did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    // ORDERING: release publishes the initialized map; pairs with the acquire load in
    // `wait_start`.
    ctl(region, 0).store(1, Ordering::Release);
}

fn def(kind: MapKind, ks: u32, vs: u32, n: u32) -> MapDef {
    MapDef {
        name: "mp".into(),
        kind,
        key_size: ks,
        value_size: vs,
        max_entries: n,
        flags: 0,
        origin: MapOrigin::Manual,
        init: None,
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs `f` on a thread and fails the test if it takes longer than `secs` (a wedged lock).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s"))
}

// ---------------------------------------------------------------------------------------
// Hash: several processes insert, update and delete overlapping keys.

const HASH_KEYS: u64 = 16;
const HASH_CAP: u32 = 12;
const HASH_ITERS: u64 = 50_000;
const HASH_PROCS: u64 = 4; // 3 children + the parent

fn hash_def() -> MapDef {
    def(MapKind::Hash, 8, 32, HASH_CAP)
}

/// A value whose four words are tied together, so a torn or mixed value is detectable.
fn hash_value(k: u64, proc_id: u64, i: u64) -> [u8; 32] {
    let words = [
        k,
        proc_id,
        i,
        k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ proc_id.rotate_left(17) ^ i,
    ];
    let mut v = [0u8; 32];
    for (c, w) in v.chunks_mut(8).zip(words) {
        c.copy_from_slice(&w.to_ne_bytes());
    }
    v
}

fn check_hash_entry(k: &[u8], v: &[u8]) -> u64 {
    let k = u64::from_ne_bytes(k.try_into().unwrap());
    let w: Vec<u64> = v
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(w[0], k, "value of key {k} names key {}", w[0]);
    assert_eq!(
        v,
        hash_value(k, w[1], w[2]),
        "inconsistent value for key {k}"
    );
    k
}

/// Does this process's share of the hammering; returns its net inserts per key.
fn hash_hammer(m: &dyn MapOps, proc_id: u64) -> Vec<i64> {
    let mut net = vec![0i64; HASH_KEYS as usize];
    let mut x = 0x2545_f491_4f6c_dd1d ^ (proc_id + 1).wrapping_mul(0x9e37_79b9);
    for i in 0..HASH_ITERS {
        let r = xorshift(&mut x);
        let k = r % HASH_KEYS;
        let key = k.to_ne_bytes();
        let v = hash_value(k, proc_id, i);
        match (r >> 32) % 4 {
            0 | 1 => match m.update(&key, &v, BPF_NOEXIST, 0) {
                Ok(()) => net[k as usize] += 1,
                Err(MapError::Exists | MapError::TooBig(_)) => {}
                Err(e) => panic!("insert {k}: {e}"),
            },
            2 => match m.delete(&key) {
                Ok(()) => net[k as usize] -= 1,
                Err(MapError::NotFound) => {}
                Err(e) => panic!("delete {k}: {e}"),
            },
            _ => match m.update(&key, &v, BPF_EXIST, 0) {
                Ok(()) | Err(MapError::NotFound) => {}
                Err(e) => panic!("update {k}: {e}"),
            },
        }
    }
    net
}

/// The second map of the hash test: every process inserts the same keys in the same
/// order at the same time, so racing inserts of one key are frequent.
const RACE_OFF: u64 = 256 << 10;
const RACE_KEYS: u64 = 3000;
/// Control words: the phase-2 barrier and each process's count of won inserts.
const BARRIER2: u64 = 4094;
const WON: u64 = 3000;

fn race_def() -> MapDef {
    def(MapKind::Hash, 8, 8, 4096)
}

/// Waits until `n` processes have arrived at the barrier in control word `i`.
fn barrier(region: &ShmRegion, i: u64, n: u64) {
    ctl(region, i).fetch_add(1, Ordering::AcqRel);
    let deadline = Instant::now() + Duration::from_secs(120);
    while ctl(region, i).load(Ordering::Acquire) < n {
        assert!(Instant::now() < deadline, "barrier {i} timed out");
        std::thread::yield_now();
    }
}

/// Inserts every race key with `BPF_NOEXIST`; returns how many this process won.
fn race_inserts(m: &dyn MapOps, proc_id: u64) -> u64 {
    let mut won = 0;
    for k in 0..RACE_KEYS {
        match m.update(&k.to_ne_bytes(), &proc_id.to_ne_bytes(), BPF_NOEXIST, 0) {
            Ok(()) => won += 1,
            Err(MapError::Exists) => {}
            Err(e) => panic!("race insert {k}: {e}"),
        }
    }
    won
}

#[test]
fn hash_processes_keep_keys_unique() {
    const TEST: &str = "hash_processes_keep_keys_unique";
    if let Some(role) = child_role() {
        assert_eq!(role.name, "hash");
        let m = maps::open_in(&role.region, 0, &hash_def(), 1).unwrap();
        wait_start(&role.region);
        let net = hash_hammer(&*m, role.id);
        for (k, n) in net.iter().enumerate() {
            ctl(&role.region, 1 + role.id * HASH_KEYS + k as u64)
                .store(*n as u64, Ordering::Relaxed);
        }
        let race = maps::open_in(&role.region, RACE_OFF, &race_def(), 1).unwrap();
        barrier(&role.region, BARRIER2, HASH_PROCS);
        let won = race_inserts(&*race, role.id);
        ctl(&role.region, WON + role.id).store(won, Ordering::Relaxed);
        return;
    }
    let r = region("hash");
    let m = maps::create_in(&r.0, 0, &hash_def(), 1).unwrap();
    let race = maps::create_in(&r.0, RACE_OFF, &race_def(), 1).unwrap();
    let mut children = Kids(
        (1..HASH_PROCS)
            .map(|id| spawn(TEST, "hash", &r.0, id))
            .collect(),
    );
    // Dumps taken while the children run must hold only consistent (untorn) values. A dump
    // is not a snapshot (slots are read one by one while others change), so it may show a
    // key twice or more than `max_entries` keys; the strict checks come once all stop.
    let dumper = {
        let m = m.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let h = std::thread::spawn(move || {
            let mut dumps = 0u64;
            while !s2.load(Ordering::Relaxed) {
                for (k, v) in m.entries() {
                    check_hash_entry(&k, &v);
                }
                // Leave the cores to the hammering processes most of the time.
                std::thread::sleep(Duration::from_micros(200));
                dumps += 1;
            }
            dumps
        });
        (stop, h)
    };
    start(&r.0, HASH_PROCS - 1);
    let mut net = hash_hammer(&*m, 0);
    barrier(&r.0, BARRIER2, HASH_PROCS);
    let mut won = race_inserts(&*race, 0);
    children.wait_ok();
    for id in 1..HASH_PROCS {
        won += ctl(&r.0, WON + id).load(Ordering::Relaxed);
    }
    // Every key was inserted by exactly one process, and is there once.
    assert_eq!(won, RACE_KEYS, "inserts won across processes");
    let race_keys: HashSet<Vec<u8>> = race.entries().into_iter().map(|(k, _)| k).collect();
    assert_eq!(race_keys.len(), RACE_KEYS as usize);
    assert_eq!(race.entries().len(), RACE_KEYS as usize, "duplicate keys");
    dumper.0.store(true, Ordering::Relaxed);
    assert!(dumper.1.join().unwrap() > 0);
    for id in 1..HASH_PROCS {
        for (k, n) in net.iter_mut().enumerate() {
            *n += ctl(&r.0, 1 + id * HASH_KEYS + k as u64).load(Ordering::Relaxed) as i64;
        }
    }
    let entries = m.entries();
    let present: HashSet<u64> = entries
        .iter()
        .map(|(k, v)| check_hash_entry(k, v))
        .collect();
    assert_eq!(present.len(), entries.len(), "duplicate keys");
    for k in 0..HASH_KEYS {
        assert_eq!(
            net[k as usize],
            present.contains(&k) as i64,
            "key {k}: net inserts {} but present = {}",
            net[k as usize],
            present.contains(&k)
        );
        let found = m.lookup(&k.to_ne_bytes(), 0).is_some();
        assert_eq!(found, present.contains(&k), "lookup of {k}");
    }
    assert!(!present.is_empty(), "the hammering left nothing to check");
    let ShmMap::Hash(h) = maps::attach_in(&r.0, 0, &hash_def(), 1).unwrap() else {
        unreachable!()
    };
    assert_eq!(
        h.len(),
        present.len() as u64,
        "count word disagrees with the slots"
    );
}

// ---------------------------------------------------------------------------------------
// Array: writers in two processes, dumps in a third never see a torn value.

const ARRAY_ITERS: u64 = 200_000;

fn array_def() -> MapDef {
    def(MapKind::Array, 4, 16, 4)
}

#[test]
fn array_dumps_never_see_torn_values() {
    const TEST: &str = "array_dumps_never_see_torn_values";
    if let Some(role) = child_role() {
        assert_eq!(role.name, "array-writer");
        let m = maps::open_in(&role.region, 0, &array_def(), 1).unwrap();
        wait_start(&role.region);
        for i in 1..=ARRAY_ITERS {
            let x = (i << 8) | role.id;
            let mut v = [0u8; 16];
            v[..8].copy_from_slice(&x.to_ne_bytes());
            v[8..].copy_from_slice(&x.to_ne_bytes());
            m.update(&((i % 4) as u32).to_ne_bytes(), &v, BPF_ANY, 0)
                .unwrap();
        }
        return;
    }
    let r = region("array");
    let m = maps::create_in(&r.0, 0, &array_def(), 1).unwrap();
    let mut children = Kids(
        (1..=2)
            .map(|id| spawn(TEST, "array-writer", &r.0, id))
            .collect(),
    );
    start(&r.0, 2);
    let (mut dumps, mut changes, mut last) = (0u64, 0u64, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = children
            .0
            .iter_mut()
            .any(|c| c.try_wait().unwrap().is_none());
        let e = m.entries();
        for (k, v) in &e {
            assert_eq!(v[..8], v[8..], "torn value at index {k:?}: {v:?}");
        }
        if e != last {
            changes += 1;
            last = e;
        }
        dumps += 1;
        if !running {
            break;
        }
        assert!(Instant::now() < deadline, "writers did not finish");
    }
    children.wait_ok();
    assert!(
        dumps > 10 && changes > 2,
        "dumps {dumps}, changes seen {changes}"
    );
    // Both writers' last values landed.
    for (_, v) in m.entries() {
        let x = u64::from_ne_bytes(v[..8].try_into().unwrap());
        assert!(x >> 8 > ARRAY_ITERS - 8, "stale value {x:#x}");
    }
}

// ---------------------------------------------------------------------------------------
// Ring buffer: producers in three processes, the parent consumes.

const RB_PER: u32 = 20_000;
const RB_PRODUCERS: u64 = 3;

fn rb_def() -> MapDef {
    def(MapKind::RingBuf, 0, 0, 4096)
}

fn rb_record(p: u64, i: u32) -> Vec<u8> {
    let len = 12 + (i as usize * 7) % 37;
    let mut rec = vec![0u8; len];
    rec[..4].copy_from_slice(&(p as u32).to_ne_bytes());
    rec[4..8].copy_from_slice(&i.to_ne_bytes());
    for (j, b) in rec[8..].iter_mut().enumerate() {
        *b = (i as usize + j + p as usize) as u8;
    }
    rec
}

/// Records `i % 5 == 4` are reserved and discarded, never delivered.
fn rb_discarded(i: u32) -> bool {
    i % 5 == 4
}

#[test]
fn ringbuf_processes_deliver_exactly_once() {
    const TEST: &str = "ringbuf_processes_deliver_exactly_once";
    if let Some(role) = child_role() {
        assert_eq!(role.name, "rb-producer");
        let m = maps::open_in(&role.region, 0, &rb_def(), 1).unwrap();
        wait_start(&role.region);
        for i in 0..RB_PER {
            let rec = rb_record(role.id, i);
            if rb_discarded(i) || i % 3 == 0 {
                // Through reserve/commit, as a program does.
                let p = loop {
                    if let Some(p) = m.ringbuf_reserve(rec.len() as u64) {
                        break p;
                    }
                    std::thread::yield_now();
                };
                // SAFETY: a live reservation of `rec.len()` bytes.
                unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), p.as_ptr(), rec.len()) };
                m.ringbuf_commit(p, rb_discarded(i));
            } else {
                loop {
                    match m.ringbuf_output(&rec, 0) {
                        Ok(()) => break,
                        Err(MapError::Again) => std::thread::yield_now(),
                        Err(e) => panic!("output: {e}"),
                    }
                }
            }
        }
        return;
    }
    let r = region("rb");
    let m = maps::create_in(&r.0, 0, &rb_def(), 1).unwrap();
    let mut children = Kids(
        (0..RB_PRODUCERS)
            .map(|id| spawn(TEST, "rb-producer", &r.0, id))
            .collect(),
    );
    start(&r.0, RB_PRODUCERS);
    let want_per = (0..RB_PER).filter(|&i| !rb_discarded(i)).count();
    let mut next = vec![0u32; RB_PRODUCERS as usize];
    let mut got = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < want_per * RB_PRODUCERS as usize {
        let recs = m.drain_ringbuf();
        if recs.is_empty() {
            for c in &mut children.0 {
                if let Some(st) = c.try_wait().unwrap() {
                    assert!(st.success(), "producer failed: {st}");
                }
            }
            assert!(Instant::now() < deadline, "only {got} records arrived");
            std::thread::yield_now();
        }
        for rec in recs {
            let p = u32::from_ne_bytes(rec[..4].try_into().unwrap()) as usize;
            let i = u32::from_ne_bytes(rec[4..8].try_into().unwrap());
            assert!(p < RB_PRODUCERS as usize, "bad producer id {p}");
            let mut want = next[p];
            while rb_discarded(want) {
                want += 1;
            }
            // Each producer's records arrive in order, so "exactly once" is "next expected".
            assert_eq!(i, want, "producer {p}: expected record {want}, got {i}");
            assert_eq!(rec, rb_record(p as u64, i), "record {p}/{i} damaged");
            next[p] = i + 1;
            got += 1;
        }
    }
    children.wait_ok();
    assert!(
        m.drain_ringbuf().is_empty(),
        "records beyond the expected ones"
    );
    let ShmMap::RingBuf(rb) = maps::attach_in(&r.0, 0, &rb_def(), 1).unwrap() else {
        unreachable!()
    };
    assert_eq!(rb.used(), 0);
}

// ---------------------------------------------------------------------------------------
// Robustness: a process dies holding a hash bucket lock.

const LOCKED_KEY: u64 = 7;

fn small_hash_def() -> MapDef {
    def(MapKind::Hash, 8, 8, 16)
}

#[test]
fn hash_survives_a_dead_lock_holder() {
    const TEST: &str = "hash_survives_a_dead_lock_holder";
    if let Some(role) = child_role() {
        let ShmMap::Hash(h) = maps::attach_in(&role.region, 0, &small_hash_def(), 1).unwrap()
        else {
            unreachable!()
        };
        match role.name.as_str() {
            "hold-abort" | "hold-sleep" => {
                h.lock_bucket_forever(&LOCKED_KEY.to_ne_bytes());
                // ORDERING: release: the lock word is set before the parent sees the flag.
                ctl(&role.region, 1).store(std::process::id() as u64, Ordering::Release);
                if role.name == "hold-abort" {
                    std::process::abort();
                }
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            "writer" => {
                for i in 0..100u64 {
                    h.update(&LOCKED_KEY.to_ne_bytes(), &i.to_ne_bytes(), BPF_ANY, 0)
                        .unwrap();
                    h.update(&(100 + i % 8).to_ne_bytes(), &i.to_ne_bytes(), BPF_ANY, 0)
                        .unwrap();
                }
                return;
            }
            other => panic!("unknown role {other}"),
        }
    }
    let r = region("dead");
    let m = maps::create_in(&r.0, 0, &small_hash_def(), 1).unwrap();
    let ShmMap::Hash(h) = maps::attach_in(&r.0, 0, &small_hash_def(), 1).unwrap() else {
        unreachable!()
    };
    let key = LOCKED_KEY.to_ne_bytes();
    m.update(&key, &1u64.to_ne_bytes(), BPF_NOEXIST, 0).unwrap();

    // 1. The holder aborts (and is reaped) while holding the lock.
    let mut kids = Kids(vec![spawn(TEST, "hold-abort", &r.0, 1)]);
    let c = &mut kids.0[0];
    let st = c.wait().unwrap();
    assert!(!st.success());
    let holder = ctl(&r.0, 1).load(Ordering::Acquire);
    assert_eq!(holder, c.id() as u64);
    assert_eq!(
        h.bucket_holder(&key),
        c.id(),
        "the child did not hold the lock"
    );
    // A sibling process and this one must both get through.
    kids.0.push(spawn(TEST, "writer", &r.0, 2));
    let m2 = m.clone();
    within(60, "update after the holder aborted", move || {
        m2.update(&key, &2u64.to_ne_bytes(), BPF_EXIST, 0).unwrap()
    });
    kids.wait_ok_from(1);
    assert_eq!(h.bucket_holder(&key), 0);

    // 2. The holder is SIGKILLed and not yet reaped (a zombie) when the others need the lock.
    ctl(&r.0, 1).store(0, Ordering::Relaxed);
    kids.0.push(spawn(TEST, "hold-sleep", &r.0, 3));
    let c = &mut kids.0[2];
    let deadline = Instant::now() + Duration::from_secs(60);
    while ctl(&r.0, 1).load(Ordering::Acquire) != c.id() as u64 {
        assert!(Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(h.bucket_holder(&key), c.id());
    // Still alive: an update must wait, not steal.
    let m2 = m.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        m2.update(&key, &3u64.to_ne_bytes(), BPF_EXIST, 0).unwrap();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "an update went through while the holder was alive"
    );
    c.kill().unwrap(); // SIGKILL, not reaped yet
    rx.recv_timeout(Duration::from_secs(60))
        .expect("update wedged behind a killed holder");
    c.wait().unwrap();
    let v = m.lookup(&key, 0).unwrap();
    // SAFETY: an 8-byte value of the map; nobody writes it now.
    let v = unsafe { std::ptr::read(v.as_ptr().cast::<[u8; 8]>()) };
    assert_eq!(u64::from_ne_bytes(v), 3);
    let e: HashMap<Vec<u8>, Vec<u8>> = m.entries().into_iter().collect();
    assert_eq!(e.len(), 9, "key 7 plus the writer's 8 keys");
}
