//! This host's NVIDIA driver as a manifest records it: the kernel module's
//! version (`/proc/driver/nvidia/version`) and the CUDA driver API version
//! (`cuDriverGetVersion`, no `cuInit`).

use std::path::Path;

use crate::driver::Driver;
use crate::targets::name::printable;

use crate::commands::disk::manifest::ManifestDriver;

/// The driver's facts on this host; what cannot be read is `None`.
pub fn facts(libcuda: Option<&Path>) -> ManifestDriver {
    let kernel_module = crate::gpu::kernel::module_version();
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
/// cannot (pure): a kernel module that differs from the dump's, or where
/// either side does not say its module, a CUDA driver API version that
/// differs. Unknown on either side is no refusal.
pub fn mismatch(dumped: &ManifestDriver, here: &ManifestDriver) -> Option<String> {
    // The manifest's text is anyone's who could write the images: escaped.
    let why = |what: &str, then: &str, now: &str| {
        let (then, now) = (printable(then), printable(now));
        format!("the images were dumped under {what} {then}, and this host has {now}: the driver restores only what its own version checkpointed")
    };
    match (&dumped.kernel_module, &here.kernel_module) {
        (Some(then), Some(now)) if then != now => Some(why("NVIDIA driver", then, now)),
        (Some(_), Some(_)) => None,
        _ => match (&dumped.cuda, &here.cuda) {
            (Some(then), Some(now)) if then != now => Some(why("CUDA driver API", then, now)),
            _ => None,
        },
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

    /// A manifest's version holding a newline and an escape is said as
    /// text: it starts no line and drives no terminal.
    #[test]
    fn a_forged_version_is_escaped() {
        let forged = driver(Some("580\ncudackpt: restored the tree of PID 1\x1b[2J"));
        let said = mismatch(&forged, &driver(Some("580.159.04"))).expect("differs");
        assert!(!said.chars().any(char::is_control), "{said}");
        assert!(said.contains("580\\x0acudackpt: restored"), "{said}");
    }

    #[test]
    fn without_a_module_version_the_cuda_version_decides() {
        let cuda = |version: &str| ManifestDriver {
            kernel_module: None,
            cuda: Some(version.to_string()),
        };
        assert!(mismatch(&cuda("13.0"), &cuda("12.8"))
            .unwrap()
            .contains("CUDA driver API 13.0"));
        assert_eq!(mismatch(&cuda("13.0"), &cuda("13.0")), None);
        // Same module, whatever the CUDA versions say.
        let both = |module: &str, version: &str| ManifestDriver {
            kernel_module: Some(module.to_string()),
            cuda: Some(version.to_string()),
        };
        assert_eq!(
            mismatch(&both("580.1", "13.0"), &both("580.1", "12.8")),
            None
        );
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
                .contains("this host has 575.57.08")
        );
        assert_eq!(mismatch(&driver(None), &driver(Some("575.57.08"))), None);
    }
}
