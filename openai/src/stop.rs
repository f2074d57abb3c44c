//! Stop strings checked across token boundaries.

/// What a [`StopMatcher::push`] allows to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text safe to send now (never part of a stop string, never a split character).
    pub emit: String,
    /// A stop string was found: end generation with finish reason `stop`. `emit` holds the
    /// text before it; the stop string itself is not sent (as OpenAI does).
    pub stopped: bool,
}

/// Finds stop strings in text that arrives in pieces (decoded tokens).
///
/// It holds back the longest tail that could still be the start of a stop string, so a stop
/// string split across tokens is never sent, and cuts at the earliest match. The emitted text
/// is the same whatever the chunking: the text up to the first occurrence of any stop string.
/// Held text is always shorter than the longest stop string and starts on a character
/// boundary. When a stop string completes while a longer one that starts earlier is still
/// incomplete (stops `"bc"` and `"abcd"` on `"xabc"`), `stopped` waits until that one is
/// decided, so the result never depends on where tokens split the text.
#[derive(Clone, Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`. Empty strings are ignored (validation refuses them anyway;
    /// an empty stop string would otherwise stop before the first character).
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string was found (later pushes emit nothing).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Feeds the next piece of decoded text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome {
                emit: String::new(),
                stopped: true,
            };
        }
        if self.stops.is_empty() {
            return StopOutcome {
                emit: text.to_owned(),
                stopped: false,
            };
        }
        self.pending.push_str(text);
        // Where a stop string that is still incomplete could start (the end when none).
        let keep_from = self.pending.len() - self.held_tail_len();
        match self.earliest_match() {
            // A complete match that no earlier, still-incomplete stop string can pre-empt.
            Some(at) if at <= keep_from => {
                self.pending.truncate(at);
                self.stopped = true;
                return StopOutcome {
                    emit: std::mem::take(&mut self.pending),
                    stopped: true,
                };
            }
            // Either no match, or a longer stop string starting earlier may still complete
            // (stops "abcd" and "bc" on "xabc"): hold from its start.
            _ => {}
        }
        let rest = self.pending.split_off(keep_from);
        let emit = std::mem::replace(&mut self.pending, rest);
        StopOutcome {
            emit,
            stopped: false,
        }
    }

    /// Ends the stream without more text: returns what was held back (empty after a stop).
    ///
    /// The held text may contain a complete stop string that was waiting on a longer one
    /// starting earlier; it is cut there, and [`StopMatcher::stopped`] becomes true (report
    /// finish reason `stop` then).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        if let Some(at) = self.earliest_match() {
            self.pending.truncate(at);
            self.stopped = true;
        }
        std::mem::take(&mut self.pending)
    }

    /// Byte offset of the earliest complete stop string in `pending`.
    fn earliest_match(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
    }

    /// The length of the longest tail of `pending` that is a proper prefix of some stop string.
    fn held_tail_len(&self) -> usize {
        let p = self.pending.as_str();
        let longest = self
            .stops
            .iter()
            .map(|s| s.len() - 1)
            .max()
            .unwrap_or(0)
            .min(p.len());
        (1..=longest)
            .rev()
            .find(|&k| {
                let start = p.len() - k;
                // A stop string starts on a character boundary, so a match can only start on one.
                p.is_char_boundary(start)
                    && self
                        .stops
                        .iter()
                        .any(|s| s.as_bytes().starts_with(&p.as_bytes()[start..]))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            let o = m.push(p);
            out.push_str(&o.emit);
            if o.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, m.stopped())
    }

    #[test]
    fn split_stop_string_is_never_sent() {
        let stops = vec!["</s>".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("Hello <").emit, "Hello ");
        assert_eq!(m.push("/").emit, "");
        let o = m.push("s> tail");
        assert_eq!(
            o,
            StopOutcome {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(
            m.push("more"),
            StopOutcome {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(
            run(&["</s>"], &["a <", "/x", "y"]),
            ("a </xy".to_string(), false)
        );
        assert_eq!(run(&["ab"], &["a"]), ("a".to_string(), false));
    }

    #[test]
    fn earliest_of_several_wins() {
        assert_eq!(
            run(&["world", "lo w"], &["hel", "lo world"]),
            ("hel".to_string(), true)
        );
        assert_eq!(run(&["bc", "abcd"], &["xabcd"]), ("x".to_string(), true));
        // "bc" completes first, but "abcd" started earlier and may still complete.
        let stops = vec!["bc".to_string(), "abcd".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("xa").emit, "x");
        assert_eq!(
            m.push("bc"),
            StopOutcome {
                emit: String::new(),
                stopped: false
            }
        );
        assert_eq!(
            m.push("d"),
            StopOutcome {
                emit: String::new(),
                stopped: true
            }
        );
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("xabc").emit, "x");
        assert_eq!(
            m.push("e"),
            StopOutcome {
                emit: "a".into(),
                stopped: true
            }
        );
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("xabc").emit, "x");
        assert_eq!(m.finish(), "a");
        assert!(m.stopped());
    }

    #[test]
    fn multibyte_hold_is_char_safe() {
        // "é" is 2 bytes; the stop "éa" starts with it.
        assert_eq!(run(&["éa"], &["xé", "b"]), ("xéb".to_string(), false));
        assert_eq!(run(&["éa"], &["xé", "a"]), ("x".to_string(), true));
        assert_eq!(
            run(&["日本"], &["今日", "は"]),
            ("今日は".to_string(), false)
        );
    }

    #[test]
    fn no_stops_passes_through_and_empty_stops_ignored() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".to_string(), false));
        assert_eq!(run(&[""], &["a", "b"]), ("ab".to_string(), false));
    }
}
