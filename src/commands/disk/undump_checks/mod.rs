//! What an undump weighs before CRIU restores anything, and what a failed
//! restore takes away: the images held by descriptor and staged where
//! another user could write them ([`source`]); what they would restore as
//! ([`credentials`]), every descriptor among them ([`descriptors`]) and
//! which another user could not have made ([`descriptor_bound`]); the
//! addresses its sockets are bound to against this host's
//! ([`addresses`]), the files the job had open against the host's ([`open_files`]; those it
//! wrote to that grew since cut back, what was cut kept,
//! [`grown_files`]), its ports
//! ([`ports`], and the sockets a crashed run left on them, closed through
//! [`sock_destroy`]), the directories its Unix sockets are bound in
//! ([`socket_dirs`]), the GPUs it lands on ([`placement`]); what a restore
//! brought back, by pidfd ([`restored_tree`]).

pub mod addresses;
pub mod credentials;
pub mod descriptor_bound;
pub mod descriptors;
pub mod grown_files;
pub mod open_files;
pub mod placement;
pub mod ports;
pub mod restored_tree;
pub mod sock_destroy;
pub mod socket_dirs;
pub mod source;
