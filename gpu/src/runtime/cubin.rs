//! What a cubin (the ELF image of one GPU architecture's machine code) must hold before the
//! driver is handed it, and the functions it defines.
//!
//! `cuModuleLoadData` takes a bare pointer and trusts the ELF's own offsets, so an image cut
//! short or overwritten could make it read past the buffer. [`check`] reads the ELF header and
//! every section and segment table it points to, and fails unless each lies inside the bytes.

/// The `e_machine` of NVIDIA GPU code.
const EM_CUDA: u16 = 190;
/// Section types: a symbol table; a section that takes no file bytes.
const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
/// A symbol's type (the low nibble of `st_info`): a function.
const STT_FUNC: u8 = 2;
/// Sizes of ELF64's header, section header, program header and symbol.
const EHDR: usize = 64;
const SHDR: usize = 64;
const PHDR: usize = 56;
const SYM: usize = 24;

/// Fails, naming what is wrong, unless `bytes` is a 64-bit little-endian CUDA ELF whose section
/// and segment tables, sections and segments all lie inside `bytes`.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    sections(bytes).map(|_| ())
}

/// The names of the functions the cubin defines (kernel entries among them).
pub fn functions(bytes: &[u8]) -> Result<Vec<String>, String> {
    let sections = sections(bytes)?;
    let mut names = Vec::new();
    for symtab in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let strtab = sections.get(symtab.link as usize).ok_or("a symbol table links to no string table")?;
        let strings = &bytes[strtab.range()];
        for sym in bytes[symtab.range()].chunks_exact(SYM) {
            if sym[4] & 0xf != STT_FUNC {
                continue;
            }
            let start = u32_at(sym, 0)? as usize;
            let name = strings.get(start..).ok_or("a symbol's name lies past its string table")?;
            let end = name.iter().position(|&b| b == 0).ok_or("a symbol's name is not terminated")?;
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    Ok(names)
}

/// One section's place in the file.
struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
}

impl Section {
    fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.size
    }
}

fn sections(bytes: &[u8]) -> Result<Vec<Section>, String> {
    if bytes.len() < EHDR || bytes[..4] != *b"\x7fELF" {
        return Err(format!("not an ELF image ({} bytes)", bytes.len()));
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let machine = u16_at(bytes, 18)?;
    if machine != EM_CUDA {
        return Err(format!("ELF machine {machine}, not CUDA's {EM_CUDA}"));
    }
    let phoff = u64_at(bytes, 0x20)?;
    let (phentsize, phnum) = (u16_at(bytes, 0x36)? as usize, u16_at(bytes, 0x38)? as usize);
    let shoff = u64_at(bytes, 0x28)?;
    let (shentsize, shnum) = (u16_at(bytes, 0x3a)? as usize, u16_at(bytes, 0x3c)? as usize);
    if (phnum > 0 && phentsize < PHDR) || (shnum > 0 && shentsize < SHDR) {
        return Err(format!("table entries of {phentsize} and {shentsize} bytes are too small"));
    }
    let within = |offset: u64, len: u64, what: &str| match offset.checked_add(len) {
        Some(end) if end <= bytes.len() as u64 => Ok(offset as usize),
        _ => Err(format!("{what} ({len} bytes at {offset}) lies past the image's {} bytes", bytes.len())),
    };
    within(phoff, (phentsize * phnum) as u64, "the program header table")?;
    within(shoff, (shentsize * shnum) as u64, "the section header table")?;
    for i in 0..phnum {
        let ph = phoff as usize + i * phentsize;
        within(u64_at(bytes, ph + 8)?, u64_at(bytes, ph + 32)?, &format!("segment {i}"))?;
    }
    let mut sections = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let sh = shoff as usize + i * shentsize;
        let kind = u32_at(bytes, sh + 4)?;
        let (offset, size) = (u64_at(bytes, sh + 24)?, u64_at(bytes, sh + 32)?);
        let link = u32_at(bytes, sh + 40)?;
        if kind == SHT_NOBITS {
            sections.push(Section { kind, offset: 0, size: 0, link });
            continue;
        }
        let offset = within(offset, size, &format!("section {i}"))?;
        sections.push(Section { kind, offset, size: size as usize, link });
    }
    Ok(sections)
}

fn field<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], String> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("a {N}-byte field at {at} lies past {} bytes", bytes.len()))
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, String> {
    field(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, String> {
    field(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, String> {
    field(bytes, at).map(u64::from_le_bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal CUDA ELF: header, a string table, a symbol table with one function `k` and one
    /// object `o`, and the section header table (null, .strtab, .symtab).
    pub(crate) fn tiny_cubin() -> Vec<u8> {
        let strtab = b"\0k\0o\0".to_vec();
        let mut symtab = vec![0u8; SYM * 3];
        symtab[SYM..SYM + 4].copy_from_slice(&1u32.to_le_bytes());
        symtab[SYM + 4] = STT_FUNC;
        symtab[2 * SYM..2 * SYM + 4].copy_from_slice(&3u32.to_le_bytes());
        symtab[2 * SYM + 4] = 1;
        let strtab_at = EHDR;
        let symtab_at = strtab_at + strtab.len();
        let shoff = symtab_at + symtab.len();
        let mut out = vec![0u8; EHDR];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2;
        out[5] = 1;
        out[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        out[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&(SHDR as u16).to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        out.extend(&strtab);
        out.extend(&symtab);
        let header = |kind: u32, offset: usize, size: usize, link: u32| {
            let mut h = vec![0u8; SHDR];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h
        };
        out.extend(header(0, 0, 0, 0));
        out.extend(header(3, strtab_at, strtab.len(), 0));
        out.extend(header(SHT_SYMTAB, symtab_at, symtab.len(), 1));
        out
    }

    #[test]
    fn the_functions_of_a_cubin_are_its_function_symbols() {
        let cubin = tiny_cubin();
        check(&cubin).unwrap();
        assert_eq!(functions(&cubin).unwrap(), vec!["k".to_string()]);
    }

    #[test]
    fn a_cut_or_foreign_image_is_refused_by_what_is_wrong() {
        let cubin = tiny_cubin();
        for (bytes, needle) in [
            (cubin[..cubin.len() - 1].to_vec(), "the section header table"),
            (cubin[..40].to_vec(), "not an ELF image (40 bytes)"),
            (b"//\n// Generated by NVIDIA NVVM Compiler".to_vec(), "not an ELF image"),
        ] {
            let err = check(&bytes).unwrap_err();
            assert!(err.contains(needle), "expected `{needle}` in: {err}");
        }
        let mut x86 = cubin.clone();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(check(&x86).unwrap_err().contains("ELF machine 62"));
        let mut far = cubin.clone();
        let symtab_header = far.len() - SHDR;
        far[symtab_header + 24..symtab_header + 32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&far).unwrap_err().contains("section 2"), "an offset that overflows is refused");
    }
}
