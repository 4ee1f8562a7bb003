//! Running one job: validate the descriptor, run the program for each record, publish the
//! completion. Every backend's host side goes through here, so bad descriptors get the
//! same error completions everywhere.
//!
//! | step | what                                                                  | failure status      |
//! |------|-----------------------------------------------------------------------|---------------------|
//! | 1    | `client`/`completion` name a completion slot of that client            | (dropped, logged)   |
//! | 2    | mark the completion RUNNING, stamp `started_ns`                        |                     |
//! | 3    | `stop --now` in progress?                                              | `CANCELLED`         |
//! | 4    | program exists; `n <= max_records`; record sizes; buffers in the arena | see [`status`]      |
//! | 5    | run every record on one program version                               | `RUNTIME_ERROR`     |
//! | 6    | write results, then publish DONE with release ordering                 |                     |

use crate::programs::ProgramTable;
use crate::stats::WorkerStats;
use ebpf::interp::Env;
use shm_maps::layout::{client_state, completion_state, job_flags, status};
use shm_maps::region::monotonic_ns;
use shm_maps::{CompletionData, JobDesc, ShmRegion};
use std::sync::atomic::{AtomicBool, Ordering};

/// Ends every job that a worker took and will never finish, because the worker (a GPU
/// worker process, or the whole service) died, with status `code` and the error `text`;
/// repairs the queue so that it does not wedge one lap later. Returns the jobs ended.
///
/// Taken jobs are found in the queue and the completion table as the dead consumer left
/// them:
/// 1. slots it took and never handed back (a CPU worker between its head CAS and the
///    release, the GPU dispatcher until a one-record job completes): their jobs end here
///    unless DONE (or their completion already holds a newer job of the client: its tag
///    differs), and the slots are released;
/// 2. full slots past the head whose completions are already RUNNING or DONE, or hold a
///    newer job (the GPU marks a job RUNNING before its head store lands, publishes a
///    one-record job's DONE before it frees the slot, and with several dispatchers the head
///    is only the least of their positions): taken here, never run twice; then the head
///    moves past every position already taken;
/// 3. every completion still RUNNING, every SUBMITTED one of case 1, and every
///    DONE_CHECKED one whose check word does not match its fields (an early DONE whose
///    fields never arrived).
///
/// Jobs still in the queue are not touched: the next consumer runs them. When the whole
/// service restarted, [`requeue_unstarted`] first puts back the jobs a CPU worker held
/// and never started, and [`fail_orphaned`] afterwards ends any SUBMITTED job found
/// nowhere.
pub fn fail_taken(region: &ShmRegion, queue: Option<u32>, code: i32, text: &str) -> u64 {
    let mut taken: Vec<u32> = Vec::new();
    for q in queues(region, queue) {
        let q = region.queue_at(q).expect("listed by queues()");
        for (pos, d) in q.unreleased() {
            if job_state(region, &d) == Some(completion_state::SUBMITTED) {
                taken.push(d.completion);
            }
            q.release(pos);
        }
        // Past the head: jobs marked RUNNING were taken (the GPU's dispatchers mark a job
        // before they move the head past it, and with several dispatchers the head is only
        // the least of their positions), and so were jobs already DONE (the GPU publishes a
        // one-record job's DONE before it frees the job's slot) or whose completion a newer
        // job of the client holds; the rest still wait.
        for (pos, d) in q.full_past_head() {
            if matches!(
                job_state(region, &d),
                Some(
                    completion_state::RUNNING
                        | completion_state::DONE
                        | completion_state::DONE_CHECKED
                ) | None
            ) {
                q.release(pos);
            }
        }
        q.skip_taken();
    }
    end_where(region, code, text, |i, st| {
        queue.is_none_or(|q| region.completion_queue(i) == q)
            && (st == completion_state::RUNNING
                || (st == completion_state::SUBMITTED && taken.contains(&i))
                // An early DONE whose fields never arrived (the context died first).
                || (st == completion_state::DONE_CHECKED && region.read_completion(i).is_none()))
    })
}

/// The state of the completion of job `d`, from a queue slot, or `None` when that
/// completion no longer belongs to it: the client saw the job DONE and reused the slot for
/// a newer job (its tag differs).
fn job_state(region: &ShmRegion, d: &JobDesc) -> Option<u32> {
    let c = region.completion(d.completion)?;
    let state = c.state.load(Ordering::Acquire);
    (region.completion_tag(d.completion) == Some(d.tag)).then_some(state)
}

/// Queue `only`, or every queue of the region.
fn queues(region: &ShmRegion, only: Option<u32>) -> std::ops::Range<u32> {
    match only {
        Some(q) => q..q + 1,
        None => 0..region.queue_count(),
    }
}

/// After the whole service restarted: queues again every job a dead CPU worker had taken
/// with [`shm_maps::JobQueue::pop_batch_held`] and not started (its slot still held, its
/// completion still SUBMITTED), at the tail of its queue. Call it before [`fail_taken`],
/// which would end them. Returns how many went back.
pub fn requeue_unstarted(region: &ShmRegion) -> u64 {
    let mut total = 0;
    for qi in queues(region, None) {
        let q = region.queue_at(qi).expect("listed by queues()");
        let mut again = Vec::new();
        for (pos, d) in q.unreleased() {
            let unstarted = region
                .completion(d.completion)
                .is_some_and(|c| c.state.load(Ordering::Acquire) == completion_state::SUBMITTED);
            if unstarted {
                again.push(d);
                q.release(pos);
            }
        }
        // Releasing made room for each of them; what still does not fit (a producer took
        // the room meanwhile) stays SUBMITTED outside the queue and `fail_orphaned` ends it.
        let mut done = 0;
        for _ in 0..1000 {
            done += q.push_batch(&again[done..]);
            if done == again.len() {
                break;
            }
            std::thread::yield_now();
        }
        // Each went in twice; its first entry counts as finished, so the load stays right.
        q.count_done(done as u64);
        total += done as u64;
    }
    total
}

/// After the whole service restarted: ends every SUBMITTED job that is no longer in any
/// queue (a dead worker had popped it and never started it), with `code` and `text`.
/// Call it after [`fail_taken`], before any worker runs.
pub fn fail_orphaned(region: &ShmRegion, code: i32, text: &str) -> u64 {
    let mut queued = std::collections::HashSet::new();
    for qi in queues(region, None) {
        let q = region.queue_at(qi).expect("listed by queues()");
        queued.extend(
            (q.head()..q.tail())
                .filter_map(|pos| q.peek(pos))
                .map(|d| d.completion),
        );
    }
    end_where(region, code, text, |i, st| {
        st == completion_state::SUBMITTED && !queued.contains(&i)
    })
}

/// Publishes an error completion for every slot `pick(index, state)` selects.
fn end_where(region: &ShmRegion, code: i32, text: &str, pick: impl Fn(u32, u32) -> bool) -> u64 {
    let h = region.header();
    let total = h.max_clients * h.completions_per_client;
    let mut msg = None;
    let mut n = 0;
    for i in 0..total {
        let Some(comp) = region.completion(i) else {
            continue;
        };
        if !pick(i, comp.state.load(Ordering::Acquire)) {
            continue;
        }
        let message = *msg.get_or_insert_with(|| region.post_message(text));
        let now = monotonic_ns();
        // SAFETY: no live worker owns the slot (its worker is dead, or it was never
        // started); the client stamped tag and submit time before queueing and reads the
        // slot only after DONE.
        let (tag, prog_id) = unsafe {
            let p = comp as *const shm_maps::layout::Completion;
            (
                std::ptr::addr_of!((*p).tag).read(),
                std::ptr::addr_of!((*p).prog_id).read(),
            )
        };
        let queue = region.completion_queue(i);
        region.finish_completion(
            i,
            &CompletionData {
                status: code,
                message,
                tag,
                prog_id,
                started_ns: now,
                finished_ns: now,
                ..Default::default()
            },
        );
        if let Some(cl) = region.client(i / h.completions_per_client) {
            cl.add_completed(1);
        }
        region.count_done(queue, 1);
        h.jobs_done.fetch_add(1, Ordering::Relaxed);
        h.jobs_failed.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
    n
}

/// Calls its function once: on [`Once::fire`], or when dropped.
struct Once<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Once<F> {
    fn fire(&mut self) {
        if let Some(f) = self.0.take() {
            f()
        }
    }
}

impl<F: FnOnce()> Drop for Once<F> {
    fn drop(&mut self) {
        self.fire();
    }
}

/// Executes jobs for one worker.
pub struct JobRunner<'a> {
    /// The region the jobs come from.
    pub region: &'a ShmRegion,
    /// Installed programs.
    pub table: &'a ProgramTable,
    /// This worker's counters.
    pub stats: &'a WorkerStats,
    /// Set by `stop --now`: jobs not yet started complete as `CANCELLED`.
    pub cancel: &'a AtomicBool,
    /// Interpreter environment (worker id, trace output, instruction limit).
    pub env: Env,
    /// The queue the jobs come from (its finished count is bumped for each, dropped ones
    /// included); the caller sets it before running a queue's jobs.
    pub queue: u32,
    /// Job buffers placed in an emulated tier (CPU backend): a job whose input lies in one
    /// fetches each record through the tier before running it.
    pub tiers: Option<&'a crate::tier::TierBuffers>,
}

/// Why a descriptor was refused before any record ran.
struct Refusal {
    status: i32,
    msg: String,
}

fn refuse(status: i32, msg: impl Into<String>) -> Refusal {
    Refusal {
        status,
        msg: msg.into(),
    }
}

/// Checked byte range `[off, off + count * size)` of the arena.
fn span(
    region: &ShmRegion,
    what: &str,
    off: u64,
    len: u64,
    count: u64,
    size: u64,
) -> Result<*mut u8, Refusal> {
    let need = count.checked_mul(size).ok_or_else(|| {
        refuse(
            status::BAD_DESCRIPTOR,
            format!("{what}: {count} records of {size} bytes overflow"),
        )
    })?;
    if need > len {
        return Err(refuse(
            status::BAD_DESCRIPTOR,
            format!("{what}: {count} records of {size} bytes need {need} bytes, buffer has {len}"),
        ));
    }
    region
        .arena_ptr(off, len)
        .map(|p| p.as_ptr())
        .ok_or_else(|| {
            refuse(
                status::BAD_DESCRIPTOR,
                format!(
                    "{what}: [{off}, {off}+{len}) lies outside the {}-byte arena",
                    region.header().arena_size
                ),
            )
        })
}

impl JobRunner<'_> {
    /// Runs one job to completion (or to an error completion).
    pub fn run(&mut self, d: &JobDesc) {
        self.run_then(d, || {});
    }

    /// [`JobRunner::run`], calling `started` once the job is marked RUNNING (or dropped
    /// before that): the CPU worker hands the job's queue slot back there.
    pub fn run_then(&mut self, d: &JobDesc, started: impl FnOnce()) {
        let region = self.region;
        // Fires at the latest when this returns or unwinds (early drops included).
        let mut started = Once(Some(started));
        let Some(client) = region.client(d.client) else {
            tracing::warn!(client = d.client, "job names no client slot; dropped");
            self.stats.jobs_failed.fetch_add(1, Ordering::Relaxed);
            region.count_done(self.queue, 1);
            return;
        };
        if !region.completion_range(d.client).contains(&d.completion) {
            tracing::warn!(
                client = d.client,
                completion = d.completion,
                "job names a completion slot the client does not own; dropped"
            );
            client.add_completed(1);
            self.stats.jobs_failed.fetch_add(1, Ordering::Relaxed);
            region.count_done(self.queue, 1);
            return;
        }
        let submitted = region.start_completion(d.completion).unwrap_or(0);
        started.fire();
        let mut out = CompletionData {
            prog_id: d.prog_id,
            tag: d.tag,
            started_ns: monotonic_ns(),
            ..Default::default()
        };
        let gone = client.state.load(Ordering::Acquire) == client_state::DEAD;
        let result = if self.cancel.load(Ordering::Relaxed) {
            Err(refuse(
                status::CANCELLED,
                "cancelled: the service is stopping (--now)",
            ))
        } else if gone {
            Err(refuse(
                status::CLIENT_GONE,
                format!(
                    "dropped: client {} (pid {}) died before the job ran",
                    d.client,
                    client.pid.load(Ordering::Relaxed)
                ),
            ))
        } else {
            self.execute(d, &client.state, &mut out)
        };
        out.status = match result {
            Ok(st) => st,
            Err(r) => {
                out.message = region.post_message(&r.msg);
                tracing::debug!(status = r.status, msg = %r.msg, "job refused");
                r.status
            }
        };
        out.finished_ns = monotonic_ns();
        self.stats.jobs_done.fetch_add(1, Ordering::Relaxed);
        if out.status != status::OK {
            self.stats.jobs_failed.fetch_add(1, Ordering::Relaxed);
            region.header().jobs_failed.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .latency
            .record(out.finished_ns.saturating_sub(submitted));
        self.stats.run_time.record(out.finished_ns - out.started_ns);
        region.header().jobs_done.fetch_add(1, Ordering::Relaxed);
        region.finish_completion(d.completion, &out);
        client.add_completed(1);
        region.count_done(self.queue, 1);
    }

    /// Runs the records of `d`, stopping at the first record boundary after its client
    /// (`client_state`) is marked dead.
    fn execute(
        &mut self,
        d: &JobDesc,
        client_state: &std::sync::atomic::AtomicU32,
        cm: &mut CompletionData,
    ) -> Result<i32, Refusal> {
        let region = self.region;
        let prog = self.table.get(d.prog_id).ok_or_else(|| {
            refuse(
                status::UNKNOWN_PROGRAM,
                format!("unknown program id {}", d.prog_id),
            )
        })?;
        cm.prog_version = prog.version;
        if let Some(k) = prog.device_maps.iter().position(|d| *d) {
            return Err(refuse(
                status::BAD_DESCRIPTOR,
                format!(
                    "program `{}` keeps map `{}` in GPU memory, so the host cannot run this job: \
                     jobs of such programs run on the GPU only (no VARLEN or STOP_ON_ERROR, \
                     valid buffers)",
                    prog.name,
                    prog.program.maps.get(k).map_or("?", |m| m.name.as_str())
                ),
            ));
        }
        let max = region.header().max_records as u64;
        if d.n > max {
            return Err(refuse(
                status::TOO_MANY_RECORDS,
                format!("n = {} records, the limit is {max}", d.n),
            ));
        }
        if d.flags & job_flags::INJECT_FAULT != 0 {
            return Err(refuse(
                status::BAD_DESCRIPTOR,
                "INJECT_FAULT: fault injection is off (a test flag; start the service with \
                 --allow-fault-injection on the CUDA backend)",
            ));
        }
        if d.flags & (job_flags::DEVICE_INPUT | job_flags::DEVICE_OUTPUT) != 0 {
            return Err(refuse(
                status::BAD_DESCRIPTOR,
                format!(
                    "device-resident buffers are read only by the GPU, and the GPU refused this \
                     job: expected 1 <= n <= {max}, a nonzero input record size, n records inside \
                     the device buffers (input [{}, +{}), output [{}, +{})), no VARLEN or \
                     STOP_ON_ERROR, and a program that runs on the GPU (see `status`)",
                    d.input_off, d.input_len, d.output_off, d.output_len
                ),
            ));
        }
        let varlen = d.flags & job_flags::VARLEN != 0;
        if !varlen && d.in_rec_size == 0 {
            return Err(refuse(
                status::ZERO_RECORD_SIZE,
                "input record size is 0: expected at least 1 byte per record (or VARLEN)",
            ));
        }
        let n = d.n;
        let input = span(
            region,
            "input",
            d.input_off,
            d.input_len,
            if varlen { 0 } else { n },
            d.in_rec_size as u64,
        )?;
        let out_size = d.out_rec_size as u64;
        let output = if out_size > 0 {
            span(region, "output", d.output_off, d.output_len, n, out_size)?
        } else {
            std::ptr::null_mut()
        };
        let offsets = if varlen {
            span(
                region,
                "offsets table",
                d.offsets_off,
                (n + 1) * 8,
                n + 1,
                8,
            )? as *const u64
        } else {
            std::ptr::null()
        };
        let results = if d.flags & job_flags::RESULTS != 0 {
            span(region, "results", d.results_off, n * 8, n, 8)? as *mut u64
        } else {
            std::ptr::null_mut()
        };
        let stop_on_error = d.flags & job_flags::STOP_ON_ERROR != 0;
        let tier_of = |off, len| {
            self.tiers.and_then(|t| {
                let generation = region.client(d.client)?.generation.load(Ordering::Acquire);
                t.of_buffer(off, len, (d.client, generation))
            })
        };
        let tier = tier_of(d.input_off, d.input_len);
        let out_tier = if output.is_null() {
            None
        } else {
            tier_of(d.output_off, d.output_len)
        };
        let mut first_err: Option<String> = None;
        let mut done = 0u64;
        let mut failed = 0u64;
        let mut r0 = 0u64;
        let mut abandoned = false;
        for i in 0..n {
            if client_state.load(Ordering::Relaxed) == client_state::DEAD {
                abandoned = true;
                break;
            }
            let (start, len) = if varlen {
                // SAFETY: `offsets` spans n + 1 u64s inside the arena (checked by `span`);
                // unaligned reads because the client chose the offset.
                let (a, b) = unsafe {
                    (
                        offsets.add(i as usize).read_unaligned(),
                        offsets.add(i as usize + 1).read_unaligned(),
                    )
                };
                if a > b || b > d.input_len {
                    failed += 1;
                    first_err.get_or_insert_with(|| {
                        format!(
                            "record {i}: offsets [{a}, {b}) are not inside the {}-byte input",
                            d.input_len
                        )
                    });
                    if stop_on_error {
                        break;
                    }
                    continue;
                }
                (a, b - a)
            } else {
                (i * d.in_rec_size as u64, d.in_rec_size as u64)
            };
            // SAFETY: [start, start + len) lies inside the input buffer, which `span` checked
            // to be inside the arena; the client does not touch its buffers while the job runs
            // (the job protocol), so this worker has them to itself.
            let inp =
                unsafe { std::slice::from_raw_parts(input.add(start as usize), len as usize) };
            let out: &mut [u8] = if output.is_null() {
                &mut []
            } else {
                // SAFETY: as above, for record i of the output buffer.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        output.add((i * out_size) as usize),
                        out_size as usize,
                    )
                }
            };
            if let Some(t) = &tier {
                // The record comes through the tier before the program reads it.
                t.access(inp.len());
            }
            let ran = prog.exec.run_job(inp, out, i, n, d.args, &mut self.env);
            if let Some(t) = &out_tier {
                // The record's output goes out through the tier's link.
                t.store(out_size as usize);
            }
            match ran {
                Ok(v) => {
                    r0 = v;
                    done += 1;
                    if !results.is_null() {
                        // SAFETY: `results` spans n u64s inside the arena (checked).
                        unsafe { results.add(i as usize).write_unaligned(v) };
                    }
                }
                Err(e) => {
                    failed += 1;
                    if first_err.is_none() {
                        cm.err_pc = e.loc.pc as u32;
                        first_err = Some(format!("record {i}: {e}"));
                    }
                    if !results.is_null() {
                        // SAFETY: as above.
                        unsafe { results.add(i as usize).write_unaligned(u64::MAX) };
                    }
                    if stop_on_error {
                        break;
                    }
                }
            }
        }
        self.env.trace.clear();
        cm.records_done = done;
        cm.records_failed = failed;
        cm.r0 = r0;
        self.stats.records.fetch_add(done, Ordering::Relaxed);
        self.stats
            .records_failed
            .fetch_add(failed, Ordering::Relaxed);
        if abandoned {
            return Err(refuse(
                status::CLIENT_GONE,
                format!("cancelled after {done} of {n} records: the client died"),
            ));
        }
        match first_err {
            None => Ok(status::OK),
            Some(msg) => {
                cm.message = region.post_message(&msg);
                Ok(status::RUNTIME_ERROR)
            }
        }
    }
}
