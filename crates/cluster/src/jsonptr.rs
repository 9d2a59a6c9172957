//! JSON Pointer lookups (RFC 6901) without the copies.
//!
//! `serde_json::Value::pointer` unescapes every reference token with two
//! `str::replace` calls, each a new string, even when the token has
//! nothing to unescape; the local cluster looks up a few dozen constant
//! pointers per write, and those copies were 7% of its work. [`Pointer`]
//! gives the same answers and copies a token only when it has a `~`.

use std::borrow::Cow;

use serde_json::Value;

/// `pointer`/`pointer_mut` with `serde_json`'s semantics.
pub trait Pointer {
    /// The value at `pointer` (`""` is the whole value), as `Value::pointer`.
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// The value at `pointer`, mutable, as `Value::pointer_mut`.
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        tokens(pointer)?.try_fold(self, |cur, token| match cur {
            Value::Object(m) => m.get(token.as_ref()),
            Value::Array(a) => a.get(index(&token)?),
            _ => None,
        })
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        tokens(pointer)?.try_fold(self, |cur, token| match cur {
            Value::Object(m) => m.get_mut(token.as_ref()),
            Value::Array(a) => a.get_mut(index(&token)?),
            _ => None,
        })
    }
}

/// The reference tokens of `pointer`, unescaped (copied only when they
/// have a `~`); None when it is neither empty nor starts with `/`.
fn tokens(pointer: &str) -> Option<impl Iterator<Item = Cow<'_, str>>> {
    let rest = if pointer.is_empty() { None } else { Some(pointer.strip_prefix('/')?) };
    Some(rest.into_iter().flat_map(|r| r.split('/')).map(unescape))
}

fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') { Cow::Owned(token.replace("~1", "/").replace("~0", "~")) } else { Cow::Borrowed(token) }
}

/// An array index as RFC 6901 writes one: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lookup_is_serde_jsons_lookup() {
        let doc = json!({"a": {"b/c": [1, {"d~e": 2}], "": {"": 3}, "n": null},
                         "list": [10, 11, 12], "s": "x", "m~1": 4, "~": 5});
        let pointers = [
            "", "/", "/a", "/a/b~1c", "/a/b~1c/0", "/a/b~1c/1/d~0e", "/a/b~1c/01", "/a/b~1c/+1", "/a/b~1c/-1",
            "/a/b~1c/2", "/a//", "/a/", "/a/n", "/a/n/x", "/list/0", "/list/00", "/list/2", "/list/3", "/list/x",
            "/s", "/s/0", "/m~01", "/m~1", "/~0", "/~", "a", "/missing/x", "/list/18446744073709551616",
        ];
        for p in pointers {
            assert_eq!(doc.at(p), doc.pointer(p), "{p}");
            let (mut a, mut b) = (doc.clone(), doc.clone());
            assert_eq!(a.at_mut(p).map(|v| v.clone()), b.pointer_mut(p).map(|v| v.clone()), "{p}");
        }
        let mut doc = doc;
        if let Some(v) = doc.at_mut("/a/b~1c/1/d~0e") {
            *v = json!(7);
        }
        assert_eq!(doc.pointer("/a/b~1c/1/d~0e"), Some(&json!(7)));
    }
}
