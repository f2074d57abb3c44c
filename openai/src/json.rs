//! Reading a request body: size bound, UTF-8, a nesting-depth scan, NaN/Infinity detection,
//! then `serde_json`, then typed field access with OpenAI-style error messages.

use serde_json::{Map, Number, Value};

use crate::error::ApiError;

/// Deepest nesting of arrays/objects accepted in a request body.
///
/// Checked by a flat scan before `serde_json` (whose own recursion limit is 128) sees the body.
pub const MAX_JSON_DEPTH: usize = 64;

/// Checks size, UTF-8, depth and non-JSON number literals, then parses `body` into a JSON object.
///
/// # Errors
/// 413 when `body.len() > max_body_bytes`; 400 for everything else that is not a JSON object.
pub fn parse_object(body: &[u8], max_body_bytes: usize) -> Result<Map<String, Value>, ApiError> {
    if body.len() > max_body_bytes {
        return Err(ApiError::payload_too_large(body.len(), max_body_bytes));
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Request body is not valid UTF-8 (invalid byte at offset {}).",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "Request body is empty; expected a JSON object.",
        ));
    }
    scan(text.as_bytes(), MAX_JSON_DEPTH)?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(format!(
            "We could not parse the JSON body of your request: {e}."
        ))
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::bad_request(format!(
            "Request body must be a JSON object, but got {} instead.",
            type_name(&other)
        ))),
    }
}

/// One pass over the bytes, outside strings (escapes respected): refuses nesting deeper than
/// `max_depth` and the non-JSON literals `NaN`, `Infinity`, `inf` in any case.
fn scan(b: &[u8], max_depth: usize) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // Skip the string: up to the next unescaped quote.
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(ApiError::bad_request(format!(
                        "Request body nests arrays/objects more than {max_depth} levels deep \
                         (at byte {i}); refused."
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while i < b.len() && b[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                let word = &b[start..i];
                let bad = [&b"nan"[..], b"infinity", b"inf"]
                    .iter()
                    .any(|w| word.eq_ignore_ascii_case(w));
                if bad {
                    let w = String::from_utf8_lossy(word);
                    return Err(ApiError::bad_request(format!(
                        "We could not parse the JSON body of your request: `{w}` (at byte {start}) is \
                         not valid JSON; NaN and Infinity are not JSON numbers."
                    )));
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// How a JSON value's type is named in error messages ("a string", "an array").
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn type_error(param: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid_param(
        param,
        format!(
            "Invalid type for '{param}': expected {expected}, but got {} instead.",
            type_name(got)
        ),
    )
}

/// The value at `key`, treating JSON `null` as absent (OpenAI clients send `null` for "unset").
pub(crate) fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

pub(crate) fn opt_bool(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match get(map, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(type_error(key, "a boolean", v)),
    }
}

pub(crate) fn opt_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, ApiError> {
    match get(map, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(type_error(key, "a string", v)),
    }
}

/// A number in `lo..=hi` (JSON numbers are always finite).
pub(crate) fn opt_f64(
    map: &Map<String, Value>,
    key: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ApiError> {
    let Some(v) = get(map, key) else {
        return Ok(None);
    };
    let Value::Number(n) = v else {
        return Err(type_error(key, "a number", v));
    };
    let x = n.as_f64().unwrap_or(f64::NAN);
    if !x.is_finite() {
        return Err(ApiError::invalid_param(
            key,
            format!("Invalid '{key}': {n} is not a finite number."),
        ));
    }
    if x < lo {
        return Err(ApiError::invalid_param(
            key,
            format!("Invalid '{key}': decimal below minimum value. Expected a value >= {lo}, but got {n} instead."),
        ));
    }
    if x > hi {
        return Err(ApiError::invalid_param(
            key,
            format!("Invalid '{key}': decimal above maximum value. Expected a value <= {hi}, but got {n} instead."),
        ));
    }
    Ok(Some(x))
}

/// An integer in `lo..=hi`, from a JSON value; `param` names it in errors.
///
/// Integral decimals (`5.0`, `1e30`) count as integers, so a huge `1e30` is refused as "above
/// maximum" rather than as a type error; `2.5` is a type error.
pub(crate) fn int_value(v: &Value, param: &str, lo: i128, hi: i128) -> Result<i128, ApiError> {
    let Value::Number(n) = v else {
        return Err(type_error(param, "an integer", v));
    };
    let x = number_as_i128(n).ok_or_else(|| type_error(param, "an integer", v))?;
    if x < lo {
        return Err(ApiError::invalid_param(
            param,
            format!("Invalid '{param}': integer below minimum value. Expected a value >= {lo}, but got {n} instead."),
        ));
    }
    if x > hi {
        return Err(ApiError::invalid_param(
            param,
            format!("Invalid '{param}': integer above maximum value. Expected a value <= {hi}, but got {n} instead."),
        ));
    }
    Ok(x)
}

/// An integer value, saturated to the `i128` range for huge integral decimals; `None` when the
/// number has a fractional part.
fn number_as_i128(n: &Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    // `as` saturates for out-of-range floats, which is what the range check wants.
    Some(f as i128)
}

pub(crate) fn opt_int(
    map: &Map<String, Value>,
    key: &str,
    lo: i128,
    hi: i128,
) -> Result<Option<i128>, ApiError> {
    get(map, key).map(|v| int_value(v, key, lo, hi)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_scan_respects_strings_and_escapes() {
        let nested_in_string = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(200), "{".repeat(200));
        assert!(parse_object(nested_in_string.as_bytes(), 1 << 20).is_ok());
        let ok = format!("{{\"a\":{}{}}}", "[".repeat(63), "]".repeat(63));
        assert!(parse_object(ok.as_bytes(), 1 << 20).is_ok());
        let bad = format!("{{\"a\":{}{}}}", "[".repeat(64), "]".repeat(64));
        let e = parse_object(bad.as_bytes(), 1 << 20).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.message.contains("64 levels"), "{}", e.message);
    }

    #[test]
    fn nan_words_outside_strings_only() {
        assert!(parse_object(br#"{"a":"NaN Infinity"}"#, 100).is_ok());
        for body in [
            &br#"{"a":NaN}"#[..],
            br#"{"a":-Infinity}"#,
            br#"{"a":inf}"#,
            br#"{"a":nan}"#,
        ] {
            let e = parse_object(body, 100).unwrap_err();
            assert!(e.message.contains("NaN and Infinity"), "{}", e.message);
        }
        // Other bare words are ordinary syntax errors.
        let e = parse_object(br#"{"a":nul}"#, 100).unwrap_err();
        assert!(e.message.contains("could not parse"), "{}", e.message);
    }

    #[test]
    fn integers_from_numbers() {
        let v: Value =
            serde_json::from_str("[5, 5.0, 1e30, 2.5, -3, 18446744073709551615]").unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(int_value(&a[0], "x", 0, 10).unwrap(), 5);
        assert_eq!(int_value(&a[1], "x", 0, 10).unwrap(), 5);
        assert!(int_value(&a[2], "x", 0, 10)
            .unwrap_err()
            .message
            .contains("above maximum"));
        assert!(int_value(&a[3], "x", 0, 10)
            .unwrap_err()
            .message
            .contains("Invalid type"));
        assert!(int_value(&a[4], "x", 0, 10)
            .unwrap_err()
            .message
            .contains("below minimum"));
        assert!(int_value(&a[5], "x", 0, 10)
            .unwrap_err()
            .message
            .contains("above maximum"));
    }
}
