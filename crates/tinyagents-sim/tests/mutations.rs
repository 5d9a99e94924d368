//! The checker can fail (issue 13): with the `mutations` feature, each
//! mutation planted in the harness breaks one invariant, and some seed of
//! the simulator catches it with that invariant. `cargo xtask sim` runs
//! this with `--features mutations`.
#![cfg(feature = "mutations")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use tinyagents_sim::mutation::{mutations, plant};
use tinyagents_sim::run_seed;

/// Seeds searched for each mutation before the test gives up.
const SEARCH: u64 = 4000;

#[test]
fn each_planted_mutation_is_caught_by_some_seed_with_its_invariant() {
    tinyagents_sim::cli::quiet_planted_panics();
    let all = mutations();
    assert_eq!(all.len(), 7, "one mutation per invariant");
    let mut invariants: Vec<usize> = all.iter().map(|(_, i)| *i).collect();
    invariants.sort_unstable();
    assert_eq!(invariants, [1, 2, 3, 4, 5, 6, 7]);
    for (name, invariant) in all {
        plant(Some(name)).unwrap();
        let caught = (0..SEARCH).find(|&seed| {
            let (_, _, violations) = run_seed(seed);
            violations.iter().any(|v| v.invariant == invariant)
        });
        plant(None).unwrap();
        let seed = caught.unwrap_or_else(|| {
            panic!("no seed in 0..{SEARCH} caught `{name}` (invariant {invariant})")
        });
        println!("`{name}` breaks invariant {invariant}: caught by seed {seed}");
        // Without the mutation, the same seed holds every invariant.
        let (_, _, clean) = run_seed(seed);
        assert!(
            clean.is_empty(),
            "seed {seed} fails without `{name}`: {clean:?}"
        );
    }
}
