//! The binary format and CSV: round trips, the incremental writer, and errors that name
//! the byte offset or line.

use llm_cache::trace::{
    ACCESS_RECORD_BYTES, Access, Direction, Format, HEADER_BYTES, TRACE_WRITER_CHUNK, Trace,
    TraceError, TraceWriter,
};
use proptest::prelude::*;

fn sample() -> Trace {
    let mut b = Trace::builder();
    let a = b.object("layers.0.mlp.up_proj.weight", 8 << 20);
    let k = b.object("kv, \"block\" 0", 32 << 10);
    let u = b.object("", 100);
    b.access(Access::new(10, a, 8 << 20, Direction::HostToDevice).with_duration(400_000));
    b.access(Access::new(20, k, 32 << 10, Direction::DeviceToHost).with_stream(3));
    b.access(Access::new(30, u, 100, Direction::HostToDevice));
    b.access(Access::new(40, a, 8 << 20, Direction::HostToDevice).with_duration(5_000_000_000));
    b.build().unwrap()
}

fn binary(t: &Trace) -> Vec<u8> {
    t.write_binary_to(Vec::new()).unwrap()
}

fn binary_error(bytes: &[u8]) -> (u64, String) {
    match Trace::parse(bytes, Format::Auto) {
        Err(TraceError::Binary { offset, message }) => (offset, message),
        other => panic!("expected a binary error, got {other:?}"),
    }
}

#[test]
fn binary_layout_is_as_documented() {
    let t = sample();
    let b = binary(&t);
    assert_eq!(&b[..8], b"BPFLLMC\0");
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
    // One object chunk: header, then (8 + 4 + name) per object.
    let names: usize = t.objects.iter().map(|o| 12 + o.name.len()).sum();
    let acc_at = HEADER_BYTES + 8 + names;
    assert_eq!(b.len(), acc_at + 8 + 4 * ACCESS_RECORD_BYTES);
    assert_eq!(
        u32::from_le_bytes(b[acc_at..acc_at + 4].try_into().unwrap()),
        2
    );
    let r = &b[acc_at + 8 + ACCESS_RECORD_BYTES..acc_at + 8 + 2 * ACCESS_RECORD_BYTES];
    assert_eq!(u64::from_le_bytes(r[0..8].try_into().unwrap()), 20); // time_ns
    assert_eq!(u64::from_le_bytes(r[8..16].try_into().unwrap()), 32 << 10); // bytes
    assert_eq!(u32::from_le_bytes(r[16..20].try_into().unwrap()), 1); // object
    assert_eq!(u32::from_le_bytes(r[24..28].try_into().unwrap()), 3); // stream
    assert_eq!(r[28], 1); // device to host
    // A duration over 2^32-1 ns saturates.
    assert_eq!(t.accesses[3].duration_ns, u32::MAX);
}

#[test]
fn binary_round_trip() {
    let t = sample();
    assert_eq!(Trace::parse(&binary(&t), Format::Auto).unwrap(), t);
    assert_eq!(Trace::parse(&binary(&t), Format::Binary).unwrap(), t);
    let dir = std::env::temp_dir().join(format!("llm-cache-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.bin");
    t.write_binary(&p).unwrap();
    assert_eq!(Trace::read(&p).unwrap(), t);
    let _ = std::fs::remove_dir_all(dir);
}

proptest! {
    #[test]
    fn binary_round_trip_of_random_traces(
        objects in proptest::collection::vec((".{0,12}", any::<u64>()), 1..6),
        accesses in proptest::collection::vec(
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<bool>(), any::<u32>(), any::<u32>()),
            0..40,
        ),
    ) {
        let mut b = Trace::builder();
        let n = objects.len() as u32;
        let mut ids = Vec::new();
        for (name, bytes) in &objects {
            ids.push(b.object(name, *bytes));
        }
        for (time_ns, o, bytes, d2h, duration, stream) in accesses {
            let dir = if d2h { Direction::DeviceToHost } else { Direction::HostToDevice };
            b.access(Access { time_ns, object: ids[(o % n) as usize], bytes, dir, duration_ns: duration, stream });
        }
        let t = b.build().unwrap();
        prop_assert_eq!(Trace::parse(&binary(&t), Format::Auto).unwrap(), t);
    }
}

/// The writer emits objects before the accesses naming them, in several chunks; the reader
/// joins them.
#[test]
fn incremental_writer() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    let mut want = Trace::default();
    let n = TRACE_WRITER_CHUNK * 2 + 17;
    for i in 0..n {
        if i % 10_000 == 0 {
            let id = w.object(&format!("tensor{i}"), i as u64 + 1);
            want.objects.push(llm_cache::Object {
                name: format!("tensor{i}"),
                bytes: i as u64 + 1,
            });
            assert_eq!(id as usize, want.objects.len() - 1);
        }
        let a = Access::new(
            i as u64,
            (want.objects.len() - 1) as u32,
            7,
            Direction::HostToDevice,
        );
        w.access(a).unwrap();
        want.accesses.push(a);
        if i == 12_345 {
            w.flush().unwrap(); // an extra chunk boundary
        }
    }
    assert!(matches!(
        w.access(Access::new(0, 99, 1, Direction::HostToDevice)),
        Err(TraceError::UnknownObject { object: 99, .. })
    ));
    let bytes = w.finish().unwrap();
    assert_eq!(Trace::parse(&bytes, Format::Auto).unwrap(), want);
}

/// Dropping a writer writes what it holds.
#[test]
fn dropped_writer_flushes() {
    let mut out = Vec::new();
    {
        let mut w = TraceWriter::new(&mut out).unwrap();
        let o = w.object("x", 5);
        w.access(Access::new(1, o, 5, Direction::HostToDevice))
            .unwrap();
    }
    let t = Trace::parse(&out, Format::Auto).unwrap();
    assert_eq!(t.accesses.len(), 1);
}

#[test]
fn truncated_files_name_the_offset() {
    let t = sample();
    let b = binary(&t);
    let names: usize = t.objects.iter().map(|o| 12 + o.name.len()).sum();
    let acc_chunk = (HEADER_BYTES + 8 + names) as u64;
    let rec = |i: u64| acc_chunk + 8 + i * ACCESS_RECORD_BYTES as u64;
    // Cut inside the third access record: the error names that record's first byte.
    let (offset, message) = binary_error(&b[..rec(2) as usize + 5]);
    assert_eq!(offset, rec(2));
    assert!(message.contains("access record 2"), "{message}");
    // Inside the header, inside the object chunk's header, inside the second object entry.
    assert_eq!(binary_error(&b[..12]).0, 0);
    assert_eq!(binary_error(&b[..HEADER_BYTES + 3]).0, HEADER_BYTES as u64);
    let second = (HEADER_BYTES + 8 + 12 + t.objects[0].name.len()) as u64;
    assert_eq!(binary_error(&b[..second as usize + 2]).0, second);
    // Every cut that is not at a chunk boundary is an error at or before the cut.
    for cut in 8..b.len() {
        let r = Trace::parse(&b[..cut], Format::Auto);
        if cut == HEADER_BYTES || cut as u64 == acc_chunk {
            assert!(r.is_ok(), "cut at chunk boundary {cut}");
        } else {
            let (offset, _) = binary_error(&b[..cut]);
            assert!(offset <= cut as u64, "cut {cut}: offset {offset}");
        }
    }
    // A file path makes it to the message, around the offset.
    let dir = std::env::temp_dir().join(format!("llm-cache-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("cut.bin");
    std::fs::write(&p, &b[..rec(1) as usize + 1]).unwrap();
    let e = Trace::read(&p).unwrap_err();
    assert!(matches!(e, TraceError::InFile { .. }));
    assert!(matches!(e.root(), TraceError::Binary { offset, .. } if *offset == rec(1)));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn malformed_binary_fields_name_their_offset() {
    let t = sample();
    let b = binary(&t);
    let names: usize = t.objects.iter().map(|o| 12 + o.name.len()).sum();
    let rec0 = HEADER_BYTES + 8 + names + 8;
    let patch = |at: usize, bytes: &[u8]| {
        let mut c = b.clone();
        c[at..at + bytes.len()].copy_from_slice(bytes);
        c
    };
    assert_eq!(binary_error(&patch(8, &2u32.to_le_bytes())).0, 8); // version
    assert_eq!(binary_error(&patch(12, &1u32.to_le_bytes())).0, 12); // flags
    assert_eq!(binary_error(&patch(16, &9u32.to_le_bytes())).0, 16); // chunk tag
    assert_eq!(
        binary_error(&patch(rec0 + 16, &3u32.to_le_bytes())).0,
        rec0 as u64 + 16
    ); // object id
    assert_eq!(binary_error(&patch(rec0 + 28, &[2])).0, rec0 as u64 + 28); // direction
    // A name that is not UTF-8: the offset of the first bad byte.
    let name0 = HEADER_BYTES + 8 + 12;
    assert_eq!(binary_error(&patch(name0 + 3, &[0xff])).0, name0 as u64 + 3);
    // Forced binary on a file without the magic.
    assert!(matches!(
        Trace::parse(b"time_ns,object,bytes,direction\n", Format::Binary),
        Err(TraceError::Binary { offset: 0, .. })
    ));
}

#[test]
fn foreign_files_are_refused() {
    for junk in [
        &b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..],
        b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
        b"BPFLLMC\x01\x01\0\0\0\0\0\0\0",
        b"hello, world\n1,2,3\n",
        b"",
    ] {
        assert!(
            matches!(
                Trace::parse(junk, Format::Auto),
                Err(TraceError::Foreign { .. })
            ),
            "{junk:?}"
        );
    }
}

#[test]
fn csv_reading() {
    let text = "# from another tool\n\
                \n\
                time_ns, object, bytes, direction, extra\n\
                100,w0,4096,HtoD,x\n\
                200,\"kv,0\",512,DtoH,y\n\
                300,w0,8192,h2d,z\n\
                400,\"kv,0\",512,H2D,\n";
    let t = Trace::parse(text.as_bytes(), Format::Auto).unwrap();
    assert_eq!(t.objects.len(), 2);
    assert_eq!(t.objects[0].name, "w0");
    assert_eq!(t.objects[0].bytes, 8192, "the largest transfer");
    assert_eq!(t.objects[1].name, "kv,0");
    let tot = t.totals();
    assert_eq!((tot.h2d_accesses, tot.h2d_bytes), (3, 4096 + 8192 + 512));
    assert_eq!((tot.d2h_accesses, tot.d2h_bytes), (1, 512));
    assert_eq!(tot.distinct_bytes, 8192 + 512);
    assert_eq!(tot.measured_gbps(), None);
    assert_eq!(t.accesses[1].dir, Direction::DeviceToHost);
    // Columns in another order, with durations: 1000 bytes in 100 ns = 10 GB/s.
    let t = Trace::parse(
        b"object,direction,bytes,time_ns,duration_ns\na,h2d,1000,5,100\n",
        Format::Csv,
    )
    .unwrap();
    assert_eq!(t.totals().measured_gbps(), Some(10.0));
}

#[test]
fn csv_round_trip() {
    let mut b = Trace::builder();
    let x = b.object("x, with \"quotes\"", 10);
    let y = b.object("y", 20);
    b.access(Access::new(1, x, 10, Direction::HostToDevice).with_duration(3));
    b.access(Access::new(2, y, 20, Direction::DeviceToHost));
    let t = b.build().unwrap();
    let text = t.write_csv(Vec::new()).unwrap();
    assert_eq!(Trace::parse(&text, Format::Auto).unwrap(), t);
}

fn csv_line(text: &str) -> usize {
    match Trace::parse(text.as_bytes(), Format::Csv) {
        Err(TraceError::Csv { line, .. }) => line,
        other => panic!("expected a CSV error for {text:?}, got {other:?}"),
    }
}

#[test]
fn csv_errors_name_the_line() {
    let h = "time_ns,object,bytes,direction\n";
    assert_eq!(csv_line(&format!("{h}1,a,2,h2d\n2,a,x,h2d\n")), 3); // bytes
    assert_eq!(csv_line(&format!("# c\n\n{h}1,a,2,h2d\n-5,a,2,h2d\n")), 5); // time
    assert_eq!(csv_line(&format!("{h}1,a,2,up\n")), 2); // direction
    assert_eq!(csv_line(&format!("{h}1,a,2\n")), 2); // field count
    assert_eq!(csv_line(&format!("{h}1,\"a,2,h2d\n")), 2); // quote
    assert_eq!(csv_line(&format!("{h}1,,2,h2d\n")), 2); // empty object
    assert_eq!(csv_line("\n\ntime_ns,object,bytes\n1,a,2\n"), 3); // header lacks direction
    assert_eq!(csv_line("# only a comment\n"), 1); // no header
    // Bytes that are not UTF-8, on line 3.
    assert!(matches!(
        Trace::parse(
            b"time_ns,object,bytes,direction\n1,a,2,h2d\n\xff\n",
            Format::Csv
        ),
        Err(TraceError::Csv { line: 3, .. })
    ));
}

#[test]
fn unreadable_and_inconsistent() {
    let e = Trace::read(std::path::Path::new("/nonexistent/trace.bin")).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }));
    let mut b = Trace::builder();
    b.object("a", 1);
    b.access(Access::new(0, 5, 1, Direction::HostToDevice));
    assert!(matches!(
        b.build(),
        Err(TraceError::UnknownObject {
            index: 0,
            object: 5,
            objects: 1
        })
    ));
    // The builder joins objects by name (empty names never join).
    let mut b = Trace::builder();
    assert_eq!(b.object("a", 1), 0);
    assert_eq!(b.object("", 1), 1);
    assert_eq!(b.object("a", 9), 0);
    assert_eq!(b.object("", 1), 2);
    let t = b.build().unwrap();
    assert_eq!(t.objects[0].bytes, 9);
    assert_eq!(t.display_name(1), "#1");
    assert_eq!(t.display_name(0), "a");
}

/// A name the reader would refuse is refused by the writer.
#[test]
fn writer_refuses_oversized_names() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.object(&"x".repeat(llm_cache::trace::MAX_NAME_BYTES + 1), 1);
    assert!(matches!(w.finish(), Err(TraceError::Write { .. })));
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.object(&"x".repeat(llm_cache::trace::MAX_NAME_BYTES), 1);
    let b = w.finish().unwrap();
    assert_eq!(
        Trace::parse(&b, Format::Auto).unwrap().objects[0]
            .name
            .len(),
        1 << 20
    );
}
