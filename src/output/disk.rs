//! `dump` and `undump` for people: what was written or restored, the
//! options CRIU was given and why, CRIU's errors when it failed (the JSON
//! document is in `json`).

use std::time::Duration;

use super::look::Look;
use super::stderr;
use crate::commands::disk::report::DiskReport;

/// (stdout, stderr) for people.
pub fn human(report: &DiskReport, _look: Look) -> (String, String) {
    let mut err: String = report
        .remarks
        .iter()
        .map(|r| stderr::warning_line(r))
        .collect();
    if let Some(failure) = &report.failure {
        err.push_str(&stderr::error_lines(&failure.message, Some(&failure.hint)));
        for line in &report.criu_errors {
            err.push_str(&format!("  {line}\n"));
        }
        return (String::new(), err);
    }
    let seconds = report.elapsed_ms / 1e3;
    let out = match (report.command, &report.manifest) {
        ("dump", Some(manifest)) => format!(
            "dumped the tree of PID {} ({} process{}) to {} in {seconds:.1} s: {} MiB of images{}\n",
            manifest.root_pid,
            manifest.processes.len(),
            if manifest.processes.len() == 1 { "" } else { "es" },
            crate::targets::name::printable_path(&report.images_dir),
            manifest.image_bytes >> 20,
            if manifest.leave_running {
                "; a complete snapshot (its manifest says so), and the job goes on running"
            } else {
                ""
            },
        ),
        _ => {
            let moved: Vec<String> = report.gpu_map.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
            format!(
                "restored the tree of PID {} from {} in {seconds:.1} s{}\n",
                report.restored_root.unwrap_or_default(),
                crate::targets::name::printable_path(&report.images_dir),
                if moved.is_empty() { String::new() } else { format!(", onto other GPUs: {}", moved.join(", ")) }
            )
        }
    };
    (out, err)
}

/// A progress line while CRIU runs (pure).
pub fn progress_line(
    command: &str,
    verb: &str,
    bytes: u64,
    expected: u64,
    elapsed: Duration,
) -> String {
    let mib = |b: u64| b >> 20;
    let amount = if bytes == 0 {
        String::new()
    } else if expected > 0 {
        format!(": {} of about {} MiB {verb}", mib(bytes), mib(expected))
    } else {
        format!(": {} MiB {verb}", mib(bytes))
    };
    stderr::line(&format!(
        "{command} running for {} s{amount}",
        elapsed.as_secs()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_bytes_against_the_expected_size() {
        let line = progress_line(
            "dump",
            "written",
            300 << 20,
            1 << 30,
            Duration::from_secs(4),
        );
        assert_eq!(
            line,
            "cudackpt: dump running for 4 s: 300 of about 1024 MiB written\n"
        );
        let quiet = progress_line("undump", "read", 0, 0, Duration::from_secs(2));
        assert_eq!(quiet, "cudackpt: undump running for 2 s\n");
    }
}
