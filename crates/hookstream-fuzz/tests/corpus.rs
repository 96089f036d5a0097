//! The fuzz targets on stable, in `make test`: every saved input (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) and a short deterministic smoke run of mutated inputs.
//! Long runs are `make fuzz`.

use std::path::{Path, PathBuf};

use hookstream_fuzz::{Target, TARGETS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Mutated inputs per target in the smoke run.
const SMOKE_RUNS: usize = 3_000;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted (none when the folder is missing).
fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable corpus folder").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("readable corpus file");
            (p, bytes)
        })
        .collect()
}

/// Runs `target` on `data`, naming the input if it panics.
fn run(name: &str, target: Target, what: &dyn std::fmt::Display, data: &[u8]) {
    if std::panic::catch_unwind(|| target(data)).is_err() {
        panic!("target {name} panicked on {what}: {data:?}");
    }
}

#[test]
fn every_saved_input_passes() {
    let mut total = 0;
    for &(name, target) in TARGETS {
        let corpus = inputs("corpus", name);
        assert!(!corpus.is_empty(), "fuzz/corpus/{name}/ has seeds");
        for (path, data) in corpus.iter().chain(&inputs("regressions", name)) {
            run(name, target, &path.display(), data);
            total += 1;
        }
    }
    eprintln!("{total} saved inputs passed");
}

#[test]
fn seeded_smoke_run() {
    for &(name, target) in TARGETS {
        let seeds: Vec<Vec<u8>> = inputs("corpus", name).into_iter().map(|(_, d)| d).collect();
        let mut rng = StdRng::seed_from_u64(0x486b_5374);
        for i in 0..SMOKE_RUNS {
            let data = if seeds.is_empty() || i % 4 == 0 {
                let len = rng.gen_range(0..96);
                (0..len).map(|_| rng.gen()).collect()
            } else {
                mutate(&seeds[rng.gen_range(0..seeds.len())], &seeds, &mut rng)
            };
            run(name, target, &format_args!("smoke input {i}"), &data);
        }
    }
}

/// A few libFuzzer-style mutations: flip, set to an edge value, insert, delete, splice.
fn mutate(seed: &[u8], seeds: &[Vec<u8>], rng: &mut StdRng) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let at = rng.gen_range(0..=data.len());
        match rng.gen_range(0..5) {
            0 if at < data.len() => data[at] ^= 1 << rng.gen_range(0..8),
            1 if at < data.len() => data[at] = [0, 0x7f, 0x80, 0xff, b'\n'][rng.gen_range(0..5)],
            2 => data.insert(at, rng.gen()),
            3 if at < data.len() => {
                data.remove(at);
            }
            _ => {
                let other = &seeds[rng.gen_range(0..seeds.len())];
                let from = rng.gen_range(0..=other.len());
                let to = rng.gen_range(from..=other.len());
                data.splice(at..at, other[from..to].iter().copied());
            }
        }
    }
    data
}
