//! Feeds arbitrary bytes to every response parser of tinyagents-models:
//! whole bodies and event streams of both providers, the streams cut into
//! chunks of a size the input chooses. A parser may refuse the input with
//! an error; it must never panic, hang or grow without bound.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyagents_core::ModelDelta;
use tinyagents_models::{anthropic, openai};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(selector >> 2) + 1;
    let sink = |_: ModelDelta| {};
    match selector & 3 {
        0 => drop(openai::parse_response(body)),
        1 => drop(anthropic::parse_response(body)),
        2 => drop(openai::parse_stream(body.chunks(chunk), Some(&sink))),
        _ => drop(anthropic::parse_stream(body.chunks(chunk), Some(&sink))),
    }
});
