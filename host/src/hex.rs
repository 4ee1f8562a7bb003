//! Hex encoding of byte strings, as the CLI and the control protocol write them.

/// Lowercase hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Bytes from hex text; whitespace, `_` and `:` separators and a leading `0x` are ignored.
pub fn decode(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s
        .trim()
        .trim_start_matches("0x")
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'_' && *c != b':')
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "odd number of hex digits ({}): expected pairs like `01ff`",
            digits.len()
        ));
    }
    digits
        .chunks(2)
        .enumerate()
        .map(|(i, pair)| {
            let text = std::str::from_utf8(pair).unwrap_or("??");
            u8::from_str_radix(text, 16).map_err(|_| format!("bad hex byte `{text}` at byte {i}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn roundtrip_and_errors() {
        assert_eq!(super::encode(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(super::decode("00 ab:10").unwrap(), vec![0, 0xab, 0x10]);
        assert_eq!(super::decode("0x0a0b").unwrap(), vec![10, 11]);
        assert!(super::decode("abc").is_err());
        assert!(super::decode("zz").is_err());
    }
}
