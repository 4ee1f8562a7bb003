//! `bpftime-super inspect` and `disasm`: what an object holds, and its instructions.

use super::ProgArgs;
use anyhow::{Context, Result};
use ebpf::Program;
use ebpf::elf::Object;
use serde::Serialize;
use std::process::ExitCode;

/// Arguments of `inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// ELF object, raw bytecode, or hex text (`-` reads stdin).
    prog_file: String,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `disasm`.
#[derive(clap::Args, Debug)]
pub struct DisasmArgs {
    #[command(flatten)]
    prog: ProgArgs,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

const ELF_MAGIC: &[u8] = b"\x7fELF";

/// Reads the file and returns the object, or `None` for raw bytecode (with its bytes).
fn read_object(path: &str) -> Result<(String, Vec<u8>, Option<Object>)> {
    let (name, bytes) = host::source::read(path)?;
    if bytes.starts_with(ELF_MAGIC) {
        let obj = Object::parse(&bytes, &name)?;
        Ok((name, bytes, Some(obj)))
    } else {
        Ok((name, bytes, None))
    }
}

/// The programs a command should act on: the one chosen with `--prog`, else every program of
/// a known kind in the object (or every program, if none has a known kind), else the raw
/// bytecode.
pub fn select_programs(a: &ProgArgs) -> Result<Vec<Program>> {
    let (name, bytes, obj) = read_object(&a.prog_file)?;
    let Some(obj) = obj else {
        anyhow::ensure!(
            a.prog.is_none(),
            "{name} is raw bytecode: it holds one program, so --prog does not apply"
        );
        return Ok(vec![ebpf::elf::load_raw(&bytes, &name)?]);
    };
    if let Some(p) = &a.prog {
        return Ok(vec![obj.program(Some(p))?]);
    }
    let known: Vec<_> = obj.programs.iter().filter(|p| p.kind.is_known()).collect();
    let chosen: Vec<_> = if known.is_empty() {
        obj.programs.iter().collect()
    } else {
        known
    };
    anyhow::ensure!(!chosen.is_empty(), "{name} holds no programs");
    chosen
        .into_iter()
        .map(|p| {
            obj.program(Some(&p.name))
                .with_context(|| format!("cannot link program `{}`", p.name))
        })
        .collect()
}

#[derive(Serialize)]
struct InspectReport<'a> {
    file: &'a str,
    format: &'static str,
    license: Option<&'a str>,
    programs: Vec<ProgramRow>,
    maps: &'a [ebpf::MapDef],
    sections: &'a [ebpf::elf::SectionInfo],
}

#[derive(Serialize)]
struct ProgramRow {
    name: String,
    section: String,
    kind: ebpf::ProgKind,
    insns: usize,
    linked_insns: Option<usize>,
}

/// Runs `inspect`.
pub fn run_inspect(a: InspectArgs) -> Result<ExitCode> {
    let (name, bytes, obj) = read_object(&a.prog_file)?;
    let Some(obj) = obj else {
        let prog = ebpf::elf::load_raw(&bytes, &name)?;
        let report = InspectReport {
            file: &name,
            format: "raw",
            license: None,
            programs: vec![ProgramRow {
                name: prog.name.clone(),
                section: prog.section.clone(),
                kind: prog.kind.clone(),
                insns: prog.insns.len(),
                linked_insns: Some(prog.insns.len()),
            }],
            maps: &[],
            sections: &[],
        };
        return print_inspect(&report, a.json);
    };
    let programs = obj
        .programs
        .iter()
        .map(|p| ProgramRow {
            name: p.name.clone(),
            section: p.section.clone(),
            kind: p.kind.clone(),
            insns: p.insn_count,
            linked_insns: obj.program(Some(&p.name)).ok().map(|l| l.insns.len()),
        })
        .collect();
    let report = InspectReport {
        file: &name,
        format: "elf",
        license: obj.license.as_deref(),
        programs,
        maps: &obj.maps,
        sections: &obj.sections,
    };
    print_inspect(&report, a.json)
}

fn kind_name(k: &ebpf::ProgKind) -> String {
    match k {
        ebpf::ProgKind::Offload => "offload".into(),
        ebpf::ProgKind::Kprobe(t) => format!("kprobe({t})"),
        ebpf::ProgKind::Kretprobe(t) => format!("kretprobe({t})"),
        ebpf::ProgKind::Memprobe(t) => format!("memprobe({t})"),
        ebpf::ProgKind::Uprobe(t) => format!("uprobe({t})"),
        ebpf::ProgKind::Uretprobe(t) => format!("uretprobe({t})"),
        ebpf::ProgKind::Other(s) => format!("other({s})"),
    }
}

fn print_inspect(r: &InspectReport<'_>, json: bool) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("file: {} ({})", r.file, r.format);
    if let Some(l) = r.license {
        println!("license: {l}");
    }
    println!("\nprograms:");
    println!(
        "  {:<24} {:<24} {:<20} {:>6} {:>7}",
        "NAME", "SECTION", "KIND", "INSNS", "LINKED"
    );
    for p in &r.programs {
        let linked = p
            .linked_insns
            .map(|n| n.to_string())
            .unwrap_or_else(|| "error".into());
        println!(
            "  {:<24} {:<24} {:<20} {:>6} {:>7}",
            p.name,
            p.section,
            kind_name(&p.kind),
            p.insns,
            linked
        );
    }
    if !r.maps.is_empty() {
        println!("\nmaps:");
        println!(
            "  {:<24} {:<16} {:>5} {:>7} {:>9}  ORIGIN",
            "NAME", "TYPE", "KEY", "VALUE", "ENTRIES"
        );
        for m in r.maps {
            println!(
                "  {:<24} {:<16} {:>5} {:>7} {:>9}  {:?}",
                m.name,
                format!("{:?}", m.kind).to_lowercase(),
                m.key_size,
                m.value_size,
                m.max_entries,
                m.origin
            );
        }
    }
    if !r.sections.is_empty() {
        println!("\nsections:");
        println!("  {:<32} {:<12} {:>8}", "NAME", "ROLE", "SIZE");
        for s in r.sections {
            println!("  {:<32} {:<12} {:>8}", s.name, s.role, s.size);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct DisasmReport {
    program: String,
    section: String,
    insns: Vec<DisasmLine>,
}

#[derive(Serialize)]
struct DisasmLine {
    pc: usize,
    text: String,
}

/// Runs `disasm`.
pub fn run_disasm(a: DisasmArgs) -> Result<ExitCode> {
    let programs = select_programs(&a.prog)?;
    let reports: Vec<DisasmReport> = programs
        .iter()
        .map(|p| {
            let mut insns = Vec::new();
            let mut pc = 0;
            while pc < p.insns.len() {
                let wide = p.insns[pc].opcode().map(|o| o.is_wide()).unwrap_or(false);
                insns.push(DisasmLine {
                    pc,
                    text: ebpf::asm::disasm_insn(&p.insns, pc),
                });
                pc += if wide { 2 } else { 1 };
            }
            DisasmReport {
                program: p.name.clone(),
                section: p.section.clone(),
                insns,
            }
        })
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{} ({}):", r.program, r.section);
        for l in &r.insns {
            println!("{:5}: {}", l.pc, l.text);
        }
    }
    Ok(ExitCode::SUCCESS)
}
