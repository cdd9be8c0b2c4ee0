//! This host's NVIDIA driver as a manifest records it: the kernel module's
//! version (`/proc/driver/nvidia/version`) and the CUDA driver API version
//! (`cuDriverGetVersion`, no `cuInit`).

use std::path::Path;

use crate::driver::Driver;

use super::manifest::{kernel_module_version, ManifestDriver};

/// Where the kernel module says its version.
const VERSION_FILE: &str = "/proc/driver/nvidia/version";

/// The driver's facts on this host; what cannot be read is `None`.
pub fn facts(libcuda: Option<&Path>) -> ManifestDriver {
    let kernel_module = crate::files::read_capped(Path::new(VERSION_FILE), 64 * 1024)
        .ok()
        .and_then(|text| kernel_module_version(&text));
    let cuda = Driver::load(libcuda)
        .ok()
        .and_then(|driver| driver.version().ok())
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    ManifestDriver {
        kernel_module,
        cuda,
    }
}

/// Why the images cannot be restored with this host's driver, if they
/// cannot (pure): a kernel module that differs from the dump's. Unknown on
/// either side is no refusal (the caller says it was not checked).
pub fn mismatch(dumped: &ManifestDriver, here: &ManifestDriver) -> Option<String> {
    match (&dumped.kernel_module, &here.kernel_module) {
        (Some(then), Some(now)) if then != now => Some(format!(
            "the images were dumped under NVIDIA driver {then}, and this host runs {now}: the driver restores only what its own version checkpointed"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(version: Option<&str>) -> ManifestDriver {
        ManifestDriver {
            kernel_module: version.map(str::to_string),
            cuda: None,
        }
    }

    #[test]
    fn only_a_known_different_driver_is_a_mismatch() {
        assert_eq!(
            mismatch(&driver(Some("580.159.04")), &driver(Some("580.159.04"))),
            None
        );
        assert!(
            mismatch(&driver(Some("580.159.04")), &driver(Some("575.57.08")))
                .unwrap()
                .contains("this host runs 575.57.08")
        );
        assert_eq!(mismatch(&driver(None), &driver(Some("575.57.08"))), None);
    }
}
