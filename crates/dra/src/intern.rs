//! Interned strings: a device's names, attribute names and values are kept
//! as 4-byte symbols so that a device's state stays small.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A fast hasher for keys made of [`Sym`]s (device ids, counter names): the
/// multiply-rotate step of rustc's FxHasher. Symbols are small integers the
/// process hands out itself, so no input chooses collisions; keys an API
/// object spells (names) keep the standard hasher.
#[derive(Clone, Copy, Debug, Default)]
pub struct SymHasher(u64);

impl SymHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for SymHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map keyed by symbols (see [`SymHasher`]).
pub type SymMap<K, V> = HashMap<K, V, BuildHasherDefault<SymHasher>>;

/// An interned string; resolve it with [`Interner::get`] of the interner that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(u32);

/// The string table. Strings are never removed: the set of driver, pool,
/// device and attribute names of a cluster is small and stable.
#[derive(Debug, Default, Clone)]
pub struct Interner {
    ids: HashMap<Arc<str>, Sym>,
    strings: Vec<Arc<str>>,
}

impl Interner {
    /// The symbol of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.ids.get(s) {
            return sym;
        }
        let sym = Sym(u32::try_from(self.strings.len()).unwrap_or(u32::MAX));
        let arc: Arc<str> = Arc::from(s);
        self.strings.push(arc.clone());
        self.ids.insert(arc, sym);
        sym
    }

    /// The symbol of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<Sym> {
        self.ids.get(s).copied()
    }

    /// The string of a symbol ("" for a symbol of another interner).
    pub fn get(&self, sym: Sym) -> &str {
        self.strings.get(sym.0 as usize).map_or("", |s| s)
    }

    /// How many strings are interned.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// Bytes held by the table (strings and index), for memory figures.
    pub fn heap_bytes(&self) -> usize {
        self.strings.iter().map(|s| s.len() + 16).sum::<usize>() + self.ids.capacity() * 24 + self.strings.capacity() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable() {
        let mut i = Interner::default();
        let a = i.intern("gpu.example.com");
        let b = i.intern("pool");
        assert_eq!(i.intern("gpu.example.com"), a);
        assert_ne!(a, b);
        assert_eq!(i.get(b), "pool");
        assert_eq!(i.lookup("pool"), Some(b));
        assert_eq!(i.lookup("nope"), None);
        assert_eq!(i.len(), 2);
    }
}
