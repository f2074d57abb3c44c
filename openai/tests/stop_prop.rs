//! The stop matcher's output does not depend on how the text is chunked.

use proptest::prelude::*;
use strata_openai::StopMatcher;

/// The text before the first occurrence of any stop string, and whether one occurred.
fn reference(text: &str, stops: &[String]) -> (String, bool) {
    match stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        Some(i) => (text[..i].to_string(), true),
        None => (text.to_string(), false),
    }
}

/// Splits `text` at the given byte cuts, moved to character boundaries.
fn chunks<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| {
            let mut c = c % (text.len() + 1);
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    points.push(0);
    points.push(text.len());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| &text[w[0]..w[1]])
        .chain(std::iter::once(""))
        .collect()
}

fn run(text: &str, stops: &[String], cuts: &[usize]) -> (String, bool) {
    let mut m = StopMatcher::new(stops);
    let mut out = String::new();
    for piece in chunks(text, cuts) {
        let o = m.push(piece);
        out.push_str(&o.emit);
        if o.stopped {
            return (out, true);
        }
    }
    out.push_str(&m.finish());
    (out, m.stopped())
}

// Strategies draw from a small alphabet (with multi-byte characters) so stop strings occur.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_chunking_gives_the_reference(
        text in "[ab<>/é日]{0,40}",
        stops in prop::collection::vec("[ab<>/é日]{1,5}", 0..4),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(run(&text, &stops, &cuts), reference(&text, &stops));
    }

    #[test]
    fn single_chars_fed_one_by_one(
        text in "[ab<>/é日]{0,40}",
        stops in prop::collection::vec("[ab<>/é日]{1,4}", 1..4),
    ) {
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        prop_assert_eq!(run(&text, &stops, &cuts), reference(&text, &stops));
    }

    #[test]
    fn emitted_text_is_never_held_longer_than_needed(
        text in "[ab<>/é日]{0,40}",
        stops in prop::collection::vec("[ab<>/é日]{1,5}", 1..4),
    ) {
        // After each push without a stop, what is held back is shorter than the longest stop.
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        let mut m = StopMatcher::new(&stops);
        let mut sent = 0usize;
        let mut fed = 0usize;
        for (i, c) in text.char_indices() {
            let piece = &text[i..i + c.len_utf8()];
            fed += piece.len();
            let o = m.push(piece);
            if o.stopped { break; }
            sent += o.emit.len();
            prop_assert!(fed - sent < longest.max(1));
        }
    }
}
