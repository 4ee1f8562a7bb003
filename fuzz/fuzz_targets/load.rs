//! Fuzz target: the ELF and raw-bytecode loaders must return (Ok or Err) on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if ebpf::elf::is_elf(data) {
        if let Ok(obj) = ebpf::elf::Object::parse(data, "fuzz.o") {
            for info in &obj.programs {
                let _ = obj.program(Some(&info.name));
            }
            let _ = obj.program(None);
        }
    } else {
        let _ = ebpf::elf::load_raw(data, "fuzz.bin");
    }
});
