//! Raw bytecode: a binary file of 8-byte instruction slots, or the same bytes as hex text.
//!
//! | input                                   | read as                                   |
//! |-----------------------------------------|-------------------------------------------|
//! | valid UTF-8, no NUL, only printable/space | hex text: tokens of hex byte pairs (`b7`, `0xb7`, `b7000000`), separated by whitespace or commas; `#` starts a comment |
//! | anything else                           | binary: little-endian 8-byte slots        |
//!
//! Either way the length must be a non-zero multiple of 8 bytes.

use super::ElfError;
use crate::isa::{INSN_SIZE, Insn};
use crate::program::Program;

fn looks_like_text(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace())
}

fn parse_hex(text: &str, file: &str) -> Result<Vec<u8>, ElfError> {
    let bad = |line: usize, msg: String| ElfError::BadBytecode {
        file: file.to_string(),
        msg: format!("line {line}: {msg}"),
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let code = line.split('#').next().unwrap_or("");
        for tok in code.split(|c: char| c.is_ascii_whitespace() || c == ',') {
            if tok.is_empty() {
                continue;
            }
            let digits = tok
                .strip_prefix("0x")
                .or_else(|| tok.strip_prefix("0X"))
                .unwrap_or(tok);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(
                    line_no,
                    format!(
                        "bad hex token `{tok}`, expected hex bytes like `b7`, `0xb7` or `b7000000`"
                    ),
                ));
            }
            if digits.len() % 2 != 0 {
                return Err(bad(
                    line_no,
                    format!(
                        "hex token `{tok}` has an odd number of digits ({}), expected whole bytes",
                        digits.len()
                    ),
                ));
            }
            for pair in digits.as_bytes().chunks_exact(2) {
                let s = std::str::from_utf8(pair).unwrap_or("");
                let v = u8::from_str_radix(s, 16)
                    .map_err(|e| bad(line_no, format!("bad hex byte `{s}`: {e}")))?;
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// Loads raw bytecode: a binary file, or hex text.
///
/// The program is named after the file's stem; its `file` is `file`, its section `raw`.
pub fn load_raw(bytes: &[u8], file: &str) -> Result<Program, ElfError> {
    let text = looks_like_text(bytes);
    let owned;
    let data: &[u8] = if text {
        let s = std::str::from_utf8(bytes).unwrap_or("");
        owned = parse_hex(s, file)?;
        &owned
    } else {
        bytes
    };
    let what = if text { "hex text" } else { "binary" };
    if data.is_empty() {
        return Err(ElfError::BadBytecode {
            file: file.to_string(),
            msg: format!("{what} bytecode is empty, expected at least one 8-byte instruction"),
        });
    }
    if !data.len().is_multiple_of(INSN_SIZE) {
        return Err(ElfError::BadBytecode {
            file: file.to_string(),
            msg: format!(
                "{what} bytecode is {} bytes, not a multiple of 8 (one instruction slot); {} bytes left over",
                data.len(),
                data.len() % INSN_SIZE
            ),
        });
    }
    let insns = data
        .chunks_exact(INSN_SIZE)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            Insn::from_bytes(b)
        })
        .collect();
    let stem = std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.split('.').next().unwrap_or(n))
        .filter(|n| !n.is_empty())
        .unwrap_or(file);
    let mut p = Program::from_insns(stem, insns);
    p.file = file.to_string();
    tracing::debug!(file, insns = p.insns.len(), "loaded raw bytecode");
    Ok(p)
}
