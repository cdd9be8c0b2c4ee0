//! The Python client's first example (`clients/python/examples/train_cpu.py`)
//! as its README runs it, with no GPU: two gloo ranks under torchrun, the
//! fake driver preloaded as the stand-in for libcuda; `suspend --drain
//! --tree` of torchrun's agent drains both ranks and checkpoints the tree,
//! `resume --tree` brings it back and the ranks rebuild, and the job
//! finishes with the losses of a run never drained, bit for bit.
//!
//! Needs a Python with torch (`CUDACKPT_TEST_PYTHON`): CI has it.

use crate::disk_jobs::{needed_python_with_torch, Job};
use crate::support::{workspace, Fixture};
use crate::wire::{DrainOutcome, ProcessCommandDoc, State};

fn losses(dir: &std::path::Path, rank: u32) -> String {
    std::fs::read_to_string(dir.join(format!("losses-{rank}.txt"))).unwrap_or_default()
}

/// What the drain did with each process of a command, in PID order.
fn outcomes(doc: &ProcessCommandDoc) -> Vec<Option<DrainOutcome>> {
    doc.processes
        .iter()
        .map(|p| p.drain.as_ref().map(|d| d.outcome))
        .collect()
}

#[test]
fn the_client_s_cpu_example_drains_resumes_and_finishes_bit_exact() {
    let Some(python) = needed_python_with_torch() else {
        return;
    };
    let fx = Fixture::new();
    let example = workspace().join("clients/python/examples/train_cpu.py");
    let steps = "30";
    let run_in = |name: &str, pause: &str| {
        let dir = fx.dir().join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        let args = [
            steps.to_string(),
            pause.to_string(),
            dir.display().to_string(),
        ];
        (
            Job::start_script(&fx, &python, &dir, &example, &args, true),
            dir,
        )
    };
    let (mut reference, reference_dir) = run_in("reference", "0");
    reference.reap();
    let (mut job, dir) = run_in("drained", "0.2");
    crate::disk_jobs::wait_long("the job's fifth step", || {
        losses(&dir, 0).lines().count() >= 5 && losses(&dir, 1).lines().count() >= 5
    });
    let agent = job.agent.to_string();
    let suspended: ProcessCommandDoc = fx.json(&["suspend", "--drain", "--tree", &agent], 0);
    assert!(
        suspended
            .processes
            .iter()
            .all(|p| p.state == State::Checkpointed),
        "{suspended:?}"
    );
    let drained = outcomes(&suspended);
    assert_eq!(
        drained
            .iter()
            .filter(|o| **o == Some(DrainOutcome::Drained))
            .count(),
        2,
        "both ranks drained: {drained:?}"
    );
    assert!(
        drained.contains(&Some(DrainOutcome::NotNeeded)),
        "torchrun's agent is left out: {drained:?}"
    );
    let at_suspend = losses(&dir, 0).lines().count();
    let resumed: ProcessCommandDoc = fx.json(&["resume", "--tree", &agent], 0);
    let rebuilt = outcomes(&resumed);
    assert_eq!(
        rebuilt
            .iter()
            .filter(|o| **o == Some(DrainOutcome::Rebuilt))
            .count(),
        2,
        "both ranks rebuilt: {rebuilt:?}"
    );
    job.reap();
    assert!(at_suspend < 30, "drained mid-run ({at_suspend} steps)");
    for rank in 0..2 {
        let expected = losses(&reference_dir, rank);
        assert_eq!(expected.lines().count(), 30, "the reference's rank {rank}");
        assert_eq!(losses(&dir, rank), expected, "rank {rank}'s losses");
    }
}
