//! PTX text as the driver receives it: NUL-terminated, beginning (after whitespace and
//! `//` or `/* */` comments) with the `.version` directive.

/// Whether `b` can open a PTX image: whitespace, a comment's `/`, or `.version`'s `.`.
/// No binary image kind starts with one of these bytes.
pub(crate) fn is_ptx_start(b: u8) -> bool {
    b.is_ascii_whitespace() || b == b'/' || b == b'.'
}

/// The text part of a PTX image: everything before the first NUL.
pub(crate) fn text(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..n]
}

/// Whether `bytes` is PTX: after whitespace and comments, the first token is `.version`.
pub(crate) fn looks_like_ptx(bytes: &[u8]) -> bool {
    let mut s = text(bytes);
    loop {
        s = s.trim_ascii_start();
        if let Some(rest) = s.strip_prefix(b"//") {
            let n = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            s = &rest[n..];
        } else if let Some(rest) = s.strip_prefix(b"/*") {
            match rest.windows(2).position(|w| w == b"*/") {
                Some(n) => s = &rest[n + 2..],
                None => return false,
            }
        } else {
            return s
                .strip_prefix(b".version")
                .is_some_and(|rest| rest.first().is_some_and(u8::is_ascii_whitespace));
        }
    }
}

/// The architecture of a PTX module's `.target` directive (`sm_80`, `compute_90a` → 80,
/// 90), if it has one.
pub fn ptx_target_sm(text: &str) -> Option<u32> {
    text.lines()
        .map(str::trim_start)
        .find_map(|l| l.strip_prefix(".target"))?
        .split(|c: char| c == ',' || c.is_whitespace())
        .find_map(|t| {
            let digits = t
                .strip_prefix("sm_")
                .or_else(|| t.strip_prefix("compute_"))?;
            let end = digits
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(digits.len());
            digits[..end].parse().ok()
        })
}
