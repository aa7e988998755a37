//! A byte-at-a-time recogniser of one JSON object (RFC 8259), for guided decoding: it says whether
//! some continuation of the bytes seen could still make a whole object, and whether they already
//! are one.
//!
//! The state is `Copy` (the open containers are bits of a `u64`), so testing each token of a
//! vocabulary against it is a copy and a walk over the token's bytes, with no allocation.
//!
//! What it refuses within the grammar:
//! - The top-level value must be an object (OpenAI's `json_object`), with no whitespace before
//!   or after it.
//! - At most [`MAX_DEPTH`] containers open at once, and inside the object at most a set number
//!   of whitespace bytes in a row ([`JsonObject::new`]'s `max_whitespace`). A sampled model pads
//!   wherever whitespace is free (a random model under guidance wrote runs of 16 newlines where
//!   16 were allowed), and one byte a gap still writes every object, compact or spaced.
//! - Strings are checked as UTF-8 by lead and continuation bytes (lengths, not overlong forms or
//!   surrogates); control bytes below 0x20 are refused in them, as the grammar requires.

/// Containers open at once, at most.
pub const MAX_DEPTH: u32 = 63;

/// Where in the grammar the next byte falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Before the top-level object.
    Start,
    /// A value (after `:`, after `,` in an array).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrClose,
    /// A key or `}` (just after `{`).
    KeyOrClose,
    /// A key (after `,` in an object).
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or the closing bracket of the innermost container, after a value.
    Next,
    /// Inside a string; `key` when it is an object's key. `utf8` continuation bytes are due.
    Str { key: bool, utf8: u8 },
    /// After a `\` in a string.
    Escape { key: bool },
    /// `left` hex digits of a `\u` escape are due.
    Hex { key: bool, left: u8 },
    /// The rest of `true`, `false` or `null`: `word[at..]`.
    Word { word: &'static [u8], at: u8 },
    /// Inside a number, at `phase`.
    Number(Phase),
    /// The object has closed: only whitespace.
    Done,
}

/// Where a number is: RFC 8259's `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// After `-`: a digit is due.
    Minus,
    /// After a leading `0`.
    Zero,
    /// In the integer's digits after a nonzero first.
    Int,
    /// After `.`: a digit is due.
    Dot,
    /// In the fraction's digits.
    Frac,
    /// After `e` or `E`: a sign or digit is due.
    Exp,
    /// After the exponent's sign: a digit is due.
    ExpSign,
    /// In the exponent's digits.
    ExpDigits,
}

impl Phase {
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Phase::Zero | Phase::Int | Phase::Frac | Phase::ExpDigits)
    }
}

/// The recogniser's state after the bytes fed so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonObject {
    expect: Expect,
    /// Bit `i` set: the container at depth `i` (0 the outermost) is an object, else an array.
    objects: u64,
    depth: u32,
    /// Whitespace bytes just fed in a row.
    whitespace: u8,
    /// The most whitespace bytes in a row.
    max_whitespace: u8,
}

impl JsonObject {
    /// Nothing fed yet; at most `max_whitespace` whitespace bytes in a row inside the object.
    pub fn new(max_whitespace: u8) -> Self {
        Self { expect: Expect::Start, objects: 0, depth: 0, whitespace: 0, max_whitespace }
    }

    /// Whether the bytes fed make a whole object.
    pub fn complete(&self) -> bool {
        self.expect == Expect::Done
    }

    /// Feeds `bytes`; false (and the state is then meaningless) when no continuation could make
    /// an object of them.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.step(b))
    }

    fn step(&mut self, b: u8) -> bool {
        let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let between = !matches!(
            self.expect,
            Expect::Str { .. } | Expect::Escape { .. } | Expect::Hex { .. } | Expect::Word { .. }
        );
        if ws && between {
            if matches!(self.expect, Expect::Start | Expect::Done) {
                return false;
            }
            if let Expect::Number(phase) = self.expect {
                if !phase.complete() {
                    return false;
                }
                self.expect = self.after_value();
            }
            self.whitespace += 1;
            return self.whitespace <= self.max_whitespace;
        }
        self.whitespace = 0;
        match self.expect {
            Expect::Start => b == b'{' && self.open(true),
            Expect::Value => self.value(b),
            Expect::ValueOrClose => (b == b']' && self.close(false)) || self.value(b),
            Expect::KeyOrClose => (b == b'}' && self.close(true)) || self.key(b),
            Expect::Key => self.key(b),
            Expect::Colon => {
                self.expect = Expect::Value;
                b == b':'
            }
            Expect::Next => self.next(b),
            Expect::Str { key, utf8 } => self.string(b, key, utf8),
            Expect::Escape { key } => {
                self.expect = match b {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Expect::Str { key, utf8: 0 },
                    b'u' => Expect::Hex { key, left: 4 },
                    _ => return false,
                };
                true
            }
            Expect::Hex { key, left } => {
                self.expect =
                    if left == 1 { Expect::Str { key, utf8: 0 } } else { Expect::Hex { key, left: left - 1 } };
                b.is_ascii_hexdigit()
            }
            Expect::Word { word, at } => {
                if word[at as usize] != b {
                    return false;
                }
                let at = at + 1;
                self.expect = if at as usize == word.len() { self.after_value() } else { Expect::Word { word, at } };
                true
            }
            Expect::Number(phase) => self.number(b, phase),
            Expect::Done => false,
        }
    }

    /// What follows a finished value: the next of the innermost container, or the end.
    fn after_value(&self) -> Expect {
        if self.depth == 0 {
            Expect::Done
        } else {
            Expect::Next
        }
    }

    fn innermost_is_object(&self) -> bool {
        self.depth > 0 && self.objects >> (self.depth - 1) & 1 == 1
    }

    fn open(&mut self, object: bool) -> bool {
        if self.depth >= MAX_DEPTH {
            return false;
        }
        self.objects = (self.objects & !(1 << self.depth)) | (u64::from(object) << self.depth);
        self.depth += 1;
        self.expect = if object { Expect::KeyOrClose } else { Expect::ValueOrClose };
        true
    }

    fn close(&mut self, object: bool) -> bool {
        if self.depth == 0 || self.innermost_is_object() != object {
            return false;
        }
        self.depth -= 1;
        self.expect = self.after_value();
        true
    }

    fn key(&mut self, b: u8) -> bool {
        self.expect = Expect::Str { key: true, utf8: 0 };
        b == b'"'
    }

    fn value(&mut self, b: u8) -> bool {
        self.expect = match b {
            b'{' => return self.open(true),
            b'[' => return self.open(false),
            b'"' => Expect::Str { key: false, utf8: 0 },
            b't' => Expect::Word { word: b"true", at: 1 },
            b'f' => Expect::Word { word: b"false", at: 1 },
            b'n' => Expect::Word { word: b"null", at: 1 },
            b'-' => Expect::Number(Phase::Minus),
            b'0' => Expect::Number(Phase::Zero),
            b'1'..=b'9' => Expect::Number(Phase::Int),
            _ => return false,
        };
        true
    }

    fn next(&mut self, b: u8) -> bool {
        match b {
            b',' => {
                self.expect = if self.innermost_is_object() { Expect::Key } else { Expect::Value };
                true
            }
            b'}' => self.close(true),
            b']' => self.close(false),
            _ => false,
        }
    }

    fn string(&mut self, b: u8, key: bool, utf8: u8) -> bool {
        if utf8 > 0 {
            self.expect = Expect::Str { key, utf8: utf8 - 1 };
            return (0x80..=0xbf).contains(&b);
        }
        self.expect = match b {
            b'"' if key => Expect::Colon,
            b'"' => self.after_value(),
            b'\\' => Expect::Escape { key },
            0x00..=0x1f => return false,
            0x20..=0x7f => Expect::Str { key, utf8: 0 },
            0xc2..=0xdf => Expect::Str { key, utf8: 1 },
            0xe0..=0xef => Expect::Str { key, utf8: 2 },
            0xf0..=0xf4 => Expect::Str { key, utf8: 3 },
            _ => return false,
        };
        true
    }

    fn number(&mut self, b: u8, phase: Phase) -> bool {
        let next = match (phase, b) {
            (Phase::Minus, b'0') => Phase::Zero,
            (Phase::Minus, b'1'..=b'9') => Phase::Int,
            (Phase::Int, b'0'..=b'9') => Phase::Int,
            (Phase::Zero | Phase::Int, b'.') => Phase::Dot,
            (Phase::Dot | Phase::Frac, b'0'..=b'9') => Phase::Frac,
            (Phase::Zero | Phase::Int | Phase::Frac, b'e' | b'E') => Phase::Exp,
            (Phase::Exp, b'+' | b'-') => Phase::ExpSign,
            (Phase::Exp | Phase::ExpSign | Phase::ExpDigits, b'0'..=b'9') => Phase::ExpDigits,
            // Any other byte ends a number that may end here, and is then read after it.
            _ if phase.complete() => {
                self.expect = self.after_value();
                return self.step(b);
            }
            _ => return false,
        };
        self.expect = Expect::Number(next);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Room for serde_json's pretty form (a newline and two spaces a level).
    const PRETTY: u8 = 32;

    fn accepts(text: &str) -> Option<bool> {
        let mut j = JsonObject::new(PRETTY);
        j.feed(text.as_bytes()).then(|| j.complete())
    }

    #[test]
    fn whole_objects_are_complete_and_their_prefixes_are_not() {
        for text in [
            "{}",
            "{ \"a\" :\t1 }",
            "{\"a\":[1,-2.5e+3,0,true,false,null,\"x\\n\\u00e9\",{}],\"b\":{\"c\":[]}}",
            "{\"k\": \"caf\u{e9} \u{1F600}\"}",
            "{\"n\": -0.0E-0}",
        ] {
            assert_eq!(accepts(text), Some(true), "{text}");
            serde_json::from_str::<serde_json::Value>(text).unwrap();
            for cut in (0..text.len()).filter(|&c| text.is_char_boundary(c) && !text[..c].ends_with('}')) {
                assert_eq!(accepts(&text[..cut]), Some(false), "{:?}", &text[..cut]);
            }
        }
    }

    #[test]
    fn what_json_refuses_is_refused_at_its_first_bad_byte() {
        for text in [
            "[1]",
            "1",
            "\"s\"",
            "{a: 1}",
            "{\"a\" 1}",
            "{\"a\": 01}",
            "{\"a\": 1.}",
            "{\"a\": -}",
            "{\"a\": tru}",
            "{\"a\": [1,]}",
            "{\"a\": 1,}",
            "{\"a\": 1]",
            "{\"a\": [1}",
            "{\"a\": \"\\x\"}",
            "{\"a\": \"\\u12g4\"}",
            "{\"a\": \"\u{1}\"}",
            "{} {}",
            "{\"a\": 1e}",
        ] {
            assert_eq!(accepts(text), None, "{text}");
            assert!(serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text).is_err(), "{text}");
        }
        // Whitespace around the object, which JSON allows and guidance does not.
        assert_eq!((accepts(" {}"), accepts("{}\n")), (None, None));
        // Bytes that are not UTF-8 inside a string.
        assert!(!JsonObject::new(PRETTY).feed(b"{\"a\": \"\xff\"}"));
        assert!(!JsonObject::new(PRETTY).feed(b"{\"a\": \"\xc3(\"}"));
    }

    #[test]
    fn depth_and_whitespace_are_bounded() {
        let deep = format!("{{\"a\":{}", "[".repeat(MAX_DEPTH as usize - 1));
        assert_eq!(accepts(&deep), Some(false));
        assert_eq!(accepts(&format!("{deep}[")), None);
        let one = |text: &str| {
            let mut j = JsonObject::new(1);
            j.feed(text.as_bytes()).then(|| j.complete())
        };
        assert_eq!(one("{ \"a\" : [ 1 , 2 ] }"), Some(true));
        assert_eq!(one("{\n\"a\":1}"), Some(true));
        assert_eq!(one("{  \"a\":1}"), None);
        assert_eq!(one("{\"a\":1 \n}"), None);
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            "[ -~\u{e9}\u{4e2d}\u{1F600}\n\t\\\"]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"\\ ]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Every object serde_json writes, compact or pretty, is accepted and complete.
        #[test]
        fn what_serde_writes_is_accepted(
            fields in proptest::collection::btree_map("[a-z]{0,3}", json_value(), 0..4),
            pretty in proptest::bool::ANY,
        ) {
            let object = serde_json::Value::Object(fields.into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) };
            proptest::prop_assert_eq!(accepts(&text.unwrap()), Some(true));
        }

        /// Whatever it calls complete, serde_json reads as an object: mutated texts included.
        #[test]
        fn what_it_completes_serde_reads(
            fields in proptest::collection::btree_map("[a-z]{0,3}", json_value(), 0..3),
            at in 0usize..200,
            byte in proptest::sample::select(b"{}[]\",:0-.eE+ \\tfnu\x01\xc3".to_vec()),
            cut in proptest::bool::ANY,
        ) {
            let mut text = serde_json::to_vec(&serde_json::Value::Object(fields.into_iter().collect())).unwrap();
            let at = at % (text.len() + 1);
            if cut { text.truncate(at) } else { text.insert(at, byte) }
            let mut j = JsonObject::new(PRETTY);
            if j.feed(&text) && j.complete() {
                // serde_json reads numbers into f64 and refuses those past its range, which the
                // grammar allows (1e999).
                let read = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&text);
                let in_grammar = read.as_ref().map_or_else(|e| e.to_string().contains("number out of range"), |_| true);
                proptest::prop_assert!(in_grammar, "{:?}: {:?}", String::from_utf8_lossy(&text), read);
            }
        }
    }

    #[test]
    fn a_state_fed_piecewise_is_the_state_fed_whole() {
        let text = b"{\"a\": [12, \"b\\u0041\"], \"c\": 3.5}";
        for cut in 0..text.len() {
            let mut split = JsonObject::new(1);
            assert!(split.feed(&text[..cut]) && split.feed(&text[cut..]));
            assert!(split.complete());
        }
    }
}
