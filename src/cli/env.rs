//! The yes-or-no environment variables of the modes that take no flags
//! (NVIDIA's grammar, CRIU's action script): one reading for all of them,
//! so `CUDACKPT_YES=true` confirms as `CUDACKPT_FORCE=true` forces.

/// Whether a yes-or-no value says yes: `1`, `true`, `yes` or `on` (pure).
pub fn says_yes(value: &str) -> bool {
    matches!(value, "1" | "true" | "yes" | "on")
}

/// Whether the variable `name` is set and says yes.
pub fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| says_yes(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_is_said_four_ways_and_anything_else_is_no() {
        for yes in ["1", "true", "yes", "on"] {
            assert!(says_yes(yes), "{yes}");
        }
        for no in ["0", "", "false", "no", "off", "YES ", "2"] {
            assert!(!says_yes(no), "{no:?}");
        }
    }
}
