//! What the store refuses to keep, whatever the write path (create,
//! update, every patch type, apply, the status and scale subresources):
//! an object the data directory could not read back, and an object larger
//! than etcd takes. One check, at the commit every write goes through
//! (and at a dry run's end), so that no path can store what cannot be
//! loaded.

use crate::resources::ResourceInfo;

use super::{Error, Result, invalid};

/// The deepest nesting of arrays and objects the store keeps: what
/// serde_json reads back (its recursion limit is 128 containers, the
/// outermost one included, and a value that reaches it is refused). The
/// data directory and the request decoder both read with serde_json, so
/// an object deeper than this could be served from memory once and then
/// never loaded again. kube-apiserver's own decoder allows 10,000 levels.
pub const MAX_DEPTH: usize = 127;

/// The largest object the store keeps, in bytes of its JSON: etcd's
/// default `--max-request-bytes` (1.5 MiB). kube-apiserver hands etcd the
/// object (as protobuf for built-in kinds, JSON for custom resources) and
/// passes etcd's refusal through as a 500 with etcd's message.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// etcd's refusal of a request over its limit, as kube-apiserver passes it
/// on (an error that is not a Status: code 500, no reason).
pub const TOO_LARGE: &str = "etcdserver: request is too large";

/// How deeply `json` nests arrays and objects: one pass over the bytes,
/// skipping strings.
pub fn nesting_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Refuses the serialized object `bytes` of kind `info` named `name` when
/// the store could not keep it: too deep to load back (422, on the whole
/// object) or larger than etcd takes (500, etcd's message).
pub fn storable(info: &ResourceInfo, name: &str, bytes: &[u8]) -> Result<()> {
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(Error::RequestTooLarge);
    }
    let depth = nesting_depth(bytes);
    if depth > MAX_DEPTH {
        return Err(invalid(info, name, format!("[]: Invalid value: exceeded max depth of {MAX_DEPTH} (the object nests {depth} levels)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ResourceInfo {
        crate::resources::RESOURCES[crate::resources::CONFIGMAPS].clone()
    }

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn the_depth_limit_is_exactly_what_serde_json_reads_back() {
        let ok = nested(MAX_DEPTH);
        assert_eq!(nesting_depth(ok.as_bytes()), MAX_DEPTH);
        assert!(serde_json::from_str::<serde_json::Value>(&ok).is_ok(), "{MAX_DEPTH} levels must load");
        assert!(storable(&info(), "b", ok.as_bytes()).is_ok());
        let deep = nested(MAX_DEPTH + 1);
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err(), "{} levels must not load", MAX_DEPTH + 1);
        let Err(Error::Invalid { message, .. }) = storable(&info(), "b", deep.as_bytes()) else { panic!("too deep kept") };
        assert!(message.contains("exceeded max depth of 127"), "{message}");
    }

    #[test]
    fn brackets_inside_strings_are_not_nesting() {
        let v = serde_json::json!({"a": "[[[[{{{{", "b": ["\"[", {"c": "\\\"{"}]});
        assert_eq!(nesting_depth(v.to_string().as_bytes()), 3);
    }

    #[test]
    fn an_object_over_etcds_limit_gets_etcds_error() {
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_OBJECT_BYTES));
        let e = storable(&info(), "c", big.as_bytes()).unwrap_err();
        assert_eq!((e.code(), e.reason(), e.to_string().as_str()), (500, "", TOO_LARGE));
    }
}
