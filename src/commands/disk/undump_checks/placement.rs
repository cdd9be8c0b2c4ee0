//! Which GPUs of this host an undumped job lands on (pure): each GPU the
//! manifest names stays where it is when this host has it with room, else
//! moves to the GPU with the most room left that fits it; no two of the
//! job's GPUs share one. A map the user gave is checked for room, not
//! changed. Room is NVML's free memory; where it is unknown, GPUs that are
//! here stay, absent ones take unused GPUs in order, and the caller says the
//! memory was not weighed.

/// One GPU of this host: its UUID and free bytes (`None`: unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGpu {
    pub uuid: String,
    pub free_bytes: Option<u64>,
}

/// Why the job fits nowhere on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoRoom(pub String);

const MIB: u64 = 1 << 20;

/// The pairs (old, new) for `needs` (old GPU, bytes) on `host`, or why the
/// job does not fit. `given`: a map the user gave (old, new).
pub fn place(
    needs: &[(String, u64)],
    host: &[HostGpu],
    given: Option<&[(String, String)]>,
) -> Result<Vec<(String, String)>, NoRoom> {
    let free = |uuid: &str| host.iter().find(|g| g.uuid == uuid).map(|g| g.free_bytes);
    if let Some(given) = given {
        return check_given(needs, host, given);
    }
    let fits = |uuid: &str, bytes: u64| match free(uuid) {
        Some(Some(free)) => free >= bytes,
        Some(None) => true,
        None => false,
    };
    let mut order: Vec<&(String, u64)> = needs.iter().collect();
    order.sort_by_key(|need| std::cmp::Reverse(need.1));
    // First every GPU that can stay; then the others, largest first, each
    // onto the unused GPU with the most room that fits it.
    let (stay, move_): (Vec<_>, Vec<_>) = order
        .into_iter()
        .partition(|(old, bytes)| fits(old, *bytes));
    let mut taken: Vec<String> = stay.iter().map(|(old, _)| old.clone()).collect();
    let mut pairs: Vec<(String, String)> = stay
        .iter()
        .map(|(old, _)| (old.clone(), old.clone()))
        .collect();
    for (old, bytes) in move_ {
        let mut candidates: Vec<&HostGpu> = host
            .iter()
            .filter(|g| !taken.contains(&g.uuid) && fits(&g.uuid, *bytes))
            .collect();
        candidates.sort_by_key(|g| std::cmp::Reverse(g.free_bytes.unwrap_or(0)));
        let Some(gpu) = candidates.first() else {
            return Err(NoRoom(nowhere(old, *bytes, host, &taken)));
        };
        taken.push(gpu.uuid.clone());
        pairs.push((old.clone(), gpu.uuid.clone()));
    }
    pairs.sort();
    Ok(pairs)
}

/// A map the user gave: every target GPU here, none twice, each with room.
fn check_given(
    needs: &[(String, u64)],
    host: &[HostGpu],
    given: &[(String, String)],
) -> Result<Vec<(String, String)>, NoRoom> {
    let mut pairs = Vec::new();
    for (old, bytes) in needs {
        let new = given
            .iter()
            .find(|(o, _)| o == old)
            .map_or(old.clone(), |(_, n)| n.clone());
        let Some(gpu) = host.iter().find(|g| g.uuid == new) else {
            return Err(NoRoom(format!(
                "the map sends {old} to {new}, which this host does not have"
            )));
        };
        if let Some(free) = gpu.free_bytes.filter(|free| free < bytes) {
            return Err(NoRoom(format!(
                "{new} has {} MiB free, and the job's memory of {old} needs {} MiB",
                free / MIB,
                bytes / MIB
            )));
        }
        if pairs.iter().any(|(_, n): &(String, String)| *n == new) {
            return Err(NoRoom(format!(
                "the map sends two of the job's GPUs to {new}; each needs a GPU of its own"
            )));
        }
        pairs.push((old.clone(), new));
    }
    pairs.sort();
    Ok(pairs)
}

/// Why `old` fits nowhere, with what each GPU has (pure).
fn nowhere(old: &str, bytes: u64, host: &[HostGpu], taken: &[String]) -> String {
    let rooms: Vec<String> = host
        .iter()
        .map(|g| {
            let room = g.free_bytes.map_or("free memory unknown".to_string(), |f| {
                format!("{} MiB free", f / MIB)
            });
            if taken.contains(&g.uuid) {
                format!("{} ({room}, taken by another of the job's GPUs)", g.uuid)
            } else {
                format!("{} ({room})", g.uuid)
            }
        })
        .collect();
    format!(
        "the job's memory of {old} needs {} MiB, and no GPU here has that much room: {}",
        bytes / MIB,
        if rooms.is_empty() {
            "no GPU".to_string()
        } else {
            rooms.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu(uuid: &str, free_gib: Option<u64>) -> HostGpu {
        HostGpu {
            uuid: uuid.into(),
            free_bytes: free_gib.map(|g| g * GIB),
        }
    }

    fn needs(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter()
            .map(|(u, g)| ((*u).to_string(), g * GIB))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
            .collect()
    }

    #[test]
    fn a_gpu_that_is_here_with_room_stays() {
        let host = [gpu("A", Some(70)), gpu("B", Some(70))];
        assert_eq!(
            place(&needs(&[("A", 10)]), &host, None),
            Ok(pairs(&[("A", "A")]))
        );
    }

    #[test]
    fn a_busy_gpu_moves_to_the_one_with_room() {
        // The dumped-on GPU is occupied by another process.
        let host = [gpu("A", Some(2)), gpu("B", Some(70))];
        assert_eq!(
            place(&needs(&[("A", 10)]), &host, None),
            Ok(pairs(&[("A", "B")]))
        );
    }

    #[test]
    fn an_absent_gpu_moves_and_no_two_share_one() {
        let host = [gpu("X", Some(30)), gpu("Y", Some(40))];
        assert_eq!(
            place(&needs(&[("A", 20), ("B", 25)]), &host, None),
            Ok(pairs(&[("A", "X"), ("B", "Y")]))
        );
    }

    #[test]
    fn a_job_that_fits_nowhere_is_refused_naming_the_room() {
        let host = [gpu("A", Some(2)), gpu("B", Some(3))];
        let refused = place(&needs(&[("A", 10)]), &host, None).unwrap_err();
        assert!(refused.0.contains("needs 10240 MiB"), "{refused}");
        assert!(refused.0.contains("B (3072 MiB free)"), "{refused}");
    }

    #[test]
    fn unknown_room_keeps_gpus_that_are_here() {
        let host = [gpu("A", None), gpu("B", None)];
        assert_eq!(
            place(&needs(&[("A", 10)]), &host, None),
            Ok(pairs(&[("A", "A")]))
        );
        assert_eq!(
            place(&needs(&[("Z", 10)]), &host, None),
            Ok(pairs(&[("Z", "A")]))
        );
    }

    #[test]
    fn a_given_map_is_checked_not_changed() {
        let host = [gpu("A", Some(70)), gpu("B", Some(1))];
        let given = pairs(&[("A", "B")]);
        assert!(place(&needs(&[("A", 10)]), &host, Some(&given))
            .unwrap_err()
            .0
            .contains("B has 1024 MiB free"));
        let elsewhere = pairs(&[("A", "Q")]);
        assert!(place(&needs(&[("A", 1)]), &host, Some(&elsewhere))
            .unwrap_err()
            .0
            .contains("does not have"));
        let fine = pairs(&[("A", "A")]);
        assert_eq!(
            place(&needs(&[("A", 1)]), &host, Some(&fine)),
            Ok(fine.clone())
        );
    }
}
