//! Where each key of a TOML document is: dotted key -> 1-based line.

use std::collections::HashMap;

use toml_edit::{Item, Key, TableLike, Value};

/// Byte offsets of line starts, to turn a span into a line and column.
pub(crate) struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines { text, starts }
    }

    /// 1-based line and 1-based column (in characters) of a byte offset.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let idx = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts.get(idx).copied().unwrap_or(0);
        let col = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start);
        (idx + 1, col + 1)
    }
}

/// The line of every key in a document, by dotted path (`kv`, `kv.block_size`).
#[derive(Default)]
pub(crate) struct SpanMap {
    lines: HashMap<String, usize>,
}

impl SpanMap {
    /// Walks a parsed document.
    pub(crate) fn build(root: &toml_edit::Table, lines: &Lines<'_>) -> Self {
        let mut map = SpanMap::default();
        map.walk(root, "", lines);
        map
    }

    /// The line of `key`, or of its nearest enclosing table that is in the file.
    pub(crate) fn line_of(&self, key: &str) -> Option<usize> {
        let mut k = key;
        loop {
            if let Some(l) = self.lines.get(k) {
                return Some(*l);
            }
            k = k.rsplit_once('.')?.0;
        }
    }

    /// Whether `key` itself is written in the file.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.lines.contains_key(key)
    }

    fn walk(&mut self, table: &dyn TableLike, prefix: &str, lines: &Lines<'_>) {
        for (name, item) in table.iter() {
            let path = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}.{name}")
            };
            let span = table
                .key(name)
                .and_then(Key::span)
                .or_else(|| item.span())
                .or_else(|| item.as_table().and_then(|t| t.span()));
            if let Some(span) = span {
                self.lines
                    .entry(path.clone())
                    .or_insert(lines.line_col(span.start).0);
            }
            match item {
                Item::Table(t) => self.walk(t, &path, lines),
                Item::Value(Value::InlineTable(t)) => self.walk(t, &path, lines),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> SpanMap {
        let doc = toml_edit::ImDocument::parse(text).unwrap();
        SpanMap::build(doc.as_table(), &Lines::new(text))
    }

    #[test]
    fn headers_dotted_and_inline_keys() {
        let m = map("# c\nio = { threads = 2 }\n[kv]\nblock_size = 3\n\nserver.listen = 1\n");
        assert_eq!(m.line_of("io.threads"), Some(2));
        assert_eq!(m.line_of("kv"), Some(3));
        assert_eq!(m.line_of("kv.block_size"), Some(4));
        assert_eq!(m.line_of("kv.cells"), Some(3));
        assert_eq!(m.line_of("kv.server.listen"), Some(6));
        assert_eq!(m.line_of("nothing"), None);
    }

    #[test]
    fn line_col() {
        let l = Lines::new("ab\ncdé\nx");
        assert_eq!(l.line_col(0), (1, 1));
        assert_eq!(l.line_col(3), (2, 1));
        assert_eq!(l.line_col(7), (2, 4));
        assert_eq!(l.line_col(8), (3, 1));
    }
}
