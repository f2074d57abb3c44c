//! Chat templates (`tokenizer.chat_template`) rendered with `minijinja`, configured like the
//! Jinja2 environment Transformers and llama-cpp-python use: `trim_blocks`, `lstrip_blocks`, loop
//! controls, Python string/dict methods (`.strip()`, `.startswith()`, `.items()`, ...),
//! `raise_exception`, `tojson` with Python's `json.dumps` spacing, `strftime_now`.
//!
//! Templates come from model files, so they are untrusted: rendering is bounded by minijinja's
//! fuel (instructions) and recursion limits, and by a cap on the output size.

use crate::TokenizerError;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Bounds on rendering one template (hostile templates must not hang or exhaust memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateLimits {
    /// minijinja fuel: roughly, instructions executed per render.
    pub fuel: u64,
    /// Nesting depth of macros, includes and recursive loops.
    pub recursion: usize,
    /// Largest output, in bytes.
    pub max_output_bytes: usize,
}

impl Default for TemplateLimits {
    fn default() -> TemplateLimits {
        TemplateLimits {
            fuel: 5_000_000,
            recursion: 100,
            max_output_bytes: 16 << 20,
        }
    }
}

/// A compiled chat template. `Send + Sync`.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    limits: TemplateLimits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the texts the template sees under those
    /// names. Uses [`TemplateLimits::default`].
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TokenizerError> {
        ChatTemplate::with_limits(source, bos_token, eos_token, TemplateLimits::default())
    }

    /// Like [`ChatTemplate::new`] with explicit limits.
    pub fn with_limits(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        limits: TemplateLimits,
    ) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(limits.fuel));
        env.set_recursion_limit(limits.recursion);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        // HF templates sometimes strip the final newline themselves; keep Jinja2's default
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| TokenizerError::TemplateSyntax(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            limits,
        })
    }

    /// Renders `messages`; with `add_generation_prompt` the template appends the assistant turn
    /// header.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_value(
            vec![("messages".to_string(), Value::from(Serde(messages)))],
            add_generation_prompt,
        )
    }

    /// Renders with a free-form context (`messages` with tool calls, `tools`, ...): the keys of
    /// `context` (a JSON object) are template variables, besides `bos_token`, `eos_token` and
    /// `add_generation_prompt`.
    pub fn render_with(
        &self,
        context: &serde_json::Value,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let map = match context {
            serde_json::Value::Object(m) => m.clone(),
            serde_json::Value::Null => serde_json::Map::new(),
            other => {
                return Err(TokenizerError::TemplateRender(format!(
                    "the context must be a JSON object, not {other}"
                )))
            }
        };
        let vars = map
            .into_iter()
            .map(|(k, v)| (k, Value::from(Serde(v))))
            .collect();
        self.render_value(vars, add_generation_prompt)
    }

    fn render_value(
        &self,
        mut vars: Vec<(String, Value)>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        for (k, v) in [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
        ] {
            if !vars.iter().any(|(n, _)| n == k) {
                vars.push((k.to_string(), Value::from(v.as_str())));
            }
        }
        vars.retain(|(n, _)| n != "add_generation_prompt");
        vars.push((
            "add_generation_prompt".to_string(),
            Value::from(add_generation_prompt),
        ));
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TokenizerError::TemplateRender(describe(&e)))?;
        let mut out = LimitedWriter {
            buf: Vec::new(),
            max: self.limits.max_output_bytes,
        };
        tmpl.render_captured_to(Value::from_pairs(vars), &mut out)
            .map_err(|e| TokenizerError::TemplateRender(describe(&e)))?;
        String::from_utf8(out.buf)
            .map_err(|e| TokenizerError::TemplateRender(format!("output is not UTF-8: {e}")))
    }
}

/// Output sink that refuses to grow past a size.
struct LimitedWriter {
    buf: Vec<u8>,
    max: usize,
}

impl std::io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.max {
            return Err(std::io::Error::other(format!(
                "template output exceeds {} bytes",
                self.max
            )));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The error with its chain of causes, on one line.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {msg}"),
    ))
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// as Transformers' `tojson`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let _separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => {
            if let Some(s) = v.as_str() {
                Some(s.to_string())
            } else {
                let n = i64::try_from(v)
                    .map_err(|_| Error::new(ErrorKind::InvalidOperation, "tojson: bad indent"))?;
                Some(" ".repeat(n.clamp(0, 64) as usize))
            }
        }
    };
    let mut out = String::new();
    py_json(
        &value,
        indent.as_deref(),
        0,
        sort_keys.unwrap_or(false),
        &mut out,
    );
    Ok(Value::from_safe_string(out))
}

fn py_json(v: &Value, indent: Option<&str>, level: usize, sort: bool, out: &mut String) {
    use minijinja::value::ValueKind as K;
    let newline = |out: &mut String, level: usize| {
        if let Some(ind) = indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        K::Undefined | K::None => out.push_str("null"),
        K::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        K::Number => {
            if let Some(f) = v.as_i64() {
                out.push_str(&f.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
                    out.push_str(&format!("{f:.1}"));
                } else if f.is_finite() {
                    out.push_str(&f.to_string());
                } else if f.is_nan() {
                    out.push_str("NaN");
                } else {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                }
            }
        }
        K::String => {
            out.push_str(&serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default())
        }
        K::Seq | K::Iterable => {
            let items: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                py_json(x, indent, level + 1, sort, out);
            }
            newline(out, level);
            out.push(']');
        }
        K::Map => {
            let mut keys: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
            if keys.is_empty() {
                out.push_str("{}");
                return;
            }
            if sort {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                let ks = k
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| k.to_string());
                out.push_str(&serde_json::to_string(&ks).unwrap_or_default());
                out.push_str(": ");
                let x = v.get_item(k).unwrap_or_default();
                py_json(&x, indent, level + 1, sort, out);
            }
            newline(out, level);
            out.push('}');
        }
        _ => out.push_str(&serde_json::to_string(&v.to_string()).unwrap_or_default()),
    }
}

/// `strftime_now(format)`: the current UTC time formatted with the common `strftime` fields
/// (`%Y %y %m %d %e %B %b %h %A %a %H %I %M %S %p %j %%`); other fields are kept as written.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(secs, &format)
}

pub(crate) fn strftime(unix_secs: i64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let sod = unix_secs.rem_euclid(86_400);
    let (h, mi, s) = (sod / 3600, (sod % 3600) / 60, sod % 60);
    // civil from days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let mut out = String::new();
    let mut it = format.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 })),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "  Be brief. "),
            ChatMessage::new("user", "Hi"),
        ]
    }

    #[test]
    fn pycompat_and_loop() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if loop.first and messages[0]['role'] == 'system' %}[S]{% endif %}\
             {{ m.content.strip() }}{% if m['role'].startswith('us') %}!{% endif %}|{% endfor %}\
             {% if add_generation_prompt %}{{ bos_token }}{% endif %}",
            "<s>",
            "</s>",
        )
        .expect("compiles");
        assert_eq!(
            t.render(&msgs(), true).expect("renders"),
            "[S]Be brief.|Hi!|<s>"
        );
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t =
            ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").expect("compiles");
        let e = t.render(&msgs(), false).expect_err("must fail");
        assert!(e.to_string().contains("no system role"), "{e}");
    }

    #[test]
    fn tojson_is_python_like() {
        let t = ChatTemplate::new("{{ messages[1] | tojson }}", "", "").expect("compiles");
        assert_eq!(
            t.render(&msgs(), false).expect("renders"),
            r#"{"role": "user", "content": "Hi"}"#
        );
    }

    #[test]
    fn hostile_templates_stop() {
        let lim = TemplateLimits {
            fuel: 100_000,
            recursion: 50,
            max_output_bytes: 1 << 20,
        };
        for src in [
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "{% for m in messages recursive %}{{ loop([m, m]) }}{% endfor %}",
            "{{ 'x' * 100000000 }}",
            // Strings doubled across loop iterations and across macro calls: fuel counts the
            // bytes each concatenation makes. (Lists doubled the same way are not refused:
            // NOTES.md, twenty-fifth session.)
            "{% set ns = namespace(a='xxxxxxxx') %}{% for i in range(45) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ ns.a | length }}",
            "{% macro f(s, n) %}{% if n > 0 %}{{ f(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}{{ f('xxxxxxxx', 45) }}",
        ] {
            let t = ChatTemplate::with_limits(src, "", "", lim).expect("compiles");
            assert!(t.render(&msgs(), false).is_err(), "{src} should fail");
        }
    }

    #[test]
    fn strftime_known_date() {
        // 2024-02-29 13:05:09 UTC, a Thursday
        assert_eq!(
            strftime(1_709_211_909, "%d %b %Y %A %H:%M:%S %j"),
            "29 Feb 2024 Thursday 13:05:09 060"
        );
    }
}
