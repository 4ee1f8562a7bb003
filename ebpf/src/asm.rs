//! The assembler and disassembler, both driven by the templates of the opcode table.
//!
//! The syntax is the one the kernel verifier log and `llvm-objdump` use:
//!
//! ```text
//! r1 += 5            w2 = (s8)w3          r0 = *(u32 *)(r1 + 4)
//! *(u64 *)(r10 - 8) = r1                  lock *(u64 *)(r1 + 0) += r2
//! r0 = cmpxchg_64(r1 + 0, r0, r2)         if r1 s> 7 goto +3
//! r1 = 0x1122334455667788 ll              r1 = map_idx[0] ll
//! call map_lookup_elem#1                  call pc+4      callx r2       exit
//! ```
//!
//! The assembler also takes labels (`loop:` on its own line, `goto loop`), comments after
//! `;` or `//`, and helper calls by number (`call 1`) or by name (`call map_lookup_elem`).
//! [`disasm_insn`] is the one disassembler every error message uses.

use crate::helpers;
use crate::isa::{Insn, Opcode, TABLE};
use std::collections::HashMap;
use std::fmt::Write;

/// Disassembles the slot at `pc` (reading the next slot for `ld_imm64`).
pub fn disasm_insn(insns: &[Insn], pc: usize) -> String {
    let Some(insn) = insns.get(pc) else {
        return format!("<pc {pc} out of range>");
    };
    let op = match Opcode::decode(insn) {
        Ok(op) => op,
        Err(_) => {
            return format!(
                ".insn {:#04x}, r{}, r{}, {}, {}",
                insn.code, insn.dst, insn.src, insn.off, insn.imm
            );
        }
    };
    let next = insns.get(pc + 1).map(|n| n.imm).unwrap_or(0);
    render(op.info().template, insn, next)
}

/// Disassembles a whole program, one `pc: text` line per instruction.
pub fn disasm(insns: &[Insn]) -> String {
    let mut out = String::new();
    let mut pc = 0;
    while pc < insns.len() {
        let _ = writeln!(out, "{pc:5}: {}", disasm_insn(insns, pc));
        let wide = Opcode::decode(&insns[pc])
            .map(|o| o.is_wide())
            .unwrap_or(false);
        pc += if wide { 2 } else { 1 };
    }
    out
}

fn signed(v: i64) -> String {
    if v < 0 {
        format!("-{}", v.unsigned_abs())
    } else {
        format!("+{v}")
    }
}

fn render(template: &str, insn: &Insn, next_imm: i32) -> String {
    let mut out = String::with_capacity(template.len() + 8);
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .expect("template placeholders are closed")
            + start;
        let name = &rest[start + 1..end];
        match name {
            "d" => write!(out, "r{}", insn.dst),
            "s" => write!(out, "r{}", insn.src),
            "wd" => write!(out, "w{}", insn.dst),
            "ws" => write!(out, "w{}", insn.src),
            "imm" => write!(out, "{}", insn.imm),
            "next" => write!(out, "{next_imm}"),
            "imm64" => write!(
                out,
                "{:#x}",
                (insn.imm as u32 as u64) | ((next_imm as u32 as u64) << 32)
            ),
            "moff" => {
                let o = insn.off as i64;
                write!(
                    out,
                    "{} {}",
                    if o < 0 { '-' } else { '+' },
                    o.unsigned_abs()
                )
            }
            "joff" => write!(out, "{}", signed(insn.off as i64)),
            "jimm" => write!(out, "pc{}", signed(insn.imm as i64)),
            "helper" => match helpers::proto(insn.imm) {
                Some(p) => write!(out, "{}#{}", p.name, insn.imm),
                None => write!(out, "{}", insn.imm),
            },
            other => unreachable!("unknown template placeholder {other}"),
        }
        .expect("writing to a String cannot fail");
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A line of assembly that could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}: `{text}`")]
pub struct AsmError {
    /// 1-based line number.
    pub line: usize,
    /// The offending text.
    pub text: String,
    /// What was wrong.
    pub msg: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Num(i64),
    Punct(&'static str),
    Hole(&'static str),
}

const PUNCTS: &[&str] = &[
    "<<=", ">>=", "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^=", "==", "!=", ">=", "<=", "<<",
    ">>", "+", "-", "*", "/", "%", "|", "&", "^", "=", ">", "<", "(", ")", "[", "]", ",", ":", "#",
];

const HOLES: &[&str] = &[
    "d", "s", "wd", "ws", "imm", "next", "imm64", "moff", "joff", "jimm", "helper",
];

fn tokenize(s: &str, templates: bool) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    'outer: while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if templates && c == b'{' {
            let end = s[i..].find('}').ok_or("unclosed placeholder")? + i;
            let name = &s[i + 1..end];
            let hole = HOLES
                .iter()
                .find(|h| **h == name)
                .ok_or_else(|| format!("unknown placeholder {name}"))?;
            out.push(Tok::Hole(hole));
            i = end + 1;
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let text = s[start..i].replace('_', "");
            let v = if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).map(|v| v as i64)
            } else {
                text.parse::<u64>().map(|v| v as i64)
            }
            .map_err(|_| format!("bad number `{}`", &s[start..i]))?;
            out.push(Tok::Num(v));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' || c == b'.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Word(s[start..i].to_string()));
            continue;
        }
        for p in PUNCTS {
            if s[i..].starts_with(p) {
                out.push(Tok::Punct(p));
                i += p.len();
                continue 'outer;
            }
        }
        return Err(format!("unexpected character `{}`", c as char));
    }
    Ok(out)
}

/// What a template match captured.
#[derive(Default, Debug)]
struct Captures {
    dst: Option<u8>,
    src: Option<u8>,
    imm: Option<i64>,
    next: Option<i64>,
    off: Option<i64>,
    target: Option<Target>,
}

#[derive(Debug, Clone)]
enum Target {
    Rel(i64),
    Label(String),
}

fn reg(tok: Option<&Tok>, prefix: char) -> Option<u8> {
    match tok {
        Some(Tok::Word(w)) if w.starts_with(prefix) => {
            let n: u8 = w[1..].parse().ok()?;
            (n <= 10).then_some(n)
        }
        _ => None,
    }
}

/// Parses an optionally signed number starting at `i`; returns it and the next index.
fn number(toks: &[Tok], i: usize) -> Option<(i64, usize)> {
    match (toks.get(i), toks.get(i + 1)) {
        (Some(Tok::Punct("-")), Some(Tok::Num(n))) => Some((n.wrapping_neg(), i + 2)),
        (Some(Tok::Punct("+")), Some(Tok::Num(n))) => Some((*n, i + 2)),
        (Some(Tok::Num(n)), _) => Some((*n, i + 1)),
        _ => None,
    }
}

fn set<T: PartialEq + Copy>(slot: &mut Option<T>, v: T) -> bool {
    match slot {
        Some(old) => *old == v,
        None => {
            *slot = Some(v);
            true
        }
    }
}

fn match_template(tmpl: &[Tok], toks: &[Tok]) -> Option<Captures> {
    let mut c = Captures::default();
    let mut i = 0;
    for t in tmpl {
        match t {
            Tok::Hole(h) => match *h {
                "d" | "wd" | "s" | "ws" => {
                    let prefix = if h.starts_with('w') { 'w' } else { 'r' };
                    let r = reg(toks.get(i), prefix)?;
                    let slot = if h.ends_with('d') {
                        &mut c.dst
                    } else {
                        &mut c.src
                    };
                    if !set(slot, r) {
                        return None;
                    }
                    i += 1;
                }
                "imm" | "imm64" => {
                    let (v, n) = number(toks, i)?;
                    c.imm = Some(v);
                    i = n;
                }
                "next" => {
                    let (v, n) = number(toks, i)?;
                    c.next = Some(v);
                    i = n;
                }
                "moff" => {
                    let (v, n) = number(toks, i)?;
                    if !matches!(toks.get(i), Some(Tok::Punct("+" | "-"))) {
                        return None;
                    }
                    c.off = Some(v);
                    i = n;
                }
                "joff" | "jimm" => {
                    // `+3`, `-3`, `pc+3` or a label.
                    let mut j = i;
                    if matches!(toks.get(j), Some(Tok::Word(w)) if w == "pc") {
                        j += 1;
                    }
                    if let Some((v, n)) = number(toks, j) {
                        c.target = Some(Target::Rel(v));
                        i = n;
                    } else if let Some(Tok::Word(w)) = toks.get(i) {
                        c.target = Some(Target::Label(w.clone()));
                        i += 1;
                    } else {
                        return None;
                    }
                }
                "helper" => {
                    // `1`, `name`, or `name#1`
                    match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
                        (Some(Tok::Word(_)), Some(Tok::Punct("#")), Some(Tok::Num(n))) => {
                            c.imm = Some(*n);
                            i += 3;
                        }
                        (Some(Tok::Num(n)), _, _) => {
                            c.imm = Some(*n);
                            i += 1;
                        }
                        (Some(Tok::Word(w)), _, _) => {
                            let name = w.strip_prefix("bpf_").unwrap_or(w);
                            c.imm = Some(helpers::by_name(name)?.id as i64);
                            i += 1;
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            },
            lit => {
                if toks.get(i) != Some(lit) {
                    return None;
                }
                i += 1;
            }
        }
    }
    (i == toks.len()).then_some(c)
}

static TEMPLATES: std::sync::LazyLock<Vec<(Opcode, Vec<Tok>)>> = std::sync::LazyLock::new(|| {
    TABLE
        .iter()
        .map(|r| {
            (
                r.opcode,
                tokenize(r.template, true).expect("opcode table templates are valid"),
            )
        })
        .collect()
});

fn fits_i32(v: i64) -> bool {
    v >= i32::MIN as i64 && v <= u32::MAX as i64
}

/// Assembles text into instruction slots.
pub fn assemble(text: &str) -> Result<Vec<Insn>, AsmError> {
    struct Pending {
        line: usize,
        text: String,
        pc: usize,
        label: String,
        field_is_imm: bool,
    }
    let mut insns = Vec::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut pending = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let mut s = raw;
        if let Some(p) = s.find(';') {
            s = &s[..p];
        }
        if let Some(p) = s.find("//") {
            s = &s[..p];
        }
        let s = s.trim();
        // Leading `pc:` numbers, as the disassembler prints them, are skipped.
        let s = match s.split_once(':') {
            Some((pre, rest))
                if !pre.is_empty() && pre.trim().bytes().all(|b| b.is_ascii_digit()) =>
            {
                rest.trim()
            }
            _ => s,
        };
        if s.is_empty() {
            continue;
        }
        let err = |msg: String| AsmError {
            line,
            text: s.to_string(),
            msg,
        };
        if let Some(label) = s.strip_suffix(':') {
            let label = label.trim();
            if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err("bad label".into()));
            }
            if labels.insert(label.to_string(), insns.len()).is_some() {
                return Err(err(format!("label `{label}` defined twice")));
            }
            continue;
        }
        let toks = tokenize(s, false).map_err(err)?;
        let Some((op, caps)) = TEMPLATES
            .iter()
            .find_map(|(op, t)| match_template(t, &toks).map(|c| (*op, c)))
        else {
            return Err(err("not an instruction".into()));
        };
        let imm = caps.imm.unwrap_or(0);
        let wide = op.is_wide();
        if !wide && !fits_i32(imm) {
            return Err(err(format!("immediate {imm} does not fit in 32 bits")));
        }
        let off = caps.off.unwrap_or(0);
        if off < i16::MIN as i64 || off > i16::MAX as i64 {
            return Err(err(format!("offset {off} does not fit in 16 bits")));
        }
        let pc = insns.len();
        let mut insn = op.insn(
            caps.dst.unwrap_or(0),
            caps.src.unwrap_or(0),
            off as i16,
            imm as i32,
        );
        let field_is_imm = matches!(
            op.kind(),
            crate::isa::OpKind::JaLong | crate::isa::OpKind::CallLocal
        );
        match caps.target {
            Some(Target::Rel(v)) => {
                if field_is_imm {
                    if !fits_i32(v) {
                        return Err(err("jump offset out of range".into()));
                    }
                    insn.imm = v as i32;
                } else {
                    if v < i16::MIN as i64 || v > i16::MAX as i64 {
                        return Err(err("jump offset out of range".into()));
                    }
                    insn.off = v as i16;
                }
            }
            Some(Target::Label(label)) => pending.push(Pending {
                line,
                text: s.to_string(),
                pc,
                label,
                field_is_imm,
            }),
            None => {}
        }
        insns.push(insn);
        if wide {
            let hi = match op {
                Opcode::Lddw => (imm as u64 >> 32) as i32,
                _ => caps.next.unwrap_or(0) as i32,
            };
            insns.push(Insn::new(0, 0, 0, 0, hi));
        }
    }
    for p in pending {
        let Some(&target) = labels.get(&p.label) else {
            return Err(AsmError {
                line: p.line,
                text: p.text,
                msg: format!("unknown label `{}`", p.label),
            });
        };
        let rel = target as i64 - p.pc as i64 - 1;
        if p.field_is_imm {
            insns[p.pc].imm = rel as i32;
        } else {
            if rel < i16::MIN as i64 || rel > i16::MAX as i64 {
                return Err(AsmError {
                    line: p.line,
                    text: p.text,
                    msg: "jump offset out of range".into(),
                });
            }
            insns[p.pc].off = rel as i16;
        }
    }
    Ok(insns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_roundtrips_through_text() {
        for op in Opcode::ALL {
            let mut insns = vec![op.insn(3, 4, -8, 7)];
            if op.is_wide() {
                insns.push(Insn::new(0, 0, 0, 0, 9));
            }
            if matches!(op, Opcode::Cmpxchg32 | Opcode::Cmpxchg64) {
                // r0 is implicit; nothing else to adjust.
            }
            if *op == Opcode::Call {
                insns[0].imm = 1;
            }
            let text = disasm(&insns);
            let back = assemble(&text).unwrap_or_else(|e| panic!("{op:?}: {text}: {e}"));
            // Fields the template does not print are not carried; compare what is printed.
            assert_eq!(disasm(&back), text, "{op:?}");
            assert_eq!(Opcode::decode(&back[0]).unwrap(), *op);
        }
    }

    #[test]
    fn labels_and_comments() {
        let p = assemble(
            "  r1 = 3 ; three\nloop:\n  r1 -= 1 // dec\n  if r1 != 0 goto loop\n  r0 = 0x100000000 ll\n  exit\n",
        )
        .unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p[2].off, -2);
        assert_eq!(p[3].imm, 0);
        assert_eq!(p[4].imm, 1);
        assert_eq!(disasm_insn(&p, 2), "if r1 != 0 goto -2");
    }

    #[test]
    fn errors_name_the_line() {
        let e = assemble("r0 = 1\nr0 +=\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = assemble("goto nowhere\n").unwrap_err();
        assert!(e.msg.contains("unknown label"));
    }
}
