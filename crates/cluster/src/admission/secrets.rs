//! Secrets, as the API server's Secret strategy: `stringData` is written
//! into `data`, `type` defaults to Opaque, and an immutable Secret's data
//! stays as it is; as `ValidateSecret`, `data` holds at most 1 MiB
//! (decoded).

use serde_json::{Value, json};

use crate::resources::{Admission, Error, View};

/// The Secret rules.
pub const ADMISSION: Admission = Admission { create: Some(create), update: Some(update), ..Admission::NONE };

fn create(_: &dyn View, _name: &str, v: &mut Value) -> Result<(), Error> {
    fold_string_data(v);
    data_size(v)
}

fn update(old: &Value, new: &mut Value) -> Result<(), Error> {
    fold_string_data(new);
    data_size(new)?;
    if old.get("immutable").and_then(Value::as_bool) == Some(true)
        && (old.get("data") != new.get("data") || new.get("immutable").and_then(Value::as_bool) != Some(true))
    {
        return Err(Error::Invalid(vec!["data: Forbidden: field is immutable when `immutable` is set".into()]));
    }
    Ok(())
}

/// The decoded `data` (stringData folded in) over 1 MiB is refused on the
/// `data` path, as upstream's `ValidateSecret` words it.
fn data_size(v: &Value) -> Result<(), Error> {
    use super::configmaps::{MAX_DATA_BYTES, decoded_len, values};
    if values(v, "data").map(decoded_len).sum::<usize>() > MAX_DATA_BYTES {
        return Err(Error::Invalid(vec![format!("data: Too long: may not be more than {MAX_DATA_BYTES} bytes")]));
    }
    Ok(())
}

/// A Secret's `stringData` is written into `data` (base64), as the API
/// server's Secret strategy does; `type` defaults to Opaque.
fn fold_string_data(v: &mut Value) {
    use base64::Engine as _;
    let Some(m) = v.as_object_mut() else { return };
    if let Some(Value::Object(sd)) = m.remove("stringData") {
        let data = m.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        if let Some(d) = data.as_object_mut() {
            for (k, val) in sd {
                let text = val.as_str().map(str::to_string).unwrap_or_else(|| val.to_string());
                d.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(text)));
            }
        }
    }
    m.entry("type").or_insert_with(|| json!("Opaque"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::testing::Objects;

    #[test]
    fn data_over_one_mebibyte_is_refused_after_string_data_is_folded_in() {
        let mut ok = json!({"stringData": {"k": "x".repeat(1024 * 1024)}});
        assert!(create(&Objects::default(), "s", &mut ok).is_ok());
        let mut over = json!({"stringData": {"k": "x".repeat(1024 * 1024), "l": "y"}});
        let Err(Error::Invalid(errs)) = create(&Objects::default(), "s", &mut over) else { panic!("1 MiB + 1 byte admitted") };
        assert_eq!(errs, vec!["data: Too long: may not be more than 1048576 bytes".to_string()]);
    }

    #[test]
    fn string_data_goes_into_data_and_immutable_data_stays() {
        let mut v = json!({"stringData": {"k": "v"}});
        create(&Objects::default(), "s", &mut v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v, json!({"data": {"k": "dg=="}, "type": "Opaque"}));
        let old = json!({"immutable": true, "data": {"k": "dg=="}});
        let mut same = json!({"immutable": true, "stringData": {"k": "v"}});
        assert!(update(&old, &mut same).is_ok());
        let mut changed = json!({"immutable": true, "data": {"k": "eA=="}});
        assert!(matches!(update(&old, &mut changed), Err(Error::Invalid(e)) if e[0].starts_with("data: Forbidden")));
    }
}
