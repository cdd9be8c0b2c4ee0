//! Lists of processes as a sentence says them, not as Rust prints a
//! vector: `PID 7`, `PIDs 7 and 9`, `PIDs 7, 9 and 12`, and the pronoun
//! that agrees with them.

/// `PID 7`, `PIDs 7 and 9`, `PIDs 7, 9 and 12`; `no PID` for none (pure).
pub fn pids(pids: &[i32]) -> String {
    match pids {
        [] => "no PID".to_string(),
        [one] => format!("PID {one}"),
        _ => format!("PIDs {}", and_list(pids)),
    }
}

/// `7`, `7 and 9`, `7, 9 and 12` (pure).
pub fn and_list(items: &[impl std::fmt::Display]) -> String {
    let words: Vec<String> = items.iter().map(ToString::to_string).collect();
    match words.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// `1 process`, `16 processes`: a count with its noun (pure).
pub fn count(n: usize, one: &str, more: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { more })
}

/// `its` for one, `their` for more (pure).
pub fn their(count: usize) -> &'static str {
    if count == 1 {
        "its"
    } else {
        "their"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_sentences() {
        assert_eq!(pids(&[]), "no PID");
        assert_eq!(pids(&[7]), "PID 7");
        assert_eq!(pids(&[7, 9]), "PIDs 7 and 9");
        assert_eq!(pids(&[7, 9, 12]), "PIDs 7, 9 and 12");
        assert_eq!(and_list(&["a"]), "a");
        assert_eq!((their(1), their(2)), ("its", "their"));
        assert_eq!(count(1, "process", "processes"), "1 process");
        assert_eq!(count(0, "process", "processes"), "0 processes");
    }
}
