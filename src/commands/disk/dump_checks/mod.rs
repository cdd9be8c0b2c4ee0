//! What a dump weighs before any change: what the tree holds and the
//! options CRIU gets for it ([`tree_facts`]), whether its TCP
//! connections leave the tree ([`connections`]), its deleted-but-open
//! files ([`ghosts`]).

pub mod connections;
pub mod ghosts;
pub mod tree_facts;
