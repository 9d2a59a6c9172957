//! Interned strings: a device's names, attribute names and values are kept
//! as 4-byte symbols so that a device's state stays small.

use std::collections::HashMap;
use std::sync::Arc;

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
