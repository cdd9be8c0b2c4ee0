//! Places counted by key, each given back when its holder drops it: how
//! the service bounds what a flood of connections, or one job, may hold
//! of it at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

type Held<K> = Arc<Mutex<BTreeMap<K, usize>>>;

/// How many places of each key are held now.
pub struct Counted<K: Ord>(Held<K>);

impl<K: Ord> Default for Counted<K> {
    fn default() -> Self {
        Counted(Arc::new(Mutex::new(BTreeMap::new())))
    }
}

/// One of a key's places in a [`Counted`], given back when dropped.
pub struct Admitted<K: Ord> {
    held: Held<K>,
    key: K,
}

impl<K: Ord + Clone> Counted<K> {
    /// A place for `key` where fewer than `most` are held, else `None`.
    pub fn admit(&self, key: K, most: usize) -> Option<Admitted<K>> {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(key.clone()).or_insert(0);
        if *count >= most {
            return None;
        }
        *count += 1;
        Some(Admitted {
            held: Arc::clone(&self.0),
            key,
        })
    }
}

impl<K: Ord> Drop for Admitted<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_up_to_its_most_and_again_once_a_place_is_given_back() {
        let counted: Counted<u64> = Counted::default();
        let first = counted.admit(7, 2).expect("the first place");
        let second = counted.admit(7, 2).expect("the second place");
        assert!(counted.admit(7, 2).is_none(), "no third");
        assert!(counted.admit(8, 2).is_some(), "another key has its own");
        drop(first);
        let third = counted
            .admit(7, 2)
            .expect("a place given back is taken again");
        drop((second, third));
        assert!(
            counted.0.lock().expect("the lock").is_empty(),
            "nothing is counted once every place is given back"
        );
    }
}
