//! ConfigMaps, as the API server validates them (`ValidateConfigMap`):
//! `data` and `binaryData` together hold at most 1 MiB.

use serde_json::Value;

use crate::resources::{Admission, Error, View};

/// The ConfigMap rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), ..Admission::NONE };

/// What a ConfigMap's or a Secret's data may hold, in bytes (upstream's
/// `core.MaxSecretSize`, 1 MiB; ConfigMaps share it).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

fn create(_: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    check(v)
}

fn update(_old: &Value, new: &mut Value) -> Result<(), Error> {
    check(new)
}

/// Upstream sums the length of every `data` value and of every decoded
/// `binaryData` value, and reports the whole object (the empty path,
/// printed `[]`) when the sum is over the limit.
fn check(v: &Value) -> Result<(), Error> {
    let text: usize = values(v, "data").map(str::len).sum();
    let binary: usize = values(v, "binaryData").map(decoded_len).sum();
    if text.saturating_add(binary) > MAX_DATA_BYTES {
        return Err(Error::Invalid(vec![format!("[]: Too long: may not be more than {MAX_DATA_BYTES} bytes")]));
    }
    Ok(())
}

/// The string values of the map at `field`.
pub(crate) fn values<'a>(v: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    v.get(field).and_then(Value::as_object).into_iter().flatten().filter_map(|(_, x)| x.as_str())
}

/// How many bytes standard base64 text decodes to (the typed round trip
/// has checked that it is base64).
pub(crate) fn decoded_len(b64: &str) -> usize {
    let b64 = b64.trim_end_matches('=');
    b64.len() / 4 * 3 + (b64.len() % 4 * 3) / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::Objects;
    use serde_json::json;

    #[test]
    fn base64_lengths_are_decoded_lengths() {
        use base64::Engine as _;
        for n in 0..10 {
            let text = base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
            assert_eq!(decoded_len(&text), n, "{text}");
        }
    }

    #[test]
    fn data_and_binary_data_share_one_mebibyte() {
        let at_limit = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES)}});
        assert!(create(&Objects::default(), "c", &mut at_limit.clone()).is_ok());
        let over = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES - 2)}, "binaryData": {"b": "AAAA"}});
        let Err(Error::Invalid(errs)) = update(&json!({}), &mut over.clone()) else { panic!("1 MiB + 1 byte admitted") };
        assert_eq!(errs, vec!["[]: Too long: may not be more than 1048576 bytes".to_string()]);
    }
}
