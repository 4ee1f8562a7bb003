//! Hand-built image fixtures: minimal ELF files (cubins and host ELFs) and fat binary
//! containers, written field by field from the layouts documented in `attach::image`.

#![allow(dead_code, reason = "each test binary uses a different subset")]

/// One section of an ELF fixture.
pub struct Sec {
    pub name: String,
    pub sh_type: u32,
    pub data: Vec<u8>,
    pub link: u32,
    pub info: u32,
    pub entsize: u64,
}

impl Sec {
    pub fn progbits(name: &str, data: Vec<u8>) -> Sec {
        Sec {
            name: name.to_string(),
            sh_type: 1,
            data,
            link: 0,
            info: 0,
            entsize: 0,
        }
    }
}

/// A little-endian ELF64 with the given machine, flags, ABI version and sections
/// (a section name table is added last).
pub fn elf(machine: u16, e_flags: u32, abi_version: u8, mut secs: Vec<Sec>) -> Vec<u8> {
    let shstrndx = secs.len() + 1;
    let mut shstrtab = vec![0u8];
    let mut name_offs = Vec::new();
    for s in &secs {
        name_offs.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(s.name.as_bytes());
        shstrtab.push(0);
    }
    name_offs.push(shstrtab.len() as u32);
    shstrtab.extend_from_slice(b".shstrtab\0");
    secs.push(Sec {
        name: ".shstrtab".into(),
        sh_type: 3,
        data: shstrtab,
        link: 0,
        info: 0,
        entsize: 0,
    });

    let mut out = vec![0u8; 64];
    let mut offs = Vec::new();
    for s in &secs {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        offs.push(out.len() as u64);
        out.extend_from_slice(&s.data);
    }
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    let shoff = out.len() as u64;
    out.extend_from_slice(&[0u8; 64]); // null section
    for (i, s) in secs.iter().enumerate() {
        let mut sh = Vec::with_capacity(64);
        sh.extend_from_slice(&name_offs[i].to_le_bytes());
        sh.extend_from_slice(&s.sh_type.to_le_bytes());
        sh.extend_from_slice(&0u64.to_le_bytes()); // flags
        sh.extend_from_slice(&0u64.to_le_bytes()); // addr
        sh.extend_from_slice(&offs[i].to_le_bytes());
        sh.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
        sh.extend_from_slice(&s.link.to_le_bytes());
        sh.extend_from_slice(&s.info.to_le_bytes());
        sh.extend_from_slice(&8u64.to_le_bytes()); // addralign
        sh.extend_from_slice(&s.entsize.to_le_bytes());
        out.extend_from_slice(&sh);
    }
    let h = &mut out[..64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // little-endian
    h[6] = 1; // EV_CURRENT
    h[7] = 0x33; // ELFOSABI_CUDA (ignored for host ELFs)
    h[8] = abi_version;
    h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    h[0x30..0x34].copy_from_slice(&e_flags.to_le_bytes());
    h[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[0x3c..0x3e].copy_from_slice(&((secs.len() + 1) as u16).to_le_bytes());
    h[0x3e..0x40].copy_from_slice(&(shstrndx as u16).to_le_bytes());
    out
}

/// The `e_flags` nvcc writes for `sm` under ELF ABI version `abi`.
pub fn cuda_flags(sm: u32, abi: u8) -> u32 {
    if abi == 7 {
        sm | (sm << 16) | 0x400
    } else {
        (sm << 8) | 0x0600_0000 | 0x4
    }
}

/// A cubin for `sm` with kernels (marked `STO_CUDA_ENTRY` when `entry_bit`, else only by
/// their `.nv.info.<name>` section) and device functions (with a `.nv.info.<name>` of their
/// own when `entry_bit`).
pub fn cubin(sm: u32, abi: u8, kernels: &[&str], device_fns: &[&str], entry_bit: bool) -> Vec<u8> {
    // Section indices: 1 .strtab, 2 .symtab, then the code sections.
    let mut secs = vec![];
    let mut strtab = vec![0u8];
    let mut syms = vec![0u8; 24];
    let mut code = Vec::new();
    let funcs = kernels
        .iter()
        .map(|k| (*k, true))
        .chain(device_fns.iter().map(|d| (*d, false)));
    for (name, is_kernel) in funcs {
        let shndx = 3 + code.len() as u16;
        code.push(Sec::progbits(&format!(".text.{name}"), vec![0xAB; 32]));
        // Kernels without the entry bit are known by their `.nv.info.<name>`; with it,
        // device functions get one too, as relocatable device code may.
        if is_kernel != entry_bit {
            code.push(Sec::progbits(
                &format!(".nv.info.{name}"),
                vec![4, 0x0a, 8, 0],
            ));
        }
        let st_name = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        syms.extend_from_slice(&st_name.to_le_bytes());
        syms.push(0x12); // STB_GLOBAL, STT_FUNC
        syms.push(if is_kernel && entry_bit { 0x10 } else { 0 });
        syms.extend_from_slice(&shndx.to_le_bytes());
        syms.extend_from_slice(&0u64.to_le_bytes());
        syms.extend_from_slice(&32u64.to_le_bytes());
    }
    // A data object that must not be taken for a function.
    let st_name = strtab.len() as u32;
    strtab.extend_from_slice(b"some_global\0");
    syms.extend_from_slice(&st_name.to_le_bytes());
    syms.push(0x11); // STB_GLOBAL, STT_OBJECT
    syms.push(0);
    syms.extend_from_slice(&3u16.to_le_bytes());
    syms.extend_from_slice(&[0; 16]);
    secs.push(Sec {
        name: ".strtab".into(),
        sh_type: 3,
        data: strtab,
        link: 0,
        info: 0,
        entsize: 0,
    });
    secs.push(Sec {
        name: ".symtab".into(),
        sh_type: 2,
        data: syms,
        link: 1,
        info: 1,
        entsize: 24,
    });
    secs.extend(code);
    elf(190, cuda_flags(sm, abi), abi, secs)
}

/// A host x86-64 ELF with extra sections.
pub fn host_elf(extra: Vec<Sec>) -> Vec<u8> {
    let mut secs = vec![Sec::progbits(".text", vec![0xc3; 16])];
    secs.extend(extra);
    elf(62, 0, 0, secs)
}

/// How a fixture entry stores its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Plain,
    Lz4,
    Zstd,
}

/// Entry kinds.
pub const PTX: u16 = 1;
pub const ELF: u16 = 2;

/// One fat binary entry: header (with identifier and options strings when given),
/// payload stored as asked, padded to 8 bytes.
pub fn entry(
    kind: u16,
    sm: u32,
    payload: &[u8],
    store: Store,
    ident: Option<&str>,
    options: Option<&str>,
) -> Vec<u8> {
    let mut tail = Vec::new(); // bytes after the fixed 64-byte header
    let mut options_off = 0u32;
    if let Some(o) = options {
        options_off = 64;
        let str_off = 64 + 8;
        tail.extend_from_slice(&(str_off as u32).to_le_bytes());
        tail.extend_from_slice(&(o.len() as u32).to_le_bytes());
        tail.extend_from_slice(o.as_bytes());
    }
    let (mut ident_off, mut ident_len) = (0u32, 0u32);
    if let Some(i) = ident {
        ident_off = 64 + tail.len() as u32;
        ident_len = i.len() as u32 + 1;
        tail.extend_from_slice(i.as_bytes());
        tail.push(0);
    }
    while !tail.len().is_multiple_of(8) {
        tail.push(0);
    }
    let header_size = 64 + tail.len() as u32;
    let (stored, flags_c, compressed_size, decompressed) = match store {
        Store::Plain => (payload.to_vec(), 0u64, 0u32, 0u64),
        Store::Lz4 => {
            let c = lz4_flex::block::compress(payload);
            let n = c.len() as u32;
            (c, 0x2000, n, payload.len() as u64)
        }
        Store::Zstd => {
            let c = ruzstd::encoding::compress_to_vec(
                payload,
                ruzstd::encoding::CompressionLevel::Fastest,
            );
            let n = c.len() as u32;
            (c, 0x8000, n, payload.len() as u64)
        }
    };
    let mut padded = stored;
    while !padded.len().is_multiple_of(8) {
        padded.push(0);
    }
    let mut h = Vec::with_capacity(header_size as usize);
    h.extend_from_slice(&kind.to_le_bytes());
    h.extend_from_slice(&0x0101u16.to_le_bytes());
    h.extend_from_slice(&header_size.to_le_bytes());
    h.extend_from_slice(&(padded.len() as u64).to_le_bytes());
    h.extend_from_slice(&compressed_size.to_le_bytes());
    h.extend_from_slice(&options_off.to_le_bytes());
    let (major, minor) = if kind == PTX { (8u16, 0u16) } else { (1, 7) };
    h.extend_from_slice(&minor.to_le_bytes());
    h.extend_from_slice(&major.to_le_bytes());
    h.extend_from_slice(&sm.to_le_bytes());
    h.extend_from_slice(&ident_off.to_le_bytes());
    h.extend_from_slice(&ident_len.to_le_bytes());
    h.extend_from_slice(&(0x1 | 0x4 | 0x10 | flags_c).to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    h.extend_from_slice(&decompressed.to_le_bytes());
    h.extend_from_slice(&tail);
    h.extend_from_slice(&padded);
    h
}

/// A fat binary container around `entries`.
pub fn container(entries: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = entries.concat();
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// PTX text for `sm` with one kernel.
pub fn ptx(sm: u32, kernel: &str) -> String {
    format!(
        "//\n// Generated by a test\n//\n\n.version 8.0\n.target sm_{sm}\n.address_size 64\n\n\
         .visible .entry {kernel}(\n\t.param .u64 p\n)\n{{\n\tret;\n}}\n"
    )
}

/// A fat binary with PTX for 70 and 80 and cubins for 80 and 90, payloads stored as asked.
pub fn sample_fatbin(store: Store) -> Vec<u8> {
    container(&[
        entry(
            ELF,
            80,
            &cubin(80, 7, &["_Z4kernPf"], &[], true),
            store,
            Some("a.cu"),
            None,
        ),
        entry(
            ELF,
            90,
            &cubin(90, 8, &["_Z4kernPf"], &["_Z3devv"], true),
            store,
            None,
            None,
        ),
        entry(
            PTX,
            70,
            ptx(70, "_Z4kernPf").as_bytes(),
            store,
            Some("a.cu"),
            Some("-O3"),
        ),
        entry(PTX, 80, ptx(80, "_Z4kernPf").as_bytes(), store, None, None),
    ])
}
