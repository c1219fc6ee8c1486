//! Limits an editor's code completion puts on the lines of an output, as llama-server's
//! `n_indent` and `t_max_predict_ms` do: from the second line on, a line indented by fewer
//! spaces or tabs than the cursor's line ends the output where its text starts (a blank line
//! too: its line end is where its text starts), and once a time has passed since the first
//! token, the output ends at its next line end. Both keep the output to the block being
//! written and the editor's wait short.

use std::time::{Duration, Instant};

/// Where in its lines the released text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The first line, which is never checked (it continues the cursor's line).
    FirstLine,
    /// At the start of a later line, after this many spaces or tabs.
    Indent(usize),
    /// Past a later line's indentation.
    Text,
}

/// The line limits of one output and how far its text has been read.
#[derive(Clone, Debug)]
pub struct LineLimits {
    min_indent: usize,
    time_limit: Option<Duration>,
    place: Place,
    /// When the first token came.
    started: Option<Instant>,
}

impl LineLimits {
    /// Limits of at least `min_indent` spaces or tabs (0: none) and a time after the first token
    /// past which the output ends at a line end.
    pub fn new(min_indent: usize, time_limit: Option<Duration>) -> LineLimits {
        LineLimits { min_indent, time_limit, place: Place::FirstLine, started: None }
    }

    /// Marks a token's arrival (the first starts the clock).
    pub fn token(&mut self, now: Instant) {
        self.started.get_or_insert(now);
    }

    /// Reads `text`, the next released text: the byte offset where it must be cut (the start
    /// of a line's text indented less than the minimum), or `None`.
    pub fn cut(&mut self, text: &str) -> Option<usize> {
        if self.min_indent == 0 {
            return None;
        }
        for (i, c) in text.char_indices() {
            self.place = match (self.place, c) {
                (Place::Indent(n), ' ' | '\t') => Place::Indent(n + 1),
                (Place::Indent(n), _) if n < self.min_indent => return Some(i),
                (_, '\n') => Place::Indent(0),
                (Place::Indent(_), _) => Place::Text,
                (place, _) => place,
            };
        }
        None
    }

    /// Whether the output ends after `text` (released at `now`): it ends a line, and the time
    /// since the first token has passed the limit.
    pub fn time_is_up(&self, text: &str, now: Instant) -> bool {
        match (self.time_limit, self.started) {
            (Some(limit), Some(started)) => text.contains('\n') && now.duration_since(started) > limit,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where `pieces`, read in order, are cut: (piece index, offset in it).
    fn cut_of(min_indent: usize, pieces: &[&str]) -> Option<(usize, usize)> {
        let mut limits = LineLimits::new(min_indent, None);
        pieces.iter().enumerate().find_map(|(k, p)| limits.cut(p).map(|at| (k, at)))
    }

    #[test]
    fn a_later_line_indented_less_than_the_minimum_is_cut_where_its_text_starts() {
        // the first line is never checked, however it is indented
        assert_eq!(cut_of(4, &["x = 1", "\n", "    y = 2\n", "    z"]), None);
        assert_eq!(cut_of(4, &["x", "\n    y\n", "  ", "z = 3"]), Some((3, 0)));
        assert_eq!(cut_of(4, &["x\n    y\n  z"]), Some((0, 10)));
        // tabs count as one each; a line's indentation may arrive in pieces
        assert_eq!(cut_of(2, &["x\n\t", "\ty\n", " ", "\tz\nw"]), Some((3, 3)));
        // a blank line ends the block too (where its line end is), as llama-server has it
        assert_eq!(cut_of(4, &["x\n    y\n\n    z"]), Some((0, 8)));
        assert_eq!(cut_of(4, &["x\n    y\n    \n    z"]), None);
        // no minimum: nothing is cut
        assert_eq!(cut_of(0, &["x\ny\n\nz"]), None);
        // the offset is a byte offset at a character
        assert_eq!(cut_of(2, &["é\n  ü\né"]), Some((0, 8)));
    }

    #[test]
    fn past_the_time_limit_the_output_ends_at_a_line_end() {
        let start = Instant::now();
        let mut limits = LineLimits::new(0, Some(Duration::from_millis(100)));
        // no token yet: no clock
        assert!(!limits.time_is_up("a\n", start + Duration::from_secs(1)));
        limits.token(start);
        limits.token(start + Duration::from_millis(50)); // the first token started the clock
        assert!(!limits.time_is_up("a\n", start + Duration::from_millis(100)));
        assert!(!limits.time_is_up("abc", start + Duration::from_millis(150)));
        assert!(limits.time_is_up("c\nd", start + Duration::from_millis(150)));
        // no limit: never
        let mut none = LineLimits::new(4, None);
        none.token(start);
        assert!(!none.time_is_up("\n", start + Duration::from_secs(100)));
    }
}
