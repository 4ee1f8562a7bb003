//! The entry/exit splice pass: inserts probe blocks into foreign PTX, at the entry of each
//! kernel and before each of its `ret`/`exit`s.
//!
//! ```text
//! app PTX ──[ptx::parse]──▶ PtxFile ──┐
//!                                     ├──[splice]──▶ instrumented PTX + Spliced report
//! ProbeModule + ProbeBlocks ──────────┘
//! ```
//!
//! The probe code arrives as PTX text, compiled by someone else: module-scope text
//! ([`ProbeModule::text`]: prototypes, `.func` bodies, globals) and, per site, a `{ }` block
//! ([`ProbeBlocks::block`]) that declares every register it uses. The pass only inserts
//! text; every other byte of the application's PTX stays as it was.
//!
//! | site                   | where the block goes                                        |
//! |------------------------|-------------------------------------------------------------|
//! | entry                  | right after the `{` opening the kernel body                 |
//! | `ret;` / `exit;`       | right before it, at any block depth (labels before it still reach the block) |
//! | `@%p ret;`             | `@!%p bra $__bpftime_skip_<uid>;` `<block>` `@%p ret;` `$__bpftime_skip_<uid>:` |
//! | the body's closing `}`, when control can reach it | right before it (the last exit site) |
//! | module text            | after the header (`.address_size` line)                     |
//! | extra parameters       | appended to the kernel's parameter list                     |
//! | `.version` / `.target` | raised to [`ProbeModule::min_version`] / [`ProbeModule::min_sm`] (a warning says so) |
//!
//! Only `.entry` definitions are instrumented; `.func`s and prototypes are left alone.
//! [`instrument`] is the robust front door: a kernel whose body does not parse is left
//! alone, and a module that does not parse comes back unmodified, each with a warning
//! naming the line.
//!
//! Limits: a thread that ends inside a called `.func` (an `exit` there, or `trap`) runs no
//! exit probe; `trap` and `brkpt` are not exit sites; the pass does not check that the
//! blocks' registers or labels stay clear of the kernel's (blocks are nested scopes, and
//! `uid` keeps labels apart), nor what the probe code costs in registers (`.maxnreg`).

use std::collections::HashSet;
use std::ops::Range;

use crate::ptx::parse::{self, PtxFile, PtxFunction, split_sm};

/// A probe site of a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// The kernel's entry.
    Entry,
    /// Before a `ret` or `exit`.
    Exit {
        /// Which one: 0 for the kernel's first `ret`/`exit` in text order.
        index: u32,
        /// 1-based line of the `ret`/`exit` in the original text.
        line: u32,
    },
}

/// The caller's probe code, per kernel and site.
pub trait ProbeBlocks {
    /// Text of a `{ ... }` block run at `site` of `kernel`, or `None` (the site is not
    /// instrumented). `uid` is unique within the module (use it for labels). The block
    /// declares every register it uses.
    fn block(&mut self, kernel: &PtxFunction<'_>, site: &Site, uid: u32) -> Option<String>;

    /// Extra parameter declarations appended to this kernel's parameter list (e.g.
    /// `.param .u64 __bpftime_corr`), usually none.
    fn extra_params(&mut self, _kernel: &PtxFunction<'_>) -> Vec<String> {
        Vec::new()
    }
}

/// Module-scope probe text and what it needs of the module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeModule {
    /// Module-scope PTX (prototypes, `.func` bodies, globals), inserted once after the
    /// header; empty for none.
    pub text: String,
    /// The lowest `.version` the probe code needs.
    pub min_version: (u32, u32),
    /// The lowest `sm_N` the probe code needs.
    pub min_sm: u32,
}

/// A probe block placed in the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// The kernel.
    pub kernel: String,
    /// The site.
    pub site: Site,
    /// 1-based line of the site in the original text (the body's `{` for the entry).
    pub line: u32,
}

/// Something the pass changed or could not do, that the caller should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassWarning {
    /// The kernel concerned, if any.
    pub kernel: Option<String>,
    /// 1-based line in the original text.
    pub line: u32,
    /// What happened.
    pub what: String,
}

/// The result of [`splice`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spliced {
    /// The instrumented PTX.
    pub text: String,
    /// The blocks placed, in text order per kernel.
    pub attached: Vec<Attached>,
    /// Changes to the header, and sites left alone.
    pub warnings: Vec<PassWarning>,
}

/// Why a splice failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    /// The parsed file is not of the text given.
    #[error("the parsed file has {found} bytes of text, expected the {expected} bytes given")]
    Mismatch {
        /// Length of `PtxFile::src`.
        found: usize,
        /// Length of the text given.
        expected: usize,
    },
    /// A probe block is not one balanced `{ ... }` block.
    #[error("probe block of kernel `{kernel}` at {site:?}: {what}")]
    Block {
        /// The kernel.
        kernel: String,
        /// The site.
        site: Site,
        /// What was found, and what was expected.
        what: String,
    },
    /// An extra parameter declaration is not a `.param` declaration.
    #[error(
        "extra parameter `{decl}` of kernel `{kernel}`: found no `.param`, expected a `.param` declaration"
    )]
    Param {
        /// The kernel.
        kernel: String,
        /// The declaration.
        decl: String,
    },
    /// The module text does not lex.
    #[error("probe module text: {0}")]
    Module(#[source] parse::ParseError),
}

/// An edit of the original text: replace `range` (empty for an insertion) with `text`.
pub(crate) struct Edit {
    pub(crate) range: Range<usize>,
    pub(crate) text: String,
}

/// Parses `src` ([`parse::parse_lenient`]) and splices the probes in. A kernel whose body
/// does not parse is left unmodified, with a warning; when the module itself does not parse,
/// it comes back unmodified with a warning naming the line of the error.
pub fn instrument(
    src: &str,
    module: &ProbeModule,
    blocks: &mut dyn ProbeBlocks,
) -> Result<Spliced, PassError> {
    match parse::parse_lenient(src) {
        Ok(file) => splice(src, &file, module, blocks),
        Err(e) => Ok(Spliced {
            text: src.to_string(),
            attached: Vec::new(),
            warnings: vec![unparsed(&e)],
        }),
    }
}

/// The warning for a module that does not parse (and so stays as it was), logged too.
pub(crate) fn unparsed(e: &parse::ParseError) -> PassWarning {
    tracing::warn!(line = e.line, error = %e, "PTX not instrumented: it does not parse");
    PassWarning {
        kernel: None,
        line: e.line,
        what: format!("module left unmodified: {e}"),
    }
}

/// Splices `module` and the blocks of `blocks` into `src`, parsed as `file`.
pub fn splice(
    src: &str,
    file: &PtxFile<'_>,
    module: &ProbeModule,
    blocks: &mut dyn ProbeBlocks,
) -> Result<Spliced, PassError> {
    if file.src.len() != src.len() || file.src != src {
        return Err(PassError::Mismatch {
            found: file.src.len(),
            expected: src.len(),
        });
    }
    let mut edits: Vec<Edit> = Vec::new();
    let mut attached = Vec::new();
    let mut warnings = Vec::new();
    header_edits(file, module, &mut edits, &mut warnings);
    if !module.text.is_empty() {
        parse::lexer::lex(&module.text).map_err(PassError::Module)?;
        let mut text = String::new();
        if !src[..file.header_end].ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&module.text);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        edits.push(Edit {
            range: file.header_end..file.header_end,
            text,
        });
    }
    let mut labels: HashSet<&str> = HashSet::new();
    for f in &file.functions {
        for s in &f.statements {
            if s.kind == parse::StmtKind::Label {
                labels.insert(s.opcode.as_str());
            }
        }
    }
    let mut uid = 0u32;
    for k in file.kernels() {
        let Some(body) = k.body.clone() else { continue };
        if let Some(e) = &k.error {
            tracing::warn!(kernel = k.name, error = %e, "kernel not instrumented: its body does not parse");
            warnings.push(PassWarning {
                kernel: Some(k.name.to_string()),
                line: e.line,
                what: format!("kernel left unmodified: {e}"),
            });
            continue;
        }
        let extra = blocks.extra_params(k);
        if !extra.is_empty() {
            edits.push(param_edit(src, k, &extra)?);
        }
        let body_line = line_of(src, body.start);
        let site = Site::Entry;
        if let Some(b) = blocks.block(k, &site, uid) {
            check_block(&b, k, &site)?;
            edits.push(Edit {
                range: body.start + 1..body.start + 1,
                text: format!("\n{}\n", b.trim_end()),
            });
            attached.push(Attached {
                kernel: k.name.to_string(),
                site,
                line: body_line,
            });
        }
        uid += 1;
        for (index, s) in k.exits().enumerate() {
            let site = Site::Exit {
                index: index as u32,
                line: s.line,
            };
            let this = uid;
            uid += 1;
            let Some(b) = blocks.block(k, &site, this) else {
                continue;
            };
            check_block(&b, k, &site)?;
            let indent = indent_before(src, s.span.start);
            match &s.guard {
                None => edits.push(Edit {
                    range: s.span.start..s.span.start,
                    text: format!("{}\n{indent}", b.trim()),
                }),
                Some(g) => {
                    let mut label = format!("$__bpftime_skip_{this}");
                    while labels.contains(label.as_str()) {
                        label.push('_');
                    }
                    let neg = if g.negated { "" } else { "!" };
                    edits.push(Edit {
                        range: s.span.start..s.span.start,
                        text: format!(
                            "@{neg}{} bra {label};\n{indent}{}\n{indent}",
                            g.pred,
                            b.trim()
                        ),
                    });
                    edits.push(Edit {
                        range: s.span.end..s.span.end,
                        text: format!("\n{label}:"),
                    });
                }
            }
            attached.push(Attached {
                kernel: k.name.to_string(),
                site,
                line: s.line,
            });
        }
        if falls_off_end(k) {
            // The closing `}` is an exit too: a probe goes right before it.
            let close = body.end - 1;
            let index = k.exits().count() as u32;
            let line = line_of(src, close);
            let site = Site::Exit { index, line };
            let this = uid;
            uid += 1;
            if let Some(b) = blocks.block(k, &site, this) {
                check_block(&b, k, &site)?;
                edits.push(Edit {
                    range: close..close,
                    text: format!("{}\n", b.trim()),
                });
                attached.push(Attached {
                    kernel: k.name.to_string(),
                    site,
                    line,
                });
            }
        }
    }
    for a in &attached {
        tracing::debug!(kernel = %a.kernel, site = ?a.site, line = a.line, "probe attached");
    }
    Ok(Spliced {
        text: apply(src, edits),
        attached,
        warnings,
    })
}

/// Whether control can reach the `}` closing the body of `k`: its last statement is not an
/// unguarded `ret`, `exit`, `trap` or `bra`, or a label after it is a branch target (labels
/// nobody branches to, such as debug info's `$L__func_end0`, do not count).
pub(crate) fn falls_off_end(k: &PtxFunction<'_>) -> bool {
    use parse::{Operand, StmtKind};
    let skip = |s: &&parse::PtxStatement| {
        s.kind == StmtKind::Label
            || (s.kind == StmtKind::Directive && matches!(s.opcode.as_str(), ".loc" | ".pragma"))
    };
    let Some(pos) = k.statements.iter().rposition(|s| !skip(&s)) else {
        return true;
    };
    let last = &k.statements[pos];
    let ends = last.kind == StmtKind::Instruction
        && last.guard.is_none()
        && matches!(last.base_opcode(), "ret" | "exit" | "trap" | "bra" | "brx");
    if !ends {
        return true;
    }
    let trailing: Vec<&str> = k.statements[pos + 1..]
        .iter()
        .filter(|s| s.kind == StmtKind::Label)
        .map(|s| s.opcode.as_str())
        .collect();
    if trailing.is_empty() {
        return false;
    }
    if k.statements.iter().any(|s| s.opcode == ".branchtargets") {
        return true;
    }
    fn mentions(o: &Operand, names: &[&str]) -> bool {
        match o {
            Operand::Symbol(n) => names.contains(&n.as_str()),
            Operand::Vector(v) | Operand::List(v) => v.iter().any(|o| mentions(o, names)),
            Operand::Other(t) => names.iter().any(|n| t.contains(n)),
            _ => false,
        }
    }
    k.statements
        .iter()
        .filter(|s| s.kind == StmtKind::Instruction)
        .any(|s| s.operands.iter().any(|o| mentions(o, &trailing)))
}

pub(crate) fn header_edits(
    file: &PtxFile<'_>,
    module: &ProbeModule,
    edits: &mut Vec<Edit>,
    warnings: &mut Vec<PassWarning>,
) {
    let src = file.src;
    if file.version < module.min_version {
        let (a, b) = module.min_version;
        let text = format!("{a}.{b}");
        warnings.push(PassWarning {
            kernel: None,
            line: line_of(src, file.version_span.start),
            what: format!(
                "`.version` raised from {}.{} to {text} for the probe code",
                file.version.0, file.version.1
            ),
        });
        edits.push(Edit {
            range: file.version_span.clone(),
            text,
        });
    }
    let mut changed = false;
    let items: Vec<String> = file
        .target
        .iter()
        .map(|t| match split_sm(t) {
            Some((n, suffix)) if n < module.min_sm => {
                changed = true;
                format!("sm_{}{suffix}", module.min_sm)
            }
            _ => t.clone(),
        })
        .collect();
    if changed {
        let text = items.join(", ");
        warnings.push(PassWarning {
            kernel: None,
            line: line_of(src, file.target_span.start),
            what: format!(
                "`.target` raised from `{}` to `{text}` for the probe code",
                &src[file.target_span.clone()]
            ),
        });
        edits.push(Edit {
            range: file.target_span.clone(),
            text,
        });
    }
}

/// Appends `extra` to the parameter list of `k` (making one when there is none).
fn param_edit(src: &str, k: &PtxFunction<'_>, extra: &[String]) -> Result<Edit, PassError> {
    for d in extra {
        if !d.trim_start().starts_with(".param") {
            return Err(PassError::Param {
                kernel: k.name.to_string(),
                decl: d.clone(),
            });
        }
    }
    let list = extra
        .iter()
        .map(|d| format!("\t{}", d.trim()))
        .collect::<Vec<_>>()
        .join(",\n");
    Ok(match (k.params.last(), k.params_close) {
        (Some(last), _) => Edit {
            range: last.span.end..last.span.end,
            text: format!(",\n{list}"),
        },
        (None, Some(close)) => {
            let nl = if src[..close].ends_with('\n') {
                ""
            } else {
                "\n"
            };
            Edit {
                range: close..close,
                text: format!("{nl}{list}\n"),
            }
        }
        (None, None) => Edit {
            range: k.name_span.end..k.name_span.end,
            text: format!("(\n{list}\n)"),
        },
    })
}

/// A probe block must lex and be one balanced `{ ... }`.
fn check_block(b: &str, k: &PtxFunction<'_>, site: &Site) -> Result<(), PassError> {
    let err = |what: String| PassError::Block {
        kernel: k.name.to_string(),
        site: site.clone(),
        what,
    };
    let toks = parse::lexer::lex(b).map_err(|e| err(e.to_string()))?;
    let open = parse::lexer::TokKind::Punct(b'{');
    let close = parse::lexer::TokKind::Punct(b'}');
    if toks.first().map(|t| t.kind) != Some(open) {
        return Err(err(
            "found no leading `{`, expected a `{ ... }` block".into()
        ));
    }
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate() {
        if t.kind == open {
            depth += 1;
        } else if t.kind == close {
            depth -= 1;
            if depth == 0 && i + 1 != toks.len() {
                return Err(err(format!(
                    "found `{}` after the block's closing `}}`, expected the end of the block",
                    t.text(b)
                )));
            }
        }
    }
    if depth != 0 {
        return Err(err(format!(
            "found {depth} unclosed `{{`, expected a balanced block"
        )));
    }
    Ok(())
}

fn line_of(src: &str, off: usize) -> u32 {
    1 + src.as_bytes()[..off.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u32
}

/// The white space between the start of the line and `off`, if only white space.
fn indent_before(src: &str, off: usize) -> &str {
    let line_start = src[..off].rfind('\n').map_or(0, |k| k + 1);
    let ind = &src[line_start..off];
    if ind.bytes().all(|b| b == b' ' || b == b'\t') {
        ind
    } else {
        "\t"
    }
}

pub(crate) fn apply(src: &str, mut edits: Vec<Edit>) -> String {
    // Stable: insertions at one offset keep the order they were made in.
    edits.sort_by_key(|e| e.range.start);
    let extra: usize = edits.iter().map(|e| e.text.len()).sum();
    let mut out = String::with_capacity(src.len() + extra);
    let mut at = 0;
    for e in edits {
        out.push_str(&src[at..e.range.start.max(at)]);
        out.push_str(&e.text);
        at = at.max(e.range.end);
    }
    out.push_str(&src[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = ".version 7.0\n.target sm_52\n.address_size 64\n\n.visible .entry k(\n\t.param .u32 k_param_0\n)\n{\n\t.reg .pred %p<2>;\n\tsetp.eq.s32 %p1, %r1, 0;\n\t@%p1 ret;\n\t@!%p1 bra $L__BB0_1;\n$L__BB0_1:\n\tret;\n}\n.func f()\n{\n\tret;\n}\n";

    struct Tag;
    impl ProbeBlocks for Tag {
        fn block(&mut self, k: &PtxFunction<'_>, site: &Site, uid: u32) -> Option<String> {
            Some(format!("{{ // {} {site:?} {uid}\n}}", k.name))
        }
        fn extra_params(&mut self, _k: &PtxFunction<'_>) -> Vec<String> {
            vec![".param .u64 __bpftime_corr".into()]
        }
    }

    #[test]
    fn entry_exits_guards_header() {
        let f = parse::parse(K).unwrap();
        let m = ProbeModule {
            text: "// probe module".into(),
            min_version: (8, 0),
            min_sm: 70,
        };
        let out = splice(K, &f, &m, &mut Tag).unwrap();
        let expected = ".version 8.0\n.target sm_70\n.address_size 64\n// probe module\n\n.visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .u64 __bpftime_corr\n)\n{\n{ // k Entry 0\n}\n\n\t.reg .pred %p<2>;\n\tsetp.eq.s32 %p1, %r1, 0;\n\t@!%p1 bra $__bpftime_skip_1;\n\t{ // k Exit { index: 0, line: 11 } 1\n}\n\t@%p1 ret;\n$__bpftime_skip_1:\n\t@!%p1 bra $L__BB0_1;\n$L__BB0_1:\n\t{ // k Exit { index: 1, line: 14 } 2\n}\n\tret;\n}\n.func f()\n{\n\tret;\n}\n";
        assert_eq!(out.text, expected, "{}", out.text);
        assert_eq!(out.attached.len(), 3);
        assert_eq!(out.warnings.len(), 2);
        assert!(parse::parse(&out.text).is_ok());
    }

    struct Nothing;
    impl ProbeBlocks for Nothing {
        fn block(&mut self, _: &PtxFunction<'_>, _: &Site, _: u32) -> Option<String> {
            None
        }
    }

    #[test]
    fn nothing_changes_nothing() {
        let f = parse::parse(K).unwrap();
        let out = splice(K, &f, &ProbeModule::default(), &mut Nothing).unwrap();
        assert_eq!(out.text, K);
        assert!(out.attached.is_empty() && out.warnings.is_empty());
    }

    #[test]
    fn falling_off_the_end_is_an_exit() {
        let head = ".version 8.0\n.target sm_90\n.entry k()\n{\n\t.reg .pred %p<2>;\n";
        let cases = [
            ("\tret;\n$L__end:\n}\n", 2),
            ("\t@%p1 bra $L__x;\n\tret;\n$L__x:\n}\n", 3),
            ("\t@%p1 ret;\n}\n", 3),
            ("\tmov.u32 %r1, 0;\n}\n", 2),
            ("\texit;\n\t.loc 1 2 3\n}\n", 2),
        ];
        for (tail, sites) in cases {
            let src = format!("{head}{tail}");
            let f = parse::parse(&src).unwrap();
            let out = splice(&src, &f, &ProbeModule::default(), &mut Tag).unwrap();
            assert_eq!(out.attached.len(), sites, "{src}\n{}", out.text);
            assert!(out.text.ends_with("\n}\n}\n") == (sites == 3 || tail.contains("mov")));
        }
    }

    struct Bad;
    impl ProbeBlocks for Bad {
        fn block(&mut self, _: &PtxFunction<'_>, _: &Site, _: u32) -> Option<String> {
            Some("{ ret; } }".into())
        }
    }

    #[test]
    fn a_kernel_that_does_not_parse_is_left_alone() {
        let src = ".version 8.0\n.target sm_90\n.entry bad()\n{\n\tmov.u32 %r1, .oops;\n\tret;\n}\n.entry good()\n{\n\tret;\n}\n";
        let e = parse::parse(src).unwrap_err();
        assert_eq!(e.line, 5);
        let out = instrument(src, &ProbeModule::default(), &mut Tag).unwrap();
        assert_eq!(
            out.attached
                .iter()
                .map(|a| a.kernel.as_str())
                .collect::<Vec<_>>(),
            vec!["good", "good"]
        );
        assert_eq!(out.warnings.len(), 1);
        assert_eq!(
            (out.warnings[0].kernel.as_deref(), out.warnings[0].line),
            (Some("bad"), 5)
        );
        assert!(
            out.text
                .starts_with(&src[..src.find(".entry good").unwrap()])
        );
        // Unbalanced braces still fail the module.
        let unbalanced = src.replacen("\tret;\n}\n.entry good", "\tret;\n.entry good", 1);
        let out = instrument(&unbalanced, &ProbeModule::default(), &mut Tag).unwrap();
        assert_eq!(out.text, unbalanced);
        assert!(out.attached.is_empty());
    }

    #[test]
    fn bad_blocks_and_unparsable_modules() {
        let f = parse::parse(K).unwrap();
        let e = splice(K, &f, &ProbeModule::default(), &mut Bad).unwrap_err();
        assert!(
            matches!(
                e,
                PassError::Block {
                    site: Site::Entry,
                    ..
                }
            ),
            "{e}"
        );
        let broken = &K[..K.len() - 30];
        let out = instrument(broken, &ProbeModule::default(), &mut Tag).unwrap();
        assert_eq!(out.text, broken);
        assert_eq!(out.warnings.len(), 1);
    }
}
