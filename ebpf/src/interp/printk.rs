//! `bpf_trace_printk` formatting: `%d %i %u %x %X %c %s %p %%` with `h`, `hh`, `l`, `ll`,
//! `z` length modifiers, `-`/`0` flags and a width; at most three conversions, as in Linux.

/// Formats `fmt` (up to its first NUL) with `args`; `read_str` reads the NUL-terminated
/// string a `%s` argument points to. Errors (more than three conversions, an unknown
/// conversion, a bad `%s` pointer) are messages; the helper returns `-EINVAL` for the first
/// two and faults on the last.
pub fn format_printk(
    fmt: &[u8],
    args: &[u64; 3],
    mut read_str: impl FnMut(u64) -> Result<Vec<u8>, String>,
) -> Result<String, PrintkError> {
    let fmt = match fmt.iter().position(|&b| b == 0) {
        Some(p) => &fmt[..p],
        None => fmt,
    };
    let mut out = String::new();
    let mut used = 0usize;
    let mut i = 0;
    let mut lit = Vec::new();
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        if c != b'%' {
            lit.push(c);
            continue;
        }
        out.push_str(&String::from_utf8_lossy(&lit));
        lit.clear();
        let (mut left, mut zero) = (false, false);
        while i < fmt.len() && (fmt[i] == b'-' || fmt[i] == b'0') {
            if fmt[i] == b'-' {
                left = true;
            } else {
                zero = true;
            }
            i += 1;
        }
        let mut width = 0usize;
        while i < fmt.len() && fmt[i].is_ascii_digit() {
            width = (width * 10 + (fmt[i] - b'0') as usize).min(256);
            i += 1;
        }
        let mut bits = 32;
        if fmt[i..].starts_with(b"ll") {
            bits = 64;
            i += 2;
        } else if fmt[i..].starts_with(b"hh") {
            bits = 8;
            i += 2;
        } else if i < fmt.len() && (fmt[i] == b'l' || fmt[i] == b'z') {
            bits = 64;
            i += 1;
        } else if i < fmt.len() && fmt[i] == b'h' {
            bits = 16;
            i += 1;
        }
        let Some(&conv) = fmt.get(i) else {
            return Err(PrintkError::Format(
                "format ends inside a conversion".into(),
            ));
        };
        i += 1;
        if conv == b'%' {
            out.push('%');
            continue;
        }
        if used == 3 {
            return Err(PrintkError::Format(
                "more than 3 conversions in trace_printk format".into(),
            ));
        }
        let v = args[used];
        used += 1;
        let trunc_u = |v: u64| match bits {
            8 => v as u8 as u64,
            16 => v as u16 as u64,
            32 => v as u32 as u64,
            _ => v,
        };
        let trunc_s = |v: u64| match bits {
            8 => v as i8 as i64,
            16 => v as i16 as i64,
            32 => v as i32 as i64,
            _ => v as i64,
        };
        let body = match conv {
            b'd' | b'i' => trunc_s(v).to_string(),
            b'u' => trunc_u(v).to_string(),
            b'x' => format!("{:x}", trunc_u(v)),
            b'X' => format!("{:X}", trunc_u(v)),
            b'c' => (v as u8 as char).to_string(),
            b'p' => format!("0x{v:x}"),
            b's' => {
                String::from_utf8_lossy(&read_str(v).map_err(PrintkError::Memory)?).into_owned()
            }
            other => {
                return Err(PrintkError::Format(format!(
                    "unsupported conversion `%{}`",
                    other as char
                )));
            }
        };
        let n = body.chars().count();
        if n >= width {
            out.push_str(&body);
        } else if left {
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', width - n));
        } else if zero && conv != b's' && conv != b'c' {
            let (sign, digits) = match body.strip_prefix('-') {
                Some(d) => ("-", d),
                None => ("", body.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', width - n));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', width - n));
            out.push_str(&body);
        }
    }
    out.push_str(&String::from_utf8_lossy(&lit));
    Ok(out)
}

/// Why a `trace_printk` format could not be rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrintkError {
    /// A bad format string (the helper returns `-EINVAL`).
    #[error("{0}")]
    Format(String),
    /// A `%s` argument that is not a readable string (the run faults).
    #[error("{0}")]
    Memory(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(fmt: &str, args: [u64; 3]) -> Result<String, PrintkError> {
        format_printk(fmt.as_bytes(), &args, |p| {
            if p == 0x1000 {
                Ok(b"str".to_vec())
            } else {
                Err(format!("bad {p:#x}"))
            }
        })
    }

    #[test]
    fn conversions() {
        assert_eq!(
            f("a=%d b=%u c=%x\n", [-5i64 as u64, 7, 255]).unwrap(),
            "a=-5 b=7 c=ff\n"
        );
        assert_eq!(f("%d", [0xffff_ffff, 0, 0]).unwrap(), "-1");
        assert_eq!(
            f("%lld %llu", [u64::MAX, u64::MAX, 0]).unwrap(),
            "-1 18446744073709551615"
        );
        assert_eq!(
            f("%llx %lx", [0xdead_beef_0000_0001, 16, 0]).unwrap(),
            "deadbeef00000001 10"
        );
        assert_eq!(
            f("%s|%c|%%|%p", [0x1000, b'z' as u64, 0xab]).unwrap(),
            "str|z|%|0xab"
        );
        assert_eq!(
            f("[%5d][%-4u][%05d][%03x]", [42, 7, -42i64 as u64]).unwrap_err(),
            PrintkError::Format("more than 3 conversions in trace_printk format".into())
        );
        assert_eq!(
            f("[%5d][%-4u][%05d]", [42, 7, -42i64 as u64]).unwrap(),
            "[   42][7   ][-0042]"
        );
        assert_eq!(f("%hhd %hu", [0x1ff, 0x1_0002, 0]).unwrap(), "-1 2");
        assert_eq!(f("x\0ignored %d", [1, 2, 3]).unwrap(), "x");
        assert!(matches!(f("%q", [0; 3]), Err(PrintkError::Format(_))));
        assert!(matches!(f("%s", [5, 0, 0]), Err(PrintkError::Memory(_))));
        assert!(matches!(f("%", [0; 3]), Err(PrintkError::Format(_))));
    }
}
