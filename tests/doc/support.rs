// What the library's doctests run against, included by each one: the fake
// libcuda (tests/fixtures/fake-libcuda), with its state in a directory of the
// doctest's own, and throwaway CUDA processes that die with the doctest.
// Not a test target (cargo finds tests only at the top of tests/).

#[allow(dead_code)]
struct Fake {
    library: std::path::PathBuf,
    first: Spawned,
    _state: tempfile::TempDir,
}

/// A process that maps the fake, killed and reaped when dropped.
#[allow(dead_code)]
struct Spawned(std::process::Child);

#[allow(dead_code)]
impl Spawned {
    fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).expect("a PID fits an i32")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[allow(dead_code)]
impl Fake {
    /// Builds the fake (once: `$FAKE_LIBCUDA` names a built one), gives it
    /// a state directory of its own, and starts one CUDA process.
    fn start() -> Fake {
        let library = match std::env::var_os("FAKE_LIBCUDA") {
            Some(path) => std::path::PathBuf::from(path),
            None => Fake::build(),
        };
        let state = tempfile::tempdir().expect("a state directory");
        std::env::set_var("FAKE_CUDA_STATE_DIR", state.path());
        // cudackpt's own files (per-PID locks, checkpoint records) too.
        std::env::set_var("CUDACKPT_LOCK_DIR", state.path().join("locks"));
        std::env::set_var("CUDACKPT_RECORD_DIR", state.path().join("records"));
        let first = Fake::spawn_with(&library);
        Fake {
            library,
            first,
            _state: state,
        }
    }

    fn build() -> std::path::PathBuf {
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let target_dir = workspace.join("target").join("fake-libcuda");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--quiet", "-p", "fake-libcuda", "--target-dir"])
            .arg(&target_dir)
            .current_dir(workspace)
            .stdin(std::process::Stdio::null())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the fake libcuda failed");
        target_dir.join("debug").join("libfake_libcuda.so")
    }

    fn spawn_with(library: &std::path::Path) -> Spawned {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .env("LD_PRELOAD", library)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("sleep starts");
        let spawned = Spawned(child);
        // A CUDA process, to the fake, is one that maps it.
        let maps = format!("/proc/{}/maps", spawned.pid());
        let name = library.file_name().expect("a file name").to_string_lossy();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&maps).is_ok_and(|text| text.contains(&*name)) {
            assert!(std::time::Instant::now() < until, "the fake never loaded");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        spawned
    }

    /// Another CUDA process.
    fn spawn(&self) -> Spawned {
        Fake::spawn_with(&self.library)
    }

    fn libcuda(&self) -> Option<&std::path::Path> {
        Some(&self.library)
    }

    fn path(&self) -> &std::path::Path {
        &self.library
    }

    fn pid(&self) -> i32 {
        self.first.pid()
    }
}
