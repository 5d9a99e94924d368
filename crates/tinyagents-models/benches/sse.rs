//! The SSE decoder's cost against how its bytes arrive: one long line
//! (64 KiB and 512 KiB of data) pushed whole, and pushed one byte at a
//! time, median of several runs. Linear decoding makes the two within a
//! constant factor of each other at both sizes, and the per-byte cost flat
//! between the sizes (before issue 12 the byte-at-a-time figure grew with
//! the square of the line: 2.9 s at 64 KiB, 169 s at 512 KiB).
#![allow(clippy::print_stdout, missing_docs)] // a benchmark prints its figures

use std::time::Instant;

use tinyagents_models::sse::SseParser;

fn decode(text: &[u8], chunk: usize) -> usize {
    let mut parser = SseParser::new(1 << 20);
    let mut data = 0;
    for piece in text.chunks(chunk) {
        parser.push(piece);
        while let Some(event) = parser
            .next_event()
            .unwrap_or_else(|e| panic!("decode: {e}"))
        {
            data += event.data.len();
        }
    }
    data
}

fn median_micros(text: &[u8], chunk: usize, runs: usize) -> f64 {
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let data = decode(text, chunk);
            let elapsed = start.elapsed();
            assert!(data > 0);
            elapsed.as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    println!("SSE decoder: one line of N bytes of data, whole and a byte at a time");
    let mut per_byte = Vec::new();
    for kib in [64usize, 512] {
        let text = format!("data: {}\n\n", "x".repeat(kib * 1024)).into_bytes();
        let whole = median_micros(&text, text.len(), 21);
        let bytewise = median_micros(&text, 1, 7);
        let ns = bytewise * 1e3 / text.len() as f64;
        per_byte.push(ns);
        println!(
            "{kib:>4} KiB   whole {whole:>10.1} µs   byte at a time {bytewise:>10.1} µs   \
             ({ns:.2} ns/byte, {:.1} x whole)",
            bytewise / whole
        );
    }
    println!(
        "byte-at-a-time cost per byte, 512 KiB / 64 KiB: {:.2}  (linear: about 1; quadratic: 8)",
        per_byte[1] / per_byte[0]
    );
}
