//! An incremental parser of server-sent events (the `text/event-stream`
//! format both providers stream in).
//!
//! Bytes go in as they arrive, split anywhere; whole events come out. Lines
//! end with `\n`, `\r\n` or `\r` (a `\r\n` split across two pushes counts
//! once). Comments (`:` lines), `id` and `retry` fields are ignored. An event
//! larger than the parser's cap is an error, so a server that never ends a
//! line cannot make us buffer without bound.
//!
//! The work is linear in the bytes received, however they are split: the
//! search for a line end resumes where the last one stopped, so a long line
//! that arrives a byte at a time is scanned once, not once per byte.

use tinyagents_core::ModelError;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server named the event.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Turns a byte stream into [`SseEvent`]s.
#[derive(Debug)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Where the unconsumed bytes start.
    start: usize,
    /// How far past `start` the search for a line end has looked (`buf`
    /// index): no line end lies in `start..scanned`.
    scanned: usize,
    /// Bytes examined by the line-end search, for the tests' work bound.
    examined: u64,
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    max_event_bytes: usize,
}

impl SseParser {
    /// A parser that refuses events (and unterminated lines) larger than
    /// `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            examined: 0,
            skip_lf: false,
            event: None,
            data: String::new(),
            has_data: false,
            max_event_bytes,
        }
    }

    /// Adds bytes as they arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        } else if self.start > 4096 && self.start * 2 > self.buf.len() {
            // Amortised: what is moved is at most what was consumed.
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// How many bytes the line-end search has examined in all (each byte
    /// pushed is examined once).
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// The next complete event, if the bytes pushed so far hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, ModelError> {
        loop {
            if self.skip_lf && self.start < self.buf.len() {
                if self.buf[self.start] == b'\n' {
                    self.start += 1;
                }
                self.skip_lf = false;
            }
            // Resume the search where it stopped: bytes already examined
            // hold no line end.
            let from = self.scanned.max(self.start);
            let unexamined = &self.buf[from..];
            let found = unexamined.iter().position(|&b| b == b'\n' || b == b'\r');
            let looked = found.map_or(unexamined.len(), |at| at + 1);
            self.examined = self.examined.saturating_add(looked as u64);
            let Some(at) = found else {
                self.scanned = self.buf.len();
                // Room for the field name, so an event just under the cap
                // is accepted however its bytes were split.
                let slack = self.max_event_bytes.saturating_add(16);
                let pending = self.buf.len() - self.start;
                if pending.saturating_add(self.data.len()) > slack {
                    return Err(too_large(self.max_event_bytes));
                }
                return Ok(None);
            };
            let end = from + at - self.start;
            let is_cr = self.buf[from + at] == b'\r';
            let line_start = self.start;
            self.start += end + 1;
            self.scanned = self.start;
            self.skip_lf = is_cr;
            let line = std::str::from_utf8(&self.buf[line_start..line_start + end])
                .map_err(|_| malformed("event stream is not UTF-8"))?
                .to_owned();
            if let Some(event) = self.line(&line)? {
                return Ok(Some(event));
            }
        }
    }

    /// Ends the stream: an event the server did not close with a blank line
    /// is still returned (lenient, as several servers end that way).
    pub fn finish(&mut self) -> Result<Option<SseEvent>, ModelError> {
        if let Some(event) = self.next_event()? {
            return Ok(Some(event));
        }
        let rest = std::mem::take(&mut self.buf);
        let tail = rest.get(self.start..).unwrap_or_default();
        self.start = 0;
        self.scanned = 0;
        if !tail.is_empty() {
            let line =
                std::str::from_utf8(tail).map_err(|_| malformed("event stream is not UTF-8"))?;
            self.line(line)?;
        }
        Ok(self.dispatch())
    }

    fn line(&mut self, line: &str) -> Result<Option<SseEvent>, ModelError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > self.max_event_bytes {
                    return Err(too_large(self.max_event_bytes));
                }
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

fn malformed(message: &str) -> ModelError {
    ModelError::Malformed {
        message: message.to_owned(),
    }
}

fn too_large(cap: usize) -> ModelError {
    ModelError::Malformed {
        message: format!("stream event exceeds {cap} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(parser: &mut SseParser) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(event) = parser.next_event().unwrap() {
            out.push(event);
        }
        out.extend(parser.finish().unwrap());
        out
    }

    #[test]
    fn parses_events_split_anywhere_with_any_line_ending() {
        let text =
            b": comment\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\ndata: x\r\r\n\ndata: last";
        let whole = {
            let mut p = SseParser::new(1024);
            p.push(text);
            all(&mut p)
        };
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: Some("a".into()),
                    data: "one\ntwo".into()
                },
                SseEvent {
                    event: None,
                    data: "x".into()
                },
                SseEvent {
                    event: None,
                    data: "last".into()
                },
            ]
        );
        for split in 0..text.len() {
            let mut p = SseParser::new(1024);
            p.push(&text[..split]);
            let mut got = Vec::new();
            while let Some(e) = p.next_event().unwrap() {
                got.push(e);
            }
            p.push(&text[split..]);
            got.extend(all(&mut p));
            assert_eq!(got, whole, "split at {split}");
        }
    }

    /// Issue 12, item 1: a line fed a byte at a time is examined once,
    /// not once per byte (the search was quadratic in the line's length).
    #[test]
    fn a_long_line_fed_a_byte_at_a_time_is_examined_once() {
        for len in [64 * 1024, 512 * 1024] {
            let line = format!("data: {}\n\n", "x".repeat(len));
            let mut bytewise = SseParser::new(1 << 20);
            let mut events = Vec::new();
            for byte in line.as_bytes() {
                bytewise.push(std::slice::from_ref(byte));
                while let Some(event) = bytewise.next_event().unwrap() {
                    events.push(event);
                }
            }
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].data.len(), len);
            let mut whole = SseParser::new(1 << 20);
            whole.push(line.as_bytes());
            assert_eq!(whole.next_event().unwrap().unwrap().data.len(), len);
            let bytes = line.len() as u64;
            assert!(
                bytewise.examined() <= bytes && whole.examined() <= bytes,
                "{len}: examined {} bytewise and {} whole of {bytes}",
                bytewise.examined(),
                whole.examined()
            );
        }
    }

    #[test]
    fn refuses_oversized_events_and_bad_utf8() {
        let mut p = SseParser::new(8);
        p.push(b"data: 0123456789abcdefghijklmnopq");
        assert!(matches!(p.next_event(), Err(ModelError::Malformed { .. })));
        let mut p = SseParser::new(64);
        p.push(b"data: \xff\n\n");
        assert!(matches!(p.next_event(), Err(ModelError::Malformed { .. })));
    }
}
