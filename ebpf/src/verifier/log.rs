//! The `--log` trail: one line per processed instruction, `pc: <disasm> ; <state>`.
//!
//! The full trail is kept up to [`FULL_CAP`] lines for [`super::Verified::log`]; the last
//! [`TAIL`] lines go into a rejected program's [`super::VerifyError::log`].

use std::collections::VecDeque;

/// Lines kept for an error's log.
pub const TAIL: usize = 200;
/// Lines kept for an accepted program's log.
pub const FULL_CAP: usize = 100_000;

/// The trail being recorded.
pub struct Trail {
    on: bool,
    full: Vec<String>,
    dropped: usize,
    tail: VecDeque<String>,
}

impl Trail {
    /// A trail that records only when `on`.
    pub fn new(on: bool) -> Trail {
        Trail {
            on,
            full: Vec::new(),
            dropped: 0,
            tail: VecDeque::new(),
        }
    }

    /// Whether lines are recorded (callers skip formatting otherwise).
    pub fn on(&self) -> bool {
        self.on
    }

    /// Records one line.
    pub fn push(&mut self, line: String) {
        if !self.on {
            return;
        }
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line.clone());
        if self.full.len() < FULL_CAP {
            self.full.push(line);
        } else {
            self.dropped += 1;
        }
    }

    /// The last lines, for an error.
    pub fn tail(&self) -> String {
        let mut s = String::new();
        for l in &self.tail {
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    /// The full trail plus a summary line.
    pub fn finish(&mut self, summary: &str) -> String {
        if !self.on {
            return String::new();
        }
        let mut s = self.full.join("\n");
        if !s.is_empty() {
            s.push('\n');
        }
        if self.dropped > 0 {
            s.push_str(&format!("... {} more lines not kept\n", self.dropped));
        }
        s.push_str(summary);
        s.push('\n');
        s
    }
}
