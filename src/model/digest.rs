//! Hashing a value's serialized text in one call.
//!
//! A hasher fed piece by piece, as a formatter or serializer writes, pays
//! its per-call cost for every field name, quote and comma; the pod
//! signature and the queue's digest of a pod spent most of their time
//! there. The text is written into a buffer kept per thread instead and
//! hashed once.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};

/// Above this size a buffer is not kept for the next call.
const KEEP: usize = 64 * 1024;

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Hash what `write` writes into a buffer, with a hasher from `keys`;
/// `None` when `write` fails.
pub fn hash_written<S: BuildHasher, E>(keys: &S, write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Option<u64> {
    let hash = |buf: &mut Vec<u8>| {
        buf.clear();
        let ok = write(buf).is_ok();
        let mut h = keys.build_hasher();
        h.write(buf);
        let digest = ok.then(|| h.finish());
        if buf.capacity() > KEEP {
            *buf = Vec::new();
        }
        digest
    };
    // A call made while the thread's buffer is in use gets its own.
    BUFFER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => hash(&mut buf),
        Err(_) => hash(&mut Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasherDefault, DefaultHasher};
    use std::io::Write as _;

    type Keys = BuildHasherDefault<DefaultHasher>;

    #[test]
    fn the_digest_is_the_hash_of_the_whole_text() {
        let keys = Keys::default();
        let d = hash_written(&keys, |b| write!(b, "ab-{}", 12));
        let mut h = keys.build_hasher();
        h.write(b"ab-12");
        assert_eq!(d, Some(h.finish()));
        // The buffer is cleared between calls, and a nested call gets its own.
        let nested = hash_written(&keys, |b| {
            b.extend_from_slice(b"outer");
            let inner = hash_written(&keys, |b2| write!(b2, "ab-12"));
            assert_eq!(inner, d);
            Ok::<(), std::io::Error>(())
        });
        assert_ne!(nested, d);
        assert_eq!(hash_written(&keys, |b| write!(b, "ab-12")), d);
        // A failed write gives no digest, and a huge text is not kept.
        assert_eq!(hash_written(&keys, |b| { b.resize(KEEP * 2, 0); Err(()) }), None);
        assert_eq!(hash_written(&keys, |b| write!(b, "ab-12")), d);
    }
}
