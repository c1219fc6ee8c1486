//! Stop strings over streamed text: text is released only once it cannot be the start of a stop
//! string, so a stop string that spans several tokens is still found and never shown.

/// Holds back the tail of the output that could still grow into one of the stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

/// What one piece of text did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopCheck {
    /// Text that is now final (before any stop string).
    pub release: String,
    /// A stop string was completed: the output ends with `release`.
    pub stopped: bool,
}

impl StopStrings {
    /// Empty strings are ignored (they would stop before the first character).
    pub fn new(stops: &[String]) -> StopStrings {
        StopStrings { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new() }
    }

    /// Adds newly decoded text.
    pub fn push(&mut self, text: &str) -> StopCheck {
        if self.stops.is_empty() {
            return StopCheck { release: text.to_string(), stopped: false };
        }
        self.held.push_str(text);
        // A stop string can only start inside `held`: everything released before could not
        // start one. The earliest occurrence of any stop string wins.
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            let release = self.held[..at].to_string();
            self.held.clear();
            return StopCheck { release, stopped: true };
        }
        let keep = self.partial_suffix_len();
        let cut = self.held.len() - keep;
        let release = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopCheck { release, stopped: false }
    }

    /// The output ended for another reason: what was held back is final after all.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The length of the longest suffix of `held` that is a proper prefix of a stop string
    /// (measured on character boundaries, so the cut is always valid UTF-8).
    fn partial_suffix_len(&self) -> usize {
        let held = self.held.as_str();
        held.char_indices()
            .map(|(i, _)| &held[i..])
            .find(|tail| self.stops.iter().any(|s| s.len() > tail.len() && s.starts_with(tail)))
            .map_or(0, str::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(s: &[&str]) -> StopStrings {
        StopStrings::new(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// Feeds the pieces; returns the released text and whether it stopped.
    fn run(s: &mut StopStrings, pieces: &[&str]) -> (String, bool) {
        let mut out = String::new();
        for p in pieces {
            let c = s.push(p);
            out.push_str(&c.release);
            if c.stopped {
                return (out, true);
            }
        }
        out.push_str(&s.flush());
        (out, false)
    }

    #[test]
    fn stop_inside_one_piece() {
        assert_eq!(run(&mut stops(&["END"]), &["abc END def"]), ("abc ".into(), true));
    }

    #[test]
    fn stop_spanning_pieces_is_never_released() {
        let mut s = stops(&["</answer>"]);
        assert_eq!(s.push("42 </an"), StopCheck { release: "42 ".into(), stopped: false });
        assert_eq!(s.push("swe"), StopCheck { release: "".into(), stopped: false });
        assert_eq!(s.push("r> more"), StopCheck { release: "".into(), stopped: true });
    }

    #[test]
    fn a_false_start_is_released_later() {
        assert_eq!(run(&mut stops(&["abc"]), &["xab", "d", "e"]), ("xabde".into(), false));
        assert_eq!(run(&mut stops(&["abc"]), &["xab"]), ("xab".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&mut stops(&["world", "lo w"]), &["hello world"]), ("hel".into(), true));
        assert_eq!(run(&mut stops(&["\n\n", "User:"]), &["a\n", "\nUser:"]), ("a".into(), true));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        assert_eq!(run(&mut stops(&["é!"]), &["caf", "é", "é", "!x"]), ("café".into(), true));
        assert_eq!(run(&mut stops(&["日本"]), &["今日は", "日", "曜"]), ("今日は日曜".into(), false));
    }

    #[test]
    fn no_stops_releases_everything_at_once() {
        let mut s = stops(&[""]);
        assert_eq!(s.push("ab"), StopCheck { release: "ab".into(), stopped: false });
    }
}
