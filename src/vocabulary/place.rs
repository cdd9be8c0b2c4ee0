//! Where one process of a group is: what the executor's signal board and
//! the intent record both keep.

use crate::driver::ProcessState;
use crate::vocabulary::plan::DriverCall;

/// Where one process of a group is, as far as the executor knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub pid: i32,
    pub name: String,
    /// The state after its last finished call (`None`: not yet asked).
    pub state: Option<ProcessState>,
    /// The driver call under way on it, if any.
    pub in_flight: Option<DriverCall>,
}
