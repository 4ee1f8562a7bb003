//! The one module that calls the CUDA driver API (through cudarc's dynamically loaded
//! bindings). Each function checks for `libcuda` first.

use super::DeviceError;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Whether `libcuda` can be loaded here.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to dlopen the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

fn check(call: &'static str, r: sys::CUresult) -> Result<(), DeviceError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DeviceError::Call {
            call,
            code: format!("{r:?}"),
            log: String::new(),
        })
    }
}

/// Initializes the driver and makes device `ordinal`'s primary context current.
fn context(ordinal: i32) -> Result<sys::CUdevice, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    let mut dev: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the library is present (checked); the out-pointers are valid locals.
    unsafe {
        check("cuInit", sys::cuInit(0))?;
        check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
        check(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
        )?;
        check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
    }
    Ok(dev)
}

/// The compute capability of device `ordinal` as an `sm_XX` number (90 for an H100).
pub fn device_sm(ordinal: i32) -> Result<u32, DeviceError> {
    let dev = context(ordinal)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: a context is current; the out-pointers are valid locals.
    unsafe {
        check(
            "cuDeviceGetAttribute",
            sys::cuDeviceGetAttribute(
                &mut major,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                dev,
            ),
        )?;
        check(
            "cuDeviceGetAttribute",
            sys::cuDeviceGetAttribute(
                &mut minor,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                dev,
            ),
        )?;
    }
    Ok(major as u32 * 10 + minor as u32)
}

/// Compiles PTX to a cubin for the current device with the driver's JIT linker.
pub fn ptx_to_cubin(ptx: &str, ordinal: i32) -> Result<Vec<u8>, DeviceError> {
    context(ordinal)?;
    let mut src = ptx.as_bytes().to_vec();
    src.push(0);
    let mut log = vec![0u8; 16 << 10];
    let mut opts = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    let name = c"bpftime.ptx";
    let with_log = |call: &'static str, r: sys::CUresult, log: &[u8]| {
        check(call, r).map_err(|e| match e {
            DeviceError::Call { call, code, .. } => DeviceError::Call {
                call,
                code,
                log: String::from_utf8_lossy(log.split(|b| *b == 0).next().unwrap_or(&[]))
                    .into_owned(),
            },
            other => other,
        })
    };
    // SAFETY: a context is current; option arrays, the NUL-terminated source and the log
    // buffer outlive the link state, which is destroyed before returning; the cubin is
    // copied out before `cuLinkDestroy` frees it.
    unsafe {
        check(
            "cuLinkCreate",
            sys::cuLinkCreate_v2(2, opts.as_mut_ptr(), vals.as_mut_ptr(), &mut state),
        )?;
        let r = sys::cuLinkAddData_v2(
            state,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            src.as_mut_ptr() as *mut c_void,
            src.len(),
            name.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        if let Err(e) = with_log("cuLinkAddData", r, &log) {
            sys::cuLinkDestroy(state);
            return Err(e);
        }
        let mut cubin: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let r = sys::cuLinkComplete(state, &mut cubin, &mut size);
        if let Err(e) = with_log("cuLinkComplete", r, &log) {
            sys::cuLinkDestroy(state);
            return Err(e);
        }
        let out = std::slice::from_raw_parts(cubin as *const u8, size).to_vec();
        sys::cuLinkDestroy(state);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        if driver_present() {
            return; // a GPU machine: covered by the GPU runs
        }
        assert_eq!(device_sm(0), Err(DeviceError::NoDriver));
        assert_eq!(ptx_to_cubin(".version 8.0", 0), Err(DeviceError::NoDriver));
    }
}
