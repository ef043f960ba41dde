//! The heap sampler installed as this test binary's allocator: known
//! allocations, held by a known function, are found in the profile with the
//! bytes they hold (estimated within the sampling error), and leave
//! `inuse_space` when they are freed while staying in `alloc_space`.

use infertel_profile::heap;
use infertel_profile::proto::Profile;
use prost::Message;

#[global_allocator]
static ALLOCATOR: infertel_profile::SamplingAllocator = infertel_profile::SamplingAllocator;

const BLOCK: usize = 24 * 1024;
const BLOCKS: usize = 2000;

#[inline(never)]
fn hold_known_blocks() -> Vec<Vec<u8>> {
    (0..BLOCKS).map(|i| vec![(i % 251) as u8; BLOCK]).collect()
}

fn decode(z: &[u8]) -> Profile {
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(z), &mut raw).unwrap();
    Profile::decode(&raw[..]).unwrap()
}

/// (alloc_space, inuse_space) of the samples whose stack passes through `f`.
fn bytes_through(p: &Profile, f: &str) -> (i64, i64) {
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<&str> = p.sample_type.iter().map(|t| s(t.r#type)).collect();
    assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
    let through = |x: &infertel_profile::proto::Sample| {
        x.location_id.iter().any(|&l| {
            p.location[l as usize - 1]
                .line
                .iter()
                .any(|line| s(p.function[line.function_id as usize - 1].name).contains(f))
        })
    };
    p.sample.iter().filter(|x| through(x)).fold((0, 0), |(a, u), x| (a + x.value[1], u + x.value[3]))
}

#[test]
fn known_allocations_are_estimated_and_forgotten_when_freed() {
    assert!(heap::installed());
    // A finer rate than Go's default, so the estimate's error is small:
    // 48 MiB / 64 KiB is about 750 samples, a relative error near 4%.
    heap::set_rate(64 * 1024);
    let held = hold_known_blocks();
    let want = (BLOCK * BLOCKS) as f64;
    let p = decode(&heap::profile("inuse_space").unwrap());
    let (alloc, inuse) = bytes_through(&p, "hold_known_blocks");
    assert!((inuse as f64 - want).abs() / want < 0.2, "in use {inuse}, held {want}");
    assert!(alloc >= inuse);
    assert_eq!(p.string_table[p.default_sample_type as usize], "inuse_space");
    // The leaf of a sample is the caller's code, not the sampler's.
    let s = |i: i64| p.string_table[i as usize].as_str();
    for x in &p.sample {
        let leaf = &p.location[x.location_id[0] as usize - 1];
        let name = s(p.function[leaf.line[0].function_id as usize - 1].name);
        assert!(!name.contains("infertel_profile::heap"), "sampler frame at the top: {name}");
    }
    drop(held);
    let p = decode(&heap::profile("alloc_space").unwrap());
    let (alloc_after, inuse_after) = bytes_through(&p, "hold_known_blocks");
    assert_eq!(alloc_after, alloc, "allocated bytes stay counted");
    assert!(inuse_after == 0, "freed blocks leave inuse_space: {inuse_after}");
    let (live, _) = heap::inuse_estimate();
    assert!(live < 200, "sampled blocks still live: {live}");
}
