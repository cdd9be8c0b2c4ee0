//! `CUresult` values used by the fake, and the names and descriptions that
//! `cuGetErrorName` / `cuGetErrorString` return (the real driver's wording).

use std::ffi::CStr;

pub const CUDA_SUCCESS: i32 = 0;
pub const CUDA_ERROR_INVALID_VALUE: i32 = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: i32 = 3;
pub const CUDA_ERROR_NO_DEVICE: i32 = 100;
pub const CUDA_ERROR_INVALID_DEVICE: i32 = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: i32 = 201;
pub const CUDA_ERROR_OPERATING_SYSTEM: i32 = 304;
pub const CUDA_ERROR_ILLEGAL_STATE: i32 = 401;
pub const CUDA_ERROR_NOT_READY: i32 = 600;
pub const CUDA_ERROR_UNKNOWN: i32 = 999;

/// `(code, name, description)` for every code the fake can name.
const TABLE: &[(i32, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        34,
        c"CUDA_ERROR_STUB_LIBRARY",
        c"CUDA driver is a stub library",
    ),
    (
        46,
        c"CUDA_ERROR_DEVICE_UNAVAILABLE",
        c"CUDA-capable device(s) is/are busy or unavailable",
    ),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        304,
        c"CUDA_ERROR_OPERATING_SYSTEM",
        c"OS call failed or operation not supported on this OS",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        401,
        c"CUDA_ERROR_ILLEGAL_STATE",
        c"the operation cannot be performed in the present state",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// The symbolic name of `code`, e.g. `CUDA_ERROR_ILLEGAL_STATE`.
pub fn name(code: i32) -> Option<&'static CStr> {
    TABLE.iter().find(|e| e.0 == code).map(|e| e.1)
}

/// The driver's one-line description of `code`.
pub fn description(code: i32) -> Option<&'static CStr> {
    TABLE.iter().find(|e| e.0 == code).map(|e| e.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_the_readme_lists_has_a_name() {
        for code in [0, 1, 2, 3, 100, 101, 304, 401, 600, 700, 800, 801, 999] {
            assert!(name(code).is_some(), "{code}");
            assert!(description(code).is_some(), "{code}");
        }
        assert_eq!(name(401), Some(c"CUDA_ERROR_ILLEGAL_STATE"));
        assert_eq!(name(12345), None);
    }
}
